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


DEFAULT_CORPUS = os.path.join("data", "real", "corpus.txt")
PROBE_WORDS = "king,water,god,house,good,three"


def config_from(args):
    from .config import Config

    return Config(dim=args.dim, window=args.window, negative=args.negative, min_count=args.min_count,
                  max_vocab_size=args.max_vocab_size, sample=args.sample, epochs=args.epochs, alpha=args.alpha,
                  min_alpha=args.min_alpha, sg=args.sg, seed=args.seed, batch_words=args.batch_words,
                  hot_rows=args.hot_rows, update_cap=args.update_cap)


def _writable_folder(comm, out):
    """Create ``out`` (collective); UserError on every rank when it cannot be written."""
    error = None
    if comm.rank == 0:
        try:
            os.makedirs(out, exist_ok=True)
            probe = os.path.join(out, ".write-test")
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError as e:
            error = f"output folder {out} is not writable: {e.strerror}"
    comm.agree(error)


def _default_corpus(comm):
    """The real English corpus (hvd_w2v.realcorpus), built by rank 0 on first use."""
    error = None
    if comm.rank == 0 and not os.path.exists(os.path.join(os.path.dirname(DEFAULT_CORPUS), ".complete")):
        from . import realcorpus

        try:
            realcorpus.build(os.path.dirname(DEFAULT_CORPUS), log=lambda m: print(f"corpus: {m}", file=sys.stderr))
        except RuntimeError as e:
            error = f"cannot build the default corpus: {e}"
    comm.agree(error)
    return [DEFAULT_CORPUS]


def _vocabulary(args, check=None):
    """Start the ranks, check the output folder, build and save the vocabulary (vocab.txt). Collective.

    ``check(comm, cfg, voc, paths)``, when given, runs once the vocabulary is known and before anything is
    written to the output folder: it may raise UserError on every rank (the memory plan does)."""
    from . import comm as comm_mod
    from . import export, vocab
    from .comm import log
    from .shard import RowPlan

    cfg = config_from(args)
    comm = comm_mod.init(args.threads)
    say = lambda m: log(comm, m)  # noqa: E731
    _writable_folder(comm, args.out)
    if not args.corpus:
        say(f"no corpus given: using the real English corpus, {DEFAULT_CORPUS}")
    paths = args.corpus or _default_corpus(comm)
    voc = vocab.build(comm, paths, cfg, say)
    if check:
        check(comm, cfg, voc, paths)
    name = os.path.join(args.out, "vocab.txt")
    export.write_vocab(comm, name, RowPlan(voc.size, comm.size), voc.row_words, voc.row_counts)
    say(f"vocab: {name}")
    return cfg, comm, say, paths, voc


def cmd_vocab(args):
    """Build the vocabulary alone and write it as vocab.txt (word count, most frequent first)."""
    _vocabulary(args)
    return 0


def cmd_train(args):
    """Vocabulary, encoding, training, export, and a look at a few neighbours."""
    import time

    from . import encode, export, memory, train
    from .vectors import ShardedVectors

    t0 = time.monotonic()
    limit = memory.parse_size(args.max_memory_per_rank) if args.max_memory_per_rank else None
    planned = []

    def check(comm, cfg, voc, paths):
        planned.append(_memory_plan(comm, cfg, voc, paths, limit))

    from . import checkpoint

    saver = _saver(args)
    cfg, comm, say, paths, voc = _vocabulary(args, check)
    stream = encode.encode(comm, paths, voc, os.path.join(args.out, "ids"), say)
    say(f"prepared in {time.monotonic() - t0:.1f} s")
    try:
        model, stats = _train_or_resume(args, comm, cfg, voc, stream, say, saver)
    except checkpoint.Interrupted as e:
        say(f"interrupted: checkpoint {e.path} at step {e.step:,}; exit code {checkpoint.EXIT_INTERRUPTED}, "
            f"continue with --resume")
        return checkpoint.EXIT_INTERRUPTED
    finally:
        saver.restore()
    for fmt in args.format:
        name = os.path.join(args.out, "vectors.bin" if fmt == "binary" else "vectors.txt")
        export.write_word2vec(comm, name, model.plan, voc.row_words, model.w_in, binary=fmt == "binary")
        say(f"export: {name}")
    import resource

    rows = comm.allgather(model.w_in.shape[0])
    peak_mib = comm.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)  # Linux: KiB
    say(f"done: vocabulary {voc.size:,} words; rows per rank {rows}; peak resident MiB per rank {peak_mib}")
    plan_mib = planned[0].total / memory.MIB
    say(f"memory: planned {plan_mib:,.0f} MiB per rank, measured peak {peak_mib} MiB "
        f"({max(peak_mib) / plan_mib:.0%} of plan)")
    say(f"done: {stats['words'] / stats['seconds']:,.0f} words/s over {stats['seconds']:.1f} s; final loss "
        f"{stats['last_loss']:.4f} per pair; exchange {stats['exchange_seconds'] / stats['seconds']:.0%} of "
        f"step time and {stats['bytes_sent'] / stats['words']:,.0f} bytes sent per word (all ranks)")
    probes = [w.encode() for w in args.show.split(",") if w]
    shown = ShardedVectors(comm, model.plan, voc, model.w_in).neighbors(probes, topn=8) if probes else None
    if shown:
        for word, near in shown.items():
            print(f"{word.decode()}: " + ", ".join(f"{w.decode()} {s:.2f}" for s, w in near))
    return 0


