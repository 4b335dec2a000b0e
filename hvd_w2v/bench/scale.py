"""Scale: one large-vocabulary model trained at 1, 2 and 4 ranks; memory per rank against the plan, and a
model larger than the per-rank limit trained under that limit.

    python -m hvd_w2v.bench.scale                      # about 0.8M words x dim 200: 1.2 GiB of matrices
    python -m hvd_w2v.bench.scale --words 200000 --ranks 1 2 --limit 700M   # a quick look

Run from the checkout (it launches hvd-w2v through mpi/launch). Steps:

1. a synthetic corpus (hvd_w2v.synthetic, power-law exponent 0.5, about ``--tokens-per-word`` tokens per
   vocabulary word, so the rarest words still reach min_count) under ``--data``, made once and reused;
2. ``hvd-w2v train`` for 1 epoch at each of ``--ranks``, without a limit, reading the plan and the measured
   peak resident memory per rank (ru_maxrss, after export) from its output;
3. at the largest rank count, the same job again inside a memory cgroup of ``limit x ranks`` (the kernel
   enforces it; the trainer reads it and divides by the ranks on the node), then 1 rank inside a cgroup of
   ``limit``: it must refuse at start-up with the plan's message, before any matrix is allocated.

Where no memory cgroup can be made (not root, no cgroup v1 memory controller or v2 delegation), step 3 uses
``--max-memory-per-rank`` instead and says so: the plan is checked but the kernel enforces nothing.

At the end, ``--out``/scale.png (unless ``--no-plot``; skipped with a line when matplotlib is missing): peak,
planned and model MiB per rank against the rank count with the limit as a horizontal line, and words per second
beside it, from the unlimited runs of step 2.
"""
import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time

from . import ROOT, checkout_env, plots

MIB = 1 << 20


def make_corpus(path, words, tokens_per_word, seed):
    """Generate the corpus once; an existing file with the same name is reused (the name holds the settings)."""
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    subprocess.run([sys.executable, "-m", "hvd_w2v.synthetic", tmp, "--vocab", str(words), "--tokens",
                    str(words * tokens_per_word), "--exponent", "0.5", "--seed", str(seed)], check=True, cwd=ROOT)
    os.replace(tmp, path)


@contextlib.contextmanager
def memory_cgroup(limit_bytes):
    """A fresh memory cgroup (v1, or v2 where the memory controller is delegated) limited to ``limit_bytes``;
    yields a ``preexec_fn`` that moves a child process into it, or None when none can be made here."""
    made = None
    try:
        made = _make_cgroup(limit_bytes)
    except OSError:
        pass
    if made is None:
        yield None
        return
    folder, _ = made
    try:
        yield lambda: _write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))
    finally:
        for _ in range(50):  # the job's processes may take a moment to leave
            try:
                os.rmdir(folder)
                break
            except OSError:
                time.sleep(0.1)


def _make_cgroup(limit_bytes):
    lines = open("/proc/self/cgroup").read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):  # v1
            folder = f"/sys/fs/cgroup/memory{path}/hvd-w2v-scale-{os.getpid()}"
            os.mkdir(folder)
            _write(os.path.join(folder, "memory.limit_in_bytes"), str(limit_bytes))
            return folder, "v1"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: needs the memory controller enabled for children of our cgroup
            parent = os.path.normpath(f"/sys/fs/cgroup{path}")
            if "memory" not in open(os.path.join(parent, "cgroup.subtree_control")).read().split():
                return None
            folder = os.path.join(parent, f"hvd-w2v-scale-{os.getpid()}")
            os.mkdir(folder)
            _write(os.path.join(folder, "memory.max"), str(limit_bytes))
            return folder, "v2"
    return None


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def train(corpus, ranks, out, args, extra=(), preexec=None):
    """One `hvd-w2v train` job; returns (exit code, its output). Its folder is removed afterwards (a model
    of this size exports gigabytes)."""
    cmd = [os.path.join(ROOT, "mpi", "launch"), "-n", str(ranks), "hvd-w2v", "train", corpus, "--out", out,
           "--epochs", "1", "--dim", str(args.dim), "--format", "binary", "--show", "", "--quiet", "--overwrite", *extra]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, preexec_fn=preexec,
                              timeout=args.timeout, env=checkout_env())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return done.returncode, done.stdout + done.stderr


def figures(output):
    """(planned MiB, model MiB, [measured peak MiB per rank], words/s) from a finished job's output."""
    planned = re.search(r"memory: planned ([\d,]+) MiB per rank, measured peak \[([\d, ]+)\]", output)
    model = re.search(r"plan: training [\d,]+ = model ([\d,]+)", output)
    speed = re.search(r"done: ([\d,]+) words/s", output)
    if not (planned and model and speed):
        raise SystemExit(f"unexpected output:\n{output[-3000:]}")
    num = lambda s: int(s.replace(",", ""))  # noqa: E731
    return (num(planned.group(1)), num(model.group(1)), [int(x) for x in planned.group(2).split(",")],
            num(speed.group(1)))


