"""The compiled row copies (native.py, rows_kernel.cc) against numpy, the checks that guard them, and the
cache of built libraries shared by several hosts."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from hvd_w2v.kernels import native


@pytest.fixture(params=["compiled", "numpy"])
def mode(request, monkeypatch):
    if request.param == "compiled" and native.row_copies() is None:
        pytest.skip(f"the row copies cannot be built here: {native._LIBS['rows_kernel']}")
    if request.param == "numpy":
        monkeypatch.setattr(native, "row_copies", lambda: None)
    return request.param


def blocks(seed=0, n=50, d=7, k=20):
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(n, d)).astype(np.float32)
    rows = rng.permutation(n)[:k].astype(np.int64)  # unique, unsorted
    return table, rows, rng.normal(size=(k, d)).astype(np.float32)


def test_take_rows_equals_fancy_indexing(mode):
    table, rows, _ = blocks()
    out = np.empty((len(rows), table.shape[1]), np.float32)
    native.take_rows(table, rows, out)
    assert np.array_equal(out, table[rows])


@pytest.mark.parametrize("scaled", [False, True])
def test_add_rows_equals_fancy_add(mode, scaled):
    table, rows, updates = blocks(1)
    scale = np.linspace(0.1, 1, len(rows)).astype(np.float32) if scaled else None
    expected = table.copy()
    expected[rows] += updates if scale is None else scale[:, None] * updates
    native.add_rows(table, rows, updates, scale)
    # A compiled loop may fuse the multiply and add (one rounding instead of two).
    np.testing.assert_allclose(table, expected, rtol=1e-6, atol=1e-7)


def test_bad_rows_are_refused_before_any_copy():
    if native.row_copies() is None:
        pytest.skip(f"the row copies cannot be built here: {native._LIBS['rows_kernel']}")
    table, rows, updates = blocks(2)
    before = table.copy()
    out = np.zeros_like(updates)
    for bad in (np.append(rows[:-1], len(table)), np.append(rows[:-1], -1)):
        with pytest.raises(IndexError):
            native.add_rows(table, bad, updates)
        with pytest.raises(IndexError):
            native.take_rows(table, bad, out, 2)
    assert not out.any()  # the check comes before the first copy
    with pytest.raises(ValueError):
        native.add_rows(table, rows.astype(np.int32), updates)
    with pytest.raises(ValueError):
        native.take_rows(table, rows, np.empty((len(rows), 3), np.float32))
    assert np.array_equal(table, before)


def test_add_sources_caps_by_the_count_summed_over_sources(mode):
    """Rows shared by two sources: each source's update is scaled by the cap over the rows' summed count."""
    table, rows, _ = blocks(3)
    rng = np.random.default_rng(3)
    first, second = rows[:12], rows[6:]  # rows[6:12] come from both sources
    sources = [rng.normal(size=(len(first), table.shape[1])).astype(np.float32),
               rng.normal(size=(len(second), table.shape[1])).astype(np.float32)]
    sgd = rng.integers(1, 40, len(first) + len(second)).astype(np.float32)
    keys = np.concatenate((first, second))
    total = np.zeros(len(table), np.float32)
    expected = table.copy().astype(np.float64)
    summed = np.zeros(len(table))
    np.add.at(summed, keys, sgd)
    for block, these in zip(sources, (first, second)):
        expected[these] += np.minimum(1, 50 / summed[these])[:, None] * block
    native.add_sources(table, keys, sources, sgd, 50.0, total)
    np.testing.assert_allclose(table, expected, rtol=1e-5, atol=1e-6)
    assert not total.any()  # the scratch is left zeros


@pytest.mark.parametrize("sources", [1, 3])
def test_add_sources_is_the_same_on_any_thread_count(mode, sources):
    """Enough rows that the threads engage: one source (a rank alone: each thread a range of its entries) and
    three that share rows (each thread the owner of blocks of rows). The same table, byte for byte, on 1, 2 and
    3 threads, and the capped add's; the scratch left zeros."""
    rng = np.random.default_rng(5)
    table = rng.normal(size=(5000, 9)).astype(np.float32)
    per = [rng.permutation(len(table))[:1500].astype(np.int64) for _ in range(sources)]  # unique in each source
    blocks_in = [rng.normal(size=(len(r), table.shape[1])).astype(np.float32) for r in per]
    keys = np.concatenate(per)
    sgd = rng.integers(0, 200, len(keys)).astype(np.float32)
    summed = np.zeros(len(table), np.float32)
    np.add.at(summed, keys, sgd)
    expected = table.copy()
    for block, these in zip(blocks_in, per):
        expected[these] += np.minimum(np.float32(1), np.float32(64) / np.maximum(summed[these], 1))[:, None] * block
    got = []
    for threads in (1, 2, 3):
        out, total = table.copy(), np.zeros(len(table), np.float32)
        native.add_sources(out, keys, blocks_in, sgd, 64.0, total, threads)
        assert not total.any()
        got.append(out)
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-6)
    assert all(np.array_equal(got[0], g) for g in got[1:])


