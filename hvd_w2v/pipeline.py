"""A training run, in the order it goes: start the ranks, check the output folder, build the vocabulary, plan
the memory, write the vocabulary, encode the corpus, train (or resume), export, write the final checkpoint and
record the run. `hvd-w2v train` (hvd_w2v/cli.py) and the Python API's ``hvd_w2v.train`` are both :func:`train`;
`hvd-w2v vocab` and `encode` are its first stages (:func:`vocabulary`, :func:`encode`).

Every function here is collective: every rank of the job calls it, with the same arguments. Bad input raises
UserError on every rank (comm.agree), before anything already saved is touched. Messages go to rank 0's
stderr (comm.log); the run's record is OUT/run.json (hvd_w2v/queries/runfolder.py).
"""
import functools
import inspect
import os
import resource
import sys
import time
from dataclasses import dataclass

from .common.wording import counted, readable_bytes

DEFAULT_CORPUS = os.path.join("data", "real", "corpus.txt")
DEFAULT_OUT = os.path.join("runs", "default")
FORMATS = ("text", "binary")


@dataclass
class Run:
    """What :func:`train` leaves on every rank: the ranks (``comm``), the Config, the vocabulary, this rank's
    share of the model (loop.ShardedModel: its rows of W_in and W_out), the training's ``stats`` (loop.train;
    empty counts when --resume found the run finished) and the run's ``record`` (what OUT/run.json holds)."""

    comm: object
    cfg: object
    vocab: object
    model: object
    stats: dict
    record: dict
    out: str

    @functools.cached_property
    def wv(self):
        """The trained word vectors (W_in) as sharded KeyedVectors, gensim's name: each rank keeps its rows.
        Made once: it holds a contiguous copy of this rank's W_in rows (the model interleaves W_in and W_out)."""
        from .queries.keyedvectors import KeyedVectors
        from .queries.vectors import ShardedVectors

        return KeyedVectors(ShardedVectors(self.comm, self.model.plan, self.vocab, self.model.w_in))


def train(corpus=None, out=DEFAULT_OUT, *, threads=None, stall_timeout=None, max_memory_per_rank=None,
          checkpoint_every=30.0, final_checkpoint=True, resume=False, overwrite=False, format=FORMATS,
          quiet=False, tensorboard=None, read_vocab=None, update=False, phrases=0, **config):
    """Train word2vec on the ranks of this job and write the run folder ``out``; returns a :class:`Run`.

    ``corpus``: a path or a list of them: text files, plain or .gz, or folders of them (corpus.files_of: their
    files in name order; None: the real English corpus, built into data/real on first use).
    ``config``: the model's and the step's settings, hvd_w2v.common.config.Config's fields (dim=100, window=5,
    negative=5, min_count=5, sample=1e-3, epochs=5, alpha=0.025, sg=True, batch_words=2048, ...; the same
    defaults and meanings as `hvd-w2v train`'s options of those names; another name, gensim's included, or a
    value of the wrong type is a UserError naming the option meant). ``shards``, ``superstep`` and
    ``merge_clip`` left to None ("auto") are chosen by the job's layout (:func:`settle`). The run's own options:

    - ``threads``: compute threads per rank (None: $HVD_W2V_THREADS, which mpi/launch sets, else 1, and the
      layout line then says how many CPUs that leaves idle);
    - ``stall_timeout``: seconds a rank waits for the others before the job ends with exit code 76 (None:
      automatic, 0: never; hvd_w2v/parallel/watchdog.py);
    - ``max_memory_per_rank``: refuse to start when the memory plan needs more per rank (bytes, or "4G"),
      checked while the vocabulary is counted and once it is;
    - ``checkpoint_every``: minutes between checkpoints (0: only on SIGTERM or SIGUSR1);
    - ``final_checkpoint``: keep W_in and W_out at the last step, for queries and --resume on any rank count;
    - ``resume``: go on from the newest good checkpoint in ``out`` (from step 0 when there is none);
    - ``overwrite``: start over in an ``out`` that holds a run (finished, interrupted or stalled): its
      checkpoints and vectors are removed once this run's checks pass; without it (or ``resume``) such a
      folder is refused;
    - ``format``: the word2vec files to write, "text" (vectors.txt) and/or "binary" (vectors.bin), one or a list;
    - ``quiet``: no progress bar or lines; ``tensorboard``: a folder for TensorBoard scalars;
    - ``read_vocab``: a file of ``word count`` lines (word2vec.c's -read-vocab; a run's vocab.txt) whose counts
      stand for the corpus's: the count pass is skipped (--min-count and --max-final-vocab still apply);
    - ``update``: go on training the finished run in ``out`` on ``corpus``, new text (gensim's
      build_vocab(update=True) then train): the counts of both texts summed, the run's words kept with their
      rows, this text's words of at least ``min_count`` added with fresh rows, the learning rate from ``alpha``
      again over this text's epochs. The earlier run's checkpoints, vectors and vocab.txt move to
      OUT/history/run-N/ and run.json's ``history`` keeps its record; any rank count, either mode;
    - ``phrases``: first that many passes of word2phrase (:func:`phrases`, its threshold; ``min_count`` the
      run's) into OUT/phrases/pass-K, each on the one before, the last one trained on: pairs of words joined
      by the first pass, phrases of up to four words by the second.

    One job per run folder: rank 0 holds ``out``'s lock (hvd_w2v/store/runlock.py) from before anything is written
    to the end, and another job into ``out`` is refused naming it. What the run prepares (vocab.txt, ids/) is
    written into OUT/.staging and moved into place only once the run is known to go ahead (--resume's
    checkpoint found compatible), so a refused run leaves the folder as it was.

    A SIGTERM or SIGUSR1 writes a checkpoint at the next agreed step and raises checkpoint.Interrupted on every
    rank (the job should then exit with checkpoint.EXIT_INTERRUPTED, 75, and be run again with resume=True);
    from then on the process ignores those signals, so that a launcher's later SIGTERM cannot turn the exit
    code into 143.
    """
    from .common.config import Config
    from .planning import memory

    unknown_options(config)
    cfg = Config(**config)
    if isinstance(corpus, (str, os.PathLike)):
        corpus = [corpus]  # one file or folder, as gensim's corpus_file takes it
    t0 = time.monotonic()
    format = [format] if isinstance(format, str) else list(format)
    unknown = set(format) - set(FORMATS)
    if unknown or not format:
        from .common.errors import UserError

        raise UserError(f"format must be one or both of {', '.join(FORMATS)}, got {', '.join(format) or 'none'}")
    limit = memory.parse_size(max_memory_per_rank)
    if update and (resume or overwrite or read_vocab or cfg.max_final_vocab):
        from .common.errors import UserError

        raise UserError("--update goes on from the finished run in --out with its own vocabulary: not with --resume, "
                        "--overwrite, --read-vocab or --max-final-vocab")
    if not (isinstance(phrases, int) and phrases >= 0):
        from .common.errors import UserError

        raise UserError(f"--phrases must be 0 (none) or more passes, got {phrases!r}")
    if update and cfg.hs:
        from .common.errors import UserError

        raise UserError("--update with --hs 1 is not supported: the summed counts make another Huffman tree, whose "
                        "inner nodes the run's rows do not hold")
    saver = _saver(out, cfg, threads, stall_timeout, checkpoint_every)
    cfg = settle(saver.comm, cfg, out if resume else None, saver.log)
    step_rule(cfg).check_layout(cfg, saver.comm.size)  # before the lock: nothing to release
    lock = hold(saver.comm, out, "train", resume=resume or update, overwrite=overwrite)
    try:
        return _train(corpus, out, cfg, saver, lock, t0, limit, resume, format, final_checkpoint, quiet,
                      tensorboard, read_vocab, update, phrases)
    finally:
        release(saver.comm, lock, out)


