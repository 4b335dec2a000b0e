"""The sparse exchange, in three named stages: route keys, gather rows, scatter updates; and the hot rows.

A *key* names one row of one matrix: ``key = 2 * id + m`` with ``m = 0`` for W_in and ``1`` for W_out, so
one alltoall serves both matrices. Keys sent by a rank are unique; every split is in rank order.

A step's keys depend on its examples alone, never on the model, so the route of the next step travels with
this step's exchanges: its counts with the gather, its keys with the scatter. The ranks then meet twice a
step (gather, scatter) instead of four times (counts, keys, gather, scatter), and each meeting is where the
rank that arrives first waits for the other.
"""
import time
from dataclasses import dataclass

import numpy as np

from ..kernels import native
from . import wire
from .comm import Part


@dataclass
class Ask:
    """The keys this rank needs in one step: ``keys`` (unique int64, grouped by owner in rank order),
    ``counts[r]`` of them owned by rank ``r``, and ``sgd`` (float32): how many SGD updates this rank's update
    of each key will sum (whole numbers, known before the step, so they travel with the keys)."""

    keys: np.ndarray
    counts: np.ndarray
    sgd: np.ndarray


@dataclass
class Route:
    """One step's traffic plan, from the asking side (``keys``) and the owning side (``local``)."""

    keys: np.ndarray  # int64[n]: the keys this rank needs, grouped by owner (rank order)
    counts: np.ndarray  # int64[P]: how many of ``keys`` go to each owner
    local: np.ndarray  # int64[m]: rows of this rank's table other ranks asked for (RowPlan.local_key), by source
    asked_counts: np.ndarray  # int64[P]: how many each source asked
    asked_sgd: np.ndarray  # float32[m]: how many SGD updates each source's update of each asked key will sum
    own: slice  # where this rank's keys of itself are in ``keys``
    own_asked: slice  # ... and in ``local``: the same keys, in the same order


