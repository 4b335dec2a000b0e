// A step's examples and their table, as numpy computes them, in plain loops: numpy makes a dozen passes over
// the step's positions and its [centres, 2 window] blocks, these make one or two (the profile in
// hvd_w2v/bench/README.md, "Where the time goes, 1 rank").
//   hvd_w2v_build: batches.build (subsampling, reduced windows, contexts within the sentence and the span,
//     noise words from the runs' count^ns_exponent weights). Every draw is rng.py's counter-based generator
//     and every float operation the one numpy does, in the same order and precision: the same examples, bit for
//     bit.
//   hvd_w2v_build_ranges: the same over several ranges at once (localsgd's shards), a range a thread, each
//     range's noise words drawn from its own noise group's tables (vocab.NoiseGroup; config's noise_groups).
//   hvd_w2v_step_plan: loop.StepPlan.of for the compiled step (one block): the step's unique keys grouped by
//     owner (within an owner, by a class of keys that splits the work over the threads), each example's slots
//     in that table, and the SGD-update count of each row (shard-local SGD's: the shards that touch it).
// tests/test_batches.py holds both to numpy. Called through ctypes by hvd_w2v/kernels/native.py, which checks the
// arrays first; built there with g++ (-ffp-contract=off: no fused multiply-adds, which round differently).
#include <omp.h>

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

// Keys seen in a step, each numbered by first sight. The keys of the DENSE_IDS most frequent words (ids are in
// count order), most of a step's sights, by index into an array of this thread's, kept from call to call and
// left zeros; the others by open addressing over a power-of-two table, the key and its number side by side,
// doubled whenever it passes half full.
constexpr int64_t DENSE_IDS = 1 << 16;  // 512 KiB of int32 per thread

class KeyNumbers {
 public:
  explicit KeyNumbers(int64_t expected) : dense_(dense()) { resize(std::max<int64_t>(16, 2 * expected)); }
  ~KeyNumbers() {
    for (int64_t key : keys)
      if (key < 2 * DENSE_IDS) dense_[key] = 0;
  }
  // The number of ``key`` (>= 0), numbering it if it is new.
  int64_t operator()(int64_t key) {
    if (key < 2 * DENSE_IDS) {
      int32_t& at = dense_[key];  // the number + 1, 0 while unseen
      if (!at) {
        keys.push_back(key);
        at = static_cast<int32_t>(keys.size());
      }
      return at - 1;
    }
    for (uint64_t h = mix(static_cast<uint64_t>(key));; ++h) {
      Slot& slot = slots_[h & mask_];
      if (slot.key == key) return slot.number;
      if (slot.number < 0) {
        slot = Slot{key, static_cast<int64_t>(keys.size())};
        keys.push_back(key);
        if (2 * ++hashed_ > static_cast<int64_t>(slots_.size())) resize(2 * slots_.size());
        return keys.size() - 1;
      }
    }
  }
  std::vector<int64_t> keys;  // by number

 private:
  struct Slot {
    int64_t key, number;
  };
  static std::vector<int32_t>& dense() {
    static thread_local std::vector<int32_t> numbers(2 * DENSE_IDS, 0);
    return numbers;
  }
  void resize(int64_t at_least) {
    int64_t size = 16;
    while (size < at_least) size <<= 1;
    slots_.assign(size, Slot{-1, -1});
    mask_ = size - 1;
    for (int64_t k = 0; k < static_cast<int64_t>(keys.size()); ++k) {
      if (keys[k] < 2 * DENSE_IDS) continue;
      uint64_t h = mix(static_cast<uint64_t>(keys[k]));
      while (slots_[h & mask_].number >= 0) ++h;
      slots_[h & mask_] = Slot{keys[k], k};
    }
  }
  std::vector<int32_t>& dense_;
  std::vector<Slot> slots_;
  uint64_t mask_;
  int64_t hashed_ = 0;
};

// Below this many positions, or centres, a call stays on one thread: waking the team would cost more.
constexpr int64_t MIN_PARALLEL_POSITIONS = 512, MIN_PARALLEL_CENTRES = 256;

// One thread's range of positions, subsampled: its kept occurrences (position, id, and sentence ends seen in
// the range up to and including it), the sentence ends in the whole range, and (set when the ranges are
// joined) where its occurrences start among all and the sentence ends before the range.
struct alignas(64) Kept {
  std::vector<int64_t> pos, id, sentence;
  int64_t sentence_ends = 0, at = 0, sentences_before = 0;

