"""Phrases: word2vec.c's word2phrase over MPI, the same output bytes on any rank count.

word2phrase joins a pair of words ``a b`` into ``a_b`` where ``(count(ab) - min_count) / count(a) / count(b) x
words > threshold``. It reads one text twice: once to count every word and every pair of consecutive words in
one table (a pair as its string ``a_b``, so a literal token ``a_b`` adds to the same count), and once to write
the text again, each word after ``_`` (joined to the word before) or `` `` (a space). Here each rank reads a
byte range of the text (the files laid end to end, as ``cat`` would) in three passes: it counts its words and
pairs in a table of its own keyed by a 128-bit hash of each string (:func:`key`), and sends the counts to each
key's owner (vocab.hash_owner), who sums them and keeps those of at least ``min_count``; it asks the owners the
sums of its keys, decides which words may join, learns from the ranks before it where its joins start, and
writes its range's output as ``part.RRRRR.txt``: the parts laid end to end in rank order are word2phrase's
output, byte for byte (tests/test_phrases.py; ``python -m hvd_w2v.bench.phrases`` against word2phrase.c).
The passes over the text run in phrases_kernel.cc where it builds, else in Python (:class:`PythonTable`),
with the same keys.

word2phrase's rules, kept because its output is what users compare with:

- only space, tab and newline separate words; a carriage return is dropped wherever it stands; a newline is
  a token of its own, written back as it is; a word keeps its first WORD_BYTES bytes and a pair's string its
  first PAIR_BYTES; a last token with no separator after it is neither counted nor written;
- a pair is counted across line ends (the last word of a line and the first of the next; the text's first
  word pairs with word2phrase.c's uninitialised buffer, a string no text holds: no pair here), but a word
  after a newline is never joined;
- a word joined to the one before it is not joined to the next (no chains of three: run it again for them),
  so a rank's joins depend on whether the rank before ended on a join: each rank says what it would end on
  either way (two states), and each learns its own start from the ranks before it (:func:`_all_joins`).

Not kept: word2phrase prunes its table past 350 million strings (its hash table's 70%), here the owners hold
every string's count; its pruning drops one more string when none is below min_count (its SortVocab), here
none; where its cut of a long word or pair splits a UTF-8 character, its output is not UTF-8 (which train would
refuse: CJK text without spaces, say), here the cut falls before that character (:func:`cut`). Files with NUL
bytes are refused.
"""
import os
import re
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..common.errors import UserError
from ..kernels import native
from .vocab import hash_owner

WORD_BYTES = 58  # word2phrase.c's MAX_STRING - 2: the bytes of a word it keeps
PAIR_BYTES = 59  # MAX_STRING - 1: the bytes of a pair's string ``a_b`` it keeps
BLOCK_BYTES = 1 << 20  # text a part scans at a time: its keys and output take up to 40 B a byte (memory.py)
TOKEN = re.compile(rb"[^ \t\n]+|\n")
SEPARATOR = re.compile(rb"[ \t\n]")
NEWLINE = b"\n"
NONE, AFTER_NEWLINE, AFTER_WORD = 0, 1, 2  # the token before a block: none (the text's start), a newline, a word
PART = "part.{:05d}.txt"
JOIN_WORDS = 1 << 20  # words whose joins are decided at a time (_joins)
MASK = (1 << 64) - 1


