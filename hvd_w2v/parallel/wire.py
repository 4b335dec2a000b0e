"""How shard-local SGD's rows and deltas travel between ranks (``--wire``): float32, or bfloat16 at half the bytes.

bfloat16 keeps a float32's sign, its 8 exponent bits and the top 7 of its 23 mantissa bits, rounded to
nearest (ties to even): float32's range, about 3 significant digits. Horovod's ``Compression.fp16`` halves an
allreduce's bytes the same way; bfloat16 rather than float16 because late in a run, where the learning rate
has decayed 250-fold, a super-step's deltas fall below float16's normal range (6e-5) and would lose their
digits there.

What is rounded, on every layout alike (exchange.Exchange puts its own rows and updates in the wire's form
as well as those it sends): the snapshot a shard starts from is its owners' rows rounded; a rank's deltas
(the sum of its shards') are rounded before their owners add them (native.add_sources and merge_sources read
the bfloat16 bits as they arrived). The owners keep their rows in float32 and add in float32, so the rounding
errors do not pile up in the model: each super-step's deltas are off by at most 2^-8 of themselves. The
vectors of one V then differ between layouts by the rounding of each rank's sum as well as by the order of
float32 sums: not the same vectors on every layout, which is why float32 stays the default. The exact step
keeps float32 (its contract is exactness across rank counts).

Why: on a flat vocabulary, whose rows seldom repeat within a super-step, a node's bytes are the rows and
deltas, 4 dim B a row each way; the planner (localplan --wire) shows what half of that buys, and
hvd_w2v/bench/README.md what it costs in quality.
"""
import numpy as np

from ..kernels import native
from ..kernels.native import from_bf16, to_bf16  # noqa: F401 (the wire's names)


def of(name, threads=1):
    """The wire called ``name`` (one of config.WIRES), converting on ``threads`` threads."""
    return (BFloat16 if name == "bfloat16" else Float32)(threads)


class Float32:
    """Rows and deltas as they are: every method leaves them unchanged."""

    name, dtype = "float32", np.dtype(np.float32)

    def __init__(self, threads=1):
        self.threads = threads

    def take(self, table, rows, out):
        """``out[:] = table[rows]`` in the wire's form (``out``: an array of :meth:`empty`; native.take_rows
        rounds into uint16)."""
        native.take_rows(table, rows, out, self.threads)

    def empty(self, shape):
        return np.empty(shape, self.dtype)

    def round(self, values):
        """``values`` (float32) as the wire would deliver them, in place."""

    def receiver(self, out):
        """Where rows bound for ``out`` (float32) arrive: ``out`` itself."""
        return out

    def decode(self, received, out, skip=slice(0, 0)):
        """``out`` (float32) from ``received``, but for its rows ``skip``: nothing to do."""

    def encode(self, values):
        """``values`` (float32) in the wire's form, as they are sent and as their owners add them
        (native.add_sources and merge_sources take either form): themselves."""
        return values


class BFloat16(Float32):
    """Rows and deltas rounded to bfloat16, sent as uint16 (the module's docstring)."""

    name, dtype = "bfloat16", np.dtype(np.uint16)

    def round(self, values):
        lib = native.row_copies()
        if lib is None:
            values[...] = from_bf16(to_bf16(values))
        elif values.size:
            lib.hvd_w2v_round_bf16(_float32(values), values.size, self.threads)

    def receiver(self, out):
        return np.empty(out.shape, self.dtype)

    def decode(self, received, out, skip=slice(0, 0)):
        for part in _around(len(out), skip):
            self._from(received[part], out[part])

    def encode(self, values):
        sent = np.empty(values.shape, self.dtype)
        self._to(values, sent)
        return sent

    def _to(self, values, out):
        lib = native.row_copies()
        if lib is None:
            out[...] = to_bf16(values)
        elif values.size:
            lib.hvd_w2v_to_bf16(_float32(values), out.ctypes.data, values.size, self.threads)

    def _from(self, values, out):
        lib = native.row_copies()
        if lib is None:
            out[...] = from_bf16(values)
        elif values.size:
            lib.hvd_w2v_from_bf16(values.ctypes.data, _float32(out), values.size, self.threads)


def _around(n, skip):
    """The slices of ``range(n)`` before and after ``skip``."""
    return slice(0, skip.start or 0), slice(skip.stop or 0, n)


def _float32(a):
    if not (a.dtype == np.float32 and a.flags.c_contiguous):
        raise ValueError("the wire converts C-contiguous float32 arrays")
    return a.ctypes.data

