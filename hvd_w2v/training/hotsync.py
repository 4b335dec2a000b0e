"""Shard-local SGD whose hot rows meet inside the super-step (``--shards V --hot-rows H --substep K``), as
pWord2Vec keeps its most frequent words' rows in step between its rarer full merges.

A super-step runs as localsgd.LocalSGD's, but in sub-steps of ``K`` positions of every shard: after each,
the ``H`` most frequent words' rows (ids below H, both matrices: the hot block, replicated on every rank,
exchange.HotRows) have their deltas since the last sub-step summed over every shard, the rank's in shard
order (localsgd_kernel.cc's session) and then over the ranks by Horovod's allreduce of the fixed-shape
block, merged by the super-step's own rule (localsgd.merge_rule: the sum, capped and clipped per row) into
the replicas, and every shard goes on from the merged rows. The other rows meet at the super-step's end as
in localsgd. Why: the frequent words' rows are the ones every shard moves, so they drift apart fastest
between merges and their summed deltas are the ones that overshoot; merged often, each shard sees what the
others learnt of them, and the super-step can be longer at the same quality.

The sub-steps of a shard are fixed by positions (sub-step ``j`` of a super-step covers the positions ``j K ..
(j + 1) K`` of each shard's ``S``), every rank runs ``ceil(S / K)`` of them a super-step (one allreduce each,
a collective), and the sums run in shard order, so for fixed V, S, H and K the vectors are the same on every
layout that hosts the V shards, up to the order of float32 sums. K >= S is localsgd's rule with hot rows.

Memory: a rank holds every hosted shard's copy of its rows from the super-step's start to its end (localsgd
holds one a thread): planning.memory counts it.
"""
import numpy as np

from ..kernels import native
from . import localsgd
from .localsgd import LocalSGD, hosted, superstep_plan


def parts(cfg):
    """Sub-steps in a super-step: ``ceil(superstep / substep)``."""
    return -(-cfg.superstep // cfg.substep)


def prepare_substeps(stream, vocab, cfg, plan, n_hot, done, rank, threads=1, scratch=None):
    """localsgd.prepare_superstep's StepPlan of global super-step ``done``, with ``segments``: its shards'
    centres by sub-step (shard s's sub-step j: ``[segments[s J + j], segments[s J + j + 1])``, J = parts(cfg)).
    ``bounds`` (a shard's centres) is every J-th of them, so the merge's shard counts are localsgd's.
    ``scratch``: localsgd.prepare_superstep's."""
    J = parts(cfg)
    batch, segments = localsgd.superstep_batches(stream, vocab, cfg, done, hosted(cfg.shards, plan.ranks, rank),
                                                 threads, J, scratch)
    step = superstep_plan(batch, segments[::J], plan, n_hot, cfg.sg, threads, scratch)
    step.segments = segments
    return step


class HotSync(LocalSGD):
    """The rule (loop.ExactStep's interface) with ``hot_inside``: its maths merges the hot rows itself, so the
    loop adds none of them at the super-step's end."""

    hot_inside = True

    def __init__(self, cfg, vocab, stream, plan, hot, rank, threads):
        super().__init__(cfg, vocab, stream, plan, hot, rank, threads)
        self.hot, self.parts = hot, parts(cfg)
        scratch = native.Scratch()
        self.prepare = lambda done: prepare_substeps(stream, vocab, cfg, plan, hot.n, done, rank, threads, scratch)

    def maths(self, rows, step, alpha):
        """Every hosted shard's SGD from the snapshot ``rows``, the hot rows merged after each sub-step into
        the replicas (collective: one Horovod allreduce a sub-step); returns localsgd's (deltas, loss, count),
        the hot rows' deltas zero."""
        hot_keys = step.keys[step.cold:]
        hot_lo, hot_hi = step.cold, len(step.keys)
        codes = step.codes[0] if step.codes else None
        if self.lib is not None:
            session = native.LocalSession(self.lib, self.cfg.sg, rows, step.ctx[0], step.tgt[0], step.segments,
                                          self.parts, hot_lo, hot_hi, self.threads, self.cfg.cbow_mean, codes,
                                          self.weights)
        else:
            session = Reference(self.cfg.sg, rows, step.ctx[0], step.tgt[0], step.segments, self.parts, hot_lo,
                                hot_hi, self.cfg.cbow_mean, codes, self.weights)
        for part in range(self.parts):
            deltas, touching = session.substep(part, alpha)
            changed = np.flatnonzero(np.isin(hot_keys, self.hot.apply(hot_keys, deltas, touching, self.apply)))
            session.sync(self.hot.rows[hot_keys[changed]], changed)  # the rows no shard moved are as they were
        return session.close()

    def describe(self):
        return (f"{super().describe()}; the {self.hot.n:,} hot rows merged every {self.cfg.substep:,} positions of "
                f"each shard (Horovod)")


class Reference:
    """native.LocalSession in numpy, one centre at a time: the fallback, and what the kernel is tested
    against (the same sums in the same order)."""

    def __init__(self, sg, rows, ctx, tgt, segments, parts, hot_lo, hot_hi, cbow_mean=True, codes=None,
                 weights=None):
        self.sg, self.rows, self.ctx, self.tgt, self.parts, self.mean = sg, rows, ctx, tgt, parts, cbow_mean
        self.codes, self.weights = codes, weights
        self.segments, self.hot = np.asarray(segments), (hot_lo, hot_hi)
        shards = (len(segments) - 1) // parts
        self.copies = [rows.copy() for _ in range(shards)]
        self.base = rows[hot_lo:hot_hi].copy()
        self.named = []  # a shard's rows, as a mask over the table
        for s in range(shards):
            lo, hi = self.segments[s * parts], self.segments[(s + 1) * parts]
            self.named.append(_named(len(rows), ctx[lo:hi], tgt[lo:hi]))
        self.loss = self.count = 0.0

    def substep(self, part, alpha):
        hot_lo, hot_hi = self.hot
        hot = np.zeros_like(self.base)
        touching = np.zeros(len(hot), np.float32)
        for s, mine in enumerate(self.copies):
            lo, hi = self.segments[s * self.parts + part], self.segments[s * self.parts + part + 1]
            loss, count = localsgd.shard_sgd(self.sg, mine, self.ctx, self.tgt, lo, hi, alpha, self.mean, self.codes,
                                             1.0 if self.weights is None else self.weights[s])
            self.loss, self.count = self.loss + loss, self.count + count
            touched = np.flatnonzero(_named(len(self.rows), self.ctx[lo:hi], self.tgt[lo:hi])[hot_lo:hot_hi])
            hot[touched] += mine[hot_lo + touched] - self.base[touched]
            touching[touched] += 1
        return hot, touching

    def sync(self, hot, which):
        hot_lo, _ = self.hot
        self.base[which] = hot
        for mine in self.copies:
            mine[hot_lo + np.asarray(which, np.int64)] = self.base[which]

    def close(self):
        hot_lo, hot_hi = self.hot
        deltas = np.zeros((len(self.rows) - 1, self.rows.shape[1]), np.float32)
        for mine, named in zip(self.copies, self.named):
            touched = np.flatnonzero(named[:-1])
            touched = touched[(touched < hot_lo) | (touched >= hot_hi)]
            deltas[touched] += mine[touched] - self.rows[touched]
        return deltas, self.loss, self.count


def _named(table, ctx, tgt):
    """bool[table]: the rows centres' ``ctx`` and ``tgt`` name (the last, "no context word", never)."""
    named = np.zeros(table, bool)
    named[ctx.ravel()] = named[tgt.ravel()] = True
    named[-1] = False
    return named
