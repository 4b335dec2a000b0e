"""Beyond one machine's RAM (issue 6), measured: the synthetic generator's memory does not grow with the
vocabulary, and no rank holds the whole vocabulary while it is built.

Memory is read from the kernel, not estimated: the generator's peak resident size (``ru_maxrss`` of the
child, from ``wait4``) and, for the vocabulary, each rank's ``VmHWM`` after ``vocab.build`` minus its
``VmRSS`` just before it (the high-water mark is reset through ``/proc/self/clear_refs`` first).
Run as a script (``python tests/test_scale_memory.py CORPUS``, under ``mpi/launch``), this file is the
per-rank probe of the vocabulary build.
"""
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections import Counter

import numpy as np
import pytest

from conftest import ROOT, launch

MIB = 1 << 20


def run_for_peak(cmd, timeout):
    """Run ``cmd``; returns (its output, its peak resident bytes as the kernel counted them). Killed after
    ``timeout`` seconds."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        out = proc.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage, not the sum over all children
    finally:
        timer.cancel()
        proc.stdout.close()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    assert proc.returncode == 0, f"{cmd} ended with {proc.returncode} (killed after {timeout} s?)\n{out[-2000:]}"
    return out, usage.ru_maxrss * 1024  # Linux: KiB


def test_generator_memory_does_not_grow_with_the_vocabulary(tmp_path):
    """The same 200,000 tokens drawn from 10 thousand, 10 million and 100 million words: the same peak, within
    what one block's arrays vary with the ids' length and the tail's share. (The table version, which held
    every name and a float64 CDF, peaked at 42 MiB for 10 thousand words and 952 MiB for 10 million.)"""
    peaks = {}
    for vocab in (10_000, 10_000_000, 100_000_000):
        out, peaks[vocab] = run_for_peak([sys.executable, "-m", "hvd_w2v.synthetic", str(tmp_path / f"{vocab}.txt"),
                                          "--tokens", "200000", "--vocab", str(vocab), "--exponent", "0.5"],
                                         timeout=60)
        assert "tokens/s" in out, out
    print("generator peak resident MiB: " + ", ".join(f"{p / MIB:.0f} at {v:,} words" for v, p in peaks.items()))
    assert max(peaks.values()) - min(peaks.values()) < 16 * MIB, peaks


def test_generator_follows_its_law_past_the_table(tmp_path):
    """Counts in log-spaced rank bins, across the exact table's end (HEAD_WORDS) and into the continuous
    tail, match N * p(i) within 5 standard deviations; the output is a function of the seed."""
    from hvd_w2v.synthetic import HEAD_WORDS, ZipfSampler, generate

    vocab, tokens, s = 300_000, 2_000_000, 0.5
    path = tmp_path / "law.txt"
    generate(str(path), tokens, vocab=vocab, exponent=s, pairs=0, seed=7, block=300_000)
    data = path.read_bytes()
    ids = np.array([int(t[1:]) for t in data.split()], dtype=np.int64)
    assert len(ids) == tokens and data.count(b"\n") == tokens // 20
    seen = np.bincount(ids, minlength=vocab)
    assert len(seen) == vocab  # no index beyond the vocabulary
    expected = tokens * ZipfSampler(vocab, s).probability(np.arange(vocab))
    assert abs(expected.sum() - tokens) < 1e-6 * tokens  # the table and the tail's integral add up to 1
    edges = np.unique(np.r_[0, 2 ** np.arange(0, 19), HEAD_WORDS - 1000, HEAD_WORDS, HEAD_WORDS + 1000, vocab])
    edges = edges[edges <= vocab]
    for lo, hi in zip(edges[:-1], edges[1:]):
        got, want = seen[lo:hi].sum(), expected[lo:hi].sum()
        assert abs(got - want) <= 5 * np.sqrt(want), (lo, hi, got, want)

    again = tmp_path / "again.txt"
    generate(str(again), tokens, vocab=vocab, exponent=s, pairs=0, seed=7, block=300_000)
    assert again.read_bytes() == data
    generate(str(again), tokens, vocab=vocab, exponent=s, pairs=0, seed=8, block=300_000)
    assert again.read_bytes() != data


def test_small_vocabularies_write_what_they_always_wrote(tmp_path):
    """Within the exact table the text is byte for byte the earlier generator's: the corpora of
    tests/test_train.py and tests/test_checkpoint.py (1,075 words kept) and tests/test_memory.py are unchanged.
    The digests were taken from the table-only generator, the one before the flat vocabulary's."""
    from hvd_w2v.synthetic import generate

    for kwargs, digest in [
        (dict(tokens=40000, vocab=2000, pairs=20, first=20, seed=0),
         "96b37b1b62f20e6a2ee865e40f3ca2155bdf653e11881c9eac0485e54eb8409c"),
        (dict(tokens=300_000, vocab=20000, seed=1), "85577ecd9bb2f8490e2c52ccf343ffba680756c6515aa51195e0fbd51bd6f0d0"),
        (dict(tokens=3_000_000, vocab=60000, seed=5, block=100000),
         "5837bb6d1b3e95642d2e31d27de944d61c52642f0cfe3e808850efae974f716a"),
    ]:
        path = tmp_path / "c.txt"
        generate(str(path), kwargs.pop("tokens"), **kwargs)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, kwargs


