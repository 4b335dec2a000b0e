"""Compiled code: built once per machine with g++ from the package's C++ sources, cached, loaded on demand.

Six libraries, each optional, each loaded here through ctypes: the step's maths (sgns_kernel.cc, used by
sgns), the owners' row copies (rows_kernel.cc, used by exchange), the example builder (batches_kernel.cc,
used by batches), shard-local SGD's super-step (localsgd_kernel.cc, used by localsgd), the text passes
(text_kernel.cc, used by corpus, vocab and encode) and word2phrase's (phrases_kernel.cc, used by phrases).
Where one cannot be built or loaded, its user prints one warning and falls back to TensorFlow's graph, numpy
or Python, which compute the same values more slowly; ``HVD_W2V_KERNEL=python`` (or ``graph``) asks for the
fallbacks from the start.

A library's file name is a hash of its source, its compiler flags and this CPU's features
(``-march=native``), so a changed source or another machine sharing the cache folder builds its own. Ranks
that start together build it once: the first takes a lock on the cache folder, the others wait for it and
use its result. Where the lock does not reach across hosts (NFS without a lock manager), hosts may build at
once: each builds into a temporary file of its own (created exclusively, so no two hosts share one, even
where their processes have the same PID) and renames it into place, so the library found is always one
whole build.
"""
import ctypes
import fcntl
import hashlib
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]  # OpenMP: the rank's threads


def cache_folder():
    """Where built libraries are kept: $HVD_W2V_CACHE, else ~/.cache/hvd-w2v."""
    return os.environ.get("HVD_W2V_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hvd-w2v")


def wanted():
    """False when $HVD_W2V_KERNEL asks for the Python fallbacks ("python", or "graph" as before)."""
    return os.environ.get("HVD_W2V_KERNEL", "native") not in ("python", "graph")


def build(name, extra_flags=(), text=None):
    """The path of ``name``.cc (a source beside this module) built into a shared library, building it if the
    cache has none. ``extra_flags`` go after the source. ``text`` (bytes), when given, is built in its place
    (hvd_w2v.bench.kernels: another commit's source). Raises OSError when g++ is missing or fails."""
    source = os.path.join(HERE, f"{name}.cc")
    if text is None:
        with open(source, "rb") as f:
            text = f.read()
    else:
        source = "-"  # g++ reads it from its standard input
    cpu = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
    key = hashlib.sha256(b"\0".join([text, cpu.encode(),
                                     " ".join([*FLAGS, *extra_flags]).encode()])).hexdigest()[:16]
    folder = cache_folder()
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, f"{name}-{key}.so")
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(target):
            fd, tmp = tempfile.mkstemp(prefix=f"{name}-{key}.", suffix=".tmp", dir=folder)
            os.close(fd)
            try:
                done = subprocess.run(["g++", *FLAGS, "-x", "c++", source, "-o", tmp, *extra_flags], input=text,
                                      capture_output=True)
                if done.returncode:
                    why = done.stderr.decode("utf-8", "replace").strip()[-1000:]
                    raise OSError(f"g++ failed on {name}.cc: {why}")
                os.chmod(tmp, 0o755)  # mkstemp's 0600 would keep other users of a shared cache out
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
    return target


def warn(what, error, fallback):
    print(f"hvd-w2v: warning: {what} is not available ({error}); using {fallback}, which is slower",
          file=sys.stderr, flush=True)


_LIBS = {}  # name: the loaded ctypes library, or the reason it is not available (a str)


def _library(name, functions, what, restype=None, extra_flags=(), fallback="numpy"):
    """The ctypes library of ``name``.cc, built on first use, with ``functions`` ({name: argtypes}, each
    returning ``restype``, or {name: (argtypes, its restype)}) declared; None where it cannot be built (one
    warning naming the ``fallback``) or $HVD_W2V_KERNEL asks for the fallbacks."""
    if name not in _LIBS:
        if not wanted():
            _LIBS[name] = f"HVD_W2V_KERNEL={os.environ['HVD_W2V_KERNEL']}"
            return None
        try:
            _LIBS[name] = declared(build(name, extra_flags), functions, restype)
        except (OSError, AttributeError, StopIteration) as e:
            _LIBS[name] = str(e)
            warn(what, e, fallback)
    lib = _LIBS[name]
    return None if isinstance(lib, str) else lib


def declared(path, functions, restype=None):
    """The shared library at ``path``, loaded with ``functions`` declared as _library says."""
    lib = ctypes.CDLL(path)
    for function, spec in functions.items():  # spec: argtypes, or (argtypes, its own restype)
        getattr(lib, function).argtypes, getattr(lib, function).restype = (
            spec if isinstance(spec, tuple) else (spec, restype))
    return lib


def unavailable(name):
    """Why the library of ``name``.cc is not in use ("" when it is loaded, or not yet asked for)."""
    why = _LIBS.get(name)
    return why if isinstance(why, str) else ""


P, I64, U64, F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
ALIGN = 64  # bytes: TensorFlow aborts the process on a tensor whose buffer is not aligned to Eigen's maximum


def _pointers(arrays):
    """The arrays' data pointers as a C array (ctypes: cheaper to make, a call at a time, than numpy's)."""
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def _int64s(values):
    """``values`` as a C array of int64."""
    return (ctypes.c_int64 * len(values))(*values)


def aligned_empty(shape, dtype):
    """An uninitialised C-contiguous array whose buffer starts on an ALIGN boundary, so that TensorFlow can
    read it without a copy (sgns._shared, the graph's)."""
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize  # math.prod, not np.prod: every step calls this
    raw = np.empty(size + ALIGN, np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip:skip + size].view(dtype).reshape(shape)


# -- the step's maths (sgns_kernel.cc) -----------------------------------------------------------------------

# Each library's functions and their argument types (module constants: the accessors run every step).
STEP_FUNCTIONS = {"hvd_w2v_sgns_step": [I64, P, I64, I64, I64, P, P, P, P, P, P, F32, I64, P, P]}


def step_kernel():
    """The library of sgns_kernel.cc, or None (TensorFlow's graph then; sgns.step_function)."""
    return _library("sgns_kernel", STEP_FUNCTIONS, "the compiled step", I64, fallback="the TensorFlow graph")


def arch(sg, cbow_mean=True):
    """The kernels' code of an architecture: 1 skip-gram, 0 CBOW of the context's mean (word2vec.c's), 2 CBOW
    of its sum (gensim's cbow_mean=0)."""
    return 1 if sg else 0 if cbow_mean else 2


