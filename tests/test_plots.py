"""The benchmarks' pictures (hvd_w2v/bench/plots.py): each function writes a PNG of the promised size from
hand-made figures; the loss command reads the TensorBoard events the trainer's own writer makes; the benchmarks'
plot steps draw from their table rows, and skip with one line when matplotlib is missing. No MPI."""
import struct
import sys

import pytest

pytest.importorskip("matplotlib")

from hvd_w2v.bench import plots, scale, throughput  # noqa: E402
from hvd_w2v.common.progress import Progress  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """(width, height) of a PNG file, after checking its magic bytes and that it holds a real picture."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    assert len(data) > 10_000, f"{path}: {len(data)} bytes, too small for a drawn plot"
    return struct.unpack(">II", data[16:24])


def test_rank_scaling(tmp_path):
    path = tmp_path / "sub" / "throughput.png"  # the folder is made
    got = plots.rank_scaling(str(path), "words/s", [1, 2, 4], {"hvd-w2v": [136_150, 169_828, 119_497]},
                             "words per second", {"gensim, 1 worker": 280_272, "gensim, 2 workers": 491_070},
                             cores=2)
    assert got == str(path)
    assert png_size(path) == (800, 450)


def test_rank_panels(tmp_path):
    path = tmp_path / "scale.png"
    plots.rank_panels(str(path), "scale", [1, 2, 4],
                      [({"peak": [2028, 1323, 889], "planned": [2089, 1282, 879]}, "MiB per rank", {"limit": 1024}),
                       ({"hvd-w2v": [32_310, 42_302, 36_135]}, "words per second", None)])
    assert png_size(path) == (1200, 450)


def test_rank_scaling_refuses_a_short_series(tmp_path):
    with pytest.raises(ValueError, match="2 values for 3 rank counts"):
        plots.rank_scaling(str(tmp_path / "x.png"), "t", [1, 2, 4], {"a": [1, 2]}, "y")


def test_loss_curve(tmp_path):
    path = tmp_path / "loss.png"
    plots.loss_curve(str(path), "loss", {"a": ([200, 400, 600], [4.1, 3.5, 3.2]), "b": ([200, 400], [4.0, 3.4])})
    assert png_size(path) == (800, 450)


class OneRank:
    """What Progress needs of a communicator, for one process without MPI."""
    rank, size = 0, 1

    def allreduce(self, x):
        return x


def write_run(folder, losses, every=200):
    """TensorBoard events as `train --tensorboard` writes them: a report every ``every`` steps."""
    progress = Progress(OneRank(), display=False, tensorboard=str(folder))
    total = every * len(losses)
    for i, loss in enumerate(losses, 1):
        progress.report(i * every, 0, total, 1, 1, 10_000, float(i), loss, 0.025, 0.1, 1000)
    return [every * i for i in range(1, len(losses) + 1)]


def test_loss_command(tmp_path, capsys):
    a, b = tmp_path / "a" / "tb", tmp_path / "b" / "tb"
    steps = write_run(a, [4.5, 3.9, 3.4])
    write_run(b, [4.4, 3.6])
    got_steps, losses = plots.read_scalars(str(a))
    assert got_steps == steps and losses == pytest.approx([4.5, 3.9, 3.4])
    out = tmp_path / "loss.png"
    plots.main(["loss", str(a), str(b), "--label", "run a", "--label", "run b", "--out", str(out)])
    assert capsys.readouterr().out.strip() == f"plot: {out}"
    assert png_size(out) == (800, 450)
    with pytest.raises(SystemExit, match="no scalar 'nope'"):
        plots.main(["loss", str(a), "--tag", "nope", "--out", str(out)])


def throughput_figures():
    runs = {("gensim", 1): [dict(words_per_s=280_000, peak_mib=[152])],
            ("gensim", 2): [dict(words_per_s=490_000, peak_mib=[153])],
            ("hvd-w2v", 1): [dict(words_per_s=136_000, peak_mib=[682])],
            ("hvd-w2v", 2): [dict(words_per_s=170_000, peak_mib=[597, 590])],
            ("hvd-w2v", 4): [dict(words_per_s=119_000, peak_mib=[552, 550, 549, 548])],
            (throughput.CEILING, 2): [dict(words_per_s=240_000, peak_mib=[597, 590])]}
    med = lambda t, k: runs[t][0][k]  # noqa: E731
    peak = lambda t: max(runs[t][0]["peak_mib"])  # noqa: E731
    return runs, med, peak


def test_benchmark_plots(tmp_path, capsys):
    throughput.plot(str(tmp_path), *throughput_figures(), "corpus, 1 epoch(s), skip-gram, median of 1")
    rows = [(1, 2089, 1250, [2028], 32_310), (2, 1282, 625, [1323, 1300], 42_302)]
    scale.plot(str(tmp_path / "scale.png"), rows, 1 << 30, "819,027 words, dim 200, 1 epoch")
    names = ["throughput.png", "memory.png", "scale.png"]
    assert capsys.readouterr().out.splitlines() == [f"plot: {tmp_path / n}" for n in names]
    assert [png_size(tmp_path / n) for n in names] == [(800, 450), (800, 450), (1200, 450)]


def test_benchmark_plots_without_matplotlib(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    throughput.plot(str(tmp_path), *throughput_figures(), "corpus")
    scale.plot(str(tmp_path / "scale.png"), [(1, 2089, 1250, [2028], 32_310)], 1 << 30, "about")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("plot: skipped, matplotlib is not installed") for line in lines)
    assert not list(tmp_path.iterdir())


def test_throughput_no_exchange_pair_splits_the_corpus_and_the_step(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"".join(b"line %d\n" % i for i in range(7)))
    halves = throughput.split_corpus(str(corpus), str(tmp_path))
    assert [open(h, "rb").read().count(b"\n") for h in halves] == [3, 4]
    assert b"".join(open(h, "rb").read() for h in halves) == corpus.read_bytes()
    assert throughput.option([], "batch-words", 2048) == 2048
    assert throughput.option(["--batch-words=4096", "--epochs=2", "--batch-words=512"], "batch-words", 2048) == 512
    line = "done: 412,345 words/s over 3.5 s; final loss 2.4 per pair; exchange 0% of step time and 0 bytes sent"
    got = throughput.figures(line + " per word (all ranks)\npeak resident MiB per rank [580]\n")
    assert (got["words_per_s"], got["seconds"], got["exchange"], got["peak_mib"]) == (412345, 3.5, 0, [580])
