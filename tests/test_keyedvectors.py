"""hvd_w2v.queries.keyedvectors against gensim's own KeyedVectors on the same vectors file, at 1 and 3 ranks.

The vectors are test_evaluate's hand-made ones (planted and noisy analogies, case variants, words beyond the
restriction) plus words that are not ASCII. Every method's answer is compared with gensim's, and with the
answers of the other ranks (each rank must get the same). One launched body per rank count holds all the
checks, since each launch pays for TensorFlow's import on every rank.
"""
import os
import shutil

import numpy as np
import pytest

from test_evaluate import DIM, RESTRICT, vocabulary, write_files

EXTRA = ["café", "Café", "naïve"]  # not ASCII; "Café" a rarer case variant of "café"
ATOL = 1e-5  # float32 dot products summed in another order than gensim's (BLAS, row blocks)


def write_vectors(folder):
    """kv.bin / kv.txt: test_evaluate's vocabulary and the EXTRA words, written by gensim."""
    from gensim.models import KeyedVectors

    words, vectors = vocabulary()
    rng = np.random.default_rng(3)
    words = words + EXTRA
    vectors = np.vstack([vectors, rng.normal(size=(len(EXTRA), DIM)).astype(np.float32)])
    kv = KeyedVectors(DIM)
    kv.add_vectors(words, vectors)
    kv.save_word2vec_format(f"{folder}/kv.bin", binary=True)
    kv.save_word2vec_format(f"{folder}/kv.txt", binary=False)
    return words, vectors


def write_run(c, folder, words, vectors, step=3):
    """A run folder as train leaves one with --no-final-checkpoint: vocab.txt, a checkpoint of step ``step``
    written by this job's ranks (W_in = ``vectors``), run.json "finished" and the final vectors.bin.
    Collective."""
    from hvd_w2v.common.config import Config
    from hvd_w2v.parallel.shard import RowPlan
    from hvd_w2v.queries import runfolder
    from hvd_w2v.store import checkpoint

    run = f"{folder}/run"
    if c.rank == 0:
        os.makedirs(run)
        with open(f"{run}/vocab.txt", "wb") as f:
            f.writelines(f"{w} {1000 - i}\n".encode() for i, w in enumerate(words))
        shutil.copy(f"{folder}/kv.bin", f"{run}/vectors.bin")
    c.barrier()
    cfg = Config(dim=DIM, batch_words=64)
    sha = checkpoint.file_sha256(c, f"{run}/vocab.txt")
    meta = checkpoint.meta(cfg, len(words), sha, stream_length=640)  # 10 steps an epoch
    ids = RowPlan(len(words), c.size).ids(c.rank)
    w_out = np.random.default_rng(5).normal(size=vectors.shape).astype(np.float32)

    class Rows:  # what checkpoint.save reads of a loop.ShardedModel
        rows = np.ascontiguousarray(np.stack([vectors[ids], w_out[ids]], axis=1))
        w_in = rows[:, 0]

    checkpoint.save(c, f"{run}/{runfolder.CHECKPOINTS}", Rows, step, meta)
    if c.rank == 0:
        runfolder.write_record(run, {"state": "finished", "total_steps": meta["total_steps"]})
    c.barrier()
    return run, meta["total_steps"]


def same(a, b):
    """gensim's [(word, score)] and ours: the same words in the same order, scores within ATOL."""
    assert [w for w, _ in a] == [w for w, _ in b], (a, b)
    np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=ATOL)


def same_pairs(ours, theirs):
    """evaluate_word_pairs' (pearson, spearman, oov_ratio) against gensim's (scipy's statistics)."""
    for mine, ref in zip(ours[:2], theirs[:2]):
        assert mine[0] == pytest.approx(ref[0], abs=1e-6, nan_ok=True)
        assert mine[1] == pytest.approx(ref[1], rel=1e-5, abs=1e-12, nan_ok=True)
    assert ours[2] == pytest.approx(theirs[2], abs=1e-12)


