// The text passes' per-token work, as plain loops on the rank's threads: checking a block (NUL bytes, UTF-8),
// cutting it into tokens (runs of bytes other than corpus.WHITESPACE: space, \t, \n, \v, \f, \r, as Python's
// bytes.split() and word2vec.c), counting them (the vocabulary's partial and owned counts) and turning them
// into ids (the encoding). Python keeps the reading, the rounds and every collective (vocab.py, encode.py);
// its own loops there are the fallback and compute the same bytes (tests/test_text_kernel.py).
//   hvd_w2v_check_text: the first NUL byte, else the first byte that is not valid UTF-8 (the offset Python's
//     strict decoder reports: where the longest valid prefix ends).
//   Counts (hvd_w2v_counts_*): word -> count tables, one per thread, that a block's tokens are added to and
//     that a round exports ordered by the owner of the tables' quick hash (quick_owner), or by hash owner
//     (vocab.hash_owner of vocab.hash64: BLAKE2b, 8-byte digest); on more than one thread, each thread also
//     counts the words it meets first in a table of its own, added to the others when the counts are read;
//     on one rank a block's tokens can also be numbered as they are counted (hvd_w2v_counts_add_numbered),
//     numbers that hvd_w2v_remap turns into ids once the vocabulary is known: the encoding in the same pass.
//   Lookup (hvd_w2v_lookup_*): a hash owner's word -> id, asked for many words at once.
//   Scan (hvd_w2v_scan_*): one block of the encoding on several ranks: its tokens as numbers of its distinct
//     words and its newlines, the distinct words ordered by hash owner (to ask their ids), then the block's
//     ids. On one rank, hvd_w2v_encode_local looks each token up as it finds it.
// Threads split a block at whitespace bytes (a token belongs to the part that holds its first byte); no
// table is written by two threads (a count's tables are split by hash or a thread's own, a scan's numbers
// renumbered after), so no count, id or error offset depends on the thread count.
// Called through ctypes by hvd_w2v/kernels/native.py, which checks the arrays first; built there with g++ -fopenmp.
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <charconv>
#include <parallel/algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <utility>
#include <vector>

namespace {

// -- BLAKE2b with an 8-byte digest (RFC 7693), the hash of vocab.hash64 --------------------------------------

constexpr uint64_t IV[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                            0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                            0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};
constexpr uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

// Four words' states at once, one in each lane of a vector (AVX2 or wider where g++ targets it): hash64x4.
typedef uint64_t Lanes __attribute__((vector_size(32)));
inline Lanes rotr(Lanes x, int n) { return (x >> n) | (x << (64 - n)); }

// BLAKE2b's twelve rounds on the work vector v[16] with the message block m[16]: W is uint64_t, or Lanes
// for four blocks at once.
template <class W>
void rounds(W* v, const W* m) {
#define HVD_G(a, b, c, d, x, y)  \
  a += b + (x);                  \
  d = rotr(d ^ a, 32);           \
  c += d;                        \
  b = rotr(b ^ c, 24);           \
  a += b + (y);                  \
  d = rotr(d ^ a, 16);           \
  c += d;                        \
  b = rotr(b ^ c, 63);
  for (int r = 0; r < 12; ++r) {
    const uint8_t* s = SIGMA[r];
    HVD_G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
    HVD_G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
    HVD_G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
    HVD_G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
    HVD_G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
    HVD_G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
    HVD_G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
    HVD_G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
  }
#undef HVD_G
}

void compress(uint64_t* h, const unsigned char* block, uint64_t t, bool last) {
  uint64_t m[16], v[16];
  std::memcpy(m, block, 128);  // little-endian words (x86, the machines this builds for)
  for (int i = 0; i < 8; ++i) v[i] = h[i], v[8 + i] = IV[i];
  v[12] ^= t;
  if (last) v[14] = ~v[14];
  rounds(v, m);
  for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[8 + i];
}

// The first word of the state of hash64 and hash64x4: the parameter block's, no key, an 8-byte digest.
constexpr uint64_t H0 = IV[0] ^ 0x01010000ULL ^ 8;

// hashlib.blake2b(word, digest_size=8), read as a little-endian integer.
uint64_t hash64(const unsigned char* p, uint64_t n) {
  uint64_t h[8];
  for (int i = 0; i < 8; ++i) h[i] = IV[i];
  h[0] = H0;
  uint64_t done = 0;
  while (n - done > 128) {
    done += 128;
    compress(h, p + done - 128, done, false);
  }
  unsigned char last[128] = {0};
  std::memcpy(last, p + done, n - done);
  compress(h, last, n, true);
  return h[0];
}

// Four words' hash64 at once, a lane each (compress on Lanes). Words of at most 128 bytes (one block);
// ``out``[l] = hash64(p[l], n[l]).
void hash64x4(const unsigned char* const* p, const uint64_t* n, uint64_t* out) {
  unsigned char block[4][128] = {};
  for (int l = 0; l < 4; ++l) std::memcpy(block[l], p[l], n[l]);
  Lanes m[16], v[16];
  for (int i = 0; i < 16; ++i)
    for (int l = 0; l < 4; ++l) std::memcpy(reinterpret_cast<uint64_t*>(&m[i]) + l, block[l] + 8 * i, 8);
  const Lanes first = Lanes{} + H0;
  v[0] = first;
  for (int i = 1; i < 8; ++i) v[i] = Lanes{} + IV[i];
  for (int i = 0; i < 8; ++i) v[8 + i] = Lanes{} + IV[i];
  v[12] ^= Lanes{n[0], n[1], n[2], n[3]};
  v[14] = ~v[14];  // the last block
  rounds(v, m);
  const Lanes h = first ^ v[0] ^ v[8];
  for (int l = 0; l < 4; ++l) out[l] = h[l];
}

// out[i] = hash64 of word(i) (a pair: its bytes, its length) for i in [0, n), on ``threads`` threads: four
// words of at most 128 bytes at a time (hash64x4), any other alone. The rounds' and the encoding's owners
// hash every word they send, so this is most of a round's work on a flat vocabulary.
template <class Word>
void hash_all(int64_t n, Word word, uint64_t* out, int64_t threads) {
  const int64_t groups = (n + 3) / 4;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && n > 1024)
  for (int64_t g = 0; g < groups; ++g) {
    const unsigned char* p[4];
    uint64_t len[4], h[4];
    int64_t at[4];
    int k = 0;
    for (int64_t i = 4 * g; i < std::min(n, 4 * g + 4); ++i) {
      const auto w = word(i);
      if (w.second > 128) {
        out[i] = hash64(w.first, w.second);
      } else {
        p[k] = w.first, len[k] = w.second, at[k] = i;
        ++k;
      }
    }
    if (!k) continue;
    for (int l = k; l < 4; ++l) p[l] = p[0], len[l] = len[0];  // a spare lane hashes the first word again
    hash64x4(p, len, h);
    for (int l = 0; l < k; ++l) out[at[l]] = h[l];
  }
}

// vocab.hash_owner: ranks own equal ranges of hashes.
inline int64_t hash_owner(uint64_t h, int64_t ranks) {
  return static_cast<int64_t>(((h >> 32) * static_cast<uint64_t>(ranks)) >> 32);
}

// Where each of n words laid end to end by ``lengths`` starts, and (last) where they end.
inline std::vector<int64_t> starts(const int64_t* lengths, int64_t n) {
  std::vector<int64_t> start(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) start[i + 1] = start[i] + lengths[i];
  return start;
}

// -- tokens ---------------------------------------------------------------------------------------------------

struct Whitespace {
  bool is[256] = {};
  Whitespace() {
    for (unsigned char c : {' ', '\t', '\n', '\v', '\f', '\r'}) is[c] = true;
  }
};
const Whitespace WS;

