"""Another commit's compiled kernels against this checkout's, fed the same steps: the A/B of a change to them.

    python -m hvd_w2v.bench.kernels 13c534e                  # the step's examples, table and maths, 1 and 2 threads
    python -m hvd_w2v.bench.kernels HEAD~1 --kernels examples    # the examples' builder alone
    python -m hvd_w2v.bench.kernels HEAD~1 --kernels maths --arch cbow --processes 5
    python -m hvd_w2v.bench.kernels 66bc81d --kernels shard     # shard-local SGD's super-step (V = 2, S = 4,096)

A change to a kernel moves a step by a few percent, and on a shared machine whole runs move by more than that
from one minute to the next. So this builds COMMIT's source of each kernel (``git show
COMMIT:hvd_w2v/NAME.cc``, with native.py's flags) beside this checkout's and feeds both the same steps in
one process: one rank's steps as bench.phases makes them (the first ``--lines`` lines), ``--rounds`` rounds,
each library's calls on each thread count in turn, in an order shuffled every round (seeded): a library's
calls can leave the allocator and the caches in a state that the next one's pay for, so no library may
always follow the same one. A third library is a copy of this checkout's, loaded apart (the *placebo*): the
same code, measured the same way.

A library also keeps a bias for the whole of a process (where its code and its buffers fell in memory): a
copy of the same library can run slower than the original all through one process and not in the next.
So the rounds run in ``--processes`` processes, one after the other, and the table gives the median over
them and the lowest and highest process. A ratio is worth reading only where the placebo's range stays
clear of it.

Printed per kernel, architecture and thread count: each library's median call (over the processes, of the
median over rounds of a round's median), its speed against COMMIT's (a process's: the median over rounds of
COMMIT's round median over its own) and whether its outputs equal COMMIT's, byte for byte, on the first step
in every process (a change meant to keep the arithmetic must say "same"). The kernels' C signatures must be
the same in both: a changed one is refused.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from ..common.wording import counted
from ..kernels import native
from . import ROOT, checkout_env
from .phases import _Rank
from .throughput import prepare_corpus

# name: (library, its functions as native.py declares them, the flags it is built with, the function timed)
KERNELS = {"examples": ("batches_kernel", native.BUILDER_FUNCTIONS, native.BUILDER_FLAGS, "hvd_w2v_build"),
           "table": ("batches_kernel", native.BUILDER_FUNCTIONS, native.BUILDER_FLAGS, "hvd_w2v_step_plan"),
           "maths": ("sgns_kernel", native.STEP_FUNCTIONS, (), "hvd_w2v_sgns_step"),
           "shard": ("localsgd_kernel", native.LOCAL_FUNCTIONS, (), "hvd_w2v_local_sgd")}
SHARDS, SUPERSTEP = 2, 4096  # the "shard" kernel's super-steps: localsgd's defaults on a 2-core host
WARM_UP = 3  # calls of a round left out of its median


def signature(text, function):
    """``function``'s parameter list in C source ``text``, its whitespace normalised ("" if absent)."""
    found = re.search(rf"\b{function}\s*\(([^)]*)\)", text)
    return " ".join(found.group(1).split()) if found else ""


def source_of(kernel, commit):
    """COMMIT's source of ``kernel`` (bytes). Raises ValueError when COMMIT has no such source or its timed
    function takes other arguments than this checkout's."""
    name, _, _, function = KERNELS[kernel]
    for folder in ("hvd_w2v/kernels", "hvd_w2v"):  # the kernels' folder, and where commits before it kept them
        shown = subprocess.run(["git", "show", f"{commit}:{folder}/{name}.cc"], cwd=ROOT, capture_output=True)
        if not shown.returncode:
            break
    else:
        raise ValueError(f"{commit} has no hvd_w2v/kernels/{name}.cc: {shown.stderr.decode().strip()}")
    with open(os.path.join(native.HERE, f"{name}.cc")) as f:
        ours = f.read()
    if signature(shown.stdout.decode(), function) != signature(ours, function):
        raise ValueError(f"{commit}'s {function} takes other arguments than this checkout's: no A/B of them")
    return shown.stdout


def libraries(kernel, commit, folder):
    """{label: loaded library} of ``kernel``: COMMIT's, this checkout's and its placebo (a copy in ``folder``);
    ValueError as source_of."""
    name, functions, flags, _ = KERNELS[kernel]
    theirs = source_of(kernel, commit)
    own = native.build(name, flags)
    placebo = os.path.join(folder, f"{kernel}-placebo.so")  # a file of its own: one loaded is never rewritten
    shutil.copyfile(own, placebo)
    return {commit: native.declared(native.build(name, flags, theirs), functions, native.I64),
            "this checkout": native.declared(own, functions, native.I64),
            "placebo": native.declared(placebo, functions, native.I64)}


