"""Shard-local SGD (--shards): the compiled super-step against its numpy reference, the same bytes on any
thread count, and the same vectors on every layout that hosts the same shards (real ranks)."""
import json
import signal

import numpy as np
import pytest

from conftest import launch
from hvd_w2v.kernels import native
from hvd_w2v.parallel.shard import RowPlan
from hvd_w2v.synthetic import generate
from hvd_w2v.training import batches, localsgd
from test_train import load

# A shard's float32 dot products and sigmoids are summed in another order by the kernel (SIMD) than by numpy,
# and the drift carries through the shard's later updates; a wrong row or order moves values by 1e-2 or more.
KERNEL_ATOL = 2e-5
# Between layouts, only the owners' order of adding the ranks' summed deltas differs (see test_train.ATOL).
ATOL = 1e-5


def problem(seed, sg, shards=3, n=40, d=16, w=4, k=3, rows=60):
    """A super-step's snapshot and examples: ``rows`` table rows (the last "none"), ``n`` centres cut into
    ``shards`` shards; even rows are W_in (contexts), odd W_out (targets), as keys are."""
    g = np.random.default_rng(seed)
    table = g.normal(0, 0.3, (rows, d)).astype(np.float32)
    table[-1] = 0
    none = rows - 1
    ctx = (2 * g.integers(0, none // 2, (n, w))).astype(np.int32)
    ctx[g.random((n, w)) < 0.3] = none
    ctx[:, 0] = 2 * g.integers(0, none // 2, n)  # every centre has a context word
    tgt = (2 * g.integers(0, none // 2, (n, 1 + k)) + 1).astype(np.int32)
    tgt[::7, 2] = tgt[::7, 0]  # a noise word equal to its centre: skipped
    bounds = np.sort(g.integers(0, n + 1, shards - 1))
    return table, ctx, tgt, np.concatenate(([0], bounds, [n])).astype(np.int64)


# The kernel numbers a shard's rows in row order when the shard names many of the table's rows, else in the
# order it names them: 60 rows take the first way for every shard, 2,000 the second, 200 both (uneven shards).
@pytest.mark.parametrize("table", [60, 200, 2000])
@pytest.mark.parametrize("sg, cbow_mean", [(True, True), (False, True), (False, False)], ids=["sg", "cbow", "cbow-sum"])
def test_the_kernel_is_sequential_sgd_per_shard_summed_in_shard_order(sg, cbow_mean, table):
    lib = native.local_sgd_kernel()
    assert lib is not None, native.unavailable("localsgd_kernel")
    rows, ctx, tgt, bounds = problem(1, sg, rows=table)
    want, want_loss, want_count = localsgd.reference(sg, rows, ctx, tgt, bounds, np.float32(0.05), cbow_mean)
    got, loss, count = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, np.float32(0.05), 1, cbow_mean)
    assert np.abs(want).max() > 1e-2  # it learned
    assert np.abs(got - want).max() < KERNEL_ATOL
    assert count == want_count and loss == pytest.approx(want_loss, rel=1e-5)
    # threads run whole shards and the sum keeps shard order: the same bytes on any count
    for threads in (2, 3, 5):
        again, loss2, count2 = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, np.float32(0.05), threads, cbow_mean)
        assert again.tobytes() == got.tobytes() and (loss2, count2) == (loss, count)
    # a shard sees its own updates at once, and not the other shards': one shard is not three summed (where
    # the shards share rows: in 60)
    one, _, _ = native.local_sgd(lib, sg, rows, ctx, tgt, bounds[[0, -1]], np.float32(0.05), 1, cbow_mean)
    assert table > 60 or np.abs(one - got).max() > 1e-3


@pytest.mark.parametrize("sg", [True, False], ids=["sg", "cbow"])
def test_each_shard_s_noise_words_learn_at_its_weight(sg):
    """Local negatives' weights (localsgd.noise_weights): each shard's noise words' updates at its weight times
    the rate, the centre's at the rate; the reference's sums, the same bytes on any thread count; weights of 1
    are no weights, bit for bit; and a session of sub-steps (hotsync) weighs them alike."""
    lib = native.local_sgd_kernel()
    rows, ctx, tgt, bounds = problem(7, sg)
    weights = np.array([0.5, 2.0, 1.25], np.float32)
    alpha = np.float32(0.05)
    want, want_loss, _ = localsgd.reference(sg, rows, ctx, tgt, bounds, alpha, weights=weights)
    got, loss, _ = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, alpha, 1, weights=weights)
    assert np.abs(got - want).max() < KERNEL_ATOL and loss == pytest.approx(want_loss, rel=1e-5)
    again, _, _ = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, alpha, 3, weights=weights)
    plain, _, _ = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, alpha, 2)
    ones, _, _ = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, alpha, 2, weights=np.ones(3, np.float32))
    assert again.tobytes() == got.tobytes() and ones.tobytes() == plain.tobytes()
    assert np.abs(plain - got).max() > 1e-3
    session = native.LocalSession(lib, sg, rows, ctx, tgt, bounds, 1, 0, 0, weights=weights)
    session.substep(0, alpha)
    assert session.close()[0].tobytes() == got.tobytes()
    with pytest.raises(ValueError, match="a noise weight a shard"):
        native.local_sgd(lib, sg, rows, ctx, tgt, bounds, alpha, 1, weights=weights[:2])


