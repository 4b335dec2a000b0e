"""Train's preparation (the vocabulary's count and the encoding: `hvd-w2v encode`) on the scale benchmark's
corpus, this checkout against another commit's, in one run.

    python -m hvd_w2v.bench.preparation 472bf62            # the Python passes issue 37 started from
    python -m hvd_w2v.bench.preparation 472bf62 --ranks 1 2 --runs 3

Run from a git checkout. COMMIT's tree is checked out into a temporary git worktree (removed at the end) and
each side runs `mpi/launch -n P hvd-w2v encode CORPUS` with its own tree first on PYTHONPATH, the two taking
turns for ``--runs`` rounds, so that the machine's load falls on both. Each run is followed by the same
command on a corpus of 20 short lines (start-up: Python, TensorFlow, MPI), and the table gives medians of
the whole command and of the passes alone (the difference), and this checkout's speed-up on each.

The corpus is the scale benchmark's (hvd_w2v.bench.scale: power law of exponent 0.5, 10 tokens per word;
``--words`` 1,000,000 by default: 72 MiB, 0.82M words kept), made once under ``--data``. Layouts are
mpi/launch's defaults (the cores shared among the ranks as threads).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from . import ROOT
from .scale import make_corpus


def encode_seconds(tree, ranks, corpus, out):
    """Seconds of `hvd-w2v encode CORPUS` from checkout ``tree`` on ``ranks`` ranks (``out`` made afresh: older
    commits refuse a folder that holds a run)."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    done = subprocess.run([os.path.join(tree, "mpi", "launch"), "-n", str(ranks), "hvd-w2v", "encode", corpus,
                           "--out", out], cwd=tree, capture_output=True, text=True,
                          env=dict(os.environ, HVD_W2V_VENV=os.path.join(ROOT, ".venv"),
                                   PYTHONPATH=os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)))
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"hvd-w2v encode failed in {tree} on {ranks} ranks:\n{done.stdout[-2000:]}"
                         f"{done.stderr[-2000:]}")
    return seconds


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.bench.preparation", description=__doc__.split("\n")[0])
    p.add_argument("commit", help="the commit whose preparation is the reference (git rev)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--words", type=int, default=1_000_000, help="vocabulary of the scale benchmark's corpus")
    p.add_argument("--data", default=os.path.join(ROOT, "data", "scale"))
    a = p.parse_args(argv)
    corpus = os.path.join(a.data, f"zipf-{a.words}-10-0.txt")
    make_corpus(corpus, a.words, 10, 0)
    rev = subprocess.run(["git", "rev-parse", "--short", a.commit], cwd=ROOT, capture_output=True, text=True)
    if rev.returncode:
        raise SystemExit(f"no commit {a.commit} in {ROOT}: {rev.stderr.strip()}")
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="hvd-w2v-preparation-") as scratch:
        old = os.path.join(scratch, "tree")
        subprocess.run(["git", "worktree", "add", "--detach", old, a.commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            tiny = os.path.join(scratch, "tiny.txt")
            with open(tiny, "w") as f:
                f.write("a b c d e f g h\n" * 20)
            sides = {f"{rev.stdout.strip()} (the reference)": old,
                     f"this checkout ({here.stdout.strip()})": ROOT}
            seconds = {(side, r, kind): [] for side in sides for r in a.ranks for kind in ("all", "start")}
            for _ in range(a.runs):
                for side, tree in sides.items():
                    for r in a.ranks:
                        out = os.path.join(scratch, "out")
                        seconds[side, r, "all"].append(encode_seconds(tree, r, corpus, out))
                        seconds[side, r, "start"].append(encode_seconds(tree, r, tiny, out))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", old], cwd=ROOT, capture_output=True)
    size = os.path.getsize(corpus)
    print(f"{corpus}: {size / 2**20:,.0f} MiB; `hvd-w2v encode`, medians of {a.runs} runs, the sides taking turns")
    print("| ranks | side | whole command s | start-up s (20 lines) | passes s | passes' speed-up |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in a.ranks:
        passes = {}
        for side in sides:
            whole = statistics.median(seconds[side, r, "all"])
            start = statistics.median(seconds[side, r, "start"])
            passes[side] = whole - start
            ref = next(iter(passes.values()))
            print(f"| {r} | {side} | {whole:.2f} | {start:.2f} | {passes[side]:.2f} | "
                  f"{ref / passes[side]:.1f}x |")
    # the whole command's ratio too: start-up included, so a lower bound of the passes' speed-up
    for r in a.ranks:
        whole = [statistics.median(seconds[side, r, "all"]) for side in sides]
        print(f"{r} rank(s): the whole command {whole[0] / whole[1]:.1f}x faster here")


if __name__ == "__main__":
    main()