def inputs(kernel, corpus, sg, steps, hs=False):
    """``steps`` steps' inputs of ``kernel`` and a call of it: ``(inputs, call)``, ``call(lib, one input,
    threads)`` returning the kernel's outputs as a list of arrays. ``hs``: the maths of hierarchical softmax."""
    from ..common.config import Config
    from ..training.loop import CENTRE_BUCKET, ROW_BUCKET, _round_up

    rank = _Rank(corpus, bool(sg), 1, Config().batch_words, hs=hs)
    if kernel == "examples":  # batches.build's call of the builder, its positions read once
        from ..training.batches import builder_keys, read_around
        from ..training.loop import share

        cfg, stream, runs = rank.cfg, corpus.stream, corpus.vocab.runs
        reads = []
        for done in range(min(steps, rank.steps)):
            epoch, lo, hi = share(cfg, len(stream), done, 0, 1)
            reads.append((*read_around(stream, cfg, lo, hi), lo, hi, builder_keys(cfg, epoch)))

        def call(lib, r, threads):
            return list(native.build_examples(lib, *r, cfg.window, cfg.context_span, cfg.negative, runs, threads))
        return reads, call
    if kernel == "shard":  # localsgd's super-steps: every shard on the one rank
        rank = _Rank(corpus, bool(sg), 1, Config().batch_words, SHARDS, SUPERSTEP)
        steps_in = []
        for done in range(min(steps, rank.steps)):
            step = rank.table_of(rank.examples(done, 1), 1)
            steps_in.append((rank.gather(step), step.ctx[0], step.tgt[0], step.bounds))

        def call(lib, s, threads):
            deltas, loss, count = native.local_sgd(lib, sg, *s, np.float32(rank.cfg.alpha), threads)
            return [deltas, np.array([loss, count])]
        return steps_in, call
    batches = [rank.examples(done, 1) for done in range(min(steps, rank.steps))]
    if kernel == "table":
        def call(lib, b, threads):
            return list(native.step_plan(lib, b.centres, b.contexts, b.negatives, 1, 0, sg, ROW_BUCKET,
                                         _round_up(len(b), CENTRE_BUCKET), threads))
        return batches, call
    steps_in = []
    for b in batches:
        step = rank.table_of(b, 1)
        steps_in.append((rank.gather(step), step.ctx, step.tgt, step.codes))

    def call(lib, s, threads):
        updates, loss, count = native.sgns_step(lib, sg, *s[:3], np.float32(rank.cfg.alpha), threads, codes=s[3])
        return [updates, np.array([loss, count])]
    return steps_in, call


def measure(libs, args, call, thread_counts, rounds):
    """{(label, threads): [each round's median call, s]}, and {(label, threads): outputs equal the first
    label's on the first step}."""
    labels = list(libs)
    same = {}
    for threads in thread_counts:
        first = call(libs[labels[0]], args[0], threads)
        for label in labels:
            got = call(libs[label], args[0], threads)
            same[label, threads] = all(np.array_equal(a, b) for a, b in zip(got, first))
    runs = [(label, threads) for threads in thread_counts for label in labels]
    medians = {run: [] for run in runs}
    order = np.random.default_rng(0)
    for _ in range(rounds):
        for i in order.permutation(len(runs)):
            label, threads = runs[i]
            seconds = []
            for a in args:
                t = time.perf_counter()
                call(libs[label], a, threads)
                seconds.append(time.perf_counter() - t)
            medians[label, threads].append(statistics.median(seconds[WARM_UP:] or seconds))
    return medians, same


def summary(results, labels, thread_counts):
    """{(label, threads): (median us, median ratio to the first label, lowest, highest ratio)} over the
    processes' ``results`` (each {(label, threads): [each round's median call, s]}): a process's ratio is the
    median over its rounds of the reference's round median over the label's."""
    base, out = labels[0], {}
    for label in labels:
        for t in thread_counts:
            ratios = [statistics.median(b / m for b, m in zip(r[base, t], r[label, t])) for r in results]
            us = statistics.median(statistics.median(r[label, t]) for r in results) * 1e6
            out[label, t] = (us, statistics.median(ratios), min(ratios), max(ratios))
    return out


