"""The text passes before training: corpus (the files, their byte ranges, token-aligned readers), vocab (the
parallel count: partial counts to hash owners, min_count, ids agreed in frequency order) and encode (the
corpus as one global int32 id stream).

May import: common, kernels, parallel (the count's rounds travel through parallel.comm). Never training: the
text passes know no training.
"""
