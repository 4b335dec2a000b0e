"""Word-analogy and word-similarity evaluation of the sharded model, on any rank count, as gensim scores them.

Nothing gathers the matrix: the vectors of the test words travel to every rank (one dense sum), each rank
scores its own rows for a batch of questions, and the per-rank bests ((score, id, word) per question) are
merged by an allgather. Every function here is collective and returns the same result on every rank.

Matching gensim (``KeyedVectors.evaluate_word_analogies`` / ``evaluate_word_pairs``):
- words are compared case-insensitively by their upper-case form (:func:`hvd_w2v.vectors.fold`); a test word
  means the most frequent (lowest id) vocabulary word with that folded form;
- ``restrict``: questions with a word whose id is ``>= restrict`` are skipped (and counted), and only ids
  ``< restrict`` are candidate answers; the inputs a, b, c (any case variant) are never the answer;
- an answer is correct when its folded form is the expected word's.
Ties between candidates go to the lower id, so the result does not depend on the rank count.
"""
import numpy as np

from .errors import UserError
from .vectors import fold

BATCH = 256  # questions scored per round (same on every rank)
COSMUL_EPS = 1e-6  # Levy & Goldberg's epsilon, as gensim's most_similar_cosmul


def _read_lines(comm, path):
    """The lines of a UTF-8 text file on every rank; UserError on every rank when it cannot be read."""
    error, lines = None, []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        error = f"cannot read {path}: {e.strerror}"
    except UnicodeDecodeError:
        error = f"{path} is not UTF-8 text"
    comm.agree(error)
    return lines


def read_analogies(comm, path):
    """(section names, questions as (section index, a, b, c, d) folded) of a questions-words.txt file."""
    sections, questions, error = [], [], None
    for n, line in enumerate(_read_lines(comm, path), 1):
        if line.startswith(": "):
            sections.append(line[2:].strip())
            continue
        words = line.split()
        if len(words) != 4:
            continue  # as gensim: a line that is not 4 words is skipped
        if not sections:
            error = error or f"{path} line {n}: a question before the first ': section' line"
            continue
        questions.append((len(sections) - 1, *(fold(w) for w in words)))
    comm.agree(error)
    if not questions:
        comm.agree(f"{path} holds no analogy questions (': section' lines, then 'a b c d' lines)")
    return sections, questions


