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
// word equal to the centre is skipped, as in word2vec.c. ``arch``: sgns_kernel.cc's (1 skip-gram, 0 CBOW of the
// context's mean, 2 of its sum). ``codes`` (int8[n, 1 + K] beside tgt, or null): hierarchical softmax, as
// sgns_kernel.cc's: tgt a path of inner-node rows, labels 1 - code, a saturated node not updated.
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

constexpr float HS_SATURATED = 6.f;  // word2vec.c's MAX_EXP (sgns_kernel.cc's)

// grad[k] = (label - sigmoid(l1 . target k)) * alpha for the targets l2 of one input row l1 (null: skipped),
// and their loss; labels 1 for target 0 and 0 for the others (the noise words, whose rate is ``noise_alpha``:
// the shard's noise weight times alpha), or with ``code`` 1 - code[k] (hierarchical softmax, whose saturated
// nodes get 0: the caller skips them). Every dot product first: they are independent
// unless a noise word repeats within one centre's targets, so they overlap instead of each waiting for the
// update before it; the updates follow in target order (the caller).
inline void gradients(const float* l1, float* const* l2, const int8_t* code, int64_t k1, int64_t d, float alpha,
                      float noise_alpha, float* grad, double* loss) {
  for (int64_t k = 0; k < k1; ++k) grad[k] = l2[k] ? dot(l1, l2[k], d) : 0.f;
  for (int64_t k = 0; k < k1; ++k) {
    if (!l2[k]) continue;
    const bool label = code ? code[k] == 0 : k == 0;
    const bool saturated = code && std::fabs(grad[k]) >= HS_SATURATED;
    const float sig = sigmoid_and_loss(grad[k], label, loss);
    grad[k] = saturated ? 0.f : ((label ? 1.f : 0.f) - sig) * (code || k == 0 ? alpha : noise_alpha);
  }
}

// A target slot that trains nothing: no target, or a noise word equal to the centre.
inline bool skipped(const int32_t* ts, int k, int32_t none) { return ts[k] == none || (k > 0 && ts[k] == ts[0]); }

// One shard's private rows (kept from call to call: fresh buffers would be fresh pages every super-step).
// ``order`` lists the table rows the shard touches, in the order of their places in ``copy``; ``ctx`` and
// ``tgt`` are the shard's examples with places for row indices (-1: nothing), ``code`` their codes (null:
// negative sampling).
struct Copy {
  std::vector<int32_t> order;
  std::vector<float> copy;
  std::vector<int32_t> ctx, tgt;
  const int8_t* code = nullptr;

  // Places for the rows shard [lo, hi) touches, in the order it first names them, and their copies from
  // the snapshot. One pass before the SGD: its reads of scattered snapshot rows are independent of each other,
  // so the memory serves many at once, where copying each row on first use inside the SGD loop waited on
  // each in turn. ``at`` (int32[T], all -1) is the calling thread's scratch, left all -1.
  void begin(std::vector<int32_t>& at, const float* rows, int64_t T, int64_t d, const int32_t* cs, int64_t w,
             const int32_t* ts, const int8_t* codes, int64_t k1, int64_t lo, int64_t hi) {
    const int32_t none = static_cast<int32_t>(T - 1);
    code = codes ? codes + lo * k1 : nullptr;
    if (static_cast<int64_t>(at.size()) < T) at.assign(T, -1);
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
    for (int32_t r : order) at[r] = -1;
    if (copy.size() < order.size() * d) copy.resize(order.size() * d);
    for (size_t e = 0; e < order.size(); ++e) {
      const float* from = rows + static_cast<int64_t>(order[e]) * d;
      float* to = copy.data() + e * d;
#pragma omp simd
      for (int64_t x = 0; x < d; ++x) to[x] = from[x];
    }
  }
};