  void subsample(const int32_t* ids, int64_t from, int64_t to, int64_t base, uint64_t keep_key, int64_t runs,
                 const int64_t* starts, const float* keep_by_run, const float* keep_head, int64_t head) {
    pos.reserve(to - from), id.reserve(to - from), sentence.reserve(to - from);
    for (int64_t i = from; i < to; ++i) {
      const int64_t word = ids[i];
      if (word < 0) {  // encode.SENTENCE_END
        ++sentence_ends;
        continue;
      }
      // The frequent words (most positions) from the head table, the others by their run: the same value.
      const float keep = word < head ? keep_head[word]
                                     : keep_by_run[std::upper_bound(starts, starts + runs + 1, word) - starts - 1];
      if (uniform(keep_key, base + i, 0) < static_cast<double>(keep))
        pos.push_back(base + i), id.push_back(word), sentence.push_back(sentence_ends);
    }
  }
};

// A noise distribution (vocab.NoiseGroup): run r the words first[r] + step[r] * j, j < length[r], each of
// weight weight[r]; ``cum`` the weight before each run, ``guide`` where a draw starts looking.
struct Noise {
  int64_t runs;
  const int64_t *first, *length, *step;
  const double *weight, *cum;
  const int64_t* guide;
  int64_t guide_size;
};

// One thread's examples: those of the kept occurrences [from, to) whose position lies in [lo, hi).
struct alignas(64) Examples {
  std::vector<int64_t> centres, contexts, negatives;

  void build(const std::vector<int64_t>& kpos, const std::vector<int64_t>& kid, const std::vector<int64_t>& ksent,
             int64_t from, int64_t to, int64_t lo, int64_t hi, uint64_t window_key, uint64_t noise_key,
             int64_t window, int64_t span, int64_t negative, const Noise& noise) {
    const int64_t kept = kpos.size(), width = 2 * window;
    const int64_t runs = noise.runs, guide_size = noise.guide_size;
    const double *cum = noise.cum, *weight = noise.weight;
    const double total = cum[runs];
    const int64_t most = std::max<int64_t>(to - from, 0);  // room for every centre: no growing on the way
    centres.reserve(most), contexts.reserve(most * width), negatives.reserve(most * negative);
    const int64_t last = runs - 1;
    std::vector<int64_t> ctx(width);
    for (int64_t c = from; c < to; ++c) {
      const int64_t cpos = kpos[c];
      if (cpos < lo || cpos >= hi) continue;
      const int64_t reduced = 1 + static_cast<int64_t>(uniform(window_key, cpos, 0) * window);
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
      centres.push_back(kid[c]);
      contexts.insert(contexts.end(), ctx.begin(), ctx.end());
      for (int64_t k = 0; k < negative; ++k) {  // vocab.NoiseGroup.draw
        const double u = uniform(noise_key, cpos, k);
        const double x = u * total;
        int64_t run = noise.guide[std::min(static_cast<int64_t>(u * guide_size), guide_size - 1)];
        while (run < last && cum[run + 1] <= x) ++run;
        const int64_t within = static_cast<int64_t>((x - cum[run]) / weight[run]);
        negatives.push_back(noise.first[run] + noise.step[run] * std::min(within, noise.length[run] - 1));
      }
    }
  }
};

// x % m for 0 <= x < 2^52 without a division (the slowest instruction there is, and the table's owners take
// one per key): the quotient from m's reciprocal in double precision is off by at most one, which one
// correction mends, so the remainder is exact.
struct Modulo {
  explicit Modulo(int64_t m) : m(m), reciprocal(1.0 / static_cast<double>(m)) {}
  int64_t operator()(int64_t x) const {
    const int64_t r = x - static_cast<int64_t>(static_cast<double>(x) * reciprocal) * m;
    return r < 0 ? r + m : r >= m ? r - m : r;
  }
  int64_t m;
  double reciprocal;
};

// The table lists an owner's keys class by class, each class in the step's first-sight order; a key's class
// is its id's low bits (both rows of a word in one class). The thread t of a team of T numbers the classes
// c with c % T == t, so that the threads split the numbering by key, each in its own table, with nothing to
// join, and the order does not depend on T: the same table on any thread count. (The ids are in count
// order, so the low bits share the frequent words, most of the sights, out evenly.) Threads past the 64th
// number nothing; turning the counts into places visits 64 x (ranks + 1) counts a step on one thread.
constexpr int64_t KEY_CLASSES = 64;
inline int64_t id_class(int64_t id) { return id & (KEY_CLASSES - 1); }

