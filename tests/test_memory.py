"""The memory plan: its arithmetic (plain pytest) and, on 2 real ranks, the refusal and the measured peak."""
import os
import re
from dataclasses import replace

import pytest

from conftest import launch
from hvd_w2v.common.config import Config
from hvd_w2v.common.errors import UserError
from hvd_w2v.planning import memory
from hvd_w2v.synthetic import generate
from hvd_w2v.text import encode, vocab
from hvd_w2v.text.corpus import WHITESPACE
from hvd_w2v.text.corpus import most_readers

MIB = memory.MIB


def test_model_part_falls_as_one_over_ranks():
    cfg = Config(dim=300)
    v = 1_200_000
    one = memory.plan(v, cfg, 1).model
    assert one == v * 301 * 4 * 2
    for p in (2, 3, 4, 8, 64):
        assert memory.plan(v, cfg, p).model == -(-v // p) * 301 * 4 * 2
        assert memory.plan(v, cfg, p).model <= one / p + 301 * 4 * 2


@pytest.mark.parametrize("ranks", [1, 2, 7])
@pytest.mark.parametrize("corpus_bytes", [None, 0, 10_000, 1 << 32])
def test_components_add_up(ranks, corpus_bytes):
    p = memory.plan(500_000, Config(hot_rows=1000), ranks, positions=10**8, corpus_bytes=corpus_bytes)
    assert p.training == p.model + p.step + p.hot + p.end and p.end == memory.END_BYTES
    text = p.text_baseline + max(p.counting, p.tables + p.words + p.encoding)
    assert p.total == max(text, p.baseline + p.tables + p.words + p.training)
    assert p.peak("vocab") == p.text_baseline + max(p.counting, p.tables + p.words) <= p.peak("encode") <= p.total
    assert p.passes == p.peak("encode") - p.text_baseline
    # the text passes run before TensorFlow starts; the exact step's training with it
    assert p.text_baseline == memory.LEAN_BYTES < p.baseline == memory.BASELINE_BYTES
    assert p.tables == vocab.RUN_BYTES * 14143 + vocab.GUIDE_BYTES + vocab.KEEP_HEAD_BYTES
    assert p.hot > 2 * 1000 * 100 * 4
    assert p.owned_tokens == -(-500_000 // ranks)  # no distinct tokens given: the words kept, the fewest
    assert p.counting == p.owned + memory.counting_bytes(0, ranks, 1, corpus_bytes)
    lines = str(p).splitlines()
    assert len(lines) == 3 and f"{p.total / MIB:,.0f} MiB per rank" in lines[0]
    assert len(p.describe("encode").splitlines()) == 2


def test_the_baseline_is_tensorflow_s_only_where_it_starts():
    """TensorFlow and Horovod start for the exact step, hot rows and TensorBoard, or before hvd-w2v's passes in
    a Python user's process; shard-local SGD without hot rows and the text passes run without them."""
    lean, full = memory.LEAN_BYTES, memory.BASELINE_BYTES
    shards = Config(shards=4, superstep=1024)
    assert (memory.plan(1000, shards, 2).baseline, memory.plan(1000, Config(), 2).baseline) == (lean, full)
    assert memory.plan(1000, replace(shards, hot_rows=100), 2).baseline == full
    assert memory.plan(1000, shards, 2, tensorflow=True).baseline == full
    loaded = memory.plan(1000, shards, 2, loaded=True)
    assert loaded.baseline == loaded.text_baseline == full
    assert memory.plan(1000, shards, 2).total < memory.plan(1000, Config(), 2).total


def test_total_never_grows_with_ranks():
    cfg = Config()
    totals = [memory.plan(3_000_000, cfg, p, positions=10**9, corpus_bytes=10**10).total for p in range(1, 200)]
    assert all(a >= b for a, b in zip(totals, totals[1:]))


@pytest.mark.parametrize("cfg", [Config(shards=4, superstep=100_000), Config(batch_words=1_000_000)])
def test_a_step_longer_than_the_corpus_plans_the_corpus_alone(cfg):
    """No step or shard has more centres than the corpus has kept tokens: past them, a longer step or
    super-step plans no more memory; below them it does."""
    small = dict(positions=50_000, corpus_bytes=300_000)
    longer = replace(cfg, superstep=10**7) if cfg.shards else replace(cfg, batch_words=1 << 24)
    shorter = replace(cfg, superstep=1_000) if cfg.shards else replace(cfg, batch_words=1_000)
    assert memory.plan(1_000, longer, 2, **small).step == memory.plan(1_000, cfg, 2, **small).step
    assert memory.plan(1_000, shorter, 2, **small).step < memory.plan(1_000, cfg, 2, **small).step
    assert memory.plan(1_000, cfg, 2).step > memory.plan(1_000, cfg, 2, **small).step  # corpus unknown


@pytest.mark.parametrize("vocab_size, dim, limit_mib", [(10_000_000, 300, 900), (68_606, 100, 600),
                                                        (2_000_000, 100, 700), (1000, 100, 2000)])
def test_min_ranks_is_the_smallest_that_fits(vocab_size, dim, limit_mib):
    cfg, limit = Config(dim=dim), limit_mib * MIB
    p = memory.min_ranks(limit, vocab_size, cfg, positions=10**7, corpus_bytes=10**8)
    assert p is not None
    assert memory.plan(vocab_size, cfg, p, positions=10**7, corpus_bytes=10**8).total <= limit
    if p > 1:
        assert memory.plan(vocab_size, cfg, p - 1, positions=10**7, corpus_bytes=10**8).total > limit


def test_min_ranks_none_below_the_baseline():
    assert memory.min_ranks(memory.BASELINE_BYTES - 1, 1000, Config()) is None


@pytest.mark.parametrize("text, value", [("4G", 4 << 30), ("512M", 512 << 20), ("1.5GiB", 3 << 29),
                                         ("1000000", 1000000), ("2gb", 2 << 30), ("64KiB", 64 << 10),
                                         (" 3 T ", 3 << 40), ("100B", 100)])
def test_parse_size_accepts(text, value):
    assert memory.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-1G", "0", "4X", "G", "1.5.2G", "4 GG", "0.0001"])
def test_parse_size_rejects(text):
    with pytest.raises(UserError, match="--max-memory-per-rank"):
        memory.parse_size(text)


def test_slurm_limits_per_rank():
    env = {"SLURM_MEM_PER_CPU": "2048", "SLURM_CPUS_PER_TASK": "2"}
    assert (4096 * MIB, "SLURM_MEM_PER_CPU=2048 MiB x 2 CPU(s) per task") in memory.limits(4, env)
    # No --cpus-per-task (the templates' whole node, one rank): the node's CPUs over its ranks.
    whole = {"SLURM_MEM_PER_CPU": "2048", "SLURM_CPUS_ON_NODE": "8"}
    assert (8192 * MIB, "SLURM_MEM_PER_CPU=2048 MiB x 4 CPU(s) per task") in memory.limits(2, whole)
    got = [b for b, s in memory.limits(4, {"SLURM_MEM_PER_NODE": "8000"}) if s.startswith("SLURM")]
    assert got == [8000 * MIB // 4]
    assert not [s for _, s in memory.limits(4, {"SLURM_MEM_PER_NODE": "0"}) if s.startswith("SLURM")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("mem") / "zipf.txt"
    generate(str(path), 300_000, vocab=20000, seed=1)  # 6,807 words with count >= 5
    return str(path)


def run(args, timeout=60, ranks=2):
    return launch(ranks, ["hvd-w2v", "train", "--epochs", "1", "--quiet", "--show", "", *args], timeout=timeout)


@pytest.mark.parametrize("ranks", [1, 2])
def test_refuses_when_the_plan_does_not_fit(tmp_path, corpus, ranks):
    """On 2 ranks, and on 1, whose count has also encoded (the one pass): its numbers are not left behind."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "vectors.bin").write_bytes(b"an earlier model")
    result = run([corpus, "--out", str(out), "--max-memory-per-rank", "480M"], ranks=ranks)
    assert not result.hung and result.returncode == 2, result.output[-2000:]
    errors = [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1, result.output[-2000:]
    assert "limit 480 MiB per rank from --max-memory-per-rank" in errors[0], errors[0]
    assert re.search(r"smallest rank count that fits is \d+", errors[0]), errors[0]
    assert "Traceback" not in result.output
    assert sorted(p.name for p in out.iterdir()) == ["vectors.bin"]  # nothing written, nothing lost
    assert (out / "vectors.bin").read_bytes() == b"an earlier model"


def test_far_too_small_says_no_rank_count_fits(tmp_path, corpus):
    result = run([corpus, "--out", str(tmp_path / "out"), "--max-memory-per-rank", "100M"])
    assert result.returncode == 2, result.output[-2000:]
    assert "no rank count fits: the baseline alone" in result.output, result.output[-2000:]


def test_measured_peak_is_within_15_percent_of_the_plan(tmp_path, corpus):
    result = run([corpus, "--out", str(tmp_path / "out")])
    assert result.ok, result.output[-2000:]
    assert re.search(r"^plan: \d[\d,]* MiB per rank on 2 ranks", result.output, re.M), result.output[-2000:]
    m = re.search(r"memory: planned ([\d,]+) MiB per rank, measured peak \[(\d+), (\d+)\] MiB", result.output)
    assert m, result.output[-2000:]
    planned = int(m.group(1).replace(",", ""))
    for measured in map(int, m.group(2, 3)):
        assert abs(measured - planned) <= 0.15 * planned, m.group(0)


def test_counting_part_grows_with_the_distinct_tokens_as_fitted(tmp_path):
    """The count's part: the reading (on one rank with the block's provisional stream), then the compiled
    table's slots (a power of two, two thirds full at most, grown in place: their bytes alone) and the
    fitted bytes of each distinct token hash-owned."""
    passes, block = memory.COMPILED, 10 << 20
    reading = (passes.count_read + passes.numbered_read) * memory.BLOCK_BYTES  # a block of 8 MiB at most
    assert memory.block_bytes(1, block) == memory.BLOCK_BYTES and memory.block_bytes(4, block) == 10 << 18
    for owned, slots in [(10, 16), (100_000, 1 << 18), (1_000_000, 1 << 21), (2_796_202, 1 << 22),
                         (2_796_203, 1 << 23), (4_000_000, 1 << 23)]:
        assert memory.table_slots(owned) == slots
        assert memory.counting_bytes(owned, 1, corpus_bytes=block) == reading + 32 * slots + passes.owned_word * owned
    # Python's counts: a dict, fitted per distinct token alone.
    assert memory.counting_bytes(10**6, 1, corpus_bytes=block, passes=memory.PYTHON) == \
        memory.PYTHON.count_read * memory.BLOCK_BYTES + memory.PYTHON.owned_word * 10**6
    # On more ranks each hash-owns its share, in a table a thread, beside the partial counts; the plan takes the
    # most loaded rank's when it is known, else an even share of the distinct tokens.
    cfg = Config()
    two = memory.plan(3_000_000, cfg, 2, corpus_bytes=block, distinct=4_000_000)
    assert two.owned_tokens == 2_000_000
    assert two.counting == memory.counting_bytes(2_000_000, 2, corpus_bytes=block)
    assert two.counting - two.owned == memory.counting_bytes(0, 2, corpus_bytes=block)
    # ... and reads no more blocks than its share has (one, here: 5 MiB of the 10), and a copy of one
    assert memory.counting_bytes(0, 2, corpus_bytes=block) == (
        vocab.partial_bytes(1) + vocab.pending_bytes(1) + 32 * 16 + 2 * memory.block_bytes(2, block))
    assert memory.counting_bytes(0, 2, corpus_bytes=100 << 20) == (  # a share of many blocks: the reader's five
        vocab.partial_bytes(1) + vocab.pending_bytes(1) + 32 * 16 + passes.count_read * memory.BLOCK_BYTES)
    # There the one pass holds its numbers between two rounds, and once counted every owner's ids by number.
    assert vocab.pending_bytes(1) == 4 * (vocab.PENDING + 2 * (vocab.part_bytes(1) + 1))
    one_pass = [memory.plan(3_000_000, cfg, p, corpus_bytes=block, distinct=d, one_pass=True).encoding
                for p, d in ((2, 3_000_000), (2, 4_000_000), (1, 4_000_000))]
    assert one_pass[1] - one_pass[0] == passes.numbered_word * 1_000_000
    assert one_pass[2] == memory.numbered_bytes(1, 4_000_000) == 4 * encode.Provisional.CHUNK  # a chunk at a time
    # The compiled count takes a part of text a thread between two rounds: its tokens are planned a thread too.
    more = memory.counting_bytes(0, 2, threads=3, corpus_bytes=block) - memory.counting_bytes(0, 2, corpus_bytes=block)
    assert more == (vocab.partial_bytes(3) - vocab.partial_bytes(1) + vocab.pending_bytes(3) - vocab.pending_bytes(1)
                    + 2 * passes.thread + memory.table_bytes(0, 3) - memory.table_bytes(0)
                    + memory.private_bytes(0, 2, 3)) > 2 * passes.thread
    # Each thread's own table: as many of the words it meets as fit, on more than one thread.
    assert memory.private_bytes(10**6, 1, 1) == 0
    assert memory.private_bytes(1_000, 2, 2) == 2 * (memory.table_bytes(2_000) + 8 * 2_000)
    most = memory.PRIVATE_WORDS
    assert memory.private_bytes(10**6, 1, 4) == 4 * (memory.table_bytes(most) + 8 * most)
    assert memory.plan(3_000_000, cfg, 2, corpus_bytes=block, distinct=4_000_000, owned=2_900_000).counting > \
        two.counting
    counted = [memory.plan(1_000_000, cfg, 1, distinct=d).counting for d in range(1_000_000, 9_000_000, 500_000)]
    assert all(a < b for a, b in zip(counted, counted[1:]))
    # Readers of .gz files at once (corpus.readers): a rank's gz files, as many as its threads, two blocks and
    # a brief third each beyond the first reader's; Python's passes read on one.
    for plan_of in (lambda r: memory.plan(10**6, cfg, 2, threads=4, readers=r).counting,
                    lambda r: memory.plan(10**6, cfg, 2, threads=4, readers=r).encoding):
        assert plan_of(3) - plan_of(1) == 2 * passes.reader * memory.BLOCK_BYTES
    assert memory.counting_bytes(10**6, 1, readers=3, passes=memory.PYTHON) == \
        memory.counting_bytes(10**6, 1, passes=memory.PYTHON)
    files = [os.path.join(tmp_path, n) for n in ("a.gz", "b.gz", "c.gz", "d.txt")]
    for f in files:
        with open(f, "wb") as out:
            out.write(b"x" * 100)
    assert [most_readers(files, ranks, threads) for ranks, threads in [(1, 1), (1, 2), (1, 8), (2, 8),
                                                                             (4, 8)]] == [1, 2, 3, 2, 1]


def test_the_plans_table_grows_where_the_kernels_does():
    """A compiled count table's resident peak jumps by its old slots' bytes where the plan's table_slots doubles
    (it grows in place: never old and new slots at once): one word past two thirds of 2^20 slots adds about
    32 MiB."""
    import numpy as np

    from hvd_w2v.kernels import native

    lib = native.text_kernel()
    if lib is None:
        pytest.skip(f"the compiled text passes are not available: {native.unavailable('text_kernel')}")
    limit = 2 * (1 << 20) // 3  # 699,050 words fill 2^20 slots to two thirds

    def peak(n):
        words = np.frombuffer(b"".join(b"w%07d" % i for i in range(n)), np.uint8)
        lengths, counts = np.full(n, 8, np.int64), np.ones(n, np.int64)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM back to VmRSS
        before = status("VmRSS")
        table = native.Counts(lib, 1)
        table.add_words(words, lengths, counts)
        grown = status("VmHWM") - before
        del table
        return grown

    assert memory.table_slots(limit) == 1 << 20 and memory.table_slots(limit + 1) == 1 << 21
    planned = memory.table_bytes(limit + 1) - memory.table_bytes(limit)  # 32 MiB: 2^20 more slots of 32 B
    # Other pages of the process may be counted in a peak now and then (63.6 MiB once, in a whole-suite run on
    # a busy machine): up to three tries, and one within the bounds shows the jump where the plan has it. A
    # table that grew elsewhere would jump by nothing here, or by another size, in every try.
    jumps = []
    for _ in range(3):
        jumps.append(peak(limit + 1) - peak(limit))
        print(f"one word more: the table's peak grew {jumps[-1] / MIB:.1f} MiB, planned {planned / MIB:.1f}")
        if planned <= jumps[-1] < 1.2 * planned:  # and 8 B a word of their order
            break
    else:
        raise AssertionError(f"the table's peak grew by {[round(j / MIB, 1) for j in jumps]} MiB, planned "
                             f"{planned / MIB:.1f}")


def status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024


@pytest.mark.parametrize("kernel", ["compiled", "python"])
def test_counting_refuses_before_the_owned_counts_outgrow_the_limit(tmp_path, monkeypatch, kernel):
    """One rank: the count asks before each part of its text (64 KiB blocks here) and stops, with the plan's
    message, where the table of its distinct tokens would pass the limit; under a limit it fits, the same
    counts as without one."""
    from hvd_w2v.kernels import native
    from hvd_w2v.planning.plan import Alone
    from hvd_w2v.text import corpus as corpus_mod

    if kernel == "python":
        monkeypatch.setattr(native, "text_kernel", lambda: None)
    elif native.text_kernel() is None:
        pytest.skip(f"the compiled text passes are not available: {native.unavailable('text_kernel')}")
    monkeypatch.setattr(corpus_mod, "BLOCK_BYTES", 64 << 10)
    path = tmp_path / "flat.txt"
    generate(str(path), 60_000, vocab=1_000_000, exponent=0.5, seed=2)  # about 55,000 distinct tokens
    pieces = corpus_mod.split([str(path)], 1)[0]
    passes = memory.COMPILED if kernel == "compiled" else memory.PYTHON
    size = path.stat().st_size

    def limited(owned):
        return memory.CountingLimit(memory.LEAN_BYTES + memory.counting_bytes(owned, 1, 1, size, passes),
                                    "a test's limit", 0, 1, 1, size, passes)

    whole, _ = vocab.count(Alone(), pieces)
    distinct = len(whole)
    assert distinct > 40_000
    fits, _ = vocab.count(Alone(), pieces, limit=limited(2 * distinct))  # room for the projection past the end
    assert len(fits) == distinct and sorted(fits.counts.tolist()) == sorted(whole.counts.tolist())
    with pytest.raises(UserError) as refused:
        vocab.count(Alone(), pieces, limit=limited(distinct // 4))
    message = str(refused.value)
    assert message.startswith("memory plan does not fit: counting the vocabulary, rank 0 would hash-own "), message
    assert " per rank from a test's limit; " in message, message
    owned = int(re.search(r"would hash-own ([\d,]+) distinct", message).group(1).replace(",", ""))
    assert distinct // 4 < owned < distinct, message  # stopped while counting, not at the end


def test_counting_refusal_on_two_ranks_writes_nothing(tmp_path):
    """`hvd-w2v vocab` on 2 ranks under a limit that the baseline and the reading fit but the counts of the
    corpus's 235,000 distinct tokens (118,000 a rank: a table of 2^18 slots) do not: exit code 2, one
    message from the count, nothing written and nothing lost."""
    corpus = tmp_path / "flat.txt"
    generate(str(corpus), 300_000, vocab=1_000_000, exponent=0.5, seed=5)
    out = tmp_path / "out"
    out.mkdir()
    (out / "vocab.txt").write_bytes(b"an earlier vocabulary\n")
    result = launch(2, ["hvd-w2v", "vocab", corpus, "--out", out, "--overwrite", "--max-memory-per-rank", "92M"],
                    timeout=60)
    assert not result.hung and result.returncode == 2, result.output[-2000:]
    errors = [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1, result.output[-2000:]
    assert re.match(r"hvd-w2v: error: memory plan does not fit: counting the vocabulary, rank \d would hash-own "
                    r"[\d,]+ distinct tokens: 1?\d\d MiB per rank planned on 2 ranks", errors[0]), errors[0]
    assert re.search(r"limit 92 MiB per rank from --max-memory-per-rank; at least \d+ ranks for the [\d,]+ or "
                     r"so distinct tokens counted by then \(\d\d MiB per rank there\)", errors[0]), errors[0]
    assert "Traceback" not in result.output and "plan:" not in result.output  # refused before the plan
    assert sorted(p.name for p in out.iterdir()) == ["vocab.txt"]
    assert (out / "vocab.txt").read_bytes() == b"an earlier vocabulary\n"


def test_address_space_limit_is_not_a_memory_limit():
    """Under `ulimit -v` (RLIMIT_AS) the plan reads no limit: TensorFlow reserves 1.1-1.4 GiB of address space
    it never touches, so a virtual-memory bound says nothing of resident memory (see memory.limits)."""
    import subprocess
    import sys

    code = "from hvd_w2v.planning import memory; print(memory.limits(1, {}))"
    runs = [subprocess.run(["sh", "-c", f"{ulimit}exec {sys.executable} -c '{code}'"], capture_output=True,
                           text=True, timeout=60) for ulimit in ("", "ulimit -v 3000000 && ")]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout  # the address-space bound adds no limit


def test_a_part_of_text_holds_no_more_distinct_tokens_than_planned():
    """The partial counts' bound (vocab.partial_bytes) takes the most distinct tokens a part's bytes can hold
    (vocab.distinct_in): a text made to hold the most, every token of one byte, then of two, each once, holds
    exactly that many; no text of those bytes holds more."""
    alphabet = [bytes([b]) for b in range(256) if b not in set(WHITESPACE)]
    shortest_first = alphabet + [a + b for a in alphabet for b in alphabet]
    for size in (1, 2, 3, 500, 1_000, 65_536):
        tokens, used = [], -1  # b" ".join: a space between two tokens, none after the last
        for t in shortest_first:
            if used + 1 + len(t) > size:
                break
            tokens.append(t)
            used += 1 + len(t)
        text = b" ".join(tokens)
        assert len(text) <= size and len(set(text.split())) == vocab.distinct_in(size), size
    assert vocab.distinct_in(vocab.part_bytes(1)) < vocab.part_bytes(1) // 2  # below the tokens' count alone
