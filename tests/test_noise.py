"""Noise words: vocab.CountRuns.draw_noise, the inverse CDF of count^ns_exponent (word2vec's 0.75) read from runs
of equal counts."""
import numpy as np
import pytest

from hvd_w2v.text.vocab import NOISE_POWER, CountRuns


def runs(seed=0):
    rng = np.random.default_rng(seed)
    counts = np.unique(np.minimum(rng.zipf(1.3, 20000), 10**6) + 4)[::-1]  # distinct, descending, >= 5
    return CountRuns(counts, rng.integers(1, 40, len(counts)), 1e-3)


def test_draws_equal_a_binary_search_of_the_cdf():
    """The guide buckets only say where to start looking: every draw must be the binary search's, including
    uniforms at and just below each run's edge, 0, and the largest float below 1."""
    r = runs()
    edges = r.cum[:-1] / r.cum[-1]
    u = np.concatenate([np.random.default_rng(1).random(200_000), edges, np.nextafter(edges, 0),
                        [0.0, np.nextafter(1.0, 0)]])
    u = u[(u >= 0) & (u < 1)]
    x = u * r.cum[-1]
    run = np.minimum(np.searchsorted(r.cum, x, side="right") - 1, len(r.counts) - 1)
    within = ((x - r.cum[run]) / r.weight[run]).astype(np.int64)
    expected = r.starts[run] + np.minimum(within, r.starts[run + 1] - r.starts[run] - 1)
    assert np.array_equal(r.draw_noise(u), expected)
    assert np.array_equal(r.draw_noise(u.reshape(-1, 1)).ravel(), expected)  # any shape


@pytest.mark.parametrize("exponent", [NOISE_POWER, 1.0, 0.0, -0.5])
def test_each_word_is_drawn_in_proportion_to_its_count_to_the_power(exponent):
    """--ns-exponent (gensim's ns_exponent): 1 by frequency, 0 every word alike, below 0 rare words more."""
    r = CountRuns(np.array([1000, 100, 10]), np.array([1, 2, 3]), 1e-3, exponent)  # ids 0; 1, 2; 3, 4, 5
    drawn = np.bincount(r.draw_noise(np.random.default_rng(2).random(600_000)), minlength=6) / 600_000
    weight = np.array([1000, 100, 100, 10, 10, 10], np.float64) ** exponent
    np.testing.assert_allclose(drawn, weight / weight.sum(), atol=3e-3)


@pytest.mark.parametrize("draws", [1, 300, 20_000])
def test_the_distinct_words_of_noise_draws_are_expected_and_bounded_as_the_memory_plan_says(draws):
    """The memory plan bounds a super-step's noise rows by their expected distinct count and a tail margin
    (memory.noise_rows): over repeated draws the mean is the expectation, and no repeat passes the bound,
    which stays below the draws' count once draws repeat words."""
    from hvd_w2v.planning.memory import noise_rows

    r = runs(3)
    rng = np.random.default_rng(4)
    found = np.array([len(np.unique(r.draw_noise(rng.random(draws)))) for _ in range(200)])
    expected = r.noise_distinct(draws)
    assert abs(found.mean() - expected) <= 4 * max(found.std(), 0.05) / np.sqrt(len(found)) + 0.05
    assert found.max() <= noise_rows(expected)
    if draws == 20_000:  # many draws of the head words: the bound is far below one row a draw
        assert noise_rows(expected) < 0.6 * draws
    assert r.noise_distinct(0) == 0


def test_a_shard_s_noise_weight_is_its_group_s_weight_over_every_word_s():
    """Local negatives (localsgd.noise_weights): without a head, G times the share of the noise weight its
    group holds, the groups those of the ranks that would host the shards on G ranks; their mean over the
    groups 1, so that each word is, in expectation, the negative it is with one group. With a head, the head's
    weight and G times the rest of the group's. One group: no weights."""
    from types import SimpleNamespace

    from hvd_w2v.common.config import Config
    from hvd_w2v.training.localsgd import noise_weights

    r = CountRuns(np.array([1000, 100, 10]), np.array([1, 2, 3]), 1e-3)  # ids 0; 1, 2; 3, 4, 5: group 0 heavy
    voc = SimpleNamespace(runs=r)
    shares = np.array([r.noise_group(g, 3).cum[-1] / r.cum[-1] / 3 for g in range(3)])  # weighed at G times
    got = noise_weights(voc, Config(shards=6, noise_groups=3, noise_head=0), range(6))
    np.testing.assert_allclose(got, 3 * shares[[0, 0, 1, 1, 2, 2]], rtol=1e-6)
    assert got.dtype == np.float32 and abs(shares.sum() - 1) < 1e-12 and shares[0] > 2 * shares[1]
    weight = np.array([1000, 100, 100, 10, 10, 10], np.float64) ** 0.75
    headed = noise_weights(voc, Config(shards=6, noise_groups=3, noise_head=1), range(6))
    group = weight[0] + 3 * np.array([weight[3], weight[1] + weight[4], weight[2] + weight[5]])  # id 0 the head
    np.testing.assert_allclose(headed, group[[0, 0, 1, 1, 2, 2]] / weight.sum(), rtol=1e-6)
    assert noise_weights(voc, Config(shards=6), range(6)) is None
