"""Every collective call in hvd-w2v goes through here (mpi4py for the sparse exchange, Horovod for dense).

Who uses what, and why:
- Horovod (TensorFlow ops) keeps the *dense, replicated* tensors equal: the hot rows' replicas and their
  updates (`allreduce_dense`, `broadcast_dense`). These have a fixed shape, where Horovod's fixed cost per
  call is paid back on large tensors.
- mpi4py moves the *sparse, per-destination* traffic: ids, rows and gradients (`alltoallv`), and small
  bookkeeping (`allgather`, `broadcast`, `agree`, and the loss reports' sums, `allreduce_later`, which must
  not wait for Horovod's cycle). A step's row counts change every step, and Horovod negotiates every call
  whose shape changes, so its alltoall costs several times mpi4py's Alltoallv here (`mpi/launch -n 2 python
  -m hvd_w2v.bench.collectives`; figures in hvd_w2v/bench/README.md, "Collectives").

Every method here is collective: all ranks must call it, in the same order, with compatible arguments.
Each counts itself in the rank's watchdog.Beat (``Comm.watch``: calls entered, and whether the main thread is
inside one now), which the stall watchdog reads (hvd_w2v/parallel/watchdog.py): two assignments a call.
"""
import atexit
import functools
import gc
import os
import sys
from dataclasses import dataclass

import numpy as np

from ..common.errors import UserError
from ..common.wording import counted


@dataclass
class Part:
    """One alltoallv of :meth:`Comm.alltoallv_many`.

    ``send`` holds the rows for rank 0, then rank 1, ... (any dtype, shape ``[n, *row]``), ``counts[d]`` rows
    for rank ``d``; ``recv_counts[s]`` rows arrive from rank ``s``, in the order it listed them, into ``out``
    (a C-contiguous array of the right shape and dtype) or a new array. ``own=False``: the block this rank
    sends itself is not moved, and its place in the received array is left as it was; the caller uses it
    where it is. Open MPI copies that block, and the copy costs more than the exchange with the other rank
    (`mpi/launch -n 2 python -m hvd_w2v.bench.collectives`, second table; figures in
    hvd_w2v/bench/README.md, "Collectives").
    """

    send: np.ndarray
    counts: np.ndarray
    recv_counts: np.ndarray
    out: np.ndarray = None
    own: bool = True


def _collective(method):
    """A collective method, counted in ``self.watch`` while it runs (the watchdog's view of the main thread)."""
    @functools.wraps(method)
    def counted(self, *args, **kwargs):
        watch = self.watch
        watch.calls += 1
        watch.inside = True
        try:
            return method(self, *args, **kwargs)
        finally:
            watch.inside = False
    return counted


