"""The stall watchdog: every rank's heartbeat, and a thread on every rank that ends a job whose ranks wait for one
that does not come, naming it.

Why: MPI has no time-outs. A rank that is alive but not moving (stopped with SIGSTOP, a frozen node, a stuck
NFS read, a swapping host) leaves its peers blocked in a collective for as long as it lasts: on a cluster,
until the wall-clock limit. A rank that dies is no problem (mpirun or srun end the job at once).

What each rank's main thread publishes, in a :class:`Beat` (plain attributes, written by the main thread
alone and read by the watchdog thread; a few assignments per step, no system call):
  ``phase`` (start, corpus, vocab, encode, train, checkpoint, export, load, query, finish), ``step`` (global
  training steps done), ``calls`` (collective calls entered; comm.Comm counts them) and ``inside`` (whether
  the main thread is inside one now).

What the watchdog thread does, every ``tick`` seconds (see :class:`Watchdog`):
  - sends this rank's heartbeat (rank, host, phase, step, inside, and how long the main thread has been in
    that state) to every other rank, as a small MPI message on COMM_WORLD with tag TAG (the only
    point-to-point traffic of hvd-w2v: collectives never match it), and receives the others';
  - when this rank's main thread has been inside one collective call for longer than the limit, reads the
    heartbeats it holds and names the ranks that have not arrived: those it has not heard from for
    ``stale`` seconds (stopped, or their host stuck or unreachable) and those alive but outside any
    collective (stuck in their own work). No help from those ranks is needed: a stopped rank sends nothing,
    and its last heartbeat waits in the live ranks' own queues. (A one-sided MPI window would not do: a Get
    over TCP needs progress from the target, which a stopped process does not make.)
  - the lowest live rank that waits prints ONE line, ``hvd-w2v: error: stalled: ...``, calls ``on_stall``
    (the train command records the stall in run.json), and ends the job with MPI_Abort(EXIT_STALLED).

The limit (``--stall-timeout SECONDS``; 0 turns the watchdog off): by default the larger of DEFAULT_LIMIT and
STEP_FACTOR times the median training step, as this rank measured it (before there are steps to measure,
DEFAULT_LIMIT). Either way a phase may raise it to its own floor (``budget``): building the default corpus
(downloads) and writing a large model's checkpoints or exports take longer than any step.

Before MPI has started there is no heartbeat: :func:`starting` covers MPI's own start, in which every rank
waits for all the others (MPI_Init); there the rank that never joined cannot be named.
"""
import collections
import os
import signal
import socket
import sys
import threading
import time
from typing import NamedTuple

EXIT_STALLED = 76  # not 2 (usage), 75 (interrupted, EX_TEMPFAIL), 126/127 (not found), 128+N (signals)
TAG = 0x7764  # "wd": heartbeat messages on COMM_WORLD
DEFAULT_LIMIT = 120.0  # seconds: far above any healthy wait of hvd-w2v (a step, a checkpoint's agreement)
STEP_FACTOR = 50  # the automatic limit in training is at least 50 median steps
MIN_STEP_SAMPLES = 5  # step-time samples before the median counts
CORPUS_BUDGET = 1800.0  # seconds: rank 0 building the default corpus (downloads) while the others wait
IO_BYTES_PER_SECOND = 16 * 2**20  # the slowest disk a checkpoint or export is allowed: its floor is bytes / this
ABORT_GRACE = 10.0  # seconds: when MPI_Abort itself does not end the process, os._exit does
FAULT_ENV = "HVD_W2V_FAULT"  # "stop:PHASE:RANK": that rank stops itself (SIGSTOP) on entering PHASE (for tests)
LATER = 5.0  # seconds: before MPI has started, ranks other than 0 speak this much later than rank 0


class Beat:
    """What this rank's main thread has done, as the watchdog reads it. The main thread alone writes it.

    ``phase``: the current phase's name; ``step``: global training steps done (over all epochs, as a
    checkpoint counts them); ``calls``: collectives entered so far; ``inside``: whether the main thread is in
    one now (comm.Comm keeps these two); ``budget``: the phase's own floor on the limit, in seconds.
    """

    def __init__(self, rank=0):
        self.rank = rank
        self.phase = "start"
        self.step = 0
        self.calls = 0
        self.inside = False
        self.budget = 0.0
        self.wake = None  # set by the Watchdog: tells its thread at once of a new phase

    def enter(self, phase, step=None, budget=0.0):
        """The main thread starts ``phase`` (with ``step`` steps done, when given); returns what to pass to
        :meth:`leave` to go back to the phase before. ``budget``: the phase's floor on the limit (seconds).
        The watchdog sends the new phase at once, not at its next tick, so a rank that stops early in a phase
        is named in it."""
        before = (self.phase, self.budget)
        self.phase, self.budget = phase, float(budget)
        if step is not None:
            self.step = step
        if self.wake is not None:
            self.wake()
        inject(phase, self.rank)
        return before

    def leave(self, before):
        self.phase, self.budget = before
        if self.wake is not None:
            self.wake()


