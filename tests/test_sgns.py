"""The step's maths, the compiled step and the TensorFlow graph alike, against word2vec.c's loops written out in
numpy; one trace of the graph for every shape."""
import numpy as np
import pytest

from hvd_w2v.parallel.shard import RowPlan
from hvd_w2v.training import sgns
from hvd_w2v.training.batches import Batch
from hvd_w2v.training.loop import StepPlan


def one_group(sg, fused, cbow_mean=True, hs=False):
    """The step function with all centres in one group of any width."""
    fn = sgns.step_function(sg, 1, fused, cbow_mean=cbow_mean, hs=hs)
    return lambda table, ctx, tgt, alpha, codes=None: fn(table, [ctx], [tgt], alpha,
                                                         None if codes is None else [codes])


@pytest.fixture(params=[True, False], ids=["fused", "graph"])
def fused(request):
    if request.param and not sgns.fused():
        pytest.skip(f"the compiled step cannot be built here: {sgns.fused_error()}")
    return request.param


def example(seed, n=7, window=2, negative=3, rows=20, d=8):
    """A random step: ``rows`` table with its zero row last, contexts with gaps, noise words hitting the centre."""
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 0.3, (rows + 1, d)).astype(np.float32)
    table[-1] = 0
    ctx = rng.integers(0, rows // 2, (n, 2 * window)).astype(np.int32)
    ctx[rng.random(ctx.shape) < 0.3] = rows  # no context word in that slot
    ctx[:, 0] = rng.integers(0, rows // 2, n)  # every centre keeps at least one
    tgt = rng.integers(rows // 2, rows, (n, 1 + negative)).astype(np.int32)
    tgt[0, 1] = tgt[0, 0]  # a noise word equal to the centre: word2vec.c skips it
    return table, ctx, tgt


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def reference(table, ctx, tgt, alpha, sg, cbow_mean=True, codes=None):
    """word2vec.c's updates, one pair at a time, every one read from the same snapshot and summed; CBOW of the
    context's mean, or of its sum, each context word then getting 1/m of the update (gensim's cbow_mean=0).
    With ``codes``, hierarchical softmax: ``tgt`` the path's rows (none past its end), labels 1 - code, no
    update of a node whose |logit| is 6 or more."""
    none = len(table) - 1
    up = np.zeros_like(table, dtype=np.float64)
    for i in range(len(ctx)):
        words = [c for c in ctx[i] if c != none]
        if codes is None:
            targets = [(t, 1.0 if k == 0 else 0.0) for k, t in enumerate(tgt[i]) if k == 0 or t != tgt[i, 0]]
        else:
            targets = [(t, 1.0 - code) for t, code in zip(tgt[i], codes[i]) if t != none]
        inputs = ([(table[c], [c]) for c in words] if sg else [(table[words].mean(axis=0), words)] if cbow_mean
                  else [(table[words].sum(axis=0), words)])
        share = 1.0 if sg or cbow_mean else 1.0 / len(words)
        for l1, receivers in inputs:
            neu1e = np.zeros(table.shape[1])
            for t, label in targets:
                if codes is not None and abs(l1 @ table[t]) >= 6:
                    continue
                g = (label - sigmoid(l1 @ table[t])) * alpha
                neu1e += g * table[t]
                up[t] += g * l1
            for c in receivers:
                up[c] += share * neu1e
    return up[:-1]


@pytest.mark.parametrize("sg, cbow_mean", [(True, True), (False, True), (False, False)],
                         ids=["skipgram", "cbow", "cbow-sum"])
def test_updates_equal_word2vec_loops(sg, cbow_mean, fused):
    """Each call's own learning rate."""
    table, ctx, tgt = example(0)
    for alpha in (0.025, 0.01):
        updates, loss, pairs = one_group(sg, fused, cbow_mean)(table, ctx, tgt, np.float32(alpha))
        np.testing.assert_allclose(updates, reference(table, ctx, tgt, alpha, sg, cbow_mean), atol=1e-6)
        assert float(pairs) == ((ctx < len(table) - 1).sum() if sg else len(ctx))
        assert float(loss) > 0


@pytest.mark.parametrize("sg", [True, False], ids=["skipgram", "cbow"])
def test_hierarchical_softmax_updates_equal_word2vec_loops(sg, fused):
    """Targets a path of inner-node rows of any length (the rest "none"), each labelled 1 - its code."""
    table, ctx, _ = example(1)
    rng = np.random.default_rng(1)
    none = len(table) - 1
    tgt = np.full((len(ctx), 4), none, np.int32)
    codes = np.zeros(tgt.shape, np.int8)
    for i, length in enumerate(rng.integers(1, 5, len(ctx))):
        tgt[i, :length] = rng.choice(np.arange(10, 20), length, replace=False)
        codes[i, :length] = rng.integers(0, 2, length)
    updates, loss, pairs = one_group(sg, fused, hs=True)(table, ctx, tgt, np.float32(0.025), codes)
    np.testing.assert_allclose(updates, reference(table, ctx, tgt, 0.025, sg, codes=codes), atol=1e-6)
    assert float(loss) > 0
    assert float(pairs) == ((ctx < none).sum() if sg else len(ctx))
    # Rows grown large: saturated nodes (|logit| >= 6, some of every centre's) are left alone, as word2vec.c does
    big = table * 6
    big[-1] = 0
    logits = np.einsum("nwd,nkd->nwk", big[ctx], big[tgt])
    assert 0.1 < (np.abs(logits) >= 6).mean() < 0.9
    updates, _, _ = one_group(sg, fused, hs=True)(big, ctx, tgt, np.float32(0.025), codes)
    np.testing.assert_allclose(updates, reference(big, ctx, tgt, 0.025, sg, codes=codes), atol=1e-5)


@pytest.mark.parametrize("sg", [True, False], ids=["skipgram", "cbow"])
def test_the_compiled_step_on_threads_sums_the_same_updates(sg):
    """The compiled step's centres cut over 2, 3 and 7 threads (7 > the 5 centres of a group: some threads get none):
    word2vec.c's updates as on one thread, up to the order of float32 sums; several groups, as the graph
    takes them, cut across by the chunks. Each threaded call follows one on a larger step, so that the
    threads' buffers, kept from call to call, hold another step's values."""
    if not sgns.fused():
        pytest.skip(f"the compiled step cannot be built here: {sgns.fused_error()}")
    table, ctx, tgt = example(6, n=11, rows=40)
    groups = ([ctx[:5], ctx[5:]], [tgt[:5], tgt[5:]])
    one, one_loss, one_count = sgns.step_function(sg, 1, True, 1)(table, *groups, np.float32(0.025))
    np.testing.assert_allclose(one, reference(table, ctx, tgt, 0.025, sg), atol=1e-6)
    larger = example(8, n=30, rows=90)
    for threads in (2, 3, 7):
        sgns.step_function(sg, 1, True, threads)(larger[0], [larger[1]], [larger[2]], np.float32(0.025))
        got, loss, count = sgns.step_function(sg, 1, True, threads)(table, *groups, np.float32(0.025))
        np.testing.assert_allclose(got, one, atol=1e-6)
        assert float(count) == float(one_count) and float(loss) == pytest.approx(float(one_loss), rel=1e-6)


def test_the_compiled_step_refuses_rows_outside_the_table():
    """An index past the table would read and write outside its arrays: one clear error instead."""
    if not sgns.fused():
        pytest.skip(f"the compiled step cannot be built here: {sgns.fused_error()}")
    table, ctx, tgt = example(7)
    for block in (ctx, tgt):
        bad = block.copy()
        bad[-1, -1] = len(table)
        with pytest.raises(IndexError, match="must lie in"):
            one_group(True, True)(table, bad if block is ctx else ctx, bad if block is tgt else tgt,
                                  np.float32(0.025))


def test_one_trace_per_function_whatever_the_shapes():
    """Steps differ in example and row counts; a retrace per shape would cost seconds over a run."""
    for seed, n, window, negative, rows in [(1, 5, 2, 3, 20), (2, 40, 5, 5, 300), (3, 1, 1, 1, 4)]:
        table, ctx, tgt = example(seed, n, window, negative, rows)
        for sg in (True, False):
            one_group(sg, False)(table, ctx, tgt, np.float32(0.01))
    for sg in (True, False):
        assert sgns.step_function(sg, 1, False).traced.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("groups", [5, 1], ids=["width-groups", "one-block"])
@pytest.mark.parametrize("sg", [True, False], ids=["skipgram", "cbow"])
def test_a_step_plan_equals_word2vec_loops(sg, fused, groups):
    """StepPlan.of packs each centre's contexts to the left and groups centres by width (window groups), or
    leaves them in one block as they come (1 group, the compiled step's): the updates, loss and count must be those
    of the plain [centres, 2 window] block."""
    rng = np.random.default_rng(5)
    n, window, negative, vocab, d = 300, 5, 5, 60, 8
    contexts = rng.integers(0, vocab, (n, 2 * window))
    contexts[rng.random(contexts.shape) < 0.45] = -1  # gaps anywhere, as reduced windows and sentence ends leave
    contexts[np.arange(n), rng.integers(0, 2 * window, n)] = rng.integers(0, vocab, n)  # at least one each
    batch = Batch(rng.integers(0, vocab, n), contexts, rng.integers(0, vocab, (n, negative)))
    step = StepPlan.of(batch, RowPlan(vocab, 1), 0, sg, groups)
    assert [c.shape[1] for c in step.ctx] == ([2, 4, 6, 8, 10] if groups == window else [10])
    table = np.zeros((step.table, d), np.float32)
    table[:len(step.keys)] = rng.normal(0, 0.3, (len(step.keys), d))
    updates, loss, count = sgns.step_function(sg, groups, fused)(table, step.ctx, step.tgt, np.float32(0.025))

    # The same examples as one block, in the table's rows: keys are 2 * id (W_in) and 2 * id + 1 (W_out).
    none = step.table - 1
    order = np.argsort(step.keys)  # the table's keys are grouped by owner, in any order within one
    slot = lambda keys: order[np.searchsorted(step.keys[order], keys)]  # noqa: E731
    ctx = np.where(contexts >= 0, slot(2 * contexts), none)
    tgt = slot(2 * np.concatenate((batch.centres[:, None], batch.negatives), axis=1) + 1)
    expected = reference(table, ctx, tgt, 0.025, sg)
    np.testing.assert_allclose(updates, expected[:len(updates)], atol=1e-6)
    _, ref_loss, ref_count = one_group(sg, False)(table, ctx.astype(np.int32), tgt.astype(np.int32),
                                                  np.float32(0.025))
    assert float(count) == float(ref_count) and float(loss) == pytest.approx(float(ref_loss), rel=1e-5)


@pytest.mark.parametrize("sg", [True, False], ids=["skipgram", "cbow"])
def test_padding_changes_nothing(sg, fused):
    """loop.StepPlan rounds shapes up: extra zero rows, extra centres naming only the last row."""
    table, ctx, tgt = example(4)
    fn = one_group(sg, fused)
    updates, loss, count = fn(table, ctx, tgt, np.float32(0.025))
    rows, extra = len(table) - 1, 13
    padded = np.vstack((table[:-1], np.zeros((extra + 1, table.shape[1]), np.float32)))
    last = len(padded) - 1
    pctx = np.vstack((np.where(ctx == rows, last, ctx), np.full((9, ctx.shape[1]), last))).astype(np.int32)
    ptgt = np.vstack((tgt, np.full((9, tgt.shape[1]), last))).astype(np.int32)
    pu, pl, pc = fn(padded, pctx, ptgt, np.float32(0.025))
    # Equal up to float32 summation order (other shapes may block the matrix products differently).
    np.testing.assert_allclose(pu[:rows], updates, rtol=1e-5, atol=1e-8)
    assert not pu[rows:].any()
    assert float(pl) == pytest.approx(float(loss), rel=1e-6) and float(pc) == float(count)