def paths(seed, tgt, none, scale=1.0):
    """``tgt`` made hierarchical softmax's: each centre's targets a path of 1 to all its slots of distinct rows
    (none past its end), and their codes."""
    g = np.random.default_rng(seed)
    hs = np.full(tgt.shape, none, np.int32)
    codes = np.zeros(tgt.shape, np.int8)
    for i, length in enumerate(g.integers(1, tgt.shape[1] + 1, len(tgt))):
        hs[i, :length] = 2 * g.choice(none // 2, length, replace=False) + 1
        codes[i, :length] = g.integers(0, 2, length)
    return hs, codes


@pytest.mark.parametrize("sg", [True, False], ids=["sg", "cbow"])
def test_hierarchical_softmax_in_the_kernel_is_the_reference_s(sg):
    """Paths of any length as targets, labels 1 - code, saturated nodes (|x . y| >= 6: rows scaled up so that
    some are) left alone: the reference's sums, the same bytes on any thread count."""
    lib = native.local_sgd_kernel()
    rows, ctx, _, bounds = problem(6, sg, k=5)
    rows *= 5
    tgt, codes = paths(6, np.zeros((len(ctx), 6), np.int32), len(rows) - 1)
    want, want_loss, want_count = localsgd.reference(sg, rows, ctx, tgt, bounds, np.float32(0.05), codes=codes)
    got, loss, count = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, np.float32(0.05), 1, codes=codes)
    assert np.abs(want).max() > 1e-2
    assert np.abs(got - want).max() < KERNEL_ATOL * 5  # rows five times as large
    assert count == want_count and loss == pytest.approx(want_loss, rel=1e-5)
    again, _, _ = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, np.float32(0.05), 3, codes=codes)
    assert again.tobytes() == got.tobytes()
    plain, _, _ = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, np.float32(0.05), 1)
    assert np.abs(plain - got).max() > 1e-3  # the codes label the targets


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_a_superstep_plan_counts_the_shards_that_name_a_row(compiled, monkeypatch):
    """The merge rule's m: each row's count of the shards whose examples name it, an empty shard among them,
    counted as the table is numbered (on 1 to 3 threads: more than MIN_PARALLEL_CENTRES centres), or in
    numpy."""
    g = np.random.default_rng(2)
    n, words = 1000, 300
    contexts = g.integers(0, words, (n, 4))
    contexts[g.random((n, 4)) < 0.3] = -1
    contexts[:, 0] = g.integers(0, words, n)
    batch = batches.Batch(g.integers(0, words, n), contexts, g.integers(0, words, (n, 3)))
    bounds = np.array([0, 250, 250, 700, 1000])
    want = {}
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        named = np.concatenate((2 * contexts[lo:hi][contexts[lo:hi] >= 0], 2 * batch.centres[lo:hi] + 1,
                                2 * batch.negatives[lo:hi].ravel() + 1))
        for key in np.unique(named):
            want[key] = want.get(key, 0) + 1
    if not compiled:
        monkeypatch.setattr(native, "example_builder", lambda: None)
    for threads in (1, 2, 3) if compiled else (1,):
        step = localsgd.superstep_plan(batch, bounds, RowPlan(words, 2), 0, True, threads)
        assert dict(zip(step.keys.tolist(), step.sgd.tolist())) == want
    assert max(want.values()) == 3 and min(want.values()) == 1
    if compiled:  # made in reused room (native.Scratch, training's), a plan keeps its keys past the next one's
        scratch = native.Scratch()
        first = localsgd.superstep_plan(batch, bounds, RowPlan(words, 2), 0, True, 2, scratch)
        other = batches.Batch(batch.centres[::-1] + 1, contexts[::-1].copy(), batch.negatives[::-1].copy())
        localsgd.superstep_plan(other, bounds, RowPlan(words + 1, 2), 0, True, 2, scratch)
        assert dict(zip(first.keys.tolist(), first.sgd.tolist())) == want
    if compiled:  # bounds that leave centres out, or fall, are refused
        for bad in ([0, 250, 999], [0, 700, 250, 1000]):
            with pytest.raises(ValueError, match="shard bounds"):
                localsgd.superstep_plan(batch, np.array(bad), RowPlan(words, 2), 0, True, 2)


