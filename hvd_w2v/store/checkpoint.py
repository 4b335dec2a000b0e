"""Checkpoints: one file per rank plus a manifest; written atomically, verified on load, re-shardable.

Layout, under ``OUT/checkpoints/``::

    step-000001234/            global steps done (counted over all epochs), 9 digits
        rows.00000.bin         rank 0's W_in slice then its W_out slice: float32 little-endian, local row order
        rows.00001.bin         ...one per rank of the job that wrote it
        manifest.json          written last: a folder without it is incomplete and never loaded

Rank ``r`` of a ``P``-rank writer holds word ids ``r, r + P, r + 2P, ...`` (shard.RowPlan), so id ``i`` is in
file ``i % P`` at local row ``i // P``; any other rank count reads its own ids from those files (re-shard).

The step count and the rows are the whole training state: every random draw is a function of (seed, epoch,
global position) (rng.py), and the learning rate a function of the step. So a resumed run repeats the
uninterrupted one step for step.

Write protocol (collective): rank 0 makes ``.step-N.tmp/``; every rank writes, flushes and fsyncs its file
there; ranks agree that all succeeded; rank 0 writes ``manifest.json`` (temporary name, fsync, rename), renames
the folder to ``step-N`` and fsyncs the parent; only then are older checkpoints removed (the last two stay).
Any OSError becomes one UserError on every rank; the temporary folder is removed and earlier checkpoints are
left as they were. OUT must be a folder every rank sees (one machine, or a shared filesystem), as for the export;
`train` checks that at its start (runfolder.writable).

When: every ``--checkpoint-every`` minutes, on a signal, and at the end of the run (its last step, unless
``train --no-final-checkpoint``), so a finished run keeps W_out and can be queried sharded or continued.

Signals: SIGTERM and SIGUSR1 (what Slurm's ``--signal`` sends; Open MPI's mpirun forwards SIGUSR1 to its ranks)
only set a flag; ranks agree at a step boundary, write a checkpoint and leave with EXIT_INTERRUPTED (75).
"""
import hashlib
import json
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass

import numpy as np

from ..common.errors import UserError
from ..parallel.shard import RowPlan

FORMAT = "hvd-w2v-checkpoint"
VERSION = 1
EXIT_INTERRUPTED = 75  # EX_TEMPFAIL (sysexits.h): interrupted, a checkpoint was written, `--resume` continues
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
# Global steps between agreements on "checkpoint now?" (one mpi4py allreduce of an int: small against a step,
# whose period `python -m hvd_w2v.bench.step_timeline` prints). A signal is acted on within POLL_STEPS steps,
# a fraction of a second at the default step size, well inside the grace Slurm's --signal gives
# (slurm/README.md, "Signals, as the ranks see them").
POLL_STEPS = 5
# Config fields a resume must share with the checkpoint: each changes the step schedule, the random draws or
# the update rule, so a run resumed with another value would be neither this run nor a fresh one. The
# vocabulary (min_count, max_final_vocab, the corpus) is checked through its sha256 and the stream length;
# hot_rows may differ (it changes only the order of float32 sums) unless the hot rows merge inside the
# super-step (a substep: hotsync), where it is a part of the rule. A manifest without a field (one written
# before the field existed) had its default.
EXACT = ("dim", "seed", "window", "negative", "hs", "ns_exponent", "sample", "batch_words", "epochs", "alpha",
         "min_alpha", "sg", "cbow_mean", "update_cap", "span", "shards", "superstep", "substep", "merge_cap",
         "merge_clip", "wire", "noise_groups", "noise_head")
SHARDS_ONLY = ("superstep", "substep", "merge_cap", "merge_clip", "wire", "noise_groups", "noise_head")  # the fields only shard-local SGD reads
CHUNK = 1 << 24  # bytes written or hashed per call: bounds the extra memory of a checkpoint
NAME = re.compile(r"^step-(\d{9})$")


class Damaged(Exception):
    """A checkpoint folder that is incomplete or corrupt (raised alike on every rank): try an older one."""


