// word2phrase's token passes (hvd_w2v/text/phrases.py), compiled: one rank's table of the words and pairs it
// reads, keyed by a 128-bit hash of each string, and three scans of a block of text in word2phrase.c's
// tokens (space, tab and newline separate; a carriage return is dropped; a newline is a token; a word keeps
// its first WORD_BYTES bytes; a pair's string ``a_b`` its first PAIR_BYTES; neither cut inside a UTF-8
// character):
//   hvd_w2v_phrases_count: each word and each pair of consecutive words (across line ends) counted;
//   hvd_w2v_phrases_joinable: whether each word may join the word before (its counts and the score);
//   hvd_w2v_phrases_write: the output, each word after '_' or ' '.
// The state between blocks (and from the rank before: hvd_w2v_phrases_start) is the token before and the
// word before. A token that reaches the end of a block with ``drop_last`` set is left out (word2phrase loses
// a last token with no separator after it). Called through ctypes by hvd_w2v/kernels/native.py.
//
// The key: phrases.py's key() computes the same two 64-bit hashes (the fallback, and the tests' check).
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int WORD_BYTES = 58, PAIR_BYTES = 59;
constexpr size_t AHEAD = 16;  // keys whose slots are asked of the memory ahead of their turn

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

struct Key {
  uint64_t a, b;  // b is odd: (0, 0) marks an empty slot
};

// Two hashes of the bytes, read 8 at a time as little-endian words (the last one padded with zeros): an
// xor-multiply's and a multiply-add's, each mixed a word and finalised, the second made odd.
inline Key key(const unsigned char* p, int64_t n) {
  uint64_t a = 0xCBF29CE484222325ULL ^ static_cast<uint64_t>(n), b = static_cast<uint64_t>(n);
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i < 8 ? n - i : 8);
    a = mix(a ^ w) * 0x100000001B3ULL;
    b = b * 0x9E3779B97F4A7C15ULL + w + 1;
  }
  return Key{mix(a), mix(b) | 1};
}

// A key and its count side by side: a lookup touches one place of memory (the table is far larger than the
// caches, so each lookup is a miss; two arrays cost two).
struct Slot {
  Key key;
  int64_t count;
};

// A table's slots in pages of their own (mmap): when the table grows, its old slots go back to the system at
// once, where the heap would keep them resident (glibc raises its mmap threshold after a large free, so the
// next tables of up to 32 MiB would come from the heap: the passes' peak grew by a third). Fresh pages read as
// zeros, an empty slot's bytes; they are touched at once (MAP_POPULATE), as a filled vector's were: faulted
// lazily at random, the two threads of one rank ran 1.4x slower. (text_kernel.cc's Zeroed is the same idea,
// grown by mremap; a header both include would escape native.build's hash of each kernel's source.)
class Slots {
 public:
  explicit Slots(size_t n) : n_(n) {
    void* p = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    p_ = static_cast<Slot*>(p);
  }
  ~Slots() { munmap(p_, bytes()); }
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;
  void swap(Slots& o) { std::swap(p_, o.p_), std::swap(n_, o.n_); }
  size_t size() const { return n_; }
  Slot& operator[](size_t i) { return p_[i]; }
  const Slot& operator[](size_t i) const { return p_[i]; }
  Slot* begin() { return p_; }
  Slot* end() { return p_ + n_; }
  const Slot* begin() const { return p_; }
  const Slot* end() const { return p_ + n_; }

 private:
  size_t bytes() const { return n_ * sizeof(Slot); }
  Slot* p_;
  size_t n_;
};

struct Table {
  Slots slots;
  int64_t used = 0;
  // the scans' state: the token before (0 none, 1 a newline, 2 a word) and the word before, if any
  int before = 0;
  bool has_word = false;
  std::string word;

  explicit Table(int64_t keys) : slots(slots_for(keys)) {}
  static size_t slots_for(int64_t keys) {  // the least that holds ``keys`` at most half full, 2^16 at least
    size_t n = 1 << 16;
    while (n < 2 * static_cast<size_t>(keys)) n *= 2;
    return n;
  }

