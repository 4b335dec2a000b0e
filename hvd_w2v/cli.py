"""The command line: `hvd-w2v SUBCOMMAND ...`, run on every rank (under mpi/launch or sbatch).

Errors: bad input raises UserError on every rank (see comm.agree); rank 0 prints one line and all ranks exit
with code 2. Any other exception is a bug or a fault: the rank prints its traceback with its rank prefix and
calls MPI_Abort, so the whole job ends at once instead of leaving peers blocked in a collective. A rank that
waits for another longer than --stall-timeout ends the job with exit code 76 (parallel/watchdog.py); each
command names its phases (comm.watch.enter) so that the line says where. A run that diverged
(training/divergence.py) prints one line on rank 0 and every rank exits with EXIT_DIVERGED (77).
"""
import argparse
import dataclasses
import inspect
import os
import socket
import sys
import traceback

import numpy as np

from . import pipeline
from .common.errors import UserError
from .common.wording import counted
from .parallel.comm import HOT_ROWS_CYCLE_MS
from .training.divergence import EXIT_DIVERGED, Diverged

EXIT_USAGE = 2


def cmd_check(args):
    """A check of the stack: what Horovod was built with, one allreduce, one alltoall, and per rank its host,
    its thread budget and the ranks it reached over TCP (ranks on one host use shared memory)."""
    from .parallel import comm as comm_mod

    comm = comm_mod.init(stall_timeout=args.stall_timeout)
    comm.watch.enter("check")
    hvd = comm.horovod()  # started on every rank (collective)
    if comm.rank == 0:
        import horovod
        import tensorflow as tf

        # Asked of the loaded Horovod itself: `horovodrun --check-build` says the same, but imports every
        # framework it knows in a new process, which took most of a check's time.
        yes = ("no", "yes")
        built = ", ".join(f"{name} {yes[bool(getattr(hvd, name.lower() + '_built')())]}"
                          for name in ("MPI", "Gloo", "NCCL", "DDL", "CCL"))
        print(f"horovod {horovod.__version__} with TensorFlow {tf.__version__}, built with {built}; MPI enabled "
              f"{yes[bool(hvd.mpi_enabled())]}, MPI threads {yes[bool(hvd.mpi_threads_supported())]}")
        print(f"ranks: {comm.size}")
    total = comm.allreduce_dense(np.full(4, comm.rank + 1, np.float32))
    got = comm.alltoall_ints(np.arange(comm.size) + 100 * comm.rank)
    rows = comm.allgather(got.tolist())
    # mpi4py: every rank's host, thread budget and TCP connections (made by the collectives above), to rank 0.
    ranks = comm.allgather((socket.gethostname(), comm.threads, comm_mod.tcp_connections()))
    if comm.rank == 0:
        ends = [{remote for local, remote in tcp} for _, _, tcp in ranks]
        for r, (host, threads, tcp) in enumerate(ranks):
            peers = [p for p in range(comm.size) if p != r and any(local in ends[p] for local, _ in tcp)]
            print(f"rank {r}: host {host}, {counted(threads, 'thread')}, TCP with ranks "
                  f"{', '.join(map(str, peers)) or 'none'}")
        print(f"horovod allreduce of (rank+1) over {counted(comm.size, 'rank')}: {total.tolist()} "
              f"(expected {comm.size * (comm.size + 1) // 2} each)")
        print("mpi4py alltoall, rank r sends 100*r + d to rank d; received per rank:")
        for r, row in enumerate(rows):
            print(f"  rank {r}: {row}")
        ok = np.all(total == comm.size * (comm.size + 1) / 2) and all(
            row == [100 * s + r for s in range(comm.size)] for r, row in enumerate(rows))
        print("stack check: OK" if ok else "stack check: FAILED")
        return 0 if ok else 1
    return 0


PROBE_WORDS = "king,water,god,house,good,three"
# train's run options default to pipeline.train's, so that the command line and the Python API agree.
RUN_DEFAULTS = {name: p.default for name, p in inspect.signature(pipeline.train).parameters.items()
                if p.default is not inspect.Parameter.empty}


def config_from(args):
    """The Config fields of a command's arguments (hvd_w2v.common.config.Config: the model and the step)."""
    from .common.config import Config

    return Config(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Config)})


def cmd_vocab(args):
    """Build the vocabulary alone and write it as vocab.txt (word count, most frequent first)."""
    _vocabulary(args)
    return 0


def cmd_encode(args):
    """The vocabulary (vocab.txt) and the encoded corpus (ids/): what train does before training."""
    _vocabulary(args, encode=True)
    return 0