def test_bad_rows_or_bounds_are_refused():
    lib = native.local_sgd_kernel()
    rows, ctx, tgt, bounds = problem(3, True)
    bad = ctx.copy()
    bad[0, 0] = len(rows)
    with pytest.raises(IndexError):
        native.local_sgd(lib, True, rows, bad, tgt, bounds, np.float32(0.05))
    with pytest.raises(IndexError):
        native.local_sgd(lib, True, rows, ctx, tgt, bounds[::-1].copy(), np.float32(0.05))


def test_the_clip_bounds_each_merged_row_after_the_sources_are_summed():
    """--merge-clip: every source's delta of a row summed first, then the sum scaled down to the clip's norm
    (two deltas under the clip whose sum is over it are clipped); the cap's scale applies before it."""
    from hvd_w2v.training.localsgd import ClippedMerge

    table = np.zeros((6, 3), np.float32)
    rows = np.array([1, 2, 3, 2, 3, 4], np.int64)  # source 0: rows 1, 2, 3; source 1: rows 2, 3, 4
    blocks = [np.array([[3, 4, 0], [0.1, 0, 0], [0.8, 0, 0]], np.float32),
              np.array([[0.2, 0, 0], [0.8, 0, 0], [0, 0, 0.3]], np.float32)]
    ClippedMerge(np.inf, 1.0).sources(table, rows, blocks, np.ones(6, np.float32), np.zeros(6, np.float32))
    np.testing.assert_allclose(table, [[0, 0, 0], [0.6, 0.8, 0], [0.3, 0, 0], [1, 0, 0], [0, 0, 0.3], [0, 0, 0]],
                               rtol=1e-6)
    hot = np.zeros((2, 2), np.float32)
    ClippedMerge(1.0, 10.0)(hot, np.array([0, 1]), np.array([[6, 8], [2, 0]], np.float32),
                            np.array([2, 1], np.float32))  # row 0: 2 shards, capped to their mean
    np.testing.assert_allclose(hot, [[3, 4], [2, 0]])
    ClippedMerge(1.0, 1.0)(hot, np.array([0]), np.array([[6, 8]], np.float32), np.array([2], np.float32))
    np.testing.assert_allclose(hot, [[3.6, 4.8], [2, 0]], rtol=1e-6)  # the mean (norm 5) clipped to 1


