"""Hierarchical softmax end to end on real ranks: the same vectors on every layout and on both step paths, a
quality floor, and its refusals."""
import numpy as np
import pytest

from conftest import launch
from hvd_w2v.synthetic import generate

ATOL = 1e-5  # test_train.py's: the order of float32 sums, over this test's steps


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "pairs.txt"
    generate(str(path), 60000, vocab=1000, pairs=20, first=20, seed=0)  # 20 planted synonym pairs
    return str(path)


def train(corpus, out, nranks, *options, env=None, threads=1):
    result = launch(nranks, ["hvd-w2v", "train", corpus, "--out", out, "--epochs", "2", "--batch-words", "256",
                             "--hs", "1", "--negative", "0", "--format", "binary", "--quiet", "--show", "",
                             *options], timeout=240, env=env, threads=threads)
    assert result.ok, result.output[-3000:]
    from gensim.models import KeyedVectors

    return KeyedVectors.load_word2vec_format(f"{out}/vectors.bin", binary=True)


@pytest.mark.parametrize("arch, layouts", [
    ("--sg", [(3, 1, ["--hot-rows", "50"], None)]),
    ("--cbow", [(2, 2, [], None), (2, 1, [], {"HVD_W2V_KERNEL": "python"})]),
], ids=["skipgram", "cbow"])
def test_the_same_vectors_on_every_layout(corpus, tmp_path, arch, layouts):
    """1 rank against 3 (the top inner nodes hot, summed by Horovod), 2 x 2 threads and TensorFlow's graph with
    numpy's copies: the order of float32 sums apart, the same vectors. The skip-gram run finds most of the
    planted synonyms among each word's 10 nearest (gensim's hs=1 finds them all; untrained, about none)."""
    ref = train(corpus, str(tmp_path / "one"), 1, arch)
    assert np.abs(ref.vectors).max() > 0.05  # trained, not still near the initial +-0.01
    for nranks, threads, options, env in layouts:
        got = train(corpus, str(tmp_path / f"{nranks}x{threads}"), nranks, arch, *options, env=env, threads=threads)
        assert got.index_to_key == ref.index_to_key
        diff = np.abs(got.vectors - ref.vectors).max()
        assert diff < ATOL, f"{nranks} x {threads} ({env}) differs from 1 rank by {diff:.2e}"
    if arch == "--sg":
        found = sum(f"w{i + 1}" in [w for w, _ in ref.most_similar(f"w{i}", topn=10)] for i in range(20, 60, 2))
        assert found >= 15, f"only {found} of 20 planted synonyms found"


def test_one_objective_a_run_and_the_exact_step():
    """--hs 1 goes with --negative 0 and --negative 0 with --hs 1; the shard-local mode has no hierarchical
    softmax, so it is refused when asked for and not chosen on several hosts."""
    from hvd_w2v.common.config import Config
    from hvd_w2v.common.errors import UserError

    with pytest.raises(UserError, match="--negative 0 trains no noise words: give --hs 1"):
        Config(negative=0)
    with pytest.raises(UserError, match="--hs 1 trains hierarchical softmax alone: give --negative 0"):
        Config(hs=1)
    with pytest.raises(UserError, match=r"shard-local SGD \(--shards 4\) has no hierarchical softmax"):
        Config(hs=True, negative=0, shards=4).settled(hosts=2, threads=4)
    assert Config(hs=True, negative=0).settled(hosts=2, threads=64).shards == 0
    assert Config().settled(hosts=2, threads=64).shards == 64
