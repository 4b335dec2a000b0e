"""Evaluation on the sharded model (queries/evaluate.py): the same scores as gensim's evaluators, on any rank count.

The vectors are made by hand: a "planted" section whose analogies hold by construction (y_i = x_i + r), a
"noisy" one where about half do, random distractors, case variants (gensim folds case and takes the most
frequent variant), and words beyond ``--restrict`` or outside the vocabulary (questions skipped).
"""
import numpy as np
import pytest

from conftest import launch

DIM = 16
RESTRICT = 239


def vocabulary():
    """(words in id order, vectors float32[V, DIM]); V = 262: not a multiple of 2 or 3."""
    rng = np.random.default_rng(7)
    r, r2 = rng.normal(size=DIM), rng.normal(size=DIM)
    vec = {}
    for i in range(10):
        vec[f"x{i}"] = rng.normal(size=DIM)
        vec[f"y{i}"] = vec[f"x{i}"] + r
        vec[f"p{i}"] = rng.normal(size=DIM)
        vec[f"q{i}"] = vec[f"p{i}"] + r2 + 1.2 * rng.normal(size=DIM)
    for i in range(200):
        vec[f"d{i}"] = rng.normal(size=DIM)
    vec["Q3"] = rng.normal(size=DIM)  # a case variant *more* frequent than q3: gensim's "Q3" means this one
    core = [w for w in vec if w not in ("x9", "y9")]
    order = [core[i] for i in rng.permutation(len(core))]
    order.remove("Q3")
    order.insert(order.index("q3"), "Q3")
    tail = ["x9", "y9", "X0"] + [f"e{i}" for i in range(20)]  # ids >= RESTRICT: never candidates
    for w in tail[2:]:
        vec[w] = rng.normal(size=DIM)
    words = order + tail
    assert len(words) == len(set(words)) == 262 and words.index("x9") == RESTRICT
    return words, np.array([vec[w] for w in words], np.float32)


def write_files(folder):
    from gensim.models import KeyedVectors

    words, vectors = vocabulary()
    kv = KeyedVectors(DIM)
    kv.add_vectors(words, vectors)
    kv.save_word2vec_format(f"{folder}/v.bin", binary=True)
    kv.save_word2vec_format(f"{folder}/v.txt", binary=False)
    with open(f"{folder}/q.txt", "w") as f:
        f.write(": planted\n")
        for i in range(10):
            for j in range(10):
                if i != j and (i + j) % 3 == 0:
                    f.write(f"x{i} y{i} x{j} y{j}\n")  # those with x9/y9 are beyond RESTRICT: skipped
        f.write(": noisy\n")
        for i in range(10):
            for j in range(10):
                if i != j:
                    f.write(f"P{i} q{i} p{j} Q{j}\n")
        f.write("p1 q1 zzz q2\nnot a question\n\n")  # one out of vocabulary; one malformed (line 124); blank
    rng = np.random.default_rng(1)
    lines = ["# word1\tword2\tscore"]
    for _ in range(60):
        a, b = rng.choice(240, 2, replace=False)
        gold = float(vectors[a] @ vectors[b] / np.linalg.norm(vectors[a]) / np.linalg.norm(vectors[b]))
        lines.append(f"{words[a].upper()}\t{words[b]}\t{gold + rng.normal(scale=0.3):.2f}")
    lines += ["x9\ty0\t5.0", "zzz\tx1\t3.0", "Q3\tq3\t1.0", "foo\tbar\t2.0"]
    lines += ["x1\tx2", "x3\tx4\tmany"]  # malformed, lines 66 and 67: skipped (gensim logs them), counted
    open(f"{folder}/pairs.tsv", "w").write("\n".join(lines) + "\n")
    open(f"{folder}/pairs.txt", "w").write("\n".join(x.replace("\t", "  ") for x in lines) + "\n")
    with open(f"{folder}/v.bin", "rb") as f:
        data = f.read()
    open(f"{folder}/cut.bin", "wb").write(data[:-100])
    open(f"{folder}/cut.txt", "w").write("".join(open(f"{folder}/v.txt").readlines()[:-3]))
    open(f"{folder}/junk.txt", "w").write("hello world\n")
    open(f"{folder}/badnum.txt", "w").write("2 2\na 0.1 0.2\nb 0.1 x\n")
    open(f"{folder}/noquestions.txt", "w").write(": s\nx0 y0 x1\n\nx0 y0\n")
    open(f"{folder}/nopairs.tsv", "w").write("word1\tword2\tscore\nx0\ty0\nx0\ty0\tmuch\n")


def gensim_cosmul(kv, path, restrict):
    """Per-section correct counts with gensim's most_similar_cosmul scores, gensim's case folding and skips."""
    ok = {k.upper(): kv.get_index(k) for k in reversed(kv.index_to_key[:restrict])}
    counts, section = {}, None
    for line in open(path):
        if line.startswith(": "):
            section = line[2:].strip()
            counts[section] = [0, 0]
            continue
        q = [w.upper() for w in line.split()]
        if len(q) != 4 or any(w not in ok for w in q):
            continue
        a, b, c, d = q
        key = kv.index_to_key
        dists = kv.most_similar_cosmul(positive=[key[ok[b]], key[ok[c]]], negative=[key[ok[a]]], topn=None)[:restrict]
        dists = dists.copy()
        dists[[i for i in range(restrict) if kv.index_to_key[i].upper() in (a, b, c)]] = -np.inf
        counts[section][0] += kv.index_to_key[int(np.argmax(dists))].upper() == d
        counts[section][1] += 1
    return [(name, c, t) for name, (c, t) in counts.items()]


