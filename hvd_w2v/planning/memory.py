"""The memory plan: each rank's expected resident memory, computed before the big allocations.

``plan(vocab_size, cfg, ranks)`` is pure arithmetic (no MPI, no TensorFlow) on the settings and a handful of
constants measured on this machine (Debian 12, Python 3.11, tensorflow-cpu 2.17.1, horovod 0.28.1, Open MPI
4.1.4); each constant says which command measured it. The command line prints the plan once the vocabulary
is known, and refuses to start when it does not fit ``--max-memory-per-rank`` or the limit the job runs
under (:func:`limits`), naming the smallest rank count that would fit (:func:`min_ranks`). The distinct tokens
a rank hash-owns while counting are known only once counted, so the count checks them as it goes
(:class:`CountingLimit`) and refuses, in the same words, before their table outgrows the limit.

Resident here means what ``ru_maxrss`` and the kernel's RSS count, shared library and memory-mapped file
pages included: it is what ``hvd-w2v train`` prints as the measured peak at the end.
"""
import math
import os
import re
import resource
from dataclasses import dataclass

from ..common.config import AHEAD_STEPS
from ..common.errors import UserError
from ..common.wording import counted
from ..kernels.native import PRIVATE_WORDS
from ..store.export import END_BLOCK_BYTES  # store imports nothing of TensorFlow
from ..text.corpus import BLOCK_BYTES  # the reader's block: corpus imports nothing but errors
from ..text.encode import Provisional
from ..text import huffman
from ..text.phrases import BLOCK_BYTES as PHRASE_BLOCK_BYTES, JOIN_WORDS
from ..text.vocab import GUIDE_BYTES, KEEP_HEAD_BYTES, RUN_BYTES, partial_bytes, pending_bytes  # no TensorFlow

MIB = 1 << 20

# Python + numpy + TensorFlow + Horovod + mpi4py imported and initialised (comm.init), one allreduce, one
# alltoallv and one call of the skip-gram step on tiny arrays; no model: ru_maxrss of
#   mpi/launch -n 2 python -m hvd_w2v.bench.memory_probes baseline   (and -n 1: less)
# TensorFlow's shared-library pages are part of it: counted in every rank's RSS, charged once per node by a cgroup.
# The figures behind this and every constant below: hvd_w2v/bench/README.md, "Memory against the plan".
BASELINE_BYTES = 443 * MIB
# The same process before TensorFlow and Horovod start (comm.Comm.horovod, comm.tensorflow start them at their
# first use): MPI started, one alltoallv, the compiled libraries of the text passes and the shard SGD loaded and
# a first count run on the rank's threads:
#   mpi/launch -n 2 python -m hvd_w2v.bench.memory_probes lean
# What the text passes run on, and training that needs neither (shard-local SGD without hot rows).
LEAN_BYTES = 51 * MIB

# What the text passes (vocabulary count, encoding) hold beyond the baseline, by path: the compiled passes
# (text_kernel.cc, wherever g++ builds it) or Python's loops (the fallback). Fitted on the flat synthetic corpus
# (`python -m hvd_w2v.synthetic CORPUS --vocab 4000000 --tokens 40000000 --exponent 0.5 --seed 3`), its prefixes
# (`head -c`) and the same law at a quarter of the size (--vocab 1000000 --tokens 10000000), each figure a
# phase's peak above the resident set before it, as printed by
#   mpi/launch -n P --threads T python -m hvd_w2v.bench.memory_probes passes CORPUS --out DIR
# (with HVD_W2V_KERNEL=python for Python's), P = 1 and 2, T = 1 and 2. Words of about 8 bytes; the bytes of
# longer words are not planned.


@dataclass(frozen=True)
class TextPasses:
    """Bytes per unit that the text passes of one path hold (see :func:`counting_bytes`, :func:`encoding_bytes`)."""

    count_read: int  # per byte of the block being read, while counting: blocks read ahead, the part's tokens
    encode_read: int  # per byte of the block, while encoding: blocks, and the block's ids (compiled) or lists (Python)
    numbered_read: int  # per byte of the block, while counting on one rank: its provisional stream (one pass)
    numbered_word: int  # P > 1: per distinct token of the corpus, the one pass's ids by number (every owner's)
    owned_word: int  # per distinct token a rank hash-owns while counting (beside the compiled table's slots)
    lookup_word: int  # per word of the encoding's word -> id table, beyond the words it keeps (and the slots)
    asked_word: int  # P > 1: per distinct word of a block, asked of its hash owner (words, numbers, answers)
    word: int  # per word a rank owns once counted (vocab.Vocab: row_words, row_counts, the owner's arrays)
    thread: int  # per thread beyond the rank's first, in either pass: its scratch, stack and heap
    reader: int  # per byte of the block, for each reader beyond the first (corpus.readers: .gz files at once)
    tables: bool  # words in compiled tables of SLOT_BYTES slots (table_bytes): the count's, the encoding's


# The compiled passes. Their tables' slots are planned as text_kernel.cc lays them out (table_bytes), the
# rest fitted, each from its own probe's peaks:
# - count_read, owned_word: the one pass's count (vocab.build with its numbers, then encode.encode) on 1 rank,
#   1 thread, less its table's slots, over the block's bytes and the distinct tokens;
# - encode_read: the encoding's peak less its table and its order (lookup_word: 8 B a word, a std::vector);
# - asked_word: on 2 ranks, the encoding's peak less the above and the scan's table of a block's distinct words
#   (vocab.Vocab.block_distinct), over those words, the largest rounded up;
# - word: the resident set after vocab.build over the words the rank owns, its rows' words laid end to end
#   (vocab.WordList), the heap trimmed (native.trim_heap);
# - thread: 2 threads against 1 on 1 rank, the largest difference of the passes' peaks, added to both (the
#   flat corpus's `hvd-w2v encode` on 1 rank, whose peaks are the count's);
# - reader: corpus.read_ahead's readers beyond the first each hold two blocks and briefly a third: 3 B a byte;
# - numbered_read: on one rank the count writes each block's provisional numbers (int32, a byte at most: 4 B);
#   numbered_word: on several ranks every owner's ids by number, sent, received and interleaved, fitted on the
#   flat corpus's fuller rank of 2 (an upper bound: an allgatherv sends each share once).
COMPILED = TextPasses(count_read=5, encode_read=7, numbered_read=4, numbered_word=16, owned_word=46, lookup_word=8,
                      asked_word=84, word=59, thread=26 * MIB, reader=3, tables=True)
