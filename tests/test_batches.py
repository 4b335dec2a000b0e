"""A step's examples: the compiled builder (batches_kernel.cc) gives numpy's examples bit for bit."""
import numpy as np
import pytest

from hvd_w2v.common.config import Config
from hvd_w2v.kernels import native
from hvd_w2v.text.vocab import CountRuns, Vocab
from hvd_w2v.training import batches


class Ids:
    """A token stream held in memory, read as encode.TokenStream reads its shards."""

    def __init__(self, ids):
        self.ids = ids

    def __len__(self):
        return len(self.ids)

    def read(self, lo, hi):
        return self.ids[max(lo, 0):min(hi, len(self.ids))].copy()


def zipf_stream(n, vocab_size, seed):
    """``n`` positions of Zipf-distributed ids below ``vocab_size``, sentences of 1 to 40 words."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.2, n) - 1, vocab_size - 1).astype(np.int32)
    ids[np.cumsum(rng.integers(1, 41, n))[:n // 5] % n] = -1  # encode.SENTENCE_END
    return Ids(ids)


def zipf_vocab(vocab_size, sample):
    counts = np.maximum(10**6 // np.arange(1, vocab_size + 1), 5)
    distinct, lengths = np.unique(counts, return_counts=True)
    return Vocab(CountRuns(distinct[::-1], lengths[::-1], sample), 0, {}, [], [])


@pytest.fixture
def builder():
    lib = native.example_builder()
    if lib is None:
        pytest.skip(f"the example builder cannot be built here: {native._LIBS['batches_kernel']}")
    return lib


def numpy_build(monkeypatch, *args):
    monkeypatch.setattr(native, "example_builder", lambda: None)
    try:
        return batches.build(*args)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("window, negative, span, sample", [(5, 5, 0, 1e-3), (2, 3, 0, 1e-5), (8, 1, 9, 0.0)])
def test_the_compiled_examples_are_numpys(builder, monkeypatch, window, negative, span, sample):
    """Every centre, context slot and noise word equal, over slices at the stream's ends and inside it, in two
    epochs and two seeds: the same draws, the same windows, the same float rounding."""
    stream = zipf_stream(30_000, 3_000, seed=window)
    voc = zipf_vocab(3_000, sample)
    voc.runs.keep_head = voc.runs.keep_head[:1000]  # ids past the head: their keep-probability by their run
    for seed in (1, 7):
        cfg = Config(window=window, negative=negative, span=span, sample=sample, seed=seed)
        for epoch in (0, 3):
            for lo, hi in [(0, 1024), (1000, 3048), (29_000, 30_000), (12_345, 12_346), (500, 500)]:
                got = batches.build(stream, voc, cfg, epoch, lo, hi)
                want = numpy_build(monkeypatch, stream, voc, cfg, epoch, lo, hi)
                assert len(got) == len(want) and (len(want) > 0 or hi - lo < 2)
                for field in ("centres", "contexts", "negatives"):
                    a, b = getattr(got, field), getattr(want, field)
                    assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b), (field, seed, epoch, lo)


def test_bad_arrays_are_refused_before_the_loop(builder):
    voc = zipf_vocab(100, 1e-3)
    ids = np.array([1, 2, 100], np.int32)  # 100 is past the vocabulary
    with pytest.raises(ValueError):
        native.build_examples(builder, ids, 0, 0, 3, (1, 2, 3), 5, 20, 5, voc.runs)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_several_ranges_in_one_call_are_the_ranges_built_one_by_one(builder, monkeypatch, threads):
    """batches.build_ranges (localsgd's shards: a range a thread, one call): each range's examples and count
    as batches.build's, range after range, empty and one-position ranges, the stream's ends, more ranges than
    threads and fewer; the numpy fallback the same; and built into reused room (native.Scratch, training's), the
    same after a larger call's."""
    stream, voc = zipf_stream(30_000, 3_000, seed=6), zipf_vocab(3_000, 1e-3)
    cfg = Config(seed=3)
    ranges = [(0, 64), (29_990, 30_000), (500, 500), (12_345, 12_346), (7_000, 9_000), (64, 128), (15_000, 15_300)]
    scratch = native.Scratch()
    for chosen in (ranges, ranges[4:5], []):
        got, counts = batches.build_ranges(stream, voc, cfg, 2, chosen, threads)
        reused, reused_counts = batches.build_ranges(stream, voc, cfg, 2, chosen, threads, scratch)
        assert reused_counts.tolist() == counts.tolist()
        assert all(np.array_equal(getattr(reused, f), getattr(got, f)) for f in ("centres", "contexts", "negatives"))
        parts = [batches.build(stream, voc, cfg, 2, lo, hi) for lo, hi in chosen]
        assert counts.tolist() == [len(p) for p in parts]
        monkeypatch.setattr(native, "example_builder", lambda: None)
        fallback, fallback_counts = batches.build_ranges(stream, voc, cfg, 2, chosen, threads)
        monkeypatch.undo()
        assert fallback_counts.tolist() == counts.tolist()
        for field in ("centres", "contexts", "negatives"):
            want = getattr(batches._empty(cfg), field)[:0] if not parts else np.concatenate(
                [getattr(p, field) for p in parts])
            assert np.array_equal(getattr(got, field), want) and np.array_equal(getattr(fallback, field), want)
            assert getattr(got, field).shape[1:] == want.shape[1:], field
    assert batches.build_ranges(stream, voc, cfg, 2, ranges, threads)[1].sum() > 1000  # examples to compare


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("head", [0, 40])
def test_noise_groups_draw_each_range_s_negatives_among_its_group_s_words(builder, monkeypatch, threads, head):
    """Local negatives (config's noise_groups, noise_head): the compiled builder draws range r's noise words
    from its group (the ``head`` most frequent ids, then the others congruent to g modulo G at G times their
    weight: vocab.CountRuns.noise_group), the numpy fallback the same ids; centres and contexts are those of
    one group; and over many draws each word comes up by its share of the group's weight."""
    stream, voc = zipf_stream(30_000, 3_000, seed=8), zipf_vocab(3_000, 1e-3)
    cfg, groups = Config(seed=5), 3
    ranges = [(0, 4_000), (4_000, 9_000), (9_000, 9_001), (12_000, 30_000)]
    noise = [(g, groups, head) for g in (0, 2, 1, 2)]
    got, counts = batches.build_ranges(stream, voc, cfg, 1, ranges, threads, noise=noise)
    whole, whole_counts = batches.build_ranges(stream, voc, cfg, 1, ranges, threads)
    assert counts.tolist() == whole_counts.tolist() and np.array_equal(got.contexts, whole.contexts)
    monkeypatch.setattr(native, "example_builder", lambda: None)
    fallback, _ = batches.build_ranges(stream, voc, cfg, 1, ranges, threads, noise=noise)
    monkeypatch.undo()
    assert np.array_equal(fallback.negatives, got.negatives) and not np.array_equal(got.negatives, whole.negatives)
    group = np.repeat([0, 2, 1, 2], counts)[:, None]
    assert ((got.negatives % groups == group) | (got.negatives < head)).all()
    drawn = got.negatives[np.repeat(np.arange(4), counts) == 3].ravel()  # group 2's words in the last range
    words = np.flatnonzero((np.arange(3_000) % groups == 2) | (np.arange(3_000) < head))
    weight = voc.runs.count(words).astype(np.float64) ** 0.75 * np.where(words < head, 1, groups)
    share = np.bincount(drawn, minlength=3_000)[words] / len(drawn)
    assert np.abs(share - weight / weight.sum()).max() < 0.01, len(drawn)
    assert (drawn < head).any() == (head > 0)
    with pytest.raises(ValueError, match="a noise group a range"):
        native.build_ranges(builder, [np.zeros(1, np.int32)], [0], [0], [1], (1, 2, 3), 5, 20, 5, voc.runs,
                            noise=[(0, 2, 0), (1, 2, 0)])


def plan_view(step, plan, n_hot):
    """What a StepPlan means, whatever the order of its table: each owner's set of keys (the hot ones last)
    with their SGD counts, the key behind every example slot (-1: none), and the table's size."""
    keys, ends = step.keys, np.cumsum(np.append(step.owned, len(step.keys) - step.cold))
    owner = np.where(keys >> 1 < n_hot, plan.ranks, plan.owner(keys >> 1))
    assert np.array_equal(owner, np.repeat(np.arange(plan.ranks + 1), np.diff(ends, prepend=0)))
    assert len(np.unique(keys)) == len(keys)
    padded = np.append(keys, np.full(step.table - len(keys), -1))  # the padding and "none" rows read as -1
    return (dict(zip(keys.tolist(), step.sgd.tolist())), step.cold, step.table,
            [padded[block] for block in step.ctx], [padded[block] for block in step.tgt])


@pytest.mark.parametrize("ranks, n_hot, sg, hs", [(1, 0, True, False), (1, 0, False, False), (2, 0, True, False),
                                                  (3, 40, True, False), (4, 0, False, False), (2, 0, True, True),
                                                  (3, 40, False, True)])
def test_the_compiled_step_plan_means_numpys(builder, monkeypatch, ranks, n_hot, sg, hs):
    """The compiled step's StepPlan (one block), from real examples (noise words equal to their centre included;
    with ``hs``, Huffman paths of every length): keys grouped by owner as numpy's (within an owner the order may
    differ: no sum depends on it), the same SGD count per key, and every example slot pointing at the same key."""
    from hvd_w2v.parallel.shard import RowPlan
    from hvd_w2v.training.loop import StepPlan

    stream, voc = zipf_stream(30_000, 3_000, seed=2), zipf_vocab(3_000, 1e-3)
    plan = RowPlan(3_000, ranks)
    for lo, hi in [(0, 2048), (5000, 5700), (100, 100)]:
        batch = batches.build(stream, voc, Config(negative=0, hs=True) if hs else Config(), 0, lo, hi)
        assert lo == hi or hs or (batch.negatives == batch.centres[:, None]).any()
        compiled = StepPlan.of(batch, plan, n_hot, sg, 1)
        got = plan_view(compiled, plan, n_hot)
        monkeypatch.setattr(native, "example_builder", lambda: None)
        numpys = StepPlan.of(batch, plan, n_hot, sg, 1)
        want = plan_view(numpys, plan, n_hot)
        monkeypatch.undo()
        if hs:
            assert lo == hi or len(set((batch.path >= 0).sum(axis=1))) > 3  # paths of several lengths
            assert np.array_equal(compiled.codes[0], numpys.codes[0])
        assert got[:3] == want[:3]
        for a, b in zip(got[3] + got[4], want[3] + want[4]):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_the_compiled_examples_on_threads_are_the_same(builder, threads):
    """Examples built on several threads: the same arrays, element for element, as on one (slices long
    enough that the threads engage, at the stream's ends and inside it; 8 threads on 2 cores)."""
    stream, voc = zipf_stream(30_000, 3_000, seed=4), zipf_vocab(3_000, 1e-3)
    for seed in (1, 5):
        for lo, hi in [(0, 4096), (7_000, 7_900), (29_000, 30_000)]:
            one = batches.build(stream, voc, Config(seed=seed), 1, lo, hi)
            many = batches.build(stream, voc, Config(seed=seed), 1, lo, hi, threads)
            assert len(one) > 300
            for field in ("centres", "contexts", "negatives"):
                assert np.array_equal(getattr(one, field), getattr(many, field)), field


@pytest.mark.parametrize("ranks", [1, 3])
def test_the_compiled_step_plan_numbers_rare_words_as_numpy(builder, monkeypatch, ranks):
    """Ids past the builder's dense numbers (batches_kernel.cc's DENSE_IDS, a hash table then), mixed with
    frequent ones: the same plan as numpy's, twice in a row (the dense numbers are left zeros between calls)."""
    from hvd_w2v.parallel.shard import RowPlan
    from hvd_w2v.training.batches import Batch
    from hvd_w2v.training.loop import StepPlan

    rng = np.random.default_rng(8)
    vocab, n = 400_000, 1500
    draw = lambda shape: np.where(rng.random(shape) < 0.5, rng.integers(0, 300, shape),  # noqa: E731
                                  rng.integers(0, vocab, shape))
    plan = RowPlan(vocab, ranks)
    for _ in range(2):
        contexts = draw((n, 10))
        contexts[rng.random(contexts.shape) < 0.3] = -1
        contexts[:, 0] = draw(n)
        batch = Batch(draw(n), contexts, draw((n, 5)))
        got = plan_view(StepPlan.of(batch, plan, 0, True, 1), plan, 0)
        monkeypatch.setattr(native, "example_builder", lambda: None)
        want = plan_view(StepPlan.of(batch, plan, 0, True, 1), plan, 0)
        monkeypatch.undo()
        assert got[:3] == want[:3] and max(got[0]) >> 1 > 2 * 65536
        for a, b in zip(got[3] + got[4], want[3] + want[4]):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("threads", [2, 3, 8])
@pytest.mark.parametrize("ranks, n_hot", [(1, 0), (3, 40)])
def test_the_compiled_step_plan_on_threads_is_the_same(builder, ranks, n_hot, threads):
    """The step's table numbered on several threads (each numbering its classes of keys): the same arrays,
    element for element, as on one thread, keys in the same order; with ids past the dense numbers (the hash
    table) and frequent ones, over several calls (each thread's dense numbers left zeros between them)."""
    from hvd_w2v.parallel.shard import RowPlan
    from hvd_w2v.training.batches import Batch
    from hvd_w2v.training.loop import StepPlan

    rng = np.random.default_rng(9)
    vocab = 400_000
    draw = lambda shape: np.where(rng.random(shape) < 0.7, rng.integers(0, 300, shape),  # noqa: E731
                                  rng.integers(0, vocab, shape))
    plan = RowPlan(vocab, ranks)
    for n in (1500, 700, 2000):
        contexts = draw((n, 10))
        contexts[rng.random(contexts.shape) < 0.3] = -1
        contexts[:, 0] = draw(n)
        negatives = draw((n, 5))
        centres = draw(n)
        negatives[::7, 0] = centres[::7]  # noise words equal to their centre
        for sg in (True, False):
            batch = Batch(centres, contexts, negatives)
            one, many = (StepPlan.of(batch, plan, n_hot, sg, 1, t) for t in (1, threads))
            assert (one.cold, one.table) == (many.cold, many.table)
            for field in ("keys", "owned", "sgd"):
                assert np.array_equal(getattr(one, field), getattr(many, field)), field
            assert np.array_equal(one.ctx[0], many.ctx[0]) and np.array_equal(one.tgt[0], many.tgt[0])
