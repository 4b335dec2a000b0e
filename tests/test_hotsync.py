"""Hot rows merged inside the super-step (--substep with --shards and --hot-rows): the compiled session
against its numpy reference, the same bytes on any thread count, one sub-step being localsgd's super-step,
and the sub-steps cut by positions. The layouts' equality runs in test_localsgd (its ARCH merge inside)."""
import numpy as np
import pytest

from hvd_w2v.common.config import Config
from hvd_w2v.common.errors import UserError
from hvd_w2v.kernels import native
from hvd_w2v.training import hotsync
from test_localsgd import KERNEL_ATOL, problem

ALPHA = np.float32(0.05)


def segments_of(bounds, parts, seed):
    """Each shard of ``bounds`` cut into ``parts`` sub-steps at random (some empty)."""
    g = np.random.default_rng(seed)
    out = [0]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        out += sorted(g.integers(lo, hi + 1, parts - 1).tolist()) + [hi]
    return np.array(out, np.int64)


def run(session, parts, merge):
    """The session's sub-steps, each merged by ``merge(base, deltas, touching)`` and the rows some shard
    touched synced; returns what it saw."""
    base, seen = session_base(session), []
    for part in range(parts):
        hot, touching = session.substep(part, ALPHA)
        seen.append((hot.copy(), touching.copy()))
        base = merge(base, hot, touching)
        which = np.flatnonzero(touching)
        session.sync(base[which], which)
    return seen, session.close()


def session_base(session):
    rows = session.keep[0] if hasattr(session, "keep") else session.rows
    lo, hi = session.hot
    return rows[lo:hi].copy()


def halved(base, hot, touching):
    """A merge unlike the sum, so that a sync that does not reach the copies shows."""
    return base + 0.5 * hot


@pytest.mark.parametrize("sg", [True, False], ids=["sg", "cbow"])
def test_the_session_is_its_reference_and_the_same_bytes_on_any_thread_count(sg):
    lib = native.local_sgd_kernel()
    assert lib is not None, native.unavailable("localsgd_kernel")
    rows, ctx, tgt, bounds = problem(2, sg, shards=4, n=80, rows=120)
    parts, hot = 3, (10, 40)  # ids 5..19 of both matrices
    segments = segments_of(bounds, parts, 3)
    want_seen, (want, want_loss, want_count) = run(
        hotsync.Reference(sg, rows, ctx, tgt, segments, parts, *hot), parts, halved)
    got_seen, (got, loss, count) = run(
        native.LocalSession(lib, sg, rows, ctx, tgt, segments, parts, *hot, threads=1), parts, halved)
    assert np.abs(want[hot[0]:hot[1]]).max() == 0 and np.abs(want).max() > 1e-2  # hot rows travel in the syncs
    for (want_hot, want_touching), (got_hot, got_touching) in zip(want_seen, got_seen):
        assert (got_touching == want_touching).all() and np.abs(got_hot - want_hot).max() < KERNEL_ATOL
    assert max(t.max() for _, t in got_seen) > 1  # shards share hot rows: the sums sum something
    assert np.abs(got - want).max() < KERNEL_ATOL
    assert count == want_count and loss == pytest.approx(want_loss, rel=1e-5)
    for threads in (2, 3, 5):
        seen, (again, loss2, count2) = run(
            native.LocalSession(lib, sg, rows, ctx, tgt, segments, parts, *hot, threads=threads), parts, halved)
        assert again.tobytes() == got.tobytes() and (loss2, count2) == (loss, count)
        assert all(a.tobytes() == b.tobytes() for (a, _), (b, _) in zip(seen, got_seen))


@pytest.mark.parametrize("sg", [True, False], ids=["sg", "cbow"])
def test_one_sub_step_is_the_super_step_with_its_hot_rows_merged_at_the_end(sg):
    lib = native.local_sgd_kernel()
    rows, ctx, tgt, bounds = problem(4, sg, shards=3, n=60, rows=90)
    hot = (0, 30)
    whole, loss, count = native.local_sgd(lib, sg, rows, ctx, tgt, bounds, ALPHA)
    session = native.LocalSession(lib, sg, rows, ctx, tgt, bounds, 1, *hot)
    hot_deltas, _ = session.substep(0, ALPHA)
    session.sync(rows[hot[0]:hot[1]] + hot_deltas, np.arange(hot[1] - hot[0]))
    rest, loss1, count1 = session.close()
    assert hot_deltas.tobytes() == whole[hot[0]:hot[1]].tobytes()
    assert rest[hot[1]:].tobytes() == whole[hot[1]:].tobytes() and (loss1, count1) == (loss, count)


