"""Phrases: word2vec.c's word2phrase over MPI, the same output bytes on any rank count.

word2phrase joins a pair of words ``a b`` into ``a_b`` where ``(count(ab) - min_count) / count(a) / count(b) x
words > threshold``. It reads one text twice: once to count every word and every pair of consecutive words in
one table (a pair as its string ``a_b``, so a literal token ``a_b`` adds to the same count), and once to write
the text again, each word after ``_`` (joined to the word before) or `` `` (a space). Here each rank reads a
byte range of the text (the files laid end to end, as ``cat`` would), counts its words and pairs, and sends
the counts to each string's hash owner (:func:`owner`), who sums them and keeps those of at least
``min_count``; then each rank asks the owners the counts its words and pairs need, decides its joins, and
writes its range's output as ``part.RRRRR.txt``: the parts laid end to end in rank order are word2phrase's
output, byte for byte (tests/test_phrases.py; ``python -m hvd_w2v.bench.phrases`` against word2phrase.c).

word2phrase's rules, kept because its output is what users compare with:

- only space, tab and newline separate words; a carriage return is dropped wherever it stands; a newline is
  a token of its own, written back as it is; a word is cut to its first WORD_BYTES bytes and a pair's string
  to PAIR_BYTES; a last token with no separator after it is neither counted nor written;
- a pair is counted across line ends (the last word of a line and the first of the next) and the first word
  of the text pairs with an empty word; but a word after a newline is never joined;
- a word joined to the one before it is not joined to the next (no chains of three: run it again for them),
  so a rank's joins depend on whether the rank before ended on a join: each rank says what it would end on
  either way (two states), and each learns its own start from the ranks before it (:func:`_carries`).

Not kept: word2phrase prunes its table past 350 million strings (its hash table's 70%); here the owners
hold every string. Files with NUL bytes are refused.
"""
import os
import re
import zlib
from collections import Counter

import numpy as np

from ..common.errors import UserError
from .vocab import exchange_bytes

WORD_BYTES = 58  # word2phrase.c's MAX_STRING - 2: the bytes of a word it keeps
PAIR_BYTES = 59  # MAX_STRING - 1: the bytes of a pair's string ``a_b`` it keeps
BLOCK_BYTES = 1 << 24  # text read at a time
TOKEN = re.compile(rb"[^ \t\n]+|\n")
SEPARATOR = re.compile(rb"[ \t\n]")
PART = "part.{:05d}.txt"


def owner(word, ranks):
    """The rank that holds the count of ``word`` (bytes): a CRC-32 of its bytes, the same on every host."""
    return zlib.crc32(word) % ranks


