"""Encode the corpus once into token-id shards on disk, which training memory-maps.

The id stream is the corpus's tokens in order, as int32 word ids, with out-of-vocabulary tokens dropped (as
word2vec does before windowing) and ``SENTENCE_END`` after every sentence. Rank ``r`` writes the part of the
stream from its own byte range to ``ids.{r:05d}.i32``; laid end to end in rank order, the parts are the same
stream for any rank count, so training positions are global and rank-count free.
"""
import json
import os

import numpy as np

from . import corpus
from .vocab import by_hash_owner, exchange_words

SENTENCE_END = -1


def encode(comm, paths, vocab, outdir, log=lambda m: None):
    """Write this rank's id shard into ``outdir`` and the stream's index (rank 0); collective."""
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, f"ids.{comm.rank:05d}.i32")
    blocks = corpus.read_blocks(corpus.split(paths, comm.size)[comm.rank])
    written = 0
    with open(path + ".tmp", "wb") as f:
        while True:
            block = next(blocks, None)
            # Every rank takes part in every round's lookup until all ranks are out of text.
            if not comm.allreduce(int(block is not None)):
                break
            sents, closed = corpus.sentences(*block) if block else ([], [])
            ids = lookup(comm, vocab, sents)
            out = []
            for tokens, end in zip(sents, closed):
                out.extend(i for i in map(ids.__getitem__, tokens) if i >= 0)
                if end:
                    out.append(SENTENCE_END)
            arr = np.array(out, dtype=np.int32)
            arr.tofile(f)
            written += len(arr)
    os.replace(path + ".tmp", path)
    parts = comm.allgather(written)
    if comm.rank == 0:
        index = {"parts": parts, "raw_words": vocab.raw_words, "vocab_size": vocab.size}
        with open(os.path.join(outdir, "stream.json"), "w") as f:
            json.dump(index, f)
    comm.barrier()
    log(f"encode: {sum(parts):,} positions in {comm.size} shards under {outdir}")
    return TokenStream(outdir)


def lookup(comm, vocab, sents):
    """{token: id or -1} for the tokens of ``sents``, asked of each token's hash owner (collective)."""
    words, per_dest = by_hash_owner({t for tokens in sents for t in tokens}, comm.size)
    asked = exchange_words(comm, words, per_dest)
    answers = np.fromiter((vocab.lookup.get(w, -1) for w in asked), dtype=np.int64, count=len(asked))
    # Answers go back to the askers: as many to each source as it asked (the transpose of per_dest).
    got, _ = comm.alltoallv(answers, comm.alltoall_ints(per_dest))
    return dict(zip(words, got.tolist()))


class TokenStream:
    """The encoded corpus: global positions ``0..len-1`` over the memory-mapped shards of any writer."""

    def __init__(self, folder):
        with open(os.path.join(folder, "stream.json")) as f:
            index = json.load(f)
        self.raw_words = index["raw_words"]
        self.parts = [np.memmap(os.path.join(folder, f"ids.{r:05d}.i32"), dtype=np.int32, mode="r", shape=(n,))
                      if n else np.zeros(0, np.int32) for r, n in enumerate(index["parts"])]
        self.starts = np.concatenate(([0], np.cumsum(index["parts"]))).astype(np.int64)
        self.length = int(self.starts[-1])

    def __len__(self):
        return self.length

    def read(self, lo, hi):
        """ids at positions ``[lo, hi)``, clipped to the stream (a copy; int32)."""
        lo, hi = max(lo, 0), min(hi, self.length)
        pieces = []
        for part, start, stop in zip(self.parts, self.starts[:-1], self.starts[1:]):
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                pieces.append(np.asarray(part[a - start:b - start]))
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