class Exchange:
    """Moves rows of the sharded matrices between their owners and the ranks that need them.

    Per step: ``gather`` then ``scatter``; the first step's route comes from ``route``, every later one from
    the previous step's ``gather`` (its counts) and ``scatter`` (its keys). Every method is collective, and
    ``idle`` (optional) is work to do while waiting for other ranks (Comm.alltoallv_many).

    ``carrier`` (a wire.Float32, the default, or wire.BFloat16) is the form rows and updates travel in; a rank's
    own rows and updates take that form too, so that no result depends on which rank owns a row.
    """

    def __init__(self, comm, plan, table, carrier=None):
        self.comm = comm
        self.plan = plan
        self.table = table  # this rank's W_in and W_out rows by local key: float32[2 * rows(rank), d]
        self.carrier = carrier or wire.Float32()
        # Per local key, the SGD updates all sources' updates of it sum in the step being scattered (the cap
        # of ``apply`` needs a row's total): the scratch of apply.sources, zero between steps. 4 B a row: 0.5%
        # of a dim-100 model.
        self.sgd = np.zeros(len(table), np.float32)
        self.bytes_sent = 0  # to other ranks, over the whole run
        self._none = np.zeros(comm.size, np.int64)
        self._ones = np.ones(comm.size, np.int64)

    def route(self, ask):
        """Stage 1, alone (the first step): send each owner the keys of ``ask`` it owns."""
        if self.comm.size == 1:
            return self._own_route(ask)
        asked_counts = self.comm.alltoall_ints(ask.counts)
        return self._routed(ask, *self.comm.alltoallv_many([self._keys(ask, asked_counts)]), asked_counts)

    def gather(self, route, out, announce=None, idle=None):
        """Stage 2: owners send back the asked rows, received into ``out`` (float32[n, d], the rows of
        route.keys in order). ``announce`` is the next step's Ask (None: no next step); returns how many keys
        each rank will ask of this one in it (int64[P])."""
        local, own, own_asked = route.local, route.own, route.own_asked
        counts = announce.counts if announce else self._none
        carrier = self.carrier
        # rows of itself: straight into ``out``
        native.take_rows(self.table, local[own_asked], out[own], self.comm.threads)
        carrier.round(out[own])
        if self.comm.size == 1:
            return counts
        rows = carrier.empty((len(local), self.table.shape[1]))  # its own block stays unused
        for others in (slice(0, own_asked.start), slice(own_asked.stop, len(local))):
            carrier.take(self.table, local[others], rows[others])
        received = carrier.receiver(out)
        _, asked_next = self.comm.alltoallv_many(
            [Part(rows, route.asked_counts, route.counts, received, own=False),
             Part(counts, self._ones, self._ones)], idle)
        carrier.decode(received, out, own)
        self._count(rows, route.asked_counts)
        return asked_next

    def scatter(self, route, updates, apply, ask=None, asked_counts=None, idle=None):
        """Stage 3: send the updates (float32[n, d]) of route.keys to their owners, who apply them; with the
        next step's ``ask`` and the ``asked_counts`` its gather announced, returns the next step's Route.

        The owner adds them with ``apply.sources(table, local_rows, blocks, sgd, scratch)`` (loop.CappedAdd):
        every source's block in rank order, each row capped by its SGD-update count summed over all sources (a
        source's keys are unique, two sources' may not be).
        """
        sent = self.carrier.encode(updates)  # its own block too: the owners add the wire's form
        if self.comm.size == 1:  # every key its own: nothing to send, and the next route is the next ask
            apply.sources(self.table, route.local, [sent], route.asked_sgd, self.sgd)
            return None if ask is None else self._own_route(ask)
        parts = [Part(sent, route.counts, route.asked_counts, own=False)]
        if ask is not None:
            parts.append(self._keys(ask, asked_counts))
        received = self.comm.alltoallv_many(parts, idle)
        self._count(sent, route.counts)
        # every source's block where it arrived, its own where it is
        blocks = native.Blocks(received[0], route.asked_counts, self.comm.rank, sent[route.own])
        apply.sources(self.table, route.local, blocks, route.asked_sgd, self.sgd)
        return None if ask is None else self._routed(ask, received[1], asked_counts)

    def _keys(self, ask, asked_counts):
        """The alltoallv part that sends ``ask``'s keys with their SGD counts."""
        sent = np.empty((len(ask.keys), 2), np.int64)  # filled by column: faster than np.stack's
        sent[:, 0], sent[:, 1] = ask.keys, ask.sgd
        self._count(sent, ask.counts)
        return Part(sent, ask.counts, asked_counts)

    def _routed(self, ask, asked, asked_counts):
        local = self.plan.local_key(np.ascontiguousarray(asked[:, 0]))  # once, for the gather and the scatter
        rank = self.comm.rank
        own = slice(int(ask.counts[:rank].sum()), int(ask.counts[:rank + 1].sum()))
        own_asked = slice(int(asked_counts[:rank].sum()), int(asked_counts[:rank + 1].sum()))
        return Route(ask.keys, ask.counts, local, asked_counts, asked[:, 1].astype(np.float32), own, own_asked)

    def _own_route(self, ask):
        """The route of ``ask`` on one rank: what _routed makes of it there (every key asked of itself), without
        packing the keys and their counts to send them to itself: Python that every step would pay."""
        own = slice(0, len(ask.keys))
        return Route(ask.keys, ask.counts, self.plan.local_key(ask.keys), ask.counts, ask.sgd, own, own)

    def _count(self, sent, counts):
        """Add the bytes of ``sent`` that left this rank (rows to itself cost nothing)."""
        if len(sent):
            self.bytes_sent += (len(sent) - int(counts[self.comm.rank])) * (sent.nbytes // len(sent))


class HotRows:
    """Replicas of the ``n`` most frequent words' rows (ids ``0..n-1``) on every rank, kept equal by summing
    their updates with a Horovod allreduce each step. ``rows`` is float32[2n, d], indexed by key. ``calls``,
    ``bytes`` and ``seconds``: the allreduces of :meth:`apply` so far, the bytes this rank's blocks held, and
    the time they took here (0 calls on one rank, where nothing travels)."""

    def __init__(self, comm, model, n):
        self.comm, self.model, self.n = comm, model, n
        self.calls, self.bytes, self.seconds = 0, 0, 0.0
        self.rows = np.zeros((2 * n, model.w_in.shape[1]), np.float32)
        if n:
            mine, local = self._mine()
            self.rows[2 * mine], self.rows[2 * mine + 1] = model.w_in[local], model.w_out[local]
            # Horovod: every rank contributes the hot rows it owns (zeros elsewhere); the sum is the full block.
            self.rows = comm.allreduce_dense(self.rows)

    def apply(self, keys, updates, counts, apply):
        """Sum this rank's ``updates`` (float32[k, d]) of hot ``keys`` and their SGD-update ``counts`` over
        ranks and apply them to every replica with ``apply(table, rows, sums, summed_counts)`` (collective).
        Returns the keys some rank updated (increasing; none without hot rows)."""
        if self.n and self.comm.size == 1:  # nothing to sum over: the rows as the block would give them
            mine = counts != 0
            order = np.argsort(keys[mine])
            touched = keys[mine][order]
            apply(self.rows, touched, updates[mine][order], counts[mine][order])
            return touched
        if self.n:
            block = np.zeros((len(self.rows), updates.shape[1] + 1), np.float32)
            block[keys, :-1], block[keys, -1] = updates, counts
            t = time.monotonic()
            sums = self.comm.allreduce_dense(block)
            if self.comm.size > 1:
                self.calls, self.bytes, self.seconds = (self.calls + 1, self.bytes + block.nbytes,
                                                        self.seconds + time.monotonic() - t)
            touched = np.flatnonzero(sums[:, -1])  # rows no rank updated are left alone
            apply(self.rows, touched, sums[touched, :-1], sums[touched, -1])
            return touched
        return np.zeros(0, np.int64)

    def _mine(self):
        """The hot ids this rank owns, and their rows in its slice."""
        mine = self.model.plan.ids(self.comm.rank)
        mine = mine[mine < self.n]
        return mine, self.model.plan.local_row(mine)

    def write_back(self):
        """Copy the replicas into the owners' slices (before export or checkpoint)."""
        mine, local = self._mine()
        self.model.w_in[local], self.model.w_out[local] = self.rows[2 * mine], self.rows[2 * mine + 1]