class Interrupted(Exception):
    """Raised on every rank after a signal-triggered checkpoint; the command line exits with EXIT_INTERRUPTED."""

    def __init__(self, step, path):
        super().__init__(f"interrupted at step {step:,}; checkpoint {path}")
        self.step, self.path = step, path


@dataclass
class Loaded:
    """A verified checkpoint read for this rank: ``step`` global steps done, this rank's rows (new plan)."""

    path: str
    step: int
    total_steps: int
    ranks: int  # of the job that wrote it
    rows: np.ndarray  # float32[plan.rows(rank), M, dim]: W_in, then W_out when it was read (M = 2)


def folder_name(step):
    return f"step-{step:09d}"


def rows_name(rank):
    return f"rows.{rank:05d}.bin"


def file_sha256(comm, path):
    """sha256 (hex) of a file as rank 0 reads it, on every rank (collective: every rank calls it). Used for
    vocab.txt. UserError on every rank when rank 0 cannot read it."""
    digest, error = None, None
    if comm.rank == 0:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    h.update(chunk)
            digest = h.hexdigest()
        except OSError as e:
            error = f"cannot read {path}: {_reason(e)}"
    digest, error = comm.allgather((digest, error))[0]  # mpi4py: rank 0's digest (or error) to every rank
    if error:
        raise UserError(error)
    return digest


def meta(cfg, vocab_size, vocab_sha, stream_length):
    """What a checkpoint records about its run besides the rows (the manifest's fixed part)."""
    steps = cfg.steps_per_epoch(stream_length) * cfg.epochs
    return {"config": cfg.to_dict(), "vocab": {"size": vocab_size, "sha256": vocab_sha},
            "stream_length": stream_length, "total_steps": steps}


# -- writing -------------------------------------------------------------------------------------------------

def save(comm, root, model, step, run_meta):
    """Write this rank's rows of ``model`` (a ShardedModel) as checkpoint ``root/step-N`` (collective).

    Returns (path, total bytes of the rows files, seconds). Raises UserError on every rank on any OSError,
    after removing the temporary folder; earlier checkpoints are not touched.
    """
    t0 = time.monotonic()
    name = folder_name(step)
    final, tmp = os.path.join(root, name), os.path.join(root, f".{name}.tmp")
    where = f"cannot write checkpoint {final}"
    error = None
    if comm.rank == 0:
        try:
            os.makedirs(root, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)  # left by a job killed while writing
            os.mkdir(tmp)
        except OSError as e:
            error = f"{where}: {_reason(e)}"
    comm.agree(error)  # mpi4py: rank 0's outcome to all; every rank leaves here on failure

    entry, error = None, None
    try:
        entry = _write_rows(os.path.join(tmp, rows_name(comm.rank)), model.rows)
    except OSError as e:
        error = f"{where}: rank {comm.rank}: {_reason(e)}"
    # mpi4py: every rank's file entry (or error), in rank order, so rank 0 can write the manifest.
    results = comm.allgather((error, entry))
    errors = [e for e, _ in results if e]
    error = errors[0] if errors else None
    nbytes = sum(x["bytes"] for _, x in results if x)
    if comm.rank == 0:
        if error is None:
            try:
                manifest = dict(format=FORMAT, version=VERSION, step=step, ranks=comm.size,
                                dim=int(model.w_in.shape[1]), written=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                **run_meta, files=[x for _, x in results])
                _write_manifest(tmp, manifest)
                _replace_folder(tmp, final)
            except OSError as e:
                error = f"{where}: {_reason(e)}"
        if error is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    comm.agree(error)  # every rank passes the same message; rank 0 may add the manifest's
    return final, nbytes, time.monotonic() - t0


def _write_rows(path, rows):
    """Write W_in then W_out (float32 little-endian) of ``rows`` (float32[n, 2, dim], interleaved as
    loop.ShardedModel) to ``path``, fsynced; returns its manifest entry. Copied out CHUNK bytes at a time,
    so writing costs no memory in proportion to the model."""
    h = hashlib.sha256()
    block = max(1, CHUNK // (4 * rows.shape[2]))
    with open(path, "wb") as f:
        for m in range(2):
            for lo in range(0, len(rows), block):
                data = memoryview(np.ascontiguousarray(rows[lo:lo + block, m], dtype="<f4")).cast("B")
                h.update(data)
                f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"name": os.path.basename(path), "rows": int(rows.shape[0]), "bytes": int(rows.nbytes),
            "sha256": h.hexdigest()}


