"""The stall watchdog (hvd_w2v/parallel/watchdog.py): a rank that is alive but does not move (SIGSTOP, as a frozen node,
a stuck NFS read or a swapping host looks to its peers) ends the job within the limit, with one line naming
it and its host, exit code 76, and the run resumes from its newest checkpoint to the uninterrupted vectors.

- SIGSTOP of one of 2 ranks mid-training: exit 76 within --stall-timeout + 30 s, the line names rank 1 and its
  host, run.json records the stall, no rank is left, and --resume gives the uninterrupted run's vectors;
- SIGSTOP then SIGCONT before the limit: the run finishes with the uninterrupted run's vectors;
- a rank that stops itself (HVD_W2V_FAULT=stop:PHASE:1) before MPI starts, in Horovod's start, in the
  vocabulary phase, in the export and in a query: each ends the same way, the line naming the phase;
- the verdict and its line, without MPI.

Every launch is bounded (BOUND s, then the whole job is killed and the test fails), and every rank process a
test started is sent SIGCONT and SIGKILL in a finally block, so that a broken watchdog fails a test rather
than hanging CI, and nothing is left stopped.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from bounded import kill_group
from conftest import LAUNCH, ROOT
from hvd_w2v.parallel import watchdog
from hvd_w2v.synthetic import generate
from test_checkpoint import vectors

LIMIT = 10  # --stall-timeout in these tests: above any healthy wait of a 2-rank job on 2 shared cores (a few s)
BOUND = 150  # seconds: a whole launch, start to end
WITHIN = LIMIT + 30  # the bound, from the stop to the end of the job
# 100,000 tokens, 1,875 words of 16 dimensions; 256-position steps, 409 an epoch: training lasts 5-10 s.
OPTIONS = ["--epochs", "40", "--dim", "16", "--batch-words", "256", "--show", "", "--quiet", "--format", "binary",
           "--stall-timeout", str(LIMIT)]
ATOL = 1e-5  # as tests/test_checkpoint.py (bit for bit is expected on the same rank count)
HOST = socket.gethostname()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("watchdog-corpus") / "zipf.txt"
    generate(str(path), 100000, vocab=2000, seed=0)
    return str(path)


def _state(pid):
    """The process state letter of ``pid`` (R, S, T: stopped, Z, ...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0]
    except OSError:
        return None


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


