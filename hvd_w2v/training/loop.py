"""The step loop: each global step covers ``batch_words`` corpus positions, shared out over the ranks.

The loop runs a *step rule*: :class:`ExactStep` (this module's, described here) or localsgd.LocalSGD (shard-
local SGD's super-steps). A rule says what a step's examples are and how its updates are computed and added;
the loop, the exchange, the hot rows, the reports and the checkpoints are the same for both.

Per step, on every rank (all collective, in this order):
  owners gather the rows I asked for -> updates in TensorFlow (sgns) -> scatter updates to owners, who add
  them -> hot-row updates summed over ranks by Horovod allreduce and added to every replica.
The examples of my slice of a step (batches) and the unique rows they need (StepPlan) depend on corpus
positions alone, so they are built ahead (Ahead), and the keys a step asks for travel with the step before's
gather and scatter (exchange). All updates of a step are computed from the state at its start, so the result
is the same on any rank count up to the order of float32 sums. The learning rate decays linearly with the
global position.
"""
import collections
import math
import time
from dataclasses import dataclass

import numpy as np

from ..common.config import AHEAD_STEPS
from ..kernels import native
from ..parallel import wire
from ..parallel.comm import log
from ..parallel.exchange import Ask, Exchange, HotRows
from ..parallel.shard import RowPlan
from . import batches, divergence, rng

INIT_BLOCK_CELLS = 1 << 20  # matrix cells drawn at once by ShardedModel.initial: 32 MiB of temporaries
# Loss and counters are summed over ranks at reports (Reports). A collective must fall on the same step on
# every rank, so the pace is set in steps: the first two reports after FIRST_REPORT steps each, each next one
# after as many steps as rank 0 expected to take REPORT_SECONDS at the report before (its proposal travels in
# the report), at least MIN_REPORT_STEPS.
FIRST_REPORT = 200
REPORT_SECONDS = 2.0
MIN_REPORT_STEPS = 50


