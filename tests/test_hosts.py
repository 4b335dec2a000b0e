"""Several hosts for real: hvd-w2v on pretend hosts of this machine (tests/pretend_hosts.py), over TCP on loopback.

Hosts of the sandbox (one per module):
- nodeA, nodeB: full hosts, the checkout, its environment and the corpus seen as on a shared filesystem,
  and a folder ``disk`` that is each host's own (a node-local disk);
- nodeC: no environment (the virtual environment's folder is empty there);
- nodeD: no corpus (the corpus's folder is empty there).

What is shown: the ranks' hosts, thread budgets and TCP connections (`hvd-w2v check`); the same vectors on
1 host x 2 ranks, 2 hosts x 1 rank and 2 hosts x 2 ranks (the exactness contract); variables and the user's
transport choice reaching every host; one clear message and a non-zero exit for every bad set-up; a host that
dies mid-run, and the run resumed on the host that is left; the compiled helpers built by two hosts at once.
Every launch is bounded (``PretendHosts.run``), and the whole sandbox ends with the module.
"""
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from bounded import kill_group
from conftest import ROOT
from hvd_w2v.synthetic import generate
from pretend_hosts import PretendHosts, unavailable
from slurm_cluster import SlurmCluster
from slurm_cluster import unavailable as slurm_unavailable
from test_slurm import interrupt_and_resume, submit, vectors

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

# Tiny and quick, as tests/test_slurm.py's: 100,000 tokens, 1,875 words of 16 dimensions, 1,040 global steps;
# the exact step, which several hosts run only when told (OPTIONS[2:] leaves the mode to the layout).
OPTIONS = ["--shards", "0", "--epochs", "20", "--dim", "16", "--show", "", "--quiet", "--checkpoint-every", "0",
           "--format", "binary"]