# -- the vocabulary ------------------------------------------------------------------------------------------

# 800k distinct words, 630k of them kept at min_count 5 (a Poisson expectation, below); 6M tokens, 51 MB.
BIG = dict(tokens=6_000_000, vocab=800_000, exponent=0.3)


def expected_kept(tokens, vocab, exponent, min_count=5):
    """Words expected at least ``min_count`` times: each word's count is about Poisson(N p(i))."""
    from hvd_w2v.synthetic import ZipfSampler

    lam = tokens * ZipfSampler(vocab, exponent).probability(np.arange(vocab))
    term, below = np.exp(-lam), np.zeros(vocab)
    for k in range(min_count):  # P(count < min_count) = sum over k < min_count of e^-lam lam^k / k!
        below += term
        term = term * lam / (k + 1)
    return float((1 - below).sum())


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory):
    from hvd_w2v.synthetic import generate

    path = tmp_path_factory.mktemp("scale") / "big.txt"
    generate(str(path), BIG["tokens"], vocab=BIG["vocab"], exponent=BIG["exponent"], seed=11)
    return str(path)


def probe(nranks, corpus):
    """Build the vocabulary of ``corpus`` on ``nranks`` ranks (this file run as a script); its report."""
    result = launch(nranks, [sys.executable, __file__, corpus], timeout=150)
    assert result.ok, f"{nranks} ranks: {'hung' if result.hung else result.returncode}\n{result.output[-3000:]}"
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    assert len(lines) == 1, result.output[-3000:]
    return json.loads(lines[0])


def test_no_rank_holds_the_whole_vocabulary(big_corpus):
    """At 4 ranks each rank's growth during vocab.build is under half of the growth at 1 rank, where one
    process holds every distinct word; the vocabulary (ids, words, counts) is the same on both.

    Measured before the rounds (each rank counted its whole range in one Counter): 285 MiB at 1 rank and
    164 MiB on each of 4 ranks, 0.58x; with them, 222 and 80-82 MiB, 0.37x; with the compiled tables grown in
    place (never their old and new slots at once), 118 and 44-48 MiB, 0.41x."""
    one, four = probe(1, big_corpus), probe(4, big_corpus)
    print(f"vocab.build of {one['size']:,} words ({one['distinct']:,} distinct): growth MiB at 1 rank "
          f"{one['growth_mib']}, at 4 ranks {four['growth_mib']}; seconds {one['seconds']} and {four['seconds']}")
    (alone,) = one["growth_mib"]
    assert alone > 100, one  # the whole vocabulary in one process: well above any per-rank bound
    assert max(four["growth_mib"]) < 0.5 * alone, (one, four)
    want = expected_kept(**BIG)
    assert abs(one["size"] - want) < 0.01 * want, (one["size"], want)
    assert (four["size"], four["distinct"], four["digest"]) == (one["size"], one["distinct"], one["digest"])