def test_the_layout_chooses_the_mode_unless_told_and_a_resume_keeps_its_run_s_choice():
    """Config.settled: the exact step on one host; on several a shard a thread and the merge clipped to 1 on
    every V and S, the super-step left to Config.sized: the longest power of two, at most 16,384, that leaves 233
    super-steps an epoch; what the options say wins; a resume keeps the resumed run's choices with its shards."""
    from hvd_w2v.common.config import MAX_SUPERSTEP, Config

    def chosen(cfg, positions=15_000_000):
        cfg = cfg.sized(positions)
        return cfg.shards, cfg.superstep, cfg.merge_clip

    auto = Config()
    assert auto.settled(1, 64).shards == 0 and Config(shards=0).settled(2, 64).shards == 0
    assert auto.settled(2, 64).superstep is None  # until the corpus is counted
    assert chosen(auto.settled(2, 4)) == (4, 8192, 1.0)  # 15M / (4 x 233) = 16,094.4
    assert chosen(auto.settled(2, 64)) == (64, 512, 1.0)  # 15M / (64 x 233) = 1,005.9
    assert chosen(auto.settled(2, 64), 15_300_000) == (64, 1024, 1.0)  # 1,026.1
    assert chosen(auto.settled(64, 2048)) == (2048, 16, 1.0)
    assert chosen(auto.settled(64, 2048), 10**10) == (2048, 16384, 1.0)
    assert chosen(auto.settled(1024, 32768), 10**10) == (32768, 1024, 1.0)
    assert chosen(auto.settled(64, 2048), 1000) == (2048, 1, 1.0)  # fewer positions than 233 an epoch
    for shards in (1, 3, 64, 2048):  # at least 233 an epoch, and fewer than twice that below the longest S
        for positions in (10**6, 15_300_000, 123_456_789):
            cfg = Config(shards=shards).settled(1, 1).sized(positions)
            assert cfg.steps_per_epoch(positions) >= 233
            assert cfg.superstep == MAX_SUPERSTEP or cfg.steps_per_epoch(positions) < 2 * 233 + 1
    assert chosen(Config(shards=8, merge_clip=0.25).settled(1, 2)) == (8, 4096, 0.25)
    assert chosen(Config(shards=8, superstep=100).settled(1, 2)) == (8, 100, 1.0)
    before = dict(shards=4, superstep=512, merge_clip=0.0)
    assert chosen(auto.settled(1, 2, before)) == (4, 512, 0.0)
    assert chosen(auto.settled(64, 2048, before)) == (4, 512, 0.0)
    # Another shard count than the run resumed: its own choices (and the checkpoint then refuses the resume).
    assert chosen(Config(shards=8).settled(1, 2, before)) == (8, 4096, 1.0)
    assert auto.settled(2, 64, dict(shards=0)).shards == 0
    # bfloat16 rows and deltas are shard-local SGD's alone: refused where the exact step runs
    from hvd_w2v.common.errors import UserError
    assert Config(wire="bfloat16").settled(2, 64).wire == "bfloat16"
    with pytest.raises(UserError, match="--wire bfloat16 is shard-local SGD's"):
        Config(wire="bfloat16").settled(1, 64)
    with pytest.raises(UserError, match="--wire must be one of float32, bfloat16"):
        Config(wire="float16")
    # local negatives: shard-local SGD's, a shard a group at least, a word a group, negative sampling's
    assert Config(noise_groups=2).settled(2, 4).noise_groups == 2
    with pytest.raises(UserError, match="--noise-groups 2 is shard-local SGD's"):
        Config(noise_groups=2).settled(1, 64)
    with pytest.raises(UserError, match="every group needs a shard .give --shards 8 or more"):
        Config(noise_groups=8, shards=4)
    with pytest.raises(UserError, match="hierarchical softmax .--hs 1. draws none"):
        Config(noise_groups=2, hs=True, negative=0)
    with pytest.raises(UserError, match="--noise-groups 8 on a vocabulary of 3 words"):
        localsgd.LocalSGD.check_layout(Config(shards=8, noise_groups=8), 2, 3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "zipf.txt"
    generate(str(path), 20000, vocab=1500, pairs=20, first=20, seed=4)
    return str(path)


OPTIONS = ["--epochs", "2", "--shards", "4", "--superstep", "512", "--quiet", "--show", "", "--format", "binary"]


def train(corpus, out, nranks, threads, *options):
    result = launch(nranks, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, *options], timeout=240,
                    threads=threads)
    assert result.ok, result.output[-3000:]
    vectors = load(f"{out}/vectors.bin")
    vectors.final_loss = json.load(open(f"{out}/run.json"))["final_loss"]  # the last epoch's mean a pair
    return vectors


# Both with hot rows merged inside the super-step (hotsync: their deltas summed by Horovod every --substep
# positions of a shard, 4 and 6 times a super-step), most rows through the alltoall (an owner sums several ranks'
# blocks); skip-gram with the plain sum, CBOW with the merge clipped (small enough to bind here).
ARCH = {"sg": ["--sg", "--hot-rows", "40", "--substep", "128", "--merge-clip", "0"],
        "cbow": ["--cbow", "--hot-rows", "30", "--substep", "100", "--merge-clip", "0.01"]}


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """1 rank x 4 threads hosting the 4 shards, per architecture: what every other layout must reproduce."""
    return {arch: train(corpus, str(tmp_path_factory.mktemp(f"1x4-{arch}")), 1, 4, *ARCH[arch]) for arch in ARCH}