def _saver(args):
    """Start the ranks and catch SIGTERM/SIGUSR1 from here on (a signal during the vocabulary or encoding is
    acted on at training's first agreed step boundary). Returns the checkpoint.Saver of OUT/checkpoints."""
    from . import checkpoint
    from . import comm as comm_mod
    from .comm import log

    if args.checkpoint_every < 0:
        raise UserError(f"--checkpoint-every must be 0 (only on a signal) or more minutes, got {args.checkpoint_every}")
    early = checkpoint.EarlySignals()
    comm = comm_mod.init(args.threads)
    saver = checkpoint.Saver(comm, os.path.join(args.out, "checkpoints"), args.checkpoint_every,
                             lambda m: log(comm, m))
    saver.install(early)
    return saver


def _train_or_resume(args, comm, cfg, voc, stream, say, saver):
    """train.train from scratch, or with --resume from the newest good checkpoint of this run. Collective."""
    from . import checkpoint, train
    from .shard import RowPlan

    # The vocabulary as written at the start of this run (vocab.txt) names it in every checkpoint.
    vocab_sha = checkpoint.file_sha256(comm, os.path.join(args.out, "vocab.txt"))
    resumed = None
    if args.resume:
        resumed = checkpoint.latest(comm, saver.root, RowPlan(voc.size, comm.size), cfg, voc.size, vocab_sha,
                                    len(stream), say)
        if resumed:
            say(f"resume: step {resumed.step:,} of {resumed.total_steps:,} from {resumed.path} "
                f"(written on {resumed.ranks} ranks)")
        else:
            say(f"resume: no checkpoint under {saver.root}; starting at step 0")
    elif comm.rank == 0 and checkpoint.scan(saver.root):
        say(f"checkpoint: {saver.root} holds checkpoints of an earlier run; this run starts at step 0 and "
            f"replaces them with its first checkpoint (use --resume to continue that run instead)")
    saver.begin(checkpoint.meta(cfg, voc.size, vocab_sha, len(stream)), resumed)
    return train.train(comm, cfg, voc, stream, progress=not args.quiet, resume=resumed, saver=saver)


def _memory_plan(comm, cfg, voc, paths, limit):
    """Print the memory plan (rank 0) and refuse to start, on every rank, when it does not fit ``limit``
    (bytes per rank, --max-memory-per-rank) or a limit the job runs under (memory.limits). Collective;
    returns the MemoryPlan. Runs before the model is allocated and before the output folder is written."""
    import socket

    from . import memory
    from .comm import log

    # The plan's reading peak depends on the text per rank; a gzip file's text size is unknown (None).
    corpus_bytes = None if any(p.endswith(".gz") for p in paths) else sum(os.path.getsize(p) for p in paths)
    # The kept tokens approximate the id stream's length (sentence ends add one position per line).
    the_plan = memory.plan(voc.size, cfg, comm.size, positions=voc.total, corpus_bytes=corpus_bytes)
    for line in the_plan.describe().splitlines():
        log(comm, f"plan: {line}")
    # mpi4py: every rank sends its host name, so each knows how many ranks share its node (and its cgroup).
    hosts = comm.allgather(socket.gethostname())
    found = memory.limits(hosts.count(socket.gethostname()))
    if limit is not None:
        found.append((limit, "--max-memory-per-rank"))
    error = None
    if found:
        cap, source = min(found)
        if the_plan.total > cap:
            need = memory.min_ranks(cap, voc.size, cfg, positions=voc.total, corpus_bytes=corpus_bytes)
            mib = lambda b: f"{b / memory.MIB:,.0f} MiB"  # noqa: E731
            if need:
                there = memory.plan(voc.size, cfg, need, positions=voc.total, corpus_bytes=corpus_bytes).total
                hint = f"the smallest rank count that fits is {need} ({mib(there)} per rank there)"
            else:
                hint = (f"no rank count fits: the baseline alone is {mib(memory.BASELINE_BYTES)} per rank and "
                        f"the per-word tables {mib(the_plan.tables)}")
            error = (f"memory plan does not fit: {mib(the_plan.total)} per rank planned on {comm.size} ranks "
                     f"({voc.size:,} words, dim {cfg.dim}), limit {mib(cap)} per rank from {source}; {hint}")
    comm.agree(error)  # every rank leaves together, before any matrix is allocated
    return the_plan