def sgns_step(lib, sg, rows, ctxs, tgts, alpha, threads=1, cbow_mean=True, codes=None):
    """sgns.step_function's maths in one compiled call on ``threads`` threads: ``rows`` float32[T, d], the
    groups' int32 blocks ``ctxs`` [n_g, w_g] and ``tgts`` [n_g, 1 + K] (C-contiguous, indices in [0, T)), and
    for hierarchical softmax ``codes``, int8 blocks of tgts' shapes (the targets' Huffman codes). Returns
    (updates float32[T - 1, d], loss, count)."""
    if not (rows.dtype == np.float32 and rows.ndim == 2 and len(rows) >= 1 and rows.flags.c_contiguous
            and len(ctxs) == len(tgts) >= 1
            and all(c.dtype == t.dtype == np.int32 and c.ndim == t.ndim == 2 and len(c) == len(t)
                    and c.flags.c_contiguous and t.flags.c_contiguous for c, t in zip(ctxs, tgts))
            and (codes is None or len(codes) == len(tgts) and all(
                c.dtype == np.int8 and c.shape == t.shape and c.flags.c_contiguous for c, t in zip(codes, tgts)))):
        raise ValueError("the step takes float32 rows [T >= 1, d] and int32 C-contiguous ctx [n, w] and tgt "
                         "[n, 1 + K] blocks that agree on n (and int8 codes of tgt's shape)")
    updates = np.empty((len(rows) - 1, rows.shape[1]), np.float32)
    sums = (ctypes.c_double * 2)()
    if lib.hvd_w2v_sgns_step(arch(sg, cbow_mean), rows.ctypes.data, len(rows), rows.shape[1], len(ctxs),
                             _pointers(ctxs), _pointers(tgts), None if codes is None else _pointers(codes),
                             _int64s([len(c) for c in ctxs]), _int64s([c.shape[1] for c in ctxs]),
                             _int64s([t.shape[1] for t in tgts]), alpha, threads, updates.ctypes.data, sums):
        raise IndexError(f"the step's context or target rows must lie in [0, {len(rows)})")
    return updates, sums[0], sums[1]


# -- the owners' row copies (rows_kernel.cc) -----------------------------------------------------------------

ROW_FUNCTIONS = {"hvd_w2v_take_rows": [P, I64, P, P, I64, I64, I64],
                 "hvd_w2v_add_rows": [P, I64] + [P] * 3 + [I64] * 3,
                 "hvd_w2v_add_sources": [P, I64] + [P] * 3 + [I64, P, F32, P, I64, I64],
                 "hvd_w2v_merge_sources": [P, I64] + [P] * 3 + [I64, P, F32, F32, I64, I64],
                 "hvd_w2v_add_sources_bf16": [P, I64] + [P] * 3 + [I64, P, F32, P, I64, I64],
                 "hvd_w2v_merge_sources_bf16": [P, I64] + [P] * 3 + [I64, P, F32, F32, I64, I64],
                 "hvd_w2v_take_rows_bf16": [P, I64, P, P, I64, I64, I64],
                 "hvd_w2v_to_bf16": ([P, P, I64, I64], None),
                 "hvd_w2v_from_bf16": ([P, P, I64, I64], None),
                 "hvd_w2v_round_bf16": ([P, I64, I64], None)}


def row_copies():
    """The library of rows_kernel.cc, or None (numpy then)."""
    return _library("rows_kernel", ROW_FUNCTIONS, "the compiled row copies", I64)


def _checked(table, rows, block, kinds=(np.float32,)):
    """The arguments of a take/add call before its own (table, table rows, rows, block), after the checks
    that keep the C loop inside its arrays (the loop checks the rows' range itself); ``block`` of one of
    ``kinds``."""
    if not (table.dtype == np.float32 and block.dtype in kinds and rows.dtype == np.int64 and table.ndim == 2
            and block.shape == (len(rows), table.shape[1])
            and table.flags.c_contiguous and block.flags.c_contiguous and rows.flags.c_contiguous):
        raise ValueError("row copies take float32 C-contiguous [n, d] blocks (uint16 bfloat16 into take_rows) and "
                         "int64 rows")
    return table.ctypes.data, len(table), rows.ctypes.data, block.ctypes.data


def _out_of_range(table):
    return IndexError(f"row index out of range [0, {len(table)})")


def take_rows(table, rows, out, threads=1):
    """``out[:] = table[rows]``: float32 tables, int64 ``rows``; ``out`` float32, or uint16 for the rows'
    bfloat16 bits (wire.BFloat16); compiled (on ``threads`` threads) when available, else numpy (one thread)."""
    lib = row_copies()
    if lib is None and out.dtype == np.uint16:

        out[:] = to_bf16(table[rows])
    elif lib is None:
        np.take(table, rows, axis=0, out=out)
    else:
        take = lib.hvd_w2v_take_rows_bf16 if out.dtype == np.uint16 else lib.hvd_w2v_take_rows
        if take(*_checked(table, rows, out, (np.float32, np.uint16)), len(rows), table.shape[1], threads):
            raise _out_of_range(table)


def add_rows(table, rows, updates, scale=None, threads=1):
    """``table[rows] += scale[:, None] * updates`` (``rows`` unique; ``scale`` float32[n] or None for 1);
    compiled (on ``threads`` threads) when available, else numpy."""
    lib = row_copies()
    if lib is None:
        table[rows] += updates if scale is None else scale[:, None] * updates
        return
    pointers = _checked(table, rows, updates)
    if scale is not None:
        scale = np.ascontiguousarray(scale, np.float32)
        if scale.shape != (len(rows),):
            raise ValueError(f"scale must be float32[{len(rows)}], got {scale.shape}")
    if lib.hvd_w2v_add_rows(*pointers, None if scale is None else scale.ctypes.data, len(rows), table.shape[1],
                            threads):
        raise _out_of_range(table)


def cap_scale(cap, counts):
    """min(1, cap / max(m, 1)) for each SGD-update count m (float32), as hvd_w2v_add_sources computes it."""
    return np.minimum(1, cap / np.maximum(counts, 1)).astype(np.float32)


def add_sources(table, rows, blocks, sgd, cap, total, threads=1):
    """An owner's scatter in one pass. ``blocks`` (:class:`Blocks`, or a list of float32[n_s, d]; or of
    bfloat16 bits, uint16, as wire.BFloat16 sends them) holds source s's updates of the table rows listed in
    ``rows`` (int64, all sources' in order; unique within a source, not
    across sources), each one summing ``sgd`` (float32, per row of ``rows``) SGD updates. Each row's updates
    are scaled by min(1, cap / max(m, 1)), m its SGD updates summed over all sources, and added source by
    source. ``total`` (float32[len(table)], zeros) is scratch, left zeros. Compiled (on ``threads`` threads,
    the same bytes on any count) when available, else numpy."""
    blocks = Blocks.of(blocks)
    d = table.shape[1]
    _check_sources(table, rows, blocks, sgd)
    if not (total.dtype == np.float32 and total.shape == (len(table),)):
        raise ValueError(f"add_sources' scratch must be float32[{len(table)}]")
    lib = row_copies()
    if lib is None:
        counts, blocks = blocks.counts, blocks.arrays()
        ends = np.cumsum(counts)
        for lo, hi in zip(ends - counts, ends):
            total[rows[lo:hi]] += sgd[lo:hi]
        scale = cap_scale(cap, total[rows])
        for block, lo, hi in zip(blocks, ends - counts, ends):
            table[rows[lo:hi]] += scale[lo:hi, None] * block
        total[rows] = 0
        return
    pointers = blocks.pointers()
    add = lib.hvd_w2v_add_sources_bf16 if blocks.bfloat16 else lib.hvd_w2v_add_sources
    if add(table.ctypes.data, len(table), rows.ctypes.data, pointers.ctypes.data,
                               blocks.counts.ctypes.data, len(blocks.counts), sgd.ctypes.data, cap, total.ctypes.data,
                               d, threads):
        raise _out_of_range(table)


