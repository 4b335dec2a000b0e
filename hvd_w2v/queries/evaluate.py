"""Word-analogy and word-similarity evaluation of the sharded model, on any rank count, as gensim scores them.

Nothing gathers the matrix: the vectors of the test words travel to every rank (from their owners), each rank
scores its own rows for a batch of questions, and the per-rank bests ((score, id, word) per question) are
merged by an allgather. Every function here is collective and returns the same result on every rank.

Matching gensim (``KeyedVectors.evaluate_word_analogies`` / ``evaluate_word_pairs``):
- words are compared case-insensitively by their upper-case form (:func:`hvd_w2v.queries.vectors.fold`); a test word
  means the most frequent (lowest id) vocabulary word with that folded form (``case_insensitive=False``:
  words as written, each its own id);
- ``restrict``: questions with a word whose id is ``>= restrict`` are skipped (and counted), and only ids
  ``< restrict`` are candidate answers; the inputs a, b, c (any case variant) are never the answer;
- an answer is correct when its folded form is the expected word's.
Ties between candidates go to the lower id, so the result does not depend on the rank count.
"""
import math

import numpy as np

from ..common.errors import UserError
from .vectors import cosmul, fold, word_bytes, word_str

BATCH = 256  # questions scored per round (same on every rank)


def _read_lines(comm, path, encoding="utf-8", keepends=False):
    """The lines of a text file on every rank (``keepends``: split as Python's file iteration splits them,
    each with its line end, as gensim reads them); UserError on every rank when it cannot be read."""
    error, lines = None, []
    try:
        with open(path, encoding=encoding) as f:
            lines = f.readlines() if keepends else f.read().splitlines()
    except OSError as e:
        error = f"cannot read {path}: {e.strerror}"
    except UnicodeDecodeError:
        error = f"{path} is not {'UTF-8' if encoding.replace('-', '').lower() == 'utf8' else encoding} text"
    except LookupError:
        error = f"unknown text encoding {encoding!r} for {path}"
    comm.agree(error)
    return lines


def _key(case_insensitive):
    """A test word's vocabulary key: folded (:func:`fold`), or as written."""
    return fold if case_insensitive else (lambda w: w)


def _ids(vectors, words, case_insensitive):
    """The id of each test word (str; -1 when missing): the lowest id of its folded form, or its own."""
    if case_insensitive:
        return vectors.folded_ids(words)
    return vectors.ids([word_bytes(w) for w in words])


def malformed_note(malformed):
    """``(count, first line number)`` of a file's malformed lines as the results name them ("" for none)."""
    n, first = malformed
    return f"{n:,} malformed (first: line {first:,})" if n else ""


def read_analogies(comm, path, case_insensitive=True):
    """(section names, questions as (section index, a, b, c, d), malformed) of a questions-words.txt file;
    the words folded (:func:`fold`), or as written when not ``case_insensitive``. ``malformed``: (count,
    first line number) of the lines that are neither blank, ': section' nor four words, which are skipped
    (as gensim, which logs them) and counted, so that a test set with a format error does not silently score
    on fewer questions. UserError on every rank when no line is a question."""
    sections, questions, error, bad = [], [], None, []
    key = _key(case_insensitive)
    for n, line in enumerate(_read_lines(comm, path), 1):
        if line.startswith(": "):
            sections.append(line.lstrip(": ").strip())  # gensim's section name
            continue
        words = line.split()
        if len(words) != 4:
            if words:
                bad.append(n)
            continue
        if not sections:
            error = error or f"{path} line {n}: a question before the first ': section' line"
            continue
        questions.append((len(sections) - 1, *(key(w) for w in words)))
    comm.agree(error)
    malformed = (len(bad), bad[0] if bad else None)
    if not questions:
        note = f": {malformed_note(malformed)}" if bad else ""
        comm.agree(f"{path} holds no analogy questions (': section' lines, then 'a b c d' lines){note}")
    return sections, questions, malformed


