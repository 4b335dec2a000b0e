"""The dry-run planner of shard-local SGD (localsgd): a super-step's exchange on P nodes of T threads, counted
from the real encoded corpus by the code training runs, in one process, beside the exact step's projection.

    python -m hvd_w2v.localplan data/real/corpus.txt --nodes 1,2,4,...,1024 --threads 32 --superstep 1024,4096

A node is one rank with T threads hosting T shards (V = P x T). In a super-step each shard trains S
consecutive positions, so a node asks the owners for the rows its T x S positions touch. The planner builds
that StepPlan (localsgd.superstep_batches' pieces: batches.build of each shard's positions,
loop.StepPlan.of under the RowPlan of P nodes) for sampled nodes and super-steps and counts, as
exchange.Exchange.bytes_sent does: 16 B for each key asked of another node, 4 dim B (2 dim B with --wire
bfloat16) for each row sent back and for each delta sent to its owner; with --noise-groups nodes (train's
--noise-groups P, local negatives) a node's noise words past the head are its own rows. The T shards of a sampled node read S
positions each at T disjoint places of the stream, as a node's shards do at once on a corpus of V x S
positions or more, so the counts hold for a cluster's corpus however small this one is against V x S.

Every timed call runs with the data of the one before pushed out of the core's own caches (:func:`_cool`), as
training's other work pushes it out between its calls. Time per super-step = compute + gather + scatter +
allreduce, with the exact planner's network model
(plan.Network: each stage the busiest node's latency x messages + bytes / bandwidth; the hot block a ring
allreduce, Horovod's: 2 (P - 1) / P of its bytes and 2 (P - 1) latencies, once a super-step or, with --substep
K, ceil(S / K) times: hotsync), every node assumed to serve as many rows as it asks for. Compute: S positions
on each thread at the rate the compiled shard SGD runs here on one thread (native.local_sgd, timed on one
shard's examples), the T threads of a node in parallel ("SGD ms"), and the node's work around it for its T x S
positions, timed here on 1 and --node-threads threads (this host's cores, at most T) and projected to the node's T
threads by the speed-up measured here (:func:`on_node`, Amdahl's law; with --node-threads 1, the 1-thread time, an
upper bound): an owner's gather of the rows every node asks of it and its add of their deltas, one
source a node, built from every node's examples at sampled super-steps, by the merge train uses at the row's
V and S (:func:`measure_owner`, config.MERGE_CLIP; "rows ms"); and the examples and table of the next
super-step (:func:`measure_prepare`, "prepare ms"), which training builds while the exchange waits, so they
count only past the gather and scatter. Words per second count raw words: P x T x S positions x raw words per
position over the super-step's time. Two efficiencies stand beside them: "of 1 node", that over P times one
node's words per second at the same S and merge (one node exchanges nothing), which says what the network
costs; and "of 1 thread", the words per second per core (P x T cores) over what one thread alone trains on
its best setting, measured in the same run (:func:`measure_alone`: the faster of word2vec's sequential SGD
on one shard and the exact step on one rank of one thread), which says what the cluster's cores give. A
node's compute takes at least its memory traffic (:func:`memory_bytes`) at --node-memory-bandwidth ("mem GB/s":
what the row's rate needs). S "auto" is train's default for the row's V on an epoch of the corpus's positions
or of --epoch-positions (config.superstep_for), so its rows project what a cluster gets without --superstep,
on this corpus or on one of that size with this corpus's words and their frequencies. The exact step's row,
beside it: plan.py's projection of one rank per node whose step maths runs T times faster (its T threads), at
the default --batch-words, with its rows' gather and add timed on one thread, one rank's share on one rank
(:func:`measure_exact_other`: its examples and table left out, its rows all from one source).
"""
import argparse
import functools
import math
import os
import sys
import time
from dataclasses import replace

import numpy as np

from ..common.config import WIRES, Config, superstep_for
from ..common.errors import UserError
from ..common.wording import counted
from ..kernels import native
from ..parallel import wire
from ..parallel.shard import RowPlan
from ..training import batches, hotsync
from ..training.localsgd import merge_rule, shards_noise, superstep_plan
from ..training.loop import CappedAdd, StepPlan
from . import plan

SAMPLED_NODES = 3  # nodes whose StepPlan is built at each sampled super-step


def sampled_nodes(nodes):
    """The SAMPLED_NODES nodes of ``nodes`` whose steps a row samples, spread from the first to the last."""
    return [int(n) for n in np.linspace(0, nodes - 1, min(SAMPLED_NODES, nodes)).round()]


