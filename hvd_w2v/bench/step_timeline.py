"""Where a multi-rank step's time goes: waiting for the other ranks at the exchange, against the exchange itself.

    python -m hvd_w2v.bench.step_timeline                  # first 76,000 lines of the real corpus, 2 epochs, 2 ranks

Runs `hvd-w2v train` on ``--ranks`` ranks (through mpi/launch, from the checkout), each rank recording every
exchange call of the step loop (the gather, then the scatter: Comm.alltoallv_many) as it enters and leaves it,
on CLOCK_MONOTONIC, which the processes of one host share, and the time it spent meanwhile building later
steps' examples. Then prints, per exchange, over the run's steps (the first 50 left out as warm-up):

- *arrival gap*: from the first rank's arrival to the last's, the time the early rank would wait;
- *last arrival to last exit*: the transfer itself, the copies of the rows on both sides, and any examples
  built in it;
- the examples built inside it, per rank;

and the step's period (from one gather to the next on rank 0): median, mean, and the share of the run spent
in steps over twice the median beyond the median (stalls: another process, Horovod's background thread).
Repeat the run to see the spread; the machine's noise moves single runs by 10% or more.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

from .throughput import ROOT, prepare_corpus

WARM_UP = 50


def child(out, argv):
    """In each rank: train with the exchange calls timed; the rank's records to ``out``.RANK.npy, one row per
    call: entered, left, seconds building examples inside it."""
    from .. import cli
    from ..parallel import comm

    records = []
    plain = comm.Comm.alltoallv_many

    def timed(self, parts, idle=None):
        inside = [0.0]

        def counted():
            t = time.monotonic()
            try:
                return idle() if idle else False
            finally:
                inside[0] += time.monotonic() - t

        entered = time.monotonic()
        got = plain(self, parts, counted)
        records.append((entered, time.monotonic(), inside[0]))
        return got

    comm.Comm.alltoallv_many = timed
    try:
        cli.main(argv)
    finally:
        np.save(f"{out}.{os.environ.get('OMPI_COMM_WORLD_RANK', '0')}.npy", np.array(records, np.float64))


def summary(records):
    """The printed lines for the per-rank ``records`` of one run (see the module docstring)."""
    n = min(len(r) for r in records)
    calls = np.stack([r[:n] for r in records])  # [rank, call, (entered, left, inside)]
    lines = []
    for name, which in (("gather", slice(0, None, 2)), ("scatter", slice(1, None, 2))):
        c = calls[:, which][:, WARM_UP:]
        gap = c[:, :, 0].max(axis=0) - c[:, :, 0].min(axis=0)
        transfer = c[:, :, 1].max(axis=0) - c[:, :, 0].max(axis=0)
        built = ", ".join(f"{m * 1e3:.2f}" for m in c[:, :, 2].mean(axis=1))
        lines.append(f"{name:8} arrival gap median {np.median(gap) * 1e3:.2f} ms, mean {gap.mean() * 1e3:.2f}; "
                     f"last arrival to last exit median {np.median(transfer) * 1e3:.2f} ms, mean "
                     f"{transfer.mean() * 1e3:.2f}; examples built inside, mean per rank: {built} ms")
    period = np.diff(calls[0, ::2, 0])[WARM_UP:]
    median = np.median(period)
    stalls = np.clip(period - median, 0, None)[period > 2 * median].sum() / period.sum()
    lines.append(f"step     period median {median * 1e3:.2f} ms, mean {period.mean() * 1e3:.2f}; steps over twice "
                 f"the median: {np.mean(period > 2 * median):.1%} of steps, {stalls:.1%} of the time beyond the median")
    return lines


def main(argv=None):
    if argv is None and sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2], sys.argv[3:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=76000, help="use the first LINES lines, 0: all (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default=os.path.join("runs", "timeline"))
    p.add_argument("--hvd-option", action="append", default=[], metavar="OPT",
                   help="extra option for hvd-w2v train (repeatable)")
    args = p.parse_args(argv)
    if args.ranks < 2:
        raise SystemExit("step_timeline compares ranks: --ranks must be at least 2")
    os.makedirs(args.out, exist_ok=True)
    corpus = prepare_corpus(args.corpus, args.lines, args.out)
    for r in range(args.repeats):
        stem = os.path.join(os.path.abspath(args.out), "calls")
        cmd = [os.path.join(ROOT, "mpi", "launch"), "-n", str(args.ranks), "--timeout", "3600", sys.executable,
               "-m", "hvd_w2v.bench.step_timeline", "--child", stem, "train", corpus, "--out",
               os.path.join(args.out, "run"), "--epochs", str(args.epochs), "--quiet", "--show", "", "--format",
               "binary", "--no-final-checkpoint", "--overwrite", *args.hvd_option]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        speed = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("done: ") and
                 "words/s" in line]
        if done.returncode or not speed:
            raise SystemExit(f"hvd-w2v failed:\n{(done.stdout + done.stderr)[-3000:]}")
        print(f"run {r + 1}/{args.repeats}: {args.ranks} ranks, {os.path.basename(corpus)}, {args.epochs} epochs: "
              f"{speed[-1][len('done: '):]}")
        for line in summary([np.load(f"{stem}.{k}.npy") for k in range(args.ranks)]):
            print("  " + line, flush=True)


if __name__ == "__main__":
    main()