class Comm:
    """The job's ranks: ``rank`` in ``[0, size)``. Built by :func:`init`; one per process.

    ``watch``: this rank's watchdog.Beat (phase, steps done, collectives entered), which the main thread keeps
    and the stall watchdog (``watchdog``, None when off or on one rank) reads."""

    def __init__(self, mpi_comm, threads=1):
        from .watchdog import Beat

        self.mpi = mpi_comm
        self._hvd = None  # Horovod, once started (:meth:`horovod`)
        self.threads = threads  # this rank's compute-thread budget (init)
        self.threads_given = True  # False where init fell back to 1 (no argument, no $HVD_W2V_THREADS)
        self.rank = mpi_comm.Get_rank()
        self.size = mpi_comm.Get_size()
        self._calls = 0
        self.watch = Beat(self.rank)
        self.watchdog = None
        self.finished = False  # finish() ran

    # -- dense, replicated tensors: Horovod ----------------------------------------------------------
    def horovod(self):
        """Horovod's module, started on first use: TensorFlow imported (:func:`tensorflow`) and ``hvd.init`` on
        this job's MPI. Collective the first time (every rank must call it at the same point, as every dense
        call is): a job that never needs a dense collective (the text passes, the queries, shard-local SGD
        without hot rows) never pays for TensorFlow and Horovod's start, a few seconds a rank and about 390 MiB
        of resident memory (hvd_w2v/bench/README.md, "Memory against the plan")."""
        if self._hvd is None:
            tensorflow(self.threads)
            hvd = _frozen_import("horovod.tensorflow")

            self.watch.calls, self.watch.inside = self.watch.calls + 1, True  # every rank must come
            hvd.init(comm=self.mpi)
            self.watch.inside = False
            if not hvd.mpi_threads_supported():
                raise UserError("Horovod was built without MPI thread support; rebuild it with mpi/setup")
            self._hvd = hvd
        return self._hvd

    @_collective
    def allreduce_dense(self, array, average=False):
        """Sum (or mean) of a float/int array over ranks, via Horovod; every rank gets the result. Waits for
        Horovod's next cycle (HOROVOD_CYCLE_MS)."""
        if self.size == 1:
            return np.array(array)  # the sum over one rank; spares Horovod, its start and its wait for the cycle
        import tensorflow as tf

        hvd = self.horovod()
        self._calls += 1
        out = hvd.allreduce(tf.convert_to_tensor(array), op=hvd.Average if average else hvd.Sum,
                            name=f"dense.{self._calls}")
        return out.numpy()

    @_collective
    def broadcast_dense(self, array, root=0):
        """Rank ``root``'s array on every rank, via Horovod (same shape and dtype on all ranks)."""
        import tensorflow as tf

        hvd = self.horovod()
        self._calls += 1
        return hvd.broadcast(tf.convert_to_tensor(array), root, name=f"bcast.{self._calls}").numpy()

    # -- sparse, per-destination traffic: mpi4py -----------------------------------------------------
    @_collective
    def alltoallv(self, send, counts, recv_counts=None, out=None):
        """Exchange rows by destination.

        ``send`` holds the rows for rank 0, then rank 1, ... (any dtype, shape ``[n, *row]``), ``counts[d]``
        rows for rank ``d``. Returns ``(recv, recv_counts)``: the rows from rank 0, then rank 1, ..., in the
        order each sender listed them. A caller that already knows ``recv_counts`` (the reply to an earlier
        exchange) passes it and saves the Alltoall of counts; it may also pass ``out``, a C-contiguous array
        of the right shape and dtype to receive into.
        """
        send = np.ascontiguousarray(send)
        counts = np.asarray(counts, dtype=np.int64)
        if self.size == 1:  # to oneself: no copy unless asked for one
            if out is not None:
                out[...] = send
            return (send if out is None else out), counts
        if recv_counts is None:
            recv_counts = np.empty(self.size, dtype=np.int64)
            self.mpi.Alltoall(counts, recv_counts)
        recv = _receiver(send, recv_counts, out)
        self.mpi.Alltoallv(_spec(send, counts), _spec(recv, recv_counts))
        return recv, recv_counts

    @_collective
    def alltoallv_many(self, parts, idle=None):
        """Several alltoallv at once: ``parts`` lists :class:`Part`; returns the received arrays in that order.

        They travel together, so the ranks wait for each other once rather than once per exchange. While
        they are in flight this rank calls ``idle()``, work that does not depend on them, until it returns
        False (nothing left to do): a rank that arrives early does that work instead of spinning, and waits
        only when it has none.

        One MPI Ialltoallv per part; a part with ``own=False`` gives its own block zero counts at its usual
        displacements, so that block stays where it is on both sides. On one rank a part without ``out`` comes back as
        its ``send`` itself.
        """
        from mpi4py import MPI

        sent, received, requests = [], [], []  # the arrays must outlive their requests
        for part in parts:
            send = np.ascontiguousarray(part.send)
            if self.size == 1 and part.out is None:  # to oneself, into no given array: nothing to move
                received.append(send)
                continue
            recv = _receiver(send, part.recv_counts, part.out)
            sent.append(send)
            received.append(recv)
            if self.size == 1:  # to oneself: a copy, unless the caller moves its own block
                if part.own:
                    recv[...] = send
            else:
                own = None if part.own else self.rank
                requests.append(self.mpi.Ialltoallv(_spec(send, part.counts, own),
                                                    _spec(recv, part.recv_counts, own)))
        while requests and not MPI.Request.Testall(requests):
            if idle is None or not idle():
                MPI.Request.Waitall(requests)
                break
        return received

    @_collective
    def alltoall_ints(self, values):
        """One int64 to each rank: ``values[d]`` goes to rank ``d``; returns what each rank sent here."""
        out = np.empty(self.size, dtype=np.int64)
        self.mpi.Alltoall(np.ascontiguousarray(values, dtype=np.int64), out)
        return out

    @_collective
    def allgatherv(self, array, counts):
        """Every rank's 1-D ``array`` laid end to end in rank order, ``counts[r]`` items from rank ``r`` (known
        to every rank: an allgather of them first where they are not)."""
        array = np.ascontiguousarray(array)
        if self.size == 1:
            return array
        out = np.empty(int(np.sum(counts)), array.dtype)
        self.mpi.Allgatherv(array, _spec(out, counts))
        return out

    @_collective
    def allgather(self, obj):
        """A small picklable value from every rank, as a list in rank order."""
        return self.mpi.allgather(obj)

    @_collective
    def broadcast(self, obj, root=0):
        """``root``'s picklable ``obj`` on every rank (the others' ``obj`` is ignored): what one rank decides
        for all, at the cost of one copy per rank where an allgather would cost one per rank pair."""
        return self.mpi.bcast(obj, root=root)

    def allreduce_later(self, array):
        """Start summing a small float array over ranks (MPI Iallreduce) and return at once a function that
        waits for the sum (float64) and returns it. Training goes on meanwhile: the sum travels with the
        MPI calls of the steps after it."""
        from mpi4py import MPI

        send = np.array(array, np.float64)
        out = np.empty_like(send)
        request = self.mpi.Iallreduce(send, out, op=MPI.SUM)

        @_collective
        def wait(self, buffers=(send, out)):  # holds both buffers until the sum is in
            request.Wait()
            return buffers[1]
        return functools.partial(wait, self)

    @_collective
    def allreduce(self, value, op="sum"):
        """A small scalar, or a small numpy array element by element, reduced over ranks (``op`` is "sum",
        "max" or "min")."""
        from mpi4py import MPI

        return self.mpi.allreduce(value, op={"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op])

    @_collective
    def barrier(self):
        self.mpi.Barrier()

    @_collective
    def agree(self, error):
        """Share bad-input errors: ``error`` is this rank's message or None.

        Raises :class:`UserError` with the first message (lowest rank) on *every* rank, so that all ranks
        leave their collectives together and the job ends cleanly rather than by abort.
        """
        errors = [e for e in self.mpi.allgather(error) if e]
        if errors:
            raise UserError(errors[0])

    def abort(self, code=1):
        self.mpi.Abort(code)


def _receiver(send, recv_counts, out):
    """``out``, or a new array for ``recv_counts`` rows shaped as the rows of ``send``."""
    if out is not None:
        return out
    return np.empty((int(np.sum(recv_counts)),) + send.shape[1:], dtype=send.dtype)


def _spec(array, counts, skip=None):
    """mpi4py's ``[buffer, (counts, displacements), type]`` for rows of ``array``, ``counts[r]`` for rank r;
    rank ``skip``'s block keeps its place but moves nothing."""
    from mpi4py import MPI

    row = array[0].size if len(array) else int(np.prod(array.shape[1:], dtype=np.int64))
    counts = np.asarray(counts, dtype=np.int64) * row
    displs = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=displs[1:])
    if skip is not None:
        counts[skip] = 0
    return [array, (counts, displs), MPI._typedict[array.dtype.char]]


_COMM = None
# Horovod's background thread wakes every HOROVOD_CYCLE_TIME ms, even with nothing queued, and each wake is
# a collective among the ranks' background threads: with one core per rank it takes the core from the step,
# and the thread that wakes first spins until the other's wakes. So a long cycle trains faster
# (`python -m hvd_w2v.bench.settings`, the HOROVOD_CYCLE_TIME rows; figures in hvd_w2v/bench/README.md,
# "The speed defaults"). hvd-w2v calls Horovod a few times a run (the loss reports are MPI's: loop.Reports); a Horovod
# call waits up to a cycle, so --hot-rows, one call a step, keeps 50 ms. A value set by the user wins.
# With the hot rows merged inside the super-step (hotsync), Horovod is called several times a super-step
# and each call waits for its cycle, so a short one (`python -m hvd_w2v.bench.throughput --variant ...` with
# $HOROVOD_CYCLE_TIME; hvd_w2v/bench/README.md, "Hot rows merged inside the super-step").
HOROVOD_CYCLE_MS = 250
HOT_ROWS_CYCLE_MS = 50
HOT_INSIDE_CYCLE_MS = 2


def init(threads=None, cycle_ms=HOROVOD_CYCLE_MS, stall_timeout=None):
    """Start MPI once per process and return the :class:`Comm` (Horovod starts at its first use:
    Comm.horovod).

    ``threads`` (default: $HVD_W2V_THREADS, else 1; thread_budget) is this rank's compute-thread budget, which
    TensorFlow gets when it is imported (:func:`tensorflow`). ``cycle_ms``: Horovod's cycle, unless
    $HOROVOD_CYCLE_TIME is set. ``stall_timeout``: the stall watchdog's limit in seconds (hvd_w2v/parallel/watchdog.py;
    None: automatic, 0: off). On more than one rank the watchdog runs from MPI's start on: over everything after
    it, Horovod's start among it; MPI's own start is watched by watchdog.starting.
    """
    global _COMM
    if _COMM is not None:
        return _COMM
    from . import watchdog

    threads, given = thread_budget(threads)  # a bad budget is an error before anything starts
    MPI = _start_mpi(stall_timeout)  # MPI is up before Horovod, which then shares it
    world = MPI.COMM_WORLD
    beat = watchdog.Beat(world.Get_rank())
    dog = None
    if world.Get_size() > 1 and stall_timeout != 0:
        dog = watchdog.Watchdog(world, beat, stall_timeout).start()
        atexit.register(dog.stop)  # before MPI_Finalize (mpi4py's, at exit): no MPI call may be in flight then
    beat.enter("start")
    os.environ.setdefault("HOROVOD_CYCLE_TIME", str(cycle_ms))  # read by Horovod when it starts
    _COMM = Comm(world, threads)
    _COMM.threads_given = given
    _COMM.watch, _COMM.watchdog = beat, dog
    # For scripts of the Python API (the command line does both itself, hvd_w2v/cli.py main): the watched
    # last barrier at exit, and an uncaught exception that ends the whole job rather than leave the other
    # ranks waiting in a collective.
    atexit.register(finish, _COMM)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _uncaught
    return _COMM


def _frozen_import(name):
    """The module ``name``, imported with the collector paused, its objects then left out of the collector's
    passes. Importing TensorFlow and Horovod makes hundreds of thousands of objects that live as long as the
    process, and the collector's passes over them while they are made take much of the import's time (the
    bench README's "Start-up")."""
    import importlib

    if name in sys.modules:
        return sys.modules[name]
    gc.disable()
    try:
        return importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()


def tensorflow(threads):
    """TensorFlow's module, imported once per process with ``threads`` as its thread budget (what must be set
    before it runs any op): for Horovod's start and for the step maths' TensorFlow graph (training.sgns)."""
    global _TF_THREADS
    tf = _frozen_import("tensorflow")
    if _TF_THREADS is None:
        _TF_THREADS = threads
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # TensorFlow already ran an op, imported elsewhere: its own budget stays
            pass
    return tf


_TF_THREADS = None  # the thread budget TensorFlow was given (tensorflow), once imported


def thread_budget(threads=None):
    """``(threads, given)``: the compute threads a rank runs on, ``threads`` when not None, else
    $HVD_W2V_THREADS when set, else 1 (``given`` False). A count below 1, or a variable that is not a whole
    number, is a UserError naming it."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise UserError(f"--threads (threads=) must be a whole number of at least 1, got {threads!r}")
        return int(threads), True
    raw = os.environ.get("HVD_W2V_THREADS", "").strip()
    if not raw:
        return 1, False
    if not raw.isdigit() or int(raw) < 1:
        raise UserError(f"HVD_W2V_THREADS must be a whole number of at least 1, got {raw!r}")
    return int(raw), True


def _uncaught(kind, value, tb):
    """sys.excepthook once MPI runs. A UserError was raised on every rank (comm.agree): rank 0 prints it and
    every rank exits with 1 through the last barrier. Any other exception may be one rank's alone: that rank
    prints its traceback, each line prefixed with its rank, and aborts the job (MPI_Abort)."""
    import traceback

    rank = _COMM.rank if _COMM is not None else 0
    if issubclass(kind, UserError):
        if rank == 0:
            sys.__excepthook__(kind, value, tb)
        return
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
    sys.stderr.flush()
    if _COMM is not None and _COMM.size > 1:
        _COMM.mpi.Abort(1)


def _start_mpi(stall_timeout):
    """mpi4py's MPI module, with MPI started (MPI_THREAD_MULTIPLE: the watchdog thread sends and receives
    while the main thread waits in a collective).

    MPI_Init waits for every rank. mpi4py calls it holding Python's lock, so no other thread could run while
    it waits; called through ctypes, which lets go of the lock, the start's timer (watchdog.starting) can end
    a rank held there by a peer that never comes. mpi4py then finalizes MPI at exit as usual."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = True
    from mpi4py import MPI

    if MPI.Is_initialized():
        return MPI
    from . import watchdog

    watchdog.inject("mpi", watchdog.env_rank()[0])
    started = watchdog.starting(stall_timeout)
    library = _libmpi()
    if library is None:  # not Linux, or MPI linked statically: the start is not watched
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    else:
        import ctypes

        provided = ctypes.c_int(-1)
        code = ctypes.CDLL(library).MPI_Init_thread(None, None, ctypes.c_int(MPI.THREAD_MULTIPLE),
                                                    ctypes.byref(provided))
        if code != 0:
            raise RuntimeError(f"MPI_Init_thread failed with error code {code}")
        for c in (MPI.COMM_SELF, MPI.COMM_WORLD):  # what mpi4py's own start sets: errors raise, never abort
            c.Set_errhandler(MPI.ERRORS_RETURN)
    started()
    return MPI


