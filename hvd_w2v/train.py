"""The step loop: each global step covers ``batch_words`` corpus positions, shared out over the ranks.

Per step, on every rank (all collective, in this order):
  build the examples of my slice of the step (batches) -> unique rows I need -> route keys to owners ->
  owners gather rows -> updates in TensorFlow (sgns) -> scatter updates to owners, who add them ->
  hot-row updates summed over ranks by Horovod allreduce and added to every replica.
All updates of a step are computed from the state at its start, so the result is the same on any rank count
up to the order of float32 sums. The learning rate decays linearly with the global position.
"""
import math
import time

import numpy as np

from . import batches, rng
from .comm import log
from .exchange import Exchange
from .shard import RowPlan

REPORT_EVERY = 50  # steps between loss/counter allreduces (a collective, so on a step count, not a clock)


class ShardedModel:
    """This rank's slice of W_in and W_out (float32[rows, dim], local row order) and the plan behind it."""

    def __init__(self, plan, w_in, w_out):
        self.plan, self.w_in, self.w_out = plan, w_in, w_out

    @classmethod
    def initial(cls, cfg, plan, rank):
        """word2vec's start: W_in uniform in [-0.5/dim, 0.5/dim), W_out zeros; drawn per (word id, column)."""
        ids = plan.ids(rank)
        cells = ids[:, None] * cfg.dim + np.arange(cfg.dim)[None, :]
        w_in = ((rng.uniform(cfg.seed, rng.INIT, 0, cells.ravel()) - 0.5) / cfg.dim).astype(np.float32)
        return cls(plan, w_in.reshape(len(ids), cfg.dim), np.zeros((len(ids), cfg.dim), np.float32))


class HotRows:
    """Replicas of the ``n`` most frequent words' rows (ids ``0..n-1``) on every rank, kept equal by
    summing their updates with a Horovod allreduce each step."""

    def __init__(self, comm, model, n):
        self.comm, self.model, self.n = comm, model, n
        block = np.zeros((2, n, model.w_in.shape[1]), np.float32)
        mine, local = self._mine()
        block[0, mine], block[1, mine] = model.w_in[local], model.w_out[local]
        # Horovod: every rank contributes the hot rows it owns (zeros elsewhere); the sum is the full block.
        self.rows = comm.allreduce_dense(block) if n else block

    def apply(self, updates, apply):
        """Sum ``updates`` (float32[2, n, d + 1], update rows and their SGD-update counts) over ranks and
        apply them to every replica with ``apply(table, rows, sums)`` (collective)."""
        if self.n:
            sums = self.comm.allreduce_dense(updates)
            for m in (0, 1):
                touched = np.flatnonzero(sums[m, :, -1])  # rows no rank updated are left alone
                apply(self.rows[m], touched, sums[m, touched])

    def _mine(self):
        """The hot ids this rank owns, and their rows in its slice."""
        mine = self.model.plan.ids(self.comm.rank)
        mine = mine[mine < self.n]
        return mine, self.model.plan.local_row(mine)

    def write_back(self):
        """Copy the replicas into the owners' slices (before export or checkpoint)."""
        mine, local = self._mine()
        self.model.w_in[local], self.model.w_out[local] = self.rows[0, mine], self.rows[1, mine]


def train(comm, cfg, vocab, stream, progress=True):
    """Train on ``stream`` with every rank; returns (ShardedModel, stats dict). Collective."""
    from . import sgns

    plan = RowPlan(vocab.size, comm.size)
    model = ShardedModel.initial(cfg, plan, comm.rank)
    hot = HotRows(comm, model, min(cfg.hot_rows, vocab.size))
    exchange = Exchange(comm, plan, (model.w_in, model.w_out))
    step_fn = sgns.skipgram if cfg.sg else sgns.cbow
    apply = make_apply(cfg.update_cap)
    n = len(stream)
    steps = math.ceil(n / cfg.batch_words)
    total_steps = steps * cfg.epochs
    d = cfg.dim
    log(comm, f"train: {'skip-gram' if cfg.sg else 'CBOW'}, {plan}, {total_steps:,} steps of "
              f"{cfg.batch_words:,} positions, hot rows {hot.n}")

    stats = dict(last_loss=0.0, seconds=0.0, exchange_seconds=0.0)
    report = np.zeros(3)  # loss, pairs, steps since the last report
    start = last_print = time.monotonic()
    for epoch in range(cfg.epochs):
        for s in range(steps):
            done = epoch * steps + s
            alpha = max(cfg.min_alpha, cfg.alpha - (cfg.alpha - cfg.min_alpha) * done / total_steps)
            glo, ghi = s * cfg.batch_words, min(n, (s + 1) * cfg.batch_words)
            lo = glo + (ghi - glo) * comm.rank // comm.size
            hi = glo + (ghi - glo) * (comm.rank + 1) // comm.size
            batch = batches.build(stream, vocab, cfg, epoch, lo, hi)
            loss, pairs = _step(comm, exchange, hot, step_fn, batch, alpha, d, stats, cfg.sg, apply)
            report += (loss, pairs, 1)
            if (done + 1) % REPORT_EVERY == 0 or done + 1 == total_steps:
                # Horovod: loss and pair counts summed over ranks, so every rank reports the same figure.
                loss_sum, pair_sum, _ = comm.allreduce_dense(report)
                stats["last_loss"] = loss_sum / max(pair_sum, 1)
                report[:] = 0
                now = time.monotonic()
                if progress and (now - last_print >= 5 or done + 1 == total_steps):
                    last_print = now
                    frac = (done + 1) / total_steps
                    words = vocab.raw_words * cfg.epochs * frac
                    eta = (now - start) * (1 - frac) / frac
                    log(comm, f"train: {100 * frac:5.1f}%  epoch {epoch + 1}/{cfg.epochs}  "
                              f"{words / (now - start):,.0f} words/s  loss {loss_sum / max(pair_sum, 1):.4f}  "
                              f"alpha {alpha:.5f}  eta {eta:,.0f} s")
    hot.write_back()
    stats["seconds"] = time.monotonic() - start
    stats["words"] = vocab.raw_words * cfg.epochs
    stats["bytes_sent"] = comm.allreduce(exchange.bytes_sent)
    return model, stats