ATOL = 1e-5  # float32 summation order (README, "Same result on any rank count")
LAUNCH_TIMEOUT = 150
# The pretend hosts share this machine's cores, and each host's ranks take all of them as threads: 2 hosts x
# 1 rank x 2 threads put 4 threads on 2 cores. OpenMP's threads spin while they wait at a barrier, by default
# for a while, on the cores the other host's threads need, which made such runs many times slower.
# Passive waiting sleeps at once instead. (Real hosts have cores of their own: the product leaves the default.)
SHARED_CORES = {"OMP_WAIT_POLICY": "passive"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("hosts-corpus") / "zipf.txt"
    generate(str(path), 100000, vocab=2000, seed=0)
    return path


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    """A folder that nodeA and nodeB each have their own of (an empty tmpfs on each)."""
    return tmp_path_factory.mktemp("hosts-local") / "disk"


@pytest.fixture(scope="module")
def hosts(corpus, disk):
    local = {"nodeA": [disk], "nodeB": [disk], "nodeC": [sys.prefix], "nodeD": [corpus.parent]}
    with PretendHosts(["nodeA", "nodeB", "nodeC", "nodeD"], local=local) as h:
        yield h


# Open MPI's rsh launcher warns when the ssh it forked has exec'd before the parent set the child's process
# group (EACCES: a race, more likely on a loaded machine, and harmless): a line of no command's output.
SETPGID_RACE = re.compile(r"^\[[^\]\n]*\] plm:rsh: Warning: setpgid\(.*\n?", re.M)


def launch(hosts, n, slots, args, timeout=LAUNCH_TIMEOUT, env=None, extra=()):
    """``mpi/launch -n n --hostfile`` (``slots``: {host: slots}; None: no hostfile) ``args`` from nodeA (n None:
    no -n, mpi/launch's default); a Result, its output without SETPGID_RACE's lines."""
    where = []
    if slots is not None:
        where = ["--hostfile", hosts.hostfile(os.path.join(hosts.folder, f"hostfile-{time.monotonic_ns()}"), slots)]
    r = hosts.run("nodeA", [ROOT / "mpi" / "launch", *([] if n is None else ["-n", n]), *where, *extra, *args],
                  timeout=timeout, env=dict(env or {}, PYTHONUNBUFFERED="1"))
    r.output = SETPGID_RACE.sub("", r.output)
    return r


def ranks_seen(output):
    """`hvd-w2v check`'s rank lines: {rank: (host, threads, [TCP peers])}."""
    seen = {}
    for r, host, threads, peers in re.findall(r"^rank (\d+): host (\S+), (\d+) threads?, TCP with ranks (.*)$",
                                              output, re.M):
        seen[int(r)] = (host, int(threads), [] if peers == "none" else [int(p) for p in peers.split(", ")])
    return seen


def test_check_names_hosts_threads_and_tcp(hosts):
    # 2 hosts x 2 ranks: shared memory inside a host, TCP between; each host's 2 cores shared by its 2 ranks.
    r = launch(hosts, 4, {"nodeA": 2, "nodeB": 2}, ["hvd-w2v", "check"])
    print(r.output)
    assert r.returncode == 0 and "stack check: OK" in r.output, r.output
    assert ranks_seen(r.output) == {0: ("nodeA", 1, [2, 3]), 1: ("nodeA", 1, [2, 3]),
                                    2: ("nodeB", 1, [0, 1]), 3: ("nodeB", 1, [0, 1])}, r.output
    # 2 hosts x 1 rank: each rank has its host's 2 cores.
    r = launch(hosts, 2, {"nodeA": 1, "nodeB": 1}, ["hvd-w2v", "check"])
    assert ranks_seen(r.output) == {0: ("nodeA", 2, [1]), 1: ("nodeB", 2, [0])}, r.output
    # mpirun fills hosts by slot: -n 2 over 2 + 2 slots puts both ranks on nodeA, 1 thread each on its 2 cores
    # (the thread budget used to count hostfile lines: 2 threads each, 4 threads on 2 cores).
    r = launch(hosts, 2, {"nodeA": 2, "nodeB": 2}, ["hvd-w2v", "check"])
    assert ranks_seen(r.output) == {0: ("nodeA", 1, []), 1: ("nodeA", 1, [])}, r.output
    # No -n: one rank per host listed, each with all its host's cores, whatever the slots; without a
    # hostfile, one rank on this host.
    r = launch(hosts, None, {"nodeA": 2, "nodeB": 2}, ["hvd-w2v", "check"])
    assert ranks_seen(r.output) == {0: ("nodeA", 2, [1]), 1: ("nodeB", 2, [0])}, r.output
    r = launch(hosts, None, None, ["hvd-w2v", "check"])
    assert ranks_seen(r.output) == {0: ("nodeA", 2, [])}, r.output


@pytest.fixture(scope="module")
def reference(hosts, corpus, tmp_path_factory):
    """1 host x 2 ranks (nodeA, shared memory only): the vectors every layout must give."""
    out = tmp_path_factory.mktemp("hosts-ref") / "out"
    r = launch(hosts, 2, {"nodeA": 2}, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS])
    assert r.returncode == 0, r.output
    assert "layout: 2 ranks on 1 host (nodeA: 0-1), 1 thread each" in r.output, r.output
    return vectors(out)


def max_diff(a, b):
    assert a.keys() == b.keys()
    return max(np.abs(a[w] - b[w]).max() for w in a)


@pytest.mark.parametrize("slots, layout", [
    ({"nodeA": 1, "nodeB": 1}, "2 ranks on 2 hosts (nodeA: 0; nodeB: 1), 2 threads each"),
    ({"nodeA": 2, "nodeB": 2}, "4 ranks on 2 hosts (nodeA: 0-1; nodeB: 2-3), 1 thread each"),
], ids=["2x1", "2x2"])
def test_same_vectors_on_several_hosts(hosts, corpus, reference, tmp_path, slots, layout):
    out = tmp_path / "out"
    r = launch(hosts, sum(slots.values()), slots, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS],
               env=SHARED_CORES)
    assert r.returncode == 0, r.output
    assert f"layout: {layout}" in r.output, r.output
    diff = max_diff(vectors(out), reference)
    print(f"{layout}: largest difference from 1 host x 2 ranks {diff:.2e}")
    assert diff < ATOL