def _libmpi():
    """The path of the MPI library mpi4py loaded (from /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            return next((line.split(None, 5)[5].strip() for line in f
                         if "/libmpi.so" in line and len(line.split(None, 5)) == 6), None)
    except OSError:
        return None


def finish(comm):
    """The end of a command on every rank: one last barrier, watched (a rank still busy, e.g. rank 0 writing
    the run's record on a stuck filesystem, would otherwise hold the others in MPI_Finalize, unwatched), then
    the watchdog stops. Collective; nothing when MPI was not started, or the second time."""
    if comm is None or comm.finished:
        return
    comm.finished = True
    if comm.watchdog is not None:
        comm.watch.enter("finish")
        comm.barrier()
        comm.watchdog.stop()


def layout(comm):
    """Where the ranks run: ``(hosts, text)``, ``hosts[r]`` rank r's host name and ``text`` one line such as
    "4 ranks on 2 hosts (nodeA: 0-1; nodeB: 2-3), 1 thread each". Collective (one allgather).

    Where no rank of a host was given a thread budget (a job started by mpirun or srun itself, or a script
    run alone, rather than by mpi/launch or the Slurm templates, which set $HVD_W2V_THREADS) and its ranks'
    one thread each leave CPUs of their affinity masks idle, the line says so and how to use them; where a
    host's ranks run more threads than those masks hold CPUs, it says that too."""
    import socket

    # mpi4py: every rank sends its host name, thread budget, whether it was given, and the CPUs it may run on;
    # all get the list in rank order.
    found = comm.allgather((socket.gethostname(), comm.threads, comm.threads_given, sorted(os.sched_getaffinity(0))))
    hosts = [h for h, *_ in found]
    by_host = {}
    for r, h in enumerate(hosts):
        by_host.setdefault(h, []).append(r)
    threads = sorted({t for _, t, *_ in found})
    each = (f"{counted(threads[0], 'thread')} each" if len(threads) == 1
            else "threads " + ", ".join(str(t) for _, t, *_ in found))
    text = (f"{counted(comm.size, 'rank')} on {counted(len(by_host), 'host')} ("
            + "; ".join(f"{h}: {_ranges(rs)}" for h, rs in by_host.items()) + f"), {each}")
    # Per host: its ranks, the CPUs their masks hold, the threads they run, and whether any was given a budget.
    usage = [(host, len(ranks), len(set().union(*(found[r][3] for r in ranks))), sum(found[r][1] for r in ranks),
              any(found[r][2] for r in ranks)) for host, ranks in by_host.items()]
    # One host named for each note: the others were most likely started the same way.
    idle = next(((h, n, cpus) for h, n, cpus, _, given in usage if not given and cpus > n), None)
    if idle:
        host, n, cpus = idle
        budget = cpus // n
        text += (f"; no thread budget was set, so {host}'s {counted(n, 'rank')} {'uses' if n == 1 else 'use'} "
                 f"{n} of its {cpus} CPUs: --threads {budget} (threads={budget} in Python, or "
                 f"HVD_W2V_THREADS={budget}) uses them all, as mpi/launch does")
    over = next(((h, cpus, running) for h, _, cpus, running, _ in usage if running > cpus), None)
    if over:
        host, cpus, running = over
        text += (f"; {host} runs {running} threads on {cpus} CPUs (oversubscribed: its threads take turns, and "
                 f"each step waits for the slowest)")
    return hosts, text


def _ranges(ranks):
    """[0, 1, 2, 5] -> "0-2, 5"."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(parts)


def log(comm, message, all_ranks=False):
    """Progress and warnings: rank 0 prints plain lines; other ranks, when asked, prefix their rank."""
    if comm is None or comm.rank == 0:
        from ..common.progress import end_line

        end_line()  # a progress bar being redrawn in place ends its line first
        _line(message)
    elif all_ranks:
        _line(f"[rank {comm.rank}] {message}")


def _line(text):
    # One write, newline included: mpirun forwards each write as it comes, and a line written in two pieces
    # can have a line of stdout land inside it.
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def tcp_connections():
    """This process's established TCP connections, as a list of (local, remote) endpoints in /proc's hex form.

    For telling which ranks talk over TCP (`hvd-w2v check`): rank a and rank b are connected when a lists
    (x, y) and b lists (y, x). Read from /proc/self/net/tcp{,6} (the connections of this network namespace)
    and /proc/self/fd (the sockets this process holds); empty where /proc is not Linux's.
    """
    held = set()
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                held.add(target[8:-1])
    except OSError:
        return []
    found = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        # Columns: sl local_address rem_address st ... inode; state 01 is ESTABLISHED.
        found += [(row[1], row[2]) for row in rows if len(row) > 9 and row[3] == "01" and row[9] in held]
    return found