// One thread's classes of a step's keys: numbered (``number``: its keys by number) by first sight over the
// whole step; the number of each of their sights, in the order of the sights within each range of centres
// (``numbered``, by range); the SGD updates each number sums (``weight``); each number's cell, its class and
// owner as an index into ``next``, and its slot in the step's table; and the keys' count by cell, then where
// each cell's keys go next in the table (``next``). All of it the thread's own, so that none writes a cache
// line of another's.
struct ClassKeys {
  ClassKeys(int64_t expected, int team, bool by_shard) : number(expected), by_shard(by_shard) {
    if (static_cast<int>(numbered.size()) < team) numbered.resize(team);
    for (auto& range : numbered) range.clear();
  }
  KeyNumbers number;
  // kept from call to call (cleared, never shrunk), as Dealt's sights: a super-step's are tens of MB
  std::vector<std::vector<int32_t>>& numbered = buffer();
  std::vector<double> weight;
  std::vector<int64_t> cell, next;
  std::vector<int32_t> slot;
  const bool by_shard;  // ``weight`` counts the shards that touch a key, not its SGD updates
  std::vector<int32_t> last;  // with by_shard: the last shard that touched each number

  // Numbers ``key``, a sight of range ``range`` of ``value``: the SGD updates it gives its row, or with
  // by_shard the shard whose centre it is (a range's sights come in centre order, so in shard order).
  void see(int64_t key, int32_t value, int range) {
    const int64_t g = number(key);
    if (g == static_cast<int64_t>(weight.size())) {
      weight.push_back(0.0);
      if (by_shard) last.push_back(-1);
    }
    if (!by_shard) {
      weight[g] += value;
    } else if (last[g] != value) {
      last[g] = value;
      weight[g] += 1;
    }
    numbered[range].push_back(static_cast<int32_t>(g));
  }

 private:
  static std::vector<std::vector<int32_t>>& buffer() {
    static thread_local std::vector<std::vector<int32_t>> numbered;
    return numbered;
  }
};

// Calls visit(id, key, updates) for every sight of centres [lo, hi) in order (the context slots of a centre,
// empty ones skipped, then its targets): its word, its key and the SGD updates it gives its row.
template <class Visit>
void for_each_sight(const int64_t* centres, const int64_t* contexts, const int64_t* negatives, int64_t lo,
                    int64_t hi, int64_t width, int64_t negative, int64_t sg, Visit&& visit) {
  for (int64_t i = lo; i < hi; ++i) {
    int64_t have = 0;
    for (int64_t j = 0; j < width; ++j) {
      const int64_t id = contexts[i * width + j];
      if (id < 0) continue;
      ++have;
      visit(id, 2 * id, 1);  // one update of the context's W_in row
    }
    // An output row gets one update per (context, target) pair in skip-gram, one per example in CBOW; a
    // noise word equal to the centre is skipped, as word2vec.c does. A negative id past the first target is
    // none (a hierarchical-softmax path shorter than the block).
    const int32_t per = sg ? have : 1;
    for (int64_t k = 0; k <= negative; ++k) {
      const int64_t id = k ? negatives[i * negative + k - 1] : centres[i];
      if (id < 0) continue;
      visit(id, 2 * id + 1, k && id == centres[i] ? 0 : per);
    }
  }
}

// for_each_sight with, in place of the SGD updates, the number of the shard whose centre it is, where
// ``shards`` (>= 1) shards own the centres [bounds[s], bounds[s + 1]) (bounds[0] = 0, bounds[shards] = the
// centres' count); with no shards, for_each_sight.
template <class Visit>
void for_each_valued_sight(const int64_t* centres, const int64_t* contexts, const int64_t* negatives, int64_t lo,
                           int64_t hi, int64_t width, int64_t negative, int64_t sg, const int64_t* bounds,
                           int64_t shards, Visit&& visit) {
  if (!shards) return for_each_sight(centres, contexts, negatives, lo, hi, width, negative, sg, visit);
  // the last shard starting at or before lo: the one that holds it (empty shards before it left out)
  for (int64_t s = std::upper_bound(bounds, bounds + shards + 1, lo) - bounds - 1; s < shards && bounds[s] < hi; ++s) {
    const int64_t a = std::max(lo, bounds[s]), b = std::min(hi, bounds[s + 1]);
    const int32_t shard = static_cast<int32_t>(s);
    if (a < b)
      for_each_sight(centres, contexts, negatives, a, b, width, negative, sg,
                     [&](int64_t id, int64_t key, int32_t) { visit(id, key, shard); });
  }
}