def node_step(corpus, cfg, nodes, threads, n_hot, node, at, groups=1):
    """The StepPlan node ``node`` of ``nodes`` builds in super-step ``at`` of an epoch (sampled places: see
    the module's docstring), its shards' noise words drawn from their noise groups of ``groups``
    (train's --noise-groups; localsgd.shards_noise of the node's shards among the P x T)."""
    ranges = node_ranges(len(corpus.stream), cfg.superstep, nodes, threads, node, at)
    noise = shards_noise(replace(cfg, shards=nodes * threads, noise_groups=groups),
                         range(node * threads, (node + 1) * threads))
    batch, counts = batches.build_ranges(corpus.stream, corpus.vocab, cfg, 0, ranges, 1, noise=noise)
    bounds = np.cumsum(np.concatenate(([0], counts)), dtype=np.int64)  # ``sgd``: the shards touching each row
    return StepPlan.of(batch, RowPlan(corpus.vocab.size, nodes), n_hot, cfg.sg, 1, 1, bounds)


def node_ranges(n, s, nodes, threads, node, at):
    """The positions ``[lo, hi)`` of node ``node``'s ``threads`` shards in sampled super-step ``at``, of a stream
    of ``n``: S = ``s`` each, at places at least S apart (disjoint, as on a corpus of V x S positions or more),
    the node's first place where its share of this corpus starts."""
    stride = max(s, n // (nodes * threads))
    los = [(node * (n // nodes) + t * stride + at * s) % max(n - s, 1) for t in range(threads)]
    return [(lo, min(n, lo + s)) for lo in los]


COOL_BYTES = 16 << 20  # written between timed calls: more than a core's caches below the last level


@functools.lru_cache(maxsize=1)
def _cooler():
    return np.zeros(COOL_BYTES // 8)


def _cool():
    """Push the data of a timed call out of the core's own caches (a write to every line of COOL_BYTES), as the
    loop's other work does between its calls of a kind: timed again at once, the same data would be found there,
    and the work around the SGD timed faster than training runs it (hvd_w2v/bench/README.md, "The projection
    checked against runs")."""
    _cooler()[::8] += 1.0


def measure_thread(corpus, cfg, repeats=9):
    """Seconds per position of one shard's super-step on one thread (the compiled shard SGD, from a snapshot
    of small random rows), and how it was measured: the least of ``repeats`` calls, the one other jobs of a
    shared machine slowed least (their medians moved 5-fold from run to run here)."""
    lib = native.local_sgd_kernel()
    if lib is None:
        raise UserError(f"plan: the compiled shard SGD is not available here: {native.unavailable('localsgd_kernel')}")
    stream, voc = corpus.stream, corpus.vocab
    lo = len(stream) // 2
    batch = batches.build(stream, voc, cfg, 0, lo, min(len(stream), lo + cfg.superstep))
    step = StepPlan.of(batch, RowPlan(voc.size, 1), 0, cfg.sg, 1)
    rows = np.random.default_rng(0).uniform(-0.5, 0.5, (step.table, cfg.dim)).astype(np.float32) / cfg.dim
    rows[len(step.keys):] = 0
    bounds = np.array([0, len(batch)], np.int64)
    times = []
    for _ in range(repeats + 1):  # the first call sizes the copies: left out
        _cool()
        t = time.perf_counter()
        native.local_sgd(lib, cfg.sg, rows, step.ctx[0], step.tgt[0], bounds, np.float32(cfg.alpha), 1)
        times.append(time.perf_counter() - t)
    positions = min(len(stream), lo + cfg.superstep) - lo
    seconds = float(np.min(times[1:]))
    return seconds / positions, (f"the compiled shard SGD on one thread here, {positions:,} positions: "
                                 f"{seconds * 1e3:,.2f} ms (least of {repeats} calls)")


@functools.lru_cache(maxsize=1)
def _model(words, dim):
    """A model table of ``words`` words (float32[2 x words, dim]) whose rows the measurements read and add to:
    larger than the caches, as a node's slice of a cluster's model is; and a permutation of its rows, where an
    owner's keys are placed (:func:`measure_owner`). Made once (a large vocabulary's takes seconds)."""
    rng = np.random.default_rng(0)
    return rng.uniform(-0.5, 0.5, (2 * words, dim)).astype(np.float32) / dim, rng.permutation(2 * words)


def _examples_seconds(corpus, cfg, ranges, counts, repeats=9):
    """Seconds on each of ``counts`` threads here of a node's examples for ``ranges`` (positions ``[lo, hi)``, a
    shard each; batches.build_ranges) and their table of unique rows with the shards touching each row
    (localsgd.superstep_plan), in room reused from call to call as training's (native.Scratch): {threads: the
    least of ``repeats`` rounds}, the first left out (it allocates).
    A round times every count in turn, so that a shared machine's moods fall on them alike (one count's
    rounds after the other's moved the speed-up from 1 to 2 threads, and on_node's projection, from run to
    run)."""
    voc, times, scratch = corpus.vocab, {n: [] for n in counts}, native.Scratch()  # reused, as training's
    for _ in range(repeats + 1):
        for n in counts:
            _cool()
            t = time.perf_counter()
            batch, sizes = batches.build_ranges(corpus.stream, voc, cfg, 0, ranges, n, scratch)
            superstep_plan(batch, np.cumsum(np.concatenate(([0], sizes)), dtype=np.int64), RowPlan(voc.size, 1), 0,
                           cfg.sg, n, scratch)
            times[n].append(time.perf_counter() - t)
    return {n: float(np.min(t[1:])) for n, t in times.items()}


def _owner_seconds(model, keys, counts, sgd, merges, carrier="float32", repeats=9):
    """Seconds here of an owner's rows' work in one step on each of ``merges`` ({threads: the rule's merge on
    them}: loop.CappedAdd, localsgd.merge_rule): the gather of the rows ``keys`` (int64, source after source,
    ``counts[s]`` from source s) out of ``model`` into the form they travel in (the wire ``carrier``'s take),
    and the add of as many delta rows, each summing ``sgd`` SGD updates, by the merge's ``sources``, as
    received (native.Blocks, in the wire's form). {threads: the least of ``repeats`` rounds}, the first left
    out; a round times every thread count in turn (:func:`_examples_seconds`)."""
    total = np.zeros(len(model), np.float32)  # the owner's scratch (exchange.Exchange.sgd)
    carriers = {n: wire.of(carrier, n) for n in merges}
    rows = {n: c.empty((len(keys), model.shape[1])) for n, c in carriers.items()}
    received = {n: c.empty((len(keys), model.shape[1])) for n, c in carriers.items()}
    sent = {n: c.encode(model[keys] * np.float32(1e-6)) for n, c in carriers.items()}  # deltas of the rows' size
    times = {n: [] for n in merges}
    for _ in range(repeats + 1):
        for n, merge in merges.items():
            _cool()
            t0 = time.perf_counter()
            carriers[n].take(model, keys, rows[n])
            t1 = time.perf_counter()
            received[n][...] = sent[n]  # as they arrive
            _cool()
            t2 = time.perf_counter()
            merge.sources(model, keys, native.Blocks(received[n], counts), sgd, total)
            times[n].append(t1 - t0 + time.perf_counter() - t2)
    return {n: float(np.min(t[1:])) for n, t in times.items()}


def on_node(seconds, threads):
    """Seconds of work on a node's ``threads`` threads, projected from ``seconds`` ({threads here: seconds}, on 1
    thread and on more) by Amdahl's law: the serial share f that the speed-up measured here implies (clamped to
    [0, 1]; 0 where it was linear or better), then t1 (f + (1 - f) / threads); and f. Measured on 1 thread only,
    f = 1: the 1-thread time, an upper bound. The projection assumes the node's cores as fast as this host's and
    its memory able to feed them (project caps the SGD at the node's memory bandwidth; this work's traffic is
    small beside the SGD's)."""
    t1, n = seconds[1], max(seconds)
    f = 1.0 if n == 1 else min(1.0, max(0.0, (n * seconds[n] / t1 - 1) / (n - 1)))
    return t1 * (f + (1 - f) / threads), f


def _on_node_how(seconds, threads):
    """:func:`on_node`'s projection, and how it got it: the times measured here, the serial share."""
    projected, f = on_node(seconds, threads)
    measured = " and ".join(f"{t * 1e3:,.2f} ms on {counted(n, 'thread')}" for n, t in sorted(seconds.items()))
    if len(seconds) == 1:
        return projected, f"{measured} here"
    return projected, f"{measured} here, serial share {f:.2f}: {projected * 1e3:,.2f} ms on {threads}"


def measure_prepare(corpus, cfg, threads, work_threads):
    """A node's examples and table of its ``threads`` shards of S positions (:func:`_examples_seconds`), built on
    all its threads as training builds them: timed here on 1 and ``work_threads`` threads and projected to
    ``threads`` (:func:`on_node`). Seconds, and how they were measured."""
    ranges = node_ranges(len(corpus.stream), cfg.superstep, 1, threads, 0, 0)
    seconds = _examples_seconds(corpus, cfg, ranges, sorted({1, work_threads}))
    projected, how = _on_node_how(seconds, threads)
    return projected, f"the node's examples and table for {threads} x {cfg.superstep:,} positions {how} (least of 9)"


def measure_owner(corpus, cfg, nodes, threads, samples, work_threads, groups=1):
    """An owner's rows' work in a super-step on ``nodes`` nodes of ``threads`` shards (:func:`_owner_seconds`,
    under the merge ``cfg`` trains with, on all the node's threads as training runs it: timed here on 1 and
    ``work_threads`` threads, projected to ``threads`` by :func:`on_node`): the rows every node asks of it and
    their deltas, one source a node, from every node's StepPlan at the ``samples`` (sampled super-steps), so
    that a row several nodes touch comes from each, as it does in training (noise groups of ``groups``:
    :func:`node_step`). Seconds, the busiest of
    SAMPLED_NODES owners at each sample, averaged over the samples; and how they were measured. Every row
    counts, hot or not: with --hot-rows H the hot rows' add is the allreduce's, so the figure is an upper bound
    there.

    The keys are placed in the model by a fixed permutation (:func:`_model`): far apart, as the rows of a
    large slice are, and shared among the threads as an owner's local rows are. (By their global keys, the
    rows an owner of P nodes holds are every P-th word: on an even P, all in the blocks one thread of two
    adds, which made 2 threads look no faster than 1.)"""
    (model, place), counts = _model(corpus.vocab.size, cfg.dim), sorted({1, work_threads})
    carrier = cfg.wire if nodes > 1 else "float32"  # one node sends nothing
    busiest, entries, distinct = {n: [] for n in counts}, [], []
    owners = sampled_nodes(nodes)
    for at in samples:
        asked = {owner: ([], [], []) for owner in owners}  # each node's keys, their SGD counts, how many
        for q in range(nodes):  # a node's StepPlan at a time: a thousand nodes' plans at once outgrow a host
            step = node_step(corpus, cfg, nodes, threads, 0, q, at, groups)
            ends = np.cumsum(step.owned)
            for owner in owners:
                part = slice(ends[owner] - step.owned[owner], ends[owner])
                for got, value in zip(asked[owner], (step.keys[part], step.sgd[part], part.stop - part.start)):
                    got.append(value)
        seconds = {n: [] for n in counts}
        for owner in owners:
            keys, sgd, sizes = asked[owner]
            keys, sgd = place[np.concatenate(keys)], np.concatenate(sgd)
            for n, t in _owner_seconds(model, keys, sizes, sgd, {n: merge_rule(cfg, n) for n in counts},
                                       carrier).items():
                seconds[n].append(t)
            entries.append(len(keys))
            distinct.append(len(np.unique(keys)))
        for n in counts:
            busiest[n].append(max(seconds[n]))
    seconds = {n: float(np.mean(busiest[n])) for n in counts}
    projected, how = _on_node_how(seconds, threads)
    merged = (f"clipped to {cfg.clip:g}" if cfg.clip else "the sum") + f", as {carrier}"
    return projected, (f"an owner's rows' gather and add on {counted(nodes, 'node')} ({merged}; "
                       f"{np.mean(entries):,.0f} rows, {np.mean(distinct):,.0f} distinct, from "
                       f"{counted(nodes, 'source')}) {how}")


def measure_exact(corpus, cfg):
    """The exact step's compute as its projection takes it: its maths (plan.measure_compute, on the epoch's
    middle step, the least of its calls) and its rows' work around it (:func:`measure_exact_other`)."""
    middle = math.ceil(len(corpus.stream) / cfg.batch_words) // 2
    return plan.measure_compute(corpus, cfg, middle, statistic=np.min), measure_exact_other(corpus, cfg)


def measure_exact_other(corpus, cfg):
    """The exact step's rows' gather and add, as :func:`measure_owner` counts them, of one rank's share of a
    step on one rank (every row from one source, an upper bound where ranks share rows): a line (plan.Compute)
    through their seconds at 32 positions and at ``cfg.batch_words``. Its examples and table are left out:
    built while the exchange waits, as the super-step's, they would count only past it, which
    plan.summarise's serial model cannot say."""
    lo, (model, _), voc, seconds = len(corpus.stream) // 2, _model(corpus.vocab.size, cfg.dim), corpus.vocab, {}
    for p in (32, cfg.batch_words):
        batch = batches.build(corpus.stream, voc, cfg, 0, lo, min(len(corpus.stream), lo + p))
        step = StepPlan.of(batch, RowPlan(voc.size, 1), 0, cfg.sg, 1)
        seconds[p] = _owner_seconds(model, step.keys, [len(step.keys)], step.sgd, {1: CappedAdd(cfg.update_cap)})[1]
    per_position = max(0.0, (seconds[cfg.batch_words] - seconds[32]) / (cfg.batch_words - 32))
    per_step = max(0.0, seconds[32] - 32 * per_position)
    return plan.Compute(per_step, per_position, f"its rows' gather and add for 32 and {cfg.batch_words:,} "
                                                f"positions {seconds[32] * 1e3:,.2f} and "
                                                f"{seconds[cfg.batch_words] * 1e3:,.2f} ms on one thread here")


ALONE_SUPERSTEP = 4096  # one thread alone's sequential SGD, timed over super-steps of this many positions


def measure_alone(corpus, cfg, network, exact_compute=None, exact_around=None, exact_steps=0):
    """Words per second of one thread alone on its best setting, and how it was measured: the faster of (a)
    word2vec's sequential SGD on one shard (V = 1) in super-steps of ALONE_SUPERSTEP positions, its SGD, its
    examples and table and its rows' gather and add all on the one thread, and (b) the exact step on one rank
    of one thread (plan.py's projection), when ``exact_compute`` is given. The reference the per-core
    efficiency is taken against: one core doing all the work alone, with nothing to exchange."""
    c = replace(cfg, superstep=ALONE_SUPERSTEP, shards=1, wire="float32", merge_clip=cfg.clip)
    per_position = measure_thread(corpus, c)[0]
    lo = len(corpus.stream) // 2
    prepare = _examples_seconds(corpus, c, [(lo, min(len(corpus.stream), lo + c.superstep))], [1])[1]
    rows = measure_owner(corpus, c, 1, 1, range(1), 1)[0]
    sgd = project(corpus, c, 1, 1, 0, network, per_position, [], (prepare, rows))["words"]
    found = [(sgd, f"sequential SGD on one shard, S = {c.superstep:,}")]
    if exact_compute is not None:
        found.append((exact_row(corpus, cfg, 1, 1, network, exact_compute, exact_steps, exact_around),
                      f"the exact step, {cfg.batch_words:,} positions a step"))
    words, how = max(found)
    return words, f"one thread alone: {words:,.0f} words/s ({how}; " + ", ".join(
        f"{w:,.0f} by {h.split(',')[0]}" for w, h in found) + ")"


def memory_bytes(step, dim, parts=1):
    """Bytes a node moves to and from memory in a super-step of ``step`` (its StepPlan): each shard copies the
    rows it touches into its private copy and writes their deltas out (2 x 4 dim B a row a shard: ``step.sgd``
    counts the shards touching each row), and the owner reads the rows it serves and reads and writes those it
    adds into (3 x 4 dim B a row, every node serving as many rows as it asks for). With the hot rows merged
    ``parts`` times a super-step (hotsync), each merge reads every shard's hot rows and writes them back (2 x 4
    dim B a hot row a shard, a merge past the super-step's own). A shard's SGD itself runs on its private
    copy, which a super-step's rows keep in the core's caches."""
    hot = float(step.sgd[step.cold:].sum()) if parts > 1 else 0.0
    return 4 * dim * (2 * float(step.sgd.sum()) + 3 * len(step.keys) + 2 * (parts - 1) * hot)


def project(corpus, cfg, nodes, threads, hot, network, per_position, samples, other=(0.0, 0.0),
            memory_bandwidth=math.inf, groups=1):
    """One row of ``nodes`` nodes: bytes per word, compute (the shards' SGD, ``per_position`` a position on
    each thread, and the rows' gather and add, ``other[1]``), gather, scatter and allreduce seconds (the hot
    block's, once a super-step or, with ``cfg.substep``, every substep positions: hotsync), the hot block's
    bytes a node sends into each allreduce, the node's memory traffic, the super-step's seconds, words/s. The
    next super-step's examples and table (``other[0]``: :func:`measure_prepare`) are built while the exchange
    waits (loop.Ahead.fill), so they add only what the exchange does not cover. The compute takes at least
    the node's memory traffic (:func:`memory_bytes`) at ``memory_bandwidth`` (bytes/s): the T threads of a
    node share its memory, where this host's one thread was timed alone. ``groups``: the noise groups
    (:func:`node_step`)."""
    words_per_position = corpus.vocab.raw_words / len(corpus.stream)
    prepare, rows_work = other
    n_hot = min(hot, corpus.vocab.size)
    placed = [(at, node) for at in (samples or [0]) for node in sampled_nodes(nodes)]
    steps = [node_step(corpus, cfg, nodes, threads, n_hot, node, at, groups) for at, node in placed]
    parts = hotsync.parts(cfg) if cfg.substep and n_hot else 1  # the hot rows' merges a super-step
    moved = float(np.mean([memory_bytes(step, cfg.dim, parts) for step in steps]))
    compute = max(cfg.superstep * per_position + rows_work, moved / memory_bandwidth)
    block = 2 * n_hot * (cfg.dim + 1) * 4  # the hot rows' deltas and shard counts (exchange.HotRows.apply)
    figures = dict(bytes_per_word=0.0, compute=compute, gather=0.0, scatter=0.0, reduce=0.0, block=block)
    if nodes == 1:
        step = compute + prepare
        return dict(figures, step=step, words=threads * cfg.superstep * words_per_position / step,
                    memory=moved / step)
    traffic = []
    for step, (_, node) in zip(steps, placed):
        owned = step.owned
        remote = np.array([owned.sum() - owned[node]])
        peers = np.array([np.count_nonzero(owned) - (owned[node] > 0)])
        row = wire.of(cfg.wire).dtype.itemsize * cfg.dim * remote  # a row's bytes, or its delta's
        traffic.append(plan.Traffic(plan.KEY_BYTES * remote, row, row, remote, remote, peers, peers))
    gather = float(np.mean([network.gather(t, nodes) for t in traffic]))
    scatter = float(np.mean([network.scatter(t) for t in traffic]))
    reduce = parts * network.allreduce(block, nodes)  # Horovod's ring, once a merge
    sent = float(np.mean([t.sent[0] for t in traffic]))
    step = compute + max(gather + scatter, prepare) + reduce
    positions = nodes * threads * cfg.superstep
    return dict(figures, bytes_per_word=(sent * nodes) / (positions * words_per_position), gather=gather,
                scatter=scatter, reduce=reduce, step=step, words=positions * words_per_position / step,
                memory=moved / step)


def exact_row(corpus, cfg, nodes, threads, network, compute, steps, around):
    """:func:`exact_plan`'s words/s (nan where there are more nodes than words)."""
    if nodes > corpus.vocab.size:
        return float("nan")
    return exact_plan(corpus, cfg, nodes, threads, network, compute, steps, around).words_per_second


def exact_plan(corpus, cfg, nodes, threads, network, compute, steps, around):
    """plan.py's projection of the exact step on ``nodes`` ranks of ``threads`` threads, its maths ``compute``
    T times faster and its rows' work ``around`` it (:func:`measure_exact_other`) on one thread, over ``steps``
    steps sampled in the epoch: plan.Row (``words_per_second``; ``bytes_per_word``, all ranks')."""
    epoch_steps = math.ceil(len(corpus.stream) / cfg.batch_words)
    planned = plan.sampled_steps(epoch_steps, steps, 1)
    faster = plan.Compute(compute.per_step + around.per_step, compute.per_position / threads + around.per_position,
                          compute.how)
    got = [(plan.Traffic.of(step, cfg.dim), int(step.positions.max()))
           for _, by_hot in plan.plan_steps(corpus, cfg, nodes, [cfg.hot_rows], planned) for step in by_hot.values()]
    return plan.summarise(cfg.batch_words, nodes, cfg.hot_rows, got, cfg, corpus, network, faster, epoch_steps,
                          False)


COLUMNS = ["Gb/s", "S", "P", "T", "V", "H", "K", "hot KiB", "B/word", "SGD ms", "prepare ms", "rows ms", "gather ms",
           "scatter ms", "allreduce ms", "mem GB/s", "words/s", "of 1 node", "per core", "of 1 thread",
           "exact words/s"]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.localplan", description=__doc__.splitlines()[0])
    p.add_argument("corpus", nargs="+", help="text files or folders, or a run folder (vocab.txt and ids/)")
    p.add_argument("--nodes", default="1,2,4,8,16,32,64,128,256,512,1024", help="node counts P (default: %(default)s)")
    p.add_argument("--threads", type=int, default=32, help="threads (shards) per node T (default: %(default)s)")
    p.add_argument("--superstep", default="auto",
                   help="positions per shard per super-step S, comma-separated; auto: train's default for the "
                        "row's V = P x T on an epoch of --epoch-positions, config.superstep_for (default: "
                        "%(default)s)")
    p.add_argument("--epoch-positions", type=int, default=None, metavar="N",
                   help="with --superstep auto: the positions of the corpus the rows project, the corpus's words "
                        "and frequencies those of the corpus given (default: the corpus's own)")
    p.add_argument("--hot-rows", default="0", help="hot-row counts H, comma-separated (default: %(default)s)")
    p.add_argument("--substep", default="auto",
                   help="with hot rows: positions of each shard between their merges K, comma-separated (train's "
                        "--substep; auto: once a super-step; default: %(default)s)")
    p.add_argument("--bandwidth", default="25,100",
                   help="Gb/s per node's link, its line rate, comma-separated (default: %(default)s)")
    p.add_argument("--latency", type=float, default=2.0, help="microseconds per message (default: %(default)s)")
    p.add_argument("--samples", type=int, default=2, help="super-steps sampled per row (default: %(default)s)")
    p.add_argument("--exact-steps", type=int, default=5,
                   help="steps the exact step's projection samples, 0: leave it out (default: %(default)s)")
    p.add_argument("--node-threads", type=int, default=None,
                   help="threads the node's work around the SGD is timed on here, beside 1, to project it to "
                        "--threads (default: this host's cores, at most --threads; 1: no projection, an upper "
                        "bound)")
    p.add_argument("--wire", choices=WIRES, default="float32",
                   help="the form rows and deltas travel in between nodes (train's --wire; default: %(default)s)")
    p.add_argument("--node-memory-bandwidth", type=float, default=150.0, metavar="GB/S",
                   help="a node's memory bandwidth, GB/s: its compute takes at least its memory traffic at this "
                        "rate (default: %(default)s)")
    p.add_argument("--noise-groups", choices=("1", "nodes"), default="1",
                   help="train's --noise-groups: 1, every word a shard's noise word, or nodes, a group a node (G "
                        "= P, local negatives: past train's default --noise-head, no noise word travels) (default: "
                        "%(default)s)")
    p.add_argument("--cbow", action="store_true", help="CBOW instead of skip-gram")
    args = p.parse_args(argv)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        nodes, hot = plan._ints(args.nodes, "--nodes"), plan._ints(args.hot_rows, "--hot-rows", low=0)
        supersteps = [s if s == "auto" else plan._ints(s, "--superstep")[0] for s in args.superstep.split(",")]
        substeps = [None if k == "auto" else plan._ints(k, "--substep")[0] for k in args.substep.split(",")]
        bandwidths = [float(b) for b in args.bandwidth.split(",")]
        if args.node_threads is None:
            args.node_threads = min(args.threads, len(os.sched_getaffinity(0)))
        if args.threads < 1 or not 1 <= args.node_threads <= args.threads or min(bandwidths) <= 0 \
                or args.node_memory_bandwidth <= 0:
            raise UserError("--threads must be at least 1, --node-threads from 1 to --threads, and --bandwidth and "
                            "--node-memory-bandwidth more than 0")
        memory = args.node_memory_bandwidth * 1e9
        cfg = Config(sg=not args.cbow)
        corpus = plan.open_corpus(args.corpus, cfg, say)
        epoch = args.epoch_positions or len(corpus.stream)
        if epoch < 1:
            raise UserError(f"--epoch-positions must be at least 1, got {epoch}")
    except UserError as e:
        print(f"hvd-w2v localplan: error: {e}", file=sys.stderr)
        return 2
    try:
        exact_compute, exact_around = measure_exact(corpus, cfg) if args.exact_steps else (None, None)
        alone, alone_how = measure_alone(corpus, cfg, plan.Network.line(max(bandwidths) * 1e9, args.latency * 1e-6),
                                         exact_compute, exact_around, args.exact_steps)
        say(f"localplan: {alone_how}")
        rows, measured, exacts = [], {}, {}  # compute per S; the exact step's words/s per (Gb/s, P), S-free
        for spec in supersteps:
            for gbps in bandwidths:
                network = plan.Network.line(gbps * 1e9, args.latency * 1e-6)
                for n in nodes:
                    s = superstep_for(n * args.threads, epoch) if spec == "auto" else spec
                    c = replace(cfg, superstep=s, shards=1, merge_clip=cfg.clip, wire=args.wire)  # train's merge
                    if s not in measured:  # the SGD and the examples: the same on any P and merge
                        measured[s] = (measure_thread(corpus, c),
                                       measure_prepare(corpus, c, args.threads, args.node_threads))
                        say(f"localplan: S {s:,}: {measured[s][0][1]}; {measured[s][1][1]}")
                    groups = n if args.noise_groups == "nodes" else 1
                    for p, g in {(1, 1), (n, groups)}:
                        if (s, p, g, c.merge_clip) not in measured:
                            measured[s, p, g, c.merge_clip] = measure_owner(
                                corpus, c, p, args.threads, range(args.samples), args.node_threads, g)
                            say(f"localplan: S {s:,}: {measured[s, p, g, c.merge_clip][1]}")
                    per_position, prepare = measured[s][0][0], measured[s][1][0]
                    other = prepare, measured[s, n, groups, c.merge_clip][0]
                    one = project(corpus, c, 1, args.threads, 0, network, per_position, [],
                                  (prepare, measured[s, 1, 1, c.merge_clip][0]), memory)["words"]
                    if (gbps, n) not in exacts:
                        exacts[gbps, n] = exact_row(corpus, cfg, n, args.threads, network, exact_compute,
                                                    args.exact_steps, exact_around) if exact_compute else float("nan")
                    exact = exacts[gbps, n]
                    for h, k in [(h, k) for h in hot for k in (substeps if h else [None])]:
                        t0 = time.monotonic()
                        k = k if k and k < s else None
                        r = project(corpus, replace(c, substep=k), n, args.threads, h, network, per_position,
                                    range(args.samples), other, memory, groups)
                        rows.append([f"{gbps:g}", f"{s:,}", f"{n:,}", f"{args.threads}", f"{n * args.threads:,}",
                                     f"{h:,}", f"{k or s:,}", f"{r['block'] / 1024:,.0f}",
                                     f"{r['bytes_per_word']:,.1f}",
                                     f"{(r['compute'] - other[1]) * 1e3:,.2f}", f"{other[0] * 1e3:,.2f}",
                                     f"{other[1] * 1e3:,.2f}",
                                     f"{r['gather'] * 1e3:,.2f}", f"{r['scatter'] * 1e3:,.2f}",
                                     f"{r['reduce'] * 1e3:,.2f}", f"{r['memory'] / 1e9:,.2f}", f"{r['words']:,.0f}",
                                     f"{r['words'] / (n * one):.0%}", f"{r['words'] / (n * args.threads):,.0f}",
                                     f"{r['words'] / (n * args.threads) / alone:.1%}", f"{exact:,.0f}"])
                        say(f"localplan: {gbps:g} Gb/s, S {s:,}, P {n:,}, H {h:,} in {time.monotonic() - t0:.1f} s")
        voc = corpus.vocab
        print(f"corpus: {corpus.about}: {voc.size:,} words, {len(corpus.stream):,} positions, {voc.raw_words:,} "
              f"raw words{'' if epoch == len(corpus.stream) else f', S auto for an epoch of {epoch:,} positions'}; "
              f"{'skip-gram' if cfg.sg else 'CBOW'}, dim {cfg.dim}, window {cfg.window}, negative "
              f"{cfg.negative}; latency {args.latency:g} us; {args.samples} super-steps x {SAMPLED_NODES} nodes "
              f"sampled a row; compute per thread measured here ({cfg.sg and 'skip-gram' or 'CBOW'}), the node's "
              f"work around it timed on 1 and {counted(args.node_threads, 'thread')}, projected to {args.threads}; "
              f"rows and deltas between nodes as {args.wire}"
              f"{'; noise words from a group a node (--noise-groups P)' if args.noise_groups == 'nodes' else ''}"
              f"; exact: "
              f"{cfg.batch_words:,} positions a step, its maths T times faster"
              + (f", {exact_compute.how}; {exact_around.how}" if exact_compute else ", left out")
              + f"; {alone_how}; a node's memory {args.node_memory_bandwidth:g} GB/s (mem GB/s: the traffic the row's "
              f"rate needs, the compute capped there)")
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(COLUMNS)]
        print("  ".join(h.rjust(w) for h, w in zip(COLUMNS, widths)))
        for r in rows:
            print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
    finally:
        if corpus.folder is not None:
            corpus.folder.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
