"""The dry-run planner: what a step's exchange costs on P ranks, counted from the real encoded corpus by the
code training runs, in one process, without MPI and without training.

    python -m hvd_w2v.plan data/real/corpus.txt --ranks 2,4,8,16,32,64,128,256,512,1024 --hot-rows 0,256,4096
    python -m hvd_w2v.plan runs/mine --ranks 2,3,4 --steps all      # a run folder: its vocab.txt and ids/

For every rank count P, hot-row count H and sampled global step, it builds the StepPlan each of the P ranks
would build (loop.prepare_step's pieces: loop.share cuts the rank's positions, batches.build its examples,
loop.StepPlan.of its table of unique keys grouped by owner), takes from each the keys it asks of every owner,
and counts what exchange.Exchange sends for them, as Exchange.bytes_sent counts it:

- keys asked: 16 B for each key a rank asks of another rank (the int64 key and its int64 SGD count);
- rows gathered: 4 dim B for each row an owner sends back to another rank;
- updates scattered: 4 dim B for each update a rank sends to another rank's owner;
- nothing for the keys, rows and updates a rank has of itself, the hot rows' allreduce or the key counts
  that travel with the gather (8 B to every rank): training's "bytes sent per word" leaves them out too.

Bytes per word is those bytes of every rank over the epoch's steps (the sampled steps' mean times the steps),
over the corpus's raw words, what `hvd-w2v train` reports in its line "done: ... bytes sent per word (all
ranks)"; with ``--steps all``, every step of ``--epochs`` epochs, the same figure (tests/test_plan.py).

The projected step time is a model, printed with the table: see :class:`Network` and :class:`Compute`.
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace

import numpy as np

from ..common.config import Config
from ..common.errors import UserError
from ..parallel.shard import RowPlan
from ..text.vocab import CountRuns, Vocab
from ..training import batches
from ..training.loop import StepPlan, share

KEY_BYTES = 16  # a key and its SGD count, two int64 (exchange.Exchange._keys)
COUNT_BYTES = 8  # the next step's key count, one int64 to every rank with each gather (exchange.Exchange.gather)
DEFAULT_RANKS = "2,4,8,16,32,64,128,256,512,1024"


# -- the corpus, as training sees it -------------------------------------------------------------------------

class Alone:
    """The collectives of one rank with itself, for vocab.build and encode.encode in this process (no MPI)."""

    rank, size, threads = 0, 1, 1

    def allgather(self, obj):
        return [obj]

    def broadcast(self, obj, root=0):
        return obj

    def allreduce(self, value, op="sum"):
        return value

    def agree(self, error):
        if error:
            raise UserError(error)

    def alltoallv(self, send, counts, recv_counts=None, out=None):
        return np.asarray(send), np.asarray(counts, np.int64)

    def alltoall_ints(self, values):
        return np.asarray(values, np.int64)


@dataclass
class Corpus:
    """The encoded corpus: ``stream`` (encode.TokenStream), ``vocab`` (vocab.Vocab: its CountRuns and raw
    words), ``about`` (where it came from, one line). ``folder``: a temporary folder to remove, if any."""

    stream: object
    vocab: object
    about: str
    folder: object = None


def is_run_folder(path):
    return os.path.isdir(path) and os.path.exists(os.path.join(path, "ids", "stream.json"))


def open_corpus(paths, cfg, log=lambda m: None):
    """A run folder (``[RUN_DIR]``: its vocab.txt and ids/) or text files and folders of them (corpus.files_of),
    counted and encoded here in one process (vocab.build and encode.encode, as on one rank: the same ids and
    stream as on any rank count)."""
    if not paths:
        raise UserError("plan: give the corpus (text files) or a run folder (with vocab.txt and ids/)")
    from ..queries import runfolder
    from ..text import encode, vocab
    from ..text.corpus import files_of

    if len(paths) == 1 and runfolder.holds_a_run(paths[0]):
        return _run_folder(paths[0], cfg)
    paths, notes = files_of(paths)  # any other folder is a corpus folder, as train reads it
    for note in notes:
        log(f"plan: corpus {note}")

    folder = tempfile.TemporaryDirectory(prefix="hvd-w2v-plan-")
    alone = Alone()
    t = time.monotonic()
    voc = vocab.build(alone, paths, cfg, log)
    stream = encode.encode(alone, paths, voc, os.path.join(folder.name, "ids"), log)
    log(f"plan: corpus counted and encoded in {time.monotonic() - t:.1f} s")
    return Corpus(stream, voc, f"{', '.join(paths)} (encoded here, min count {cfg.min_count})", folder)


def _run_folder(path, cfg):
    from ..text.encode import TokenStream

    vocab_path = os.path.join(path, "vocab.txt")
    if not is_run_folder(path) or not os.path.exists(vocab_path):
        raise UserError(f"plan: {path} is not a run folder with vocab.txt and ids/stream.json (what "
                        f"`hvd-w2v encode` or `train` writes)")
    try:
        stream = TokenStream(os.path.join(path, "ids"))
        with open(vocab_path, "rb") as f:
            counts = np.array([int(line.rsplit(b" ", 1)[1]) for line in f if line.strip()], np.int64)
        with open(os.path.join(path, "ids", "stream.json")) as f:
            size = json.load(f)["vocab_size"]
    except (OSError, ValueError, IndexError, KeyError) as e:
        raise UserError(f"plan: cannot read the run folder {path}: {e}") from None
    if len(counts) != size or np.any(np.diff(counts) > 0):
        raise UserError(f"plan: {vocab_path} holds {len(counts):,} words, not in count order or not the "
                        f"{size:,} its ids/ were encoded with")
    # Ids are in count order, so the words of one count are one run (vocab.CountRuns), as agree_ids builds it.
    distinct, starts = np.unique(-counts, return_index=True)
    lengths = np.diff(np.append(starts, len(counts)))
    voc = Vocab(CountRuns(-distinct, lengths, cfg.sample, cfg.ns_exponent), stream.raw_words, {}, [], [])
    return Corpus(stream, voc, f"{path} (vocab.txt and ids/)")


def run_config(path):
    """The config a run folder's run.json recorded ({} when there is none)."""
    try:
        with open(os.path.join(path, "run.json")) as f:
            return json.load(f).get("config", {})
    except (OSError, ValueError):
        return {}


