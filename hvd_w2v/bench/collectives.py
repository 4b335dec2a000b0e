"""mpi4py Alltoallv against Horovod alltoall, on payloads shaped like one training step's exchange.

    mpi/launch -n 2 python -m hvd_w2v.bench.collectives

For each payload (rows per destination x row width), both libraries move the same arrays; every
figure is the median of ``--repeats`` timed calls after warm-up, and the ratio is Horovod / mpi4py.
Rows per destination vary from call to call (as the unique rows of a step do), which makes Horovod
negotiate each call; ``--fixed`` keeps them constant to show the cost without that.

A second table shows what a rank's block to itself costs inside Open MPI's Ialltoallv (Comm.alltoallv_many,
Part.own): moved like the others', or left where it is, as the exchange does.
"""
import argparse
import time

import numpy as np

from hvd_w2v.parallel import comm as comm_mod


def timed(fn, repeats, comm):
    times = []
    for i in range(repeats + 3):
        comm.barrier()
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    # The slowest rank decides a collective's cost.
    return comm.allreduce(float(np.median(times[3:])), "max")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--fixed", action="store_true", help="same rows per destination on every call")
    args = p.parse_args(argv)
    import tensorflow as tf

    c = comm_mod.init(cycle_ms=1)  # Horovod's own default: its cost per call, not hvd-w2v's cycle
    rs = np.random.RandomState(c.rank)
    if c.rank == 0:
        print(f"{c.size} ranks, median of {args.repeats} calls, rows per destination "
              f"{'fixed' if args.fixed else 'varying +-10% per call'}")
        print(f"{'payload':>24} {'mpi4py ms':>10} {'horovod ms':>11} {'horovod/mpi4py':>15}")
    for rows, width, dtype in [(1000, 1, np.int64), (10000, 1, np.int64), (1000, 101, np.float32),
                               (10000, 101, np.float32), (50000, 101, np.float32)]:
        def counts(i):
            if args.fixed:
                return np.full(c.size, rows, np.int64)
            return (rows * (0.9 + 0.2 * np.random.RandomState(i * 7919 + c.rank).rand(c.size))).astype(np.int64)

        blocks = {i: rs.rand(int(counts(i).sum()), width).astype(dtype) for i in range(args.repeats + 3)}
        mpi_s = timed(lambda i: c.alltoallv(blocks[i], counts(i)), args.repeats, c)
        hvd = c.horovod()  # started on every rank at once (collective), outside the timing
        hvd_s = timed(lambda i: hvd.alltoall(tf.convert_to_tensor(blocks[i]),
                                             splits=tf.convert_to_tensor(counts(i).astype(np.int32)),
                                             name=None)[0].numpy(), args.repeats, c)
        if c.rank == 0:
            label = f"{rows:,} x {width} {np.dtype(dtype).name}"
            print(f"{label:>24} {mpi_s * 1e3:10.3f} {hvd_s * 1e3:11.3f} {hvd_s / mpi_s:15.1f}")
    own_block(c, args.repeats, rs)


def own_block(c, repeats, rs):
    """Rows of a step's size to every rank in one Ialltoallv (Comm.alltoallv_many), this rank's own block moved
    by MPI or left where it is (the exchange uses it in place: Part.own)."""
    if c.rank == 0:
        print(f"\n{'rows per rank':>24} {'own moved ms':>13} {'own left ms':>12} {'moved/left':>11}")
    for rows in (1000, 1600, 4000):
        counts = np.full(c.size, rows, np.int64)
        block = rs.rand(rows * c.size, 100).astype(np.float32)
        out = np.empty_like(block)
        moved, left = (timed(lambda i: c.alltoallv_many([comm_mod.Part(block, counts, counts, out, own=own)]),
                             repeats, c) for own in (True, False))
        if c.rank == 0:
            print(f"{f'{rows:,} x 100 float32':>24} {moved * 1e3:13.3f} {left * 1e3:12.3f} {moved / left:11.2f}")


if __name__ == "__main__":
    main()
