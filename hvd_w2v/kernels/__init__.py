"""The compiled kernels (``*.cc``: the step's maths, the row copies, the example builder, shard-local SGD's
super-step, the text passes, word2phrase's passes) and native.py, which builds, caches and loads them through
ctypes and holds the numpy fallbacks that the kernels are tested against.

May import: common. The kernels know no ranks and no training: a caller passes them arrays and a thread count.
"""
