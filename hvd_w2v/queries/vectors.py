"""Queries on the sharded model: each rank scores its own rows, the top-k lists are merged over the ranks.

No rank gathers the matrix: per query, one row travels to every rank and k (score, word) pairs come back.
:func:`load` builds the same sharded model from a word2vec file, each rank keeping only its own rows
(evaluate scores analogies and word similarities on it; keyedvectors wraps it in gensim's API).
"""
import numpy as np

from ..store.export import END_BLOCK_BYTES


class ShardedVectors:
    """This rank's rows of W_in as stored (``vectors``, float32[rows, d], local row order), their L2 norms
    (``norms``, float32[rows], floored at 1e-12 so a zero row scores 0 rather than NaN) and words (bytes).

    Cosines are ``vectors @ q / norms`` (:meth:`cosines`), the formula of gensim's ``most_similar``, so no
    unit-length copy of the rows is kept: a rank holds its rows once. ``w_in`` may be a strided view (training's
    interleaved W_in and W_out: loop.ShardedModel.w_in): it is read a block of END_BLOCK_BYTES at a time, never
    copied whole, so the queries at a run's end stay within its memory plan.
    """

    def __init__(self, comm, plan, vocab, w_in):
        self.comm, self.plan, self.vocab = comm, plan, vocab
        self.vectors = w_in if w_in.dtype == np.float32 else w_in.astype(np.float32)
        self.dim = self.vectors.shape[1]
        self.block = max(1, END_BLOCK_BYTES // (4 * max(self.dim, 1)))  # rows read at a time
        self.norms = np.empty(len(self.vectors), np.float32)
        for lo in range(0, len(self.vectors), self.block):
            part = np.ascontiguousarray(self.vectors[lo:lo + self.block])
            self.norms[lo:lo + self.block] = np.maximum(np.linalg.norm(part, axis=1), np.float32(1e-12))
        self.words = vocab.row_words
        self._folds = None

    @property
    def unit(self):
        """A new unit-length copy of this rank's rows, float32[rows, d] (for tests and one-off use)."""
        return self.vectors / self.norms[:, None]

    def cosines(self, queries, rows=None):
        """float32[rows, q]: the cosine of each of this rank's rows (local rows ``rows``, a slice; all by
        default) with each unit query vector ``queries`` float32[q, d]."""
        lo, hi, _ = (slice(None) if rows is None else rows).indices(len(self.vectors))
        queries = np.asarray(queries, np.float32)
        out = np.empty((max(hi - lo, 0), len(queries)), np.float32)
        for a in range(lo, hi, self.block):
            b = min(hi, a + self.block)
            out[a - lo:b - lo] = (np.ascontiguousarray(self.vectors[a:b]) @ queries.T) / self.norms[a:b, None]
        return out

    def local_rows(self, start, end):
        """The slice of this rank's local rows whose ids are in ``[start, end)`` (round-robin: a range)."""
        first = lambda i: -(-(max(i, 0) - self.comm.rank) // self.comm.size)  # noqa: E731 local rows with id < i
        return slice(max(first(start), 0), max(first(min(end, self.plan.vocab_size)), 0))

    @property
    def folds(self):
        """This rank's rows by folded word (:func:`fold`): ``keys[k]`` of local row k, ``rows[key]`` ascending."""
        if self._folds is None:
            keys = [fold(w) for w in self.words]
            rows = {}
            for k, key in enumerate(keys):
                rows.setdefault(key, []).append(k)
            self._folds = (keys, rows)
        return self._folds

    def folded_ids(self, words):
        """Lowest id of a word whose folded form is each word's (or -1): gensim's case-insensitive lookup.

        Asked of the row owners (each knows its rows' words). Collective; same list on all ranks.
        """
        rows = self.folds[1]
        keys = [fold(w) for w in words]
        found = {key: rows[key][0] * self.comm.size + self.comm.rank for key in set(keys) if key in rows}
        merged = {}
        for part in self.comm.allgather(found):
            for key, i in part.items():
                merged[key] = min(i, merged.get(key, i))
        return [merged.get(k, -1) for k in keys]

    def ids(self, words):
        """Word id of each word (or -1), asked of each word's hash owner. Collective; same list on all ranks."""
        found = {w: i for w, i in ((w, self.vocab.lookup.get(w, -1)) for w in words) if i >= 0}
        merged = {}
        for part in self.comm.allgather(found):
            merged.update(part)
        return [merged.get(w, -1) for w in words]

    def rows(self, ids, unit=True):
        """The vectors of ``ids`` (unit length, or as stored when ``unit`` is False) on every rank,
        float32[len(ids), d]; zeros for ids < 0. Collective."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        mine = np.flatnonzero((ids >= 0) & (self.plan.owner(np.maximum(ids, 0)) == self.comm.rank))
        local = self.plan.local_row(ids[mine])
        rows = self.vectors[local] / self.norms[local, None] if unit else self.vectors[local]
        out = np.zeros((len(ids), self.dim), np.float32)
        # mpi4py: each rank sends the rows it owns with their positions; each position has one owner. Not
        # Horovod's dense sum: a Horovod call waits for its next cycle (comm.HOROVOD_CYCLE_MS), a query's cost.
        for positions, part in self.comm.allgather((mine, rows)):
            out[positions] = part
        return out

    def words_of(self, ids):
        """The word (bytes) of each id in ``ids`` (all in ``[0, vocab_size)``) on every rank. Collective."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        mine = np.flatnonzero(self.plan.owner(ids) == self.comm.rank)
        out = [None] * len(ids)
        # mpi4py: each rank sends the words of the ids it owns, with their positions.
        for positions, words in self.comm.allgather((mine, [self.words[k] for k in self.plan.local_row(ids[mine])])):
            for j, w in zip(positions, words):
                out[j] = w
        return out

    def most_similar(self, queries, topn=10, exclude=()):
        """Top-``topn`` (word, cosine) by similarity to each query vector; exact, merged over ranks.

        ``queries`` float32[q, d]; ``exclude[j]`` is a set of ids left out of query j's answers.
        Returns the lists on rank 0 (None elsewhere). Collective.
        """
        return self.top(self.cosines(_unit_rows(queries)), topn, exclude)

    def top(self, scores, topn=10, exclude=(), rows=None, everywhere=False):
        """The ``topn`` best (score, word) of each column of ``scores`` (float[this rank's rows, q]: any score
        of this rank's rows; of local rows ``rows``, a slice, when given), merged over ranks; ties go to the
        lower id, so the answer does not depend on the rank count. ``exclude[j]``: ids left out of column j.
        Lists on rank 0, None elsewhere (on every rank when ``everywhere``). Collective."""
        rows = slice(0, scores.shape[0]) if rows is None else rows
        my_ids = self.plan.ids(self.comm.rank)[rows]
        words = self.words[rows]
        local = []
        for j in range(scores.shape[1]):
            s = np.array(scores[:, j], np.float64)
            if j < len(exclude) and exclude[j]:
                s[np.isin(my_ids, list(exclude[j]))] = -np.inf
            best = np.argsort(-s, kind="stable")[:topn]  # stable: equal scores keep local (= id) order
            local.append([(float(s[k]), int(my_ids[k]), words[k]) for k in best if np.isfinite(s[k])])
        parts = self.comm.allgather(local)  # mpi4py: every rank's bests of every column, to every rank
        if self.comm.rank != 0 and not everywhere:
            return None
        return [[(score, word) for score, _, word in sorted((x for p in parts for x in p[j]),
                                                            key=lambda t: (-t[0], t[1]))[:topn]]
                for j in range(len(local))]

    def analogy(self, queries, topn=10, method="3cosadd"):
        """Answers x of "a is to b as c is to x" for each (a, b, c) of words (bytes, exact spelling).

        ``method`` "3cosadd": cosine of x with b - a + c (of unit vectors), as gensim's
        ``most_similar(positive=[b, c], negative=[a])``; "3cosmul": Levy & Goldberg's
        ``(1+cos(x,b))/2 * (1+cos(x,c))/2 / ((1+cos(x,a))/2 + 1e-6)``, as ``most_similar_cosmul``.
        a, b and c are never answers. Returns on rank 0, per query, ``(answers, missing)``: ``[(score, word)]``
        best first, and the query's words missing from the vocabulary (then no answers); None elsewhere.
        Collective.
        """
        if method not in ("3cosadd", "3cosmul"):
            from ..common.errors import UserError

            raise UserError(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
        words = sorted({w for q in queries for w in q})
        ids = dict(zip(words, self.ids(words)))
        known = [j for j, q in enumerate(queries) if all(ids[w] >= 0 for w in q)]  # the same on every rank
        found = []
        if known:
            rows = self.rows([ids[w] for j in known for w in queries[j]]).reshape(len(known), 3, -1)
            a, b, c = rows[:, 0], rows[:, 1], rows[:, 2]
            if method == "3cosadd":
                scores = self.cosines(_unit_rows(b - a + c))
            else:
                scores = cosmul([self.cosines(b), self.cosines(c)], [self.cosines(a)])
            found = self.top(scores, topn, exclude=[{ids[w] for w in queries[j]} for j in known])
        if self.comm.rank != 0:
            return None
        answers = dict(zip(known, found))
        return [(answers.get(j, []), [w for w in q if ids[w] < 0]) for j, q in enumerate(queries)]

    def neighbors(self, words, topn=10):
        """{word: [(neighbour, cosine), ...]} on rank 0 for the words in the vocabulary. Collective."""
        ids = self.ids(words)
        rows = self.rows(ids)
        known = [j for j, i in enumerate(ids) if i >= 0]
        result = self.most_similar(rows[known], topn, exclude=[{ids[j]} for j in known])
        if result is None:
            return None
        return {words[j]: r for j, r in zip(known, result)}


COSMUL_EPS = 1e-6  # Levy & Goldberg's epsilon, as gensim's most_similar_cosmul


def cosmul(positive, negative=()):
    """Levy & Goldberg's 3CosMul of cosines (float32 arrays of one shape): the product over ``positive`` of
    ``(1 + c) / 2`` over that over ``negative`` plus COSMUL_EPS, as gensim's most_similar_cosmul."""
    shift = lambda c: (1 + c) / 2  # noqa: E731
    score = np.prod([shift(c) for c in positive], axis=0)
    return score / ((np.prod([shift(c) for c in negative], axis=0) if len(negative) else 1) + COSMUL_EPS)


def _unit_rows(x):
    """Each row of float32[q, d] scaled to unit length (a zero row stays zero)."""
    x = np.asarray(x, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), np.float32(1e-12))


def word_bytes(word):
    """A word (str) as the vocabulary's bytes: UTF-8, with surrogateescape so that :func:`word_str` of any
    bytes comes back to them."""
    return word.encode("utf-8", "surrogateescape")


def word_str(word):
    """A vocabulary word (bytes) as str: UTF-8; bytes that are not become lone surrogates (surrogateescape)."""
    return word.decode("utf-8", "surrogateescape")


def fold(word):
    """The case-insensitive key of a word (bytes or str): upper case, as gensim's evaluators fold words."""
    if isinstance(word, bytes):
        word = word.decode("utf-8", "replace")
    return word.upper()


class LoadedVocab:
    """What ShardedVectors needs of a vocabulary, for vectors read from a file (see :func:`load`)."""

    def __init__(self, size, lookup, row_words):
        self.size = size
        self.lookup = lookup  # {word bytes: id} for the words this rank hash-owns (vocab.hash_owner)
        self.row_words = row_words  # [bytes]: words of this rank's rows, local row order


class _Reader:
    """Buffered reads of a word2vec file: up to a delimiter, or an exact number of bytes."""

    CHUNK = 1 << 20

    def __init__(self, f):
        self.f, self.buf, self.pos = f, b"", 0

    def _fill(self):
        more = self.f.read(self.CHUNK)
        self.buf = self.buf[self.pos:] + more
        self.pos = 0
        return bool(more)

    def until(self, delim):
        """Bytes up to ``delim`` (consumed, not returned); None at end of file."""
        while True:
            end = self.buf.find(delim, self.pos)
            if end >= 0:
                out = self.buf[self.pos:end]
                self.pos = end + 1
                return out
            if not self._fill():
                return None

    def exactly(self, n):
        """``n`` bytes, or None when the file ends first."""
        while len(self.buf) - self.pos < n:
            if not self._fill():
                return None
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out


def _read_word2vec(path, keep):
    """Yield (id, word, row or None) for every record of ``path``; rows only for ids where keep(id).

    Raises ValueError with a message on a malformed file. First yields (size, dim) as a header.
    """
    binary = path.endswith(".bin")
    with open(path, "rb") as f:
        r = _Reader(f)
        header = r.until(b"\n")
        try:
            size, dim = (int(x) for x in (header or b"").split())
            if size < 1 or dim < 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"{path} is not a word2vec file: its first line should be '<words> <dimensions>'")
        yield size, dim
        width = 4 * dim
        for i in range(size):
            if binary:
                word = r.until(b" ")
                data = None if word is None else r.exactly(width)
                if data is None:
                    raise ValueError(f"{path} is truncated: it ends in vector {i + 1:,} of {size:,}")
                word = word.lstrip(b"\n")
                if not word:
                    raise ValueError(f"{path} is not a binary word2vec file: vector {i + 1:,} has no word")
                yield i, word, np.frombuffer(data, "<f4").astype(np.float32) if keep(i) else None
            else:
                line = r.until(b"\n")
                if line is None:
                    raise ValueError(f"{path} is truncated: it ends before vector {i + 1:,} of {size:,}")
                parts = line.rstrip(b"\r").split(b" ")
                parts = [p for p in parts if p] if len(parts) != dim + 1 else parts
                if len(parts) != dim + 1:
                    raise ValueError(f"{path} line {i + 2:,}: expected a word and {dim} numbers, "
                                     f"found {len(parts)} fields")
                row = None
                if keep(i):
                    try:
                        row = np.array([float(x) for x in parts[1:]], np.float32)
                    except ValueError:
                        raise ValueError(f"{path} line {i + 2:,}: not a number in the vector of {parts[0]!r}")
                yield i, parts[0], row


def load(comm, path):
    """Read a word2vec file (binary if ``path`` ends in .bin, else text) as a :class:`ShardedVectors`.

    Streamed: every rank reads the file and keeps only the rows it owns under ``RowPlan(V, P)`` (a word's id
    is its record index: our exports are in frequency order) and the ``word -> id`` entries it hash-owns.
    Collective. Raises UserError on every rank for a missing, malformed or truncated file.
    """
    from ..parallel.shard import RowPlan
    from ..text.vocab import hash64, hash_owner

    error, plan, rows, words, lookup = None, None, [], [], {}
    try:
        records = _read_word2vec(path, lambda i: i % comm.size == comm.rank)
        size, dim = next(records)
        plan = RowPlan(size, comm.size)
        for i, word, row in records:
            if hash_owner(hash64(word), comm.size) == comm.rank:
                lookup.setdefault(word, i)
            if row is not None:
                words.append(word)
                rows.append(row)
    except OSError as e:
        error = f"cannot read {path}: {e.strerror}"
    except ValueError as e:
        error = str(e)
    comm.agree(error)
    w = np.stack(rows) if rows else np.zeros((0, dim), np.float32)
    return ShardedVectors(comm, plan, LoadedVocab(size, lookup, words), w)
