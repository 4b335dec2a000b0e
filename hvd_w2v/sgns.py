"""The loss and its updates: skip-gram and CBOW with negative sampling, in TensorFlow. Knows nothing of ranks.

Batched as Intel's pWord2Vec ("HogBatch"): each centre's output rows (the centre itself, then its
``negative`` noise words, shared by the whole window) meet all its context rows in one small matrix product.
Updates follow word2vec.c exactly: ``g = (label - sigmoid(x . y)) * alpha`` is *added* (gradient ascent on
the log-likelihood); every row's updates from one step are computed from the same snapshot and summed.

Index spaces: ``ctx`` and ``tgt`` index the step's unique-row tables ``in_rows`` and ``out_rows``, not word ids.
"""
import tensorflow as tf

_SIG = dict(
    in_rows=tf.TensorSpec([None, None], tf.float32),  # [U_in, d] input rows (W_in) the step touches
    out_rows=tf.TensorSpec([None, None], tf.float32),  # [U_out, d] output rows (W_out) the step touches
    ctx=tf.TensorSpec([None, None], tf.int32),  # [n, 2*window] row of each context word in in_rows, -1: none
    tgt=tf.TensorSpec([None, None], tf.int32),  # [n, 1+negative] row in out_rows: centre, then noise words
    alpha=tf.TensorSpec([], tf.float32),  # learning rate of this step
)


def _common(in_rows, ctx, tgt, out_rows):
    cmask = tf.cast(ctx >= 0, tf.float32)  # [n, 2w]
    c = tf.gather(in_rows, tf.maximum(ctx, 0)) * cmask[..., None]  # [n, 2w, d]
    o = tf.gather(out_rows, tgt)  # [n, 1+K, d]
    # word2vec.c skips a noise word that equals the centre: mask it.
    tmask = tf.concat([tf.ones_like(tgt[:, :1], tf.float32),
                       tf.cast(tf.not_equal(tgt[:, 1:], tgt[:, :1]), tf.float32)], axis=1)  # [n, 1+K]
    labels = tf.concat([tf.ones_like(tgt[:, :1], tf.float32), tf.zeros_like(tgt[:, 1:], tf.float32)], axis=1)
    return cmask, c, o, tmask, labels


def _loss(logits, labels, mask):
    # -log sigmoid(x) for the centre, -log sigmoid(-x) for noise words; reported, not differentiated.
    return -tf.reduce_sum(mask * (labels * tf.math.log_sigmoid(logits)
                                  + (1 - labels) * tf.math.log_sigmoid(-logits)))


@tf.function(input_signature=[_SIG[k] for k in ("in_rows", "out_rows", "ctx", "tgt", "alpha")])
def skipgram(in_rows, out_rows, ctx, tgt, alpha):
    """Skip-gram: every context row predicts the centre. Returns (d_in, d_out, loss, pairs)."""
    cmask, c, o, tmask, labels = _common(in_rows, ctx, tgt, out_rows)
    logits = tf.einsum("nwd,nkd->nwk", c, o)  # [n, 2w, 1+K]
    mask = cmask[:, :, None] * tmask[:, None, :]
    g = (labels[:, None, :] - tf.sigmoid(logits)) * alpha * mask
    d_c = tf.einsum("nwk,nkd->nwd", g, o)  # word2vec.c's neu1e, per context word
    d_o = tf.einsum("nwk,nwd->nkd", g, c)
    d_in = tf.math.unsorted_segment_sum(tf.reshape(d_c, [-1, tf.shape(c)[-1]]),
                                        tf.reshape(tf.maximum(ctx, 0), [-1]), tf.shape(in_rows)[0])
    d_out = tf.math.unsorted_segment_sum(d_o, tgt, tf.shape(out_rows)[0])
    return d_in, d_out, _loss(logits, labels[:, None, :], mask), tf.reduce_sum(cmask)


@tf.function(input_signature=[_SIG[k] for k in ("in_rows", "out_rows", "ctx", "tgt", "alpha")])
def cbow(in_rows, out_rows, ctx, tgt, alpha):
    """CBOW: the mean of the context rows predicts the centre. Returns (d_in, d_out, loss, centres)."""
    cmask, c, o, tmask, labels = _common(in_rows, ctx, tgt, out_rows)
    count = tf.maximum(tf.reduce_sum(cmask, axis=1, keepdims=True), 1.0)
    h = tf.reduce_sum(c, axis=1) / count  # [n, d]
    logits = tf.einsum("nd,nkd->nk", h, o)
    g = (labels - tf.sigmoid(logits)) * alpha * tmask
    d_h = tf.einsum("nk,nkd->nd", g, o)
    # As word2vec.c: each context word receives the whole hidden-layer update (not divided by the count).
    d_c = d_h[:, None, :] * cmask[..., None]
    d_o = g[..., None] * h[:, None, :]
    d_in = tf.math.unsorted_segment_sum(tf.reshape(d_c, [-1, tf.shape(c)[-1]]),
                                        tf.reshape(tf.maximum(ctx, 0), [-1]), tf.shape(in_rows)[0])
    d_out = tf.math.unsorted_segment_sum(d_o, tgt, tf.shape(out_rows)[0])
    return d_in, d_out, _loss(logits, labels, tmask), tf.cast(tf.shape(tgt)[0], tf.float32)
