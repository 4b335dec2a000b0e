"""The local multi-rank runner itself: a failing rank and a hung rank are caught within the timeout."""
import pytest

from conftest import launch_test

TIMEOUT = 60


def test_failing_rank_fails_the_job_with_its_traceback():
    result = launch_test("tests/mpi_cases.py::test_fails_on_rank1", 2, timeout=TIMEOUT)
    assert not result.hung, result.output
    assert result.returncode != 0
    assert "[rank 1] FAILED" in result.output
    assert "deliberate failure on rank 1" in result.output
    assert result.seconds < TIMEOUT


def test_hung_rank_is_killed_within_the_timeout():
    timeout = 12  # above the ranks' start (a few seconds), so that the bound finds them in the hang
    result = launch_test("tests/mpi_cases.py::test_hangs_on_rank1", 2, timeout=timeout)
    assert result.hung and not result.ok
    assert result.seconds < timeout + 15, f"kill took too long: {result.seconds:.1f} s"


@pytest.mark.mpi(2)
def test_rank_body_sees_its_rank_count(comm, nranks):
    assert comm.Get_size() == nranks
    assert comm.allreduce(1) == nranks
