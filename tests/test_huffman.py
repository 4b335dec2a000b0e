"""The Huffman tree built on the counts' runs (text/huffman.py) is word2vec.c's CreateBinaryTree's, word for
word: the same code lengths, codes and points (in the q numbering, root 0), built in O(runs)."""
import numpy as np
import pytest

from hvd_w2v.text.huffman import Tree
from hvd_w2v.text.vocab import CountRuns


def create_binary_tree(cn):
    """word2vec.c's CreateBinaryTree on per-word counts ``cn`` (descending): [(codelen, code, point)] by word,
    point in word2vec.c's numbering (inner node a)."""
    v = len(cn)
    count = list(cn) + [10 ** 15] * v
    binary, parent = [0] * (2 * v), [0] * (2 * v)
    pos1, pos2 = v - 1, v
    for a in range(v - 1):
        mins = []
        for _ in range(2):
            if pos1 >= 0 and count[pos1] < count[pos2]:
                mins.append(pos1)
                pos1 -= 1
            else:
                mins.append(pos2)
                pos2 += 1
        count[v + a] = count[mins[0]] + count[mins[1]]
        parent[mins[0]] = parent[mins[1]] = v + a
        binary[mins[1]] = 1
    words = []
    for a in range(v):
        b, code, point = a, [], []
        while True:
            code.append(binary[b])
            point.append(b)
            b = parent[b]
            if b == 2 * v - 2:
                break
        i = len(code)
        w_code, w_point = [0] * i, [0] * (i + 1)
        w_point[0] = v - 2
        for b in range(i):
            w_code[i - b - 1] = code[b]
            w_point[i - b] = point[b] - v
        words.append((i, w_code, w_point[:i]))
    return words


def as_runs(cn):
    """(counts, starts) of per-word counts ``cn`` (descending)."""
    cn = np.asarray(cn, np.int64)
    first = np.flatnonzero(np.r_[True, cn[1:] != cn[:-1]])
    return cn[first], np.r_[first, len(cn)]


def check(cn):
    """Tree of ``cn`` against the reference, every word; returns the tree."""
    tree = Tree(*as_runs(cn))
    v = len(cn)
    expected = create_binary_tree(cn)
    points, codes = tree.paths(np.arange(v))
    lengths = tree.lengths(np.arange(v))
    assert tree.size == v
    assert tree.depth == max(length for length, _, _ in expected) == points.shape[1] == codes.shape[1]
    assert points.dtype == np.int64 and codes.dtype == np.int8
    for w, (length, code, point) in enumerate(expected):
        assert lengths[w] == length
        assert codes[w, :length].tolist() == code, w
        assert points[w, :length].tolist() == [v - 2 - p for p in point], w
        assert (points[w, length:] == -1).all() and (codes[w, length:] == 0).all()
    assert points[:, 0].tolist() == [0] * v  # the root
    return tree


def test_paths_past_the_head_table_are_walked_alike(monkeypatch):
    """Ids past huffman.HEAD are walked up the segments at each call, the others read from the table: the same
    paths, in the order asked, whichever mix a call asks for."""
    from hvd_w2v.text import huffman

    monkeypatch.setattr(huffman, "HEAD", 37)
    rng = np.random.default_rng(5)
    tree = check(np.sort(rng.zipf(1.3, 300))[::-1])
    ids = rng.integers(0, 300, 500)
    for asked in (ids, ids[ids < 37], ids[ids >= 37]):
        points, codes = tree.paths(asked)
        walked = tree._paths(asked)
        assert np.array_equal(points, walked[0]) and np.array_equal(codes, walked[1])
    assert tree.head_bytes == 37 * tree.depth * 5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_zipf_counts_with_many_ties(seed):
    raw = np.random.default_rng(seed).zipf(1.3, 2000)
    tree = check(np.sort(np.minimum(raw, 10 ** 6))[::-1])
    assert tree.segments < 2000


@pytest.mark.parametrize("v", [2, 3, 7, 1024, 1025])
def test_all_counts_equal(v):
    check([5] * v)


def test_all_counts_distinct():
    check(np.arange(300, 0, -1))
    check(np.sort(np.random.default_rng(4).choice(10 ** 9, 500, replace=False) + 1)[::-1])


@pytest.mark.parametrize("cn", [[8, 4, 2, 1, 1], [4, 4, 2, 2, 1, 1, 1, 1], [16, 8, 8, 4, 2, 2, 1, 1, 1],
                                [34, 21, 13, 8, 5, 3, 2, 1, 1], [13, 8, 5, 3, 2, 2, 1, 1, 1, 1]])
def test_ties_between_leaves_and_inner_nodes(cn):
    check(cn)


@pytest.mark.parametrize("cn", [[1, 1], [2, 1], [1000, 1], [1, 1, 1], [2, 1, 1], [3, 2, 1], [2, 2, 1], [5, 1, 1]])
def test_small(cn):
    check(cn)


def test_run_heavy_counts_hold_few_segments():
    lengths = np.random.default_rng(5).integers(1, 8000, 50)
    lengths = np.r_[lengths[:-1], 200_000 - lengths[:-1].sum()]
    assert lengths[-1] > 0
    counts = np.arange(50, 0, -1) * 7 + 3
    tree = Tree(counts, np.r_[0, np.cumsum(lengths)])
    assert tree.size == 200_000 and tree.segments < 2000
    small = np.repeat(counts, np.maximum(lengths // 10, 1))  # the same shape, small enough for the reference
    assert check(small).segments < 2000


def test_of_count_runs_and_a_slice_of_ids():
    counts, lengths = [900, 40, 7, 2, 1], [1, 3, 10, 30, 100]
    tree = Tree.of(CountRuns(counts, lengths, 1e-3))
    cn = np.repeat(counts, lengths)
    expected = check(cn)
    assert tree.size == 144 and tree.depth == expected.depth
    ids = np.array([143, 0, 5, 5, 77])
    points, codes = tree.paths(ids)
    all_points, all_codes = expected.paths(np.arange(144))
    assert (points == all_points[ids]).all() and (codes == all_codes[ids]).all()


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="at least 2 words"):
        Tree([5], [0, 1])
    with pytest.raises(ValueError, match="at least 2 words"):
        Tree([], [0])
    with pytest.raises(ValueError, match="descending"):
        Tree([3, 5], [0, 1, 2])
    with pytest.raises(ValueError, match="descending"):
        Tree([3, 3], [0, 1, 2])
    with pytest.raises(ValueError):
        Tree([3, 2], [0, 2, 2])  # an empty run
