"""A run folder (what `hvd-w2v train --out OUT` writes), read back: its record, its checkpoints as a sharded
model for exports and queries on any rank count, and a description of it all for `hvd-w2v info`.

::

    OUT/run.json            the run's record (config, vocabulary, steps, ranks, state, the hvd-w2v version),
                            written by train's rank 0
                            (a stall by the rank that ended the job: state "stalled", under "stall")
    OUT/vocab.txt           "word count" lines in id (frequency) order
    OUT/ids/                the encoded corpus (stream.json, ids.NNNNN.i32)
    OUT/vectors.txt, .bin   the finished run's W_in (word2vec formats)
    OUT/checkpoints/step-N/ manifest.json and rows.NNNNN.bin (hvd_w2v.store.checkpoint)

A checkpoint holds rows and ids only; the words are those of the run's vocab.txt, which its manifest names by
sha256. Checkpoints are written between steps and after the last one (unless train's --no-final-checkpoint),
so a finished run's final W_in is both in vectors.txt / vectors.bin and in its newest checkpoint.
"""
import hashlib
import json
import os
import textwrap
import time

from ..common.errors import UserError
from ..common.wording import counted
from ..store import checkpoint

RECORD = "run.json"
CHECKPOINTS = "checkpoints"


# -- the folder itself ---------------------------------------------------------------------------------------

def holds_a_run(path):
    """True where the folder ``path`` holds anything a run writes into its folder (run.json, vocab.txt, ids/,
    checkpoints/): a run folder, whole or not, rather than a folder of corpus files."""
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, name))
                                       for name in (RECORD, "vocab.txt", "ids", CHECKPOINTS))


def existing_run(path):
    """What run folder ``path`` holds that a new run would replace, as a message names it ("a finished run
    (78 of 78 steps, run.json)"), or None: a record (run.json) or checkpoints. A folder of vocab.txt and
    ids/ alone (`hvd-w2v vocab`, `encode`) holds no run. Not collective: reads files only."""
    record = read_record(path)
    found = checkpoint.scan(os.path.join(path, CHECKPOINTS)) if os.path.isdir(path) else []
    if record is None and not found:
        return None
    if record is None:
        return f"the checkpoints of a run ({counted(len(found), 'checkpoint')}, newest step {found[0][0]:,})"
    state = record.get("state", "unknown")
    done, total = record.get("steps_done"), record.get("total_steps")
    steps = f"{done:,} of {total:,} steps, " if isinstance(done, int) and isinstance(total, int) else ""
    return f"{'an' if state[:1] in 'aeiou' else 'a'} {state} run ({steps}updated {record.get('updated', '?')})"


def writable(comm, out, shared=True, name="--out"):
    """Create the folder ``out`` and check that it can be written; UserError on every rank otherwise.

    Collective: every rank calls it with the same arguments. ``shared`` (a folder every rank writes into, as
    --out): every rank creates it and writes a probe file named after its rank, host and process; an
    allgather of (host, probe, error) follows, so that every probe is written before any rank looks; then
    rank 0 looks for every rank's probe and every other rank for rank 0's (2P lookups in all, not P^2: a
    host that does not share rank 0's view of the folder is found either way), an allgather shares what each
    could not see, and each rank removes its own probe. A folder on node-local disks (each host sees its
    own) fails here, before anything is written to it; ``name`` names the folder's option in that message.
    Not ``shared`` (a folder rank 0 alone writes, as --tensorboard): rank 0 alone checks, and the allgather
    shares its outcome.
    """
    import socket

    host, probe, error = socket.gethostname(), None, None
    if shared or comm.rank == 0:
        try:
            os.makedirs(out, exist_ok=True)
            probe = os.path.join(out, f".hvd-w2v-probe.rank-{comm.rank}.{host}.{os.getpid()}")
            with open(probe, "w"):
                pass
        except OSError as e:
            error = e.strerror or str(e)
    views = comm.allgather((host, probe, error))  # mpi4py: every rank's host, probe and error, in rank order
    failed = [r for r, (_, _, e) in enumerate(views) if e]
    unseen = []
    if shared:
        others = range(1, comm.size) if comm.rank == 0 else [0]
        first = None if failed else next((r for r in others if not os.path.exists(views[r][1])), None)
        unseen = comm.allgather(first)  # mpi4py: the first rank whose probe each rank cannot see, or None
    if probe:
        try:
            os.remove(probe)
        except OSError:
            pass
    if failed:
        r = failed[0]
        on = f" on rank {r} (host {views[r][0]})" if shared and len(failed) < comm.size else ""
        raise UserError(f"output folder {out} is not writable{on}: {views[r][2]}")
    pairs = sorted((w, r) for r, w in enumerate(unseen) if w is not None)  # the lowest writer's first
    if pairs:
        w, r = pairs[0]
        raise UserError(f"output folder {out} is not shared: rank {r} (host {views[r][0]}) cannot see the files "
                        f"of rank {w} (host {views[w][0]}); {name} must be on a filesystem every host sees (NFS)")


