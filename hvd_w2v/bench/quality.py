"""Quality side by side: gensim Word2Vec and hvd-w2v on the same corpus, settings and epochs, one table.

    python -m hvd_w2v.bench.quality                                   # real corpus, 5 epochs, SG and CBOW
    python -m hvd_w2v.bench.quality --corpus small.txt --epochs 1 --ranks 1 2 --arch sg

Run from the checkout (it launches hvd-w2v through mpi/launch). gensim trains in this process with
``--gensim-workers`` threads; hvd-w2v trains at each of ``--ranks``. Every model is saved as word2vec binary
under ``--out`` and scored by the same code (hvd_w2v.bench.gensim_scores: gensim's evaluators, analogies
restricted to the 30,000 most frequent words). Times are wall-clock seconds of training alone for gensim and
of the whole `hvd-w2v train` job (vocabulary and encoding included) for hvd-w2v.
"""
import argparse
import os
import subprocess
import time

from .gensim_scores import scores

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train_gensim(corpus, arch, epochs, workers, path):
    from gensim.models import Word2Vec

    t = time.monotonic()
    model = Word2Vec(corpus_file=corpus, sg=int(arch == "sg"), epochs=epochs, workers=workers, vector_size=100,
                     window=5, negative=5, min_count=5, sample=1e-3, alpha=0.025, min_alpha=0.0001)
    seconds = time.monotonic() - t
    model.wv.save_word2vec_format(path, binary=True)
    return seconds


def train_hvd(corpus, arch, epochs, ranks, out):
    cmd = [os.path.join(ROOT, "mpi", "launch"), "-n", str(ranks), "hvd-w2v", "train", corpus, "--out", out,
           "--epochs", str(epochs), "--format", "binary", "--show", "", "--quiet"]
    if arch == "cbow":
        cmd.append("--cbow")
    t = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"hvd-w2v failed at {ranks} ranks:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--eval-dir", default=os.path.join("data", "real", "eval"))
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--arch", nargs="+", choices=["sg", "cbow"], default=["sg", "cbow"])
    p.add_argument("--gensim-workers", type=int, default=2)
    p.add_argument("--out", default=os.path.join("runs", "quality"))
    args = p.parse_args(argv)
    corpus = os.path.abspath(args.corpus)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for arch in args.arch:
        path = os.path.join(args.out, f"gensim-{arch}.bin")
        seconds = train_gensim(corpus, arch, args.epochs, args.gensim_workers, path)
        rows.append((arch, f"gensim, {args.gensim_workers} workers", seconds, path))
        for ranks in args.ranks:
            out = os.path.abspath(os.path.join(args.out, f"hvd-{arch}-{ranks}"))
            seconds = train_hvd(corpus, arch, args.epochs, ranks, out)
            rows.append((arch, f"hvd-w2v, {ranks} rank{'s' if ranks > 1 else ''}", seconds,
                         os.path.join(out, "vectors.bin")))
    print(f"corpus {args.corpus}, {args.epochs} epochs, d100 w5 k5 min_count 5 sample 1e-3")
    print(f"{'arch':5} {'trainer':22} {'seconds':>8} {'analogy':>8} {'ws353':>7} {'simlex':>7}")
    for arch, trainer, seconds, path in rows:
        analogy, ws, simlex = scores(path, args.eval_dir)
        print(f"{arch:5} {trainer:22} {seconds:8.1f} {analogy:8.3f} {ws:7.3f} {simlex:7.3f}")


if __name__ == "__main__":
    main()
