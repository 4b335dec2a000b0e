"""The compiled row copies (native.py, rows_kernel.cc) against numpy, and the checks that guard them."""
import numpy as np
import pytest

from hvd_w2v import native


@pytest.fixture(params=["compiled", "numpy"])
def mode(request, monkeypatch):
    if request.param == "compiled" and native.row_copies() is None:
        pytest.skip(f"the row copies cannot be built here: {native._LIBS['rows_kernel']}")
    if request.param == "numpy":
        monkeypatch.setattr(native, "row_copies", lambda: None)
    return request.param


def blocks(seed=0, n=50, d=7, k=20):
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(n, d)).astype(np.float32)
    rows = rng.permutation(n)[:k].astype(np.int64)  # unique, unsorted
    return table, rows, rng.normal(size=(k, d)).astype(np.float32)


def test_take_rows_equals_fancy_indexing(mode):
    table, rows, _ = blocks()
    out = np.empty((len(rows), table.shape[1]), np.float32)
    native.take_rows(table, rows, out)
    assert np.array_equal(out, table[rows])


@pytest.mark.parametrize("scaled", [False, True])
def test_add_rows_equals_fancy_add(mode, scaled):
    table, rows, updates = blocks(1)
    scale = np.linspace(0.1, 1, len(rows)).astype(np.float32) if scaled else None
    expected = table.copy()
    expected[rows] += updates if scale is None else scale[:, None] * updates
    native.add_rows(table, rows, updates, scale)
    # A compiled loop may fuse the multiply and add (one rounding instead of two).
    np.testing.assert_allclose(table, expected, rtol=1e-6, atol=1e-7)


def test_bad_rows_are_refused_before_any_copy():
    if native.row_copies() is None:
        pytest.skip(f"the row copies cannot be built here: {native._LIBS['rows_kernel']}")
    table, rows, updates = blocks(2)
    before = table.copy()
    for bad in (np.append(rows[:-1], len(table)), np.append(rows[:-1], -1)):
        with pytest.raises(IndexError):
            native.add_rows(table, bad, updates)
    with pytest.raises(ValueError):
        native.add_rows(table, rows.astype(np.int32), updates)
    with pytest.raises(ValueError):
        native.take_rows(table, rows, np.empty((len(rows), 3), np.float32))
    assert np.array_equal(table, before)