@pytest.mark.parametrize("arch", ["sg", "cbow"])
def test_the_same_vectors_on_every_layout_of_four_shards(corpus, reference, tmp_path, arch):
    """1 rank x 4 threads, 2 x 2 and 4 x 1 (oversubscribed on 2 cores) host the same 4 shards."""
    ref = reference[arch]
    assert np.abs(ref.vectors).max() > 0.02  # trained: W_in starts within +-1/dim = 0.01
    for nranks, threads in [(2, 2), (4, 1)]:
        got = train(corpus, str(tmp_path / f"{nranks}x{threads}"), nranks, threads, *ARCH[arch])
        assert got.index_to_key == ref.index_to_key
        diff = np.abs(got.vectors - ref.vectors).max()
        print(f"{arch}, {nranks} x {threads}: largest difference from 1 x 4 {diff:.2e}")
        assert diff < ATOL, f"{nranks} x {threads} differs from 1 x 4 by {diff:.2e}"
        assert got.final_loss == pytest.approx(ref.final_loss, rel=1e-6)  # whatever the reports' windows


def bytes_per_word(output):
    """The bytes a word the job's ranks sent, from its last line."""
    import re

    return int(re.search(r"([\d,]+) bytes sent per word", output).group(1).replace(",", ""))


@pytest.fixture(scope="module")
def cbow_2x1(corpus, tmp_path_factory):
    """2 ranks x 1 thread, CBOW, float32 and every word's noise: (its vectors, the bytes a word it sent)."""
    out = str(tmp_path_factory.mktemp("cbow-2x1"))
    result = launch(2, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, *ARCH["cbow"]], timeout=240, threads=1)
    assert result.ok and "rows and deltas as float32" in result.output, result.output[-3000:]
    return load(f"{out}/vectors.bin"), bytes_per_word(result.output)


def test_bfloat16_halves_the_bytes_and_rounds_alike_on_every_layout(corpus, reference, cbow_2x1, tmp_path):
    """--wire bfloat16, CBOW (every row through the alltoall, the clip binding): 2 x 1 sends about half the
    bytes a word of float32's 2 x 1; its vectors are within the rounding of each rank's summed deltas of 1 x 2's
    (where nothing travels, but rows and deltas are rounded alike), and 1 x 2's differ from float32's by more
    than the order of sums does: the wire rounds there too."""
    runs = {}
    for wire, nranks, threads in [("bfloat16", 2, 1), ("bfloat16", 1, 2)]:
        out = str(tmp_path / f"{wire}-{nranks}x{threads}")
        result = launch(nranks, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, *ARCH["cbow"], "--wire", wire],
                        timeout=240, threads=threads)
        assert result.ok and f"rows and deltas as {wire}" in result.output, result.output[-3000:]
        runs[wire, nranks] = load(f"{out}/vectors.bin"), bytes_per_word(result.output)
    (half, half_bytes), (alone, _), (full, full_bytes) = runs["bfloat16", 2], runs["bfloat16", 1], cbow_2x1
    assert 0.45 < half_bytes / full_bytes < 0.6, (half_bytes, full_bytes)  # the keys do not shrink
    scale = np.abs(reference["cbow"].vectors).max()
    layouts, rounded = np.abs(half.vectors - alone.vectors).max(), np.abs(alone.vectors - full.vectors).max()
    print(f"bfloat16 2 x 1 against 1 x 2: {layouts:.2e}; bfloat16 against float32: {rounded:.2e}; scale {scale:.2e}")
    assert np.abs(full.vectors - reference["cbow"].vectors).max() < ATOL  # float32's 2 x 1 is 1 x 4's
    # rounded on one rank too (1 x 2 is not float32's), by a few 2^-8 of a super-step's deltas at most
    assert 2 * ATOL < rounded < 0.01 * scale and layouts < 0.01 * scale