def _train(corpus, out, cfg, saver, lock, t0, limit, resume, format, final_checkpoint, quiet, tensorboard,
           read_vocab, update, phrases=0):
    """:func:`train` once ``out``'s lock is held."""
    from .parallel.watchdog import io_budget
    from .store import checkpoint
    from .training import divergence

    comm, say = saver.comm, saver.log
    before = _read_record(comm, out) if resume or update else {}
    if resume:
        checkpoint.refuse_early(comm, saver.root, cfg)
        if before.get("history") and not read_vocab:  # an update's vocabulary is its vocab.txt, not a count
            read_vocab = os.path.join(out, "vocab.txt")
    earlier = updating(comm, out, cfg, before) if update else None
    stage = staging(comm, out)
    history = before.get("history", []) + ([earlier["record"]] if earlier else [])  # the runs it goes on from
    record = {"history": history} if history else {}  # OUT/run.json
    if comm.watchdog is not None:  # the rank that ends a stalled job records it, whichever rank it is
        # (and when it is rank 0, removes the lock: a stalled job ends with MPI_Abort, past every finally)
        comm.watchdog.on_stall = lambda info: (_record_stall(out, record, info, saver), release(comm, lock, out))

    if phrases:
        corpus = _phrased(comm, corpus or default_corpus(comm), out, phrases, cfg.min_count, quiet, limit)
    paths, voc, cfg, planned = vocabulary(comm, corpus, out, cfg, "train", limit, quiet=quiet, into=stage,
                                          tensorboard=tensorboard, read_vocab=read_vocab,
                                          previous=earlier["vocab_path"] if update else None)
    if tensorboard:
        from .queries import runfolder

        runfolder.writable(comm, tensorboard, shared=False)  # rank 0 alone writes the scalars
    stream = encode(comm, paths, voc, stage, quiet)
    say(f"prepared in {time.monotonic() - t0:.1f} s")

    try:
        start = updated_rows(comm, cfg, voc, earlier) if update else None
        model, stats, stream = _train_or_resume(comm, cfg, voc, stream, saver, out, stage, paths, record, resume,
                                                quiet, tensorboard, start)
    except checkpoint.Interrupted as e:
        _record(comm, out, record, state="interrupted", steps_done=e.step, checkpoint=e.path)
        say(f"interrupted: checkpoint {e.path} at step {e.step:,}; exit code {checkpoint.EXIT_INTERRUPTED}, "
            f"continue with --resume")
        saver.leave()
        raise
    except divergence.Diverged as e:
        e.checkpoint = saver.keep  # every checkpoint written passed the guard: the newest is the last good one
        _record(comm, out, record, state="diverged", steps_done=e.step, diverged=e.what, checkpoint=e.checkpoint)
        raise
    finally:
        saver.restore()

    comm.watch.enter("export", budget=io_budget(4 * model.w_in.nbytes))  # a text line: ~10 bytes a float
    export(comm, out, model, voc.row_words, format)
    final = None
    if final_checkpoint and stats["words"]:
        # After the export, so a checkpoint that cannot be written (one clear error) leaves the vectors saved.
        final = saver.write(record["total_steps"], model)

    comm.watch.enter("finish")
    rows = comm.allgather(model.w_in.shape[0])
    peak_mib = peaks(comm)
    say(f"done: vocabulary {voc.size:,} words; rows per rank {rows}; peak resident MiB per rank {peak_mib}")
    say(against_plan(planned.total, peak_mib))
    summary = dict(state="finished", steps_done=record["total_steps"], **({"checkpoint": final} if final else {}))
    if stats["words"]:  # nothing was trained when --resume found the run's last step
        say(f"done: {stats['words'] / stats['seconds']:,.0f} words/s over {stats['seconds']:.1f} s; final loss "
            f"{stats['final_loss']:.4f} per pair; exchange {stats['exchange_seconds'] / stats['seconds']:.0%} of "
            f"step time and {stats['bytes_sent'] / stats['words']:,.0f} bytes sent per word (all ranks)")
        horovod = stats["horovod"]
        if horovod["calls"]:
            say(f"done: Horovod: {horovod['calls']:,} allreduces of the hot rows, {readable_bytes(horovod['bytes'])} "
                f"from each rank, {horovod['bytes'] / stats['words']:,.0f} bytes a word; "
                f"{horovod['seconds'] / stats['seconds']:.0%} of step time")
        whole = 4 * len(stream) * stats["words"] / voc.raw_words  # the stream's bytes over the epochs trained
        say("done: the id stream's share each rank read: "
            + ", ".join(f"{b / whole:.1%}" for b in stats["stream_read"])
            + f" of {readable_bytes(4 * len(stream))} an epoch")
        summary.update(seconds=round(stats["seconds"], 3), words_per_second=round(stats["words"] / stats["seconds"]),
                       final_loss=stats["final_loss"], bytes_per_word=round(stats["bytes_sent"] / stats["words"], 1),
                       exchange_share=round(stats["exchange_seconds"] / stats["seconds"], 4),
                       horovod=dict(horovod, seconds=round(horovod["seconds"], 3)),
                       stream_read_bytes=stats["stream_read"])
    _record(comm, out, record, **summary)
    return Run(comm, cfg, voc, model, stats, record, out)