def io_budget(nbytes):
    """The floor of a phase that writes ``nbytes`` per rank (checkpoint, export), in seconds."""
    return nbytes / IO_BYTES_PER_SECOND


def inject(phase, rank):
    """Fault injection for the tests (FAULT_ENV="stop:PHASE:RANK"): rank RANK stops itself with SIGSTOP on
    entering PHASE, as a frozen node would look to its peers. Nothing happens without the variable."""
    spec = os.environ.get(FAULT_ENV, "")
    if spec:
        action, _, rest = spec.partition(":")
        where, _, who = rest.rpartition(":")
        if action == "stop" and where == phase and who == str(rank):
            time.sleep(0.5)  # a rank that stops in the phase, not on its first instruction: its peers heard of it
            os.kill(os.getpid(), signal.SIGSTOP)


class Heartbeat(NamedTuple):
    """One rank's heartbeat, as its peers receive it. ``state_seconds``: how long its main thread had been
    inside (or outside) a collective, by its own clock, when it sent this."""

    rank: int
    host: str
    phase: str
    step: int
    inside: bool
    state_seconds: float


class Watchdog:
    """The watchdog thread of one rank: heartbeats to and from every other rank over ``mpi`` (mpi4py's
    COMM_WORLD, MPI_THREAD_MULTIPLE), and the verdict when this rank has waited longer than the limit.

    ``limit``: seconds, or None for the automatic limit (module docstring). ``on_stall(info)``, when set, is
    called before the job ends, bounded to a few seconds (info: see :func:`stall_info`). ``stream``: where the
    line goes (stderr).
    """

    def __init__(self, mpi, beat, limit=None, stream=None):
        self.mpi, self.beat = mpi, beat
        self.rank, self.size = mpi.Get_rank(), mpi.Get_size()
        self.host = socket.gethostname()
        self.given = limit
        base = limit if limit else DEFAULT_LIMIT
        self.tick = min(1.0, max(0.1, base / 20))  # seconds between heartbeats and looks
        self.stale = max(2.0, min(base / 3, 15.0))  # seconds without a heartbeat: that rank does not run
        self.grace = self.stale + 2 * self.tick  # how long a lower waiting rank is left to speak first
        self.stream = stream or sys.stderr
        self.on_stall = None
        self.peers = {}  # rank -> (Heartbeat, local monotonic time it arrived)
        self.steps = collections.deque(maxlen=101)  # seconds per step, sampled every tick
        self._sent = []  # pending isend requests (their buffers live with them)
        self._stop = False
        self._wake = threading.Event()  # a tick, or earlier: a new phase (Beat.enter) or the stop
        self._thread = None
        self.ended = False

    # -- the limit -------------------------------------------------------------------------------------------
    def median_step(self):
        """The median training step this rank measured, in seconds, or None before MIN_STEP_SAMPLES."""
        if len(self.steps) < MIN_STEP_SAMPLES:
            return None
        return sorted(self.steps)[len(self.steps) // 2]

    def limit(self):
        """Seconds this rank waits in one collective before it calls the job stalled."""
        if self.given:
            base = self.given
        else:
            step = self.median_step()
            base = max(DEFAULT_LIMIT, STEP_FACTOR * step) if step else DEFAULT_LIMIT
        return max(base, self.beat.budget)

    # -- the thread ------------------------------------------------------------------------------------------
    def start(self):
        """Send this rank's first heartbeat (from the calling thread: its host is known to every rank even if
        it stops at once) and start the thread."""
        b = self.beat
        self._send(Heartbeat(self.rank, self.host, b.phase, b.step, b.inside, 0.0))
        b.wake = self._wake.set
        self._thread = threading.Thread(target=self._run, name="hvd-w2v watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """End the thread (before MPI_Finalize: no MPI call may be in flight then). Idempotent."""
        if self._thread is None:
            return
        self.beat.wake = None
        self._stop = True
        self._wake.set()
        self._thread.join(5 * self.tick + 1)
        self._thread = None
        from mpi4py import MPI

        deadline = time.monotonic() + 1.0  # small eager sends complete at once; none is waited for longer
        while self._sent and not MPI.Request.Testall(self._sent) and time.monotonic() < deadline:
            time.sleep(0.01)
        self._sent = []

    def _run(self):
        state, since = None, time.monotonic()
        last = since
        sampled = (self.beat.step, since)
        while True:
            self._wake.wait(self.tick)
            self._wake.clear()
            if self._stop:
                return
            now = time.monotonic()
            if now - last > self.tick + max(2.0, 3 * self.tick):
                # This process did not run for a while (stopped, or starved of CPU): it was not waiting, and
                # what it has not heard meanwhile is in its queue now. Only ever delays a verdict.
                since = now
                self.peers = {q: (hb, max(at, now)) for q, (hb, at) in self.peers.items()}
            last = now
            self._receive(now)
            b = self.beat
            if (b.calls, b.inside) != state:
                state, since = (b.calls, b.inside), now
            step = b.step
            if step > sampled[0]:
                self.steps.append((now - sampled[1]) / (step - sampled[0]))
            if step != sampled[0]:
                sampled = (step, now)
            self._send(Heartbeat(self.rank, self.host, b.phase, step, b.inside, now - since))
            if b.inside and now - since >= self.limit():
                self._judge(now, now - since)
                if self.ended:
                    return

    def _receive(self, now):
        from mpi4py import MPI

        status = MPI.Status()
        while self.mpi.Iprobe(MPI.ANY_SOURCE, TAG, status):  # only this thread receives with TAG
            hb = self.mpi.recv(source=status.Get_source(), tag=TAG)
            self.peers[hb.rank] = (hb, now)

    def _send(self, hb):
        from mpi4py import MPI

        # To every rank, silent ones too (two ranks that stopped sending to each other while one of them was
        # busy would never hear from each other again). A small send completes at once (eager); to a stopped
        # rank over TCP a few may wait: at most limit / tick of them before the job ends.
        for q in range(self.size):
            if q != self.rank:
                self._sent.append(self.mpi.isend(hb, dest=q, tag=TAG))
        if self._sent:
            done = MPI.Request.Testsome(self._sent) or []
            for i in sorted(done, reverse=True):
                del self._sent[i]

    # -- the verdict -----------------------------------------------------------------------------------------
    def _judge(self, now, waited):
        fresh = {q: now - at <= self.stale for q, (_, at) in self.peers.items()}
        waiting_lower = [q for q, (hb, _) in self.peers.items() if q < self.rank and fresh[q] and hb.inside]
        if waiting_lower and waited < self.limit() + self.grace:
            return  # the lowest rank that waits speaks; this one only if it has not ended the job by then
        b = self.beat
        culprits = missing(self.peers, now, self.stale, self.size, self.rank)
        text = message(self.rank, self.host, b.phase, b.step, waited, culprits)
        self._end(text, stall_info(self.rank, b.phase, b.step, waited, culprits, text))

    def _end(self, text, info):
        """Print the line, record the stall (bounded), end the job: MPI_Abort, or os._exit if that hangs."""
        self.ended = True
        fallback = threading.Timer(ABORT_GRACE, os._exit, (EXIT_STALLED,))
        fallback.daemon = True
        fallback.start()
        try:
            from ..common.progress import end_line

            end_line()  # a progress bar being redrawn ends its line first
        except Exception:  # noqa: BLE001 - the line matters more than the bar
            pass
        self.stream.write(f"hvd-w2v: error: {text}\n")
        self.stream.flush()
        if self.on_stall is not None:
            # On a stuck filesystem the record could block for ever: it gets a few seconds, then the job ends.
            recorder = threading.Thread(target=_quietly, args=(self.on_stall, info), daemon=True)
            recorder.start()
            recorder.join(5.0)
        self.mpi.Abort(EXIT_STALLED)


def _quietly(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - a record that cannot be written must not keep the job alive
        sys.stderr.write(f"hvd-w2v: warning: the stall could not be recorded: {e}\n")


class Missing(NamedTuple):
    """A rank that has not arrived, as a waiting rank sees it: its last ``heartbeat`` (None: never heard
    from), ``age`` (seconds since it arrived, None when never) and ``kind``: "never" (no heartbeat since the
    job started), "silent" (none for longer than the staleness limit: stopped, or its host stuck or
    unreachable) or "busy" (alive, outside any collective: stuck in its own work)."""

    rank: int
    heartbeat: Heartbeat
    age: float
    kind: str


def missing(peers, now, stale, size, me):
    """The ranks that have not arrived, as rank ``me`` sees them at ``now`` when it has waited too long: a
    list of :class:`Missing`. ``peers``: {rank: (Heartbeat, arrival time)}; ``stale``: seconds of silence
    after which a rank is taken not to run. Empty when every rank is alive and waiting: then the collective
    itself does not complete."""
    found = []
    for q in range(size):
        if q == me:
            continue
        hb, at = peers.get(q, (None, None))
        if hb is None:
            found.append(Missing(q, None, None, "never"))
        elif now - at > stale:
            found.append(Missing(q, hb, now - at, "silent"))
        elif not hb.inside:
            found.append(Missing(q, hb, now - at, "busy"))
    return found


def _where(phase, step):
    return f"at step {step:,} in phase {phase}" if phase in ("train", "checkpoint") else f"in phase {phase}"


def _one(m):
    hb = m.heartbeat
    if m.kind == "never":
        return f"rank {m.rank} (host unknown; no heartbeat from it since MPI started: stopped, or its host stuck)"
    if m.kind == "silent":
        return (f"rank {m.rank} (host {hb.host}; last seen {m.age:.0f} s ago {_where(hb.phase, hb.step)}: stopped, "
                f"or its host is stuck or unreachable)")
    return (f"rank {m.rank} (host {hb.host}; alive {_where(hb.phase, hb.step)} but outside any collective for "
            f"{hb.state_seconds + m.age:.0f} s: stuck in its own work, e.g. a file read or a swapping host)")


def message(me, host, phase, step, waited, culprits):
    """The one line (after "hvd-w2v: error: ") that says who stalled the job, as rank ``me`` on ``host`` sees
    it after waiting ``waited`` seconds in ``phase`` with ``step`` steps done; ``culprits`` from
    :func:`missing`."""
    if phase == "train":
        what = f"not finished step {step + 1:,}"
    elif phase == "checkpoint":
        what = f"not finished the checkpoint of step {step:,}"
    else:
        what = f"not reached the others in phase {phase}"
    tail = f"; ending the job with exit code {EXIT_STALLED}"
    if not culprits:
        return (f"stalled: every rank has waited {waited:.0f} s in a collective that does not complete "
                f"({_where(phase, step)}; rank {me}, host {host}): MPI itself is stuck (a network problem?){tail}")
    parts = [_one(m) for m in culprits]
    who = parts[0] + " has" if len(parts) == 1 else "ranks " + ", ".join(p[len("rank "):] for p in parts) + " have"
    return f"stalled: {who} {what} for {waited:.0f} s{tail}"


def stall_info(me, phase, step, waited, culprits, text):
    """The stall as run.json records it (under "stall")."""
    return {"noticed_by": me, "phase": phase, "step": step, "waited_seconds": round(waited, 1),
            "exit_code": EXIT_STALLED, "message": text,
            "ranks": [{"rank": m.rank, "kind": m.kind,
                       **({"host": m.heartbeat.host, "phase": m.heartbeat.phase, "step": m.heartbeat.step,
                           "last_seen_seconds": round(m.age, 1)} if m.heartbeat else {})}
                      for m in culprits]}


# -- before MPI has started ----------------------------------------------------------------------------------

def env_rank():
    """(rank, size) as the launcher set them in the environment (Open MPI, PMIx, Slurm, MPICH), before MPI
    has started; (0, 1) when none is set."""
    for rank, size in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMIX_RANK", "SLURM_NTASKS"),
                       ("SLURM_PROCID", "SLURM_NTASKS"), ("PMI_RANK", "PMI_SIZE")):
        if rank in os.environ and size in os.environ:
            try:
                return int(os.environ[rank]), int(os.environ[size])
            except ValueError:
                pass
    return 0, 1


def starting(limit):
    """Watch MPI's start: returns a function to call once MPI is up. If it is not called within the limit
    (``limit`` seconds; None: DEFAULT_LIMIT; 0: off), this rank prints one line and exits with EXIT_STALLED.

    MPI_Init returns on no rank before every rank has called it, so a rank that never gets there (stopped, or
    its host stuck) holds every other rank in MPI_Init, and no rank can name it. Rank 0 speaks at the limit,
    the others LATER seconds after it (when rank 0 is the one missing): usually one line. The thread can run
    because comm.init calls MPI_Init without holding Python's lock."""
    rank, size = env_rank()
    if size <= 1 or limit == 0:
        return lambda: None
    limit = limit or DEFAULT_LIMIT
    host = socket.gethostname()

    def fire():
        sys.stderr.write(f"hvd-w2v: error: stalled: rank {rank} (host {host}) has waited {limit:.0f} s for the "
                         f"other ranks to start MPI: a rank never joined (stopped, its host stuck, or its start "
                         f"slower than the limit), and before MPI has started no rank can tell which; ending the "
                         f"job with exit code {EXIT_STALLED}\n")
        sys.stderr.flush()
        os._exit(EXIT_STALLED)

    timer = threading.Timer(limit + (LATER if rank else 0.0), fire)
    timer.daemon = True
    timer.start()
    return timer.cancel
