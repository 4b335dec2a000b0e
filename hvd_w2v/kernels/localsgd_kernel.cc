// A super-step of shard-local SGD (hvd_w2v/training/localsgd.py) in one call: every shard of the stream runs
// word2vec.c's sequential SGD over its centres on a private copy of the rows they touch, each update seeing
// the ones before it, all from the same snapshot of the super-step's table; then each shard's deltas (its
// copy less the snapshot) are summed row by row in shard order. Called through ctypes (native.local_sgd),
// like the other compiled pieces.
//
// Contract (native.local_sgd documents it for Python): rows float32[T, d] (the super-step's unique rows, then
// zero rows; T - 1 stands for "no context word"), ctx int32[n, w] of row indices and tgt int32[n, 1 + K] (the
// centre's W_out row, then its noise words'), the centres of shard s being [bounds[s], bounds[s + 1]). Writes
// deltas float32[T - 1, d], every row's deltas summed over the shards that touched it, and sums[0] the loss
// (summed -log sigmoid), sums[1] the count (pairs for skip-gram, centres with a context for CBOW). A noise
// word equal to the centre is skipped, as in word2vec.c.
//
// Threads (the rank's budget): the shards run in rounds of one shard a thread; after each round the threads
// add its deltas, each into its range of rows, shard by shard in shard order. A shard's deltas depend on its
// centres and the snapshot alone, and every row sums them in shard order, so the result is the same bytes on
// any thread count, and on one rank the same as on several up to
// the order of float32 sums (an owner adds its sources rank by rank; exchange.Exchange.scatter).
//
// Built by hvd_w2v/kernels/native.py (g++ -fopenmp) into a cache folder.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

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

// log(1 + e) for e in [0, 1], as 2 atanh(s) with s = e / (2 + e) in [0, 1/3], the series cut where its terms
// fall under float32's precision: cheaper than std::log1p (sgns_kernel.cc's, the exact step's, likewise).
inline float log1p_unit(float e) {
  const float s = e / (2.f + e), s2 = s * s;
  return 2.f * s * (1.f + s2 * (1.f / 3 + s2 * (1.f / 5 + s2 * (1.f / 7 + s2 * (1.f / 9 + s2 * (1.f / 11 +
         s2 * (1.f / 13 + s2 * (1.f / 15))))))));
}

// sigmoid(f) and the loss -log sigmoid(+-f) from one exp, stable for any f.
inline float sigmoid_and_loss(float f, bool positive, double* loss) {
  const float e = std::exp(-std::fabs(f));
  const float x = positive ? f : -f;
  *loss += (x >= 0 ? 0.f : -x) + log1p_unit(e);
  return f >= 0 ? 1.f / (1.f + e) : e / (1.f + e);
}

// grad[k] = (label - sigmoid(l1 . target k)) * alpha for the targets l2 of one input row l1 (null: skipped),
// and their loss. Every dot product first: they are independent unless a noise word repeats within one
// centre's targets, so they overlap instead of each waiting for the update before it; the updates follow in
// target order (the caller).
inline void gradients(const float* l1, float* const* l2, int64_t k1, int64_t d, float alpha, float* grad,
                      double* loss) {
  for (int64_t k = 0; k < k1; ++k) grad[k] = l2[k] ? dot(l1, l2[k], d) : 0.f;
  for (int64_t k = 0; k < k1; ++k)
    if (l2[k]) grad[k] = ((k == 0 ? 1.f : 0.f) - sigmoid_and_loss(grad[k], k == 0, loss)) * alpha;
}

// A target slot that trains nothing: no target, or a noise word equal to the centre.
inline bool skipped(const int32_t* ts, int k, int32_t none) { return ts[k] == none || (k > 0 && ts[k] == ts[0]); }

// One shard's private rows, kept from call to call (a thread's, reused by every shard it runs: fresh buffers
// would be fresh pages every super-step). ``at[r]`` is the place of table row r in ``copy`` (-1: the shard
// does not touch it); ``ctx`` and ``tgt`` are the shard's examples with places for row indices (-1: nothing).
struct Copy {
  std::vector<int32_t> at;
  std::vector<int32_t> order;  // the rows touched, in the order of their places
  std::vector<float> copy;
  std::vector<int32_t> ctx, tgt;