# gensim's names of train's options, where hvd-w2v's differ: the first thing a gensim user types.
GENSIM_NAMES = {"vector_size": "dim", "size": "dim", "iter": "epochs", "workers": "threads",
                "corpus_file": "corpus", "sentences": "corpus"}


def phrases(corpus, out, *, min_count=5, threshold=100.0, overwrite=False, threads=None, stall_timeout=None,
            max_memory_per_rank=None, quiet=False):
    """word2vec.c's word2phrase over every rank (``hvd-w2v phrases``): pairs of words whose score passes
    ``threshold`` joined by ``_`` in the text of ``corpus`` (files or folders, laid end to end as ``cat``
    would; plain text), written into the folder ``out`` as ``part.RRRRR.txt``, a file a rank, whose
    concatenation in name order is word2phrase's output byte for byte (text/phrases.py), with a summary in
    ``out/.phrases.json``. ``out`` is then a corpus for ``train`` or another pass (phrases of three and four
    words). A folder that already holds parts is refused without ``overwrite``. ``max_memory_per_rank``: as
    train's, the passes refused (on every rank, nothing written) when their memory plan needs more
    (memory.PhrasesLimit). Collective. Returns the summary (a dict)."""
    from .planning import memory

    comm = start(None, threads, stall_timeout)
    limit = memory.parse_size(max_memory_per_rank)
    return phrase_pass(comm, corpus, out, min_count, threshold, overwrite, quiet, memory_limit(comm, limit))


def phrase_pass(comm, corpus, out, min_count=5, threshold=100.0, overwrite=False, quiet=False, cap=None):
    """:func:`phrases` on ``comm``: its parts written into OUT/.staging-phrases, then moved into ``out`` in
    place of any earlier ones. ``cap``: :func:`memory_limit`'s ``(bytes per rank, source)`` or None. Collective."""
    import json
    import shutil

    from .common.errors import UserError
    from .kernels import native
    from .parallel.comm import log
    from .planning import memory
    from .text import phrases as phrasing
    from .text.corpus import check_files

    say = (lambda m: None) if quiet else (lambda m: log(comm, m))
    if not (min_count >= 1 and threshold == threshold):
        raise UserError(f"phrases: --min-count must be at least 1 and --threshold a number, got {min_count}, "
                        f"{threshold}")
    paths = corpus_files(comm, [corpus] if isinstance(corpus, str) else list(corpus), say)
    check_files(paths)
    if any(p.endswith(".gz") for p in paths):
        raise UserError("phrases reads plain text files: gunzip the .gz ones first")
    error = None
    if comm.rank == 0:
        try:
            if os.path.isdir(out) and any(n.startswith("part.") for n in os.listdir(out)) and not overwrite:
                error = f"{out} holds the parts of an earlier phrases run; give another --out, or --overwrite"
            elif any(os.path.abspath(os.path.dirname(p)) == os.path.abspath(out) for p in paths):
                error = f"phrases would write into {out}, which holds its corpus; give another --out"
        except OSError as e:
            error = f"cannot read {out}: {e.strerror}"
    comm.agree(error)
    passes = memory.PHRASES_COMPILED if native.phrases_kernel() is not None else memory.PHRASES_PYTHON
    baseline = memory.baseline(tensorflow_loaded())
    limit = memory.PhrasesLimit(*cap, comm.rank, comm.size, passes, baseline) if cap else None
    stage = staging(comm, out, ".staging-phrases")
    t0 = time.monotonic()
    try:
        words, pairs, sizes = phrasing.phrase(comm, paths, stage, min_count, float(threshold), say, limit)
    except UserError:  # on every rank: a refusal, bad text; the earlier parts in ``out`` stay as they were
        if comm.rank == 0:
            shutil.rmtree(stage, ignore_errors=True)
        raise
    seconds = comm.allreduce(time.monotonic() - t0, "max")
    planned, (held, received, owned, _) = max(  # the busiest rank's: (parts' keys, received, owned, its words)
        (baseline + memory.phrases_bytes(p, r, w, comm.size, passes), (p, r, o, w))
        for p, r, o, w in comm.allgather(sizes))
    say(f"plan: {planned / memory.MIB:,.0f} MiB per rank = baseline {baseline / memory.MIB:,.0f} + phrases "
        f"{(planned - baseline) / memory.MIB:,.0f} ({sum(held):,} words and pairs held, {received:,} received, "
        f"{owned:,} owned)")
    say(against_plan(planned, peaks(comm)))
    summary = dict(corpus=paths, min_count=min_count, threshold=threshold, words=words, pairs=pairs,
                   ranks=comm.size, seconds=round(seconds, 3))
    comm.barrier()
    error = None
    if comm.rank == 0:
        try:
            for name in os.listdir(out):
                if name.startswith("part."):
                    os.remove(os.path.join(out, name))
            for name in sorted(os.listdir(stage)):
                os.replace(os.path.join(stage, name), os.path.join(out, name))
            with open(os.path.join(out, ".phrases.json"), "w") as f:
                json.dump(summary, f, indent=1)
            shutil.rmtree(stage, ignore_errors=True)
        except OSError as e:
            error = f"cannot move {stage} into {out}: {e.strerror}"
    comm.agree(error)
    say(f"phrases: {words:,} words, {pairs:,} pairs joined, in {seconds:.1f} s ({words / max(seconds, 1e-9):,.0f} "
        f"words/s) -> {out}")
    return summary


