"""The vocabulary, built in parallel: no rank holds the whole word table.

1. Each rank counts the tokens of its own byte range (corpus.split) chunk by chunk into a *partial* Counter.
   Whenever that Counter holds more than FLUSH_WORDS distinct words (or the rank's text is over), the rank
   joins a *round*: every rank sends its partial counts to each word's *hash owner* (:func:`hash_owner`:
   ranks own ranges of ``hash64(word)``), which adds them to its own counts, and empties its partial Counter.
   Rounds are collective: a rank whose text is over still takes part (sending nothing) until all ranks' text
   is over. (The compiled rounds send each word to the owner of its tables' quick hash instead, which costs
   no BLAKE2b a round, and the counting owners move the words they keep to their hash owners once, in step 2.)
2. Hash owners, holding the corpus counts of their words, apply ``min_count`` and ``max_final_vocab``.
3. A global frequency rank (the word's *id*) is agreed: ids sort by count, descending, ties by hash64, so the
   ids do not depend on the rank count; only histograms of counts travel (:func:`agree_ids`). Hash owners
   keep ``word -> id`` for their words (used to encode); every rank keeps the counts by id as runs of equal
   counts (:class:`CountRuns`), which answer subsampling and noise draws.
4. Each word's string goes to its *row owner* (shard.RowPlan), which keeps the strings of its rows (export).

Memory per rank (8-byte words):
- while counting: the partial Counter, at most FLUSH_WORDS and a chunk's distinct words (:func:`distinct_in`) at
  96 B, and a round's copies of it (the words sorted by owner, the bytes sent and received, their counts) at 107
  B more: :func:`partial_bytes`, whatever the corpus. Plus the owner's counts of the distinct
  tokens it hash-owns, kept or not: about D/P of the corpus's D distinct tokens, known only as they are
  counted, so checked as they grow (``limit``, memory.CountingLimit). The reader holds one corpus.BLOCK_BYTES block
  and one chunk's tokens. On one rank there are no rounds: its partial Counter is the owner's. With the
  compiled passes the count can also encode (:func:`build`'s ``numbered``): each token's number in its table
  (4 B, written to disk beside the shard block by block; on several threads, a token counted in its thread's
  own table is named by its place there until the counts are read) becomes its id once the ids are agreed;
  on several ranks the numbers of the owners' tables, which each round answers (:func:`_count_compiled`), at
  most PENDING of them held between two rounds, and every owner's ids by number gathered on every rank at
  the end.
  The compiled passes (text_kernel.cc, native.Counts) keep the same bounds in tables of 32 B slots, 1.5 to
  three a word (two thirds full at most, grown in place), the bytes of words over 8 bytes beside them, on
  several threads each thread's own table of the words it meets first (memory.private_bytes), and a round's
  copies laid end to end (about 60 B a word), between two looks at the bound
  a larger part of text (THREAD_CHUNKS chunks a thread), whose tokens :func:`partial_bytes` adds. Each
  reader (corpus.readers: one, or one a .gz file) holds two blocks (one read ahead). The memory plan gives
  the owner's counts in either form (memory.counting_bytes; figures in hvd_w2v/bench/README.md, "The text
  passes").
- afterwards, nothing per word of the whole vocabulary: the CountRuns take 36 B per *distinct count*
  (RUN_BYTES), and agreeing the ids briefly holds every rank's histogram of counts. Strings are held only by
  hash and row owners: about 2/P of them each, with the arrays of their counts, hashes and ids.

tests/test_scale_memory.py measures the peak of vocab.build on 1 and 4 ranks; its figures, and those of a
Counter per rank of all its range's distinct tokens (before the rounds), are in hvd_w2v/bench/README.md
("Vocabulary counting").
"""
import functools
import hashlib
import math
import operator
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..common import progress
from ..common.errors import UserError
from ..common.wording import counted
from ..kernels import native
from ..parallel.shard import RowPlan
from . import corpus

NOISE_POWER = 0.75  # word2vec's unigram^0.75 noise (Config.ns_exponent's default): flattens it towards rare words

# Distinct words a rank's partial Counter may hold before it joins a round that sends them to their owners.
# Small next to a rank's share of a vocabulary worth spreading (a million words and more) and to the text
# the memory plan reads at a time (an 8 MiB block); each round costs a handful of collectives and work per word sent
# (hash64, sorting, merging), and a smaller bound sends the frequent words more often.
FLUSH_WORDS = 1 << 16
# Text counted between two looks at the bound: a chunk of it holds at most CHUNK_BYTES / 2 tokens (a token
# and its whitespace take 2 bytes or more), so Python's partial Counter never holds more than FLUSH_WORDS +
# CHUNK_BYTES / 2 = 98,304 words.
CHUNK_BYTES = 1 << 16
# The compiled count takes THREAD_CHUNKS chunks a thread of the rank between two looks at the bound: each call
# on T threads pays a fixed part (the threads' start and barriers: text_kernel.cc count_text), which one chunk
# a thread did not cover on 2 threads (hvd_w2v/bench/README.md,
# "The count's parts on several ranks").
THREAD_CHUNKS = 4
# Several ranks' one pass (count's ``numbered``): the provisional numbers a rank holds between two rounds, at
# most (a round comes sooner once they pass it): 4 B each, as many as a block has bytes at most.
PENDING = 1 << 20
# Bytes per word of the partial counts (96: the Counter) and of a round's copies above them (107: words
# sorted by owner, lengths, the bytes sent and received, counts, the owner's new entries), 8-byte words, per
# rank; measured with tracemalloc around vocab._flush on 2 and 4 ranks. The compiled tables take less (their
# 32 B slots, and the words while a round sends them).
PARTIAL_WORD_BYTES = 96 + 107


def part_bytes(threads=1, compiled=True):
    """The text a rank of ``threads`` threads counts between two looks at FLUSH_WORDS: CHUNK_BYTES (Python's
    loops, one thread), or THREAD_CHUNKS chunks a thread (the compiled count)."""
    return CHUNK_BYTES * (THREAD_CHUNKS * max(threads, 1) if compiled else 1)


def partial_bytes(threads=1, compiled=True):
    """Upper bound of the partial counts and a round's copies, bytes per rank of ``threads`` threads: FLUSH_WORDS
    words and the most new words a part can add (:func:`distinct_in`) at PARTIAL_WORD_BYTES, whatever the
    corpus."""
    return (FLUSH_WORDS + distinct_in(part_bytes(threads, compiled))) * PARTIAL_WORD_BYTES


