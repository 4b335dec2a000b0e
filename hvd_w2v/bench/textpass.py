"""The text passes before training (the vocabulary's count and the encoding) on one rank: Python's loops
against the compiled passes (text_kernel.cc) on 1 and 2 threads, and word2vec.c's vocabulary pass, in one run.

    python -m hvd_w2v.bench.textpass                       # the flat synthetic vocabulary of issue 37: 4M words,
                                                           # 40M tokens (330 MB), and data/real/corpus.txt if built
    python -m hvd_w2v.bench.textpass --scale 0.25 --runs 3 # a quicker look: 1M words, 10M tokens
    python -m hvd_w2v.bench.textpass --python-runs 0       # the compiled passes alone (Python's take minutes)
    python -m hvd_w2v.bench.textpass --gzip 4              # instead: each corpus as 4 .gz files, read by 1
                                                           # reader or by a reader a file (corpus.readers)

Run from the checkout. Each pass runs in a process of its own (``one``, below: vocab.build then encode.encode
on one rank, as `hvd-w2v encode` does, timed apart), the modes taking turns, ``--runs`` times each (Python's,
much slower, ``--python-runs`` times); the table gives medians, the seconds of the files' bytes, the CPU seconds
of the process (the compiled passes read the next block on a thread of their own while they work on one, so a
"1 thread" run may use a little more than one core) and the growth of its peak resident memory during the
passes, beside what the memory plan gives them (memory.MemoryPlan.passes: the count, or the words and tables
with the encoding, from the distinct tokens, words and tokens that run counted) and their ratio. word2vec.c
(../shared/peers/word2vec/word2vec.c, when present) is built with its own flags into a temporary folder and
run with ``-train CORPUS -save-vocab FILE`` and no output file: its vocabulary pass alone, which is what it
does before training (it has no encoding pass). Without it, its column says so and is left out.
The column "of which counting tokens" is the seconds the count spent in the compiled count's calls
(native.Counts.add_text, add_numbered); the rest of the count column is Python's orchestration and what
follows the counting (the vocabulary's order and ids, its lists of words). The row "2 processes at once"
runs two 1-thread passes side by side, each a whole copy of the work (its seconds the slower copy's, its CPU
both copies'): the gain two cores give this pass when none of its threads waits for another, the ceiling
against which "2 threads against 1" reads.
The line "the counting alone" times the compiled count's calls on the corpus's blocks held in memory (read
before the clock starts), on 1 and 2 threads: the counting's own gain from a second thread, with no reader
beside it taking a core; the next line the same calls (native.Counts.add_text) on the parts a rank cuts its
blocks into when the count has rounds (several ranks, vocab.part_bytes), against the 64 KiB parts of before.

With ``--gzip N`` each corpus is cut at line ends into N files of about equal bytes, compressed (gzip level 6)
once under ``--data``, and the compiled passes on 2 threads run over the plain text,
over the N .gz files on one reader (as before corpus.readers: one thread inflates every file) and on a reader
a file (up to the threads), and on 1 thread over the .gz files.

The synthetic corpus is made once under ``--data`` by hvd_w2v.synthetic (exponent 0.5: a flat vocabulary, most
words rare, the hardest case for the partial counts) and reused.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from . import ROOT, checkout_env

PEERS = os.path.join(os.path.dirname(ROOT), "shared", "peers", "word2vec")
MB = 1e6
TOGETHER = "compiled, 1 thread, 2 processes at once"


def make_corpus(path, vocab, tokens, seed=3):
    """The flat synthetic corpus, made once (the name holds the settings)."""
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    subprocess.run([sys.executable, "-m", "hvd_w2v.synthetic", path + ".tmp", "--vocab", str(vocab), "--tokens",
                    str(tokens), "--exponent", "0.5", "--seed", str(seed)], check=True, cwd=ROOT,
                   env=checkout_env(), stdout=subprocess.DEVNULL)
    os.replace(path + ".tmp", path)


def one(corpus, mode, threads, min_count):
    """One timed run in this process: prints ``count S kernel S encode S cpu S peak MiB planned MiB words N``
    (``kernel``: the seconds of ``count`` spent in the compiled count's calls, native.Counts). ``corpus``:
    a file or a folder of files; ``mode``: python, compiled (one pass, as `hvd-w2v encode` on one rank),
    two-pass (the compiled count, then the compiled encoding reading the text again), or compiled-1-reader
    (its .gz files inflated on one reader thread, as before corpus.readers); or read and read-1-reader: the
    text read ahead alone (``count`` its seconds); or counting: the compiled count's calls alone
    (native.Counts.add_numbered) over the blocks, read before the clock starts (``count`` their seconds). In
    one pass ``count`` is the count and the provisional stream written, ``encode`` the stream turned into ids."""
    import numpy as np

    from hvd_w2v import pipeline
    from hvd_w2v.common.config import Config
    from hvd_w2v.kernels import native
    from hvd_w2v.planning import memory
    from hvd_w2v.planning.plan import Alone
    from hvd_w2v.text import corpus as text
    from hvd_w2v.text import encode, vocab

    if mode == "python":
        native.text_kernel = lambda: None
    elif native.text_kernel() is None:
        sys.exit(f"the compiled text passes are not available: {native.unavailable('text_kernel')}")
    if mode == "compiled-1-reader":
        text.readers = lambda pieces, threads: 1
    paths, _ = text.files_of([corpus])
    readers = text.most_readers(paths, 1, threads)
    if mode.startswith("counting"):  # the count's calls alone, on blocks read before the clock starts
        lib, blocks = native.text_kernel(), [b for _, b in text.read_ahead(text.split(paths, 1)[0], readers)]
        out = np.empty(max(len(b) for b, _ in blocks) + 1, np.int32)
        part = int(mode.partition("-")[2] or 0)  # counting-N: add_text on parts of N bytes, as several ranks'
        cut = [[(block, *c) for c in vocab.cuts(block, part)] for block, _ in blocks] if part else None
        counts, cpu, t0 = native.Counts(lib, threads), _cpu(), time.perf_counter()
        if part:
            for parts in cut:
                for block_part in parts:
                    counts.add_text(*block_part)
        else:
            for block, file_end in blocks:
                counts.add_numbered(block, file_end, out)
        print(f"count {time.perf_counter() - t0:.3f} encode 0 cpu {_cpu() - cpu:.3f}", flush=True)
        return
    if mode.startswith("read"):  # the text read ahead (inflated, checked) and dropped: what the readers give
        cpu, t0 = _cpu(), time.perf_counter()
        for _ in text.read_ahead(text.split(paths, 1)[0], 1 if mode == "read-1-reader" else readers):
            pass
        print(f"count {time.perf_counter() - t0:.3f} encode 0 cpu {_cpu() - cpu:.3f}", flush=True)
        return
    kernel = _time_calls(native.Counts, ("add_text", "add_numbered"))
    alone = Alone()
    alone.threads = threads
    before = _status("VmRSS")
    cpu = _cpu()
    folder = tempfile.mkdtemp(prefix="textpass-")
    try:
        t0 = time.perf_counter()
        numbered = (encode.Provisional(folder, text.readers(text.split(paths, 1)[0], threads))
                    if mode.startswith("compiled") else None)
        voc = vocab.build(alone, paths, Config(min_count=min_count), reading=False, numbered=numbered)
        one_pass = voc.provisional is not None
        t1 = time.perf_counter()
        encode.encode(alone, paths, voc, folder, reading=False)
        t2 = time.perf_counter()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    planned = memory.plan(voc.size, Config(min_count=min_count), 1, voc.total, pipeline.corpus_bytes(paths),
                          threads=threads, readers=readers, distinct=voc.distinct, raw_tokens=voc.raw_words,
                          owned=voc.most_owned, block_distinct=voc.block_distinct,
                          passes=memory.PYTHON if mode == "python" else memory.COMPILED, one_pass=one_pass).passes
    print(f"count {t1 - t0:.3f} kernel {kernel[0]:.3f} encode {t2 - t1:.3f} cpu {_cpu() - cpu:.3f} "
          f"peak {(_status('VmHWM') - before) / 2**20:.1f} planned {planned / 2**20:.1f} words {voc.size}", flush=True)


def _time_calls(cls, names):
    """Wraps the methods ``names`` of ``cls`` (in this process) so that their seconds add up in the list
    returned (one item)."""
    spent = [0.0]

    def timed(method):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t0
        return call

    for name in names:
        setattr(cls, name, timed(getattr(cls, name)))
    return spent


def _cpu():
    """CPU seconds of this process so far, all its threads."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024


def run_one(corpus, mode, threads, min_count, copies=1):
    """``one``'s figures, from a process of its own; with ``copies`` > 1, that many such processes started
    together, each on its own copy of the work: then the slowest copy's seconds and peak, and all copies' CPU
    seconds."""
    procs = [subprocess.Popen([sys.executable, "-m", "hvd_w2v.bench.textpass", "one", corpus, mode, str(threads),
                               str(min_count)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env=checkout_env(dict(os.environ, HVD_W2V_THREADS=str(threads))))
             for _ in range(copies)]
    results = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, out)
        fields = out.split()
        results.append({k: float(v) for k, v in zip(fields[::2], fields[1::2])})
    slowest = max(results, key=lambda r: r["count"] + r["encode"])
    merged = dict(slowest, cpu=sum(r["cpu"] for r in results))
    if "peak" in slowest:
        merged["peak"] = max(r["peak"] for r in results)
    return merged


def build_word2vec(folder):
    """word2vec.c built in ``folder`` with its makefile's flags, or None when its source is absent."""
    source = os.path.join(PEERS, "word2vec.c")
    if not os.path.exists(source):
        return None
    binary = os.path.join(folder, "word2vec")
    subprocess.run(["gcc", source, "-o", binary, "-lm", "-pthread", "-O3", "-march=native", "-Wall",
                    "-funroll-loops", "-Wno-unused-result"], check=True, capture_output=True)
    return binary


def run_word2vec(binary, corpus, min_count, folder):
    """Seconds and CPU seconds of word2vec.c's vocabulary pass over ``corpus``."""
    t0 = time.perf_counter()
    before = os.times()
    subprocess.run([binary, "-train", corpus, "-save-vocab", os.path.join(folder, "vocab.txt"), "-min-count",
                    str(min_count)], check=True, capture_output=True)
    after = os.times()
    return {"count": time.perf_counter() - t0, "encode": 0.0,
            "cpu": after.children_user - before.children_user + after.children_system - before.children_system}


def table(corpus, runs, python_runs, min_count, w2v):
    size = os.path.getsize(corpus)
    modes = [("Python (today's passes), 1 thread", "python", 1, python_runs),
             ("compiled, two passes, 1 thread", "two-pass", 1, runs),
             ("compiled, 1 thread", "compiled", 1, runs), ("compiled, 2 threads", "compiled", 2, runs),
             (TOGETHER, "compiled", 1, runs)]
    modes = [m for m in modes if m[3] > 0]
    results = {name: [] for name, *_ in modes}
    alone = {1: [], 2: []}  # the counting alone, text in memory, on 1 and 2 threads
    from hvd_w2v.text import vocab  # the parts of the count on several ranks: before, and vocab.part_bytes
    parts = {(name, t): [] for name in ("chunk", "part") for t in (1, 2)}
    if w2v:
        results["word2vec.c vocabulary pass, 1 thread"] = []
    with tempfile.TemporaryDirectory(prefix="textpass-w2v-") as scratch:
        for r in range(max(runs, python_runs)):  # the modes take turns, so that the machine's load falls on all
            for name, mode, threads, n in modes:
                if r < n:
                    results[name].append(run_one(corpus, mode, threads, min_count, 2 if name == TOGETHER else 1))
            for threads, seconds in alone.items():
                if r < runs:
                    seconds.append(run_one(corpus, "counting", threads, min_count)["count"])
            for (name, threads), seconds in parts.items():
                if r < runs:
                    part = vocab.CHUNK_BYTES if name == "chunk" else vocab.part_bytes(threads)
                    seconds.append(run_one(corpus, f"counting-{part}", threads, min_count)["count"])
            if w2v:
                results["word2vec.c vocabulary pass, 1 thread"].append(run_word2vec(w2v, corpus, min_count, scratch))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in results.items()}
    for m in med.values():
        m["both"] = m["count"] + m["encode"]
    print(f"\n{corpus}: {size / MB:,.0f} MB, {med['compiled, 1 thread']['words']:,.0f} words kept; medians of "
          f"{runs} runs" + (f" ({python_runs} for Python's)" if python_runs else ""))
    print("| passes | count s | of which counting tokens s | encode s | both s | MB/s | CPU s | peak MiB | "
          "planned MiB | peak/plan |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, m in med.items():
        peak = f"{m['peak']:,.0f} | {m['planned']:,.0f} | {m['peak'] / m['planned']:.0%}" if "peak" in m else "- | - | -"
        encode = f"{m['encode']:.2f}" if not name.startswith("word2vec") else "(none)"
        kernel = f"{m['kernel']:.2f}" if m.get("kernel") else "-"
        print(f"| {name} | {m['count']:.2f} | {kernel} | {encode} | {m['both']:.2f} | {size / MB / m['both']:.1f} | "
              f"{m['cpu']:.2f} | {peak} |")
    one_t, two_t = med["compiled, 1 thread"], med["compiled, 2 threads"]
    py = med.get("Python (today's passes), 1 thread")
    if py:
        print(f"compiled on 1 thread against Python's passes: {py['both'] / one_t['both']:.1f}x faster "
              f"(2 threads: {py['both'] / two_t['both']:.1f}x)")
    two = med["compiled, two passes, 1 thread"]
    print(f"one pass against two on 1 thread: {two['both'] / one_t['both']:.2f}x")
    print(f"2 threads against 1: {one_t['both'] / two_t['both']:.2f}x (count {one_t['count'] / two_t['count']:.2f}x, "
          f"of which counting tokens {one_t['kernel'] / two_t['kernel']:.2f}x; encode "
          f"{one_t['encode'] / two_t['encode']:.2f}x)")
    one_a, two_a = (statistics.median(alone[t]) for t in (1, 2))
    print(f"the counting alone, its text in memory (no reader beside it): {one_a:.2f} s on 1 thread, {two_a:.2f} s on "
          f"2: {one_a / two_a:.2f}x")
    c1, c2, p1, p2 = (statistics.median(parts[name, t]) for name in ("chunk", "part") for t in (1, 2))
    print(f"the counting alone in the parts of a count on several ranks (rounds left out): parts of "
          f"{vocab.CHUNK_BYTES >> 10} KiB (before) {c1:.2f} s on 1 thread, {c2:.2f} s on 2 ({c1 / c2:.2f}x); "
          f"{vocab.THREAD_CHUNKS} x {vocab.CHUNK_BYTES >> 10} KiB a thread (vocab.part_bytes) {p1:.2f} s on 1, "
          f"{p2:.2f} s on 2 ({p1 / p2:.2f}x): {c2 / p2:.2f}x faster on 2 threads")
    pair = med[TOGETHER]
    print(f"2 processes of 1 thread at once against 1: {2 * one_t['both'] / pair['both']:.2f}x the work in the time "
          f"(what this machine gives the pass on 2 cores, with no thread of the pass waiting for another)")
    if w2v:
        ref = med["word2vec.c vocabulary pass, 1 thread"]
        print(f"count + encode on 1 thread against word2vec.c's vocabulary pass: {ref['both'] / one_t['both']:.2f}x "
              f"its speed by the clock, {ref['cpu'] / one_t['cpu']:.2f}x by CPU time")


def gzip_files(corpus, n, data):
    """``corpus`` cut at line ends into ``n`` .gz files of about equal bytes, made once under ``data``: the
    folder."""
    import gzip

    folder = os.path.join(data, f"{os.path.basename(corpus)}.gz-{n}")
    if os.path.exists(folder):
        return folder
    size, cut, part = os.path.getsize(corpus), 0, 0
    os.makedirs(folder + ".tmp", exist_ok=True)
    with open(corpus, "rb") as f:
        while part < n:
            with gzip.open(os.path.join(folder + ".tmp", f"part-{part:03d}.txt.gz"), "wb", compresslevel=6) as out:
                target = size * (part + 1) // n
                while cut < target or part == n - 1:
                    line = f.readline()
                    if not line:
                        break
                    out.write(line)
                    cut += len(line)
            part += 1
    os.replace(folder + ".tmp", folder)
    return folder


def gzip_table(corpus, n, runs, min_count, data):
    """The compiled passes over ``corpus`` as plain text and as ``n`` .gz files, on 1 reader and a reader a file."""
    folder = gzip_files(corpus, n, data)
    packed = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    modes = [("plain text, 2 threads", corpus, "compiled", 2),
             (f"{n} .gz files, 2 threads, 1 reader", folder, "compiled-1-reader", 2),
             (f"{n} .gz files, 2 threads, a reader a file", folder, "compiled", 2),
             (f"{n} .gz files, 1 thread (1 reader)", folder, "compiled", 1),
             (f"{n} .gz files read alone (inflated, checked), 1 reader", folder, "read-1-reader", 2),
             (f"{n} .gz files read alone, a reader a file", folder, "read", 2)]
    results = {name: [] for name, *_ in modes}
    for _ in range(runs):  # the modes take turns, so that the machine's load falls on all
        for name, path, mode, threads in modes:
            results[name].append(run_one(path, mode, threads, min_count))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in results.items()}
    size = os.path.getsize(corpus)
    print(f"\n{corpus}: {size / MB:,.0f} MB of text, as {n} .gz files {packed / MB:,.0f} MB; medians of {runs} runs")
    print("| passes | count s | encode s | both s | text MB/s | CPU s | peak MiB | planned MiB | peak/plan |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in med.items():
        both = m["count"] + m["encode"]
        memory = f"{m['peak']:,.0f} | {m['planned']:,.0f} | {m['peak'] / m['planned']:.0%}" if "peak" in m else "- | - | -"
        passes = f"{m['count']:.2f} | {m['encode']:.2f}" if "peak" in m else "- | -"
        print(f"| {name} | {passes} | {both:.2f} | {size / MB / both:.1f} | {m['cpu']:.2f} | {memory} |")
    both = [m["count"] + m["encode"] for m in med.values()]
    print(f"a reader a file against 1 reader: {both[1] / both[2]:.2f}x with the passes on 2 threads, "
          f"{both[4] / both[5]:.2f}x reading alone; the .gz files against the plain text: {both[0] / both[1]:.2f}x "
          f"(1 reader), {both[0] / both[2]:.2f}x (a reader a file)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["one"]:
        corpus, mode, threads, min_count = argv[1:5]
        one(corpus, mode, int(threads), int(min_count))
        return
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.bench.textpass", description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="the synthetic corpus's vocabulary and tokens times this")
    p.add_argument("--runs", type=int, default=3, help="runs of each compiled mode and of word2vec.c")
    p.add_argument("--python-runs", type=int, default=1,
                   help="runs of Python's passes (minutes each at scale 1; 0: none)")
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--data", default=os.path.join(ROOT, "data", "bench"), help="where the synthetic corpus is kept")
    p.add_argument("--real", default=os.path.join(ROOT, "data", "real", "corpus.txt"),
                   help="the real corpus (python -m hvd_w2v.realcorpus); skipped when absent")
    p.add_argument("--gzip", type=int, default=0, metavar="N",
                   help="instead: the compiled passes over each corpus as N .gz files (made once under --data)")
    a = p.parse_args(argv)
    vocab, tokens = int(4_000_000 * a.scale), int(40_000_000 * a.scale)
    corpus = os.path.join(a.data, f"flat-{vocab}-{tokens}-s3.txt")
    make_corpus(corpus, vocab, tokens)
    if a.gzip:
        for path in (corpus, a.real):
            if os.path.exists(path):
                gzip_table(path, a.gzip, a.runs, a.min_count, a.data)
        return
    with tempfile.TemporaryDirectory(prefix="textpass-build-") as build:
        w2v = build_word2vec(build)
        print(f"word2vec.c: built from {PEERS} into a temporary folder" if w2v else
              f"word2vec.c: no source at {PEERS}; its column is left out")
        table(corpus, a.runs, a.python_runs, a.min_count, w2v)
        if os.path.exists(a.real):
            table(a.real, a.runs, a.python_runs, a.min_count, w2v)
        else:
            print(f"\n{a.real}: absent (python -m hvd_w2v.realcorpus builds it); skipped")


if __name__ == "__main__":
    main()