// Where ``parts`` threads split text[0, n): cut k at or after k n / parts, just after a whitespace byte (or
// at n), so that no token is cut. cuts[0] = 0, cuts[parts] = n.
std::vector<int64_t> cuts(const unsigned char* text, int64_t n, int64_t parts) {
  std::vector<int64_t> at(parts + 1, n);
  at[0] = 0;
  for (int64_t k = 1; k < parts; ++k) {
    int64_t p = std::max(at[k - 1], n * k / parts);
    while (p < n && p > 0 && !WS.is[text[p - 1]]) ++p;
    at[k] = p;
  }
  return at;
}

// Whitespace bytes (WS) and newlines among text[0, n) (n <= 64) as bit masks, bit i for byte i; bits from n
// on are whitespace and not newlines (the text ends there).
inline void masks(const unsigned char* p, int64_t n, uint64_t* ws, uint64_t* nl) {
#if defined(__AVX512BW__)
  if (n == 64) {
    const __m512i b = _mm512_loadu_si512(p);
    *ws = _mm512_cmpeq_epi8_mask(b, _mm512_set1_epi8(' ')) |
          _mm512_cmple_epu8_mask(_mm512_sub_epi8(b, _mm512_set1_epi8('\t')), _mm512_set1_epi8('\r' - '\t'));
    *nl = _mm512_cmpeq_epi8_mask(b, _mm512_set1_epi8('\n'));
    return;
  }
#elif defined(__AVX2__)
  if (n == 64) {
    uint64_t w[2], l[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
      const __m256i x = _mm256_sub_epi8(b, _mm256_set1_epi8('\t'));
      const __m256i in = _mm256_cmpeq_epi8(_mm256_min_epu8(x, _mm256_set1_epi8('\r' - '\t')), x);
      const __m256i space = _mm256_cmpeq_epi8(b, _mm256_set1_epi8(' '));
      w[h] = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_or_si256(in, space)));
      l[h] = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, _mm256_set1_epi8('\n'))));
    }
    *ws = w[0] | w[1] << 32;
    *nl = l[0] | l[1] << 32;
    return;
  }
#endif
  uint64_t w = n < 64 ? ~0ULL << n : 0, l = 0;
  for (int64_t i = 0; i < n; ++i) {
    w |= static_cast<uint64_t>(WS.is[p[i]]) << i;
    l |= static_cast<uint64_t>(p[i] == '\n') << i;
  }
  *ws = w;
  *nl = l;
}

// Calls ``token(start, length)`` for each token of text[lo, hi) and ``newline()`` for each newline byte, in
// order. Returns the tokens. 64 bytes at a time: their whitespace as a bit mask, a token starting where a
// whitespace byte is followed by another and ending where the reverse.
template <class Token, class Newline>
int64_t tokens(const unsigned char* text, int64_t lo, int64_t hi, Token token, Newline newline) {
  int64_t count = 0, start = lo;
  uint64_t before = 1;  // whether the byte before the chunk is whitespace (text[lo - 1] is taken to be)
  for (int64_t base = lo; base < hi; base += 64) {
    uint64_t ws, nl;
    masks(text + base, std::min<int64_t>(64, hi - base), &ws, &nl);
    const uint64_t edges = ws ^ (ws << 1 | before);  // byte i differs from byte i - 1
    before = ws >> 63;
    for (uint64_t events = edges | nl; events; events &= events - 1) {
      const int i = __builtin_ctzll(events);
      const uint64_t bit = uint64_t(1) << i;
      if (!(ws & bit)) {
        start = base + i;
      } else {
        if (edges & bit) {
          token(start, base + i - start);
          ++count;
        }
        if (nl & bit) newline();
      }
    }
  }
  if (!before) {  // the last chunk was whole and ends in a token
    token(start, hi - start);
    ++count;
  }
  return count;
}

// A word of at most 8 bytes as one integer (zero-padded): such words are kept in their slot.
inline uint64_t inline_word(const unsigned char* p, uint64_t n) {
  uint64_t x = 0;
  std::memcpy(&x, p, n);
  return x;
}

// The same where 8 bytes from ``p`` may be read (before ``end``): one load and a mask, no copy of n bytes.
inline uint64_t inline_word(const unsigned char* p, uint64_t n, const unsigned char* end) {
  if (n > 8) return 0;
  if (p + 8 > end) return inline_word(p, n);
  uint64_t x;
  std::memcpy(&x, p, 8);
  return n == 8 ? x : x & ((1ULL << (8 * n)) - 1);
}

// Whether words a and b of n > 8 bytes are the same: eight bytes at a time, the last eight overlapping the
// ones before (no call to memcmp, no byte read past either word).
inline bool same_long_word(const unsigned char* a, const unsigned char* b, uint64_t n) {
  uint64_t x, y;
  for (uint64_t i = 0; i + 8 < n; i += 8) {
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    if (x != y) return false;
  }
  std::memcpy(&x, a + n - 8, 8);
  std::memcpy(&y, b + n - 8, 8);
  return x == y;
}

// A quick hash for the tables (BLAKE2b only where an owner must be found).
// ``x``: inline_word of the word when it has at most 8 bytes.
inline uint64_t quick_hash(const unsigned char* p, uint64_t n, uint64_t x) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xC2B2AE3D27D4EB4FULL);
  if (n > 8) {
    for (; n > 8; p += 8, n -= 8) {
      uint64_t y;
      std::memcpy(&y, p, 8);
      h = (h ^ y) * 0xFF51AFD7ED558CCDULL;
      h ^= h >> 32;
    }
    x = inline_word(p, n);
  }
  h = (h ^ x) * 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 29;
  h *= 0xFF51AFD7ED558CCDULL;
  return h ^ (h >> 32);
}
inline uint64_t quick_hash(const unsigned char* p, uint64_t n) {
  return quick_hash(p, n, n <= 8 ? inline_word(p, n) : 0);
}

// An array of ``T`` (trivially copyable) that starts zeroed: from 2 MiB up an anonymous mapping, aligned to and
// asked for in huge pages (2 MiB, transparent, by madvise: a table's slots are looked up at random, so on 4 KiB
// pages nearly every look-up of a table larger than the caches would also miss the TLB); smaller, from calloc.
// grow() keeps the elements and adds zeroed ones; a mapping grows by mremap, which moves its pages instead of
// copying them into new ones. So a table doubled k times first touches its final bytes once, where a copy
// first touched about twice as many: on a virtual machine whose host backs a page when it is first touched, those
// touches cost more than the copies themselves (hvd_w2v/bench/README.md, "Tables grown in place").
template <class T>
class Zeroed {
 public:
  explicit Zeroed(size_t n) : data_(allocate(n)), n_(n) {}
  ~Zeroed() { release(data_, n_); }
  Zeroed(const Zeroed&) = delete;
  Zeroed& operator=(const Zeroed&) = delete;
  Zeroed(Zeroed&& other) noexcept : data_(other.data_), n_(other.n_) { other.data_ = nullptr, other.n_ = 0; }
  Zeroed& operator=(Zeroed&& other) noexcept {
    swap(other);
    return *this;
  }

  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + n_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + n_; }
  void swap(Zeroed& other) {
    std::swap(data_, other.data_);
    std::swap(n_, other.n_);
  }

  // ``n`` elements (n >= size()): the first size() as they were, the others zero.
  void grow(size_t n) {
    if (n <= n_) return;
    if (!mapped(n_)) {
      T* p = allocate(n);
      std::memcpy(p, data_, n_ * sizeof(T));
      release(data_, n_);
      data_ = p, n_ = n;
      return;
    }
    const size_t before = bytes(n_), after = bytes(n);
    void* p = mremap(data_, before, after, 0);  // in place, where the addresses after it are free
    if (p == MAP_FAILED) {  // else its pages moved to the start of a new aligned range
      void* to = region(after);
      p = mremap(data_, before, after, MREMAP_MAYMOVE | MREMAP_FIXED, to);
      if (p == MAP_FAILED) {
        munmap(to, after);
        throw std::bad_alloc();
      }
    }
    madvise(static_cast<char*>(p) + before, after - before, MADV_HUGEPAGE);  // advice only
    data_ = static_cast<T*>(p), n_ = n;
  }

 private:
  static constexpr size_t HUGE_PAGE = size_t(1) << 21;
  T* data_;
  size_t n_;

  static bool mapped(size_t n) { return n * sizeof(T) >= HUGE_PAGE; }
  static size_t bytes(size_t n) { return (n * sizeof(T) + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; }
  // A zero anonymous mapping of ``size`` bytes (a multiple of HUGE_PAGE) that starts on a huge page.
  static void* region(size_t size) {
    char* p = static_cast<char*>(mmap(nullptr, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                      -1, 0));
    if (p == MAP_FAILED) throw std::bad_alloc();
    char* q = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
    if (q > p) munmap(p, q - p);
    munmap(q + size, p + HUGE_PAGE - q);
    return q;
  }
  static T* allocate(size_t n) {
    if (!mapped(n)) {
      void* p = std::calloc(std::max<size_t>(n, 1), sizeof(T));
      if (!p) throw std::bad_alloc();
      return static_cast<T*>(p);
    }
    void* p = region(bytes(n));
    madvise(p, bytes(n), MADV_HUGEPAGE);  // advice only: without it, 4 KiB pages
    return static_cast<T*>(p);
  }
  static void release(T* p, size_t n) {
    if (mapped(n))
      munmap(p, bytes(n));
    else
      std::free(p);
  }
};

