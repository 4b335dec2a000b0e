"""Write the sharded model as word2vec text or binary files, streamed: no rank ever holds the whole matrix.

Lines are in word-id (frequency) order, as word2vec.c and gensim write them, although rows are spread
round-robin over the ranks: ranks agree each line's byte offset block by block (an exclusive prefix sum of
line lengths), each rank gathers one range of a block's lines from all ranks (alltoallv) and writes it at
its offset into one shared file, in one write. The file is written under a temporary name and renamed when
complete, so a failed export never leaves a partial file behind.
"""
import errno
import os
import socket

import numpy as np

from ..common.errors import UserError
from ..kernels import native
from ..text.vocab import WordList, gather_words

# Local rows per rank per round at most: bounds the lines held in memory (each rank's block, as made, sent and
# received, and its share in file order: four times a block's bytes on several ranks). The vectors' lines,
# hundreds of bytes to kilobytes each, come fewer a round: about END_BLOCK_BYTES of them (block_rows).
BLOCK_ROWS = 4096
# The bytes of lines a round of the vectors' export makes (block_rows), and of rows the queries read at a time
# (queries/vectors.py): what a run's end holds beyond its model (memory.END_BYTES plans four of them).
END_BLOCK_BYTES = 1 << 20
TEXT_VALUE_BYTES = 10  # a value of a text line, f"{x:.6f}" and its space, for |x| < 10: "-1.234567 "


