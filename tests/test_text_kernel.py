"""The compiled text passes (text_kernel.cc through native.py, used by vocab.count, encode and corpus) against
Python's loops, their fallback: the same hashes, the same bad-input offsets, and the same vocabulary and id
stream byte for byte on inputs chosen to be awkward (multi-byte UTF-8 across blocks and chunks, \\r\\n, tabs,
\\v \\f, Unicode spaces that are not ASCII whitespace, empty lines, files without a final newline, gzip, a
folder of files), on 1, 2 and 3 threads and on 3 ranks with rounds forced small."""
import gzip
import hashlib
import itertools
import os
import random

import numpy as np
import pytest

from conftest import launch
from hvd_w2v.common.config import Config
from hvd_w2v.common.errors import UserError
from hvd_w2v.kernels import native
from hvd_w2v.planning.plan import Alone
from hvd_w2v.text import corpus, encode, vocab


@pytest.fixture
def lib():
    lib = native.text_kernel()
    if lib is None:
        pytest.skip(f"the text passes cannot be built here: {native._LIBS['text_kernel']}")
    return lib


# Pieces of text meant to fall on block, chunk and thread cuts: multi-byte characters, ASCII whitespace of
# every kind, Unicode spaces (NBSP, EM SPACE, NEL, U+2028) and control bytes that Python's bytes.split()
# keeps inside tokens, as word2vec.c does.
PIECES = ["a", "bb", "caf\u00e9", "na\u00efve", "\u65e5\u672c\u8a9e", "x\u00a0y", "\u2003", "z\r", "\t", " ",
          "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x01\x1f!~", "w\u0085", "\u2028", "\U0001F600", "\u00e9" * 40, "q" * 300]


