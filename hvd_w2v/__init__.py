"""hvd-w2v: model-parallel word2vec over MPI (sharded rows, alltoall exchange, Horovod for dense parts)."""

__version__ = "0.1.0"
