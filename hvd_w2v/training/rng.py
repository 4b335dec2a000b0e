"""Counter-based random numbers: a value is a pure function of (seed, stream, epoch, position, k).

Training draws its randomness (subsampling, reduced windows, noise words, initial rows) from here, keyed by
*global* corpus position or word id, so the draws do not depend on how many ranks share the work.
"""
import numpy as np

MASK = (1 << 64) - 1
KEEP, WINDOW, NOISE, INIT = 1, 2, 3, 4  # the streams


def _mix(x):
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic): a bijection that scrambles bits."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def key(seed, stream, epoch):
    """The uint64 that keys ``stream`` of ``seed`` in ``epoch``."""
    k = (seed * 0x9E3779B97F4A7C15 + stream * 0xD1B54A32D192ED03 + epoch * 0x8CB92BA72F3D8DD7) & MASK
    return np.uint64(k)


def uniform(seed, stream, epoch, counters, k=0):
    """Uniform float64 in [0, 1), one per counter (int array), for draw number ``k`` of each counter (an int,
    or an int array broadcast against ``counters``: ``uniform(.., pos[:, None], np.arange(K))`` is K draws
    per position at once, the same values as K calls)."""
    x = np.asarray(counters, dtype=np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x = _mix(x ^ key(seed, stream, epoch))
    draw = np.asarray(k, dtype=np.int64).astype(np.uint64) * np.uint64(0xA0761D6478BD642F) + np.uint64(1)
    x = _mix(x + draw)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
