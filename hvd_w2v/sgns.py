"""The loss and its updates: skip-gram and CBOW with negative sampling, in TensorFlow. Knows nothing of ranks.

Batched as Intel's pWord2Vec ("HogBatch"): each centre's output rows (the centre itself, then its
``negative`` noise words, shared by the whole window) meet all its context rows in one small matrix product.
Updates follow word2vec.c exactly: ``g = (label - sigmoid(x . y)) * alpha`` is *added* (gradient ascent on
the log-likelihood); every row's updates from one step are computed from the same snapshot and summed.

Index space: ``ctx`` and ``tgt`` index ``rows``, the step's table of unique rows. A W_in row (a context word)
and a W_out row (a centre or noise word) are different rows of it, even for the same word.
"""
import tensorflow as tf

_SIG = [
    tf.TensorSpec([None, None], tf.float32),  # rows [U, d]: every row the step touches, W_in and W_out
    tf.TensorSpec([None, None], tf.int32),  # ctx [n, 2*window]: row of each context word, -1 where none
    tf.TensorSpec([None, None], tf.int32),  # tgt [n, 1+negative]: row of the centre, then of its noise words
    tf.TensorSpec([], tf.float32),  # alpha: the learning rate of this step
]


def _common(rows, ctx, tgt):
    cmask = tf.cast(ctx >= 0, tf.float32)  # [n, 2w]
    ctx = tf.maximum(ctx, 0)  # masked slots read row 0 and add zeros (with zero count) to it
    c = tf.gather(rows, ctx) * cmask[..., None]  # [n, 2w, d]
    o = tf.gather(rows, tgt)  # [n, 1+K, d]
    # word2vec.c skips a noise word that equals the centre: mask it.
    tmask = tf.concat([tf.ones_like(tgt[:, :1], tf.float32),
                       tf.cast(tf.not_equal(tgt[:, 1:], tgt[:, :1]), tf.float32)], axis=1)  # [n, 1+K]
    labels = tf.concat([tf.ones_like(tgt[:, :1], tf.float32), tf.zeros_like(tgt[:, 1:], tf.float32)], axis=1)
    return ctx, cmask, c, o, tmask, labels


def _loss(logits, labels, mask):
    # -log sigmoid(x) for the centre, -log sigmoid(-x) for noise words; reported, not differentiated.
    return -tf.reduce_sum(mask * (labels * tf.math.log_sigmoid(logits)
                                  + (1 - labels) * tf.math.log_sigmoid(-logits)))


def _updates(rows, ctx, d_c, c_count, tgt, d_o, o_count):
    """Sum the per-slot updates into their rows, one segment sum for both matrices: float32[U, d + 1], the
    last column counting the word2vec.c SGD updates each row sums (the owners' update rule needs it)."""
    d = tf.shape(rows)[1]
    slots = tf.concat([tf.reshape(ctx, [-1]), tf.reshape(tgt, [-1])], axis=0)
    values = tf.concat([tf.concat([tf.reshape(d_c, [-1, d]), tf.reshape(c_count, [-1, 1])], axis=1),
                        tf.concat([tf.reshape(d_o, [-1, d]), tf.reshape(o_count, [-1, 1])], axis=1)], axis=0)
    return tf.math.unsorted_segment_sum(values, slots, tf.shape(rows)[0])


@tf.function(input_signature=_SIG)
def skipgram(rows, ctx, tgt, alpha):
    """Skip-gram: every context row predicts the centre. Returns (updates[U, d+1], loss, pairs)."""
    ctx, cmask, c, o, tmask, labels = _common(rows, ctx, tgt)
    logits = tf.einsum("nwd,nkd->nwk", c, o)  # [n, 2w, 1+K]
    mask = cmask[:, :, None] * tmask[:, None, :]
    g = (labels[:, None, :] - tf.sigmoid(logits)) * alpha * mask
    d_c = tf.einsum("nwk,nkd->nwd", g, o)  # word2vec.c's neu1e, per context word
    d_o = tf.einsum("nwk,nwd->nkd", g, c)
    pairs = tf.reduce_sum(cmask, axis=1, keepdims=True)  # an output row is updated once per context word
    updates = _updates(rows, ctx, d_c, cmask, tgt, d_o, tmask * pairs)
    return updates, _loss(logits, labels[:, None, :], mask), tf.reduce_sum(pairs)


@tf.function(input_signature=_SIG)
def cbow(rows, ctx, tgt, alpha):
    """CBOW: the mean of the context rows predicts the centre. Returns (updates[U, d+1], loss, centres)."""
    ctx, cmask, c, o, tmask, labels = _common(rows, ctx, tgt)
    count = tf.maximum(tf.reduce_sum(cmask, axis=1, keepdims=True), 1.0)
    h = tf.reduce_sum(c, axis=1) / count  # [n, d]
    logits = tf.einsum("nd,nkd->nk", h, o)
    g = (labels - tf.sigmoid(logits)) * alpha * tmask
    d_h = tf.einsum("nk,nkd->nd", g, o)
    # As word2vec.c: each context word receives the whole hidden-layer update (not divided by the count).
    d_c = d_h[:, None, :] * cmask[..., None]
    d_o = g[..., None] * h[:, None, :]
    updates = _updates(rows, ctx, d_c, cmask, tgt, d_o, tmask)
    return updates, _loss(logits, labels, tmask), tf.cast(tf.shape(tgt)[0], tf.float32)
