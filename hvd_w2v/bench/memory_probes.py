"""The measurements behind hvd_w2v.planning.memory's constants, one probe each.

    mpi/launch -n 2 python -m hvd_w2v.bench.memory_probes baseline       # BASELINE_BYTES
    mpi/launch -n 2 python -m hvd_w2v.bench.memory_probes lean           # the same without TensorFlow's start
    python -m hvd_w2v.bench.memory_probes words                          # a list and a dict of words
    python -m hvd_w2v.bench.memory_probes step 1024 100 2000             # STEP_SLOT_COPIES, STEP_UNIQUE_COPIES
    mpi/launch -n 2 python -m hvd_w2v.bench.memory_probes phases CORPUS --out DIR [train options]
                                                                         # STEP_*_BYTES, SHARD_BYTES_*
    mpi/launch -n 2 python -m hvd_w2v.bench.memory_probes passes CORPUS --out DIR   # COMPILED, PYTHON (text passes)
    python -m hvd_w2v.bench.memory_probes shapes 3000                    # loop.CENTRE_BUCKET, ROW_BUCKET
    mpi/launch -n 2 python -m hvd_w2v.bench.memory_probes phrases CORPUS DIR   # PHRASES_COMPILED, PHRASES_PYTHON

Each prints resident-memory figures from /proc/self/status (MiB unless it says otherwise).
"""
import os
import resource
import sys

import numpy as np


def status(key):
    """A /proc/self/status figure in MiB (VmRSS, VmHWM, RssFile, ...)."""
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) // 1024


def baseline():
    """The process with MPI, Horovod and TensorFlow initialised and one tiny call of each kind; no model."""
    from hvd_w2v.parallel import comm as comm_mod
    from hvd_w2v.training import sgns

    comm = comm_mod.init()
    rows, ctx, tgt = np.zeros((11, 8), np.float32), np.zeros((4, 10), np.int32), np.zeros((4, 6), np.int32)
    sgns.step_function(True, 1)(rows, [ctx], [tgt], np.float32(0.01))[0]
    comm.allreduce_dense(np.ones(4, np.float32))
    comm.alltoallv(np.arange(comm.size, dtype=np.int64), np.ones(comm.size, np.int64))
    comm.barrier()
    print(f"rank {comm.rank}: ru_maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss:,} KiB, "
          f"RssFile {status('RssFile')}, RssAnon {status('RssAnon')}", flush=True)


def lean():
    """The process with MPI started, one alltoallv and the compiled libraries the stages below load (the text
    passes', the shard SGD's; a first count on the rank's threads), neither TensorFlow nor Horovod loaded
    (Comm.horovod starts them at their first use): what a stage without them (the text passes, shard-local SGD
    without hot rows) holds below BASELINE_BYTES."""
    from hvd_w2v.kernels import native
    from hvd_w2v.parallel import comm as comm_mod

    comm = comm_mod.init()
    comm.alltoallv(np.arange(comm.size, dtype=np.int64), np.ones(comm.size, np.int64))
    lib, _ = native.text_kernel(), native.local_sgd_kernel()
    if lib is not None:  # a first count on the rank's threads: OpenMP's team started
        native.Counts(lib, comm.threads).add_text(b"a b c " * 1000, 0, 6000)
    comm.barrier()
    assert "tensorflow" not in sys.modules
    print(f"rank {comm.rank}: ru_maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss:,} KiB, "
          f"RssFile {status('RssFile')}, RssAnon {status('RssAnon')}", flush=True)


def words(n=1_000_000):
    """Bytes per word of a list of 8-byte words (row_words) and of a {word: id} dict (lookup)."""
    data = b"".join(b"w%07d" % i for i in range(n))  # 8-byte words, the real vocabulary's mean length
    r1 = status("VmRSS")
    row_words = [data[8 * i:8 * i + 8] for i in range(n)]
    r2 = status("VmRSS")
    keys = [data[8 * i:8 * i + 8] for i in range(n)]
    lookup = {w: i + 1000 for i, w in enumerate(keys)}
    r3 = status("VmRSS")
    print(f"row_words: {(r2 - r1) * 2**20 / n:.0f} B/word; lookup with its keys: {(r3 - r2) * 2**20 / n:.0f} B/word")
    return row_words, lookup