def _write_manifest(folder, manifest):
    path = os.path.join(folder, "manifest.json")
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    _fsync_dir(folder)


def _replace_folder(tmp, final):
    """Rename ``tmp`` to ``final``; a folder already there (a damaged checkpoint of the same step, or one this
    run repeats after a fallback) is moved aside first and removed after."""
    old = None
    if os.path.lexists(final):
        old = final + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_dir(os.path.dirname(final))
    if old:
        shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reason(e):
    return f"{e.strerror} ({e.filename})" if e.strerror and e.filename else (e.strerror or str(e))


def prune(root, keep):
    """Remove every checkpoint folder under ``root`` but those in ``keep`` (paths); rank 0 only, after a new
    checkpoint is complete. Leftover temporary folders go too. Returns the names removed."""
    removed = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if (NAME.match(name) or name.endswith(".tmp") or name.endswith(".old")) and path not in keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


# -- reading -------------------------------------------------------------------------------------------------

def scan(root):
    """Checkpoint folders under ``root`` (complete or not), newest step first: [(step, path)]."""
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [(int(m.group(1)), os.path.join(root, name)) for name in names for m in [NAME.match(name)] if m]
    return sorted(found, reverse=True)


def load(comm, folder, plan, cfg, vocab_size, vocab_sha, stream_length=None, w_out=True, ids=None, exact=True,
         into=None):
    """Read checkpoint ``folder`` for this rank of ``plan`` (collective): returns a :class:`Loaded`, with
    W_out only when ``w_out`` (queries need W_in alone). ``ids``: the word ids to read instead of ``plan``'s
    (train --update's, in the run's own numbering), and ``into``: (rows, places) to read them into rows[places]
    instead of an array of their own (the Loaded's rows are then ``rows``). ``exact`` False: the settings of
    EXACT may differ but for the rows' width (a run that goes on with new text, not a resume).

    Raises :class:`Damaged` on every rank when the folder is incomplete or corrupt (no or unreadable manifest,
    a rows file missing, of the wrong size or sha256), and UserError when it is sound but belongs to another
    run (format version, vocabulary, stream length or a config field in EXACT differs).
    """
    m = None
    if comm.rank == 0:
        try:
            m = read_manifest(folder)
        except Damaged as e:
            m = e
    m = comm.allgather(m)[0]  # mpi4py: rank 0's reading to every rank, so all decide alike
    if isinstance(m, Damaged):
        raise Damaged(str(m))
    if exact:
        check_settings(folder, m, cfg)
    elif m["dim"] != cfg.dim:
        raise UserError(f"checkpoint {folder} holds {m['dim']}-dimensional rows, this run has --dim {cfg.dim}")
    if m["vocab"]["size"] != vocab_size or m["vocab"]["sha256"] != vocab_sha:
        raise UserError(f"checkpoint {folder} was written for another vocabulary ({m['vocab']['size']:,} words, "
                        f"vocab.txt sha256 {str(m['vocab']['sha256'])[:12]}...; this run has {vocab_size:,} words, "
                        f"{vocab_sha[:12]}...): resume with the same corpus, --min-count and --max-final-vocab")
    if stream_length is not None and m["stream_length"] != stream_length:
        raise UserError(f"checkpoint {folder} was written for a corpus of {m['stream_length']:,} positions; "
                        f"this one has {stream_length:,}: resume with the same corpus")

    old = RowPlan(vocab_size, m["ranks"])
    files = [os.path.join(folder, rows_name(f)) for f in range(old.ranks)]
    ids = plan.ids(comm.rank) if ids is None else ids
    wanted = np.unique(old.owner(ids))
    # Every rank checks the size of the files it reads; each file's sha256 is checked by one rank (f % P), so
    # a re-sharded load reads every byte once for the check however the files are spread.
    error = None
    for f, entry in enumerate(m["files"]):
        if f in wanted or f % comm.size == comm.rank:
            error = error or _check_file(files[f], entry, old.rows(f) * 2 * cfg.dim * 4,
                                         hashed=f % comm.size == comm.rank)
    errors = [e for e in comm.allgather(error) if e]  # mpi4py: every rank's verdict on its files
    if errors:
        raise Damaged(errors[0])

    matrices = 2 if w_out else 1
    rows, places = into if into is not None else (np.empty((len(ids), matrices, cfg.dim), np.float32), None)
    src, row = old.owner(ids), old.local_row(ids)
    for f in wanted:
        # Memory-mapped: only the pages of this rank's rows are read.
        table = np.memmap(files[f], dtype="<f4", mode="r", shape=(2, old.rows(f), cfg.dim))
        sel = np.flatnonzero(src == f)
        at = sel if places is None else places[sel]
        for k in range(matrices):
            rows[at, k] = table[k, row[sel]]
        del table
    return Loaded(folder, m["step"], m["total_steps"], m["ranks"], rows)


