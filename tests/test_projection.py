"""The cluster projection beside a run on shaped pretend hosts (hvd_w2v.bench.projection, tests/pretend_hosts.py's
links): the link carries no more than its rate, and the benchmark's row stands beside the run. How close the
projection comes is the benchmark's to say (hvd_w2v/bench/README.md), not a test's: it is a timing."""
import sys

import pytest

import bounded
from conftest import ROOT
from hvd_w2v.synthetic import generate
from pretend_hosts import unavailable

pytestmark = pytest.mark.skipif(unavailable(shaped=True) is not None, reason=str(unavailable(shaped=True)))

RATE = 100  # Mb/s: 12.5 MB/s each way


def test_a_shaped_link_carries_no_more_than_its_rate_and_the_planned_row_stands_beside_the_run(tmp_path):
    corpus = tmp_path / "zipf.txt"
    generate(str(corpus), 60000, vocab=1500, seed=0)
    got = bounded.run([sys.executable, "-m", "hvd_w2v.bench.projection", "--corpus", str(corpus), "--lines", "0",
                       "--rates", str(RATE), "--no-unshaped", "--modes", "shard", "--out", str(tmp_path / "out"),
                       "--timeout", "120"], 300, cwd=ROOT)
    assert got.ok, got.output[-3000:]
    lines = got.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["link", "RTT", "us"])
    row = lines[header + 1].split()
    assert row[:2] == [str(RATE), "Mb/s"] and row[5] == "shard" and row[6] == "2", row  # V = 2 ranks x 1 thread
    number = lambda s: float(s.replace(",", ""))  # noqa: E731
    rtt, one_way, both, sent = number(row[2]), number(row[3]), number(row[4]), number(row[14])
    assert 0 < rtt < 10_000  # us: a round trip through two veths and a bridge
    for rate in (one_way, both, sent):  # MB/s: shaped (5%: the bucket's burst)
        assert 0 < rate <= RATE / 8 * 1.05, row
    words, planned, ratio = number(row[8]), number(row[9]), number(row[10])
    assert words > 0 and planned > 0 and ratio == pytest.approx(planned / words, abs=0.01)
    assert number(row[11]) > 0 and number(row[12]) > 0 and number(row[13]) > 0  # B/word: run, planned, ratio
    assert all(0 < number(share.rstrip("%")) <= 100 for share in row[15:17]), row  # the exchange's shares