  void prefetch(Key k) const { __builtin_prefetch(&slots[k.a & (slots.size() - 1)]); }
  int64_t find(Key k) const {  // k's slot, or the empty one where it would go
    const uint64_t mask = slots.size() - 1;
    for (uint64_t s = k.a & mask;; s = (s + 1) & mask)
      if ((slots[s].key.a == k.a && slots[s].key.b == k.b) || slots[s].key.b == 0) return static_cast<int64_t>(s);
  }
  void add(Key k, int64_t n = 1) {
    int64_t s = find(k);
    if (slots[s].key.b == 0) {
      slots[s].key = k, ++used;
      if (2 * used > static_cast<int64_t>(slots.size())) grow(), s = find(k);
    }
    slots[s].count += n;
  }
  // Adds each of ``ks``: a slot asked of the memory AHEAD keys before it is needed, so that the misses of a
  // table far larger than the caches overlap instead of each waiting in turn.
  void add_all(const std::vector<Key>& ks) {
    for (size_t i = 0; i < ks.size(); ++i) {
      if (i + AHEAD < ks.size()) prefetch(ks[i + AHEAD]);
      add(ks[i]);
    }
  }
  int64_t count(Key k) const {
    const int64_t s = find(k);
    return slots[s].key.b ? slots[s].count : 0;
  }
  void grow() {  // twice the slots, the entries placed anew
    Slots old(slots.size() * 2);
    old.swap(slots);  // (now the old ones)
    for (const Slot& e : old)
      if (e.key.b) slots[find(e.key)] = e;
  }
};

// The share of ``parts`` a key falls in: the high half of its second hash scaled, as vocab.hash_owner scales
// the first's for the rank (phrases.share_of; independent of the owner and of the slot, the first's bits).
inline int64_t share_of(Key k, int64_t parts) {
  return static_cast<int64_t>(((k.b >> 32) * static_cast<uint64_t>(parts)) >> 32);
}

// Where a string of more than ``limit`` bytes is cut: at ``limit``, word2phrase.c's, or before it where that
// would split a UTF-8 character (``next``, the first byte left out, continues one), so that cut text stays
// UTF-8; at ``limit`` still where no character starts before it (the text is not UTF-8 there).
inline int64_t cut(const unsigned char* s, unsigned char next, int64_t limit) {
  int64_t at = limit;
  for (unsigned char c = next; at > 0 && (c & 0xC0) == 0x80; c = s[--at]) {
  }
  return at > 0 ? at : limit;
}

// The pair string of the word before and ``w`` (n bytes), cut to PAIR_BYTES (:func:`cut`), into ``out``; its
// length.
inline int64_t pair(const std::string& before, const unsigned char* w, int64_t n, unsigned char* out) {
  int64_t m = 0;
  for (size_t i = 0; i < before.size() && m < PAIR_BYTES; ++i) out[m++] = before[i];
  if (m < PAIR_BYTES) out[m++] = '_';
  for (int64_t i = 0; i < n && m < PAIR_BYTES; ++i) out[m++] = w[i];
  const int64_t whole = static_cast<int64_t>(before.size()) + 1 + n;
  if (whole <= PAIR_BYTES) return m;
  const int64_t b = static_cast<int64_t>(before.size());  // the first byte left out: of before, '_' or w
  const unsigned char next = PAIR_BYTES < b ? before[PAIR_BYTES] : PAIR_BYTES == b ? '_' : w[PAIR_BYTES - b - 1];
  return cut(out, next, PAIR_BYTES);
}

// Calls ``each(kind, word, length)`` for the tokens of text[0, n): kind 1 a newline, 2 a word (its first
// WORD_BYTES bytes, carriage returns dropped); a token cut by the end is left out with ``drop_last``.
template <class Each>
void scan(const unsigned char* text, int64_t n, bool drop_last, Each&& each) {
  unsigned char word[WORD_BYTES + 1];  // a byte past the cut: whether it splits a character (:func:`cut`)
  int64_t length = 0;
  bool in_word = false;
  auto kept = [&]() { return length > WORD_BYTES ? cut(word, word[WORD_BYTES], WORD_BYTES) : length; };
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char c = text[i];
    if (c == '\r') continue;
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) each(2, word, kept()), in_word = false, length = 0;
      if (c == '\n') each(1, word, 0);
      continue;
    }
    in_word = true;
    if (length <= WORD_BYTES) word[length++] = c;
  }
  if (in_word && !drop_last) each(2, word, kept());
}

}  // namespace

