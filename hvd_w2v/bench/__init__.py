"""Benchmark scripts: each prints its figures side by side in one run (run them under mpi/launch)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout


def checkout_env(env=None):
    """``env`` (default: os.environ) with this checkout first on PYTHONPATH, for the jobs a benchmark launches.
    Their ``hvd-w2v`` command would otherwise run the installed package, which need not be this checkout's
    (an editable install of another clone, a worktree beside it), and a benchmark measures the code it runs
    from."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    return env