def merge_sources(table, rows, blocks, sgd, cap, clip, threads=1):
    """localsgd.ClippedMerge's scatter in one pass: ``rows``, ``blocks`` and ``sgd`` as add_sources's. Each
    row's updates are summed over the sources in source order, the sum scaled by min(1, cap / max(m, 1)) (m its
    summed ``sgd``), then scaled down to an L2 norm of at most ``clip``, and added once. Compiled (on
    ``threads`` threads, the same bytes on any count) when available, else numpy."""
    blocks = Blocks.of(blocks)
    d = table.shape[1]
    _check_sources(table, rows, blocks, sgd)
    lib = row_copies()
    if lib is None:
        blocks = blocks.arrays()
        unique, inverse = np.unique(rows, return_inverse=True)
        merged = np.zeros((len(unique), d), np.float32)
        counts = np.zeros(len(unique), np.float32)
        lo = 0
        for block in blocks:  # a source's rows are unique: each block adds with one fancy index
            at = inverse[lo:lo + len(block)]
            merged[at] += block
            counts[at] += sgd[lo:lo + len(block)]
            lo += len(block)
        scale = cap_scale(cap, counts)
        norms = np.sqrt(np.einsum("ij,ij->i", merged, merged, dtype=np.float32)) * scale
        over = norms > clip
        scale[over] *= np.float32(clip) / norms[over]
        table[unique] += scale[:, None] * merged
        return
    pointers = blocks.pointers()
    merge = lib.hvd_w2v_merge_sources_bf16 if blocks.bfloat16 else lib.hvd_w2v_merge_sources
    if merge(table.ctypes.data, len(table), rows.ctypes.data, pointers.ctypes.data, blocks.counts.ctypes.data,
             len(blocks.counts), sgd.ctypes.data, cap, clip, d, threads):
        raise _out_of_range(table)


def _check_sources(table, rows, blocks, sgd):
    """ValueError unless ``blocks`` (Blocks) hold float32 (or bfloat16) C-contiguous rows of ``table``'s width,
    listed in ``rows`` (int64) with their ``sgd`` counts (float32): what add_sources and merge_sources read."""
    d = table.shape[1]
    if not (table.dtype == sgd.dtype == np.float32 and rows.dtype == np.int64 and table.ndim == 2
            and table.flags.c_contiguous and rows.flags.c_contiguous and sgd.flags.c_contiguous
            and len(rows) == len(sgd) == blocks.counts.sum() and blocks.fits(d)):
        raise ValueError("the owners' adds take float32 (or uint16 bfloat16) C-contiguous [n_s, d] blocks, their "
                         "int64 rows and sgd counts")


class Blocks:
    """The sources' blocks of an owner's scatter: ``counts[s]`` rows from source ``s``, laid end to end in
    ``buffer`` (float32[n, d], or bfloat16 bits: uint16[n, d], as the exchange receives them), but for source
    ``own``'s, the array ``mine`` of the same type (its place in ``buffer`` unused: a rank's own block is not
    moved, exchange.Exchange.scatter).

    Why not a list of arrays: a view and a ctypes pointer per source is Python work per source and per
    super-step, which grows with the rank count; here the pointers are one numpy sum."""

    def __init__(self, buffer, counts, own=-1, mine=None):
        self.buffer, self.counts, self.own, self.mine = buffer, np.ascontiguousarray(counts, np.int64), own, mine

    @classmethod
    def of(cls, blocks):
        """``blocks`` as Blocks: itself, or a list of one array or more, each a source's (copied into one
        buffer)."""
        if isinstance(blocks, cls):
            return blocks
        return cls(blocks[0] if len(blocks) == 1 else np.concatenate(blocks), [len(b) for b in blocks])

    @property
    def bfloat16(self):
        return self.buffer.dtype == np.uint16

    def arrays(self):
        """Each source's block as float32 (the numpy fallbacks')."""

        ends = np.cumsum(self.counts)
        blocks = [self.mine if s == self.own else self.buffer[lo:hi]
                  for s, (lo, hi) in enumerate(zip(ends - self.counts, ends))]
        return [from_bf16(b) for b in blocks] if self.bfloat16 else blocks

    def pointers(self):
        """int64[S]: each block's address (the kernels')."""
        row = self.buffer.itemsize * self.buffer.shape[1]
        at = self.buffer.ctypes.data + (np.cumsum(self.counts) - self.counts) * row
        if self.own >= 0:
            at[self.own] = self.mine.ctypes.data
        return at

    def fits(self, d):
        """Whether the blocks are float32 (or all uint16) C-contiguous rows of ``d`` columns, as many as
        counted."""
        kind = self.buffer.dtype if self.buffer.dtype in (np.float32, np.uint16) else np.float32

        def fit(a, n):
            return a.dtype == kind and a.ndim == 2 and a.shape[1] == d and a.flags.c_contiguous and len(a) >= n
        return fit(self.buffer, self.counts.sum()) and (self.own < 0 or fit(self.mine, self.counts[self.own]))


# -- the example builder (batches_kernel.cc) -----------------------------------------------------------------

BUILDER_FUNCTIONS = {"hvd_w2v_build": [P, I64, I64, I64, I64, U64, U64, U64, I64, I64, I64, I64, P, P, P, I64, P,
                                       P, P, I64, P, P, P, P, P, P, I64],
                     "hvd_w2v_build_ranges": [P, P, P, P, P, I64, U64, U64, U64, I64, I64, I64, I64, P, P, P, I64,
                                              P, P, P, I64, P, P, P, P, P, P, P, P, P, P, P, P, I64],
                     "hvd_w2v_step_plan": [P, P, P] + [I64] * 8 + [P] * 6 + [I64, I64]}
BUILDER_FLAGS = ["-ffp-contract=off"]  # no fused multiply-adds: they round otherwise than numpy's float operations


def example_builder():
    """The library of batches_kernel.cc, or None (numpy then). Built without fused multiply-adds, so that its
    float operations round as numpy's do."""
    return _library("batches_kernel", BUILDER_FUNCTIONS, "the compiled example builder", I64, BUILDER_FLAGS)


def _runs_arrays(runs, window, negative):
    """A vocab.CountRuns's arrays as the builder takes them (starts, keep_by_run, keep_head, cum, weight, guide),
    checked; ValueError when they disagree."""
    arrays = [np.ascontiguousarray(a, t) for a, t in ((runs.starts, np.int64), (runs.keep_by_run, np.float32),
                                                      (runs.keep_head, np.float32), (runs.cum, np.float64),
                                                      (runs.weight, np.float64), (runs.guide, np.int64))]
    starts, keep, head, cum, weight, guide = arrays
    if not (len(starts) == len(cum) == len(keep) + 1 and len(weight) == len(keep) and len(guide) and window > 0
            and len(head) <= starts[-1] and negative >= 0):
        raise ValueError("the example builder: inconsistent vocabulary runs")
    return arrays


def _runs_args(arrays):
    """The builder's arguments from ``runs`` to ``guide_size`` (its signature's order)."""
    starts, keep, head, cum, weight, guide = arrays
    return (len(keep), starts.ctypes.data, keep.ctypes.data, head.ctypes.data, len(head), cum.ctypes.data,
            weight.ctypes.data, guide.ctypes.data, len(guide))