# -- what each rank sends ------------------------------------------------------------------------------------

@dataclass
class Step:
    """One global step on P ranks: ``asked[q, o]``, the cold keys rank q asks of owner o (its StepPlan's
    ``owned``; the diagonal is what a rank has of itself), and ``positions[q]``, rank q's share."""

    asked: np.ndarray  # int64[P, P]
    positions: np.ndarray  # int64[P]


def plan_steps(corpus, cfg, ranks, hot_rows, steps):
    """Yields ``(step, {H: Step})`` for each global step of ``steps`` on ``ranks`` ranks and each H of
    ``hot_rows``: every rank's examples built once (batches.build of loop.share's positions), then its
    StepPlan for each H. One step at a time: a Step holds P x P counts (8 MiB at 1,024 ranks)."""
    stream, voc = corpus.stream, corpus.vocab
    row_plan = RowPlan(voc.size, ranks)
    for done in steps:
        shares = [share(cfg, len(stream), done, r, ranks) for r in range(ranks)]
        examples = [batches.build(stream, voc, cfg, epoch, lo, hi) for epoch, lo, hi in shares]
        positions = np.array([hi - lo for _, lo, hi in shares], np.int64)
        by_hot = {}
        for h in hot_rows:
            n_hot = min(h, voc.size)  # as loop.train's HotRows
            # groups=1: the compiled step's one block; the keys and their owners are the same for any grouping.
            asked = np.stack([StepPlan.of(b, row_plan, n_hot, cfg.sg, 1).owned for b in examples])
            by_hot[h] = Step(asked, positions)
        yield done, by_hot


