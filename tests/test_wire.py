"""The wire (wire.py): bfloat16's rounding, compiled and in numpy, and what a rank sends, keeps and receives."""
import numpy as np
import pytest

from hvd_w2v.kernels import native
from hvd_w2v.parallel import wire


def values():
    """float32 over the whole range (normal, subnormal, signed zeros, infinities, NaNs) and the ties of
    rounding to 7 mantissa bits, both ways."""
    g = np.random.default_rng(0)
    spread = (g.standard_normal(50000) * 10.0 ** g.integers(-45, 38, 50000)).astype(np.float32)
    ties = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20], np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, 1e-45], np.float32)
    return np.concatenate((spread, ties, special))


def test_bfloat16_rounds_to_nearest_even_and_the_kernel_agrees_bit_for_bit():
    x = values()
    bits = wire.to_bf16(x)
    back = wire.from_bf16(bits)
    assert back[-11:-7].tolist() == [1.0, 1 + 2 ** -6, -1.0, 1 + 2 ** -7]  # ties to even; over a tie: up
    assert np.isnan(back[-3]) and back[-5:-3].tolist() == [np.inf, -np.inf] and np.signbit(back[-6])
    finite = np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).tiny) & (np.abs(back) < np.inf)
    assert np.max(np.abs(back[finite] - x[finite]) / np.abs(x[finite])) <= 2 ** -8
    assert wire.to_bf16(back).tolist() == bits.tolist()  # exact once rounded
    assert native.row_copies() is not None, native.unavailable("rows_kernel")
    for threads in (1, 3):
        carrier = wire.BFloat16(threads)
        sent = carrier.encode(x.reshape(1, -1))
        assert sent.dtype == np.uint16 and sent.tobytes() == bits.tobytes()
        got = np.empty((1, len(x)), np.float32)
        carrier.decode(sent, got)
        assert got.tobytes() == back.tobytes()
        again = x.copy()
        carrier.round(again)
        assert again.tobytes() == back.tobytes()


@pytest.mark.parametrize("mode", ["compiled", "numpy"])
def test_a_rank_takes_and_sends_in_the_wire_s_form_and_owners_add_it_as_float32_would(mode, monkeypatch):
    """bfloat16 rows taken and updates sent; the owners' adds of bfloat16 blocks give the bytes of float32
    blocks holding the same values (widening is exact), on any thread count."""
    if mode == "numpy":  # the fallbacks, where the library cannot be built
        monkeypatch.setattr(native, "row_copies", lambda: None)
    g = np.random.default_rng(1)
    table = g.standard_normal((50, 8)).astype(np.float32)
    rows = g.integers(0, 50, 30)
    carrier = wire.BFloat16(2)
    taken = carrier.empty((30, 8))
    carrier.take(table, rows, taken)
    assert taken.tobytes() == wire.to_bf16(table[rows]).tobytes()
    with pytest.raises(IndexError):
        carrier.take(table, np.append(rows[:-1], 50), taken)
    out, own = np.full((30, 8), 7.0, np.float32), slice(10, 20)
    carrier.decode(taken, out, own)
    assert (out[own] == 7).all() and out[20:].tobytes() == wire.from_bf16(taken[20:]).tobytes()
    rounded = table[rows[own]].copy()
    carrier.round(rounded)
    assert rounded.tobytes() == wire.from_bf16(taken[own]).tobytes()
    # three sources' updates of rows they share, as an owner receives them
    keys = np.concatenate([g.choice(40, 25, replace=False) for _ in range(3)]).astype(np.int64)
    updates = g.standard_normal((75, 8)).astype(np.float32)
    sent = carrier.encode(updates)
    assert sent.tobytes() == wire.to_bf16(updates).tobytes()
    widened, sgd = wire.from_bf16(sent), g.integers(1, 5, 75).astype(np.float32)
    for threads in (1, 3):
        for add in (lambda t, b: native.add_sources(t, keys, native.Blocks(b, [25] * 3), sgd, 2.0,
                                                    np.zeros(50, np.float32), threads),
                    lambda t, b: native.merge_sources(t, keys, native.Blocks(b, [25] * 3), sgd, 2.0, 0.5, threads)):
            want, got = table.copy(), table.copy()
            add(want, widened)
            add(got, sent)
            assert got.tobytes() == want.tobytes() and not np.array_equal(got, table)
    # float32 leaves everything as it is
    plain = wire.of("float32")
    kept = table[rows].copy()
    assert plain.encode(kept) is kept and plain.receiver(out) is out
    plain.round(kept)
    assert kept.tobytes() == table[rows].tobytes()
