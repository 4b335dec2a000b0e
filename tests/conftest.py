"""A local multi-rank runner for plain `pytest`.

A test marked ``@pytest.mark.mpi(2, 3)`` runs once per rank count. In the pytest process that collected it,
the body is not called: the runner launches ``mpi/launch -n N python -m pytest <that test>`` and the body runs
on every rank, where the ``comm`` fixture is ``MPI.COMM_WORLD``. The test passes when every rank passes.

Contract:
- every launch is bounded: after ``timeout`` seconds (marker keyword, default 180) the whole job is killed
  and the test fails with "hung";
- a rank whose test fails prints its traceback, prefixed with its rank, and calls ``MPI_Abort`` so that ranks
  waiting for it in a collective end at once instead of hanging;
- the parent's failure message carries the job's output, so the failing rank's traceback is in the report.
"""
import os
import sys
from pathlib import Path

import pytest

import bounded

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "mpi" / "launch"
CHILD_ENV = "HVD_W2V_TEST_RANKS"  # set only inside launched ranks: the rank count of the job
DEFAULT_TIMEOUT = 180.0


def in_rank():
    return CHILD_ENV in os.environ


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("mpi")
    if marker is None:
        return
    if "nranks" not in metafunc.fixturenames:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: an mpi test must take the `comm` fixture")
    counts = marker.args or (2,)
    metafunc.parametrize("nranks", counts, ids=[f"np{n}" for n in counts])


@pytest.fixture
def nranks(request):
    return request.param


@pytest.fixture
def comm(nranks):
    """MPI.COMM_WORLD inside a launched rank (None in the parent, which never runs the body)."""
    if not in_rank():
        return None
    from mpi4py import MPI

    assert MPI.COMM_WORLD.Get_size() == nranks, "launched with the wrong rank count"
    return MPI.COMM_WORLD


def launch(nranks, args, timeout=DEFAULT_TIMEOUT, env=None, threads=1):
    """Run ``args`` on ``nranks`` local ranks of ``threads`` compute threads each through mpi/launch, killed
    as a whole after ``timeout`` s; a bounded.Result."""
    full_env = dict(os.environ, **(env or {}))
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    return bounded.run([str(LAUNCH), "-n", str(nranks), "--threads", str(threads), *map(str, args)], timeout,
                       env=full_env, cwd=ROOT)


def launch_test(nodeid, nranks, timeout=DEFAULT_TIMEOUT):
    """Run one pytest node id on ``nranks`` ranks."""
    return launch(nranks, [sys.executable, "-m", "pytest", nodeid, "-q", "-x", "-p", "no:cacheprovider",
                           "--no-header", "-W", "ignore::DeprecationWarning"],
                  timeout=timeout, env={CHILD_ENV: str(nranks)})


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker("mpi")
    if marker is None or in_rank():
        return None  # an ordinary test, or the body on a launched rank: pytest calls it
    nranks = pyfuncitem.callspec.params["nranks"]
    timeout = marker.kwargs.get("timeout", DEFAULT_TIMEOUT)
    result = launch_test(pyfuncitem.nodeid, nranks, timeout)
    if result.hung:
        pytest.fail(f"hung: {nranks}-rank job killed after {timeout:.0f} s\n{_tail(result.output)}",
                    pytrace=False)
    if result.returncode != 0:
        pytest.fail(f"{nranks}-rank job failed (exit {result.returncode})\n{_tail(result.output)}",
                    pytrace=False)
    return True


def _tail(text, lines=120):
    return "\n".join(text.splitlines()[-lines:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if in_rank() and report.failed:
        # Show this rank's traceback now, then end the job: peers may be blocked in a collective.
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        text = "\n".join(f"[rank {rank}] {line}" for line in report.longreprtext.splitlines())
        sys.stderr.write(f"[rank {rank}] FAILED {item.nodeid} ({report.when})\n{text}\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
