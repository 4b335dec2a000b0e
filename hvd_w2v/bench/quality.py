"""Quality side by side: gensim Word2Vec and hvd-w2v on the same corpus, settings and epochs, one table.

    python -m hvd_w2v.bench.quality                                   # real corpus, 5 epochs, SG and CBOW
    python -m hvd_w2v.bench.quality --lines 150000 --epochs 3 --ranks 2 --arch sg --seeds 1 2 3
    python -m hvd_w2v.bench.quality --ranks 1 --variant "" --variant "--shards=64"   # a row per variant
    python -m hvd_w2v.bench.quality --hs --ranks 1 --seeds 1 2 3     # hierarchical softmax, every trainer

Run from the checkout (it launches hvd-w2v through mpi/launch). gensim trains in this process with
``--gensim-workers`` threads; hvd-w2v trains at each of ``--ranks``. Every model is saved as word2vec binary
under ``--out`` and scored by the same code (hvd_w2v.bench.gensim_scores: gensim's evaluators, analogies
restricted to the 30,000 most frequent words). Times are wall-clock seconds of training alone for gensim and
of the whole `hvd-w2v train` job (vocabulary and encoding included) for hvd-w2v.

gensim reads the corpus as sentences (``LineSentence``) by default, so that its learning rate decays from
alpha to min_alpha over the run as documented and as hvd-w2v's does. Its faster ``corpus_file`` mode
(``--gensim-input corpus_file``, or ``both`` for both rows) does not with more than one worker: each worker
measures its progress as its own sentences over the whole corpus's count (gensim 4.4's
word2vec_corpusfile.pyx, get_next_alpha), so it reaches only 1/workers of each epoch and every epoch ends
at a higher rate than the schedule. On a small corpus that higher rate scores better, which once passed for
a quality gap of hvd-w2v's (hvd_w2v/bench/README.md, "Quality").

With ``--variant OPTS`` (repeatable), hvd-w2v trains once per variant at each rank count, with the
variant's options (space-separated, after ``--hvd-option``'s; "" for none), a row each: the exact step beside
shard-local SGD's settings, say, in one table.

With ``--interleave V`` every trainer reads the corpus's lines in the order in which V shards of shard-local
SGD take its positions (localsgd.shard_range): the lines cut into V consecutive parts of about equal tokens,
then a line of each part in turn. The exact step on that order tells what the shards' order alone does to the
scores, apart from their merge. Only roughly: parts of equal tokens hold unequal lines, so the file's last
lines are those of the parts of the shortest lines alone, where the shards finish all parts together.

With ``--shuffle SEED`` every trainer reads the lines in one random order (numpy's permutation of seed SEED),
as a corpus whose sources are mixed: every order a shard count takes its positions in is then alike, and
the exact step and the shards differ by their merge alone.

Each hvd-w2v row shows its final loss per pair (run.json's), and "diverged" where the divergence guard
stopped the run (exit code 77: no vectors, no scores).

With ``--hs`` every trainer trains hierarchical softmax instead of negative sampling (gensim's hs=1,
negative=0; hvd-w2v's --hs 1 --negative 0).

With several ``--seeds`` every trainer runs once per seed (gensim's ``seed``, hvd-w2v's ``--seed``) and the
table shows each score's mean with its range over the seeds, so a gap can be told from seed noise.
"""
import argparse
import bisect
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time

from ..common.wording import counted
from ..training.divergence import EXIT_DIVERGED
from . import ROOT, checkout_env
from .gensim_scores import scores
from .throughput import HS_OPTIONS, prepare_corpus


def train_gensim(corpus, arch, epochs, workers, seed, path, source="sentences", hs=False):
    """gensim Word2Vec with word2vec's defaults, reading ``corpus`` as ``source``: "sentences" (an iterable
    of lines) or "corpus_file" (see the module's docstring for their learning rates). Returns seconds."""
    from gensim.models import Word2Vec
    from gensim.models.word2vec import LineSentence

    given = dict(corpus_file=corpus) if source == "corpus_file" else dict(sentences=LineSentence(corpus))
    t = time.monotonic()
    model = Word2Vec(**given, sg=int(arch == "sg"), epochs=epochs, workers=workers, vector_size=100,
                     window=5, negative=0 if hs else 5, hs=int(hs), min_count=5, sample=1e-3, alpha=0.025,
                     min_alpha=0.0001, seed=seed)
    seconds = time.monotonic() - t
    model.wv.save_word2vec_format(path, binary=True)
    return seconds