def test_two_hosts_choose_shard_local_sgd_whose_vectors_one_host_gives_with_the_same_shards(hosts, corpus, tmp_path):
    """Without --shards, 2 hosts x 2 ranks of 1 thread choose shard-local SGD, a shard a thread (Config.settled),
    and its super-step from the corpus's size (Config.sized): 1 host x 1 rank of 2 threads told the same shards and
    merge chooses the same super-step and gives the same vectors up to float32 summation order, where the deltas
    crossed hosts over TCP."""
    told = ["--shards", "4", "--merge-clip", "1", "--wire", "float32"]  # the merge clipped; float32 on the wire
    got, sized = {}, {}
    for name, n, slots, mode in [("1x1", 1, {"nodeA": 1}, told), ("2x2", 4, {"nodeA": 2, "nodeB": 2}, [])]:
        out = tmp_path / name
        r = launch(hosts, n, slots, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS[2:], "--epochs", "2", *mode],
                   env=SHARED_CORES)
        assert r.returncode == 0, r.output
        assert ("mode: shard-local SGD (a shard for each of the 4 threads on 2 hosts): " + " ".join(told) + " ("
                in r.output) == (not mode), r.output
        sized[name] = re.search(r"super-step: --superstep (\d+) positions a shard, ([\d,]+) super-steps an epoch",
                                r.output).groups()
        got[name] = vectors(out)
    assert sized["1x1"] == sized["2x2"] and int(sized["1x1"][1].replace(",", "")) >= 233, sized
    diff = max_diff(got["2x2"], got["1x1"])
    print(f"4 shards chosen on 2 hosts x 2 ranks: largest difference from 1 host x 1 rank {diff:.2e}")
    assert diff < ATOL


def test_variables_and_the_users_transport_reach_every_host(hosts):
    env = {"HVD_W2V_KERNEL": "python", "HOROVOD_FUSION_THRESHOLD": "1048576", "MY_SETTING": "42"}
    show = ["sh", "-c", 'echo "$(hostname) $HVD_W2V_KERNEL $HOROVOD_FUSION_THRESHOLD ${MY_SETTING:-unset}"']
    r = launch(hosts, 2, {"nodeA": 1, "nodeB": 1}, show, env=env, extra=["-x", "MY_SETTING"])
    assert r.returncode == 0, r.output
    assert sorted(r.output.split("\n")[:2]) == ["nodeA python 1048576 42", "nodeB python 1048576 42"], r.output
    # A user's OMPI_MCA_btl wins over mpi/launch's: without tcp, ranks on two hosts cannot reach each other.
    r = launch(hosts, 2, {"nodeA": 1, "nodeB": 1}, ["hvd-w2v", "check"], timeout=60,
               env={"OMPI_MCA_btl": "self,vader"})
    assert r.returncode not in (0, None) and "unable to reach each other" in r.output, r.output


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_a_bad_hostfile_says_so(hosts, tmp_path, case):
    hostfile = tmp_path / "hosts.txt"
    if case == "empty":
        hostfile.write_text("# no hosts yet\n\n")
    r = hosts.run("nodeA", [ROOT / "mpi" / "launch", "-n", 2, "--hostfile", hostfile, "hvd-w2v", "check"],
                  timeout=30)
    assert r.returncode == 2, r.output
    want = "is not a readable file" if case == "missing" else "lists no hosts"
    assert r.output.strip() == f"mpi/launch: hostfile {hostfile} {want}" + (
        " (one line per host, e.g. 'node1 slots=8')" if case == "empty" else ""), r.output


def test_more_ranks_than_slots_needs_oversubscribe(hosts):
    r = launch(hosts, 3, {"nodeA": 1, "nodeB": 1}, ["hostname"], timeout=30)
    assert r.returncode not in (0, None) and "There are not enough slots available" in r.output, r.output
    r = launch(hosts, 3, {"nodeA": 1, "nodeB": 1}, ["hostname"], timeout=30, extra=["--oversubscribe"])
    assert r.returncode == 0 and sorted(r.output.split()) == ["nodeA", "nodeA", "nodeB"], r.output


def test_a_host_without_the_environment(hosts, corpus, tmp_path):
    r = launch(hosts, 2, {"nodeA": 1, "nodeC": 1}, ["hvd-w2v", "train", corpus, "--out", tmp_path / "out",
                                                    *OPTIONS], timeout=60)
    assert r.returncode == 127, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert lines == ["mpi/launch: host nodeC: 'hvd-w2v' not found on PATH: run mpi/setup on that host, or put "
                     "the checkout and its environment on a filesystem every host sees"], r.output