// A sight dealt to the thread of its key's class, in 8 bytes: its key (below 2^40: ids stay below 2^39) and,
// in the low 24 bits, its value (for_each_valued_sight: the SGD updates it gives its row, at most the contexts'
// width, or its shard): half the 16 bytes that a key and a value side by side take, and the dealing writes
// every sight and the numbering reads it.
struct Sight {
  uint64_t packed;
  Sight(int64_t key, int32_t value) : packed(static_cast<uint64_t>(key) << 24 | static_cast<uint32_t>(value)) {}
  int64_t key() const { return static_cast<int64_t>(packed >> 24); }
  int32_t value() const { return static_cast<int32_t>(packed & 0xFFFFFF); }
};

// One thread's sights of a range of centres, dealt by class to the ``team`` threads: thread u's in
// sights[u], in the range's order. Kept from call to call (cleared, never shrunk), so that a step neither
// grows them nor faults in fresh pages once the first steps have.
struct Dealt {
  std::vector<std::vector<Sight>>& sights = buffer();

  void deal(const int64_t* centres, const int64_t* contexts, const int64_t* negatives, int64_t lo, int64_t hi,
            int64_t width, int64_t negative, int64_t sg, const int64_t* bounds, int64_t shards, int team) {
    if (static_cast<int>(sights.size()) < team) sights.resize(team);
    for (int u = 0; u < team; ++u) sights[u].clear();
    std::vector<Sight>* to[KEY_CLASSES];  // each class's thread's sights: no division by the team at a sight
    for (int64_t c = 0; c < KEY_CLASSES; ++c) to[c] = &sights[c % team];
    for_each_valued_sight(centres, contexts, negatives, lo, hi, width, negative, sg, bounds, shards,
                          [&](int64_t id, int64_t key, int32_t value) { to[id_class(id)]->emplace_back(key, value); });
  }

 private:
  static std::vector<std::vector<Sight>>& buffer() {
    static thread_local std::vector<std::vector<Sight>> sights;
    return sights;
  }
};

// Each of ``share``'s keys' cell, class / team * (ranks + 1) + owner (hot: owner ``ranks``; a row for each
// class of its thread's), into share.cell, and the keys of each cell counted into share.next.
void count_owners(ClassKeys& share, int64_t ranks, int64_t n_hot, int team) {
  const Modulo rank_of(ranks);
  std::vector<int64_t>& count = share.next;
  count.assign((KEY_CLASSES + team - 1) / team * (ranks + 1), 0);
  const std::vector<int64_t>& keys = share.number.keys;
  share.cell.resize(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    const int64_t id = keys[k] >> 1;
    ++count[share.cell[k] = id_class(id) / team * (ranks + 1) + (id < n_hot ? ranks : rank_of(id))];
  }
}

// ``share``'s keys into their slots of the table: keys[s], their SGD counts sgd[s], and share.slot, from
// share.next: where each cell's keys go next. (The counts are whole numbers, in doubles, so the float32
// values are exact.)
void place(ClassKeys& share, int64_t* keys, float* sgd) {
  const std::vector<int64_t>& mine = share.number.keys;
  share.slot.resize(mine.size());
  for (size_t k = 0; k < mine.size(); ++k) {
    const int64_t s = share.next[share.cell[k]]++;
    share.slot[k] = static_cast<int32_t>(s);
    keys[s] = mine[k];
    sgd[s] = static_cast<float>(share.weight[k]);
  }
}