extern "C" {

// A table sized for ``keys`` keys (it grows past them; 0: a small one).
void* hvd_w2v_phrases_new(int64_t keys) { return new Table(keys); }

void hvd_w2v_phrases_free(void* t) { delete static_cast<Table*>(t); }

// The state before the next block: the token before (0 none, 1 a newline, 2 a word) and the word before
// (``n`` bytes; n < 0: none, the text's first word is next).
void hvd_w2v_phrases_start(void* t, int64_t before, const unsigned char* word, int64_t n) {
  Table& T = *static_cast<Table*>(t);
  T.before = static_cast<int>(before);
  T.has_word = n >= 0;
  T.word.assign(reinterpret_cast<const char*>(word), n >= 0 ? n : 0);
}

// word2phrase's first pass over a block: each word and its pair with the word before counted (the text's
// first word has none: word2phrase.c pairs it with an uninitialised buffer, a string no text holds). Returns
// the words.
int64_t hvd_w2v_phrases_count(void* t, const unsigned char* text, int64_t n, int64_t drop_last) {
  Table& T = *static_cast<Table*>(t);
  unsigned char joined[PAIR_BYTES];
  std::vector<Key> seen;  // the block's keys, a word's then its pair's, added once all are known
  seen.reserve(n / 3 + 2);
  int64_t words = 0;
  scan(text, n, drop_last, [&](int kind, const unsigned char* w, int64_t m) {
    T.before = kind;
    if (kind == 1) return;
    ++words;
    seen.push_back(key(w, m));
    if (T.has_word) seen.push_back(key(joined, pair(T.word, w, m, joined)));
    T.word.assign(reinterpret_cast<const char*>(w), m), T.has_word = true;
  });
  T.add_all(seen);
  return words;
}

int64_t hvd_w2v_phrases_size(void* t) { return static_cast<Table*>(t)->used; }

// The table's keys (two uint64 each) and counts, in slot order.
void hvd_w2v_phrases_export(void* t, uint64_t* keys, int64_t* counts) {
  const Table& T = *static_cast<Table*>(t);
  int64_t e = 0;
  for (const Slot& s : T.slots)
    if (s.key.b) keys[2 * e] = s.key.a, keys[2 * e + 1] = s.key.b, counts[e++] = s.count;
}

// The counts, in export order, that the table holds from now on (the owners' sums, 0 below min_count): the
// keys of a count keep it, in a table sized for them alone (those of 0 answer 0 as keys never seen do), which
// the joinable pass's lookups then meet in far fewer places of memory.
void hvd_w2v_phrases_set(void* t, const int64_t* counts) {
  Table& T = *static_cast<Table*>(t);
  int64_t e = 0, kept = 0;
  for (Slot& s : T.slots)
    if (s.key.b) s.count = counts[e++], kept += s.count != 0;
  Slots old(Table::slots_for(kept));
  old.swap(T.slots);  // (now the old ones)
  for (const Slot& s : old)
    if (s.key.b && s.count) T.slots[T.find(s.key)] = s;
  T.used = kept;
}

// word2phrase's second pass over a block: out[i] = 1 where word i may join the word before: that one is the
// token right before it, and both words and their pair are counted at least min_count times, and
// (count(ab) - min_count) / count(a) / count(b) x words passes the threshold, in float32 as word2phrase.c
// computes it. Returns the words.
int64_t hvd_w2v_phrases_joinable(void* t, const unsigned char* text, int64_t n, int64_t drop_last, int64_t min_count,
                                 float threshold, float words_f, uint8_t* out) {
  Table& T = *static_cast<Table*>(t);
  unsigned char joined[PAIR_BYTES];
  // First every word's key and its pair's (none where the token before is not a word), then their counts
  // looked up with the slots asked of the memory ahead (Table::add_all's reason), then the scores.
  std::vector<Key> seen;
  seen.reserve(n / 3 + 2);
  const bool after_word = T.before == 2;
  if (after_word)
    seen.push_back(key(reinterpret_cast<const unsigned char*>(T.word.data()), static_cast<int64_t>(T.word.size())));
  scan(text, n, drop_last, [&](int kind, const unsigned char* w, int64_t m) {
    if (kind == 1) {
      T.before = 1;
      return;
    }
    seen.push_back(key(w, m));
    seen.push_back(T.before == 2 ? key(joined, pair(T.word, w, m, joined)) : Key{0, 0});
    T.before = 2;
    T.word.assign(reinterpret_cast<const char*>(w), m), T.has_word = true;
  });
  std::vector<int64_t> counts(seen.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    if (i + AHEAD < seen.size() && seen[i + AHEAD].b) T.prefetch(seen[i + AHEAD]);
    counts[i] = seen[i].b ? T.count(seen[i]) : -1;  // -1: the token before is not a word
  }
  int64_t words = 0, pa = after_word ? counts[0] : 0;
  for (size_t i = after_word; i < seen.size(); i += 2) {
    const int64_t pb = counts[i], pab = counts[i + 1];
    bool ok = false;
    if (pab >= min_count && pa >= min_count && pb >= min_count) {  // (pab -1: no word before)
      const float score = static_cast<float>(pab - min_count) / static_cast<float>(pa) / static_cast<float>(pb) *
                          words_f;
      ok = score > threshold;
    }
    out[words++] = ok;
    pa = pb;
  }
  return words;
}

// word2phrase's output of a block: a newline as it is, each word after '_' where joins[i] (word i joins the
// word before), else after ' '. ``out`` holds 2 n bytes; returns the bytes written.
int64_t hvd_w2v_phrases_write(const unsigned char* text, int64_t n, int64_t drop_last, const uint8_t* joins,
                              unsigned char* out) {
  int64_t at = 0, words = 0;
  scan(text, n, drop_last, [&](int kind, const unsigned char* w, int64_t m) {
    if (kind == 1) {
      out[at++] = '\n';
      return;
    }
    out[at++] = joins[words++] ? '_' : ' ';
    std::memcpy(out + at, w, m);
    at += m;
  });
  return at;
}

// An owner's sums: counts[i] added to keys[i] (two uint64 each), for the i in [0, n) whose key falls in the
// table's share ``part`` of ``parts`` (:func:`share_of`; an owner's keys in ``parts`` tables, each summed on a
// thread of its own, every one reading all the keys).
void hvd_w2v_phrases_sum(void* t, const uint64_t* keys, const int64_t* counts, int64_t n, int64_t part,
                         int64_t parts) {
  Table& T = *static_cast<Table*>(t);
  for (int64_t i = 0; i < n; ++i) {
    const Key k{keys[2 * i], keys[2 * i + 1]};
    if (share_of(k, parts) != part) continue;
    if (i + static_cast<int64_t>(AHEAD) < n) T.prefetch(Key{keys[2 * (i + AHEAD)], keys[2 * (i + AHEAD) + 1]});
    T.add(k, counts[i]);
  }
}

// An owner's answers: out[i] = the sum of keys[i], or 0 where it is below min_count (or not there), for the i
// whose key falls in the table's share ``part`` of ``parts`` (the others' out[i] left as they are).
void hvd_w2v_phrases_lookup(void* t, const uint64_t* keys, int64_t n, int64_t min_count, int64_t* out, int64_t part,
                            int64_t parts) {
  const Table& T = *static_cast<Table*>(t);
  for (int64_t i = 0; i < n; ++i) {
    const Key k{keys[2 * i], keys[2 * i + 1]};
    if (share_of(k, parts) != part) continue;
    if (i + static_cast<int64_t>(AHEAD) < n) T.prefetch(Key{keys[2 * (i + AHEAD)], keys[2 * (i + AHEAD) + 1]});
    const int64_t c = T.count(k);
    out[i] = c >= min_count ? c : 0;
  }
}

// The keys whose sum is at least min_count.
int64_t hvd_w2v_phrases_kept(void* t, int64_t min_count) {
  const Table& T = *static_cast<Table*>(t);
  int64_t kept = 0;
  for (const Slot& s : T.slots) kept += s.key.b && s.count >= min_count;
  return kept;
}

// key() of a string, for the tests.
void hvd_w2v_phrases_key(const unsigned char* p, int64_t n, uint64_t* out) {
  const Key k = key(p, n);
  out[0] = k.a, out[1] = k.b;
}

}  // extern "C"
