"""The planners, arithmetic and dry runs in one process, no MPI: memory (the memory plan, the job's limits and
the count's check against them), plan (what the exact step's exchange costs on P ranks) and localplan
(shard-local SGD's super-step on P nodes of T threads). Each is also a command: `python -m hvd_w2v.memory`,
`python -m hvd_w2v.plan`, `python -m hvd_w2v.localplan`.

May import: every part but the command line and the pipeline (the planners build steps through training's own
functions, so that what they count is what a run sends).
"""
