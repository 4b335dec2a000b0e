"""train --update (gensim's build_vocab(update=True) then train): a finished run goes on with new text on another
rank count, its words' rows kept, the counts summed, new words added; the earlier run kept in OUT/history."""
import collections
import json
import os

import numpy as np
import pytest

from conftest import launch
from hvd_w2v.synthetic import generate
from test_train import train

DIM = 16


def read_vocab(path):
    with open(path, "rb") as f:
        return [(w, int(c)) for w, c in (line.split() for line in f)]


def rows(checkpoint, size, ranks):
    """float32[size, 2, DIM]: every word's W_in and W_out rows of a checkpoint written on ``ranks`` ranks, by id."""
    out = np.empty((size, 2, DIM), np.float32)
    for r in range(ranks):
        table = np.fromfile(f"{checkpoint}/rows.{r:05d}.bin", "<f4").reshape(2, -1, DIM)
        out[r::ranks] = table.transpose(1, 0, 2)
    return out


def test_a_run_goes_on_with_new_text_on_another_rank_count(tmp_path):
    """The update starts again after one killed while it moved the earlier run into OUT/history."""
    first, second, out = str(tmp_path / "first.txt"), str(tmp_path / "second.txt"), str(tmp_path / "run")
    generate(first, 30000, vocab=1500, seed=1)
    generate(second, 30000, vocab=2500, seed=2)  # more words: some new, most of the first's again
    train(first, out, 1, "--dim", str(DIM))
    old_vocab = read_vocab(f"{out}/vocab.txt")
    old_final = json.load(open(f"{out}/run.json"))["checkpoint"]
    # as an update killed while it moved the run into history (its checkpoints and vocab.txt there, its vectors
    # not yet) and had written a vocab.txt of its own: the update started again finds the run where it is
    os.makedirs(f"{out}/history/run-1")
    for name in ("checkpoints", "vocab.txt"):
        os.rename(f"{out}/{name}", f"{out}/history/run-1/{name}")
    open(f"{out}/vocab.txt", "w").write("the killed update's 1\n")
    r = train(second, out, 2, "--dim", str(DIM), "--update", threads=2)
    assert "update: the earlier run's checkpoints, vectors and vocab.txt moved to" in r.output, r.output[-2000:]

    # the counts of both texts summed for the run's words; the second's new words of at least --min-count added
    here = collections.Counter(open(second, "rb").read().split())
    before = dict(old_vocab)
    want = {w: c + here.get(w, 0) for w, c in before.items()}
    want.update({w: c for w, c in here.items() if w not in before and c >= 5})
    new_vocab = read_vocab(f"{out}/vocab.txt")
    assert dict(new_vocab) == want and len(new_vocab) > len(old_vocab)
    assert [c for _, c in new_vocab] == sorted(want.values(), reverse=True)  # ids in frequency order again

    # the run's words start from their rows (the update's step 0), new ones from fresh rows; then train
    history = f"{out}/history/run-1"
    assert read_vocab(f"{history}/vocab.txt") == old_vocab
    assert sorted(os.listdir(history)) == ["checkpoints", "vectors.bin", "vectors.txt", "vocab.txt"]
    old_final = old_final.replace(f"{out}/checkpoints", f"{history}/checkpoints")
    was = rows(old_final, len(old_vocab), 1)
    start = rows(f"{out}/checkpoints/step-000000000", len(new_vocab), 2)
    ids = {w: i for i, (w, _) in enumerate(new_vocab)}
    moved = [ids[w] for w, _ in old_vocab]
    assert (start[moved] == was).all()
    fresh = np.setdiff1d(np.arange(len(new_vocab)), moved)
    assert (start[fresh, 1] == 0).all() and np.abs(start[fresh, 0]).max() <= 1 / DIM  # gensim's start
    record = json.load(open(f"{out}/run.json"))
    assert record["state"] == "finished" and record["corpus"] == [second]
    assert [h["corpus"] for h in record["history"]] == [[first]] and record["history"][0]["ranks"] == 1

    # a resume of the update reads the run's own vocabulary, not a count of the second text alone
    r = train(second, out, 1, "--dim", str(DIM), "--resume")
    assert f"read from {out}/vocab.txt" in r.output and "nothing left to train" in r.output, r.output[-2000:]


def test_update_is_refused_without_a_finished_run_or_with_another_way_to_start(tmp_path):
    import hvd_w2v
    from hvd_w2v.common.errors import UserError

    corpus = str(tmp_path / "c.txt")
    generate(corpus, 2000, vocab=500, seed=1)
    for how in ({"resume": True}, {"overwrite": True}, {"max_final_vocab": 10}):
        with pytest.raises(UserError, match="--update goes on from the finished run in --out with its own"):
            hvd_w2v.train(corpus, str(tmp_path / "run"), update=True, **how)
    r = launch(1, ["hvd-w2v", "train", corpus, "--out", tmp_path / "empty", "--update", "--quiet"], timeout=120)
    assert r.returncode == 2 and "hvd-w2v: error: --update goes on from a finished run with its final checkpoint; " \
        f"{tmp_path}/empty holds no run" in r.output, r.output[-2000:]