def _mix(x):
    """splitmix64's finaliser (phrases_kernel.cc's mix)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def key(word):
    """The 128-bit key of a string (bytes), phrases_kernel.cc's: two 64-bit hashes of its bytes read 8 at a time,
    an xor-multiply's and a multiply-add's, each finalised, the second odd. Two distinct strings share a key by
    chance alone, near 2^-127 a pair: a table keyed so holds no string, and the owners exchange 16 bytes a string."""
    a, b = 0xCBF29CE484222325 ^ len(word), len(word)
    for i in range(0, len(word), 8):
        w = int.from_bytes(word[i:i + 8], "little")
        a = (_mix(a ^ w) * 0x100000001B3) & MASK
        b = (b * 0x9E3779B97F4A7C15 + w + 1) & MASK
    return _mix(a), _mix(b) | 1


def cut(s, limit):
    """``s`` (bytes) cut to ``limit`` bytes as word2phrase.c cuts it, but before a UTF-8 character that the cut
    would split (phrases_kernel.cc's cut): the cut text stays UTF-8."""
    if len(s) <= limit:
        return s
    at = limit
    while at > 0 and s[at] & 0xC0 == 0x80:
        at -= 1
    return s[:at or limit]


def pair(a, b):
    """word2phrase's string of the pair ``a b``."""
    return cut(a + b"_" + b, PAIR_BYTES)


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
        return self.token_start(self.size * rank // ranks), self.token_start(self.size * (rank + 1) // ranks)

    def ends_with_separator(self):
        """Whether the text's last byte that is not a carriage return separates (else its last token is lost)."""
        at = self.size
        while at > 0:
            byte = self.read(at - 1, at)
            if byte != b"\r":
                return byte in (b" ", b"\t", b"\n")
            at -= 1
        return True

    def blocks(self, lo, hi, last):
        """Bytes ``[lo, hi)`` in blocks of whole tokens: ``(block, drop_last)``, ``drop_last`` on the block that
        ends the text where ``last`` (the text's last token, with no separator after it, is lost)."""
        pos = lo
        while pos < hi:
            end = min(hi, pos + BLOCK_BYTES)
            if end < hi:
                end = max(self.token_start(end), pos + 1)
            block = self.read(pos, end)
            nul = block.find(b"\0")
            if nul >= 0:
                raise UserError(f"the text holds a NUL byte at offset {pos + nul:,}; give plain text")
            yield block, last and end == hi
            pos = end


def _tokens(block, drop_last):
    """word2phrase's tokens of ``block``: words (their first WORD_BYTES bytes) and newlines, carriage returns
    dropped; with ``drop_last``, a last token that no separator ends left out."""
    clean = block.replace(b"\r", b"")
    found = [cut(t, WORD_BYTES) for t in TOKEN.findall(clean)]
    if drop_last and found and clean[-1:] not in (b" ", b"\t", b"\n"):
        found.pop()
    return found


class PythonTable:
    """phrases_kernel.cc's table and scans (native.PhraseTable's interface) in Python: the fallback, and what
    the kernel is tested against. Strings are keyed (:func:`key`) when exported."""

    def __init__(self):
        self.counts, self.before, self.word = Counter(), NONE, None

    def start(self, before, word):
        self.before, self.word = before, word

    def count(self, block, drop_last):
        words = 0
        for t in _tokens(block, drop_last):
            if t == NEWLINE:
                self.before = AFTER_NEWLINE
                continue
            words += 1
            self.counts[t] += 1
            if self.word is not None:  # (the text's first word has no pair)
                self.counts[pair(self.word, t)] += 1
            self.before, self.word = AFTER_WORD, t
        return words

    def __len__(self):
        return len(self.counts)

    def export(self):
        self.order = list(self.counts)
        keys = np.array([key(s) for s in self.order], np.uint64).reshape(-1, 2)
        return keys, np.fromiter(self.counts.values(), np.int64, count=len(self.counts))

    def set(self, counts):
        self.counts = Counter({k: c for k, c in zip(self.order, counts.tolist()) if c})  # 0: as never seen

    def joinable(self, block, drop_last, min_count, threshold, words):
        out = []
        pa = self.counts[self.word] if self.before == AFTER_WORD else 0
        for t in _tokens(block, drop_last):
            if t == NEWLINE:
                self.before = AFTER_NEWLINE
                continue
            pb, ok = self.counts[t], False
            if self.before == AFTER_WORD and pa >= min_count and pb >= min_count:
                pab = self.counts[pair(self.word, t)]
                if pab >= min_count:
                    score = np.float32(pab - min_count) / np.float32(pa) / np.float32(pb) * np.float32(words)
                    ok = bool(score > np.float32(threshold))
            out.append(ok)
            self.before, self.word, pa = AFTER_WORD, t, pb
        return np.array(out, bool)

    # an owner's table: the sums of the keys it owns
    def sum(self, keys, counts):
        for k, c in zip(map(tuple, keys.tolist()), counts.tolist()):
            self.counts[k] += c

    def lookup(self, keys, min_count):
        got = (self.counts.get(k, 0) for k in map(tuple, keys.tolist()))
        return np.fromiter((c if c >= min_count else 0 for c in got), np.int64, count=len(keys))

    def kept(self, min_count):
        return sum(c >= min_count for c in self.counts.values())

    def write(self, block, drop_last, joins):
        marks = iter(joins.tolist())
        return b"".join(t if t == NEWLINE else (b"_" if next(marks) else b" ") + t for t in _tokens(block, drop_last))


def table(keys=0):
    """The passes' table: phrases_kernel.cc's (sized for ``keys`` keys), else :class:`PythonTable`."""
    lib = native.phrases_kernel()
    return native.PhraseTable(lib, keys) if lib is not None else PythonTable()


class Route:
    """Where a rank's keys (uint64[n, 2]) go: each one's hash owner among ``ranks`` (vocab.hash_owner), the
    order that groups them by owner and each owner's count. One rank owns them all: no order, nothing moves."""

    def __init__(self, keys, ranks):
        if ranks == 1:
            self.order, self.per_dest = None, np.array([len(keys)], np.int64)
            return
        owners = hash_owner(keys[:, 0], ranks) if len(keys) else np.zeros(0, np.int64)
        self.order = np.argsort(owners, kind="stable")
        self.per_dest = np.bincount(owners, minlength=ranks).astype(np.int64)

    def send(self, comm, values):
        """Every rank's ``values`` (one a key, in its keys' order) at their keys' owners: (what came here, in
        rank order; each rank's count). Collective."""
        if self.order is None:
            return values, self.per_dest
        return comm.alltoallv(values[self.order], self.per_dest)

    def back(self, comm, answers, per_source):
        """The owners' ``answers`` to what :meth:`send` brought them (``per_source``: its counts), each back at
        its key's place here. Collective."""
        if self.order is None:
            return answers
        got, _ = comm.alltoallv(answers, per_source)
        out = np.empty(len(self.order), got.dtype)
        out[self.order] = got
        return out


def share_of(keys, parts):
    """The share of ``parts`` each key (uint64[n, 2]) falls in: its second hash's high half scaled, as
    hash_owner scales the first's for the rank (phrases_kernel.cc's share_of)."""
    return ((keys[:, 1] >> np.uint64(32)) * np.uint64(parts) >> np.uint64(32)).astype(np.int64)


class Owned:
    """The sums of the keys a rank owns: word2phrase's table, its share here, in ``parts`` tables (:func:`table`'s;
    one with Python's), each key in the one of its :func:`share_of`, each summed and asked on a thread of its own
    (the compiled calls release the GIL), every one reading all the keys."""

    def __init__(self, keys, counts, parts):
        """The tables of ``keys`` summed with their ``counts``, each made for the keys it gets: no growth."""
        self.parts = parts if native.phrases_kernel() is not None else 1
        sizes = np.bincount(share_of(keys, self.parts), minlength=self.parts) if self.parts > 1 else [len(keys)]
        self.tables = [table(int(n)) for n in sizes]
        if self.parts == 1:
            self.tables[0].sum(keys, counts)
        else:
            self._each(lambda k, t: t.sum(keys, counts, k, self.parts))

    def _each(self, work):
        with ThreadPoolExecutor(self.parts) as pool:
            list(pool.map(work, range(self.parts), self.tables))

    def lookup(self, keys, min_count):
        """The sums of ``keys``, 0 where one is below ``min_count`` (or not there)."""
        if self.parts == 1:
            return self.tables[0].lookup(keys, min_count)
        out = np.zeros(len(keys), np.int64)
        self._each(lambda k, t: t.lookup(keys, min_count, out, k, self.parts))
        return out

    def kept(self, min_count):
        return sum(t.kept(min_count) for t in self.tables)

    def __len__(self):
        return sum(map(len, self.tables))


def _owned(comm, route, keys, counts, parts=1):
    """The sums (:class:`Owned`, in ``parts`` tables) of the keys this rank owns over every rank's ``keys`` and
    ``counts`` (``route``: their :class:`Route`). Collective."""
    got, _ = route.send(comm, keys)
    got_counts, _ = route.send(comm, counts)
    return Owned(got, got_counts, parts)


def _ask(comm, route, owned, keys, min_count):
    """The owners' sums of ``keys`` (uint64[n, 2]; 0 where one is below ``min_count``: word2phrase's pruning),
    in the order asked (``route``: their :class:`Route`). Collective."""
    got, per_source = route.send(comm, keys)
    return route.back(comm, owned.lookup(got, min_count), per_source)


def _last_tokens(text, lo, hi, last):
    """(The token bytes ``[lo, hi)`` end on, their last word): None, ``b"\\n"`` or a word (``last``: the
    text's lost last token ends them)."""
    size = 4096
    while True:  # read back from the end until the last word is seen whole (or the start)
        start = max(lo, hi - size)
        found = _tokens(text.read(start, hi), last)
        whole = found if start == lo else found[1:]  # the first may be cut
        words = [t for t in whole if t != NEWLINE]
        if start == lo or words:
            return whole[-1] if whole else None, words[-1] if words else None
        size *= 4


def _before(ends, part):
    """(The kind of token before part ``part``'s first one: NONE, AFTER_NEWLINE or AFTER_WORD; the word
    before it, None at the text's start), from every part's ``ends`` (_last_tokens) in text order."""
    token = word = None
    for end, last_word in ends[:part]:
        token = end if end is not None else token
        word = last_word if last_word is not None else word
    kind = NONE if token is None else AFTER_NEWLINE if token == NEWLINE else AFTER_WORD
    return kind, word


def phrase(comm, paths, out, min_count=5, threshold=100.0, say=print, limit=None):
    """word2phrase of the files ``paths`` (laid end to end) into the folder ``out``: each rank writes
    ``part.RRRRR.txt``, its range's output. Collective. Returns (words read, pairs joined, (the keys each of
    this rank's parts held, the keys it received, the distinct ones it owned, the words it read): what its
    memory plan counts).

    ``limit`` (memory.PhrasesLimit, or None): asked after each block a part counts, with the keys each of the
    rank's parts holds by then, and before the owners' exchange with the keys each rank will receive; its
    refusal stops the passes on every rank (UserError) before anything is written.

    A rank cuts its range into a part a thread (``comm.threads``), each with a table of its own, run at once
    (the compiled scans release the GIL): as if each part were a rank, but for the owners' exchanges, which
    a rank makes once for all its parts."""
    text = Text(paths)
    lo, hi = text.range_of(comm.rank, comm.size)
    last = hi == text.size and not text.ends_with_separator()
    cuts = sorted({lo, hi, *(text.token_start(lo + (hi - lo) * k // comm.threads) for k in range(comm.threads))})
    parts = [(a, b, last and b == text.size) for a, b in zip(cuts, cuts[1:]) if a < b] or [(lo, hi, last)]
    gathered = comm.allgather([_last_tokens(text, *part) for part in parts])
    ends = [end for rank_ends in gathered for end in rank_ends]  # every part's, in text order
    first = sum(map(len, gathered[:comm.rank]))  # my first part's number
    tables = [table() for _ in parts]
    for k, t in enumerate(tables):
        t.start(*_before(ends, first + k))

    def each(work):  # work(k, table, blocks of part k) on every part at once; their results in part order
        with ThreadPoolExecutor(len(parts)) as pool:
            return list(pool.map(lambda k: work(k, tables[k], text.blocks(*parts[k])), range(len(parts))))

    # word2phrase's first pass: every word and every pair of consecutive words (across line ends) counted
    refused = []  # the limit's refusal, which stops every part

    def count(k, t, blocks):
        words = 0
        for b, drop in blocks:
            if refused:
                break
            words += t.count(b, drop)
            error = limit([len(table) for table in tables]) if limit else None
            if error:
                refused.append(error)
        return words

    mine = sum(each(count))
    comm.agree(refused[0] if refused else None)
    words = comm.allreduce(mine)
    exported = each(lambda k, t, blocks: t.export())
    keys = np.concatenate([k for k, _ in exported]) if exported else np.zeros((0, 2), np.uint64)
    held = [len(t) for t in tables]
    route = Route(keys, comm.size)
    received = int(comm.allreduce(route.per_dest)[comm.rank])  # (mpi4py: the P-vectors summed)
    comm.agree(limit(held, received, mine) if limit else None)
    owned = _owned(comm, route, keys, np.concatenate([c for _, c in exported]), len(parts))
    sizes = (held, received, len(owned), mine)
    say(f"phrases: {words:,} words; {comm.allreduce(owned.kept(min_count)):,} words and pairs of at least "
        f"{min_count}")

    # its second: a word may join the one before it where both and their pair are counted min_count times
    # or more and the score passes the threshold; whether it does depends on the word before's join
    answers = np.split(_ask(comm, route, owned, keys, min_count), np.cumsum([len(k) for k, _ in exported])[:-1])
    del owned, keys, exported, route

    def answered(k, t, blocks):
        t.set(answers[k])
        t.start(*_before(ends, first + k))

    each(answered)
    flags = each(lambda k, t, blocks: [t.joinable(b, drop, min_count, np.float32(threshold), np.float32(words))
                                        for b, drop in blocks])
    joins = _all_joins([np.concatenate(f) if f else np.zeros(0, bool) for f in flags], comm, each)

    # and its output: each word after "_" where it joins the word before, else after " "; a part a thread, the
    # first into the rank's file, the others into files of their own, then appended to it in order
    path = os.path.join(out, PART.format(comm.rank))

    def write(k, t, blocks):
        with open(path if k == 0 else f"{path}.{k}", "wb") as f:
            at = 0
            for (block, drop), block_flags in zip(blocks, flags[k]):
                f.write(t.write(block, drop, joins[k][at:at + len(block_flags)]))
                at += len(block_flags)

    each(write)
    for k in range(1, len(parts)):
        _append(f"{path}.{k}", path)
    return words, comm.allreduce(sum(int(j.sum()) for j in joins)), sizes


def _append(source, target):
    """The file ``source`` appended to the file ``target``, then removed: copied by the kernel
    (os.copy_file_range), through a buffer where the file system cannot. (Unbuffered files: both copies move
    the files' own offsets.)"""
    with open(source, "rb", buffering=0) as src, open(target, "r+b", buffering=0) as dst:
        dst.seek(0, os.SEEK_END)
        try:
            while os.copy_file_range(src.fileno(), dst.fileno(), 1 << 30):
                pass
        except OSError:  # the rest, from where it stopped
            shutil.copyfileobj(src, dst, 1 << 20)
    os.remove(source)


def _all_joins(joinable, comm, each):
    """The joins of this rank's parts' ``joinable`` words (a list, in text order), each part's start carried
    in from the parts before it on every rank, each part's then decided by ``each`` (phrase's: the parts at
    once). Collective."""
    def end(flags, start):  # whether the part's last word joins, given its start (an empty part: the start)
        if not len(flags) or not flags[-1]:
            return start if not len(flags) else False
        run = len(flags) - int(np.argmin(flags[::-1])) if not flags.all() else 0  # where the last run starts
        return ((len(flags) - 1 - run) % 2 == 0) != (start and run == 0)  # _joins's parity there

    def ends(start):  # the rank's end, its parts run one after the other
        for flags in joinable:
            start = end(flags, start)
        return start

    mine = (ends(False), ends(True))
    carry = False
    for rank_end in comm.allgather(mine)[:comm.rank]:
        carry = rank_end[carry]
    starts = []
    for flags in joinable:
        starts.append(carry)
        carry = end(flags, carry)
    return each(lambda k, t, blocks: _joins(joinable[k], starts[k]))


def _joins(joinable, start):
    """Which words join the word before: the joinable ones whose word before did not join (no chains of
    three), ``start`` whether the word before the first did; JOIN_WORDS at a time (:func:`_joins_of`'s arrays
    take 40 B a word)."""
    out = np.empty(len(joinable), bool)
    for lo in range(0, len(joinable), JOIN_WORDS):
        hi = min(len(joinable), lo + JOIN_WORDS)
        out[lo:hi] = _joins_of(joinable[lo:hi], start)
        start = bool(out[hi - 1])
    return out


def _joins_of(joinable, start):
    """:func:`_joins` at once: in each run of joinable words every other one joins, from the run's first (the
    run at 0 from its second where ``start``)."""
    n = len(joinable)
    if not n:
        return joinable.copy()
    at = np.arange(n)
    first = np.maximum.accumulate(np.where(joinable & ~np.concatenate(([False], joinable[:-1])), at, 0))
    even = (at - first) % 2 == 0
    if start and joinable[0]:
        run = n if joinable.all() else int(np.argmin(joinable))
        even[:run] = ~even[:run]
    return joinable & even