class Job:
    """``mpi/launch -n 2 ARGS`` in a session of its own, its lines collected as they come (``lines``), its rank
    processes (mpirun's children) recorded as soon as they exist. Bounded: BOUND s after its start the whole
    job is killed. :meth:`close` SIGCONTs and SIGKILLs every rank process still there."""

    def __init__(self, args, env=None):
        self.proc = subprocess.Popen([str(LAUNCH), "-n", "2", "--threads", "1", *map(str, args)], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
        self.started = time.monotonic()
        self.lines, self.ranks = [], []
        self.bound = threading.Timer(BOUND, kill_group, [self.proc])
        self.bound.start()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace"))

    def rank_pids(self, n=2):
        """The rank processes (children of mpirun, which mpi/launch execs), once all ``n`` exist."""
        while len(self.ranks) < n:
            assert self.proc.poll() is None and time.monotonic() - self.started < BOUND, self.output
            found = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
            self.ranks = [int(p) for p in found.stdout.split()]
            time.sleep(0.02)
        return self.ranks

    def wait_for(self, pattern):
        while not re.search(pattern, self.output, re.M):
            assert self.proc.poll() is None and time.monotonic() - self.started < BOUND, self.output
            time.sleep(0.05)

    @property
    def output(self):
        return "".join(self.lines)

    def wait(self):
        """(exit code, output); None as the code when the bound killed the job."""
        self.proc.wait(BOUND + 30)
        self.reader.join(10)
        hung = not self.bound.is_alive() and time.monotonic() - self.started >= BOUND
        return (None if hung else self.proc.returncode), self.output

    def close(self):
        self.bound.cancel()
        if self.proc.poll() is None:
            kill_group(self.proc)
        for pid in self.ranks:  # nothing this test stopped is left behind
            if _alive(pid):
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        break


def run(args, env=None, stop=None, delay=0.0, cont_after=None):
    """Run a 2-rank job; with ``stop`` (a regex of the output), SIGSTOP rank 1 ``delay`` s after a line
    matches, and with ``cont_after`` SIGCONT it that many seconds later. Returns (exit code, output, seconds
    from the stop to the end of the job, the rank pids); the stop is the test's, or with HVD_W2V_FAULT in
    ``env`` the moment rank 1 is seen stopped."""
    job = Job(args, env)
    try:
        pids = job.rank_pids()
        mark = job.started
        if watchdog.FAULT_ENV in (env or {}):
            while _state(pids[1]) != "T":  # it stops itself
                assert job.proc.poll() is None and time.monotonic() - job.started < BOUND, job.output
                time.sleep(0.02)
            mark = time.monotonic()
        if stop:
            job.wait_for(stop)
            time.sleep(delay)
            assert job.proc.poll() is None, f"the job ended before the stop\n{job.output}"
            os.kill(pids[1], signal.SIGSTOP)
            mark = time.monotonic()
            if cont_after is not None:
                time.sleep(cont_after)
                os.kill(pids[1], signal.SIGCONT)
        code, output = job.wait()
        ended = time.monotonic() - mark
        time.sleep(0.5)
        left = [p for p in pids if _alive(p)]
        assert not left, f"rank processes left after the job: {left}\n{output}"
        return code, output, ended, pids
    finally:
        job.close()


def stall_line(output):
    errors = [line for line in output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    return errors[0]


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """The uninterrupted 2-rank run: its vectors and folder."""
    out = tmp_path_factory.mktemp("watchdog-ref") / "out"
    code, output, _, _ = run(["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, "--checkpoint-every", "0"])
    assert code == 0, output[-3000:]
    return vectors(out), out


def test_sigstop_mid_training_ends_the_job_and_the_newest_checkpoint_resumes(corpus, reference, tmp_path):
    out = tmp_path / "out"
    args = ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, "--checkpoint-every", "0.002"]
    # 2.5 s into training: checkpoints written (every 0.12 s), and heartbeats sent from the phase (every 0.75 s)
    code, output, ended, _ = run(args, stop=r"^train: skip-gram", delay=2.5)
    line = stall_line(output)
    print(f"SIGSTOP of rank 1 mid-training, --stall-timeout {LIMIT}: ended {ended:.1f} s later, exit {code}\n{line}")
    assert code == watchdog.EXIT_STALLED, output[-3000:]
    assert LIMIT - 1 < ended < WITHIN, f"{ended:.1f} s"
    # Checkpoints come every 0.12 s here, so the stop may land in one: either phase of the loop is named.
    assert re.match(rf"hvd-w2v: error: stalled: rank 1 \(host {re.escape(HOST)}; last seen \d+ s ago at step "
                    rf"[\d,]+ in phase (train|checkpoint): stopped, or its host is stuck or unreachable\) has not "
                    rf"finished (the checkpoint of )?step [\d,]+ for \d+ s; ending the job with exit code 76$",
                    line), line
    record = json.loads((out / "run.json").read_text())
    stall = record["stall"]
    assert record["state"] == "stalled" and stall["exit_code"] == 76, record
    assert stall["phase"] in ("train", "checkpoint"), record
    assert [(r["rank"], r["host"], r["kind"]) for r in stall["ranks"]] == [(1, HOST, "silent")], stall
    assert os.path.isdir(record["checkpoint"]), record
    assert not (out / "vectors.bin").exists()
    info = subprocess.run([sys.executable, "-m", "hvd_w2v.cli", "info", out], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout
    assert f"  stall: rank 1 (host {HOST}, silent); noticed by rank 0 after " in info, info

    code, output, _, _ = run(["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, "--checkpoint-every", "0",
                              "--resume"])
    assert code == 0, output[-3000:]
    assert re.search(r"^resume: step [\d,]+ of [\d,]+ from .*\(written on 2 ranks\)", output, re.M), output
    diff = np.abs(vectors(out) - reference[0]).max()
    assert diff < ATOL, f"the resumed vectors differ from the uninterrupted run's by {diff:.2e}"
    assert json.loads((out / "run.json").read_text())["state"] == "finished"


def test_sigstop_then_sigcont_before_the_limit_changes_nothing(corpus, tmp_path):
    """Rank 1 stopped as training starts, for half the limit: the job finishes with the vectors of the same job
    left alone. (8 epochs, not OPTIONS' 40: the stop lands as the training's first line is printed.)"""
    short = [*OPTIONS, "--epochs", "8", "--checkpoint-every", "0"]
    code, output, _, _ = run(["hvd-w2v", "train", corpus, "--out", tmp_path / "alone", *short])
    assert code == 0, output[-3000:]
    out = tmp_path / "out"
    code, output, ended, _ = run(["hvd-w2v", "train", corpus, "--out", out, *short],
                                 stop=r"^train: skip-gram", cont_after=LIMIT / 2)
    assert code == 0 and "stalled" not in output, output[-3000:]
    diff = np.abs(vectors(out) - vectors(tmp_path / "alone")).max()
    print(f"stopped {LIMIT / 2:.1f} s then continued: finished, vectors within {diff:.1e} of the uninterrupted run")
    assert diff < ATOL


@pytest.mark.parametrize("phase, pattern", [
    ("mpi", rf"stalled: rank 0 \(host {re.escape(HOST)}\) has waited {LIMIT} s for the other ranks to start MPI: "
            rf"a rank never joined \(stopped, its host stuck, or its start slower than the limit\), and before MPI has "
            rf"started no rank can tell which"),
    ("start", rf"stalled: rank 1 \(host {re.escape(HOST)}; last seen \d+ s ago in phase start: stopped, or its "
              rf"host is stuck or unreachable\) has not reached the others in phase start for \d+ s"),
    ("vocab", rf"stalled: rank 1 \(host {re.escape(HOST)}; last seen \d+ s ago in phase vocab: stopped, or its "
              rf"host is stuck or unreachable\) has not reached the others in phase vocab for \d+ s"),
    ("export", rf"stalled: rank 1 \(host {re.escape(HOST)}; last seen \d+ s ago in phase export: stopped, or "
               rf"its host is stuck or unreachable\) has not reached the others in phase export for \d+ s"),
])
def test_a_rank_stopped_in_a_phase_ends_the_job(corpus, tmp_path, phase, pattern):
    """The rank stops itself on entering the phase (a SIGSTOP all the same): before MPI has started (the
    others wait in MPI_Init), in Horovod's start, in the vocabulary's counting and in the export."""
    out = tmp_path / "out"
    # One epoch: no phase here needs the training's length, and the export comes after it.
    code, output, ended, _ = run(["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, "--epochs", "1",
                                  "--checkpoint-every", "0"], env={watchdog.FAULT_ENV: f"stop:{phase}:1"})
    line = stall_line(output)
    print(f"rank 1 stopped in phase {phase}: the job ended {ended:.1f} s after the stop, exit {code}\n{line}")
    assert code == watchdog.EXIT_STALLED, output[-3000:]
    assert re.search(pattern + "; ending the job with exit code 76$", line), line
    assert ended < WITHIN, f"{ended:.1f} s"
    if phase == "export":
        stall = json.loads((out / "run.json").read_text())["stall"]
        assert stall["phase"] == "export" and stall["ranks"][0]["rank"] == 1, stall


def test_a_rank_stopped_in_a_query_ends_the_job(reference, tmp_path):
    code, output, ended, _ = run(["hvd-w2v", "neighbors", reference[1] / "vectors.bin", "w1", "--stall-timeout",
                                  LIMIT], env={watchdog.FAULT_ENV: "stop:query:1"})
    line = stall_line(output)
    print(f"rank 1 stopped in a query: ended {ended:.1f} s after the stop, exit {code}\n{line}")
    assert code == watchdog.EXIT_STALLED and ended < WITHIN, output[-3000:]
    assert "rank 1 (host " in line and "has not reached the others in phase query" in line, line


# -- the verdict, without MPI --------------------------------------------------------------------------------

def beat(rank, inside, phase="train", step=436, host="nodeB", seconds=1.0):
    return watchdog.Heartbeat(rank, host, phase, step, inside, seconds)


def test_who_is_missing_and_the_line_that_says_so():
    now = 1000.0
    peers = {1: (beat(1, True), now - 40.0),  # silent for 40 s: stopped
             2: (beat(2, True, host="nodeC"), now - 0.5),  # waits like rank 0
             3: (beat(3, False, host="nodeD", seconds=30.0), now - 0.5)}  # alive, outside any collective
    found = watchdog.missing(peers, now, stale=15.0, size=5, me=0)
    assert [(m.rank, m.kind) for m in found] == [(1, "silent"), (3, "busy"), (4, "never")]
    line = watchdog.message(0, "nodeA", "train", 436, 31.4, found[:1])
    assert line == ("stalled: rank 1 (host nodeB; last seen 40 s ago at step 436 in phase train: stopped, or its "
                    "host is stuck or unreachable) has not finished step 437 for 31 s; ending the job with exit "
                    "code 76")
    line = watchdog.message(0, "nodeA", "vocab", 0, 31.4, found)
    assert line.startswith("stalled: ranks 1 (host nodeB; "), line
    assert "3 (host nodeD; alive at step 436 in phase train but outside any collective for 30 s" in line, line
    assert "4 (host unknown; no heartbeat" in line and "have not reached the others in phase vocab" in line, line
    everyone = watchdog.message(0, "nodeA", "export", 5, 130, [])
    assert everyone.startswith("stalled: every rank has waited 130 s in a collective that does not complete"), everyone
    info = watchdog.stall_info(0, "train", 436, 31.44, found[:1], line)
    assert info["ranks"] == [{"rank": 1, "kind": "silent", "host": "nodeB", "phase": "train", "step": 436,
                              "last_seen_seconds": 40.0}] and info["exit_code"] == 76


def test_the_automatic_limit_follows_the_median_step():
    class World:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 2

    dog = watchdog.Watchdog(World(), watchdog.Beat())
    assert dog.limit() == watchdog.DEFAULT_LIMIT  # no steps measured yet
    dog.steps.extend([0.01] * 10)
    assert dog.limit() == watchdog.DEFAULT_LIMIT  # 50 steps of 10 ms: far below 120 s
    dog.steps.extend([4.0] * 12)
    assert dog.limit() == 200.0  # the median step is 4 s: 50 of them
    dog.beat.enter("corpus", budget=watchdog.CORPUS_BUDGET)
    assert dog.limit() == watchdog.CORPUS_BUDGET
    given = watchdog.Watchdog(World(), watchdog.Beat(), limit=15)
    assert given.limit() == 15 and given.tick == 0.75 and given.stale == 5.0


def test_the_progress_line_shows_the_slowest_ranks_lag():
    import io

    from hvd_w2v.common import progress

    class Two:
        rank, size = 0, 2

    out = io.StringIO()
    p = progress.Progress(Two(), stream=out, columns=0)
    # Over 100 steps rank 1 worked 0.3 s outside the exchange, rank 0 0.1 s: 2 ms a step more.
    p.report(200, 0, 200, 2, 2, 1_000_000, 10.0, 2.5, 0.02, 0.1, 1000, work=[0.1, 0.3], steps=100)
    assert out.getvalue().endswith("  eta 0 s  slowest rank 1 +2.0 ms/step\n"), out.getvalue()
    assert progress.slowest_lag([0.5], 100) is None and progress.slowest_lag([0.25, 0.125, 0.5], 10) == (2, 37.5)


# -- Slurm: the job requeues itself on 76 and resumes ---------------------------------------------------------

def _slurm_rank(cluster, job_id, procid):
    """The pid of task ``procid`` of job ``job_id``: the hvd-w2v process among the job's (scontrol listpids)
    whose environment says SLURM_PROCID=procid. None while it does not exist."""
    listed = cluster.run(["scontrol", "listpids", job_id], check=False).stdout.split()
    for pid in (int(p) for p in listed if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if b"hvd-w2v" in cmd and f"SLURM_PROCID={procid}".encode() in env and b"mpi/rank" not in cmd:
            return pid
    return None


def test_slurm_requeues_a_stalled_job_and_it_resumes(corpus, reference, tmp_path):
    """slurm/single-node.sbatch, 2 tasks under srun: SIGSTOP of task 1 mid-training; the watchdog ends the
    job with 76 naming it, slurm/run-train requeues the job, the second run resumes from the newest checkpoint
    and ends COMPLETED with the uninterrupted vectors (2 ranks under mpirun: the same rank count)."""
    from slurm_cluster import SlurmCluster, unavailable
    from test_slurm import JOB_TIMEOUT, finished, submit, text

    if unavailable():
        pytest.skip(unavailable())
    out = tmp_path / "out"
    with SlurmCluster() as cluster:
        job_id, log = submit(cluster, out, corpus, shape=("-n", "2", "-c", "1"),
                             options=[*OPTIONS, "--checkpoint-every", "0.002"])
        stopped = None
        try:
            deadline = time.monotonic() + JOB_TIMEOUT
            while not re.search(r"^train: ", text(log), re.M):
                assert time.monotonic() < deadline and not finished(cluster.job(job_id)), text(log)
                time.sleep(0.2)
            time.sleep(2.5)
            stopped = _slurm_rank(cluster, job_id, 1)
            assert stopped, text(log)
            os.kill(stopped, signal.SIGSTOP)
            job = cluster.wait_job(job_id, finished, JOB_TIMEOUT + 60)
        finally:
            if stopped and _alive(stopped):
                os.kill(stopped, signal.SIGCONT)
                os.kill(stopped, signal.SIGKILL)
        output = text(log)
        print(output)
        assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("COMPLETED", "0:0", "1"), output
        line = stall_line(output.split("run 2 on ")[0])
        # Checkpoints come every 0.12 s here, so the stop may land in one: either phase of the loop is named.
        assert line.startswith("hvd-w2v: error: stalled: rank 1 (host ") and re.search(
            r"in phase (train|checkpoint)\b", line), line
        marks = ["hvd-w2v exited with 76: requeueing job", "run 2 on ", "resume: step ", "hvd-w2v exited with 0"]
        where = [output.find(m) for m in marks]
        assert -1 not in where and where == sorted(where), list(zip(marks, where))
        diff = np.abs(vectors(out) - reference[0]).max()
        assert diff < ATOL, f"the requeued job's vectors differ from the uninterrupted run's by {diff:.2e}"