def _vocabulary(args, encode=False):
    """vocab.txt (and with ``encode`` ids/) of the corpus, written aside and moved into --out at the end,
    under --out's lock; a folder that holds a run is refused without --overwrite (pipeline.hold)."""
    from . import pipeline
    from .parallel.comm import log
    from .planning import memory

    cfg = config_from(args)
    limit = memory.parse_size(args.max_memory_per_rank)
    comm = pipeline.start(cfg, args.threads, args.stall_timeout)
    lock = pipeline.hold(comm, args.out, args.command, overwrite=args.overwrite)
    try:
        stage = pipeline.staging(comm, args.out)
        paths, voc, _, planned = pipeline.vocabulary(comm, args.corpus, args.out, cfg, args.command, limit,
                                                     into=stage, read_vocab=args.read_vocab)
        stream = pipeline.encode(comm, paths, voc, stage) if encode else None
        pipeline.commit(comm, stage, args.out, stream)
        log(comm, pipeline.against_plan(planned.peak(args.command), pipeline.peaks(comm)))
    finally:
        pipeline.release(comm, lock, args.out)


def cmd_phrases(args):
    """pipeline.phrases with the command's options."""
    from . import pipeline

    pipeline.phrases(args.corpus, args.out, min_count=args.min_count, threshold=args.threshold,
                     overwrite=args.overwrite, threads=args.threads, stall_timeout=args.stall_timeout,
                     max_memory_per_rank=args.max_memory_per_rank)
    return 0


def cmd_train(args):
    """pipeline.train with the command's options, then the nearest words of a few (--show)."""
    from . import pipeline
    from .store import checkpoint

    try:
        run = pipeline.train(args.corpus, args.out, threads=args.threads, stall_timeout=args.stall_timeout,
                             max_memory_per_rank=args.max_memory_per_rank, checkpoint_every=args.checkpoint_every,
                             final_checkpoint=args.final_checkpoint, resume=args.resume,
                             overwrite=args.overwrite, format=args.format,
                             quiet=args.quiet, tensorboard=args.tensorboard, read_vocab=args.read_vocab,
                             update=args.update, phrases=args.phrases, **vars(config_from(args)))
    except checkpoint.Interrupted:
        return checkpoint.EXIT_INTERRUPTED
    run.comm.watch.enter("query")
    probes = [w for w in args.show.split(",") if w]
    if probes:
        shown = run.wv.sharded.neighbors([w.encode() for w in probes], topn=8)
        if shown:
            _emit(f"{word.decode()}: " + ", ".join(f"{w.decode()} {s:.2f}" for s, w in near)
                  for word, near in shown.items())
    return 0


EVAL_DIR = os.path.join("data", "real", "eval")


def _load_model(path, step=None, stall_timeout=None):
    """keyedvectors.load: (comm, vectors.ShardedVectors) of a word2vec file, a run folder or a checkpoint."""
    from .queries.keyedvectors import load

    kv = load(path, step, stall_timeout=stall_timeout)
    return kv.comm, kv.sharded


def cmd_evaluate(args):
    """Analogy accuracy and word-similarity correlations of a word2vec file, scored on the sharded rows."""
    from .queries import evaluate

    if args.restrict < 1:
        raise UserError(f"--restrict must be at least 1, not {args.restrict}")
    comm, vectors = _load_model(args.vectors, args.step, args.stall_timeout)
    rows = []
    if args.analogies:
        a = evaluate.analogies(vectors, args.analogies, restrict=args.restrict, method=args.method)
        rows.append((f"analogy {os.path.basename(args.analogies)} ({args.method}, top {args.restrict:,})",
                     a["accuracy"], f"{a['correct']:,}/{a['total']:,} correct",
                     ", ".join(filter(None, [f"{a['skipped']:,} skipped", evaluate.malformed_note(a["malformed"])]))))
        if args.sections:
            rows += [(f"  {name}", c / t if t else float("nan"), f"{c:,}/{t:,} correct", "")
                     for name, c, t in a["sections"]]
    for path in args.similarity or []:
        r = evaluate.similarity(vectors, path)
        rows.append((f"similarity {os.path.basename(path)} (Spearman)", r["spearman"], f"{r['pairs']:,} pairs",
                     ", ".join(filter(None, [f"{r['oov']:,} out of vocabulary",
                                             evaluate.malformed_note(r["malformed"])]))))
    if comm.rank == 0:
        width = max(len(r[0]) for r in rows) if rows else 4
        _emit([f"{'test':{width}}  {'score':>6}  {'count':22}  left out",
               *(f"{name:{width}}  {score:6.3f}  {n:22}  {skipped}".rstrip() for name, score, n, skipped in rows)])
    return 0


def _emit(lines):
    """Rank 0's answers on stdout in one write. mpirun forwards a rank's output as it is written, so a line
    written in two pieces (its text, then its newline, as unbuffered Python prints) can have a line of the
    other stream (stderr's "load: ...") land inside it."""
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


