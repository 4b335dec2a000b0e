"""Pictures of the benchmarks' figures, as PNG files: a measure against the rank count, and loss curves.

    python -m hvd_w2v.bench.plots loss runs/a/tb runs/b/tb --label "2 ranks" --label "4 ranks" --out loss.png

Every function writes one PNG of about 800 x 450 pixels (100 dpi; two panels side by side: 1,200 x 450) and
returns its path. matplotlib is imported inside the functions, so importing this module costs nothing and the
trainer never loads matplotlib; the figures are drawn with the Agg canvas directly (no pyplot, no GUI backend,
no global backend switched). :func:`missing` tells a benchmark whether it can draw at all.

The loss command reads the scalars ``train --tensorboard DIR`` writes (hvd_w2v/common/progress.py): one value per
loss report, against the global step (the events carry no word count).
"""
import argparse
import os

WIDTH, HEIGHT, DPI = 8.0, 4.5, 100  # inches, inches, dots per inch: 800 x 450 pixels per panel
PANEL_WIDTH = 6.0  # inches per panel when there are several (a single one keeps WIDTH)


def missing():
    """None when matplotlib can be imported; otherwise the one line a benchmark prints instead of its plot."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return f"plot: skipped, matplotlib is not installed ({e}); pip install matplotlib"
    return None


def _figure(panels, title):
    """A figure of ``panels`` axes side by side with ``title`` above them; (figure, list of axes)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH if panels == 1 else PANEL_WIDTH * panels, HEIGHT), dpi=DPI,
                 layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    fig.suptitle(title)
    return fig, list(axes)


def _save(fig, path):
    """Render ``fig`` with the Agg canvas (non-interactive, whatever backend the process has) into ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    FigureCanvasAgg(fig).print_png(path)
    return path


def _thousands(axis):
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))


def _rank_panel(ax, ranks, series, ylabel, reference, cores):
    """One measure against the rank count: a line with markers per series, a dashed horizontal line per
    reference value, the rank counts beyond ``cores`` shaded (oversubscribed: those ranks share cores)."""
    from matplotlib.ticker import NullLocator

    for label, values in series.items():
        if len(values) != len(ranks):
            raise ValueError(f"series {label!r}: {len(values)} values for {len(ranks)} rank counts")
        ax.plot(ranks, values, marker="o", label=label)
    for i, (label, value) in enumerate((reference or {}).items()):
        ax.axhline(value, linestyle="--", linewidth=1, color=f"C{len(series) + i}", label=label)
    ax.set_xscale("log", base=2)  # rank counts double: equal steps
    low, high = min(ranks) / 1.3, max(ranks) * 1.3
    ax.set_xlim(low, high)
    over = [r for r in ranks if cores and r > cores]
    if over:  # shaded from halfway (on the log axis) between the core count and the first rank count above it
        ax.axvspan((cores * min(over)) ** 0.5, high, color="0.9", zorder=0, label=f"more ranks than cores ({cores})")
    ax.set_xticks(sorted(set(ranks)), [str(r) for r in sorted(set(ranks))])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("ranks (processes)")
    # From zero, so that heights compare as ratios; headroom above the highest point or line.
    top = max([v for values in series.values() for v in values] + list((reference or {}).values()), default=0)
    ax.set_ylim(0, top * 1.08 or 1)
    _thousands(ax.yaxis)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def rank_scaling(path, title, ranks, series, ylabel, reference=None, cores=None):
    """Write a PNG of one measure against the rank count; returns ``path``.

    ``ranks``: the rank counts (x axis, log 2); ``series``: {label: one value per rank count} (lines with
    markers); ``ylabel``: the measure and its unit, e.g. "words per second"; ``reference``: {label: value},
    each a dashed horizontal line (gensim's figure, a memory limit); ``cores``: the cores of the machine, the
    rank counts beyond it are shaded as oversubscribed."""
    return rank_panels(path, title, ranks, [(series, ylabel, reference)], cores)


def rank_panels(path, title, ranks, panels, cores=None):
    """:func:`rank_scaling` with several panels side by side sharing the rank axis: ``panels`` is a list of
    (series, ylabel, reference) tuples, each as there."""
    fig, axes = _figure(len(panels), title)
    for ax, (series, ylabel, reference) in zip(axes, panels):
        _rank_panel(ax, ranks, series, ylabel, reference, cores)
    return _save(fig, path)


def loss_curve(path, title, runs, xlabel="global step", ylabel="loss per pair (mean since the last report)"):
    """Write a PNG of one or more loss curves on the same axes; returns ``path``.

    ``runs``: {label: (xs, losses)}, xs increasing (global steps, or words trained)."""
    fig, (ax,) = _figure(1, title)
    for label, (xs, losses) in runs.items():
        ax.plot(xs, losses, marker="." if len(xs) < 50 else None, label=label)
    _thousands(ax.xaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def read_scalars(folder, tag="loss"):
    """(steps, values) of scalar ``tag`` in the TensorBoard event files in ``folder``, in step order.

    ``tf.summary.scalar`` (what train writes) stores tensors; older writers' plain scalars are read too. Only
    the event files directly in ``folder`` are read, not those of its subfolders. Raises ValueError when there
    is no such folder or it holds no such scalar."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    if not os.path.isdir(folder):
        raise ValueError(f"no folder {folder}")
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0, "scalars": 0})  # 0: keep every event
    events.Reload()
    tags = events.Tags()
    if tag in tags.get("tensors", []):
        points = [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
    elif tag in tags.get("scalars", []):
        points = [(e.step, e.value) for e in events.Scalars(tag)]
    else:
        raise ValueError(f"no scalar {tag!r} in {folder} (found: {sorted(tags.get('tensors', []))})")
    points.sort()
    return [s for s, _ in points], [v for _, v in points]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.bench.plots", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    loss = sub.add_parser("loss", help="loss against the global step of one or more `train --tensorboard` runs")
    loss.add_argument("folders", nargs="+", metavar="TBDIR", help="a folder given to train --tensorboard")
    loss.add_argument("--out", required=True, help="the PNG to write")
    loss.add_argument("--label", action="append", default=[], metavar="NAME",
                      help="legend name of each TBDIR, in order (default: the folder)")
    loss.add_argument("--tag", default="loss", help="the scalar to plot (default: %(default)s)")
    loss.add_argument("--title", default=None)
    args = p.parse_args(argv)
    if args.label and len(args.label) != len(args.folders):
        p.error(f"{len(args.label)} --label for {len(args.folders)} folders")
    why = missing()
    if why:
        raise SystemExit(why)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorBoard's readers load TensorFlow: quiet, as mpi/launch
    runs = {}
    for folder, label in zip(args.folders, args.label or args.folders):
        try:
            runs[label] = read_scalars(folder, args.tag)
        except ValueError as e:
            raise SystemExit(str(e))
    ylabel = "loss per pair (mean since the last report)" if args.tag == "loss" else args.tag
    print(f"plot: {loss_curve(args.out, args.title or f'{args.tag} during training', runs, ylabel=ylabel)}")


if __name__ == "__main__":
    main()