def test_a_host_that_dies_ends_the_job_and_the_run_resumes_on_the_host_left(hosts, corpus, reference, tmp_path):
    out = tmp_path / "out"
    hostfile = hosts.hostfile(tmp_path / "hostfile", {"nodeA": 1, "nodeB": 1})
    # Checkpoints every 0.6 s of rank 0's clock, so that one exists when nodeB goes.
    proc = hosts.popen("nodeA", [ROOT / "mpi" / "launch", "-n", 2, "--hostfile", hostfile, "hvd-w2v", "train",
                                 corpus, "--out", out, *OPTIONS[:-4], "--checkpoint-every", "0.01"],
                       env={"PYTHONUNBUFFERED": "1"}, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines, killed = [], None
    bound = threading.Timer(LAUNCH_TIMEOUT, kill_group, [proc])  # a hung job is killed whole, ending the loop
    bound.start()
    try:
        for raw in proc.stdout:
            lines.append(raw.decode("utf-8", "replace"))
            if killed is None and lines[-1].startswith("checkpoint: "):
                pids = hosts.kill_host("nodeB")  # its daemon and its rank: all its processes, at once
                killed = time.monotonic()
        proc.wait(30)
    finally:
        bound.cancel()
    output = "".join(lines)
    print(output)
    assert killed and pids, output
    ended = time.monotonic() - killed
    print(f"nodeB killed ({len(pids)} processes): the job ended {ended:.1f} s later with exit {proc.returncode}")
    assert proc.returncode not in (0, None) and ended < 60, output
    lost = [line for line in output.splitlines() if "nodeB" in line]
    assert lost, output
    assert not (out / "vectors.bin").exists()
    # The newest good checkpoint goes on on the host that is left, 2 ranks there, to the uninterrupted vectors.
    r = launch(hosts, 2, {"nodeA": 2}, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, "--resume"])
    assert r.returncode == 0 and re.search(r"^resume: step [\d,]+ of [\d,]+ from .* \(written on 2 ranks\)",
                                           r.output, re.M), r.output
    assert max_diff(vectors(out), reference) < ATOL


@pytest.fixture(scope="module")
def slurm(hosts):
    """A Slurm of two nodes, nodeA and nodeB, in the hosts' sandbox (tests/slurm_cluster.py)."""
    why = slurm_unavailable()
    if why:
        pytest.skip(why)
    with SlurmCluster(hosts=hosts, nodes=["nodeA", "nodeB"]) as c:
        yield c


