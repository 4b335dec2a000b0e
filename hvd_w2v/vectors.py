"""Queries on the sharded model: each rank scores its own rows, the top-k lists are merged on rank 0.

No rank gathers the matrix: per query, one row travels to every rank and k (score, word) pairs come back.
"""
import numpy as np


class ShardedVectors:
    """Unit-normalised input vectors of this rank's rows, with their words (bytes, local row order)."""

    def __init__(self, comm, plan, vocab, w_in):
        self.comm, self.plan, self.vocab = comm, plan, vocab
        norms = np.linalg.norm(w_in, axis=1, keepdims=True)
        self.unit = w_in / np.maximum(norms, 1e-12)
        self.words = vocab.row_words

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
        scores = self.unit @ np.asarray(queries, np.float32).T  # [rows, q]
        my_ids = self.plan.ids(self.comm.rank)
        local = []
        for j in range(scores.shape[1]):
            s = scores[:, j].copy()
            if j < len(exclude) and exclude[j]:
                s[np.isin(my_ids, list(exclude[j]))] = -np.inf
            top = np.argsort(-s, kind="stable")[:topn]
            local.append([(float(s[k]), self.words[k]) for k in top if np.isfinite(s[k])])
        parts = self.comm.allgather(local)
        if self.comm.rank != 0:
            return None
        return [sorted((x for p in parts for x in p[j]), key=lambda t: -t[0])[:topn] for j in range(len(local))]

    def neighbors(self, words, topn=10):
        """{word: [(neighbour, cosine), ...]} on rank 0 for the words in the vocabulary. Collective."""
        ids = self.ids(words)
        rows = self.rows(ids)
        known = [j for j, i in enumerate(ids) if i >= 0]
        result = self.most_similar(rows[known], topn, exclude=[{ids[j]} for j in known])
        if result is None:
            return None
        return {words[j]: r for j, r in zip(known, result)}