@pytest.mark.mpi(1, 3, timeout=150)
def test_keyedvectors_match_gensim(comm, nranks, tmp_path_factory, capsys):
    from gensim.models import KeyedVectors as GensimKV

    from hvd_w2v.common.errors import UserError
    from hvd_w2v.parallel import comm as comm_mod
    from hvd_w2v.queries.keyedvectors import load

    c = comm_mod.init()
    folder = comm.bcast(str(tmp_path_factory.mktemp("kv")) if c.rank == 0 else None)
    if c.rank == 0:
        write_files(folder)  # q.txt, pairs.tsv, pairs.txt (and test_evaluate's own vectors)
        write_vectors(folder)
    c.barrier()
    q, tsv = f"{folder}/q.txt", f"{folder}/pairs.tsv"
    g = GensimKV.load_word2vec_format(f"{folder}/kv.bin", binary=True)
    words, vectors = g.index_to_key, g.vectors
    answers = []  # everything returned, to compare over the ranks at the end

    for name in ("kv.bin", "kv.txt"):
        kv = load(f"{folder}/{name}")
        gt = g if name == "kv.bin" else GensimKV.load_word2vec_format(f"{folder}/{name}")
        assert len(kv) == len(gt) == 265 and kv.vector_size == DIM and str(kv) == str(gt)
        assert kv.index_to_key[:10] == gt.index_to_key[:10]
        assert kv.index_to_key[250::7] == gt.index_to_key[250::7] and kv.index_to_key[-1] == "naïve"
        assert kv.index_to_key[5] == gt.index_to_key[5] and list(kv.index_to_key) == gt.index_to_key
        with pytest.raises(IndexError):
            kv.index_to_key[265]
        assert "Café" in kv.index_to_key and kv.index_to_key.index("x0") == gt.get_index("x0")
        assert kv.key_to_index["café"] == gt.key_to_index["café"] and kv.key_to_index.get("nope") is None
        assert kv.get_index("Q3") == gt.get_index("Q3") and kv.get_index(7) == 7 and kv.get_index("nope", -1) == -1
        assert ("x0" in kv, "nope" in kv, 264 in kv, 265 in kv, "X0" in kv) == (True, False, True, False, True)
        for w in ("x0", "Café", "e19"):
            assert np.array_equal(kv[w], gt[w]) and kv[w].dtype == np.float32
            np.testing.assert_allclose(kv.get_vector(w, norm=True), gt.get_vector(w, norm=True), atol=1e-6)
        assert np.array_equal(kv[["y1", "naïve", 3]], gt[["y1", "naïve", 3]])
        for bad in (lambda: kv["nope"], lambda: kv.get_index("nope"), lambda: kv.similarity("x0", "nope"),
                    lambda: kv.most_similar(positive=["x0"], negative=["nope"]), lambda: kv.key_to_index["nope"]):
            with pytest.raises(KeyError):
                bad()
        for a, b in (("x0", "y0"), ("café", "Café"), ("d3", "q4")):
            assert kv.similarity(a, b) == pytest.approx(float(gt.similarity(a, b)), abs=1e-6)
            assert kv.distance(a, b) == pytest.approx(float(gt.distance(a, b)), abs=1e-6)

        vec = vectors[12] - 0.5 * vectors[40]
        queries = [dict(positive="x0"), dict(positive=["café"], topn=20), dict(positive=["y1", "x2"], negative=["x1"]),
                   dict(positive=[("y1", 2.0), "x2"], negative=[("x1", -0.5)], topn=7), dict(positive=[vec, "d0"]),
                   dict(positive=[17], negative="d5", topn=3), dict(positive="x0", restrict_vocab=50),
                   dict(positive="x0", clip_start=30, clip_end=100), dict(positive=["e1"], topn=1),
                   dict(positive="x0", topn=300), dict(positive=np.vstack([vectors[1], vectors[2]]), negative=[3])]
        for kwargs in queries:
            got = kv.most_similar(**kwargs)
            same(gt.most_similar(**kwargs), got)
            assert all(type(w) is str and type(s) is float for w, s in got)
            answers.append(got)
        same(gt.similar_by_key("y5", topn=4), kv.similar_by_key("y5", topn=4))
        same(gt.similar_by_vector(vec, topn=4), kv.similar_by_vector(vec, topn=4))
        assert kv.most_similar("x0", topn=0) == [] == gt.most_similar("x0", topn=0)
        for kwargs in (dict(), dict(restrict_vocab=100), dict(clip_start=10, clip_end=400)):
            full = kv.most_similar(["x3", "y2"], negative=["x2"], topn=None, **kwargs)
            ref = gt.most_similar(["x3", "y2"], negative=["x2"], topn=None, **kwargs)
            assert full.shape == ref.shape and full.dtype == np.float32
            np.testing.assert_allclose(full, ref, atol=ATOL)
            answers.append(full.tolist())

        # gensim's other queries of the vectors: the same answers
        for kwargs in (dict(positive=["y1", "x2"], negative=["x1"]), dict(positive="x0", topn=5),
                       dict(positive=[vec, "d0"], negative=["d5"], topn=4)):
            got = kv.most_similar_cosmul(**kwargs)
            same(gt.most_similar_cosmul(**kwargs), got)
            answers.append(got)
        np.testing.assert_allclose(kv.most_similar_cosmul(["x3"], ["x2"], topn=None),
                                   gt.most_similar_cosmul(["x3"], ["x2"], topn=None), atol=ATOL)
        assert kv.most_similar_cosmul("x0", topn=0) == [] == gt.most_similar_cosmul("x0", topn=0)
        for kwargs in (dict(keys=["x0", "y1"]), dict(keys=["x0", "nope", vec], weights=[1.0, 2.0, -0.5]),
                       dict(keys=["d3", 7], pre_normalize=False, post_normalize=True)):
            np.testing.assert_allclose(kv.get_mean_vector(**kwargs), gt.get_mean_vector(**kwargs), atol=1e-6)
        for call, error in ((lambda: kv.get_mean_vector(["x0", "nope"], ignore_missing=False), KeyError),
                            (lambda: kv.get_mean_vector([]), ValueError),
                            (lambda: kv.n_similarity([], ["x0"]), ZeroDivisionError),
                            (lambda: kv.doesnt_match(["nope"]), ValueError)):
            with pytest.raises(error):
                call()
        assert kv.n_similarity(["x0", "y1"], ["d3", "café"]) == pytest.approx(
            float(gt.n_similarity(["x0", "y1"], ["d3", "café"])), abs=1e-6)
        for ws in (["x0", "x1", "x2", "café"], ["y1", "y2", "nope", "d0", "e19"]):
            assert kv.doesnt_match(ws) == gt.doesnt_match(ws)
            answers.append(kv.doesnt_match(ws))
        for a, b in (("x0", "y0"), ("café", "naïve"), ("d3", "q4"), ("e19", "x0")):
            assert kv.rank(a, b) == gt.rank(a, b) and kv.closer_than(a, b) == gt.closer_than(a, b), (a, b)
            answers.append(kv.rank(a, b))

        for kwargs in (dict(restrict_vocab=RESTRICT), dict(), dict(restrict_vocab=100, dummy4unknown=True),
                       dict(restrict_vocab=RESTRICT, case_insensitive=False)):
            score, sections = kv.evaluate_word_analogies(q, **kwargs)
            assert (score, sections) == gt.evaluate_word_analogies(q, **kwargs), kwargs
            answers.append((score, sections))
        planted = sections[0]
        assert planted["section"] == "planted" and len(planted["correct"]) == 24 and not planted["incorrect"]
        cosmul = kv.evaluate_word_analogies(q, restrict_vocab=RESTRICT, similarity_function="most_similar_cosmul")
        assert cosmul[1][-1]["section"] == "Total accuracy" and cosmul != kv.evaluate_word_analogies(q, RESTRICT)

        for path, kwargs in ((tsv, dict()), (tsv, dict(restrict_vocab=100)), (tsv, dict(case_insensitive=False)),
                             (tsv, dict(dummy4unknown=True)), (f"{folder}/pairs.txt", dict(delimiter="  "))):
            got = kv.evaluate_word_pairs(path, **kwargs)
            same_pairs(got, gt.evaluate_word_pairs(path, **kwargs))
            assert got[0].statistic is got[0][0] and got[1].pvalue is got[1][1] and got[1].correlation is got[1][0]
            answers.append(got)
        with pytest.raises(UserError, match="holds no word pairs"):  # gensim: ValueError
            kv.evaluate_word_pairs(f"{folder}/pairs.txt")  # no tab in it

    # Written by all ranks, read back by gensim: the same words and vectors (text: 6 decimals, read as float32).
    kv.save_word2vec_format(f"{folder}/out.bin", binary=True)
    kv.save_word2vec_format(f"{folder}/out.txt")
    for name, atol in (("out.bin", 0), ("out.txt", 1e-6)):
        back = GensimKV.load_word2vec_format(f"{folder}/{name}", binary=name.endswith(".bin"))
        assert back.index_to_key == g.index_to_key
        np.testing.assert_allclose(back.vectors, g.vectors, atol=atol, rtol=0)
    with pytest.raises(UserError, match="prefix, append not supported"):
        kv.save_word2vec_format(f"{folder}/no.bin", prefix="x", append=True)
    with pytest.raises(UserError, match="cannot write"):
        kv.save_word2vec_format(f"{folder}/kv.bin/no.bin")

    # A run folder and a checkpoint folder: the same vectors and answers as the word2vec file.
    run, total = write_run(c, folder, words, vectors)
    capsys.readouterr()
    for path in (run, f"{run}/checkpoints/step-000000003"):
        kv = load(path, step=3 if path == run else None)
        assert kv.index_to_key[:] == g.index_to_key and np.array_equal(kv[["x0", "naïve"]], g[["x0", "naïve"]])
        same(g.most_similar("x0"), kv.most_similar("x0"))
    err = capsys.readouterr().err
    if c.rank == 0:
        ranks = f"{c.size} rank{'s' if c.size != 1 else ''}"  # "1 rank", "3 ranks"
        assert f"load: checkpoint {run}/checkpoints/step-000000003: step 3 of {total}, written on {ranks}; " \
               f"265 words of {DIM} dimensions, RowPlan(265 words over {ranks}:" in err
        assert f"note: the run finished ({total} steps); its final vectors are {run}/vectors.bin" in err
    else:
        assert err == ""
    load(f"{folder}/kv.txt")
    err = capsys.readouterr().err
    assert (f"load: {folder}/kv.txt: 265 words of {DIM} dimensions, RowPlan(" in err) == (c.rank == 0)

    for call, message in [(lambda: load(f"{folder}/kv.bin", step=3), "--step chooses a checkpoint"),
                          (lambda: load(run, step=4), "no checkpoint of step 4"),
                          (lambda: load(f"{folder}/missing.bin"), "cannot read"),
                          (lambda: load(f"{folder}/cut.bin"), "is truncated"),
                          (lambda: kv.most_similar(), "at least one positive or negative"),
                          (lambda: kv.most_similar("x0", topn=2.5), "topn must be"),
                          (lambda: kv.most_similar([np.zeros(3)]), "shape"),
                          (lambda: kv.evaluate_word_analogies(f"{folder}/nothing.txt"), "cannot read"),
                          (lambda: kv.evaluate_word_analogies(q, similarity_function="x"), "similarity_function")]:
        with pytest.raises(UserError, match=message):
            call()

    # The same answers on every rank.
    first = c.allgather(repr(answers))[0]
    assert repr(answers) == first


