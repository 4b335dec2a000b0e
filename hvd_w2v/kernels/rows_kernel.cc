// The owners' row copies, as plain loops: gathering a step's rows out of a rank's table and adding their
// updates back. numpy's fancy indexing does both in several passes (index checks, a temporary, the add, the
// write back); these make one pass over each row (the profile in hvd_w2v/bench/README.md, "Where the time
// goes, 1 rank").
// Called through ctypes by hvd_w2v/kernels/native.py, which checks shapes and types first; each checks its own index
// ranges. Built there with g++ -fopenmp: each takes the rank's thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace {

// Below this many rows a call stays on one thread: waking the team would cost more than it saves.
constexpr int64_t MIN_PARALLEL_ROWS = 256;
// Below this many values a conversion (bfloat16) stays on one thread.
constexpr int64_t MIN_PARALLEL_VALUES = 1 << 16;
// add_sources' threads own the table's rows in blocks of this many, in turn: blocks, so that two threads
// seldom write one cache line (rows of d floats share lines at their ends); in turn, so that the frequent
// words' rows, all at the table's start, are spread over every thread.
constexpr int64_t ROW_BLOCK = 16;

// Rows are far apart in a rank's table (a step's keys are its words, scattered over the vocabulary), so the
// loops ask for row i + PREFETCH_ROWS while they copy row i: the memory's latency overlaps the copies.
constexpr int64_t PREFETCH_ROWS = 8;

inline void prefetch_row(const float* row, int64_t d, int write) {
  for (int64_t b = 0; b < d; b += 16) __builtin_prefetch(row + b, write);  // a 64-byte line per 16 floats
}

// bfloat16 (hvd_w2v/parallel/wire.py): a float32's upper 16 bits, rounded to nearest, ties to even; a NaN stays a NaN
// (rounding could carry its mantissa into the exponent and make it an infinity).
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u) : rounded;
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A block's value as float32: a float32 itself, a bfloat16 widened (exact).
inline float value(float x) { return x; }
inline float value(uint16_t x) { return from_bf16(x); }

// dst += s * src over d values: the one add every entry point uses, so that they round alike.
template <typename Value>
inline void add_row(float* dst, const Value* src, float s, int64_t d) {
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) dst[j] += s * value(src[j]);
}

// The capped add's scale of a row that sums m SGD updates: min(1, cap / max(m, 1)).
inline float cap_scale(float cap, float m) {
  const float most = m > 1.f ? m : 1.f;
  return cap / most < 1.f ? cap / most : 1.f;
}

// Whether every one of rows[0:n] lies in [0, table_rows): checked before a loop touches any row.
inline bool inside(const int64_t* rows, int64_t n, int64_t table_rows) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= rows[i] >= 0 && rows[i] < table_rows;  // one pass, no branch
  return ok;
}

// The entries i < n whose row thread t of ``team`` owns (every team-th block of ROW_BLOCK table rows), in
// order: the owners' adds give each row to one thread, so each row is still added source by source. Counted
// first, so that each thread holds its own entries' indices alone (8 B an entry over the team, not a thread).
std::vector<int64_t> owned_entries(const int64_t* rows, int64_t n, int64_t team, int64_t t) {
  const uint32_t of = static_cast<uint32_t>(team), me = static_cast<uint32_t>(t);
  auto owned = [&](int64_t i) { return team == 1 || static_cast<uint32_t>(rows[i] / ROW_BLOCK) % of == me; };
  int64_t m = n;
  if (team > 1) {
    m = 0;
    for (int64_t i = 0; i < n; ++i) m += owned(i);
  }
  std::vector<int64_t> mine(m + 1);  // one more: the loop below writes a place past the last entry
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {  // no branch: whose row it is follows no pattern
    mine[k] = i;
    k += owned(i);
  }
  mine.pop_back();
  return mine;
}

// A value as a block of the wire holds it: a float32 itself, or its bfloat16.
inline void put(float* to, float x) { *to = x; }
inline void put(uint16_t* to, float x) { *to = to_bf16(x); }