// word2vec.c's SGD over the centres [from, to) of ``mine``'s examples (counted from the shard's first), in
// order, on its copy, its noise words' updates weighted by ``weight`` (the shard's noise group's: 1 for every
// word); adds their loss and count.
void sgd(int64_t arch, int64_t d, float alpha, float weight, int64_t w, int64_t k1, int64_t from, int64_t to,
         Copy& mine, double* loss_out, double* count_out) {
  const float noise_alpha = alpha * weight;
  const bool sg = arch == 1, mean = arch == 0;  // sgns_kernel.cc's codes: skip-gram, CBOW's mean, its sum
  std::vector<float> work(d), hidden(d), grad(k1);
  std::vector<float*> l2(k1);
  float* copy = mine.copy.data();
  auto row = [&](int32_t p) { return copy + static_cast<int64_t>(p) * d; };
  double loss = 0, count = 0;
  for (int64_t i = from; i < to; ++i) {
    const int32_t* cs = mine.ctx.data() + i * w;
    const int32_t* ts = mine.tgt.data() + i * k1;
    const int8_t* code = mine.code ? mine.code + i * k1 : nullptr;
    for (int64_t k = 0; k < k1; ++k) l2[k] = ts[k] < 0 ? nullptr : row(ts[k]);
    if (sg) {
      // word2vec.c's skip-gram: each context word's W_in row against the centre's and the noise words' W_out
      // rows; the W_out rows change at once, the W_in row after its targets (neu1e).
      for (int64_t j = 0; j < w; ++j) {
        if (cs[j] < 0) continue;
        float* l1 = row(cs[j]);
        gradients(l1, l2.data(), code, k1, d, alpha, noise_alpha, grad.data(), &loss);
        std::fill(work.begin(), work.end(), 0.f);
        for (int64_t k = 0; k < k1; ++k) {
          if (!l2[k] || (code && grad[k] == 0.f)) continue;
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
      if (mean)
        for (int64_t x = 0; x < d; ++x) hidden[x] /= m;
      gradients(hidden.data(), l2.data(), code, k1, d, alpha, noise_alpha, grad.data(), &loss);
      std::fill(work.begin(), work.end(), 0.f);
      for (int64_t k = 0; k < k1; ++k) {
        if (!l2[k] || (code && grad[k] == 0.f)) continue;
        axpy(grad[k], l2[k], work.data(), d);
        axpy(grad[k], hidden.data(), l2[k], d);
      }
      // As word2vec.c, the mean's: each context word receives the whole hidden-layer update; as gensim's sum,
      // each receives 1/m of it.
      const float share = mean ? 1.f : 1.f / m;
      for (int64_t j = 0; j < w; ++j)
        if (cs[j] >= 0) axpy(share, work.data(), row(cs[j]), d);
      count += 1;
    }
  }
  *loss_out += loss, *count_out += count;
}

// Adds shard copies' deltas into ``deltas`` rows [r0, r1), shard by shard in the order given: each row's first
// written as if added to zero (``written``: whether a row holds a delta yet), rows in [skip_lo, skip_hi) left.
void add_deltas(const Copy* const* shards, int64_t count, const float* rows, int64_t d, int64_t r0, int64_t r1,
                int64_t skip_lo, int64_t skip_hi, uint8_t* written, float* deltas) {
  for (int64_t s = 0; s < count; ++s) {
    const Copy& c = *shards[s];
    for (size_t e = 0; e < c.order.size(); ++e) {
      const int64_t r = c.order[e];
      if (r < r0 || r >= r1 || (r >= skip_lo && r < skip_hi)) continue;
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
}

// The checks every entry makes before it writes anything: bounds increasing within [0, n], every row index
// in [0, T). Returns true when they hold.
bool checked(const int32_t* ctx, int64_t w, const int32_t* tgt, int64_t k1, int64_t n, int64_t T,
             const int64_t* bounds, int64_t segments, int team) {
  const int32_t none = static_cast<int32_t>(T - 1);
  if (segments < 1 || bounds[0] < 0 || bounds[segments] > n) return false;
  for (int64_t s = 0; s < segments; ++s)
    if (bounds[s] > bounds[s + 1]) return false;
  int64_t bad = 0;  // a pass over all the examples, on the team
#pragma omp parallel for num_threads(team) reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i * w; j < (i + 1) * w; ++j) bad |= ctx[j] < 0 || ctx[j] > none;
    for (int64_t j = i * k1; j < (i + 1) * k1; ++j) bad |= tgt[j] < 0 || tgt[j] > none;
  }
  return !bad;
}

std::vector<Copy> copies;  // a thread's, in the one-call super-step (the library's: a rank calls from one thread)
std::vector<std::vector<int32_t>> scratch;  // a thread's ``at`` (Copy::begin)

// A super-step in sub-steps (hvd_w2v_local_sgd_open's contract): every shard's copy held from open to close.
struct Session {
  int64_t arch = 0, T = 0, d = 0, w = 0, k1 = 0, shards = 0, parts = 0, hot_lo = 0, hot_hi = 0;
  const int8_t* codes = nullptr;
  std::vector<float> weights;  // a shard's noise weight (sgd's)
  int team = 1;
  const float* rows = nullptr;
  std::vector<int64_t> bounds;  // shard s's sub-step j: centres [bounds[s parts + j], bounds[s parts + j + 1])
  std::vector<Copy> copy;  // a shard's
  std::vector<int32_t> hot_at;  // [shards, hot rows]: the place of each hot row in a shard's copy, or -1
  std::vector<uint8_t> touched;  // [shards, hot rows]: whether the sub-step's centres name it
  std::vector<std::vector<int32_t>> named;  // a shard's: the hot rows its sub-step's centres name
  std::vector<float> base;  // [hot rows, d]: the hot rows as last merged (the snapshot's before the first sync)
  // A shard's copy of a hot row is brought up to ``base`` when a sub-step of the shard names the row, not at
  // every sync: a sync rewrote every copy's hot rows, as many bytes as the sub-step's SGD touched or more.
  // ``version[h]``: the sync that last changed hot row h (0: none); ``seen[s, h]``: the version shard s holds.
  std::vector<int32_t> version, seen;
  int32_t syncs = 0;
  std::vector<double> loss, count;  // a shard's, over the sub-steps run
} session;

}  // namespace

extern "C" {

// The super-step (the contract above); ``weights`` float32[shards]: each shard's noise weight (null: 1 each).
// Returns 0, or -1 with nothing written when a row index lies outside [0, T) or the bounds are not increasing
// within [0, n].
int64_t hvd_w2v_local_sgd(int64_t arch, const float* rows, int64_t T, int64_t d, const int32_t* ctx,
                          int64_t w, const int32_t* tgt, const int8_t* codes, int64_t k1, int64_t n,
                          const int64_t* bounds, int64_t shards, const float* weights,
                          float alpha, int64_t threads, float* deltas, double* sums) {
  const int team = static_cast<int>(std::max<int64_t>(1, std::min(threads, shards)));
  if (!checked(ctx, w, tgt, k1, n, T, bounds, shards, team)) return -1;
  if (static_cast<int>(copies.size()) < team) copies.resize(team), scratch.resize(team);
  std::vector<double> loss(shards, 0.0), count(shards, 0.0);
  std::vector<uint8_t> written(T - 1);  // whether a row of ``deltas`` holds a shard's delta yet
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num();
    const int64_t r0 = (T - 1) * t / team, r1 = (T - 1) * (t + 1) / team;  // this thread's rows of the sum
    std::fill(written.begin() + r0, written.begin() + r1, 0);
    // Rounds of ``team`` shards, one a thread; after each, every thread adds the round's deltas (a copy less
    // the snapshot) into its range of rows, shard by shard in shard order, the rows no shard touched zeroed
    // at the end. So a rank holds a round's copies, not every shard's.
    for (int64_t first = 0; first < shards; first += team) {
      if (first + t < shards) {
        copies[t].begin(scratch[t], rows, T, d, ctx, w, tgt, codes, k1, bounds[first + t], bounds[first + t + 1]);
        const int64_t s = first + t;
        sgd(arch, d, alpha, weights ? weights[s] : 1.f, w, k1, 0, bounds[s + 1] - bounds[s], copies[t], &loss[s],
            &count[s]);
      }
#pragma omp barrier
      std::vector<const Copy*> round;
      for (int64_t s = first; s < std::min(shards, first + team); ++s) round.push_back(&copies[s - first]);
      add_deltas(round.data(), round.size(), rows, d, r0, r1, 0, 0, written.data(), deltas);
#pragma omp barrier
    }
    for (int64_t r = r0; r < r1; ++r)
      if (!written[r]) std::fill(deltas + r * d, deltas + (r + 1) * d, 0.f);
  }
  sums[0] = sums[1] = 0.0;
  for (int64_t s = 0; s < shards; ++s) sums[0] += loss[s], sums[1] += count[s];
  return 0;
}

// A super-step whose hot rows meet between sub-steps (hvd_w2v/training/hotsync.py): open, then for each
// sub-step j in order ``substep`` (every shard's centres of sub-step j, then the hot rows' deltas since the
// last sync) and ``sync`` (the combined hot rows, into every shard's copy), then ``close`` (the other rows'
// deltas). The arguments of open are the one-call super-step's, but ``bounds`` holds ``parts`` sub-steps a
// shard (shard s's sub-step j: centres [bounds[s parts + j], bounds[s parts + j + 1])) and the table rows
// [hot_lo, hot_hi) are the hot rows; ``weights`` as the one call's. The arrays must live until close. Every shard's copy is held at once.
// Each returns 0, or -1 with nothing written: open when an index or the bounds are wrong, the others when
// called out of turn.
int64_t hvd_w2v_local_sgd_open(int64_t arch, const float* rows, int64_t T, int64_t d, const int32_t* ctx,
                               int64_t w, const int32_t* tgt, const int8_t* codes, int64_t k1, int64_t n,
                               const int64_t* bounds, int64_t shards, const float* weights,
                               int64_t parts, int64_t hot_lo, int64_t hot_hi, int64_t threads) {
  Session& S = session;
  const int team = static_cast<int>(std::max<int64_t>(1, std::min(threads, shards)));
  if (shards < 1 || parts < 1 || hot_lo < 0 || hot_lo > hot_hi || hot_hi > T - 1 ||
      !checked(ctx, w, tgt, k1, n, T, bounds, shards * parts, team))
    return -1;
  S.arch = arch, S.T = T, S.d = d, S.w = w, S.k1 = k1, S.shards = shards, S.parts = parts, S.hot_lo = hot_lo;
  S.hot_hi = hot_hi, S.team = team, S.rows = rows, S.codes = codes;
  S.bounds.assign(bounds, bounds + shards * parts + 1);
  S.weights.assign(shards, 1.f);
  if (weights) S.weights.assign(weights, weights + shards);
  const int64_t nh = hot_hi - hot_lo;
  if (static_cast<int64_t>(S.copy.size()) < shards) S.copy.resize(shards);
  if (static_cast<int>(scratch.size()) < team) scratch.resize(team);
  S.hot_at.assign(shards * nh, -1);
  S.touched.assign(shards * nh, 0);
  S.base.assign(rows + hot_lo * d, rows + hot_hi * d);
  S.version.assign(nh, 0), S.seen.assign(shards * nh, 0), S.syncs = 0;
  S.named.resize(std::max<size_t>(S.named.size(), shards));
  for (int64_t s = 0; s < shards; ++s) S.named[s].clear();  // marks of another session's hot rows
  S.loss.assign(shards, 0.0), S.count.assign(shards, 0.0);
#pragma omp parallel for num_threads(team) schedule(dynamic)
  for (int64_t s = 0; s < shards; ++s) {
    Copy& c = S.copy[s];
    c.begin(scratch[omp_get_thread_num()], rows, T, d, ctx, w, tgt, codes, k1, S.bounds[s * parts],
            S.bounds[(s + 1) * parts]);
    for (size_t e = 0; e < c.order.size(); ++e)
      if (c.order[e] >= hot_lo && c.order[e] < hot_hi) S.hot_at[s * nh + c.order[e] - hot_lo] = e;
  }
  return 0;
}

// Sub-step ``part`` on every shard, then ``hot`` float32[hot rows, d]: each hot row's deltas since the last
// sync summed over the shards in shard order (zeros where none), and ``shards_touching`` float32[hot rows]: how
// many shards' centres of this sub-step name it.
int64_t hvd_w2v_local_sgd_substep(int64_t part, float alpha, float* hot, float* shards_touching) {
  Session& S = session;
  if (S.rows == nullptr || part < 0 || part >= S.parts) return -1;
  const int64_t nh = S.hot_hi - S.hot_lo, d = S.d, w = S.w, k1 = S.k1;
#pragma omp parallel num_threads(S.team)
  {
#pragma omp for schedule(dynamic)
    for (int64_t s = 0; s < S.shards; ++s) {
      const int64_t lo = S.bounds[s * S.parts], from = S.bounds[s * S.parts + part] - lo;
      const int64_t to = S.bounds[s * S.parts + part + 1] - lo;
      Copy& c = S.copy[s];
      uint8_t* mark = S.touched.data() + s * nh;
      int32_t* seen = S.seen.data() + s * nh;
      std::vector<int32_t>& named = S.named[s];
      for (int32_t h : named) mark[h] = 0;  // the sub-step before's
      named.clear();
      auto name = [&](int32_t p) {  // marked, and brought up to the last merge if a sync changed it since
        if (p < 0 || c.order[p] < S.hot_lo || c.order[p] >= S.hot_hi) return;
        const int32_t h = static_cast<int32_t>(c.order[p] - S.hot_lo);
        if (mark[h]) return;
        mark[h] = 1, named.push_back(h);
        if (seen[h] != S.version[h]) {
          std::copy(S.base.data() + h * d, S.base.data() + (h + 1) * d, c.copy.data() + static_cast<int64_t>(p) * d);
          seen[h] = S.version[h];
        }
      };
      for (int64_t j = from * w; j < to * w; ++j) name(c.ctx[j]);
      for (int64_t j = from * k1; j < to * k1; ++j) name(c.tgt[j]);
      sgd(S.arch, d, alpha, S.weights[s], w, k1, from, to, c, &S.loss[s], &S.count[s]);
    }
    // Each thread its range of hot rows, summed over the shards that named them, in shard order.
    const int t = omp_get_thread_num();
    const int64_t h0 = nh * t / S.team, h1 = nh * (t + 1) / S.team;
    std::fill(hot + h0 * d, hot + h1 * d, 0.f);
    std::fill(shards_touching + h0, shards_touching + h1, 0.f);
    for (int64_t s = 0; s < S.shards; ++s)
      for (int32_t h : S.named[s]) {
        if (h < h0 || h >= h1) continue;
        const float* now = S.copy[s].copy.data() + static_cast<int64_t>(S.hot_at[s * nh + h]) * d;
        const float* before = S.base.data() + static_cast<int64_t>(h) * d;
        float* out = hot + static_cast<int64_t>(h) * d;
#pragma omp simd
        for (int64_t x = 0; x < d; ++x) out[x] += now[x] - before[x];
        shards_touching[h] += 1.f;
      }
  }
  return 0;
}

// The hot rows that changed in the merge, as combined over every shard: ``hot`` float32[count, d], the rows
// ``which`` int32[count] (increasing, in [0, hot rows)). Every shard goes on from them: a shard's copy of a
// row takes them when its next sub-step names the row (``version``).
int64_t hvd_w2v_local_sgd_sync(const float* hot, const int32_t* which, int64_t count) {
  Session& S = session;
  const int64_t nh = S.hot_hi - S.hot_lo, d = S.d;
  if (S.rows == nullptr || count < 0 || count > nh) return -1;
  for (int64_t i = 0; i < count; ++i)
    if (which[i] < 0 || which[i] >= nh || (i > 0 && which[i] <= which[i - 1])) return -1;
  ++S.syncs;
  for (int64_t i = 0; i < count; ++i) {
    std::copy(hot + i * d, hot + (i + 1) * d, S.base.data() + which[i] * d);
    S.version[which[i]] = S.syncs;
  }
  return 0;
}

// The super-step's end: deltas float32[T - 1, d] as the one-call super-step's for every row but the hot ones
// (zeros: the syncs carried them), and sums[0] the loss, sums[1] the count over all sub-steps. Ends the session.
int64_t hvd_w2v_local_sgd_close(float* deltas, double* sums) {
  Session& S = session;
  if (S.rows == nullptr) return -1;
  const int64_t T = S.T, d = S.d;
  std::vector<uint8_t> written(T - 1);
  std::vector<const Copy*> all;
  for (int64_t s = 0; s < S.shards; ++s) all.push_back(&S.copy[s]);
#pragma omp parallel num_threads(S.team)
  {
    const int t = omp_get_thread_num();
    const int64_t r0 = (T - 1) * t / S.team, r1 = (T - 1) * (t + 1) / S.team;
    add_deltas(all.data(), all.size(), S.rows, d, r0, r1, S.hot_lo, S.hot_hi, written.data(), deltas);
    for (int64_t r = r0; r < r1; ++r)
      if (!written[r]) std::fill(deltas + r * d, deltas + (r + 1) * d, 0.f);
  }
  sums[0] = sums[1] = 0.0;
  for (int64_t s = 0; s < S.shards; ++s) sums[0] += S.loss[s], sums[1] += S.count[s];
  S.rows = nullptr;
  return 0;
}

}  // extern "C"
