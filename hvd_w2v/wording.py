"""Wording that hvd-w2v's messages share."""


def counted(n, noun):
    """``n`` and ``noun``, plural unless ``n`` is 1: counted(1, "rank") is "1 rank", counted(4, "rank") "4 ranks".
    ``n`` may be anything that prints: a record's unknown "?" reads "? ranks"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