def test_pvalues_match_scipy():
    """evaluate.correlation_pvalue (no scipy) against scipy.stats' pearsonr and spearmanr."""
    from scipy import stats

    from hvd_w2v.queries.evaluate import _pearson, _ranks, betainc, correlation_pvalue
    from scipy.special import betainc as ref_betainc

    rng = np.random.default_rng(0)
    for n in (3, 4, 10, 64, 353, 999, 30000):
        x = rng.normal(size=n)
        y = 0.2 * x + rng.normal(size=n)
        r = _pearson(x, y)
        pearson, spearman = stats.pearsonr(x, y), stats.spearmanr(x, y)
        assert r == pytest.approx(pearson[0], abs=1e-12)
        assert correlation_pvalue(r, n) == pytest.approx(pearson[1], rel=1e-9, abs=1e-300)
        rho = _pearson(_ranks(x), _ranks(y))
        assert rho == pytest.approx(spearman[0], abs=1e-12)
        assert correlation_pvalue(rho, n, spearman=True) == pytest.approx(spearman[1], rel=1e-9, abs=1e-300)
    assert correlation_pvalue(-1.0, 2) == stats.pearsonr([1, 2], [2, 1])[1] == 1.0
    assert np.isnan(correlation_pvalue(-1.0, 2, spearman=True)) and np.isnan(correlation_pvalue(float("nan"), 9))
    assert correlation_pvalue(1.0, 10) == 0.0
    for a, b, x in rng.uniform(0, 1, size=(200, 3)) * [300, 20, 1] + [0.01, 0.01, 0]:
        assert betainc(a, b, x) == pytest.approx(ref_betainc(a, b, x), rel=1e-9, abs=1e-300)


