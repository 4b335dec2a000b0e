"""A run folder is never damaged (issue 38): a refused run leaves every file as it was, a fresh train into a
folder holding a run is refused without --overwrite, one job at a time holds the folder's lock
(hvd_w2v/store/runlock.py), a stale lock is taken over, a requeued job waits a bounded time for its previous run,
and queries read a folder whose lock another job holds without taking it or writing anything.

The lock's rules are tested in this process (runlock.acquire); the commands on real ranks through
conftest.launch, on one finished run (module fixture) copied where a test changes it.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from bounded import kill_group
from conftest import LAUNCH, ROOT, launch
from hvd_w2v.common.errors import UserError
from hvd_w2v.store import runlock
from hvd_w2v.synthetic import generate

OPTIONS = ["--epochs", "1", "--batch-words", "8192", "--quiet", "--show", "", "--format", "binary"]
TIMEOUT = 120


def tree(folder):
    """{relative path: sha256} of every file under ``folder``, the lock's included."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return found


def errors(result):
    return [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    # Large enough that a job holds the lock for a second or more while it reads it (vocabulary, encoding).
    generate(str(folder / "good.txt"), 150000, vocab=1000, pairs=20, first=20, seed=0)
    with open(folder / "good.txt") as f:
        lines = f.readlines()
    (folder / "other.txt").write_text("".join(lines) + "".join(f"extra{i} {x}" for i, x in enumerate(lines[:300])))
    return folder


@pytest.fixture(scope="module")
def finished(corpora, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    result = launch(2, ["hvd-w2v", "train", corpora / "good.txt", "--out", out, *OPTIONS], timeout=TIMEOUT)
    assert result.ok, result.output[-3000:]
    assert not os.path.exists(out / runlock.NAME) and not os.path.exists(out / ".staging")
    return out


def copy(finished, dest):
    shutil.copytree(finished, dest)
    return dest


def test_refused_commands_leave_every_file_of_the_run_as_it_was(corpora, finished, tmp_path):
    """A --resume refused by its checkpoint check (another vocabulary: issue 38's first case), a fresh train,
    and vocab and encode into a finished run: exit 2, one line, and every file byte-identical."""
    run = copy(finished, tmp_path / "run")
    before = tree(run)
    resume = launch(2, ["hvd-w2v", "train", corpora / "other.txt", "--out", run, *OPTIONS, "--resume"],
                    timeout=TIMEOUT)
    assert resume.returncode == 2 and len(errors(resume)) == 1, resume.output[-3000:]
    assert "was written for another vocabulary" in errors(resume)[0]
    assert tree(run) == before, "a refused --resume changed the run folder"
    fresh = launch(1, ["hvd-w2v", "train", corpora / "good.txt", "--out", run, *OPTIONS], timeout=TIMEOUT)
    assert fresh.returncode == 2 and len(errors(fresh)) == 1, fresh.output[-3000:]
    assert f"{run} holds a finished run (" in errors(fresh)[0] and "--resume" in errors(fresh)[0] \
        and "another --out" in errors(fresh)[0] and "--overwrite" in errors(fresh)[0]
    for command in ("vocab", "encode"):
        result = launch(1, ["hvd-w2v", command, corpora / "other.txt", "--out", run], timeout=TIMEOUT)
        assert result.returncode == 2 and len(errors(result)) == 1, result.output[-3000:]
        assert "holds a finished run" in errors(result)[0] and "--overwrite" in errors(result)[0]
    assert tree(run) == before, "a refused train, vocab or encode changed the run folder"


def test_overwrite_starts_over_in_a_finished_run(corpora, finished, tmp_path):
    run = copy(finished, tmp_path / "run")
    result = launch(2, ["hvd-w2v", "train", corpora / "other.txt", "--out", run, *OPTIONS, "--overwrite"],
                    timeout=TIMEOUT)
    assert result.ok, result.output[-3000:]
    assert "overwrite: removing the earlier run's checkpoints" in result.output
    assert sorted(os.listdir(run)) == ["checkpoints", "ids", "run.json", "vectors.bin", "vocab.txt"]
    assert tree(run)["vocab.txt"] != tree(finished)["vocab.txt"]  # the new corpus's vocabulary ...
    info = subprocess.run([sys.executable, "-m", "hvd_w2v.cli", "info", run, "--verify"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert info.returncode == 0 and "verify: all sha256 match" in info.stdout, info.stdout + info.stderr


# -- the lock's rules, in this process ---------------------------------------------------------------------

def write_lock(out, **holder):
    os.makedirs(out, exist_ok=True)
    base = dict(host=socket.gethostname(), pid=os.getpid(), slurm_job=None, started="then",
                heartbeat=time.time(), token="other")
    (out / runlock.NAME).write_text(json.dumps(dict(base, **holder)))


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid  # reaped: no process has it (pids are not reused within a test)


def test_a_live_holder_is_named_and_a_gone_one_taken_over(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    write_lock(tmp_path, pid=os.getppid(), slurm_job="41")
    with pytest.raises(UserError, match=rf"{tmp_path} is in use by another job \(host {socket.gethostname()}, "
                                        rf"pid {os.getppid()}, Slurm job 41, started then, heartbeat 0 s ago\)"):
        runlock.acquire(str(tmp_path), wait=0)
    said = []
    for holder, why in [(dict(pid=dead_pid()), "no process .* on this host"),
                        (dict(host="elsewhere", heartbeat=time.time() - runlock.STALE_SECONDS - 5),
                         rf"its heartbeat is \d+ s old \(limit {runlock.STALE_SECONDS:.0f} s\)")]:
        write_lock(tmp_path, **holder)
        lock = runlock.acquire(str(tmp_path), said.append, wait=0)
        assert said and f"took over {tmp_path}/{runlock.NAME} from host" in said[-1], said
        assert re.search(why, said[-1]), said[-1]
        assert runlock.read(str(tmp_path))["pid"] == os.getpid()
        lock.release()
        assert runlock.read(str(tmp_path)) is None
    # Another host with a fresh heartbeat may be alive: refused, not taken over.
    write_lock(tmp_path, host="elsewhere", pid=1)
    with pytest.raises(UserError, match="host elsewhere, pid 1"):
        runlock.acquire(str(tmp_path), wait=0)


def test_the_heartbeat_is_refreshed_and_release_leaves_a_taken_over_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(runlock, "HEARTBEAT_SECONDS", 0.05)
    lock = runlock.acquire(str(tmp_path))
    first = runlock.read(str(tmp_path))["heartbeat"]
    time.sleep(0.5)
    assert runlock.read(str(tmp_path))["heartbeat"] > first
    write_lock(tmp_path, token="someone else")  # as a takeover would: no longer this job's lock
    lock.release()
    assert runlock.read(str(tmp_path))["token"] == "someone else"


# -- two jobs at once, on real ranks -----------------------------------------------------------------------

def start(args, env=None):
    return subprocess.Popen([str(LAUNCH), "-n", "1", "--threads", "1", *map(str, args)], cwd=ROOT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.01)


def test_two_jobs_into_one_folder_and_a_requeued_job_waiting_for_its_previous_run(corpora, finished, tmp_path):
    """Job A (Slurm job 77, pretended) holds the lock, its rank 0 stopped with SIGSTOP so that it holds it
    as long as the test needs. A second job into the folder is refused naming A; queries and info read the
    folder meanwhile and change nothing; a requeue of job 77 (--resume) waits for A and goes on once A ends."""
    run = copy(finished, tmp_path / "run")
    job = {"SLURM_JOB_ID": "77", "HVD_W2V_LOCK_WAIT": "90"}
    a = start(["hvd-w2v", "train", corpora / "good.txt", "--out", run, *OPTIONS, "--resume"], env=job)
    requeued, holder = None, None
    try:
        wait_for(lambda: runlock.read(str(run)), 60, "lock taken by job A")
        holder = runlock.read(str(run))
        os.kill(holder["pid"], signal.SIGSTOP)
        before = tree(run)
        second = launch(1, ["hvd-w2v", "train", corpora / "good.txt", "--out", run, *OPTIONS, "--resume"],
                        timeout=TIMEOUT)
        assert second.returncode == 2 and len(errors(second)) == 1, second.output[-3000:]
        assert (f"{run} is in use by another job (host {socket.gethostname()}, pid {holder['pid']}, Slurm job 77"
                in errors(second)[0])
        query = launch(1, ["hvd-w2v", "neighbors", run, "w1", "--topn", "3"], timeout=TIMEOUT)
        assert query.ok and "w1: " in query.output, query.output[-3000:]
        info = subprocess.run([sys.executable, "-m", "hvd_w2v.cli", "info", run], capture_output=True, text=True,
                              cwd=ROOT, timeout=60)
        assert info.returncode == 0 and "state: finished" in info.stdout, info.stdout + info.stderr
        assert f"in use: {runlock.NAME} held by host {socket.gethostname()}, pid {holder['pid']}" in info.stdout
        assert tree(run) == before, "a refused job or a query wrote into the run folder"

        requeued = start(["hvd-w2v", "train", corpora / "good.txt", "--out", run, *OPTIONS, "--resume"], env=job)
        seen = []
        os.set_blocking(requeued.stdout.fileno(), False)
        wait_for(lambda: seen.append(requeued.stdout.read() or b"") or b"waiting up to 90 s" in b"".join(seen), 60,
                 "'waiting' line from the requeued job")
        os.kill(holder["pid"], signal.SIGCONT)
        assert a.wait(TIMEOUT) == 0, a.stdout.read().decode()[-3000:]
        os.set_blocking(requeued.stdout.fileno(), True)
        assert requeued.wait(TIMEOUT) == 0
        output = (b"".join(seen) + requeued.stdout.read()).decode()
        assert "nothing left to train" in output, output[-3000:]
        assert runlock.read(str(run)) is None
    finally:
        if holder:
            try:
                os.kill(holder["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
        for p in (a, requeued):
            if p is not None and p.poll() is None:
                kill_group(p)