def _phrased(comm, corpus, out, passes, min_count, quiet, limit=None):
    """train's ``phrases``: ``passes`` of word2phrase (its threshold, 100; ``min_count`` the run's) into
    OUT/phrases/pass-K, each on the one before; a pass that a resumed run finds done (its summary written,
    on the same corpus) is kept. ``limit``: bytes per rank or None (:func:`memory_limit`'s). Returns the corpus
    to train on (a list of paths). Collective."""
    import json

    cap = memory_limit(comm, limit, tell=False)

    for k in range(1, passes + 1):
        folder = os.path.join(out, "phrases", f"pass-{k}")
        done = None
        if comm.rank == 0 and os.path.exists(os.path.join(folder, ".phrases.json")):
            with open(os.path.join(folder, ".phrases.json")) as f:
                done = json.load(f)
        done = comm.broadcast(done)
        wanted = corpus_files(comm, [corpus] if isinstance(corpus, str) else list(corpus), lambda m: None)
        if not (done and done["corpus"] == wanted and done["min_count"] == min_count):
            phrase_pass(comm, corpus, folder, min_count, overwrite=True, quiet=quiet, cap=cap)
        corpus = [folder]
    return corpus


def unknown_options(config):
    """Raise UserError naming the first key of ``config`` (train's keyword arguments beyond its own) that is
    not a Config field, and the option meant: gensim's name's counterpart, or the closest spelling."""
    import difflib

    from .common.config import Config
    from .common.errors import UserError

    options = Config.options()
    name = next((n for n in config if n not in options), None)
    if name is None:
        return
    close = difflib.get_close_matches(name, options + list(inspect.signature(train).parameters), 1)
    hint = (f": hvd-w2v calls it {GENSIM_NAMES[name]!r}" if name in GENSIM_NAMES
            else f": did you mean {close[0]!r}?" if close else "")
    raise UserError(f"train() has no option {name!r}{hint} (its options: hvd_w2v.train's docstring, and hvd-w2v "
                    f"train --help with _ for -)")


def start(cfg=None, threads=None, stall_timeout=None):
    """MPI (the first call starts it; comm.init; Horovod starts at its first use): ``threads`` compute threads
    per rank, and Horovod's cycle, short with hot rows, whose allreduce every step waits for, and shorter with a
    substep, whose allreduces come several times a super-step. Returns the Comm."""
    from .parallel import comm as comm_mod

    hot = cfg is not None and cfg.hot_rows
    cycle = (comm_mod.HOT_INSIDE_CYCLE_MS if hot and cfg.substep else comm_mod.HOT_ROWS_CYCLE_MS if hot
             else comm_mod.HOROVOD_CYCLE_MS)
    return comm_mod.init(threads, cycle, stall_timeout=stall_timeout)


def vocabulary(comm, corpus, out, cfg, stage="train", limit=None, quiet=False, into=None, tensorboard=False,
               read_vocab=None, previous=None):
    """Check that ``out`` can be written by every rank, build the vocabulary of ``corpus`` (None: the default
    corpus), plan the memory of a job that runs up to ``stage`` (:func:`memory_plan`) and write the vocabulary
    as vocab.txt ("word count" lines, most frequent first) into the folder ``into`` (None: ``out``; train and
    the vocab and encode commands give their :func:`staging` folder, moved into place by :func:`commit`).
    Returns (paths, Vocab, the Config, memory.MemoryPlan): ``cfg`` sized to the corpus's positions
    (Config.sized: a super-step left to the layout chosen, and told), as the plan counted it.

    ``limit``: bytes per rank (--max-memory-per-rank) or None; with the limits the job runs under
    (:func:`memory_limit`), the count refuses, on every rank, before the counts a rank hash-owns outgrow them
    (memory.CountingLimit), and the plan before anything is written to ``out``. ``quiet``: no progress lines
    while the text is read. With the compiled passes, a job that encodes (``stage`` "encode" or "train")
    counts and encodes in one pass: the stream's provisional numbers wait in ``into``/ids/ for :func:`encode`
    (vocab.build's ``numbered``). ``tensorboard``: training writes TensorBoard scalars (memory_plan's).
    ``read_vocab``: a ``word count`` file whose counts stand for the corpus's, which is then not counted
    (text/readvocab.py); the encoding reads the text. ``previous``: the vocab.txt of a run that goes on with
    this text (train --update), merged with its count (vocab.merged)."""
    from .common.config import MAX_SUPERSTEP, SUPERSTEPS_AN_EPOCH
    from .kernels import native
    from .parallel.comm import log
    from .parallel.shard import RowPlan
    from .planning import memory
    from .queries import runfolder
    from .store import export as export_mod
    from .text import readvocab, vocab
    from .text.corpus import most_readers

    say = lambda m: log(comm, m)  # noqa: E731
    comm.watch.enter("vocab")
    runfolder.writable(comm, out)
    if not corpus:
        say(f"no corpus given: using the real English corpus, {DEFAULT_CORPUS}")
    paths = corpus_files(comm, list(corpus) if corpus else default_corpus(comm), say)
    cap = memory_limit(comm, limit)
    counting = None
    if cap:
        passes = memory.COMPILED if native.text_kernel() is not None else memory.PYTHON
        counting = memory.CountingLimit(*cap, comm.rank, comm.size, comm.threads, corpus_bytes(paths), passes,
                                        most_readers(paths, comm.size, comm.threads),
                                        memory.baseline(tensorflow_loaded()))
    numbered = None
    if stage != "vocab" and native.text_kernel() is not None and not read_vocab and not previous:
        from .text.encode import Provisional

        # As many files open as pieces read at once, at most (corpus.readers: no more than the threads); the
        # files are not looked at before vocab.build has checked them.
        numbered = Provisional(os.path.join(into or out, "ids"), comm.threads, comm.rank)
    given = readvocab.counts(comm, read_vocab) if read_vocab else None
    listed = readvocab.counts(comm, previous)[0] if previous else None
    voc = vocab.build(comm, paths, cfg, say, reading=not quiet, limit=counting, numbered=numbered, given=given,
                      previous=listed)
    del given, listed
    try:
        auto, cfg = cfg.shards and cfg.superstep is None, cfg.sized(voc.total)
        if auto:
            say(f"super-step: --superstep {cfg.superstep:,} positions a shard, {cfg.steps_per_epoch(voc.total):,} "
                f"super-steps an epoch of {voc.total:,} positions (auto: the longest power of two, at most "
                f"{MAX_SUPERSTEP:,}, that leaves {SUPERSTEPS_AN_EPOCH} an epoch)")
        if stage == "train":  # what the layout needs of the vocabulary, before anything is written
            step_rule(cfg).check_layout(cfg, comm.size, voc.size)
        the_plan = memory_plan(comm, cfg, voc, paths, cap, stage, bool(tensorboard))
    except BaseException:  # a refusal: the stream counted in one pass is not kept
        if numbered is not None:
            numbered.remove()
        raise
    name = os.path.join(into or out, "vocab.txt")
    export_mod.write_vocab(comm, name, RowPlan(voc.size, comm.size), voc.row_words, voc.row_counts)
    say(f"vocab: {os.path.join(out, 'vocab.txt')}")
    return paths, voc, cfg, the_plan


