"""--read-vocab (text/readvocab.py): a file's counts stand for the corpus's, on any rank count, as word2vec.c's
-read-vocab reads them; bad files refused on every rank with the line or the word."""
import collections
import random

import numpy as np
import pytest

from hvd_w2v.synthetic import generate


def word_counts(path):
    """{word: count} of the corpus, counted here."""
    with open(path, "rb") as f:
        return collections.Counter(f.read().split())


def write_vocab(path, counts, seed=0, sentence_end=True):
    """A word2vec.c vocabulary file of ``counts`` in a random order: its </s> line first, then `word count`."""
    lines = [b"%s %d\n" % item for item in counts.items()]
    random.Random(seed).shuffle(lines)
    with open(path, "wb") as f:
        f.write((b"</s> 1234\n" if sentence_end else b"") + b"".join(lines))


@pytest.mark.mpi(2, 3)
def test_a_file_s_counts_give_the_count_s_vocabulary_and_bad_files_are_refused(comm, nranks, tmp_path_factory):
    from hvd_w2v.common.config import Config
    from hvd_w2v.common.errors import UserError
    from hvd_w2v.parallel import comm as comm_mod
    from hvd_w2v.text import readvocab, vocab

    c = comm_mod.init()
    folder = comm.bcast(str(tmp_path_factory.mktemp("readvocab")) if c.rank == 0 else None)
    corpus, listed = f"{folder}/zipf.txt", f"{folder}/vocab.txt"
    if c.rank == 0:
        generate(corpus, 20000, vocab=1500, seed=3)
        write_vocab(listed, word_counts(corpus))
    c.barrier()
    cfg = Config(min_count=3, max_final_vocab=700)
    counted = vocab.build(c, [corpus], cfg)
    read = vocab.build(c, [corpus], cfg, given=readvocab.counts(c, listed))
    assert list(read.row_words) == list(counted.row_words) and (read.row_counts == counted.row_counts).all()
    assert read.size == counted.size <= 700 and read.total == counted.total
    bad = {"line": b"w0 12\nw1 7\nw2 x7\n", "word": b"w0 12\nw1 7\n\nw0 3\n", "count": b"w0 12\nw1 7 3\n"}
    said = {"line": "line 3: expected 'word count'", "word": "lists the word 'w0' twice",
            "count": "line 2: expected 'word count'"}
    for name, text in bad.items():
        path = f"{folder}/{name}.txt"
        if c.rank == 0:
            with open(path, "wb") as f:
                f.write(text)
        c.barrier()
        with pytest.raises(UserError, match=said[name]):
            vocab.build(c, [corpus], cfg, given=readvocab.counts(c, path))
    with pytest.raises(UserError, match="cannot read --read-vocab .*missing.txt"):
        readvocab.counts(c, f"{folder}/missing.txt")


def test_read_vocab_trains_the_vectors_of_the_count(tmp_path):
    """A word2vec.c vocabulary file of the corpus's counts, in another order, on 2 ranks of 2 threads: the
    vocabulary and vectors a count on 1 rank gives."""
    from test_train import load, train

    corpus = str(tmp_path / "zipf.txt")
    generate(corpus, 40000, vocab=2000, seed=5)
    write_vocab(tmp_path / "counts.txt", word_counts(corpus), seed=1)
    train(corpus, str(tmp_path / "counted"), 1, "--cbow")
    r = train(corpus, str(tmp_path / "read"), 2, "--cbow", "--read-vocab", tmp_path / "counts.txt", threads=2)
    assert f"read from {tmp_path}/counts.txt" in r.output, r.output[-2000:]
    assert (tmp_path / "read/vocab.txt").read_bytes() == (tmp_path / "counted/vocab.txt").read_bytes()
    counted, read = load(f"{tmp_path}/counted/vectors.bin"), load(f"{tmp_path}/read/vectors.bin")
    assert read.index_to_key == counted.index_to_key
    assert np.abs(read.vectors - counted.vectors).max() < 1e-5
