"""gensim's ``KeyedVectors`` over the sharded model: the same names, arguments and answers, on any rank count.

A script run under ``mpi/launch -n N python my.py`` (or srun) calls::

    from hvd_w2v.queries.keyedvectors import load
    kv = load("runs/mine")                 # a run folder, a checkpoint folder or a word2vec file
    kv.most_similar("king", topn=10)       # [("queen", 0.77), ...] on every rank

Every rank keeps only its rows (shard.RowPlan: id i on rank i % P) and every method is collective: all ranks
call it, in the same order, with the same arguments, and each gets the same answer (the ranks' partial
answers travel by mpi4py; no rank gathers the matrix). Methods that need no other rank (``len``,
``vector_size``) are marked so. Words are ``str`` here; the vocabulary holds bytes, decoded as UTF-8 with
``surrogateescape`` so that a word that is not UTF-8 still round-trips. A missing word raises KeyError and
bad input (files, arguments) raises :class:`hvd_w2v.common.errors.UserError`, on every rank alike.

Where the answers differ from gensim's: ties between equal scores go to the lower id (gensim's order among
ties is numpy's argpartition's), so answers do not depend on the rank count; a zero vector has cosine 0 with
everything (gensim divides by its zero norm); p-values are computed without scipy (evaluate.betainc). Each
method's docstring names its own differences.
"""
import itertools
import os
from collections import namedtuple
from collections.abc import Mapping, Sequence
from numbers import Integral

import numpy as np

from ..common.errors import UserError
from .vectors import cosmul, word_bytes as _encode, word_str as _decode

_KEY_TYPES = (str, int, np.integer)  # gensim's: a key is a word or an index
ITER_BLOCK = 65536  # words fetched per collective call when iterating over index_to_key


class Correlation(namedtuple("Correlation", "statistic pvalue")):
    """A correlation and its two-sided p-value: unpacks and indexes as gensim's (scipy's) result pairs."""

    @property
    def correlation(self):  # scipy's older name of the statistic, kept by its results
        return self.statistic