def test_a_session_called_out_of_turn_or_with_rows_outside_the_table_is_refused():
    lib = native.local_sgd_kernel()
    rows, ctx, tgt, bounds = problem(5, True)
    with pytest.raises(IndexError, match="hot rows lie in the table"):
        native.LocalSession(lib, True, rows, ctx, tgt, bounds, 1, 10, len(rows))
    with pytest.raises(IndexError):
        native.LocalSession(lib, True, rows, ctx, tgt, bounds, 2, 0, 10)  # 3 shards' bounds are not 2 parts each
    session = native.LocalSession(lib, True, rows, ctx, tgt, bounds, 1, 0, 10)
    with pytest.raises(RuntimeError, match="out of turn"):
        session.substep(1, ALPHA)
    with pytest.raises(RuntimeError, match="outside the hot ones"):
        session.sync(rows[:2], [3, 10])
    session.close()
    with pytest.raises(RuntimeError, match="out of turn"):
        session.close()


def test_the_sub_steps_are_cut_by_positions_and_asked_for_with_hot_rows_and_shards():
    from hvd_w2v.parallel.shard import RowPlan
    from hvd_w2v.training import localsgd
    from test_batches import zipf_stream, zipf_vocab

    vocab, stream = zipf_vocab(300, 1e-3), zipf_stream(3_000, 300, seed=1)
    cfg = Config(shards=3, superstep=50, substep=20, hot_rows=10).settled(1, 1)
    plan = RowPlan(vocab.size, 1)
    step = hotsync.prepare_substeps(stream, vocab, cfg, plan, 10, 1, 0)
    whole = localsgd.prepare_superstep(stream, vocab, cfg, plan, 10, 1, 0)
    assert hotsync.parts(cfg) == 3 and len(step.segments) == 3 * 3 + 1
    assert (step.segments[::3] == whole.bounds).all() and (step.keys == whole.keys).all()
    assert (step.sgd == whole.sgd).all()  # the merge's shard counts are the super-step's
    with pytest.raises(UserError, match="give --hot-rows"):
        Config(shards=3, substep=20).settled(1, 1)
    with pytest.raises(UserError, match="shard-local SGD's"):
        Config(shards=0, substep=20, hot_rows=10).settled(1, 1)
    assert Config(shards=3, superstep=50, substep=80, hot_rows=10).settled(1, 1).substep is None  # localsgd's


def test_the_memory_plan_holds_every_hosted_shard_s_copy_with_a_substep():
    """localsgd holds a copy a thread; with the hot rows merged inside the super-step every hosted shard's copy
    lives from its start to its end, and the hot rows' places and marks a shard beside them."""
    from hvd_w2v.planning import memory

    base = Config(shards=16, superstep=256, hot_rows=100).settled(2, 2)
    inside = Config(shards=16, superstep=256, hot_rows=100, substep=64).settled(2, 2)
    assert not base.hot_inside and inside.hot_inside
    vocab, dim = 50_000, base.dim
    # a shard's rows at most: its range's words and those within the context span of its ends, and a target row
    # each of its centres' targets, and the spare row
    copy = 256 + 2 * base.context_span + 256 * (1 + base.negative) + 1
    hosted = 8  # 16 shards on 2 ranks
    grown = memory.step_bytes(inside, vocab, 2, 2) - memory.step_bytes(base, vocab, 2, 2)
    copies = 4 * dim * ((hosted - 2) * copy + 2 * 200)  # 6 more copies, and the hot rows twice (2H = 200 rows)
    marks = 5 * hosted * 200  # a shard's place (int32) and mark (uint8) of every hot row
    examples = 4 * (hosted - 2) * 256 * (2 * base.window + 1 + base.negative)  # the 6 more renumbered examples
    assert grown == pytest.approx(copies + marks + examples, abs=1)