def build_examples(lib, ids, base, lo, hi, keys, window, span, negative, runs, threads=1):
    """batches.build's examples of centres in ``[lo, hi)`` from ``ids`` (int32, read from stream position
    ``base``), with ``keys`` the (keep, window, noise) rng keys and ``runs`` a vocab.CountRuns, built on
    ``threads`` threads (the same examples on any count); returns (centres int64[n], contexts int64[n, 2
    window], negatives int64[n, negative])."""
    ids = np.ascontiguousarray(ids, np.int32)
    arrays = _runs_arrays(runs, window, negative)
    if not (base <= lo <= hi and (len(ids) == 0 or ids.max() < arrays[0][-1])):
        raise ValueError("build_examples: inconsistent vocabulary runs or positions")
    most = max(hi - lo, 0)
    centres = np.empty(most, np.int64)
    contexts = np.empty((most, 2 * window), np.int64)
    negatives = np.empty((most, negative), np.int64)
    first, length, step = runs.noise_tables(((0, 1, 0),))[:3]  # every word's runs, made once
    n = lib.hvd_w2v_build(ids.ctypes.data, len(ids), base, lo, hi, *[int(k) for k in keys], window, span, negative,
                          *_runs_args(arrays), first.ctypes.data, length.ctypes.data, step.ctypes.data,
                          centres.ctypes.data, contexts.ctypes.data, negatives.ctypes.data, threads)
    return centres[:n], contexts[:n], negatives[:n]


