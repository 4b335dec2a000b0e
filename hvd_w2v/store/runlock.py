"""One job per run folder: OUT/.hvd-w2v.lock, taken by rank 0 of train, vocab and encode before anything is
written into OUT, held for the job's life and removed at its end (errors and exit 75 included).

The lock is a file created with O_CREAT|O_EXCL, which NFS (v3 and later) makes atomic across hosts; flock is
not relied on. It holds its holder as JSON: host, pid, Slurm job id (or null), start time and a heartbeat (a
Unix time) that a daemon thread of the holder rewrites every HEARTBEAT_SECONDS. A lock is taken over, with a
message, when its holder is provably gone: it is on this host and no process has its pid, or its heartbeat
is older than STALE_SECONDS (a crashed host, or a job killed with SIGKILL on another host); a takeover renames
the stale file aside first, so two jobs taking over at once cannot both win. A lock held by the same Slurm job
id (a requeued job whose previous run is still exiting) is waited for, up to WAIT_SECONDS
($HVD_W2V_LOCK_WAIT overrides it), then refused. Queries (evaluate, neighbors, analogy, export, info) never
take it: they read the newest good checkpoint, written atomically, and never block a training job.

Not collective: rank 0 calls :func:`acquire`; the pipeline shares its outcome (comm.agree).
"""
import json
import os
import socket
import threading
import time

from ..common.errors import UserError

NAME = ".hvd-w2v.lock"
HEARTBEAT_SECONDS = 15.0
STALE_SECONDS = 120.0  # eight missed heartbeats: the holder (or its host) is gone
# A requeued Slurm job waits this long for its previous run; longer than STALE_SECONDS, so that a run that
# died holding the lock (SIGKILL on another host) is taken over within the wait.
WAIT_SECONDS = 180.0


def wait_seconds():
    """How long a requeued job waits for its previous run: $HVD_W2V_LOCK_WAIT seconds, else WAIT_SECONDS."""
    try:
        return max(0.0, float(os.environ.get("HVD_W2V_LOCK_WAIT", WAIT_SECONDS)))
    except ValueError:
        raise UserError(f"HVD_W2V_LOCK_WAIT wants seconds, got {os.environ['HVD_W2V_LOCK_WAIT']!r}") from None


def _job():
    return os.environ.get("SLURM_JOB_ID") or None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def describe(holder):
    """The holder of a lock, as a message names it."""
    if not isinstance(holder, dict):
        return "an unreadable lock file"
    job = f", Slurm job {holder['slurm_job']}" if holder.get("slurm_job") else ""
    age = time.time() - holder.get("heartbeat", 0) if isinstance(holder.get("heartbeat"), (int, float)) else None
    beat = f", heartbeat {age:.0f} s ago" if age is not None else ""
    return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}{job}, started "
            f"{holder.get('started', '?')}{beat}")


def read(out):
    """The holder of OUT's lock as a dict, {} when the file is unreadable or partly written, None when there
    is no lock."""
    try:
        with open(os.path.join(out, NAME)) as f:
            holder = json.load(f)
        return holder if isinstance(holder, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def gone(holder, now=None):
    """Why the holder is provably gone ("" when it may be alive)."""
    now = time.time() if now is None else now
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) \
            and not _pid_alive(holder["pid"]):
        return f"no process {holder['pid']} on this host"
    beat = holder.get("heartbeat")
    if isinstance(beat, (int, float)) and now - beat > STALE_SECONDS:
        return f"its heartbeat is {now - beat:.0f} s old (limit {STALE_SECONDS:.0f} s)"
    return ""


class Lock:
    """A held lock: :meth:`release` removes it (idempotent); a daemon thread refreshes its heartbeat."""

    def __init__(self, out, holder):
        self.path, self.holder = os.path.join(out, NAME), holder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="hvd-w2v-lock", daemon=True)
        self._thread.start()

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_SECONDS):
            self.holder["heartbeat"] = time.time()
            tmp = f"{self.path}.{os.getpid()}.tmp"
            try:
                if (read(os.path.dirname(self.path)) or {}).get("token") != self.holder["token"]:
                    return  # taken over (this process was thought gone): not ours any more
                _write(tmp, self.holder)
                os.replace(tmp, self.path)
            except OSError:
                pass  # a full or flaky disk: the next beat tries again

    def release(self):
        self._stop.set()
        if (read(os.path.dirname(self.path)) or {}).get("token") == self.holder["token"]:
            try:
                os.remove(self.path)
            except OSError:
                pass


def _write(path, holder, exclusive=False):
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(holder, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def acquire(out, log=lambda m: None, wait=None):
    """Take OUT's lock (creating OUT) and return the :class:`Lock`; UserError naming the holder when another
    job holds it. ``wait``: seconds to wait for a holder of this Slurm job id (default WAIT_SECONDS, or
    $HVD_W2V_LOCK_WAIT)."""
    wait = wait_seconds() if wait is None else wait
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UserError(f"output folder {out} is not writable: {e.strerror}") from None
    path = os.path.join(out, NAME)
    now = time.time()
    holder = dict(host=socket.gethostname(), pid=os.getpid(), slurm_job=_job(),
                  started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), heartbeat=now,
                  token=f"{socket.gethostname()}.{os.getpid()}.{now}")
    deadline, waited = time.monotonic() + wait, False
    while True:
        try:
            _write(path, holder, exclusive=True)
            return Lock(out, holder)
        except FileExistsError:
            pass
        except OSError as e:
            raise UserError(f"output folder {out} is not writable: {e.strerror}") from None
        other = read(out)
        if other is None:
            continue  # released meanwhile
        why = gone(other) if other else ""
        if not other:  # being written, or garbage: judge it by its age
            try:
                age = time.time() - os.path.getmtime(path)
            except OSError:
                continue
            why = f"its lock file is unreadable and {age:.0f} s old" if age > STALE_SECONDS else ""
        if why:
            aside = f"{path}.stale.{socket.gethostname()}.{os.getpid()}"
            try:
                os.rename(path, aside)  # atomic: of two jobs taking over, one renames it
            except FileNotFoundError:
                continue
            log(f"lock: took over {path} from {describe(other)}: {why}")
            try:
                os.remove(aside)
            except OSError:
                pass
            continue
        same_job = other.get("slurm_job") and other.get("slurm_job") == holder["slurm_job"]
        if same_job and time.monotonic() < deadline:
            if not waited:
                log(f"lock: {out} is held by {describe(other)}, this Slurm job's previous run; waiting up to "
                    f"{wait:.0f} s for it to end")
                waited = True
            time.sleep(1.0)
            continue
        after = f" after waiting {wait:.0f} s" if same_job else ""
        raise UserError(f"{out} is in use by another job ({describe(other)}){after}: one job per run folder; "
                        f"wait for it to end, or give another --out (a lock whose holder is gone is taken over: "
                        f"same host and no such process, or no heartbeat for {STALE_SECONDS:.0f} s)")
