"""Training configuration: one frozen value, built once by the command line and passed explicitly."""
import numbers
from dataclasses import asdict, dataclass, fields, replace
from typing import Optional  # (Python 3.9 has no union operator on types)

from .errors import UserError

# Fields that may be None, "chosen by the job's layout" (Config.settled), and the type of their values.
LEFT_TO_LAYOUT = {Optional[int]: int, Optional[float]: float}
# What Config.sized chooses for shard-local SGD's super-step. hvd_w2v/bench/README.md ("Super-steps an epoch") has
# the quality behind each, and "The cluster projection" the speed.
SUPERSTEPS_AN_EPOCH = 233  # at least this many merges an epoch kept the exact step's quality at every V measured ...
MAX_SUPERSTEP = 16384  # ... and S at most this many positions a shard
# Every row's merged delta (a vector of W_in or W_out, all shards' deltas summed) is scaled down to an L2 norm
# of at most this, on every V and S unless told otherwise: the merge that cannot diverge (merge_clip's comment).
MERGE_CLIP = 1.0
# Steps whose examples loop.Ahead builds ahead of use, while the exchange waits for other ranks; each
# StepPlan holds at most 16 B per slot (int32 ctx/tgt slots, and the compiled builder's int64 key and float32
# SGD-count buffers, sized for every slot).
AHEAD_STEPS = 4
WIRES = ("float32", "bfloat16")  # how shard-local SGD's rows and deltas travel (wire.py)


def superstep_for(shards, positions):
    """The default super-step of ``shards`` shards on an epoch of ``positions`` corpus positions: the longest
    power of two that leaves at least SUPERSTEPS_AN_EPOCH super-steps an epoch, at most MAX_SUPERSTEP, at least
    1. Why: what decides quality is how often the shards meet in an epoch, at every V and S measured; a longer
    super-step is cheaper, its exchange and its examples' table shared by more SGD; past MAX_SUPERSTEP a shard's
    private copies of rows grow with S for little speed.
    A power of two, so that corpora of nearly the same size get the same S."""
    most = positions // (shards * SUPERSTEPS_AN_EPOCH)
    return 1 << (max(1, min(MAX_SUPERSTEP, most)).bit_length() - 1)