def _unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def analogies(vectors, path, restrict=30000, method="3cosadd", case_insensitive=True, dummy4unknown=False):
    """Accuracy on an analogy test set (a : b :: c : d, answer argmax over the candidates x).

    ``method`` "3cosadd": cos(x, b - a + c) of unit vectors (gensim's ``most_similar(positive=[b, c],
    negative=[a])``); "3cosmul": Levy & Goldberg 2014, cosines shifted to [0, 1]:
    ``(1+cos(x,b))/2 * (1+cos(x,c))/2 / ((1+cos(x,a))/2 + 1e-6)`` (gensim's ``most_similar_cosmul``).
    ``case_insensitive`` False: words as written, only a, b and c themselves left out of the answers, an
    answer right when it is d exactly (gensim's). ``dummy4unknown``: a question with a word outside the first
    ``restrict`` ids counts as answered wrongly instead of being left out (gensim's).

    Returns, on every rank, ``{"sections": [(name, correct, total)], "correct", "total", "accuracy",
    "skipped", "malformed", "questions", "answers"}``; ``skipped`` counts the questions with a word outside
    the first ``restrict`` ids, which are not in ``total`` unless ``dummy4unknown``; ``malformed`` is
    (count, first line number) of the file's lines that are not questions (:func:`read_analogies`);
    ``answers`` lists per section gensim's ``{"section": name, "correct": [(a, b, c, d)], "incorrect":
    [...]}`` (words as compared: folded when ``case_insensitive``). Collective.
    """
    if method not in ("3cosadd", "3cosmul"):
        raise UserError(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
    comm, plan = vectors.comm, vectors.plan
    names, questions, malformed = read_analogies(comm, path, case_insensitive)
    restrict = min(int(restrict), plan.vocab_size) if restrict else plan.vocab_size
    words = sorted({w for q in questions for w in q[1:]})
    ids = dict(zip(words, _ids(vectors, words, case_insensitive)))
    known = [all(0 <= ids[w] < restrict for w in q[1:]) for q in questions]
    valid = [q for q, k in zip(questions, known) if k]
    skipped = len(questions) - len(valid)

    # The unit vectors of every a, b, c on every rank (their owners send them).
    inputs = sorted({ids[w] for q in valid for w in q[1:4]})
    slot = {i: j for j, i in enumerate(inputs)}
    table = vectors.rows(inputs)

    # This rank's candidates: its rows with id < restrict, a prefix of its local rows.
    mine = vectors.local_rows(0, restrict)
    n_mine = mine.stop
    if case_insensitive:
        keys, rows_of = vectors.folds
    else:
        keys = [word_str(w) for w in vectors.words[mine]]
        rows_of = {w: [plan.local_row(ids[w])] for w in words if ids[w] >= 0 and plan.owner(ids[w]) == comm.rank}
    right = {}  # question index in `valid` -> answered right
    for start in range(0, len(valid), BATCH):
        batch = valid[start:start + BATCH]
        a, b, c = (table[[slot[ids[q[k]]] for q in batch]] for k in (1, 2, 3))
        if method == "3cosadd":
            scores = vectors.cosines(_unit(b + c - a), mine)  # [n_mine, batch]
        else:
            scores = cosmul([vectors.cosines(b, mine), vectors.cosines(c, mine)], [vectors.cosines(a, mine)])
        for j, q in enumerate(batch):
            for w in q[1:4]:  # the inputs (case-insensitive: in every case variant) are not answers
                hit = [k for k in rows_of.get(w, ()) if k < n_mine]
                scores[hit, j] = -np.inf
        if n_mine:
            best = np.argmax(scores, axis=0)  # first maximum: the lowest local row, so the lowest id
            top = scores[best, np.arange(len(batch))].astype(np.float64)
            local = (top, best * comm.size + comm.rank, [keys[k] for k in best])
        else:
            local = (np.full(len(batch), -np.inf), np.full(len(batch), -1), [None] * len(batch))
        parts = comm.allgather(local)  # mpi4py: every rank's best candidate of each question, to every rank
        for j, q in enumerate(batch):
            score, i, key = max(((p[0][j], -p[1][j], p[2][j]) for p in parts if p[1][j] >= 0 and
                                 np.isfinite(p[0][j])), default=(0, 0, None))
            right[start + j] = key == q[4]
    answers = [{"section": name, "correct": [], "incorrect": []} for name in names]
    scored = iter(range(len(valid)))
    for q, k in zip(questions, known):
        if k or dummy4unknown:
            answers[q[0]]["correct" if k and right[next(scored)] else "incorrect"].append(tuple(q[1:]))
    sections = [(s["section"], len(s["correct"]), len(s["correct"]) + len(s["incorrect"])) for s in answers]
    n_correct, n_total = sum(s[1] for s in sections), sum(s[2] for s in sections)
    return {"sections": sections, "correct": n_correct, "total": n_total,
            "accuracy": n_correct / n_total if n_total else 0.0, "skipped": skipped, "malformed": malformed,
            "questions": len(questions), "answers": answers}


def read_pairs(comm, path, delimiter=None, encoding="utf-8", case_insensitive=True):
    """([(word1, word2, score)], malformed) of a word-similarity file, words folded (:func:`fold`) unless
    not ``case_insensitive``; '#' and blank lines skipped. ``malformed``: (count, first line number) of the
    other lines that are not a pair and a score, skipped (a first line whose score is not a number is a
    header, not counted). UserError on every rank when no line is a pair.

    ``delimiter`` None: tab- or whitespace-separated, fields stripped. A string: gensim's reading, each line
    (with its line end) split on it into exactly three fields, words kept as written, other lines skipped.
    """
    pairs, bad, seen = [], [], 0
    key = _key(case_insensitive)
    for n, line in enumerate(_read_lines(comm, path, encoding, keepends=delimiter is not None), 1):
        if not line.strip() or line.startswith("#"):
            continue
        seen += 1
        if delimiter is None:
            fields = [f.strip() for f in (line.split("\t") if "\t" in line else line.split())]
        else:
            fields = line.split(delimiter)
        try:
            if len(fields) != 3:
                raise ValueError
            pairs.append((key(fields[0]), key(fields[1]), float(fields[2])))
        except ValueError:
            if not (seen == 1 and len(fields) == 3):  # not a header line such as "word1 word2 score"
                bad.append(n)
    malformed = (len(bad), bad[0] if bad else None)
    if not pairs:
        note = f": {malformed_note(malformed)}" if bad else ""
        comm.agree(f"{path} holds no word pairs ('word1<TAB>word2<TAB>score' lines){note}")
    return pairs, malformed


def similarity(vectors, path, restrict=300000, delimiter=None, encoding="utf-8", case_insensitive=True,
               dummy4unknown=False):
    """Spearman (and Pearson) correlation of the model's cosines with human scores on a word-pair file.

    Pairs with a word outside the first ``restrict`` ids (gensim's default, 300,000) are out of vocabulary:
    counted, left out (``dummy4unknown``: kept with a model similarity of 0, as gensim). ``delimiter``,
    ``encoding``, ``case_insensitive``: :func:`read_pairs`. Returns, on every rank, ``{"spearman",
    "pearson", "spearman_pvalue", "pearson_pvalue", "pairs", "oov", "oov_ratio", "malformed"}``: ``pairs``
    used in the correlations, ``oov`` pairs out of vocabulary, ``oov_ratio`` their share in percent as gensim
    gives it, ``malformed`` (count, first line number) of the lines skipped (:func:`read_pairs`);
    the correlations are NaN when fewer than 2 pairs are used or one side is constant, p-values two-sided
    (:func:`correlation_pvalue`). Collective.
    """
    pairs, malformed = read_pairs(vectors.comm, path, delimiter, encoding, case_insensitive)
    restrict = min(int(restrict), vectors.plan.vocab_size) if restrict else vectors.plan.vocab_size
    words = sorted({w for p in pairs for w in p[:2]})
    ids = dict(zip(words, _ids(vectors, words, case_insensitive)))
    inside = [0 <= ids[a] < restrict and 0 <= ids[b] < restrict for a, b, _ in pairs]
    known = [p for p, k in zip(pairs, inside) if k]
    inputs = sorted({ids[w] for p in known for w in p[:2]})
    slot = {i: j for j, i in enumerate(inputs)}
    table = vectors.rows(inputs)
    model = iter([float(table[slot[ids[a]]] @ table[slot[ids[b]]]) for a, b, _ in known])
    used = [(s, next(model) if k else 0.0) for (_, _, s), k in zip(pairs, inside) if k or dummy4unknown]
    gold, model = [g for g, _ in used], [m for _, m in used]
    oov = len(pairs) - len(known)
    nan = float("nan")
    spearman = _pearson(_ranks(gold), _ranks(model)) if len(used) > 1 else nan
    pearson = _pearson(gold, model) if len(used) > 1 else nan
    # gensim's ratio: of the pairs used when the unknown ones are kept as dummies, else of all valid pairs.
    base = len(used) if dummy4unknown else len(pairs)
    return {"spearman": spearman, "pearson": pearson, "pairs": len(used), "oov": oov,
            "spearman_pvalue": correlation_pvalue(spearman, len(used), spearman=True),
            "pearson_pvalue": correlation_pvalue(pearson, len(used)),
            "oov_ratio": 100.0 * oov / base if base else nan, "malformed": malformed}


def correlation_pvalue(r, n, spearman=False):
    """Two-sided p-value of a correlation ``r`` of ``n`` pairs under no correlation, as scipy.stats'
    ``pearsonr`` and ``spearmanr`` give it (without scipy, which hvd-w2v does not require).

    Both use Student's t with n - 2 degrees of freedom, t = r sqrt((n - 2) / (1 - r^2)), whose two-sided tail
    is the regularized incomplete beta I_{1 - r^2}((n - 2) / 2, 1 / 2) (:func:`betainc`). As scipy: NaN for a
    NaN ``r`` or fewer than 2 pairs; with 2 pairs 1.0 for Pearson and NaN for Spearman.
    """
    if not n >= 2 or math.isnan(r):
        return float("nan")
    if n == 2:
        return float("nan") if spearman else 1.0
    x = max(0.0, 1.0 - r * r)
    return betainc((n - 2) / 2, 0.5, x)


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and x in [0, 1] (scipy.special's
    ``betainc``): a continued fraction evaluated by the modified Lentz method (Numerical Recipes 6.4),
    on the side of x where it converges fast. Its relative error is that of the log-gamma terms of the
    prefactor, so it grows with a and b (tests/test_keyedvectors.py holds it to scipy's within 1e-9 for
    a < 300, and the p-values of 30,000 pairs too)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a, b, x, tiny=1e-300, eps=1e-16, steps=100000):
    """The continued fraction of I_x(a, b) (Numerical Recipes' betacf); converges within about
    sqrt(max(a, b)) steps for x < (a + 1) / (a + b + 2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, steps):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            return h
    return h


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
