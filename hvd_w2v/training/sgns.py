"""The loss and its updates: skip-gram and CBOW with negative sampling or hierarchical softmax. Knows nothing of
ranks.

Batched as Intel's pWord2Vec ("HogBatch"): each centre's output rows (the centre itself, then its
``negative`` noise words, shared by the whole window) meet all its context rows in one small matrix product.
Updates follow word2vec.c exactly: ``g = (label - sigmoid(x . y)) * alpha`` is *added* (gradient ascent on
the log-likelihood); every row's updates from one step are computed from the same snapshot and summed.

Two implementations of the same sums (step_function): the compiled step (sgns_kernel.cc, built with g++ and
cached: native.step_kernel), word2vec.c's loops with no intermediate blocks, in one call; and the TensorFlow
graph below, the reference the compiled step is tested against and the fallback where it cannot be built.

Index space: ``ctx`` and ``tgt`` index ``rows``, the step's table of unique rows. A W_in row (a context word)
and a W_out row (a centre or noise word) are different rows of it, even for the same word. The table's last
row is zeros and stands for "no context word": reading it costs nothing and its update is thrown away, which
is cheaper than masking.

Hierarchical softmax (``hs``) has the same shape: a centre's targets are the inner nodes on its path in the
Huffman tree (their rows stand where W_out's do), the zero row past the path's end, and each target's label is
``1 - code``, its Huffman code's bit, and a node whose |logit| is HS_SATURATED or more is not updated
(word2vec.c's and gensim's rule); negative sampling's labels are 1 for the centre, 0 for its noise words.

Centres come in *groups* by context width: group ``g`` holds centres with at most ``2 * (g + 1)`` context
words, its ``ctx`` block [n_g, 2 * (g + 1)] left-packed. word2vec's reduced windows give widths 2, 4, ..., 2
window in equal shares, so one [n, 2 * window] block would be 40% "no context" slots that every product and
segment sum pays for (window 5); the groups cut that to the rounding of each group's centre count.
"""
import functools

import numpy as np
import tensorflow as tf

from ..kernels import native


def _common(rows, ctx, tgt, code=None):
    none = tf.shape(rows)[0] - 1
    cmask = tf.cast(ctx < none, tf.float32)  # [n, w]
    c = tf.gather(rows, ctx)  # [n, w, d], zeros where there is no context word
    o = tf.gather(rows, tgt)  # [n, 1+K, d]
    if code is not None:  # hierarchical softmax: the path's nodes, then nothing (saturated nodes: _saturated)
        return cmask, c, o, tf.cast(tgt < none, tf.float32), 1.0 - tf.cast(code, tf.float32)
    # word2vec.c skips a noise word that equals the centre: mask it.
    tmask = tf.concat([tf.ones_like(tgt[:, :1], tf.float32),
                       tf.cast(tf.not_equal(tgt[:, 1:], tgt[:, :1]), tf.float32)], axis=1)  # [n, 1+K]
    labels = tf.concat([tf.ones_like(tgt[:, :1], tf.float32), tf.zeros_like(tgt[:, 1:], tf.float32)], axis=1)
    return cmask, c, o, tmask, labels


HS_SATURATED = 6.0  # word2vec.c's MAX_EXP: hierarchical softmax leaves a node alone past it (sgns_kernel.cc's)


def _unsaturated(logits, code):
    """1, or with hierarchical softmax (``code`` given) 0 where |logit| >= HS_SATURATED: word2vec.c's and
    gensim's HS update no node whose sigmoid is that close to 0 or 1."""
    return 1.0 if code is None else tf.cast(tf.abs(logits) < HS_SATURATED, tf.float32)


def _loss(logits, labels, mask):
    # -log sigmoid(x) for the centre, -log sigmoid(-x) for noise words; reported, not differentiated.
    return -tf.reduce_sum(mask * (labels * tf.math.log_sigmoid(logits)
                                  + (1 - labels) * tf.math.log_sigmoid(-logits)))