def hold(comm, out, command, resume=False, overwrite=False):
    """Rank 0 takes ``out``'s lock (hvd_w2v/store/runlock.py), before anything is written there, and refuses a run
    that would replace one the folder holds: a fresh ``train`` (neither ``resume`` nor ``overwrite``), or
    ``vocab``/``encode`` (``command``) without ``overwrite``. The outcome is agreed: UserError on every rank.
    Returns the runlock.Lock on rank 0, None elsewhere; :func:`release` it. Collective."""
    from .common.errors import UserError
    from .parallel.comm import log
    from .queries import runfolder
    from .store import runlock

    lock, error = None, None
    # The other ranks wait here while rank 0 may wait for a requeued job's previous run: not a stall.
    before = comm.watch.enter("lock", budget=runlock.wait_seconds() + 60)
    if comm.rank == 0:
        try:
            lock = runlock.acquire(out, lambda m: log(comm, m))
            held = runfolder.existing_run(out)
            if held and not resume and not overwrite:
                files = "vocab.txt and ids/" if command == "encode" else "vocab.txt"
                ways = ("continue it with --resume, train into another --out, or start over with --overwrite "
                        "(removes its checkpoints and vectors)" if command == "train" else
                        f"give another --out, or --overwrite to replace its {files} (its checkpoints then no "
                        f"longer match)")
                raise UserError(f"{out} holds {held}; {ways}")
        except UserError as e:
            error = str(e)
            if lock:
                lock.release()
    comm.agree(error)
    comm.watch.leave(before)
    return lock


def release(comm, lock, out):
    """Remove what a run left in OUT/.staging (a refused or failed run's) and rank 0's lock (None elsewhere).
    Not collective: called on every path out of a run, when no rank writes into ``out`` any more."""
    import shutil

    if lock is not None:
        shutil.rmtree(os.path.join(out, ".staging"), ignore_errors=True)
        lock.release()


def staging(comm, out, name=".staging"):
    """OUT/.staging (or OUT/``name``), emptied by rank 0 of what an earlier job left there (the lock is held),
    where a run writes what it prepares before it is known to go ahead. Collective (one agreement)."""
    import shutil

    stage, error = os.path.join(out, name), None
    if comm.rank == 0:
        try:
            shutil.rmtree(stage, ignore_errors=True)
            os.makedirs(stage)
        except OSError as e:
            error = f"cannot write {stage}: {e.strerror}"
    comm.agree(error)
    return stage


def commit(comm, stage, out, stream=None, start_over=False):
    """Move what ``stage`` holds (vocab.txt, ids/) into ``out``, replacing the earlier ones, and remove
    ``stage``; with ``start_over`` also the earlier run's checkpoints and vectors. Rank 0 renames (each
    rename atomic); the outcome is agreed. Returns the id stream of OUT/ids when ``stream`` (the staged one)
    is given. Collective."""
    import shutil

    from .parallel.comm import log
    from .store import checkpoint
    from .text.encode import TokenStream

    error = None
    if comm.rank == 0:
        try:
            root = os.path.join(out, "checkpoints")
            if start_over and checkpoint.scan(root):
                log(comm, f"overwrite: removing the earlier run's checkpoints ({root}) and vectors")
            if start_over:
                shutil.rmtree(root, ignore_errors=True)
                for name in os.listdir(out):
                    if name.startswith("vectors") and name.endswith((".txt", ".bin")):
                        os.remove(os.path.join(out, name))
            if os.path.exists(os.path.join(stage, "vocab.txt")):
                os.replace(os.path.join(stage, "vocab.txt"), os.path.join(out, "vocab.txt"))
            if os.path.isdir(os.path.join(stage, "ids")):
                if os.path.exists(os.path.join(out, "ids")):
                    os.rename(os.path.join(out, "ids"), os.path.join(stage, "ids.old"))
                os.rename(os.path.join(stage, "ids"), os.path.join(out, "ids"))
            shutil.rmtree(stage, ignore_errors=True)
        except OSError as e:
            error = f"cannot move {stage} into {out}: {e.strerror}"
    comm.agree(error)
    if stream is None:
        return None
    stream.close()
    return TokenStream(os.path.join(out, "ids"))