def check_settings(folder, m, cfg):
    """UserError unless checkpoint ``folder`` (its manifest ``m``, :func:`read_manifest`'s) is of a format this
    hvd-w2v reads and was written with the settings ``cfg`` has in every field of EXACT, and rows of its
    width. The vocabulary and the stream's length, which only the text passes know, :func:`load` checks."""
    if m["version"] != VERSION:
        raise UserError(f"checkpoint {folder} has format version {m['version']}; this hvd-w2v reads version "
                        f"{VERSION}")
    # An older manifest's missing fields are what that version ran: the exact step's defaults on one host.
    now, before = cfg.to_dict(), {**type(cfg)().settled(1, 1).to_dict(), **m["config"]}
    for field in EXACT + (("hot_rows",) if now["substep"] or before.get("substep") else ()):
        if field in SHARDS_ONLY and not now["shards"] and not before.get("shards"):
            continue  # the exact step has no super-steps nor merge
        if now[field] is None:
            continue  # a super-step left to the corpus's size (Config.sized): load checks the sized config
        if before.get(field) != now[field]:
            option = "--sg/--cbow" if field == "sg" else f"--{field.replace('_', '-')}"
            raise UserError(f"checkpoint {folder} was written with {option} {before.get(field)}, this run has "
                            f"{now[field]}: an exact resume needs the same value (or start afresh without --resume)")
    if m["dim"] != cfg.dim:
        raise UserError(f"checkpoint {folder} holds {m['dim']}-dimensional rows, this run has --dim {cfg.dim}")


def refuse_early(comm, root, cfg):
    """Before the text passes of a resume (collective): UserError, as :func:`load` would give it, when the
    newest checkpoint under ``root`` whose manifest reads was written with settings ``cfg`` cannot continue
    (:func:`check_settings`). Why: on a large corpus the text passes take hours, and a mistyped option would
    otherwise be refused only once they are done. A damaged checkpoint is left to :func:`latest`, which passes
    over it; the checkpoints of one run folder share their settings (a resume keeps them)."""
    error = None
    if comm.rank == 0:
        for _, path in scan(root):
            try:
                check_settings(path, read_manifest(path), cfg)
            except Damaged:
                continue
            except UserError as e:
                error = str(e)
            break
    error = comm.allgather(error)[0]  # mpi4py: rank 0's verdict to every rank
    if error:
        raise UserError(error)


def read_manifest(folder):
    """The manifest of checkpoint ``folder`` as a dict with the fields :func:`load` needs, of the right types.

    Not collective (`hvd-w2v info` reads it without MPI). Raises :class:`Damaged` when it is missing,
    unreadable, invalid, or of another step than the folder's name says.
    """
    try:
        with open(os.path.join(folder, "manifest.json"), "rb") as f:
            text = f.read(1 << 24).decode("utf-8", "replace")
    except FileNotFoundError:
        raise Damaged("no manifest.json: incomplete (the job stopped before it was written)") from None
    except OSError as e:
        raise Damaged(f"manifest.json cannot be read: {_reason(e)}") from None
    m = _parse(text, folder)
    named = NAME.match(os.path.basename(os.path.normpath(folder)))
    if named and int(named.group(1)) != m["step"]:
        raise Damaged(f"manifest.json is of step {m['step']:,}, not of this folder")
    return m


