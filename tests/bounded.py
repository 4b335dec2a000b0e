"""Bounded runs: a command started in a session of its own, killed whole after a timeout, never left hanging.

Used by the multi-rank runner (conftest.launch) and the pretend hosts (pretend_hosts.PretendHosts.run).
"""
import os
import signal
import subprocess
import time


class Result:
    """What one bounded run did: exit code (None when killed for taking too long), output, seconds, hung."""

    def __init__(self, returncode, output, seconds, hung):
        self.returncode, self.output, self.seconds, self.hung = returncode, output, seconds, hung

    @property
    def ok(self):
        return self.returncode == 0 and not self.hung

    def __repr__(self):
        return f"Result(exit {self.returncode}, {self.seconds:.1f} s{', hung' if self.hung else ''})"


def run(argv, timeout, env=None, cwd=None):
    """Run ``argv`` with stdout and stderr together; after ``timeout`` s its process group is killed."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # own group: killed whole
    try:
        out, _ = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
        kill_group(proc)
        out, _ = proc.communicate()
    return Result(None if hung else proc.returncode, out.decode("utf-8", "replace"), time.monotonic() - start,
                  hung)


def kill_group(proc):
    """SIGTERM the process group of ``proc`` (started in its own session; mpirun then signals its ranks),
    then SIGKILL what is left."""
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            pass