def corpus_files(comm, paths, say):
    """``paths`` with each folder replaced by its files (corpus.files_of), as rank 0 lists them: hosts that
    listed a folder each could see it differ while a file is written into it. Collective (one broadcast)."""
    from .common.errors import UserError
    from .text.corpus import files_of

    listed = None
    if comm.rank == 0:
        try:
            listed = files_of(paths)
        except UserError as e:
            listed = str(e)
    listed = comm.broadcast(listed)  # mpi4py: rank 0's list (or its error) to every rank
    if isinstance(listed, str):
        raise UserError(listed)
    files, notes = listed
    for note in notes:
        say(f"corpus: {note}")
    return files


def encode(comm, paths, voc, out, quiet=False):
    """The corpus as word ids, OUT/ids/ (hvd_w2v.text.encode); returns the id stream (encode.TokenStream).
    ``quiet``: no progress lines while the text is read."""
    from .parallel.comm import log
    from .text import encode as encode_mod

    comm.watch.enter("encode")
    return encode_mod.encode(comm, paths, voc, os.path.join(out, "ids"), lambda m: log(comm, m), not quiet)


def export(comm, folder, model, words, formats=FORMATS, name="vectors"):
    """W_in as word2vec files FOLDER/NAME.txt and/or .bin: each rank writes its own rows' lines, streamed."""
    from .parallel.comm import log
    from .store import export as export_mod

    for fmt in formats:
        path = os.path.join(folder, f"{name}.{'bin' if fmt == 'binary' else 'txt'}")
        export_mod.write_word2vec(comm, path, model.plan, words, model.w_in, binary=fmt == "binary")
        log(comm, f"export: {path}")


def default_corpus(comm):
    """The real English corpus (hvd_w2v.realcorpus), built by rank 0 on first use; returns its paths."""
    from .parallel.watchdog import CORPUS_BUDGET

    error = None
    before = comm.watch.enter("corpus", budget=CORPUS_BUDGET)  # rank 0 may download for minutes meanwhile
    if comm.rank == 0 and not os.path.exists(os.path.join(os.path.dirname(DEFAULT_CORPUS), ".complete")):
        from . import realcorpus

        try:
            realcorpus.build(os.path.dirname(DEFAULT_CORPUS), log=lambda m: print(f"corpus: {m}", file=sys.stderr))
        except RuntimeError as e:
            error = f"cannot build the default corpus: {e}"
    comm.agree(error)
    comm.watch.leave(before)
    return [DEFAULT_CORPUS]


def corpus_bytes(paths):
    """The text's size in bytes, or None when unknown: a gzip file's text is larger than its file."""
    return None if any(p.endswith(".gz") for p in paths) else sum(os.path.getsize(p) for p in paths)


def memory_limit(comm, limit=None, tell=True):
    """Print the ranks' layout (unless not ``tell``) and return the smallest memory limit per rank this job runs
    under: ``limit`` (bytes, --max-memory-per-rank) or a limit of its cgroup or Slurm (memory.limits), as
    ``(bytes, source)``, or None when there is none. Collective (the layout's allgather)."""
    import socket

    from .parallel import comm as comm_mod
    from .parallel.comm import log
    from .planning import memory

    # Every rank's host, so each knows how many ranks share its node (and its cgroup).
    hosts, where = comm_mod.layout(comm)
    if tell:
        log(comm, f"layout: {where}")
    found = memory.limits(hosts.count(socket.gethostname()))
    if limit is not None:
        found.append((limit, "--max-memory-per-rank"))
    return min(found) if found else None


def tensorflow_loaded():
    """Whether this process has started TensorFlow (a Python user's may have, before hvd_w2v.train): the text
    passes' memory baseline is then its."""
    return "tensorflow" in sys.modules


def memory_plan(comm, cfg, voc, paths, cap=None, stage="train", tensorboard=False):
    """Print the memory plan (rank 0) of a job that runs up to ``stage`` ("vocab", "encode" or "train":
    memory.MemoryPlan.peak; ``tensorboard``: its writer starts TensorFlow), and refuse, on every rank, when it
    does not fit ``cap`` (:func:`memory_limit`'s ``(bytes per rank, source)``, or None). Returns the MemoryPlan.
    Runs once the vocabulary is counted, before the model is allocated and before the output folder is written."""
    from .kernels import native
    from .parallel.comm import log
    from .planning import memory
    from .text.corpus import most_readers

    # The kept tokens approximate the id stream's length (sentence ends add one position per line). What the
    # count found (its distinct tokens, the most a rank hash-owned, the tokens read) sizes the text passes.
    text = dict(positions=voc.total, corpus_bytes=corpus_bytes(paths), threads=comm.threads, distinct=voc.distinct,
                raw_tokens=voc.raw_words, block_distinct=voc.block_distinct,
                passes=memory.COMPILED if native.text_kernel() is not None else memory.PYTHON,
                readers=most_readers(paths, comm.size, comm.threads), one_pass=voc.provisional is not None,
                tensorflow=memory.loads_tensorflow(cfg) or tensorboard, loaded=tensorflow_loaded(),
                noise=voc.runs.noise_distinct)
    the_plan = memory.plan(voc.size, cfg, comm.size, owned=voc.most_owned, **text)
    for line in the_plan.describe(stage).splitlines():
        log(comm, f"plan: {line}")
    error = None
    if cap and the_plan.peak(stage) > cap[0]:
        (limit, source), planned = cap, the_plan.peak(stage)
        need = memory.min_ranks(limit, voc.size, cfg, stage=stage, **text)
        mib = lambda b: f"{b / memory.MIB:,.0f} MiB"  # noqa: E731
        if need:
            there = memory.plan(voc.size, cfg, need, **text).peak(stage)
            hint = f"the smallest rank count that fits is {need} ({mib(there)} per rank there)"
        else:
            hint = (f"no rank count fits: the baseline alone is {mib(the_plan.baseline)} per rank and "
                    f"the per-word tables {mib(the_plan.tables)}")
        error = (f"memory plan does not fit: {mib(planned)} per rank planned on {counted(comm.size, 'rank')} "
                 f"({voc.size:,} words, dim {cfg.dim}), limit {mib(limit)} per rank from {source}; {hint}")
    comm.agree(error)  # every rank leaves together, before any matrix is allocated
    return the_plan