def cmd_neighbors(args):
    """The nearest words (cosine) of each given word, scored on the sharded rows."""
    if args.topn < 1:
        raise UserError(f"--topn must be at least 1, not {args.topn}")
    comm, vectors = _load_model(args.vectors, args.step, args.stall_timeout)
    words = [w.encode() for w in args.words]
    shown = vectors.neighbors(words, topn=args.topn)
    if comm.rank == 0:
        _emit(f"{w.decode()}: " + (", ".join(f"{x.decode()} {s:.2f}" for s, x in shown[w]) if w in shown
                                   else "not in the vocabulary") for w in words)
    return 0


def cmd_analogy(args):
    """Answers of "a is to b as c is to ?" (b - a + c), scored on the sharded rows."""
    words = [w for query in args.queries for w in query.split()]
    if len(words) % 3:
        raise UserError(f"analogy queries are three words each, 'a b c' for b - a + c; got {len(words)} words")
    if args.topn < 1:
        raise UserError(f"--topn must be at least 1, not {args.topn}")
    queries = [tuple(w.encode() for w in words[i:i + 3]) for i in range(0, len(words), 3)]
    comm, vectors = _load_model(args.vectors, args.step, args.stall_timeout)
    answers = vectors.analogy(queries, topn=args.topn, method=args.method)
    if comm.rank == 0:
        _emit(f"{b.decode()} - {a.decode()} + {c.decode()}: "
              + (", ".join(f"{w.decode()} {s:.2f}" for s, w in found) if not missing else
                 "not in the vocabulary: " + ", ".join(w.decode() for w in missing))
              for (a, b, c), (found, missing) in zip(queries, answers))
    return 0


def cmd_export(args):
    """Word2vec files of a run's newest checkpoint (or step --step), written by every rank, streamed."""
    from .parallel import comm as comm_mod
    from .parallel.comm import log
    from .queries import runfolder
    from .store import export

    from .parallel.watchdog import io_budget

    comm = comm_mod.init(stall_timeout=args.stall_timeout)
    comm.watch.enter("load")
    say = lambda m: log(comm, m)  # noqa: E731
    model = runfolder.load(comm, args.run, args.step, say)
    say(f"load: {model.describe()}")
    runfolder.note_finished(comm, model)
    out = args.out or model.run
    comm.watch.enter("export", budget=io_budget(4 * model.w_in.nbytes))
    runfolder.writable(comm, out, name="--out" if args.out else "the run folder")
    for fmt in args.format:
        name = os.path.join(out, f"vectors-step-{model.manifest['step']}.{'bin' if fmt == 'binary' else 'txt'}")
        export.write_word2vec(comm, name, model.plan, model.words, model.w_in, binary=fmt == "binary")
        say(f"export: {name}")
    return 0


def cmd_info(args):
    """What a run folder or checkpoint holds; reads files only (no MPI)."""
    from .queries import runfolder

    lines, ok = runfolder.describe(args.path, verify=args.verify)
    if _rank() == 0:  # launched on several ranks anyway: one copy
        _emit(lines)
    return 0 if ok or not args.verify else 1


def add_corpus_options(p):
    """The corpus, the output folder and the vocabulary's options: what vocab, encode and train share."""
    from .common.config import Config

    d = Config()
    p.add_argument("corpus", nargs="*", help=f"text files, plain or .gz, or folders of them (their files in "
                                              f"name order) (default: the real English corpus, built into "
                                              f"{os.path.dirname(pipeline.DEFAULT_CORPUS)} on first use)")
    p.add_argument("--out", default=RUN_DEFAULTS["out"], help="output folder (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an --out that holds a run (finished, interrupted, stalled), replacing "
                        "it; without it (or train's --resume) such a folder is refused")
    g = p.add_argument_group("vocabulary")
    g.add_argument("--min-count", type=int, default=d.min_count, help="drop rarer words (default: %(default)s)")
    g.add_argument("--max-final-vocab", "--max-vocab-size", dest="max_final_vocab", type=int,
                   default=d.max_final_vocab,
                   help="keep at most this many most frequent words, those tied at the cut left out, as gensim's "
                        "max_final_vocab; 0: all (--max-vocab-size: its former name; default: %(default)s)")
    g.add_argument("--read-vocab", metavar="FILE", default=None,
                   help="take the words' counts from FILE, 'word count' lines (word2vec.c's -read-vocab; a run's "
                        "vocab.txt), instead of counting the corpus; --min-count and --max-final-vocab still apply")
    p.add_argument("--threads", type=int, default=None,
                   help="compute threads per rank (default: $HVD_W2V_THREADS, which mpi/launch sets to the host's "
                   "cores over its ranks, else 1)")
    p.add_argument("--max-memory-per-rank", metavar="SIZE", default=None,
                   help="refuse when the memory plan needs more per rank, before anything is written: bytes or 4G, "
                        "512M, 1.5GiB (powers of 1024); checked while the vocabulary is counted and once it is; "
                        "the job's cgroup and Slurm limits are checked too (default: none)")
    _add_stall_option(p)
    _add_config_option(p)


