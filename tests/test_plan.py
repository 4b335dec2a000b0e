"""The dry-run planner (hvd_w2v.planning.plan) against real training: the bytes per word it counts from the step plans
of every rank, in one process, are those `hvd-w2v train` reports having sent, at 2, 3 and 4 ranks."""
import json
import re

import numpy as np
import pytest

from conftest import launch
from hvd_w2v.common.config import Config
from hvd_w2v.common.errors import UserError
from hvd_w2v.planning import plan
from hvd_w2v.synthetic import generate

# 6,000 raw words: one key asked of another rank more or less (16 B, and its row and update, 400 B each)
# moves the run's bytes per word by 0.136, more than the 0.1 of run.json's rounding, so "equal to one
# decimal" means "equal to the byte".
TOKENS = 6000
# P, the settings of that run: hot rows (Horovod's allreduce, not counted as bytes sent) and CBOW on some.
RUNS = {2: [], 3: ["--hot-rows", "20"], 4: ["--cbow"]}
COMMON = ["--epochs", "1", "--batch-words", "256"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "zipf.txt"
    generate(str(path), TOKENS, vocab=400, pairs=10, first=20, seed=4)
    return str(path)


def planned(capsys, *args):
    """The planner's rows as {(P, H): B/word}, from its markdown table."""
    capsys.readouterr()
    assert plan.main([*map(str, args), "--format", "markdown", "--compute-us-per-position", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line.strip("|").split("|") for line in out.splitlines() if re.match(r"\| [\d,]+ \|", line)]
    head = [h.strip() for h in next(line for line in out.splitlines() if line.startswith("| positions")).strip("|")
            .split("|")]
    num = lambda s: float(s.strip().replace(",", ""))  # noqa: E731
    return {(int(num(r[head.index("P")])), int(num(r[head.index("H")]))): num(r[head.index("B/word")]) for r in rows}


@pytest.mark.parametrize("nranks", sorted(RUNS))
def test_bytes_per_word_are_trainings(corpus, tmp_path, capsys, nranks):
    """Every step of the run planned: the planner's bytes per word equal the run's own count (run.json, one
    decimal; the 'done:' line, whole bytes), planned from the text and from the run folder it wrote."""
    out = tmp_path / "run"
    result = launch(nranks, ["hvd-w2v", "train", corpus, "--out", out, *COMMON, *RUNS[nranks], "--quiet",
                             "--show", "", "--format", "binary", "--no-final-checkpoint"], timeout=120)
    assert result.ok, result.output[-3000:]
    said = float(re.search(r"done: .* ([\d,]+) bytes sent per word \(all ranks\)", result.output)
                 .group(1).replace(",", ""))
    recorded = json.load(open(out / "run.json"))["bytes_per_word"]
    hot = int(RUNS[nranks][1]) if "--hot-rows" in RUNS[nranks] else 0
    settings = [a for a in RUNS[nranks] if a != "--hot-rows" and not a.isdigit()]
    from_text = planned(capsys, corpus, "--ranks", nranks, "--hot-rows", hot, "--steps", "all", *COMMON, *settings)
    from_run = planned(capsys, out, "--ranks", nranks, "--hot-rows", hot, "--steps", "all")  # run.json's settings
    assert from_text == from_run == {(nranks, hot): recorded}
    assert round(recorded) == said
    assert recorded > 100  # the exchange carried rows, not nothing


def test_sampled_steps_spread_over_the_epoch():
    assert plan.sampled_steps(100, 5, 1) == [0, 24, 49, 74, 98]  # the last, often short, left out
    assert plan.sampled_steps(3, 20, 1) == [0, 1, 2]
    assert plan.sampled_steps(3, None, 2) == list(range(6))


def test_a_rank_plans_what_training_prepares(corpus, tmp_path):
    """plan_steps' keys per owner are those of loop.prepare_step, the function each training rank calls."""
    from hvd_w2v.parallel.shard import RowPlan
    from hvd_w2v.training.loop import prepare_step

    cfg = Config(batch_words=256)
    c = plan.open_corpus([corpus], cfg)
    try:
        seen = []
        for done, by_hot in plan.plan_steps(c, cfg, 3, [0, 20], [0, 7]):
            seen.append((done, sorted(by_hot)))
            for h, step in by_hot.items():
                want = [prepare_step(c.stream, c.vocab, cfg, RowPlan(c.vocab.size, 3), h, 1, done, r).owned
                        for r in range(3)]
                assert np.array_equal(step.asked, np.stack(want))
                assert step.positions.sum() == 256
        assert seen == [(0, [0, 20]), (7, [0, 20])]
    finally:
        c.folder.cleanup()


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "corpus file not found"),
    (["{folder}"], "holds no non-empty file"),  # an empty folder: a corpus folder without files
    (["{run}"], "is not a run folder"),  # vocab.txt without ids/
    (["{corpus}", "--ranks", "2,x"], "--ranks wants whole numbers"),
    (["{corpus}", "--ranks", "100000"], "more than the"),
    (["{corpus}", "--steps", "0"], "--steps wants numbers of at least 1"),
    (["{corpus}", "--batch-words", "10"], "--batch-words wants numbers of at least 64"),
    (["{corpus}", "--bandwidth", "0"], "--bandwidth must be more than 0"),
])
def test_bad_input_is_one_clear_message(corpus, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "vocab.txt").write_text("the 10\n")
    names = dict(missing=tmp_path / "nope.txt", folder=tmp_path / "empty", run=tmp_path / "run", corpus=corpus)
    argv = [a.format(**names) for a in args] + ["--compute-us-per-position", "1"]
    assert plan.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hvd-w2v plan: error: ") and message in err[-1], err
    with pytest.raises(UserError):
        plan.run(_parsed(argv))


def _parsed(argv):
    import argparse

    p = argparse.ArgumentParser()
    plan.add_arguments(p)
    return p.parse_args(argv)