def distinct_in(text_bytes):
    """The most distinct tokens a text of ``text_bytes`` bytes can hold: the shortest first, each with a byte of
    whitespace after it; there are (256 - len(WHITESPACE))^L tokens of L bytes. A part of 256 KiB holds 81,286
    at most, not the 131,072 tokens of two bytes each that a count of tokens alone would allow: its short tokens
    repeat."""
    alphabet = 256 - len(corpus.WHITESPACE)
    found, left, length = 0, text_bytes + 1, 1  # + 1: the last token needs no whitespace after it
    while left > length:
        n = min(alphabet ** length, left // (length + 1))
        found, left, length = found + n, left - n * (length + 1), length + 1
    return found


def pending_bytes(threads=1):
    """Upper bound of the one pass's numbers a rank of ``threads`` threads holds between two rounds (several
    ranks, :func:`_count_compiled`): PENDING and a part's more, and the part's own buffer, 4 B each (a part's
    numbers are at most its bytes + 1)."""
    return 4 * (PENDING + 2 * (part_bytes(threads) + 1))


def hash64(word):
    """A stable 64-bit hash of a word's bytes (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(word, digest_size=8).digest(), "little")


def hash_owner(h, ranks):
    """The rank that owns the word of 64-bit hash ``h`` (int or uint64 array): ranks own equal *ranges* of
    hashes, so the words of rank r all hash below those of rank r + 1 (what :func:`agree_ids` relies on)."""
    if isinstance(h, np.ndarray):
        return ((h >> np.uint64(32)) * np.uint64(ranks) >> np.uint64(32)).astype(np.int64)
    return ((h >> 32) * ranks) >> 32


RUN_BYTES = 8 + 8 + 4 + 8 + 8  # per distinct count: counts, starts, keep_by_run, weight, cum
# Buckets of the noise distribution's CDF, each naming the first run it can hold, so that a draw steps
# forward from there (a run or two) instead of a binary search over all runs for every draw (tests/test_noise.py
# holds the two equal). 8 B a bucket: GUIDE_BYTES = 512 KiB per rank, whatever the vocabulary.
GUIDE = 1 << 16
GUIDE_BYTES = 8 * GUIDE
# The keep-probabilities of the KEEP_HEAD most frequent words, by id: the compiled example builder reads them
# for most positions instead of searching the runs for each (python -m hvd_w2v.bench.phases, "examples").
KEEP_HEAD = 1 << 16
KEEP_HEAD_BYTES = 4 * KEEP_HEAD


class CountRuns:
    """Every word's corpus count, by id, in O(distinct counts) memory, the same on every rank.

    Ids are in count order (descending), so the words of one count hold consecutive ids: a *run*. The
    subsampling keep-probability and the noise weight (count^ns_exponent) depend on the count alone, so both are
    answered from the runs with no per-word table. A corpus of T tokens has fewer than sqrt(2 T) distinct
    counts (2,000 here for the 15M-token real corpus; under 1.5 million for a trillion tokens).
    """

    def __init__(self, counts, lengths, sample, ns_exponent=NOISE_POWER):
        self.counts = np.asarray(counts, np.int64)  # int64[D]: the distinct counts, descending
        self.starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)  # int64[D + 1]: first id of each
        self.size = int(self.starts[-1])  # V
        self.total = int((self.counts * np.diff(self.starts)).sum())  # occurrences of the kept words
        self.keep_by_run = keep_probability(self.counts, self.total, sample)
        self.keep_head = self.keep(np.arange(min(self.size, KEEP_HEAD)))  # float32, the same values
        self.weight = self.counts.astype(np.float64) ** ns_exponent  # each word's noise weight, by run
        self.cum = np.concatenate(([0.0], np.cumsum(self.weight * np.diff(self.starts))))  # before each run
        self.guide = _guide(self.cum)
        self._groups, self._tables = {}, {}  # noise groups and their compiled tables, made on first use

    @functools.cached_property
    def tree(self):
        """word2vec.c's Huffman tree of these counts (hierarchical softmax's, huffman.Tree), made on first use."""
        from .huffman import Tree

        return Tree.of(self)

    def run(self, ids):
        return np.searchsorted(self.starts, ids, side="right") - 1

    def count(self, ids):
        """int64 corpus counts of word ``ids``."""
        return self.counts[self.run(ids)]

    def keep(self, ids):
        """float32 probability that an occurrence of each of ``ids`` survives subsampling."""
        return self.keep_by_run[self.run(ids)]

    def noise_distinct(self, draws):
        """The expected number of distinct words among ``draws`` independent noise draws (:meth:`draw_noise`):
        the sum over words of 1 - (1 - q)^draws, q a word's share of the noise weight, run by run. The memory
        plan's bound of the noise rows a super-step touches (memory.noise_rows)."""
        if draws <= 0:
            return 0.0
        share = self.weight / self.cum[-1]  # q of each run's words
        return float((np.diff(self.starts) * -np.expm1(draws * np.log1p(-share))).sum())

    def draw_noise(self, uniforms):
        """Noise word ids for uniforms in [0, 1): the inverse CDF of count^ns_exponent, run by run."""
        return self.noise_group(0, 1).draw(uniforms)

    def noise_group(self, group, groups, head=0):
        """The noise distribution of noise group ``group`` of ``groups`` (config.Config.noise_groups): the
        ``head`` most frequent words, then the other ids congruent to ``group`` modulo ``groups``, each of these
        at ``groups`` times its count^ns_exponent weight (a :class:`NoiseGroup`, made once). Every shard draws
        the head; a group's other words are drawn by its 1/G of the shards alone, so at G times their weight.
        Group 0 of 1 is every word."""
        if not 0 <= group < min(groups, self.size):
            raise UserError(f"noise group {group} of {groups} on {self.size:,} words: a group holds the ids "
                            f"congruent to it modulo {groups}, at least one (give --noise-groups {self.size} or "
                            f"fewer)")
        key = (group, groups, min(head, self.size) if groups > 1 else 0)
        if key not in self._groups:
            lo, hi, length = self.starts[:-1], self.starts[1:], np.diff(self.starts)
            if groups == 1:
                made = NoiseGroup.of(lo, length, np.ones_like(lo), self.weight)
            else:  # the head's part of each run, then each run's words of the group past the head
                cut = key[2]
                first = np.maximum(lo, cut)
                first = first + (group - first) % groups  # the first id of the group at or past it
                tail = np.maximum(-((first - hi) // groups), 0)  # ids first, first + G, ... below hi
                made = NoiseGroup.of(np.concatenate((lo, first)),
                                     np.concatenate((np.clip(hi, None, cut) - lo, tail)).clip(0),
                                     np.concatenate((np.ones_like(lo), np.full_like(lo, groups))),
                                     np.concatenate((self.weight, groups * self.weight)))
            self._groups[key] = made
        return self._groups[key]

    def noise_tables(self, named):
        """The compiled builder's tables of the noise groups ``named`` ((group, groups, head) keys): their first,
        length, step, weight, cum and guide arrays end to end, and where each group's runs start among them
        (int64[len(named) + 1]); made once for each list (a rank's shards name the same groups at every
        super-step)."""
        if named not in self._tables:
            made = [self.noise_group(*key) for key in named]
            ends = np.cumsum([0] + [len(g.first) for g in made], dtype=np.int64)
            self._tables[named] = (*(np.ascontiguousarray(np.concatenate([getattr(g, f) for g in made]), t)
                                     for f, t in (("first", np.int64), ("length", np.int64), ("step", np.int64),
                                                  ("weight", np.float64), ("cum", np.float64), ("guide", np.int64))),
                                   ends)
        return self._tables[named]


def _guide(cum):
    """The run of each of GUIDE buckets' left edge over ``cum``, less one: a lower bound for every draw in the
    bucket, float rounding too."""
    edges = np.arange(GUIDE) * (cum[-1] / GUIDE)
    return np.maximum(np.searchsorted(cum, edges, side="right") - 2, 0)


@dataclass(frozen=True)
class NoiseGroup:
    """A noise distribution in runs of words of one weight: run r is the ids ``first[r] + step[r] * j``, j below
    ``length[r]``, each of weight ``weight[r]``; ``cum`` (float64[R + 1]) the weight before each run, ``guide``
    where a draw starts looking. The compiled builder draws by the same arrays (batches_kernel.cc's Noise)."""

    first: np.ndarray
    length: np.ndarray
    step: np.ndarray
    weight: np.ndarray
    cum: np.ndarray
    guide: np.ndarray

    @classmethod
    def of(cls, first, length, step, weight):
        """The runs that hold words (int64 first, length, step; float64 weight), with their cum and guide."""
        held = length > 0
        first, length, step, weight = first[held], length[held], step[held], weight[held].astype(np.float64)
        cum = np.concatenate(([0.0], np.cumsum(weight * length)))
        return cls(first.astype(np.int64), length.astype(np.int64), step.astype(np.int64), weight, cum, _guide(cum))

    def draw(self, uniforms):
        """Word ids for uniforms in [0, 1): the inverse CDF of the weights, run by run."""
        u = np.asarray(uniforms)
        x = u * self.cum[-1]
        last = len(self.weight) - 1
        run = self.guide[np.minimum((u * GUIDE).astype(np.int64), GUIDE - 1)]
        while True:  # forward to the run whose cumulative range holds x: the last with cum[run] <= x
            ahead = (run < last) & (self.cum[np.minimum(run + 1, last)] <= x)
            if not ahead.any():
                break
            run += ahead
        within = ((x - self.cum[run]) / self.weight[run]).astype(np.int64)
        return self.first[run] + self.step[run] * np.minimum(within, self.length[run] - 1)


class Vocab:
    """What one rank knows of the vocabulary. ``size`` words, ids ``0..size-1`` in frequency order."""

    distinct = 0  # the corpus's distinct tokens, kept or not, as :func:`build` counted them (0: unknown)
    provisional = None  # the stream counted in one pass and its numbers' ids (build's ``numbered``), or None
    most_owned = 0  # the most distinct tokens any rank hash-owned while counting (the memory plan's)
    block_distinct = 0  # the distinct tokens a block of text is expected to hold (0: unknown; the plan's)

    def __init__(self, runs, raw_words, lookup, row_words, row_counts, owned=None):
        self.runs = runs  # CountRuns: every id's count, keep-probability and noise weight
        self.size = runs.size  # V: words kept
        self.total = runs.total  # occurrences of kept words in the corpus
        self.raw_words = raw_words  # all tokens of the corpus, kept or not (gensim's "raw words")
        self._lookup = lookup  # {word bytes: id} for the words this rank hash-owns, or None: made from ``owned``
        # (words uint8 end to end, lengths int64, ids int64) of the same words, or None: made from ``lookup``
        self.owned = owned
        self.row_words = row_words  # WordList (or [bytes]): words of the rows this rank owns, local row order
        self.row_counts = row_counts  # int64[]: their corpus counts

    @property
    def lookup(self):
        """{word bytes: id} for the words this rank hash-owns: made on first use from ``owned`` (training never
        asks for it; the compiled encoding reads ``owned``), then kept."""
        if self._lookup is None:
            words, lengths, ids = self.owned
            self._lookup = dict(zip(split_words(words, lengths), ids.tolist()))
        return self._lookup

    def owned_words(self):
        """(words uint8 end to end, lengths int64, ids int64) of the words this rank hash-owns."""
        if self.owned is None:
            words = list(self._lookup)
            self.owned = (np.frombuffer(b"".join(words), np.uint8),
                          np.fromiter(map(len, words), np.int64, count=len(words)),
                          np.fromiter(self._lookup.values(), np.int64, count=len(words)))
        return self.owned

    def keep(self, ids):
        """float32 probability that an occurrence of each of ``ids`` survives subsampling."""
        return self.runs.keep(ids)

    def draw_noise(self, uniforms):
        """Noise word ids for uniforms in [0, 1): inverse CDF of count^ns_exponent (CountRuns)."""
        return self.runs.draw_noise(uniforms)


class Counted:
    """A hash owner's corpus counts of its words (:func:`count`): ``counts`` int64[n], and the words, laid end
    to end, only for those kept (:meth:`kept`), so that no Python object is made for a word below min_count."""

    def __init__(self, counts, words=None, blob=None, lengths=None, lib=None, numbers=None, quick=False,
                 aliases=None):
        self.counts = counts
        self._words, self._blob, self._lengths, self.lib = words, blob, lengths, lib
        self.numbers = numbers  # int64[n]: each word's provisional number (count's ``numbered``), or None
        self.aliases = aliases  # int64: each private index's provisional number (native.Counts.take), or None
        # Counted by the owner of the compiled tables' quick hash (several ranks' rounds), not the hash owner:
        # the kept words then move to their hash owners (build's _to_hash_owners)
        self.quick = quick

    @classmethod
    def of(cls, owned):
        """From a {word: count} dict (the Python passes)."""
        return cls(np.fromiter(owned.values(), dtype=np.int64, count=len(owned)), words=list(owned))

    def __len__(self):
        return len(self.counts)

    def kept(self, keep, threads=1):
        """(words uint8 end to end, lengths int64) where the bool array ``keep`` is True, in order (gathered on
        ``threads``)."""
        if self._words is not None:
            words = [w for w, k in zip(self._words, keep.tolist()) if k]
            return (np.frombuffer(b"".join(words), np.uint8),
                    np.fromiter(map(len, words), np.int64, count=len(words)))
        return gather_words(self._blob, self._lengths, np.flatnonzero(keep), threads)

    def hashes(self, words, lengths, threads=1):
        """uint64 hash64 of the words laid out in ``words`` by ``lengths``."""
        if self.lib is not None:
            return native.hash_words(self.lib, words, lengths, threads)
        return np.fromiter((hash64(w) for w in split_words(words, lengths)), dtype=np.uint64, count=len(lengths))


class WordList(Sequence):
    """Words (bytes) laid end to end, read as a sequence: ``words[i]`` the bytes of word i, a slice a WordList
    of the same bytes. A list of bytes objects costs a Python object a word, made one by one (the slowest part
    of the work after the count on a flat vocabulary: hvd_w2v/bench/README.md, "Designs measured and
    not kept"); this holds the bytes and 8 B a word, where each word ends. What a rank keeps of its rows' words
    (Vocab.row_words), read by vocab.txt's lines (export.write_vocab, compiled) and the vectors' export.
    Equal to any sequence of the same words."""

    def __init__(self, data, ends, start=0):
        self.data = data  # bytes
        self.ends = ends  # int64: where each word ends in ``data``
        self.start = start  # where the first word starts

    @classmethod
    def of(cls, words, lengths):
        """The words laid end to end in ``words`` (uint8) by ``lengths`` (int64)."""
        return cls(np.ascontiguousarray(words, np.uint8).tobytes(), np.cumsum(lengths, dtype=np.int64))

    def __len__(self):
        return len(self.ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            if step != 1:
                return [self[k] for k in range(lo, hi, step)]
            return WordList(self.data, self.ends[lo:max(lo, hi)], self._start(lo))
        i = operator.index(i)
        k = i + len(self) if i < 0 else i
        if not 0 <= k < len(self):
            raise IndexError(f"word {i} of {len(self)}")
        return self.data[self._start(k):int(self.ends[k])]

    def _start(self, i):
        return int(self.ends[i - 1]) if 0 < i <= len(self) else self.start

    def __iter__(self):
        """The words in order. The ends are made Python ints a block at a time: a list of them all would hold
        an int (32 B) a word at once."""
        data, start = self.data, self.start
        for lo in range(0, len(self.ends), 1 << 16):
            for end in self.ends[lo:lo + (1 << 16)].tolist():
                yield data[start:end]
                start = end

    def __eq__(self, other):
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self):
        return f"WordList({len(self):,} words)"


def split_words(words, lengths):
    """The list of bytes laid end to end in ``words`` (uint8) by ``lengths`` (int64)."""
    return list(WordList.of(words, lengths))


def gather_words(words, lengths, which, threads=1):
    """(words, lengths) of the words numbered ``which`` (int64) among those laid end to end in ``words`` by
    ``lengths``, in that order: compiled on ``threads`` where text_kernel.cc is built, else one numpy gather;
    no Python object per word either way."""
    lib = native.text_kernel()
    if lib is not None:
        return native.gather_words(lib, words, lengths, which, threads)
    starts = np.cumsum(lengths) - lengths
    picked = lengths[which]
    into = np.cumsum(picked) - picked  # where each starts in the result
    index = np.arange(int(picked.sum()), dtype=np.int64) + np.repeat(starts[which] - into, picked)
    return words[index], picked


def count(comm, pieces, error=None, reading=None, threads=1, limit=None, numbered=None):
    """The corpus counts of the words this rank hash-owns, from every rank's ``pieces`` (collective).

    Returns ``(Counted, tokens read by this rank)``. ``error``: this rank's bad-input message found before
    counting (it then reads nothing). ``reading``: a progress.Reading told how far the text is read (rank
    0's). ``threads``: the rank's threads, for the compiled passes (text_kernel.cc); without them Python's
    loops count on one thread, the same counts (on every rank, where any rank lacks the compiled passes).
    Raises UserError on every rank, at the first round after any rank meets bad input, with the lowest rank's
    message (Comm.agree). Memory: see the module docstring; the partial counts never exceed FLUSH_WORDS words
    plus one chunk's.

    ``limit`` (memory.CountingLimit, or None): asked, before the counts this rank owns take more words, how
    many distinct tokens it may own (its refusal or None); a refusal stops the count as bad input does, before
    those words are added. On more than one rank a round's words received are the most it can take on; on one
    rank, before each part of its text, as many more as the part before added (scaled by its bytes: a
    corpus's new words thin out as it goes on), or the part's tokens with Python's 64 KiB parts.

    ``numbered`` (an encode.Provisional, or None): with the compiled passes, the encoding done in the same
    pass: each block's stream in provisional numbers (native.Counts.add_numbered; on several ranks as the
    owners number the words: :func:`_count_compiled`) written to it, and the Counted's ``numbers`` set;
    without them ignored (``numbers`` None).
    """
    lib = native.text_kernel()
    if comm.size > 1 and not all(comm.allgather(lib is not None)):
        lib = None  # one path on every rank: the compiled rounds have owners and collectives of their own
    if lib is not None:
        if numbered is not None and comm.size == 1:
            return _count_numbered(lib, pieces, error, reading, threads, limit, numbered)
        return _count_compiled(comm, lib, pieces, error, reading, threads, limit, numbered)
    owned, local = {}, Counter()
    # One rank owns every word: its partial counts are final, so it counts straight into them, with no rounds.
    bound = FLUSH_WORDS if comm.size > 1 else math.inf
    chunks = iter(()) if error else _chunks(pieces, reading=reading)
    raw, done = 0, error is not None
    while True:
        while not done and len(local) <= bound:
            try:
                tokens = next(chunks, None)
            except UserError as e:
                error, tokens = str(e), None
            if tokens is not None and limit and comm.size == 1:
                error = limit(len(local) + len(tokens))
            if tokens is None or error:
                done = True
            else:
                raw += len(tokens)
                local.update(tokens)
        states = comm.allgather((done, error))  # one round: who is out of text, and any bad input
        errors = [e for _, e in states if e]
        if errors:  # every rank raises the same message, as Comm.agree does
            raise UserError(errors[0])
        if comm.size == 1:
            return Counted.of(local), raw
        error = _flush(comm, local, owned, limit)
        if error:
            done = True
        if all(d for d, _ in states):
            comm.agree(error)  # a refusal in the last round (a memory limit's)
            return Counted.of(owned), raw


def _expected(held, added, after, size):
    """The words one rank's count holds (native.Counts's len: its distinct words, and on several threads those
    counted again in another thread's own table) once it has counted a part of ``size`` bytes, expected at the
    last part's rate (``added`` new words in ``after`` bytes): what its limit is asked before the part."""
    return held + math.ceil(added * size / after)


def _count_compiled(comm, lib, pieces, error, reading, threads, limit, numbered=None):
    """:func:`count` with the compiled tables: the same rounds, the per-token work in text_kernel.cc on
    ``threads`` threads. A round's words travel laid end to end (uint8 and int64 arrays, no Python object per
    word).

    ``numbered`` (encode.Provisional, or None), on several ranks: the encoding in the same pass. Each part's
    tokens are numbered by the rank's partial tables (native.Counts.add_numbered), numbers that last until a
    round empties them; so the round's owners answer each word they receive with its number in their own
    tables, which last (native.Counts.add_words), and the rank rewrites the numbers held since the last round
    as *handles*, owner number x P + owner rank, and writes them to ``numbered`` (:func:`_write_handles`). A
    round also comes once those numbers pass PENDING, so that they stay bounded. The Counted's ``numbers`` are
    the owned words' numbers, or None when a handle would pass int32 (the stream is then not usable)."""
    local = native.Counts(lib, threads)
    owned = local if comm.size == 1 else native.Counts(lib, threads)  # a round's words added on the threads
    bound = FLUSH_WORDS if comm.size > 1 else math.inf
    chunk = part_bytes(threads) if comm.size > 1 else None  # one rank: whole blocks, no bound to look at
    parts = iter(()) if error else _parts(pieces, chunk, reading, threads)
    numbered = numbered if comm.size > 1 else None
    pending, held, usable, out = [], 0, True, None  # (piece, numbers) since the last round, and their count
    raw, done = 0, error is not None
    added, after = 0, 1  # one rank: the words the last part added, and its bytes
    while True:
        while not done and len(local) <= bound and held < PENDING:
            try:
                part = next(parts, None)
            except UserError as e:
                error, part = str(e), None
            if part is not None and limit and comm.size == 1:
                error = limit(_expected(len(local), added, after, part.end - part.start))
            if part is None or error:
                done = True
            elif numbered is not None:
                if out is None or len(out) < part.end - part.start + 1:
                    out = np.empty(part.end - part.start + 1, np.int32)
                tokens, stream = local.add_numbered(part.block, part.file_end, out, part.start, part.end)
                raw += tokens
                pending.append((part.piece, stream.copy()))
                held += len(stream)
            else:
                before = len(local)
                raw += local.add_text(part.block, part.start, part.end)
                added, after = len(local) - before, max(part.end - part.start, 1)
        states = comm.allgather((done, error))  # one round: who is out of text, and any bad input
        errors = [e for _, e in states if e]
        if errors:
            raise UserError(errors[0])
        if comm.size > 1:
            error, handles = _flush_compiled(comm, local, owned, limit, numbered is not None)
            if numbered is not None and error is None:
                usable, error = _write_handles(lib, pending, handles, numbered, usable, threads)
            pending, held = [], 0
            if error:
                done = True
        if comm.size == 1 or all(d for d, _ in states):
            break
    if comm.size > 1:
        comm.agree(error)  # a refusal in the last round (a memory limit's), or the stream's write
    del local
    quick = comm.size > 1  # the rounds' owners: by the tables' quick hash (Counted.quick)
    if numbered is not None:  # the owned words' numbers, which the handles name
        words, lengths, counts, _, _, numbers, _ = owned.take(1, keep=False, hashed=False, numbered=True)
        return Counted(counts, blob=words, lengths=lengths, lib=lib, numbers=numbers if usable else None,
                       quick=quick), raw
    words, lengths, counts, _, _ = owned.take(1, keep=False, hashed=False)  # hashes: only for the words kept
    return Counted(counts, blob=words, lengths=lengths, lib=lib, quick=quick), raw


def _write_handles(lib, pending, handles, numbered, usable, threads=1):
    """Write the numbers held since the last round (``pending``: (piece, int32 numbers of the rank's partial
    tables)) to ``numbered`` as the round's ``handles`` name them ((int64 by number, int64 by private index:
    native.remap's ``below``)): (whether the stream is still usable, the write's error message or None). A handle
    past int32 makes it unusable: nothing more is written (encode then reads the text again). Remapped on
    ``threads``."""
    handles, below = handles
    if not usable or (len(handles) and int(handles.max()) >= 2**31 - 1):
        return False, None
    handles, below = handles.astype(np.int32), below.astype(np.int32)
    try:
        for piece, stream in pending:  # -1: a newline, kept as -1
            numbered.write(piece, native.remap(lib, stream, handles, -1, threads, below))
    except UserError as e:
        return usable, str(e)
    return usable, None


def _count_numbered(lib, pieces, error, reading, threads, limit, numbered):
    """:func:`count` on one rank with the compiled tables, each block's tokens also numbered and written, piece
    by piece, to ``numbered`` (encode.Provisional). The same counts, limit and errors as _count_compiled's
    (on an error :func:`build` empties ``numbered``)."""
    if error:
        raise UserError(error)
    counts = native.Counts(lib, threads)
    raw, added, after, out = 0, 0, 1, None  # the words the last block added, and its bytes
    for i, (block, file_end) in corpus.read_ahead(pieces, corpus.readers(pieces, threads), reading):
        if limit:
            error = limit(_expected(len(counts), added, after, len(block)))
            if error:
                raise UserError(error)
        before = len(counts)
        if out is None or len(out) < len(block) + 1:  # room for later blocks' ends; the old one freed first
            out = None
            out = np.empty(len(block) + (1 << 20), np.int32)
        tokens, stream = counts.add_numbered(block, file_end, out)
        numbered.write(i, stream)
        del stream
        raw += tokens
        added, after = len(counts) - before, max(len(block), 1)
    words, lengths, values, _, _, numbers, aliases = counts.take(1, keep=False, hashed=False, numbered=True)
    return Counted(values, blob=words, lengths=lengths, lib=lib, numbers=numbers, aliases=aliases), raw


def _flush_compiled(comm, local, owned, limit=None, numbered=False):
    """_flush with native.Counts: the words travel laid end to end (collective: one round). Returns (the
    limit's refusal or None, handles or None). With ``numbered``, each owner answers every word it received
    with its number in ``owned``, and the handles are int64 by the partial tables' numbers: a word's owner
    number x ranks + owner rank (-1 for numbers no word has; all -1 on a refusal); with the same by private
    index (native.Counts.take's aliases) after them."""
    words, lengths, counts, _, per_dest, *numbers = local.take(comm.size, numbered=numbered, quick=True)
    got_words, got_lengths = exchange_bytes(comm, words, lengths, per_dest)
    del words
    got_counts, got = comm.alltoallv(counts, per_dest)
    refused = limit(len(owned) + len(got_lengths)) if limit else None
    answers = None
    if not refused:
        answers = owned.add_words(got_words, got_lengths, got_counts, numbered)
    if not numbered:
        return refused, None
    if answers is None:
        answers = np.full(len(got_lengths), -1, np.int64)
    # Back to the askers, in their order (the transpose of what they sent), as their words' handles.
    answers, _ = comm.alltoallv(answers, got, recv_counts=per_dest)
    numbers, aliases = numbers
    handles = np.full(int(numbers.max(initial=-1)) + 1, -1, np.int64)
    handles[numbers] = np.where(answers < 0, -1, answers * comm.size + np.repeat(np.arange(comm.size), per_dest))
    return refused, (handles, native.aliased(handles, aliases))


def _flush(comm, local, owned, limit=None):
    """Send the partial counts ``local`` to the words' hash owners, add those received to ``owned``, and
    empty ``local`` (collective: one round). Returns ``limit``'s refusal of the words received (then not
    added), or None."""
    words = list(local)
    counts = np.fromiter(local.values(), dtype=np.int64, count=len(words))  # in the order of ``words``
    local.clear()
    order, per_dest = _owner_order(words, comm.size)
    words = [words[i] for i in order.tolist()]
    got_words = exchange_words(comm, words, per_dest)
    del words
    got_counts, _ = comm.alltoallv(counts[order], per_dest)
    refused = limit(len(owned) + len(got_words)) if limit else None
    if refused:
        return refused
    get = owned.get
    for w, c in zip(got_words, got_counts.tolist()):
        owned[w] = get(w, 0) + c
    return None


_WHITESPACE = re.compile(b"[" + re.escape(corpus.WHITESPACE) + b"]")


def _chunks(pieces, chunk_bytes=None, reading=None):
    """The token lists of ``pieces``, each from at most about ``chunk_bytes`` (default CHUNK_BYTES) of text:
    corpus blocks cut at whitespace, so that no token is split and a block's tokens are never all alive.
    ``reading``: corpus.read_blocks's."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    for block, _ in corpus.read_blocks(pieces, reading=reading):
        start = 0
        while start < len(block):
            cut = _WHITESPACE.search(block, start + chunk_bytes) if start + chunk_bytes < len(block) else None
            end = cut.start() if cut else len(block)
            yield block[start:end].split()
            start = end


class TextPart(NamedTuple):
    """Text :func:`count` takes at a time: ``block[start:end]``, of piece ``piece``, the end of its file when
    ``file_end`` (the block's last part, of a file's last block)."""

    block: bytes
    start: int
    end: int
    piece: int
    file_end: bool


def _parts(pieces, chunk_bytes, reading, threads):
    """The :class:`TextPart` s of the text of ``pieces``: corpus blocks, read and checked ahead (corpus.read_ahead,
    on corpus.readers(pieces, threads) threads: several files' blocks interleaved, which counts do not mind,
    and the one pass writes piece by piece), cut at whitespace into parts of about ``chunk_bytes`` (None:
    whole blocks). An empty block at a file's end is a part of its own, for the file's end."""
    # The readers check each block (1 thread a block: a small share of the work) while the rank's threads
    # count the one before, rather than two teams of threads at once on the rank's cores.
    for i, (block, file_end) in corpus.read_ahead(pieces, corpus.readers(pieces, threads), reading):
        if not block and file_end:
            yield TextPart(block, 0, 0, i, True)
        for start, end in cuts(block, chunk_bytes):
            yield TextPart(block, start, end, i, file_end and end == len(block))


def cuts(block, chunk_bytes):
    """``(start, end)`` of the parts of ``block`` (bytes of whole tokens) cut at the first whitespace after
    each ``chunk_bytes`` (None: the whole block)."""
    start = 0
    while start < len(block):
        cut = (_WHITESPACE.search(block, start + chunk_bytes)
               if chunk_bytes and start + chunk_bytes < len(block) else None)
        end = cut.start() if cut else len(block)
        yield start, end
        start = end


def build(comm, paths, cfg, log=lambda m: None, reading=True, limit=None, numbered=None, given=None,
          previous=None):
    """Count, filter and rank the vocabulary of ``paths`` on all ranks (collective), with rank 0's progress
    through the text (progress.Reading) unless ``reading`` is False. UserError on every rank when some rank
    cannot read a file or sees another size than rank 0 (corpus.check_shared), or when the counts a rank
    hash-owns outgrow ``limit`` (memory.CountingLimit, see :func:`count`).

    ``numbered`` (encode.Provisional, or None): encode in the same pass where :func:`count` can (the compiled
    passes). The Vocab's ``provisional`` is then (``numbered``, int32 id of each provisional number, -1 for
    a word not kept, and of each private index: native.remap's ``below``), which encode.encode turns into the id
    stream; else None. On any error ``numbered`` is emptied (nothing of the stream is left).

    ``given``: (Counted, tokens, where from) that stand for this rank's count (readvocab.counts, word2vec.c's
    -read-vocab): the text is not read here, ``numbered`` must be None, and ``raw_words`` is the tokens summed.

    ``previous``: the vocabulary of a run that goes on with this text (readvocab.Listed of its vocab.txt; train
    --update): merged with the count by :func:`merged`, the Vocab's ``previous_ids`` then each local row's id in
    that run (-1: a new word)."""
    assert not ((given or previous) and numbered is not None), "a vocabulary not counted alone numbers no stream"
    try:
        return _build(comm, paths, cfg, log, reading, limit, numbered, given, previous)
    except BaseException:
        if numbered is not None:
            numbered.remove()
        raise


def _build(comm, paths, cfg, log, reading, limit, numbered, given, previous):
    corpus.check_shared(comm, paths)
    if given:
        tally, raw, source = given
    else:
        pieces = corpus.split(paths, comm.size)[comm.rank]
        shown = progress.Reading("vocab", pieces, log, threads=comm.threads) if reading and comm.rank == 0 else None
        tally, raw = count(comm, pieces, reading=shown, threads=comm.threads, limit=limit, numbered=numbered)
    raw_words = comm.allreduce(raw)
    if raw_words == 0:
        raise UserError(f"{source} holds no word that occurs" if given else
                        "the corpus holds no words (only whitespace)")
    distinct, most_owned = comm.allreduce(len(tally)), comm.allreduce(len(tally), "max")
    log(f"vocab: {distinct:,} words and their {raw_words:,} occurrences read from {source}" if given else
        f"vocab: {raw_words:,} words read, {distinct:,} distinct tokens")
    # The distinct tokens of a block of text (corpus.BLOCK_BYTES), expected were the corpus's tokens in random
    # order, sum of 1 - (1 - share) ** count: text repeats its words nearer together, so a block holds fewer.
    # What the encoding asks of the owners at a time, for the memory plan (0: a gzip text's share is unknown).
    text_bytes = 0 if any(p.endswith(".gz") for p in paths) else sum(os.path.getsize(p) for p in paths)
    if not text_bytes or text_bytes <= corpus.BLOCK_BYTES:
        block_distinct = distinct if text_bytes else 0
    else:  # the same branch on every rank: they see the same files
        rest = math.log1p(-corpus.BLOCK_BYTES / text_bytes)
        block_distinct = math.ceil(comm.allreduce(float(-np.expm1(rest * tally.counts).sum())))

    keep = tally.counts >= (1 if previous else cfg.min_count)  # with a previous run: merged at the hash owners
    if cfg.max_final_vocab:  # gensim's rule: min_count raised until at most that many words are left
        keep &= tally.counts >= _count_floor(comm, tally.counts[keep], cfg.max_final_vocab)
    counts, (words, lengths) = tally.counts[keep], tally.kept(keep, comm.threads)
    hashes = tally.hashes(words, lengths, comm.threads)
    # One pass (count's ``numbered``): the kept words' provisional numbers, how many numbers there are, and the
    # number each private index stands for.
    numbers = (None if tally.numbers is None else
               (tally.numbers[keep], int(tally.numbers.max(initial=-1)) + 1, tally.aliases))
    moved = None
    if tally.quick:  # counted by quick-hash owners: the kept words to their hash owners, as agree_ids takes them
        moved, (words, lengths, counts, hashes) = _to_hash_owners(comm, words, lengths, counts, hashes)
    del tally, keep
    places = None
    if previous is not None:
        words, lengths, counts, hashes, places = merged(words, lengths, counts, hashes, previous, cfg.min_count,
                                                        comm.threads)
    size = comm.allreduce(len(lengths))
    if size < comm.size:
        raise UserError(f"only {counted(size, 'word')} {'occurs' if size == 1 else 'occur'} at least "
                        f"--min-count={cfg.min_count} times: fewer than the "
                        f"{counted(comm.size, 'rank')}; lower --min-count, use a larger corpus or fewer ranks")

    my_ids, runs = agree_ids(comm, counts, hashes, cfg.sample, comm.threads, cfg.ns_exponent)
    del counts, hashes  # each array of V/P words freed once used: build's peak stays under the count's
    if numbered is not None:  # the numbers are the counting owners': their words' ids go back to them
        counted_ids = my_ids if moved is None else moved(my_ids)
        provisional = _provisional_ids(comm, numbered, numbers, counted_ids)
    else:
        provisional = None
    numbers = moved = None

    # Row owners get the strings and counts of their rows.
    plan = RowPlan(size, comm.size)
    _, _, _, row_words, row_lengths, (row_ids, *row_places) = to_owners(
        comm, plan.owner(my_ids), words, lengths, my_ids, *([] if places is None else [places]))
    by_row = np.empty(len(row_ids), np.int64)  # each local row receives one word: the inverse permutation
    by_row[plan.local_row(row_ids)] = np.arange(len(row_ids))
    previous_ids = row_places[0][by_row] if row_places else None
    del row_ids, row_places
    # Each of this rank's rows receives one word: the words in local row order.
    words_by_row = WordList.of(*gather_words(row_words, row_lengths, by_row, comm.threads))
    del row_words, row_lengths, by_row
    assert len(words_by_row) == plan.rows(comm.rank)
    if previous_ids is None:
        log(f"vocab: {size:,} words with count >= {cfg.min_count} ({runs.total:,} of the {raw_words:,} tokens)")
    else:
        new = comm.allreduce(int((previous_ids < 0).sum()))
        log(f"vocab: {size:,} words: the run's {size - new:,}, and {new:,} new with count >= {cfg.min_count} here; "
            f"{runs.total:,} occurrences in both texts")
    voc = Vocab(runs, raw_words, None, words_by_row, runs.count(plan.ids(comm.rank)), (words, lengths, my_ids))
    voc.distinct, voc.most_owned, voc.block_distinct = distinct, most_owned, block_distinct
    voc.provisional, voc.previous_ids = provisional, previous_ids
    # The count's and the agreement's arrays, freed, would otherwise stay resident through training.
    native.trim_heap()
    return voc


def merged(words, lengths, counts, hashes, previous, min_count, threads=1):
    """The words a hash owner keeps when a run goes on with new text (train --update): ``words`` (uint8 end to
    end), ``lengths``, ``counts`` and ``hashes`` the new text's words it owns, every one counted; ``previous``
    (readvocab.Listed) the run's words it owns. Every word of the run is kept, its count that of both texts; a
    new word when its count here reaches ``min_count``, as gensim's build_vocab(update=True). Returns (words,
    lengths, counts, hashes, places: each word's id in the run, -1 for a new one): the text's words first."""
    order = np.argsort(previous.word_hashes, kind="stable")
    known = previous.word_hashes[order]
    at = np.minimum(np.searchsorted(known, hashes), max(len(known) - 1, 0))
    found = known[at] == hashes if len(known) else np.zeros(len(hashes), bool)
    counts, places = counts.copy(), np.full(len(hashes), -1, np.int64)
    counts[found] += previous.counts[order[at[found]]]
    places[found] = previous.places[order[at[found]]]
    keep = found | (counts >= min_count)
    left = np.ones(len(known), bool)  # the run's words the text lacks
    left[order[at[found]]] = False
    here = gather_words(words, lengths, np.flatnonzero(keep), threads)
    there = previous.kept(left, threads)
    return (np.concatenate([here[0], there[0]]), np.concatenate([here[1], there[1]]),
            np.concatenate([counts[keep], previous.counts[left]]), np.concatenate([hashes[keep],
                                                                                 previous.word_hashes[left]]),
            np.concatenate([places[keep], previous.places[left]]))


def _to_hash_owners(comm, words, lengths, counts, hashes):
    """Move the kept words (laid end to end), their counts and hash64s from the ranks that counted them to
    their hash owners (:func:`hash_owner`), in one round (collective). Returns (a function that takes the
    hash owners' values of the words they received, such as their ids, back to the counting ranks in their
    words' order; the received words, lengths, counts and hashes)."""
    order, per_dest, got, got_words, got_lengths, (got_counts, got_hashes) = to_owners(
        comm, hash_owner(hashes, comm.size), words, lengths, counts, hashes)

    def back(values):
        answers, _ = comm.alltoallv(values, got, recv_counts=per_dest)
        out = np.empty_like(answers)
        out[order] = answers
        return out

    return back, (got_words, got_lengths, got_counts, got_hashes)


def to_owners(comm, owner, words, lengths, *values):
    """Send each word (laid end to end) and its item of each of ``values`` (at least one) to rank ``owner`` (int
    array, a rank a word), in one round (collective). Returns (the words' order by owner, how many go to each
    rank, how many came from each, the words received and their lengths, the list of each of ``values``
    received), in rank order of sender."""
    order = np.argsort(owner, kind="stable")
    per_dest = np.bincount(owner, minlength=comm.size)
    got_words, got_lengths = exchange_bytes(comm, *gather_words(words, lengths, order, comm.threads), per_dest)
    received, got = [], None
    for v in values:
        part, got = comm.alltoallv(v[order], per_dest, recv_counts=got)
        received.append(part)
    return order, per_dest, got, got_words, got_lengths, received


def _provisional_ids(comm, numbered, numbers, my_ids):
    """The one pass's (``numbered``, int32 id of each number its stream holds, -1 for a word not kept, the same
    by private index: native.remap's ``below``), or None with ``numbered`` emptied where the stream is not usable
    on some rank (collective). ``numbers``: (the kept words' numbers in this rank's owned tables, as many numbers
    as those tables gave, the tables' aliases), or None. On one rank the stream holds those numbers and private
    indices; on several, handles, owner number x ranks + owner rank (:func:`count`), so every rank gathers every
    owner's ids by number: 4 B a number of the corpus's distinct tokens."""
    size = numbers[1] if numbers is not None else 2**31
    sizes = comm.allgather(size) if comm.size > 1 else [size]
    if max(sizes) * comm.size > 2**31 - 1:  # past int32 (or unusable on some rank): read the text again
        numbered.remove()
        return None
    ids = np.full(size, -1, np.int32)
    ids[numbers[0]] = my_ids
    if comm.size == 1:
        return numbered, ids, native.aliased(ids, numbers[2])
    got = comm.allgatherv(ids, sizes)  # every owner's ids to every rank, interleaved by owner
    ids = np.full((max(sizes), comm.size), -1, np.int32)
    for r, part in enumerate(np.split(got, np.cumsum(sizes)[:-1])):
        ids[:len(part), r] = part
    return numbered, ids.ravel(), None


def agree_ids(comm, counts, hashes, sample, threads=1, ns_exponent=NOISE_POWER):
    """Global ids of this rank's words, and the CountRuns of the vocabulary (collective; ``sample`` and
    ``ns_exponent`` its subsampling and noise).

    ``counts`` (int64[n]) and ``hashes`` (uint64[n]): this rank's words, which it hash-owns. Ids sort by count,
    descending, then by hash: a function of the words alone, so the same on any rank count. Ranks own
    *ranges* of hashes (hash_owner), so within one count the words are ordered rank by rank, and a word's id
    is (the words of higher counts) + (its count's words on lower ranks) + (its place among this rank's words
    of its count). Only each rank's histogram of counts travels: O(P x distinct counts) per rank, never
    O(V) (the former global sort held 40 B per word on every rank). The rank's sort runs on ``threads``
    (native.count_order) where text_kernel.cc is built; the rest is linear.
    """
    lib = native.text_kernel()
    order = (native.count_order(lib, counts, hashes, threads) if lib is not None
             else np.lexsort((hashes, -counts)))
    ordered = counts[order]  # descending: this rank's runs of one count start where it changes
    change = np.ones(len(ordered), bool)
    change[1:] = ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(change)
    mine, lengths = ordered[starts], np.diff(np.append(starts, len(ordered)))  # this rank's distinct counts
    del ordered
    hists = comm.allgather((mine, lengths))  # mpi4py: every rank's histogram of counts
    distinct = -np.unique(np.concatenate([-c for c, _ in hists]))  # all distinct counts, descending
    per_rank = np.zeros((comm.size, len(distinct)), np.int64)
    for r, (c, n) in enumerate(hists):
        per_rank[r, np.searchsorted(-distinct, -c)] = n
    base = np.cumsum(per_rank.sum(axis=0)) - per_rank.sum(axis=0) + per_rank[:comm.rank].sum(axis=0)
    # A word's id: its count's base, plus its place in this rank's run of that count.
    first = base[np.searchsorted(-distinct, -mine)] - starts
    ids = np.empty(len(counts), np.int64)
    ids[order] = np.repeat(first, lengths) + np.arange(len(order))
    return ids, CountRuns(distinct, per_rank.sum(axis=0), sample, ns_exponent)


def keep_probability(counts, total, sample):
    """word2vec.c's subsampling: an occurrence of a word with frequency f = count/total is kept with
    probability (sqrt(f / sample) + 1) * sample / f, capped at 1; frequent words are thinned the most."""
    if sample == 0:
        return np.ones(len(counts), dtype=np.float32)
    threshold = sample * total
    p = (np.sqrt(counts / threshold) + 1) * threshold / counts
    return np.minimum(p, 1.0).astype(np.float32)


def _count_floor(comm, counts, limit):
    """The smallest count c such that at most ``limit`` words (over all ranks) have count >= c."""
    lo, hi = 1, comm.allreduce(int(counts.max()) if len(counts) else 0, "max") + 1
    while lo < hi:  # bisect on c: the number of words with count >= c falls as c grows
        mid = (lo + hi) // 2
        if comm.allreduce(int((counts >= mid).sum())) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return lo


def by_hash_owner(words, ranks):
    """``words`` ordered by hash owner (``hash_owner(hash64(word))``, stable), and how many go to each rank."""
    words = list(words)
    order, per_dest = _owner_order(words, ranks)
    return [words[i] for i in order.tolist()], per_dest


def _owner_order(words, ranks):
    """The positions of ``words`` (a list) sorted by hash owner, stable; and how many go to each rank."""
    owners = hash_owner(np.fromiter((hash64(w) for w in words), dtype=np.uint64, count=len(words)), ranks)
    return np.argsort(owners, kind="stable"), np.bincount(owners, minlength=ranks)


def exchange_words(comm, words, per_dest):
    """Send word strings by destination (``per_dest[d]`` words, in order); returns those received."""
    lengths = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    blob = np.frombuffer(b"".join(words), dtype=np.uint8)
    got_blob, got_lengths = exchange_bytes(comm, blob, lengths, per_dest)
    return split_words(got_blob, got_lengths)


def exchange_bytes(comm, words, lengths, per_dest):
    """Send words laid end to end (uint8 ``words``, int64 ``lengths``) by destination (``per_dest[d]`` words,
    in order); returns ``(words, lengths)`` of those received, laid out alike."""
    got_lengths, _ = comm.alltoallv(lengths, per_dest)
    ends = np.concatenate(([0], np.cumsum(lengths)))[np.cumsum(per_dest)]
    got_words, _ = comm.alltoallv(words, np.diff(np.concatenate(([0], ends))).astype(np.int64))
    return got_words, got_lengths