// out[i] = table[rows[i]] for i < n, in ``out``'s type: hvd_w2v_take_rows and hvd_w2v_take_rows_bf16.
template <typename Value>
int64_t take_rows(const float* table, int64_t table_rows, const int64_t* rows, Value* out, int64_t n, int64_t d,
                  int64_t threads) {
  if (!inside(rows, n, table_rows)) return -1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n >= MIN_PARALLEL_ROWS)
  for (int64_t i = 0; i < n; ++i) {
    if (i + PREFETCH_ROWS < n) prefetch_row(table + rows[i + PREFETCH_ROWS] * d, d, 0);
    const float* src = table + rows[i] * d;
    Value* dst = out + i * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) put(dst + j, src[j]);
  }
  return 0;
}

// An owner's whole scatter in one call. Source s sent blocks[s], float32[counts[s], d]: updates of the table
// rows listed, source after source, in ``rows`` (unique within a source, not across sources), the i-th summing
// sgd[i] SGD updates. A row's updates are scaled by min(1, cap / max(m, 1)), m its SGD updates summed over
// all sources, and added source by source. ``total`` (float32[table_rows], zeros) is scratch, left zeros.
// On ``threads`` threads, each the owner of the rows in every threads-th block of ROW_BLOCK table rows: each
// first lists the entries of its rows, in order, then adds only those, so every row is still added source by
// source, and the result is the same on any thread count, byte for byte. (Listing first keeps the adding loop
// free of a test it mispredicts half the time, and lets it prefetch only rows it will write.) One source (a
// rank alone) needs neither the owners nor the sums: its rows are unique, each m its own, and each thread
// takes a range of its entries, as in add_rows.
// Returns 0, or -1 with nothing touched when a row lies outside [0, table_rows).
template <typename Value>
int64_t add_sources(float* table, int64_t table_rows, const int64_t* rows, const Value* const* blocks,
                    const int64_t* counts, int64_t sources, const float* sgd, float cap, float* total, int64_t d,
                    int64_t threads) {
  int64_t n = 0;
  for (int64_t s = 0; s < sources; ++s) n += counts[s];
  if (!inside(rows, n, table_rows)) return -1;
  const int64_t team = n >= MIN_PARALLEL_ROWS ? threads : 1;
  if (sources == 1) {  // one source (one rank): its rows are unique, so any split is safe, and each m is its own
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
    for (int64_t i = 0; i < n; ++i) {
      if (i + PREFETCH_ROWS < n) prefetch_row(table + rows[i + PREFETCH_ROWS] * d, d, 1);
      add_row(table + rows[i] * d, blocks[0] + i * d, cap_scale(cap, sgd[i]), d);
    }
    return 0;
  }
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const int64_t t = team > 1 ? omp_get_thread_num() : 0;
    const std::vector<int64_t> mine = owned_entries(rows, n, team, t);
    const int64_t m = mine.size();
    for (int64_t i : mine) total[rows[i]] += sgd[i];
    int64_t s = 0, end = sources ? counts[0] : 0;  // entry i's source, and where that source's entries end
    for (int64_t k = 0; k < m; ++k) {
      if (k + PREFETCH_ROWS < m) prefetch_row(table + rows[mine[k + PREFETCH_ROWS]] * d, d, 1);
      const int64_t i = mine[k];
      while (i >= end) end += counts[++s];
      const int64_t row = rows[i];
      add_row(table + row * d, blocks[s] + (i - (end - counts[s])) * d, cap_scale(cap, total[row]), d);
    }
    for (int64_t i : mine) total[rows[i]] = 0.f;
  }
  return 0;
}