  // Places for the rows shard [lo, hi) touches, in the order it first names them, and their copies from
  // the snapshot. One pass before the SGD: its reads of scattered snapshot rows are independent of each other,
  // so the memory serves many at once, where copying each row on first use inside the SGD loop waited on
  // each in turn.
  void begin(const float* rows, int64_t T, int64_t d, const int32_t* cs, int64_t w, const int32_t* ts,
             int64_t k1, int64_t lo, int64_t hi) {
    const int32_t none = static_cast<int32_t>(T - 1);
    if (static_cast<int64_t>(at.size()) < T) at.assign(T, -1);
    for (int32_t r : order) at[r] = -1;  // the shard before's marks
    order.clear();
    const int64_t n = hi - lo;
    ctx.resize(n * w), tgt.resize(n * k1);
    // Places in row order when the shard names many of the table's rows (marks, then a scan of the table),
    // so the copy, the deltas' sum and the snapshot are read in increasing row order; else in the order the
    // shard first names them, which costs no pass over the table. Either way the same sums.
    if (n * (w + k1) >= (T - 1) / 2) {
      for (int64_t j = lo * w; j < hi * w; ++j) at[cs[j]] = 0;
      for (int64_t j = lo * k1; j < hi * k1; ++j) at[ts[j]] = 0;
      for (int64_t r = 0; r < none; ++r)
        if (at[r] == 0) at[r] = static_cast<int32_t>(order.size()) + 1, order.push_back(static_cast<int32_t>(r));
      at[none] = -1;
      for (int32_t r : order) at[r] -= 1;
    } else {
      auto mark = [&](int32_t r) {
        if (at[r] < 0 && r != none) at[r] = static_cast<int32_t>(order.size()), order.push_back(r);
      };
      for (int64_t i = lo; i < hi; ++i) {
        for (int64_t k = 0; k < k1; ++k) mark(ts[i * k1 + k]);
        for (int64_t j = 0; j < w; ++j) mark(cs[i * w + j]);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t* c = cs + (lo + i) * w;
      const int32_t* t = ts + (lo + i) * k1;
      for (int64_t k = 0; k < k1; ++k) tgt[i * k1 + k] = skipped(t, k, none) ? -1 : at[t[k]];
      for (int64_t j = 0; j < w; ++j) ctx[i * w + j] = c[j] == none ? -1 : at[c[j]];
    }
    if (copy.size() < order.size() * d) copy.resize(order.size() * d);
    for (size_t e = 0; e < order.size(); ++e) {
      const float* from = rows + static_cast<int64_t>(order[e]) * d;
      float* to = copy.data() + e * d;
#pragma omp simd
      for (int64_t x = 0; x < d; ++x) to[x] = from[x];
    }
  }
};

// Shard [lo, hi)'s SGD on its copy ``mine``; returns its loss and count.
void shard(bool sg, const float* rows, int64_t T, int64_t d, float alpha, const int32_t* ctx, int64_t w,
           const int32_t* tgt, int64_t k1, int64_t lo, int64_t hi, Copy& mine, double* loss_out, double* count_out) {
  mine.begin(rows, T, d, ctx, w, tgt, k1, lo, hi);
  std::vector<float> work(d), hidden(d), grad(k1);
  std::vector<float*> l2(k1);
  float* copy = mine.copy.data();
  auto row = [&](int32_t p) { return copy + static_cast<int64_t>(p) * d; };
  double loss = 0, count = 0;
  for (int64_t i = 0; i < hi - lo; ++i) {
    const int32_t* cs = mine.ctx.data() + i * w;
    const int32_t* ts = mine.tgt.data() + i * k1;
    for (int64_t k = 0; k < k1; ++k) l2[k] = ts[k] < 0 ? nullptr : row(ts[k]);
    if (sg) {
      // word2vec.c's skip-gram: each context word's W_in row against the centre's and the noise words' W_out
      // rows; the W_out rows change at once, the W_in row after its targets (neu1e).
      for (int64_t j = 0; j < w; ++j) {
        if (cs[j] < 0) continue;
        float* l1 = row(cs[j]);
        gradients(l1, l2.data(), k1, d, alpha, grad.data(), &loss);
        std::fill(work.begin(), work.end(), 0.f);
        for (int64_t k = 0; k < k1; ++k) {
          if (!l2[k]) continue;
          axpy(grad[k], l2[k], work.data(), d);
          axpy(grad[k], l1, l2[k], d);
        }
        axpy(1.f, work.data(), l1, d);
        count += 1;
      }
    } else {
      int m = 0;
      std::fill(hidden.begin(), hidden.end(), 0.f);
      for (int64_t j = 0; j < w; ++j) {
        if (cs[j] < 0) continue;
        axpy(1.f, row(cs[j]), hidden.data(), d);
        ++m;
      }
      if (m == 0) continue;
      for (int64_t x = 0; x < d; ++x) hidden[x] /= m;
      gradients(hidden.data(), l2.data(), k1, d, alpha, grad.data(), &loss);
      std::fill(work.begin(), work.end(), 0.f);
      for (int64_t k = 0; k < k1; ++k) {
        if (!l2[k]) continue;
        axpy(grad[k], l2[k], work.data(), d);
        axpy(grad[k], hidden.data(), l2[k], d);
      }
      // As word2vec.c: each context word receives the whole hidden-layer update (not divided by m).
      for (int64_t j = 0; j < w; ++j)
        if (cs[j] >= 0) axpy(1.f, work.data(), row(cs[j]), d);
      count += 1;
    }
  }
  *loss_out = loss, *count_out = count;
}

std::vector<Copy> copies;  // a thread's (the library's: a rank calls from one Python thread)

}  // namespace

