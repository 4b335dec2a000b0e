"""bench.kernels on a small corpus: a commit's kernels beside this checkout's and a placebo copy, every
kernel (and architecture, where it matters) timed (the timings themselves are a benchmark, not a test)."""
import re

from hvd_w2v.bench import kernels
from hvd_w2v.synthetic import generate


def test_the_signature_is_the_parameter_list_whatever_its_layout():
    one = "int64_t f(int64_t a,\n          const float* b) {"
    assert kernels.signature(one, "f") == kernels.signature("int64_t f(int64_t a, const float* b) {", "f")
    assert kernels.signature(one, "f") != kernels.signature("int64_t f(int64_t a, float* b) {", "f")
    assert kernels.signature(one, "g") == ""


def test_head_against_this_checkout_and_the_placebo(tmp_path, capsys):
    path = tmp_path / "zipf.txt"
    generate(str(path), 8000, vocab=500, pairs=10, first=20, seed=1)
    kernels.main(["HEAD", "--corpus", str(path), "--lines", "0", "--rounds", "2", "--steps", "6",
                  "--processes", "2", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert set(kernels.KERNELS) == {"examples", "table", "maths", "shard"}
    # the examples are the same for both architectures: one table of them
    for title in ["examples"] + [f"{kernel}, {arch}" for kernel in ("table", "maths", "shard") for arch in ("skip-gram", "CBOW")]:
        assert out.count(f"\n{title} ") == 1, out
        block = out.split(f"\n{title} ")[1].split("\n\n")[0].splitlines()
        rows = {line[:18].strip(): line[18:].split() for line in block[2:5]}
        assert set(rows) == {"HEAD", "this checkout", "placebo"}, block
        for cells in rows.values():  # us, ratio, the processes' range, bytes; for 1 and for 2 threads
            assert len(cells) == 8 and all(re.fullmatch(r"[\d,]+", c) for c in cells[::4]), block
            assert all(re.fullmatch(r"\d+\.\d{3}x", c) for c in cells[1::4]), block
            assert all(re.fullmatch(r"\d+\.\d\d-\d+\.\d\d", c) for c in cells[2::4]), block
        assert rows["HEAD"][1::4] == ["1.000x"] * 2 and rows["HEAD"][2::4] == ["1.00-1.00"] * 2, block
        assert rows["HEAD"][3::4] == ["same", "same"], block
        # the placebo is this checkout's code: its outputs agree with HEAD's exactly when the checkout's do
        assert rows["placebo"][3::4] == rows["this checkout"][3::4], block