// The clipped merge's scatter (localsgd.ClippedMerge) in one call: the same entries as add_sources, but each
// row's updates are first summed over the sources in source order, the sum scaled by the cap's
// min(1, cap / max(m, 1)), m the row's summed sgd, then scaled down to an L2 norm of at most ``clip``, and
// added. On ``threads`` threads, each the owner of every threads-th block of ROW_BLOCK table rows, as in
// add_sources: each lists its entries and chains each row's entries in source order (a hash of its own: no
// scratch the size of the table), then walks its rows: each summed in one row of scratch (but a float32 row of
// one entry, read where it arrived), clipped and added.
// Each row is summed and added by one thread, so the result is the same bytes on any thread count. (No buffer
// of all the sums: writing then reading one, fresh pages each call, cost more than the add.)
// Returns 0, or -1 with nothing touched when a row lies outside [0, table_rows).
template <typename Value>
int64_t merge_sources(float* table, int64_t table_rows, const int64_t* rows, const Value* const* blocks,
                      const int64_t* counts, int64_t sources, const float* sgd, float cap, float clip, int64_t d,
                      int64_t threads) {
  int64_t n = 0;
  for (int64_t s = 0; s < sources; ++s) n += counts[s];
  if (!inside(rows, n, table_rows)) return -1;
  const int64_t team = n >= MIN_PARALLEL_ROWS ? threads : 1;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const int64_t t = team > 1 ? omp_get_thread_num() : 0;
    const std::vector<int64_t> mine = owned_entries(rows, n, team, t);
    const int64_t m = mine.size();
    std::vector<const Value*> from(m);  // entry k's update, where its source's block holds it
    int64_t s = 0, end = sources ? counts[0] : 0;  // entry i's source, and where that source's entries end
    for (int64_t k = 0; k < m; ++k) {
      const int64_t i = mine[k];
      while (i >= end) end += counts[++s];
      from[k] = blocks[s] + (i - (end - counts[s])) * d;
    }
    int64_t buckets = 16;
    while (buckets < 2 * m) buckets *= 2;
    std::vector<int64_t> keyed(buckets, -1);  // open addressing: a table row, or -1
    std::vector<int32_t> placed(buckets);     // ... and its place among the distinct rows
    std::vector<int32_t> first, last;         // each distinct row's first and last entry, in the order first met
    std::vector<int32_t> next(m, -1);         // the row's entry after entry k, -1 after its last
    for (int64_t k = 0; k < m; ++k) {
      const int64_t row = rows[mine[k]];
      uint64_t h = (static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull) >> 20;
      for (;; ++h) {
        const int64_t b = static_cast<int64_t>(h & (buckets - 1));
        if (keyed[b] == row) {
          next[last[placed[b]]] = static_cast<int32_t>(k);
          last[placed[b]] = static_cast<int32_t>(k);
          break;
        }
        if (keyed[b] < 0) {
          keyed[b] = row, placed[b] = static_cast<int32_t>(first.size());
          first.push_back(static_cast<int32_t>(k)), last.push_back(static_cast<int32_t>(k));
          break;
        }
      }
    }
    std::vector<float> scratch(d);  // a row's sum
    const int64_t distinct = first.size();
    for (int64_t u = 0; u < distinct; ++u) {
      if (u + PREFETCH_ROWS < distinct) prefetch_row(table + rows[mine[first[u + PREFETCH_ROWS]]] * d, d, 1);
      int32_t k = first[u];
      float m_row = sgd[mine[k]];
      const float* sum;
      if constexpr (std::is_same_v<Value, float>) sum = from[k];  // a row of one float32 entry: where it is
      if (!std::is_same_v<Value, float> || next[k] >= 0) {
        // summed in source order: the first copied (0 + x is x), the others added
        for (int64_t j = 0; j < d; ++j) scratch[j] = value(from[k][j]);
        for (k = next[k]; k >= 0; k = next[k]) {
          add_row(scratch.data(), from[k], 1.f, d);
          m_row += sgd[mine[k]];
        }
        sum = scratch.data();
      }
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t j = 0; j < d; ++j) squares += sum[j] * sum[j];
      float scale = cap_scale(cap, m_row);
      const float norm = std::sqrt(squares) * scale;
      if (norm > clip) scale *= clip / norm;
      add_row(table + rows[mine[first[u]]] * d, sum, scale, d);
    }
  }
  return 0;
}

}  // namespace

