"""Encode the corpus once into token-id shards on disk, which training reads by position range.

The id stream is the corpus's tokens in order, as int32 word ids, with out-of-vocabulary tokens dropped (as
word2vec does before windowing) and ``SENTENCE_END`` after every sentence. Rank ``r`` writes the part of the
stream from its own byte range to ``ids.{r:05d}.i32``; laid end to end in rank order, the parts are the same
stream for any rank count, so training positions are global and rank-count free.

With the compiled passes the count has already numbered every token (vocab.build's ``numbered``,
:class:`Provisional`): the encoding then reads those numbers, not the text, and turns them into ids. (Where
those numbers are not usable, on any rank, it reads the text again.)
"""
import bisect
import errno
import itertools
import json
import os
import shutil
import socket

import numpy as np

from ..common import progress
from ..common.errors import UserError
from ..common.wording import counted
from ..kernels import native
from . import corpus
from .vocab import by_hash_owner, exchange_bytes, exchange_words

SENTENCE_END = -1


def encode(comm, paths, vocab, outdir, log=lambda m: None, reading=True):
    """Write this rank's id shard into ``outdir`` and the stream's index (rank 0); returns the TokenStream.
    ``reading``: rank 0 logs its progress through the text (progress.Reading).

    Collective: every rank calls it with the same arguments. UserError on every rank when any rank cannot
    write its shard or read its text; the ranks leave the sequence of collectives only together: each opens
    its shard (agreed), then every round starts with an allgather of (text left, error) and ends the loop on
    every rank at once when any rank has met an error, and the writes' outcomes are agreed at the end. The
    shards (and the index) of an earlier run in ``outdir`` are replaced only when every rank's shard is
    complete.
    """
    where = f"rank {comm.rank} (host {socket.gethostname()})"
    path = os.path.join(outdir, f"ids.{comm.rank:05d}.i32")
    f, error = None, None
    try:
        os.makedirs(outdir, exist_ok=True)
        f = open(path + ".tmp", "wb")
    except OSError as e:
        error = f"cannot write {path}.tmp on {where}: {e.strerror}"
    comm.agree(error)  # mpi4py: every rank's outcome; all leave here together on failure
    pieces = corpus.split(paths, comm.size)[comm.rank]
    lib = native.text_kernel()
    provisional = vocab.provisional
    shown = (progress.Reading("encode", pieces, log, threads=comm.threads)
             if reading and comm.rank == 0 and provisional is None else None)
    readers = corpus.readers(pieces, comm.threads) if lib is not None and provisional is None else 1
    if provisional is not None:  # counted in one pass (vocab.build's ``numbered``): its numbers turned into ids
        numbers, ids, below = provisional
        blocks = ((0, stream) for stream in numbers.streams(lib, ids, SENTENCE_END, comm.threads, below))
        part = lambda comm, vocab, stream: np.empty(0, np.int32) if stream is None else stream  # noqa: E731
    elif lib is not None:  # the compiled passes: each block's tokens numbered, looked up and turned into ids there
        blocks = corpus.read_ahead(pieces, readers, shown)  # checked there, 1 thread a block
        part = CompiledPart(comm, lib, vocab)
    else:
        blocks = ((0, block) for block in corpus.read_blocks(pieces, reading=shown))
        part = python_part
    apart = PieceIds(path + ".tmp", readers) if readers > 1 else None  # pieces read at once: their ids apart
    written = 0
    while True:
        i = block = None
        if error is None:
            try:
                i, block = next(blocks, (None, None))
            except UserError as e:
                error = str(e)
        # mpi4py: every rank's (has a block, error): a round is collective while any rank has text.
        states = comm.allgather((block is not None, error))
        if any(e for _, e in states) or not any(b for b, _ in states):
            break
        arr = part(comm, vocab, block)
        try:
            if apart is not None and block is not None:
                apart.write(i, arr)
            else:
                write_array(f, arr)
        except OSError as e:
            error = f"cannot write {path}.tmp on {where}: {e.strerror or e}"  # shared at the next round
        written += len(arr)
    try:
        if apart is not None and error is None:
            apart.join(f)
        f.close()
    except OSError as e:
        error = error or f"cannot write {path}.tmp on {where}: {e.strerror or e}"
    if apart is not None:
        apart.remove()
    if provisional is not None:
        provisional[0].remove()
        vocab.provisional = provisional = None  # its ids by number, not needed in training
    # mpi4py: every rank's shard length and error. Shards replace those of an earlier run only when every
    # rank's is complete, and rank 0 writes the index only when every shard is in place.
    parts = comm.allgather((written, error))
    failure = next((e for _, e in parts if e), None)
    if failure is None:
        try:
            os.replace(path + ".tmp", path)
        except OSError as e:
            failure = f"cannot write {path} on {where}: {e.strerror or e}"
        failure = next((e for e in comm.allgather(failure) if e), None)  # mpi4py: every rank's rename
    if failure:  # on every rank alike, as Comm.agree
        try:
            os.remove(path + ".tmp")
        except OSError:
            pass
        raise UserError(failure)
    parts = [n for n, _ in parts]
    part = blocks = arr = None  # the word table, the reader and the last ids (a view of the table's buffer)
    native.trim_heap()  # their pages, and those of the blocks, would otherwise stay resident through training
    error = None
    if comm.rank == 0:
        try:
            index = {"parts": parts, "raw_words": vocab.raw_words, "vocab_size": vocab.size}
            with open(os.path.join(outdir, "stream.json"), "w") as g:
                json.dump(index, g)
        except OSError as e:
            error = f"cannot write {os.path.join(outdir, 'stream.json')}: {e.strerror}"
    comm.agree(error)  # mpi4py: rank 0's outcome; on return the index is written for every rank
    log(f"encode: {sum(parts):,} positions in {counted(comm.size, 'shard')} under {outdir}")
    stream, error = None, None
    try:
        stream = TokenStream(outdir)
    except OSError as e:
        error = f"cannot read the encoded corpus under {outdir} on {where}: {e.strerror}"
    comm.agree(error)
    return stream