# Python's loops (a dict of the owned counts; the {word: id} dict that the encoding makes, and training keeps),
# fitted as the compiled passes' on their own peaks (HVD_W2V_KERNEL=python): a Counter's dict a token while
# counting, the {word: id} dict and its lists while encoding, the words and the dict once counted; one thread and
# one reader whatever the rank's.
PYTHON = TextPasses(count_read=2, encode_read=18, numbered_read=0, numbered_word=0, owned_word=100, lookup_word=54,
                    asked_word=82, word=59 + 144, thread=0, reader=0, tables=False)

# The compiled tables (text_kernel.cc's Table): 32 B slots, a power of two of them, at most two thirds full;
# a table grows twofold in place (its slots' mapping extended), so it never holds more than its slots.
SLOT_BYTES = 32
NUMBERS_CHUNK = Provisional.CHUNK  # the one pass's numbers turned into ids at a time


def table_slots(words):
    """The slots of a compiled table that holds ``words``: the least power of two, 16 at least, of which they
    fill at most two thirds (text_kernel.cc's Table grows when the next word would pass that)."""
    slots = 16
    while 3 * words > 2 * slots:
        slots *= 2
    return slots


def table_bytes(words, tables=1):
    """Bytes of the slots of ``tables`` compiled tables holding ``words`` between them (split evenly), grown to
    them or reserved at their size alike."""
    return tables * SLOT_BYTES * table_slots(math.ceil(words / tables))


def private_bytes(owned, ranks, threads):
    """The compiled count's tables of each thread's own, on a rank of more than one thread: each holds the
    distinct tokens its thread meets first, native.PRIVATE_WORDS at most, and a rank that hash-owns ``owned`` of
    ``ranks`` meets at most owned x ranks; their slots and 8 B a word of their order."""
    words = min(PRIVATE_WORDS, owned * ranks)
    return threads * (table_bytes(words) + 8 * words) if threads > 1 else 0


def block_bytes(ranks, corpus_bytes=None):
    """The text a rank reads at a time: a corpus.BLOCK_BYTES block, or its share of the corpus when smaller
    (``corpus_bytes`` None: unknown, as for gzip files: a full block)."""
    return BLOCK_BYTES if corpus_bytes is None else min(BLOCK_BYTES, math.ceil(corpus_bytes / ranks))


def reading_bytes(read, ranks, threads, corpus_bytes, readers, passes):
    """A pass's reading (``read`` bytes per byte of the block: passes.count_read or encode_read) on ``readers``
    readers (corpus.readers) and its threads beyond the first."""
    block = block_bytes(ranks, corpus_bytes)
    return (read + passes.reader * (readers - 1)) * block + passes.thread * (threads - 1)


def counting_bytes(owned, ranks, threads=1, corpus_bytes=None, passes=COMPILED, readers=1):
    """The vocabulary count's peak on a rank that hash-owns ``owned`` distinct tokens, above the baseline: its
    reading (on ``readers`` readers; on several ranks no more blocks than its share of ``corpus_bytes`` has, and
    one), on more than one rank the partial counts and their rounds
    (vocab.partial_bytes), and the owned counts, in ``threads`` tables (on one rank the partial tables are the
    owned ones: vocab.count) and each thread's own (:func:`private_bytes`); and with the compiled passes the
    provisional stream (the encoding in the same pass; planned whether or not the job encodes): on one rank the
    block's (passes.numbered_read), on several the numbers held between two rounds (vocab.pending_bytes)."""
    own = passes.owned_word * owned
    if passes.tables:
        own += table_bytes(owned, threads) + private_bytes(owned, ranks, threads)
    read = passes.count_read + (passes.numbered_read if ranks == 1 else 0)
    if ranks > 1 and corpus_bytes:  # parts of vocab.part_bytes: the reader's blocks are the most of it,
        # and a rank holds no more of them than its share has, and a copy of one (its last token finished)
        share = math.ceil(corpus_bytes / ranks)
        read = min(read, math.ceil(share / block_bytes(ranks, corpus_bytes)) + 1)
    rounds = partial_bytes(threads, passes.tables) + (pending_bytes(threads) if passes.numbered_read else 0)
    return reading_bytes(read, ranks, threads, corpus_bytes, readers, passes) + (rounds if ranks > 1 else 0) + own


def encoding_bytes(words, ranks, threads=1, corpus_bytes=None, distinct=None, raw_tokens=None, passes=COMPILED,
                   readers=1):
    """The encoding's peak above the words and tables, on a rank that hash-owns ``words`` of the vocabulary:
    its reading (on ``readers`` readers), its word -> id table (compiled: made at its size), and on more than
    one rank the block's distinct words asked of their owners (at most ``distinct`` and the block's tokens:
    ``raw_tokens`` of ``corpus_bytes``, else half its bytes), in ``threads`` tables, one a part."""
    block = block_bytes(ranks, corpus_bytes)
    out = reading_bytes(passes.encode_read, ranks, threads, corpus_bytes, readers, passes) + passes.lookup_word * words
    if passes.tables:
        out += table_bytes(words)
    if ranks > 1:
        tokens = math.ceil(block * raw_tokens / corpus_bytes) if raw_tokens and corpus_bytes else block // 2
        part = math.ceil(tokens / threads)  # a thread's part of the block, its distinct words in a table of its own
        if distinct:
            tokens, part = min(tokens, distinct), min(part, distinct)
        out += passes.asked_word * tokens + (table_bytes(part * threads, threads) if passes.tables else 0)
    return out


def numbered_bytes(ranks, distinct, passes=COMPILED):
    """The encoding's peak above the words and tables where the count has numbered the tokens (the one pass):
    a chunk of the numbers turned into ids at a time (encode.Provisional.CHUNK, 4 B each), and on several
    ranks every owner's ids by number (passes.numbered_word a distinct token; one rank's are in its words')."""
    return 4 * NUMBERS_CHUNK + (passes.numbered_word * distinct if ranks > 1 else 0)


