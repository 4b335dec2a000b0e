"""What a run keeps in its folder: checkpoints (the write protocol, signals, verified and re-sharded loads),
the exported word2vec files (written by every rank at agreed offsets, never gathered) and the lock by which
one job holds the folder (runlock).

May import: common, kernels, parallel, text. Never training or queries.
"""
