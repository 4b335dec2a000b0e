"""Training: loop (the step loop, the exact step's rule, the sharded model's slice, a step's table of rows
and the owners' capped add), localsgd (shard-local SGD's rule, a sibling of the exact step's), hotsync (its
sibling whose hot rows merge inside the super-step), the maths (sgns: the loss and its updates; batches: a
step's examples; rng: counter-based random draws) and divergence (the guard that stops a run whose loss or
rows blow up).

May import: common, kernels, parallel, text (the id stream). The maths (sgns, batches, rng) take positions,
ids or a plan, never a communicator: the ranks stay out of the maths. Never store, queries, planning or the
command line: the loop is handed its checkpoint writer.
"""
