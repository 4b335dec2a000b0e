"""bench.loop on a small corpus: one real training job with its compiled calls timed (the timings themselves
are a benchmark, not a test)."""
from hvd_w2v.bench import loop
from hvd_w2v.synthetic import generate


def test_a_step_is_its_compiled_calls_and_the_rest(tmp_path):
    path = tmp_path / "zipf.txt"
    generate(str(path), 20000, vocab=500, pairs=10, first=20, seed=1)
    for sg, options in ((True, ()), (False, ()), (True, ("--shards=1", "--superstep=256"))):  # and the shard mode
        per_step = loop.run(str(path), sg, 1, str(tmp_path / "out"), options)
        assert set(per_step) == {"loop", "the rest", *loop.PHASES}
        assert all(per_step[phase] > 0 for phase in loop.PHASES), per_step
        assert 0 < per_step["the rest"] < per_step["loop"] < 1e6, per_step
