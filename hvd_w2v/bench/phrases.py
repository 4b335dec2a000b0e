"""Phrases side by side: word2vec.c's word2phrase and hvd-w2v phrases on the same text, in one run.

    python -m hvd_w2v.bench.phrases                          # the real corpus; layouts 1x1, 1x2, 2x1; 3 repeats
    python -m hvd_w2v.bench.phrases --lines 100000 --repeats 1
    python -m hvd_w2v.bench.phrases --layouts 1x1,2x1,4x1 --peers ~/src/word2vec
    python -m hvd_w2v.bench.phrases --passes     # one rank's compiled passes, each timed, in this process

Run from the checkout (hvd-w2v is launched through mpi/launch). word2phrase is built once a run from
word2phrase.c in ``--peers`` (gcc -O2) into ``--out``, and runs with its defaults, min-count 5 and threshold
100, as hvd-w2v phrases does. word2phrase and each layout (RANKSxTHREADS: ``mpi/launch -n RANKS --threads
THREADS``) run ``--repeats`` times in turn; the table shows medians. Runs on one core are pinned to it
(``taskset -c 0``).

"pair" (in ``--layouts`` by default) is the machine's ceiling for two cores: two 1-rank jobs at once, a core
each, on the first and the second half of the lines, sharing nothing; the line under the table gives each
two-core layout's words/s a core against it.

Every hvd-w2v run is checked: its parts laid end to end must be word2phrase's output byte for byte
("identical", else the offset of the first byte that differs, with the bytes around it), and its summary's
pairs must be word2phrase's joins (the words it wrote less the spaces before them).

Seconds are each job's wall clock, process starts included (MPI's and Python's for hvd-w2v); "own s" are the
seconds hvd-w2v reports (its summary's: from its first read to its last write). Words/s per core: the corpus's
words (as word2phrase counts them) / wall clock seconds / cores (ranks x threads, at most the machine's);
"vs word2phrase": that against word2phrase's, which runs on one core. word2phrase's time includes filling its
500M-entry hash table (2 GB) twice, whatever the size of the text.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

from ..common.wording import counted
from ..text.phrases import Text
from . import ROOT, checkout_env
from .throughput import one_core, prepare_corpus, split_corpus

BLOCK = 1 << 24  # bytes read at a time
PAIR = "pair"  # the layouts' name of the two-core ceiling (run_pair)
WORD_START = re.compile(rb"[ \t\n][^ \t\n]")


def build(peers, out):
    """word2phrase built with gcc -O2 from ``peers``/word2phrase.c into ``out``; its path. SystemExit when the
    source or gcc is missing."""
    source = os.path.join(peers, "word2phrase.c")
    if not os.path.exists(source):
        raise SystemExit(f"no word2phrase.c in {peers}: give the folder of word2vec.c's sources with --peers")
    if shutil.which("gcc") is None:
        raise SystemExit("gcc not found: word2phrase is built from its source")
    binary = os.path.join(out, "word2phrase")
    done = subprocess.run(["gcc", "-O2", "-o", binary, source, "-lm", "-pthread"], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"gcc could not build {source}:\n{done.stderr[-2000:]}")
    return os.path.abspath(binary)


def run_word2phrase(binary, corpus, out):
    """word2phrase on ``corpus``, pinned to one core, writing ``out``/word2phrase.txt; (its path, wall clock
    seconds). It runs in ``out`` on short relative names: it copies file names into 60-byte buffers."""
    link = os.path.join(out, "word2phrase-in.txt")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.abspath(corpus), link)
    cmd = [*one_core(1), binary, "-train", "word2phrase-in.txt", "-output", "word2phrase.txt", "-min-count", "5",
           "-threshold", "100", "-debug", "0"]
    t = time.monotonic()
    done = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    seconds = time.monotonic() - t
    if done.returncode:
        raise SystemExit(f"word2phrase failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return os.path.join(out, "word2phrase.txt"), seconds


def hvd_command(corpus, ranks, threads, dest, pin=None):
    """The command line of `hvd-w2v phrases` through mpi/launch into the folder ``dest``; a 1-core job pinned to
    core ``pin`` (None: core 0)."""
    prefix = ["taskset", "-c", str(pin)] if pin is not None else one_core(ranks * threads)
    return [*prefix, os.path.join(ROOT, "mpi", "launch"), "-n", str(ranks), "--threads", str(threads), "--timeout",
            "3600", "hvd-w2v", "phrases", corpus, "--out", dest, "--overwrite"]


def summary(dest, returncode, output, what):
    """The summary dict a finished `hvd-w2v phrases` job (its exit code and ``output``) left in ``dest``, or
    SystemExit naming ``what`` ran."""
    if returncode:
        raise SystemExit(f"hvd-w2v phrases failed ({what}):\n{output[-3000:]}")
    with open(os.path.join(dest, ".phrases.json")) as f:
        return json.load(f)


def run_hvd(corpus, ranks, threads, dest):
    """`hvd-w2v phrases` through mpi/launch into the folder ``dest``: (its summary dict, wall clock seconds,
    its own seconds: its summary's)."""
    t = time.monotonic()
    done = subprocess.run(hvd_command(corpus, ranks, threads, dest), capture_output=True, text=True, cwd=ROOT,
                          env=checkout_env())
    seconds = time.monotonic() - t
    got = summary(dest, done.returncode, done.stdout + done.stderr, f"{ranks}x{threads}")
    return got, seconds, got["seconds"]


def run_pair(halves, out):
    """The machine's ceiling for two cores: two 1-rank jobs at once, each pinned to a core of its own, on the
    two ``halves`` of the text, sharing nothing (no exchange, no common counts, so their joins are not the
    whole text's). Wall clock seconds until both are done."""
    dests = [os.path.join(out, f"hvd-pair-{k}") for k in (1, 2)]
    t = time.monotonic()
    jobs = [subprocess.Popen(hvd_command(half, 1, 1, dest, pin=k), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT, env=checkout_env())
            for k, (half, dest) in enumerate(zip(halves, dests))]
    for job, dest in zip(jobs, dests):
        stdout, stderr = job.communicate()
        summary(dest, job.returncode, stdout + stderr, "the pair")
    return time.monotonic() - t


def parts(dest):
    """The part.NNNNN.txt files in ``dest``, in name order."""
    return [os.path.join(dest, n) for n in sorted(os.listdir(dest)) if re.fullmatch(r"part\.\d{5}\.txt", n)]


def corpus_words(path):
    """The words word2phrase counts in the file ``path``: runs of bytes other than space, tab and newline once
    carriage returns are dropped, but a last one with no separator after it."""
    words, before = 0, b"\n"
    with open(path, "rb") as f:
        while raw := f.read(BLOCK):
            chunk = raw.replace(b"\r", b"")
            words += len(WORD_START.findall(before + chunk))
            before = (before + chunk)[-1:]
    return words - (before not in b" \t\n")


def joins(path, words):
    """The pairs joined in word2phrase's output ``path`` of a text of ``words`` words: each word is written
    after a space or, joined, after '_'."""
    spaces = 0
    with open(path, "rb") as f:
        while chunk := f.read(BLOCK):
            spaces += chunk.count(b" ")
    return words - spaces


def first_difference(expected, paths):
    """None when the files ``paths`` laid end to end hold the bytes of the file ``expected``; else the offset of
    the first byte that differs (the shorter one's size when one is the start of the other)."""
    offset = 0
    with open(expected, "rb") as want_file:
        for path in paths:
            with open(path, "rb") as f:
                while got := f.read(BLOCK):
                    want = want_file.read(len(got))
                    if want != got:
                        n = min(len(want), len(got))
                        differ = np.flatnonzero(np.frombuffer(want[:n], np.uint8) != np.frombuffer(got[:n], np.uint8))
                        return offset + (int(differ[0]) if len(differ) else n)
                    offset += len(got)
        return offset if want_file.read(1) else None


def check(expected, dest, expected_pairs, pairs):
    """"identical", or what differs between word2phrase's output ``expected`` and the parts in ``dest`` (the
    first differing byte and the bytes around it, or the pairs joined)."""
    found = parts(dest)
    at = first_difference(expected, found)
    if at is not None:
        return (f"differ at byte {at:,}: word2phrase {Text([expected]).read(at - 40, at + 40)!r}, "
                f"hvd-w2v {Text(found).read(at - 40, at + 40)!r}")
    if pairs != expected_pairs:
        return f"identical bytes, but {pairs:,} pairs in its summary, {expected_pairs:,} joined"
    return "identical"


def layouts(text):
    """"1x1,2x1,pair" as [(1, 1), (2, 1), "pair"]: (ranks, threads) each, or PAIR."""
    out = []
    for item in text.split(","):
        if item.strip() == PAIR:
            out.append(PAIR)
            continue
        ranks, _, threads = item.strip().partition("x")
        if not (ranks.isdigit() and threads.isdigit() and int(ranks) > 0 and int(threads) > 0):
            raise SystemExit(f"--layouts: {item!r} is neither RANKSxTHREADS, e.g. 2x1, nor {PAIR}")
        out.append((int(ranks), int(threads)))
    return out


def passes(corpus):
    """One rank's passes over ``corpus`` in this process, each timed: the compiled table's (phrases_kernel.cc)
    count, export, an owner's sums and answers, joinable and write, the whole text a block. Prints a line."""
    from ..kernels import native

    lib = native.phrases_kernel()
    if lib is None:
        raise SystemExit(f"the compiled phrase passes are not available: {native.unavailable('phrases_kernel')}")
    with open(corpus, "rb") as f:
        data = f.read()
    seconds, t = {}, time.perf_counter()

    def lap(name):
        nonlocal t
        now = time.perf_counter()
        seconds[name], t = now - t, now

    table = native.PhraseTable(lib)
    table.start(0, None)
    words = table.count(data, False)
    lap("count")
    keys, counts = table.export()
    lap("export")
    owner = native.PhraseTable(lib, len(keys))
    owner.sum(keys, counts)
    lap("sum")
    table.set(owner.lookup(keys, 5))
    lap("lookup")
    table.start(0, None)
    joins = table.joinable(data, False, 5, 100.0, float(words))
    lap("joinable")
    table.write(data, False, joins)
    lap("write")
    print(f"{words:,} words, {len(keys):,} keys; seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in seconds.items()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join("data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=0, help="use the first LINES lines, 0: all (default: %(default)s)")
    p.add_argument("--layouts", default="1x1,1x2,2x1,pair",
                   help="hvd-w2v's rows, RANKSxTHREADS, comma-separated; pair: two 1-rank jobs at once on the "
                        "text's halves, a core each, the machine's ceiling for two cores (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peers", default=os.path.join(os.path.dirname(ROOT), "shared", "peers", "word2vec"),
                   help="the folder of word2phrase.c (default: ../shared/peers/word2vec beside the checkout)")
    p.add_argument("--out", default=os.path.join("runs", "phrases"))
    p.add_argument("--passes", action="store_true",
                   help="only time one rank's compiled passes over the corpus in this process (no MPI, no word2phrase)")
    args = p.parse_args(argv)
    if args.passes:
        os.makedirs(args.out, exist_ok=True)
        return passes(prepare_corpus(args.corpus, args.lines, args.out))
    rows = layouts(args.layouts)
    os.makedirs(args.out, exist_ok=True)
    if not os.path.exists(args.corpus):
        raise SystemExit(f"no corpus at {args.corpus}: build it with python -m hvd_w2v.realcorpus data/real")
    corpus = prepare_corpus(args.corpus, args.lines, args.out)
    binary = build(args.peers, args.out)
    words = corpus_words(corpus)
    cores = lambda r, t: min(r * t, os.cpu_count() or 1)  # noqa: E731

    wall = {row: [] for row in ["word2phrase", *rows]}
    pair = split_corpus(corpus, args.out) if PAIR in rows else None  # the pair's halves, once for every repeat
    own = {row: [] for row in rows if row != PAIR}
    verdict = {}
    for r in range(args.repeats):
        expected, seconds = run_word2phrase(binary, corpus, args.out)
        wall["word2phrase"].append(seconds)
        expected_pairs = joins(expected, words)
        print(f"repeat {r + 1}/{args.repeats}: word2phrase: {seconds:.1f} s, {expected_pairs:,} pairs",
              file=sys.stderr, flush=True)
        for row in rows:
            if row == PAIR:
                wall[PAIR].append(run_pair(pair, args.out))
                print(f"repeat {r + 1}/{args.repeats}: the pair: {wall[PAIR][-1]:.1f} s", file=sys.stderr,
                      flush=True)
                continue
            ranks, threads = row
            dest = os.path.join(args.out, f"hvd-{ranks}x{threads}")
            got, seconds, job = run_hvd(corpus, ranks, threads, dest)
            wall[ranks, threads].append(seconds)
            if job is not None:
                own[ranks, threads].append(job)
            said = check(expected, dest, expected_pairs, got["pairs"])
            if got.get("words", words) != words:
                said += f"; {got['words']:,} words in its summary, {words:,} in the corpus"
            if verdict.get((ranks, threads), "identical") == "identical":
                verdict[ranks, threads] = said  # the first that differs stays
            print(f"repeat {r + 1}/{args.repeats}: hvd-w2v {ranks}x{threads}: {seconds:.1f} s, {said}",
                  file=sys.stderr, flush=True)

    print(f"corpus {os.path.relpath(corpus)}, {words:,} words; min-count 5, threshold 100; median of "
          f"{args.repeats} runs; {os.cpu_count()} cores")
    print(f"{'layout':28} {'cores':>5} {'wall s':>8} {'own s':>7} {'words/s/core':>13} {'vs word2phrase':>15}  output")
    reference = words / statistics.median(wall["word2phrase"])
    for row in ["word2phrase", *rows]:
        n = 1 if row == "word2phrase" else cores(2, 1) if row == PAIR else cores(*row)
        seconds = statistics.median(wall[row])
        mine = f"{statistics.median(own[row]):7.2f}" if own.get(row) else f"{'':>7}"
        rate = words / seconds / n
        label = ("word2phrase" if row == "word2phrase" else "the pair: 1 rank a half x 2" if row == PAIR
                 else f"hvd-w2v {counted(row[0], 'rank')} x {counted(row[1], 'thread')}")
        said = ("(reference)" if row == "word2phrase" else "(the ceiling: each half's own joins)" if row == PAIR
                else verdict[row])
        print(f"{label:28} {n:5} {seconds:8.1f} {mine} {rate:13,.0f} {rate / reference:14.2f}x  {said}")
    if PAIR in rows:  # each layout of two cores against what two cores sharing nothing do
        ceiling = statistics.median(wall[PAIR])
        print("against the pair (words/s a core): " + ", ".join(
            f"{r}x{t} {ceiling / statistics.median(wall[r, t]):.2f}" for r, t in (x for x in rows if x != PAIR)
            if cores(r, t) == cores(2, 1)))


if __name__ == "__main__":
    main()