def step(n, d, unique):
    """Peak growth over 20 calls of the skip-gram step on n centres (one group of width 10), d columns and
    ``unique`` rows, one thread."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from hvd_w2v.training import sgns

    rs = np.random.RandomState(0)
    rows = rs.rand(unique + 1, d).astype(np.float32)
    ctx = rs.randint(0, unique + 1, (n, 10)).astype(np.int32)
    tgt = rs.randint(0, unique, (n, 6)).astype(np.int32)
    fn = sgns.step_function(True, 1)
    fn(rows[:5], [ctx[:2] % 4], [tgt[:2] % 4], np.float32(0.01))
    before = status("VmHWM")
    for _ in range(20):
        fn(rows, [ctx], [tgt], np.float32(0.01))[0]
    print(f"n={n} d={d} U={unique}: peak grew {status('VmHWM') - before} MiB; one [slots, d] block "
          f"{n * 16 * d * 4 / 2**20:.1f} MiB, one [U, d] block {unique * d * 4 / 2**20:.1f} MiB")


def shapes(calls):
    """RssAnon growth over ``calls`` calls of the skip-gram step on step-like random shapes (5 width groups of
    200-300 centres, 8,000-12,000 rows, d 100), as they come and rounded up to train's buckets; one thread."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from hvd_w2v.training import sgns
    from hvd_w2v.training.loop import CENTRE_BUCKET, ROW_BUCKET, _round_up

    fn = sgns.step_function(True, 5)
    for bucketed in (False, True):
        rs = np.random.RandomState(0)
        start = None
        for i in range(calls):
            n, u = rs.randint(200, 300, 5), rs.randint(8000, 12000)
            if bucketed:
                n, u = [_round_up(k, CENTRE_BUCKET) for k in n], _round_up(u, ROW_BUCKET)
            rows = (rs.rand(u, 100) * 0.01).astype(np.float32)
            ctx = [rs.randint(0, u, (k, 2 * (g + 1))).astype(np.int32) for g, k in enumerate(n)]
            tgt = [rs.randint(0, u - 1, (k, 6)).astype(np.int32) for k in n]
            fn(rows, ctx, tgt, np.float32(0.01))[0]
            if i == 9:
                start = status("RssAnon")
        print(f"{'bucketed' if bucketed else 'raw'} shapes: RssAnon {start} MiB after 10 calls, "
              f"{status('RssAnon')} MiB after {calls}", flush=True)


def phases(argv):
    """Peak and resident memory after the vocabulary, the encoding and training (a `train` command line), and
    training's own peak above the resident set before it (model and step: reset through clear_refs) beside the
    plan's ``training`` (memory.step_bytes and the model) and its step's slots."""
    from hvd_w2v import cli, pipeline
    from hvd_w2v.planning import memory
    from hvd_w2v.training import loop

    args = cli.parser().parse_args(["train", *argv])
    cfg = cli.config_from(args)
    comm = pipeline.start(cfg, args.threads, args.stall_timeout)
    cfg = pipeline.settle(comm, cfg)  # the fields left to the layout, as `train` chooses them
    paths, voc, cfg, _ = pipeline.vocabulary(comm, args.corpus, args.out, cfg)
    print(f"rank {comm.rank}: after vocab HWM {status('VmHWM')} RSS {status('VmRSS')} V {voc.size:,}", flush=True)
    stream = pipeline.encode(comm, paths, voc, args.out)
    print(f"rank {comm.rank}: after encode HWM {status('VmHWM')} RSS {status('VmRSS')} positions {len(stream):,}",
          flush=True)
    if memory.loads_tensorflow(cfg):
        comm.horovod()  # TensorFlow and Horovod's start belong to the baseline, not to training
    reset_peak()
    start = status_bytes("VmRSS")
    rule, tables = pipeline.step_rule(cfg), []

    class Measured(rule):  # the rule, noting each step's table rows as it makes them
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made = self.empty_rows

            def empty_rows(table, dim):
                tables.append(table)
                return made(table, dim)

            self.empty_rows = empty_rows

    loop.train(comm, cfg, voc, stream, progress=False, rule=Measured)
    planned = memory.plan(voc.size, cfg, comm.size, voc.total, threads=comm.threads,
                          noise=voc.runs.noise_distinct)  # as pipeline.memory_plan
    slots = memory.step_slots(cfg, comm.size, voc.total)
    rows = memory.step_rows(cfg, voc.size, comm.size, voc.total, voc.runs.noise_distinct)
    print(f"rank {comm.rank}: after train HWM {status('VmHWM')} RSS {status('VmRSS')} RssFile {status('RssFile')} "
          f"RssAnon {status('RssAnon')}; training's peak {(status_bytes('VmHWM') - start) / 2**20:,.1f} MiB "
          f"(planned {planned.training / 2**20:,.1f}: model {planned.model / 2**20:,.1f}, step "
          f"{planned.step / 2**20:,.1f}), {slots:,} slots a step; a step's table at most {max(tables):,} rows "
          f"(planned {rows:,})", flush=True)