extern "C" {

// The super-step (the contract above). Returns 0, or -1 with nothing written when a row index lies outside
// [0, T) or the bounds are not increasing within [0, n].
int64_t hvd_w2v_local_sgd(int64_t sg, const float* rows, int64_t T, int64_t d, const int32_t* ctx, int64_t w,
                          const int32_t* tgt, int64_t k1, int64_t n, const int64_t* bounds, int64_t shards,
                          float alpha, int64_t threads, float* deltas, double* sums) {
  const int32_t none = static_cast<int32_t>(T - 1);
  if (shards < 1 || bounds[0] < 0 || bounds[shards] > n) return -1;
  for (int64_t s = 0; s < shards; ++s)
    if (bounds[s] > bounds[s + 1]) return -1;
  const int team = static_cast<int>(std::max<int64_t>(1, std::min(threads, shards)));
  // Every row index checked before anything is written, on the team: a pass over all the examples
  int64_t bad = 0;
#pragma omp parallel for num_threads(team) reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i * w; j < (i + 1) * w; ++j) bad |= ctx[j] < 0 || ctx[j] > none;
    for (int64_t j = i * k1; j < (i + 1) * k1; ++j) bad |= tgt[j] < 0 || tgt[j] > none;
  }
  if (bad) return -1;
  if (static_cast<int>(copies.size()) < team) copies.resize(team);
  std::vector<double> loss(shards, 0.0), count(shards, 0.0);
  std::vector<uint8_t> written(T - 1);  // whether a row of ``deltas`` holds a shard's delta yet
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num();
    const int64_t r0 = (T - 1) * t / team, r1 = (T - 1) * (t + 1) / team;  // this thread's rows of the sum
    std::fill(written.begin() + r0, written.begin() + r1, 0);
    // Rounds of ``team`` shards, one a thread; after each, every thread adds the round's deltas (a copy less
    // the snapshot) into its range of rows, shard by shard in shard order, the first shard's of a row written
    // as if added to zero (no pass to zero every row first), the rows no shard touched zeroed at the end. So
    // a rank holds a round's copies, not every shard's.
    for (int64_t first = 0; first < shards; first += team) {
      if (first + t < shards)
        shard(sg, rows, T, d, alpha, ctx, w, tgt, k1, bounds[first + t], bounds[first + t + 1], copies[t],
              &loss[first + t], &count[first + t]);
#pragma omp barrier
      for (int64_t s = first; s < std::min(shards, first + team); ++s) {
        const Copy& c = copies[s - first];
        for (size_t e = 0; e < c.order.size(); ++e) {
          const int64_t r = c.order[e];
          if (r < r0 || r >= r1) continue;
          const float* now = c.copy.data() + e * d;
          const float* before = rows + r * d;
          float* out = deltas + r * d;
          if (written[r]) {
#pragma omp simd
            for (int64_t x = 0; x < d; ++x) out[x] += now[x] - before[x];
          } else {
            written[r] = 1;
#pragma omp simd
            for (int64_t x = 0; x < d; ++x) out[x] = 0.f + (now[x] - before[x]);  // as += into a zero (-0 too)
          }
        }
      }
#pragma omp barrier
    }
    for (int64_t r = r0; r < r1; ++r)
      if (!written[r]) std::fill(deltas + r * d, deltas + (r + 1) * d, 0.f);
  }
  sums[0] = sums[1] = 0.0;
  for (int64_t s = 0; s < shards; ++s) sums[0] += loss[s], sums[1] += count[s];
  return 0;
}

}  // extern "C"
