"""Training examples of one step's slice of the corpus: subsampled windows and their noise words.

Everything here is a function of global stream positions and (seed, epoch), never of the rank: a centre at
position p has the same context and negatives whichever rank builds it, which is what makes training on
P ranks equal training on one.
"""
from dataclasses import dataclass, replace

import numpy as np

from ..kernels import native
from ..text.encode import SENTENCE_END
from . import rng


@dataclass
class Batch:
    """Examples for the centres of positions ``[lo, hi)``; ``n`` centres, word ids throughout."""

    centres: np.ndarray  # int64[n]
    contexts: np.ndarray  # int64[n, 2*window]: kept neighbours, -1 where there is none
    negatives: np.ndarray  # int64[n, negative]: noise words, shared by the centre's whole window
    # Hierarchical softmax's targets in place of the centre and its noise words (with_paths): each centre's path
    # in the Huffman tree, root first, as inner-node ids (-1 past its end), and the path's codes.
    path: np.ndarray = None  # int64[n, depth]
    codes: np.ndarray = None  # int8[n, depth]

    def targets(self):
        """int64[n, k]: the ids of the output rows each centre trains, -1 for none: its path's inner nodes
        (hierarchical softmax), or the centre then its noise words."""
        if self.path is not None:
            return self.path
        return np.concatenate((self.centres[:, None], self.negatives), axis=1)

    def __len__(self):
        return len(self.centres)


def read_around(stream, cfg, lo, hi):
    """The ids that centres in ``[lo, hi)`` may read: ``(ids, base)``, positions ``base`` (``cfg.context_span``
    before ``lo``, at least 0) to ``context_span`` past ``hi``."""
    base = max(lo - cfg.context_span, 0)
    return stream.read(base, hi + cfg.context_span), base


def builder_keys(cfg, epoch):
    """The compiled builder's rng keys of ``epoch``: (keep, window, noise)."""
    return [rng.key(cfg.seed, which, epoch) for which in (rng.KEEP, rng.WINDOW, rng.NOISE)]


def with_paths(batch, vocab, cfg):
    """``batch`` with its centres' Huffman paths and codes (hierarchical softmax: ``cfg.hs``), or as it is."""
    if not cfg.hs:
        return batch
    path, codes = vocab.runs.tree.paths(batch.centres)
    return replace(batch, path=path, codes=codes)


def build(stream, vocab, cfg, epoch, lo, hi, threads=1):
    """The examples whose centre lies in ``[lo, hi)``, built on ``threads`` threads by the compiled builder
    (the numpy fallback: one); with ``cfg.hs``, their Huffman paths (:func:`with_paths`).

    Subsampling as word2vec: an occurrence is dropped with probability ``1 - keep[id]``, before windows are
    formed, so windows reach over dropped words. The window of each centre is reduced to ``b`` drawn in
    ``[1, window]``; context is the ``b`` nearest kept words on each side, within the sentence and within
    ``cfg.context_span`` raw positions (the span only bounds what a rank reads around its slice).
    """
    return with_paths(_examples(stream, vocab, cfg, epoch, lo, hi, threads), vocab, cfg)


def _examples(stream, vocab, cfg, epoch, lo, hi, threads, noise=None):
    """:func:`build`'s examples, before any paths; noise words from ``noise`` (a vocab.NoiseGroup; None: every
    word)."""
    span, window = cfg.context_span, cfg.window
    ids, base = read_around(stream, cfg, lo, hi)
    lib = native.example_builder()
    if lib is not None and noise is None:  # the same examples, bit for bit, in one pass (batches_kernel.cc)
        return Batch(*native.build_examples(lib, ids, base, lo, hi, builder_keys(cfg, epoch), window, span,
                                            cfg.negative, vocab.runs, threads))
    ids = ids.astype(np.int64)
    pos = base + np.arange(len(ids), dtype=np.int64)
    word = ids >= 0
    keep = word & (rng.uniform(cfg.seed, rng.KEEP, epoch, pos) < vocab.keep(np.where(word, ids, 0)))
    sentence = np.cumsum(ids == SENTENCE_END)

    kept = np.flatnonzero(keep)
    kpos, kid, ksent = pos[kept], ids[kept], sentence[kept]
    centre = np.flatnonzero((kpos >= lo) & (kpos < hi))
    if len(centre) == 0:
        return _empty(cfg)
    cpos = kpos[centre]
    reduced = 1 + (rng.uniform(cfg.seed, rng.WINDOW, epoch, cpos) * window).astype(np.int64)
    offsets = np.concatenate((np.arange(-window, 0), np.arange(1, window + 1)))
    nb = centre[:, None] + offsets[None, :]
    inside = (nb >= 0) & (nb < len(kept))
    nb = np.clip(nb, 0, len(kept) - 1)
    ok = (inside & (np.abs(offsets)[None, :] <= reduced[:, None])
          & (ksent[nb] == ksent[centre][:, None]) & (np.abs(kpos[nb] - cpos[:, None]) <= span))
    contexts = np.where(ok, kid[nb], -1)
    has_context = ok.any(axis=1)
    cpos, contexts = cpos[has_context], contexts[has_context]
    draw = vocab.draw_noise if noise is None else noise.draw
    negatives = draw(rng.uniform(cfg.seed, rng.NOISE, epoch, cpos[:, None], np.arange(cfg.negative)))
    return Batch(kid[centre][has_context], contexts, negatives)


def build_ranges(stream, vocab, cfg, epoch, ranges, threads=1, scratch=None, noise=None):
    """:func:`build` of several ranges of centres ``[(lo, hi), ...]``: one Batch of their examples, range after
    range, and each range's count (int64[R]); range r's noise words drawn from noise group ``noise[r]`` (a
    (group, groups, head) key of vocab.CountRuns.noise_group; None: every word for all). With at least as many ranges as ``threads``, or noise groups, the compiled builder
    builds a range a thread in one call (a rank's shards of a few positions each: localsgd), into ``scratch``'s
    arrays where given (native.Scratch: the Batch lasts until the next call with it); else each range in turn,
    on every thread (numpy: on one). The same examples either way."""
    lib = native.example_builder()
    if lib is not None and (len(ranges) >= threads or noise is not None):
        around = [read_around(stream, cfg, lo, hi) for lo, hi in ranges]
        *made, counts = native.build_ranges(lib, [ids for ids, _ in around], [base for _, base in around],
                                            [lo for lo, _ in ranges], [hi for _, hi in ranges],
                                            builder_keys(cfg, epoch), cfg.window, cfg.context_span, cfg.negative,
                                            vocab.runs, threads, scratch, noise)
        return with_paths(Batch(*made), vocab, cfg), counts
    groups = [None] * len(ranges) if noise is None else [vocab.runs.noise_group(*key) for key in noise]
    parts = [_examples(stream, vocab, cfg, epoch, lo, hi, threads, group) for (lo, hi), group in zip(ranges, groups)]
    fields = ("centres", "contexts", "negatives")
    batch = Batch(*(np.concatenate([getattr(p, f) for p in parts]) for f in fields)) if parts else _empty(cfg)
    return with_paths(batch, vocab, cfg), np.array([len(p) for p in parts], np.int64)


def _empty(cfg):
    return Batch(np.zeros(0, np.int64), np.zeros((0, 2 * cfg.window), np.int64),
                 np.zeros((0, cfg.negative), np.int64))