// Words (bytes) -> int64 values, by open addressing (linear probing) over a power-of-two array of slots,
// grown twofold whenever it passes two thirds full. A slot holds all that a look-up reads: the word's hash,
// length, value and the word itself when it has at most 8 bytes (else where its bytes start in ``bytes``), so
// that finding a short word costs one cache miss, and callers ask for the slot ahead of use (prefetch).
// Words are numbered in order of first sight. 32 B a slot (48 to 96 B a word) + 4 B + the bytes of longer
// words. Aligned to a cache line: the threads' tables lie side by side in Counts, each written by its own.
class alignas(64) Table {
 public:
  struct Slot {
    uint64_t hash;
    uint64_t word;  // the word itself (length <= 8), or where its bytes start in ``bytes``
    uint32_t length;  // 0: empty (tokens are never empty)
    uint32_t number;  // order of first sight
    int64_t value;
  };

  Table() : slots_(16), mask_(15) {}

  int64_t size() const { return where_.size(); }
  int64_t byte_size() const { return bytes_total_; }

  // Where ``word`` of hash ``h`` is or would go: ask for it some look-ups ahead.
  void prefetch(uint64_t h) const { __builtin_prefetch(&slots_[h & mask_]); }

  // The slot of ``word`` (hash ``h``, ``x`` = inline_word or 0), added with value 0 when new while the table
  // holds fewer than ``most`` words (growing as slot_of does); else null.
  Slot* bounded_slot(const unsigned char* word, uint32_t n, uint64_t h, uint64_t x, int64_t most) {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (!slot.length) return size() < most ? &slot_of(word, n, h, x, 0) : nullptr;
      if (slot.hash == h && slot.length == n &&
          (n <= 8 ? slot.word == x : same_long_word(bytes_.data() + slot.word, word, n)))
        return &slot;
    }
  }

  // The value of ``word`` (hash ``h``), added as ``init`` when new.
  int64_t& at(const unsigned char* word, uint32_t n, uint64_t h, int64_t init = 0) {
    return at(word, n, h, n <= 8 ? inline_word(word, n) : 0, init);
  }
  // The same with ``x`` = inline_word(word) (0 for a longer word).
  int64_t& at(const unsigned char* word, uint32_t n, uint64_t h, uint64_t x, int64_t init) {
    return slot_of(word, n, h, x, init).value;
  }
  // The same, its whole slot (its number too).
  Slot& slot_of(const unsigned char* word, uint32_t n, uint64_t h, uint64_t x, int64_t init) {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (!slot.length) {
        if (3 * (where_.size() + 1) > 2 * slots_.size()) {
          grow();
          return slot_of(word, n, h, x, init);
        }
        slot.hash = h;
        slot.length = n;
        slot.number = static_cast<uint32_t>(where_.size());
        slot.value = init;
        if (n <= 8) {
          slot.word = x;
        } else {
          slot.word = bytes_.size();
          bytes_.insert(bytes_.end(), word, word + n);
        }
        bytes_total_ += n;
        where_.push_back(i);
        return slot;
      }
      if (slot.hash == h && slot.length == n &&
          (n <= 8 ? slot.word == x : same_long_word(bytes_.data() + slot.word, word, n)))
        return slot;
    }
  }
  int64_t& at(const unsigned char* word, uint32_t n, int64_t init = 0) {
    return at(word, n, quick_hash(word, n), init);
  }

  // The value of ``word`` (hash ``h``), or ``missing``.
  int64_t find(const unsigned char* word, uint32_t n, uint64_t h, int64_t missing) const {
    return find(word, n, h, n <= 8 ? inline_word(word, n) : 0, missing);
  }
  int64_t find(const unsigned char* word, uint32_t n, uint64_t h, uint64_t x, int64_t missing) const {
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (!slot.length) return missing;
      if (slot.hash == h && slot.length == n &&
          (n <= 8 ? slot.word == x : same_long_word(bytes_.data() + slot.word, word, n)))
        return slot.value;
    }
  }

  // Calls ``each(slot)`` for every word, in the order of the slots (a pass over memory, where the order of
  // first sight would jump about).
  template <class Each>
  void for_each(Each each) const {
    for (const Slot& slot : slots_)
      if (slot.length) each(slot);
  }

  // Word number k: its slot, and its bytes.
  const Slot& slot(int64_t k) const { return slots_[where_[k]]; }
  const unsigned char* word(const Slot& slot) const {
    return slot.length <= 8 ? reinterpret_cast<const unsigned char*>(&slot.word) : bytes_.data() + slot.word;
  }

  // Room for ``n`` words, ``bytes`` of them in words over 8 bytes, made at once in an empty table: no growth,
  // no spare capacity beyond the slots' power of two.
  void reserve(int64_t n, int64_t bytes) {
    if (!where_.empty()) return;
    uint64_t size = slots_.size();
    while (3 * static_cast<uint64_t>(n) > 2 * size) size *= 2;
    if (size > slots_.size()) {
      Slots(size).swap(slots_);
      mask_ = size - 1;
    }
    where_.reserve(n);
    bytes_.reserve(bytes);
  }

  // Empty, keeping the memory of its slots for the next block or round: the words' slots alone when they are
  // few, else a pass over all of them (in a table larger than the caches, a look-up each costs more).
  void clear() {
    if (where_.size() * 8 < slots_.size()) {
      for (uint64_t i : where_) slots_[i].length = 0;
    } else {
      std::fill(slots_.begin(), slots_.end(), Slot{});
    }
    where_.clear();
    bytes_.clear();
    bytes_total_ = 0;
  }

  // Empty, its memory returned.
  void release() {
    Slots(16).swap(slots_);
    mask_ = 15;
    std::vector<uint64_t>().swap(where_);
    std::vector<unsigned char>().swap(bytes_);
    bytes_total_ = 0;
  }

 private:
  using Slots = Zeroed<Slot>;
  Slots slots_;
  uint64_t mask_;
  std::vector<uint64_t> where_;  // the slot of each word, by number
  std::vector<unsigned char> bytes_;  // the words longer than 8 bytes, end to end
  int64_t bytes_total_ = 0;  // the bytes of all words

  // Twice the slots, in place (Zeroed::grow keeps the old ones at the front): the words move to their places
  // under the new mask a run at a time, each run of full slots taken out and put back. A word's new home is its
  // old one or that plus the old size, and the words of a run that does not wrap round the old end stay within
  // the run's slots or the same slots of the new half, so no word put back passes over a slot whose word has
  // yet to move (moved later, it would leave a hole before it). The run that wraps round the old end, if any,
  // is taken out first and put back last.
  void grow() {
    const uint64_t m = slots_.size();
    slots_.grow(2 * m);
    mask_ = 2 * m - 1;
    std::vector<Slot> run, wrapped;
    auto take = [&](uint64_t i, std::vector<Slot>& into) {
      into.push_back(slots_[i]);
      slots_[i].length = 0;
    };
    auto put = [&](const Slot& s) {
      uint64_t i = s.hash & mask_;
      while (slots_[i].length) i = (i + 1) & mask_;
      slots_[i] = s;
      where_[s.number] = i;
    };
    if (slots_[m - 1].length && slots_[0].length) {  // a table two thirds full at most has an empty slot
      for (uint64_t i = m - 1; slots_[i].length; --i) take(i, wrapped);
      for (uint64_t i = 0; slots_[i].length; ++i) take(i, wrapped);
    }
    for (uint64_t i = 0; i < m;) {
      if (!slots_[i].length) {
        ++i;
        continue;
      }
      run.clear();
      for (; i < m && slots_[i].length; ++i) take(i, run);
      for (const Slot& s : run) put(s);
    }
    for (const Slot& s : wrapped) put(s);
  }
};