@pytest.mark.mpi(2, 3, timeout=120)
def test_counts_are_exact_over_many_rounds(comm, tmp_path_factory):
    """With a partial Counter of at most 64 words, ranks go through hundreds of rounds, ending their text
    in different rounds (the first half of the text repeats a few words, the second is Zipf-distributed):
    the vocabulary still equals a plain count of the whole file."""
    from hvd_w2v.common.config import Config
    from hvd_w2v.parallel.comm import Comm
    from hvd_w2v.synthetic import generate
    from hvd_w2v.text import vocab

    folder = comm.bcast(str(tmp_path_factory.mktemp("rounds")) if comm.Get_rank() == 0 else None)
    path = f"{folder}/mixed.txt"
    if comm.Get_rank() == 0:
        generate(f"{folder}/zipf.txt", 60000, vocab=100_000, exponent=0.7, pairs=0, seed=5)
        with open(path, "wb") as f:
            f.write(b"alpha beta gamma delta\n" * 100_000 + open(f"{folder}/zipf.txt", "rb").read())
    comm.Barrier()
    vocab.FLUSH_WORDS, vocab.CHUNK_BYTES, vocab.THREAD_CHUNKS = 64, 1024, 1
    rounds = []
    flush, flush_compiled = vocab._flush, vocab._flush_compiled  # Python's passes, or the compiled ones
    vocab._flush = lambda *a: (rounds.append(1), flush(*a))[1]  # its answer: a memory limit's refusal or None
    vocab._flush_compiled = lambda *a: (rounds.append(1), flush_compiled(*a))[1]
    c = Comm(comm)
    voc = vocab.build(c, [path], Config(min_count=3))
    per_rank = comm.allgather(len(rounds))
    assert min(per_rank) > 100, per_rank

    counts = Counter(open(path, "rb").read().split())
    kept = sorted(((n, vocab.hash64(w), w) for w, n in counts.items() if n >= 3), key=lambda t: (-t[0], t[1]))
    assert voc.size == len(kept) and voc.raw_words == sum(counts.values())
    mine = range(comm.Get_rank(), voc.size, comm.Get_size())  # shard.RowPlan: id i on rank i % P
    assert voc.row_words == [kept[i][2] for i in mine]
    assert voc.row_counts.tolist() == [kept[i][0] for i in mine]
    owned = {w: i for i, (_, h, w) in enumerate(kept) if vocab.hash_owner(h, comm.Get_size()) == comm.Get_rank()}
    assert voc.lookup == owned


def _probe_main(corpus):
    """One rank of ``probe``: VmRSS before vocab.build, VmHWM after, and a digest of what the rank holds that
    does not depend on the rank count (a sum over its rows and lookup entries)."""
    import time

    from mpi4py import MPI

    from hvd_w2v.common.config import Config
    from hvd_w2v.parallel.comm import Comm
    from hvd_w2v.text import vocab

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

    c = Comm(MPI.COMM_WORLD)  # mpi4py alone: vocab.build needs no Horovod, and the baseline stays small
    c.barrier()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current VmRSS
    before = status("VmRSS")
    assert status("VmHWM") <= before + MIB, "the high-water mark was not reset"
    start = time.perf_counter()
    distinct = []
    voc = vocab.build(c, [corpus], Config(min_count=5), log=lambda m: distinct.append(m))
    seconds = time.perf_counter() - start
    growth = status("VmHWM") - before
    ids = range(c.rank, voc.size, c.size)
    digest = sum(vocab.hash64(b"row %d %s %d" % (i, w, n)) for i, w, n in zip(ids, voc.row_words, voc.row_counts))
    digest += sum(vocab.hash64(b"lookup %s %d" % (w, i)) for w, i in voc.lookup.items())
    report = c.allgather((growth, seconds, digest % 2**64))
    if c.rank == 0:
        line = next(m for m in distinct if "distinct tokens" in m)
        print(json.dumps({"ranks": c.size, "size": voc.size,
                          "distinct": int(line.split(", ")[1].split()[0].replace(",", "")),
                          "growth_mib": [round(g / MIB) for g, _, _ in report],
                          "seconds": [round(s, 1) for _, s, _ in report],
                          "digest": sum(d for _, _, d in report) % 2**64}), flush=True)


if __name__ == "__main__":
    _probe_main(sys.argv[1])
