"""The ranks and what travels between them: comm (every MPI and Horovod collective; nothing else calls one),
exchange (the sparse exchange's stages, route, gather and scatter, and the hot rows), shard (RowPlan: which
rank owns which word's rows), wire (the form rows and deltas travel in) and watchdog (the stall watchdog).

May import: common, kernels. Never training, text, store or queries: collectives know no training.
"""
