"""The measurements behind the speed defaults: batch size, update cap, hot rows, Horovod's cycle, threads.

    python -m hvd_w2v.bench.settings            # first 150,000 lines of the real corpus, 3 epochs, 2 ranks

Each row is an `hvd-w2v train` job on the same corpus, changing one setting from the defaults; it prints
words per second (the median of ``--repeats`` jobs, the rows taking turns so that a noisy minute does not
fall on one row alone), the exchange's share of step time and bytes sent per word, and the quality scores of
the result (hvd_w2v.bench.gensim_scores; the same vectors at every repeat), because batch size and update cap
trade speed against quality. Run it on an otherwise idle machine.
"""
import argparse
import os
import statistics
import sys

from .gensim_scores import scores
from .throughput import prepare_corpus, run_hvd

# (what changes, ranks, threads per rank, extra options, extra environment); the first row is the defaults.
# 1 rank with 1 thread runs on one core (taskset, see bench.throughput).
ROWS = [
    ("defaults", 2, 1, [], {}),
    ("--batch-words 512", 2, 1, ["--batch-words", "512"], {}),
    ("--batch-words 1024", 2, 1, ["--batch-words", "1024"], {}),
    ("--batch-words 4096", 2, 1, ["--batch-words", "4096"], {}),
    ("--batch-words 8192", 2, 1, ["--batch-words", "8192"], {}),
    ("--update-cap 256", 2, 1, ["--update-cap", "256"], {}),
    ("--update-cap 1e9 (no cap)", 2, 1, ["--update-cap", "1e9"], {}),
    ("--hot-rows 256", 2, 1, ["--hot-rows", "256"], {}),
    ("HOROVOD_CYCLE_TIME=1 (Horovod's default)", 2, 1, [], {"HOROVOD_CYCLE_TIME": "1"}),
    ("HOROVOD_CYCLE_TIME=50", 2, 1, [], {"HOROVOD_CYCLE_TIME": "50"}),
    ("1 rank, 1 thread", 1, 1, [], {}),
    ("1 rank, 2 threads", 1, 2, [], {}),
]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=150000, help="use the first LINES lines, 0: all (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1, help="jobs per row; words/s is their median")
    p.add_argument("--eval-dir", default=os.path.join("data", "real", "eval"))
    p.add_argument("--out", default=os.path.join("runs", "settings"))
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    corpus = prepare_corpus(args.corpus, args.lines, args.out)
    runs = {label: [] for label, *_ in ROWS}
    for r in range(args.repeats):
        for label, ranks, threads, options, env in ROWS:
            runs[label].append(job(corpus, ranks, threads, options, env, args, score=r == args.repeats - 1))
            print(f"repeat {r + 1}/{args.repeats}: {label}: {runs[label][-1]['words_per_s']:,.0f} words/s",
                  file=sys.stderr, flush=True)
    print(f"corpus {os.path.relpath(corpus)}, {args.epochs} epochs, skip-gram; words/s: median of {args.repeats} "
          f"job(s) per row", flush=True)
    print(f"{'setting':42} {'ranks':>5} {'words/s':>9} {'exchange':>9} {'bytes/word':>10} "
          f"{'analogy':>8} {'ws353':>6} {'simlex':>6}", flush=True)
    for label, ranks, *_ in ROWS:
        got = runs[label]
        a, ws, sl = got[-1]["scores"]
        print(f"{label:42} {ranks:5} {statistics.median(g['words_per_s'] for g in got):9,.0f} "
              f"{statistics.median(g['exchange'] for g in got):9.0%} {got[-1]['bytes_per_word']:10,.0f} "
              f"{a:8.3f} {ws:6.3f} {sl:6.3f}", flush=True)
    return 0


def job(corpus, ranks, threads, options, env, args, score):
    """One row's `hvd-w2v train` job (bench.throughput.run_hvd's figures), with its vectors' scores if asked."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # mpi/launch passes HOROVOD_* on to the ranks
    try:
        got = run_hvd(corpus, ranks, args.epochs, True, args.out, options, threads=threads)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    if score:
        got["scores"] = scores(os.path.join(args.out, f"hvd-{ranks}", "vectors.bin"), args.eval_dir)
    return got


if __name__ == "__main__":
    sys.exit(main())
