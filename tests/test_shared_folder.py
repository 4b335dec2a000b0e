"""Folders that the hosts see differently: one clear error, exit code 2, no hang, nothing saved before lost.

Two pretend hosts on this one machine, with Open MPI's MPMD syntax (``mpirun A : B``, through mpi/launch):
rank 0 runs as host nodeA (``unshare --uts``: its own hostname) and rank 1 as host nodeB, in its own mount
namespace too (``unshare --mount --uts``), where each folder in ``hide`` is an empty private tmpfs: a
node-local disk, which hides what rank 0 sees there and what rank 1 writes there from rank 0.
"""
import os
import re
import shlex
import shutil
import subprocess

import pytest

from conftest import launch
from hvd_w2v.synthetic import generate

TIMEOUT = 150  # each launch is killed after this long (conftest.launch) and the test fails with "hung"
SMALL = ["--epochs", "1", "--dim", "8", "--show", "", "--quiet"]
NFS = "--out must be on a filesystem every host sees (NFS)"
SAME = ("every host must see the corpus files at the same path, with the same contents (a filesystem every "
        "host sees, or the same copy on each)")


def _unavailable():
    if os.geteuid() != 0:
        return "needs root (mount namespaces and tmpfs mounts for the pretend hosts)"
    if shutil.which("unshare") is None:
        return "needs util-linux's unshare"
    done = subprocess.run(["unshare", "--mount", "--uts", "true"], capture_output=True, text=True)
    if done.returncode:
        return f"unshare --mount --uts fails here: {done.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))


def two_hosts(args, hide=(), then=""):
    """Run ``args`` as rank 0 on host nodeA and rank 1 on host nodeB, where every folder of ``hide`` is a
    node-local disk (an empty tmpfs); ``then``: shell commands rank 1 runs there before ``args``."""
    command = shlex.join(map(str, args))
    node_b = "".join(f"mount -t tmpfs none {shlex.quote(str(h))} && " for h in hide)
    return launch(1, ["unshare", "--uts", "sh", "-c", f"hostname nodeA && exec {command}",
                      ":", "-np", "1", "unshare", "--mount", "--uts", "sh", "-c",
                      f"hostname nodeB && {node_b}{then}exec {command}"], timeout=TIMEOUT)


def assert_one_line(result, expected):
    """Exit code 2, ``hvd-w2v: error: <expected>`` (a string, or a compiled pattern the message must match) as
    the only error line, no traceback, well within the launch's timeout."""
    assert not result.hung, f"hung: killed after {TIMEOUT} s\n{result.output[-3000:]}"
    assert result.returncode == 2, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1, result.output[-3000:]
    message = errors[0][len("hvd-w2v: error: "):]
    assert expected.fullmatch(message) if isinstance(expected, re.Pattern) else message == expected, errors[0]
    assert "Traceback" not in result.output and "MPI_ABORT" not in result.output, result.output[-3000:]
    assert result.seconds < TIMEOUT / 2, f"took {result.seconds:.0f} s"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "zipf.txt"
    generate(str(path), 5000, vocab=1000, seed=0)
    return path


@pytest.fixture
def out(tmp_path):
    """An output folder that holds an earlier result, which must survive."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "vectors.bin").write_bytes(b"an earlier model")
    return folder


def assert_kept(out):
    assert sorted(os.listdir(out)) == ["vectors.bin"], os.listdir(out)  # no probe, vocab.txt or .tmp left
    assert (out / "vectors.bin").read_bytes() == b"an earlier model"


@pytest.mark.parametrize("command", ["train", "vocab", "encode"])
def test_out_on_node_local_disks_is_one_clear_error(corpus, out, command):
    extra = SMALL if command == "train" else []
    result = two_hosts(["hvd-w2v", command, corpus, "--out", out, *extra], hide=[out])
    assert_one_line(result, f"output folder {out} is not shared: rank 1 (host nodeB) cannot see the files of "
                            f"rank 0 (host nodeA); {NFS}")
    assert_kept(out)


def test_export_to_node_local_disks_is_one_clear_error(corpus, tmp_path):
    run = tmp_path / "run"
    trained = launch(1, ["hvd-w2v", "train", corpus, "--out", run, "--format", "binary", *SMALL], timeout=TIMEOUT)
    assert trained.ok, trained.output[-3000:]
    exports = tmp_path / "exports"
    exports.mkdir()
    (exports / "vectors.bin").write_bytes(b"an earlier model")
    result = two_hosts(["hvd-w2v", "export", run, "--out", exports, "--format", "binary"], hide=[exports])
    assert_one_line(result, f"output folder {exports} is not shared: rank 1 (host nodeB) cannot see the files of "
                            f"rank 0 (host nodeA); {NFS}")
    assert_kept(exports)


def test_corpus_missing_on_one_host_is_one_clear_error(corpus, out):
    result = two_hosts(["hvd-w2v", "train", corpus, "--out", out, *SMALL], hide=[corpus.parent])
    assert_one_line(result, f"rank 1 (host nodeB): corpus file not found: {corpus}, but rank 0 (host nodeA) reads "
                            f"it; {SAME}")
    assert_kept(out)


def test_another_corpus_on_one_host_is_one_clear_error(corpus, out):
    # nodeB has a file of its own at the corpus's path: other text than rank 0's sizes cut.
    result = two_hosts(["hvd-w2v", "train", corpus, "--out", out, *SMALL], hide=[corpus.parent],
                       then=f"printf 'other text\\n' > {shlex.quote(str(corpus))} && ")
    assert_one_line(result, f"corpus file {corpus} holds {corpus.stat().st_size:,} bytes on rank 0 (host nodeA) "
                            f"but 11 on rank 1 (host nodeB); {SAME}")
    assert_kept(out)


# export.write_ordered itself, without the command line's start-up check: the sequence of collectives that
# hung when rank 1 could not open the file rank 0 had made (rank 1 went to the final agreement, an allgather,
# while rank 0 waited in the blocks' allreduce), and the one where a write fails in the middle of the blocks.
WRITER = """
import os, resource, sys
import numpy as np
from mpi4py import MPI
from hvd_w2v.store import export
from hvd_w2v.common.errors import UserError
from hvd_w2v.parallel.comm import Comm
from hvd_w2v.parallel.shard import RowPlan

