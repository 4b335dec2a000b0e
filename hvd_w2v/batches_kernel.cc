// A step's examples and their table, as numpy computes them, in plain loops: numpy makes a dozen passes over
// the step's positions and its [centres, 2 window] blocks, these make one or two (the profile in
// hvd_w2v/bench/README.md, "Where the time goes, 1 rank").
//   hvd_w2v_build: batches.build (subsampling, reduced windows, contexts within the sentence and the span,
//     noise words from the unigram^0.75 runs). Every draw is rng.py's counter-based generator and every float
//     operation the one numpy does, in the same order and precision: the same examples, bit for bit.
//   hvd_w2v_step_plan: training.StepPlan.of for the fused op (one block): the step's unique keys grouped by
//     owner, each example's slots in that table, and the SGD-update count of each row.
// tests/test_batches.py holds both to numpy. Called through ctypes by hvd_w2v/native.py, which checks the
// arrays first; built there with g++ (-ffp-contract=off: no fused multiply-adds, which round differently).
#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

// rng.py's _mix: splitmix64's finaliser.
inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// rng.uniform(seed, stream, epoch, counter, k), with key = rng.key(seed, stream, epoch).
inline double uniform(uint64_t key, int64_t counter, int64_t k) {
  uint64_t x = mix((static_cast<uint64_t>(counter) * 0x9E3779B97F4A7C15ULL) ^ key);
  x = mix(x + (static_cast<uint64_t>(k) * 0xA0761D6478BD642FULL + 1));
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

// Keys seen in a step, each numbered by first sight: open addressing over a power-of-two table, the key and
// its number side by side, doubled whenever it passes half full.
class KeyNumbers {
 public:
  explicit KeyNumbers(int64_t expected) { resize(std::max<int64_t>(16, 2 * expected)); }
  // The number of ``key`` (>= 0), numbering it if it is new.
  int64_t operator()(int64_t key) {
    for (uint64_t h = mix(static_cast<uint64_t>(key));; ++h) {
      Slot& slot = slots_[h & mask_];
      if (slot.key == key) return slot.number;
      if (slot.number < 0) {
        slot = Slot{key, static_cast<int64_t>(keys.size())};
        keys.push_back(key);
        if (2 * keys.size() > slots_.size()) resize(2 * slots_.size());
        return keys.size() - 1;
      }
    }
  }
  std::vector<int64_t> keys;  // by number

 private:
  struct Slot {
    int64_t key, number;
  };
  void resize(int64_t at_least) {
    int64_t size = 16;
    while (size < at_least) size <<= 1;
    slots_.assign(size, Slot{-1, -1});
    mask_ = size - 1;
    for (int64_t k = 0; k < static_cast<int64_t>(keys.size()); ++k) {
      uint64_t h = mix(static_cast<uint64_t>(keys[k]));
      while (slots_[h & mask_].number >= 0) ++h;
      slots_[h & mask_] = Slot{keys[k], k};
    }
  }
  std::vector<Slot> slots_;
  uint64_t mask_;
};

}  // namespace

