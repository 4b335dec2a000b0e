"""Slurm for real: slurm/single-node.sbatch submitted to a single-node Slurm cluster started on this machine
(tests/slurm_cluster.py: munged, slurmctld and slurmd), ranks started by `srun --mpi=pmix`.

- a job of the template's shape (one task on the whole node, its CPUs as threads) trains, exports and ends
  COMPLETED with exit code 0:0;
- SIGUSR1 to the batch shell mid-training (`scancel --batch --signal=USR1`, what `#SBATCH --signal=B:USR1@N`
  sends before the time limit): the ranks checkpoint and exit 75, the job requeues itself, runs again with
  --resume from that checkpoint, ends COMPLETED 0:0 after one restart, and its vectors are the uninterrupted
  job's (same rank count: equal up to float32 rounding; README "Resume and re-shard");
- in that same job, the requeue race (issue 38): run 2 starts while run 1 still holds OUT's lock (the test
  plants it in the requeue delay, naming a live process of its own and the job's Slurm id); run 2 says it
  waits for its previous run, goes on only once the lock is released, and then resumes as above.
  HVD_W2V_LOCK_WAIT reaches it through sbatch's environment. A lock never released is refused after that
  wait: tests/test_run_folder.py tests it (here it would cost one more job start).

Every wait is bounded (cluster start 60 s, each job 150 s), so a broken Slurm fails the test, never hangs it.
There is no slurmdbd, so states come from `scontrol show job` (the cluster keeps finished jobs an hour).
Skipped only where a cluster cannot be started at all: not root, or slurm-wlm/munge not installed (mpi/setup
installs them). Most of its time is TensorFlow starting 3 times (two jobs, one requeued), the requeue delay
(11 s) and the HELD s for which run 2 waits for the lock.
"""
import json
import os
import re
import socket
import subprocess
import time

import numpy as np
import pytest

from conftest import ROOT
from hvd_w2v.store import runlock
from hvd_w2v.synthetic import generate
from slurm_cluster import SlurmCluster, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

TEMPLATE = ROOT / "slurm" / "single-node.sbatch"
# Tiny: 100,000 tokens, 1,875 words of 16 dimensions, 1,040 global steps over 20 epochs. Training lasts seconds
# (2 epochs were too short for the signal below to land), long enough for a signal sent when training starts to
# land well before the end (acted on within 5 steps).
OPTIONS = ["--epochs", "20", "--dim", "16", "--show", "", "--quiet", "--checkpoint-every", "0"]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED"}
JOB_TIMEOUT = 150  # s, one job from submission to its end, a requeue included
# The requeue race: run 2 waits at most LOCK_WAIT s for a lock of its own job (HVD_W2V_LOCK_WAIT in the
# environment sbatch passes on; its line says which wait reached it, and 60 s rather than the default 180 s
# keeps a run 2 that the test failed to release within JOB_TIMEOUT); the test releases the lock HELD s after
# run 2 says it waits.
LOCK_WAIT = 60
HELD = 3


@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster() as c:
        yield c


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("slurm-corpus") / "zipf.txt"
    generate(str(path), 100000, vocab=2000, seed=0)
    return str(path)


def submit(cluster, out, corpus, template=TEMPLATE, shape=(), options=OPTIONS, env=None):
    """sbatch ``template`` from the checkout (its submit folder finds slurm/run-train and .venv) with the
    allocation ``shape`` (none: the template's); returns the job id and its output file."""
    log = out.parent / f"{out.name}.log"
    result = cluster.run(["sbatch", "--parsable", *shape, "-o", str(log), str(template), *options],
                         cwd=ROOT, env=dict(env or {}, CORPUS=str(corpus), OUT=str(out)))
    return result.stdout.strip().split(";")[0], log


def finished(job):
    return job.get("JobState") in FINAL


def text(log):
    return log.read_text(errors="replace") if log.exists() else ""


def vectors(out):
    with open(out / "vectors.bin", "rb") as f:
        n, d = map(int, f.readline().split())
        rows = {}
        for _ in range(n):
            word = b""
            while (c := f.read(1)) != b" ":
                word += c
            rows[word.strip()] = np.frombuffer(f.read(4 * d), "<f4")
            f.read(1)
    return rows


@pytest.fixture(scope="module")
def uninterrupted(cluster, corpus, tmp_path_factory):
    """One job run to its end: (job dict, output, out folder)."""
    out = tmp_path_factory.mktemp("slurm-a") / "out"
    job_id, log = submit(cluster, out, corpus)
    job = cluster.wait_job(job_id, finished, JOB_TIMEOUT)
    return job, text(log), out


def test_single_node_job_trains_and_completes(cluster, uninterrupted):
    job, output, out = uninterrupted
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("COMPLETED", "0:0", "0"), output
    threads = f"{cluster.cpus} thread" + "s" * (cluster.cpus > 1)
    assert "run 1 on " in output and f": 1 rank x {threads}; srun --mpi=pmix " in output, output
    assert f"--cpus-per-task={cluster.cpus} hvd-w2v train" in output, output
    assert "--resume" not in output, output
    assert f"export: {out}/vectors.bin" in output and "hvd-w2v exited with 0" in output, output
    words = int(re.search(r"^done: vocabulary ([\d,]+) words", output, re.M).group(1).replace(",", ""))
    rows = vectors(out)
    assert len(rows) == words > 1000 and all(v.shape == (16,) and np.isfinite(v).all() for v in rows.values())