class KeyedVectors:
    """The word vectors of a sharded model with gensim 4's query API (see the module's docstring).

    ``sharded`` is the vectors.ShardedVectors under it: this rank's rows (``sharded.vectors``, float32, as
    stored), their words and the row plan; ``comm`` the job's comm.Comm. There is no ``vectors`` matrix:
    no rank holds it.
    """

    def __init__(self, sharded):
        self.sharded = sharded
        self.comm = sharded.comm
        self.index_to_key = IndexToKey(sharded)
        self.key_to_index = KeyToIndex(sharded)

    @property
    def vectors(self):
        raise AttributeError("KeyedVectors.vectors: no rank holds the whole matrix; kv.sharded.vectors are this "
                             "rank's rows (ids rank, rank + P, ...), kv[word] one word's vector")

    # -- size: local, no other rank needed ----------------------------------------------------------------
    @property
    def vector_size(self):
        """The dimensions of a vector. Local."""
        return self.sharded.dim

    def __len__(self):
        """The vocabulary's size. Local."""
        return self.sharded.plan.vocab_size

    def __str__(self):
        return f"{self.__class__.__name__}<vector_size={self.vector_size}, {len(self)} keys>"

    # -- lookups ------------------------------------------------------------------------------------------
    def _ids(self, keys):
        """The index of each key (a word or an int index; -1 when absent). Collective: one allgather."""
        words = [k for k in keys if isinstance(k, str)]
        found = dict(zip(words, self.sharded.ids([_encode(w) for w in words])))
        n = len(self)
        return [found[k] if isinstance(k, str) else
                int(k) if isinstance(k, (int, np.integer)) and 0 <= k < n else -1 for k in keys]

    def get_index(self, key, default=None):
        """The index (word id, frequency rank) of ``key``, a word or an index; ``default`` when absent, else
        KeyError. Collective."""
        i = self._ids([key])[0]
        if i >= 0:
            return i
        if default is not None:
            return default
        raise KeyError(f"Key '{key}' not present")

    def has_index_for(self, key):
        """Whether ``key`` (a word or an index) is in the vocabulary. Collective."""
        return self._ids([key])[0] >= 0

    def __contains__(self, key):
        """``word in kv``. Collective."""
        return self.has_index_for(key)

    def _rows(self, keys, norm, message="Key '{}' not present"):
        """(float32[len(keys), d] of the keys' vectors, unit length when ``norm``; their ids); KeyError with
        ``message`` for the first missing key. Collective."""
        ids = self._ids(keys)
        for k, i in zip(keys, ids):
            if i < 0:
                raise KeyError(message.format(k))
        return self.sharded.rows(ids, unit=norm), ids

    def get_vector(self, key, norm=False):
        """The vector of ``key`` (float32[d], read-only): W_in's row as stored, or of unit length when
        ``norm``. KeyError when absent. Collective."""
        row = self._rows([key], norm)[0][0]
        row.setflags(write=False)
        return row

    def __getitem__(self, key_or_keys):
        """``kv[word]`` as :meth:`get_vector`; ``kv[[w1, w2]]`` a float32[2, d] array. Collective."""
        if isinstance(key_or_keys, _KEY_TYPES):
            return self.get_vector(key_or_keys)
        return self._rows(list(key_or_keys), norm=False)[0]

    # -- similarity ---------------------------------------------------------------------------------------
    def most_similar(self, positive=None, negative=None, topn=10, clip_start=0, clip_end=None,
                     restrict_vocab=None, indexer=None):
        """The ``topn`` words nearest (cosine) to the mean of the unit vectors of ``positive`` minus those of
        ``negative``: ``[(word, cosine)]``, best first, the same on every rank. Collective.

        As gensim: a key is a word, an index or a vector (float[d], taken as given, not normalised); an item
        ``(key, weight)`` weighs it (default 1 for positive, -1 for negative keys); the weighted mean is
        divided by the sum of |weights| and scaled to unit length; the words and indices given are never
        answers (other case variants may be); ``restrict_vocab`` N searches ids ``[0, N)`` only, else
        ``[clip_start, clip_end)``. ``topn`` None returns all the cosines of that range, float32[n] in id order
        (as gensim), gathered on every rank: 4 bytes a word, not the matrix. KeyError for a missing word.
        ``indexer`` (gensim's approximate search) is not supported: UserError.
        """
        if indexer is not None:
            raise UserError("most_similar: indexer is not supported on the sharded model (the search is exact)")
        if isinstance(topn, Integral):
            if topn < 1:
                return []
        elif topn is not None:
            raise UserError(f"most_similar: topn must be a whole number or None, not {topn!r}")
        start, end = self._clip(clip_start, clip_end, restrict_vocab)
        positive, negative = _ensure_list(positive), _ensure_list(negative)
        keys, weights = [], []
        for item, default in itertools.chain(((p, 1.0) for p in positive), ((n, -1.0) for n in negative)):
            if isinstance(item, (*_KEY_TYPES, np.ndarray)):
                keys.append(item)
                weights.append(default)
            else:
                keys.append(item[0])
                weights.append(float(item[1]))
        if not keys:
            raise UserError("most_similar: give at least one positive or negative key")
        mean, ids = self._mean(keys, weights)
        rows = self.sharded.local_rows(start, end)
        scores = self.sharded.cosines(mean[None, :], rows)
        if topn is None:
            return self._gather_scores(scores[:, 0], rows, start, end)
        found = self.sharded.top(scores, topn, exclude=[set(ids)], rows=rows, everywhere=True)[0]
        return [(_decode(word), score) for score, word in found]

    def _clip(self, clip_start, clip_end, restrict_vocab):
        """The id range ``[start, end)`` most_similar searches, gensim's way (restrict_vocab wins)."""
        n = len(self)
        if restrict_vocab:
            clip_start, clip_end = 0, restrict_vocab
        clip_end = clip_end or n
        for name, value in (("clip_start", clip_start), ("clip_end", clip_end)):
            if not isinstance(value, Integral) or value < 0:
                raise UserError(f"most_similar: {name} must be a whole number >= 0, not {value!r}")
        return int(clip_start), min(int(clip_end), n)

    def _mean(self, keys, weights):
        """(unit float32[d] of the weighted mean of the keys' unit vectors, ids of the keys that are words or
        indices); KeyError for a missing one. Collective."""
        d = self.vector_size
        named = [k for k in keys if not isinstance(k, np.ndarray)]
        rows, ids = self._rows(named, norm=True, message="Key '{}' not present in vocabulary")
        mean, total, slot = np.zeros(d, np.float32), 0.0, iter(range(len(named)))
        for key, w in zip(keys, weights):
            if isinstance(key, np.ndarray):
                if key.shape != (d,):
                    raise UserError(f"most_similar: a vector key must have shape ({d},), not {key.shape}")
                mean += np.float32(w) * key.astype(np.float32)
            else:
                mean += np.float32(w) * rows[next(slot)]
            total += abs(w)
        if total > 0:
            mean /= np.float32(total)
        norm = np.linalg.norm(mean)
        return (mean / norm if norm > 0 else mean), ids

    def _gather_scores(self, scores, rows, start, end):
        """float32[end - start]: every rank's ``scores`` of its local ``rows`` put in id order. Collective."""
        ids = self.sharded.plan.ids(self.comm.rank)[rows]
        out = np.zeros(max(end - start, 0), np.float32)
        # mpi4py: each rank sends the scores of its rows in the range with their ids.
        for part_ids, part in self.comm.allgather((ids, scores.astype(np.float32))):
            out[part_ids - start] = part
        return out

    def similar_by_key(self, key, topn=10, restrict_vocab=None):
        """:meth:`most_similar` of one key. Collective."""
        return self.most_similar(positive=[key], topn=topn, restrict_vocab=restrict_vocab)

    similar_by_word = similar_by_key

    def similar_by_vector(self, vector, topn=10, restrict_vocab=None):
        """:meth:`most_similar` of one vector (float[d]). Collective."""
        return self.most_similar(positive=[vector], topn=topn, restrict_vocab=restrict_vocab)

    def similarity(self, w1, w2):
        """The cosine of two keys' vectors, a float (gensim: a numpy float32). KeyError when absent.
        Collective."""
        a, b = self._rows([w1, w2], norm=True)[0]
        return float(a @ b)

    def distance(self, w1, w2):
        """1 - :meth:`similarity`. Collective."""
        return 1 - self.similarity(w1, w2)

    def most_similar_cosmul(self, positive=None, negative=None, topn=10, restrict_vocab=None):
        """The ``topn`` words best by Levy & Goldberg's 3CosMul, as gensim: the product over ``positive`` of
        ``(1 + cos(x, p)) / 2`` over the product over ``negative`` of ``(1 + cos(x, n)) / 2`` plus 1e-6;
        ``[(word, score)]``, best first, the same on every rank; the words and indices given are never answers.
        A key is a word or an index (its unit vector) or a vector (float[d], as given). ``topn`` None returns every
        word's score, float32[n] in id order. Collective. Where it differs: gensim takes ``restrict_vocab``
        and searches every word; here it searches ids ``[0, restrict_vocab)``; gensim cannot take an index."""
        if isinstance(topn, Integral) and topn < 1:
            return []
        positive, negative = _ensure_list(positive), _ensure_list(negative)
        named = [k for k in positive + negative if not isinstance(k, np.ndarray)]
        rows, ids = self._rows(named, norm=True)
        slot = iter(range(len(named)))
        terms = [[k.astype(np.float32) if isinstance(k, np.ndarray) else rows[next(slot)] for k in keys]
                 for keys in (positive, negative)]
        if not terms[0]:
            raise ValueError("cannot compute similarity with no input")
        start, end = self._clip(0, None, restrict_vocab)
        local = self.sharded.local_rows(start, end)
        scores = cosmul(*[self.sharded.cosines(np.vstack(t), local).T if t else () for t in terms]).astype(np.float32)
        if not topn:
            return self._gather_scores(scores, local, start, end)
        found = self.sharded.top(scores[:, None], topn, exclude=[set(ids)], rows=local, everywhere=True)[0]
        return [(_decode(word), score) for score, word in found]

    def get_mean_vector(self, keys, weights=None, pre_normalize=True, post_normalize=False, ignore_missing=True):
        """The weighted mean of the keys' vectors, as gensim: a key is a word, an index (their vectors of unit
        length when ``pre_normalize``) or a vector (float[d], as given); the weighted sum over the keys found,
        divided by the sum of their |weights| (default 1 each), of unit length when ``post_normalize``. A
        missing word is left out, or KeyError unless ``ignore_missing``; ValueError with no keys, or weights of
        another length. float32[d], the same on every rank. Collective."""
        if len(keys) == 0:
            raise ValueError("cannot compute mean with no input")
        weights = np.ones(len(keys), np.float32) if weights is None else np.asarray(weights, np.float32)
        if len(keys) != weights.shape[0]:
            raise ValueError("keys and weights array must have same number of elements")
        named = [k for k in keys if not isinstance(k, np.ndarray)]
        ids = self._ids(named)
        rows = self.sharded.rows(ids, unit=pre_normalize)
        mean, total, slot = np.zeros(self.vector_size, np.float32), np.float32(0), iter(range(len(named)))
        for key, w in zip(keys, weights):
            if not isinstance(key, np.ndarray):
                i = next(slot)
                if ids[i] < 0:
                    if not ignore_missing:
                        raise KeyError(f"Key '{key}' not present in vocabulary")
                    continue
                key = rows[i]
            mean += w * key.astype(np.float32)
            total += abs(w)
        if total > 0:
            mean = mean / total
        return _unit(mean) if post_normalize else mean

    def n_similarity(self, ws1, ws2):
        """The cosine of the means of two lists of keys' vectors (as stored), as gensim; ZeroDivisionError when a
        list is empty. A float. Collective."""
        if not (len(ws1) and len(ws2)):
            raise ZeroDivisionError("At least one of the passed list is empty.")
        a = _unit(self.get_mean_vector(ws1, pre_normalize=False))
        b = _unit(self.get_mean_vector(ws2, pre_normalize=False))
        return float(a @ b)

    def rank_by_centrality(self, words, use_norm=True):
        """``[(cosine, word)]`` of the words in the vocabulary among ``words`` with the unit mean of their
        vectors (of unit length when ``use_norm``), most central first, as gensim (which logs the words left
        out); ValueError when none is known. Collective."""
        words = list(words)
        found = [(w, i) for w, i in zip(words, self._ids(words)) if i >= 0]
        if not found:
            raise ValueError("cannot select a word from an empty list")
        used = [w for w, _ in found]
        vectors = self.sharded.rows([i for _, i in found], unit=use_norm)
        mean = self.get_mean_vector(list(vectors), post_normalize=True)
        return sorted(zip((vectors @ mean).tolist(), used), reverse=True)

    def doesnt_match(self, words):
        """The word of ``words`` farthest from their mean (:meth:`rank_by_centrality`'s last). Collective."""
        return self.rank_by_centrality(words)[-1][1]

    def closer_than(self, key1, key2):
        """The words nearer (cosine) to ``key1`` than ``key2`` is, ``key1`` left out, in id order, as gensim.
        KeyError when absent. Collective: every rank's nearer words are gathered (for the count alone,
        :meth:`rank`)."""
        local, _ = self._closer(key1, key2)
        words = [self.sharded.words[int(k)] for k in local]
        parts = self.comm.allgather((self.sharded.plan.ids(self.comm.rank)[local], words))
        found = sorted((i, w) for ids, ws in parts for i, w in zip(ids.tolist(), ws))
        return [_decode(w) for _, w in found]

    def rank(self, key1, key2):
        """1 + the number of words nearer to ``key1`` than ``key2`` is (:meth:`closer_than`), as gensim; counted
        on each rank and summed, no word gathered. Collective."""
        local, _ = self._closer(key1, key2)
        return self.comm.allreduce(int(len(local))) + 1

    def _closer(self, key1, key2):
        """(this rank's local rows nearer to ``key1`` than ``key2`` is, but ``key1``'s; (id1, id2)). Every row's
        cosine with key1 is computed as gensim's distances are, from the same array, so that ``key2``'s own
        score, which its owner computes, is the bound (sent to every rank). Collective."""
        rows, (id1, id2) = self._rows([key1, key2], norm=True)
        scores = 1 - self.sharded.cosines(rows[:1])[:, 0]  # gensim's distances, float32
        ids = self.sharded.plan.ids(self.comm.rank)
        own = np.flatnonzero(ids == id2)
        bound = self.comm.allreduce(float(scores[own[0]]) if len(own) else -np.inf, "max")
        return np.flatnonzero((scores < np.float32(bound)) & (ids != id1)), (id1, id2)

    # -- evaluation ---------------------------------------------------------------------------------------
    def evaluate_word_analogies(self, analogies, restrict_vocab=300000, case_insensitive=True,
                                dummy4unknown=False, similarity_function="most_similar"):
        """Accuracy on an analogy file (``: section`` lines, then ``a b c d`` lines), as gensim scores it:
        ``(score, sections)``, ``sections`` one ``{"section", "correct": [(a, b, c, d)], "incorrect": [...]}``
        per section and a last one "Total accuracy"; ``score`` that one's accuracy (0.0 with no question).

        Questions with a word outside the first ``restrict_vocab`` words are left out (``dummy4unknown``:
        counted as wrong); ``case_insensitive`` folds words to upper case, the most frequent variant standing
        for each, and the questions are listed folded. The answer is the best id below ``restrict_vocab``
        other than a, b, c and their case variants (gensim looks at its top 5 for one, which differs only
        when five case variants of the inputs come first). ``similarity_function`` "most_similar" (3CosAdd);
        "most_similar_cosmul" scores 3CosMul instead (gensim 4.4 takes the argument but always uses
        most_similar). Bad files raise UserError. Collective (evaluate.analogies).
        """
        from . import evaluate

        methods = {"most_similar": "3cosadd", "most_similar_cosmul": "3cosmul"}
        if similarity_function not in methods:
            raise UserError(f"similarity_function {similarity_function!r}: use most_similar or most_similar_cosmul")
        r = evaluate.analogies(self.sharded, analogies, restrict=restrict_vocab,
                               method=methods[similarity_function], case_insensitive=case_insensitive,
                               dummy4unknown=dummy4unknown)
        sections = r["answers"]
        total = {"section": "Total accuracy",
                 "correct": [q for s in sections for q in s["correct"]],
                 "incorrect": [q for s in sections for q in s["incorrect"]]}
        return r["accuracy"], sections + [total]

    def evaluate_word_pairs(self, pairs, delimiter="\t", encoding="utf8", restrict_vocab=300000,
                            case_insensitive=True, dummy4unknown=False):
        """Correlation of the model's cosines with human scores on a word-pair file, as gensim:
        ``(pearson, spearman, oov_ratio)``; ``pearson`` and ``spearman`` are (statistic, two-sided p-value)
        pairs (:class:`Correlation`), ``oov_ratio`` the pairs with a word outside the first
        ``restrict_vocab`` words, in percent (of all pairs; of the pairs used when ``dummy4unknown`` keeps
        them with a cosine of 0).

        Lines split on ``delimiter`` into exactly three fields, '#' lines skipped, words folded to upper case
        when ``case_insensitive``. The p-values are computed without scipy, which hvd-w2v does not require
        (evaluate.correlation_pvalue; tests/test_keyedvectors.py holds it to scipy.stats' within 1e-9
        relative); statistics are NaN where scipy's are (a constant side), and with fewer than 2 pairs (where
        scipy raises). UserError when no pair can be used (gensim:
        ValueError) or the file is bad. Collective (evaluate.similarity).
        """
        from . import evaluate

        r = evaluate.similarity(self.sharded, pairs, restrict=restrict_vocab, delimiter=delimiter,
                                encoding=encoding, case_insensitive=case_insensitive, dummy4unknown=dummy4unknown)
        if not r["pairs"]:
            raise UserError(f"no valid similarity judgements found in {pairs}: either invalid format or all "
                            f"are out of vocabulary in {self}")
        return (Correlation(r["pearson"], r["pearson_pvalue"]), Correlation(r["spearman"], r["spearman_pvalue"]),
                r["oov_ratio"])

    # -- export -------------------------------------------------------------------------------------------
    def save_word2vec_format(self, fname, fvocab=None, binary=False, total_vec=None, write_header=True,
                             prefix="", append=False, sort_attr="count"):
        """Write the vectors as stored (W_in) in word2vec's format, words in id order, every rank writing its
        own lines into the one file (export.write_word2vec; the file appears complete or not at all).

        Text lines give each value with 6 decimals (word2vec.c's; gensim writes Python's shortest repr);
        binary records end in a newline as word2vec.c's do (gensim writes none; both read either). Only
        gensim's defaults of ``fvocab``, ``total_vec``, ``write_header``, ``prefix``, ``append`` and
        ``sort_attr`` are supported (there are no word counts here; the order is the vocabulary's): other
        values raise UserError, as does a file that cannot be written. Collective.
        """
        from ..parallel.watchdog import io_budget
        from ..store import export

        unsupported = [name for name, value, default in (
            ("fvocab", fvocab, None), ("write_header", write_header, True), ("prefix", prefix, ""),
            ("append", append, False), ("sort_attr", sort_attr, "count")) if value != default]
        if total_vec is not None and total_vec != len(self):
            unsupported.append("total_vec")
        if unsupported:
            raise UserError(f"save_word2vec_format: {', '.join(unsupported)} not supported on the sharded model")
        s = self.sharded
        before = self.comm.watch.enter("export", budget=io_budget(4 * s.vectors.nbytes))  # text: ~10 bytes a float
        try:
            export.write_word2vec(self.comm, os.fspath(fname), s.plan, s.words, s.vectors, binary=binary)
        finally:
            self.comm.watch.leave(before)


