"""Checkpoints on real ranks: a signal then --resume equals the uninterrupted run, on the same or another rank
count; damaged checkpoints are passed over or refused, never lost; a checkpoint that cannot be written ends
the job with one clear error and leaves the earlier one intact.

What reaches the ranks (Open MPI 4.1.4): SIGUSR1 sent to mpirun is forwarded to every rank; SIGTERM sent to one
rank's pid reaches that rank alone, and the allreduce of the flag stops all of them. SIGTERM sent to mpirun is
forwarded too, but mpirun kills the ranks 1 s later (odls_base_sigkill_timeout) and exits with 1, so only a
checkpoint written within that second survives: use SIGUSR1 with mpirun (Slurm: --signal=USR1@120).
"""
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from bounded import kill_group
from conftest import LAUNCH, ROOT, launch
from hvd_w2v.synthetic import generate

ATOL = 1e-5  # as tests/test_train.py: float32 sums in another order on another rank count (measured ~1e-6)
OPTIONS = ["--epochs", "2", "--batch-words", "1024", "--quiet", "--show", "", "--format", "binary"]
STEPS = 78  # global steps of this corpus at these options (39,699 positions / 1,024, times 2 epochs)
EXIT_INTERRUPTED = 75


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "zipf.txt"
    generate(str(path), 40000, vocab=2000, pairs=20, first=20, seed=0)  # 1,075 words kept: not /2, /3, /4
    return str(path)


def train(corpus, out, nranks, *extra, ok=True):
    result = launch(nranks, ["hvd-w2v", "train", corpus, "--out", str(out), *OPTIONS, *extra], timeout=120)
    if ok:
        assert result.ok, result.output[-3000:]
    return result


def vectors(out):
    with open(f"{out}/vectors.bin", "rb") as f:
        n, d = map(int, f.readline().split())
        rows = []
        for _ in range(n):
            while f.read(1) != b" ":
                pass
            rows.append(np.frombuffer(f.read(4 * d), "<f4"))
            f.read(1)
    return np.array(rows)


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """The uninterrupted run on 1 rank, with no checkpoint."""
    out = tmp_path_factory.mktemp("ref")
    train(corpus, out, 1, "--checkpoint-every", "0", "--no-final-checkpoint")
    assert not (out / "checkpoints").exists()
    return vectors(out)


def assert_same(out, reference):
    diff = np.abs(vectors(out) - reference).max()
    assert diff < ATOL, f"differs from the uninterrupted run by {diff:.2e}"


def checkpoints(out):
    return sorted(p.name for p in (out / "checkpoints").iterdir())