class Text:
    """The files ``paths`` laid end to end, read by byte offset."""

    def __init__(self, paths):
        self.paths = list(paths)
        self.sizes = [os.path.getsize(p) for p in self.paths]
        self.size = sum(self.sizes)

    def read(self, lo, hi):
        """Bytes ``[lo, hi)`` of the text."""
        out, start = [], 0
        for path, size in zip(self.paths, self.sizes):
            a, b = max(lo, start), min(hi, start + size)
            if a < b:
                with open(path, "rb") as f:
                    f.seek(a - start)
                    out.append(f.read(b - a))
            start += size
        return b"".join(out)

    def token_start(self, at):
        """The first offset at or after ``at`` just past a separator (0 and the size too): where the tokens of
        a range starting near ``at`` start. A token belongs to the range that holds its first byte."""
        if at <= 0 or at >= self.size:
            return min(max(at, 0), self.size)
        pos = at - 1
        while pos < self.size:
            chunk = self.read(pos, min(pos + (1 << 16), self.size))
            found = SEPARATOR.search(chunk)
            if found:
                return pos + found.start() + 1
            pos += len(chunk)
        return self.size

    def range_of(self, rank, ranks):
        """Rank ``rank``'s bytes ``[lo, hi)`` of ``ranks``: the tokens starting in its equal share."""
        return (self.token_start(self.size * rank // ranks), self.token_start(self.size * (rank + 1) // ranks))

    def ends_with_separator(self):
        """Whether the text's last byte that is not a carriage return separates (else its last token is lost)."""
        at = self.size
        while at > 0:
            byte = self.read(at - 1, at)
            if byte != b"\r":
                return byte in (b" ", b"\t", b"\n")
            at -= 1
        return True


def tokens(text, lo, hi, last):
    """The tokens of bytes ``[lo, hi)`` of ``text`` in blocks: lists of word2phrase's tokens (words cut to
    WORD_BYTES, ``b"\\n"`` for a newline), carriage returns dropped; with ``last`` (the range ends the text, and
    the text no separator), its last token left out."""
    pos = lo
    while pos < hi:
        end = min(hi, pos + BLOCK_BYTES)
        if end < hi:
            end = max(text.token_start(end), pos + 1)
        block = text.read(pos, end)
        nul = block.find(b"\0")
        if nul >= 0:
            raise UserError(f"the text holds a NUL byte at offset {pos + nul:,}; give plain text")
        found = [t[:WORD_BYTES] for t in TOKEN.findall(block.replace(b"\r", b""))]
        if last and end == hi and found:
            found.pop()
        pos = end
        yield found


def pair(a, b):
    """word2phrase's string of the pair ``a b``."""
    return (a + b"_" + b)[:PAIR_BYTES]


def _send(comm, words, values):
    """Send each of ``words`` (bytes) with its int64 value to its owner; returns (words, values) received,
    and how many came from each rank."""
    ranks = comm.size
    by = [[] for _ in range(ranks)]
    for w, v in zip(words, values):
        by[owner(w, ranks)].append((w, v))
    flat = [wv for part in by for wv in part]
    lengths = np.fromiter((len(w) for w, _ in flat), np.int64, count=len(flat))
    blob = np.frombuffer(b"".join(w for w, _ in flat), np.uint8)
    counts = np.fromiter((v for _, v in flat), np.int64, count=len(flat))
    per_dest = np.array([len(part) for part in by], np.int64)
    got_blob, got_lengths = exchange_bytes(comm, blob, lengths, per_dest)
    got_values, per_source = comm.alltoallv(counts, per_dest)
    data, at, out = got_blob.tobytes(), 0, []
    for n in got_lengths.tolist():
        out.append(data[at:at + n])
        at += n
    return out, got_values, per_source


def _ask(comm, table, words):
    """The counts of ``words`` (distinct bytes) at their owners (``table``: this rank's {string: count}, those
    below min_count gone; 0 where a string is not there), in the order asked. Collective."""
    got, _, per_source = _send(comm, words, np.zeros(len(words), np.int64))
    answers = np.fromiter((table.get(w, 0) for w in got), np.int64, count=len(got))
    back, _ = comm.alltoallv(answers, per_source)
    # the answers come back by owner, in the order each owner was asked: put them back in the asked order
    order = sorted(range(len(words)), key=lambda i: owner(words[i], comm.size))
    counts = np.zeros(len(words), np.int64)
    counts[order] = back
    return counts


def _edges(comm, text, lo, hi, last):
    """For every rank, the token its range ends on: None (no token), ``b"\\n"`` or a word. Collective."""
    size, end = 4096, None
    while True:  # read back from the range's end until a whole last token (and one before it) is seen
        start = max(lo, hi - size)
        found = [t[:WORD_BYTES] for t in TOKEN.findall(text.read(start, hi).replace(b"\r", b""))]
        if last:
            found = found[:-1]
        if start == lo or len(found) >= 2:
            end = found[-1] if found else None
            break
        size *= 4
    return comm.allgather(end)


def _before(edges, rank):
    """The token before rank ``rank``'s first one (None at the text's start), and the word before it."""
    token = word = None
    for end in edges[:rank]:
        if end is not None:
            token = end
            if end != b"\n":
                word = end
    return token, word


def phrase(comm, paths, out, min_count=5, threshold=100.0, say=print):
    """word2phrase of the files ``paths`` (laid end to end) into the folder ``out`` (made here): each rank
    writes ``part.RRRRR.txt``, its range's output. Collective. Returns (words read, pairs joined)."""
    text = Text(paths)
    lo, hi = text.range_of(comm.rank, comm.size)
    last = hi == text.size and not text.ends_with_separator()
    edges = _edges(comm, text, lo, hi, last)
    token_before, word_before = _before(edges, comm.rank)

    # word2phrase's first pass: every word and every pair of consecutive words (across line ends) counted
    counts, words, prev = Counter(), 0, word_before if word_before is not None else b""
    for block in tokens(text, lo, hi, last):
        for t in block:
            if t == b"\n":
                continue
            words += 1
            counts[t] += 1
            counts[pair(prev, t)] += 1
            prev = t
    total = comm.allreduce(words)
    got, values, _ = _send(comm, list(counts), np.fromiter(counts.values(), np.int64, count=len(counts)))
    del counts
    table = Counter()
    for w, v in zip(got, values.tolist()):
        table[w] += v
    table = {w: v for w, v in table.items() if v >= min_count}
    say(f"phrases: {total:,} words; {comm.allreduce(len(table)):,} words and pairs of at least {min_count}")

    # its second pass: a word may join the one before it where both and their pair are counted min_count
    # times or more and the score passes the threshold; whether it does depends on the word before's join
    blocks = list(_joinable(comm, text, lo, hi, last, table, token_before, total, min_count, threshold))
    rounds = comm.allreduce(len(blocks), "max")
    for _ in range(rounds - len(blocks)):  # every rank asks in every round
        _ask(comm, table, [])
    joinable = np.concatenate(blocks) if blocks else np.zeros(0, bool)
    start = _carries(comm, joinable)
    os.makedirs(out, exist_ok=True)
    joined = 0
    with open(os.path.join(out, PART.format(comm.rank)), "wb") as f:
        flags, at = _joins(joinable, start), 0
        for block in tokens(text, lo, hi, last):
            pieces = []
            for t in block:
                if t == b"\n":
                    pieces.append(t)
                    continue
                pieces.append((b"_" if flags[at] else b" ") + t)
                joined += int(flags[at])
                at += 1
            f.write(b"".join(pieces))
    return total, comm.allreduce(joined)


def _joinable(comm, text, lo, hi, last, table, token_before, total, min_count, threshold):
    """bool arrays, a block's words each: whether it would join the word before were that one not joined
    itself. Collective: one round of questions to the owners a block."""
    prev = token_before
    threshold, total = np.float32(threshold), np.float32(total)
    for block in tokens(text, lo, hi, last):
        words = [t for t in block if t != b"\n"]
        follows = []  # each word: the word right before it, or None (a newline or the text's start)
        for t in block:
            if t != b"\n":
                follows.append(prev if prev not in (None, b"\n") else None)
            prev = t
        asked = sorted({*words, *(p for p in follows if p is not None),
                        *(pair(p, w) for p, w in zip(follows, words) if p is not None)})
        known = dict(zip(asked, _ask(comm, table, asked).tolist()))
        out = np.zeros(len(words), bool)
        for i, (p, w) in enumerate(zip(follows, words)):
            if p is None:
                continue
            pa, pb, pab = known[p], known[w], known[pair(p, w)]
            if pa < min_count or pb < min_count or pab < min_count:
                continue
            score = np.float32(pab - min_count) / np.float32(pa) / np.float32(pb) * total
            out[i] = score > threshold
        yield out


def _joins(joinable, start):
    """Which words join the word before: joinable and the word before not joined (``start``: whether the
    word before the first was)."""
    out = np.zeros(len(joinable), bool)
    before = start
    for i, can in enumerate(joinable.tolist()):
        before = out[i] = can and not before
    return out


def _carries(comm, joinable):
    """Whether the word before this rank's first word joined its own predecessor: each rank's end, for
    either start (an empty rank passes its start on), gathered, then run through from rank 0. Collective."""
    ends = (bool(_joins(joinable, False)[-1]), bool(_joins(joinable, True)[-1])) if len(joinable) else None
    carry = False
    for end in comm.allgather(ends)[:comm.rank]:
        if end is not None:
            carry = end[carry]
    return carry