def add_train_options(p):
    """train's options: add_corpus_options, the model, the distributed step and the outputs."""
    from .common import config
    from .common.config import Config

    d = Config()
    add_corpus_options(p)
    g = p.add_argument_group("model (word2vec defaults)")
    g.add_argument("--dim", type=int, default=d.dim, help="vector width (default: %(default)s)")
    g.add_argument("--window", type=int, default=d.window, help="max context distance (default: %(default)s)")
    g.add_argument("--negative", type=int, default=d.negative,
                   help="noise words per centre; 0 with --hs 1 (default: %(default)s)")
    g.add_argument("--hs", type=int, choices=(0, 1), default=int(d.hs),
                   help="1: hierarchical softmax over word2vec.c's Huffman tree, in place of noise words (give "
                        "--negative 0; word2vec.c's -hs 1, gensim's hs=1) (default: %(default)s)")
    g.add_argument("--ns-exponent", type=float, default=d.ns_exponent,
                   help="noise words drawn by count^this: 1 by frequency, 0 uniformly (gensim's ns_exponent; "
                        "default: %(default)s)")
    g.add_argument("--sample", type=float, default=d.sample, help="subsampling threshold (default: %(default)s)")
    g.add_argument("--epochs", type=int, default=d.epochs, help="passes over the corpus (default: %(default)s)")
    g.add_argument("--alpha", type=float, default=d.alpha, help="initial learning rate (default: %(default)s)")
    g.add_argument("--min-alpha", type=float, default=d.min_alpha, help="final learning rate (default: %(default)s)")
    arch = g.add_mutually_exclusive_group()
    arch.add_argument("--sg", dest="sg", action="store_true", default=True, help="skip-gram (default)")
    arch.add_argument("--cbow", dest="sg", action="store_false", help="CBOW")
    g.add_argument("--cbow-mean", type=int, choices=(0, 1), default=int(d.cbow_mean),
                   help="with --cbow: 1 the context's mean (word2vec.c's), 0 its sum, each context word then "
                        "getting 1/m of the update (gensim's cbow_mean=0) (default: %(default)s)")
    g.add_argument("--seed", type=int, default=d.seed, help="random seed (default: %(default)s)")
    g.add_argument("--span", type=int, default=d.span,
                   help="raw corpus positions a centre looks through, each side, for its kept context words "
                        "(0: 4 x window; default: %(default)s)")
    r = p.add_argument_group("distributed step")
    r.add_argument("--batch-words", type=int, default=d.batch_words,
                   help="corpus positions per global step, shared by the ranks (default: %(default)s)")
    r.add_argument("--hot-rows", type=int, default=d.hot_rows,
                   help="most frequent words replicated on every rank, their updates summed by a Horovod "
                        "allreduce every step, which waits for Horovod's cycle ($HOROVOD_CYCLE_TIME, else "
                        f"{HOT_ROWS_CYCLE_MS} ms): it slowed every run measured (default: %(default)s)")
    r.add_argument("--update-cap", type=float, default=d.update_cap,
                   help="a row's summed update in one step is scaled by min(1, cap/m) when it sums m SGD "
                        "updates (default: %(default)s)")
    r.add_argument("--shards", type=_or_auto(int), default=d.shards, metavar="V",
                   help="shard-local SGD: the stream cut into V shards, each running word2vec's sequential SGD "
                        "between super-step exchanges; the same vectors on any layout that hosts them. 0: the "
                        "exact step of --batch-words. auto (the default): the exact step on one host, on "
                        "several a shard for each thread of the job")
    r.add_argument("--superstep", type=_or_auto(int), default=d.superstep, metavar="S",
                   help="with --shards: positions of each shard per super-step (auto, the default: the "
                        f"longest power of two, at most {config.MAX_SUPERSTEP:,}, that leaves "
                        f"{config.SUPERSTEPS_AN_EPOCH} super-steps an epoch)")
    r.add_argument("--substep", type=_or_auto(int), default=d.substep, metavar="K",
                   help="with --shards and --hot-rows: the hot rows merged over every shard (Horovod's allreduce) "
                        "every K positions of each shard, inside the super-step (auto, the default: once a "
                        "super-step, at its end)")
    r.add_argument("--merge-cap", type=float, default=d.merge_cap,
                   help="with --shards: a row's deltas summed over the m shards that touched it are scaled by "
                        "min(1, cap/m); 1 averages them, 0 adds them (default: %(default)s)")
    r.add_argument("--merge-clip", type=_or_auto(float), default=d.merge_clip, metavar="TAU",
                   help="with --shards: each row's merged delta scaled down to an L2 norm of at most TAU per "
                        f"super-step, so that no row's step can grow without bound (auto, the default: "
                        f"{config.MERGE_CLIP:g}; 0: no clip, the plain sum, which can diverge)")
    r.add_argument("--max-row-norm", type=float, default=d.max_row_norm, metavar="N",
                   help="the divergence guard: a run whose frequent rows pass this L2 norm, or whose loss "
                        "passes 4 times its start, stops with exit code 77, its last good checkpoint kept "
                        "(default: %(default)s)")
    r.add_argument("--wire", choices=config.WIRES, default=d.wire,
                   help="with --shards: the form a super-step's rows and deltas travel in between ranks; "
                        "bfloat16 halves their bytes, each rounded to about 3 significant digits "
                        "(default: %(default)s)")
    r.add_argument("--noise-groups", type=int, default=d.noise_groups, metavar="G",
                   help="with --shards: each shard draws its noise words among the ids congruent to g modulo "
                        "G, g the rank that would host it on G ranks (local negatives): on G ranks every noise "
                        "word is a row of the rank's own, and none travels. The vectors depend on G, not on the "
                        "layout (default: %(default)s: the whole vocabulary)")
    r.add_argument("--noise-head", type=int, default=d.noise_head, metavar="N",
                   help="with --noise-groups: the N most frequent words are every shard's noise words too, whatever "
                        "its group (default: %(default)s)")
    o = p.add_argument_group("output")
    o.add_argument("--format", nargs="+", choices=pipeline.FORMATS, default=list(RUN_DEFAULTS["format"]),
                   help="word2vec export formats: vectors.txt, vectors.bin (default: both)")
    o.add_argument("--show", default=PROBE_WORDS, metavar="WORDS",
                   help="comma-separated words whose neighbours are printed at the end, '' for none "
                        "(default: %(default)s)")
    o.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    o.add_argument("--tensorboard", metavar="DIR", default=None,
                   help="write TensorBoard scalars there at every loss report (about every 2 s): loss, "
                        "learning rate, words/s, bytes exchanged per word, exchange share of step time")


