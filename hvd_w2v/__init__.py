"""hvd-w2v: model-parallel word2vec over MPI (sharded rows, alltoall exchange, Horovod for dense parts).

The Python API, for scripts run on every rank (``mpi/launch -n 4 python my.py``, or ``srun``); every call is
collective and gives the same answer on every rank::

    import hvd_w2v
    run = hvd_w2v.train(["corpus.txt"], out="runs/mine", dim=100, epochs=5)  # `hvd-w2v train`'s options
    kv = hvd_w2v.load("runs/mine")    # or run.wv; each rank keeps only its rows
    kv.most_similar("king", topn=10)

``train`` is hvd_w2v.pipeline.train, ``load`` hvd_w2v.queries.keyedvectors.load; bad input raises :class:`UserError`.
"""
from .common.errors import UserError
from .common.version import __version__  # noqa: F401 (hvd_w2v.__version__)
from .pipeline import phrases, train
from .training.divergence import Diverged

__all__ = ["train", "phrases", "load", "KeyedVectors", "UserError", "Diverged"]


def __getattr__(name):
    # The query side is imported on first use.
    if name in ("load", "KeyedVectors"):
        from .queries import keyedvectors

        return getattr(keyedvectors, name)
    raise AttributeError(f"module 'hvd_w2v' has no attribute {name!r}")