def distinct_counts(vocab_size, tokens=0):
    """At most how many distinct counts V words can have in ``tokens`` kept tokens: the smallest total of D
    distinct counts is 1 + 2 + ... + D, so D < sqrt(2 T); V when T is unknown (0)."""
    return min(vocab_size, math.isqrt(2 * tokens) + 1) if tokens else vocab_size

# The step's working set beyond its float blocks: batch building, key tables, np.unique, TensorFlow's
# executor and the allocators' slack. Fitted on 2-rank runs of `hvd_w2v.bench.memory_probes phases` (VmHWM
# after vocab, encode and train) on the first 4 MB of data/real/corpus.txt, with the step shapes bucketed
# (loop.CENTRE_BUCKET), at two settings (--dim 10 --batch-words 2048, --dim 100 --batch-words 256): what each
# added over the pre-training RSS, less the model, the id stream and the float blocks below, solved for a fixed
# part and a part per slot.
STEP_FIXED_BYTES = 10 * MIB
STEP_BYTES_PER_SLOT = 170
# A super-step's working set per slot with shards (localsgd), where no TensorFlow runs: the shards' examples
# (int64, in reused room: native.Scratch), the table's keys and SGD counts copied out at their size, the int32
# slots. Fitted on training's own peak (above the resident set before it) in runs of the first 150,000 lines of
# data/real/corpus.txt, --epochs 1 --shards 64 --superstep 64, 1,024 and 4,096 (65,536 to 4.2M slots a super-step
# on one rank), printed beside the plan by
#   mpi/launch -n P --threads 1 python -m hvd_w2v.bench.memory_probes phases CORPUS --out DIR --epochs 1 \
#       --shards 64 --superstep S
# less the planned model and float blocks, over the slots, rounded up, at S = 4,096, where the slots outweigh the
# float blocks (whose bound, every distinct row a super-step could touch, is loose at smaller S).
SHARD_BYTES_PER_SLOT = 16
# ... and per slot on several ranks, beyond that: the same fit on 2 ranks, with a margin for what the passes leave
# resident before training (the readers' heap), which the plan does not count.
SHARD_BYTES_PER_SLOT_RANKS = 8
SHARD_UNIQUE_COPIES = 3  # [U, dim] blocks of a super-step: its table, its deltas, the exchange's buffer
# Float32 [slots, dim] blocks alive at once in the skip-gram step: the gathered context and output rows and their
# updates (c, o, d_c, d_o: 2 blocks of the step's slots), plus TensorFlow's temporaries (about two more blocks at
# U << slots: python -m hvd_w2v.bench.memory_probes step 1024 100 2000); rounded up to 3 for an upper bound.
STEP_SLOT_COPIES = 3
# Float32 [U, dim] blocks of the step's unique rows: the numpy rows table, TensorFlow's copy of it, the two
# segment sums, their sum and the returned slice (`hvd_w2v.bench.memory_probes step 1024 100 16384` against
# 2000).
# The exchange buffers (rows sent, updates received, their sums) are the same size on a balanced plan and
# are not alive at the same time as TensorFlow's: covered by the same count.
STEP_UNIQUE_COPIES = 5
PLAN_BYTES_PER_SLOT = 16
# A run's end, after training: the export writes its lines about END_BLOCK_BYTES a round (store/export.py: as
# made, sent, received and in file order, four copies), the queries read the rows a block of END_BLOCK_BYTES at
# a time (queries/vectors.py: W_in is a strided view of training's table, never copied whole).
END_BYTES = 4 * END_BLOCK_BYTES

@dataclass(frozen=True)
class MemoryPlan:
    """Expected resident bytes per rank, by component (the most loaded rank: rows rounded up).

    ``total = max(text_baseline + max(counting, tables + words + encoding), baseline + tables + words + model +
    step + hot)``: the vocabulary's count is over before its words and tables are made, and the encoding
    before training allocates the model and the step buffers. The text passes run before TensorFlow and Horovod
    start (``text_baseline``, LEAN_BYTES, unless the process had loaded them before), training with them when it
    needs them (``baseline``). The id stream is not in it: each rank reads its positions of every step with
    pread (encode.TokenStream), into the step's buffers.
    """

    ranks: int
    baseline: int  # the process during training: BASELINE_BYTES with TensorFlow and Horovod, else LEAN_BYTES
    text_baseline: int  # the process during the text passes: LEAN_BYTES, unless TensorFlow was loaded before
    model: int  # W_in and W_out slices and the exchange's SGD count per row: ceil(V/P) rows x (dim + 1) x 4 B x 2
    tables: int  # counts by id as runs (vocab.CountRuns): RUN_BYTES x distinct counts + noise guide + keep head
    words: int  # the words this rank owns once counted: ceil(V/P) x the passes' word bytes (TextPasses.word)
    step: int  # one step's working set: fixed + per slot + float blocks (step_bytes)
    hot: int  # hot-row replicas [2H, d] and the allreduce block [2H, d+1] with Horovod's in and out copies
    end: int  # the export's and the queries' blocks after training (END_BYTES)
    counting: int  # the vocabulary's count: reading, partial counts, the hash-owned counts (counting_bytes)
    owned: int  # of which the hash-owned counts of the ``owned_tokens`` distinct tokens of the most loaded rank
    owned_tokens: int
    encoding: int  # the encoding, beside the words: reading, the word -> id table, words asked (encoding_bytes)
    compiled: bool  # the compiled text passes (text_kernel.cc), or Python's loops

    @property
    def training(self):
        return self.model + self.step + self.hot + self.end

    @property
    def passes(self):
        """The text passes' peak above their baseline: the count, or the words and tables with the encoding."""
        return max(self.counting, self.tables + self.words + self.encoding)

    @property
    def total(self):
        return self.peak("train")

    def peak(self, stage="train"):
        """The planned peak of a job that runs up to ``stage``: "vocab" (`hvd-w2v vocab`: the count, then its
        words and tables), "encode" (`hvd-w2v encode`: and the encoding) or "train" (the total)."""
        text = self.text_baseline + max(self.counting, self.tables + self.words
                                        + (self.encoding if stage != "vocab" else 0))
        return max(text, self.baseline + self.tables + self.words + self.training) if stage == "train" else text

    def describe(self, stage="train"):
        """Two lines, MiB per rank, and a third on training for the ``stage`` "train" (see :meth:`peak`)."""
        m = lambda b: f"{b / MIB:,.0f}"  # noqa: E731
        text = (f"baseline {m(self.text_baseline)} + max(counting {m(self.counting)}, tables {m(self.tables)} + words "
                f"{m(self.words)}{f' + encoding {m(self.encoding)}' if stage != 'vocab' else ''})")
        if stage == "train":
            text = (f"max({text}, baseline {m(self.baseline)} + tables {m(self.tables)} + words {m(self.words)} + "
                    f"training {m(self.training)})")
        lines = [f"{m(self.peak(stage))} MiB per rank on {counted(self.ranks, 'rank')} = {text}",
                 f"counting {m(self.counting)} = reading {m(self.counting - self.owned)} + hash-owned counts "
                 f"{m(self.owned)} of {self.owned_tokens:,} distinct tokens ({'compiled' if self.compiled else 'Python'}"
                 f" text passes)"]
        if stage == "train":
            lines.append(f"training {m(self.training)} = model {m(self.model)} + step {m(self.step)} + hot rows "
                         f"{m(self.hot)} + export {m(self.end)}")
        return "\n".join(lines)

    __str__ = describe


