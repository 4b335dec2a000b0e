"""Wording that hvd-w2v's messages share."""


def counted(n, noun):
    """``n`` and ``noun``, plural unless ``n`` is 1: counted(1, "rank") is "1 rank", counted(4, "rank") "4 ranks".
    ``n`` may be anything that prints: a record's unknown "?" reads "? ranks"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def readable_bytes(n):
    """Bytes, in the binary unit that keeps them readable: 6.1 GiB, 93 MiB, 512 KiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            x = n / scale
            return f"{x:.1f} {unit}" if x < 10 else f"{x:,.0f} {unit}"
    return f"{n:.0f} B"
