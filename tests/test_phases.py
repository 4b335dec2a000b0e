"""bench.phases on a small corpus: every phase of one rank's step timed, on 1 and 2 threads (the timings
themselves are a benchmark, not a test)."""
from hvd_w2v.bench import phases
from hvd_w2v.config import Config
from hvd_w2v.plan import open_corpus
from hvd_w2v.synthetic import generate


def test_every_phase_is_timed_on_one_and_two_threads(tmp_path):
    path = tmp_path / "zipf.txt"
    generate(str(path), 8000, vocab=500, pairs=10, first=20, seed=1)
    corpus = open_corpus([str(path)], Config())
    for sg in (True, False):
        for threads in (1, 2):
            seconds = phases.measure(corpus, sg, threads, steps=30, batch_words=1024)
            assert set(seconds) == set(phases.PHASES)
            assert all(0 < s < 1 for s in seconds.values()), seconds
        for builder in (False, True):
            assert 0 < phases.whole_step(corpus, sg, 1, steps=30, batch_words=1024, builder=builder) < 1