def step_centres(cfg, ranks, positions=0):
    """The most centres one rank's step covers: ``ceil(batch_words / P)``, or with shards ``superstep`` positions
    of each of its ``ceil(shards / P)`` shards; and no more than ``positions``, the corpus's kept tokens, when
    known (0: not)."""
    most = positions or math.inf
    centres = math.ceil(cfg.shards / ranks) * cfg.superstep if cfg.shards else math.ceil(cfg.batch_words / ranks)
    return min(centres, most)


def centre_slots(cfg, tokens=0):
    """A centre's slots: ``2 * window`` context slots and its :func:`targets`."""
    return 2 * cfg.window + targets(cfg, tokens)


def step_slots(cfg, ranks, positions=0):
    """The most slots one rank's step fills: :func:`step_centres` x :func:`centre_slots`."""
    return step_centres(cfg, ranks, positions) * centre_slots(cfg, positions)


def step_bytes(cfg, vocab_size, ranks, threads=1, positions=0, noise=None):
    """An upper bound of one step's working set on one rank of ``threads`` threads, in bytes. ``positions``: the
    corpus's kept tokens when known (0: not), the most centres a step or a shard can have on a small corpus;
    ``noise``: the noise draws' expected distinct words, once the counts are known (:func:`shard_rows`).

    A rank builds the examples of at most ``ceil(batch_words / P)`` centres (every position kept); each has
    ``2 * window`` context slots and ``1 + negative`` output slots (hierarchical softmax: its path's, at most
    huffman.depth_bound of the tokens). The step's unique rows U are at most the
    slots and at most 2V (a W_in and a W_out row per word). Each thread of the compiled step but the first keeps
    a float32 buffer of its own from step to step (sgns_kernel.cc), for the rows several threads add into:
    counted as [U, dim], though those rows are a part of U.

    With shards (localsgd), a super-step's centres are ``superstep`` positions of each of the rank's
    ``ceil(shards / P)`` shards, and instead of those buffers each thread holds the private copy of the rows of
    the shard it runs until its round's sum, at most a shard's slots or 2V + 1 rows, that shard's examples
    renumbered into the copy (int32, a shard's slots) and the place of every table row in it (int32, U;
    localsgd_kernel.cc); an owner's index of the entries it adds (int64, U, over all its threads); with
    ``merge_clip``, the chains of each row's entries it sums. With the hot rows merged inside the super-step
    (hotsync), every hosted shard's copy at once.
    """
    hosted = math.ceil(cfg.shards / ranks) if cfg.shards else 0
    centres, per_centre = step_centres(cfg, ranks, positions), centre_slots(cfg, positions)
    slots = centres * per_centre  # step_slots
    unique = step_rows(cfg, vocab_size, ranks, positions, noise)
    if cfg.shards:  # no TensorFlow: the table, the deltas and the exchange's buffer of them; the shards' rows
        # With --merge-clip an owner chains each row's entries before summing them (native.merge_sources): per
        # entry its index, where its delta is, the next entry of its row, its row's hash bucket (two to four, 12
        # B each) and the row's first and last entry: 76 B. Without, on several ranks, the index alone
        # (add_sources).
        # (With --wire bfloat16 the updates sent are a bfloat16 copy, and the rows and updates received take half
        # their float32 bytes: about as much in all. wire.py)
        per_slot = SHARD_BYTES_PER_SLOT + (SHARD_BYTES_PER_SLOT_RANKS if ranks > 1 else 0)
        tables = SHARD_UNIQUE_COPIES * unique
        places = (76 if cfg.clip else 8 if ranks > 1 else 0) * unique
        # hotsync holds every hosted shard's copy from the super-step's start to its end, and per shard the
        # place (int32) and a mark (uint8) of every hot row, and the hot rows twice (as synced, and summed)
        running = hosted if cfg.hot_inside else min(threads, hosted)
        hot = 2 * min(cfg.hot_rows, vocab_size) if cfg.hot_inside else 0
        shard = min(cfg.superstep, centres)
        copies = (running * min(shard * per_centre + 1, shard_rows(cfg, vocab_size, shard, 1, positions, noise))
                  + 2 * hot)
        per_slot += 4 * running / hosted  # the running shards' renumbered examples: slots / hosted each
        places += 4 * min(threads, hosted) * unique + 5 * hosted * hot  # a thread's place of every table row
    else:
        per_slot, tables = STEP_BYTES_PER_SLOT + AHEAD_STEPS * PLAN_BYTES_PER_SLOT, STEP_UNIQUE_COPIES * unique
        copies, places = STEP_SLOT_COPIES * slots + (threads - 1) * unique, 0
    return STEP_FIXED_BYTES + int(per_slot * slots) + places + 4 * cfg.dim * (tables + copies)


def step_rows(cfg, vocab_size, ranks, positions=0, noise=None):
    """At most how many rows one rank's step table holds (U, its spare row included): a row a slot and at most
    2V, and with shards at most :func:`shard_rows` of the hosted shards' ranges (each contiguous)."""
    unique = min(step_slots(cfg, ranks, positions), 2 * vocab_size) + 1
    if not cfg.shards:
        return unique
    centres, hosted = step_centres(cfg, ranks, positions), math.ceil(cfg.shards / ranks)
    return min(unique, shard_rows(cfg, vocab_size, centres, hosted, positions, noise))