def interrupt(corpus, out, nranks, sig, to_rank, early=False, options=OPTIONS):
    """Start a run with ``options``, send ``sig`` once training has started (to mpirun, or to the
    ``to_rank``-th of the rank processes under mpirun, by pid), or with ``early`` to mpirun 1 s after the ranks
    exist (they are still importing TensorFlow then); returns (exit code, output, seconds from the signal to the
    checkpoint line, to the end of mpirun)."""
    proc = subprocess.Popen([str(LAUNCH), "-n", str(nranks), "--threads", "1", "hvd-w2v", "train", corpus,
                             "--out", str(out), *options, "--checkpoint-every", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines, sent, saved = [], None, None
    bound = threading.Timer(90, kill_group, [proc])  # a hung job is killed whole, ending the loop below
    bound.start()
    try:
        if early:
            while len(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True).stdout.split()) < nranks:
                time.sleep(0.05)  # bounded by the timer above
            time.sleep(1)
            proc.send_signal(sig)
            sent = time.monotonic()
        for raw in proc.stdout:  # ends when mpirun closes its output
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            if sent is None and line.startswith("train: "):  # logged just before the first step
                if to_rank is None:
                    pid = proc.pid  # mpi/launch execs mpirun
                else:
                    ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
                    pid = int(ranks.stdout.split()[to_rank])
                os.kill(pid, sig)
                sent = time.monotonic()
            if saved is None and sent and line.startswith("checkpoint: "):
                saved = time.monotonic() - sent
        proc.wait(timeout=30)
    finally:
        bound.cancel()
        if proc.poll() is None:
            kill_group(proc)
    assert sent, "".join(lines)[-3000:]
    return proc.returncode, "".join(lines), saved, time.monotonic() - sent


def only_checkpoint(out):
    names = checkpoints(out)
    assert len(names) == 1 and names[0].startswith("step-"), names
    step = int(names[0][5:])
    assert 0 < step < STEPS
    assert (out / "checkpoints" / names[0] / "manifest.json").exists()
    return step


def test_sigusr1_to_mpirun_then_resume_equals_the_uninterrupted_run(corpus, reference, tmp_path):
    code, output, saved, ended = interrupt(corpus, tmp_path, 2, signal.SIGUSR1, to_rank=None)
    print(f"SIGUSR1 to mpirun: checkpoint written {saved:.2f} s later, job ended after {ended:.2f} s, exit {code}")
    assert code == EXIT_INTERRUPTED, output[-3000:]
    step = only_checkpoint(tmp_path)
    assert f"interrupted: checkpoint {tmp_path}/checkpoints/step-{step:09d} at step {step}" in output
    assert not (tmp_path / "vectors.bin").exists()  # stopped before the export
    assert not (tmp_path / ".hvd-w2v.lock").exists() and not (tmp_path / ".staging").exists()  # released on 75
    assert saved < 10, "the signal was not acted on within a few seconds"
    result = train(corpus, tmp_path, 2, "--resume")
    assert f"resume: step {step} of {STEPS} from {tmp_path}/checkpoints/step-{step:09d}" in result.output
    assert_same(tmp_path, reference)


def test_a_finished_run_checkpoints_its_last_step_and_resuming_it_trains_nothing(corpus, reference, tmp_path):
    """By default the last step is checkpointed (W_in and W_out), so a finished run can be queried sharded or
    continued; --resume then finds nothing left to train and exports the same vectors."""
    result = train(corpus, tmp_path, 2, "--checkpoint-every", "0")
    final = tmp_path / "checkpoints" / f"step-{STEPS:09d}"
    assert checkpoints(tmp_path) == [final.name]
    assert f"checkpoint: {final} (" in result.output
    assert_same(tmp_path, reference)
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["state"] == "finished" and record["checkpoint"] == str(final)
    manifest = json.loads((final / "manifest.json").read_text())
    assert manifest["step"] == manifest["total_steps"] == STEPS
    # The checkpoint's W_in is the exported vectors: id i is row i // 2 of rank i % 2's file (checkpoint.py).
    w = [np.fromfile(final / f"rows.{r:05d}.bin", "<f4").reshape(2, -1, 100) for r in (0, 1)]
    w_in = np.empty((len(w[0][0]) + len(w[1][0]), 100), np.float32)
    w_in[0::2], w_in[1::2] = w[0][0], w[1][0]
    assert np.array_equal(w_in, vectors(tmp_path))
    assert np.abs(w[0][1]).max() > 0  # W_out is there too

    again = train(corpus, tmp_path, 2, "--resume")
    assert f"resume: {final} is the end of the run (step {STEPS}); nothing left to train" in again.output
    assert np.array_equal(vectors(tmp_path), w_in)
    assert checkpoints(tmp_path) == [final.name]
    assert json.loads((tmp_path / "run.json").read_text())["state"] == "finished"


def test_sigusr1_while_the_ranks_start_is_acted_on_at_the_first_step(corpus, reference, tmp_path):
    """Slurm may send its warning in a job's first seconds: the ranks must not die of SIGUSR1's default action
    while MPI and TensorFlow start, but checkpoint at the first agreed step and resume from there."""
    code, output, saved, ended = interrupt(corpus, tmp_path, 2, signal.SIGUSR1, to_rank=None, early=True)
    assert code == EXIT_INTERRUPTED and saved is not None, output[-3000:]
    assert only_checkpoint(tmp_path) == 5, output[-3000:]  # the first poll (checkpoint.POLL_STEPS)
    train(corpus, tmp_path, 2, "--resume")
    assert_same(tmp_path, reference)


def test_sigterm_to_one_of_4_ranks_then_resume_on_2_and_on_3(corpus, reference, tmp_path):
    """A 4-rank checkpoint, re-sharded on load: each new rank reads its own ids from the 4 old files."""
    first = tmp_path / "four"
    code, output, saved, ended = interrupt(corpus, first, 4, signal.SIGTERM, to_rank=3)
    print(f"SIGTERM to one of 4 ranks: checkpoint {saved:.2f} s later, job ended after {ended:.2f} s, exit {code}")
    assert code == EXIT_INTERRUPTED, output[-3000:]
    step = only_checkpoint(first)
    for nranks in (2, 3):
        out = tmp_path / f"on{nranks}"
        shutil.copytree(first / "checkpoints", out / "checkpoints")
        result = train(corpus, out, nranks, "--resume")
        assert f"resume: step {step} of {STEPS}" in result.output and "(written on 4 ranks)" in result.output
        assert_same(out, reference)


@pytest.fixture(scope="module")
def periodic(corpus, reference, tmp_path_factory):
    """A 2-rank run with a checkpoint at every agreed boundary (every 5 steps) and none at its end; the last two
    are kept."""
    out = tmp_path_factory.mktemp("periodic")
    result = train(corpus, out, 2, "--checkpoint-every", "0.00001", "--no-final-checkpoint")
    assert result.output.count("checkpoint: ") == 15, result.output[-3000:]
    assert checkpoints(out) == ["step-000000070", "step-000000075"]
    assert_same(out, reference)  # writing checkpoints changes nothing
    return out


def copy_run(periodic, dest):
    """The periodic run's checkpoints, with a file of every one's bytes to check later that none was lost."""
    shutil.copytree(periodic / "checkpoints", dest / "checkpoints")
    return {p: p.read_bytes() for p in (dest / "checkpoints").rglob("*") if p.is_file()}


def fake_step(folder, step):
    """Copy checkpoint ``folder`` to ``step-N`` with its manifest's step changed (rows and sha256 still good)."""
    new = folder.parent / f"step-{step:09d}"
    shutil.copytree(folder, new)
    m = json.loads((new / "manifest.json").read_text())
    m["step"] = step
    (new / "manifest.json").write_text(json.dumps(m))
    return new


def test_damaged_checkpoints_are_passed_over_down_to_the_last_good_one(corpus, reference, periodic, tmp_path):
    saved = copy_run(periodic, tmp_path)
    ck = tmp_path / "checkpoints"
    good = ck / "step-000000070"
    shutil.rmtree(ck / "step-000000075")
    # Newest first: no manifest (a job killed while renaming), a foreign manifest.json, a flipped byte, a
    # truncated rows file; then step 70, good.
    (ck / "step-000000077").mkdir()
    shutil.copy(good / "rows.00000.bin", ck / "step-000000077")
    (fake_step(good, 76) / "manifest.json").write_text("this is not json, just a file of that name\n")
    rows = fake_step(good, 75) / "rows.00001.bin"
    data = bytearray(rows.read_bytes())
    data[1000] ^= 0x40
    rows.write_bytes(bytes(data))
    rows = fake_step(good, 74) / "rows.00000.bin"
    rows.write_bytes(rows.read_bytes()[:-4096])
    result = train(corpus, tmp_path, 3, "--resume")  # re-sharded 2 -> 3 as well
    out = result.output
    assert "skipping " + str(ck / "step-000000077") + ": no manifest" in out, out[-3000:]
    assert "step-000000076: manifest.json is not a valid checkpoint manifest" in out
    assert "step-000000075: rows.00001.bin does not match its sha256" in out
    assert "step-000000074: rows.00000.bin holds 426,304 bytes" in out
    assert f"resume: step 70 of {STEPS} from {good}" in out
    assert_same(tmp_path, reference)
    assert all(p.read_bytes() == b for p, b in saved.items() if "step-000000070" in str(p))


def edit_manifest(m, what):
    if what == "dim":
        m["dim"] = m["config"]["dim"] = 50
    elif what == "vocabulary":
        m["vocab"]["sha256"] = "0" * 64
    elif what == "seed":
        m["config"]["seed"] = 7


@pytest.mark.parametrize("what, fragment", [
    ("dim", "was written with --dim 50, this run has 100"),
    ("vocabulary", "was written for another vocabulary"),
    ("seed", "was written with --seed 7, this run has 1"),
    ("nothing good", "no good checkpoint under"),
])
def test_a_checkpoint_of_another_run_is_refused_and_kept(corpus, periodic, tmp_path, what, fragment):
    saved = copy_run(periodic, tmp_path)
    for name in checkpoints(tmp_path):
        path = tmp_path / "checkpoints" / name / "manifest.json"
        if what == "nothing good":
            rows = path.parent / "rows.00000.bin"
            rows.write_bytes(rows.read_bytes()[:100])
            saved[rows] = rows.read_bytes()
        else:
            m = json.loads(path.read_text())
            edit_manifest(m, what)
            path.write_text(json.dumps(m))
            saved[path] = path.read_bytes()
    result = train(corpus, tmp_path, 2, "--resume", ok=False)
    assert result.returncode == 2, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1 and fragment in errors[0], result.output[-3000:]
    assert "Traceback" not in result.output
    if what in ("dim", "seed"):  # settings are refused before the text passes, which take hours on a large corpus
        assert "prepared in" not in result.output and not (tmp_path / ".staging").exists(), result.output[-3000:]
    assert all(p.read_bytes() == b for p, b in saved.items()), "a checkpoint was changed or removed"
    assert checkpoints(tmp_path) == ["step-000000070", "step-000000075"]


def test_a_checkpoint_of_another_noise_exponent_is_refused_and_an_older_one_reads_as_word2vec_s():
    """--ns-exponent and --cbow-mean are part of what an exact resume shares; a manifest from before the options
    ran 0.75 and the mean."""
    from hvd_w2v.common.config import Config
    from hvd_w2v.common.errors import UserError
    from hvd_w2v.store import checkpoint as ck

    m = dict(version=ck.VERSION, dim=100, config=Config().settled(1, 1).to_dict())
    ck.check_settings("step-1", m, Config(ns_exponent=0.75).settled(1, 1))
    with pytest.raises(UserError, match="was written with --ns-exponent 0.75, this run has 0.5"):
        ck.check_settings("step-1", m, Config(ns_exponent=0.5).settled(1, 1))
    del m["config"]["ns_exponent"]
    ck.check_settings("step-1", m, Config().settled(1, 1))
    with pytest.raises(UserError, match="--ns-exponent 0.75, this run has 1.0"):
        ck.check_settings("step-1", m, Config(ns_exponent=1.0).settled(1, 1))
    m = dict(version=ck.VERSION, dim=100, config=Config(sg=False).settled(1, 1).to_dict())
    with pytest.raises(UserError, match="was written with --cbow-mean True, this run has False"):
        ck.check_settings("step-1", m, Config(sg=False, cbow_mean=0).settled(1, 1))
    del m["config"]["cbow_mean"]
    ck.check_settings("step-1", m, Config(sg=False).settled(1, 1))


def _tmpfs(path, size):
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs to fill up here: {done.stderr.strip()}")


@pytest.mark.parametrize("fault", ["full disk", "not a folder"])
def test_a_checkpoint_that_cannot_be_written_is_one_clear_error(corpus, tmp_path, fault):
    ck = tmp_path / "checkpoints"
    if fault == "full disk":
        # Room for one checkpoint (2 files of ~430 KB) but not two: the first is written, the second fails.
        _tmpfs(ck, "1200k")
    else:
        ck.write_text("a file where the checkpoints folder should be\n")  # root ignores chmod; this it cannot
    try:
        result = train(corpus, tmp_path, 2, "--checkpoint-every", "0.00001", ok=False)
        assert result.returncode == 2, result.output[-3000:]
        errors = [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]
        assert len(errors) == 1 and "cannot write checkpoint" in errors[0], result.output[-3000:]
        assert "Traceback" not in result.output
        if fault == "full disk":
            assert "No space left on device" in errors[0]
            assert os.listdir(ck) == ["step-000000005"], os.listdir(ck)  # the earlier one, and no .tmp folder
            assert sorted(os.listdir(ck / "step-000000005")) == ["manifest.json", "rows.00000.bin",
                                                                 "rows.00001.bin"]
        else:
            assert ck.read_text().startswith("a file where")
    finally:
        if fault == "full disk":
            subprocess.run(["umount", str(ck)])
