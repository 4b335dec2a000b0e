"""Throughput side by side: gensim Word2Vec with 1 and 2 workers, hvd-w2v with 1, 2 and 4 ranks and 1 rank x 2
threads, in one run.

    python -m hvd_w2v.bench.throughput                      # first 150,000 lines of the real corpus, 3 repeats
    python -m hvd_w2v.bench.throughput --lines 0 --repeats 1  # the whole corpus, once
    python -m hvd_w2v.bench.throughput --variant "" --variant=--shards=2  # hvd-w2v's rows per variant
    python -m hvd_w2v.bench.throughput --hs --trainers gensim-1,gensim-2,hvd-1,threads-2  # hierarchical softmax

Run from the checkout (hvd-w2v is launched through mpi/launch). Every trainer runs in its own process, one
after the other, ``--repeats`` times in turn; the table shows medians. Words per second count raw corpus
tokens over the training loop alone (gensim's ``train()``, hvd-w2v's step loop; vocabulary and encoding are
left out of both), as gensim counts them. hvd-w2v runs with one compute thread per rank, but for the row
"1 rank x 2 threads" (``--threads 2``, compared with gensim's 2 workers). "1 rank" and
"1 worker" are pinned to one core (``taskset -c 0``): both have helper threads (hvd-w2v builds the next step's
examples beside the step) that would otherwise borrow the second core. Ratios compare each hvd-w2v figure
with gensim on the same number of cores
(4 ranks on 2 cores are oversubscribed and compared with 2 workers). Peak memory is the largest resident
set of one process (per rank for hvd-w2v).

With ``--variant OPTS`` (repeatable), every hvd-w2v row is trained once per variant, with the variant's
options (space-separated, after ``--hvd-option``'s; "" for none; a lone option as ``--variant=--shards=2``),
in turn within each repeat, so that the variants share the machine's moods; each row's "vs 1 rank" refers to
its own variant's 1 rank. "exchange" is its share of step time (the hot rows' allreduces among it), "Horovod"
the hot rows' allreduces' share and "B/word" the bytes a rank's hot blocks held a word ("done: Horovod:" of
the run; nothing on one rank, where nothing travels).

With ``--hs`` every trainer trains hierarchical softmax instead of negative sampling: gensim's hs=1,
negative=0 and hvd-w2v's --hs 1 --negative 0.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

from ..common.config import Config
from ..common.wording import counted
from . import ROOT, checkout_env, plots

CEILING = "no exchange"  # the trainer name of run_halves' row
THREADS = "threads"  # the trainer name of the rows of 1 rank with n threads
# --trainers' names: trainer, n (workers, ranks or threads)
TRAINERS = {"gensim-1": ("gensim", 1), "gensim-2": ("gensim", 2), "hvd-1": ("hvd-w2v", 1), "hvd-2": ("hvd-w2v", 2),
            "hvd-4": ("hvd-w2v", 4), "threads-2": (THREADS, 2), "pair": (CEILING, 2)}
SETTINGS = dict(vector_size=100, window=5, negative=5, min_count=5, sample=1e-3, alpha=0.025, min_alpha=0.0001)


HS_OPTIONS = ["--hs", "1", "--negative", "0"]  # hvd-w2v's options of gensim's hs=1, negative=0


def gensim_child(corpus, workers, epochs, sg, hs=False):
    """Train gensim in this process and print one JSON line: words/s over train() and peak RSS (MiB)."""
    from gensim.models import Word2Vec

    settings = {**SETTINGS, **(dict(hs=1, negative=0) if hs else {})}
    model = Word2Vec(sg=sg, workers=workers, epochs=epochs, **settings)
    model.build_vocab(corpus_file=corpus)
    t = time.monotonic()
    model.train(corpus_file=corpus, total_words=model.corpus_total_words, epochs=epochs,
                total_examples=model.corpus_count)
    seconds = time.monotonic() - t
    print(json.dumps(dict(words_per_s=model.corpus_total_words * epochs / seconds,
                          peak_mib=[resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024])))


def one_core(n):
    """The command prefix that keeps a 1-worker or 1-rank run on one core."""
    return ["taskset", "-c", "0"] if n == 1 else []


def run_gensim(corpus, workers, epochs, sg, hs=False):
    out = subprocess.run([*one_core(workers), sys.executable, "-m", "hvd_w2v.bench.throughput", "--gensim-child",
                          corpus, str(workers), str(epochs), str(int(sg)), str(int(hs))], capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"gensim failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_hvd(corpus, ranks, epochs, sg, workdir, extra, threads=1):
    """One `hvd-w2v train` job with ``threads`` per rank; its summary lines parsed into figures."""
    cmd = [*one_core(ranks * threads), *hvd_command(corpus, ranks, epochs, sg, f"hvd-{ranks}x{threads}", workdir,
                                                    extra, threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=checkout_env())
    text = out.stdout + out.stderr
    if out.returncode:
        raise SystemExit(f"hvd-w2v failed at {ranks} ranks:\n{text[-3000:]}")
    return figures(text)


def run_halves(halves, epochs, sg, workdir, extra):
    """The ceiling of 2 ranks on this machine: 2 ranks' work with no exchange at all. Two 1-rank jobs at once,
    pinned to cores 0 and 1, each on its half of the corpus's lines (``halves``, from split_corpus) and with
    half the step's positions (a rank's share of a 2-rank step). Words/s: both jobs' words over the longer
    job's training loop. Each half builds its own vocabulary at half the min-count (rounded up), which keeps
    about as many words as the whole corpus does at the full one: the tables the steps read are as large."""
    extra = [*extra, f"--batch-words={max(option(extra, 'batch-words', Config.batch_words) // 2, 64)}",
             f"--min-count={-(-option(extra, 'min-count', Config.min_count) // 2)}"]
    jobs = [subprocess.Popen(["taskset", "-c", str(core),
                              *hvd_command(half, 1, epochs, sg, f"half-{core}", workdir, extra)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                             env=checkout_env())
            for core, half in enumerate(halves)]
    texts = [job.communicate()[0] for job in jobs]
    if any(job.returncode for job in jobs):
        raise SystemExit("hvd-w2v failed in the no-exchange pair:\n" + "\n".join(t[-2000:] for t in texts))
    halves = [figures(text) for text in texts]
    seconds = max(h["seconds"] for h in halves)
    return dict(words_per_s=sum(h["words_per_s"] * h["seconds"] for h in halves) / seconds, exchange=0.0,
                bytes_per_word=0.0, horovod=0.0, horovod_bytes=0.0,
                peak_mib=[p for h in halves for p in h["peak_mib"]])


def hvd_command(corpus, ranks, epochs, sg, name, workdir, extra, threads=1):
    """The `mpi/launch ... hvd-w2v train` command of one job, its run folder ``workdir``/``name``."""
    return [os.path.join(ROOT, "mpi", "launch"), "-n", str(ranks), "--threads", str(threads), "--timeout", "3600",
            "hvd-w2v", "train", corpus, "--out", os.path.join(workdir, name), "--epochs", str(epochs),
            "--format", "binary", "--show", "", "--quiet", "--overwrite", *([] if sg else ["--cbow"]), *extra]


def figures(text):
    """A job's summary lines as figures: words/s and seconds of the training loop, the exchange's share of step
    time, bytes sent per word, peak resident MiB per rank."""
    speed = re.search(r"done: ([\d,]+) words/s over ([\d.]+) s.* exchange (\d+)% of step time and ([\d,]+) bytes",
                      text)
    peak = re.search(r"peak resident MiB per rank \[([\d, ]+)\]", text)
    horovod = re.search(r"done: Horovod: .* ([\d,]+) bytes a word; (\d+)% of step time", text)  # none: one rank
    number = lambda s: float(s.replace(",", ""))  # noqa: E731
    return dict(words_per_s=number(speed.group(1)), seconds=float(speed.group(2)), exchange=int(speed.group(3)) / 100,
                bytes_per_word=number(speed.group(4)), peak_mib=[int(x) for x in peak.group(1).split(",")],
                horovod_bytes=number(horovod.group(1)) if horovod else 0.0,
                horovod=int(horovod.group(2)) / 100 if horovod else 0.0)


def option(extra, name, default):
    """The value of the last ``--name=N`` (an int) among ``extra``, else ``default``."""
    for given in extra:
        if given.startswith(f"--{name}="):
            default = int(given.split("=", 1)[1])
    return default


def split_corpus(path, workdir):
    """``path``'s lines in two files of (nearly) equal line counts, first half and second half."""
    with open(path, "rb") as src:
        lines = src.readlines()
    halves = []
    for i, part in enumerate((lines[:len(lines) // 2], lines[len(lines) // 2:])):
        halves.append(os.path.join(workdir, f"{os.path.basename(path)}.half{i + 1}"))
        with open(halves[-1], "wb") as dst:
            dst.writelines(part)
    return halves


def prepare_corpus(path, lines, workdir):
    """The first ``lines`` lines of ``path`` (0: all of it), as a file of its own."""
    if not lines:
        return os.path.abspath(path)
    head = os.path.join(workdir, f"corpus-{lines}.txt")
    if not os.path.exists(head):
        with open(path, "rb") as src, open(head + ".tmp", "wb") as dst:
            for i, line in enumerate(src):
                if i == lines:
                    break
                dst.write(line)
        os.replace(head + ".tmp", head)
    return os.path.abspath(head)


def plot(out, runs, med, peak, about):
    """``out``/throughput.png and ``out``/memory.png from the figures of the table; one line ``plot: PATH`` each
    (or one line saying why not)."""
    why = plots.missing()
    if why:
        print(why)
        return
    ranks = [n for name, n in runs if name == "hvd-w2v"]  # the no-exchange pair is a reference line
    gensim = [n for name, n in runs if name == "gensim"]
    worker = lambda n: f"gensim, {counted(n, 'worker')}"  # noqa: E731
    print("plot: " + plots.rank_scaling(
        os.path.join(out, "throughput.png"), f"Throughput: {about}", ranks,
        {"hvd-w2v": [med(("hvd-w2v", n), "words_per_s") for n in ranks]}, "words per second (raw corpus tokens)",
        {**{worker(n): med(("gensim", n), "words_per_s") for n in gensim},
         **({"hvd-w2v, 2 x 1 rank, no exchange": med((CEILING, 2), "words_per_s")} if (CEILING, 2) in runs else {}),
         **({"hvd-w2v, 1 rank x 2 threads": med((THREADS, 2), "words_per_s")} if (THREADS, 2) in runs else {})},
        cores=os.cpu_count()))
    # gensim's processes differ by a few MiB between 1 and 2 workers: one line, the larger.
    most = max(gensim, key=lambda n: peak(("gensim", n)))
    print("plot: " + plots.rank_scaling(
        os.path.join(out, "memory.png"), f"Peak resident memory: {about}", ranks,
        {"hvd-w2v, per rank": [peak(("hvd-w2v", n)) for n in ranks]}, "peak resident MiB per process",
        {f"gensim ({' or '.join(map(str, gensim))} workers, the larger)": peak(("gensim", most))},
        cores=os.cpu_count()))


def main(argv=None):
    if argv is None and sys.argv[1:2] == ["--gensim-child"]:
        corpus, workers, epochs, sg, hs = sys.argv[2:7]
        return gensim_child(corpus, int(workers), int(epochs), bool(int(sg)), bool(int(hs)))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=150000,
                   help="use the first LINES lines, 0: all (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cbow", action="store_true", help="CBOW instead of skip-gram")
    p.add_argument("--hs", action="store_true", help="hierarchical softmax instead of negative sampling, every trainer")
    p.add_argument("--out", default=os.path.join("runs", "throughput"))
    p.add_argument("--hvd-option", action="append", default=[], metavar="OPT",
                   help="extra option for hvd-w2v train, e.g. --hvd-option=--batch-words=4096 (repeatable)")
    p.add_argument("--variant", action="append", default=[], metavar="OPTS",
                   help="hvd-w2v options of one more set of hvd-w2v rows, space-separated (repeatable; \"\": none)")
    p.add_argument("--trainers", default=",".join(TRAINERS),
                   help="which rows, comma-separated, from: %(default)s (gensim-1 and hvd-1 are always run: the "
                        "ratios refer to them)")
    p.add_argument("--no-plot", action="store_true", help="print the table only, no PNG")
    args = p.parse_args(argv)
    wanted = {"gensim-1", "hvd-1", *args.trainers.split(",")}
    if wanted - set(TRAINERS):
        p.error(f"--trainers: unknown {', '.join(sorted(wanted - set(TRAINERS)))}; known: {', '.join(TRAINERS)}")
    if any(TRAINERS[k][1] > 1 for k in wanted if not k.startswith("gensim")):
        wanted.add("gensim-2")  # what 2 cores are compared with
    os.makedirs(args.out, exist_ok=True)
    if not os.path.exists(args.corpus):
        raise SystemExit(f"no corpus at {args.corpus}: build it with python -m hvd_w2v.realcorpus data/real")
    corpus = prepare_corpus(args.corpus, args.lines, args.out)
    sg = not args.cbow
    trainers = [t for k, t in TRAINERS.items() if k in wanted]
    if (os.cpu_count() or 1) < 2 and (CEILING, 2) in trainers:
        trainers.remove((CEILING, 2))  # the pair takes a core each
    halves = split_corpus(corpus, args.out) if (CEILING, 2) in trainers else None  # once, for every repeat
    variants = args.variant or [""]
    # (name, n) for gensim; (name, n, variant) for hvd-w2v's rows, one per variant
    rows = [t if t[0] == "gensim" else (*t, v) for t in trainers for v in ([None] if t[0] == "gensim" else variants)]
    runs = {t: [] for t in rows}
    for r in range(args.repeats):
        for t in rows:
            name, n = t[:2]
            extra = [*(HS_OPTIONS if args.hs else []), *args.hvd_option, *(t[2].split() if len(t) > 2 else [])]
            got = (run_gensim(corpus, n, args.epochs, sg, args.hs) if name == "gensim"
                   else run_halves(halves, args.epochs, sg, args.out, extra) if name == CEILING
                   else run_hvd(corpus, 1, args.epochs, sg, args.out, extra, threads=n) if name == THREADS
                   else run_hvd(corpus, n, args.epochs, sg, args.out, extra))
            runs[t].append(got)
            print(f"repeat {r + 1}/{args.repeats}: {name} x{n}{f' {t[2]}' if len(t) > 2 and t[2] else ''}: "
                  f"{got['words_per_s']:,.0f} words/s", file=sys.stderr, flush=True)

    med = lambda t, k: statistics.median(x[k] for x in runs[t])  # noqa: E731
    peak = lambda t: max(max(x["peak_mib"]) for x in runs[t])  # noqa: E731
    print(f"corpus {os.path.relpath(corpus)}, {args.epochs} epoch(s), {'skip-gram' if sg else 'CBOW'}, "
          f"d100 w5 {'hs' if args.hs else 'k5'} min_count 5 sample 1e-3; median of {args.repeats} runs; "
          f"{os.cpu_count()} cores")
    width = 28 + max(len(v) + 1 for v in variants)
    print(f"{'trainer':{width}} {'words/s':>10} {'vs gensim':>10} {'vs 1 rank':>10} {'exchange':>9} "
          f"{'bytes/word':>11} {'Horovod':>8} {'B/word':>7} {'peak MiB':>9}")
    for t in rows:
        name, n = t[:2]
        wps = med(t, "words_per_s")
        label = ("2 x 1 rank, no exchange" if name == CEILING else f"hvd-w2v, 1 rank x {n} threads" if name == THREADS
                 else f"{name}, {counted(n, 'worker' if name == 'gensim' else 'rank')}")
        if name == "gensim":
            print(f"{label:{width}} {wps:10,.0f} {'':>10} {'':>10} {'':>9} {'':>11} {'':>8} {'':>7} {peak(t):9,}")
            continue
        cores = min(n, os.cpu_count() or 1)
        label += (" (oversubscribed)" if n > (os.cpu_count() or 1) else "") + (f" {t[2]}" if t[2] else "")
        ref = med(("gensim", min(cores, 2)), "words_per_s")
        scale = wps / med(("hvd-w2v", 1, t[2]), "words_per_s")
        print(f"{label:{width}} {wps:10,.0f} {wps / ref:9.2f}x {scale:9.2f}x {med(t, 'exchange'):9.0%} "
              f"{med(t, 'bytes_per_word'):11,.0f} {med(t, 'horovod'):8.0%} {med(t, 'horovod_bytes'):7,.0f} "
              f"{peak(t):9,}")
    if not args.no_plot:  # the first variant's rows
        first = {t[:2]: runs[t] for t in rows if len(t) == 2 or t[2] == variants[0]}
        plot(args.out, first, lambda t, k: statistics.median(x[k] for x in first[t]),
             lambda t: max(max(x["peak_mib"]) for x in first[t]),
             f"{os.path.basename(corpus)}, {args.epochs} epoch(s), {'skip-gram' if sg else 'CBOW'}, median of "
             f"{args.repeats}{f', {variants[0]}' if variants[0] else ''}")


if __name__ == "__main__":
    main()
