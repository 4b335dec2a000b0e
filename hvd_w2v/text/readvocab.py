"""The vocabulary's counts read from a file instead of counted (``--read-vocab FILE``, word2vec.c's -read-vocab).

The file holds a ``word count`` line a word (word2vec.c's -save-vocab, or a run's own vocab.txt); word2vec.c's
``</s>`` line (its sentence end, which hvd-w2v's text passes never count as a word: a line end ends a sentence)
is passed over. Every rank reads the lines that start in its share of the file's bytes and sends each word
with its count to the word's hash owner, as the count's partial counts go: no rank holds the whole vocabulary.
From there vocab.build goes on as after a count (--min-count, --max-final-vocab, the ids in frequency order),
so a run's own vocab.txt read back gives the same vocabulary, ids and vectors as the run.
"""
import os

import numpy as np

from ..kernels import native
from .vocab import Counted, hash64, hash_owner, split_words, to_owners

SENTENCE_END = b"</s>"  # word2vec.c's sentence end, its vocabulary's first word
TAIL_BYTES = 1 << 16  # read at a time past a rank's share, to the end of its last line


class Listed(Counted):
    """The words of a vocabulary file a rank hash-owns: Counted's counts and words, with each word's hash64
    (``word_hashes``) and its place among the file's words (``places``: for a run's vocab.txt, its id there)."""

    def __init__(self, counts, blob, lengths, lib, hashes, places):
        super().__init__(counts, blob=blob, lengths=lengths, lib=lib)
        self.word_hashes, self.places = hashes, places


def counts(comm, path):
    """(Listed: the words of ``path`` this rank hash-owns, the counts of this rank's lines summed, ``path``)
    on every rank (collective): vocab.build's ``given``. UserError on every rank alike when the file cannot
    be read, a line is not ``word count`` (named by its number), or a word is listed twice."""
    error, words, found = None, [], []
    try:
        lines = _my_lines(path, comm.rank, comm.size)
    except OSError as e:
        lines, error = [], f"cannot read --read-vocab {path}: {e.strerror}"
    numbers = comm.allgather(len(lines))  # mpi4py: every rank's line count, so that a line is named by its number
    first = sum(numbers[:comm.rank]) + 1
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        word, _, number = line.rpartition(b" ")
        if not word or word.split() != [word] or not number.isdigit():
            error = error or (f"--read-vocab {path}, line {first + i:,}: expected 'word count' (a word, a space, a "
                              f"whole number), got {line[:80].decode('utf-8', 'replace')!r}")
            break
        if word != SENTENCE_END:
            words.append(word)
            found.append(int(number))
    comm.agree(error)
    lengths = np.fromiter(map(len, words), np.int64, count=len(words))
    blob = np.frombuffer(b"".join(words), np.uint8)
    counted = np.array(found, np.int64)
    lib = native.text_kernel()
    hashes = (native.hash_words(lib, blob, lengths, comm.threads) if lib is not None else
              np.fromiter((hash64(w) for w in words), np.uint64, count=len(words)))
    before = comm.allgather(len(words))[:comm.rank]  # mpi4py: every rank's word count, for the words' places
    places = sum(before) + np.arange(len(words), dtype=np.int64)
    del words, found
    _, _, _, got_words, got_lengths, (got_counts, got_hashes, got_places) = to_owners(
        comm, hash_owner(hashes, comm.size), blob, lengths, counted, hashes, places)
    comm.agree(_listed_twice(path, got_words, got_lengths, got_hashes))
    return Listed(got_counts, got_words, got_lengths, lib, got_hashes, got_places), int(counted.sum()), path


def _my_lines(path, rank, ranks):
    """The lines (bytes, without their line end) that start in rank ``rank``'s share of ``path``'s bytes, the
    file cut into ``ranks`` equal shares."""
    size = os.path.getsize(path)
    lo, hi = size * rank // ranks, size * (rank + 1) // ranks
    with open(path, "rb") as f:
        f.seek(max(lo - 1, 0))
        data = f.read(hi - max(lo - 1, 0))
        while hi < size and not data.endswith(b"\n"):  # the last line that starts in the share, to its end
            more = f.read(TAIL_BYTES)
            if not more:
                break
            end = more.find(b"\n")
            data += more if end < 0 else more[:end + 1]
            if end >= 0:
                break
    if lo > 0:  # a line that started before the share is the rank before's
        data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.rstrip(b"\r") for line in lines]


def _listed_twice(path, words, lengths, hashes):
    """The error naming a word this hash owner received twice, or None."""
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    if len(same) == 0:
        return None
    listed = split_words(words, lengths)
    for k in same.tolist():
        a, b = listed[order[k]], listed[order[k + 1]]
        if a == b:
            return f"--read-vocab {path} lists the word {a.decode('utf-8', 'replace')!r} twice"
    return None
