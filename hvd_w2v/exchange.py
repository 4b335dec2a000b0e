"""The sparse exchange, in three named stages: route keys, gather rows, scatter updates; and the hot rows.

A *key* names one row of one matrix: ``key = 2 * id + m`` with ``m = 0`` for W_in and ``1`` for W_out, so
one alltoall serves both matrices. Keys sent by a rank are unique; every split is in rank order.
"""
from dataclasses import dataclass

import numpy as np

from . import native


@dataclass
class Route:
    """One step's traffic plan, from the asking side (``keys``) and the owning side (``local``)."""

    keys: np.ndarray  # int64[n]: the keys this rank needs, grouped by owner (rank order)
    counts: np.ndarray  # int64[P]: how many of ``keys`` go to each owner
    local: np.ndarray  # int64[m]: rows of this rank's table other ranks asked for (RowPlan.local_key), by source
    asked_counts: np.ndarray  # int64[P]: how many each source asked
    asked_sgd: np.ndarray  # float32[m]: how many SGD updates each source's update of each asked key will sum


class Exchange:
    """Moves rows of the sharded matrices between their owners and the ranks that need them."""

    def __init__(self, comm, plan, table):
        self.comm = comm
        self.plan = plan
        self.table = table  # this rank's W_in and W_out rows by local key: float32[2 * rows(rank), d]
        # Per local key, the SGD updates all sources' updates of it sum in the step being scattered (the cap
        # of ``apply`` needs a row's total); zero between steps. 4 B a row: 0.5% of a dim-100 model.
        self.sgd = np.zeros(len(table), np.float32)
        self.bytes_sent = 0  # to other ranks, over the whole run

    def route(self, keys, counts, sgd):
        """Stage 1 (collective): send each owner the keys needed from it, with ``sgd`` (float32[n]): how many
        SGD updates this rank's update of each key will sum (whole numbers, known before the step, so they
        travel here rather than in a collective of their own at the scatter).

        ``keys``: unique int64, grouped by owner in rank order, ``counts[r]`` of them owned by rank ``r``.
        """
        sent = np.stack((keys, sgd.astype(np.int64)), axis=1)
        asked, asked_counts = self.comm.alltoallv(sent, counts)
        self._count(sent, counts)
        local = self.plan.local_key(np.ascontiguousarray(asked[:, 0]))  # once, for the gather and the scatter
        return Route(keys, counts, local, asked_counts, asked[:, 1].astype(np.float32))

    def gather(self, route, out):
        """Stage 2 (collective): owners send back the asked rows, received into ``out`` (float32[n, d], the
        rows of route.keys in order)."""
        local = route.local
        if self.comm.size == 1:
            native.take_rows(self.table, local, out)  # asked of oneself: straight into ``out``
            return
        rows = np.empty((len(local), self.table.shape[1]), np.float32)
        native.take_rows(self.table, local, rows)
        self.comm.alltoallv(rows, route.asked_counts, recv_counts=route.counts, out=out)
        self._count(rows, route.asked_counts)

    def scatter(self, route, updates, apply):
        """Stage 3 (collective): send the updates (float32[n, d]) of route.keys to their owners, who apply them.

        The owner calls ``apply(table, local_rows, updates, total_sgd)`` once per source, in rank order, with
        each row's SGD-update count summed over all sources (a source's keys are unique, two sources' may not
        be).
        """
        got, _ = self.comm.alltoallv(updates, route.counts, recv_counts=route.asked_counts)
        self._count(updates, route.counts)
        local = route.local
        if self.comm.size == 1:
            apply(self.table, local, got, route.asked_sgd)  # one source: its keys are unique already
            return
        ends = np.cumsum(route.asked_counts)
        for lo, hi in zip(ends - route.asked_counts, ends):
            self.sgd[local[lo:hi]] += route.asked_sgd[lo:hi]
        total = self.sgd[local]
        for lo, hi in zip(ends - route.asked_counts, ends):
            apply(self.table, local[lo:hi], got[lo:hi], total[lo:hi])
        self.sgd[local] = 0

    def _count(self, sent, counts):
        """Add the bytes of ``sent`` that left this rank (rows to itself cost nothing)."""
        if len(sent):
            self.bytes_sent += (len(sent) - int(counts[self.comm.rank])) * (sent.nbytes // len(sent))


class HotRows:
    """Replicas of the ``n`` most frequent words' rows (ids ``0..n-1``) on every rank, kept equal by summing
    their updates with a Horovod allreduce each step. ``rows`` is float32[2n, d], indexed by key."""

    def __init__(self, comm, model, n):
        self.comm, self.model, self.n = comm, model, n
        self.rows = np.zeros((2 * n, model.w_in.shape[1]), np.float32)
        mine, local = self._mine()
        self.rows[2 * mine], self.rows[2 * mine + 1] = model.w_in[local], model.w_out[local]
        # Horovod: every rank contributes the hot rows it owns (zeros elsewhere); the sum is the full block.
        self.rows = comm.allreduce_dense(self.rows)

    def apply(self, keys, updates, counts, apply):
        """Sum this rank's ``updates`` (float32[k, d]) of hot ``keys`` and their SGD-update ``counts`` over
        ranks and apply them to every replica with ``apply(table, rows, sums, summed_counts)`` (collective)."""
        if self.n:
            block = np.zeros((len(self.rows), updates.shape[1] + 1), np.float32)
            block[keys, :-1], block[keys, -1] = updates, counts
            sums = self.comm.allreduce_dense(block)
            touched = np.flatnonzero(sums[:, -1])  # rows no rank updated are left alone
            apply(self.rows, touched, sums[touched, :-1], sums[touched, -1])

    def _mine(self):
        """The hot ids this rank owns, and their rows in its slice."""
        mine = self.model.plan.ids(self.comm.rank)
        mine = mine[mine < self.n]
        return mine, self.model.plan.local_row(mine)

    def write_back(self):
        """Copy the replicas into the owners' slices (before export or checkpoint)."""
        mine, local = self._mine()
        self.model.w_in[local], self.model.w_out[local] = self.rows[2 * mine], self.rows[2 * mine + 1]