def shard_rows(cfg, vocab_size, centres, ranges, tokens=0, noise=None):
    """At most how many distinct rows examples of ``centres`` centres in ``ranges`` contiguous ranges of the
    stream touch, the table's spare row included: on the input side the words of the ranges and of the
    ``context_span`` positions beyond each end (a context never reaches further), on the output side a centre's
    :func:`targets` each (its word and its negatives, or its Huffman path's inner nodes); each side at most V.
    Far below the slots' bound (every slot a distinct row) on a vocabulary larger than a super-step.

    ``noise``: the expected distinct words of n noise draws, once the counts are known
    (vocab.CountRuns.noise_distinct), or None: every negative a row of its own. The text can name any words; the
    negatives are draws of a known distribution, whose distinct count :func:`noise_rows` bounds."""
    inputs = min(vocab_size, centres + 2 * cfg.context_span * ranges)
    outputs = centres * targets(cfg, tokens)
    if noise is not None and not cfg.hs and cfg.noise_groups == 1:  # (a group's draws: every one a row)
        outputs = centres + noise_rows(noise(centres * cfg.negative))
    return inputs + min(vocab_size, outputs) + 1


# The chance, at most, that one super-step's negatives name more distinct words than noise_rows allows: e^-40,
# about 4e-18, so that a run of a billion super-steps passes its bound with a chance below 1e-8.
NOISE_TAIL = 40.0


def noise_rows(mean):
    """At most how many distinct words a super-step's noise draws name, but with a chance below e^-NOISE_TAIL,
    given ``mean``, their expected number. A word's "drawn at least once" indicators are negatively associated
    (balls into bins: Dubhashi and Ranjan, 1998), so Bernstein's bound holds for their sum, whose variance is at
    most its mean: P(X >= mean + t) <= exp(-t^2 / (2 (mean + t / 3))), solved for t at NOISE_TAIL."""
    t = NOISE_TAIL / 3 + math.sqrt((NOISE_TAIL / 3) ** 2 + 2 * NOISE_TAIL * mean)
    return math.ceil(mean + t)


def hs_bytes(vocab_size, tokens=0):
    """Hierarchical softmax's tables on every rank: the Huffman paths of the most frequent words (huffman.HEAD),
    int32 points and int8 codes at most huffman.depth_bound long; the tree's segments are a few per run."""
    return min(vocab_size, huffman.HEAD) * hs_depth(tokens) * 5


def hs_depth(tokens=0):
    """The longest Huffman code a corpus of ``tokens`` kept tokens can have (0: unknown, 2^40)."""
    return huffman.depth_bound(tokens or 1 << 40)


def targets(cfg, tokens=0):
    """A centre's output slots: ``1 + negative``, or with hierarchical softmax its path's at most (hs_depth)."""
    return hs_depth(tokens) if cfg.hs else 1 + cfg.negative


def baseline(tensorflow):
    """A rank's resident bytes before any of its data: BASELINE_BYTES once TensorFlow and Horovod have started
    in it, else LEAN_BYTES."""
    return BASELINE_BYTES if tensorflow else LEAN_BYTES


def loads_tensorflow(cfg):
    """Whether training with ``cfg`` starts TensorFlow and Horovod: the exact step's maths is a TensorFlow op,
    and the hot rows travel by Horovod's allreduce; shard-local SGD without hot rows needs neither."""
    return not cfg.shards or cfg.hot_rows > 0


def plan(vocab_size, cfg, ranks, positions=0, corpus_bytes=None, tokens=None, threads=1, distinct=0, raw_tokens=0,
         owned=0, block_distinct=0, passes=COMPILED, readers=1, one_pass=False, tensorflow=None, loaded=False,
         noise=None):
    """The memory plan of training ``vocab_size`` words with ``cfg`` on ``ranks`` ranks of ``threads`` threads.

    ``positions``: length of the encoded id stream (about the kept tokens; 0 if unknown); ``corpus_bytes``:
    the text's size in bytes (None if unknown, as for gzip files: a full block per rank); ``tokens``: the
    kept tokens, which bound the distinct counts (default: ``positions``). What the count found, once known:
    ``distinct``, the corpus's distinct tokens (0: unknown, the ``vocab_size`` kept, the fewest there can be);
    ``raw_tokens``, the tokens read (0: unknown; they bound a block's distinct words); ``owned``, the distinct
    tokens the most loaded rank hash-owns (0: ``distinct / ranks``, which hashes spread evenly);
    ``block_distinct``, the distinct tokens of a block (vocab.Vocab.block_distinct; 0: unknown, the block's
    tokens at most). ``passes``: COMPILED or PYTHON, the text passes that run; ``readers``: the most
    corpus.readers a rank reads on (corpus.most_readers); ``one_pass``: the count has also encoded (the
    Vocab's ``provisional``), so the encoding reads its numbers, not the text (:func:`numbered_bytes`).
    ``tensorflow``: training starts TensorFlow (None: :func:`loads_tensorflow`; a TensorBoard writer starts it
    too); ``loaded``: the process had started it before the text passes (a Python user's); ``noise``: the
    expected distinct words of n noise draws (vocab.CountRuns.noise_distinct), once counted (:func:`shard_rows`).
    """
    tensorflow = loads_tensorflow(cfg) if tensorflow is None else tensorflow
    rows = math.ceil(vocab_size / ranks)
    hot = min(cfg.hot_rows, vocab_size)
    distinct = max(distinct, vocab_size)
    owned = owned or math.ceil(distinct / ranks)
    counting = counting_bytes(owned, ranks, threads, corpus_bytes, passes, readers)
    return MemoryPlan(
        ranks=ranks,
        baseline=baseline(tensorflow or loaded),
        text_baseline=baseline(loaded),
        model=rows * (cfg.dim + 1) * 4 * 2,
        tables=(RUN_BYTES * distinct_counts(vocab_size, positions if tokens is None else tokens) + GUIDE_BYTES
                + KEEP_HEAD_BYTES + (hs_bytes(vocab_size, positions if tokens is None else tokens) if cfg.hs else 0)),
        words=rows * passes.word,
        step=step_bytes(cfg, vocab_size, ranks, threads, positions, noise),
        hot=2 * hot * cfg.dim * 4 + 3 * 2 * hot * (cfg.dim + 1) * 4 if hot else 0,
        end=END_BYTES,
        counting=counting,
        owned=counting - counting_bytes(0, ranks, threads, corpus_bytes, passes, readers),
        owned_tokens=owned,
        encoding=(numbered_bytes(ranks, distinct, passes) if one_pass else
                  encoding_bytes(rows, ranks, threads, corpus_bytes, min(distinct, block_distinct or distinct),
                                 raw_tokens, passes, readers)),
        compiled=passes.tables,
    )