def write_array(f, arr):
    """Append the bytes of ``arr`` (C-contiguous) to the binary file ``f``, without a copy. Through the file's
    own write, so that a full disk raises the OS's error ("No space left on device"), where numpy's tofile
    says only how many bytes it wrote."""
    f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))


class PieceIds:
    """A rank's ids kept piece by piece where its pieces are read several at once (corpus.read_ahead on
    ``readers`` readers, their blocks interleaved): each piece's ids go to a file of their own beside the
    shard, ``{shard}.{i:06d}``, and :meth:`join` lays them end to end in piece order, the stream's order. At
    most ``readers`` are open, as many as pieces are read at once: the least recently written is closed for a
    new one (and opened again to append, should its piece not be at its end)."""

    def __init__(self, shard, readers):
        self.shard, self.most = shard, readers
        self.open = {}  # piece: its file, the least recently written first
        self.made = set()

    def name(self, i):
        return f"{self.shard}.{i:06d}"

    def write(self, i, ids):
        f = self.open.pop(i, None)
        if f is None:
            if len(self.open) >= self.most:
                self.open.pop(next(iter(self.open))).close()
            f = open(self.name(i), "ab" if i in self.made else "wb")
            self.made.add(i)
        self.open[i] = f
        write_array(f, ids)

    def join(self, out):
        """Append every piece's ids to the open file ``out``, in piece order, removing the piece files."""
        self.close()
        for i in sorted(self.made):
            with open(self.name(i), "rb") as f:
                shutil.copyfileobj(f, out, 8 << 20)
            os.remove(self.name(i))
        self.made.clear()

    def close(self):
        for f in self.open.values():
            f.close()
        self.open.clear()

    def remove(self):
        """Close and remove what is left of the piece files (after a failure)."""
        try:
            self.close()
        except OSError:
            pass
        for i in self.made:
            try:
                os.remove(self.name(i))
            except OSError:
                pass
        self.made.clear()


