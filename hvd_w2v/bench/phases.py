"""Where one rank's step goes, phase by phase, on 1 and more threads: the profile of a threaded step.

    python -m hvd_w2v.bench.phases                          # first 76,000 lines of the real corpus
    python -m hvd_w2v.bench.phases --threads 1,2,3 --steps 500
    python -m hvd_w2v.bench.phases --shards 2 --superstep 4096 --steps 60   # shard-local SGD's super-steps
    python -m hvd_w2v.bench.phases --hs --threads 1                          # hierarchical softmax's steps

One process, one rank's steps as training runs them on one rank (no MPI): for each architecture and thread
count, ``--steps`` consecutive steps of ``--batch-words`` positions, each phase timed on its own with
perf_counter and the median over the steps (the first 20 left out) printed side by side:

- *examples*: batches.build (the compiled builder: its threads subsample and build ranges of positions);
- *table*: loop.StepPlan.of, the step's unique keys numbered (classes of keys over the threads);
- *gather*: the step's rows copied out of the model (native.take_rows, rows split over the threads);
- *maths*: the compiled step (its centres cut over the threads, then their updates summed row range by
  row range) with its call;
- *add*: the owners' capped add (native.add_sources, rows split over the threads).

With ``--shards V`` (and ``--superstep S``), a step is a super-step of shard-local SGD (localsgd.py) on one
rank hosting all V shards: *examples* builds every shard's S positions (localsgd.superstep_batches), *table*
indexes them and counts the shards touching each row (localsgd.superstep_plan), *maths* runs the compiled
shard SGD (localsgd_kernel.cc), *add* adds the deltas (the sum: no cap).

A phase's ratio against 1 thread shows what its threads gain; the phases left on one thread, and the
Python between them, are where the other threads wait. The model is drawn at random (its values do not
change what a phase costs), and every step trains it, so the rows' values move as in training.

``--waits`` also shows the maths' threads from inside the compiled call (sgns_kernel.cc built with
-DHVD_W2V_PROFILE, its clock reads compiled in): each thread's microseconds a call in each part of it, the
set-up on the calling thread alone, the waits at the call's two meetings (after the marks, after the
centres), and the work between them. That is where the threads wait on each other.

``--builder-thread`` also times whole steps (whole_step), super-steps with ``--shards``: as training runs
them, and in a design the trainer does not use, the examples and tables built one step ahead on a Python
thread of their own while the loop's thread runs the rest.
"""
import argparse
import os
import statistics
import time
from types import SimpleNamespace

import numpy as np

from ..common.wording import counted
from .throughput import prepare_corpus

NO_HOT_ROWS = SimpleNamespace(n=0)  # what a step rule is told of the hot rows (exchange.HotRows) here: none

PHASES = ("examples", "table", "gather", "maths", "add")
WARM_UP = 20
# sgns_kernel.cc's parts of a call (its enum Part), as maths_waits names them
MATHS_PARTS = ("set-up", "marks", "wait: marks", "shared rows", "centres", "wait: chunks", "sum")


class _Rank:
    """One rank's training as the benchmark runs it (no MPI): its model drawn at random, and each phase of a
    step as a method, its compiled calls on ``threads`` threads."""

    def __init__(self, corpus, sg, threads, batch_words, shards=0, superstep=4096, hs=False):
        from ..common.config import Config
        from ..parallel.shard import RowPlan
        from ..training import localsgd, sgns
        from ..training.loop import CappedAdd

        self.corpus, self.sg, self.threads = corpus, sg, threads
        self.cfg = Config(sg=sg, batch_words=batch_words, shards=shards, superstep=superstep, hs=hs,
                          negative=0 if hs else Config.negative)
        self.plan = RowPlan(corpus.vocab.size, 1)
        if shards:  # shard-local SGD's rule: its maths, and the sum of the deltas
            self.rule = localsgd.LocalSGD(self.cfg, corpus.vocab, corpus.stream, self.plan, NO_HOT_ROWS, 0,
                                           threads)
            self.apply = self.rule.apply
        else:
            self.step_fn = sgns.step_function(sg, self.cfg.window, threads=threads, hs=hs)
            self.apply = CappedAdd(float(self.cfg.update_cap), threads)
        rng = np.random.default_rng(0)
        self.table = (rng.uniform(-0.5, 0.5, (2 * corpus.vocab.size, self.cfg.dim)) / self.cfg.dim).astype(np.float32)
        self.scratch = np.zeros(len(self.table), np.float32)
        self.steps = self.cfg.steps_per_epoch(len(corpus.stream))

    def examples(self, done, threads):
        from ..training import batches, localsgd
        from ..training.loop import share

        if self.cfg.shards:  # (batch, bounds)
            return localsgd.superstep_batches(self.corpus.stream, self.corpus.vocab, self.cfg, done,
                                              range(self.cfg.shards), threads)
        epoch, lo, hi = share(self.cfg, len(self.corpus.stream), done, 0, 1)
        return batches.build(self.corpus.stream, self.corpus.vocab, self.cfg, epoch, lo, hi, threads)

    def table_of(self, batch, threads):
        from ..training.localsgd import superstep_plan
        from ..training.loop import StepPlan

        if self.cfg.shards:
            return superstep_plan(*batch, self.plan, 0, self.sg, threads)
        return StepPlan.of(batch, self.plan, 0, self.sg, self.step_fn.groups, threads)

    def gather(self, step):
        from ..kernels import native

        empty = self.rule.empty_rows if self.cfg.shards else self.step_fn.empty_rows
        rows = empty(step.table, self.cfg.dim)
        native.take_rows(self.table, step.keys, rows[:len(step.keys)], self.threads)  # one rank: key = row
        rows[len(step.keys):] = 0
        return rows

    def maths(self, step, rows):
        if self.cfg.shards:
            updates, loss, _ = self.rule.maths(rows, step, np.float32(self.cfg.alpha))
        else:
            updates, loss, _ = self.step_fn(rows, step.ctx, step.tgt, np.float32(self.cfg.alpha), step.codes)
        float(loss)
        return updates

    def add(self, step, updates):
        self.apply.sources(self.table, step.keys, [updates[:len(step.keys)]], step.sgd, self.scratch)


