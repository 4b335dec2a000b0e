"""The vocabulary, built in parallel: no rank holds the whole word table.

1. Each rank counts the tokens of its own byte range (corpus.split).
2. Counts go to the word's *hash owner*, ``hash64(word) % P``, which sums them and applies ``min_count``
   and ``max_vocab_size``.
3. A global frequency rank (the word's *id*) is agreed: ids sort by count, descending, ties by hash64, so the
   ids do not depend on the rank count. Hash owners keep ``word -> id`` for their words (used to encode).
4. Each word's string goes to its *row owner* (shard.RowPlan), which keeps the strings of its rows (export).

Per word, every rank keeps 8 bytes: ``keep`` (float32 subsampling keep-probability) and ``noise_cdf``
(uint32 cumulative unigram^0.75 table). Strings are held only by hash and row owners: about 2/P of them.
While ids are agreed, each rank holds (count, hash) of every word for a moment: 16 bytes per word.
"""
import hashlib
from collections import Counter

import numpy as np

from . import corpus
from .errors import UserError
from .shard import RowPlan

NOISE_POWER = 0.75  # word2vec's unigram^0.75 noise: flattens the distribution towards rare words
CDF_DOMAIN = 2**31 - 1  # noise_cdf is scaled to this, as gensim's cum_table


def hash64(word):
    """A stable 64-bit hash of a word's bytes (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(word, digest_size=8).digest(), "little")


class Vocab:
    """What one rank knows of the vocabulary. ``size`` words, ids ``0..size-1`` in frequency order."""

    def __init__(self, size, counts_total, raw_words, keep, noise_cdf, lookup, row_words, row_counts):
        self.size = size  # V: words kept
        self.total = counts_total  # occurrences of kept words in the corpus
        self.raw_words = raw_words  # all tokens of the corpus, kept or not (gensim's "raw words")
        self.keep = keep  # float32[V]: probability that an occurrence of id survives subsampling
        self.noise_cdf = noise_cdf  # uint32[V]: cumulative unigram^0.75, scaled to CDF_DOMAIN
        self.lookup = lookup  # {word bytes: id} for the words this rank hash-owns
        self.row_words = row_words  # [bytes]: words of the rows this rank owns, in local row order
        self.row_counts = row_counts  # int64[]: their corpus counts

    def draw_noise(self, uniforms):
        """Noise word ids for uniforms in [0, 1): inverse CDF of unigram^0.75."""
        return np.searchsorted(self.noise_cdf, (uniforms * CDF_DOMAIN).astype(np.uint32), side="right")


def count_local(pieces):
    """Token counts of one rank's pieces, and the number of tokens (raw words)."""
    counts = Counter()
    raw = 0
    for block, _ in corpus.read_blocks(pieces):
        tokens = block.split()
        raw += len(tokens)
        counts.update(tokens)
    return counts, raw