@pytest.mark.parametrize("sources", [1, 3])
def test_merge_sources_sums_the_sources_then_caps_and_clips_each_row(mode, sources):
    """The clipped merge (localsgd.ClippedMerge): each row's blocks summed over the sources, scaled by the cap
    over its summed count, then down to the clip's L2 norm, and added once; rows under the clip keep their
    capped sum. Compiled: the same bytes on 1, 2 and 3 threads."""
    rng = np.random.default_rng(7)
    table = rng.normal(size=(3000, 9)).astype(np.float32)
    per = [rng.permutation(len(table))[:1200].astype(np.int64) for _ in range(sources)]
    blocks_in = [rng.normal(scale=0.3, size=(len(r), table.shape[1])).astype(np.float32) for r in per]
    keys = np.concatenate(per)
    sgd = rng.integers(1, 6, len(keys)).astype(np.float32)
    merged, summed = np.zeros(table.shape), np.zeros(len(table))
    for block, these, counts in zip(blocks_in, per, np.split(sgd, sources)):
        merged[these] += block
        summed[these] += counts
    scaled = merged * np.minimum(1, 4 / np.maximum(summed, 1))[:, None]
    norms = np.linalg.norm(scaled, axis=1)
    assert (norms > 1.5).any() and ((norms > 0) & (norms < 1.5)).any()  # both sides of the clip
    expected = table + scaled * np.minimum(1, 1.5 / np.maximum(norms, 1e-30))[:, None]
    got = []
    for threads in ((1, 2, 3) if mode == "compiled" else (1,)):
        out = table.copy()
        native.merge_sources(out, keys, blocks_in, sgd, 4.0, 1.5, threads)
        got.append(out)
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-5)
    assert all(np.array_equal(got[0], g) for g in got[1:])
    with pytest.raises(ValueError):
        native.merge_sources(table, keys, [b[:, :3] for b in blocks_in], sgd, 4.0, 1.5)
    if mode == "compiled":
        before = table.copy()
        with pytest.raises(IndexError):
            native.merge_sources(table, np.append(keys[:-1], len(table)), blocks_in, sgd, 4.0, 1.5)
        assert np.array_equal(table, before)


def test_blocks_as_received_add_as_a_list_does(mode):
    """native.Blocks, the exchange's form (every source's rows end to end in the received buffer, a rank's own
    block elsewhere and its place in the buffer left unused): both owners' adds give the bytes of the list."""
    rng = np.random.default_rng(11)
    table = rng.normal(size=(2000, 5)).astype(np.float32)
    per = [rng.permutation(len(table))[:n].astype(np.int64) for n in (300, 0, 500, 400)]
    listed = [rng.normal(size=(len(r), 5)).astype(np.float32) for r in per]
    keys, sgd = np.concatenate(per), rng.integers(1, 9, sum(map(len, per))).astype(np.float32)
    buffer = np.concatenate(listed)
    buffer[300:800] = np.nan  # source 2's place: its block is ``mine``
    received = native.Blocks(buffer, [len(r) for r in per], 2, listed[2].copy())
    for add in (lambda t, b: native.add_sources(t, keys, b, sgd, 3.0, np.zeros(len(t), np.float32), 2),
                lambda t, b: native.merge_sources(t, keys, b, sgd, 3.0, 0.5, 2)):
        a, b = table.copy(), table.copy()
        add(a, listed)
        add(b, received)
        assert np.array_equal(a, b) and not np.isnan(a).any()


