"""Queries on the sharded model: each rank scores its own rows, the top-k lists are merged on rank 0.

No rank gathers the matrix: per query, one row travels to every rank and k (score, word) pairs come back.
:func:`load` builds the same sharded model from a word2vec file, each rank keeping only its own rows
(hvd_w2v.evaluate scores analogies and word similarities on it).
"""
import numpy as np


class ShardedVectors:
    """Unit-normalised input vectors of this rank's rows, with their words (bytes, local row order)."""

    def __init__(self, comm, plan, vocab, w_in):
        self.comm, self.plan, self.vocab = comm, plan, vocab
        norms = np.linalg.norm(w_in, axis=1, keepdims=True)
        self.unit = w_in / np.maximum(norms, 1e-12)
        self.words = vocab.row_words
        self._folds = None

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

    def rows(self, ids):
        """The unit vectors of ``ids`` on every rank (their owners contribute them). Collective."""
        out = np.zeros((len(ids), self.unit.shape[1]), np.float32)
        for j, i in enumerate(ids):
            if i >= 0 and self.plan.owner(i) == self.comm.rank:
                out[j] = self.unit[self.plan.local_row(i)]
        # Horovod: a dense sum in which each query row has exactly one non-zero contributor, its owner.
        return self.comm.allreduce_dense(out)

    def most_similar(self, queries, topn=10, exclude=()):
        """Top-``topn`` (word, cosine) by similarity to each query vector; exact, merged over ranks.

        ``queries`` float32[q, d]; ``exclude[j]`` is a set of ids left out of query j's answers.
        Returns the lists on rank 0 (None elsewhere). Collective.
        """
        return self.top(self.unit @ np.asarray(queries, np.float32).T, topn, exclude)

    def top(self, scores, topn=10, exclude=()):
        """The ``topn`` best (score, word) of each column of ``scores`` (float[this rank's rows, q]: any score
        of this rank's rows), merged over ranks; ties go to the lower id, so the answer does not depend on the
        rank count. ``exclude[j]``: ids left out of column j. Lists on rank 0, None elsewhere. Collective."""
        my_ids = self.plan.ids(self.comm.rank)
        local = []
        for j in range(scores.shape[1]):
            s = np.array(scores[:, j], np.float64)
            if j < len(exclude) and exclude[j]:
                s[np.isin(my_ids, list(exclude[j]))] = -np.inf
            best = np.argsort(-s, kind="stable")[:topn]  # stable: equal scores keep local (= id) order
            local.append([(float(s[k]), int(my_ids[k]), self.words[k]) for k in best if np.isfinite(s[k])])
        parts = self.comm.allgather(local)
        if self.comm.rank != 0:
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
            from .errors import UserError

            raise UserError(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
        words = sorted({w for q in queries for w in q})
        ids = dict(zip(words, self.ids(words)))
        known = [j for j, q in enumerate(queries) if all(ids[w] >= 0 for w in q)]  # the same on every rank
        found = []
        if known:
            rows = self.rows([ids[w] for j in known for w in queries[j]]).reshape(len(known), 3, -1)
            a, b, c = rows[:, 0], rows[:, 1], rows[:, 2]
            if method == "3cosadd":
                direction = b - a + c
                direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-12)
                scores = self.unit @ direction.T
            else:
                shift = lambda m: (1 + self.unit @ m.T) / 2  # noqa: E731
                scores = shift(b) * shift(c) / (shift(a) + 1e-6)
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
    from .errors import UserError
    from .shard import RowPlan
    from .vocab import hash64, hash_owner

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