@pytest.mark.mpi(1, 3, timeout=120)
def test_scores_match_gensim(comm, nranks, tmp_path_factory, capsys):
    from gensim.models import KeyedVectors

    from hvd_w2v.common.errors import UserError
    from hvd_w2v.parallel import comm as comm_mod
    from hvd_w2v.queries.evaluate import analogies, similarity
    from hvd_w2v.queries.vectors import load

    c = comm_mod.init()
    folder = comm.bcast(str(tmp_path_factory.mktemp("eval")) if c.rank == 0 else None)
    if c.rank == 0:
        write_files(folder)
    c.barrier()
    q = f"{folder}/q.txt"
    for name in ("v.bin", "v.txt"):
        vectors = load(c, f"{folder}/{name}")
        kv = KeyedVectors.load_word2vec_format(f"{folder}/{name}", binary=name.endswith(".bin"))
        assert vectors.plan.vocab_size == len(kv) == 262
        np.testing.assert_allclose(vectors.unit, kv.get_normed_vectors()[c.rank::c.size], atol=1e-6)

        got = analogies(vectors, q, restrict=RESTRICT)
        score, sections = kv.evaluate_word_analogies(q, restrict_vocab=RESTRICT)
        expected = [(s["section"], len(s["correct"]), len(s["correct"]) + len(s["incorrect"])) for s in sections]
        assert got["sections"] == expected[:-1]
        assert (got["correct"], got["total"]) == expected[-1][1:] and got["accuracy"] == score
        planted = got["sections"][0]
        assert planted[1] == planted[2] == 24  # holds by construction; the 6 questions with x9/y9 skipped
        assert 0 < got["sections"][1][1] < got["sections"][1][2] == 90  # noisy: some right, some wrong
        assert got["skipped"] == 6 + 1 and got["questions"] == 30 + 90 + 1
        assert got["malformed"] == (1, 124)

        mul = analogies(vectors, q, restrict=RESTRICT, method="3cosmul")
        assert mul["sections"] == gensim_cosmul(kv, q, RESTRICT)
        assert mul["sections"] != got["sections"]  # the two objectives differ here

        for pairs in ("pairs.tsv", "pairs.txt"):
            sim = similarity(vectors, f"{folder}/{pairs}")
            _, (spearman, _), oov_ratio = kv.evaluate_word_pairs(f"{folder}/pairs.tsv")
            assert sim["spearman"] == pytest.approx(spearman, abs=1e-12) and sim["spearman"] > 0.5
            assert (sim["pairs"], sim["oov"]) == (62, 2) and oov_ratio == pytest.approx(100 * 2 / 64)
            assert sim["malformed"] == (2, 66)

        near = vectors.neighbors([b"x0", b"nope"], topn=5)
        if c.rank == 0:
            assert list(near) == [b"x0"]
            assert [w.decode() for _, w in near[b"x0"]] == [w for w, _ in kv.most_similar("x0", topn=5)]

    # The command line, on the same ranks: a table and neighbour lines on rank 0.
    from hvd_w2v import cli

    assert cli.main(["evaluate", f"{folder}/v.bin", "--analogies", q, "--similarity", f"{folder}/pairs.tsv",
                     "--restrict", str(RESTRICT), "--sections"]) == 0
    assert cli.main(["neighbors", f"{folder}/v.txt", "x0", "nope", "--topn", "3"]) == 0
    out = capsys.readouterr().out
    if c.rank == 0:
        assert "3cosadd, top 239" in out and "24/24 correct" in out
        assert "62 pairs" in out and "2 out of vocabulary, 2 malformed (first: line 66)" in out
        assert "7 skipped, 1 malformed (first: line 124)" in out
        assert "nope: not in the vocabulary" in out and "\nx0: " in out
    else:
        assert out == ""

    # A test file with no valid line is an error naming its malformed lines (the header line is not one).
    with pytest.raises(UserError, match=r"noquestions.txt holds no analogy questions .*: 2 malformed \(first: "
                                        r"line 2\)"):
        analogies(vectors, f"{folder}/noquestions.txt")
    with pytest.raises(UserError, match=r"nopairs.tsv holds no word pairs .*: 2 malformed \(first: line 2\)"):
        similarity(vectors, f"{folder}/nopairs.tsv")

    for bad, message in [("missing.bin", "cannot read"), ("junk.txt", "not a word2vec file"),
                         ("cut.bin", "is truncated"), ("cut.txt", "is truncated"), ("badnum.txt", "not a number")]:
        with pytest.raises(UserError, match=message):
            load(c, f"{folder}/{bad}")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evalcli")
    write_files(str(folder))
    return folder


def test_cli_bad_vectors_file(files):
    result = launch(2, ["hvd-w2v", "evaluate", files / "cut.bin"], timeout=120)
    assert result.returncode == 2, result.output[-3000:]
    assert result.output.count("hvd-w2v: error:") == 1 and "is truncated" in result.output
