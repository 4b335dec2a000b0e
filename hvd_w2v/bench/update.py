"""Going on with new text (train --update) against one run on the whole text: scores side by side.

    python -m hvd_w2v.bench.update                      # real corpus, lines shuffled, 5 epochs, SG and CBOW
    python -m hvd_w2v.bench.update --lines 150000 --epochs 3 --arch sg

For each architecture: a run on the whole corpus (``--ranks``), a run on its first half (``--ranks``), that run
gone on with the second half (``train --update`` on ``--then-ranks``, another rank count, with any
``--then-option``), each half with the whole run's epochs: the same epochs a token. gensim does the same beside
it (``--gensim-workers``, 0: not): Word2Vec on the first half, ``build_vocab(update=True)`` and ``train`` on the
second, against Word2Vec on the whole. Every model is scored by the same code as the quality benchmark
(hvd_w2v.bench.gensim_scores); the table gives each updated model's scores less its whole run's. The lines are
read in one random order (``--shuffle SEED``, default 1), so that the halves are alike text; in the file's
order they are different sources, and the update then also measures how far new text moves a model.
"""
import argparse
import json
import os
import subprocess

from . import ROOT, checkout_env
from .gensim_scores import scores
from .quality import corpus_head, shuffled, train_gensim


def halves(path, workdir):
    """The first and the second half of ``path``'s lines, as files of their own under ``workdir``."""
    names = [os.path.join(workdir, f"{os.path.splitext(os.path.basename(path))[0]}-half{k}.txt") for k in (1, 2)]
    if not all(os.path.exists(n) for n in names):
        with open(path, "rb") as f:
            lines = f.readlines()
        for n, part in zip(names, (lines[:len(lines) // 2], lines[len(lines) // 2:])):
            with open(n + ".tmp", "wb") as f:
                f.writelines(part)
            os.replace(n + ".tmp", n)
    return names


def train(corpus, out, ranks, epochs, arch, *extra):
    """`hvd-w2v train` into ``out``; returns its run.json's final loss per pair."""
    cmd = [os.path.join(ROOT, "mpi", "launch"), "-n", str(ranks), "hvd-w2v", "train", corpus, "--out", out,
           "--epochs", str(epochs), "--format", "binary", "--show", "", "--quiet", *extra]
    if arch == "cbow":
        cmd.append("--cbow")
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=checkout_env())
    if done.returncode != 0:
        raise SystemExit(f"hvd-w2v failed: {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(os.path.join(out, "run.json")) as f:
        return json.load(f)["final_loss"]


def gensim_update(first, second, arch, epochs, workers, path):
    """gensim's way: Word2Vec on ``first``, then build_vocab(update=True) and train on ``second`` (the learning
    rate from alpha again), word2vec's defaults as quality.train_gensim's; saved to ``path``."""
    from gensim.models import Word2Vec
    from gensim.models.word2vec import LineSentence

    model = Word2Vec(LineSentence(first), sg=int(arch == "sg"), epochs=epochs, workers=workers, vector_size=100,
                     window=5, negative=5, min_count=5, sample=1e-3, alpha=0.025, min_alpha=0.0001, seed=1)
    model.build_vocab(LineSentence(second), update=True)
    model.train(LineSentence(second), total_examples=model.corpus_count, epochs=epochs)
    model.wv.save_word2vec_format(path, binary=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=0, help="use the first LINES lines, 0: all (default: %(default)s)")
    p.add_argument("--eval-dir", default=os.path.join("data", "real", "eval"))
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--arch", nargs="+", choices=["sg", "cbow"], default=["sg", "cbow"])
    p.add_argument("--ranks", type=int, default=1, help="ranks of the whole run and the first half's")
    p.add_argument("--then-ranks", type=int, default=2, help="ranks of the update (default: %(default)s)")
    p.add_argument("--shuffle", type=int, default=1, metavar="SEED",
                   help="the lines in numpy's permutation of SEED; -1: in the file's order (default: %(default)s)")
    p.add_argument("--gensim-workers", type=int, default=2, help="gensim's threads; 0: no gensim rows (default: "
                   "%(default)s)")
    p.add_argument("--no-hvd", action="store_true", help="gensim's rows alone")
    p.add_argument("--then-option", action="append", default=[], metavar="OPTION",
                   help="an option of the update's `train` alone, e.g. --then-option=--alpha=0.0125 (repeatable)")
    p.add_argument("--out", default=os.path.join("runs", "update"))
    args = p.parse_args(argv)
    corpus = corpus_head(args.corpus, args.lines, args.out)
    if args.shuffle >= 0:
        corpus = shuffled(corpus, args.shuffle, args.out)
    first, second = halves(corpus, args.out)
    print(f"corpus {os.path.relpath(corpus)} and its halves, {args.epochs} epochs each; whole and first half on "
          f"{args.ranks} rank(s), the update on {args.then_ranks}")
    print(f"{'arch':5} {'trainer':26} {'loss':>7} {'analogy':>8} {'ws353':>7} {'simlex':>7}")
    for arch in args.arch:
        rows = {}
        whole, half = (os.path.abspath(os.path.join(args.out, f"{arch}-{n}")) for n in ("whole", "half"))
        for name, text, ranks, out, extra in ([] if args.no_hvd else [
                ("the whole text", corpus, args.ranks, whole, ("--overwrite", "--no-final-checkpoint")),
                ("its first half", first, args.ranks, half, ("--overwrite",)),
                ("then --update, second half", second, args.then_ranks, half, ("--update", *args.then_option))]):
            loss = train(text, out, ranks, args.epochs, arch, *extra)
            rows[name] = (loss, *scores(os.path.join(out, "vectors.bin"), args.eval_dir))
        if rows:
            rows["update less whole"] = tuple(a - b for a, b in zip(rows["then --update, second half"],
                                                                    rows["the whole text"]))
        if args.gensim_workers:
            paths = [os.path.join(args.out, f"gensim-{arch}-{n}.bin") for n in ("whole", "update")]
            train_gensim(corpus, arch, args.epochs, args.gensim_workers, 1, paths[0])
            gensim_update(first, second, arch, args.epochs, args.gensim_workers, paths[1])
            whole, updated = (scores(p, args.eval_dir) for p in paths)
            rows["gensim, the whole text"] = (float("nan"), *whole)
            rows["gensim, half then update"] = (float("nan"), *updated)
            rows["gensim, update less whole"] = (float("nan"), *(a - b for a, b in zip(updated, whole)))
        for name, (loss, analogy, ws, simlex) in rows.items():
            print(f"{arch:5} {name:26} {loss:7.3f} {analogy:8.3f} {ws:7.3f} {simlex:7.3f}", flush=True)


if __name__ == "__main__":
    main()
