"""tests/word2phrase.py (the pure-Python port) against word2vec.c's word2phrase itself, built here with gcc from
../shared/peers/word2vec/word2phrase.c beside the checkout: the same output bytes on a synthetic text made to hit
its quirks, and on tiny edge inputs. Skipped when the source or gcc is missing (the product needs neither).

word2phrase fills a 500M-entry hash table (2 GB) twice a run, whatever the text: it runs as it is on the
main text, and built with a 4M-entry table (where strings sit in the table, not what is found; its pruning
starts past 70% of it, far beyond these texts) on the rest.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

import word2phrase

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shared", "peers",
                      "word2vec", "word2phrase.c")
TABLE = "const int vocab_hash_size = 500000000;"


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    """{"as is": path, "small table": path} of word2phrase built with gcc -O2."""
    if not os.path.exists(SOURCE) or shutil.which("gcc") is None:
        pytest.skip("needs gcc and word2vec.c's word2phrase.c at " + SOURCE)
    work = tmp_path_factory.mktemp("word2phrase")
    with open(SOURCE) as f:
        source = f.read()
    assert TABLE in source, f"{SOURCE} no longer declares {TABLE!r}"
    (work / "small.c").write_text(source.replace(TABLE, "const int vocab_hash_size = 4000000;"))
    out = {}
    for name, path in (("as is", SOURCE), ("small table", str(work / "small.c"))):
        out[name] = str(work / name.replace(" ", "-"))
        subprocess.run(["gcc", "-O2", "-o", out[name], path, "-lm", "-pthread"], check=True, capture_output=True)
    return out


def run(binary, data, min_count, threshold):
    """word2phrase's output for the text ``data``. It runs in a folder of its own under relative names: it
    copies the file names into buffers of MAX_STRING (60) bytes."""
    work = os.path.join(os.path.dirname(binary), "run")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "in"), "wb") as f:
        f.write(data)
    subprocess.run([binary, "-train", "in", "-output", "out", "-min-count", str(min_count), "-threshold",
                    str(threshold), "-debug", "0"], cwd=work, check=True, capture_output=True, timeout=60)
    with open(os.path.join(work, "out"), "rb") as f:
        return f.read()


def synthetic_text(seed=7, units=25000):
    """About 27k tokens: Zipf-distributed words, 40 planted pairs (about 25 times each), and specials: words
    past 58 bytes (two that share their first 58), one of 57, multibyte UTF-8 words (one cut inside a
    character), literal tokens with '_' (planted pairs' strings among them), "</s>", a '\\r' inside a word;
    lines of 0 to 40 words, tabs and runs of spaces, some '\\r\\n' line ends, no newline at the end."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    word = lambda n: "".join(rng.choice(letters, n))  # noqa: E731
    common = [word(int(rng.integers(2, 9))) for _ in range(1500)]
    zipf = 1 / np.arange(1, len(common) + 1)
    pairs = [[word(7), word(7)] for _ in range(40)] + [["東京", "タワー"]]
    first, shared = word(5), word(60)
    specials = [[s] for s in (
        word(70), word(58), word(57), shared + "aa", shared + "bb", "é" * 35, "東" * 20, "café", "naïve",
        "Москва", "straße", "_", "__", f"{pairs[0][0]}_{pairs[0][1]}", f"{pairs[1][0]}_{pairs[1][1]}",
        f"{common[0]}_{common[1]}", f"{common[0]}_", f"_{common[1]}", "_" + first, "</s>", "ab\rcd")]
    units_of = [[[w] for w in rng.choice(common, units, p=zipf / zipf.sum())], pairs, specials]
    kinds = rng.choice(3, units, p=[0.9, 0.04, 0.06])
    flat = [first] + [w for k in kinds for w in units_of[k][rng.integers(len(units_of[k]))]]
    gaps = [" ", "\t", "  ", " \t  ", "\t\t"]
    lines, at = [], 0
    while at < len(flat):
        n = int(rng.integers(0, 41))
        line = "".join(w + gaps[rng.choice(5, p=[0.85, 0.05, 0.04, 0.03, 0.03])] for w in flat[at:at + n])
        lines.append(line.rstrip(" \t") if rng.random() < 0.9 else line)
        lines.append("\r\n" if rng.random() < 0.15 else "\n")
        at += n
    return "".join(lines).rstrip("\r\n").encode()


@pytest.fixture(scope="module")
def text():
    return synthetic_text()


def test_synthetic_text_as_is(binaries, text):
    """The defaults (min-count 5, threshold 100), word2phrase as it is and with the small table."""
    expected = run(binaries["as is"], text, 5, 100)
    assert run(binaries["small table"], text, 5, 100) == expected
    got = word2phrase.phrase(text, 5, 100.0)
    assert got == expected
    assert word2phrase.joins(text, got) >= 40, "too few joins: the test would pass whatever the scores"
    assert not text.endswith(b"\n") and b"\r\n" in text and b"\t" in text


def test_synthetic_text_min_count_3_threshold_50(binaries, text):
    expected = run(binaries["small table"], text, 3, 50)
    got = word2phrase.phrase(text, 3, 50.0)
    assert got == expected
    assert word2phrase.joins(text, got) > word2phrase.joins(text, word2phrase.phrase(text, 5, 100.0))


def pairs_text(k, m, fill):
    """"a b" on k lines, "a" and "b" on m lines each, ``fill`` words seen once: pab = k, pa = pb = k + m, words
    2 (k + m) + fill."""
    return b"a b\n" * k + b"a\n" * m + b" ".join(b"w%d" % i for i in range(fill)) + b"\n" + b"b\n" * m


@pytest.mark.parametrize("data, min_count, threshold", [
    # float32 scores: (6 - 5) / 7 / 7 * 49 is 1.0000001 in float32 (joins), 0.9999999999999999 in float64
    (pairs_text(6, 1, 35), 5, 1),
    # threshold a float32: 1.20408174 rounds to the float32 score of (6 - 5) / 7 / 7 * 59, which does not pass it
    (pairs_text(6, 1, 45), 5, 1.20408174),
    (b"", 5, 100), (b"word", 5, 100), (b"one line without a newline", 5, 100), (b"\n", 5, 100),
    (b"\r\n\r\n", 5, 100), (b" \t  ", 5, 100), (b"a b\n" * 6 + b"a b", 5, 1),
    (b"x _x q _x_q q _x_q\n", 2, 0),  # the first word's pair is not "_x": no join of _x q
    (b"a\0b c\n\0x y\n" * 3, 2, 0),  # NUL ends a word where it stands
    (b"a b c a b c a b c d", 0, 1),  # min-count 0: pa 0 after a join, score inf: chains
])
def test_edges(binaries, data, min_count, threshold):
    assert word2phrase.phrase(data, min_count, threshold) == run(binaries["small table"], data, min_count, threshold)


def test_sort_vocab_edge_case_differs(binaries):
    """sort_vocab's documented difference: with every string seen min_count times (min-count 1), word2phrase
    loses the last string its sort leaves, here "z", and does not join "q z"; the port does."""
    data = b"q_z q z\n"
    assert run(binaries["small table"], data, 1, 1) == b" q_z q z\n"
    assert word2phrase.phrase(data, 1, 1.0) == b" q_z q_z\n"
