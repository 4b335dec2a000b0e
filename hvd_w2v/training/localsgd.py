"""Shard-local SGD: the stream cut into ``cfg.shards`` shards, each running word2vec's sequential SGD between
super-step exchanges (``--shards V``; loop.ExactStep is the exact global step's rule).

Shard ``v`` of ``V`` owns the consecutive positions ``[n v / V, n (v + 1) / V)`` of the ``n`` of an epoch, as
word2vec.c's threads each own a part of the file. Super-step ``k`` of an epoch covers positions
``k S .. (k + 1) S`` of every shard's part (``S = cfg.superstep``). In it, every shard runs SGD over its
centres, in order, on a private copy of the rows they touch, every update seeing the ones before it
(localsgd_kernel.cc); its deltas (the copy less the super-step's snapshot) go to the rows' owners, who add
them, each row's sum over the ``m`` shards that touched it scaled by ``min(1, cfg.merge_cap / m)`` (0: not)
(loop.CappedAdd, with shard counts for SGD counts), then scaled down to an L2 norm of ``cfg.merge_clip`` at
most (:class:`ClippedMerge`; by default on every V and S, so that no row's step can grow without bound:
config.MERGE_CLIP). Then the next super-step's rows are fetched.

Rank ``r`` of ``P`` hosts the shards ``[V r / P, V (r + 1) / P)`` and runs them on its threads. Everything a
shard does is a function of its positions and the snapshot, and the deltas are summed in shard order, so
for a fixed ``V`` and ``S`` the vectors are the same on every layout that hosts the ``V`` shards (ranks x
threads, hosts), up to the order of float32 sums. V = 1 is word2vec's single-thread SGD with the model's
rows refreshed every ``S`` positions.

The rest is the exact step's: loop.train runs the loop with this rule (the exchange of keys, rows and
deltas, the hot rows' Horovod allreduce, the loss reports, checkpoints at super-step boundaries); the examples
of a super-step depend on positions alone, so they and their keys are prepared ahead (loop.Ahead) and the
keys travel with the super-step before's exchange.
"""
import numpy as np

from ..common.errors import UserError
from ..kernels import native
from . import batches
from .loop import CappedAdd, StepPlan


def shard_range(n, shards, v):
    """Shard ``v``'s positions ``[lo, hi)`` of an epoch of ``n``."""
    return n * v // shards, n * (v + 1) // shards


