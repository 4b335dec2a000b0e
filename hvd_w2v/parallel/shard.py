"""The row plan: which rank owns which word's rows, frozen for a vocabulary size and rank count."""
from dataclasses import dataclass

import numpy as np

from ..common.wording import counted


@dataclass(frozen=True)
class RowPlan:
    """Word id ``i`` (frequency rank) lives on rank ``i % ranks`` at local row ``i // ranks``.

    Round-robin over frequency rank gives every rank an equal share of frequent and rare words (contiguous
    blocks would put every hot word on rank 0); a rank's local rows are one contiguous slice of the
    "row space" ``[lo, hi)`` in rank order. Rows counts differ by at most one between ranks.
    """

    vocab_size: int
    ranks: int

    def owner(self, ids):
        """Owning rank of each id (int64 array)."""
        return np.asarray(ids, dtype=np.int64) % self.ranks

    def local_row(self, ids):
        """Row of each id in its owner's local slice."""
        return np.asarray(ids, dtype=np.int64) // self.ranks

    def local_key(self, keys):
        """Index of each *key* (``2 * id + matrix``: 0 for W_in, 1 for W_out; exchange.py) in its owner's
        interleaved table float32[2 * rows, dim] (loop.ShardedModel.table)."""
        keys = np.asarray(keys, dtype=np.int64)
        if self.ranks == 1:
            return keys  # one rank holds every word in id order: a key is its own index
        return ((keys >> 1) // self.ranks << 1) | (keys & 1)

    def rows(self, rank):
        """How many rows ``rank`` owns."""
        return (self.vocab_size - rank + self.ranks - 1) // self.ranks

    def ids(self, rank):
        """The ids ``rank`` owns, in local row order."""
        return np.arange(rank, self.vocab_size, self.ranks, dtype=np.int64)

    def __str__(self):
        counts = [self.rows(r) for r in range(self.ranks)]
        return (f"RowPlan({self.vocab_size:,} words over {counted(self.ranks, 'rank')}: rows per rank "
                f"{min(counts):,}..{max(counts):,})")