@dataclass(frozen=True)
class Config:
    """word2vec hyper-parameters (gensim/word2vec.c defaults) and the distributed step's settings."""

    dim: int = 100  # embedding width (columns of W_in and W_out), 1..10000
    window: int = 5  # maximum distance between centre and context; the reduced window is drawn in [1, window]
    negative: int = 5  # noise words per centre, drawn from unigram^ns_exponent; shared by the centre's whole window
    # Hierarchical softmax (word2vec.c's -hs 1, gensim's hs=1) in place of negative sampling: each centre is
    # predicted along its path in word2vec.c's Huffman tree of the counts (text/huffman.py), whose V - 1 inner
    # nodes' rows take the place of W_out's. One objective a run: --hs 1 goes with --negative 0.
    hs: bool = False
    # The noise distribution's exponent (gensim's ns_exponent): 0.75 is word2vec's, 1 samples by frequency, 0 every
    # word alike, below 0 rare words more (tuned in item2vec-like uses).
    ns_exponent: float = 0.75
    min_count: int = 5  # words seen fewer times are dropped from the vocabulary
    # Keep at most this many words, the most frequent (0: no limit): min_count raised to the least count that
    # leaves at most this many, so the words tied at the cut go; gensim's max_final_vocab, the same vocabulary.
    max_final_vocab: int = 0
    sample: float = 1e-3  # subsampling threshold for frequent words (0: off), as word2vec.c
    epochs: int = 5
    alpha: float = 0.025  # learning rate at the start; decays linearly with global progress ...
    min_alpha: float = 0.0001  # ... to this at the end
    sg: bool = True  # skip-gram (True) or CBOW (False)
    # CBOW's hidden layer: the context rows' mean (word2vec.c's; gensim's cbow_mean=1), or their sum, each context
    # row then getting 1/m of the update (gensim's cbow_mean=0). Skip-gram has none.
    cbow_mean: bool = True
    seed: int = 1  # every random stream is a function of (seed, epoch, corpus position): rank-count free
    # Corpus positions in one global step, shared out over the ranks. Every update of a step comes from the
    # same snapshot, so larger steps are cheaper but learn less per word, and past this default they lose
    # quality (`python -m hvd_w2v.bench.settings`, the --batch-words rows, and `python -m hvd_w2v.bench.quality
    # --hvd-option=--batch-words=N`; hvd_w2v/bench/README.md, "Designs measured and not kept").
    batch_words: int = 2048
    # Most frequent words replicated on every rank, their updates summed by a Horovod allreduce each step. Off:
    # that allreduce waits for a Horovod cycle every step, which costs far more than the bytes it saves
    # (`python -m hvd_w2v.bench.settings`, the --hot-rows row; hvd_w2v/bench/README.md, "The speed defaults").
    hot_rows: int = 0
    # A row's summed update in one step is scaled by min(1, cap / m) when it sums m SGD updates: a safety net
    # against the divergence of very frequent rows (a much higher cap diverged on the real corpus); low caps slow
    # frequent rows and cost quality (`python -m hvd_w2v.bench.settings`, the --update-cap rows; the figures
    # in hvd_w2v/bench/README.md, "Quality" and "The speed defaults").
    update_cap: float = 64.0
    span: int = 0  # raw positions scanned each side for context after subsampling (0: 4 * window)
    # Shard-local SGD (localsgd), when ``shards`` is 1 or more: the stream is cut into that many shards, each
    # running word2vec's sequential SGD over ``superstep`` consecutive positions of its own between exchanges,
    # and the vectors depend on (shards, superstep), never on the layout that hosts them. 0: the exact global
    # step of ``batch_words`` above. None (the default): chosen by the job's layout, :meth:`settled`.
    shards: Optional[int] = None
    superstep: Optional[int] = None  # positions of each shard per super-step (None: superstep_for)
    # A row's deltas, summed over the m shards that touched it in a super-step, are scaled by
    # min(1, merge_cap / m): 1 averages them (model averaging, as pWord2Vec's); 0 (no cap) adds them. The mean
    # and low caps lost quality wherever they were measured (hvd_w2v/bench/README.md, "Shard-local SGD's quality").
    merge_cap: float = 0.0
    # Then each row's merged delta (a vector of W_in or W_out) is scaled down to an L2 norm of at most
    # merge_clip (None: MERGE_CLIP; 0: not, the plain sum, which can diverge). Why it is always on:
    # the shards' deltas of a row are each computed from the same snapshot, so the sum of m of them is up to m
    # times one sequential SGD's step, and where many shards push a frequent row the same way it overshoots,
    # grows, and the next super-step's deltas grow with it. Clipped, a row moves at most merge_clip a super-step,
    # so no feedback can grow without bound, on any corpus, V, S or learning rate; rows that few shards touch
    # (nearly all of them) move by their sum, as sequential SGD would move them.
    merge_clip: Optional[float] = None
    # With shards and hot_rows: positions of each shard between the hot rows' merges inside a super-step
    # (hotsync: Horovod's allreduce of the hot block, one a sub-step). None, or the super-step's or more: one
    # merge at its end with the other rows (localsgd); settled keeps it only below the super-step.
    substep: Optional[int] = None
    # Local negatives (Stergiou et al., "Distributed negative sampling for word embeddings", AAAI 2017): with
    # shards, the noise words of shard v are drawn among the words of its noise group g, the ids congruent to g
    # modulo noise_groups, by the same count^ns_exponent weights; g is the rank that would host v on
    # noise_groups ranks (localsgd.noise_group). Rank r of P owns the ids congruent to r modulo P, so with
    # noise_groups = P every negative is a row of the rank's own: no byte of the exchange is spent on noise
    # words. Each shard's noise words learn at its group's weight (localsgd.noise_weights), so that each row's
    # expected update is one group's; the vectors depend on noise_groups, never on the layout. 1: every word,
    # word2vec's.
    noise_groups: int = 1
    # With noise groups, the most frequent words every shard draws as noise words (whatever its group): their
    # rows travel as any rows, but they are few and most super-steps touch them anyway, and without them a rare
    # word's few occurrences would meet the head's noise words in as few groups.
    noise_head: int = 1024
    # How a super-step's rows and deltas travel between ranks: "float32", or "bfloat16", half the bytes, each
    # rounded to about 3 significant digits (wire.py). The exact step's stay float32.
    wire: str = "float32"
    # The divergence guard (divergence.py): a run whose frequent rows grow past this L2 norm (or whose loss per
    # pair passes divergence.LOSS_FACTOR times its start) stops with an error, its last good checkpoint kept.
    max_row_norm: float = 100.0

    def __post_init__(self):
        # The command line and config files give each field its type; a Python caller may not (dim="100",
        # epochs=2.5, sg=1 as gensim spells it): refused by name, but for sg's 0 and 1, which mean False, True.
        for f in fields(self):
            value, option = getattr(self, f.name), "--" + f.name.replace("_", "-")
            kind = LEFT_TO_LAYOUT.get(f.type, f.type)
            if value is None and kind is not f.type:
                continue  # chosen by the layout (settled)
            if kind is bool and not isinstance(value, bool) and isinstance(value, numbers.Integral) \
                    and value in (0, 1):
                object.__setattr__(self, f.name, bool(value))
            elif kind is bool and not isinstance(value, bool):
                raise UserError(f"{f.name} must be True or False (or 1, 0), got {value!r}")
            elif kind is int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
                raise UserError(f"{option} ({f.name}=) must be a whole number, got {value!r}")
            elif kind is float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise UserError(f"{option} ({f.name}=) must be a number, got {value!r}")
        checks = [
            (1 <= self.dim <= 10000, f"--dim must be in 1..10000, got {self.dim}"),
            (1 <= self.window <= 100, f"--window must be in 1..100, got {self.window}"),
            (0 <= self.negative <= 100, f"--negative must be in 0..100, got {self.negative}"),
            (self.negative or self.hs, "--negative 0 trains no noise words: give --hs 1 (hierarchical softmax) "
                                       "with it"),
            (not (self.hs and self.negative), f"--hs 1 trains hierarchical softmax alone: give --negative 0 with it "
                                              f"(word2vec.c's both at once is not supported), got --negative "
                                              f"{self.negative}"),
            (-10 <= self.ns_exponent <= 10, f"--ns-exponent must be in -10..10, got {self.ns_exponent}"),
            (self.min_count >= 1, f"--min-count must be at least 1, got {self.min_count}"),
            (self.max_final_vocab >= 0,
             f"--max-final-vocab must be 0 (no limit) or more, got {self.max_final_vocab}"),
            (0 <= self.sample < 1, f"--sample must be in [0, 1), got {self.sample}"),
            (self.cbow_mean or not self.sg, "--cbow-mean 0 (cbow_mean=0) is CBOW's: give --cbow (sg=0) too"),
            (1 <= self.epochs <= 1000, f"--epochs must be in 1..1000, got {self.epochs}"),
            (0 < self.alpha <= 1, f"--alpha must be in (0, 1], got {self.alpha}"),
            (0 <= self.min_alpha <= self.alpha, f"--min-alpha must be in [0, alpha], got {self.min_alpha}"),
            (64 <= self.batch_words <= 1 << 24, f"--batch-words must be in 64..16777216, got {self.batch_words}"),
            (self.hot_rows >= 0, f"--hot-rows must be 0 or more, got {self.hot_rows}"),
            (self.update_cap >= 1, f"--update-cap must be at least 1, got {self.update_cap}"),
            (self.span == 0 or self.span >= self.window, f"--span must be 0 or at least --window, got {self.span}"),
            (self.shards is None or 0 <= self.shards <= 1 << 24,
             f"--shards must be 0 (the exact step), 1..16777216 or auto, got {self.shards}"),
            (self.superstep is None or 1 <= self.superstep <= 1 << 24,
             f"--superstep must be in 1..16777216 or auto, got {self.superstep}"),
            (self.substep is None or 1 <= self.substep <= 1 << 24,
             f"--substep must be in 1..16777216 or auto, got {self.substep}"),
            (self.merge_cap >= 0, f"--merge-cap must be 0 (no cap) or more, got {self.merge_cap}"),
            (self.merge_clip is None or self.merge_clip >= 0,
             f"--merge-clip must be 0 (no clip), more or auto, got {self.merge_clip}"),
            (self.max_row_norm > 0, f"--max-row-norm must be more than 0, got {self.max_row_norm}"),
            (self.wire in WIRES, f"--wire must be one of {', '.join(WIRES)}, got {self.wire!r}"),
            (1 <= self.noise_groups <= 1 << 24, f"--noise-groups must be in 1..16777216, got {self.noise_groups}"),
            (self.noise_head >= 0, f"--noise-head must be 0 or more, got {self.noise_head}"),
            (self.noise_groups == 1 or not self.hs,
             f"--noise-groups {self.noise_groups} groups noise words: hierarchical softmax (--hs 1) draws none"),
            (self.noise_groups == 1 or self.shards is None or self.noise_groups <= self.shards,
             f"--noise-groups {self.noise_groups} with --shards {self.shards}: a group's words are the noise "
             f"words of its shards alone, so every group needs a shard (give --shards {self.noise_groups} or "
             f"more)"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)

    @property
    def context_span(self):
        """How far (raw positions) a centre looks for its kept neighbours; fixed so results are rank-free."""
        return self.span or 4 * self.window

    @property
    def clip(self):
        """The shard merge's clip (localsgd.merge_rule): ``merge_clip``, MERGE_CLIP where it is left to None, so
        that a Config not settled by a job's layout still merges by the rule that cannot diverge."""
        return MERGE_CLIP if self.merge_clip is None else self.merge_clip

    @property
    def hot_inside(self):
        """Whether the hot rows merge inside the super-step (hotsync): shards, hot rows and a shorter substep."""
        return bool(self.shards and self.hot_rows and self.substep and self.superstep
                    and self.substep < self.superstep)

    def steps_per_epoch(self, n):
        """Global steps in an epoch of ``n`` positions: exact steps of ``batch_words``, or super-steps of
        ``superstep`` positions of every shard (the longest shard's, ceil(n / shards), sets the count)."""
        if self.shards:
            return -(-(-(-n // self.shards)) // self.superstep)
        return -(-n // self.batch_words)

    def settled(self, hosts, threads, previous=None):
        """This config with every field left to the layout (None) chosen: what `train` runs.

        ``hosts``, ``threads``: the job's host count and its compute threads (all ranks'). ``previous``: the
        config (a dict) of the run that a resume goes on with, whose choices are kept, so that a run resumed
        on another layout goes on with the same shards (its resume is exact on the same shards).

        The choice: on one host the exact step (``shards`` 0), whose vectors do not depend on the layout and
        which is as fast there; on several, a shard a thread (``shards = threads``): the exact step's exchange
        every 2,048 positions would leave a cluster idle. With shards, ``merge_clip`` is MERGE_CLIP, and a
        ``superstep`` left to the layout stays None until :meth:`sized` knows the corpus's size.
        """
        previous = previous or {}
        shards = self.shards
        if shards is None:
            shards = previous.get("shards") if previous.get("shards") is not None else threads if hosts > 1 else 0
        if not shards:
            if self.substep is not None:
                raise UserError("--substep is shard-local SGD's: the exact step merges the hot rows every step "
                                "(use --shards 1 or more)")
            if self.noise_groups != 1:
                raise UserError(f"--noise-groups {self.noise_groups} is shard-local SGD's: the exact step draws "
                                f"every noise word from the whole vocabulary (use --shards 1 or more)")
            if self.wire != "float32":
                raise UserError(f"--wire {self.wire} is shard-local SGD's: the exact step's rows travel as float32 "
                                f"(use --shards 1 or more)")
            return replace(self, shards=0)
        same = previous.get("shards") == shards  # the resumed run's other choices are kept with its shards

        def chosen(name, default):
            value = getattr(self, name)
            if value is None and same:
                value = previous.get(name)
            return default if value is None else value
        settled = replace(self, shards=shards, superstep=chosen("superstep", None), substep=chosen("substep", None),
                          merge_clip=chosen("merge_clip", MERGE_CLIP))
        if settled.substep is not None and not self.hot_rows:  # refused now, not once the corpus is counted
            raise UserError(f"--substep {settled.substep} merges the hot rows inside the super-step: give --hot-rows "
                            f"H too")
        return settled if settled.superstep is None else settled.sized(None)

    def sized(self, positions):
        """This settled config with its super-step chosen for an epoch of ``positions`` corpus positions (the
        kept words' occurrences), :func:`superstep_for`, where it was left to the layout; and ``substep`` None
        unless it is shorter than the super-step. The super-step's length is the same on every layout."""
        if not self.shards:
            return self
        superstep = self.superstep or superstep_for(self.shards, positions)
        substep = superstep if self.substep is None else self.substep
        return replace(self, superstep=superstep, substep=substep if substep < superstep else None)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def options(cls):
        """The fields' names: the keyword arguments Config, and so hvd_w2v.train, takes for them."""
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values):
        """The Config of a recorded dict (run.json's, a checkpoint's); ``max_vocab_size`` is max_final_vocab's
        former name."""
        values = {"max_final_vocab" if k == "max_vocab_size" else k: v for k, v in values.items()}
        known = set(cls.options())
        return cls(**{k: v for k, v in values.items() if k in known})
