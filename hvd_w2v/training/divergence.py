"""The divergence guard: a run whose loss or rows blow up stops with one clear error instead of exporting
garbage with exit code 0.

Two signs, both checked at every loss report (loop.train), from figures every rank already has:

- the **loss per pair** summed over the ranks: training starts at about ``(1 + negative) ln 2`` a pair (W_out
  starts at zeros, so every sigmoid is 1/2; hierarchical softmax's at most ``depth ln 2``, its longest path's,
  a pair's targets being its centre's path) and only goes down from there when it learns; a loss past
  ``LOSS_FACTOR`` times that start (or not a number) has diverged;
- the **largest row norm** of each rank's most frequent words (``FREQUENT_ROWS`` local rows of W_in and W_out
  and the hot replicas): frequent rows take the most updates, so they are the first to blow up; past
  ``Config.max_row_norm`` (or not a number) the run has diverged.

Checkpoints: a checkpoint is written only once :meth:`Guard.verify` passed at its step (every rank's whole
slice against the norm bound, and the loss per pair of the steps since the last report), so every checkpoint
a run leaves passed the guard, its newest is its last good one: queries read it, and ``--resume`` (the same
options) goes on from it.
"""
import math

import numpy as np

EXIT_DIVERGED = 77  # distinct from 2 (bad input), 75 (interrupted) and 76 (stalled): the run diverged
LOSS_FACTOR = 4.0  # the loss per pair may not pass this many times its start
FREQUENT_ROWS = 4096  # local rows (each rank's most frequent words: ids are frequency ranks) checked at reports


class Diverged(Exception):
    """Raised on every rank alike (the figures it tests are the same on every rank) when the run diverged by
    global step ``step``; ``what`` says what grew. ``checkpoint``: the run's last good one, set by the pipeline."""

    def __init__(self, step, what):
        super().__init__(f"training diverged by step {step:,}: {what}")
        self.step, self.what, self.checkpoint = step, what, None


def loss_bound(cfg, depth=0):
    """The largest loss per pair a run may report: LOSS_FACTOR times its start, ``(1 + negative) ln 2``, or
    with hierarchical softmax (``cfg.hs``) at most ``depth ln 2``, ``depth`` the Huffman tree's longest code."""
    return LOSS_FACTOR * (depth if cfg.hs else 1 + cfg.negative) * math.log(2)


def largest_norm(rows):
    """The largest L2 norm of the rows of ``rows`` (float32[..., dim]), ``inf`` when any value is not finite,
    0 for none. Cheap: rows are read once, in blocks, in float32."""
    rows = rows.reshape(-1, rows.shape[-1])
    largest = 0.0
    for lo in range(0, len(rows), 1 << 16):
        block = rows[lo:lo + (1 << 16)]
        squares = np.einsum("ij,ij->i", block, block)
        if not np.all(np.isfinite(squares)):
            return math.inf
        if len(squares):
            largest = max(largest, float(np.sqrt(squares.max())))
    return largest


def frequent_norm(model, hot_rows):
    """The largest row norm among this rank's most frequent words (model: a loop.ShardedModel) and the
    hot replicas (float32[2H, dim])."""
    return max(largest_norm(model.rows[:FREQUENT_ROWS]), largest_norm(hot_rows))


class Guard:
    """The bounds of one run (``cfg``: its loss per pair's and its rows' norm; ``depth``: loss_bound's)."""

    def __init__(self, cfg, depth=0):
        self.loss_limit, self.norm_limit = loss_bound(cfg, depth), float(cfg.max_row_norm)

    def check(self, step, loss, norm):
        """Raise :class:`Diverged` when the report of global step ``step`` (its loss per pair, the largest row
        norm of every rank) passes a bound."""
        if not loss <= self.loss_limit:  # (a NaN fails every comparison)
            raise Diverged(step, f"the loss per pair is {loss:,.4g}, past {self.loss_limit:.3g} "
                                 f"({LOSS_FACTOR:g} times its start)")
        self.check_norm(step, norm)

    def check_norm(self, step, norm):
        """Raise :class:`Diverged` when ``norm``, the largest row norm at global step ``step``, passes the bound."""
        if not norm <= self.norm_limit:
            raise Diverged(step, f"a row's norm is {norm:,.4g}, past --max-row-norm {self.norm_limit:g}")

    def verify(self, comm, step, rows, since_report=None):
        """Collective: raise :class:`Diverged` on every rank unless every rank's ``rows`` (its whole slice) pass
        the norm bound and, given ``since_report`` (this rank's loss and pairs since the last report), the loss
        per pair over every rank does. What a checkpoint of global step ``step`` must pass to be written."""
        # mpi4py: every rank's largest row norm, its loss and its pairs; the largest and the sums, to all
        norm = comm.allreduce(largest_norm(rows), "max")
        pairs = comm.allreduce(float(since_report[1])) if since_report is not None else 0.0
        if pairs:
            self.check(step, comm.allreduce(float(since_report[0])) / pairs, norm)
        else:
            self.check_norm(step, norm)