@pytest.mark.parametrize("launcher, shape, ranks, where", [
    ("srun", (), 2, "(nodeA: 0; nodeB: 1)"),
    ("mpirun", ("-N", "2", "--ntasks-per-node=2"), 4, "(nodeA: 0-1; nodeB: 2-3)"),
], ids=["srun-2x1-template", "mpirun-2x2"])
def test_multi_node_job_preempted_resumes_to_the_same_vectors(slurm, corpus, reference, tmp_path, launcher,
                                                                shape, ranks, where):
    """slurm/multi-node.sbatch on 2 nodes, SIGUSR1 mid-training: checkpoint, requeue, --resume, COMPLETED with
    the vectors of 1 host x 2 ranks. srun: the template's shape, one rank per node on all its CPUs; mpirun: 2
    ranks per node without -c, so slurm/run-train shares each node's CPUs between them. With srun, the ranks'
    exits 75 reach srun one after the other and --kill-on-bad-exit ends the later ones: they must still exit 75
    (they used to die of its SIGTERM, 143, and the job was not requeued)."""
    out = tmp_path / "out"
    job_id, log = submit(slurm, out, corpus, template=ROOT / "slurm" / "multi-node.sbatch", shape=shape,
                         options=OPTIONS, env={"LAUNCH": launcher, **SHARED_CORES})
    threads = max(slurm.cpus // (ranks // 2), 1)  # a node's CPUs over its ranks there
    output = interrupt_and_resume(slurm, job_id, log, out, ranks, reference)
    each = f"{threads} thread" + "s" * (threads > 1)
    assert f"run 1 on nodeA,nodeB: {ranks} ranks x {each}; {launcher} " in output, output
    assert output.count(f"layout: {ranks} ranks on 2 hosts {where}, {each} each") == 2, output  # both runs


def test_out_on_node_local_disks(hosts, corpus, disk):
    """--out in a folder each host has its own of: one line naming both hosts, before anything is written.
    (It used to hang for ever: rank 1 failed to open vocab.txt.tmp, which rank 0 had made on its own disk.)"""
    r = launch(hosts, 2, {"nodeA": 1, "nodeB": 1}, ["hvd-w2v", "train", corpus, "--out", disk / "out", *OPTIONS],
               timeout=90)
    assert r.returncode == 2 and not r.hung, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert errors == [f"hvd-w2v: error: output folder {disk / 'out'} is not shared: rank 1 (host nodeB) cannot "
                      f"see the files of rank 0 (host nodeA); --out must be on a filesystem every host sees "
                      f"(NFS)"], r.output


# The run folder's lock (hvd_w2v/store/runlock.py) as a job holds it, in a process of one host, and its takeover.
HOLD = """import sys, time
from hvd_w2v.store import runlock
lock = runlock.acquire(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""
PROBE = """import sys
from hvd_w2v.store import runlock
from hvd_w2v.common.errors import UserError
try:
    runlock.acquire(sys.argv[1], print, wait=0).release()
    print("acquired")
except UserError as e:
    print(f"refused: {e}")
"""


def test_one_job_per_run_folder_across_hosts(hosts, corpus, tmp_path):
    """A lock held on nodeA refuses a job on nodeB (one launch), naming nodeA; once its holder is killed, its
    pid proves nothing on nodeB (refused still), nodeA itself takes it over (no such process there), and a
    heartbeat older than the limit lets nodeB take it over."""
    import json

    from hvd_w2v.store import runlock

    out = tmp_path / "out"
    holder = hosts.popen("nodeA", [sys.executable, "-c", HOLD, out], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        assert holder.stdout.readline() == b"held\n"
        held = json.loads((out / runlock.NAME).read_text())
        assert held["host"] == "nodeA"
        r = hosts.run("nodeB", [ROOT / "mpi" / "launch", "-n", 1, "hvd-w2v", "train", corpus, "--out", out,
                                *OPTIONS], timeout=90, env={"PYTHONUNBUFFERED": "1"})
        errors = [line for line in r.output.splitlines() if line.startswith("hvd-w2v: error:")]
        assert r.returncode == 2 and len(errors) == 1, r.output
        assert f"{out} is in use by another job (host nodeA, pid {held['pid']}, started" in errors[0], r.output
        assert sorted(os.listdir(out)) == [runlock.NAME], "the refused job wrote into the folder"
    finally:
        kill_group(holder)
    probe = lambda host: hosts.run(host, [sys.executable, "-c", PROBE, out], timeout=30).output  # noqa: E731
    assert probe("nodeB").startswith(f"refused: {out} is in use by another job (host nodeA, pid {held['pid']}")
    deadline = time.monotonic() + 20  # the holder, killed from outside the sandbox, is reaped there soon after
    while (said := probe("nodeA")).startswith("refused") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert f"no process {held['pid']} on this host" in said and said.endswith("acquired\n"), said
    (out / runlock.NAME).write_text(json.dumps(dict(held, heartbeat=time.time() - runlock.STALE_SECONDS - 10)))
    said = probe("nodeB")
    assert re.search(r"took over .* from host nodeA, .*: its heartbeat is \d+ s old", said) and \
        said.endswith("acquired\n"), said


def test_a_host_without_the_corpus(hosts, corpus, tmp_path):
    r = launch(hosts, 2, {"nodeA": 1, "nodeD": 1}, ["hvd-w2v", "train", corpus, "--out", tmp_path / "out",
                                                    *OPTIONS], timeout=90)
    assert r.returncode == 2 and not r.hung, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"hvd-w2v: error: rank 1 (host nodeD): corpus file not "
                                                     f"found: {corpus}, but rank 0 (host nodeA) reads it"), r.output
    assert not (tmp_path / "out" / "vocab.txt").exists()


def test_a_timeout_says_so(hosts):
    r = hosts.run("nodeA", [ROOT / "mpi" / "launch", "-n", 2, "--timeout", 2, "sleep", 30], timeout=30)
    assert r.returncode not in (0, None) and "The user-provided time limit for job execution has been reached" \
        in r.output, r.output
