"""The stack works together: Horovod (TensorFlow) allreduce and mpi4py Alltoall on real ranks."""
import numpy as np
import pytest


@pytest.mark.mpi(2, 3)
def test_horovod_allreduce_and_mpi4py_alltoall(comm, nranks):
    from hvd_w2v import comm as hcomm

    c = hcomm.init()
    assert (c.rank, c.size) == (comm.Get_rank(), nranks)
    total = c.allreduce_dense(np.full((3, 4), c.rank + 1, np.float32))
    np.testing.assert_array_equal(total, np.full((3, 4), nranks * (nranks + 1) / 2, np.float32))
    # Rank r sends r*10 + dest to each dest and receives src*10 + r from each src.
    got = c.alltoall_ints(np.arange(nranks, dtype=np.int64) + c.rank * 10)
    np.testing.assert_array_equal(got, np.arange(nranks) * 10 + c.rank)
