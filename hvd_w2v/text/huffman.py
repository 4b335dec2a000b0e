"""word2vec.c's Huffman tree (CreateBinaryTree) for hierarchical softmax, built from the counts' runs.

The vocabulary never exists as a per-word array on one rank (V may be 10^8): its counts are runs of equal
counts (vocab.CountRuns). word2vec.c builds the tree by merging two queues: the leaves in ascending count
(ids V-1 down to 0) and the inner nodes in creation order (their counts never decrease). Here the merge runs
on runs, not words: when the queue chosen for the next two picks holds two or more words of one count at
its head, it gives pairs of them in bulk, each pair an inner node of twice the count, all at once. The
tree is kept as those consumptions, *segments* of each queue (the parent and the branch bit of every element
of a segment follow from its offset there), so memory and build time are O(runs) for run-heavy counts
(Zipf-like corpora: a few segments a distinct count), O(V) only when every count differs.

Inner nodes are numbered ``q = V - 2 - a`` for word2vec.c's a-th created node: the root is q = 0 and inner
nodes come in descending count, like word ids, so the most-touched rows have the small indices (the hot rows
replicate small indices; round-robin ownership spreads them) as for the words.
"""
import functools

import numpy as np

HS_MIN_WORDS = 2
# The paths of the most frequent words, most of a step's centres, are kept as a table made on first use (at
# most HEAD x depth x 5 bytes: int32 points, int8 codes); the others' are walked up the segments at each call.
HEAD = 1 << 16


def depth_bound(total):
    """The longest code any tree of positive counts summing to ``total`` can have (the memory plan's, before
    the tree is built): two siblings at the bottom weigh at least 1 each and every inner node above weighs at
    least its child and its sibling, so a leaf at depth d needs a total of at least the Fibonacci number
    F(d + 2)."""
    depth, a, b = 0, 1, 2  # F(depth + 1), F(depth + 2)
    while b <= max(total, 2):
        depth, a, b = depth + 1, b, a + b
    return max(depth, 1)


