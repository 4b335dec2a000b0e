"""The stack works together: Horovod (TensorFlow) allreduce and mpi4py Alltoall on real ranks, and the export's
collective writing."""
import os
import shutil

import numpy as np
import pytest


@pytest.mark.mpi(2, 3)
def test_horovod_allreduce_and_mpi4py_alltoall(comm, nranks):
    from hvd_w2v.parallel import comm as hcomm

    c = hcomm.init()
    assert (c.rank, c.size) == (comm.Get_rank(), nranks)
    total = c.allreduce_dense(np.full((3, 4), c.rank + 1, np.float32))
    np.testing.assert_array_equal(total, np.full((3, 4), nranks * (nranks + 1) / 2, np.float32))
    # Rank r sends r*10 + dest to each dest and receives src*10 + r from each src.
    got = c.alltoall_ints(np.arange(nranks, dtype=np.int64) + c.rank * 10)
    np.testing.assert_array_equal(got, np.arange(nranks) * 10 + c.rank)


@pytest.mark.mpi(1, 2, 3)
def test_alltoallv_many_moves_every_block_and_leaves_the_own_one_when_asked(comm, nranks):
    from hvd_w2v.parallel import comm as hcomm

    c = hcomm.init()
    # Rank r sends d + 1 rows to rank d, each row [r, d, i], and 2 ints to every rank, in flight together.
    counts = np.arange(1, nranks + 1, dtype=np.int64)
    send = np.array([[c.rank, d, i] for d in range(nranks) for i in range(d + 1)], np.int64)
    recv_counts = np.full(nranks, c.rank + 1, np.int64)
    twos = np.full(nranks, 2, np.int64)
    for own in (True, False):
        out = np.full((int(recv_counts.sum()), 3), -1, np.int64)
        rows, ints = c.alltoallv_many([hcomm.Part(send, counts, recv_counts, out, own=own),
                                       hcomm.Part(np.arange(2 * nranks) + 100 * c.rank, twos, twos)])
        assert rows is out
        expected = np.array([[s, c.rank, i] for s in range(nranks) for i in range(c.rank + 1)], np.int64)
        if not own:  # this rank's block to itself stays as it was
            mine = slice(c.rank * (c.rank + 1), (c.rank + 1) * (c.rank + 1))
            expected[mine] = -1
        np.testing.assert_array_equal(rows, expected)
        np.testing.assert_array_equal(ints, [100 * s + 2 * c.rank + k for s in range(nranks) for k in range(2)])


@pytest.mark.mpi(3)
def test_export_writes_every_ranks_lines_as_one_rank_would(comm, nranks):
    """export.write_ordered gathers each range of a block's lines on one rank, which writes it at once: on 3
    ranks of unequal rows, over three blocks (export.BLOCK_ROWS) the last of them partial, with lines of many
    lengths, the same bytes as one file written in id order: from a list of words (Python's lines) and from a
    vocab.WordList (text_kernel.cc's)."""
    import tempfile

    import numpy as np

    from hvd_w2v.parallel.comm import Comm
    from hvd_w2v.parallel.shard import RowPlan
    from hvd_w2v.store import export
    from hvd_w2v.text.vocab import WordList

    c = Comm(comm)  # mpi4py alone: write_ordered uses no Horovod
    size = 2 * export.BLOCK_ROWS * nranks + 5
    plan = RowPlan(size, nranks)
    ids = plan.ids(c.rank)
    words = [b"w%d" % i + b"x" * (i % 11) for i in range(size)]
    folder = comm.bcast(tempfile.mkdtemp() if c.rank == 0 else None)
    path = os.path.join(folder, "vocab.txt")
    mine = [words[i] for i in ids.tolist()]
    packed = WordList.of(np.frombuffer(b"".join(mine), np.uint8), [len(w) for w in mine])
    try:
        for row_words in (mine, packed):
            export.write_vocab(c, path, plan, row_words, size - ids)
            comm.Barrier()
            with open(path, "rb") as f:
                assert f.read() == b"".join(b"%s %d\n" % (w, size - i) for i, w in enumerate(words))
    finally:
        comm.Barrier()
        if c.rank == 0:
            shutil.rmtree(folder)