@dataclass(frozen=True)
class Traffic:
    """Per rank of one step, what it sends and receives (bytes, messages) in each stage."""

    keys: np.ndarray  # keys asked of others, sent (B)
    rows: np.ndarray  # rows served to others, sent (B)
    updates: np.ndarray  # updates sent to other owners (B)
    remote: np.ndarray  # keys this rank asks of others
    served: np.ndarray  # keys others ask of this rank
    peers_out: np.ndarray  # owners this rank asks something of
    peers_in: np.ndarray  # ranks that ask something of this rank

    @property
    def sent(self):
        """What Exchange.bytes_sent adds on each rank in this step."""
        return self.keys + self.rows + self.updates

    @classmethod
    def of(cls, step, dim):
        asked = step.asked
        own = np.diag(asked)
        remote, served = asked.sum(axis=1) - own, asked.sum(axis=0) - own
        talks = asked > 0
        np.fill_diagonal(talks, False)
        return cls(KEY_BYTES * remote, 4 * dim * served, 4 * dim * remote, remote, served,
                   talks.sum(axis=1), talks.sum(axis=0))


# -- the time model ------------------------------------------------------------------------------------------

# The payload a TCP connection carries on an Ethernet link of a given line rate, at MTU 1,500: 1,448 bytes of
# data (40 of IP and TCP headers, 12 of TCP timestamps) in 1,538 on the wire (14 of Ethernet header, 4 of FCS,
# 8 of preamble, 12 of interframe gap). hvd_w2v/bench/README.md, "The projection checked against runs", measured it.
PAYLOAD_SHARE = 1448 / 1538


@dataclass(frozen=True)
class Network:
    """A step's communication time, as a model: ``bandwidth`` (B/s of payload, each rank's link, full duplex:
    :meth:`line` from a link's line rate) and ``latency`` (s per message).

    A stage (an alltoallv) takes, on each rank, latency x max(messages it sends, messages it receives) +
    max(bytes it sends, bytes it receives) / bandwidth, and ends when its slowest rank's part does (the ranks
    meet there). The gather carries the rows and the next step's key counts (one int64 to every rank: P - 1
    messages each); the scatter carries the updates and the next step's keys, two messages per pair with
    traffic (the step's own keys stand in for the next step's). The hot rows' allreduce of a float32
    [2H, dim + 1] block is a ring: 2 (P - 1) / P x bytes / bandwidth + 2 (P - 1) x latency. Assumed: a network
    with full bisection (no link is shared by two ranks), no overlap between the stages and the compute, no
    Horovod cycle wait (comm.HOT_ROWS_CYCLE_MS), messages with no data are not sent.
    """

    bandwidth: float
    latency: float

    @classmethod
    def line(cls, bits_per_second, latency):
        """A link of ``bits_per_second`` on the wire: the payload TCP carries on it (PAYLOAD_SHARE)."""
        return cls(bits_per_second / 8 * PAYLOAD_SHARE, latency)

    def stage(self, msgs_out, msgs_in, bytes_out, bytes_in):
        return float(np.max(self.latency * np.maximum(msgs_out, msgs_in)
                            + np.maximum(bytes_out, bytes_in) / self.bandwidth))

    def gather(self, t, ranks):
        counts = (ranks - 1) * COUNT_BYTES
        return self.stage(t.peers_in + ranks - 1, t.peers_out + ranks - 1, t.rows + counts,
                          t.updates + counts) if ranks > 1 else 0.0

    def scatter(self, t):
        return self.stage(2 * t.peers_out, 2 * t.peers_in, t.updates + t.keys, t.rows + KEY_BYTES * t.served)

    def allreduce(self, block_bytes, ranks):
        if not block_bytes or ranks == 1:
            return 0.0
        return 2 * (ranks - 1) / ranks * block_bytes / self.bandwidth + 2 * (ranks - 1) * self.latency


@dataclass(frozen=True)
class Compute:
    """A rank's step maths: ``per_step`` + ``per_position`` x its positions (s); ``how`` says where the two
    figures come from (measured here, or given)."""

    per_step: float
    per_position: float
    how: str

    def __call__(self, positions):
        return self.per_step + self.per_position * positions