def hosted(shards, ranks, rank):
    """The shards rank ``rank`` of ``ranks`` runs: a range, consecutive, as even as the counts allow."""
    return range(shards * rank // ranks, shards * (rank + 1) // ranks)


def noise_group(shard, shards, groups):
    """The noise group of ``shard`` of ``shards`` (config.Config.noise_groups): the rank that would host it on
    ``groups`` ranks (:func:`hosted`), so that on that many ranks its noise words are its rank's own rows."""
    return ((shard + 1) * groups - 1) // shards


def shards_noise(cfg, shards, parts=1):
    """The noise groups of ``shards`` (shard numbers), each ``parts`` times, for batches.build_ranges: (group,
    groups, head) keys of vocab.CountRuns.noise_group; None with one group (every word)."""
    if cfg.noise_groups == 1:
        return None
    return [(noise_group(v, cfg.shards, cfg.noise_groups), cfg.noise_groups, cfg.noise_head)
            for v in shards for _ in range(parts)]


def noise_weights(vocab, cfg, shards):
    """Each of ``shards``' (shard numbers) noise weight, float32, or None with one group: its group's weight
    (the head's, and G times the rest of the group's: vocab.CountRuns.noise_group) over every word's. A shard
    draws each word of its group in proportion to that weight over its group's; weighted so, the noise words'
    expected update, of each W_out row and of each centre's input row, is one group's, however unequal the
    groups (LocalSGD.describe prints the range)."""
    if cfg.noise_groups == 1:
        return None
    runs = vocab.runs
    return np.array([runs.noise_group(*key).cum[-1] / runs.cum[-1] for key in shards_noise(cfg, shards)],
                    np.float32)


def superstep_batches(stream, vocab, cfg, done, shards, threads=1, parts=1, scratch=None):
    """The examples of ``shards`` (a range of shard numbers) in global super-step ``done`` (counted over all
    epochs), in shard order: ``(batch, bounds)``, shard ``shards[s]``'s centres ``[bounds[s], bounds[s + 1])``
    of ``batch``, built in one call, a shard a thread, where the rank hosts as many shards as threads
    (batches.build_ranges). With ``parts`` sub-steps of ``cfg.substep`` positions (hotsync), each shard's
    centres are cut by them: shard s's sub-step j is ``[bounds[s parts + j], bounds[s parts + j + 1])``. With
    ``scratch`` (native.Scratch), the batch lasts until its next use. Each shard's noise words are drawn from its
    noise group's words (:func:`shards_noise`)."""
    n = len(stream)
    epoch, k = divmod(done, cfg.steps_per_epoch(n))
    ranges = []
    for v in shards:
        lo, hi = shard_range(n, cfg.shards, v)
        start, end = min(hi, lo + k * cfg.superstep), min(hi, lo + (k + 1) * cfg.superstep)
        ranges += [(start, end)] if parts == 1 else [
            (min(end, start + j * cfg.substep), min(end, start + (j + 1) * cfg.substep)) for j in range(parts)]
    batch, counts = batches.build_ranges(stream, vocab, cfg, epoch, ranges, threads, scratch,
                                         shards_noise(cfg, shards, parts))
    return batch, np.cumsum(np.concatenate(([0], counts)), dtype=np.int64)


def prepare_superstep(stream, vocab, cfg, plan, n_hot, done, rank, threads=1, scratch=None):
    """Rank ``rank``'s StepPlan of global super-step ``done`` under ``plan`` (a RowPlan: its rank count), with
    ``bounds``: its shards' centres. Its ``sgd`` counts, per row, the shards that touch it (the merge rule's
    m). A function of corpus positions alone, like loop.prepare_step. ``scratch`` (native.Scratch): room for
    the examples and the table's making, reused from super-step to super-step."""
    batch, bounds = superstep_batches(stream, vocab, cfg, done, hosted(cfg.shards, plan.ranks, rank), threads,
                                      scratch=scratch)
    return superstep_plan(batch, bounds, plan, n_hot, cfg.sg, threads, scratch)


def superstep_plan(batch, bounds, plan, n_hot, sg, threads=1, scratch=None):
    """The StepPlan of a super-step's examples ``batch``, its shards' centres ``[bounds[s], bounds[s + 1])``:
    one table for all its shards, ``sgd`` the shards touching each row (counted as the table is numbered),
    ``bounds`` kept on it."""
    step = StepPlan.of(batch, plan, n_hot, sg, 1, threads, bounds, scratch)
    step.bounds = bounds
    return step


def merge_rule(cfg, threads=1):
    """The owners' add of ``cfg``'s merge (loop.CappedAdd's interface) on ``threads`` threads: the capped
    sum, clipped with ``cfg.clip``."""
    cap = float(cfg.merge_cap or "inf")  # 0: no cap, the sum
    return ClippedMerge(cap, cfg.clip, threads) if cfg.clip else CappedAdd(cap, threads)


class LocalSGD:
    """The shard-local SGD rule (loop.ExactStep's interface): ``prepare``, ``empty_rows``, ``maths``,
    ``apply``, ``describe``."""

    hot_inside = False  # the loop merges the hot rows' deltas at the super-step's end (hotsync.HotSync: inside)

    @staticmethod
    def check_layout(cfg, ranks, words=None):
        """UserError unless every rank hosts at least one of ``cfg.shards``, and every noise group holds a word
        of the ``words`` (the vocabulary's size, when known)."""
        if cfg.shards < ranks:
            raise UserError(f"--shards {cfg.shards} on {ranks} ranks: every rank hosts at least one shard; use "
                            f"--shards {ranks} or more (a multiple of ranks x threads keeps every thread busy)")
        if words is not None and cfg.noise_groups > words:
            raise UserError(f"--noise-groups {cfg.noise_groups} on a vocabulary of {words:,} words: a group holds "
                            f"the ids congruent to it modulo {cfg.noise_groups}, at least one (give "
                            f"--noise-groups {words} or fewer)")

    def __init__(self, cfg, vocab, stream, plan, hot, rank, threads):
        self.check_layout(cfg, plan.ranks, vocab.size)
        self.cfg, self.threads, self.hosted = cfg, threads, len(hosted(cfg.shards, plan.ranks, rank))
        self.weights = noise_weights(vocab, cfg, hosted(cfg.shards, plan.ranks, rank))
        self.lib = native.local_sgd_kernel()
        self.apply = merge_rule(cfg, threads)
        scratch = native.Scratch()  # the examples, used up by each super-step's plan as it is made
        self.prepare = lambda done: prepare_superstep(stream, vocab, cfg, plan, hot.n, done, rank, threads, scratch)

    @staticmethod
    def empty_rows(table, dim):
        return np.empty((table, dim), np.float32)

    def maths(self, rows, step, alpha):
        """Every hosted shard's SGD from the snapshot ``rows``: (deltas float32[table - 1, d] summed in shard
        order, loss, count)."""
        codes = step.codes[0] if step.codes else None
        if self.lib is not None:
            return native.local_sgd(self.lib, self.cfg.sg, rows, step.ctx[0], step.tgt[0], step.bounds, alpha,
                                    self.threads, self.cfg.cbow_mean, codes, self.weights)
        return reference(self.cfg.sg, rows, step.ctx[0], step.tgt[0], step.bounds, alpha, self.cfg.cbow_mean, codes,
                         self.weights)

    def describe(self):
        return (f"super-steps of {self.cfg.superstep:,} positions on each of {self.cfg.shards:,} shards "
                f"({self.hosted:,} here); merge: {f'cap {self.cfg.merge_cap:g}' if self.cfg.merge_cap else 'the sum'}"
                f"{f', clipped to {self.cfg.clip:g}' if self.cfg.clip else ''}; rows and deltas as "
                f"{self.cfg.wire}; {self.noise_groups()}shard SGD: {'compiled' if self.lib is not None else 'numpy'}")

    def noise_groups(self):
        """The describe line's noise groups and the range of their weights here, or nothing with one."""
        if self.weights is None:
            return ""
        return (f"noise words from {self.cfg.noise_groups:,} groups, weighted {self.weights.min():.2f} to "
                f"{self.weights.max():.2f} here; ")


class ClippedMerge:
    """The owners' rule with ``--merge-clip``: a row's merged delta (its sources' sum, scaled by min(1, cap / m)
    as loop.CappedAdd's) scaled down to an L2 norm of at most ``clip``; each row of the table (a vector of
    W_in or of W_out) alone.

    Why: the shards' deltas of a row are each computed from the same snapshot, so where many shards update a
    row in one super-step their sum can overshoot by far, and the plain sum diverged, on one corpus at 4,096
    positions a super-step (hvd_w2v/bench/README.md, "Shard-local SGD's quality"). Clipping bounds the step of
    those few rows and leaves the others' sum as it is. The clip applies to the whole merged sum (all sources
    summed first), so it is the same on every layout of the shards.
    """

    def __init__(self, cap, clip, threads=1):
        self.cap, self.clip, self.threads = cap, clip, threads

    def __call__(self, table, rows, updates, counts):
        """``table[rows] += updates``, merged so (rows unique; every source's already summed: the hot rows')."""
        native.merge_sources(table, rows, [updates], counts, self.cap, self.clip, self.threads)

    def sources(self, table, rows, blocks, sgd, total):
        """An owner's scatter (loop.CappedAdd.sources's arguments; ``total`` unused): the sources' blocks
        summed row by row in source order, then scaled and added (native.merge_sources)."""
        native.merge_sources(table, rows, blocks, sgd, self.cap, self.clip, self.threads)


def reference(sg, rows, ctx, tgt, bounds, alpha, cbow_mean=True, codes=None, weights=None):
    """localsgd_kernel.cc's super-step in numpy, one centre at a time: the fallback, and what the kernel is
    tested against (the same sums in the same order, up to the exp and log1p of each library); ``codes``:
    hierarchical softmax's, ``weights`` each shard's noise weight (shard_sgd; None: 1 each)."""
    none = len(rows) - 1
    deltas = np.zeros((none, rows.shape[1]), np.float32)
    loss = count = 0.0
    for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        mine = rows.copy()
        shard_loss, shard_count = shard_sgd(sg, mine, ctx, tgt, lo, hi, alpha, cbow_mean, codes,
                                            1.0 if weights is None else weights[s])
        loss, count = loss + shard_loss, count + shard_count
        touched = np.zeros(len(rows), bool)
        touched[ctx[lo:hi].ravel()] = touched[tgt[lo:hi].ravel()] = True
        touched = np.flatnonzero(touched[:none])
        deltas[touched] += mine[touched] - rows[touched]
    return deltas, loss, count


def shard_sgd(sg, mine, ctx, tgt, lo, hi, alpha, cbow_mean=True, codes=None, weight=1.0):
    """word2vec.c's SGD over the centres ``[lo, hi)`` in order, on the table ``mine`` (float32[T, d], row T - 1
    "no context word"), in place; returns (loss, count). CBOW of the context's mean, or with ``cbow_mean``
    False of its sum, each context row then getting 1/m of the update (gensim's cbow_mean=0). With ``codes``,
    hierarchical softmax: ``tgt`` the centre's path, labels 1 - code, a node whose |x . y| is 6 or more left
    alone (word2vec.c's). The noise words' updates at ``weight`` times the rate (noise_weights)."""
    none = len(mine) - 1
    loss = count = 0.0
    noise_alpha = np.float32(alpha) * np.float32(weight)
    for i in range(lo, hi):
        cs = [c for c in ctx[i] if c != none]
        if codes is None:
            ts = [t for k, t in enumerate(tgt[i]) if t != none and (k == 0 or t != tgt[i][0])]
            labels = [1.0] + [0.0] * (len(ts) - 1)  # the centre, then its noise words
        else:
            ts = [t for t in tgt[i] if t != none]
            labels = [1.0 - code for code in codes[i][:len(ts)]]
        share = np.float32(1)
        if sg:
            inputs = [(mine[c], [c]) for c in cs]
        elif cs and cbow_mean:
            inputs = [(mine[cs].mean(axis=0, dtype=np.float32), cs)]
        elif cs:
            inputs, share = [(mine[cs].sum(axis=0, dtype=np.float32), cs)], np.float32(1) / np.float32(len(cs))
        else:
            inputs = []
        for l1, into in inputs:
            work = np.zeros(mine.shape[1], np.float32)
            fs = [np.float32(np.dot(l1, mine[t])) for t in ts]  # every dot product before the updates
            for t, label, f in zip(ts, labels, fs):
                sig = np.float32(1 / (1 + np.exp(-np.float64(f))))
                loss += np.logaddexp(0, -np.float64(f if label else -f))  # -log sigmoid(+-f), for any f
                if codes is not None and abs(f) >= 6:
                    continue
                g = np.float32((label - sig) * (alpha if codes is not None or label else noise_alpha))
                work += g * mine[t]
                mine[t] += g * l1
            for c in into:
                mine[c] += share * work
            count += 1
    return loss, count