def test_usr1_checkpoints_requeues_waits_for_its_previous_run_and_resumes(cluster, corpus, uninterrupted,
                                                                          tmp_path):
    out = tmp_path / "out"
    job_id, log = submit(cluster, out, corpus, env={"HVD_W2V_LOCK_WAIT": str(LOCK_WAIT)})
    output = interrupt_and_resume(cluster, job_id, log, out, 1, vectors(uninterrupted[2]),
                                  requeued=previous_run_exiting)
    assert "lock: took over" not in output, output  # run 2 took the lock its previous run released


def previous_run_exiting(cluster, job_id, log, out, deadline):
    """The requeue race: run 2 of job ``job_id`` starts while its previous run still holds OUT's lock.

    Once run 1 has exited and the job has requeued itself, and before run 2 starts (the requeue delay,
    cred_expire + 1 s = 11 s here), OUT's lock is created as runlock.acquire creates it (O_EXCL: a lock run 1
    left behind fails here), naming a live process of this test (a `sleep`, on this host) and the job's own
    Slurm id: run 1 still exiting. Run 2 must say it waits for it and print nothing more while it is held
    (neither go on, nor take it over, nor refuse); HELD s later the lock is removed, then the process ended,
    in the order of runlock.Lock.release and the exit. Returns [run 2's line saying it waits]."""
    def seen(pattern, what):
        while not (found := re.search(pattern, text(log), re.M)):
            assert time.monotonic() < deadline and not re.search("^resume: ", text(log), re.M) \
                and not finished(cluster.job(job_id)), f"{what}\n{text(log)}\n{cluster.logs()}"
            time.sleep(0.3)
        return found

    seen(r"^slurm-job .*: hvd-w2v exited with 75: requeueing job", "the job never requeued itself")
    path = out / runlock.NAME
    previous = subprocess.Popen(["sleep", str(JOB_TIMEOUT)])  # bounded even if this test died here
    holder = dict(host=socket.gethostname(), pid=previous.pid, slurm_job=job_id,
                  started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), heartbeat=time.time(), token=f"test.{previous.pid}")
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "w") as f:
            json.dump(holder, f)
        assert "run 2 on " not in text(log), f"run 2 started before the lock was planted\n{text(log)}"
        waiting = seen(rf"^lock: {re.escape(str(out))} is held by host {re.escape(holder['host'])}, pid "
                       rf"{previous.pid}, Slurm job {job_id}, started \S+, heartbeat \d+ s ago, this Slurm job's "
                       rf"previous run; waiting up to {LOCK_WAIT} s for it to end$", "run 2 never said it waits")
        time.sleep(HELD)
        meanwhile = text(log)[waiting.end():]
        assert not meanwhile.strip() and cluster.job(job_id).get("JobState") == "RUNNING", \
            f"run 2 did not wait for the lock ({HELD} s):\n{text(log)}"
        os.remove(path)
        previous.kill()
        previous.wait(10)
        return [waiting.group(0)]
    finally:
        if previous.poll() is None:
            previous.kill()
            previous.wait(10)
        if (runlock.read(out) or {}).get("token") == holder["token"]:
            os.remove(path)


def interrupt_and_resume(cluster, job_id, log, out, ranks, reference, requeued=None):
    """SIGUSR1 to the batch shell of job ``job_id`` once training has started; asserts that the ranks
    checkpoint, the job requeues itself, resumes from that checkpoint and ends COMPLETED after one restart
    with the ``reference`` vectors. ``requeued``: called as ``requeued(cluster, job_id, log, out, deadline)``
    once the signal is sent; the lines it returns must come in run 2 after its start and before its resume.
    Returns the job's output."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while not re.search(r"^train: ", text(log), re.M):  # logged just before the first step
        assert time.monotonic() < deadline and not finished(cluster.job(job_id)), \
            f"training never started\n{text(log)}\n{cluster.logs()}"
        time.sleep(0.3)
    # To the batch shell alone, as `#SBATCH --signal=B:USR1@N` does; slurm/run-train forwards it to srun.
    cluster.run(["scancel", "--batch", "--signal=USR1", job_id])
    lines = requeued(cluster, job_id, log, out, deadline) if requeued else []
    job = cluster.wait_job(job_id, finished, max(deadline - time.monotonic(), 1))
    output = text(log)
    print(output)
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("COMPLETED", "0:0", "1"), output

    saved = re.search(r"^interrupted: checkpoint (\S+) at step (\d+); exit code 75", output, re.M)
    assert saved, output
    path, step = saved.group(1), int(saved.group(2).replace(",", ""))
    total = int(re.search(r"RowPlan\(.*\), ([\d,]+) steps of", output).group(1).replace(",", ""))
    assert 0 < step < total, output
    # In this order: the signal, the checkpoint, the requeue, the second run with --resume (and what
    # ``requeued`` saw it print), the resume from that very checkpoint, the end.
    marks = ["SIGUSR1: asking the ranks to checkpoint", saved.group(0), "hvd-w2v exited with 75: requeueing job",
             "run 2 on ", *lines,
             f"resume: step {step:,} of {total:,} from {path} (written on {ranks} rank{'s' if ranks != 1 else ''})",
             f"export: {out}/vectors.bin", "hvd-w2v exited with 0"]
    where = [output.find(m) for m in marks]
    assert -1 not in where and where == sorted(where), list(zip(marks, where))
    second_run = output[where[3]:].splitlines()[0]
    assert second_run.rstrip().endswith("--resume"), second_run
    assert os.path.isdir(path)

    a = vectors(out)
    assert a.keys() == reference.keys()
    diff = max(np.abs(a[w] - reference[w]).max() for w in a)
    assert diff < 1e-5, f"the resumed job's vectors differ from the uninterrupted job's by {diff:.2e}"
    return output
