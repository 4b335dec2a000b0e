"""Write the sharded model as word2vec text or binary files, streamed: no rank ever holds the whole matrix.

Lines are in word-id (frequency) order, as word2vec.c and gensim write them, although rows are spread
round-robin over the ranks: ranks agree each line's byte offset block by block (an exclusive prefix sum of
line lengths) and every rank writes its own lines at their offsets into one shared file. The file is written
under a temporary name and renamed when complete, so a failed export never leaves a partial file behind.
"""
import os
import socket

import numpy as np

from .errors import UserError

BLOCK_ROWS = 16384  # local rows per rank per round: bounds the lines held in memory


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
    write_ordered(comm, path, header, plan, lambda lo, hi: [fmt(words[k], rows[k]) for k in range(lo, hi)])


def write_vocab(comm, path, plan, words, counts):
    """Write ``word count`` lines in id (frequency) order, as word2vec.c's -save-vocab. Collective."""
    def lines(lo, hi):
        return [b"%s %d\n" % line for line in zip(words[lo:hi], np.asarray(counts[lo:hi]).tolist())]

    write_ordered(comm, path, b"", plan, lines)


def write_ordered(comm, path, header, plan, lines_of):
    """Write ``header`` then the line of every word id in order; ``lines_of(lo, hi)`` gives this rank's, of
    its local rows ``lo..hi-1``, as a list. Lines that fall end to end in the file (all of a block's on one
    rank) go out in one write.

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
        rounds = comm.allreduce(-(-mine // BLOCK_ROWS), "max")
        for b in range(rounds):
            lines = lines_of(b * BLOCK_ROWS, min(mine, (b + 1) * BLOCK_ROWS))
            # mpi4py: every rank's line lengths for this block; id = (block row) * P + rank.
            lengths = comm.allgather(np.array([len(x) for x in lines], dtype=np.int64))
            width = max(len(x) for x in lengths)
            table = np.zeros((width, comm.size), dtype=np.int64)
            for r, x in enumerate(lengths):
                table[:len(x), r] = x
            starts = offset + np.cumsum(table.ravel()) - table.ravel()
            offset += int(table.sum())
            if error is None:  # after a failed write this rank writes no more, but still takes part
                try:
                    _write_runs(fd, lines, starts[comm.rank::comm.size][:len(lines)])
                except OSError as e:
                    error = f"cannot write {path} on {where}: {e.strerror}"
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


def _write_runs(fd, lines, starts):
    """Write ``lines`` at their byte offsets ``starts``, one write for each run of lines that lie end to end."""
    ends = starts + np.fromiter(map(len, lines), np.int64, count=len(lines))
    cuts = np.flatnonzero(starts[1:] != ends[:-1]) + 1  # where a line does not follow the one before
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(lines)]):
        os.pwrite(fd, b"".join(lines[lo:hi]), int(starts[lo]))


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
