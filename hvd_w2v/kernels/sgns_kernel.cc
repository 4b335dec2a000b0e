// The step's maths in one call: the same updates as sgns.py's TensorFlow graph, in word2vec.c's loops. The
// graph materialises [centres, width, dim] blocks for the gathers, products and segment sums; this reads each
// row once per pair from the snapshot and adds into the output in place, as gensim's and word2vec.c's inner
// loops do, so a step's maths costs a fraction of the graph's. Called through ctypes (native.sgns_step), like
// the other compiled pieces. (It was a TensorFlow op until 2026-12: the op's eager dispatch and the numpy-to-
// tensor conversions ran every step on the rank's one Python thread, where the other threads waited; the
// bench README, "Threads inside a rank", has the throughput before and after.)
//
// Contract (sgns.step_function documents it for both paths): rows float32[T, d] (the step's unique rows, then
// zero rows; the last one, T - 1, stands for "no context word"), N groups of int32 blocks, ctx [n_g, w_g] of
// row indices and tgt [n_g, 1 + K] (the centre's W_out row, then its noise words'), alpha, and ``arch``: 1
// skip-gram, 0 CBOW of the context's mean (word2vec.c's; gensim's cbow_mean=1), 2 CBOW of its sum (gensim's
// cbow_mean=0: each context row then gets 1/m of the hidden layer's update). Writes updates
// float32[T - 1, d], every row's summed update (the last row's is dropped), and sums[0] the loss (summed
// -log sigmoid), sums[1] the count (pairs for skip-gram, centres with a context for CBOW). Every update is
// computed from the snapshot ``rows``; a noise word equal to the centre is skipped, as in word2vec.c.
// Hierarchical softmax: with ``codes`` (int8 blocks [n_g, k1] beside tgt), tgt holds the centre's path of
// inner-node rows (T - 1 past its end) and target k's label is 1 - codes[k], and, as word2vec.c's and gensim's
// hierarchical softmax, a node whose |x . y| is HS_SATURATED or more is not updated (its sigmoid is within
// 0.0025 of 0 or 1); without, target 0 (the centre) is labelled 1 and the noise words 0.
//
// Threads (the rank's budget): the centres are cut into one run of consecutive centres per thread, of about
// equal work (row operations, counted from each centre's context words), run at once (OpenMP). A row that
// one chunk alone adds into gets its updates straight in the output; a row that several chunks add into (a
// frequent word's, most often) gets chunk 0's in the output and chunk t > 0's in a buffer of chunk t, and
// after the chunks meet, each thread adds the buffers, in chunk order, into its range of those rows. So every
// row sums its updates chunk by chunk in chunk order: the result depends on the thread count alone (the order
// of float32 sums), never on scheduling, and on one thread it is the one-loop arithmetic exactly, byte for
// byte. (Buffers of every row would cost each extra thread a zeroing and a summing pass over all [T - 1, d]
// floats; the rows that need them are a fraction of the step's. The bench README, "Threads inside a rank",
// has the maths before and after.)
//
// Built by hvd_w2v/kernels/native.py (g++ -fopenmp) into a cache folder.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <vector>

namespace {

// Where a call's threads spend it, and wait on each other: built with -DHVD_W2V_PROFILE (python -m
// hvd_w2v.bench.phases --waits builds it so), each thread adds the seconds of each part of a call, in the
// order of Part, to its own line of ``profile`` (hvd_w2v_sgns_profile reads them). Without it, PROFILE's
// statements compile to nothing and the clock is never read.
#ifdef HVD_W2V_PROFILE
#define PROFILE(...) __VA_ARGS__
enum Part { SETUP, MARKS, WAIT_MARKS, SHARED, CENTRES, WAIT_CHUNKS, SUM, PARTS };
constexpr int PROFILED_THREADS = 64;
struct alignas(64) ThreadSeconds {  // a cache line a thread: adding to them must not make them share one
  double part[PARTS];
};
ThreadSeconds profile[PROFILED_THREADS];
struct Stopwatch {  // thread t's: lap(p) adds the time since the last lap (or its start) to part p
  int t;
  double last = clock();
  static double clock() { return omp_get_wtime(); }
  void lap(Part p) {
    const double now = clock();
    if (t < PROFILED_THREADS) profile[t].part[p] += now - last;
    last = now;
  }
};
#else
#define PROFILE(...)
#endif

inline float dot(const float* a, const float* b, int d) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float g, const float* x, float* y, int d) {
#pragma omp simd
  for (int i = 0; i < d; ++i) y[i] += g * x[i];
}