class ShardedModel:
    """This rank's slice of W_in and W_out, interleaved: ``rows`` float32[local rows, 2, dim], a word's W_in
    row then its W_out row, in local row order.

    Interleaved because the step's exchange asks for both matrices at once by *key* (``2 * id + matrix``):
    as one table indexed by local key, gathering a step's rows and adding their updates are one pass over the
    keys each (native.take_rows, native.add_rows), where two tables took a masked pass per matrix. ``w_in``
    and ``w_out`` are views of it.
    """

    def __init__(self, plan, rows):
        self.plan, self.rows = plan, rows

    @property
    def w_in(self):
        return self.rows[:, 0]

    @property
    def w_out(self):
        return self.rows[:, 1]

    @property
    def table(self):
        """float32[2 * local rows, dim]: the rows by local key (shard.RowPlan.local_key), a view."""
        return self.rows.reshape(-1, self.rows.shape[2])

    @classmethod
    def initial(cls, cfg, plan, rank):
        """gensim 4's start: W_in uniform in [-1/dim, 1/dim), W_out zeros; drawn per (word id, column).

        word2vec.c draws W_in in [-0.5/dim, 0.5/dim); gensim, the reference users compare with, twice that.
        gensim's range scored higher on all three sets (python -m hvd_w2v.bench.quality --lines 150000
        --epochs 3 --ranks 2 --arch sg --seeds 1 2 3; figures in hvd_w2v/bench/README.md, "Quality").

        Drawn block by block (INIT_BLOCK_CELLS): the counters and the generator's uint64/float64 temporaries
        take about 32 B per cell, four times the float32 slice itself, so a whole slice at once would peak at
        several times the model (python -m hvd_w2v.bench.scale; hvd_w2v/bench/README.md, "Memory against the plan")."""
        ids = plan.ids(rank)
        rows = np.zeros((len(ids), 2, cfg.dim), np.float32)
        block = max(1, INIT_BLOCK_CELLS // cfg.dim)
        for lo in range(0, len(ids), block):
            cells = ids[lo:lo + block, None] * cfg.dim + np.arange(cfg.dim)[None, :]
            rows[lo:lo + block, 0] = (rng.uniform(cfg.seed, rng.INIT, 0, cells) * 2 - 1) / cfg.dim
        return cls(plan, rows)


def train(comm, cfg, vocab, stream, progress=True, resume=None, saver=None, rule=None):
    """Train on ``stream`` with every rank; returns (ShardedModel, stats dict). Collective.

    ``rule`` is the step rule, a class built as ``rule(cfg, vocab, stream, plan, hot, rank, threads)`` (``hot``:
    the exchange.HotRows): :class:`ExactStep` (the default), localsgd.LocalSGD or hotsync.HotSync; the loop, the
    exchange, the hot rows, the reports and the checkpoints are the same for all. ``resume`` (a
    checkpoint.Loaded: ``step``, this rank's interleaved ``rows``) starts after that many global steps from those
    rows instead of from scratch.
    ``saver`` (a checkpoint.Saver), when given, is told of every finished step but the last and may write a
    checkpoint, or raise checkpoint.Interrupted. Raises divergence.Diverged on every rank when a report's loss
    or a rank's frequent rows pass the guard's bounds, or the trained slice holds a row past them.
    """
    plan = RowPlan(vocab.size, comm.size)
    if resume is None:
        model = ShardedModel.initial(cfg, plan, comm.rank)
    else:
        model = ShardedModel(plan, resume.rows)
    first = resume.step if resume else 0  # global steps already done
    hot = HotRows(comm, model, min(cfg.hot_rows, vocab.size))
    exchange = Exchange(comm, plan, model.table, wire.of(cfg.wire, comm.threads))
    rule = (rule or ExactStep)(cfg, vocab, stream, plan, hot, comm.rank, comm.threads)
    steps = cfg.steps_per_epoch(len(stream))
    total_steps = steps * cfg.epochs
    log(comm, f"train: {'skip-gram' if cfg.sg else 'CBOW'}, {plan}, {total_steps:,} {rule.describe()}, hot rows "
              f"{hot.n}; row copies: {'compiled' if native.row_copies() else 'numpy'}")

    stats = dict(last_loss=0.0, seconds=0.0, exchange_seconds=0.0)
    # loss, pairs, rank 0's proposal (steps until the next report), then each rank's seconds outside the
    # exchange since the report before, in its own slot (the sum is every rank's: the slowest rank's lag), then
    # each rank's largest frequent row norm, in its own slot (the divergence guard's)
    report = np.zeros(3 + 2 * comm.size)
    guard = divergence.Guard(cfg, vocab.runs.tree.depth if cfg.hs else 0)
    if saver is not None:
        saver.guard = guard
    next_report, last = first + FIRST_REPORT, (first, time.monotonic(), 0.0)  # step, time, exchange seconds
    # The final loss: the mean per pair over the last epoch's steps (those this job trained), whatever the
    # reports' windows, which follow the machine's speed: runs of the same vectors report the same figure.
    last_epoch, final = (cfg.epochs - 1) * steps, [0.0, 0.0]
    watch = comm.watch  # the stall watchdog's view of this rank (watchdog.Beat): one assignment a step
    watch.enter("train", step=first)

    if progress:
        from ..common.progress import Progress  # a bar on a terminal, else a line every 5 s; TensorBoard

        progress = Progress.of(comm, progress)
    start = time.monotonic()
    reports = Reports(comm)
    ahead = Ahead(rule.prepare, first, total_steps, AHEAD_STEPS)
    route = exchange.route(ahead.peek().ask) if first < total_steps else None
    for done in range(first, total_steps):
        epoch = done // steps
        alpha = max(cfg.min_alpha, cfg.alpha - (cfg.alpha - cfg.min_alpha) * done / total_steps)
        step = ahead.pop()
        loss, pairs, route = _step(exchange, hot, rule, step, ahead, route, alpha, stats)
        watch.step = done + 1
        report[0] += loss  # two scalar adds: a slice's += converts the pair to an array every step
        report[1] += pairs
        if done >= last_epoch:
            final[0] += loss
            final[1] += pairs
        if done + 1 == next_report or done + 1 == total_steps:
            now = time.monotonic()
            if comm.rank == 0:
                report[2] = REPORT_SECONDS * (done + 1 - last[0]) / max(now - last[1], 1e-6)
            report[3 + comm.rank] = (now - last[1]) - (stats["exchange_seconds"] - last[2])
            report[3 + comm.size + comm.rank] = divergence.frequent_norm(model, hot.rows)
            # This report's sums start; the previous report's arrive, and are shown as of its own step.
            figures = (done + 1, epoch + 1, now - start, alpha, stats["exchange_seconds"], exchange.bytes_sent,
                       done + 1 - last[0])
            arrived = reports.send(report, figures, last=done + 1 == total_steps)
            report[:] = 0
            for sums, (at, in_epoch, seconds, at_alpha, exchange_seconds, bytes_sent, interval) in arrived:
                stats["last_loss"] = sums[0] / max(sums[1], 1)
                if progress:
                    progress.report(at, first, total_steps, in_epoch, cfg.epochs, vocab.raw_words * cfg.epochs,
                                    seconds, stats["last_loss"], at_alpha, exchange_seconds, bytes_sent,
                                    work=sums[3:3 + comm.size], steps=interval)
                guard.check(at, stats["last_loss"], sums[3 + comm.size:].max())
            steps_on = max(MIN_REPORT_STEPS, int(arrived[0][0][2])) if arrived else FIRST_REPORT
            next_report, last = done + 1 + steps_on, (done + 1, now, stats["exchange_seconds"])
        if saver is not None and done + 1 < total_steps:
            saver.step_done(done + 1, model, hot, report)  # collective every few steps; report[:2]: loss, pairs
    hot.write_back()
    guard.verify(comm, total_steps, model.rows)  # the whole slice, as a checkpoint's (the loss: the last report)
    stats["seconds"] = time.monotonic() - start
    stats["words"] = vocab.raw_words * cfg.epochs * (total_steps - first) / total_steps
    final = comm.allreduce(np.array(final))  # (mpi4py: the arrays summed)
    stats["final_loss"] = final[0] / final[1] if final[1] else stats["last_loss"]
    stats["bytes_sent"] = comm.allreduce(exchange.bytes_sent)
    # Horovod's share: the hot block's allreduces (rank 0's count and bytes, every rank's mean seconds)
    stats["horovod"] = dict(calls=hot.calls, bytes=hot.bytes, seconds=comm.allreduce(hot.seconds) / comm.size)
    stats["stream_read"] = comm.allgather(stream.bytes_read)  # mpi4py: the id stream's bytes each rank read
    return model, stats


class ExactStep:
    """The exact global step's rule: every update of a step from the state at its start, summed per row and
    capped (CappedAdd, ``cfg.update_cap``); ``cfg.batch_words`` positions a step, shared out over the ranks.
    What :func:`train` asks of a rule: ``prepare(done)`` (this rank's StepPlan of global step ``done``),
    ``empty_rows(table, dim)`` and ``maths(rows, step, alpha) -> (updates, loss, count)``, ``apply`` (the
    owners' add), ``hot_inside`` (whether its maths merges the hot rows itself) and ``describe()``."""

    hot_inside = False

    @staticmethod
    def check_layout(cfg, ranks, words=None):
        """Any layout and vocabulary run the exact step (localsgd.LocalSGD.check_layout refuses some)."""

    def __init__(self, cfg, vocab, stream, plan, hot, rank, threads):
        from ..parallel.comm import tensorflow

        tensorflow(threads)  # sgns's graph, should the compiled step be missing, on the rank's thread budget
        from . import sgns

        self.cfg, self.fn = cfg, sgns.step_function(cfg.sg, cfg.window, threads=threads, cbow_mean=cfg.cbow_mean,
                                                    hs=cfg.hs)
        self.apply = CappedAdd(float(cfg.update_cap), threads)
        self.empty_rows = self.fn.empty_rows
        self.prepare = lambda done: prepare_step(stream, vocab, cfg, plan, hot.n, self.fn.groups, done, rank,
                                                 threads)

    def maths(self, rows, step, alpha):
        return self.fn(rows, step.ctx, step.tgt, alpha, step.codes)

    def describe(self):
        return (f"steps of {self.cfg.batch_words:,} positions; step maths: "
                f"{'compiled' if self.fn.fused else 'TensorFlow graph'}")


def share(cfg, n, done, rank, ranks):
    """Global step ``done`` (counted over all epochs) of a stream of ``n`` positions: ``(epoch, lo, hi)``, its
    epoch and the positions ``[lo, hi)`` of its ``cfg.batch_words`` that rank ``rank`` of ``ranks`` builds."""
    epoch, s = divmod(done, math.ceil(n / cfg.batch_words))
    glo, ghi = s * cfg.batch_words, min(n, (s + 1) * cfg.batch_words)
    return epoch, glo + (ghi - glo) * rank // ranks, glo + (ghi - glo) * (rank + 1) // ranks


def prepare_step(stream, vocab, cfg, plan, n_hot, groups, done, rank, threads=1):
    """Rank ``rank``'s StepPlan of global step ``done`` under ``plan`` (a RowPlan: its rank count), the ids
    below ``n_hot`` hot, for a step function of ``groups`` width groups, its examples and table built on
    ``threads`` threads. A function of corpus positions alone: what every rank builds ahead in :func:`train`,
    and what the dry-run planner (hvd_w2v.planning.plan) builds for every rank of a rank count in one process."""
    epoch, lo, hi = share(cfg, len(stream), done, rank, plan.ranks)
    return StepPlan.of(batches.build(stream, vocab, cfg, epoch, lo, hi, threads), plan, n_hot, cfg.sg, groups,
                       threads)


class Reports:
    """The loss reports' sums over ranks, one report behind: each report's sum is a non-blocking MPI
    allreduce (Comm.allreduce_later) that travels while the ranks train on, and the next report collects it,
    so no step waits for it. Collective: every rank sends at the same steps."""

    def __init__(self, comm):
        self.comm, self.pending = comm, None

    def send(self, values, figures, last=False):
        """Start summing ``values`` (a float array), kept with ``figures`` (anything). Returns the reports
        whose sums are in, as ``[(sums, figures)]``: the previous one (none at the first); with ``last``, this
        one too, waited for."""
        arrived = [self._wait()] if self.pending else []
        self.pending = (self.comm.allreduce_later(values), figures)
        if last:
            arrived.append(self._wait())
        return arrived

    def _wait(self):
        (sums, figures), self.pending = self.pending, None
        return sums(), figures


class Ahead:
    """The steps' examples (StepPlans of global steps ``first..total-1``), prepared in order ahead of use.

    A step's examples are a function of corpus positions alone, never of the model, so building them early
    changes no result. The loop takes each with :meth:`pop`; :meth:`peek` shows the next, whose keys travel
    with this step's exchange; and the exchange calls :meth:`fill` while it waits for other ranks, so a rank
    that arrives first builds up to ``depth`` steps ahead instead of spinning. ``seconds``: time spent here.
    """

    def __init__(self, prepare, first, total, depth):
        self.prepare, self.next, self.total, self.depth = prepare, first, total, depth
        self.ready = collections.deque()
        self.seconds = 0.0

    def fill(self):
        """Prepare one more step unless ``depth`` are ready or none is left; False if there was nothing to do."""
        if len(self.ready) >= self.depth or self.next >= self.total:
            return False
        t = time.monotonic()
        self.ready.append(self.prepare(self.next))
        self.next += 1
        self.seconds += time.monotonic() - t
        return True

    def peek(self):
        """The next step's plan (None after the last), prepared now if it is not yet."""
        if not self.ready:
            self.fill()
        return self.ready[0] if self.ready else None

    def pop(self):
        step = self.peek()
        self.ready.popleft()
        return step


# TensorFlow (with oneDNN; the graph's path) keeps state for every input shape it meets, so resident memory
# grows all through a long run whose step shapes all differ. Rounded up to buckets, the shapes are few and the
# growth stops (python -m hvd_w2v.bench.memory_probes shapes 3000; figures in hvd_w2v/bench/README.md,
# "Memory"). Each width group's centres round up to CENTRE_BUCKET: a group holds a fifth of a rank's centres
# (window 5), so 64 would pad 2 ranks' groups by a fifth.
CENTRE_BUCKET = 32
ROW_BUCKET = 512


def _round_up(n, bucket):
    return -(-n // bucket) * bucket


OWNER_SHIFT = 40  # step keys carry their owner above this bit (ids stay below 2**39), so one sort groups them


@dataclass
class StepPlan:
    """One step's examples on this rank, indexed into a table of the unique rows they touch.

    ``keys`` (int64[U], ``2 * id + matrix``) are grouped by owner in rank order (in any order within an
    owner: no sum depends on it), the hot rows (served by the local replicas) last; ``ctx`` and ``tgt`` index
    a table of ``table`` rows, the U rows then zeros (``table - 1`` in ``ctx``: no context word), in groups by
    context width (sgns.step_function); ``sgd`` counts the word2vec.c SGD updates each row sums (shard-local
    SGD's: the shards that touch it). A function of the examples alone, so it can be built ahead.
    """

    keys: np.ndarray  # int64[U]
    owned: np.ndarray  # int64[P]: how many of the cold keys (the first ``cold``) each rank owns
    cold: int
    table: int  # rows of the table the step function sees: U rounded up, at least U + 1
    ctx: list  # int32[n_g, w_g] per group g: its centres' context rows
    tgt: list  # int32[n_g, 1+negative] per group g: the centre, then its noise words (or its Huffman path)
    sgd: np.ndarray  # float32[U]
    codes: list = None  # int8 blocks of tgt's shapes: the paths' Huffman codes (hierarchical softmax), or None

    @property
    def ask(self):
        """What this step needs of the owners: its cold keys (exchange.Ask)."""
        return Ask(self.keys[:self.cold], self.owned, self.sgd[:self.cold])

    @classmethod
    def of(cls, batch, plan, n_hot, sg, groups, threads=1, bounds=None, scratch=None):
        """The plan of ``batch`` for a step function of ``groups`` width groups (sgns.step_function): 1 puts
        every centre in one block, its contexts where the examples hold them (what the compiled step takes: it
        skips empty slots itself), numbered on ``threads`` threads (the same plan on any count); ``window``
        left-packs them and groups centres by width (the graph; numpy, one thread). With ``bounds`` (shard s's
        centres ``[bounds[s], bounds[s + 1])``, from 0 to all), ``sgd`` counts the shards touching each row.
        ``scratch`` (native.Scratch): the compiled plan's room, reused."""
        lib = native.example_builder() if groups == 1 else None
        hs = batch.path is not None
        if lib is not None:  # the same plan, in two passes (batches_kernel.cc)
            first, rest = (batch.path[:, 0], batch.path[:, 1:]) if hs else (batch.centres, batch.negatives)
            keys, owned, ctx, tgt, sgd = native.step_plan(
                lib, first, batch.contexts, rest, plan.ranks, n_hot, sg, ROW_BUCKET,
                _round_up(len(batch), CENTRE_BUCKET), threads, bounds, scratch)
            table = _round_up(len(keys) + 1, ROW_BUCKET)
            return cls(keys, owned[:-1], len(keys) - owned[-1], table, [ctx], [tgt], sgd,
                       [_padded(batch.codes, 0)] if hs else None)
        valid = batch.contexts >= 0
        n_ctx = int(valid.sum())
        targets = batch.targets()
        named = targets >= 0  # a path's slots past its end name nothing
        keys = np.concatenate((2 * batch.contexts[valid], 2 * targets[named] + 1))
        if plan.ranks == 1 and not n_hot:  # one owner of everything: no tags to sort by
            keys, slot = np.unique(keys, return_inverse=True)
            owned = np.array([len(keys), 0])
        else:
            ids = keys >> 1
            owner = np.where(ids < n_hot, plan.ranks, plan.owner(ids))
            tagged, slot = np.unique((owner << OWNER_SHIFT) | keys, return_inverse=True)
            owned = np.bincount(tagged >> OWNER_SHIFT, minlength=plan.ranks + 1)
            keys = tagged & ((1 << OWNER_SHIFT) - 1)
        # The step function sees bucketed shapes: ``table`` rows (the unique rows, then zeros; the last one
        # stands for "no context word") and each group's centres rounded up, the extra centres all pointing at
        # the last row, so they change no update and no loss (sgns.py).
        table = _round_up(len(keys) + 1, ROW_BUCKET)
        none = table - 1
        width = valid.sum(axis=1)  # context words per centre, at least 1 (batches.build)
        placed = np.full(batch.contexts.shape, none, np.int32)
        tslot = np.full(targets.shape, none, np.int32)
        tslot[named] = slot[n_ctx:]
        codes = None
        if groups == 1:
            placed[valid] = slot[:n_ctx]
            ctx, tgt = [_padded(placed, none)], [_padded(tslot, none)]
            if hs:
                codes = [_padded(batch.codes, 0)]
        else:
            placed[np.nonzero(valid)[0], (np.cumsum(valid, axis=1) - 1)[valid]] = slot[:n_ctx]  # left-packed
            group = (width - 1) // 2  # widths 1-2 -> group 0, 3-4 -> 1, ...
            members = [np.flatnonzero(group == g) for g in range(groups)]
            ctx = [_padded(placed[m, :2 * (g + 1)], none) for g, m in enumerate(members)]
            tgt = [_padded(tslot[m], none) for m in members]
            if hs:
                codes = [_padded(batch.codes[m], 0) for m in members]
        # A context occurrence is one update of its W_in row; an output row gets one update per (context,
        # target) pair in skip-gram and one per example in CBOW. Noise words equal to the centre do not count.
        weight = np.ones(targets.shape, np.float32)
        weight[:, 1:] = targets[:, 1:] != targets[:, :1]
        if sg:
            weight *= width[:, None]
        weight = weight[named]
        if bounds is None:
            sgd = np.bincount(slot, weights=np.concatenate((np.ones(n_ctx), weight)), minlength=len(keys))
        else:  # each row's distinct (row, shard) pairs
            centre = np.concatenate((np.nonzero(valid)[0], np.nonzero(named)[0]))
            shard = np.searchsorted(bounds, centre, side="right") - 1
            pairs = np.unique(slot.astype(np.int64) * len(bounds) + shard)
            sgd = np.bincount(pairs // len(bounds), minlength=len(keys))
        return cls(keys, owned[:-1], len(keys) - owned[-1], table, ctx, tgt, sgd.astype(np.float32), codes)


def _padded(block, none):
    """``block`` ([n, w]) with rows of ``none`` added up to a multiple of CENTRE_BUCKET: int32 slots, or int8
    codes."""
    kind = np.int8 if block.dtype == np.int8 else np.int32
    out = np.full((_round_up(len(block), CENTRE_BUCKET), block.shape[1]), none, kind)
    out[:len(block)] = block
    return out


def _step(exchange, hot, rule, step, ahead, route, alpha, stats):
    """One step on this rank's examples (a StepPlan, its ``route`` already sent); collective even when it has
    none. Returns (loss, pairs, the next step's route).

    Gathered rows land in the step's table of unique rows, TensorFlow computes the updates of its rows, and
    the cold part is scattered back to the owners in the same order; hot rows go through their allreduce.
    The next step's keys travel with this step's exchanges, and while they wait the rank prepares steps ahead.
    """
    keys, cold = step.keys, step.cold
    upcoming = ahead.peek()
    ask = upcoming.ask if upcoming else None
    t0, ahead0 = time.monotonic(), ahead.seconds
    rows = rule.empty_rows(step.table, hot.rows.shape[1])  # read by the step's maths without a copy
    asked_next = exchange.gather(route, rows[:cold], ask, ahead.fill)
    if cold < len(keys):
        rows[cold:len(keys)] = hot.rows[keys[cold:]]
    rows[len(keys):] = 0  # padding; the last row stands for "no context word"
    t1, horovod = time.monotonic(), hot.seconds

    updates, loss, pairs = rule.maths(rows, step, np.float32(alpha))  # hotsync's merges the hot rows inside

    t2, horovod = time.monotonic(), hot.seconds - horovod
    route = exchange.scatter(route, updates[:cold], rule.apply, ask, asked_next, ahead.fill)
    if not rule.hot_inside:
        hot.apply(keys[cold:], updates[cold:len(keys)], step.sgd[cold:], rule.apply)
    # Steps prepared while waiting are the loop's work, not the exchange's; the hot rows' merges inside the
    # maths are the exchange's.
    stats["exchange_seconds"] += (t1 - t0) + horovod + (time.monotonic() - t2) - (ahead.seconds - ahead0)
    return float(loss), float(pairs), route


@dataclass(frozen=True)
class CappedAdd:
    """The owners' update rule: add a row's summed update, scaled by min(1, cap / m) when it sums m > cap
    SGD updates.

    Why: every update of a step is computed from the same snapshot. word2vec.c applies them one at a time,
    so a frequent row's later updates see its earlier ones and the sigmoid saturates; summed from a stale
    snapshot, thousands of updates of "the" in one step overshoot and training diverges. Capping the
    multiplicity keeps rare rows exactly as SGD (m is small) and bounds the step of frequent ones.
    """

    cap: float
    threads: int = 1  # the compiled adds' (native.add_rows, native.add_sources)

    def __call__(self, table, rows, updates, counts):
        """``table[rows] += updates`` (rows unique), each row capped by its ``counts``."""
        native.add_rows(table, rows, updates, native.cap_scale(self.cap, counts), self.threads)

    def sources(self, table, rows, blocks, sgd, total):
        """An owner's scatter: every source's block in rank order, capped by the counts summed over all
        sources (native.add_sources; ``total`` is its scratch)."""
        native.add_sources(table, rows, blocks, sgd, self.cap, total, self.threads)