class IndexToKey(Sequence):
    """``kv.index_to_key``: the words in id order, without holding them: ``len`` is local, an index or a
    slice asks the words' owners (collective: one allgather per lookup). Iteration fetches ITER_BLOCK words
    a call, so all ranks must iterate to the end together."""

    def __init__(self, sharded):
        self.sharded = sharded

    def __len__(self):
        return self.sharded.plan.vocab_size

    def __getitem__(self, index):
        n = len(self)
        if isinstance(index, slice):
            r = range(n)[index]
            return [_decode(w) for w in self.sharded.words_of(np.arange(r.start, r.stop, r.step))]
        if not isinstance(index, Integral):
            raise TypeError(f"index_to_key indices must be integers or slices, not {type(index).__name__}")
        i = int(index) + (n if index < 0 else 0)
        if not 0 <= i < n:
            raise IndexError("index_to_key index out of range")
        return _decode(self.sharded.words_of([i])[0])

    def __iter__(self):
        for start in range(0, len(self), ITER_BLOCK):
            yield from self[start:start + ITER_BLOCK]

    def __contains__(self, word):
        return isinstance(word, str) and self.sharded.ids([_encode(word)])[0] >= 0

    def index(self, word, start=0, stop=None):
        i = self.sharded.ids([_encode(word)])[0] if isinstance(word, str) else -1
        if i < 0 or i < start or (stop is not None and i >= stop):
            raise ValueError(f"{word!r} is not in index_to_key")
        return i