# -- the run's record ----------------------------------------------------------------------------------------

def write_record(out, record):
    """Write ``record`` (a JSON-able dict) as OUT/run.json, atomically (temporary name, rename). Rank 0 only;
    an OSError is left to the caller (train treats the folder's writability as checked already)."""
    path = os.path.join(out, RECORD)
    with open(path + ".tmp", "w") as f:
        json.dump(dict(record, updated=time.strftime("%Y-%m-%dT%H:%M:%S%z")), f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def read_record(out):
    """OUT/run.json as a dict, or None when there is none or it is not a JSON object (never raises)."""
    try:
        with open(os.path.join(out, RECORD)) as f:
            record = json.load(f)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


# -- finding checkpoints -------------------------------------------------------------------------------------

def locate(path, step=None):
    """(run folder, checkpoint folders to try, newest first) for ``path``: a run folder (its checkpoints, or
    only step ``step``) or one checkpoint folder (``.../checkpoints/step-N``). Not collective; UserError when
    ``path`` holds no checkpoint."""
    path = os.path.normpath(path)
    if checkpoint.NAME.match(os.path.basename(path)) and os.path.isdir(path):
        if step is not None and int(os.path.basename(path)[5:]) != step:
            raise UserError(f"{path} is the checkpoint of step {int(os.path.basename(path)[5:]):,}, not {step:,}")
        return os.path.dirname(os.path.dirname(path)), [path]
    if not os.path.isdir(path):
        raise UserError(f"{path} is not a folder: give a run folder (train's --out) or a checkpoint folder")
    root = os.path.join(path, CHECKPOINTS)
    found = checkpoint.scan(root)
    finished = [os.path.join(path, n) for n in ("vectors.bin", "vectors.txt") if os.path.exists(os.path.join(path, n))]
    hint = f"; the finished model is {finished[0]} (a word2vec file)" if finished else ""
    if not found:
        raise UserError(f"no checkpoint under {root}{hint}")
    if step is not None:
        chosen = [p for s, p in found if s == step]
        if not chosen:
            raise UserError(f"no checkpoint of step {step:,} under {root} (there are steps "
                            f"{', '.join(f'{s:,}' for s, _ in sorted(found))})")
        return path, chosen
    return path, [p for _, p in found]


# -- a checkpoint as a sharded model -------------------------------------------------------------------------

class Model:
    """A checkpoint as read by one rank: its ``plan`` (shard.RowPlan on this job's ranks), ``vocab`` (a
    vectors.LoadedVocab: the words of this rank's rows and the ``word -> id`` it hash-owns), ``w_in`` (this
    rank's rows of W_in, local row order: the word vectors, as word2vec exports them), the ``manifest``, the
    checkpoint folder ``path`` and its ``run`` folder. W_out is not kept: no export or query uses it."""

    def __init__(self, run, path, manifest, plan, vocab, w_in):
        self.run, self.path, self.manifest = run, path, manifest
        self.plan, self.vocab, self.w_in = plan, vocab, w_in
        self.words = vocab.row_words

    def sharded(self, comm):
        """The model for queries (vectors.ShardedVectors; it keeps a unit-length copy of the rows)."""
        from .vectors import ShardedVectors

        return ShardedVectors(comm, self.plan, self.vocab, self.w_in)

    def describe(self):
        m = self.manifest
        return (f"checkpoint {self.path}: step {m['step']:,} of {m['total_steps']:,}, written on "
                f"{counted(m['ranks'], 'rank')}; {self.plan.vocab_size:,} words of {m['dim']} dimensions, "
                f"{self.plan}")


def load(comm, path, step=None, log=lambda m: None):
    """The newest good checkpoint of run folder ``path`` (or step ``step``, or the checkpoint folder ``path``)
    as a :class:`Model` for this rank of ``comm``, on any rank count. Collective.

    A damaged checkpoint (checkpoint.Damaged) is passed over with a message when the newest was asked for,
    and refused when a particular one was; UserError on every rank when none can be read, or when vocab.txt
    is not the vocabulary the checkpoint was written with.
    """
    from ..common.config import Config
    from ..parallel.shard import RowPlan
    from .vectors import LoadedVocab

    found = None
    if comm.rank == 0:
        try:
            found = locate(path, step)
        except UserError as e:
            found = str(e)
    found = comm.allgather(found)[0]  # mpi4py: rank 0's view of the folder to every rank
    comm.agree(found if isinstance(found, str) else None)
    run, candidates = found
    chosen = step is not None or len(candidates) == 1 and os.path.normpath(path) == candidates[0]
    vocab, reasons = None, []
    for folder in candidates:
        manifest = None
        if comm.rank == 0:
            try:
                manifest = checkpoint.read_manifest(folder)
            except checkpoint.Damaged as e:
                manifest = str(e)
        manifest = comm.allgather(manifest)[0]  # mpi4py: rank 0's reading to every rank
        try:
            if isinstance(manifest, str):
                raise checkpoint.Damaged(manifest)
            size, sha = manifest["vocab"]["size"], manifest["vocab"]["sha256"]
            if vocab is None or vocab[0] != (size, sha):
                vocab = ((size, sha), read_vocab(comm, os.path.join(run, "vocab.txt"), size, sha, folder))
            cfg = Config.from_dict(manifest["config"])
            plan = RowPlan(size, comm.size)
            loaded = checkpoint.load(comm, folder, plan, cfg, size, sha, w_out=False)
        except checkpoint.Damaged as e:
            if chosen:
                raise UserError(f"checkpoint {folder} is damaged: {e}") from None
            reasons.append(f"{os.path.basename(folder)}: {e}")
            log(f"load: skipping {folder}: {e}")
            continue
        row_words, lookup = vocab[1]
        return Model(run, folder, manifest, plan, LoadedVocab(size, lookup, row_words), loaded.rows[:, 0])
    raise UserError(f"no good checkpoint under {os.path.join(run, CHECKPOINTS)} ({'; '.join(reasons)})")


def note_finished(comm, model):
    """Rank 0 says so when the checkpoint read is an earlier step of a finished run (one trained with
    --no-final-checkpoint, or whose last checkpoint was passed over), whose final vectors are elsewhere.
    Not collective."""
    from ..parallel.comm import log

    if comm.rank == 0:
        record = read_record(model.run) or {}
        final = os.path.join(model.run, "vectors.bin")
        if (record.get("state") == "finished" and os.path.exists(final)
                and model.manifest["step"] < model.manifest["total_steps"]):
            log(comm, f"note: the run finished ({record.get('total_steps', 0):,} steps); its final vectors are "
                      f"{final}, this checkpoint is of step {model.manifest['step']:,}")


def read_vocab(comm, path, size, sha256, folder):
    """This rank's part of vocab.txt: (words of its rows under RowPlan(size, P), local row order; {word: id}
    of the words it hash-owns), as vectors.load keeps them. Streamed: every rank reads the file and keeps its
    part; rank 0 checks its sha256 against the checkpoint's (``folder``, for the message). Collective."""
    from ..text.vocab import hash64, hash_owner

    words, lookup, error, h, n = [], {}, None, hashlib.sha256(), 0
    try:
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                if comm.rank == 0:
                    h.update(line)
                word, sep, count = line.rstrip(b"\n").rpartition(b" ")
                if not sep or not word or not count.isdigit():
                    raise ValueError(f"{path} line {n:,} is not 'word count'")
                i = n - 1
                if i % comm.size == comm.rank:
                    words.append(word)
                if hash_owner(hash64(word), comm.size) == comm.rank:
                    lookup.setdefault(word, i)
        if n != size:
            raise ValueError(f"{path} holds {n:,} words; checkpoint {folder} was written for {size:,}")
        if comm.rank == 0 and h.hexdigest() != sha256:
            raise ValueError(f"{path} is not the vocabulary checkpoint {folder} was written with (sha256 "
                             f"{h.hexdigest()[:12]}..., the manifest says {sha256[:12]}...): was the folder "
                             f"reused by another run?")
    except OSError as e:
        error = f"cannot read {path}: {e.strerror}"
    except ValueError as e:
        error = str(e)
    comm.agree(error)
    return words, lookup


# -- `hvd-w2v info` ------------------------------------------------------------------------------------------

def _size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(checkpoint.CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _config_lines(cfg):
    """``  config: k=v k=v ...`` wrapped at 110 columns."""
    return textwrap.wrap(" ".join(f"{k}={v}" for k, v in cfg.items()), 110, initial_indent="  config: ",
                         subsequent_indent=" " * 10)


def _word2vec_header(path):
    try:
        with open(path, "rb") as f:
            words, dim = (int(x) for x in f.readline(100).split())
        return f"{words:,} words x {dim} dimensions"
    except (OSError, ValueError):
        return "not a word2vec file (no '<words> <dimensions>' first line)"


def describe(path, verify=False):
    """What run folder or checkpoint folder ``path`` holds, as lines of text; and whether every sha256 checked
    (with ``verify``: the checkpoints' rows files and vocab.txt against their manifests) matched. Not
    collective: reads files only. UserError when ``path`` is neither."""
    path = os.path.normpath(path)
    if checkpoint.NAME.match(os.path.basename(path)) and os.path.isdir(path):
        run, folders, is_run = os.path.dirname(os.path.dirname(path)), [path], False
        lines = []
    elif os.path.isdir(path):
        run, folders, is_run = path, [p for _, p in checkpoint.scan(os.path.join(path, CHECKPOINTS))], True
        lines = [f"run folder: {path}"]
        if not holds_a_run(path):
            raise UserError(f"{path} is not a run folder (no {RECORD}, vocab.txt or {CHECKPOINTS}/ in it)")
    else:
        raise UserError(f"{path} is not a folder: give a run folder (train's --out) or a checkpoint folder")
    ok, record = True, None
    if is_run:
        record = read_record(run)
        if record:
            state = record.get("state", "?")
            done, total = record.get("steps_done"), record.get("total_steps")
            where = f"{done:,} of {total:,} steps" if isinstance(done, int) and isinstance(total, int) else "steps ?"
            extra = ""
            if state == "finished" and record.get("seconds"):
                extra = (f", {record['seconds']:,.1f} s, {record.get('words_per_second', 0):,.0f} words/s, "
                         f"final loss {record.get('final_loss', float('nan')):.4f}")
            ranks = record.get("ranks", "?")
            by = f", hvd-w2v {record['hvd_w2v']}" if record.get("hvd_w2v") else ""  # older records lack it
            lines.append(f"  state: {state}, {where} on {counted(ranks, 'rank')}{extra} ({RECORD}, "
                         f"{record.get('updated', '')}{by})")
            stall = record.get("stall")
            if state == "stalled" and isinstance(stall, dict):
                who = ", ".join(f"rank {r.get('rank')} (host {r.get('host') or 'unknown'}, {r.get('kind')})"
                                for r in stall.get("ranks") or [] if isinstance(r, dict)) or "every rank waiting"
                lines.append(f"  stall: {who}; noticed by rank {stall.get('noticed_by')} after "
                             f"{stall.get('waited_seconds')} s in phase {stall.get('phase')} at step "
                             f"{stall.get('step')}; exit code {stall.get('exit_code')}: continue with --resume"
                             + (f" from {record['checkpoint']}" if record.get("checkpoint") else ""))
            files = record.get("corpus") or ["?"]
            named = ", ".join(files[:3]) + (f" and {len(files) - 3:,} more files" if len(files) > 3 else "")
            lines.append(f"  corpus: {named} ({record.get('stream_length', 0):,} positions)")
            if isinstance(record.get("config"), dict):
                lines += _config_lines(record["config"])
        else:
            lines.append(f"  no {RECORD}: not trained here (vocab or encode only, stopped before training, or "
                         f"an older hvd-w2v)")
        vocab_path = os.path.join(run, "vocab.txt")
        if os.path.exists(vocab_path):
            with open(vocab_path, "rb") as f:
                n = sum(1 for _ in f)
            lines.append(f"  vocab.txt: {n:,} words, {_size(os.path.getsize(vocab_path))}")
        ids = os.path.join(run, "ids")
        try:
            with open(os.path.join(ids, "stream.json")) as f:
                index = json.load(f)
            nbytes = sum(os.path.getsize(os.path.join(ids, n)) for n in os.listdir(ids) if n.endswith(".i32"))
            lines.append(f"  ids/: {sum(index['parts']):,} positions from {index['raw_words']:,} corpus words, "
                         f"{len(index['parts'])} shards, {_size(nbytes)}")
        except (OSError, ValueError, KeyError, TypeError):
            pass
        for name in ("vectors.txt", "vectors.bin"):
            p = os.path.join(run, name)
            if os.path.exists(p):
                lines.append(f"  {name}: {_word2vec_header(p)}, {_size(os.path.getsize(p))}")
        lines.append(f"  checkpoints: {len(folders) or 'none'}" + (" (newest first)" if folders else ""))
        from ..store import runlock

        holder = runlock.read(run)
        if holder is not None:
            lines.append(f"  in use: {runlock.NAME} held by {runlock.describe(holder)}")
    vocab_checked = {}
    for folder in folders:
        try:
            m = checkpoint.read_manifest(folder)
        except checkpoint.Damaged as e:
            lines.append(f"checkpoint {folder}: damaged: {e}")
            ok = False
            continue
        files = m["files"]
        nbytes = sum(x["bytes"] for x in files)
        lines.append(f"checkpoint {folder}:")
        lines.append(f"  step {m['step']:,} of {m['total_steps']:,} ({m['step'] / m['total_steps']:.1%}), "
                     f"written on {counted(m['ranks'], 'rank')} at {m.get('written', '?')}")
        lines.append(f"  vocabulary {m['vocab']['size']:,} words (vocab.txt sha256 {m['vocab']['sha256'][:16]}...), "
                     f"dim {m['dim']}, {m['stream_length']:,} positions")
        if not is_run or m["config"] != (record or {}).get("config"):  # not the same as run.json's again
            lines += _config_lines(m["config"])
        lines.append(f"  files: {len(files)} rows files, {_size(nbytes)} (W_in and W_out)")
        for entry in files:
            p = os.path.join(folder, entry["name"])
            try:
                size = os.path.getsize(p)
            except OSError as e:
                lines.append(f"    {entry['name']}: {e.strerror}")
                ok = False
                continue
            status = ""
            if size != entry["bytes"]:
                status, ok = f"  SIZE MISMATCH (manifest: {entry['bytes']:,})", False
            elif verify:
                good = _sha256(p) == entry["sha256"]
                status = "  sha256 OK" if good else "  sha256 MISMATCH (corrupt)"
                ok = ok and good
            lines.append(f"    {entry['name']}: {entry['rows']:,} rows, {_size(size)}{status}")
        if verify:
            vocab_path = os.path.join(run, "vocab.txt")
            if vocab_path not in vocab_checked:
                try:
                    vocab_checked[vocab_path] = _sha256(vocab_path)
                except OSError as e:
                    vocab_checked[vocab_path] = f"cannot be read: {e.strerror}"
            good = vocab_checked[vocab_path] == m["vocab"]["sha256"]
            lines.append(f"    {vocab_path}: " + ("sha256 OK" if good else "sha256 MISMATCH (not this run's "
                                                                             "vocabulary)"))
            ok = ok and good
    if verify:
        lines.append("verify: all sha256 match" if ok else "verify: FAILED (see MISMATCH above)")
    return lines, ok

