"""bench.phases on a small corpus: every phase of one rank's step (and shard-local super-step) timed, on 1 and 2
threads (the timings themselves are a benchmark, not a test)."""
import pytest

from hvd_w2v.bench import phases
from hvd_w2v.common.config import Config
from hvd_w2v.planning.plan import open_corpus
from hvd_w2v.synthetic import generate


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "zipf.txt"
    generate(str(path), 8000, vocab=500, pairs=10, first=20, seed=1)
    return open_corpus([str(path)], Config())


def test_every_phase_is_timed_on_one_and_two_threads(corpus):
    for sg in (True, False):
        for threads in (1, 2):
            seconds = phases.measure(corpus, sg, threads, steps=30, batch_words=1024)
            assert set(seconds) == set(phases.PHASES)
            assert all(0 < s < 1 for s in seconds.values()), seconds
        for builder in (False, True):
            assert 0 < phases.whole_step(corpus, sg, 1, steps=30, batch_words=1024, builder=builder) < 1


def test_shard_local_super_steps_are_timed_too(corpus):
    for sg in (True, False):
        seconds = phases.measure(corpus, sg, 2, steps=5, batch_words=1024, shards=4, superstep=256)
        assert set(seconds) == set(phases.PHASES) and all(0 < s < 1 for s in seconds.values()), seconds
        for builder in (False, True):  # whole super-steps, with the builder on a thread of its own too
            assert 0 < phases.whole_step(corpus, sg, 1, 5, 1024, builder, shards=4, superstep=256) < 1


def test_the_maths_threads_are_timed_inside_the_call(corpus):
    for sg in (True, False):
        for threads in (1, 2):
            parts = phases.maths_waits(corpus, sg, threads, steps=30, batch_words=1024)
            assert len(parts) == threads and all(len(p) == len(phases.MATHS_PARTS) for p in parts)
            assert all(0 <= us < 1e6 for p in parts for us in p), parts
            named = [dict(zip(phases.MATHS_PARTS, p)) for p in parts]
            assert named[0]["set-up"] > 0 and all(n["centres"] > 0 for n in named), named
            assert all(n["set-up"] == 0 for n in named[1:]), named  # the calling thread's alone
            if threads == 1:  # no team: nothing to wait for, no rows shared
                assert named[0]["wait: marks"] == named[0]["wait: chunks"] == named[0]["shared rows"] == 0