def table(title, labels, thread_counts, figures, same):
    """The printed table of one kernel and architecture (``figures``: summary's)."""
    base = labels[0]
    lines = [f"{title:<18}" + "".join(f"{counted(t, 'thread'):>40}" for t in thread_counts),
             f"{'':<18}" + f"{'us':>9}{'vs ' + base[:8]:>12}{'processes':>13}{'bytes':>6}" * len(thread_counts)]
    for label in labels:
        row = f"{label:<18}"
        for t in thread_counts:
            us, ratio, low, high = figures[label, t]
            row += f"{us:>9,.0f}{ratio:>11.3f}x{f'{low:.2f}-{high:.2f}':>13}{'same' if same[label, t] else 'DIFF':>6}"
        lines.append(row)
    return "\n".join(lines)


def run_one(a, thread_counts, out):
    """This process's measurements, as JSON into ``out``: [{kernel, sg, labels, rounds: [[label, threads,
    [s, ...]], ...], same: [[label, threads, bool], ...]}, ...]."""
    from ..common.config import Config
    from ..planning.plan import open_corpus

    corpus = open_corpus([prepare_corpus(a.corpus, a.lines, a.out)], Config())
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for kernel in a.kernels.split(","):
            libs = libraries(kernel, a.commit, folder)
            archs = {"sg": [True], "cbow": [False], "both": [True, False]}[a.arch]
            for sg in [None] if kernel == "examples" else archs:  # the examples are the same for both
                args, call = inputs(kernel, corpus, sg, a.steps, a.hs)
                medians, same = measure(libs, args, call, thread_counts, a.rounds)
                found.append(dict(kernel=kernel, sg=sg, labels=list(libs), rounds=[[*k, v] for k, v in medians.items()],
                                  same=[[*k, v] for k, v in same.items()]))
    with open(out, "w") as f:
        json.dump(found, f)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("commit", help="the commit whose kernels are the reference (git rev)")
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=76000, help="the first LINES lines (0: all)")
    p.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated, of {', '.join(KERNELS)}")
    p.add_argument("--arch", choices=["sg", "cbow", "both"], default="both")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    p.add_argument("--hs", action="store_true", help="the maths of hierarchical softmax (the maths kernel)")
    p.add_argument("--steps", type=int, default=60, help="steps fed to each library a round")
    p.add_argument("--rounds", type=int, default=7, help="rounds in each process")
    p.add_argument("--processes", type=int, default=3, help="processes, one after the other")
    p.add_argument("--out", default=os.path.join("runs", "kernels"))
    p.add_argument("--one", help=argparse.SUPPRESS)  # a process of the run: its measurements into this file
    a = p.parse_args(argv)
    thread_counts = [int(t) for t in a.threads.split(",")]
    if not set(a.kernels.split(",")) <= set(KERNELS):
        p.error(f"--kernels: of {', '.join(KERNELS)}")
    if a.one:
        return run_one(a, thread_counts, a.one)
    os.makedirs(a.out, exist_ok=True)
    for kernel in a.kernels.split(","):  # a bad commit or a changed signature: one message, before any run
        try:
            source_of(kernel, a.commit)
        except ValueError as e:
            p.exit(2, f"hvd-w2v bench.kernels: error: {e}\n")
    print(f"corpus {prepare_corpus(a.corpus, a.lines, a.out)}: one rank's steps; {a.steps} steps a round, "
          f"{a.rounds} rounds in each of {a.processes} processes; medians over the processes, and the lowest "
          f"and highest process; the placebo is this checkout's library loaded twice", flush=True)
    runs = []
    for i in range(a.processes):
        out = os.path.join(a.out, f"process-{i}.json")
        subprocess.run([sys.executable, "-m", "hvd_w2v.bench.kernels", *(argv if argv is not None else sys.argv[1:]),
                        "--one", out], check=True,
                       env=checkout_env())
        with open(out) as f:
            runs.append(json.load(f))
    for parts in zip(*runs):
        first = parts[0]
        results = [{(label, t): v for label, t, v in part["rounds"]} for part in parts]
        same = {}  # the same bytes in every process
        for part in parts:
            for label, t, equal in part["same"]:
                same[label, t] = same.get((label, t), True) and equal
        figures = summary(results, first["labels"], thread_counts)
        print()
        arch = {True: ", skip-gram", False: ", CBOW", None: ""}[first["sg"]]
        print(table(first["kernel"] + arch, first["labels"], thread_counts, figures, same))


if __name__ == "__main__":
    main()