def build(comm, paths, cfg, log=lambda m: None):
    """Count, filter and rank the vocabulary of ``paths`` on all ranks (collective)."""
    error = None
    try:
        corpus.check_files(paths)
        local, raw = count_local(corpus.split(paths, comm.size)[comm.rank])
    except UserError as e:
        error, local, raw = str(e), Counter(), 0
    comm.agree(error)
    raw_words = comm.allreduce(raw)
    if raw_words == 0:
        raise UserError("the corpus holds no words (only whitespace)")
    log(f"vocab: {raw_words:,} words read, {comm.allreduce(len(local)):,} distinct tokens on all ranks")

    # Hash owners sum the counts of their words: send (word, count) pairs to hash64(word) % P.
    words, per_dest = by_hash_owner(local, comm.size)
    sent_counts = np.array([local[w] for w in words], dtype=np.int64)
    got_words = exchange_words(comm, words, per_dest)
    got_counts, _ = comm.alltoallv(sent_counts, per_dest)
    merged = Counter()
    for w, c in zip(got_words, got_counts.tolist()):
        merged[w] += c
    del local, words, got_words

    mine = [(w, c) for w, c in merged.items() if c >= cfg.min_count]
    del merged
    if cfg.max_vocab_size:
        floor = _count_floor(comm, np.array([c for _, c in mine], dtype=np.int64), cfg.max_vocab_size)
        mine = [(w, c) for w, c in mine if c >= floor]
    size = comm.allreduce(len(mine))
    if size < comm.size:
        raise UserError(f"only {size} words occur at least --min-count={cfg.min_count} times: fewer than the "
                        f"{comm.size} ranks; lower --min-count, use a larger corpus or fewer ranks")

    # Agree the ids: every rank sorts the (count, hash) of all words the same way (16 bytes/word, briefly).
    my_counts = np.array([c for _, c in mine], dtype=np.int64)
    my_hashes = np.fromiter((hash64(w) for w, _ in mine), dtype=np.uint64, count=len(mine))
    all_counts = np.concatenate(comm.allgather(my_counts))
    all_hashes = np.concatenate(comm.allgather(my_hashes))
    order = np.lexsort((all_hashes, -all_counts))  # position k of the sorted list is id k
    del all_hashes
    ids = np.empty(size, dtype=np.int64)
    ids[order] = np.arange(size)
    start = sum(comm.allgather(len(mine))[: comm.rank])
    my_ids = ids[start:start + len(mine)]
    counts_by_id = all_counts[order]
    del all_counts, order, ids
    lookup = {w: int(i) for (w, _), i in zip(mine, my_ids)}

    # Row owners get the strings and counts of their rows.
    plan = RowPlan(size, comm.size)
    owner = plan.owner(my_ids)
    order = np.argsort(owner, kind="stable")
    per_dest = np.bincount(owner, minlength=comm.size)
    row_words = exchange_words(comm, [mine[i][0] for i in order], per_dest)
    row_ids, _ = comm.alltoallv(my_ids[order], per_dest)
    local_rows = plan.local_row(row_ids)
    words_by_row = [b""] * plan.rows(comm.rank)
    for w, r in zip(row_words, local_rows.tolist()):
        words_by_row[r] = w
    row_counts = counts_by_id[plan.ids(comm.rank)]

    total = int(counts_by_id.sum())
    keep = keep_probability(counts_by_id, total, cfg.sample)
    noise = np.cumsum(counts_by_id.astype(np.float64) ** NOISE_POWER)
    noise_cdf = np.round(noise / noise[-1] * CDF_DOMAIN).astype(np.uint32)
    log(f"vocab: {size:,} words with count >= {cfg.min_count} ({total:,} of the {raw_words:,} tokens)")
    return Vocab(size, total, raw_words, keep, noise_cdf, lookup, words_by_row, row_counts)


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
    """``words`` ordered by hash owner (``hash64(word) % ranks``, stable), and how many go to each rank."""
    words = list(words)
    owners = np.fromiter((hash64(w) % ranks for w in words), dtype=np.int64, count=len(words))
    order = np.argsort(owners, kind="stable")
    return [words[i] for i in order], np.bincount(owners, minlength=ranks)


def exchange_words(comm, words, per_dest):
    """Send word strings by destination (``per_dest[d]`` words, in order); returns those received."""
    lengths = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    got_lengths, _ = comm.alltoallv(lengths, per_dest)
    bytes_per_dest = np.array([int(s.sum()) for s in np.split(lengths, np.cumsum(per_dest)[:-1])],
                              dtype=np.int64)
    blob = np.frombuffer(b"".join(words), dtype=np.uint8)
    got_blob, _ = comm.alltoallv(blob, bytes_per_dest)
    data = got_blob.tobytes()
    ends = np.cumsum(got_lengths).tolist()
    return [data[e - n:e] for e, n in zip(ends, got_lengths.tolist())]