def test_queries_read_training_s_strided_w_in_a_block_at_a_time(monkeypatch):
    """At a run's end the queries take W_in as a view of training's interleaved table (loop.ShardedModel.w_in):
    no copy of it is made (a copy is half the model again, past the memory plan), and the cosines, read a block
    of rows at a time, are those of the whole matrix."""
    from types import SimpleNamespace

    from hvd_w2v.queries import vectors

    monkeypatch.setattr(vectors, "END_BLOCK_BYTES", 3 * 4 * 8)  # 3 rows of dim 8 a block: 11 rows in 4 blocks
    table = np.random.default_rng(0).normal(size=(11, 2, 8)).astype(np.float32)
    w_in = table[:, 0]
    sharded = vectors.ShardedVectors(None, None, SimpleNamespace(row_words=[b"w%d" % i for i in range(11)]), w_in)
    assert np.shares_memory(sharded.vectors, table) and sharded.block == 3
    queries = np.random.default_rng(1).normal(size=(2, 8)).astype(np.float32)
    whole = (w_in @ queries.T) / np.linalg.norm(w_in, axis=1)[:, None]
    np.testing.assert_allclose(sharded.cosines(queries), whole, rtol=1e-5)
    np.testing.assert_allclose(sharded.cosines(queries, slice(2, 9)), whole[2:9], rtol=1e-5)