def passes(argv):
    """Each phase of the text passes (`hvd-w2v encode`'s): the count's peak, vocab.build's, the words' resident
    set after it and the encoding's peak above that, beside the plan's counting, words and encoding (memory.py).
    Each peak is the high-water mark above the resident set before the phase (reset through clear_refs)."""
    from hvd_w2v import cli, pipeline
    from hvd_w2v.kernels import native
    from hvd_w2v.planning import memory
    from hvd_w2v.text import corpus, encode, vocab

    args = cli.parser().parse_args(["encode", *argv])
    cfg = cli.config_from(args)
    comm = pipeline.start(cfg, args.threads, args.stall_timeout)
    paths = pipeline.corpus_files(comm, args.corpus, lambda m: None)
    counted = {}

    def count(*a, **k):  # vocab.build's count, its peak and the distinct tokens this rank hash-owns taken
        tally, raw = count_words(*a, **k)
        counted.update(peak=status_bytes("VmHWM") - start, owned=len(tally))
        return tally, raw

    count_words, vocab.count = vocab.count, count
    reset_peak()
    start = status_bytes("VmRSS")
    numbered = None  # the encoding in the same pass, as `hvd-w2v encode` (pipeline.vocabulary)
    if native.text_kernel() is not None:
        numbered = encode.Provisional(os.path.join(args.out, "ids"), comm.threads, comm.rank)
    voc = vocab.build(comm, paths, cfg, reading=False, numbered=numbered)
    vocab.count = count_words
    one_pass = voc.provisional is not None
    build, words = status_bytes("VmHWM") - start, status_bytes("VmRSS") - start
    reset_peak()
    before = status_bytes("VmRSS")
    pipeline.encode(comm, paths, voc, args.out, quiet=True)
    encoding, kept = status_bytes("VmHWM") - before, status_bytes("VmRSS") - before
    rows = len(voc.row_words)
    passes = memory.COMPILED if native.text_kernel() is not None else memory.PYTHON
    planned = memory.plan(voc.size, cfg, comm.size, voc.total, pipeline.corpus_bytes(paths), threads=comm.threads,
                          distinct=voc.distinct, raw_tokens=voc.raw_words, owned=counted["owned"],
                          block_distinct=voc.block_distinct, passes=passes,
                          readers=corpus.most_readers(paths, comm.size, comm.threads),
                          one_pass=one_pass)  # this rank's owned tokens
    mib = lambda b: f"{b / 2**20:,.1f}"  # noqa: E731
    print(f"rank {comm.rank} of {comm.size}, {comm.threads} thread(s), {'compiled' if passes.tables else 'Python'}: "
          f"{counted['owned']:,} distinct tokens hash-owned, {rows:,} words; measured (planned) MiB: counting "
          f"{mib(counted['peak'])} ({mib(planned.counting)}), build {mib(build)}, words {mib(words)} "
          f"({mib(planned.words)}; {words / rows:.1f} B a word), encoding {mib(encoding)} ({mib(planned.encoding)}), "
          f"kept after encoding "
          f"{mib(kept)}", flush=True)


def phrases(argv):
    """Each phase of word2phrase's passes (text/phrases.py) on CORPUS, writing into DIR: the count's peak, the
    owners' exchange's (their sums), the answers', and the scans' after them (joins and output), each the
    high-water mark above the resident set before the passes, beside the keys held and received and the plan's
    figures (memory.phrases_bytes). HVD_W2V_KERNEL=python: Python's loops."""
    from hvd_w2v import pipeline
    from hvd_w2v.kernels import native
    from hvd_w2v.planning import memory
    from hvd_w2v.text import phrases as phrasing

    comm = pipeline.start()
    os.makedirs(argv[1], exist_ok=True)
    peaks, owned, ask = {}, phrasing._owned, phrasing._ask

    def phase(name):  # the peak since the last phase ended, above the passes' start
        peaks[name] = status_bytes("VmHWM") - start
        reset_peak()

    def owners_sum(*a):
        phase("count")
        table = owned(*a)
        phase("exchange")
        return table

    def answers(*a):
        got = ask(*a)
        phase("answers")
        return got

    phrasing._owned, phrasing._ask = owners_sum, answers
    reset_peak()
    start = status_bytes("VmRSS")
    _, _, (parts, received, owned, words) = phrasing.phrase(comm, [argv[0]], argv[1], say=lambda m: None)
    phase("scans")
    passes = memory.PHRASES_COMPILED if native.phrases_kernel() is not None else memory.PHRASES_PYTHON
    mib = lambda b: f"{b / 2**20:,.1f}"  # noqa: E731
    print(f"rank {comm.rank} of {comm.size}, {comm.threads} thread(s), "
          f"{'compiled' if passes is memory.PHRASES_COMPILED else 'Python'}: {sum(parts):,} keys held, "
          f"{received:,} received, {owned:,} owned, {words:,} words; peaks MiB: count {mib(peaks['count'])}, exchange "
          f"{mib(peaks['exchange'])}, answers {mib(peaks['answers'])}, scans {mib(peaks['scans'])}; planned "
          f"{mib(memory.phrases_bytes(parts, received, words, comm.size, passes))}", flush=True)


def status_bytes(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024


def reset_peak():
    """VmHWM back to VmRSS (Linux: /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    probes = {"baseline": lambda: baseline(), "lean": lambda: lean(), "words": lambda: words(),
              "step": lambda: step(*map(int, argv[1:4])), "phases": lambda: phases(argv[1:]),
              "shapes": lambda: shapes(int(argv[1])), "passes": lambda: passes(argv[1:]),
              "phrases": lambda: phrases(argv[1:])}
    if not argv or argv[0] not in probes:
        raise SystemExit(__doc__)
    probes[argv[0]]()


if __name__ == "__main__":
    main()
