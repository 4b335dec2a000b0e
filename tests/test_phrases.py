"""hvd-w2v phrases: word2phrase's output, byte for byte, on any rank count and on both passes' builds (against
tests/word2phrase.py, the port test_word2phrase_port.py holds to word2phrase.c)."""
import json
import os

import numpy as np
import pytest

from conftest import launch
from hvd_w2v.common.errors import UserError
from hvd_w2v.kernels import native
from hvd_w2v.text import phrases
from word2phrase import phrase as word2phrase


CHAIN = ("chain link " * 200).encode() + b"\n"  # every pair joinable: the joins alternate


def corpus_bytes(seed=0, lines=1500):
    """Text with what word2phrase's rules are about: planted pairs, blank lines, tabs and runs of spaces,
    CRLF line ends, words past 58 bytes, literal ``a_b`` tokens that share a pair's count, UTF-8 words, a
    last word with no newline after it, and in three equal parts with a long CHAIN line between them, so that
    the cuts of 3 ranks fall inside runs of joinable words, where a rank's joins follow the rank before's."""
    parts = [_lines(seed + k, lines // 3) for k in range(3)]
    size = min(map(len, parts))
    return CHAIN.join(p[:p.index(b"\n", size - 200) + 1] for p in parts) + b"trailing"


def _lines(seed, lines):
    g = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(300)] + ["naïve", "café", "x" * 70, "y" * 59 + "z"]
    planted = [("new", "york"), ("hong", "kong"), ("los", "angeles"), ("new", "york_times")]
    out = []
    for i in range(lines):
        words = list(g.choice(vocab, g.integers(0, 14), p=None))
        for _ in range(g.integers(0, 3)):
            a, b = planted[g.integers(len(planted))]
            words.insert(g.integers(len(words) + 1), f"{a} {b}")
        if i % 53 == 0:
            words.append("new_york")
        sep = "\t" if i % 11 == 0 else "  " if i % 7 == 0 else " "
        end = "\r\n" if i % 5 == 0 else "\n"
        out.append(sep.join(words) + end)
    return "".join(out).encode()


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("phrases") / "corpus.txt"
    path.write_bytes(corpus_bytes())
    return str(path)


def run(text, out, nranks, *options, env=None, threads=1):
    result = launch(nranks, ["hvd-w2v", "phrases", text, "--out", out, "--min-count", "3", "--threshold", "20",
                             *options], timeout=120, env=env, threads=threads)
    assert result.ok, result.output[-3000:]
    parts = sorted(n for n in os.listdir(out) if n.startswith("part."))
    assert len(parts) == nranks
    return b"".join(open(os.path.join(out, n), "rb").read() for n in parts)


@pytest.mark.parametrize("nranks, threads, env", [(2, 2, None), (1, 3, {"HVD_W2V_KERNEL": "python"})],
                         ids=["2x2", "1x3-python"])
def test_the_output_is_word2phrase_s_on_any_layout(text, tmp_path, nranks, threads, env):
    """Ranks and threads cut the text (into 4 and 3, the cuts fall inside runs of joinable words, where a part's
    joins follow the part before's, on the rank before or on its own; a rank's parts written at once and
    appended in order); the compiled passes (the owners' sums in a table a thread) and the Python ones."""
    want = word2phrase(open(text, "rb").read(), min_count=3, threshold=20.0)
    got = run(text, str(tmp_path / "out"), nranks, env=env, threads=threads)
    assert got == want
    summary = json.load(open(tmp_path / "out" / ".phrases.json"))
    joined = summary["pairs"]
    assert joined == want.count(b"_") - open(text, "rb").read().count(b"_") > 100
    assert b"_chain_" not in want and b" chain_link chain_link chain_link " in want  # no chains of three


def test_the_compiled_passes_are_the_python_ones():
    """phrases_kernel.cc's table and scans against PythonTable's, block by block with the state carried
    between blocks: the same keys and counts, the same joinable words, the same output."""
    lib = native.phrases_kernel()
    if lib is None:
        pytest.skip(f"the phrase passes cannot be built here: {native.unavailable('phrases_kernel')}")
    data = corpus_bytes(seed=1, lines=400)
    cut = data.index(b"\n", len(data) // 3) + 1  # blocks end just past a separator
    blocks = [(data[:cut], False), (data[cut:], True)]
    c, p = native.PhraseTable(lib), phrases.PythonTable()
    for table in (c, p):
        table.start(phrases.AFTER_WORD, b"w7")
        assert sum(table.count(b, drop) for b, drop in blocks) == sum(
            1 for t in phrases._tokens(data, True) if t != phrases.NEWLINE)
    (ck, cc), (pk, pc) = c.export(), p.export()
    assert dict(zip(map(bytes, ck), cc.tolist())) == dict(zip(map(bytes, pk), pc.tolist()))
    assert list(c.key("new_york".encode())) == list(phrases.key(b"new_york"))
    for table, counts in ((c, cc), (p, pc)):
        table.set(counts * 7)  # as the owners' sums might be
        table.start(phrases.AFTER_WORD, b"w7")
    flags = [[t.joinable(b, drop, 5, np.float32(30), np.float32(1e5)) for b, drop in blocks] for t in (c, p)]
    for a, b in zip(*flags):
        assert np.array_equal(a, b)
    assert sum(f.sum() for f in flags[0]) > 50
    for b, drop in blocks:
        joins = np.random.default_rng(0).random(len(phrases._tokens(b, drop))) < 0.5
        joins = joins[:sum(1 for t in phrases._tokens(b, drop) if t != phrases.NEWLINE)]
        assert c.write(b, drop, joins) == p.write(b, drop, joins)


def test_an_owner_s_sums_in_several_tables_are_one_table_s():
    """phrases.Owned: the keys summed in a table a thread, each key in its hash's share, answer as one table."""
    if native.phrases_kernel() is None:
        pytest.skip(f"the phrase passes cannot be built here: {native.unavailable('phrases_kernel')}")
    rng = np.random.default_rng(0)
    distinct = rng.integers(0, 2**64, (5000, 2), dtype=np.uint64) | np.uint64(1)
    keys = distinct[rng.integers(0, len(distinct), 20000)]  # repeats, as from several ranks
    counts = rng.integers(1, 9, len(keys))
    one, three = phrases.Owned(keys, counts, 1), phrases.Owned(keys, counts, 3)
    asked = np.concatenate((distinct, rng.integers(0, 2**64, (100, 2), dtype=np.uint64) | np.uint64(1)))
    assert three.parts == 3 and len(three) == len(one) == len(np.unique(keys, axis=0))
    assert np.array_equal(three.lookup(asked, 20), one.lookup(asked, 20))
    assert three.kept(20) == one.kept(20) > 0
    assert min(len(t) for t in three.tables) > 1000  # each share holds some


def test_long_words_and_pairs_are_cut_between_utf8_characters():
    """word2phrase.c's cuts (58 bytes a word, 59 a pair) moved before a UTF-8 character they would split, in
    both builds: the same keys, joins and output, and the output UTF-8; ASCII is cut where word2phrase.c cuts."""
    assert phrases.cut(b"x" * 70, 58) == b"x" * 58 and phrases.cut(b"\x80" * 70, 58) == b"\x80" * 58
    assert phrases.cut(("a" + "é" * 30).encode(), 58) == ("a" + "é" * 28).encode()
    g = np.random.default_rng(5)
    vocab = ["漢" * k for k in (9, 10, 18, 19, 20, 25)] + ["é" * k for k in (14, 28, 29, 30)] + ["a" + "é" * 29,
                                                                                                   "字", "x" * 60]
    data = "".join(" ".join(g.choice(vocab, 8)) + "\n" for _ in range(300)).encode()
    tables = [phrases.PythonTable()]
    if native.phrases_kernel() is not None:
        tables.append(native.PhraseTable(native.phrases_kernel()))
    outputs = []
    for table in tables:
        table.start(phrases.NONE, None)
        table.count(data, False)
        keys, counts = table.export()
        table.set(counts)
        table.start(phrases.NONE, None)
        joins = phrases._joins(table.joinable(data, False, 3, np.float32(0), np.float32(1e4)), False)
        outputs.append((dict(zip(map(bytes, keys), counts.tolist())), joins.tolist(), table.write(data, False, joins)))
    assert all(out == outputs[0] for out in outputs)
    text = outputs[0][2].decode()  # UTF-8
    assert sum(outputs[0][1]) > 100
    for word in text.replace("_", " ").split():
        assert len(word.encode()) <= 58 and any(v.startswith(word) for v in vocab)


@pytest.mark.parametrize("chunk", [phrases.JOIN_WORDS, 4])
def test_joins_alternate_along_runs_whatever_the_start(chunk, monkeypatch):
    """_joins: a word joins where it may and the word before did not, the start carried in, and from one
    JOIN_WORDS to the next."""
    monkeypatch.setattr(phrases, "JOIN_WORDS", chunk)
    g = np.random.default_rng(3)
    for _ in range(200):
        joinable = g.random(g.integers(0, 30)) < 0.7
        for start in (False, True):
            before, want = start, []
            for can in joinable:
                before = bool(can and not before)
                want.append(before)
            assert phrases._joins(joinable, start).tolist() == want


def test_refusals(text, tmp_path):
    """Parts of an earlier run kept without --overwrite (one error line, exit 2, nothing lost); a NUL byte; a
    negative count of train's passes."""
    out = str(tmp_path / "out")
    os.makedirs(out)
    open(os.path.join(out, "part.00000.txt"), "w").write("earlier")
    result = launch(1, ["hvd-w2v", "phrases", text, "--out", out], timeout=60)
    assert result.returncode == 2 and "holds the parts of an earlier phrases run" in result.output
    assert open(os.path.join(out, "part.00000.txt")).read() == "earlier"  # nothing lost
    binary = tmp_path / "nul.txt"
    binary.write_bytes(b"a b\0c d\n")
    with pytest.raises(UserError, match="NUL byte at offset 3"):
        list(phrases.Text([str(binary)]).blocks(0, 8, False))
    import hvd_w2v

    with pytest.raises(UserError, match="--phrases must be 0 .none. or more passes, got -1"):
        hvd_w2v.train(text, out=str(tmp_path / "run"), phrases=-1)


def test_the_memory_plan_bounds_the_passes_and_refuses_past_a_limit(tmp_path):
    """A text of 300,000 distinct words: the measured peak within the plan printed once the passes are done
    (5% allowed: the plan's figures are fitted, memory.PHRASES_COMPILED); under --max-memory-per-rank 100M the count stops once its words and pairs would outgrow it (one error
    line, exit 2), and the earlier parts in --out are kept."""
    import re

    corpus = tmp_path / "unique.txt"
    words = np.random.default_rng(0).permutation(300_000)
    corpus.write_text("\n".join(" ".join(f"u{i}" for i in words[k:k + 20]) for k in range(0, 300_000, 20)) + "\n")
    out = str(tmp_path / "out")
    result = launch(1, ["hvd-w2v", "phrases", str(corpus), "--out", out], timeout=60)
    assert result.ok, result.output[-3000:]
    planned, peak = re.search(r"memory: planned ([\d,]+) MiB per rank, measured peak \[(\d+)\]", result.output).groups()
    assert int(peak) <= 1.05 * int(planned.replace(",", "")), result.output
    earlier = open(os.path.join(out, "part.00000.txt"), "rb").read()
    result = launch(1, ["hvd-w2v", "phrases", str(corpus), "--out", out, "--overwrite", "--max-memory-per-rank",
                        "100M"], timeout=60)
    assert result.returncode == 2, result.output[-3000:]
    assert re.search(r"hvd-w2v: error: memory plan does not fit: phrases, rank 0 would hold [\d,]+ words and pairs",
                     result.output)
    assert open(os.path.join(out, "part.00000.txt"), "rb").read() == earlier
    assert sorted(os.listdir(out)) == [".phrases.json", "part.00000.txt"]


def test_train_on_its_own_phrases(text, tmp_path):
    """train --phrases 1: word2phrase's pass (threshold 100, the run's --min-count) into OUT/phrases/pass-1,
    whose joined pairs are then words of the vocabulary."""
    out = tmp_path / "run"
    result = launch(2, ["hvd-w2v", "train", text, "--out", str(out), "--phrases", "1", "--epochs", "1",
                        "--min-count", "3", "--quiet", "--show", ""], timeout=180)
    assert result.ok, result.output[-3000:]
    parts = sorted((out / "phrases" / "pass-1").glob("part.*"))
    assert b"".join(p.read_bytes() for p in parts) == word2phrase(open(text, "rb").read(), min_count=3)
    words = {line.split()[0] for line in open(out / "vocab.txt")}
    assert {"new_york", "new", "york"} <= words