def test_noise_groups_give_the_same_vectors_on_every_layout_and_no_noise_word_travels(corpus, reference, cbow_2x1,
                                                                                          tmp_path):
    """--noise-groups 2 (local negatives; a head of 16 words every shard draws), CBOW with hot rows inside the
    super-step: 2 x 1, where each rank draws its shards' other noise words among its own rows, and 1 x 2 give the
    same vectors, which are not one group's; 2 x 1 sends far fewer bytes a word than one group's 2 x 1, whose
    negatives are any rank's rows."""
    runs = {}
    for nranks, threads in [(2, 1), (1, 2)]:
        out = str(tmp_path / f"{nranks}x{threads}")
        result = launch(nranks, ["hvd-w2v", "train", corpus, "--out", out, *OPTIONS, *ARCH["cbow"], "--noise-groups",
                                 "2", "--noise-head", "16"], timeout=240, threads=threads)
        assert result.ok and "noise words from 2 groups" in result.output, result.output[-3000:]
        runs[nranks] = load(f"{out}/vectors.bin"), bytes_per_word(result.output)
    (local, local_bytes), (alone, _), (one, one_bytes) = runs[2], runs[1], cbow_2x1
    diff, moved = np.abs(local.vectors - alone.vectors).max(), np.abs(local.vectors - one.vectors).max()
    print(f"2 groups, 2 x 1 against 1 x 2: {diff:.2e}; against one group {moved:.2e}; bytes a word {local_bytes:,} "
          f"against {one_bytes:,}")
    assert diff < ATOL and moved > 100 * ATOL
    assert local_bytes < 0.7 * one_bytes


def test_a_super_step_checkpoint_resumes_on_another_layout_to_the_same_vectors(corpus, reference, tmp_path):
    """SIGUSR1 to a 2 x 1 job checkpoints at a super-step boundary (exit 75); --resume on 1 rank x 2 threads
    ends with the uninterrupted run's vectors; --resume with another shard count is refused."""
    from test_checkpoint import EXIT_INTERRUPTED, interrupt

    code, output, _, _ = interrupt(corpus, tmp_path, 2, signal.SIGUSR1, to_rank=None,
                                   options=[*OPTIONS, *ARCH["sg"]])
    assert code == EXIT_INTERRUPTED and "interrupted: checkpoint" in output, output[-3000:]
    other = launch(1, ["hvd-w2v", "train", corpus, "--out", tmp_path, *OPTIONS, *ARCH["sg"], "--resume",
                       "--shards", "8"], timeout=120)
    assert other.returncode == 2 and "--shards 4, this run has 8" in other.output, other.output[-3000:]
    assert "prepared in" not in other.output, other.output[-3000:]  # refused before the text passes
    # Without --shards, --superstep and --merge-clip, the resume keeps the run's (one host alone would choose
    # the exact step): its run.json's.
    result = launch(1, ["hvd-w2v", "train", corpus, "--out", tmp_path, "--epochs", "2", "--quiet", "--show", "",
                        "--format", "binary", "--sg", "--hot-rows", "40", "--resume"], timeout=240, threads=2)
    assert result.ok and "mode: shard-local SGD (as the run resumed chose): --shards 4 --superstep 512 --hot-rows " \
        "40 --substep 128 --merge-clip 0 --wire float32 (" in result.output, result.output[-3000:]
    got = load(f"{tmp_path}/vectors.bin")
    diff = np.abs(got.vectors - reference["sg"].vectors).max()
    print(f"resumed on 1 x 2: largest difference from the uninterrupted 1 x 4 {diff:.2e}")
    assert diff < ATOL, f"the resumed run differs from the uninterrupted one by {diff:.2e}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # matplotlib's, which TensorFlow imports
def test_the_planner_projects_a_node_s_work_to_its_threads_by_the_speed_up_measured_here():
    """on_node: Amdahl's law through the 1- and n-thread times; no speed-up, or one time alone, projects none."""
    from hvd_w2v.planning.localplan import on_node

    assert on_node({1: 8.0, 2: 4.0}, 32) == (0.25, 0.0)  # linear: all of it spreads
    assert on_node({1: 8.0, 2: 3.0}, 32) == (0.25, 0.0)  # better than linear (noise): no better than linear
    assert on_node({1: 8.0, 2: 6.0}, 32) == (pytest.approx(8.0 * (0.5 + 0.5 / 32)), 0.5)
    assert on_node({1: 8.0, 2: 9.0}, 32) == (8.0, 1.0) and on_node({1: 8.0}, 32) == (8.0, 1.0)


