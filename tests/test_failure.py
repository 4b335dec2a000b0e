"""A rank that dies mid-training (kill -9) ends the whole job promptly, with a non-zero exit, no hang."""
import os
import signal
import subprocess
import time

from bounded import kill_group
from conftest import LAUNCH, ROOT, launch
from hvd_w2v.synthetic import generate

BOUND = 30  # seconds from the kill to the end of the job


def kill_one_rank(corpus, out, options, ready, rank, pause=0.0):
    """Start a 2-rank training job, wait until ``ready()`` (then ``pause`` s), kill -9 its ``rank``-th rank
    process; returns (mpirun, seconds from the kill to the end of mpirun). The job is bounded either way."""
    proc = subprocess.Popen([str(LAUNCH), "-n", "2", "--threads", "1", "hvd-w2v", "train", str(corpus),
                             "--out", str(out), *options],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, "the job ended or stalled before the kill"
            time.sleep(0.2)
        time.sleep(pause)
        ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(ranks) == 2, f"expected 2 rank processes under mpirun, found {ranks}"
        os.kill(int(ranks[rank]), signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=BOUND + 30)
        return proc, time.monotonic() - killed
    finally:
        if proc.poll() is None:
            kill_group(proc)


def test_kill_9_of_one_rank_ends_the_job(tmp_path):
    corpus = tmp_path / "zipf.txt"
    generate(str(corpus), 200000, vocab=2000, seed=2)
    out = tmp_path / "out"
    # Training starts right after encoding writes stream.json.
    proc, ended = kill_one_rank(corpus, out, ["--epochs", "100", "--batch-words", "256", "--show", ""],
                                lambda: (out / "ids" / "stream.json").exists(), rank=1, pause=3)
    print(f"job ended {ended:.2f} s after kill -9 of one rank, exit code {proc.returncode}")
    assert proc.returncode != 0
    assert ended < BOUND, f"the job took {ended:.1f} s to end after a rank was killed"
    leftover = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert not leftover, f"ranks left running: {leftover}"
    assert not (out / "vectors.bin").exists() and not (out / "vectors.bin.tmp").exists()


def test_kill_9_mid_training_leaves_a_checkpoint_that_resumes(tmp_path):
    """kill -9 of one rank while checkpoints are being written: the job ends within the bound, and the newest
    complete checkpoint (a half-written one is ignored) resumes to the end on another rank count."""
    corpus = tmp_path / "zipf.txt"
    generate(str(corpus), 200000, vocab=2000, seed=2)
    out = tmp_path / "out"
    options = ["--epochs", "3", "--batch-words", "512", "--show", "", "--quiet", "--format", "binary"]
    proc, ended = kill_one_rank(corpus, out, [*options, "--checkpoint-every", "0.001"],
                                lambda: any((out / "checkpoints").glob("step-*")), rank=0)
    assert proc.returncode != 0 and ended < BOUND, f"exit {proc.returncode} after {ended:.1f} s"
    assert not (out / "vectors.bin").exists()
    result = launch(3, ["hvd-w2v", "train", str(corpus), "--out", str(out), *options, "--resume"], timeout=180)
    assert result.ok, result.output[-3000:]
    assert "resume: step " in result.output and "written on 2 ranks" in result.output, result.output[-2000:]
    assert (out / "vectors.bin").exists()