def exchange_bytes(cfg, ranks):
    """At most how many bytes one rank sends to the others in one step (0 on one rank).

    Each of a rank's step slots (as in :func:`step_bytes`) names at most one row owned elsewhere: its key goes
    to the owner (8 B), the row comes back (4 x dim B, sent by the owner: the same count on a balanced plan),
    and its update and SGD count go to the owner (4 x dim + 4 B). The measured figure is lower: rows repeat
    within a step (one fetch serves them all) and 1/P of them are the rank's own.
    """
    if ranks == 1:
        return 0
    return step_slots(cfg, ranks) * (8 + 4 * cfg.dim + 4 * cfg.dim + 4)


MAX_RANKS = 1 << 20


def min_ranks(limit, vocab_size, cfg, positions=0, corpus_bytes=None, tokens=None, threads=1, distinct=0,
              raw_tokens=0, block_distinct=0, passes=COMPILED, stage="train", readers=1, one_pass=False,
              tensorflow=None, loaded=False, noise=None):
    """The smallest rank count whose plan (its peak up to ``stage``, MemoryPlan.peak) fits ``limit`` bytes per
    rank, or None when none up to MAX_RANKS does (the baseline, the count runs and the step's fixed part do
    not shrink with more ranks)."""
    return fewest_ranks(lambda p: plan(vocab_size, cfg, p, positions, corpus_bytes, tokens, threads, distinct,
                                       raw_tokens, block_distinct=block_distinct, passes=passes,
                                       readers=readers, one_pass=one_pass, tensorflow=tensorflow,
                                       loaded=loaded, noise=noise).peak(stage) <= limit)


def fewest_ranks(fits):
    """The smallest rank count p (up to MAX_RANKS) for which ``fits(p)``, or None. A plan's parts do not grow
    with the rank count beyond one rank (where the count has no partial counts), so one look at one rank and
    a bisection over the others find it."""
    if fits(1):
        return 1
    if not fits(MAX_RANKS):
        return None
    lo, hi = 2, MAX_RANKS
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class CountingLimit:
    """The check, while the vocabulary is counted, that the counts a rank hash-owns still fit the job's
    memory limit: their distinct tokens are known only as they are counted (vocab.count asks before each
    growth of the owned table, and refuses on every rank with the first message).

    ``limit`` bytes per rank from ``source`` (pipeline.memory_limit's), this ``rank`` of ``ranks``
    with ``threads`` threads, reading ``corpus_bytes`` (None: unknown) with ``passes`` on ``readers`` readers,
    above ``baseline`` (MemoryPlan.text_baseline's)."""

    limit: int
    source: str
    rank: int
    ranks: int
    threads: int = 1
    corpus_bytes: int = None
    passes: TextPasses = COMPILED
    readers: int = 1
    baseline: int = LEAN_BYTES

    def planned(self, owned, ranks=None):
        """The count's planned peak with ``owned`` distinct tokens hash-owned per rank, baseline included."""
        return self.baseline + counting_bytes(owned, ranks or self.ranks, self.threads, self.corpus_bytes,
                                               self.passes, self.readers)

    def __call__(self, owned):
        """None while this rank may hash-own ``owned`` distinct tokens; else the refusal (a UserError's text)."""
        planned = self.planned(owned)
        if planned <= self.limit:
            return None
        mib = lambda b: f"{b / MIB:,.0f} MiB"  # noqa: E731
        seen = owned * self.ranks  # the corpus's distinct tokens counted so far, about: hashes spread them evenly
        need = fewest_ranks(lambda p: self.planned(math.ceil(seen / p), p) <= self.limit)
        if need:
            hint = (f"at least {need} ranks for the {seen:,} or so distinct tokens counted by then "
                    f"({mib(self.planned(math.ceil(seen / need), need))} per rank there), more if the rest of the "
                    f"text holds many new ones")
        else:
            hint = (f"no rank count fits: the baseline alone is {mib(self.baseline)} per rank and reading text "
                    f"{mib(counting_bytes(0, MAX_RANKS, self.threads, self.corpus_bytes, self.passes, self.readers))}")
        return (f"memory plan does not fit: counting the vocabulary, rank {self.rank} would hash-own {owned:,} "
                f"distinct tokens: {mib(planned)} per rank planned on {counted(self.ranks, 'rank')} (baseline "
                f"{mib(self.baseline)} + counting {mib(planned - self.baseline)}), limit {mib(self.limit)} per "
                f"rank from {self.source}; {hint}")


# word2phrase's passes (text/phrases.py), by path. The compiled tables (phrases_kernel.cc's Table) hold 24 B
# slots (a 128-bit key and its count), a power of two of them, 65,536 at least, at most half full; a table grows
# twofold, its old slots beside the new ones meanwhile. Beyond the slots, bytes per key (a word's or a pair's
# string) a rank's parts hold ("held": each part's table its own, so a key met by two parts is held twice), per
# key the owners' exchange brings it ("received", repeats included), per word the rank reads, and per byte of the
# block each part scans at a time. Fitted on the peaks of the passes over 300,000 distinct words, the first
# 150,000 lines of data/real/corpus.txt and the whole of it, 1 x 1, 1 x 2 and 2 x 1 (ranks x threads), printed
# with the keys by
#   mpi/launch -n P --threads T python -m hvd_w2v.bench.memory_probes phrases CORPUS DIR
# - counting: the tables, growing, and once counted their keys exported and laid end to end (48 B a key held);
# - the owners' sums and answers, the peak: the tables, the export and each key's owner, place and answer (84 B
#   a key held); the keys and counts received (24 B) and the owner's table, made for them all; on several ranks
#   the keys grouped by owner beside those received (20 B a key held);
# - the joins: the tables, the answers (8 B a key), each word's joinable mark and join (3 B a word), the joins
#   decided phrases.JOIN_WORDS at a time (40 B a word of them);
# - a block's scan: the block, its keys (two a word, a word at least 2 bytes: 16 B a byte) and counts, the
#   output (2 B a byte) and its copy: 40 B a byte, a part at a time on each thread.
# The peaks measured are 82% to 100% of this plan. Python's loops (the fallback: a Counter of bytes strings, the
# owners' dict of keys as tuples) have no slots: their figures a key, all in, fitted on the same probe's peaks
# (HVD_W2V_KERNEL=python), 150,000 lines: 90% and 93% of their plan.