// log(1 + e) for e in [0, 1], as 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...) with s = e / (2 + e) in [0, 1/3]:
// the terms dropped sum to less than 2e-9, under float32's precision, and it costs less than std::log1p.
inline float log1p_unit(float e) {
  const float s = e / (2.f + e), s2 = s * s;
  return 2.f * s * (1.f + s2 * (1.f / 3 + s2 * (1.f / 5 + s2 * (1.f / 7 + s2 * (1.f / 9 + s2 * (1.f / 11 +
         s2 * (1.f / 13 + s2 * (1.f / 15))))))));
}

// sigmoid(f) and log sigmoid(+-f) from one exp, stable for any f.
inline void sigmoid_and_loss(float f, bool positive, float* sig, double* loss) {
  const float e = std::exp(-std::fabs(f));
  *sig = f >= 0 ? 1.f / (1.f + e) : e / (1.f + e);
  const float x = positive ? f : -f;  // the loss is -log sigmoid(x)
  *loss += (x >= 0 ? 0.f : -x) + log1p_unit(e);
}

// A target slot that trains nothing: no target, or a noise word equal to the centre.
inline bool skipped(const int32_t* ts, int k, int none) { return ts[k] == none || (k > 0 && ts[k] == ts[0]); }

// grad[k] = (label - sigmoid(l1 . target k)) * alpha for the k1 targets ts of one input row l1, and their loss.
// Every dot product first, then the sigmoids, then (the caller) the updates: the dot products are independent
// (they read the step's snapshot, never the updates), so they overlap instead of each waiting for the one
// before it through its sigmoid and updates; each value, and the order the loss and the updates are summed
// in, is the same as one target at a time.
constexpr float HS_SATURATED = 6.f;  // word2vec.c's MAX_EXP

// ``code``: the targets' Huffman codes (hierarchical softmax: label 1 - code; a saturated node's gradient 0,
// and the caller skips it), or null (negative sampling: label 1 for target 0, the centre, 0 for its noise
// words).
inline void gradients(const float* l1, const float* rows, const int32_t* ts, const int8_t* code, int k1, int none,
                      int d, float alpha, float* grad, double* loss) {
  for (int k = 0; k < k1; ++k)
    grad[k] = skipped(ts, k, none) ? 0.f : dot(l1, rows + static_cast<int64_t>(ts[k]) * d, d);
  for (int k = 0; k < k1; ++k) {
    if (skipped(ts, k, none)) continue;
    const bool label = code ? code[k] == 0 : k == 0;
    const bool saturated = code && std::fabs(grad[k]) >= HS_SATURATED;
    float sig;
    sigmoid_and_loss(grad[k], label, &sig, loss);
    grad[k] = saturated ? 0.f : ((label ? 1.f : 0.f) - sig) * alpha;
  }
}

// Asks the memory for a row of d floats (a 64-byte line per 16), to read or (write 1) to add into.
inline void prefetch_row(const float* row, int d, int write) {
  for (int b = 0; b < d; b += 16) __builtin_prefetch(row + b, write);
}

// Where a chunk of centres adds its updates: row r's at ``out + r * d``, or where ``dest[r]`` points (a chunk
// t > 0's: into its buffer for the rows several chunks add into). A table of pointers, not a test of each row:
// which rows are shared follows no pattern, and a test would be mispredicted on a large share of the adds.
struct Out {
  float* out;
  int64_t d;
  float* const* dest = nullptr;
  float* row(int32_t r) const { return dest ? dest[r] : out + r * d; }
};