def test_add_sources_refuses_bad_rows_before_any_change():
    if native.row_copies() is None:
        pytest.skip(f"the row copies cannot be built here: {native._LIBS['rows_kernel']}")
    table, rows, updates = blocks(4)
    before, total = table.copy(), np.zeros(len(table), np.float32)
    sgd = np.ones(len(rows), np.float32)
    for bad in (np.append(rows[:-1], len(table)), np.append(rows[:-1], -1)):
        with pytest.raises(IndexError):
            native.add_sources(table, bad, [updates[:5], updates[5:]], sgd, 64.0, total)
    with pytest.raises(ValueError):
        native.add_sources(table, rows, [updates[:, :3]], sgd, 64.0, total)
    assert np.array_equal(table, before) and not total.any()


def test_the_compiled_copies_give_the_same_bytes_on_any_thread_count():
    """take_rows, add_rows and add_sources on 1, 2 and 3 threads (enough rows that the threads engage): the
    same bytes, as each row is still copied, or added source by source, by one thread."""
    if native.row_copies() is None:
        pytest.skip(f"the row copies cannot be built here: {native._LIBS['rows_kernel']}")
    rng = np.random.default_rng(5)
    table = rng.normal(size=(4000, 13)).astype(np.float32)
    rows = rng.permutation(len(table))[:1500].astype(np.int64)
    updates = rng.normal(size=(len(rows), 13)).astype(np.float32)
    sources = [rng.permutation(rows)[:700] for _ in range(3)]  # unique within a source, shared across them
    blocks = [rng.normal(size=(700, 13)).astype(np.float32) for _ in sources]
    sgd = rng.integers(1, 90, 2100).astype(np.float32)
    results = []
    for threads in (1, 2, 3):
        taken, added, total = np.empty_like(updates), table.copy(), np.zeros(len(table), np.float32)
        native.take_rows(table, rows, taken, threads)
        native.add_rows(added, rows, updates, np.linspace(0.1, 1, len(rows)).astype(np.float32), threads)
        native.add_sources(added, np.concatenate(sources), blocks, sgd, 50.0, total, threads)
        assert not total.any()
        results.append((taken, added))
    for taken, added in results[1:]:
        assert np.array_equal(taken, results[0][0]) and np.array_equal(added, results[0][1])


# Two hosts building into one cache folder on a shared filesystem whose locks are local to each host (NFS
# mounted without a lock manager: flock succeeds on every host at once). Each builder is a process with its
# own host name and PID namespace, so both have PID 1, as processes of two hosts may have the same PID.
BUILDER = """
import ctypes, fcntl, socket, sys
fcntl.flock = lambda *args: None  # the lock protects nothing across hosts
from hvd_w2v.kernels import native
path = native.build("rows_kernel")
ctypes.CDLL(path)  # a whole library, not a mix of two builds
print(socket.gethostname(), path)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_two_hosts_building_at_once_leave_one_good_library(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, HVD_W2V_CACHE=str(cache), HVD_W2V_KERNEL="native")
    procs = [subprocess.Popen(["unshare", "--uts", "--pid", "--fork", "sh", "-c",
                               f'hostname {host} && exec "$0" -c "$1"', sys.executable, BUILDER],
                              env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for host in ("nodeA", "nodeB")]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    paths = {line.split()[1] for line in outputs}
    assert len(paths) == 1, outputs
    assert sorted(os.listdir(cache)) == sorted([".lock", os.path.basename(paths.pop())])  # no temporary left