EVAL_DIR = os.path.join("data", "real", "eval")


def _load_vectors(path):
    """Start the ranks and read a word2vec file, each rank keeping its own rows. Collective."""
    from . import comm as comm_mod
    from .comm import log
    from .vectors import load

    comm = comm_mod.init()
    vectors = load(comm, path)
    log(comm, f"load: {path}: {vectors.plan.vocab_size:,} words of {vectors.unit.shape[1]} dimensions, "
              f"{vectors.plan}")
    return comm, vectors


def cmd_evaluate(args):
    """Analogy accuracy and word-similarity correlations of a word2vec file, scored on the sharded rows."""
    from . import evaluate

    if args.restrict < 1:
        raise UserError(f"--restrict must be at least 1, not {args.restrict}")
    comm, vectors = _load_vectors(args.vectors)
    rows = []
    if args.analogies:
        a = evaluate.analogies(vectors, args.analogies, restrict=args.restrict, method=args.method)
        rows.append((f"analogy {os.path.basename(args.analogies)} ({args.method}, top {args.restrict:,})",
                     a["accuracy"], f"{a['correct']:,}/{a['total']:,} correct", f"{a['skipped']:,} skipped"))
        if args.sections:
            rows += [(f"  {name}", c / t if t else float("nan"), f"{c:,}/{t:,} correct", "")
                     for name, c, t in a["sections"]]
    for path in args.similarity or []:
        r = evaluate.similarity(vectors, path)
        rows.append((f"similarity {os.path.basename(path)} (Spearman)", r["spearman"], f"{r['pairs']:,} pairs",
                     f"{r['oov']:,} out of vocabulary"))
    if comm.rank == 0:
        width = max(len(r[0]) for r in rows) if rows else 4
        print(f"{'test':{width}}  {'score':>6}  {'count':22}  left out")
        for name, score, n, skipped in rows:
            print(f"{name:{width}}  {score:6.3f}  {n:22}  {skipped}".rstrip())
    return 0


def cmd_neighbors(args):
    """The nearest words (cosine) of each given word, scored on the sharded rows."""
    comm, vectors = _load_vectors(args.vectors)
    if args.topn < 1:
        raise UserError(f"--topn must be at least 1, not {args.topn}")
    words = [w.encode() for w in args.words]
    shown = vectors.neighbors(words, topn=args.topn)
    if comm.rank == 0:
        for w in words:
            near = shown.get(w)
            print(f"{w.decode()}: " + (", ".join(f"{x.decode()} {s:.2f}" for s, x in near) if near is not None
                                       else "not in the vocabulary"))
    return 0