@dataclass(frozen=True)
class PhrasePasses:
    """Bytes per unit that word2phrase's passes of one path hold (see :func:`phrases_bytes`)."""

    slot: int  # per slot of a compiled table (0: Python's dicts, counted in the figures a key)
    counting: int  # per key held while counting, beyond the slots
    held: int  # per key held while the owners sum the counts and answer, beyond the slots
    received: int  # per key received then, beyond the owner's slots
    sent: int  # per key held then on several ranks: the copy sent
    word: int  # per word the rank reads, while the joins are decided
    block: int  # per byte of a part's block


PHRASES_COMPILED = PhrasePasses(slot=24, counting=48, held=84, received=24, sent=20, word=3, block=40)
PHRASES_PYTHON = PhrasePasses(slot=0, counting=330, held=380, received=230, sent=32, word=3, block=40)


def phrase_slots(keys):
    """The slots of a compiled phrase table that holds ``keys`` keys (phrases_kernel.cc's Table)."""
    return max(1 << 16, 1 << (2 * keys - 1).bit_length()) if keys else 1 << 16


def owner_slots(received, tables):
    """The slots of an owner's ``tables`` compiled tables (phrases.Owned: one a part) made for the ``received``
    keys they sum between them, each key in the table of its hash's share: each table planned at the mean of
    a hash's split plus four of its standard deviations (a table's keys lie beyond that about once in 30,000
    splits, and then only a table whose keys cross a power of two there takes twice the slots)."""
    if tables <= 1:
        return phrase_slots(received)
    mean = received / tables
    return tables * phrase_slots(math.ceil(mean + 4 * math.sqrt(mean)))


def phrases_bytes(parts, received, words=0, ranks=1, passes=PHRASES_COMPILED):
    """The peak of word2phrase's passes above the baseline on a rank of ``ranks`` whose parts' tables hold
    ``parts`` keys each (a list: a part a thread), which receives ``received`` of every rank's keys to sum (its
    hash-owned share, repeats included: the owner's tables, one a part, are made for them all), and reads
    ``words`` words (0: unknown): the count, the owners' exchange or the joins."""
    held, tables = sum(parts), passes.slot * sum(map(phrase_slots, parts))
    owner = passes.slot * owner_slots(received, len(parts))
    scans = passes.block * PHRASE_BLOCK_BYTES * len(parts)
    counting = tables * 3 // 2 + passes.counting * held + scans
    exchange = tables + owner + (passes.held + (passes.sent if ranks > 1 else 0)) * held + passes.received * received
    joins = tables + 8 * held + passes.word * words + 40 * (min(words, JOIN_WORDS) if words else JOIN_WORDS) + scans
    return max(counting, exchange, joins)


