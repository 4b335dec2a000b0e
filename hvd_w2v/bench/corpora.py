"""Corpora unlike the real one, for checking that a default holds on more than one corpus.

    python -m hvd_w2v.bench.corpora docs data/docs/corpus.txt      # technical prose: the docstrings and
                                                                    # comments of the installed Python packages

``docs``: the English of the docstrings and comments of every ``.py`` file of the Python packages installed
beside hvd-w2v (TensorFlow, Keras, numpy, gensim, matplotlib, Horovod, ... from PyPI, none of the real corpus's
sources), lower-cased, a docstring or a run of comment lines a line, words of letters only (code is left out:
only docstrings and comments are read). Technical documentation, as the corpus on which shard-local SGD's
plain sum of deltas diverged: a smaller vocabulary than the real corpus's, in an order (package by package,
file by file) that puts like lines together. The synthetic Zipf corpus is ``python -m hvd_w2v.synthetic``.
"""
import argparse
import io
import os
import re
import sys
import sysconfig
import tokenize

WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
MIN_WORDS = 4  # a docstring or comment of fewer words (a parameter's name, a "noqa") is left out


def prose(source):
    """The docstrings and comment runs of Python ``source`` (a str), each as one lower-cased line of words."""
    out, comments = [], []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return out
    previous = None
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            comments.append(tok.string.lstrip("#"))
            continue
        if tok.type == tokenize.NL:  # a blank line, or the end of a comment's line: a comment run goes on
            continue
        if comments:
            out.append(" ".join(comments))
            comments = []
        statement = previous is None or previous.type in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT)
        if tok.type == tokenize.STRING and statement:  # a string that is a statement of its own: a docstring
            out.append(tok.string)
        previous = tok
    if comments:
        out.append(" ".join(comments))
    lines = []
    for text in out:
        words = WORD.findall(text.lower())
        if len(words) >= MIN_WORDS:
            lines.append(" ".join(words))
    return lines


def docs(out, root=None):
    """Write the ``docs`` corpus to ``out``: every ``.py`` file under ``root`` (default: this environment's
    site-packages) in path order. Returns (lines, tokens)."""
    root = root or sysconfig.get_paths()["purelib"]
    lines = tokens = 0
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            if os.path.basename(folder) in ("hvd_w2v", "tests", "test"):
                dirs[:] = []
                continue
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as src:
                    for line in prose(src.read()):
                        f.write(line + "\n")
                        lines += 1
                        tokens += line.count(" ") + 1
    os.replace(out + ".tmp", out)
    return lines, tokens


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["docs"])
    p.add_argument("out")
    args = p.parse_args(argv)
    lines, tokens = docs(args.out)
    print(f"{args.out}: {lines:,} lines, {tokens:,} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
