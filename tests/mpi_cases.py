"""Rank bodies that misbehave on purpose, for tests/test_runner.py (not collected on their own)."""
import time

import pytest


@pytest.mark.mpi(2)
def test_fails_on_rank1(comm):
    comm.Barrier()
    if comm.Get_rank() == 1:
        raise ValueError("deliberate failure on rank 1")
    comm.Barrier()  # rank 0 waits here for a peer that is gone; the runner must not hang


@pytest.mark.mpi(2)
def test_hangs_on_rank1(comm):
    if comm.Get_rank() == 1:
        time.sleep(3600)
    comm.Barrier()
