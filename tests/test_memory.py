"""The memory plan: its arithmetic (plain pytest) and, on 2 real ranks, the refusal and the measured peak."""
import re

import pytest

from conftest import launch
from hvd_w2v import memory, vocab
from hvd_w2v.config import Config
from hvd_w2v.errors import UserError
from hvd_w2v.synthetic import generate

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
    assert p.training == p.model + p.step + p.hot
    assert p.total == p.baseline + max(p.counting, p.tables + p.words + max(p.encoding, p.training))
    assert p.peak("vocab") == p.baseline + max(p.counting, p.tables + p.words) <= p.peak("encode") <= p.total
    assert p.passes == p.peak("encode") - p.baseline
    assert p.baseline == memory.BASELINE_BYTES
    assert p.tables == vocab.RUN_BYTES * 14143 + vocab.GUIDE_BYTES + vocab.KEEP_HEAD_BYTES
    assert p.hot > 2 * 1000 * 100 * 4
    assert p.owned_tokens == -(-500_000 // ranks)  # no distinct tokens given: the words kept, the fewest
    assert p.counting == p.owned + memory.counting_bytes(0, ranks, 1, corpus_bytes)
    lines = str(p).splitlines()
    assert len(lines) == 3 and f"{p.total / MIB:,.0f} MiB per rank" in lines[0]
    assert len(p.describe("encode").splitlines()) == 2


def test_total_never_grows_with_ranks():
    cfg = Config()
    totals = [memory.plan(3_000_000, cfg, p, positions=10**9, corpus_bytes=10**10).total for p in range(1, 200)]
    assert all(a >= b for a, b in zip(totals, totals[1:]))


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


def run(args, timeout=60):
    return launch(2, ["hvd-w2v", "train", "--epochs", "1", "--quiet", "--show", "", *args], timeout=timeout)


def test_refuses_when_the_plan_does_not_fit(tmp_path, corpus):
    out = tmp_path / "out"
    out.mkdir()
    (out / "vectors.bin").write_bytes(b"an earlier model")
    result = run([corpus, "--out", str(out), "--max-memory-per-rank", "480M"])
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


def test_address_space_limit_is_not_a_memory_limit():
    """Under `ulimit -v` (RLIMIT_AS) the plan reads no limit: TensorFlow reserves 1.1-1.4 GiB of address space
    it never touches, so a virtual-memory bound says nothing of resident memory (see memory.limits)."""
    import subprocess
    import sys

    code = "from hvd_w2v import memory; print(memory.limits(1, {}))"
    runs = [subprocess.run(["sh", "-c", f"{ulimit}exec {sys.executable} -c '{code}'"], capture_output=True,
                           text=True, timeout=60) for ulimit in ("", "ulimit -v 3000000 && ")]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout  # the address-space bound adds no limit