comm = Comm(MPI.COMM_WORLD)  # mpi4py alone: write_ordered uses no Horovod
if sys.argv[2:] == ["--limit"] and comm.rank == 1:
    # Files of 64 KiB at most for rank 1 (Python ignores SIGXFSZ): its lines past that offset fail with
    # EFBIG, from the first block on, while rank 0's succeed.
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
plan = RowPlan(50000, comm.size)  # 25,000 rows per rank: several blocks of export.BLOCK_ROWS
ids = plan.ids(comm.rank)
try:
    export.write_vocab(comm, sys.argv[1], plan, [b"word%d" % i for i in ids], 50000 - ids)
except UserError as e:
    if comm.rank == 0:
        print(f"hvd-w2v: error: {e}", flush=True)
    sys.exit(2)
print("written", flush=True)
"""


@pytest.mark.parametrize("fault", ["node-local folder", "write fails in the blocks"])
def test_write_ordered_cannot_hang(tmp_path, out, fault):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    vocab = out / "vectors.bin"  # a file already there: a failed write leaves it as it was
    if fault == "node-local folder":
        result = two_hosts(["python", script, vocab], hide=[out])
        reason = "No such file or directory"
    else:
        result = two_hosts(["python", script, vocab, "--limit"])
        reason = "File too large"
    assert_one_line(result, f"cannot write {vocab} on rank 1 (host nodeB): {reason}")
    assert_kept(out)


# encode.encode itself: every round of its lookups is collective; a shard write that fails on one rank
# (RLIMIT_FSIZE again, set after MPI has made its shared memory) ends every rank at the next round.
ENCODER = """
import resource, sys
from mpi4py import MPI
from hvd_w2v.text import encode, vocab
from hvd_w2v.common.config import Config
from hvd_w2v.common.errors import UserError
from hvd_w2v.parallel.comm import Comm

comm = Comm(MPI.COMM_WORLD)  # mpi4py alone: vocab.build and encode.encode use no Horovod
voc = vocab.build(comm, [sys.argv[1]], Config())
if comm.rank == 1:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 12, 1 << 12))  # a shard of 4 KiB at most
try:
    encode.encode(comm, [sys.argv[1]], voc, sys.argv[2])
except UserError as e:
    if comm.rank == 0:
        print(f"hvd-w2v: error: {e}", flush=True)
    sys.exit(2)
print("encoded", flush=True)
"""


def test_encode_cannot_hang_on_a_failed_write(tmp_path, corpus):
    script = tmp_path / "encoder.py"
    script.write_text(ENCODER)
    ids = tmp_path / "ids"
    ids.mkdir()
    earlier = {name: f"an earlier run's {name}".encode() for name in ("ids.00000.i32", "ids.00001.i32",
                                                                       "stream.json")}
    for name, data in earlier.items():
        (ids / name).write_bytes(data)
    result = two_hosts(["python", script, corpus, ids])
    # The OS's reason (encode.write_array writes through the file), as write_ordered's test above.
    assert_one_line(result, f"cannot write {ids / 'ids.00001.i32.tmp'} on rank 1 (host nodeB): File too large")
    assert {p.name: p.read_bytes() for p in ids.iterdir()} == earlier  # no shard replaced, no .tmp left
