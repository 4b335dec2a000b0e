"""A synthetic corpus: Zipf-distributed words with planted related pairs, seedable, streamed to disk.

Word ``w{i}`` has probability proportional to ``1 / (i + 1) ** exponent``. The words
``w{first} .. w{first + 2 * pairs - 1}`` (``first`` even; mid-frequency words, which subsampling leaves
alone) are planted as synonym pairs ``(w{2j}, w{2j+1})``: wherever the Zipf draw gives either, one of the two
is written at random, followed with probability ``bond`` by the pair's own companion word
``w{first + 2 * pairs + j'}``. Both members then share their contexts, so a trained model should rank each
among the other's nearest neighbours. Text is written in sentences of ``sentence`` tokens, block by block: memory stays bounded
whatever the size.
"""
import argparse

import numpy as np


def generate(path, tokens, vocab=10000, exponent=1.0, pairs=50, first=100, bond=0.5, sentence=20, seed=0,
             block=1 << 20):
    """Write about ``tokens`` tokens to ``path``; returns the number written."""
    rs = np.random.RandomState(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** exponent
    cdf = np.cumsum(p / p.sum())
    names = np.array([f"w{i}" for i in range(vocab)], dtype=object)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < tokens:
            n = min(block, tokens - written)
            ids = np.searchsorted(cdf, rs.random_sample(n), side="right").clip(0, vocab - 1)
            # Plant the pairs: either member at random, then (with probability bond) the pair's companion.
            band = np.flatnonzero((ids >= first) & (ids < first + 2 * pairs))
            ids[band] = (ids[band] & ~1) | rs.randint(0, 2, len(band))
            follow = band[rs.random_sample(len(band)) < bond] + 1
            follow = follow[follow < n]
            ids[follow] = first + 2 * pairs + (ids[follow - 1] - first) // 2
            words = names[ids]
            lines = [" ".join(words[i:i + sentence]) for i in range(0, n, sentence)]
            f.write("\n".join(lines) + "\n")
            written += n
    return written


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.synthetic", description=__doc__.splitlines()[0])
    p.add_argument("path")
    p.add_argument("--tokens", type=int, default=1_000_000)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--pairs", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    n = generate(a.path, a.tokens, vocab=a.vocab, pairs=a.pairs, seed=a.seed)
    print(f"{a.path}: {n:,} tokens, vocabulary up to {a.vocab:,} words, {a.pairs} planted pairs")


if __name__ == "__main__":
    main()