def _unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def analogies(vectors, path, restrict=30000, method="3cosadd"):
    """Accuracy on an analogy test set (a : b :: c : d, answer argmax over the candidates x).

    ``method`` "3cosadd": cos(x, b - a + c) of unit vectors (gensim's ``most_similar(positive=[b, c],
    negative=[a])``); "3cosmul": Levy & Goldberg 2014, cosines shifted to [0, 1]:
    ``(1+cos(x,b))/2 * (1+cos(x,c))/2 / ((1+cos(x,a))/2 + 1e-6)`` (gensim's ``most_similar_cosmul``).

    Returns, on every rank, ``{"sections": [(name, correct, total)], "correct", "total", "accuracy",
    "skipped", "questions"}``; skipped questions (a word outside the first ``restrict`` ids) are not in
    ``total``. Collective.
    """
    if method not in ("3cosadd", "3cosmul"):
        raise UserError(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
    comm, plan = vectors.comm, vectors.plan
    names, questions = read_analogies(comm, path)
    restrict = min(int(restrict), plan.vocab_size) if restrict else plan.vocab_size
    words = sorted({w for q in questions for w in q[1:]})
    ids = dict(zip(words, vectors.folded_ids(words)))
    valid = [q for q in questions if all(0 <= ids[w] < restrict for w in q[1:])]
    skipped = len(questions) - len(valid)

    # The unit vectors of every a, b, c on every rank: one dense sum in which each row has one owner.
    inputs = sorted({ids[w] for q in valid for w in q[1:4]})
    slot = {i: j for j, i in enumerate(inputs)}
    table = vectors.rows(inputs) if inputs else np.zeros((0, vectors.unit.shape[1]), np.float32)

    # This rank's candidates: its rows with id < restrict, a prefix of its local rows.
    mine = len(range(comm.rank, restrict, comm.size))
    cand = vectors.unit[:mine]
    keys, rows_of = vectors.folds
    correct = np.zeros(len(names), np.int64)
    total = np.zeros(len(names), np.int64)
    for start in range(0, len(valid), BATCH):
        batch = valid[start:start + BATCH]
        a, b, c = (table[[slot[ids[q[k]]] for q in batch]] for k in (1, 2, 3))
        if method == "3cosadd":
            scores = cand @ _unit(b + c - a).T  # [mine, batch]
        else:
            shift = lambda m: (1 + cand @ m.T) / 2  # noqa: E731
            scores = shift(b) * shift(c) / (shift(a) + COSMUL_EPS)
        for j, q in enumerate(batch):
            for w in q[1:4]:  # the inputs, in every case variant, are not answers
                hit = [k for k in rows_of.get(w, ()) if k < mine]
                scores[hit, j] = -np.inf
        if mine:
            best = np.argmax(scores, axis=0)  # first maximum: the lowest local row, so the lowest id
            top = scores[best, np.arange(len(batch))].astype(np.float64)
            local = (top, best * comm.size + comm.rank, [keys[k] for k in best])
        else:
            local = (np.full(len(batch), -np.inf), np.full(len(batch), -1), [None] * len(batch))
        parts = comm.allgather(local)
        for j, q in enumerate(batch):
            score, i, key = max(((p[0][j], -p[1][j], p[2][j]) for p in parts if p[1][j] >= 0 and
                                 np.isfinite(p[0][j])), default=(0, 0, None))
            total[q[0]] += 1
            correct[q[0]] += key == q[4]
    n_correct, n_total = int(correct.sum()), int(total.sum())
    return {"sections": [(name, int(c), int(t)) for name, c, t in zip(names, correct, total)],
            "correct": n_correct, "total": n_total, "accuracy": n_correct / n_total if n_total else 0.0,
            "skipped": skipped, "questions": len(questions)}


def read_pairs(comm, path):
    """(word1, word2, score) of a word-similarity file: tab- or whitespace-separated, '#' lines skipped."""
    pairs = []
    for line in _read_lines(comm, path):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) != 3:
            continue
        try:
            pairs.append((fold(fields[0].strip()), fold(fields[1].strip()), float(fields[2])))
        except ValueError:
            continue  # a header line such as "word1 word2 score"
    if not pairs:
        comm.agree(f"{path} holds no word pairs ('word1<TAB>word2<TAB>score' lines)")
    return pairs


def similarity(vectors, path, restrict=300000):
    """Spearman (and Pearson) correlation of the model's cosines with human scores on a word-pair file.

    Pairs with a word outside the first ``restrict`` ids (gensim's default, 300,000) are out of vocabulary:
    counted, left out. Returns, on every rank, ``{"spearman", "pearson", "pairs", "oov"}`` (``pairs`` used;
    the correlations are NaN when fewer than 2 pairs are known). Collective.
    """
    pairs = read_pairs(vectors.comm, path)
    restrict = min(int(restrict), vectors.plan.vocab_size) if restrict else vectors.plan.vocab_size
    words = sorted({w for p in pairs for w in p[:2]})
    ids = dict(zip(words, vectors.folded_ids(words)))
    known = [p for p in pairs if 0 <= ids[p[0]] < restrict and 0 <= ids[p[1]] < restrict]
    inputs = sorted({ids[w] for p in known for w in p[:2]})
    slot = {i: j for j, i in enumerate(inputs)}
    table = vectors.rows(inputs) if inputs else None
    model = [float(table[slot[ids[a]]] @ table[slot[ids[b]]]) for a, b, _ in known]
    gold = [s for _, _, s in known]
    nan = float("nan")
    spearman = _pearson(_ranks(gold), _ranks(model)) if len(known) > 1 else nan
    pearson = _pearson(gold, model) if len(known) > 1 else nan
    return {"spearman": spearman, "pearson": pearson, "pairs": len(known), "oov": len(pairs) - len(known)}


def _ranks(x):
    """1-based ranks, ties sharing their average rank (scipy.stats.rankdata's "average"; no scipy needed)."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    starts = np.flatnonzero(np.r_[True, x[order][1:] != x[order][:-1]])
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return ranks


def _pearson(x, y):
    """Pearson correlation (NaN when either side is constant); on ranks, Spearman's rho."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float(x @ y / denominator) if denominator > 0 else float("nan")
