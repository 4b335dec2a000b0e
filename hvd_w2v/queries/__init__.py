"""The trained model read back and queried on every rank: runfolder (a run folder's record and
checkpoints as a sharded model; `hvd-w2v info`), vectors (the queries' rank-level pieces: ids, rows, merged
top-k), keyedvectors (gensim's KeyedVectors names over them) and evaluate (analogy and word-similarity scores).

May import: common, kernels, parallel, text, store. Never training.
"""
