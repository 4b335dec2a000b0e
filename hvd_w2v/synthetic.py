"""A synthetic corpus: Zipf-distributed words with planted related pairs, seedable, streamed to disk.

Word ``w{i}`` (``i`` in ``0 .. vocab - 1``) has probability ``p(i) = (i + 1) ** -exponent / Z``. The words
``w{first} .. w{first + 2 * pairs - 1}`` (``first`` even; mid-frequency words, which subsampling leaves
alone) are planted as synonym pairs ``(w{2j}, w{2j+1})``: wherever the Zipf draw gives either, one of the two
is written at random, followed with probability ``bond`` by the pair's own companion word
``w{first + 2 * pairs + j'}``. Both members then share their contexts, so a trained model should rank each
among the other's nearest neighbours. Text is written in sentences of ``sentence`` tokens.

Memory does not grow with the vocabulary (measured in tests/test_scale_memory.py): the first ``HEAD_WORDS``
words are drawn from an exact table of their cumulative probabilities (512 KiB), the rest by the inverse
CDF of the continuous power law ``t ** -exponent`` on ``[HEAD_WORDS + 0.5, vocab + 0.5)``, computed per draw
and rounded to the nearest rank (the midpoint rule, whose relative error there is below 1e-9); names are
formatted per block of ``block`` tokens straight into bytes. With ``vocab <= HEAD_WORDS`` the table is the
whole distribution and the text is byte for byte what earlier versions wrote for the same arguments.

How large a vocabulary a corpus of N tokens reaches: word rank ``r = i + 1`` is expected
``N * r ** -s / Z`` times (``s = exponent``), and for ``s < 1`` the tail is about ``N * (1 - s) * r ** -s /
vocab ** (1 - s)``, so the rarest word gets about ``N * (1 - s) / vocab``. With ``s = 1`` (``Z ~ ln vocab``)
a word needs about ``min_count * vocab * ln(vocab)`` tokens to reach ``min_count``: billions for tens of
millions of words. With ``s = 0.5`` and ``N = 10 * vocab`` the rarest words are expected about 5 times, so
tens of millions of distinct words reach ``min_count = 5`` with about 10 tokens per word. Counts are Poisson
around that mean, so about half of the rarest words fall short: of 20 million words, 16.4 million are
expected to reach 5 with N = 200 million, 19.9 million with N = 400 million (the Poisson sums of
tests/test_scale_memory.py's ``expected_kept``).
"""
import argparse
import math
import resource
import time

import numpy as np

# Ranks drawn from an exact cumulative table: 8 bytes each (float64). The discrete and continuous laws
# differ most at the first ranks (1 ** -s against the integral over [0.5, 1.5)); past 65,536 they agree to
# the midpoint rule's s (s + 1) / (24 r**2) < 1e-9, so a larger table would buy nothing.
HEAD_WORDS = 1 << 16


class ZipfSampler:
    """Draws word indices ``i`` in ``[0, vocab)`` with probability ``(i + 1) ** -exponent / Z``.

    Memory: at most HEAD_WORDS float64 (512 KiB), whatever ``vocab``. ``draw(uniforms)`` is deterministic:
    one uniform in [0, 1) per index, so a seeded stream of uniforms gives a seeded stream of words.
    """

    def __init__(self, vocab, exponent):
        if vocab < 1:
            raise ValueError(f"vocab must be at least 1, got {vocab}")
        if not exponent >= 0:
            raise ValueError(f"exponent must be >= 0, got {exponent}")
        self.vocab, self.exponent = int(vocab), float(exponent)
        head = min(self.vocab, HEAD_WORDS)
        p = 1.0 / np.arange(1, head + 1) ** self.exponent
        # The tail's mass, ranks head+1 .. vocab: the integral of t ** -s over [head + 0.5, vocab + 0.5).
        self._lo, self._hi = math.log(head + 0.5), math.log(self.vocab + 0.5)
        self._g = 1.0 - self.exponent
        if self.vocab == head:
            tail = 0.0
        elif self._g == 0.0:
            tail = self._hi - self._lo
        else:  # (B**g - A**g) / g, written with expm1 so that g near 0 keeps its precision
            tail = math.exp(self._g * self._lo) * math.expm1(self._g * (self._hi - self._lo)) / self._g
        self.norm = float(p.sum()) + tail  # Z
        self._cdf = np.cumsum(p / self.norm)  # the head's cumulative probabilities; the tail holds the rest

    def probability(self, i):
        """p(i) = (i + 1) ** -exponent / Z for word indices ``i`` (array or int). Past the table, draws follow
        the continuous law's mass of [i + 0.5, i + 1.5), which differs from p(i) by less than 1e-9 of it."""
        return (np.asarray(i, dtype=np.float64) + 1.0) ** -self.exponent / self.norm

    def draw(self, uniforms):
        """Word indices (int64) for ``uniforms`` in [0, 1): the inverse of the cumulative distribution."""
        ids = np.searchsorted(self._cdf, uniforms, side="right")
        head = len(self._cdf)
        if self.vocab == head:
            return ids.clip(0, self.vocab - 1)
        tail = np.flatnonzero(ids >= head)
        if len(tail):
            h = self._cdf[-1]
            u = (uniforms[tail] - h) / (1.0 - h)  # uniform over the tail's mass
            span = self._hi - self._lo
            if self._g == 0.0:
                log_t = self._lo + u * span
            else:  # invert F(t) = expm1(g (ln t - ln A)) / expm1(g (ln B - ln A))
                log_t = self._lo + np.log1p(u * math.expm1(self._g * span)) / self._g
            ids[tail] = np.floor(np.exp(log_t) - 0.5).astype(np.int64).clip(head, self.vocab - 1)
        return ids