extern "C" {

// batches.build on ids[0:length] read from stream position ``base``, centres in [lo, hi). The vocabulary is
// vocab.CountRuns': ``runs`` runs of equal counts, run r holding ids [starts[r], starts[r + 1]), with its
// keep_by_run, cum (runs + 1), weight and guide (guide_size) arrays. Writes up to hi - lo centres:
// centres[n], contexts[n, 2 window] (-1: none), negatives[n, negative]; returns n.
int64_t hvd_w2v_build(const int32_t* ids, int64_t length, int64_t base, int64_t lo, int64_t hi,
                      uint64_t keep_key, uint64_t window_key, uint64_t noise_key, int64_t window, int64_t span,
                      int64_t negative, int64_t runs, const int64_t* starts, const float* keep_by_run,
                      const double* cum, const double* weight, const int64_t* guide, int64_t guide_size,
                      int64_t* centres, int64_t* contexts, int64_t* negatives) {
  // The kept occurrences: position, id, sentence number (sentence ends seen up to and including it).
  std::vector<int64_t> kpos, kid, ksent;
  kpos.reserve(length), kid.reserve(length), ksent.reserve(length);
  int64_t sentence = 0;
  for (int64_t i = 0; i < length; ++i) {
    const int64_t id = ids[i];
    if (id < 0) {  // encode.SENTENCE_END
      ++sentence;
      continue;
    }
    const int64_t run = std::upper_bound(starts, starts + runs + 1, id) - starts - 1;
    const int64_t pos = base + i;
    if (uniform(keep_key, pos, 0) < static_cast<double>(keep_by_run[run])) {
      kpos.push_back(pos), kid.push_back(id), ksent.push_back(sentence);
    }
  }
  const int64_t kept = kpos.size(), width = 2 * window;
  const double total = cum[runs];
  const int64_t last = runs - 1;
  int64_t n = 0;
  for (int64_t c = 0; c < kept; ++c) {
    const int64_t cpos = kpos[c];
    if (cpos < lo || cpos >= hi) continue;
    const int64_t reduced = 1 + static_cast<int64_t>(uniform(window_key, cpos, 0) * window);
    int64_t* ctx = contexts + n * width;
    bool any = false;
    for (int64_t j = 0; j < width; ++j) {  // offsets -window..-1, then 1..window
      const int64_t off = j < window ? j - window : j - window + 1;
      const int64_t nb = c + off;
      const bool ok = nb >= 0 && nb < kept && (off < 0 ? -off : off) <= reduced && ksent[nb] == ksent[c] &&
                      (kpos[nb] > cpos ? kpos[nb] - cpos : cpos - kpos[nb]) <= span;
      ctx[j] = ok ? kid[nb] : -1;
      any |= ok;
    }
    if (!any) continue;  // a centre with no context word trains nothing
    centres[n] = kid[c];
    for (int64_t k = 0; k < negative; ++k) {  // vocab.CountRuns.draw_noise
      const double u = uniform(noise_key, cpos, k);
      const double x = u * total;
      int64_t run = guide[std::min(static_cast<int64_t>(u * guide_size), guide_size - 1)];
      while (run < last && cum[run + 1] <= x) ++run;
      const int64_t within = static_cast<int64_t>((x - cum[run]) / weight[run]);
      negatives[n * negative + k] =
          starts[run] + std::min(within, starts[run + 1] - starts[run] - 1);
    }
    ++n;
  }
  return n;
}

// training.StepPlan.of(groups=1) for ``n`` centres (centres[n], contexts[n, width] with -1 for none,
// negatives[n, negative]) on ``ranks`` ranks, ids below ``n_hot`` hot (owned by "rank" ``ranks``, last).
// Writes the unique keys (2 id + matrix) grouped by owner, in order of first sight within an owner, to
// keys[U], each owner's count to owned[ranks + 1], the SGD-update count of each key to sgd[U], and the
// slots: ctx[n_pad, width] and tgt[n_pad, 1 + negative], "none" (the table's last row: U + 1 rounded up to
// row_bucket, less one) where there is no context word and in the rows past n. Returns U; keys and sgd need
// room for every occurrence. (numpy sorts the keys within an owner too; no sum depends on that order.)
int64_t hvd_w2v_step_plan(const int64_t* centres, const int64_t* contexts, const int64_t* negatives, int64_t n,
                          int64_t width, int64_t negative, int64_t ranks, int64_t n_hot, int64_t sg,
                          int64_t row_bucket, int64_t n_pad, int64_t* keys, int64_t* owned, int32_t* ctx,
                          int32_t* tgt, float* sgd) {
  const int64_t targets = 1 + negative;
  KeyNumbers number(n * 4);  // about 4 unique keys per centre at 2,048 positions on one rank
  std::vector<int64_t> ctx_number(n * width, -1), tgt_number(n * targets);
  std::vector<double> weight(n * (width + targets), 0.0);  // SGD updates per number
  for (int64_t i = 0; i < n; ++i) {
    int64_t have = 0;
    for (int64_t j = 0; j < width; ++j) {
      const int64_t id = contexts[i * width + j];
      if (id < 0) continue;
      ++have;
      weight[ctx_number[i * width + j] = number(2 * id)] += 1;  // one update of the context's W_in row
    }
    // An output row gets one update per (context, target) pair in skip-gram, one per example in CBOW; a
    // noise word equal to the centre is skipped, as word2vec.c does.
    const double per = sg ? have : 1;
    for (int64_t k = 0; k < targets; ++k) {
      const int64_t id = k ? negatives[i * negative + k - 1] : centres[i];
      const bool skipped = k && id == centres[i];
      weight[tgt_number[i * targets + k] = number(2 * id + 1)] += skipped ? 0 : per;
    }
  }
  // Group by owner, a counting sort of the unique keys (the owner is computed once per key, not per sight).
  const int64_t unique = number.keys.size();
  std::vector<int64_t> owner(unique);
  std::fill(owned, owned + ranks + 1, 0);
  for (int64_t k = 0; k < unique; ++k) {
    const int64_t id = number.keys[k] >> 1;
    ++owned[owner[k] = id < n_hot ? ranks : id % ranks];
  }
  std::vector<int64_t> next(ranks + 1, 0);
  for (int64_t r = 1; r <= ranks; ++r) next[r] = next[r - 1] + owned[r - 1];
  std::vector<int32_t> slot_of(unique);
  for (int64_t k = 0; k < unique; ++k) {
    const int64_t s = next[owner[k]]++;
    slot_of[k] = static_cast<int32_t>(s);
    keys[s] = number.keys[k];
    sgd[s] = static_cast<float>(weight[k]);
  }
  const int32_t none = static_cast<int32_t>((unique + 1 + row_bucket - 1) / row_bucket * row_bucket - 1);
  for (int64_t i = 0; i < n_pad; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      const int64_t k = i < n ? ctx_number[i * width + j] : -1;
      ctx[i * width + j] = k < 0 ? none : slot_of[k];
    }
    for (int64_t k = 0; k < targets; ++k)
      tgt[i * targets + k] = i < n ? slot_of[tgt_number[i * targets + k]] : none;
  }
  return unique;
}

}  // extern "C"