def test_the_planner_projects_nodes_of_threads_beside_the_exact_step(corpus, capsys):
    """localplan on a small corpus: a row per (bandwidth, S, P, H); one node exchanges nothing and is the
    efficiency's 100% of 1 node; more nodes send bytes and the exact step's projection stands beside; the words
    per core against one thread alone (measured in the same run) are never more than one."""
    from hvd_w2v.planning import localplan

    assert localplan.main([corpus, "--nodes", "1,4", "--threads", "4", "--superstep", "256",
                           "--bandwidth", "100", "--hot-rows", "0,500", "--substep", "auto,64", "--exact-steps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines.index(next(line for line in lines if line.split()[:3] == ["Gb/s", "S", "P"]))
    rows = [line.split() for line in lines[header + 1:]]
    assert [(r[2], r[4], r[5], r[6]) for r in rows] == [
        ("1", "4", "0", "256"), ("1", "4", "500", "256"), ("1", "4", "500", "64"),
        ("4", "16", "0", "256"), ("4", "16", "500", "256"), ("4", "16", "500", "64")]
    assert rows[0][8] == "0.0" and rows[0][-4] == "100%" and all(float(r[15]) > 0 for r in rows)  # mem GB/s
    for r in rows:  # per core: words/s over P x T cores; of 1 thread: at most what one thread alone trains
        assert float(r[-3].replace(",", "")) == pytest.approx(float(r[-5].replace(",", "")) / int(r[4]), abs=1)
        assert 0 < float(r[-2].rstrip("%")) <= 100, r
    assert rows[3][7] == "0" and rows[4][7] == f"{2 * 500 * 101 * 4 / 1024:,.0f}"  # [2H, dim + 1] float32
    assert float(rows[3][8].replace(",", "")) > float(rows[4][8].replace(",", "")) > 0  # hot rows leave the alltoall
    # merged every 64 of 256 positions: 4 allreduces a super-step, the same alltoall, fewer words/s
    assert float(rows[5][14]) == pytest.approx(4 * float(rows[4][14]), rel=0.05) and float(rows[4][14]) > 0
    assert rows[5][8] == rows[4][8] and float(rows[5][16].replace(",", "")) < float(rows[4][16].replace(",", ""))
    assert all(float(r[-1].replace(",", "")) > 0 for r in rows)  # the exact step's words/s
    # around the SGD: the examples' work measured once; the rows' add from P sources, once a P
    assert len({r[10] for r in rows}) == 1 and float(rows[0][10]) > 0
    assert all(r[11] == rows[3 * (i // 3)][11] and float(r[11]) > 0 for i, r in enumerate(rows))
    rows = [rows[0], rows[1], rows[3], rows[4]]  # as the rows without --substep, for the checks below
    # bfloat16 rows and deltas: the same keys, half the rows' bytes; the node's work on 1 thread, as told
    assert localplan.main([corpus, "--nodes", "4", "--threads", "4", "--superstep", "256", "--bandwidth", "100",
                           "--hot-rows", "0", "--exact-steps", "0", "--wire", "bfloat16", "--node-threads", "1"]) == 0
    out = capsys.readouterr()
    half = out.out.splitlines()[-1].split()
    assert 0.45 < float(half[8].replace(",", "")) / float(rows[2][8].replace(",", "")) < 0.6
    assert "as bfloat16" in out.err and "on 1 thread here" in out.err
    # a node whose memory cannot carry its traffic: the compute waits for it, and the row says so
    assert localplan.main([corpus, "--nodes", "4", "--threads", "4", "--superstep", "256", "--bandwidth", "100",
                           "--hot-rows", "0", "--exact-steps", "0", "--node-memory-bandwidth", "0.05"]) == 0
    slow = capsys.readouterr().out.splitlines()[-1].split()
    assert 0 < float(slow[15]) <= 0.05 and float(slow[9]) > float(rows[2][9])  # within the bound, at its pace
    assert float(slow[16].replace(",", "")) < float(rows[2][16].replace(",", ""))
    assert localplan.main([corpus, "--threads", "4", "--node-threads", "5"]) == 2


def test_merge_rule_left_unsettled_is_the_clipped_one():
    """A Config whose merge_clip no job's layout settled (a Python user's own loop.train) merges by the rule that
    cannot diverge, not by the plain sum: the plain sum only where it is asked for (merge_clip 0)."""
    from hvd_w2v.common.config import MERGE_CLIP, Config

    rule = localsgd.merge_rule(Config(shards=4, superstep=64))
    assert isinstance(rule, localsgd.ClippedMerge) and rule.clip == MERGE_CLIP
    assert not isinstance(localsgd.merge_rule(Config(shards=4, superstep=64, merge_clip=0)), localsgd.ClippedMerge)