extern "C" {

// out[i] = table[rows[i]] for i < n; rows of d floats; on ``threads`` threads, each a range of i. Returns 0,
// or -1 with nothing written when a row lies outside [0, table_rows).
int64_t hvd_w2v_take_rows(const float* table, int64_t table_rows, const int64_t* rows, float* out, int64_t n,
                          int64_t d, int64_t threads) {
  return take_rows(table, table_rows, rows, out, n, d, threads);
}

// The same, each value rounded to bfloat16 as it is copied.
int64_t hvd_w2v_take_rows_bf16(const float* table, int64_t table_rows, const int64_t* rows, uint16_t* out,
                               int64_t n, int64_t d, int64_t threads) {
  return take_rows(table, table_rows, rows, out, n, d, threads);
}

// table[rows[i]] += scale[i] * updates[i] for i < n (scale null: 1); ``rows`` are unique, so ``threads``
// threads can each take a range of i. Returns 0, or -1 with nothing touched when a row lies outside
// [0, table_rows).
int64_t hvd_w2v_add_rows(float* table, int64_t table_rows, const int64_t* rows, const float* updates,
                         const float* scale, int64_t n, int64_t d, int64_t threads) {
  if (!inside(rows, n, table_rows)) return -1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n >= MIN_PARALLEL_ROWS)
  for (int64_t i = 0; i < n; ++i) add_row(table + rows[i] * d, updates + i * d, scale ? scale[i] : 1.f, d);
  return 0;
}

// out[i] = bfloat16 of in[i] for i < n.
void hvd_w2v_to_bf16(const float* in, uint16_t* out, int64_t n, int64_t threads) {
#pragma omp parallel for simd schedule(static) num_threads(threads) if (threads > 1 && n >= MIN_PARALLEL_VALUES)
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

// out[i] = the float32 of bfloat16 in[i] for i < n: exact.
void hvd_w2v_from_bf16(const uint16_t* in, float* out, int64_t n, int64_t threads) {
#pragma omp parallel for simd schedule(static) num_threads(threads) if (threads > 1 && n >= MIN_PARALLEL_VALUES)
  for (int64_t i = 0; i < n; ++i) out[i] = from_bf16(in[i]);
}

// values[i] rounded to bfloat16 in place (still float32) for i < n: what the wire makes of a rank's own rows.
void hvd_w2v_round_bf16(float* values, int64_t n, int64_t threads) {
#pragma omp parallel for simd schedule(static) num_threads(threads) if (threads > 1 && n >= MIN_PARALLEL_VALUES)
  for (int64_t i = 0; i < n; ++i) values[i] = from_bf16(to_bf16(values[i]));
}

// The owners' adds above, their blocks float32 (the exchange's float32 wire) or bfloat16 (wire.BFloat16).
int64_t hvd_w2v_add_sources(float* table, int64_t table_rows, const int64_t* rows, const float* const* blocks,
                            const int64_t* counts, int64_t sources, const float* sgd, float cap, float* total,
                            int64_t d, int64_t threads) {
  return add_sources(table, table_rows, rows, blocks, counts, sources, sgd, cap, total, d, threads);
}

int64_t hvd_w2v_add_sources_bf16(float* table, int64_t table_rows, const int64_t* rows,
                                 const uint16_t* const* blocks, const int64_t* counts, int64_t sources,
                                 const float* sgd, float cap, float* total, int64_t d, int64_t threads) {
  return add_sources(table, table_rows, rows, blocks, counts, sources, sgd, cap, total, d, threads);
}

int64_t hvd_w2v_merge_sources(float* table, int64_t table_rows, const int64_t* rows, const float* const* blocks,
                              const int64_t* counts, int64_t sources, const float* sgd, float cap, float clip,
                              int64_t d, int64_t threads) {
  return merge_sources(table, table_rows, rows, blocks, counts, sources, sgd, cap, clip, d, threads);
}

int64_t hvd_w2v_merge_sources_bf16(float* table, int64_t table_rows, const int64_t* rows,
                                   const uint16_t* const* blocks, const int64_t* counts, int64_t sources,
                                   const float* sgd, float cap, float clip, int64_t d, int64_t threads) {
  return merge_sources(table, table_rows, rows, blocks, counts, sources, sgd, cap, clip, d, threads);
}

}  // extern "C"
