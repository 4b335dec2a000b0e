"""The command line: `hvd-w2v SUBCOMMAND ...`, run on every rank (under mpi/launch or sbatch).

Errors: bad input raises UserError on every rank (see comm.agree); rank 0 prints one line and all ranks exit
with code 2. Any other exception is a bug or a fault: the rank prints its traceback with its rank prefix and
calls MPI_Abort, so the whole job ends at once instead of leaving peers blocked in a collective.
"""
import argparse
import os
import subprocess
import sys
import traceback

import numpy as np

from .errors import UserError

EXIT_USAGE = 2


def cmd_check(args):
    """A two-rank check of the stack: what Horovod was built with, one allreduce, one alltoall."""
    from . import comm as comm_mod

    comm = comm_mod.init()
    if comm.rank == 0:
        import horovod

        build = subprocess.run([os.path.join(os.path.dirname(sys.executable), "horovodrun"), "--check-build"],
                               capture_output=True, text=True)
        print(build.stdout.strip() or build.stderr.strip())
        print(f"ranks: {comm.size}  horovod {horovod.__version__}  mpi threads: {comm.hvd.mpi_threads_supported()}")
    total = comm.allreduce_dense(np.full(4, comm.rank + 1, np.float32))
    got = comm.alltoall_ints(np.arange(comm.size) + 100 * comm.rank)
    rows = comm.allgather(got.tolist())
    if comm.rank == 0:
        print(f"horovod allreduce of (rank+1) over {comm.size} ranks: {total.tolist()} "
              f"(expected {comm.size * (comm.size + 1) // 2} each)")
        print("mpi4py alltoall, rank r sends 100*r + d to rank d; received per rank:")
        for r, row in enumerate(rows):
            print(f"  rank {r}: {row}")
        ok = np.all(total == comm.size * (comm.size + 1) / 2) and all(
            row == [100 * s + r for s in range(comm.size)] for r, row in enumerate(rows))
        print("stack check: OK" if ok else "stack check: FAILED")
        return 0 if ok else 1
    return 0


def parser():
    p = argparse.ArgumentParser(prog="hvd-w2v", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    c = sub.add_parser("check", help="check the MPI/Horovod/TensorFlow stack on the launched ranks",
                       epilog="example: mpi/launch -n 2 hvd-w2v check")
    c.set_defaults(func=cmd_check)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        if _rank() == 0:
            print(f"hvd-w2v: error: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BaseException:
        rank = _rank()
        text = "".join(f"[rank {rank}] {line}\n" for line in traceback.format_exc().splitlines())
        sys.stderr.write(text)
        sys.stderr.flush()
        _abort()
        raise


def _rank():
    if "mpi4py.MPI" in sys.modules:
        return sys.modules["mpi4py.MPI"].COMM_WORLD.Get_rank()
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))


def _abort():
    if "mpi4py.MPI" in sys.modules and sys.modules["mpi4py.MPI"].COMM_WORLD.Get_size() > 1:
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(1)


if __name__ == "__main__":
    sys.exit(main())