class Tree:
    """The Huffman tree of ``size`` words whose counts are runs, word2vec.c's exactly (ties go to inner nodes).

    ``counts`` int64[D]: the distinct counts, strictly descending, all positive; ``starts`` int64[D + 1]: run
    r holds ids [starts[r], starts[r + 1]), starts[0] = 0, starts[D] = V (vocab.CountRuns's). ``paths`` gives
    each word's inner nodes from the root (q numbering, root q = 0) and the branch taken at each (word2vec.c's
    point and code); ``depth`` is the longest code. Memory: three int64 a segment, ``segments`` of them.
    """

    def __init__(self, counts, starts):
        counts = np.asarray(counts, np.int64)
        starts = np.asarray(starts, np.int64)
        if starts.ndim != 1 or len(starts) != len(counts) + 1 or (len(starts) and starts[0] != 0):
            raise ValueError("starts must be int64[len(counts) + 1] from 0: each run's first id, then V")
        lengths = np.diff(starts)
        if (lengths < 1).any():
            raise ValueError("every run must hold at least one word (starts strictly ascending)")
        if (np.diff(counts) >= 0).any():
            raise ValueError("ids must be in descending count order: counts strictly descending across runs")
        self.size = int(starts[-1]) if len(starts) else 0  # V
        if self.size < HS_MIN_WORDS:
            raise ValueError("hierarchical softmax needs at least 2 words")
        if counts[-1] < 1:
            raise ValueError("counts must be positive")
        self._build(counts[::-1].tolist(), lengths[::-1].tolist())
        # Depth never grows along the merge's consumption order (a node's parent is created, hence consumed,
        # no later than a later-consumed node's), so the first leaf consumed, id V - 1, is a deepest leaf.
        self.depth = int(self.lengths(np.array([self.size - 1]))[0])

    @classmethod
    def of(cls, runs):
        """The tree of a vocab.CountRuns's counts."""
        return cls(runs.counts, runs.starts)

    @property
    def segments(self):
        """The number of recorded consumptions (both queues): O(runs) for run-heavy counts."""
        return len(self._leaf[0]) + len(self._inner[0])

    def _build(self, leaf_counts, leaf_lengths):
        """word2vec.c's merge, on runs: each pick takes from the leaf queue only when its head count is strictly
        smaller than the inner queue's (or no inner node waits). When the queue picked holds two or more words
        at the head of its head run, the next pick would take from it again (its head count is unchanged; the
        inner nodes made meanwhile, of count 2c > c, join the inner queue's tail), so it gives them in pairs."""
        leaves, inner = _Queue(leaf_counts, leaf_lengths), _Queue([], [])

        def pick():
            if leaves.left() and (not inner.left() or leaves.head() < inner.head()):
                return leaves
            return inner

        a = 0  # word2vec.c's index of the next inner node
        while a < self.size - 1:
            queue = pick()
            if queue.left() >= 2:  # min1 and min2 from this run, pair after pair: bits 0, 1, 0, 1, ...
                k = queue.left() // 2
                inner.append(2 * queue.take(2 * k, a), k)
                a += k
            else:
                c1 = queue.take(1, a)  # min1: bit 0
                c2 = pick().take(1, a, bit=1)  # min2: bit 1
                inner.append(c1 + c2, 1)
                a += 1
        self._leaf, self._inner = leaves.segments(), inner.segments()

    @staticmethod
    def _up(segments, positions):
        """(parent a, bit) of the queue elements at ``positions``."""
        start, origin, base = segments
        s = np.searchsorted(start, positions, side="right") - 1
        offset = positions - origin[s]
        return base[s] + offset // 2, (offset % 2).astype(np.int8)

    def _walk(self, ids):
        """Leaf-first columns of (q, bit) for ``ids`` (q = -1 once a path has reached the root), and lengths."""
        v = self.size
        root = v - 2
        a, bit = self._up(self._leaf, v - 1 - np.asarray(ids, np.int64))
        lengths = np.ones(len(a), np.int64)
        columns = [(v - 2 - a, bit)]
        live = np.flatnonzero(a != root)
        while len(live):
            a, bit = self._up(self._inner, a[a != root])
            lengths[live] += 1
            q = np.full(len(lengths), -1, np.int64)
            code = np.zeros(len(lengths), np.int8)
            q[live], code[live] = v - 2 - a, bit
            columns.append((q, code))
            live = live[a != root]
        return columns, lengths

    def lengths(self, ids):
        """int64[n]: the code length (edges from the root) of each of word ``ids`` (int64[n], 0 <= id < V)."""
        return self._walk(ids)[1]

    def paths(self, ids):
        """Word ``ids`` int64[n] -> (points int64[n, depth], codes int8[n, depth]): row i holds, from the root,
        the inner nodes (q numbering) on the word's path and the branch bit taken at each (word2vec.c's point
        and code), then -1 points and 0 codes past its code length. The first HEAD ids' from a table."""
        ids = np.asarray(ids, np.int64)
        head_points, head_codes = self._head
        inside = ids < len(head_points)
        if inside.all():
            return head_points[ids].astype(np.int64), head_codes[ids]
        walked = self._paths(ids[~inside])
        if not inside.any():
            return walked
        points = np.empty((len(ids), self.depth), np.int64)
        codes = np.empty((len(ids), self.depth), np.int8)
        points[~inside], codes[~inside] = walked
        points[inside], codes[inside] = head_points[ids[inside]], head_codes[ids[inside]]
        return points, codes

    @property
    def head_bytes(self):
        """The bytes of the head table :meth:`paths` makes on first use."""
        return min(self.size, HEAD) * self.depth * (np.dtype(self._point_type).itemsize + 1)

    @property
    def _point_type(self):
        return np.int32 if self.size < 1 << 31 else np.int64

    @functools.cached_property
    def _head(self):
        points, codes = self._paths(np.arange(min(self.size, HEAD), dtype=np.int64))
        return points.astype(self._point_type), codes

    def _paths(self, ids):
        """:meth:`paths`, every id walked up the segments."""
        columns, lengths = self._walk(ids)
        points = np.full((len(ids), self.depth), -1, np.int64)
        codes = np.zeros((len(ids), self.depth), np.int8)
        for j, (q, code) in enumerate(columns):  # leaf-first column j is depth lengths - 1 - j
            rows = np.flatnonzero(lengths > j)
            points[rows, lengths[rows] - 1 - j] = q[rows]
            codes[rows, lengths[rows] - 1 - j] = code[rows]
        return points, codes


class _Queue:
    """One of word2vec.c's two queues as runs of equal counts, its head, and the segments consumed from it."""

    def __init__(self, counts, lengths):
        self.counts, self.lengths = counts, lengths  # Python lists: each run's count and word count
        self.run, self.offset, self.position = 0, 0, 0  # the head: its run, its offset there, its queue position
        self.starts, self.origins, self.bases = [], [], []  # the segments

    def left(self):
        """Words left in the head run (0: the queue is empty)."""
        return self.lengths[self.run] - self.offset if self.run < len(self.lengths) else 0

    def head(self):
        """The head's count."""
        return self.counts[self.run]

    def take(self, n, base, bit=0):
        """Consume ``n`` words of the head run, their parents from inner node ``base`` on: pairs (n even,
        bit 0) or one word of branch ``bit``. Returns their count."""
        count = self.head()
        self.starts.append(self.position)
        self.origins.append(self.position - bit)
        self.bases.append(base)
        self.offset += n
        self.position += n
        if self.offset == self.lengths[self.run]:
            self.run, self.offset = self.run + 1, 0
        return count

    def append(self, count, n):
        """Add ``n`` words of ``count`` at the tail (to the tail run if it has that count and is not consumed)."""
        if self.counts and self.counts[-1] == count and self.run < len(self.counts):
            self.lengths[-1] += n
        else:
            self.counts.append(count)
            self.lengths.append(n)

    def segments(self):
        """(start, origin, base) int64 arrays: the word at queue position p of the last segment starting at or
        before p has parent inner node base + (p - origin) // 2 and branch bit (p - origin) % 2."""
        return tuple(np.array(column, np.int64) for column in (self.starts, self.origins, self.bases))