// Calls ``each(start, length, hash)`` for the tokens of text[lo, hi) and ``newline()`` for each newline byte,
// in order, a batch of tokens at a time: each batch's hashes first, ``prefetch(hash)`` called for each (to ask
// for its slot ahead).
template <class Prefetch, class Each, class Newline>
int64_t batched_tokens(Prefetch prefetch, const unsigned char* text, int64_t lo, int64_t hi, Each each,
                       Newline newline) {
  constexpr int BATCH = 16;
  int64_t start[BATCH];  // a token's start, or -1: a newline
  uint32_t length[BATCH];
  uint64_t hash[BATCH], word[BATCH];
  int k = 0;
  auto flush = [&] {
    for (int j = 0; j < k; ++j) start[j] < 0 ? newline() : each(start[j], length[j], hash[j], word[j]);
    k = 0;
  };
  const unsigned char* end = text + hi;
  int64_t count = tokens(text, lo, hi, [&](int64_t at, int64_t n) {
    start[k] = at;
    length[k] = static_cast<uint32_t>(n);
    word[k] = inline_word(text + at, n, end);
    hash[k] = quick_hash(text + at, n, word[k]);
    prefetch(hash[k]);
    if (++k == BATCH) flush();
  }, [&] {
    start[k] = -1;
    if (++k == BATCH) flush();
  });
  flush();
  return count;
}

// The same, the slots asked of ``table``.
template <class Each, class Newline>
int64_t batched_tokens(const Table& table, const unsigned char* text, int64_t lo, int64_t hi, Each each,
                       Newline newline) {
  return batched_tokens([&](uint64_t h) { table.prefetch(h); }, text, lo, hi, each, newline);
}

// The first byte of text[0, n) that is not valid UTF-8 (Python's strict decoder: the start of the first
// sequence it rejects), or n.
int64_t utf8_end(const unsigned char* s, int64_t n) {
  int64_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {  // eight ASCII bytes at once
      uint64_t x;
      std::memcpy(&x, s + i, 8);
      if (!(x & 0x8080808080808080ULL)) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int more;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      more = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      more = 2;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      more = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + more >= n) return i;  // truncated
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (int k = 2; k <= more; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += more + 1;
  }
  return n;
}

// One block of the encoding (see hvd_w2v_scan_text).
struct Scan {
  std::vector<Table> tables;      // each thread's distinct words of the block
  std::vector<int64_t> base;      // the first number of each thread's words
  std::vector<int32_t> id_of;     // the id of each number (hvd_w2v_scan_ids)
};

}  // namespace

extern "C" {

// hvd_w2v_hash64 of word[0, n): vocab.hash64 (tests compare the two).
uint64_t hvd_w2v_hash64(const unsigned char* word, int64_t n) { return hash64(word, n); }

// 0 when text[0, n) is text: no NUL byte and valid UTF-8; else 1 with *where the first NUL byte (NUL bytes
// are looked for first, in the whole block, as corpus._check_text does), or 2 with *where the first byte
// that is not UTF-8. On ``threads`` threads, each a part of the block cut after whitespace (ASCII, so a part
// ends where a character does, and a sequence that spans a cut is rejected at the same byte either way).
int64_t hvd_w2v_check_text(const unsigned char* text, int64_t n, int64_t threads, int64_t* where) {
  const std::vector<int64_t> at = cuts(text, n, threads);
  std::vector<int64_t> nul(threads, n), bad(threads, n);
#pragma omp parallel for schedule(static, 1) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < threads; ++t) {
    const void* z = std::memchr(text + at[t], 0, at[t + 1] - at[t]);
    if (z) nul[t] = static_cast<const unsigned char*>(z) - text;
    const int64_t valid = utf8_end(text + at[t], at[t + 1] - at[t]);
    if (valid < at[t + 1] - at[t]) bad[t] = at[t] + valid;
  }
  const int64_t first_nul = *std::min_element(nul.begin(), nul.end());
  if (first_nul < n) return *where = first_nul, 1;
  const int64_t first_bad = *std::min_element(bad.begin(), bad.end());
  if (first_bad < n) return *where = first_bad, 2;
  return 0;
}

}  // extern "C"

