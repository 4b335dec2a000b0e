"""Compiled code: built once per machine with g++ from the package's C++ sources, cached, loaded on demand.

Two libraries, each optional: the step's fused TensorFlow op (sgns_kernel.cc, loaded by sgns) and the owners'
row copies (rows_kernel.cc, loaded here through ctypes, used by exchange). Where one cannot be built or
loaded, its user prints one warning and falls back to TensorFlow's graph or numpy, which compute the same
values more slowly; ``HVD_W2V_KERNEL=python`` (or ``graph``) asks for the fallbacks from the start.

A library's file name is a hash of its source, its compiler flags (TensorFlow's, for the op), TensorFlow's
version and this CPU's features (``-march=native``), so a changed source, another TensorFlow or another
machine sharing the cache folder builds its own. Ranks that start together build it once: the first takes a
lock on the cache folder, the others wait for it and use its result.
"""
import ctypes
import fcntl
import hashlib
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-shared", "-fPIC"]


def cache_folder():
    """Where built libraries are kept: $HVD_W2V_CACHE, else ~/.cache/hvd-w2v."""
    return os.environ.get("HVD_W2V_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hvd-w2v")


def wanted():
    """False when $HVD_W2V_KERNEL asks for the Python fallbacks ("python", or "graph" as before)."""
    return os.environ.get("HVD_W2V_KERNEL", "native") not in ("python", "graph")


def build(name, extra_flags=(), salt=""):
    """The path of ``name``.cc (a source beside this module) built into a shared library, building it if the
    cache has none. ``extra_flags`` go after the source (include and link flags); ``salt`` is anything else
    the build depends on (TensorFlow's version). Raises OSError when g++ is missing or fails."""
    source = os.path.join(HERE, f"{name}.cc")
    with open(source, "rb") as f:
        text = f.read()
    cpu = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
    key = hashlib.sha256(b"\0".join([text, salt.encode(), cpu.encode(),
                                     " ".join([*FLAGS, *extra_flags]).encode()])).hexdigest()[:16]
    folder = cache_folder()
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, f"{name}-{key}.so")
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(target):
            tmp = f"{target}.{os.getpid()}.tmp"
            done = subprocess.run(["g++", *FLAGS, source, "-o", tmp, *extra_flags], capture_output=True, text=True)
            if done.returncode:
                raise OSError(f"g++ failed on {name}.cc: {done.stderr.strip()[-1000:]}")
            os.replace(tmp, target)
    return target


def warn(what, error, fallback):
    print(f"hvd-w2v: warning: {what} is not available ({error}); using {fallback}, which is slower",
          file=sys.stderr, flush=True)


# -- the owners' row copies (rows_kernel.cc) -----------------------------------------------------------------

_ROWS = {}  # "lib" once loaded, or "error": why it is not available


def row_copies():
    """The ctypes library of rows_kernel.cc, building it on first use; None where it cannot be built (the
    reason is kept in _ROWS["error"]) or $HVD_W2V_KERNEL asks for numpy."""
    if not _ROWS:
        if not wanted():
            _ROWS["error"] = f"HVD_W2V_KERNEL={os.environ['HVD_W2V_KERNEL']}"
            return None
        try:
            lib = ctypes.CDLL(build("rows_kernel"))
            pointer, size = ctypes.c_void_p, ctypes.c_int64
            lib.hvd_w2v_take_rows.argtypes = [pointer] * 3 + [size] * 2
            lib.hvd_w2v_add_rows.argtypes = [pointer] * 4 + [size] * 2
            lib.hvd_w2v_take_rows.restype = lib.hvd_w2v_add_rows.restype = None
            _ROWS["lib"] = lib
        except (OSError, AttributeError, StopIteration) as e:
            _ROWS["error"] = str(e)
            warn("the compiled row copies", e, "numpy")
    return _ROWS.get("lib")


def _checked(table, rows, block):
    """The pointers of a take/add call, after the checks that keep the C loop inside its arrays."""
    if not (table.dtype == block.dtype == np.float32 and rows.dtype == np.int64 and table.ndim == 2
            and block.shape == (len(rows), table.shape[1])
            and table.flags.c_contiguous and block.flags.c_contiguous and rows.flags.c_contiguous):
        raise ValueError("row copies take float32 C-contiguous [n, d] blocks and int64 rows")
    if len(rows) and (rows.min() < 0 or rows.max() >= len(table)):
        raise IndexError(f"row index out of range [0, {len(table)})")
    return table.ctypes.data, rows.ctypes.data, block.ctypes.data


def take_rows(table, rows, out):
    """``out[:] = table[rows]``: float32 tables, int64 ``rows``; compiled when available, else numpy."""
    lib = row_copies()
    if lib is None:
        np.take(table, rows, axis=0, out=out)
        return
    lib.hvd_w2v_take_rows(*_checked(table, rows, out), len(rows), table.shape[1])


def add_rows(table, rows, updates, scale=None):
    """``table[rows] += scale[:, None] * updates`` (``rows`` unique; ``scale`` float32[n] or None for 1);
    compiled when available, else numpy."""
    lib = row_copies()
    if lib is None:
        table[rows] += updates if scale is None else scale[:, None] * updates
        return
    pointers = _checked(table, rows, updates)
    if scale is not None:
        scale = np.ascontiguousarray(scale, np.float32)
        if scale.shape != (len(rows),):
            raise ValueError(f"scale must be float32[{len(rows)}], got {scale.shape}")
    lib.hvd_w2v_add_rows(*pointers, None if scale is None else scale.ctypes.data, len(rows), table.shape[1])
