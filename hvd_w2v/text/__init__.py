"""The text passes before training: corpus (the files, their byte ranges, token-aligned readers), vocab (the
parallel count: partial counts to hash owners, min_count, ids agreed in frequency order), readvocab (counts
from a `word count` file), encode (the corpus as one global int32 id stream) and huffman (word2vec.c's tree
of the counts, hierarchical softmax's).

May import: common, kernels, parallel (the count's rounds travel through parallel.comm). Never training: the
text passes know no training.
"""