def _or_auto(kind):
    """An argparse type: ``kind``'s values, or "auto" (None: chosen by the layout, Config.settled)."""
    def parse(text):
        return None if text == "auto" else kind(text)
    parse.__name__ = kind.__name__  # argparse's "invalid int value: 'x'"
    return parse


def _model_defaults():
    """The model and step options of train, as defaults, for commands that build a vocabulary without them
    (config_from needs every Config field; none of these changes the vocabulary or the encoding)."""
    from .common.config import Config

    corpus_options = ("min_count", "max_final_vocab")  # add_corpus_options' own: their parser defaults stand
    return {k: v for k, v in Config().to_dict().items() if k not in corpus_options}


def _add_stall_option(p):
    p.add_argument("--stall-timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="a rank that has waited this long for the others ends the job with exit code 76, naming "
                        "the ranks and hosts that did not come; 0: never (default: the larger of 120 s and 50 "
                        "median training steps; README, 'Checkpoints and exit codes')")


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants seconds, got {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"wants 0 (off) or more seconds, got {text}")
    return value


def _add_config_option(p):
    p.add_argument("--config", metavar="FILE", default=None,
                   help="read options from FILE (TOML, or INI for .ini/.cfg/.conf; keys are long option names "
                        "without the dashes); the command line wins (README, 'Training')")


def _add_model_argument(p, what):
    p.add_argument("vectors", metavar="MODEL",
                   help="a word2vec file (.bin: binary, else text), a run folder (its newest checkpoint) or a "
                        f"checkpoint folder (RUN/checkpoints/step-N): {what}")
    p.add_argument("--step", type=int, default=None, metavar="N",
                   help="with a run folder: its checkpoint of global step N (default: the newest good one)")