namespace {

// -- counts -------------------------------------------------------------------------------------------------

// A rank's counts: one table per thread, each holding the words whose quick hash it owns (part_of), so no word
// is in two tables and no table is written by two threads; and on more than one thread, each thread's own
// table of the words it met first (Finder::mine), added to the owners' tables when the counts are read
// (merge_private).
struct Counts {
  std::vector<Table> tables;
  // The most words a finder counts in a table of its own (Finder::mine) before its tokens go to their words'
  // owners (hvd_w2v_counts_new's ``private_words``): on natural text the first words a thread meets hold nearly
  // all of its tokens, which it then counts without waiting for another thread; on a flat vocabulary, most
  // words rare, the table fills and the rest of the tokens go to their owners.
  int64_t private_words = 0;
  // count_text's on more than one thread, a finder (a thread cutting its part of a segment into tokens) each.
  // Every list is written by one thread at a time and starts a cache line of its own: two threads writing one
  // line would take it from each other at every token.
  struct Token {  // a token handed to its word's owner
    // The word itself when it has at most 8 bytes (inline_word), else the address of its bytes: the owner then
    // reads no text for a short word (the finder's part, by then out of its caches).
    uint64_t word;
    uint64_t hash;
    int32_t* number;  // where the token's number goes (hvd_w2v_counts_add_numbered), or null
    uint32_t length;
  };
  struct alignas(64) Tokens : std::vector<Token> {};
  struct alignas(64) Finder {
    Table mine;  // the words this thread met first (private_words at most), counted here until merge_private
    std::vector<Tokens> tokens;  // by the table they go to
  };
  std::vector<Finder> finders;
  // After merge_private: the provisional number (provisional_number) that each private number (private_index)
  // became, -1 for a private index no word had.
  std::vector<int64_t> aliases;
};

inline int64_t part_of(uint64_t h, int64_t parts) {
  return static_cast<int64_t>(((h >> 32) * static_cast<uint64_t>(parts)) >> 32);
}

// The rank that counts the word of quick hash ``h`` among ``ranks`` in the rounds (hvd_w2v_counts_export's
// ``quick``): ranges of its low 32 bits, so that a rank's words still spread over its threads' tables, which
// part_of gives ranges of the high 32 bits (ranges of those would put all of a rank's words in one table).
inline int64_t quick_owner(uint64_t h, int64_t ranks) {
  return static_cast<int64_t>(((h & 0xffffffffULL) * static_cast<uint64_t>(ranks)) >> 32);
}

// The provisional number of the word in slot number ``number`` of table ``table`` of ``parts``: what the one
// pass writes for each token (count_text) and the export gives each word (hvd_w2v_counts_export).
inline int64_t provisional_number(int64_t table, int64_t parts, int64_t number) { return table + parts * number; }

// The same for word number ``number`` of finder ``finder``'s own table (Counts::Finder::mine): the one pass
// writes -2 - it for the token (below the -1 of a newline), and Counts::aliases gives its provisional number
// once merged.
inline int64_t private_index(int64_t finder, int64_t parts, int64_t number) { return finder + parts * number; }

// Text a thread cuts into tokens before the tables take them, on more than one thread: bounds the scratch
// (32 B a token handed over) whatever the text's size.
constexpr int64_t SEGMENT_BYTES = 1 << 20;

// hvd_w2v_counts_add_text and hvd_w2v_counts_add_numbered: the tokens of text[0, n) counted, their number in
// *tokens; with ``out``, the block's provisional numbers written there, their count returned.
//
// On more than one thread, segment after segment of SEGMENT_BYTES a thread, each thread (a finder) cuts its
// part of the segment into tokens and counts them in its own table (``mine``) while it has room
// (c.private_words words), writing for each -2 - its private_index: no thread waits for another. A token whose
// word it does not hold once its table is full goes to its word's table (part_of) at once when the thread owns
// it, else to a list for that table's thread; a finder stops asking its own table for the rest of a segment
// once the tokens it did not hold pass half of those it held, and 256 (a flat vocabulary). When any token was
// handed over, each thread then adds those handed to it, writing each one's provisional number in its place:
// a finder writes its part's numbers from its first byte's place in ``out`` (a part has fewer tokens and
// newlines than bytes), and the parts are then moved together. A word may be counted in several finders'
// tables and in its owner's: merge_private adds them up when the counts are read.
int64_t count_text(Counts& c, const unsigned char* text, int64_t n, int32_t* out, int64_t* tokens) {
  const int64_t parts = c.tables.size();
  int64_t m = 0;
  *tokens = 0;
  if (parts == 1) {
    Table& table = c.tables[0];
    *tokens = batched_tokens(table, text, 0, n, [&](int64_t at, uint32_t length, uint64_t h, uint64_t x) {
      Table::Slot& slot = table.slot_of(text + at, length, h, x, 0);
      ++slot.value;
      if (out) out[m++] = static_cast<int32_t>(slot.number);
    }, [&] {
      if (out) out[m++] = -1;
    });
    return m;
  }
  std::vector<int64_t> written(parts);
  for (int64_t lo = 0; lo < n;) {
    int64_t hi = std::min(n, lo + SEGMENT_BYTES * parts);
    while (hi < n && !WS.is[text[hi - 1]]) ++hi;
    std::vector<int64_t> at = cuts(text + lo, hi - lo, parts);
    int64_t found = 0, handed = 0;
#pragma omp parallel num_threads(parts) reduction(+ : found, handed)
    {
      const int64_t t = omp_get_thread_num();
      Table& table = c.tables[t];
      Counts::Finder& me = c.finders[t];
      for (auto& list : me.tokens) list.clear();
      int32_t* o = out ? out + lo + at[t] : nullptr;
      int64_t k = 0, held = 0, passed = 0;  // tokens its own table held, and not
      bool asking = true;
      found = batched_tokens([&](uint64_t h) { asking ? me.mine.prefetch(h) : table.prefetch(h); }, text,
                             lo + at[t], lo + at[t + 1], [&](int64_t start, uint32_t length, uint64_t h, uint64_t x) {
        if (asking) {
          if (Table::Slot* slot = me.mine.bounded_slot(text + start, length, h, x, c.private_words)) {
            ++slot->value;
            ++held;
            if (o) o[k++] = static_cast<int32_t>(-2 - private_index(t, parts, slot->number));
            return;
          }
          asking = ++passed <= held / 2 + 256;
        }
        const int64_t p = part_of(h, parts);
        if (p == t) {
          Table::Slot& slot = table.slot_of(text + start, length, h, x, 0);
          ++slot.value;
          if (o) o[k++] = static_cast<int32_t>(provisional_number(t, parts, slot.number));
        } else {
          const uint64_t word = length <= 8 ? x : reinterpret_cast<uint64_t>(text + start);
          me.tokens[p].push_back({word, h, o ? o + k++ : nullptr, length});
          ++handed;
        }
      }, [&] {
        if (o) o[k++] = -1;
      });
      written[t] = k;
    }
    if (handed) {
#pragma omp parallel num_threads(parts)
      {
        const int64_t t = omp_get_thread_num();
        Table& table = c.tables[t];
        constexpr int AHEAD = 24;  // slots asked for ahead: a hand-over's loop is short, its misses many at once
        for (int64_t f = 0; f < parts; ++f) {
          const auto& list = c.finders[f].tokens[t];
          const int64_t size = list.size();
          for (int64_t i = 0; i < size; ++i) {
            if (i + AHEAD < size) table.prefetch(list[i + AHEAD].hash);
            const Counts::Token& token = list[i];
            const bool short_word = token.length <= 8;
            Table::Slot& slot = table.slot_of(short_word ? nullptr : reinterpret_cast<const unsigned char*>(token.word),
                                              token.length, token.hash, short_word ? token.word : 0, 0);
            ++slot.value;
            if (token.number) *token.number = static_cast<int32_t>(provisional_number(t, parts, slot.number));
          }
        }
      }
    }
    *tokens += found;
    if (out)
      for (int64_t t = 0; t < parts; ++t) {
        std::memmove(out + m, out + lo + at[t], written[t] * sizeof(int32_t));
        m += written[t];
      }
    lo = hi;
  }
  return m;
}

// Adds the words of every finder's own table to their owners' tables, on the counts' threads (a table each: a
// thread lists the words it owns in each finder's table, then adds them with their counts, asking for their
// slots ahead), and sets c.aliases: each private index's provisional number. Empties the finders' tables,
// keeping their memory when ``keep``.
void merge_private(Counts& c, bool keep) {
  const int64_t parts = c.tables.size();
  int64_t most = 0;
  for (const auto& finder : c.finders) most = std::max(most, finder.mine.size());
  c.aliases.assign(parts * most, -1);
  if (parts == 1 || !most) return;
#pragma omp parallel num_threads(parts)
  {
    const int64_t t = omp_get_thread_num();
    Table& table = c.tables[t];
    std::vector<const Table::Slot*> owned;
    constexpr int64_t AHEAD = 16;
    for (int64_t f = 0; f < parts; ++f) {
      const Table& mine = c.finders[f].mine;
      owned.clear();
      mine.for_each([&](const Table::Slot& s) {
        if (part_of(s.hash, parts) == t) owned.push_back(&s);
      });
      const int64_t size = owned.size();
      for (int64_t i = 0; i < size; ++i) {
        if (i + AHEAD < size) table.prefetch(owned[i + AHEAD]->hash);
        const Table::Slot& s = *owned[i];
        Table::Slot& slot = table.slot_of(mine.word(s), s.length, s.hash, s.length <= 8 ? s.word : 0, 0);
        slot.value += s.value;
        c.aliases[private_index(f, parts, s.number)] = provisional_number(t, parts, slot.number);
      }
    }
  }
  for (auto& finder : c.finders) keep ? finder.mine.clear() : finder.mine.release();
}

}  // namespace