class Provisional(PieceIds):
    """The id stream counted in one pass (vocab.build's ``numbered``), kept until the vocabulary is known:
    each piece's stream of provisional numbers (int32, 4 B a token or newline: native.Counts.add_numbered's
    on one rank, handles on several: vocab._count_compiled) in a file of its own beside the shard,
    ``{folder}/numbers.{rank:05d}.{i:06d}``, as :class:`PieceIds` keeps pieces read at once. :meth:`streams`
    turns them into ids, piece after piece, a chunk at a time."""

    CHUNK = 1 << 22  # numbers read and turned into ids at a time: 16 MiB

    def __init__(self, folder, readers, rank=0):
        super().__init__(os.path.join(folder, f"numbers.{rank:05d}"), readers)
        self.folder, self.made_folder = folder, False

    def write(self, i, numbers):
        """Append ``numbers`` to piece ``i``'s file. UserError when it cannot be written (a full disk)."""
        try:
            if not self.made_folder and not os.path.isdir(self.folder):  # made on first use, removed with the files
                try:
                    os.makedirs(self.folder)
                    self.made_folder = True
                except FileExistsError:  # another rank's, just made
                    pass
            super().write(i, numbers)
        except OSError as e:
            raise UserError(f"cannot write {self.name(i)}: {e.strerror or e}") from None

    def remove(self):
        """Close and remove the pieces' files, and the folder if this made it and nothing else is in it."""
        super().remove()
        if self.made_folder:
            try:
                os.rmdir(self.folder)
            except OSError:
                pass

    def streams(self, lib, ids, sentence_end, threads=1, below=None):
        """The id stream in chunks (int32 arrays), in piece order: number x as ``ids[x]`` (-1: dropped), -1 as
        ``sentence_end``, private index j (-2 - j) as ``below[j]`` (native.remap, on ``threads``). Removes each
        piece's file once read."""
        self.close()
        for i in sorted(self.made):
            try:
                with open(self.name(i), "rb") as f:
                    while True:
                        numbers = np.fromfile(f, np.int32, self.CHUNK)
                        if not len(numbers):
                            break
                        yield native.remap(lib, numbers, ids, sentence_end, threads, below)
                os.remove(self.name(i))
            except OSError as e:
                raise UserError(f"cannot read {self.name(i)}: {e.strerror or e}") from None
            self.made.discard(i)


def python_part(comm, vocab, block):
    """The stream's part from ``block`` (a corpus.read_blocks block, or None on a rank out of text), in Python
    (collective: one round of lookups)."""
    sents, closed = corpus.sentences(*block) if block else ([], [])
    return _ids(sents, closed, lookup(comm, vocab, sents))


class CompiledPart:
    """python_part in text_kernel.cc on the rank's threads, the same ids, from a compiled copy of the rank's
    hash-owned words (vocab.owned_words: a table made at its size, 32 B slots at most two thirds full, 8 B a
    word of its order and the bytes of words over 8 bytes). On one rank each token is looked up as it is found.
    On more, the block's tokens are numbered by distinct word, those words asked of their hash owners (laid end
    to end, no Python object per word) and the answers turned into the block's ids. Memory: 4 B per byte of the
    block (its numbers, then its ids), and on more than one rank the block's distinct words (a table of them
    per thread, and their arrays while asked); memory.encoding_bytes plans them."""

    def __init__(self, comm, lib, vocab):
        self.lookup = native.WordIds(lib, *vocab.owned_words())
        self.scan = native.Scan(lib, comm.threads) if comm.size > 1 else None
        self.threads = comm.threads
        self.out = None

    def __call__(self, comm, vocab, block):
        text, file_end = block or (b"", False)
        if self.scan is None:
            if self.out is None or len(self.out) < len(text) + 1:
                self.out = np.empty(len(text) + 1, np.int32)
            return self.lookup.encode(text, file_end, SENTENCE_END, self.threads, self.out)
        self.scan.text(text)
        words, lengths, order, per_dest = self.scan.words(comm.size)
        asked, asked_lengths = exchange_bytes(comm, words, lengths, per_dest)
        answers = self.lookup.ids(asked, asked_lengths, self.threads)
        ids, _ = comm.alltoallv(answers, comm.alltoall_ints(per_dest))  # back to the askers, in their order
        return self.scan.ids(ids, order, file_end, SENTENCE_END)