def peaks(comm):
    """Every rank's peak resident memory so far, MiB, by rank. Collective (an allgather)."""
    return comm.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)  # Linux: KiB


def against_plan(planned, peak_mib):
    """The line that sets the ranks' measured peaks (:func:`peaks`) beside the plan's ``planned`` bytes."""
    plan_mib = planned / (1 << 20)
    return (f"memory: planned {plan_mib:,.0f} MiB per rank, measured peak {peak_mib} MiB "
            f"({max(peak_mib) / plan_mib:.0%} of plan)")


def _saver(out, cfg, threads, stall_timeout, checkpoint_every):
    """Start the ranks and catch SIGTERM/SIGUSR1 from here on (a signal during the vocabulary or encoding is
    acted on at training's first agreed step boundary). Returns the checkpoint.Saver of OUT/checkpoints."""
    from .common.errors import UserError
    from .parallel.comm import log
    from .store import checkpoint

    if checkpoint_every < 0:
        raise UserError(f"--checkpoint-every must be 0 (only on a signal) or more minutes, got {checkpoint_every}")
    early = checkpoint.EarlySignals()
    comm = start(cfg, threads, stall_timeout)
    saver = checkpoint.Saver(comm, os.path.join(out, "checkpoints"), checkpoint_every, lambda m: log(comm, m))
    saver.install(early)
    return saver


def _train_or_resume(comm, cfg, voc, stream, saver, out, stage, paths, record, resume, quiet, tensorboard,
                     start=None):
    """loop.train from scratch, or with ``resume`` from the newest good checkpoint of this run, or from
    ``start`` (a checkpoint.Loaded at step 0: train --update's rows, :func:`updated_rows`; the earlier run is
    moved into OUT/history first, :func:`archive`, and the rows written as this run's step 0, so that a
    --resume goes on from them), once the staged vocab.txt and ids/ (in ``stage``) are moved into ``out``
    (:func:`commit`: after --resume's checks, so a refused resume leaves the run as it was). Starts the run's
    ``record``: its meta, ranks, corpus and state "training". Returns (ShardedModel, stats, the id stream of
    OUT/ids)."""
    from .common.progress import Progress
    from .parallel.shard import RowPlan
    from .store import checkpoint
    from .training import loop

    say = saver.log
    # The vocabulary as written at the start of this run (vocab.txt) names it in every checkpoint.
    comm.watch.enter("load")
    vocab_sha = checkpoint.file_sha256(comm, os.path.join(stage, "vocab.txt"))
    resumed = None
    if resume:
        resumed = checkpoint.latest(comm, saver.root, RowPlan(voc.size, comm.size), cfg, voc.size, vocab_sha,
                                    len(stream), say)
        if resumed and resumed.step >= resumed.total_steps:
            say(f"resume: {resumed.path} is the end of the run (step {resumed.step:,}); nothing left to train, "
                f"the vectors are exported from it")
        elif resumed:
            say(f"resume: step {resumed.step:,} of {resumed.total_steps:,} from {resumed.path} "
                f"(written on {counted(resumed.ranks, 'rank')})")
        else:
            say(f"resume: no checkpoint under {saver.root}; starting at step 0")
    if start is not None:
        archive(comm, out, len(record["history"]))  # this run's own checkpoints from here on
    stream = commit(comm, stage, out, stream, start_over=not resume)
    run_meta = checkpoint.meta(cfg, voc.size, vocab_sha, len(stream))
    saver.begin(run_meta, resumed)
    if start is not None:
        saver.write(0, loop.ShardedModel(RowPlan(voc.size, comm.size), start.rows))
        resumed = start
    from .common.version import __version__

    _record(comm, out, record, **run_meta, ranks=comm.size, corpus=[os.path.abspath(p) for p in paths],
            state="training", steps_done=resumed.step if resumed else 0, hvd_w2v=__version__)
    # The same object on every rank: with TensorBoard each report is collective (loop.train's contract).
    if tensorboard:  # its writer imports TensorFlow: with the rank's thread budget first
        from .parallel.comm import tensorflow

        tensorflow(comm.threads)
    progress = Progress(comm, display=not quiet, tensorboard=tensorboard) if not quiet or tensorboard else False
    return loop.train(comm, cfg, voc, stream, progress=progress, resume=resumed, saver=saver,
                      rule=step_rule(cfg)) + (stream,)


def _read_record(comm, out):
    """OUT/run.json as rank 0 reads it ({} when there is none), on every rank (collective)."""
    from .queries import runfolder

    return comm.allgather(runfolder.read_record(out) or {} if comm.rank == 0 else None)[0]


def updating(comm, out, cfg, record):
    """What train --update goes on from: the finished run whose ``record`` (run.json) ``out`` holds, with
    its final checkpoint and vocab.txt as written, or where an update stopped early (before its own record)
    had moved them: OUT/history/run-N (:func:`archive`). Returns {"record": the record, "checkpoint": its path,
    "vocab": (size, sha256), "vocab_path": its vocab.txt}; UserError on every rank otherwise (collective)."""
    from .common.errors import UserError
    from .store import checkpoint

    path, vocab = record.get("checkpoint"), record.get("vocab") or {}
    moved = history_folder(out, len(record.get("history", [])) + 1)
    there = comm.broadcast(comm.rank == 0 and (os.path.exists(os.path.join(moved, "vocab.txt")),
                                               bool(path) and not os.path.exists(path)))
    vocab_path = os.path.join(moved if there[0] else out, "vocab.txt")
    if there[1]:
        path = os.path.join(moved, os.path.relpath(path, out))
    if record.get("state") != "finished" or not path:
        raise UserError(f"--update goes on from a finished run with its final checkpoint; {out} holds "
                        f"{'no run' if not record else 'a ' + str(record.get('state')) + ' run'}"
                        f"{'' if path or not record else ' without one (trained with --no-final-checkpoint)'}")
    if record.get("config", {}).get("dim") != cfg.dim:
        raise UserError(f"the run in {out} has {record.get('config', {}).get('dim')}-dimensional rows; give --dim "
                        f"{record.get('config', {}).get('dim')}")
    if checkpoint.file_sha256(comm, vocab_path) != vocab.get("sha256"):
        raise UserError(f"{vocab_path} is not the vocabulary the run in {out} was trained on")
    return {"record": record, "checkpoint": path, "vocab": (vocab["size"], vocab["sha256"]), "vocab_path": vocab_path}