def _parse(text, folder):
    """The manifest as a dict with the fields load needs, of the right types; Damaged otherwise."""
    try:
        m = json.loads(text)
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise ValueError("not an hvd-w2v checkpoint manifest")
        int_fields = ("version", "step", "ranks", "dim", "stream_length", "total_steps")
        if not all(isinstance(m[k], int) and m[k] >= 0 for k in int_fields) or m["ranks"] < 1:
            raise ValueError("a count is not a whole number")
        if not isinstance(m["config"], dict) or not isinstance(m["vocab"], dict):
            raise ValueError("config or vocab is not an object")
        if not isinstance(m["vocab"].get("size"), int) or not isinstance(m["vocab"].get("sha256"), str):
            raise ValueError("vocab lacks its size or sha256")
        files = m["files"]
        if not isinstance(files, list) or len(files) != m["ranks"]:
            raise ValueError(f"{m['ranks']} ranks but {len(files) if isinstance(files, list) else 'no'} files")
        for f, entry in enumerate(files):
            # The name is fixed by the rank, never taken from the file: a manifest cannot point elsewhere.
            if not isinstance(entry, dict) or entry.get("name") != rows_name(f):
                raise ValueError(f"file entry {f} is not {rows_name(f)}")
            if not isinstance(entry.get("bytes"), int) or not isinstance(entry.get("sha256"), str):
                raise ValueError(f"file entry {f} lacks its size or sha256")
        if not 0 < m["step"] <= m["total_steps"]:  # written after a step, the last one included
            raise ValueError(f"step {m['step']} outside the run's 1..{m['total_steps']}")
        return m
    except (ValueError, KeyError, TypeError) as e:
        raise Damaged(f"manifest.json is not a valid checkpoint manifest ({e})") from None


def _check_file(path, entry, expected, hashed):
    """An error message when ``path`` does not match its manifest entry and the plan's size, else None."""
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
    except OSError as e:
        return f"{name}: {_reason(e)}"
    if size != expected or entry["bytes"] != expected:
        return f"{name} holds {size:,} bytes, the manifest says {entry['bytes']:,} and the plan {expected:,}"
    if hashed:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK), b""):
                    h.update(chunk)
        except OSError as e:
            return f"{name}: {_reason(e)}"
        if h.hexdigest() != entry["sha256"]:
            return f"{name} does not match its sha256 in the manifest (corrupt)"
    return None


def latest(comm, root, plan, cfg, vocab_size, vocab_sha, stream_length, log):
    """The newest good checkpoint under ``root`` for this run (collective), or None when there is none at all.

    A damaged one is passed over with a message naming why (``log`` on rank 0), and the next older is tried;
    UserError when checkpoints exist but none is good, or when the newest sound one belongs to another run.
    """
    found = comm.allgather(scan(root) if comm.rank == 0 else None)[0]  # mpi4py: rank 0's listing to all
    if not found:
        return None
    reasons = []
    for _, path in found:
        try:
            return load(comm, path, plan, cfg, vocab_size, vocab_sha, stream_length)
        except Damaged as e:
            reasons.append(f"{os.path.basename(path)}: {e}")
            log(f"resume: skipping {path}: {e}")
    raise UserError(f"no good checkpoint under {root} ({'; '.join(reasons)})")


# -- when to write -------------------------------------------------------------------------------------------

class EarlySignals:
    """Catches SIGTERM and SIGUSR1 from the first moment of a run, before MPI and TensorFlow start (seconds):
    Slurm may send its warning then, and the default action would kill the rank. Handed to Saver.install."""

    def __init__(self):
        self.signalled = None
        self.old = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}

    def _on_signal(self, signum, frame):
        self.signalled = signum