def _skipgram(rows, ctx, tgt, alpha, code=None):
    """One group, skip-gram: every context row predicts the centre. (d_c [n, w, d], d_o [n, 1+K, d], loss,
    pairs)."""
    cmask, c, o, tmask, labels = _common(rows, ctx, tgt, code)
    labels = labels[:, None, :]  # [n, 1, 1+K]
    logits = tf.matmul(c, o, transpose_b=True)  # [n, w, 1+K]
    mask = cmask[:, :, None] * tmask[:, None, :]
    g = (labels - tf.sigmoid(logits)) * alpha * mask * _unsaturated(logits, code)
    d_c = tf.matmul(g, o)  # word2vec.c's neu1e, per context word
    d_o = tf.matmul(g, c, transpose_a=True)
    return d_c, d_o, _loss(logits, labels, mask), tf.reduce_sum(cmask)


def _cbow(rows, ctx, tgt, alpha, code=None, mean=True):
    """One group, CBOW: the mean of the context rows (or with ``mean`` False their sum, gensim's cbow_mean=0)
    predicts the centre. (d_c, d_o, loss, centres)."""
    cmask, c, o, tmask, labels = _common(rows, ctx, tgt, code)
    count = tf.maximum(tf.reduce_sum(cmask, axis=1, keepdims=True), 1.0)
    has = tf.reduce_max(cmask, axis=1, keepdims=True)  # 0 for a padding centre: it learns nothing
    tmask *= has
    h = tf.reduce_sum(c, axis=1) / count if mean else tf.reduce_sum(c, axis=1)  # [n, d]
    logits = tf.einsum("nd,nkd->nk", h, o)
    g = (labels - tf.sigmoid(logits)) * alpha * tmask * _unsaturated(logits, code)
    d_h = tf.einsum("nk,nkd->nd", g, o)
    # As word2vec.c, the mean's: each context word receives the whole hidden-layer update; as gensim's sum, each
    # receives 1/count of it.
    d_c = (d_h if mean else d_h / count)[:, None, :] * cmask[..., None]
    d_o = g[..., None] * h[:, None, :]
    return d_c, d_o, _loss(logits, labels, tmask), tf.reduce_sum(has)