def measure_compute(corpus, cfg, at, repeats=7, statistic=np.median):
    """Compute from the real compiled step (sgns.step_function, one thread), timed in this process on one
    rank's StepPlan of global step ``at`` with all ``batch_words`` positions and with its first 32 (about the
    call's fixed cost): the median of ``repeats`` calls each, a line through the two. (A line through two
    large batches would not do: the step's cost per position grows with the batch, whose table of unique rows
    outgrows the caches, so a line through 2,048 and 131,072 positions crossed zero.) ``statistic``
    of the calls: the median, or the least (localplan's, where other jobs share the machine)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TensorFlow's start-up notes
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)  # a rank's compute, as mpi/launch gives 1 per core
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ..training import sgns

    step_fn = sgns.step_function(cfg.sg, cfg.window)
    stream, voc = corpus.stream, corpus.vocab
    row_plan = RowPlan(voc.size, 1)
    rng = np.random.default_rng(0)
    seconds = {}
    epoch, lo, hi = share(cfg, len(stream), at, 0, 1)
    for positions in (min(32, hi - lo), hi - lo):
        step = StepPlan.of(batches.build(stream, voc, cfg, epoch, lo, lo + positions), row_plan, 0, cfg.sg,
                           step_fn.groups)
        rows = step_fn.empty_rows(step.table, cfg.dim)
        rows[:] = rng.uniform(-0.5, 0.5, rows.shape) / cfg.dim
        rows[len(step.keys):] = 0
        times = []
        for _ in range(repeats + 1):  # the first call traces and allocates: left out
            t = time.perf_counter()
            updates, loss, _ = step_fn(rows, step.ctx, step.tgt, np.float32(cfg.alpha))
            float(loss), float(updates[:1].sum())
            times.append(time.perf_counter() - t)
        seconds[positions] = float(statistic(times[1:]))
    (small, t_small), (big, t_big) = sorted(seconds.items())
    per_position = max(0.0, (t_big - t_small) / max(big - small, 1))
    per_step = max(0.0, t_small - per_position * small)
    kind = "compiled step" if step_fn.fused else "TensorFlow graph (no compiled step here)"
    how = "least" if statistic is np.min else "median"
    return Compute(per_step, per_position,
                   f"measured on this host: the {kind}, 1 thread, on one rank's examples of {small:,} and {big:,} "
                   f"positions of step {at:,}: {t_small * 1e6:,.0f} and {t_big * 1e6:,.0f} us ({how} of "
                   f"{repeats} calls)")


# -- one row of the table ------------------------------------------------------------------------------------

@dataclass
class Row:
    """The figures of one (batch words, P, H), per rank per step means over the planned steps."""

    batch_words: int
    ranks: int
    hot: int
    keys: tuple  # (mean over ranks, max over ranks) of bytes sent, averaged over the steps
    rows: tuple
    updates: tuple
    sent: tuple
    pairs: float  # ordered rank pairs with traffic
    allreduce: int  # bytes of the hot rows' block each rank contributes
    bytes_total: float  # every rank's bytes over the planned steps (Exchange.bytes_sent summed over ranks)
    bytes_per_word: float
    compute: float  # seconds per step
    gather: float
    scatter: float
    reduce: float
    words_per_second: float

    @property
    def step(self):
        return self.compute + self.gather + self.scatter + self.reduce


def summarise(batch_words, ranks, hot, planned, cfg, corpus, network, compute, epoch_steps, all_steps):
    """The Row of ``planned``: (Traffic, the busiest rank's positions) of each planned step, for one H."""
    traffic = [t for t, _ in planned]
    both = lambda f: (float(np.mean([f(t).mean() for t in traffic])),  # noqa: E731
                      float(np.mean([f(t).max() for t in traffic])))
    total = float(sum(int(t.sent.sum()) for t in traffic))
    words = corpus.vocab.raw_words
    if all_steps:  # every step of every planned epoch: training's own sum
        per_word = total / (words * len(planned) / epoch_steps)
    else:  # the sampled steps' mean, over an epoch
        per_word = total / len(planned) * epoch_steps / words
    block = 2 * min(hot, corpus.vocab.size) * (cfg.dim + 1) * 4  # HotRows.apply's float32 [2H, dim + 1]
    times = np.array([(compute(busiest), network.gather(t, ranks), network.scatter(t),
                       network.allreduce(block, ranks)) for t, busiest in planned]).mean(axis=0)
    row = Row(batch_words, ranks, hot, both(lambda t: t.keys), both(lambda t: t.rows), both(lambda t: t.updates),
              both(lambda t: t.sent), float(np.mean([t.peers_out.sum() for t in traffic])), block, total, per_word,
              *map(float, times), 0.0)
    row.words_per_second = words / epoch_steps / row.step
    return row


def sampled_steps(epoch_steps, steps, epochs):
    """Global steps to plan: ``steps`` spread evenly over the first epoch, or every step of ``epochs`` epochs
    (``steps`` None). A sample of fewer steps than the epoch's stands for its full steps, so it leaves out the
    last, which is short whenever the stream is not a multiple of the step: counted as a whole step, it made a
    small sample's bytes per word fewer than a run sends (hvd_w2v/bench/README.md, "The projection checked
    against runs")."""
    if steps is None:
        return list(range(epoch_steps * epochs))
    if steps >= epoch_steps:
        return list(range(epoch_steps))
    return sorted(set(np.linspace(0, epoch_steps - 2, steps).round().astype(int).tolist()))


# -- the command ---------------------------------------------------------------------------------------------

def _ints(text, what, low=1):
    try:
        values = [int(v) for v in str(text).replace(" ", "").split(",") if v]
    except ValueError:
        raise UserError(f"{what} wants whole numbers separated by commas, got {text!r}") from None
    if not values or min(values) < low:
        raise UserError(f"{what} wants numbers of at least {low}, got {text!r}")
    return sorted(set(values))


SETTINGS = ("dim", "window", "negative", "min_count", "max_final_vocab", "sample", "sg", "seed", "span")


def add_arguments(p):
    """The planner's options on an argparse parser (``hvd-w2v plan`` or ``python -m hvd_w2v.plan``)."""
    d = Config()
    p.add_argument("corpus", nargs="+", metavar="CORPUS | RUN_DIR",
                   help="text files or folders of them, as train reads them (counted and encoded here, in one "
                        "process), or a run folder with vocab.txt and ids/ (what `hvd-w2v encode` or `train` "
                        "writes; its run.json's settings are the defaults)")
    p.add_argument("--ranks", default=DEFAULT_RANKS, help="rank counts P, comma-separated (default: %(default)s)")
    p.add_argument("--hot-rows", default="0", help="hot-row counts H, comma-separated (default: %(default)s)")
    p.add_argument("--batch-words", default=None,
                   help=f"corpus positions per global step, comma-separated for several (default: {d.batch_words})")
    p.add_argument("--steps", default="20",
                   help="global steps planned, spread over the first epoch, or 'all': every step of --epochs "
                        "epochs (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=1, help="epochs planned with --steps all (default: %(default)s)")
    g = p.add_argument_group("settings (default: the run folder's run.json, else train's defaults)")
    g.add_argument("--dim", type=int, default=None, help=f"vector width: a row is 4 dim bytes (default {d.dim})")
    g.add_argument("--window", type=int, default=None, help=f"(default {d.window})")
    g.add_argument("--negative", type=int, default=None, help=f"(default {d.negative})")
    g.add_argument("--sample", type=float, default=None, help=f"(default {d.sample})")
    g.add_argument("--min-count", type=int, default=None, help=f"text files only (default {d.min_count})")
    g.add_argument("--max-final-vocab", "--max-vocab-size", dest="max_final_vocab", type=int, default=None,
                   help=f"text files only (default {d.max_final_vocab})")
    g.add_argument("--seed", type=int, default=None, help=f"(default {d.seed})")
    g.add_argument("--span", type=int, default=None, help=f"(default {d.span})")
    arch = g.add_mutually_exclusive_group()
    arch.add_argument("--sg", dest="sg", action="store_const", const=True, default=None, help="skip-gram (default)")
    arch.add_argument("--cbow", dest="sg", action="store_const", const=False, help="CBOW")
    m = p.add_argument_group("the time model")
    m.add_argument("--bandwidth", type=float, default=100.0,
                   help="Gb/s per rank's link, its line rate (TCP carries plan.PAYLOAD_SHARE of it; default: "
                        "%(default)s)")
    m.add_argument("--latency", type=float, default=2.0, help="microseconds per message (default: %(default)s)")
    m.add_argument("--compute-us-per-position", type=float, default=None,
                   help="a rank's step maths per corpus position, instead of timing the compiled step here")
    m.add_argument("--compute-us-per-step", type=float, default=0.0,
                   help="with --compute-us-per-position: a rank's fixed cost per step (default: %(default)s)")
    p.add_argument("--format", choices=["text", "markdown"], default="text", help="the table's layout")


def config_of(args):
    """The Config planned: the command line, else a run folder's run.json, else Config's defaults."""
    recorded = run_config(args.corpus[0]) if len(args.corpus) == 1 and os.path.isdir(args.corpus[0]) else {}
    given = {k: getattr(args, k) for k in SETTINGS if getattr(args, k, None) is not None}
    return Config.from_dict({**recorded, **given})


def run(args):
    """Plan, print the table; returns the exit code. UserError on bad input."""
    cfg = config_of(args)
    ranks, hot = _ints(args.ranks, "--ranks"), _ints(args.hot_rows, "--hot-rows", low=0)
    sizes = _ints(args.batch_words, "--batch-words", low=64) if args.batch_words else [cfg.batch_words]
    if str(args.steps).lower() == "all":
        steps = None
    else:
        steps = _ints(args.steps, "--steps")
        if len(steps) > 1:
            raise UserError(f"--steps wants one number or 'all', got {args.steps!r}")
        steps = steps[0]
    if args.epochs < 1:
        raise UserError(f"--epochs must be at least 1, got {args.epochs}")
    if not (args.bandwidth > 0 and args.latency >= 0):
        raise UserError("--bandwidth must be more than 0 Gb/s and --latency 0 us or more")
    for b in sizes:
        replace(cfg, batch_words=b)  # Config checks its range
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    corpus = open_corpus(args.corpus, cfg, say)
    try:
        if max(ranks) > corpus.vocab.size:
            raise UserError(f"--ranks {max(ranks)} is more than the {corpus.vocab.size:,} words of the vocabulary")
        network = Network.line(args.bandwidth * 1e9, args.latency * 1e-6)
        if args.compute_us_per_position is not None:
            compute = Compute(args.compute_us_per_step * 1e-6, args.compute_us_per_position * 1e-6,
                              "given (--compute-us-per-position, --compute-us-per-step)")
        else:
            b = replace(cfg, batch_words=max(sizes))
            compute = measure_compute(corpus, b, math.ceil(len(corpus.stream) / b.batch_words) // 2)
        rows = []
        for b in sizes:
            c = replace(cfg, batch_words=b)
            epoch_steps = math.ceil(len(corpus.stream) / b)
            planned = sampled_steps(epoch_steps, steps, args.epochs)
            for p in ranks:
                t = time.monotonic()
                got = {h: [] for h in hot}
                for _, by_hot in plan_steps(corpus, c, p, hot, planned):
                    for h, step in by_hot.items():
                        got[h].append((Traffic.of(step, c.dim), int(step.positions.max())))
                rows += [summarise(b, p, h, got[h], c, corpus, network, compute, epoch_steps, steps is None)
                         for h in hot]
                say(f"plan: {b:,} positions per step, {p:,} ranks: {len(planned):,} steps x {p:,} ranks x "
                    f"{len(hot)} hot-row counts in {time.monotonic() - t:.1f} s")
        print(describe(corpus, cfg, sizes, planned if len(sizes) == 1 else None, steps, args.epochs, network,
                       compute))
        print(table(rows, args.format))
        say("plan: this is the exact step's exchange, which one host trains by default; several hosts train "
            "shard-local SGD unless told --shards 0, which `python -m hvd_w2v.localplan` projects")
        say(f"plan: {time.monotonic() - started:.1f} s in all")
    finally:
        if corpus.folder is not None:
            corpus.folder.cleanup()
    return 0


def describe(corpus, cfg, sizes, planned, steps, epochs, network, compute):
    """The lines above the table: the corpus, the settings, what is counted and the time model."""
    voc, stream = corpus.vocab, corpus.stream
    which = (f"every step of {epochs} epoch(s)" if steps is None else
             f"{len(planned):,} global steps spread over the first epoch" if planned else
             f"{steps} global steps spread over the first epoch")
    return "\n".join([
        f"corpus: {corpus.about}: {voc.size:,} words, {len(stream):,} positions, {voc.raw_words:,} raw words",
        f"settings: {'skip-gram' if cfg.sg else 'CBOW'}, dim {cfg.dim}, window {cfg.window}, negative "
        f"{cfg.negative}, sample {cfg.sample}, seed {cfg.seed}, span {cfg.context_span}; "
        f"{', '.join(f'{b:,}' for b in sizes)} positions per step; {which}",
        "counted (as Exchange.bytes_sent, per rank per step, mean and max over ranks): keys asked of other ranks "
        f"({KEY_BYTES} B each), rows served to other ranks and updates sent to other owners ({4 * cfg.dim} B "
        "each); not counted: a rank's own keys, the hot rows, the key counts; pairs: ordered rank pairs with "
        "traffic per step; allreduce: the hot rows' float32 [2H, dim+1] block per rank per step; B/word: "
        "every rank's bytes over the epoch / raw words (training's 'bytes sent per word')",
        f"time model: step = compute + gather + scatter + allreduce, no overlap; bandwidth "
        f"{network.bandwidth * 8 / 1e9:g} Gb/s per rank (full duplex, full bisection), latency "
        f"{network.latency * 1e6:g} us per message; a stage on a rank = latency x max(messages out, in) + "
        f"max(bytes out, in) / bandwidth, the slowest rank's; gather = rows + the next step's key counts (P-1 "
        f"messages a rank); scatter = updates + keys (2 messages a pair with traffic); allreduce = ring, "
        f"2(P-1)/P x bytes / bandwidth + 2(P-1) x latency; no Horovod cycle wait",
        f"compute: {compute.per_step * 1e6:,.1f} us per step + {compute.per_position * 1e6:,.3f} us per position "
        f"of the busiest rank's share; {compute.how}; batch building and row copies not included",
    ])


COLUMNS = ["positions", "P", "H", "keys KiB", "rows KiB", "updates KiB", "sent KiB", "max/mean", "pairs",
           "allreduce KiB", "B/word", "compute ms", "gather ms", "scatter ms", "allreduce ms", "step ms",
           "words/s"]


def table(rows, fmt="text"):
    """The table: byte columns per rank per step as 'mean max' over ranks."""
    kib = lambda b: f"{b / 1024:,.1f}"  # noqa: E731
    pair = lambda t: f"{kib(t[0])} {kib(t[1])}"  # noqa: E731
    ms = lambda s: f"{s * 1e3:,.3f}"  # noqa: E731
    cells = [[f"{r.batch_words:,}", f"{r.ranks:,}", f"{r.hot:,}", pair(r.keys), pair(r.rows), pair(r.updates),
              pair(r.sent), f"{r.sent[1] / r.sent[0]:.2f}" if r.sent[0] else "-", f"{r.pairs:,.0f}",
              kib(r.allreduce), f"{r.bytes_per_word:,.1f}", ms(r.compute), ms(r.gather), ms(r.scatter),
              ms(r.reduce), ms(r.step), f"{r.words_per_second:,.0f}"] for r in rows]
    if fmt == "markdown":
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---:|" * len(COLUMNS)]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(COLUMNS)]
    note = "(byte columns: per rank per step, mean and max over ranks)"
    return "\n".join([note, "  ".join(h.rjust(w) for h, w in zip(COLUMNS, widths)),
                      *("  ".join(v.rjust(w) for v, w in zip(c, widths)) for c in cells)])


def main(argv=None):
    """``python -m hvd_w2v.plan``; returns the exit code (2 on bad input, one line)."""
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.plan", description=__doc__.splitlines()[0],
                                epilog=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except UserError as e:
        print(f"hvd-w2v plan: error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