def _step(comm, exchange, hot, step_fn, batch, alpha, d, stats, sg, apply):
    """One step on this rank's examples; collective even when ``batch`` is empty."""
    in_ids = np.unique(batch.contexts[batch.contexts >= 0])
    out_ids = np.unique(np.concatenate((batch.centres, batch.negatives.ravel())))
    in_hot, out_hot = in_ids < hot.n, out_ids < hot.n
    keys = np.concatenate((2 * in_ids[~in_hot], 2 * out_ids[~out_hot] + 1))

    t0 = time.monotonic()
    route = exchange.route(keys)
    rows = exchange.gather(route)
    t1 = time.monotonic()
    # Rows of the step: hot ones from the local replicas, the rest as gathered (route.keys order).
    in_rows = np.empty((len(in_ids), d), np.float32)
    out_rows = np.empty((len(out_ids), d), np.float32)
    in_rows[in_hot], out_rows[out_hot] = hot.rows[0, in_ids[in_hot]], hot.rows[1, out_ids[out_hot]]
    is_out = (route.keys & 1).astype(bool)
    in_rows[np.searchsorted(in_ids, route.keys[~is_out] >> 1)] = rows[~is_out]
    out_rows[np.searchsorted(out_ids, route.keys[is_out] >> 1)] = rows[is_out]

    ctx = np.where(batch.contexts >= 0, np.searchsorted(in_ids, batch.contexts), -1).astype(np.int32)
    tgt = np.searchsorted(out_ids, np.concatenate((batch.centres[:, None], batch.negatives), axis=1))
    d_in, d_out, loss, pairs = step_fn(in_rows, out_rows, ctx, tgt.astype(np.int32), np.float32(alpha))
    in_counts, out_counts = _update_counts(ctx, tgt, len(in_ids), len(out_ids), sg)
    d_in, d_out = np.hstack((d_in.numpy(), in_counts)), np.hstack((d_out.numpy(), out_counts))

    t2 = time.monotonic()
    cold = np.empty((len(route.keys), d + 1), np.float32)
    cold[~is_out] = d_in[np.searchsorted(in_ids, route.keys[~is_out] >> 1)]
    cold[is_out] = d_out[np.searchsorted(out_ids, route.keys[is_out] >> 1)]
    exchange.scatter(route, cold, apply)
    hot_updates = np.zeros((2, hot.n, d + 1), np.float32)
    hot_updates[0, in_ids[in_hot]], hot_updates[1, out_ids[out_hot]] = d_in[in_hot], d_out[out_hot]
    hot.apply(hot_updates, apply)
    stats["exchange_seconds"] += (t1 - t0) + (time.monotonic() - t2)
    return float(loss), float(pairs)


def _update_counts(ctx, tgt, n_in, n_out, sg):
    """How many word2vec.c SGD updates each step row sums: float32[n_in, 1] and float32[n_out, 1].

    A context occurrence is one update of its W_in row; an output row gets one update per (context, target)
    pair in skip-gram and one per example in CBOW. Noise words equal to the centre do not count.
    """
    valid = ctx >= 0
    tmask = np.ones(tgt.shape, np.float32)
    tmask[:, 1:] = tgt[:, 1:] != tgt[:, :1]
    weight = tmask * valid.sum(axis=1, keepdims=True) if sg else tmask
    in_counts = np.bincount(ctx[valid], minlength=n_in).astype(np.float32)
    out_counts = np.bincount(tgt.ravel(), weights=weight.ravel(), minlength=n_out).astype(np.float32)
    return in_counts[:, None], out_counts[:, None]


def make_apply(cap):
    """The owners' update rule: add a row's summed update, scaled by min(1, cap / m) when it sums m > cap
    SGD updates.

    Why: every update of a step is computed from the same snapshot. word2vec.c applies them one at a time,
    so a frequent row's later updates see its earlier ones and the sigmoid saturates; summed from a stale
    snapshot, thousands of updates of "the" in one step overshoot and training diverges. Capping the
    multiplicity keeps rare rows exactly as SGD (m is small) and bounds the step of frequent ones.
    """
    def apply(table, rows, sums):
        m = sums[:, -1:]
        table[rows] += sums[:, :-1] * np.minimum(1.0, cap / np.maximum(m, 1.0))
    return apply