extern "C" {

// Counts on ``threads`` threads, each counting at most ``private_words`` words in a table of its own.
void* hvd_w2v_counts_new(int64_t threads, int64_t private_words) {
  Counts* c = new Counts();
  threads = std::max<int64_t>(threads, 1);
  c->private_words = private_words;
  c->tables.resize(threads);
  c->finders.resize(threads);
  for (auto& finder : c->finders) finder.tokens.resize(threads);
  return c;
}

void hvd_w2v_counts_free(void* counts) { delete static_cast<Counts*>(counts); }

// Adds the tokens of text[0, n) (whole tokens at both ends) to the counts. On one thread each token goes
// straight to the table; on more (the counts' own), as count_text says. Returns the tokens.
int64_t hvd_w2v_counts_add_text(void* counts, const unsigned char* text, int64_t n) {
  int64_t tokens = 0;
  count_text(*static_cast<Counts*>(counts), text, n, nullptr, &tokens);
  return tokens;
}

// hvd_w2v_counts_add_text, which also writes into ``out`` (int32, n + 1 at least) the block's stream in
// provisional numbers: each token's word as table t's number k of it (order of first sight), t + k x threads,
// or, counted in thread f's own table as its number k there, -2 - (f + k x threads) (private_index; the
// merge's aliases give its provisional number); -1 for each newline and once more when ``file_end``, in text
// order (the encoding in one pass: the numbers are turned into ids by hvd_w2v_remap once the vocabulary is
// known). Returns how many it wrote; the tokens in *tokens.
int64_t hvd_w2v_counts_add_numbered(void* counts, const unsigned char* text, int64_t n, int32_t* out,
                                    int64_t file_end, int64_t* tokens) {
  int64_t m = count_text(*static_cast<Counts*>(counts), text, n, out, tokens);
  if (file_end) out[m++] = -1;
  return m;
}

// Adds n words (``lengths`` bytes each, laid end to end in ``words``) with their ``counts`` (a round's, at
// their hash owner), each to its table (part_of), on the counts' threads: the words hashed a share a thread,
// then each thread adds those of its own table, so that no table is written by two. A thread asks for the slots
// of its words some words ahead: on a flat vocabulary nearly every word is new, so nearly every add would
// otherwise wait for memory. ``numbers`` (or null): each word's provisional number here, as
// hvd_w2v_counts_export gives it (several ranks' one pass: what a round's askers number their tokens by).
void hvd_w2v_counts_add_words(void* counts, const unsigned char* words, const int64_t* lengths,
                              const int64_t* values, int64_t n, int64_t* numbers) {
  Counts& c = *static_cast<Counts*>(counts);
  const int64_t parts = c.tables.size();
  const std::vector<int64_t> start = starts(lengths, n);
  std::vector<uint64_t> hash(n);
#pragma omp parallel num_threads(parts)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) hash[i] = quick_hash(words + start[i], lengths[i]);
    const int64_t t = omp_get_thread_num();
    Table& table = c.tables[t];
    constexpr int64_t AHEAD = 8;
    int64_t ahead = 0;  // the next word whose slot is asked for
    for (int64_t i = 0; i < n; ++i) {
      if (parts > 1 && part_of(hash[i], parts) != t) continue;
      for (ahead = std::max(ahead, i + 1); ahead < n && ahead <= i + AHEAD * parts; ++ahead)
        if (parts == 1 || part_of(hash[ahead], parts) == t) table.prefetch(hash[ahead]);
      const uint32_t length = static_cast<uint32_t>(lengths[i]);
      Table::Slot& slot = table.slot_of(words + start[i], length, hash[i],
                                        length <= 8 ? inline_word(words + start[i], length) : 0, 0);
      slot.value += values[i];
      if (numbers) numbers[i] = provisional_number(t, parts, slot.number);
    }
  }
}

// The words held, summed over the tables: the distinct words, or more before hvd_w2v_counts_merge (a word
// may then be in several threads' own tables and in its owner's).
int64_t hvd_w2v_counts_size(void* counts) {
  const Counts& c = *static_cast<Counts*>(counts);
  int64_t n = 0;
  for (const Table& t : c.tables) n += t.size();
  for (const auto& finder : c.finders) n += finder.mine.size();
  return n;
}

// Adds the words of the threads' own tables to their owners' (merge_private), keeping their memory when
// ``keep``: what hvd_w2v_counts_sizes and hvd_w2v_counts_export then read. Returns how many private indices
// hvd_w2v_counts_aliases gives (0 on one thread).
int64_t hvd_w2v_counts_merge(void* counts, int64_t keep) {
  Counts& c = *static_cast<Counts*>(counts);
  merge_private(c, keep);
  return c.aliases.size();
}

// The last merge's aliases (int64[hvd_w2v_counts_merge's count]): the provisional number of each private
// index, -1 for one no word had; then forgets them.
void hvd_w2v_counts_aliases(void* counts, int64_t* out) {
  Counts& c = *static_cast<Counts*>(counts);
  std::copy(c.aliases.begin(), c.aliases.end(), out);
  std::vector<int64_t>().swap(c.aliases);
}

// The distinct words held, and their bytes in *bytes (the sizes of hvd_w2v_counts_export's arrays), once
// merged (hvd_w2v_counts_merge).
int64_t hvd_w2v_counts_sizes(void* counts, int64_t* bytes) {
  *bytes = 0;
  int64_t n = 0;
  for (const Table& t : static_cast<Counts*>(counts)->tables) *bytes += t.byte_size(), n += t.size();
  return n;
}

// The words ordered by hash owner among ``ranks`` (within an owner, table by table, each in the order of its
// slots): their bytes end to end, lengths, counts, hashes (vocab.hash64) and how many go to each rank
// (``per_dest`` int64[ranks]); ``hashes`` null: all to rank 0, unhashed (one rank: its words below min_count
// need none); ``quick``: ordered by the owner of each word's quick hash instead (quick_owner of the slot's
// hash, no BLAKE2b: a round's, whose owners pass the kept words on to their hash owners once counted;
// ``hashes`` then get the quick hashes); ``numbers`` (or null): each word's provisional number
// (hvd_w2v_counts_add_numbered). Then
// empties the counts, keeping their memory when ``keep`` (a round follows), else returning it. On ``threads``
// threads, a table each: each lists its table's words, hashes them and counts them by owner; once those
// counts give every table's place in each owner's range, each copies its words there and empties its table.
void hvd_w2v_counts_export(void* counts, int64_t ranks, int64_t threads, unsigned char* words, int64_t* lengths,
                           int64_t* values, uint64_t* hashes, int64_t* per_dest, int64_t keep, int64_t* numbers,
                           int64_t quick) {
  Counts& c = *static_cast<Counts*>(counts);
  const bool blake = hashes && !quick;  // BLAKE2b's owners, else the quick hash's (or all to rank 0)
  auto owner = [&](const std::vector<uint64_t>& h, const Table::Slot& s, size_t i) -> int64_t {
    return blake ? hash_owner(h[i], ranks) : quick ? quick_owner(s.hash, ranks) : 0;
  };
  auto& tables = c.tables;
  const int64_t parts = tables.size();
  std::vector<std::vector<const Table::Slot*>> slot(parts);
  std::vector<std::vector<uint64_t>> h(parts);
  std::vector<int64_t> start(parts * ranks, 0), byte_start(parts * ranks, 0);  // [table][owner]
#pragma omp parallel num_threads(std::max<int64_t>(1, std::min(threads, parts)))
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < parts; ++t) {
      const Table& table = tables[t];
      auto& mine = slot[t];
      mine.reserve(table.size());
      table.for_each([&](const Table::Slot& s) { mine.push_back(&s); });
      if (blake) {
        h[t].resize(mine.size());
        hash_all(mine.size(), [&](int64_t i) {
          return std::pair<const unsigned char*, uint64_t>(table.word(*mine[i]), mine[i]->length);
        }, h[t].data(), 1);
      }
      std::vector<int64_t> n(ranks, 0), bytes(ranks, 0);  // by owner; its own: the tables' rows share lines
      for (size_t i = 0; i < mine.size(); ++i) {
        const int64_t r = owner(h[t], *mine[i], i);
        ++n[r];
        bytes[r] += mine[i]->length;
      }
      std::copy(n.begin(), n.end(), start.begin() + t * ranks);  // turned into places once all are known
      std::copy(bytes.begin(), bytes.end(), byte_start.begin() + t * ranks);
    }