def block_rows(line_bytes):
    """Rows a round of lines of about ``line_bytes`` bytes each: END_BLOCK_BYTES of them, 1 to BLOCK_ROWS."""
    return max(1, min(BLOCK_ROWS, END_BLOCK_BYTES // max(1, line_bytes)))


def text_line(word, row):
    return word + b" " + " ".join(f"{x:.6f}" for x in row.tolist()).encode() + b"\n"


def binary_line(word, row):
    return word + b" " + row.astype("<f4").tobytes() + b"\n"


def write_word2vec(comm, path, plan, words, rows, binary=False):
    """Write ``rows`` (this rank's float32[rows, d], local order) with ``words`` (bytes, same order).

    Collective. The header is ``"<vocab size> <dim>\\n"``; then one line per word in id order.
    """
    fmt = binary_line if binary else text_line
    header = f"{plan.vocab_size} {rows.shape[1]}\n".encode()
    line = rows.shape[1] * (4 if binary else TEXT_VALUE_BYTES) + 16  # and a word of a few bytes
    write_ordered(comm, path, header, plan, lambda lo, hi: joined([fmt(words[k], rows[k]) for k in range(lo, hi)]),
                  block_rows(line))


def write_vocab(comm, path, plan, words, counts):
    """Write ``word count`` lines in id (frequency) order, as word2vec.c's -save-vocab. Collective. ``words``:
    a vocab.WordList (its lines made in text_kernel.cc where it is built) or any sequence of bytes."""
    lib = native.text_kernel() if isinstance(words, WordList) else None

    def lines(lo, hi):
        if lib is not None:
            return native.count_lines(lib, words[lo:hi], counts[lo:hi])
        return joined([b"%s %d\n" % line for line in zip(words[lo:hi], np.asarray(counts[lo:hi]).tolist())])

    write_ordered(comm, path, b"", plan, lines)


def joined(lines):
    """(bytes, int64 lengths) of a list of lines: what :func:`write_ordered`'s ``lines_of`` gives."""
    return b"".join(lines), np.fromiter(map(len, lines), np.int64, count=len(lines))


def write_ordered(comm, path, header, plan, lines_of, rows_a_block=BLOCK_ROWS):
    """Write ``header`` then the line of every word id in order; ``lines_of(lo, hi)`` gives this rank's, of
    its local rows ``lo..hi-1``, as (their bytes end to end, int64 lengths) (:func:`joined` of a list), a block
    of ``rows_a_block`` local rows a round. One write a block on each rank (:func:`_share`).

    Collective: every rank calls it with the same ``path``, ``header`` and ``plan``. Raises UserError on every
    rank when the file cannot be written (any rank's OSError), after removing the temporary file; a file
    already at ``path`` is then left as it was.

    The ranks leave the sequence of collectives only together: rank 0 creates ``path.tmp`` (agreed), every
    rank opens it (agreed: a rank that cannot, such as one whose folder is on another disk, stops them all
    before the blocks), then every rank takes part in every block's collectives to the end, even after a
    failed write of its own, which it records and shares at the final agreement.
    """
    tmp = f"{path}.tmp"
    where = f"rank {comm.rank} (host {socket.gethostname()})"
    error = None
    if comm.rank == 0:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(header)
        except OSError as e:
            error = f"cannot write {path}: {e.strerror}"
    _agree_or_remove(comm, error, tmp)  # mpi4py: rank 0's outcome to every rank
    fd = None
    try:
        fd = os.open(tmp, os.O_WRONLY)
    except OSError as e:
        error = f"cannot write {path} on {where}: {e.strerror}"
    _agree_or_remove(comm, error, tmp)  # mpi4py: every rank's outcome; all leave here together on failure
    try:
        offset = len(header)
        mine = plan.rows(comm.rank)
        rounds = comm.allreduce(-(-mine // rows_a_block), "max")
        for b in range(rounds):
            lines, lengths = lines_of(b * rows_a_block, min(mine, (b + 1) * rows_a_block))
            # mpi4py: every rank's line lengths for this block; id = (block row) * P + rank.
            lengths = comm.allgather(lengths)
            width = max(len(x) for x in lengths)
            table = np.zeros((width, comm.size), dtype=np.int64)
            for r, x in enumerate(lengths):
                table[:len(x), r] = x
            data, at = _share(comm, lines, table)  # collective on several ranks
            del lines
            if error is None and data:  # after a failed write this rank writes no more, but still takes part
                try:
                    _write_at(fd, data, offset + at)
                except OSError as e:
                    error = f"cannot write {path} on {where}: {e.strerror}"
            offset += int(table.sum())
        if error is None:
            try:
                os.fsync(fd)
            except OSError as e:
                error = f"cannot write {path} on {where}: {e.strerror}"
    finally:
        os.close(fd)
    _agree_or_remove(comm, error, tmp)  # mpi4py: every rank's outcome of its writes
    if comm.rank == 0:
        try:
            os.replace(tmp, path)
        except OSError as e:
            error = f"cannot write {path}: {e.strerror}"
    _agree_or_remove(comm, error, tmp)  # mpi4py: rank 0's rename; on return the file is in place for all


def _write_at(fd, data, at):
    """All of ``data`` at byte ``at``: a write that stops short (a file size limit, a full disk) is continued,
    so that its cause is raised, never a file left short without an error."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, at)
        if written == 0:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        view, at = view[written:], at + written


def _share(comm, lines, table):
    """This rank's share of a block, as bytes in file order, and where it starts in the block. The block's
    rows (row i: line i of rank 0, then of rank 1, ...; ``table[i, r]`` the length of rank r's, 0 where it has
    none) are cut into ``comm.size`` ranges; rank d receives every rank's ``lines`` (bytes, this rank's lines
    end to end) of range d (one alltoallv,
    collective) and lays them out as the file does, so that each rank writes its share at once where one
    write a line made the ranks' interleaved lines cost a system call each."""
    width, ranks = table.shape
    cut = [width * d // ranks for d in range(ranks + 1)]
    lo, hi = cut[comm.rank], cut[comm.rank + 1]
    at = int(table[:lo].sum())
    if ranks == 1:
        return lines, at
    sent = np.concatenate(([0], np.cumsum(table[:, comm.rank])))[cut]  # this rank's bytes before each range
    got, _ = comm.alltoallv(np.frombuffer(lines, np.uint8), np.diff(sent))
    part = table[lo:hi]  # range d's line lengths, a row each, by source; ``got`` holds them source by source
    in_got = np.arange(part.size).reshape(part.shape[::-1]).T.ravel()  # file order: row by row, then by source
    return gather_words(got, part.T.ravel(), in_got, comm.threads)[0].tobytes(), at


def _agree_or_remove(comm, error, tmp):
    """comm.agree(error) (collective); when any rank failed, rank 0 removes ``tmp`` before every rank raises."""
    try:
        comm.agree(error)
    except UserError:
        if comm.rank == 0:
            try:
                os.remove(tmp)
            except OSError:
                pass
        raise