def add_train_options(p):
    from .config import Config

    d = Config()
    p.add_argument("corpus", nargs="*", help=f"text files, plain or .gz (default: the real English corpus, "
                                              f"built into {os.path.dirname(DEFAULT_CORPUS)} on first use)")
    p.add_argument("--out", default=os.path.join("runs", "default"), help="output folder (default: %(default)s)")
    g = p.add_argument_group("model (word2vec defaults)")
    g.add_argument("--dim", type=int, default=d.dim, help="vector width (default: %(default)s)")
    g.add_argument("--window", type=int, default=d.window, help="max context distance (default: %(default)s)")
    g.add_argument("--negative", type=int, default=d.negative, help="noise words per centre (default: %(default)s)")
    g.add_argument("--min-count", type=int, default=d.min_count, help="drop rarer words (default: %(default)s)")
    g.add_argument("--max-vocab-size", type=int, default=d.max_vocab_size,
                   help="keep at most this many most frequent words, 0: all (default: %(default)s)")
    g.add_argument("--sample", type=float, default=d.sample, help="subsampling threshold (default: %(default)s)")
    g.add_argument("--epochs", type=int, default=d.epochs, help="passes over the corpus (default: %(default)s)")
    g.add_argument("--alpha", type=float, default=d.alpha, help="initial learning rate (default: %(default)s)")
    g.add_argument("--min-alpha", type=float, default=d.min_alpha, help="final learning rate (default: %(default)s)")
    arch = g.add_mutually_exclusive_group()
    arch.add_argument("--sg", dest="sg", action="store_true", default=True, help="skip-gram (default)")
    arch.add_argument("--cbow", dest="sg", action="store_false", help="CBOW, mean of the context")
    g.add_argument("--seed", type=int, default=d.seed, help="random seed (default: %(default)s)")
    r = p.add_argument_group("distributed step")
    r.add_argument("--batch-words", type=int, default=d.batch_words,
                   help="corpus positions per global step, shared by the ranks (default: %(default)s)")
    r.add_argument("--hot-rows", type=int, default=d.hot_rows,
                   help="most frequent words replicated on every rank (default: %(default)s)")
    r.add_argument("--update-cap", type=float, default=d.update_cap,
                   help="a row's summed update in one step is scaled by min(1, cap/m) when it sums m SGD "
                        "updates (default: %(default)s)")
    r.add_argument("--threads", type=int, default=None, help="compute threads per rank (default: from mpi/launch)")
    r.add_argument("--max-memory-per-rank", metavar="SIZE", default=None,
                   help="refuse to start when the memory plan needs more per rank: bytes or 4G, 512M, 1.5GiB "
                        "(powers of 1024); the job's cgroup and Slurm limits are checked too (default: none)")
    p.add_argument("--format", nargs="+", choices=["text", "binary"], default=["text", "binary"],
                   help="word2vec export formats: vectors.txt, vectors.bin (default: both)")
    p.add_argument("--show", default=PROBE_WORDS, metavar="WORDS",
                   help="comma-separated words whose neighbours are printed at the end, '' for none "
                        "(default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def parser():
    p = argparse.ArgumentParser(prog="hvd-w2v", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    c = sub.add_parser("check", help="check the MPI/Horovod/TensorFlow stack on the launched ranks",
                       epilog="example: mpi/launch -n 2 hvd-w2v check")
    c.set_defaults(func=cmd_check)
    t = sub.add_parser("train", help="build the vocabulary, encode, train, export and show neighbours",
                       epilog="example: mpi/launch -n 2 hvd-w2v train corpus.txt --out runs/mine --epochs 5")
    add_train_options(t)
    k = t.add_argument_group("checkpoints (OUT/checkpoints/step-N: one file per rank and a manifest)")
    k.add_argument("--checkpoint-every", type=float, default=30.0, metavar="MINUTES",
                   help="write a checkpoint every MINUTES of training (rank 0's clock), 0: only on SIGTERM or "
                        "SIGUSR1, which always write one and end the job with exit code 75 (default: %(default)s)")
    k.add_argument("--resume", action="store_true",
                   help="continue from the newest good checkpoint in --out (any rank count); starts at step 0 "
                        "when there is none")
    t.set_defaults(func=cmd_train)
    v = sub.add_parser("vocab", help="count the corpus and write vocab.txt (word count, most frequent first)",
                       epilog="example: mpi/launch -n 4 hvd-w2v vocab corpus.txt --out runs/mine --min-count 10")
    add_train_options(v)
    v.set_defaults(func=cmd_vocab)
    e = sub.add_parser("evaluate", help="analogy accuracy and word-similarity correlations of a word2vec file",
                       description="Score a word2vec file (binary if it ends in .bin) with the word-analogy and "
                                   "word-similarity tests, as gensim's evaluators do, on any rank count: each "
                                   "rank reads and scores only its own rows.",
                       epilog="example: mpi/launch -n 2 hvd-w2v evaluate runs/default/vectors.bin --method 3cosmul")
    e.add_argument("vectors", help="word2vec file: .bin binary, else text")
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
    e.set_defaults(func=cmd_evaluate)
    n = sub.add_parser("neighbors", help="nearest words of the given words in a word2vec file",
                       epilog="example: mpi/launch -n 2 hvd-w2v neighbors runs/default/vectors.bin king water")
    n.add_argument("vectors", help="word2vec file: .bin binary, else text")
    n.add_argument("words", nargs="+", metavar="WORD", help="words to look up (exact spelling)")
    n.add_argument("--topn", type=int, default=10, help="neighbours per word (default: %(default)s)")
    n.set_defaults(func=cmd_neighbors)
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