// The slots of range ``range`` of the centres, [lo, hi), into ctx[i, width] and tgt[i, 1 + negative] (``none``
// for no context word): its sights walked in for_each_sight's order, each through the next of its range's
// numbers in the share of its class (``shares``: ``team`` threads, class c's is c % team) to that key's slot.
void write_slots(const int64_t* centres, const int64_t* contexts, const int64_t* negatives,
                 const std::vector<ClassKeys*>& shares, int32_t none, int range, int64_t lo, int64_t hi,
                 int64_t width, int64_t negative, int32_t* ctx, int32_t* tgt) {
  const int64_t targets = 1 + negative, team = shares.size();
  auto write = [&](auto slot_of) {  // slot_of(id): the slot of the range's next sight, of word id
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t j = 0; j < width; ++j) {
        const int64_t id = contexts[i * width + j];
        ctx[i * width + j] = id < 0 ? none : slot_of(id);
      }
      for (int64_t k = 0; k < targets; ++k) {
        const int64_t id = k ? negatives[i * negative + k - 1] : centres[i];
        tgt[i * targets + k] = id < 0 ? none : slot_of(id);
      }
    }
  };
  if (team == 1) {  // one share: no class to look up
    const int32_t *number = shares[0]->numbered[range].data(), *slot = shares[0]->slot.data();
    write([&](int64_t) { return slot[*number++]; });
    return;
  }
  // Each class's share's slots, and its share's next number of this range (a class's entry points at its
  // share's cursor): no division by the team at a sight.
  const int32_t* slot_of[KEY_CLASSES];
  const int32_t** cursor_of[KEY_CLASSES];
  std::vector<const int32_t*> cursor(team);
  for (int64_t u = 0; u < team; ++u) cursor[u] = shares[u]->numbered[range].data();
  for (int64_t c = 0; c < KEY_CLASSES; ++c)
    slot_of[c] = shares[c % team]->slot.data(), cursor_of[c] = &cursor[c % team];
  write([&](int64_t id) {
    const int64_t c = id_class(id);
    return slot_of[c][*(*cursor_of[c])++];
  });
}

}  // namespace

extern "C" {

// batches.build on ids[0:length] read from stream position ``base``, centres in [lo, hi). The vocabulary is
// vocab.CountRuns': ``runs`` runs of equal counts, run r holding ids [starts[r], starts[r + 1]), with its
// keep_by_run, cum (runs + 1), weight and guide (guide_size) arrays, and keep_head: the keep_by_run value of
// each of the first ``head`` ids; the noise words drawn from its runs as a Noise (noise_first, noise_length and
// noise_step: vocab.CountRuns.noise_group(0, 1)'s, every word). Writes up to hi - lo centres:
// centres[n], contexts[n, 2 window] (-1: none), negatives[n, negative]; returns n. On ``threads`` threads:
// first each subsamples a range of the positions, then each builds the examples of a range of the kept
// occurrences, then copies them out after the ranges before it: the examples are the same on any thread count.
int64_t hvd_w2v_build(const int32_t* ids, int64_t length, int64_t base, int64_t lo, int64_t hi,
                      uint64_t keep_key, uint64_t window_key, uint64_t noise_key, int64_t window, int64_t span,
                      int64_t negative, int64_t runs, const int64_t* starts, const float* keep_by_run,
                      const float* keep_head, int64_t head,
                      const double* cum, const double* weight, const int64_t* guide, int64_t guide_size,
                      const int64_t* noise_first, const int64_t* noise_length, const int64_t* noise_step,
                      int64_t* centres, int64_t* contexts, int64_t* negatives, int64_t threads) {
  const int64_t team = length >= MIN_PARALLEL_POSITIONS ? std::max<int64_t>(threads, 1) : 1;
  const Noise noise{runs, noise_first, noise_length, noise_step, weight, cum, guide, guide_size};  // every word
  // The kept occurrences: position, id, sentence number (sentence ends seen up to and including it).
  std::vector<int64_t> kpos, kid, ksent;
  std::vector<Kept> part(team);
  std::vector<Examples> made(team);
  const int64_t width = 2 * window;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const int64_t t = team > 1 ? omp_get_thread_num() : 0;
    Kept& mine = part[t];
    mine.subsample(ids, length * t / team, length * (t + 1) / team, base, keep_key, runs, starts, keep_by_run,
                   keep_head, head);
#pragma omp barrier
#pragma omp single
    {
      int64_t kept = 0;
      for (const Kept& p : part) kept += p.pos.size();
      kpos.resize(kept), kid.resize(kept), ksent.resize(kept);
      for (int64_t r = 1; r < team; ++r) {  // where each range's occurrences and sentences start
        part[r].at = part[r - 1].at + part[r - 1].pos.size();
        part[r].sentences_before = part[r - 1].sentences_before + part[r - 1].sentence_ends;
      }
    }  // (the implicit barrier of single)
    for (size_t i = 0; i < mine.pos.size(); ++i) {
      kpos[mine.at + i] = mine.pos[i], kid[mine.at + i] = mine.id[i];
      ksent[mine.at + i] = mine.sentences_before + mine.sentence[i];
    }
#pragma omp barrier
    const int64_t kept = kpos.size();
    Examples& built = made[t];
    built.build(kpos, kid, ksent, kept * t / team, kept * (t + 1) / team, lo, hi, window_key, noise_key, window,
                span, negative, noise);
#pragma omp barrier
    int64_t at = 0;  // where this range's examples start among all: each thread copies its own out
    for (int64_t r = 0; r < t; ++r) at += made[r].centres.size();
    std::copy(built.centres.begin(), built.centres.end(), centres + at);
    std::copy(built.contexts.begin(), built.contexts.end(), contexts + at * width);
    std::copy(built.negatives.begin(), built.negatives.end(), negatives + at * negative);
  }
  int64_t n = 0;
  for (const Examples& e : made) n += e.centres.size();
  return n;
}