@dataclass(frozen=True)
class PhrasesLimit:
    """The check that word2phrase's passes fit the job's memory limit: ``limit`` bytes per rank from ``source``
    (pipeline.memory_limit's), this ``rank`` of ``ranks``, above ``baseline``. The keys a rank holds are known
    only as it counts, so text/phrases.py asks after each block (the keys it will receive expected as many as it
    holds: hashes spread them evenly), and again with the keys it will receive, counted, before the owners'
    exchange."""

    limit: int
    source: str
    rank: int
    ranks: int
    passes: PhrasePasses = PHRASES_COMPILED
    baseline: int = LEAN_BYTES

    def planned(self, parts, received=None, words=0, ranks=None):
        """The passes' planned peak, baseline included (``received`` None: as many as the parts hold)."""
        return self.baseline + phrases_bytes(parts, sum(parts) if received is None else received, words,
                                             ranks or self.ranks, self.passes)

    def __call__(self, parts, received=None, words=0):
        """None while this rank's parts, holding ``parts`` keys each (and receiving ``received`` and reading
        ``words``, once known), fit; else the refusal (a UserError's text)."""
        planned = self.planned(parts, received, words)
        if planned <= self.limit:
            return None
        mib = lambda b: f"{b / MIB:,.0f} MiB"  # noqa: E731
        held = sum(parts)
        seen = held * self.ranks  # at most the distinct keys counted so far on every rank, about
        need = fewest_ranks(lambda p: self.planned([math.ceil(seen / p / len(parts))] * len(parts), ranks=p)
                            <= self.limit)
        if need:
            hint = (f"at least {need} ranks for the {seen:,} or so words and pairs counted by then, more if the "
                    f"rest of the text holds many new ones")
        else:
            hint = (f"no rank count fits: the baseline and a block's scan alone are "
                    f"{mib(self.planned([0] * len(parts)))} per rank")
        return (f"memory plan does not fit: phrases, rank {self.rank} would hold {held:,} words and pairs"
                f"{'' if received is None else f' and receive {received:,}'}: {mib(planned)} per rank planned on "
                f"{counted(self.ranks, 'rank')} (baseline {mib(self.baseline)} + phrases "
                f"{mib(planned - self.baseline)}), limit {mib(self.limit)} per rank from {self.source}; {hint}")


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text):
    """Bytes in ``text``: plain bytes ("1000000") or a number with a binary unit: "512M", "4G", "1.5GiB",
    "2gb", "64KiB" (K, M, G, T are powers of 1024, as Slurm's --mem); None for None (no limit given).
    UserError when it is not a size."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise UserError(f"--max-memory-per-rank: {text!r} is not a size; write bytes or a number with K, M, "
                        f"G or T (powers of 1024), e.g. 4G, 512M, 1.5GiB")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise UserError(f"--max-memory-per-rank must be more than 0 bytes, got {text!r}")
    return value


def limits(ranks_on_node, environ=None):
    """The memory limits this process runs under, as ``[(bytes per rank, source)]``; may be empty.

    - cgroup v2 ``memory.max`` and cgroup v1 ``memory.limit_in_bytes`` of this process's cgroup: a limit
      for every process in it, so divided by ``ranks_on_node`` (mpirun and Slurm put a node's ranks in one);
    - Slurm's ``SLURM_MEM_PER_CPU`` (MiB, times the CPUs per task: ``SLURM_CPUS_PER_TASK``, or without it the
      node's ``SLURM_CPUS_ON_NODE`` over ``ranks_on_node``, as slurm/run-train shares them) or
      ``SLURM_MEM_PER_NODE`` (MiB, divided by ``ranks_on_node``).

    Not ``RLIMIT_AS`` or ``RLIMIT_DATA``: they bound virtual memory, and TensorFlow reserves far more address
    space than it touches (`hvd_w2v.bench.memory_probes` baseline and phases; figures in
    hvd_w2v/bench/README.md, "Memory against the plan"), so a resident plan says nothing about them.
    """
    env = os.environ if environ is None else environ
    found = []
    for path, value in _cgroup_limits():
        found.append((value // ranks_on_node, f"cgroup {path} {value / MIB:,.0f} MiB for {ranks_on_node} "
                                              f"rank(s) on this node"))
    cpus = int(env.get("SLURM_CPUS_PER_TASK") or 0) or max(int(env.get("SLURM_CPUS_ON_NODE") or 1) // ranks_on_node, 1)
    if env.get("SLURM_MEM_PER_CPU"):
        found.append((int(env["SLURM_MEM_PER_CPU"]) * MIB * cpus,
                      f"SLURM_MEM_PER_CPU={env['SLURM_MEM_PER_CPU']} MiB x {cpus} CPU(s) per task"))
    if env.get("SLURM_MEM_PER_NODE") and int(env["SLURM_MEM_PER_NODE"]) > 0:  # 0: all of the node's memory
        found.append((int(env["SLURM_MEM_PER_NODE"]) * MIB // ranks_on_node,
                      f"SLURM_MEM_PER_NODE={env['SLURM_MEM_PER_NODE']} MiB for {ranks_on_node} rank(s) on "
                      f"this node"))
    return found


NO_LIMIT = 1 << 60  # cgroups write "max" (v2) or a huge page-rounded number (v1) for "no limit"


def _cgroup_limits():
    """``[(file, bytes)]`` of the memory limits set on this process's cgroup (v2 and v1), if readable."""
    out = []
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates = [f"/sys/fs/cgroup{path}/memory.max", f"/sys/fs/cgroup/unified{path}/memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"]
        else:
            continue
        for name in candidates:
            try:
                text = open(os.path.normpath(name)).read().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < NO_LIMIT:
                out.append((name, int(text)))
            break
    return out


def peak_resident_bytes():
    """This process's peak resident memory so far (Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv=None):
    """``python -m hvd_w2v.memory``: a model's plan on paper, at several rank counts."""
    import argparse

    from ..common.config import Config

    p = argparse.ArgumentParser(prog="python -m hvd_w2v.memory",
                                description="A model's memory plan on paper: memory per rank and bytes exchanged "
                                            "per step at several rank counts, and the fewest ranks under a limit.")
    p.add_argument("--words", type=float, required=True, help="vocabulary size V (e.g. 1e9)")
    p.add_argument("--dim", type=int, default=Config.dim)
    p.add_argument("--batch-words", type=int, default=Config.batch_words)
    p.add_argument("--limit", help="memory per rank (e.g. 64G): prints the smallest rank count that fits")
    p.add_argument("--tokens", type=float, default=0,
                   help="kept corpus tokens: they bound the distinct counts (default 0: unknown, V of them)")
    p.add_argument("--positions", type=float, default=0,
                   help="the id stream's length: the kept tokens when --tokens is not given (default 0)")
    p.add_argument("--corpus-bytes", type=float, default=None, help="text size (default: unknown, a full block)")
    p.add_argument("--distinct", type=float, default=0,
                   help="the corpus's distinct tokens, kept or not: the count's hash-owned counts (default 0: "
                        "unknown, V of them)")
    p.add_argument("--raw-tokens", type=float, default=0,
                   help="the corpus's tokens, kept or not: they bound a block's distinct words (default 0: unknown)")
    p.add_argument("--ranks", type=int, nargs="*", default=[])
    a = p.parse_args(argv)
    cfg = Config(dim=a.dim, batch_words=a.batch_words)
    v, positions, tokens = int(a.words), int(a.positions), int(a.tokens)
    text = dict(distinct=int(a.distinct), raw_tokens=int(a.raw_tokens))
    corpus = None if a.corpus_bytes is None else int(a.corpus_bytes)
    gib = lambda b: f"{b / (1 << 30):,.1f}"  # noqa: E731
    print(f"V = {v:,} words, dim {a.dim}: W_in + W_out = {gib(v * a.dim * 8)} GiB; batch {a.batch_words:,} "
          f"positions, window {cfg.window}, negative {cfg.negative}")
    ranks = list(a.ranks)
    if a.limit:
        limit = parse_size(a.limit)
        need = min_ranks(limit, v, cfg, positions, corpus, tokens, **text)
        print(f"limit {gib(limit)} GiB per rank: " + (f"the fewest ranks that fit: {need:,}" if need else
                                                       "no rank count fits (the per-rank baseline, runs, step and "
                                                       "reading)"))
        if need:
            ranks = sorted(set(ranks) | {need, 2 * need, 4 * need})
    print(f"{'ranks':>8} {'GiB/rank':>9} {'model':>8} {'words':>8} {'tables':>8} {'step':>6} {'counting':>9} "
          f"{'encoding':>9} {'MiB sent/step/rank':>19}")
    for r in ranks or [1, 8, 64]:
        q = plan(v, cfg, r, positions, corpus, tokens, **text)
        print(f"{r:8,} {gib(q.total):>9} {gib(q.model):>8} {gib(q.words):>8} {gib(q.tables):>8} {gib(q.step):>6} "
              f"{gib(q.counting):>9} {gib(q.encoding):>9} {exchange_bytes(cfg, r) / MIB:19,.1f}")


if __name__ == "__main__":
    main()