def generate(path, tokens, vocab=10000, exponent=1.0, pairs=50, first=100, bond=0.5, sentence=20, seed=0,
             block=1 << 20):
    """Write ``tokens`` tokens to ``path`` (UTF-8, ``w{i}`` words, ``sentence`` per line); returns ``tokens``.

    Deterministic for given arguments. Memory is bounded by ``block`` (about 60 bytes per token of a block:
    the uniforms, ids and the block's text) plus the sampler's HEAD_WORDS table, whatever ``vocab``.
    """
    if first % 2 or first < 0 or pairs < 0 or first + 3 * pairs > vocab:
        raise ValueError(f"planted pairs need an even first >= 0 and first + 3 * pairs <= vocab: first {first}, "
                         f"pairs {pairs}, vocab {vocab}")
    sampler = ZipfSampler(vocab, exponent)
    rs = np.random.RandomState(seed)
    written = 0
    with open(path, "wb") as f:
        while written < tokens:
            n = min(block, tokens - written)
            ids = sampler.draw(rs.random_sample(n))
            # Plant the pairs: either member at random, then (with probability bond) the pair's companion.
            band = np.flatnonzero((ids >= first) & (ids < first + 2 * pairs))
            ids[band] = (ids[band] & ~1) | rs.randint(0, 2, len(band))
            follow = band[rs.random_sample(len(band)) < bond] + 1
            follow = follow[follow < n]
            ids[follow] = first + 2 * pairs + (ids[follow - 1] - first) // 2
            f.write(_text(ids, sentence))
            written += n
    return written


# The four ASCII digits of 0000 .. 9999: ids are written four digits per table lookup.
_GROUPS = np.array([list(f"{g:04d}".encode()) for g in range(10000)], dtype=np.uint8)
_POWERS = 10 ** np.arange(1, 19, dtype=np.int64)  # 10 .. 10**18: an id's digit count by searchsorted


def _text(ids, sentence):
    """The bytes ``w{id}`` of each id, a space after each and a newline after every ``sentence``-th and the
    last: what ``"\\n".join(" ".join(words[i:i + sentence]) ...) + "\\n"`` writes, built in numpy.

    Each id is first laid out in a fixed-width record (zero-padded digits, then the separator) with its "w"
    written over the padding just before its first significant digit; a mask then drops the padding.
    """
    n = len(ids)
    if n == 0:
        return b""
    digits = np.searchsorted(_POWERS, ids, side="right") + 1
    groups = -(-int(digits.max()) // 4)
    width = 1 + 4 * groups + 1  # room for "w" before a full-width id, its digits, the separator
    record = np.empty((n, width), dtype=np.uint8)
    rest = ids
    for k in range(groups):  # the k-th group of four digits from the right
        col = 1 + 4 * (groups - 1 - k)
        record[:, col:col + 4] = _GROUPS[rest % 10000]
        rest = rest // 10000
    record[:, -1] = ord(" ")
    record[sentence - 1::sentence, -1] = ord("\n")
    record[-1, -1] = ord("\n")
    first = (width - 1) - digits - 1  # the column of each id's "w"
    record[np.arange(n), first] = ord("w")
    return record[np.arange(width)[None, :] >= first[:, None]]


def main(argv=None):
    example = ("example, 20 million words, the rarest expected 10 times (19.9 million expected to reach "
               "min_count 5): python -m hvd_w2v.synthetic big.txt --vocab 20000000 --tokens 400000000 --exponent 0.5")
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.synthetic", description=__doc__.splitlines()[0],
                                epilog=example)
    p.add_argument("path")
    p.add_argument("--tokens", type=int, default=1_000_000)
    p.add_argument("--vocab", type=int, default=10000, help="distinct words that can be drawn (default: %(default)s)")
    p.add_argument("--exponent", type=float, default=1.0,
                   help="Zipf exponent s: word rank r has probability ~ r**-s. Below 1 the tail is heavier: the "
                        "rarest word is drawn about tokens*(1-s)/vocab times, so s=0.5 with --tokens 10x --vocab "
                        "gives it about 5 (default: %(default)s)")
    p.add_argument("--pairs", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    start = time.perf_counter()
    try:
        n = generate(a.path, a.tokens, vocab=a.vocab, exponent=a.exponent, pairs=a.pairs, seed=a.seed)
    except ValueError as e:
        p.error(str(e))
    seconds = time.perf_counter() - start
    rarest = a.tokens * float(ZipfSampler(a.vocab, a.exponent).probability(a.vocab - 1))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(f"{a.path}: {n:,} tokens, vocabulary up to {a.vocab:,} words (exponent {a.exponent:g}, the rarest "
          f"expected {rarest:,.3g} times), {a.pairs} planted pairs; {seconds:.1f} s, "
          f"{n / max(seconds, 1e-9):,.0f} tokens/s, peak resident {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