def awkward_text(n, seed):
    rng = random.Random(seed)
    words = [f"w{rng.randrange(3000)}é" if rng.random() < 0.5 else rng.choice(PIECES) for _ in range(n)]
    return "".join(w + rng.choice([" ", "", "\n", "  "]) for w in words).encode("utf-8")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A folder of a plain file (no final newline), a gzip file, a plain file ending in blank lines and two more
    gzip files: on 2 and 3 threads a rank's gzip files are read at once (corpus.readers), on one rank and on
    the last of three."""
    folder = tmp_path_factory.mktemp("awkward")
    (folder / "a.txt").write_bytes(awkward_text(6000, 1))
    with gzip.open(folder / "b.txt.gz", "wb") as f:
        f.write(awkward_text(3000, 2))
    (folder / "c.txt").write_bytes(awkward_text(2000, 3) + b"\n\n\n")
    with gzip.open(folder / "d.txt.gz", "wb") as f:
        f.write(awkward_text(2500, 5))
    with gzip.open(folder / "e.txt.gz", "wb") as f:
        f.write(awkward_text(1500, 6))
    return str(folder)


def test_hash64_is_blake2b(lib):
    rng = random.Random(0)
    words = [b"", b"a", "caf\u00e9".encode()] + [bytes(rng.randrange(256) for _ in range(n))
                                                for n in (7, 8, 9, 127, 128, 129, 256, 300)]
    assert native.hash64s(lib, words) == [vocab.hash64(w) for w in words]
    lengths = np.array([len(w) for w in words], np.int64)
    blob = np.frombuffer(b"".join(words), np.uint8)
    assert native.hash_words(lib, blob, lengths, 2).tolist() == [vocab.hash64(w) for w in words]
    # Four words at a time, any longer than a block alone, on 1 and 2 threads: groups of every mix
    words = [bytes(rng.randrange(256) for _ in range(rng.choice((1, 5, 8, 9, 64, 127, 128, 129, 200))))
             for _ in range(3001)]
    lengths = np.array([len(w) for w in words], np.int64)
    blob = np.frombuffer(b"".join(words), np.uint8)
    for threads in (1, 2):
        assert native.hash_words(lib, blob, lengths, threads).tolist() == [vocab.hash64(w) for w in words]


def test_vocabulary_order_is_numpys_on_any_thread_count(lib, monkeypatch):
    """vocab.agree_ids orders a rank's words by count, descending, then by hash (native.count_order, else
    numpy's lexsort): the same order on 1, 2 and 3 threads, on both sides of the size where the sort goes
    parallel, with ties in count everywhere and a tie in count and hash, which the words' places break; and
    the same ids and counts with and without the compiled sort."""
    rng = np.random.default_rng(1)
    for n in (0, 1, 7, 3000, 200_000):
        counts = (rng.zipf(1.5, n) + 4).astype(np.int64)
        hashes = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) * 2 + 1
        if n > 10:
            hashes[9], counts[9] = hashes[3], counts[3]
        expected = np.lexsort((hashes, -counts))
        for threads in (1, 2, 3):
            assert native.count_order(lib, counts, hashes, threads).tolist() == expected.tolist(), (n, threads)
    compiled, runs = vocab.agree_ids(Alone(), counts, hashes, 1e-3, threads=2)
    monkeypatch.setattr(native, "text_kernel", lambda: None)
    numpy_ids, numpy_runs = vocab.agree_ids(Alone(), counts, hashes, 1e-3)
    assert compiled.tolist() == numpy_ids.tolist()
    assert sorted(compiled.tolist()) == list(range(len(counts)))
    assert runs.count(np.arange(len(counts))).tolist() == numpy_runs.count(np.arange(len(counts))).tolist()
    assert runs.count(compiled).tolist() == counts.tolist()


def test_remap_and_gather_on_threads_equal_numpy(lib):
    """native.remap (the one pass's numbers into ids, private indices -2 - j into ``below``'s, dropped words left
    out) and native.gather_words (words by number) on 1, 2 and 3 threads give numpy's result, on sizes below and
    above where they take a second thread, words dropped anywhere (a part of the stream left with none kept);
    and a number out of range is refused with the stream untouched."""
    rng = np.random.default_rng(2)
    for n in (0, 1, 1000, 300_000):
        ids = rng.integers(-1, 5_000, 4_000).astype(np.int32)
        ids[rng.random(len(ids)) < 0.3] = -1
        below = ids[rng.integers(0, len(ids), 300)]
        numbers = rng.integers(-1 - len(below), len(ids), n).astype(np.int32)
        numbers[n // 3: n // 3 + n // 4] = np.flatnonzero(ids < 0)[0]  # a stretch of dropped words
        expected = np.where(numbers >= 0, ids[np.maximum(numbers, 0)],
                            np.where(numbers == -1, -7, below[np.maximum(-2 - numbers, 0)]))
        expected = expected[(numbers == -1) | (expected >= 0)]
        for threads in (1, 2, 3):
            got = native.remap(lib, numbers.copy(), ids, -7, threads, below)
            assert got.tolist() == expected.tolist(), (n, threads)
        words = [rng.bytes(int(k)) for k in rng.integers(1, 20, 5_000)]
        lengths = np.array([len(w) for w in words], np.int64)
        blob = np.frombuffer(b"".join(words), np.uint8)
        which = rng.integers(0, len(words), n // 2)
        for threads in (1, 2, 3):
            got, got_lengths = native.gather_words(lib, blob, lengths, which, threads)
            assert got.tobytes() == b"".join(words[i] for i in which), (n, threads)
            assert got_lengths.tolist() == lengths[which].tolist()
    for bad in (4_000, -2 - 300):
        numbers = np.zeros(300_000, np.int32)
        numbers[-1] = bad
        with pytest.raises(ValueError):
            native.remap(lib, numbers, np.zeros(4_000, np.int32), -1, 3, np.zeros(300, np.int32))
        assert numbers[-1] == bad and not numbers[:-1].any()


def test_counts_on_threads_equal_one_threads_where_words_repeat_and_where_they_do_not(lib):
    """The count on several threads counts the words each thread meets first in a table of its own (as many as
    its ``private_words``), added to the others' when read, and hands the other tokens to the thread whose table
    owns their word, a segment (text_kernel.cc's SEGMENT_BYTES a thread) at a time: here texts of several
    segments, in one call and in several, Zipf-like (most tokens a few frequent words, held by the threads' own
    tables), flat (most words new: the own tables fill, and are no longer asked) and flat then Zipf-like, words
    of 1 to 18 bytes (around the 8 that travel inline), lines of 1 to 40 words; own tables of no word (every
    token handed over), of 1,000 and of native.PRIVATE_WORDS. The same counts on 1, 2 and 3 threads, and the
    numbered pass's stream gives back every token's word and every newline."""
    rng = np.random.default_rng(0)
    names = [("w" * int(k % 13)) + str(k) for k in range(200_000)]  # 1 to 18 bytes
    zipf = rng.zipf(1.1, 900_000) % 60_000
    flat = rng.integers(0, 200_000, 500_000)

    def counted(text, threads, calls, private):
        counts = native.Counts(lib, threads, private)
        cuts = [0] + [text.index(b" ", len(text) * k // calls) + 1 for k in range(1, calls)] + [len(text)]
        tokens = sum(counts.add_text(text, lo, hi) for lo, hi in zip(cuts, cuts[1:]))
        words, lengths, values, _, _ = counts.take(1, keep=False, hashed=False)
        return tokens, dict(zip(vocab.split_words(words, lengths), values.tolist()))

    def numbered(text, threads, private):
        counts = native.Counts(lib, threads, private)
        tokens, stream = counts.add_numbered(text, True)
        words, lengths, values, _, _, numbers, aliases = counts.take(1, keep=False, hashed=False, numbered=True)
        word = dict(zip(numbers.tolist(), vocab.split_words(words, lengths)))
        assert (aliases >= 0).any() == (threads > 1 and private > 0)
        return tokens, [word[k] if k >= 0 else word[aliases[-2 - k]] if k < -1 else b"\n" for k in stream.tolist()]

    for ids in (zipf, flat, np.concatenate([flat, zipf])):  # the last: small tables shrink, then grow again
        ends = np.cumsum(rng.integers(1, 41, len(ids)))
        ends = set(ends[ends < len(ids)].tolist())
        text = "".join(names[k] + ("\n" if i + 1 in ends else " ") for i, k in enumerate(ids.tolist())).encode()
        expected = {w.encode(): c for w, c in zip(*np.unique([names[k] for k in ids.tolist()], return_counts=True))}
        stream = [t for line in text.split(b"\n") for t in line.split() + [b"\n"]]
        for threads, calls, private in ((1, 1, 0), (2, 1, native.PRIVATE_WORDS), (3, 1, native.PRIVATE_WORDS),
                                        (2, 5, native.PRIVATE_WORDS), (2, 1, 0), (3, 5, 1_000)):
            assert counted(text, threads, calls, private) == (len(ids), expected), (threads, calls, private)
        for threads, private in ((1, 0), (2, native.PRIVATE_WORDS), (3, native.PRIVATE_WORDS), (2, 0), (3, 1_000)):
            assert numbered(text, threads, private) == (len(ids), stream), (threads, private)


def python_offset(block):
    """corpus._check_text's verdict, as (kind, offset)."""
    try:
        corpus._check_text(block, "f", 0)
    except UserError as e:
        text = str(e)
        return (1 if "binary" in text else 2), int(text.rsplit("offset ", 1)[1].rstrip(")").split(")")[0])
    return 0, None


@pytest.mark.parametrize("bad", [b"\xff", b"\x80", b"\xc0\xaf", b"\xc2", b"\xe2\x82", b"\xe2\x28\xa1", b"\xed\xa0\x80",
                                 b"\xe0\x80\xaf", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
                                 b"\xf0\x9f\x98", b"\x00", b"ok \xff then \x00"])
def test_check_text_finds_what_python_finds(lib, bad):
    """The first invalid byte (where Python's strict decoder starts its error), NUL bytes first in a block;
    at the block's end too (a truncated character), and on 1, 2 and 3 threads (cut inside the text)."""
    good = awkward_text(200, 4)
    for block in (good + bad, good + bad + good, bad + good, good + b" " + bad):
        want = python_offset(block)
        assert want[0], block
        for threads in (1, 2, 3):
            assert native.check_text(lib, block, threads) == want, (bad, threads)
    for threads in (1, 2, 3):
        assert native.check_text(lib, good, threads) == (0, None)


def passes(paths, threads, compiled, monkeypatch, folder, one_pass=False):
    """vocab.build and encode.encode on one rank, small blocks and chunks: (row words, row counts, the lookup,
    ids); ``one_pass``: counted and encoded in one pass, as `hvd-w2v encode` and `train` do on one rank."""
    with monkeypatch.context() as m:
        m.setattr(corpus, "BLOCK_BYTES", 4096)  # blocks end inside multi-byte characters' neighbourhoods
        m.setattr(vocab, "CHUNK_BYTES", 1000)
        if not compiled:
            m.setattr(native, "text_kernel", lambda: None)
        alone = Alone()
        alone.threads = threads
        numbered = encode.Provisional(str(folder), corpus.readers(corpus.split(paths, 1)[0], threads))
        voc = vocab.build(alone, paths, Config(min_count=1), reading=False, numbered=numbered if one_pass else None)
        assert (voc.provisional is not None) == (one_pass and compiled)
        encode.encode(alone, paths, voc, folder, reading=False)
        with open(os.path.join(folder, "ids.00000.i32"), "rb") as f:
            return voc.row_words, voc.row_counts.tolist(), voc.lookup, f.read()


def test_compiled_passes_equal_python_on_one_rank(lib, files, tmp_path, monkeypatch):
    paths, _ = corpus.files_of([files])
    want = passes(paths, 1, False, monkeypatch, tmp_path / "python")
    assert len(want[0]) > 2000 and len(want[3]) > 40000  # the corpus is not trivial
    for threads, one_pass in itertools.product((1, 2, 3), (False, True)):
        folder = tmp_path / f"compiled{threads}{one_pass}"
        got = passes(paths, threads, True, monkeypatch, folder, one_pass)
        assert got[0] == want[0] and got[1] == want[1] and got[2] == want[2], (threads, one_pass)
        assert hashlib.sha256(got[3]).hexdigest() == hashlib.sha256(want[3]).hexdigest(), (threads, one_pass)
        assert sorted(os.listdir(folder)) == ["ids.00000.i32", "stream.json"]  # no number is left behind


@pytest.mark.parametrize("content, fragment", [
    (b"some text\n" * 900 + b"caf\xe9 x\x00", "looks binary (NUL byte at offset 9006)"),  # NULs first in a block
    (b"some text\n" * 900 + b"caf\xe9 " + b"x " * 3000 + b"\x00", "not UTF-8 text (invalid byte at offset 9003)"),
    (b"some text\n" * 900 + b"caf\xe9 au lait\n", "is not UTF-8 text (invalid byte at offset 9003)"),
    (b"some text\n" * 900 + b"\xf0\x9f\x98", "is not UTF-8 text (invalid byte at offset 9000)"),
], ids=["binary", "latin-1-before-binary", "latin-1", "truncated"])
def test_bad_input_same_message(lib, tmp_path, monkeypatch, content, fragment):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    messages = []
    for compiled, one_pass in ((False, False), (True, False), (True, True)):
        with pytest.raises(UserError) as e:
            passes([str(path)], 2, compiled, monkeypatch, tmp_path / "out", one_pass)
        messages.append(str(e.value))
    assert messages[0] == messages[1] == messages[2] and fragment in messages[0], messages
    assert not (tmp_path / "out").exists()


def test_truncated_gzip_same_message(lib, tmp_path, monkeypatch):
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(gzip.compress(awkward_text(3000, 5))[:-100])
    messages = []
    for compiled in (False, True):
        with pytest.raises(UserError) as e:
            passes([str(path)], 2, compiled, monkeypatch, tmp_path / "out")
        messages.append(str(e.value))
    assert messages[0] == messages[1] and messages[0].startswith(f"cannot read {path}"), messages


def per_piece(blocks, pieces):
    """read_ahead's ``(i, block)`` items until its UserError (or the end): each piece's blocks, and the error's
    text (None)."""
    got, error = [[] for _ in pieces], None
    try:
        for i, block in blocks:
            got[i].append(block)
    except UserError as e:
        error = str(e)
    return got, error


def test_read_ahead_reads_files_at_once_in_order_within_each_and_raises_the_first_error(files, tmp_path,
                                                                                       monkeypatch):
    """corpus.read_ahead gives read_blocks's blocks, each piece's in order, on 1 to 3 readers (a reader a file;
    on one, the pieces in order too), and raises the error reading in order would, after every block of the
    pieces before the bad one and its own blocks before the bad byte, though later files were read at once."""
    monkeypatch.setattr(corpus, "BLOCK_BYTES", 4096)
    paths, _ = corpus.files_of([files])
    pieces = corpus.split(paths, 1)[0]
    assert [corpus.readers(pieces, t) for t in (1, 2, 3)] == [1, 2, 3]  # three .gz files
    want = [list(corpus.read_blocks([p])) for p in pieces]
    assert sum(map(len, want)) > 12
    assert list(corpus.read_ahead(pieces, 1)) == [(i, b) for i, blocks in enumerate(want) for b in blocks]
    for readers in (2, 3):
        assert per_piece(corpus.read_ahead(pieces, readers), pieces) == (want, None), readers
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(gzip.compress(awkward_text(30000, 5))[:-100])
    bad_text = tmp_path / "latin.txt"  # a later bad file: never the error raised
    bad_text.write_bytes(b"caf\xe9\n")
    bad = corpus.split(paths + [str(cut)] + paths + [str(bad_text)], 1)[0]
    before, error = per_piece(((i, b) for i, p in enumerate(bad) for b in corpus.read_blocks([p])), bad)
    assert f"cannot read {cut}" in error and before[:len(pieces)] == want
    for readers in (1, 2, 3):
        got, got_error = per_piece(corpus.read_ahead(bad, readers), bad)
        k = len(pieces)
        assert got_error == error and got[:k + 1] == before[:k + 1], readers
        assert all(g == w[:len(g)] for g, w in zip(got[k + 1:], want)), readers  # read ahead, then dropped


# Three ranks, each running every path in turn with rounds of a few words (every word travels to its owner in
# many rounds; the one pass's rounds also come after a few numbers) and blocks of 4 KiB: Python's, the compiled
# two passes, the compiled one pass, the one pass whose stream rank 1 finds unusable (every rank then reads
# the text again), and the one pass where rank 2 lacks the compiled passes (every rank then counts in Python).
# Each rank compares its rows' words and counts, its lookup and its shard.
RANKS = """
import hashlib, os, sys
from mpi4py import MPI
from hvd_w2v.kernels import native
from hvd_w2v.text import corpus, encode, vocab
from hvd_w2v.common.config import Config
from hvd_w2v.parallel.comm import Comm

comm = Comm(MPI.COMM_WORLD, threads=2)
paths, _ = corpus.files_of([sys.argv[1]])
corpus.BLOCK_BYTES, vocab.CHUNK_BYTES, vocab.FLUSH_WORDS, vocab.THREAD_CHUNKS, vocab.PENDING = 4096, 1000, 64, 1, 300
kernel, write = native.text_kernel, vocab._write_handles
unusable = lambda *a: (False, None) if comm.rank == 1 else write(*a)
seen = []
for path in ("python", "compiled", "one pass", "unusable", "mixed"):
    python = path == "python" or (path == "mixed" and comm.rank == 2)
    native.text_kernel = (lambda: None) if python else kernel
    vocab._write_handles = unusable if path == "unusable" else write
    folder = os.path.join(sys.argv[2], path)
    numbered = None
    if path in ("one pass", "unusable", "mixed"):
        numbered = encode.Provisional(folder, corpus.readers(corpus.split(paths, 3)[comm.rank], 2), comm.rank)
    voc = vocab.build(comm, paths, Config(min_count=1), reading=False, numbered=numbered)
    assert (voc.provisional is not None) == (path == "one pass"), path
    if path == "one pass":  # the counting owners' threads shared their words: about a number a distinct token
        print(f"rank {comm.rank}: {len(voc.provisional[1]) / voc.distinct:.2f} numbers a distinct token", flush=True)
        assert len(voc.provisional[1]) < 1.5 * voc.distinct, (len(voc.provisional[1]), voc.distinct)
    encode.encode(comm, paths, voc, folder, reading=False)
    with open(os.path.join(folder, f"ids.{comm.rank:05d}.i32"), "rb") as f:
        seen.append((voc.row_words, voc.row_counts.tolist(), voc.lookup, hashlib.sha256(f.read()).hexdigest()))
same = all(s == seen[0] for s in seen)
print(f"rank {comm.rank}: {'same' if same else 'DIFFERENT'}, {len(seen[0][0])} rows", flush=True)
sys.exit(0 if same else 1)
"""


def test_compiled_passes_equal_python_on_three_ranks(lib, files, tmp_path):
    paths, _ = corpus.files_of([files])
    assert corpus.readers(corpus.split(paths, 3)[2], 2) == 2  # the last rank reads two .gz files at once
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    result = launch(3, ["python", script, files, tmp_path], timeout=120, threads=2)
    assert not result.hung and result.returncode == 0, result.output[-3000:]
    assert result.output.count(": same,") == 3, result.output[-3000:]
    one = b"".join((tmp_path / "python" / f"ids.{r:05d}.i32").read_bytes() for r in range(3))
    for path in ("compiled", "one pass", "unusable", "mixed"):
        assert one == b"".join((tmp_path / path / f"ids.{r:05d}.i32").read_bytes() for r in range(3)), path
        assert not [n for n in os.listdir(tmp_path / path) if n.startswith("numbers")], path  # none left


def test_word_list_reads_as_the_list_of_its_words():
    """vocab.WordList: the words laid end to end read as a list of bytes does (index, negative index, slice,
    slice of a slice, iteration, equality), and native.count_lines gives word2vec.c's "word count" lines."""
    words = [b"", b"a", b"\xc3\xa9t\xc3\xa9", b"word" * 40, b"x"]
    listed = vocab.WordList.of(np.frombuffer(b"".join(words), np.uint8), [len(w) for w in words])
    assert len(listed) == 5 and listed == words and list(listed) == words and listed != words[:4]
    assert [listed[i] for i in range(-5, 5)] == words + words
    assert listed[np.int64(2)] == words[2]
    for lo, hi in ((0, 5), (1, 3), (3, 1), (4, 9), (-2, None), (5, 5)):
        assert listed[lo:hi] == words[lo:hi] and isinstance(listed[lo:hi], vocab.WordList)
        assert listed[lo:hi][1:] == words[lo:hi][1:]
    assert listed[::2] == words[::2]
    for bad in (5, -6):
        with pytest.raises(IndexError):
            listed[bad]
    lib = native.text_kernel()
    if lib is None:
        pytest.skip(native.unavailable("text_kernel"))
    counts = np.array([3, 2**62, 0, 17, 1], np.int64)
    for lo, hi in ((0, 5), (2, 4), (3, 3)):
        data, lengths = native.count_lines(lib, listed[lo:hi], counts[lo:hi])
        lines = [b"%s %d\n" % (w, n) for w, n in zip(words[lo:hi], counts[lo:hi].tolist())]
        assert data == b"".join(lines) and lengths.tolist() == [len(x) for x in lines]
