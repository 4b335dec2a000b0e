"""The sparse exchange, in three named stages: route keys, gather rows, scatter updates.

A *key* names one row of one matrix: ``key = 2 * id + m`` with ``m = 0`` for W_in and ``1`` for W_out, so
one alltoall serves both matrices. Keys sent by a rank are unique; every split is in rank order.
"""
from dataclasses import dataclass

import numpy as np


@dataclass
class Route:
    """One step's traffic plan, from the asking side (``keys``) and the owning side (``asked``)."""

    keys: np.ndarray  # int64[n]: the keys this rank needs, sorted by owner (rank order)
    counts: np.ndarray  # int64[P]: how many of ``keys`` go to each owner
    asked: np.ndarray  # int64[m]: keys other ranks asked of this rank, by source rank
    asked_counts: np.ndarray  # int64[P]: how many each source asked


class Exchange:
    """Moves rows of the sharded matrices between their owners and the ranks that need them."""

    def __init__(self, comm, plan, tables):
        self.comm = comm
        self.plan = plan
        self.tables = tables  # (W_in slice, W_out slice): float32[rows(rank), d] each, local row order
        self.bytes_sent = 0  # to other ranks, over the whole run

    def route(self, keys):
        """Stage 1 (collective): send each owner the keys needed from it. ``keys``: unique int64."""
        owner = self.plan.owner(keys >> 1)
        order = np.argsort(owner, kind="stable")
        keys = keys[order]
        counts = np.bincount(owner, minlength=self.comm.size).astype(np.int64)
        asked, asked_counts = self.comm.alltoallv(keys, counts)
        self._count(keys, counts)
        return Route(keys, counts, asked, asked_counts)

    def gather(self, route):
        """Stage 2 (collective): owners send back the asked rows. Returns float32[n, d], rows of route.keys."""
        rows = self._rows(route.asked)
        got, _ = self.comm.alltoallv(rows, route.asked_counts, recv_counts=route.counts)
        self._count(rows, route.asked_counts)
        return got

    def scatter(self, route, updates, apply):
        """Stage 3 (collective): send the updates of route.keys to their owners, who apply them.

        ``updates`` float32[n, d + 1]: an update row and, last, how many SGD updates it sums. The owner sums
        the rows received for each of its rows (in rank order) and calls ``apply(table, local_rows, sums)``.
        """
        got, _ = self.comm.alltoallv(np.ascontiguousarray(updates, dtype=np.float32), route.counts,
                                     recv_counts=route.asked_counts)
        self._count(updates, route.counts)
        if not len(got):
            return
        # Sum the rows received for each key: sort by key (stable, so rank order is kept), add runs.
        order = np.argsort(route.asked, kind="stable")
        asked = route.asked[order]
        starts = np.flatnonzero(np.concatenate(([True], asked[1:] != asked[:-1])))
        keys = asked[starts]
        sums = np.add.reduceat(got[order], starts, axis=0)
        for m, table in enumerate(self.tables):
            sel = (keys & 1) == m
            apply(table, self.plan.local_row(keys[sel] >> 1), sums[sel])

    def _count(self, sent, counts):
        """Add the bytes of ``sent`` that left this rank (rows to itself cost nothing)."""
        if len(sent):
            self.bytes_sent += (len(sent) - int(counts[self.comm.rank])) * (sent.nbytes // len(sent))

    def _rows(self, keys):
        out = np.empty((len(keys), self.tables[0].shape[1]), dtype=np.float32)
        for m, table in enumerate(self.tables):
            sel = (keys & 1) == m
            out[sel] = table[self.plan.local_row(keys[sel] >> 1)]
        return out
