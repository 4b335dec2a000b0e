"""The divergence guard: a run whose loss or rows blow up stops with one clear error, a distinct exit code, its
last good checkpoint kept and run.json saying "diverged", instead of exporting garbage with exit code 0."""
import json
import math

import numpy as np
import pytest

from conftest import launch
from hvd_w2v.common.config import Config
from hvd_w2v.synthetic import generate
from hvd_w2v.training.divergence import EXIT_DIVERGED, Diverged, Guard, largest_norm, loss_bound


def test_the_guard_passes_a_run_that_learns_and_names_what_grew_in_one_that_does_not():
    cfg = Config(negative=5, max_row_norm=50)
    assert loss_bound(cfg) == pytest.approx(4 * 6 * math.log(2))  # four times the start, W_out at zeros
    guard = Guard(cfg)
    guard.check(200, 4.1, 3.0)  # the start's loss, small rows
    guard.check(400, 2.3, 49.9)
    for loss, norm, what in [(17.0, 1.0, "the loss per pair is 17"), (float("nan"), 1.0, "the loss per pair is nan"),
                             (2.0, 50.5, "a row's norm is 50.5, past --max-row-norm 50"),
                             (2.0, math.inf, "a row's norm is inf")]:
        with pytest.raises(Diverged, match=what) as e:
            guard.check(600, loss, norm)
        assert e.value.step == 600


def test_the_largest_norm_is_every_row_s_and_inf_for_a_value_that_is_not_finite():
    rows = np.zeros((70000, 2, 4), np.float32)  # past one block of 65,536 rows
    rows[69999, 1] = [3, 4, 0, 0]
    assert largest_norm(rows) == 5.0 and largest_norm(rows[:0]) == 0.0
    rows[5, 0, 2] = np.nan
    assert largest_norm(rows) == math.inf


# (mode, --alpha, --min-alpha): the exact step falls after a few checkpoints; shard-local SGD at once, within
# the shards' own SGD (the clipped merge keeps the model's rows bounded: the loss tells)
ABSURD = {"exact": (["--shards", "0"], "0.2", "0.1"), "shards": (["--shards", "4", "--superstep", "256"], "1", "0.5")}


@pytest.mark.parametrize("mode", ABSURD)
def test_an_absurd_learning_rate_stops_with_one_error_and_keeps_the_last_good_checkpoint(tmp_path, mode):
    """An absurd --alpha on 2 ranks, a checkpoint every few steps: exit 77, one error line naming the step and
    what grew, run.json "diverged" naming the last good checkpoint, which is kept, and nothing exported."""
    corpus = tmp_path / "zipf.txt"
    generate(str(corpus), 60000, vocab=1500, seed=3)
    out = tmp_path / "out"
    options, alpha, min_alpha = ABSURD[mode]
    result = launch(2, ["hvd-w2v", "train", corpus, "--out", out, *options, "--alpha", alpha, "--min-alpha",
                        min_alpha, "--epochs", "20", "--batch-words", "256", "--checkpoint-every", "0.0001",
                        "--show", "", "--quiet"], timeout=240, threads=2)
    assert result.returncode == EXIT_DIVERGED, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1 and "training diverged by step" in errors[0], result.output[-3000:]
    record = json.loads((out / "run.json").read_text())
    assert record["state"] == "diverged" and record["diverged"] in errors[0]
    assert f"by step {record['steps_done']:,}:" in errors[0]
    assert not (out / "vectors.bin").exists() and not (out / "vectors.txt").exists()
    print(errors[0])
    if mode == "shards":
        assert "the loss per pair is" in errors[0] and "no checkpoint was written before it" in errors[0]
        assert record["checkpoint"] is None
        return
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept and record["checkpoint"].endswith(kept[-1]), kept
    assert f"the last good checkpoint, {record['checkpoint']}, is kept" in errors[0]
    assert int(kept[-1].split("-")[1]) < record["steps_done"]
