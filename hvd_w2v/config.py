"""Training configuration: one frozen value, built once by the command line and passed explicitly."""
import numbers
from dataclasses import asdict, dataclass, fields

from .errors import UserError


@dataclass(frozen=True)
class Config:
    """word2vec hyper-parameters (gensim/word2vec.c defaults) and the distributed step's settings."""

    dim: int = 100  # embedding width (columns of W_in and W_out), 1..10000
    window: int = 5  # maximum distance between centre and context; the reduced window is drawn in [1, window]
    negative: int = 5  # noise words per centre, drawn from unigram^0.75; shared by the centre's whole window
    min_count: int = 5  # words seen fewer times are dropped from the vocabulary
    max_vocab_size: int = 0  # keep at most this many words, the most frequent (0: no limit); ties at the cut go
    sample: float = 1e-3  # subsampling threshold for frequent words (0: off), as word2vec.c
    epochs: int = 5
    alpha: float = 0.025  # learning rate at the start; decays linearly with global progress ...
    min_alpha: float = 0.0001  # ... to this at the end
    sg: bool = True  # skip-gram (True) or CBOW with mean of context (False)
    seed: int = 1  # every random stream is a function of (seed, epoch, corpus position): rank-count free
    # Corpus positions in one global step, shared out over the ranks. Every update of a step comes from the
    # same snapshot, so larger steps are cheaper but learn less per word: 4,096 and 8,192 lose quality that
    # 2,048 keeps (`python -m hvd_w2v.bench.settings`, the --batch-words rows, and `python -m
    # hvd_w2v.bench.quality --hvd-option=--batch-words=N`; hvd_w2v/bench/README.md).
    batch_words: int = 2048
    # Most frequent words replicated on every rank, their updates summed by a Horovod allreduce each step. Off:
    # that allreduce waits for a Horovod cycle every step, which costs far more than the bytes it saves
    # (`python -m hvd_w2v.bench.settings`, the --hot-rows row; hvd_w2v/bench/README.md, "Settings").
    hot_rows: int = 0
    # A row's summed update in one step is scaled by min(1, cap / m) when it sums m SGD updates: a safety net
    # against the divergence of very frequent rows (a cap of 1,024 diverged on the real corpus); low caps slow
    # frequent rows and cost quality (`python -m hvd_w2v.bench.settings`, the --update-cap rows; the figures
    # in hvd_w2v/bench/README.md, "Quality" and "Settings").
    update_cap: float = 64.0
    span: int = 0  # raw positions scanned each side for context after subsampling (0: 4 * window)
    # Shard-local SGD (localsgd), when ``shards`` is 1 or more: the stream is cut into that many shards, each
    # running word2vec's sequential SGD over ``superstep`` consecutive positions of its own between exchanges,
    # and the vectors depend on (shards, superstep), never on the layout that hosts them. 0: the exact global
    # step of ``batch_words`` above. hvd_w2v/bench/README.md, "Shard-local SGD", has the quality against both.
    shards: int = 0
    superstep: int = 4096  # positions of each shard per super-step
    # A row's deltas, summed over the m shards that touched it in a super-step, are scaled by
    # min(1, merge_cap / m): 1 averages them (model averaging, as pWord2Vec's); 0 (no cap) adds them, which
    # scored as the exact step where a super-step covers about 4,096 positions (2 and 64 shards), where the mean
    # and a cap of 2 lost; larger super-steps lost with every cap, and the sum diverged there (`python -m
    # hvd_w2v.bench.quality --variant ...`; hvd_w2v/bench/README.md, "Shard-local SGD").
    merge_cap: float = 0.0
    # Then each row's merged delta (a vector of W_in or W_out) is scaled down to an L2 norm of at most
    # merge_clip (0: not). The sum diverged past about 16k positions a super-step because a few rows' merged
    # deltas blow up; clipped at 0.5 it scored within 0.011 of the exact step at 64 shards of 256 positions, and
    # within 0.03 at 2,048 shards of 64 (hvd_w2v/bench/README.md, "Shard-local SGD").
    merge_clip: float = 0.0

    def __post_init__(self):
        # The command line and config files give each field its type; a Python caller may not (dim="100",
        # epochs=2.5, sg=1 as gensim spells it): refused by name, but for sg's 0 and 1, which mean False, True.
        for f in fields(self):
            value, option = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if f.type is bool and not isinstance(value, bool) and isinstance(value, numbers.Integral) \
                    and value in (0, 1):
                object.__setattr__(self, f.name, bool(value))
            elif f.type is bool and not isinstance(value, bool):
                raise UserError(f"{f.name} must be True or False (or 1, 0), got {value!r}")
            elif f.type is int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
                raise UserError(f"{option} ({f.name}=) must be a whole number, got {value!r}")
            elif f.type is float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise UserError(f"{option} ({f.name}=) must be a number, got {value!r}")
        checks = [
            (1 <= self.dim <= 10000, f"--dim must be in 1..10000, got {self.dim}"),
            (1 <= self.window <= 100, f"--window must be in 1..100, got {self.window}"),
            (1 <= self.negative <= 100, f"--negative must be in 1..100, got {self.negative}"),
            (self.min_count >= 1, f"--min-count must be at least 1, got {self.min_count}"),
            (self.max_vocab_size >= 0, f"--max-vocab-size must be 0 (no limit) or more, got {self.max_vocab_size}"),
            (0 <= self.sample < 1, f"--sample must be in [0, 1), got {self.sample}"),
            (1 <= self.epochs <= 1000, f"--epochs must be in 1..1000, got {self.epochs}"),
            (0 < self.alpha <= 1, f"--alpha must be in (0, 1], got {self.alpha}"),
            (0 <= self.min_alpha <= self.alpha, f"--min-alpha must be in [0, alpha], got {self.min_alpha}"),
            (64 <= self.batch_words <= 1 << 24, f"--batch-words must be in 64..16777216, got {self.batch_words}"),
            (self.hot_rows >= 0, f"--hot-rows must be 0 or more, got {self.hot_rows}"),
            (self.update_cap >= 1, f"--update-cap must be at least 1, got {self.update_cap}"),
            (self.span == 0 or self.span >= self.window, f"--span must be 0 or at least --window, got {self.span}"),
            (0 <= self.shards <= 1 << 24, f"--shards must be 0 (the exact step) or 1..16777216, got {self.shards}"),
            (1 <= self.superstep <= 1 << 24, f"--superstep must be in 1..16777216, got {self.superstep}"),
            (self.merge_cap >= 0, f"--merge-cap must be 0 (no cap) or more, got {self.merge_cap}"),
            (self.merge_clip >= 0, f"--merge-clip must be 0 (no clip) or more, got {self.merge_clip}"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)

    @property
    def context_span(self):
        """How far (raw positions) a centre looks for its kept neighbours; fixed so results are rank-free."""
        return self.span or 4 * self.window

    def steps_per_epoch(self, n):
        """Global steps in an epoch of ``n`` positions: exact steps of ``batch_words``, or super-steps of
        ``superstep`` positions of every shard (the longest shard's, ceil(n / shards), sets the count)."""
        if self.shards:
            return -(-(-(-n // self.shards)) // self.superstep)
        return -(-n // self.batch_words)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def options(cls):
        """The fields' names: the keyword arguments Config, and so hvd_w2v.train, takes for them."""
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values):
        known = set(cls.options())
        return cls(**{k: v for k, v in values.items() if k in known})
