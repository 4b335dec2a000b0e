"""Where the training loop's time goes a step: the compiled calls and the Python between them, on 1 and more
threads.

    python -m hvd_w2v.bench.loop                     # first 76,000 lines of the real corpus, 1 epoch, 3 repeats
    python -m hvd_w2v.bench.loop --threads 1,2 --repeats 5 --arch cbow
    python -m hvd_w2v.bench.loop --threads 1 --arch sg --option=--shards=1 --option=--superstep=2048   # shard mode

Each run is one ``hvd-w2v train`` job of one rank in a process of its own (1 thread pinned to one core, as
bench.throughput runs it), with a timer around every call of the compiled libraries (hvd_w2v.kernels.native: the
examples, the table, the gather, the maths, the add). Per step it gives the loop (loop.train's seconds),
each call, and *the rest*: the Python between the calls, the loop's bookkeeping and the exchange's. The rest
runs on the rank's one Python thread whatever its budget, so it is the part of a threaded step that no
thread count shortens; the calls' own threads and waits are bench.phases'. Runs take turns (every thread
count once a round, ``--repeats`` rounds), and the table shows medians. With ``--option`` (train's options, e.g.
``--shards``), the shard mode's calls count under the same phases (its examples, table, gather, the shards' SGD as
the maths, the merge as the add), and a step is a super-step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from ..common.wording import counted
from .throughput import ROOT, one_core, prepare_corpus

# The compiled calls a step makes (hvd_w2v.kernels.native's functions), each under its phase's name in bench.phases.
CALLS = {"build_examples": "examples", "build_ranges": "examples", "step_plan": "table", "take_rows": "gather",
         "sgns_step": "maths", "local_sgd": "maths", "add_sources": "add", "add_rows": "add", "merge_sources": "add"}
PHASES = ("examples", "table", "gather", "maths", "add")


def child(argv):
    """Run ``hvd-w2v train ARGV`` in this process with the compiled calls timed; print one JSON line: the
    loop's seconds, its steps, and the seconds in each phase's calls."""
    from .. import cli
    from ..kernels import native
    from ..training import loop as training

    seconds = dict.fromkeys(PHASES, 0.0)
    steps, loop = [0], [0.0]

    def timed(name, phase):
        call = getattr(native, name)

        def call_timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                seconds[phase] += time.perf_counter() - t
                steps[0] += phase == "maths"
        setattr(native, name, call_timed)  # the trainer looks each up on the module, at every call

    for name, phase in CALLS.items():
        timed(name, phase)
    train = training.train

    def train_timed(*args, **kwargs):
        for phase in seconds:
            seconds[phase] = 0.0
        steps[0] = 0
        model, stats = train(*args, **kwargs)
        loop[0] = stats["seconds"]
        return model, stats

    training.train = train_timed
    code = cli.main(["train", *argv])
    if code:
        raise SystemExit(code)
    print(json.dumps(dict(seconds=loop[0], steps=steps[0], calls=seconds)))


def run(corpus, sg, threads, out, options=()):
    """One job (train's ``options`` added); returns {row: microseconds a step} for the loop, each phase and the
    rest."""
    cmd = [*one_core(threads), sys.executable, "-m", "hvd_w2v.bench.loop", "--child", corpus, "--epochs", "1",
           "--out", out, "--threads", str(threads), "--quiet", "--show", "", "--format", "binary",
           "--no-final-checkpoint", "--overwrite", *([] if sg else ["--cbow"]), *options]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    if done.returncode:
        raise SystemExit(f"hvd-w2v train failed ({done.returncode}):\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if not figures["steps"]:
        raise SystemExit(f"the job made no compiled step (native.sgns_step, native.local_sgd): {done.stderr[-2000:]}")
    per_step = {phase: s / figures["steps"] * 1e6 for phase, s in figures["calls"].items()}
    per_step["loop"] = figures["seconds"] / figures["steps"] * 1e6
    per_step["the rest"] = per_step["loop"] - sum(per_step[p] for p in PHASES)
    return per_step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=76000, help="the first LINES lines (0: all)")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument("--arch", choices=("sg", "cbow", "both"), default="both")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join("runs", "loop"))
    p.add_argument("--option", action="append", default=[], metavar="OPT",
                   help="an option of hvd-w2v train for every run, e.g. --option=--shards=1 (repeatable)")
    p.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        return child(args.child)
    os.makedirs(args.out, exist_ok=True)
    corpus = prepare_corpus(args.corpus, args.lines, args.out)
    counts = [int(t) for t in args.threads.split(",")]
    rows = ("loop", *PHASES, "the rest")
    print(f"corpus {corpus}: 1 epoch, one rank{''.join(f' {o}' for o in args.option)}; median of {args.repeats} "
          f"runs, in us a step")
    for sg in {"sg": (True,), "cbow": (False,), "both": (True, False)}[args.arch]:
        runs = {t: [] for t in counts}
        for _ in range(args.repeats):
            for t in counts:
                runs[t].append(run(corpus, sg, t, os.path.join(args.out, f"run-{t}"), args.option))
        med = {t: {row: statistics.median(r[row] for r in runs[t]) for row in rows} for t in counts}
        head = "".join(f"{counted(t, 'thread'):>12}{'ratio':>7}" for t in counts)
        print(f"\n{'skip-gram' if sg else 'CBOW':<10}{head}")
        for row in rows:
            print(f"{row:<10}" + "".join(f"{med[t][row]:>12,.0f}{med[counts[0]][row] / med[t][row]:>6.2f}x"
                                         for t in counts))
        print((f"{'rest/loop':<10}" + "".join(f"{med[t]['the rest'] / med[t]['loop']:>12.0%}{'':>7}"
                                              for t in counts)).rstrip())


if __name__ == "__main__":
    main()