def plot(path, rows, limit, about):
    """``path`` (a PNG) from the rows of the table, (ranks, planned, model, peaks, words/s) each, and the limit
    in bytes; prints ``plot: PATH`` (or one line saying why not)."""
    why = plots.missing()
    if why:
        print(why)
        return
    ranks = [r[0] for r in rows]
    memory = {"peak (measured, largest rank)": [max(r[3]) for r in rows], "planned": [r[1] for r in rows],
              "model (W_in + W_out slice)": [r[2] for r in rows]}
    print("plot: " + plots.rank_panels(
        path, f"Scale: {about}", ranks,
        [(memory, "MiB per rank", {f"limit per rank ({limit / MIB:,.0f} MiB)": limit / MIB}),
         ({"hvd-w2v": [r[4] for r in rows]}, "words per second", None)], cores=os.cpu_count()))


def main(argv=None):
    from ..planning.memory import parse_size

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--words", type=int, default=1_000_000, help="vocabulary words to generate (default: %(default)s)")
    p.add_argument("--tokens-per-word", type=int, default=10)
    p.add_argument("--dim", type=int, default=200)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--limit", default="1G", help="memory limit per rank for the limited runs (default: %(default)s)")
    p.add_argument("--data", default=os.path.join("data", "scale"))
    p.add_argument("--out", default=os.path.join("runs", "scale"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed per job")
    p.add_argument("--no-plot", action="store_true", help="print the tables only, no PNG")
    args = p.parse_args(argv)
    limit = parse_size(args.limit)

    corpus = os.path.abspath(os.path.join(args.data, f"zipf-{args.words}-{args.tokens_per_word}-{args.seed}.txt"))
    t = time.monotonic()
    make_corpus(corpus, args.words, args.tokens_per_word, args.seed)
    print(f"corpus {corpus}: {os.path.getsize(corpus) / MIB:,.0f} MiB ({time.monotonic() - t:.0f} s to make "
          f"or find)", flush=True)

    rows = []
    vocab = None
    for ranks in args.ranks:
        code, output = train(corpus, ranks, os.path.abspath(os.path.join(args.out, f"np{ranks}")), args)
        if code != 0:
            raise SystemExit(f"hvd-w2v failed at {ranks} ranks:\n{output[-3000:]}")
        vocab = vocab or re.search(r"vocab: ([\d,]+) words with count", output).group(1)
        rows.append((ranks, *figures(output)))
        print(f"  {ranks} rank(s) done", flush=True)

    matrices = int(vocab.replace(",", "")) * args.dim * 4 * 2
    print(f"\nvocabulary {vocab} words, dim {args.dim}: W_in + W_out = {matrices / MIB:,.0f} MiB; 1 epoch, "
          f"{len(args.ranks)} rank counts on {os.cpu_count()} cores (more ranks than cores: oversubscribed)")
    print(f"{'ranks':>5} {'planned MiB':>12} {'model MiB':>10} {'peak MiB/rank':>16} {'peak/plan':>10} "
          f"{'vs 1 rank':>10} {'words/s':>10}")
    first = max(rows[0][3])
    for ranks, planned, model, peaks, speed in rows:
        print(f"{ranks:5} {planned:12,} {model:10,} {max(peaks):16,} {max(peaks) / planned:10.0%} "
              f"{max(peaks) / first:10.2f} {speed:10,}")

    top = max(args.ranks)
    print(f"\nlimit {limit / MIB:,.0f} MiB per rank; the matrices are {matrices / limit:.1f}x that")
    with memory_cgroup(limit * top) as preexec:
        how = (f"in a memory cgroup of {top} x {limit / MIB:,.0f} MiB" if preexec
               else f"with --max-memory-per-rank {args.limit} (no memory cgroup could be made here)")
        extra = () if preexec else ("--max-memory-per-rank", args.limit)
        code, output = train(corpus, top, os.path.abspath(os.path.join(args.out, f"limited-np{top}")), args,
                             extra, preexec)
    verdict = f"exit {code}"
    if code == 0:
        planned, _, peaks, speed = figures(output)
        verdict += f", planned {planned:,} MiB, peak {peaks} MiB per rank, {speed:,} words/s"
    print(f"{top} ranks {how}: {verdict}")
    with memory_cgroup(limit) as preexec:
        extra = () if preexec else ("--max-memory-per-rank", args.limit)
        code, output = train(corpus, 1, os.path.abspath(os.path.join(args.out, "limited-np1")), args, extra,
                             preexec)
    refusal = re.search(r"memory plan does not fit[^\n]*", output)
    print(f"1 rank under the same limit: exit {code}: {refusal.group(0) if refusal else output[-1000:]}")
    if not args.no_plot:
        plot(os.path.join(args.out, "scale.png"), rows, limit, f"{vocab} words, dim {args.dim}, 1 epoch")


if __name__ == "__main__":
    main()