// The rows a centre reads and adds into, asked for while the centre before it computes: its rows are scattered
// over the step's table, and without this each waits on the memory in turn (CBOW's centres, with less maths
// between their reads, gain the most).
inline void prefetch_centre(const float* rows, const Out& up, int d, int none, const int32_t* cs, int w,
                            const int32_t* ts, int k1) {
  auto both = [&](int32_t r) {
    if (r == none) return;
    prefetch_row(rows + static_cast<int64_t>(r) * d, d, 0);
    prefetch_row(up.row(r), d, 1);
  };
  for (int k = 0; k < k1; ++k) both(ts[k]);
  for (int j = 0; j < w; ++j) both(cs[j]);
}

// Centres [lo, hi) of one group (ctx [n, w], tgt [n, k1]): their updates added into ``up``, their loss and
// count into ``*loss_sum`` and ``*count_sum``. word2vec.c's loops (skip-gram) and its CBOW's, on the snapshot
// ``rows``. The sums run in locals and are stored once, at the end, in the same order of additions: the
// chunks' sums stand side by side in one cache line, and adding into them at every pair made the cores pass
// that line back and forth (false sharing; the bench README, "Threads inside a rank", has the maths before
// and after).
void centres(int64_t arch, const float* rows, int d, int none, float alpha, const int32_t* ctx, int w,
             const int32_t* tgt, const int8_t* codes, int k1, int64_t lo, int64_t hi, const Out& up,
             double* loss_sum, double* count_sum) {
  const bool sg = arch == 1, mean = arch == 0;
  std::vector<float> work(d), hidden(d), grad(k1);
  double loss = *loss_sum, count = *count_sum;
  for (int64_t i = lo; i < hi; ++i) {
    const int32_t* cs = ctx + i * w;
    const int32_t* ts = tgt + i * k1;
    const int8_t* code = codes ? codes + i * k1 : nullptr;
    if (i + 1 < hi) prefetch_centre(rows, up, d, none, cs + w, w, ts + k1, k1);
    if (sg) {
      for (int j = 0; j < w; ++j) {
        if (cs[j] == none) continue;
        const float* l1 = rows + static_cast<int64_t>(cs[j]) * d;
        gradients(l1, rows, ts, code, k1, none, d, alpha, grad.data(), &loss);
        std::fill(work.begin(), work.end(), 0.f);
        for (int k = 0; k < k1; ++k) {
          if (skipped(ts, k, none) || (code && grad[k] == 0.f)) continue;
          const float* l2 = rows + static_cast<int64_t>(ts[k]) * d;
          axpy(grad[k], l2, work.data(), d);                          // word2vec.c's neu1e
          axpy(grad[k], l1, up.row(ts[k]), d);
        }
        axpy(1.f, work.data(), up.row(cs[j]), d);
        count += 1;
      }
    } else {
      int m = 0;
      std::fill(hidden.begin(), hidden.end(), 0.f);
      for (int j = 0; j < w; ++j) {
        if (cs[j] == none) continue;
        axpy(1.f, rows + static_cast<int64_t>(cs[j]) * d, hidden.data(), d);
        ++m;
      }
      if (m == 0) continue;  // a padding centre learns nothing
      if (mean)
        for (int x = 0; x < d; ++x) hidden[x] /= m;
      gradients(hidden.data(), rows, ts, code, k1, none, d, alpha, grad.data(), &loss);
      std::fill(work.begin(), work.end(), 0.f);
      for (int k = 0; k < k1; ++k) {
        if (skipped(ts, k, none) || (code && grad[k] == 0.f)) continue;
        const float* l2 = rows + static_cast<int64_t>(ts[k]) * d;
        axpy(grad[k], l2, work.data(), d);
        axpy(grad[k], hidden.data(), up.row(ts[k]), d);
      }
      // As word2vec.c, the mean's: each context word receives the whole hidden-layer update; as gensim's sum,
      // each receives 1/m of it.
      const float share = mean ? 1.f : 1.f / m;
      for (int j = 0; j < w; ++j)
        if (cs[j] != none) axpy(share, work.data(), up.row(cs[j]), d);
      count += 1;
    }
  }
  *loss_sum = loss, *count_sum = count;
}