def history_folder(out, n):
    """OUT/history/run-``n``: where train --update moves the n-th run of ``out`` it goes on from."""
    return os.path.join(out, "history", f"run-{n}")


def updated_rows(comm, cfg, voc, earlier):
    """This rank's rows for train --update (a checkpoint.Loaded at step 0): each word of the earlier run its
    rows there, read from its final checkpoint (``earlier``, :func:`updating`) on any rank count; each new
    word a fresh row, drawn as a fresh run draws its id's (collective)."""
    import numpy as np

    from .parallel.shard import RowPlan
    from .store import checkpoint
    from .training.loop import ShardedModel

    rows = ShardedModel.initial(cfg, RowPlan(voc.size, comm.size), comm.rank).rows
    known = np.flatnonzero(voc.previous_ids >= 0)
    size, sha = earlier["vocab"]
    loaded = checkpoint.load(comm, earlier["checkpoint"], None, cfg, size, sha, ids=voc.previous_ids[known],
                             exact=False, into=(rows, known))  # in place: one slice of rows in memory, as a resume
    return checkpoint.Loaded(earlier["checkpoint"], 0, 0, loaded.ranks, rows)


def archive(comm, out, n):
    """Move the earlier run's checkpoints, vectors and vocab.txt into OUT/history/run-``n``/ (rank 0; the
    outcome agreed): train --update keeps what it goes on from. An update that stopped early had moved some
    or all of them there: a name found there stays, and the one in OUT is that update's own (the commit that
    follows replaces it)."""
    from .parallel.comm import log

    error = None
    into = history_folder(out, n)
    if comm.rank == 0:
        try:
            os.makedirs(into, exist_ok=True)
            for name in sorted(os.listdir(out)):
                vectors = name.startswith("vectors") and name.endswith((".txt", ".bin"))
                if (vectors or name in ("checkpoints", "vocab.txt")) and not os.path.exists(os.path.join(into, name)):
                    os.rename(os.path.join(out, name), os.path.join(into, name))
            log(comm, f"update: the earlier run's checkpoints, vectors and vocab.txt moved to {into}")
        except OSError as e:
            error = f"cannot move the earlier run into {into}: {e.strerror}"
    comm.agree(error)


def settle(comm, cfg, resumed=None, say=None):
    """``cfg`` with the fields left to the layout chosen on this job's (Config.settled: the exact step on one
    host, shard-local SGD on several), keeping the choices of the run in the folder ``resumed`` (its run.json,
    read by rank 0) when resuming one. Collective (one allgather). ``say``: where the choice is told."""
    import socket

    from .queries import runfolder

    record = runfolder.read_record(resumed) if resumed and comm.rank == 0 else None
    previous = record.get("config") if record and isinstance(record.get("config"), dict) else None
    # mpi4py: every rank's host and threads, and rank 0's reading of the run resumed, to every rank
    found = comm.allgather((socket.gethostname(), comm.threads, previous))
    hosts, threads, previous = len({h for h, _, _ in found}), sum(t for _, t, _ in found), found[0][2]
    settled = cfg.settled(hosts, threads, previous)
    if cfg.shards is None and settled.shards and say:
        why = ("as the run resumed chose" if previous and previous.get("shards") == settled.shards
               else f"a shard for each of the {threads:,} threads on {hosts:,} hosts")
        step = f" --superstep {settled.superstep}" if settled.superstep else ""  # else: once the corpus is counted
        hot = f" --hot-rows {settled.hot_rows} --substep {settled.substep}" if settled.hot_inside else ""
        say(f"mode: shard-local SGD ({why}): --shards {settled.shards}{step}{hot} "
            f"--merge-clip {settled.merge_clip:g} --wire {settled.wire} (--shards 0: the exact step)")
    return settled


def step_rule(cfg):
    """The step rule ``cfg`` asks for: hotsync.HotSync with shards whose hot rows merge inside the super-step,
    localsgd.LocalSGD with shards, else loop.ExactStep."""
    if cfg.hot_inside:
        from .training.hotsync import HotSync

        return HotSync
    if cfg.shards:
        from .training.localsgd import LocalSGD

        return LocalSGD
    from .training.loop import ExactStep

    return ExactStep


def _record(comm, out, record, **changes):
    """Update the run's ``record`` (OUT/run.json) with ``changes``; rank 0 writes it. A record that cannot
    be written is worth a warning, not the run. Every rank keeps the same dict."""
    from .parallel.comm import log
    from .queries import runfolder

    record.update(changes)
    if comm.rank == 0:
        try:
            runfolder.write_record(out, record)
        except OSError as e:
            log(comm, f"warning: cannot write {os.path.join(out, runfolder.RECORD)}: {e.strerror}")


def _record_stall(out, record, info, saver):
    """The stall in the run's record: called by the watchdog thread of the rank that ends the job, whichever
    it is (rank 0 may be the one stopped), just before it ends it; ``steps_done`` is the steps that rank had
    done, ``checkpoint`` the newest one, where --resume goes on from."""
    from .queries import runfolder

    record.update(state="stalled", stall=info, steps_done=info["step"],
                  **({"checkpoint": saver.keep} if saver.keep else {}))
    runfolder.write_record(out, record)