#pragma omp single
    {
      int64_t k = 0, at = 0;
      for (int64_t r = 0; r < ranks; ++r) {
        per_dest[r] = 0;
        for (int64_t t = 0; t < parts; ++t) {
          const int64_t n = start[t * ranks + r], bytes = byte_start[t * ranks + r];
          start[t * ranks + r] = k, byte_start[t * ranks + r] = at;
          k += n, at += bytes, per_dest[r] += n;
        }
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < parts; ++t) {
      const auto& mine = slot[t];
      std::vector<int64_t> next(start.begin() + t * ranks, start.begin() + (t + 1) * ranks);
      std::vector<int64_t> at(byte_start.begin() + t * ranks, byte_start.begin() + (t + 1) * ranks);
      for (size_t i = 0; i < mine.size(); ++i) {
        const Table::Slot& s = *mine[i];
        const int64_t r = owner(h[t], s, i), k = next[r]++;
        lengths[k] = s.length;
        values[k] = s.value;
        if (hashes) hashes[k] = blake ? h[t][i] : s.hash;
        if (numbers) numbers[k] = provisional_number(t, parts, s.number);
        std::memcpy(words + at[r], tables[t].word(s), s.length);
        at[r] += s.length;
      }
      std::vector<const Table::Slot*>().swap(slot[t]);
      keep ? tables[t].clear() : tables[t].release();
    }
  }
  if (!keep)  // count_text's scratch too (on more than one thread)
    for (auto& finder : c.finders) {
      finder.mine.release();
      for (auto& list : finder.tokens) std::vector<Counts::Token>().swap(list);
    }
}

// out[i] = vocab.hash64 of word i of n (``lengths`` bytes each, end to end in ``words``), on ``threads``.
void hvd_w2v_hash_words(const unsigned char* words, const int64_t* lengths, int64_t n, uint64_t* out,
                        int64_t threads) {
  const std::vector<int64_t> start = starts(lengths, n);
  hash_all(n, [&](int64_t i) {
    return std::pair<const unsigned char*, uint64_t>(words + start[i], static_cast<uint64_t>(lengths[i]));
  }, out, threads);
}

// -- the vocabulary's order ---------------------------------------------------------------------------------

// order[0, n) = the numbers of n words ordered by count, descending, then by hash, then by number: numpy's
// lexsort((hashes, -counts)), which vocab.agree_ids uses where this library is not built. A multiway merge
// sort on ``threads`` (libstdc++'s parallel mode); the number breaks every tie, so the order is the same on any
// thread count. 24 B a word while it sorts.
void hvd_w2v_count_order(const int64_t* counts, const uint64_t* hashes, int64_t n, int64_t* order,
                         int64_t threads) {
  struct Key {
    int64_t count;  // negated: descending
    uint64_t hash;
    int64_t number;
    bool operator<(const Key& o) const {
      return count != o.count ? count < o.count : hash != o.hash ? hash < o.hash : number < o.number;
    }
  };
  std::vector<Key> keys(n);
  const bool parallel = threads > 1 && n > (1 << 16);
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t i = 0; i < n; ++i) keys[i] = {-counts[i], hashes[i], i};
  if (parallel)
    __gnu_parallel::sort(keys.begin(), keys.end(), std::less<Key>(),
                         __gnu_parallel::multiway_mergesort_tag(static_cast<int>(threads)));
  else
    std::sort(keys.begin(), keys.end());
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
  for (int64_t i = 0; i < n; ++i) order[i] = keys[i].number;
}

// -- ids ------------------------------------------------------------------------------------------------------

// A hash owner's word -> id: n words (``lengths`` bytes each, end to end in ``words``) and their ``ids``.
void* hvd_w2v_lookup_new(const unsigned char* words, const int64_t* lengths, const int64_t* ids, int64_t n) {
  Table* table = new Table();
  int64_t longer = 0;  // the bytes of the words over 8 bytes, which the table keeps beside its slots
  for (int64_t i = 0; i < n; ++i) longer += lengths[i] > 8 ? lengths[i] : 0;
  table->reserve(n, longer);
  for (int64_t i = 0; i < n; ++i) {
    table->at(words, static_cast<uint32_t>(lengths[i]), ids[i]);
    words += lengths[i];
  }
  return table;
}

void hvd_w2v_lookup_free(void* lookup) { delete static_cast<Table*>(lookup); }

// out[i] = the id of word i of n (as hvd_w2v_lookup_new lays them), -1 when it has none; on ``threads``.
void hvd_w2v_lookup_ids(void* lookup, const unsigned char* words, const int64_t* lengths, int64_t n, int64_t* out,
                        int64_t threads) {
  const Table& table = *static_cast<Table*>(lookup);
  const std::vector<int64_t> start = starts(lengths, n);
  constexpr int64_t AHEAD = 8;
  std::vector<uint64_t> h(n);
#pragma omp parallel num_threads(threads) if (threads > 1 && n > 4096)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) h[i] = quick_hash(words + start[i], lengths[i]);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      if (i + AHEAD < n) table.prefetch(h[i + AHEAD]);
      out[i] = table.find(words + start[i], static_cast<uint32_t>(lengths[i]), h[i], -1);
    }
  }
}

// -- one block of the encoding ---------------------------------------------------------------------------------

void* hvd_w2v_scan_new(int64_t threads) {
  Scan* scan = new Scan();
  scan->tables.resize(std::max<int64_t>(threads, 1));
  return scan;
}

void hvd_w2v_scan_free(void* scan) { delete static_cast<Scan*>(scan); }

// The block text[0, n) (whole tokens) on ``threads`` threads (at most the scan's): writes into out (int32, n + 1
// at least) its tokens, each as the number of its distinct word (numbers from 0, in order of the threads'
// parts), and -1 for each newline, in text order; returns how many. Returns the distinct words in *distinct
// and their bytes in *bytes.
int64_t hvd_w2v_scan_text(void* scan_, const unsigned char* text, int64_t n, int64_t threads, int32_t* out,
                          int64_t* distinct, int64_t* bytes) {
  Scan& scan = *static_cast<Scan*>(scan_);
  threads = std::min<int64_t>(threads, scan.tables.size());
  for (Table& t : scan.tables) t.clear();
  const std::vector<int64_t> at = cuts(text, n, threads);
  std::vector<int64_t> written(threads, 0);
#pragma omp parallel for schedule(static, 1) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < threads; ++t) {
    Table& table = scan.tables[t];
    int32_t* o = out + at[t];  // a part's tokens and newlines are fewer than its bytes
    int64_t k = 0;
    batched_tokens(table, text, at[t], at[t + 1], [&](int64_t start, uint32_t length, uint64_t h, uint64_t x) {
      int64_t& number = table.at(text + start, length, h, x, -1);
      if (number < 0) number = table.size() - 1;
      o[k++] = static_cast<int32_t>(number);
    }, [&] { o[k++] = -1; });
    written[t] = k;
  }
  scan.base.assign(scan.tables.size() + 1, 0);
  *bytes = 0;
  for (size_t t = 0; t < scan.tables.size(); ++t) {
    scan.base[t + 1] = scan.base[t] + scan.tables[t].size();
    *bytes += scan.tables[t].byte_size();
  }
  *distinct = scan.base.back();
  int64_t m = 0;  // the parts' output, moved together and renumbered
  for (int64_t t = 0; t < threads; ++t) {
    const int32_t base = static_cast<int32_t>(scan.base[t]);
    const int32_t* from = out + at[t];
    for (int64_t k = 0; k < written[t]; ++k) out[m++] = from[k] < 0 ? -1 : from[k] + base;
  }
  return m;
}