class KeyToIndex(Mapping):
    """``kv.key_to_index``: word -> id, asked of the word's hash owner (collective: one allgather per
    lookup); ``len`` is local; iteration goes through :class:`IndexToKey` (collective, in blocks)."""

    def __init__(self, sharded):
        self.sharded = sharded

    def __getitem__(self, word):
        i = self.sharded.ids([_encode(word)])[0] if isinstance(word, str) else -1
        if i < 0:
            raise KeyError(word)
        return i

    def __len__(self):
        return self.sharded.plan.vocab_size

    def __iter__(self):
        return iter(IndexToKey(self.sharded))


def _unit(vector):
    """``vector`` (float32[d]) scaled to unit length; a zero vector as it is (gensim's matutils.unitvec)."""
    norm = np.linalg.norm(vector)
    return (vector / norm).astype(np.float32) if norm > 0 else vector


def _ensure_list(value):
    """gensim's: one key or vector as a list of one; the rows of a 2-d array as a list; else as given."""
    if value is None:
        return []
    if isinstance(value, _KEY_TYPES) or (isinstance(value, np.ndarray) and value.ndim == 1):
        return [value]
    if isinstance(value, np.ndarray) and value.ndim == 2:
        return list(value)
    return list(value)


def load(path, step=None, *, stall_timeout=None):
    """Start the ranks (comm.init, once per process) and read a model as :class:`KeyedVectors`, each rank
    keeping only its own rows. Collective.

    ``path``: a word2vec file (binary when it ends in .bin, else text; a word's id is its line's order), a
    run folder (train's --out: its newest good checkpoint, or that of step ``step``) or a checkpoint folder.
    Rank 0 logs on stderr what it read (the checkpoint's step, the words and dimensions, the row plan) and,
    for an earlier checkpoint of a finished run, where the final vectors are (runfolder.note_finished).
    ``stall_timeout``: the stall watchdog's limit in seconds (comm.init; None: automatic, 0: off). UserError
    on every rank for a missing or bad model, or a ``step`` with a word2vec file.
    """
    from ..parallel import comm as comm_mod
    from ..parallel.comm import log
    from . import runfolder, vectors

    path = os.fspath(path)
    if not os.path.isdir(path):
        if step is not None:
            raise UserError("--step chooses a checkpoint of a run folder; the model given is a word2vec file")
        comm = comm_mod.init(stall_timeout=stall_timeout)
        comm.watch.enter("load")
        sharded = vectors.load(comm, path)
        log(comm, f"load: {path}: {sharded.plan.vocab_size:,} words of {sharded.dim} dimensions, {sharded.plan}")
    else:
        comm = comm_mod.init(stall_timeout=stall_timeout)
        comm.watch.enter("load")
        model = runfolder.load(comm, path, step, lambda m: log(comm, m))
        log(comm, f"load: {model.describe()}")
        runfolder.note_finished(comm, model)
        sharded = model.sharded(comm)
    comm.watch.enter("query")
    return KeyedVectors(sharded)