def measure(corpus, sg, threads, steps, batch_words, shards=0, superstep=4096, hs=False):
    """{phase: median seconds} over ``steps`` steps (super-steps with ``shards``) of one rank on ``threads``
    threads (``hs``: hierarchical softmax's)."""
    rank = _Rank(corpus, sg, threads, batch_words, shards, superstep, hs)
    seconds = {phase: [] for phase in PHASES}
    for done in range(min(steps, rank.steps)):
        t0 = time.perf_counter()
        batch = rank.examples(done, threads)
        t1 = time.perf_counter()
        step = rank.table_of(batch, threads)
        t2 = time.perf_counter()
        rows = rank.gather(step)
        t3 = time.perf_counter()
        updates = rank.maths(step, rows)
        t4 = time.perf_counter()
        rank.add(step, updates)
        t5 = time.perf_counter()
        for phase, a, b in zip(PHASES, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5)):
            seconds[phase].append(b - a)
    return {phase: statistics.median(s[WARM_UP:] or s) for phase, s in seconds.items()}


def path_nodes(corpus, steps, batch_words):
    """Hierarchical softmax's targets a skip-gram pair trains, on average: the inner nodes on its centre's path,
    over the centres of the first ``steps`` steps."""
    from ..common.config import Config
    from ..training import batches

    cfg = Config(hs=True, negative=0, batch_words=batch_words)
    batch = batches.build(corpus.stream, corpus.vocab, cfg, 0, 0, min(len(corpus.stream), steps * batch_words))
    nodes, pairs = (batch.path >= 0).sum(axis=1), (batch.contexts >= 0).sum(axis=1)
    return float((nodes * pairs).sum() / max(pairs.sum(), 1))


def maths_waits(corpus, sg, threads, steps, batch_words):
    """[[us a call in each of MATHS_PARTS] for each of ``threads`` threads]: the maths of ``steps`` steps of one
    rank (the first WARM_UP left out) on ``threads`` threads, timed inside the call by the profiled build of
    sgns_kernel.cc. The set-up runs on the calling thread (thread 0) alone, before the others start."""
    from ..kernels import native

    functions = {**native.STEP_FUNCTIONS, "hvd_w2v_sgns_profile": [native.P, native.I64]}
    lib = native.declared(native.build("sgns_kernel", ["-DHVD_W2V_PROFILE"]), functions, native.I64)
    if lib.hvd_w2v_sgns_profile(None, 0) != len(MATHS_PARTS):  # asked of no thread first: it writes nothing
        raise RuntimeError("sgns_kernel.cc's parts are not MATHS_PARTS")
    rank = _Rank(corpus, sg, threads, batch_words)
    steps = min(steps, rank.steps)
    skip = WARM_UP if steps > WARM_UP else 0
    seconds, start = np.zeros((threads, len(MATHS_PARTS))), None
    for done in range(steps):
        step = rank.table_of(rank.examples(done, threads), threads)
        rows = rank.gather(step)
        if done == skip:  # the seconds so far: the warm-up's
            lib.hvd_w2v_sgns_profile(seconds.ctypes.data, threads)
            start = seconds.copy()
        native.sgns_step(lib, sg, rows, step.ctx, step.tgt, np.float32(rank.cfg.alpha), threads)
    lib.hvd_w2v_sgns_profile(seconds.ctypes.data, threads)
    return ((seconds - start) / (steps - skip) * 1e6).tolist()