def train_hvd(corpus, arch, epochs, ranks, seed, out, extra=()):
    """Train with `hvd-w2v train` into ``out``: (seconds, its final loss per pair); a run that diverged (exit
    code 77, the divergence guard) gives an infinite loss and no vectors, any other failure ends the benchmark."""
    cmd = [os.path.join(ROOT, "mpi", "launch"), "-n", str(ranks), "hvd-w2v", "train", corpus, "--out", out,
           "--epochs", str(epochs), "--seed", str(seed), "--format", "binary", "--show", "", "--quiet",
           "--no-final-checkpoint", "--overwrite", *extra]
    if arch == "cbow":
        cmd.append("--cbow")
    t = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=checkout_env())
    if done.returncode == EXIT_DIVERGED:
        print(f"quality: {' '.join(extra)}: {done.stderr.strip().splitlines()[-1]}", file=sys.stderr, flush=True)
        return time.monotonic() - t, math.inf
    if done.returncode != 0:
        raise SystemExit(f"hvd-w2v failed at {ranks} ranks:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(os.path.join(out, "run.json")) as f:
        return time.monotonic() - t, json.load(f)["final_loss"]


def reordered(path, name, order, workdir):
    """``path``'s lines in the order of the line numbers ``order(lines)`` gives, as a file of its own under
    ``workdir`` (``path``'s name and ``name``), made once and reused; every line ends with a newline."""
    out = os.path.join(workdir, f"{os.path.splitext(os.path.basename(path))[0]}-{name}.txt")
    if not os.path.exists(out):
        with open(path, "rb") as f:
            lines = f.readlines()
        if lines and not lines[-1].endswith(b"\n"):
            lines[-1] += b"\n"
        with open(out + ".tmp", "wb") as f:
            f.writelines(lines[i] for i in order(lines))
        os.replace(out + ".tmp", out)
    return os.path.abspath(out)


def interleaved(path, shards, workdir):
    """``path``'s lines as ``shards`` shards take them (see the module's docstring), as a file of its own."""

    def order(lines):
        ends = list(itertools.accumulate(len(line.split()) for line in lines))
        total = ends[-1] if ends else 0
        cuts = [0] + [bisect.bisect_left(ends, total * v // shards) for v in range(1, shards)] + [len(lines)]
        parts = [range(lo, hi) for lo, hi in zip(cuts, cuts[1:])]
        return (part[k] for k in range(max(map(len, parts))) for part in parts if k < len(part))

    return reordered(path, f"interleaved-{shards}", order, workdir)


def shuffled(path, seed, workdir):
    """``path``'s lines in a random order (numpy's permutation of ``seed``), as a file of its own."""
    import numpy as np

    return reordered(path, f"shuffled-{seed}", lambda lines: np.random.default_rng(seed).permutation(len(lines)),
                     workdir)


def corpus_head(path, lines, out):
    """The first ``lines`` lines of the corpus ``path`` (0: all) as a file under ``out`` (made here), or
    SystemExit naming the command that builds the real corpus when ``path`` is missing."""
    os.makedirs(out, exist_ok=True)
    if not os.path.exists(path):
        raise SystemExit(f"no corpus at {path}: build it with python -m hvd_w2v.realcorpus data/real")
    return prepare_corpus(path, lines, out)


def _cell(values, width, digits=3):
    """The mean, and with several values their range: ``0.351 (0.347-0.356)``; "diverged" if one run did."""
    if any(math.isinf(v) for v in values):
        return f"{'diverged':>{width}}"
    mean = f"{statistics.mean(values):.{digits}f}"
    if len(values) > 1:
        mean += f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
    return f"{mean:>{width}}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=0, help="use the first LINES lines, 0: all (default: %(default)s)")
    p.add_argument("--eval-dir", default=os.path.join("data", "real", "eval"))
    p.add_argument("--no-scores", action="store_true",
                   help="the final loss alone, no scores: a corpus whose words the test sets lack (synthetic)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--arch", nargs="+", choices=["sg", "cbow"], default=["sg", "cbow"])
    p.add_argument("--seeds", type=int, nargs="+", default=[1], help="one run per seed (default: %(default)s)")
    p.add_argument("--gensim-workers", type=int, default=2,
                   help="gensim's worker threads; 0: no gensim row (hvd-w2v variants against the exact step's "
                        "\"\" variant alone; default: %(default)s)")
    p.add_argument("--gensim-input", choices=["sentences", "corpus_file", "both"], default="sentences",
                   help="how gensim reads the corpus; corpus_file's learning rate does not follow the schedule "
                        "with several workers (default: %(default)s)")
    p.add_argument("--hvd-option", action="append", default=[], metavar="OPT",
                   help="extra option for hvd-w2v train, e.g. --hvd-option=--batch-words=512 (repeatable)")
    p.add_argument("--variant", action="append", default=[], metavar="OPTS",
                   help="hvd-w2v options of one more row per rank count, space-separated (repeatable; \"\": none)")
    p.add_argument("--interleave", type=int, default=1, metavar="V",
                   help="read the lines as V shards take them, a line of each in turn (default: %(default)s: in order)")
    p.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                   help="read the lines in a random order, numpy's permutation of SEED (default: in order)")
    p.add_argument("--hs", action="store_true", help="hierarchical softmax instead of negative sampling, every trainer")
    p.add_argument("--out", default=os.path.join("runs", "quality"))
    args = p.parse_args(argv)
    if args.hs:
        args.hvd_option = HS_OPTIONS + args.hvd_option
    corpus = corpus_head(args.corpus, args.lines, args.out)
    if args.interleave > 1 and args.shuffle is not None:
        raise SystemExit("--interleave and --shuffle: one order at a time")
    if args.interleave > 1:
        corpus = interleaved(corpus, args.interleave, args.out)
    if args.shuffle is not None:
        corpus = shuffled(corpus, args.shuffle, args.out)
    sources = (["sentences", "corpus_file"] if args.gensim_input == "both" else [args.gensim_input]) \
        if args.gensim_workers else []
    rows = {}  # (arch, trainer) -> [(seconds, final loss per pair, analogy, ws353, simlex)], one per seed
    for arch in args.arch:
        for seed in args.seeds:
            for source in sources:
                path = os.path.join(args.out, f"gensim-{arch}-{source}-seed{seed}.bin")
                seconds = train_gensim(corpus, arch, args.epochs, args.gensim_workers, seed, path, source, args.hs)
                name = f"gensim, {args.gensim_workers} workers" + (", corpus_file" if source == "corpus_file" else "")
                rows.setdefault((arch, name), []).append((seconds, math.nan, *scores(path, args.eval_dir)))
            for ranks in args.ranks:
                for v, variant in enumerate(args.variant or [""]):
                    out = os.path.abspath(os.path.join(args.out, f"hvd-{arch}-{ranks}-seed{seed}"
                                                                 + (f"-variant{v}" if args.variant else "")))
                    seconds, loss = train_hvd(corpus, arch, args.epochs, ranks, seed, out,
                                              [*args.hvd_option, *variant.split()])
                    name = f"hvd-w2v, {counted(ranks, 'rank')}" + (f" {variant}" if variant else "")
                    got = (math.nan,) * 3 if math.isinf(loss) or args.no_scores else \
                        scores(os.path.join(out, "vectors.bin"), args.eval_dir)
                    rows.setdefault((arch, name), []).append((seconds, loss, *got))
    seeds = f"seed {args.seeds[0]}" if len(args.seeds) == 1 else \
        f"seeds {' '.join(map(str, args.seeds))}: mean (range)"
    print(f"corpus {os.path.relpath(corpus)}, {args.epochs} epochs, d100 w5 {'hs' if args.hs else 'k5'} min_count 5 "
          f"sample 1e-3; {seeds}"
          + (f"; hvd-w2v {' '.join(args.hvd_option)}" if args.hvd_option else ""))
    width = 7 if len(args.seeds) == 1 else 20
    label = max([34, *(len(trainer) for _, trainer in rows)])
    print(f"{'arch':5} {'trainer':{label}} {'seconds':>8} {'loss':>{width}} {'analogy':>{width}} {'ws353':>{width}} "
          f"{'simlex':>{width}}")
    for (arch, trainer), runs in rows.items():
        seconds, losses, *metrics = zip(*runs)
        print(f"{arch:5} {trainer:{label}} {statistics.median(seconds):8.1f} {_cell(losses, width, 4)} "
              + " ".join(_cell(m, width) for m in metrics))


if __name__ == "__main__":
    main()