def _ids(sents, closed, ids):
    """The block's part of the stream: each sentence's in-vocabulary ids (``ids``: {token: id or -1}), then
    SENTENCE_END where ``closed`` says it ends. Built in numpy arrays rather than a list of Python ints, which
    would cost some 36 bytes a token while the block's token lists are alive."""
    lengths = np.fromiter(map(len, sents), np.int64, count=len(sents))
    flat = np.fromiter((ids[t] for tokens in sents for t in tokens), np.int32, count=int(lengths.sum()))
    ends = np.cumsum(lengths)[np.fromiter(closed, bool, count=len(closed))]
    marked = np.insert(flat, ends, -2)  # -2 after each closed sentence; out-of-vocabulary tokens are -1
    marked = marked[marked != -1]
    marked[marked == -2] = SENTENCE_END
    return marked


def lookup(comm, vocab, sents):
    """{token: id or -1} for the tokens of ``sents``, asked of each token's hash owner (collective)."""
    words, per_dest = by_hash_owner({t for tokens in sents for t in tokens}, comm.size)
    asked = exchange_words(comm, words, per_dest)
    answers = np.fromiter((vocab.lookup.get(w, -1) for w in asked), dtype=np.int64, count=len(asked))
    # Answers go back to the askers: as many to each source as it asked (the transpose of per_dest).
    got, _ = comm.alltoallv(answers, comm.alltoall_ints(per_dest))
    return dict(zip(words, got.tolist()))


class TokenStream:
    """The encoded corpus: global positions ``0..len-1`` over the shards of any writer, read by range.

    Read with pread, not memory-mapped: a rank reads the positions of its share of each step (with the context
    span around them) and nothing else, so over an epoch it reads about 1/P of the stream and keeps none of it
    resident. A mapping would keep every page it touched in the rank's resident set, and the kernel's
    readahead would fetch the other ranks' positions too; POSIX_FADV_RANDOM turns that readahead off here.
    ``bytes_read``: the bytes this process has read (4 per position). At most OPEN_SHARDS shards are open at
    once (a step's positions lie in one or two), so no rank count runs out of file descriptors.
    """

    OPEN_SHARDS = 4

    def __init__(self, folder):
        self._open = {}  # shard -> file descriptor, oldest first
        with open(os.path.join(folder, "stream.json")) as f:
            index = json.load(f)
        self.raw_words = index["raw_words"]
        self.paths = [os.path.join(folder, f"ids.{r:05d}.i32") for r in range(len(index["parts"]))]
        for path, n in zip(self.paths, index["parts"]):
            if os.path.getsize(path) != 4 * n:
                raise OSError(errno.EINVAL, f"{path} holds {os.path.getsize(path):,} bytes, not the {4 * n:,} "
                                            f"of stream.json", path)
        self.starts = [0, *itertools.accumulate(index["parts"])]  # a list: bisect on it costs less, every step
        self.length = self.starts[-1]
        self.bytes_read = 0

    def __len__(self):
        return self.length

    def read(self, lo, hi):
        """ids at positions ``[lo, hi)``, clipped to the stream (a new int32 array)."""
        lo, hi = max(lo, 0), min(hi, self.length)
        out = np.empty(max(hi - lo, 0), np.int32)
        first = bisect.bisect_right(self.starts, lo) - 1
        for part in range(max(first, 0), len(self.paths)):
            start, stop = self.starts[part], self.starts[part + 1]
            if start >= hi:
                break
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                view = memoryview(out[a - lo:b - lo]).cast("B")
                if os.preadv(self._fd(part), [view], 4 * (a - start)) != len(view):
                    raise OSError(errno.EIO, f"{self.paths[part]} ended early", self.paths[part])
                self.bytes_read += len(view)
        return out

    def _fd(self, part):
        fd = self._open.pop(part, None)
        if fd is None:
            if len(self._open) >= self.OPEN_SHARDS:
                os.close(self._open.pop(next(iter(self._open))))
            fd = os.open(self.paths[part], os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        self._open[part] = fd  # now the newest
        return fd

    def close(self):
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def __del__(self):
        self.close()