def whole_step(corpus, sg, threads, steps, batch_words, builder=False, shards=0, superstep=4096):
    """Seconds a whole step (super-step with ``shards``) takes, the median over ``steps`` steps of one rank,
    Python included: as training runs it (``builder`` False: each step's examples and table built, then its
    rows gathered, its maths and its add, every phase on ``threads`` threads in turn), or (``builder`` True) a
    design the trainer does not use, measured to weigh it: the examples and tables built one step ahead on a
    Python thread of their own (its compiled calls on one thread each, the GIL released in them) while the
    loop's thread gathers, computes and adds on ``threads`` threads. (Shard-local SGD's vectors do not depend
    on the threads, so there the choice would change no result.)"""
    import queue
    import threading

    rank = _Rank(corpus, sg, threads, batch_words, shards, superstep)
    steps = min(steps, rank.steps)

    def build(done, on):
        return rank.table_of(rank.examples(done, on), on)

    ready = queue.Queue(maxsize=1)  # one step ahead: the builder waits for the loop beyond that
    if builder:
        threading.Thread(target=lambda: [ready.put(build(done, 1)) for done in range(steps)], daemon=True).start()
    seconds, last = [], time.perf_counter()
    for done in range(steps):
        step = ready.get() if builder else build(done, threads)
        rank.add(step, rank.maths(step, rank.gather(step)))
        now = time.perf_counter()
        seconds.append(now - last)
        last = now
    return statistics.median(seconds[WARM_UP:] or seconds)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=76000, help="the first LINES lines (0: all)")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-words", type=int, default=2048)
    p.add_argument("--out", default=os.path.join("runs", "phases"))
    p.add_argument("--shards", type=int, default=0,
                   help="shard-local SGD's super-steps of V shards, all on the one rank (default 0: the exact step)")
    p.add_argument("--superstep", type=int, default=4096, help="with --shards: positions a shard a super-step")
    p.add_argument("--hs", action="store_true", help="hierarchical softmax's steps (the exact step's)")
    p.add_argument("--waits", action="store_true",
                   help="also the maths' threads inside the call: each part's us, and the waits (maths_waits)")
    p.add_argument("--builder-thread", action="store_true",
                   help="also whole steps, as training runs them and with the builder on a thread of its own "
                        "(whole_step)")
    args = p.parse_args(argv)
    if args.shards and (args.waits or args.hs):
        p.error("--waits and --hs time the exact step's maths: not with --shards")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    counts = [int(t) for t in args.threads.split(",")]
    tf.config.threading.set_intra_op_parallelism_threads(max(counts))
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ..common.config import Config
    from ..planning.plan import open_corpus

    os.makedirs(args.out, exist_ok=True)
    path = prepare_corpus(args.corpus, args.lines, args.out)
    corpus = open_corpus([path], Config())
    unit = (f"super-steps of {args.superstep:,} positions on each of {counted(args.shards, 'shard')}" if args.shards
            else f"steps of {args.batch_words:,} positions")
    print(f"corpus {path}: {len(corpus.stream):,} positions, {corpus.vocab.size:,} words; {unit} on one rank; "
          f"median of {max(args.steps - WARM_UP, 1)} per phase, in us")
    if args.hs:
        print(f"hierarchical softmax: {path_nodes(corpus, args.steps, args.batch_words):.1f} inner nodes a skip-gram "
              f"pair (negative sampling: {1 + Config.negative} targets)")
    for sg in (True, False):
        results = {t: measure(corpus, sg, t, args.steps, args.batch_words, args.shards, args.superstep, args.hs)
                   for t in counts}
        base = results[counts[0]]
        head = "".join(f"{counted(t, 'thread'):>12}{'ratio':>7}" for t in counts)
        print(f"\n{'skip-gram' if sg else 'CBOW':<10}{head}")
        for phase in (*PHASES, "step"):
            row = f"{phase:<10}"
            for t in counts:
                value = sum(results[t].values()) if phase == "step" else results[t][phase]
                ref = sum(base.values()) if phase == "step" else base[phase]
                row += f"{value * 1e6:>12,.0f}{ref / value:>6.2f}x"
            print(row)
        if args.waits:
            for t in counts:
                parts = maths_waits(corpus, sg, t, args.steps, args.batch_words)
                print(f"\nmaths, {counted(t, 'thread')}" + "".join(f"{name:>13}" for name in MATHS_PARTS)
                      + f"{'in all':>9}")
                for i, us in enumerate(parts):
                    print(f"{f'thread {i}':<{len('maths, ') + len(counted(t, 'thread'))}}"
                          + "".join(f"{u:>13,.0f}" for u in us) + f"{sum(us):>9,.0f}")
        if args.builder_thread:
            print(f"\n{'whole steps':<22}{'us':>8}{'ratio':>7}")
            ways = [(f"in turn, {counted(t, 'thread')}", t, False) for t in counts]
            ways += [(f"builder thread + {t}", t, True) for t in sorted({1, max(max(counts) - 1, 1)})]
            ref = None
            for name, t, ahead in ways:
                value = whole_step(corpus, sg, t, args.steps, args.batch_words, ahead, args.shards, args.superstep)
                ref = ref or value
                print(f"{name:<22}{value * 1e6:>8,.0f}{ref / value:>6.2f}x")


if __name__ == "__main__":
    main()