@functools.lru_cache(maxsize=None)
def step_function(sg, groups, fused=None, threads=1, cbow_mean=True, hs=False):
    """The step's maths for ``groups`` context-width groups, on ``threads`` threads (the compiled step's; the
    graph runs on TensorFlow's intra-op pool, which comm.init sizes to the same budget).

    Returns ``f(rows, ctxs, tgts, alpha, codes=None) -> (updates, loss, count)``, with ``f.empty_rows`` the allocator of
    a ``rows`` either path reads without a copy and ``f.groups`` the number of groups it wants its examples
    in (loop.StepPlan.of): ``groups`` for the graph, 1 for the compiled step, which takes any number and
    skips empty context slots itself. ``rows`` float32[U + 1, d] (every row the step touches, then the zero
    row), ``ctxs``/``tgts`` sequences of ``groups`` int32 arrays ([n_g, w_g] context rows, ``U`` where none;
    [n_g, 1 + negative] the centre's row then its noise words'), ``alpha`` the step's learning rate.
    ``updates`` float32[U, d] is every row's summed update (the zero row's dropped; the graph's a read-only
    array on TensorFlow's memory), ``loss`` the summed loss and ``count`` the pairs (skip-gram) or centres
    (CBOW) trained, scalars (``float()`` takes either path's). ``cbow_mean``: CBOW of the context's mean
    (word2vec.c's), or of its sum, each context row then getting 1/m of the update (gensim's cbow_mean=0).
    ``hs``: hierarchical softmax, ``tgts`` the centres' paths of inner-node rows (``U`` past each path's end)
    and ``codes`` int8 blocks of their shapes, the paths' Huffman codes.

    Two implementations of the same sums: the compiled step of sgns_kernel.cc (``fused`` True; the default
    when it builds here, see :func:`fused`) and the TensorFlow graph below (``fused`` False; the reference
    the compiled step is tested against). The graph is traced once for every shape and called through its
    concrete function, which skips tf.function's argument binding at every call; ``rows`` and ``updates``
    (megabytes) cross between numpy and TensorFlow without a copy.
    """
    lib = native.step_kernel() if fused is None or fused else None
    if fused and lib is None:
        raise RuntimeError(f"the compiled step is not available: {fused_error()}")
    if lib is not None:
        def run(rows, ctxs, tgts, alpha, codes=None):
            return native.sgns_step(lib, sg, rows, ctxs, tgts, alpha, threads, cbow_mean, codes)

        run.fused, run.empty_rows, run.groups = True, empty_rows, 1
        return run

    body = _skipgram if sg else functools.partial(_cbow, mean=cbow_mean)
    ints = [tf.TensorSpec([None, None], tf.int32)] * groups
    bits = [tf.TensorSpec([None, None], tf.int8)] * (groups if hs else 0)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32), ints, ints,
                                  tf.TensorSpec([], tf.float32), bits])
    def step(rows, ctxs, tgts, alpha, codes):
        shape = tf.shape(rows)
        pieces, segments, loss, count = [], [], 0.0, 0.0
        for g, (ctx, tgt) in enumerate(zip(ctxs, tgts)):
            d_c, d_o, group_loss, group_count = body(rows, ctx, tgt, alpha, codes[g] if hs else None)
            pieces += [tf.reshape(d_c, [-1, shape[1]]), tf.reshape(d_o, [-1, shape[1]])]
            segments += [tf.reshape(ctx, [-1]), tf.reshape(tgt, [-1])]
            loss, count = loss + group_loss, count + group_count
        updates = tf.math.unsorted_segment_sum(tf.concat(pieces, 0), tf.concat(segments, 0), shape[0])
        return updates[:-1], loss, count

    concrete = step.get_concrete_function()

    def run(rows, ctxs, tgts, alpha, codes=None):
        updates, loss, count = concrete(_shared(rows), [tf.constant(c) for c in ctxs],
                                        [tf.constant(t) for t in tgts], tf.constant(alpha, tf.float32),
                                        [tf.constant(c) for c in codes] if hs else [])
        return _viewed(updates), loss, count

    run.fused, run.empty_rows, run.groups = False, empty_rows, groups
    run.traced = step  # for tests: its tracing count must stay 1
    return run


def fused():
    """True when the compiled step builds and loads here (native.step_kernel, built on first use) and
    $HVD_W2V_KERNEL does not ask for the graph; else step_function falls back to the graph."""
    return native.step_kernel() is not None


def fused_error():
    """Why the compiled step is not available ("" when it is)."""
    return native.unavailable("sgns_kernel")


def empty_rows(rows, dim):
    """An uninitialised float32[rows, dim] array whose buffer TensorFlow can share (native.ALIGN-aligned)."""
    return native.aligned_empty((rows, dim), np.float32)


class _Exported:
    """A tensor as numpy's from_dlpack takes it (TensorFlow's tensors lack ``__dlpack__``)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return tf.experimental.dlpack.to_dlpack(self.tensor)

    def __dlpack_device__(self):
        return 1, 0  # DLPack's kDLCPU, device 0


def _viewed(tensor):
    """A CPU tensor as a read-only numpy array on the same memory, which it keeps alive (Tensor.numpy()
    copies it)."""
    return np.from_dlpack(_Exported(tensor))


def _shared(array):
    """``array`` (C-contiguous numpy) as a tensor on the same memory when it is aligned (the step's rows:
    native.aligned_empty), else a copy."""
    if array.ctypes.data % native.ALIGN == 0 and array.flags.c_contiguous:
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    return tf.constant(array)
