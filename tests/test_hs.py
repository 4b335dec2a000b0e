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
    result = launch(nranks, ["hvd-w2v", "train", corpus, "--out", out, "--epochs", "2", "--batch-words", "1024",
                             "--hs", "1", "--negative", "0", "--format", "binary", "--quiet", "--show", "",
                             *options], timeout=240, env=env, threads=threads)
    assert result.ok, result.output[-3000:]
    from gensim.models import KeyedVectors

    return KeyedVectors.load_word2vec_format(f"{out}/vectors.bin", binary=True)


SHARDS = ["--shards", "4", "--superstep", "256"]


@pytest.mark.parametrize("arch, mode, layouts", [
    ("--sg", [], [(2, 1, [], None)]),
    ("--cbow", [*SHARDS, "--hot-rows", "50", "--substep", "64", "--epochs", "1"], [(2, 1, [], None)]),
], ids=["skipgram", "cbow-shards-hot-rows-inside"])
def test_the_same_vectors_on_every_layout(corpus, tmp_path, arch, mode, layouts):
    """The exact step: 1 rank against 2; shard-local SGD, the tree's top hot and merged inside the super-step
    through Horovod: 1 rank against 2 hosting the same shards. The order of float32 sums apart,
    the same vectors. The exact step's skip-gram finds most of the planted synonyms among each word's 10 nearest
    (gensim's hs=1 finds them all; untrained, about none). (The sums of the compiled step, the graph and
    shard-local SGD's kernel, skip-gram and CBOW: test_sgns.py, test_localsgd.py.)"""
    ref = train(corpus, str(tmp_path / "one"), 1, arch, *mode)
    assert np.abs(ref.vectors).max() > 0.05  # trained, not still near the initial +-0.01
    for nranks, threads, options, env in layouts:
        got = train(corpus, str(tmp_path / f"{nranks}x{threads}"), nranks, arch, *mode, *options, env=env,
                    threads=threads)
        assert got.index_to_key == ref.index_to_key
        diff = np.abs(got.vectors - ref.vectors).max()
        assert diff < ATOL, f"{nranks} x {threads} ({env}) differs from 1 rank by {diff:.2e}"
    if arch == "--sg" and not mode:
        found = sum(f"w{i + 1}" in [w for w, _ in ref.most_similar(f"w{i}", topn=10)] for i in range(20, 60, 2))
        assert found >= 15, f"only {found} of 20 planted synonyms found"


def test_one_objective_a_run(tmp_path):
    """--hs 1 goes with --negative 0 and --negative 0 with --hs 1; --update keeps a tree it cannot rebuild."""
    import hvd_w2v
    from hvd_w2v.common.config import Config
    from hvd_w2v.common.errors import UserError

    with pytest.raises(UserError, match="--update with --hs 1 is not supported"):
        hvd_w2v.train(str(tmp_path / "new.txt"), out=str(tmp_path), update=True, hs=1, negative=0)
    with pytest.raises(UserError, match="--negative 0 trains no noise words: give --hs 1"):
        Config(negative=0)
    with pytest.raises(UserError, match="--hs 1 trains hierarchical softmax alone: give --negative 0"):
        Config(hs=1)