class Saver:
    """Decides, with every rank, when to checkpoint (every ``minutes`` by rank 0's clock, or on a signal) and
    writes the checkpoints of one run.

    The signal handlers only set a flag. Every POLL_STEPS global steps, ranks agree with one allreduce whether
    to write now; so all ranks write at the same step, and a signal received by any one rank stops them all.
    """

    def __init__(self, comm, root, minutes, log):
        self.comm, self.root, self.log = comm, root, log
        self.every = minutes * 60.0  # 0: only on a signal
        self.signalled = None
        self.guard = None  # the run's divergence.Guard, set by loop.train: what is written must pass it
        self._old = {}
        self.begin({})

    def begin(self, run_meta, resumed=None):
        """Start the clock for a run described by ``run_meta`` (see :func:`meta`), resumed from ``resumed``."""
        self.meta = run_meta
        self.last = time.monotonic()
        self.keep = resumed.path if resumed else None  # the previous good checkpoint: kept with the new one

    def install(self, early=None):
        """Catch SIGTERM and SIGUSR1 from now on (main thread only); :meth:`restore` undoes it. ``early``
        (an :class:`EarlySignals`) hands over a signal caught while the process was starting."""
        for sig in SIGNALS:
            self._old[sig] = signal.signal(sig, self._on_signal)
        if early is not None:
            self._old = early.old
            self.signalled = self.signalled or early.signalled

    def restore(self):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}

    def leave(self):
        """After :class:`Interrupted`: this rank is leaving with EXIT_INTERRUPTED, its checkpoint written and
        agreed. SIGTERM and SIGUSR1 are ignored from here to the exit, so that a launcher which ends the other
        ranks as soon as one exits non-zero (``srun --kill-on-bad-exit``) still gets every rank's own 75 rather
        than 143: the ranks do not leave at the same instant, and there is nothing left to save."""
        self.restore()
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def _on_signal(self, signum, frame):
        self.signalled = signum  # acted on at the next agreed step boundary

    def step_done(self, done, model, hot, since_report=None):
        """Called by every rank after global step ``done`` (1-based count); collective every POLL_STEPS steps.
        ``since_report``: this rank's loss and pairs since training's last report, its first two values (the
        divergence guard's; passed whole, so the step pays no slice).

        May write a checkpoint; after a signal raises :class:`Interrupted` on every rank; raises
        divergence.Diverged instead of writing one of a run that diverged.
        """
        if done % POLL_STEPS:
            return
        want = 2 if self.signalled else 0
        if self.comm.rank == 0 and self.every and time.monotonic() - self.last >= self.every:
            want = max(want, 1)  # rank 0's clock decides for all: one step for every rank
        # mpi4py: every rank sends 2 when it was signalled, rank 0 also 1 when a periodic checkpoint is due.
        action = self.comm.allreduce(want, "max")
        if not action:
            return
        hot.write_back()  # the owners' slices must hold the replicas' current rows
        path = self.write(done, model, since_report)
        if action == 2:
            raise Interrupted(done, path)

    def write(self, done, model, since_report=None):
        """Checkpoint ``model`` (its owners' slices current) as of global step ``done`` now; collective.

        Keeps the previous good checkpoint beside it and removes older ones. Train calls it for the last
        step too, so a finished run keeps W_out and can be queried sharded or continued. Its phase for the stall
        watchdog is "checkpoint", whose limit is at least the time to write the rows at watchdog.IO_BYTES_PER_SECOND."""
        from ..parallel.watchdog import io_budget

        if self.guard is not None:  # never a checkpoint of a run that diverged: divergence.Diverged instead
            self.guard.verify(self.comm, done, model.rows, since_report)
        before = self.comm.watch.enter("checkpoint", step=done, budget=io_budget(model.rows.nbytes))
        try:
            path, nbytes, seconds = save(self.comm, self.root, model, done, self.meta)
        finally:
            self.comm.watch.leave(before)
        if self.comm.rank == 0:
            prune(self.root, {path, self.keep})
        self.keep = path
        self.log(f"checkpoint: {path} ({nbytes / 2**20:,.1f} MiB, {seconds:.1f} s)")
        self.last = time.monotonic()
        return path