// hvd_w2v_build over several ranges at once (localsgd's shards of a super-step, each a few positions): range
// r's ids are ids[id_at[r], id_at[r + 1]), read from stream position bases[r], its centres [los[r], his[r]).
// Each range is built on one thread, as hvd_w2v_build builds it (the same examples), and the ranges are shared
// out over ``threads``; the examples are written range after range, and range r's count to counts[r]. So a
// node's threads build its shards' examples at once, where one call per shard would run on one thread at a
// time (a few positions are too few to split). Range r draws its noise words from table g = group_of[r] of
// the noise groups' (vocab.NoiseGroup, end to end): its runs [runs_at[g], runs_at[g + 1]) of group_first,
// group_length, group_step and group_weight, its cum from group_cum + runs_at[g] + g, its guide at group_guide +
// g guide_size. Returns the examples' total.
int64_t hvd_w2v_build_ranges(const int32_t* ids, const int64_t* id_at, const int64_t* bases, const int64_t* los,
                             const int64_t* his, int64_t ranges, uint64_t keep_key, uint64_t window_key,
                             uint64_t noise_key, int64_t window, int64_t span, int64_t negative, int64_t runs,
                             const int64_t* starts, const float* keep_by_run, const float* keep_head, int64_t head,
                             const double* cum, const double* weight, const int64_t* guide, int64_t guide_size,
                             const int64_t* group_of, const int64_t* runs_at, const int64_t* group_first,
                             const int64_t* group_length, const int64_t* group_step, const double* group_weight,
                             const double* group_cum, const int64_t* group_guide,
                             int64_t* centres, int64_t* contexts, int64_t* negatives, int64_t* counts,
                             int64_t threads) {
  std::vector<Examples> made(ranges);
  const int team = static_cast<int>(std::max<int64_t>(1, std::min(threads, ranges)));
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
  for (int64_t r = 0; r < ranges; ++r) {
    Kept kept;
    kept.subsample(ids + id_at[r], 0, id_at[r + 1] - id_at[r], bases[r], keep_key, runs, starts, keep_by_run,
                   keep_head, head);
    const int64_t g = group_of[r];  // range r's noise group, among the tables given
    made[r].build(kept.pos, kept.id, kept.sentence, 0, kept.pos.size(), los[r], his[r], window_key, noise_key,
                  window, span, negative,
                  Noise{runs_at[g + 1] - runs_at[g], group_first + runs_at[g], group_length + runs_at[g],
                        group_step + runs_at[g], group_weight + runs_at[g], group_cum + runs_at[g] + g,
                        group_guide + g * guide_size, guide_size});
  }
  const int64_t width = 2 * window;
  std::vector<int64_t> at(ranges + 1, 0);  // where each range's examples start among all
  for (int64_t r = 0; r < ranges; ++r) at[r + 1] = at[r] + (counts[r] = made[r].centres.size());
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
  for (int64_t r = 0; r < ranges; ++r) {  // copied out a range a thread: a node's examples are tens of MB
    const Examples& built = made[r];
    std::copy(built.centres.begin(), built.centres.end(), centres + at[r]);
    std::copy(built.contexts.begin(), built.contexts.end(), contexts + at[r] * width);
    std::copy(built.negatives.begin(), built.negatives.end(), negatives + at[r] * negative);
  }
  return at[ranges];
}

