"""The loss and its updates: skip-gram and CBOW with negative sampling, in TensorFlow. Knows nothing of ranks.

Batched as Intel's pWord2Vec ("HogBatch"): each centre's output rows (the centre itself, then its
``negative`` noise words, shared by the whole window) meet all its context rows in one small matrix product.
Updates follow word2vec.c exactly: ``g = (label - sigmoid(x . y)) * alpha`` is *added* (gradient ascent on
the log-likelihood); every row's updates from one step are computed from the same snapshot and summed.

Index space: ``ctx`` and ``tgt`` index ``rows``, the step's table of unique rows. A W_in row (a context word)
and a W_out row (a centre or noise word) are different rows of it, even for the same word. The table's last
row is zeros and stands for "no context word": reading it costs nothing and its update is thrown away, which
is cheaper than masking the [n, 2*window, d] context block.
"""
import tensorflow as tf

_SIG = [
    tf.TensorSpec([None, None], tf.float32),  # rows [U + 1, d]: every row the step touches, then a zero row
    tf.TensorSpec([None, None], tf.int32),  # ctx [n, 2*window]: row of each context word, U where none
    tf.TensorSpec([None, None], tf.int32),  # tgt [n, 1+negative]: row of the centre, then of its noise words
    tf.TensorSpec([], tf.float32),  # alpha: the learning rate of this step
]


def _common(rows, ctx, tgt):
    cmask = tf.cast(ctx < tf.shape(rows)[0] - 1, tf.float32)  # [n, 2w]
    c = tf.gather(rows, ctx)  # [n, 2w, d], zeros where there is no context word
    o = tf.gather(rows, tgt)  # [n, 1+K, d]
    # word2vec.c skips a noise word that equals the centre: mask it.
    tmask = tf.concat([tf.ones_like(tgt[:, :1], tf.float32),
                       tf.cast(tf.not_equal(tgt[:, 1:], tgt[:, :1]), tf.float32)], axis=1)  # [n, 1+K]
    labels = tf.concat([tf.ones_like(tgt[:, :1], tf.float32), tf.zeros_like(tgt[:, 1:], tf.float32)], axis=1)
    return cmask, c, o, tmask, labels


def _loss(logits, labels, mask):
    # -log sigmoid(x) for the centre, -log sigmoid(-x) for noise words; reported, not differentiated.
    return -tf.reduce_sum(mask * (labels * tf.math.log_sigmoid(logits)
                                  + (1 - labels) * tf.math.log_sigmoid(-logits)))


def _updates(rows, ctx, d_c, tgt, d_o):
    """Each row's summed update, float32[U, d] (the zero row's is dropped)."""
    shape = tf.shape(rows)
    up = tf.math.unsorted_segment_sum(tf.reshape(d_c, [-1, shape[1]]), tf.reshape(ctx, [-1]), shape[0])
    up += tf.math.unsorted_segment_sum(d_o, tgt, shape[0])
    return up[:-1]


@tf.function(input_signature=_SIG)
def skipgram(rows, ctx, tgt, alpha):
    """Skip-gram: every context row predicts the centre. Returns (updates[U, d], loss, pairs)."""
    cmask, c, o, tmask, labels = _common(rows, ctx, tgt)
    logits = tf.matmul(c, o, transpose_b=True)  # [n, 2w, 1+K]
    mask = cmask[:, :, None] * tmask[:, None, :]
    g = (labels[:, None, :] - tf.sigmoid(logits)) * alpha * mask
    d_c = tf.matmul(g, o)  # word2vec.c's neu1e, per context word
    d_o = tf.matmul(g, c, transpose_a=True)
    return _updates(rows, ctx, d_c, tgt, d_o), _loss(logits, labels[:, None, :], mask), tf.reduce_sum(cmask)


@tf.function(input_signature=_SIG)
def cbow(rows, ctx, tgt, alpha):
    """CBOW: the mean of the context rows predicts the centre. Returns (updates[U, d], loss, centres)."""
    cmask, c, o, tmask, labels = _common(rows, ctx, tgt)
    count = tf.maximum(tf.reduce_sum(cmask, axis=1, keepdims=True), 1.0)
    tmask *= tf.reduce_max(cmask, axis=1, keepdims=True)  # a centre without context (padding) learns nothing
    h = tf.reduce_sum(c, axis=1) / count  # [n, d]
    logits = tf.einsum("nd,nkd->nk", h, o)
    g = (labels - tf.sigmoid(logits)) * alpha * tmask
    d_h = tf.einsum("nk,nkd->nd", g, o)
    # As word2vec.c: each context word receives the whole hidden-layer update (not divided by the count).
    d_c = d_h[:, None, :] * cmask[..., None]
    d_o = g[..., None] * h[:, None, :]
    return _updates(rows, ctx, d_c, tgt, d_o), _loss(logits, labels, tmask), tf.reduce_sum(tf.reduce_max(cmask, axis=1))