// Each chunk's scratch, the library's, kept from call to call: fresh buffers would be fresh pages, each step
// paying their page faults (a rank calls from one thread; the lock keeps any other caller correct).
struct Chunk {
  std::vector<uint8_t> seen;  // [T]: 1 where this chunk's centres name the row
  std::vector<float*> dest;   // [T]: where this chunk (t > 0) adds row r's updates (Out)
  std::vector<int32_t> shared;  // the rows several chunks name, in row order (chunk t > 0)
  std::vector<float> buffer;  // [shared rows, d]: this chunk's (t > 0) updates of the rows several chunks add into
};
std::mutex scratch_lock;
std::vector<Chunk> scratch;

}  // namespace

extern "C" {

// The step (the contract above): group g's blocks are ctxs[g] [centres[g], widths[g]] and tgts[g]
// [centres[g], targets[g]], codes[g] (null, or codes null: negative sampling) its Huffman codes. Returns 0, or -1
// with nothing written when a row index lies outside [0, T).
int64_t hvd_w2v_sgns_step(int64_t arch, const float* rows, int64_t T, int64_t d, int64_t groups,
                          const int32_t* const* ctxs, const int32_t* const* tgts, const int8_t* const* codes,
                          const int64_t* centres_of,
                          const int64_t* widths, const int64_t* targets, float alpha, int64_t threads, float* up,
                          double* sums) {
  PROFILE(Stopwatch caller{0});  // the set-up runs on the calling thread alone
  const int32_t none = static_cast<int32_t>(T - 1);
  // Every group checked, where its centres start in the step's list of all groups' centres, and the cost
  // up to each centre of that list: skip-gram's context words each cost a dot product and two row adds per
  // target, plus one; CBOW's centre costs the same per target, plus two row adds per context word.
  std::vector<int64_t> start(groups + 1, 0), cost(1, 0);
  cost.reserve(1 + std::accumulate(centres_of, centres_of + groups, int64_t{0}));  // one allocation a step
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t w = widths[g], k1 = targets[g];
    for (int64_t i = 0; i < centres_of[g]; ++i) {
      int64_t m = 0;
      for (int64_t j = i * w; j < (i + 1) * w; ++j) {
        if (ctxs[g][j] < 0 || ctxs[g][j] > none) return -1;
        m += ctxs[g][j] != none;
      }
      for (int64_t k = i * k1; k < (i + 1) * k1; ++k)
        if (tgts[g][k] < 0 || tgts[g][k] > none) return -1;
      cost.push_back(cost.back() + (arch == 1 ? m * (3 * k1 + 1) : m > 0 ? 3 * k1 + 2 * m : 0));
    }
    start[g + 1] = start[g] + centres_of[g];
  }
  const int64_t cells = (T - 1) * d;
  // One chunk of consecutive centres per thread: chunk 0 adds into the output, chunk t > 0 into a buffer
  // of its own; then each thread adds the buffers into its range of the output's rows, in chunk order.
  // Every chunk t > 0 first lists the rows several chunks share, a pass over the table's T rows, which is
  // charged to it as ``listing``: 3/4 of a row operation a row, between the charges with which the A/B of
  // python -m hvd_w2v.bench.kernels found skip-gram's chunks (one) and CBOW's (half of one) fastest (the bench
  // README, "Threads inside a rank"). So the chunks' shares are equal with it: chunk t starts at the first centre
  // whose cost before it reaches t shares less the listings of the chunks t' in [1, t) before it. The cut is
  // a function of the step and the thread count alone, as the sums' order must be.
  const int chunks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, start[groups])));
  const int64_t listing = 3 * T / 4, share = (cost.back() + (chunks - 1) * listing) / chunks;
  std::vector<int64_t> bound(chunks + 1, start[groups]);
  bound[0] = 0;
  for (int t = 1; t < chunks; ++t)
    bound[t] = std::max(bound[t - 1], std::lower_bound(cost.begin(), cost.end(), t * share - (t - 1) * listing) -
                                          cost.begin());
  std::vector<double> loss(chunks, 0.0), count(chunks, 0.0);
  // Chunk t's centres, in group order, their updates added as ``out`` says.
  auto run = [&](int t, auto&& each) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t a = std::max(bound[t], start[g]) - start[g], b = std::min(bound[t + 1], start[g + 1]) - start[g];
      if (a < b) each(g, a, b);
    }
  };
  PROFILE(caller.lap(SETUP));
  if (chunks == 1) {
    std::fill(up, up + cells, 0.f);
    PROFILE(caller.lap(MARKS));
    run(0, [&](int64_t g, int64_t a, int64_t b) {
      centres(arch, rows, d, none, alpha, ctxs[g], widths[g], tgts[g], codes ? codes[g] : nullptr, targets[g], a,
              b, Out{up, d}, &loss[0], &count[0]);
    });
    PROFILE(caller.lap(CENTRES));
  } else {
    std::lock_guard<std::mutex> hold(scratch_lock);
    if (static_cast<int>(scratch.size()) < chunks) scratch.resize(chunks);
#pragma omp parallel num_threads(chunks)
    {
      const int t = omp_get_thread_num();
      PROFILE(Stopwatch watch{t});
      Chunk& mine = scratch[t];
      const int64_t r0 = (T - 1) * t / chunks, r1 = (T - 1) * (t + 1) / chunks;  // this thread's output rows
      mine.seen.assign(T, 0);
      run(t, [&](int64_t g, int64_t a, int64_t b) {
        for (int64_t j = a * widths[g]; j < b * widths[g]; ++j) mine.seen[ctxs[g][j]] = 1;
        for (int64_t j = a * targets[g]; j < b * targets[g]; ++j) mine.seen[tgts[g][j]] = 1;
      });
      std::fill(up + r0 * d, up + r1 * d, 0.f);
      PROFILE(watch.lap(MARKS));
#pragma omp barrier
      PROFILE(watch.lap(WAIT_MARKS));
      // Chunk t > 0 gives the rows that several chunks name places in its buffer, in row order.
      Out out{up, d};
      if (t > 0) {
        mine.dest.resize(T);
        mine.shared.clear();
        for (int64_t r = 0; r < T; ++r) {  // one pass over the chunks' marks
          int named = 0;
          for (int c = 0; c < chunks; ++c) named += scratch[c].seen[r];
          mine.dest[r] = up + r * d;
          if (named > 1 && r < T - 1) mine.shared.push_back(static_cast<int32_t>(r));
        }
        const int64_t cells_shared = static_cast<int64_t>(mine.shared.size()) * d;
        if (static_cast<int64_t>(mine.buffer.size()) < cells_shared) mine.buffer.resize(cells_shared);
        float* next = mine.buffer.data();
        for (int32_t r : mine.shared) {
          mine.dest[r] = next;
          next += d;
        }
        std::fill(mine.buffer.data(), next, 0.f);
        out.dest = mine.dest.data();
      }
      PROFILE(watch.lap(SHARED));
      run(t, [&](int64_t g, int64_t a, int64_t b) {
        centres(arch, rows, d, none, alpha, ctxs[g], widths[g], tgts[g], codes ? codes[g] : nullptr, targets[g], a,
                b, out, &loss[t], &count[t]);
      });
      PROFILE(watch.lap(CENTRES));
#pragma omp barrier
      PROFILE(watch.lap(WAIT_CHUNKS));
      // This thread's range of the shared rows (every chunk t > 0 lists the same ones, in row order).
      const std::vector<int32_t>& shared = scratch[1].shared;
      for (auto at = std::lower_bound(shared.begin(), shared.end(), r0); at != shared.end() && *at < r1; ++at) {
        const int64_t r = *at;
        float* o = up + r * d;
        for (int c = 1; c < chunks; ++c) {
          const float* src = scratch[c].dest[r];
#pragma omp simd
          for (int64_t x = 0; x < d; ++x) o[x] += src[x];
        }
      }
      PROFILE(watch.lap(SUM));
    }
  }
  sums[0] = sums[1] = 0.0;
  for (int t = 0; t < chunks; ++t) sums[0] += loss[t], sums[1] += count[t];
  return 0;
}

#ifdef HVD_W2V_PROFILE
// The seconds of the calls so far (see Part): out[t * parts + p] for the first ``threads`` threads (at most
// PROFILED_THREADS). Returns the number of parts.
int64_t hvd_w2v_sgns_profile(double* out, int64_t threads) {
  for (int64_t t = 0; t < std::min<int64_t>(threads, PROFILED_THREADS); ++t)
    for (int p = 0; p < PARTS; ++p) out[t * PARTS + p] = profile[t].part[p];
  return PARTS;
}
#endif

}  // extern "C"