def _command(sub, name, help, examples, description=None):
    """A subcommand whose help ends with its examples, laid out as written."""
    return sub.add_parser(name, help=help, description=description or help[0].upper() + help[1:] + ".",
                          epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


DESCRIPTION = ("word2vec (skip-gram, CBOW) for models larger than one machine: every MPI rank holds a slice of "
               "the vectors.")
EPILOG = """examples:
  mpi/launch -n 2 hvd-w2v train corpus.txt --out runs/mine            # vocabulary, encoding, training, export
  mpi/launch -n 2 hvd-w2v train --config mine.toml --epochs 3         # options from a file, the command line wins
  hvd-w2v info runs/mine                                              # what the run folder holds (no MPI)
  mpi/launch -n 2 hvd-w2v export runs/mine                            # word2vec files of its newest checkpoint
  mpi/launch -n 2 hvd-w2v neighbors runs/mine/vectors.bin king water  # nearest words
  mpi/launch -n 2 hvd-w2v analogy runs/mine/vectors.bin "man king woman"
  mpi/launch -n 2 hvd-w2v evaluate runs/mine/vectors.bin              # analogies, WordSim353, SimLex-999

Every command but info and plan runs on the ranks mpi/launch (or srun) starts, each rank holding its share of the
model; `COMMAND --help` lists a command's options."""


def parser():
    """The command line: ``hvd-w2v COMMAND ...``. Each subparser is also in ``parser().commands[name]``."""
    p = argparse.ArgumentParser(prog="hvd-w2v", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    from .common.version import __version__

    p.add_argument("--version", action="version", version=f"hvd-w2v {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    t = _command(sub, "train", "build the vocabulary, encode, train, export and show neighbours", [
        "mpi/launch -n 2 hvd-w2v train corpus.txt --out runs/mine --epochs 5",
        "mpi/launch -n 4 hvd-w2v train a.txt b.txt.gz --out runs/cbow --cbow --dim 300",
        "mpi/launch -n 2 hvd-w2v train corpus.txt --out runs/mine --resume            # after exit code 75",
        "mpi/launch -n 2 hvd-w2v train --config mine.toml --tensorboard runs/mine/tb",
    ], description="Build the vocabulary (vocab.txt) and the encoded corpus (ids/), train, export the vectors "
                   "(vectors.txt,\nvectors.bin) and print the nearest words of a few. Progress: a bar on a "
                   "terminal, a line every 5 s otherwise.")
    add_train_options(t)
    k = t.add_argument_group("checkpoints (OUT/checkpoints/step-N: one file per rank and a manifest)")
    k.add_argument("--checkpoint-every", type=float, default=RUN_DEFAULTS["checkpoint_every"], metavar="MINUTES",
                   help="write a checkpoint every MINUTES of training (rank 0's clock), 0: only on SIGTERM or "
                        "SIGUSR1, which always write one and end the job with exit code 75 (default: %(default)s)")
    k.add_argument("--no-final-checkpoint", dest="final_checkpoint", action="store_false",
                   help="do not checkpoint the last step (by default a finished run keeps W_in and W_out there, "
                        "for sharded queries and exports on any rank count)")
    k.add_argument("--resume", action="store_true",
                   help="continue from the newest good checkpoint in --out (any rank count); starts at step 0 "
                        "when there is none")
    k.add_argument("--update", action="store_true",
                   help="go on training the finished run in --out on this corpus, new text: counts summed, its "
                        "words' rows kept, new words of at least --min-count added, the learning rate from "
                        "--alpha again; the earlier run moves to --out/history/ (gensim's build_vocab(update=True))")
    t.add_argument("--phrases", type=int, default=0, metavar="N",
                   help="first N passes of word2phrase (hvd-w2v phrases, threshold 100, this --min-count) into "
                        "OUT/phrases/pass-K, the last one trained on: pairs joined by the first, phrases of up to "
                        "four words by the second (default: %(default)s)")
    t.set_defaults(func=cmd_train)

    v = _command(sub, "vocab", "count the corpus and write vocab.txt (word count, most frequent first)", [
        "mpi/launch -n 4 hvd-w2v vocab corpus.txt --out runs/mine --min-count 10",
    ])
    add_corpus_options(v)
    v.set_defaults(func=cmd_vocab, **_model_defaults())

    h = _command(sub, "phrases", "join frequent pairs of words with _, as word2vec.c's word2phrase", [
        "mpi/launch -n 4 hvd-w2v phrases corpus.txt --out data/phrased",
        "mpi/launch -n 4 hvd-w2v phrases data/phrased --out data/phrased2 --threshold 50   # 3- and 4-word phrases",
        "mpi/launch -n 4 hvd-w2v train data/phrased2 --out runs/phrases",
    ], description="word2vec.c's word2phrase on every rank: a pair a b becomes a_b where (count(ab) - min_count) "
                   "/ count(a)\n/ count(b) x words > threshold. Writes OUT/part.RRRRR.txt, a file a rank, whose "
                   "concatenation in name\norder is word2phrase's output byte for byte; OUT is a corpus for "
                   "train or another pass.")
    h.add_argument("corpus", nargs="+", metavar="CORPUS", help="plain text files or folders, read as laid end to "
                                                                 "end")
    h.add_argument("--out", required=True, metavar="DIR", help="the folder of the phrased text's parts")
    h.add_argument("--min-count", type=int, default=5, help="words and pairs seen fewer times are never joined "
                                                            "(word2phrase's -min-count; default: %(default)s)")
    h.add_argument("--threshold", type=float, default=100.0,
                   help="the score a pair must pass (word2phrase's -threshold; default: %(default)s)")
    h.add_argument("--overwrite", action="store_true", help="replace the parts an earlier run left in --out")
    h.add_argument("--threads", type=int, default=None, help="threads per rank (default: mpi/launch's)")
    h.add_argument("--max-memory-per-rank", metavar="SIZE", default=None,
                   help="refuse when the passes' memory plan needs more per rank, before anything is written: "
                        "bytes or 4G, 512M (powers of 1024); checked as the words and pairs are counted; the job's "
                        "cgroup and Slurm limits are checked too (default: none)")
    _add_stall_option(h)
    _add_config_option(h)
    h.set_defaults(func=cmd_phrases)

    n = _command(sub, "encode", "write vocab.txt and the corpus as word ids (ids/): what train does before "
                                "training", [
        "mpi/launch -n 4 hvd-w2v encode corpus.txt --out runs/mine --min-count 10",
    ])
    add_corpus_options(n)
    n.set_defaults(func=cmd_encode, **_model_defaults())

    x = _command(sub, "export", "write word2vec files from a run's newest checkpoint", [
        "mpi/launch -n 2 hvd-w2v export runs/mine                  # runs/mine/vectors-step-N.txt and .bin",
        "mpi/launch -n 3 hvd-w2v export runs/mine --step 150 --format binary --out /tmp/exports",
    ], description="Write the word vectors (W_in) of a run's newest good checkpoint, or of --step N, as word2vec "
                   "files\nRUN/vectors-step-N.txt and .bin, on any rank count: each rank reads its own rows and "
                   "the\nranks write their lines block by block. Checkpoints are written during training (--checkpoint-every, SIGTERM, "
                   "SIGUSR1)\nand at a run's last step, unless --no-final-checkpoint.")
    x.add_argument("run", metavar="RUN", help="a run folder (train's --out) or a checkpoint folder "
                                              "(RUN/checkpoints/step-N)")
    x.add_argument("--step", type=int, default=None, metavar="N",
                   help="the checkpoint of global step N (default: the newest good one)")
    x.add_argument("--format", nargs="+", choices=["text", "binary"], default=["text", "binary"],
                   help="word2vec formats (default: both)")
    x.add_argument("--out", default=None, metavar="DIR", help="folder for the files (default: the run folder)")
    _add_stall_option(x)
    _add_config_option(x)
    x.set_defaults(func=cmd_export)

    e = _command(sub, "evaluate", "analogy accuracy and word-similarity correlations of a model", [
        "mpi/launch -n 2 hvd-w2v evaluate runs/default/vectors.bin",
        "mpi/launch -n 2 hvd-w2v evaluate runs/default/vectors.bin --method 3cosmul --sections",
        "mpi/launch -n 4 hvd-w2v evaluate runs/big --step 1500       # a run folder: its checkpoint of step 1500",
    ], description="Score a model with the word-analogy and word-similarity tests, as gensim's evaluators do, on "
                   "any rank\ncount: each rank reads and scores only its own rows.")
    _add_model_argument(e, "the model to score")
    e.add_argument("--analogies", default=os.path.join(EVAL_DIR, "questions-words.txt"), metavar="FILE",
                   help="questions-words.txt format, '' for none (default: %(default)s)")
    e.add_argument("--similarity", nargs="*", metavar="FILE",
                   default=[os.path.join(EVAL_DIR, "wordsim353.tsv"), os.path.join(EVAL_DIR, "simlex999.txt")],
                   help="'word1<TAB>word2<TAB>score' files (default: %(default)s)")
    e.add_argument("--restrict", type=int, default=30000,
                   help="analogies: only the most frequent words, as gensim's restrict_vocab (default: %(default)s)")
    e.add_argument("--method", choices=["3cosadd", "3cosmul"], default="3cosadd",
                   help="analogy objective (default: %(default)s)")
    e.add_argument("--sections", action="store_true", help="also print the accuracy of each analogy section")
    _add_stall_option(e)
    _add_config_option(e)
    e.set_defaults(func=cmd_evaluate)

    b = _command(sub, "neighbors", "nearest words of the given words", [
        "mpi/launch -n 2 hvd-w2v neighbors runs/default/vectors.bin king water --topn 5",
        "mpi/launch -n 3 hvd-w2v neighbors runs/mine king                # the run's newest checkpoint",
    ])
    _add_model_argument(b, "the model to query")
    b.add_argument("words", nargs="+", metavar="WORD", help="words to look up (exact spelling)")
    b.add_argument("--topn", type=int, default=10, help="neighbours per word (default: %(default)s)")
    _add_stall_option(b)
    _add_config_option(b)
    b.set_defaults(func=cmd_neighbors)

    a = _command(sub, "analogy", "answers of 'a is to b as c is to ?': the words nearest b - a + c", [
        'mpi/launch -n 2 hvd-w2v analogy runs/default/vectors.bin "man king woman" "paris france rome"',
        "mpi/launch -n 2 hvd-w2v analogy runs/default/vectors.bin man king woman --method 3cosmul --topn 3",
    ], description="Answer 'a is to b as c is to ?' with the words nearest b - a + c (3cosadd, as gensim's "
                   "most_similar(\npositive=[b, c], negative=[a])) or by 3cosmul; a, b and c are never answers. "
                   "Each rank scores its own\nrows and the best are merged, so a model larger than one machine "
                   "can be queried.")
    _add_model_argument(a, "the model to query")
    a.add_argument("queries", nargs="+", metavar="QUERY",
                   help="'a b c' (three words, exact spelling), or the words in threes: a b c a b c ...")
    a.add_argument("--topn", type=int, default=10, help="answers per query (default: %(default)s)")
    a.add_argument("--method", choices=["3cosadd", "3cosmul"], default="3cosadd",
                   help="analogy objective (default: %(default)s)")
    _add_stall_option(a)
    _add_config_option(a)
    a.set_defaults(func=cmd_analogy)

    i = _command(sub, "info", "what a run folder or checkpoint holds (no MPI needed)", [
        "hvd-w2v info runs/mine",
        "hvd-w2v info runs/mine/checkpoints/step-000000150 --verify",
    ], description="Print what a run folder (train's --out) or a checkpoint folder holds: the run's state, steps "
                   "done of\ntotal, ranks, corpus and config (run.json), the vocabulary, the encoded corpus, the "
                   "exported\nvectors, and each checkpoint's step, ranks, config and files with their sizes. "
                   "--verify also checks\nevery sha256 the manifests hold; it then exits with 1 when one does "
                   "not match.")
    i.add_argument("path", metavar="DIR", help="a run folder or a checkpoint folder")
    i.add_argument("--verify", action="store_true",
                   help="check the sha256 of every checkpoint file and of vocab.txt against the manifests")
    _add_config_option(i)
    i.set_defaults(func=cmd_info)

    c = _command(sub, "check", "check the MPI/Horovod/TensorFlow stack on the launched ranks", [
        "mpi/launch -n 2 hvd-w2v check",
    ])
    _add_stall_option(c)
    c.set_defaults(func=cmd_check)

    from .planning import plan

    n = _command(sub, "plan", "what a step's exchange costs on 2 to 1,024 ranks, planned from the corpus (no MPI)", [
        "hvd-w2v plan data/real/corpus.txt --ranks 2,4,8,16,32,64,128,256,512,1024 --hot-rows 0,256,4096",
        "hvd-w2v plan runs/mine --ranks 2,3,4 --steps all           # a run folder: its vocab.txt and ids/",
    ], description=plan.__doc__.split("\n\n")[0].replace("\n", " ") + ".")
    plan.add_arguments(n)
    _add_config_option(n)
    n.set_defaults(func=plan.run)
    p.commands = sub.choices  # {name: subparser}, for --config (configfile.apply)
    return p


def main(argv=None):
    """Run one command; returns its exit code (0, 1, EXIT_USAGE on bad input, 75 when interrupted, 77 when the
    run diverged; a stalled job ends with 76 from its watchdog, hvd_w2v/parallel/watchdog.py)."""
    p = parser()
    args = p.parse_args(argv)
    try:
        if getattr(args, "config", None):
            from . import configfile

            # The file's values become the command's defaults, then the command line is parsed again over them.
            configfile.apply(p.commands, args.command, args.config)
            args = p.parse_args(argv)
        code = args.func(args)
        _finish()
        return code
    except UserError as e:
        _error(e)
        _finish()  # every rank raised it (comm.agree): they leave together
        return EXIT_USAGE
    except Diverged as e:
        kept = (f"the last good checkpoint, {e.checkpoint}, is kept (queries read it)"
                if e.checkpoint else "no checkpoint was written before it")
        _error(f"{e}; nothing was exported; {kept}; try a lower --alpha (with --overwrite: a resume keeps the run's)")
        _finish()  # every rank raised it alike: they leave together
        return EXIT_DIVERGED
    except KeyboardInterrupt:
        return 130
    except BaseException:
        rank = _rank()
        text = "".join(f"[rank {rank}] {line}\n" for line in traceback.format_exc().splitlines())
        sys.stderr.write(text)
        sys.stderr.flush()
        _abort()
        raise


def _error(message):
    """Rank 0's one `hvd-w2v: error:` line (every rank calls it), after the progress bar's line."""
    if _rank() == 0:
        from .common.progress import end_line

        end_line()
        print(f"hvd-w2v: error: {message}", file=sys.stderr, flush=True)


def _finish():
    """The watched last barrier and the watchdog's stop (comm.finish), when this command started MPI."""
    if "hvd_w2v.parallel.comm" in sys.modules:
        comm_mod = sys.modules["hvd_w2v.parallel.comm"]
        comm_mod.finish(comm_mod._COMM)


def _rank():
    if "mpi4py.MPI" in sys.modules and sys.modules["mpi4py.MPI"].Is_initialized():
        return sys.modules["mpi4py.MPI"].COMM_WORLD.Get_rank()
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))


def _abort():
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_initialized() and MPI.COMM_WORLD.Get_size() > 1:
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(1)


if __name__ == "__main__":
    sys.exit(main())