class Scratch:
    """Arrays a caller reuses from call to call (:func:`build_ranges`' examples, :func:`step_plan`'s room for its
    keys): what a call returns in them lasts until the next call. Pages written once stay the process's: a
    super-step's examples are tens of MB, and fresh pages each time cost the kernel's faults, which several
    threads take in turn."""

    def __init__(self):
        self.arrays = {}

    def take(self, name, shape, dtype):
        """An array of ``shape`` in the buffer ``name``, grown (a quarter more than asked) when too small."""
        size = math.prod(shape)
        held = self.arrays.get(name)
        if held is None or held.dtype != dtype or len(held) < size:
            held = self.arrays[name] = np.empty(size + size // 4, dtype)
        return held[:size].reshape(shape)

    @staticmethod
    def of(scratch):
        """``scratch``'s take, or a fresh array's where None."""
        return scratch.take if scratch is not None else (lambda _, shape, dtype: np.empty(shape, dtype))


def build_ranges(lib, ids, bases, los, his, keys, window, span, negative, runs, threads=1, scratch=None,
                 noise=None):
    """build_examples over several ranges in one call, a range a thread: range r's ids ``ids[r]`` (int32,
    read from stream position ``bases[r]``), its centres ``[los[r], his[r])``, its noise words drawn from
    ``noise[r]`` (a (group, groups, head) key of ``runs.noise_group``; None: every word). Returns the examples of
    all, range after range (centres, contexts, negatives, as build_examples), and each range's count
    (int64[R]): the same examples as a call per range. With ``scratch`` (a :class:`Scratch`), the examples are
    written into its arrays, which the next call with it writes over."""
    arrays = _runs_arrays(runs, window, negative)
    named = [(0, 1, 0)] * len(ids) if noise is None else list(noise)
    index = {key: i for i, key in enumerate(dict.fromkeys(named))}  # each group once, as first used
    group_of = np.array([index[key] for key in named], np.int64)
    if len(named) != len(ids):
        raise ValueError("build_ranges: a noise group a range")
    *tables, runs_at = runs.noise_tables(tuple(index) or ((0, 1, 0),))
    bases, los, his = (np.ascontiguousarray(a, np.int64) for a in (bases, los, his))
    id_at = np.cumsum([0] + [len(i) for i in ids], dtype=np.int64)
    flat = np.ascontiguousarray(np.concatenate(ids) if len(ids) else np.zeros(0), np.int32)
    if not (len(ids) == len(bases) == len(los) == len(his) and (bases <= los).all() and (los <= his).all()
            and (len(flat) == 0 or flat.max() < arrays[0][-1])):
        raise ValueError("build_ranges: inconsistent vocabulary runs or positions")
    most = int(np.maximum(his - los, 0).sum())
    take = Scratch.of(scratch)
    centres = take("centres", (most,), np.int64)
    contexts = take("contexts", (most, 2 * window), np.int64)
    negatives = take("negatives", (most, negative), np.int64)
    counts = np.empty(len(ids), np.int64)
    n = lib.hvd_w2v_build_ranges(flat.ctypes.data, id_at.ctypes.data, bases.ctypes.data, los.ctypes.data,
                                 his.ctypes.data, len(ids), *[int(k) for k in keys], window, span, negative,
                                 *_runs_args(arrays), group_of.ctypes.data, runs_at.ctypes.data,
                                 *[t.ctypes.data for t in tables], centres.ctypes.data, contexts.ctypes.data,
                                 negatives.ctypes.data, counts.ctypes.data, threads)
    return centres[:n], contexts[:n], negatives[:n], counts


def step_plan(lib, centres, contexts, negatives, ranks, n_hot, sg, row_bucket, n_pad, threads=1, bounds=None,
              scratch=None):
    """loop.StepPlan.of's table for one block (the compiled step's), built on ``threads`` threads (the same
    table on any count). Returns keys int64[U] grouped by owner, hot last; owned int64[ranks + 1]; ctx
    int32[n_pad, width] and tgt int32[n_pad, 1 + negative], the examples' slots ("none" where empty); sgd
    float32[U]: each key's SGD updates, or with ``bounds`` (shard s's centres ``[bounds[s], bounds[s + 1])``,
    from 0 to all) the shards that touch it. The keys and counts are written into room for every occurrence,
    then copied out: that room from ``scratch`` (a :class:`Scratch`) where given."""
    centres, contexts, negatives = (np.ascontiguousarray(a, np.int64) for a in (centres, contexts, negatives))
    n, width = contexts.shape
    negative = negatives.shape[1]
    if not (len(centres) == n == len(negatives) and n_pad >= n and ranks >= 1 and row_bucket >= 1):
        raise ValueError("step_plan: inconsistent example arrays")
    # the kernel deals a sight's value, its SGD updates (at most the width) or its shard, in 24 bits
    if width >= 1 << 24:
        raise ValueError(f"step_plan: contexts of width {width}: at most {(1 << 24) - 1}")
    if bounds is not None:
        bounds = np.ascontiguousarray(bounds, np.int64)
        if not (2 <= len(bounds) <= 1 << 24 and bounds[0] == 0 and bounds[-1] == n and np.all(np.diff(bounds) >= 0)):
            raise ValueError(f"step_plan: shard bounds must rise from 0 to the {n} centres, fewer than 2^24 shards")
    occurrences = n * (width + 1 + negative)
    take = Scratch.of(scratch)
    keys = take("keys", (occurrences,), np.int64)
    sgd = take("sgd", (occurrences,), np.float32)
    owned = np.empty(ranks + 1, np.int64)
    ctx = np.empty((n_pad, width), np.int32)
    tgt = np.empty((n_pad, 1 + negative), np.int32)
    unique = lib.hvd_w2v_step_plan(centres.ctypes.data, contexts.ctypes.data, negatives.ctypes.data, n, width,
                                   negative, ranks, n_hot, int(sg), row_bucket, n_pad, keys.ctypes.data,
                                   owned.ctypes.data, ctx.ctypes.data, tgt.ctypes.data, sgd.ctypes.data,
                                   None if bounds is None else bounds.ctypes.data,
                                   0 if bounds is None else len(bounds) - 1, threads)
    return keys[:unique].copy(), owned, ctx, tgt, sgd[:unique].copy()


# -- shard-local SGD's super-step (localsgd_kernel.cc) -------------------------------------------------------

LOCAL_FUNCTIONS = {"hvd_w2v_local_sgd": [I64, P, I64, I64, P, I64, P, P, I64, I64, P, I64, P, F32, I64, P, P],
                   "hvd_w2v_local_sgd_open": [I64, P, I64, I64, P, I64, P, P, I64, I64, P, I64, P, I64, I64, I64,
                                              I64],
                   "hvd_w2v_local_sgd_substep": [I64, F32, P, P], "hvd_w2v_local_sgd_sync": [P, P, I64],
                   "hvd_w2v_local_sgd_close": [P, P]}


def local_sgd_kernel():
    """The library of localsgd_kernel.cc, or None (localsgd's numpy loop then: the same sums, far slower)."""
    return _library("localsgd_kernel", LOCAL_FUNCTIONS, "the compiled shard-local SGD", I64,
                    fallback="a numpy loop")


def _shard_blocks(rows_count, ctx, tgt, bounds, codes=None):
    """The checked (ctx, tgt, bounds) arguments of the local-SGD calls (and ``codes``, int8 of tgt's shape)."""
    bounds = np.ascontiguousarray(bounds, np.int64)
    if not (ctx.dtype == tgt.dtype == np.int32 and ctx.ndim == tgt.ndim == 2 and len(ctx) == len(tgt)
            and ctx.flags.c_contiguous and tgt.flags.c_contiguous and len(bounds) >= 2 and rows_count >= 1
            and (codes is None or codes.dtype == np.int8 and codes.shape == tgt.shape and codes.flags.c_contiguous)):
        raise ValueError("local SGD takes int32 C-contiguous ctx [n, w] and tgt [n, 1 + K] (and int8 codes of tgt's "
                         "shape) and shard bounds")
    return bounds


def _weights(weights, shards):
    """The shards' noise weights as the kernel reads them (float32[shards], or None: 1 each); ValueError when
    there are not as many as shards."""
    if weights is None:
        return None
    weights = np.ascontiguousarray(weights, np.float32)
    if weights.shape != (shards,):
        raise ValueError(f"local SGD takes a noise weight a shard: {shards}, got {weights.shape}")
    return weights


def local_sgd(lib, sg, rows, ctx, tgt, bounds, alpha, threads=1, cbow_mean=True, codes=None, weights=None):
    """localsgd's super-step in one compiled call on ``threads`` threads (the same bytes on any count):
    ``rows`` float32[T, d] (the snapshot, row T - 1 "no context word"), ``ctx`` int32[n, w] and ``tgt``
    int32[n, 1 + K], shard s's centres ``[bounds[s], bounds[s + 1])``; ``codes`` (hierarchical softmax) the
    targets' Huffman codes; ``weights`` each shard's noise weight (localsgd.noise_weights; None: 1 each).
    Returns (deltas float32[T - 1, d]: each row's deltas summed over the shards, loss, count)."""
    bounds = _shard_blocks(len(rows), ctx, tgt, bounds, codes)
    weights = _weights(weights, len(bounds) - 1)
    if not (rows.dtype == np.float32 and rows.ndim == 2 and rows.flags.c_contiguous):
        raise ValueError("local SGD takes float32 C-contiguous rows [T, d]")
    deltas = np.empty((len(rows) - 1, rows.shape[1]), np.float32)
    sums = (ctypes.c_double * 2)()
    if lib.hvd_w2v_local_sgd(arch(sg, cbow_mean), rows.ctypes.data, len(rows), rows.shape[1], ctx.ctypes.data,
                             ctx.shape[1], tgt.ctypes.data, None if codes is None else codes.ctypes.data,
                             tgt.shape[1], len(ctx), bounds.ctypes.data, len(bounds) - 1,
                             None if weights is None else weights.ctypes.data, alpha, threads, deltas.ctypes.data,
                             sums):
        raise IndexError(f"local SGD's rows must lie in [0, {len(rows)}) and its bounds increase within the centres")
    return deltas, sums[0], sums[1]


class LocalSession:
    """A super-step of shard-local SGD whose hot rows meet between sub-steps, compiled (localsgd_kernel.cc's
    session; hvd_w2v.training.hotsync): ``rows``, ``ctx``, ``tgt``, ``codes`` as :func:`local_sgd`'s, ``bounds`` with
    ``parts`` sub-steps a shard (shard s's sub-step j: centres ``[bounds[s parts + j], bounds[s parts + j + 1])``),
    the table rows ``[hot_lo, hot_hi)`` the hot ones. Call :meth:`substep` then :meth:`sync` for each sub-step
    in order, then :meth:`close`. One session at a time in a process (the library holds it); every shard's copy
    of its rows is held from here to close."""

    def __init__(self, lib, sg, rows, ctx, tgt, bounds, parts, hot_lo, hot_hi, threads=1, cbow_mean=True,
                 codes=None, weights=None):
        bounds = _shard_blocks(len(rows), ctx, tgt, bounds, codes)
        weights = _weights(weights, (len(bounds) - 1) // parts)
        if not (rows.dtype == np.float32 and rows.ndim == 2 and rows.flags.c_contiguous):
            raise ValueError("local SGD takes float32 C-contiguous rows [T, d]")
        self.lib, self.keep, self.hot = lib, (rows, ctx, tgt, bounds, codes, weights), (hot_lo, hot_hi)
        shards = (len(bounds) - 1) // parts
        if shards * parts + 1 != len(bounds) or lib.hvd_w2v_local_sgd_open(
                arch(sg, cbow_mean), rows.ctypes.data, len(rows), rows.shape[1], ctx.ctypes.data, ctx.shape[1],
                tgt.ctypes.data, None if codes is None else codes.ctypes.data, tgt.shape[1], len(ctx),
                bounds.ctypes.data, shards, None if weights is None else weights.ctypes.data, parts, hot_lo, hot_hi,
                threads):
            raise IndexError(f"local SGD's rows must lie in [0, {len(rows)}), its bounds increase within the centres "
                             f"({parts} a shard) and its hot rows lie in the table")

    def substep(self, part, alpha):
        """Every shard's sub-step ``part``; returns (the hot rows' deltas since the last sync, summed over the
        shards, float32[hot, d]; how many shards' centres of the sub-step name each, float32[hot])."""
        hot = np.empty((self.hot[1] - self.hot[0], self.keep[0].shape[1]), np.float32)
        touching = np.empty(len(hot), np.float32)
        if self.lib.hvd_w2v_local_sgd_substep(part, alpha, hot.ctypes.data, touching.ctypes.data):
            raise RuntimeError(f"local SGD's sub-step {part} called out of turn")
        return hot, touching

    def sync(self, hot, which):
        """The hot rows ``which`` (int, increasing, of the session's hot rows) that the merge changed, as merged
        (float32[len(which), d]), into every shard's copy that holds them."""
        hot = np.ascontiguousarray(hot, np.float32)
        which = np.ascontiguousarray(which, np.int32)
        assert hot.shape == (len(which), self.keep[0].shape[1])
        if self.lib.hvd_w2v_local_sgd_sync(hot.ctypes.data, which.ctypes.data, len(which)):
            raise RuntimeError("local SGD's sync called out of turn, or with rows outside the hot ones")

    def close(self):
        """(deltas float32[T - 1, d] of the other rows, summed over the shards, the hot rows zero; loss; count)."""
        rows = self.keep[0]
        deltas = np.empty((len(rows) - 1, rows.shape[1]), np.float32)
        sums = (ctypes.c_double * 2)()
        if self.lib.hvd_w2v_local_sgd_close(deltas.ctypes.data, sums):
            raise RuntimeError("local SGD's close called out of turn")
        return deltas, sums[0], sums[1]


# -- word2phrase's passes (phrases_kernel.cc) ---------------------------------------------------------------

PHRASE_FUNCTIONS = {"hvd_w2v_phrases_new": ([I64], P), "hvd_w2v_phrases_free": ([P], None),
                    "hvd_w2v_phrases_start": ([P, I64, P, I64], None),
                    "hvd_w2v_phrases_count": ([P, P, I64, I64], I64), "hvd_w2v_phrases_size": ([P], I64),
                    "hvd_w2v_phrases_export": ([P, P, P], None), "hvd_w2v_phrases_set": ([P, P], None),
                    "hvd_w2v_phrases_joinable": ([P, P, I64, I64, I64, F32, F32, P], I64),
                    "hvd_w2v_phrases_write": ([P, I64, I64, P, P], I64),
                    "hvd_w2v_phrases_key": ([P, I64, P], None),
                    "hvd_w2v_phrases_sum": ([P, P, P, I64, I64, I64], None),
                    "hvd_w2v_phrases_lookup": ([P, P, I64, I64, P, I64, I64], None),
                    "hvd_w2v_phrases_kept": ([P, I64], I64)}


def phrases_kernel():
    """The library of phrases_kernel.cc, or None (phrases.py's Python passes then: the same output)."""
    return _library("phrases_kernel", PHRASE_FUNCTIONS, "the compiled phrase passes", fallback="Python's loops")


class PhraseTable:
    """phrases_kernel.cc's table of one rank's words and pairs, and its scans of blocks of text (bytes)."""

    def __init__(self, lib, keys=0):
        """A table sized for ``keys`` keys (an owner's, which knows how many it receives), growing past them."""
        self.lib, self.handle = lib, lib.hvd_w2v_phrases_new(keys)

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.hvd_w2v_phrases_free(self.handle)

    def start(self, before, word):
        """The token before the next block (0 none, 1 a newline, 2 a word) and the word before (bytes, or None:
        the text's first word is next)."""
        self.lib.hvd_w2v_phrases_start(self.handle, before, word or b"", -1 if word is None else len(word))

    def count(self, block, drop_last):
        return self.lib.hvd_w2v_phrases_count(self.handle, block, len(block), int(drop_last))

    def __len__(self):
        """The keys the table holds."""
        return self.lib.hvd_w2v_phrases_size(self.handle)

    def export(self):
        """(keys uint64[n, 2], counts int64[n]) in the table's order."""
        n = len(self)
        keys, counts = np.empty((n, 2), np.uint64), np.empty(n, np.int64)
        self.lib.hvd_w2v_phrases_export(self.handle, keys.ctypes.data, counts.ctypes.data)
        return keys, counts

    def set(self, counts):
        counts = np.ascontiguousarray(counts, np.int64)
        assert len(counts) == self.lib.hvd_w2v_phrases_size(self.handle)
        self.lib.hvd_w2v_phrases_set(self.handle, counts.ctypes.data)

    def joinable(self, block, drop_last, min_count, threshold, words):
        out = np.empty(len(block) // 2 + 1, np.uint8)  # a word takes a byte and a separator, but the last
        n = self.lib.hvd_w2v_phrases_joinable(self.handle, block, len(block), int(drop_last), min_count,
                                              threshold, words, out.ctypes.data)
        return out[:n].astype(bool)

    def write(self, block, drop_last, joins):
        joins = np.ascontiguousarray(joins, np.uint8)
        out = np.empty(2 * len(block) + 1, np.uint8)
        n = self.lib.hvd_w2v_phrases_write(block, len(block), int(drop_last), joins.ctypes.data, out.ctypes.data)
        return out[:n].tobytes()

    def key(self, word):
        out = np.empty(2, np.uint64)
        self.lib.hvd_w2v_phrases_key(word, len(word), out.ctypes.data)
        return out

    # an owner's table: the sums of the keys it owns
    def sum(self, keys, counts, part=0, parts=1):
        """Adds ``counts`` to ``keys``, those of them in share ``part`` of ``parts`` (phrases.share_of)."""
        keys, counts = np.ascontiguousarray(keys, np.uint64), np.ascontiguousarray(counts, np.int64)
        self.lib.hvd_w2v_phrases_sum(self.handle, keys.ctypes.data, counts.ctypes.data, len(counts), part, parts)

    def lookup(self, keys, min_count, out=None, part=0, parts=1):
        """Each key's sum (0 below ``min_count``) into ``out`` (int64[n]; new if None), where the key is in share
        ``part`` of ``parts``; ``out``."""
        keys = np.ascontiguousarray(keys, np.uint64)
        out = np.empty(len(keys), np.int64) if out is None else out
        self.lib.hvd_w2v_phrases_lookup(self.handle, keys.ctypes.data, len(keys), min_count, out.ctypes.data, part,
                                        parts)
        return out

    def kept(self, min_count):
        return self.lib.hvd_w2v_phrases_kept(self.handle, min_count)


# -- the text passes (text_kernel.cc) -----------------------------------------------------------------------

TEXT_FUNCTIONS = {"hvd_w2v_hash64": ([P, I64], U64),
                  "hvd_w2v_check_text": ([P, I64, I64, P], I64),
                  "hvd_w2v_counts_new": ([I64, I64], P), "hvd_w2v_counts_free": ([P], None),
                  "hvd_w2v_counts_add_text": ([P, P, I64], I64),
                  "hvd_w2v_counts_add_numbered": ([P, P, I64, P, I64, P], I64),
                  "hvd_w2v_remap": ([P, I64, P, I64, ctypes.c_int32, I64, P, I64], I64),
                  "hvd_w2v_counts_add_words": ([P, P, P, P, I64, P], None),
                  "hvd_w2v_counts_size": ([P], I64), "hvd_w2v_counts_sizes": ([P, P], I64),
                  "hvd_w2v_counts_merge": ([P, I64], I64), "hvd_w2v_counts_aliases": ([P, P], None),
                  "hvd_w2v_counts_export": ([P, I64, I64, P, P, P, P, P, I64, P, I64], None),
                  "hvd_w2v_hash_words": ([P, P, I64, P, I64], None),
                  "hvd_w2v_count_order": ([P, P, I64, P, I64], None),
                  "hvd_w2v_gather_words": ([P, P, I64, P, I64, P, P, I64], None),
                  "hvd_w2v_count_lines": ([P, P, I64, P, I64, P, P], I64),
                  "hvd_w2v_encode_local": ([P, P, I64, I64, P, I64, ctypes.c_int32], I64),
                  "hvd_w2v_lookup_new": ([P, P, P, I64], P), "hvd_w2v_lookup_free": ([P], None),
                  "hvd_w2v_lookup_ids": ([P, P, P, I64, P, I64], None),
                  "hvd_w2v_scan_new": ([I64], P), "hvd_w2v_scan_free": ([P], None),
                  "hvd_w2v_scan_text": ([P, P, I64, I64, P, P, P], I64),
                  "hvd_w2v_scan_words": ([P, I64, I64, P, P, P, P], None),
                  "hvd_w2v_scan_ids": ([P, P, P, P, I64, I64, ctypes.c_int32], I64)}


def trim_heap():
    """Return the free pages of the C heap to the system (glibc's ``malloc_trim``; nothing elsewhere). numpy's
    arrays of some MiB come from the heap once glibc's adaptive threshold has risen past them, and glibc keeps
    the pages of those freed below live ones: after vocab.build, half of the resident set at 4M distinct tokens
    (hvd_w2v/bench/README.md, "The text passes")."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def text_kernel():
    """The library of text_kernel.cc, or None (the Python passes of vocab and encode then)."""
    return _library("text_kernel", TEXT_FUNCTIONS, "the compiled text passes", fallback="Python's loops")


def _text(block):
    """A pointer to the bytes of ``block`` (bytes, read only: the kernel never writes text)."""
    return ctypes.cast(ctypes.c_char_p(block), ctypes.c_void_p).value if block else None


def _words(words, lengths):
    """The data pointers of a word list laid out as the kernel takes it: uint8 bytes end to end, int64
    lengths."""
    words = np.ascontiguousarray(words, np.uint8)
    lengths = np.ascontiguousarray(lengths, np.int64)
    if int(lengths.sum()) != len(words) or (len(lengths) and lengths.min() < 0):
        raise ValueError("the words' lengths must add up to their bytes")
    return words, lengths


def check_text(lib, block, threads=1):
    """(0, None) when ``block`` (bytes) is text; (1, offset) of its first NUL byte; else (2, offset) of its first
    byte that is not UTF-8, the offset Python's strict decoder reports. On ``threads`` threads."""
    where = ctypes.c_int64(-1)
    kind = lib.hvd_w2v_check_text(_text(block), len(block), max(threads, 1), ctypes.byref(where))
    return kind, (where.value if kind else None)


def hash64s(lib, words):
    """vocab.hash64 of each of ``words`` (bytes), compiled (tests hold the two equal)."""
    return [lib.hvd_w2v_hash64(_text(w), len(w)) for w in words]


def hash_words(lib, words, lengths, threads=1):
    """vocab.hash64 (uint64) of each word laid out in ``words`` (uint8) by ``lengths`` (int64), on ``threads``."""
    words, lengths = _words(words, lengths)
    out = np.empty(len(lengths), np.uint64)
    lib.hvd_w2v_hash_words(words.ctypes.data, lengths.ctypes.data, len(lengths), out.ctypes.data, max(threads, 1))
    return out


def count_order(lib, counts, hashes, threads=1):
    """np.lexsort((hashes, -counts)) (int64), compiled, on ``threads``: by count descending, then by hash, then
    by place."""
    counts = np.ascontiguousarray(counts, np.int64)
    hashes = np.ascontiguousarray(hashes, np.uint64)
    if counts.shape != hashes.shape or counts.ndim != 1:
        raise ValueError(f"counts {counts.shape} and hashes {hashes.shape} must be one vector each, of one length")
    out = np.empty(len(counts), np.int64)
    lib.hvd_w2v_count_order(counts.ctypes.data, hashes.ctypes.data, len(counts), out.ctypes.data, max(threads, 1))
    return out


def gather_words(lib, words, lengths, which, threads=1):
    """vocab.gather_words, compiled, on ``threads``."""
    words, lengths = _words(words, lengths)
    which = np.ascontiguousarray(which, np.int64)
    if len(which) and (which.min() < 0 or which.max() >= len(lengths)):
        raise IndexError(f"word numbers must lie in [0, {len(lengths)})")
    picked = lengths[which]
    out = np.empty(int(picked.sum()), np.uint8)
    lib.hvd_w2v_gather_words(words.ctypes.data, lengths.ctypes.data, len(lengths), which.ctypes.data, len(which),
                             out.ctypes.data, picked.ctypes.data, max(threads, 1))
    return out, picked


def count_lines(lib, words, counts):
    """(bytes, int64 lengths) of the lines "word count\\n" of ``words`` (a vocab.WordList) and ``counts``, compiled:
    export.write_vocab's."""
    ends = np.ascontiguousarray(words.ends, np.int64)
    counts = np.ascontiguousarray(counts, np.int64)
    if len(counts) != len(ends):
        raise ValueError("one count per word")
    out = np.empty(int(ends[-1] - words.start) + 22 * len(ends) if len(ends) else 0, np.uint8)
    lengths = np.empty(len(ends), np.int64)
    m = lib.hvd_w2v_count_lines(_text(words.data), ends.ctypes.data, words.start, counts.ctypes.data, len(ends),
                                out.ctypes.data, lengths.ctypes.data)
    return out[:m].tobytes(), lengths


# The most words a thread of the compiled count (on more than one) counts in a table of its own before it hands
# its tokens to their words' owners: 8 MiB of slots (memory.private_bytes).
PRIVATE_WORDS = 1 << 17


class Counts:
    """Word counts in compiled tables, one per thread: a rank's partial counts, or an owner's (vocab.count);
    on more than one thread, each thread also counts the words it meets first, ``private_words`` at most, in a
    table of its own until :meth:`take`. Memory: 32 B slots, a power of two of them, at most two thirds full
    (grown in place: memory.table_bytes), 8 B a word of its order and the bytes of words over 8 bytes."""

    def __init__(self, lib, threads=1, private_words=PRIVATE_WORDS):
        self.lib, self.threads = lib, max(threads, 1)
        self.handle = lib.hvd_w2v_counts_new(self.threads, private_words)

    def add_text(self, block, start=0, end=None):
        """Count the tokens of ``block[start:end]`` (bytes of checked text, whole tokens at both ends); returns
        how many."""
        end = len(block) if end is None else end
        if not 0 <= start <= end <= len(block):
            raise ValueError(f"text range [{start}, {end}) outside the block's {len(block)} bytes")
        if end == start:
            return 0
        return self.lib.hvd_w2v_counts_add_text(self.handle, _text(block) + start, end - start)

    def add_numbered(self, block, file_end, out=None, start=0, end=None):
        """Count the tokens of ``block[start:end]`` (bytes of checked text, whole tokens at both ends) and
        number them: returns (tokens, the part's stream in provisional numbers: int32, each token's word as
        :meth:`take`'s ``numbered`` gives it, -1 for each newline and once more at ``file_end``), the stream a
        view of ``out`` (int32, reused when it has room for the part's bytes + 1)."""
        end = len(block) if end is None else end
        if not 0 <= start <= end <= len(block):
            raise ValueError(f"text range [{start}, {end}) outside the block's {len(block)} bytes")
        if out is None or out.dtype != np.int32 or not out.flags.c_contiguous or len(out) < end - start + 1:
            out = np.empty(end - start + 1, np.int32)
        tokens = ctypes.c_int64()
        text = _text(block)
        m = self.lib.hvd_w2v_counts_add_numbered(self.handle, text + start if text else None, end - start,
                                                 out.ctypes.data, int(bool(file_end)), ctypes.byref(tokens))
        return tokens.value, out[:m]

    def add_words(self, words, lengths, counts, numbered=False):
        """Add ``counts`` (int64) of the words laid out in ``words`` (uint8) by ``lengths`` (int64); with
        ``numbered``, returns each word's provisional number here (int64, as :meth:`take`'s ``numbered``)."""
        words, lengths = _words(words, lengths)
        counts = np.ascontiguousarray(counts, np.int64)
        if len(counts) != len(lengths):
            raise ValueError("one count per word")
        numbers = np.empty(len(lengths), np.int64) if numbered else None
        self.lib.hvd_w2v_counts_add_words(self.handle, words.ctypes.data, lengths.ctypes.data, counts.ctypes.data,
                                          len(lengths), numbers.ctypes.data if numbered else None)
        return numbers

    def __len__(self):
        """Words summed over the threads' tables: the distinct words, or more while a word is in several threads'
        own tables (text_kernel.cc's Counts) until :meth:`take` adds them up."""
        return self.lib.hvd_w2v_counts_size(self.handle)

    def take(self, ranks, keep=True, hashed=True, numbered=False, quick=False):
        """The counts ordered by hash owner among ``ranks``, as (words uint8, lengths int64, counts int64,
        hashes uint64, per_dest int64[ranks]); the tables are left empty (their memory kept when ``keep``).
        Not ``hashed``: in no order, all to rank 0, hashes left unset (the words' own owner). ``quick``: by the
        owner of the tables' quick hash instead, no BLAKE2b (``hashes`` the quick hashes). ``numbered``: and
        after them each word's provisional number (int64, :meth:`add_numbered`'s numbers >= 0) and the
        aliases: the provisional number of each private index j, which :meth:`add_numbered` writes as -2 - j
        for a token its thread counted in a table of its own (int64, -1 for an index no word had; empty on
        one thread)."""
        aliases = np.empty(self.lib.hvd_w2v_counts_merge(self.handle, int(keep)), np.int64)
        self.lib.hvd_w2v_counts_aliases(self.handle, aliases.ctypes.data)
        size = ctypes.c_int64()
        n = self.lib.hvd_w2v_counts_sizes(self.handle, ctypes.byref(size))
        words, lengths = np.empty(size.value, np.uint8), np.empty(n, np.int64)
        counts, hashes, per_dest = np.empty(n, np.int64), np.empty(n, np.uint64), np.empty(ranks, np.int64)
        numbers = np.empty(n, np.int64) if numbered else None
        self.lib.hvd_w2v_counts_export(self.handle, ranks, self.threads, words.ctypes.data, lengths.ctypes.data,
                                       counts.ctypes.data, hashes.ctypes.data if hashed else None,
                                       per_dest.ctypes.data, int(keep), numbers.ctypes.data if numbered else None,
                                       int(quick))
        return (words, lengths, counts, hashes, per_dest) + ((numbers, aliases) if numbered else ())

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.hvd_w2v_counts_free(self.handle)
            self.handle = None


def remap(lib, numbers, ids, sentence_end, threads=1, below=None):
    """The id stream of ``numbers`` (int32, Counts.add_numbered's), in place, on ``threads``: number x >= 0
    becomes ``ids[x]`` (int32; -1: dropped), -1 becomes ``sentence_end``, and a private index j, written -2 - j,
    becomes ``below[j]`` (int32: the ids of Counts.take's aliases). Returns the stream, a view of ``numbers``."""
    numbers, ids = np.ascontiguousarray(numbers, np.int32), np.ascontiguousarray(ids, np.int32)
    below = np.ascontiguousarray(np.zeros(0, np.int32) if below is None else below, np.int32)
    m = lib.hvd_w2v_remap(numbers.ctypes.data, len(numbers), ids.ctypes.data, len(ids), sentence_end,
                          max(threads, 1), below.ctypes.data, len(below))
    if m < 0:
        raise ValueError(f"a provisional number outside [{-1 - len(below)}, {len(ids)})")
    return numbers[:m]


def aliased(by_number, aliases):
    """The values of ``by_number`` (indexed by provisional number) at each of Counts.take's ``aliases``, -1
    where one is -1: what :func:`remap`'s ``below`` takes."""
    return np.where(aliases >= 0, by_number[np.maximum(aliases, 0)], -1).astype(by_number.dtype)


class WordIds:
    """A hash owner's word -> id in a compiled table (encode's lookups)."""

    def __init__(self, lib, words, lengths, ids):
        words, lengths = _words(words, lengths)
        ids = np.ascontiguousarray(ids, np.int64)
        self.lib = lib
        self.handle = lib.hvd_w2v_lookup_new(words.ctypes.data, lengths.ctypes.data, ids.ctypes.data, len(ids))

    def ids(self, words, lengths, threads=1):
        """int64 id of each word laid out in ``words`` by ``lengths``, -1 for a word it does not hold."""
        words, lengths = _words(words, lengths)
        out = np.empty(len(lengths), np.int64)
        self.lib.hvd_w2v_lookup_ids(self.handle, words.ctypes.data, lengths.ctypes.data, len(lengths),
                                    out.ctypes.data, max(threads, 1))
        return out

    def encode(self, block, file_end, sentence_end, threads=1, out=None):
        """encode's part of the stream from ``block`` (bytes of whole tokens, checked text) where this table
        holds every word (one rank): int32 ids, out-of-vocabulary tokens dropped, ``sentence_end`` after each
        newline and at ``file_end``. ``out``: an int32 buffer of len(block) + 1 at least, else one is made; the
        result is a view of it."""
        if out is None or len(out) < len(block) + 1 or out.dtype != np.int32:
            out = np.empty(len(block) + 1, np.int32)
        m = self.lib.hvd_w2v_encode_local(self.handle, _text(block), len(block), max(threads, 1), out.ctypes.data,
                                          int(file_end), sentence_end)
        return out[:m]

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.hvd_w2v_lookup_free(self.handle)
            self.handle = None


class Scan:
    """One block of the encoding at a time: :meth:`text` numbers its tokens by distinct word, :meth:`words`
    lists those words by hash owner, :meth:`ids` turns the block into its part of the id stream."""

    def __init__(self, lib, threads=1):
        self.lib, self.threads = lib, max(threads, 1)
        self.handle = lib.hvd_w2v_scan_new(self.threads)
        self.out, self.m = np.empty(0, np.int32), 0

    def text(self, block):
        """Scan ``block`` (bytes of whole tokens, checked text); returns its distinct words."""
        if len(self.out) < len(block) + 1:
            self.out = np.empty(len(block) + 1, np.int32)
        distinct, size = ctypes.c_int64(), ctypes.c_int64()
        self.m = self.lib.hvd_w2v_scan_text(self.handle, _text(block), len(block), self.threads,
                                            self.out.ctypes.data, ctypes.byref(distinct), ctypes.byref(size))
        self.distinct, self.size = distinct.value, size.value
        return self.distinct

    def words(self, ranks):
        """The block's distinct words by hash owner: (words uint8, lengths int64, order int64, per_dest)."""
        words, lengths = np.empty(self.size, np.uint8), np.empty(self.distinct, np.int64)
        order, per_dest = np.empty(self.distinct, np.int64), np.empty(ranks, np.int64)
        self.lib.hvd_w2v_scan_words(self.handle, ranks, self.threads, words.ctypes.data, lengths.ctypes.data,
                                    order.ctypes.data, per_dest.ctypes.data)
        return words, lengths, order, per_dest

    def ids(self, ids, order, file_end, sentence_end):
        """The block's part of the stream (a new int32 array), ``ids`` those of the words of :meth:`words`, in
        its order."""
        ids = np.ascontiguousarray(ids, np.int64)
        order = np.ascontiguousarray(order, np.int64)
        if not (len(ids) == len(order) == self.distinct):
            raise ValueError("one id per distinct word of the block")
        m = self.lib.hvd_w2v_scan_ids(self.handle, ids.ctypes.data, order.ctypes.data, self.out.ctypes.data,
                                      self.m, int(file_end), sentence_end)
        return self.out[:m].copy()

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.hvd_w2v_scan_free(self.handle)
            self.handle = None


# -- bfloat16 in numpy (the row copies' fallback) --------------------------------------------------------------

def to_bf16(values):
    """The bfloat16 bits (uint16) of float32 ``values``, rounded to nearest, ties to even; a NaN stays a NaN:
    rows_kernel.cc's ``to_bf16`` in numpy (the fallback, and what the kernel is tested against)."""
    u = np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def from_bf16(bits):
    """The float32 values of bfloat16 ``bits`` (uint16): exact."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)