// The block's distinct words (hvd_w2v_scan_text first) ordered by hash owner among ``ranks`` (all to rank 0
// on one rank, without hashing), in no other order: their bytes end to end, lengths, numbers
// (``order``) and how many go to each rank (``per_dest``).
void hvd_w2v_scan_words(void* scan_, int64_t ranks, int64_t threads, unsigned char* words, int64_t* lengths,
                        int64_t* order, int64_t* per_dest) {
  Scan& scan = *static_cast<Scan*>(scan_);
  const int64_t n = scan.base.back();
  std::vector<const Table::Slot*> entry(n);
  std::vector<const Table*> of(n);
  std::vector<int64_t> number(n);
  int64_t i = 0;
  for (size_t t = 0; t < scan.tables.size(); ++t)
    scan.tables[t].for_each([&](const Table::Slot& slot) {
      entry[i] = &slot;
      of[i] = &scan.tables[t];
      number[i++] = scan.base[t] + slot.number;
    });
  std::vector<int64_t> owner(n, 0);
  if (ranks > 1) {
    uint64_t* h = reinterpret_cast<uint64_t*>(owner.data());  // the hashes first, their owners in their place
    hash_all(n, [&](int64_t i) {
      return std::pair<const unsigned char*, uint64_t>(of[i]->word(*entry[i]), entry[i]->length);
    }, h, threads);
    for (int64_t i = 0; i < n; ++i) owner[i] = hash_owner(h[i], ranks);
  }
  std::vector<int64_t> start(ranks + 1, 0), byte_start(ranks + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    ++start[owner[i] + 1];
    byte_start[owner[i] + 1] += entry[i]->length;
  }
  for (int64_t r = 0; r < ranks; ++r) {
    per_dest[r] = start[r + 1];
    start[r + 1] += start[r];
    byte_start[r + 1] += byte_start[r];
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = owner[i], k = start[r]++;
    lengths[k] = entry[i]->length;
    order[k] = number[i];
    std::memcpy(words + byte_start[r], of[i]->word(*entry[i]), entry[i]->length);
    byte_start[r] += entry[i]->length;
  }
}

// The block's part of the id stream, in place in ``out`` (its m entries from hvd_w2v_scan_text): each token's
// id (``ids``[k]: the id of word number ``order``[k], -1 out of the vocabulary, then dropped) and
// ``sentence_end`` for each newline, then one more ``sentence_end`` when ``file_end``. Returns its length.
int64_t hvd_w2v_scan_ids(void* scan_, const int64_t* ids, const int64_t* order, int32_t* out, int64_t m,
                         int64_t file_end, int32_t sentence_end) {
  Scan& scan = *static_cast<Scan*>(scan_);
  const int64_t n = scan.base.back();
  scan.id_of.assign(n, -1);
  for (int64_t k = 0; k < n; ++k) scan.id_of[order[k]] = static_cast<int32_t>(ids[k]);
  int64_t w = 0;
  for (int64_t k = 0; k < m; ++k) {
    const int32_t x = out[k];
    if (x < 0) {
      out[w++] = sentence_end;
    } else {
      const int32_t id = scan.id_of[x];
      if (id >= 0) out[w++] = id;
    }
  }
  if (file_end) out[w++] = sentence_end;
  return w;
}

// Words numbered which[0:m] of those laid end to end in ``words`` by ``lengths`` (n of them), in that order,
// into out_words; ``picked`` holds their lengths (lengths[which[k]], which the caller sizes out_words by). On
// ``threads``, each a share of ``which`` (its reads are at random places), placed by the bytes before it.
void hvd_w2v_gather_words(const unsigned char* words, const int64_t* lengths, int64_t n, const int64_t* which,
                          int64_t m, unsigned char* out_words, const int64_t* picked, int64_t threads) {
  const std::vector<int64_t> start = starts(lengths, n);
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, m / (1 << 14) + 1));
  std::vector<int64_t> into(threads + 1, 0);  // where each thread's share of the words starts in out_words
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t t = omp_get_thread_num(), lo = m * t / threads, hi = m * (t + 1) / threads;
    into[t + 1] = std::accumulate(picked + lo, picked + hi, int64_t{0});
#pragma omp barrier
#pragma omp single
    for (int64_t u = 0; u < threads; ++u) into[u + 1] += into[u];
    unsigned char* o = out_words + into[t];
    for (int64_t k = lo; k < hi; ++k) {
      std::memcpy(o, words + start[which[k]], picked[k]);
      o += picked[k];
    }
  }
}

// word2vec.c's -save-vocab lines, "word count\n", of the n words that end at ends[0:n] in ``words`` (the first
// starting at ``start``) with their ``counts``: into ``out`` (room for the words' bytes and 22 bytes a line),
// each line's length into ``lengths``. Returns the bytes written.
int64_t hvd_w2v_count_lines(const unsigned char* words, const int64_t* ends, int64_t start, const int64_t* counts,
                            int64_t n, char* out, int64_t* lengths) {
  char* o = out;
  for (int64_t i = 0; i < n; ++i) {
    char* line = o;
    const int64_t from = i ? ends[i - 1] : start;
    std::memcpy(o, words + from, ends[i] - from);
    o += ends[i] - from;
    *o++ = ' ';
    o = std::to_chars(o, o + 20, counts[i]).ptr;
    *o++ = '\n';
    lengths[i] = o - line;
  }
  return o - out;
}

// The id stream of n provisional numbers (hvd_w2v_counts_add_numbered), in place: number x >= 0 becomes ids[x]
// (ids: int32[size]; -1, out of the vocabulary: dropped), -1 becomes ``sentence_end``, and x < -1 (a private
// index j as -2 - j) becomes below[j] (int32[below_size], the ids of the private indices: their aliases'). Returns
// its length, or -1 with ``numbers`` untouched when one lies outside [-1 - below_size, size). On ``threads``:
// each maps a part in place, kept ids to its part's front (the lookups, at random places of ids, are the cost),
// then the parts move down in turn, each to where the ones before it end (a move never overtakes a part not
// yet moved).
int64_t hvd_w2v_remap(int32_t* numbers, int64_t n, const int32_t* ids, int64_t size, int32_t sentence_end,
                      int64_t threads, const int32_t* below, int64_t below_size) {
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, n / (1 << 16) + 1));
  int64_t bad = 0;
#pragma omp parallel for num_threads(threads) reduction(| : bad) schedule(static) if (threads > 1)
  for (int64_t i = 0; i < n; ++i) bad |= numbers[i] < -1 - below_size || numbers[i] >= size;
  if (bad) return -1;
  std::vector<int64_t> kept(threads, 0);
#pragma omp parallel for num_threads(threads) schedule(static, 1) if (threads > 1)
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
    int64_t m = lo;
    for (int64_t i = lo; i < hi; ++i) {  // no branch on whether a word is kept: that follows no pattern
      const int32_t x = numbers[i];
      const int32_t id = x >= 0 ? ids[x] : x == -1 ? sentence_end : below[-2 - x];
      numbers[m] = id;
      m += x == -1 || id >= 0;
    }
    kept[t] = m - lo;
  }
  int64_t m = kept[0];
  for (int64_t t = 1; t < threads; ++t) {
    std::memmove(numbers + m, numbers + n * t / threads, kept[t] * sizeof(int32_t));
    m += kept[t];
  }
  return m;
}

// One rank's encoding of a block in one call, where the rank owns every word: each token's id looked up in
// ``lookup`` as the token is found (its slot asked for ahead), -1 dropped, ``sentence_end`` for each newline
// and once more at ``file_end``; on ``threads`` threads, each a part. Writes into out (int32, n + 1 at least);
// returns how many.
int64_t hvd_w2v_encode_local(void* lookup, const unsigned char* text, int64_t n, int64_t threads, int32_t* out,
                             int64_t file_end, int32_t sentence_end) {
  const Table& table = *static_cast<Table*>(lookup);
  threads = std::max<int64_t>(threads, 1);
  const std::vector<int64_t> at = cuts(text, n, threads);
  std::vector<int64_t> written(threads, 0);
#pragma omp parallel for schedule(static, 1) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < threads; ++t) {
    int32_t* o = out + at[t];
    int64_t k = 0;
    batched_tokens(table, text, at[t], at[t + 1], [&](int64_t start, uint32_t length, uint64_t h, uint64_t x) {
      const int64_t id = table.find(text + start, length, h, x, -1);
      if (id >= 0) o[k++] = static_cast<int32_t>(id);
    }, [&] { o[k++] = sentence_end; });
    written[t] = k;
  }
  int64_t m = written[0];
  for (int64_t t = 1; t < threads; ++t) {
    std::memmove(out + m, out + at[t], written[t] * sizeof(int32_t));
    m += written[t];
  }
  if (file_end) out[m++] = sentence_end;
  return m;
}

}  // extern "C"
