"""bench.step_timeline's arithmetic (the run itself is a benchmark, not a test)."""
import numpy as np

from hvd_w2v.bench import step_timeline


def test_step_timeline_summary_reads_waits_and_transfers():
    """bench.step_timeline's arithmetic on hand-made records: rank 1 arrives 1 ms after rank 0 at every gather,
    both at once at every scatter; each call ends 0.5 ms after the last arrival; a step every 10 ms, but one in
    ten takes 30."""
    steps = step_timeline.WARM_UP + 101  # 100 periods after the warm-up
    period = np.where(np.arange(steps) % 10 == 9, 0.030, 0.010)
    start = np.concatenate(([0.0], np.cumsum(period)[:-1]))
    records = []
    for rank in range(2):
        calls = []
        for s in range(steps):
            calls.append((start[s] + 0.001 * rank, start[s] + 0.0015, 0.0002 * rank))  # gather
            calls.append((start[s] + 0.005, start[s] + 0.0055, 0.0))  # scatter
        records.append(np.array(calls))
    gather, scatter, step = step_timeline.summary(records)
    assert "arrival gap median 1.00 ms" in gather and "last exit median 0.50 ms" in gather
    assert "inside, mean per rank: 0.00, 0.20 ms" in gather
    assert "arrival gap median 0.00 ms" in scatter and "last exit median 0.50 ms" in scatter
    assert "period median 10.00 ms, mean 12.00" in step and "10.0% of steps" in step
    assert "16.7% of the time" in step  # 10 stalls x 20 ms beyond the median, of 1.2 s