// loop.StepPlan.of(groups=1) for ``n`` centres (centres[n], contexts[n, width] with -1 for none,
// negatives[n, negative], -1 for none: hierarchical softmax's targets are a path, centres[] its root) on
// ``ranks`` ranks, ids below ``n_hot`` hot (owned by "rank" ``ranks``, last).
// Writes the unique keys (2 id + matrix) grouped by owner, within an owner class by class (id_class) and each
// class in first-sight order, to keys[U], each owner's count to owned[ranks + 1], the SGD-update count of each
// key to sgd[U], and the slots: ctx[n_pad, width] and tgt[n_pad, 1 + negative], "none" (the table's last row:
// U + 1 rounded up to row_bucket, less one) where there is no context word and in the rows past n (ids below
// 2^39, as loop.OWNER_SHIFT has them, and width below 2^24: see Sight). With ``shards`` (>= 1; fewer than
// 2^24) shards of the centres, [bounds[s], bounds[s + 1]) (from 0 to n), sgd[U] counts instead the shards that
// touch each key (localsgd's m). Returns U; keys and sgd need room for every occurrence. (numpy sorts the keys
// within an owner; no sum depends on that order.) On ``threads`` threads: each deals the sights of a range of
// the centres to the threads of their classes; each numbers the sights dealt to it, range by range (the step's
// order), and counts its keys by class and owner; once one thread has turned the counts into places, each puts
// its keys in them; then each writes the slots of its range. The same table, byte for byte, on any thread
// count.
int64_t hvd_w2v_step_plan(const int64_t* centres, const int64_t* contexts, const int64_t* negatives, int64_t n,
                          int64_t width, int64_t negative, int64_t ranks, int64_t n_hot, int64_t sg,
                          int64_t row_bucket, int64_t n_pad, int64_t* keys, int64_t* owned, int32_t* ctx,
                          int32_t* tgt, float* sgd, const int64_t* bounds, int64_t shards, int64_t threads) {
  const int64_t targets = 1 + negative;
  const int team = n >= MIN_PARALLEL_CENTRES ? static_cast<int>(std::max<int64_t>(threads, 1)) : 1;
  std::vector<ClassKeys*> shares(team);
  std::vector<Dealt*> dealing(team);
  int64_t unique = 0;
  int32_t none = 0;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const int t = team > 1 ? omp_get_thread_num() : 0;
    ClassKeys share(n / (4 * team), team, shards > 0);  // hashed keys: a few of the about 4 unique keys a centre
    shares[t] = &share;
    Dealt dealt;
    if (team == 1) {
      share.numbered[0].reserve(n * (width + targets));
      for_each_valued_sight(centres, contexts, negatives, 0, n, width, negative, sg, bounds, shards,
                            [&share](int64_t, int64_t key, int32_t value) { share.see(key, value, 0); });
    } else {  // each deals its range's sights to their classes' threads; each numbers those dealt to it in order
      dealing[t] = &dealt;
      dealt.deal(centres, contexts, negatives, n * t / team, n * (t + 1) / team, width, negative, sg, bounds, shards,
                 team);
#pragma omp barrier
      for (int r = 0; r < team; ++r) {
        share.numbered[r].reserve(dealing[r]->sights[t].size());
        for (const Sight& s : dealing[r]->sights[t]) share.see(s.key(), s.value(), r);
      }
    }
    count_owners(share, ranks, n_hot, team);
#pragma omp barrier
#pragma omp single
    {
      std::fill(owned, owned + ranks + 1, 0);
      for (int64_t o = 0; o <= ranks; ++o)
        for (int64_t c = 0; c < KEY_CLASSES; ++c) {  // ``unique`` ends as the count of all keys
          int64_t& next = shares[c % team]->next[c / team * (ranks + 1) + o];
          const int64_t here = next;
          next = unique;
          unique += here, owned[o] += here;
        }
      none = static_cast<int32_t>((unique + 1 + row_bucket - 1) / row_bucket * row_bucket - 1);
    }  // (the implicit barrier of single)
    place(share, keys, sgd);
#pragma omp barrier
    write_slots(centres, contexts, negatives, shares, none, t, n * t / team, n * (t + 1) / team, width, negative,
                ctx, tgt);
    if (t == team - 1) {  // the padding centres, past n
      std::fill(ctx + n * width, ctx + n_pad * width, none);
      std::fill(tgt + n * targets, tgt + n_pad * targets, none);
    }
#pragma omp barrier  // each thread's share and dealt sights live on its stack until all have read them
  }
  return unique;
}

}  // extern "C"
