"""The command line as a user meets it: --help, config files, encode, info, export from a checkpoint, analogy,
the progress bar or lines, TensorBoard scalars.

Commands that need ranks run through conftest.launch (bounded); info and the parser need none and run here.
"""
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import bounded
from conftest import LAUNCH, ROOT, launch
from hvd_w2v import cli, configfile
from hvd_w2v.synthetic import generate

COMMANDS = ["train", "vocab", "phrases", "encode", "export", "evaluate", "neighbors", "analogy", "info", "check",
            "plan"]
TIMEOUT = 120
# The progress line benchmarks parse when the output is not a terminal (hvd_w2v/common/progress.py).
LOG_LINE = re.compile(r"^train: +\d+\.\d%  epoch \d+/\d+  [\d,]+ words/s  loss \d+\.\d{4}  alpha \d\.\d{5}  "
                      r"eta [\d,]+ s(?:  slowest rank \d+ \+[\d,]+\.\d ms/step)?$", re.M)  # the lag: 2+ ranks


def hvd(*args):
    """``hvd-w2v ARGS`` in one process, without MPI (info, --help, errors found before the ranks start)."""
    return subprocess.run([sys.executable, "-m", "hvd_w2v.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "zipf.txt"
    generate(str(path), 40000, vocab=2000, pairs=20, first=20, seed=0)  # 1,075 words kept: not /2, /3
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """15,617 positions: 245 steps of 64, so two loss reports (loop.FIRST_REPORT = 200 steps, then the end, as
    the next report is at least training.MIN_REPORT_STEPS = 50 later) in one epoch."""
    path = tmp_path_factory.mktemp("small") / "small.txt"
    generate(str(path), 16000, vocab=1000, seed=2)
    return path


# -- help and config files -----------------------------------------------------------------------------------

def test_help_lists_every_command_with_help_and_examples():
    top = hvd("--help")
    assert top.returncode == 0, top.stderr
    listed = re.findall(r"^    (\w+)\b", top.stdout, re.M)
    assert listed == COMMANDS, top.stdout
    for name in COMMANDS:
        line = re.search(rf"^    {name}\s+(\S.*)$", top.stdout, re.M) or re.search(rf"^    {name}\n\s+(\S.*)$",
                                                                                    top.stdout, re.M)
        assert line and len(line.group(1)) > 10, f"{name} has no help text"
        sub = hvd(name, "--help")
        assert sub.returncode == 0, sub.stderr
        examples = sub.stdout.split("examples:\n", 1)
        assert len(examples) == 2 and f"hvd-w2v {name}" in examples[1], f"{name} --help has no examples:\n{sub.stdout}"
        if name != "check":
            assert "--config FILE" in sub.stdout


def test_version_is_the_package_s():
    """`hvd-w2v --version` prints the version setup.cfg installs, the one the package says."""
    import configparser

    import hvd_w2v

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    version = hvd("--version")
    assert version.returncode == 0 and version.stdout == f"hvd-w2v {cfg['metadata']['version']}\n", version
    assert hvd_w2v.__version__ == cfg["metadata"]["version"]


def parse(argv):
    """What main does: parse, apply --config, parse again."""
    p = cli.parser()
    args = p.parse_args(argv)
    if args.config:
        configfile.apply(p.commands, args.command, args.config)
        args = p.parse_args(argv)
    return args


def test_config_file_values_and_command_line_precedence(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('corpus = ["a.txt", "b.txt"]\nout = "runs/a"\nepochs = 3\ncbow = true\ntopn = 4\n'
                    'format = ["binary"]\n\n[train]\ndim = 16\nmin_count = 2\n\n[neighbors]\ntopn = 7\n')
    args = parse(["train", "--config", str(toml)])
    assert (args.corpus, args.out, args.epochs, args.dim, args.min_count, args.sg, args.format) == \
           (["a.txt", "b.txt"], "runs/a", 3, 16, 2, False, ["binary"])
    assert cli.config_from(args).epochs == 3
    args = parse(["train", "c.txt", "--config", str(toml), "--dim", "32", "--sg", "--format", "text", "--out", "x"])
    assert (args.corpus, args.dim, args.sg, args.format, args.out, args.epochs) == \
           (["c.txt"], 32, True, ["text"], "x", 3)  # the command line wins; the rest still from the file
    assert parse(["neighbors", "v.bin", "king", "--config", str(toml)]).topn == 7  # its table over the top level
    assert parse(["analogy", "v.bin", "a b c", "--config", str(toml)]).topn == 4  # shared key
    assert parse(["neighbors", "v.bin", "king", "--config", str(toml), "--topn", "2"]).topn == 2

    ini = tmp_path / "run.ini"
    ini.write_text("[hvd-w2v]\nout = runs/b\nepochs = 2\n\n[train]\ndim = 8\nquiet = yes\nformat = text binary\n"
                   "show =\n")
    args = parse(["train", "--config", str(ini), "--epochs", "4"])
    assert (args.out, args.epochs, args.dim, args.quiet, args.format, args.show) == \
           ("runs/b", 4, 8, True, ["text", "binary"], "")


@pytest.mark.parametrize("text, suffix, fragment", [
    ("dimm = 3\n", ".toml", "unknown key 'dimm' for any command (did you mean dim?)"),
    ("[neighbors]\ndim = 3\n", ".toml", "unknown key 'dim' for `hvd-w2v neighbors`"),
    ("[trian]\ndim = 3\n", ".toml", "[trian] names no command"),
    ('dim = "big"\n', ".toml", "dim: expected a whole number, not 'big'"),
    ("dim = 3 3\n", ".toml", "is not valid TOML"),
    ('format = ["pdf"]\n', ".toml", "'pdf' is not one of text, binary"),
    ("sg = true\ncbow = true\n", ".toml", "sg and cbow both set the same option"),
    ("[train]\nquiet = perhaps\n", ".ini", "quiet: expected true or false"),
    ("dim = 3\n", ".ini", "is not a valid INI file"),
], ids=["unknown", "other-command", "no-such-table", "type", "syntax", "choice", "conflict", "ini-bool",
        "ini-no-section"])
def test_a_bad_config_file_is_one_clear_error(tmp_path, text, suffix, fragment):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    result = hvd("train", "--config", path, "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"hvd-w2v: error: config file {path}"), result.stderr
    assert fragment in errors[0], errors[0]
    assert not (tmp_path / "out").exists()  # refused before anything was made


def test_encode_with_a_config_file_writes_the_vocabulary_and_ids(corpus, tmp_path):
    from collections import Counter

    from hvd_w2v.text.encode import TokenStream

    config = tmp_path / "enc.toml"
    config.write_text(f'corpus = ["{corpus}"]\nout = "{tmp_path / "enc"}"\nmin-count = 1000\n')
    result = launch(2, ["hvd-w2v", "encode", "--config", config, "--min-count", "7"], timeout=TIMEOUT)
    assert result.ok, result.output[-3000:]
    counts = Counter(open(corpus).read().split())
    vocab = [line.split() for line in open(tmp_path / "enc" / "vocab.txt")]
    assert {w: int(c) for w, c in vocab} == {w: c for w, c in counts.items() if c >= 7}  # 7 won over 1000
    ids = TokenStream(str(tmp_path / "enc" / "ids")).read(0, 1 << 30)
    index = {w: i for i, (w, _) in enumerate(vocab)}
    expected = []
    # Kept words' ids and -1 (encode.SENTENCE_END) after every newline and at the end of the file, which
    # closes a last, here empty, sentence after the final newline (corpus.sentences).
    for line in open(corpus).read().split("\n"):
        expected += [index[t] for t in line.split() if t in index] + [-1]
    assert ids.tolist() == expected
    assert not (tmp_path / "enc" / "vectors.bin").exists()
    # Nothing to export there: one clear error.
    result = launch(1, ["hvd-w2v", "export", tmp_path / "enc"], timeout=TIMEOUT)
    assert result.returncode == 2 and result.output.count("hvd-w2v: error:") == 1, result.output[-3000:]
    assert f"no checkpoint under {tmp_path / 'enc' / 'checkpoints'}" in result.output


# -- a run with checkpoints: info, export, queries on it -----------------------------------------------------

RUN_OPTIONS = ["--epochs", "2", "--batch-words", "1024", "--dim", "16", "--quiet", "--show", "", "--format",
               "binary", "--checkpoint-every", "1e-9",  # a checkpoint every 5 steps (checkpoint.POLL_STEPS)
               "--no-final-checkpoint"]  # so the newest is of an earlier step than the finished vectors
STEPS = 78  # 39,699 positions / 1,024, times 2 epochs


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    """A 2-rank run that wrote checkpoints as it went and finished (the last two kept: steps 70 and 75)."""
    out = tmp_path_factory.mktemp("run") / "out"
    result = launch(2, ["hvd-w2v", "train", corpus, "--out", out, *RUN_OPTIONS], timeout=TIMEOUT)
    assert result.ok, result.output[-3000:]
    assert sorted(os.listdir(out / "checkpoints")) == ["step-000000070", "step-000000075"]
    return out


def read_bin(path):
    """(words, float32[V, d]) of a binary word2vec file."""
    words, rows = [], []
    with open(path, "rb") as f:
        n, d = map(int, f.readline().split())
        for _ in range(n):
            word = b""
            while (c := f.read(1)) != b" ":
                word += c
            words.append(word.decode())
            rows.append(np.frombuffer(f.read(4 * d), "<f4"))
            assert f.read(1) == b"\n"
        assert f.read() == b""
    return words, np.array(rows)


def checkpoint_w_in(folder, vocab_size, ranks, dim):
    """W_in by word id, straight from the rows files: id i is row i // P of file i % P (checkpoint.py)."""
    w = np.empty((vocab_size, dim), np.float32)
    for r in range(ranks):
        w[r::ranks] = np.fromfile(folder / f"rows.{r:05d}.bin", "<f4").reshape(2, -1, dim)[0]
    return w


def test_a_corpus_folder_trains_as_its_files_in_name_order(corpus, tmp_path):
    """A folder stands for its regular files in name order, its empty and hidden files and its subfolders left
    out: the same vectors, byte for byte, as those files named one by one, and info names them. A folder with
    no such file is one clear error."""
    lines = open(corpus).read().splitlines(keepends=True)
    folder = tmp_path / "shards"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text("".join(lines[len(lines) // 2:]))  # written first: name order, not the disk's
    (folder / "a.txt").write_text("".join(lines[:len(lines) // 2]))
    (folder / "c.txt").write_text("")
    (folder / ".partial.txt").write_text("".join(lines))
    (folder / "sub" / "x.txt").write_text("".join(lines))
    common = ["--epochs", "1", "--dim", "16", "--show", "", "--format", "binary", "--quiet"]
    by_folder = launch(2, ["hvd-w2v", "train", folder, "--out", tmp_path / "folder", *common], timeout=TIMEOUT)
    assert by_folder.ok, by_folder.output[-3000:]
    assert f"corpus: {folder}: 2 files, " in by_folder.output and "(1 empty left out)" in by_folder.output
    by_files = launch(2, ["hvd-w2v", "train", folder / "a.txt", folder / "b.txt", "--out", tmp_path / "files",
                          *common], timeout=TIMEOUT)
    assert by_files.ok, by_files.output[-3000:]
    assert (tmp_path / "folder" / "vectors.bin").read_bytes() == (tmp_path / "files" / "vectors.bin").read_bytes()
    info = hvd("info", tmp_path / "folder")
    assert f"corpus: {folder / 'a.txt'}, {folder / 'b.txt'} (" in info.stdout, info.stdout
    (tmp_path / "none" / "sub").mkdir(parents=True)
    bad = launch(2, ["hvd-w2v", "train", tmp_path / "none", "--out", tmp_path / "bad", "--quiet"], timeout=TIMEOUT)
    assert bad.returncode == 2 and bad.output.count("hvd-w2v: error:") == 1, bad.output[-3000:]
    assert f"corpus folder {tmp_path / 'none'} holds no non-empty file" in bad.output


def test_info_describes_the_run_and_its_checkpoints(run):
    result = hvd("info", run, "--verify")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"run folder: {run}" in out
    assert f"state: finished, {STEPS} of {STEPS} steps on 2 ranks" in out
    assert re.search(r"^  state: .*, hvd-w2v \d+\.\d+\.\d+\)$", out, re.M), out  # the version that trained it
    assert "config: dim=16 window=5 negative=5 hs=False ns_exponent=0.75 min_count=5" in out and "epochs=2" in out
    assert "vocab.txt: 1,075 words" in out and "vectors.bin: 1,075 words x 16 dimensions" in out
    assert "checkpoints: 2 (newest first)" in out
    newest = out.index("checkpoint " + str(run / "checkpoints" / "step-000000075"))
    assert newest < out.index("checkpoint " + str(run / "checkpoints" / "step-000000070"))
    assert f"step 75 of {STEPS} (96.2%), written on 2 ranks" in out
    for r in (0, 1):
        size = os.path.getsize(run / "checkpoints" / "step-000000075" / f"rows.{r:05d}.bin")
        assert size == (538 if r == 0 else 537) * 2 * 16 * 4
        assert re.search(rf"rows\.0000{r}\.bin: {538 - r} rows, [\d.]+ KiB  sha256 OK", out), out
    assert out.rstrip().endswith("verify: all sha256 match")


def test_a_flipped_byte_is_found_by_info_and_passed_over_by_export(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run / "checkpoints", copy / "checkpoints")
    shutil.copy(run / "vocab.txt", copy / "vocab.txt")
    newest = copy / "checkpoints" / "step-000000075"
    rows = newest / "rows.00001.bin"
    data = bytearray(rows.read_bytes())
    data[100] ^= 1
    rows.write_bytes(bytes(data))

    result = hvd("info", newest, "--verify")
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"rows\.00001\.bin: 537 rows, [\d.]+ KiB  sha256 MISMATCH \(corrupt\)", result.stdout)
    assert re.search(r"rows\.00000\.bin: 538 rows, 67\.\d KiB  sha256 OK", result.stdout), result.stdout
    assert result.stdout.rstrip().endswith("verify: FAILED (see MISMATCH above)")
    assert hvd("info", newest).returncode == 0  # without --verify, sizes only: they match
    bad = hvd("info", tmp_path / "nothing-here")
    assert bad.returncode == 2 and bad.stderr.startswith("hvd-w2v: error: ") and "is not a folder" in bad.stderr

    # export passes over the damaged newest checkpoint to the one before, and refuses it when asked for it.
    result = launch(1, ["hvd-w2v", "export", copy, "--format", "binary"], timeout=TIMEOUT)
    assert result.ok, result.output[-3000:]
    assert f"load: skipping {newest}: rows.00001.bin does not match its sha256 in the manifest" in result.output
    words = [line.split()[0] for line in open(run / "vocab.txt")]
    assert np.array_equal(read_bin(copy / "vectors-step-70.bin")[1],
                          checkpoint_w_in(copy / "checkpoints" / "step-000000070", len(words), 2, 16))
    result = launch(1, ["hvd-w2v", "export", copy, "--step", "75"], timeout=TIMEOUT)
    assert result.returncode == 2 and result.output.count("hvd-w2v: error:") == 1, result.output[-3000:]
    assert f"hvd-w2v: error: checkpoint {newest} is damaged: rows.00001.bin does not match" in result.output
    assert not (copy / "vectors-step-75.txt").exists()


@pytest.fixture(scope="module")
def exports(run, tmp_path_factory):
    """The run's newest checkpoint exported on 1 and 3 ranks (it was written on 2): {ranks: folder}."""
    folders = {}
    for nranks in (1, 3):
        out = tmp_path_factory.mktemp(f"export{nranks}")
        result = launch(nranks, ["hvd-w2v", "export", run, "--out", out], timeout=TIMEOUT)
        assert result.ok, result.output[-3000:]
        assert f"load: checkpoint {run / 'checkpoints' / 'step-000000075'}: step 75 of {STEPS}, written on 2 " \
               f"ranks; 1,075 words of 16 dimensions" in result.output
        assert f"note: the run finished ({STEPS} steps); its final vectors are {run / 'vectors.bin'}" in result.output
        assert f"export: {out / 'vectors-step-75.bin'}" in result.output
        folders[nranks] = out
    return folders


def test_export_from_a_checkpoint_holds_its_rows_on_any_rank_count(run, exports, tmp_path):
    """The exported vectors are exactly the checkpoint's W_in rows, with vocab.txt's words in id order, whatever
    the rank count that reads the 2-rank checkpoint (1 and 3 here)."""
    words = [line.split()[0] for line in open(run / "vocab.txt")]
    expected = checkpoint_w_in(run / "checkpoints" / "step-000000075", len(words), 2, 16)
    for out in exports.values():
        got_words, got = read_bin(out / "vectors-step-75.bin")
        assert got_words == words
        assert np.array_equal(got, expected)
        text = (out / "vectors-step-75.txt").read_text().splitlines()
        assert text[0] == "1075 16" and [line.split()[0] for line in text[1:]] == words
        assert np.abs(np.array([line.split()[1:] for line in text[1:]], float) - expected).max() <= 5e-7
    for name in ("vectors-step-75.bin", "vectors-step-75.txt"):
        assert (exports[1] / name).read_bytes() == (exports[3] / name).read_bytes()
    # An older step on request, one format; its rows differ from the newest's (training went on).
    result = launch(2, ["hvd-w2v", "export", run, "--step", "70", "--format", "binary", "--out", tmp_path],
                    timeout=TIMEOUT)
    assert result.ok, result.output[-3000:]
    older = read_bin(tmp_path / "vectors-step-70.bin")[1]
    assert np.array_equal(older, checkpoint_w_in(run / "checkpoints" / "step-000000070", len(words), 2, 16))
    assert not np.array_equal(older, expected)
    assert sorted(os.listdir(tmp_path)) == ["vectors-step-70.bin"]


def test_queries_on_a_run_folder_equal_queries_on_its_export(run, exports):
    """analogy on the run folder (its newest checkpoint, read by 3 ranks from 2 files) prints what it prints on
    that checkpoint's exported word2vec file on 1 rank (neighbors and evaluate read models the same way)."""
    words = [line.split()[0] for line in open(run / "vocab.txt")][:6]
    outputs = []
    for model, nranks in ((run, 3), (exports[1] / "vectors-step-75.bin", 1)):
        result = launch(nranks, ["hvd-w2v", "analogy", model, " ".join(words[:3]), *words[3:6], "--topn", "4"],
                        timeout=TIMEOUT)
        assert result.ok, result.output[-3000:]
        # The answers by pattern, not by line: mpirun forwards stderr and stdout separately, and once an answer
        # landed inside the "load: " line, before its newline.
        outputs.append(re.findall(r"\w+ - \w+ \+ \w+: [^\n]*", result.output))
    assert outputs[0] == outputs[1] and len(outputs[0]) == 2, outputs
    assert all(re.match(r"^\w+ - \w+ \+ \w+: (\w+ -?\d\.\d\d, ){3}\w+ -?\d\.\d\d$", line) for line in outputs[0])


# -- analogy on hand-made vectors ----------------------------------------------------------------------------

def analogy_vectors(folder):
    """A word2vec text file of 47 words (not a multiple of 2 or 3) in which queen = king - man + woman and
    italy = france - paris + rome hold exactly for unit-length inputs; the rest are random distractors."""
    rng = np.random.default_rng(3)
    unit = lambda v: v / np.linalg.norm(v)  # noqa: E731
    vec = {w: unit(rng.normal(size=8)) for w in ["man", "woman", "king", "paris", "france", "rome"]}
    vec["queen"] = vec["king"] - vec["man"] + vec["woman"]
    vec["italy"] = vec["france"] - vec["paris"] + vec["rome"]
    for i in range(39):
        vec[f"d{i}"] = rng.normal(size=8)
    words = list(vec)
    order = [words[i] for i in rng.permutation(len(words))]
    path = folder / "hand.txt"
    path.write_text(f"{len(order)} 8\n" + "".join(f"{w} " + " ".join(f"{x:.6f}" for x in vec[w]) + "\n"
                                                 for w in order))
    return path


def parse_answers(output):
    """{query head: [(word, score)] or the not-in-the-vocabulary message} of analogy's output lines."""
    found = {}
    for line in output.splitlines():
        m = re.match(r"^(\w+ - \w+ \+ \w+): (.*)$", line)
        if m:
            found[m.group(1)] = m.group(2) if "not in the vocabulary" in m.group(2) else \
                [(w, float(x)) for w, x in (pair.split() for pair in m.group(2).split(", "))]
    return found


@pytest.mark.mpi(1, 3, timeout=TIMEOUT)
def test_analogy_on_hand_made_vectors(comm, nranks, tmp_path_factory, capsys):
    """The command on 1 and 3 ranks answers as gensim's most_similar / most_similar_cosmul do."""
    from gensim.models import KeyedVectors

    folder = comm.bcast(str(tmp_path_factory.mktemp("hand")) if comm.Get_rank() == 0 else None)
    if comm.Get_rank() == 0:
        analogy_vectors(Path(folder))
    comm.Barrier()
    path = f"{folder}/hand.txt"
    kv = KeyedVectors.load_word2vec_format(path, binary=False)
    for method, ask in (("3cosadd", kv.most_similar), ("3cosmul", kv.most_similar_cosmul)):
        assert cli.main(["analogy", path, "man king woman", "paris", "france", "rome", "man king nobody",
                         "--topn", "5", "--method", method]) == 0
        out = capsys.readouterr().out
        if comm.Get_rank() != 0:
            assert out == ""
            continue
        found = parse_answers(out)
        assert list(found) == ["king - man + woman", "france - paris + rome", "king - man + nobody"], out
        assert found["king - man + nobody"] == "not in the vocabulary: nobody"
        assert found["king - man + woman"][0][0] == "queen" and found["france - paris + rome"][0][0] == "italy"
        for head, (a, b, c) in (("king - man + woman", "man king woman".split()),
                                ("france - paris + rome", "paris france rome".split())):
            reference = ask(positive=[b, c], negative=[a], topn=5)
            assert [w for w, _ in found[head]] == [w for w, _ in reference], (method, found[head], reference)
            assert [x for _, x in found[head]] == [float(f"{x:.2f}") for _, x in reference]
        if method == "3cosadd":
            assert found["king - man + woman"][0] == ("queen", 1.0)  # b - a + c is queen's direction exactly


def test_analogy_wants_three_words_a_query():
    result = hvd("analogy", "x.bin", "man king woman", "paris")
    assert result.returncode == 2
    assert result.stderr.strip() == ("hvd-w2v: error: analogy queries are three words each, 'a b c' for "
                                     "b - a + c; got 4 words")


# -- progress and TensorBoard --------------------------------------------------------------------------------

class FakeComm:
    rank, size = 0, 1

    def allreduce(self, value, op="sum"):
        return value


def test_progress_lines_when_not_a_terminal_and_a_bar_on_one(monkeypatch):
    import io

    from hvd_w2v.common import progress

    monkeypatch.delenv(progress.TTY_ENV, raising=False)
    reports = [(s, s / 20) for s in range(20, 201, 20)]  # (step, seconds): a report every second of a 10 s run

    def feed(p):
        for step, seconds in reports:
            p.report(step, 0, 200, 1 + (step - 1) // 100, 2, 1_000_000, seconds, 2.5, 0.02, 0.1, 1000)

    out = io.StringIO()  # not a terminal
    feed(progress.Progress(FakeComm(), stream=out))
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines == ["train:  50.0%  epoch 1/2  100,000 words/s  loss 2.5000  alpha 0.02000  eta 5 s",  # at 5 s
                     "train: 100.0%  epoch 2/2  100,000 words/s  loss 2.5000  alpha 0.02000  eta 0 s"], lines
    assert all(LOG_LINE.match(line) for line in lines)

    master, slave = pty.openpty()  # a terminal: the bar, redrawn in place
    with open(slave, "w") as tty:
        assert progress.terminal_columns(tty) == 80  # a new pty has no size: 80 is assumed
        feed(progress.Progress(FakeComm(), stream=tty))
    drawn = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            drawn += os.read(master, 65536)
        except OSError:
            break
    os.close(master)
    draws = drawn.decode().replace("\r\n", "\n").split("\r")[1:]
    assert len(draws) == len(reports)  # one redraw a report (they are 1 s apart, more than DRAW_EVERY)
    assert all(len(d.rstrip("\n")) == 79 for d in draws)  # never wraps an 80-column terminal
    assert re.match(r"\[#+\.+\]  10\.0% 100k/1\.00M words 100k/s loss 2\.5000 lr 0\.02000 eta 0:09 *$", draws[0])
    assert re.match(r"\[#+\] 100\.0% 1\.00M/1\.00M words 100k/s loss 2\.5000 lr 0\.02000 eta 0:00 *\n$", draws[-1])
    assert all("\n" not in d for d in draws[:-1])  # in place: a newline only after the last


def run_in_pty(argv, timeout):
    """(exit code, output) of ``argv`` run with a pty as its terminal (stdin, stdout, stderr); killed with its
    process group after ``timeout`` s."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its own session, the pty its controlling terminal
        try:
            os.chdir(ROOT)
            os.environ.pop("HVD_W2V_TTY", None)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    output, deadline, hung = b"", time.monotonic() + timeout, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                hung = True
                break
            if select.select([fd], [], [], min(left, 1))[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: every process has closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
    finally:
        for _ in range(100):  # up to 10 s to exit after closing the terminal
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or hung:
                break
            time.sleep(0.1)
        if not done:
            os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert not hung, "hung:\n" + output.decode("utf-8", "replace")[-3000:]
    return os.waitstatus_to_exitcode(status), output.decode("utf-8", "replace")


def test_reading_progress_through_a_pass_over_the_corpus(tmp_path):
    """corpus.read_blocks tells progress.Reading where it is after each block: a line every `every` seconds,
    its percentage of this rank's bytes, plain and gzip, and nothing for a pass shorter than that."""
    import gzip

    from hvd_w2v.common import progress
    from hvd_w2v.text import corpus

    text = b"".join(b"w%d w%d w%d\n" % (i, i + 1, i + 2) for i in range(20000))
    (tmp_path / "a.txt").write_bytes(text)
    with gzip.open(tmp_path / "b.txt.gz", "wb") as f:
        f.write(text)
    pieces = corpus.split([str(tmp_path / "a.txt"), str(tmp_path / "b.txt.gz")], 1)[0]
    lines, now = [], [0.0]

    def clock():  # each look at the clock is one second later
        now[0] += 1
        return now[0]

    reading = progress.Reading("vocab", pieces, lines.append, every=2, clock=clock, threads=2)
    blocks = list(corpus.read_blocks(pieces, block_bytes=16 << 10, reading=reading))
    assert b"".join(b for b, _ in blocks) == text + text
    matches = [re.match(r"vocab: (\d+)% of rank 0's [\d.]+ KiB read, ([\d.]+) KiB/s per rank, ([\d.]+) KiB/s per "
                        r"thread, eta [\d,]+ s$", line) for line in lines]
    shares = [int(m.group(1)) for m in matches]
    # two threads: half the rank's speed each, within the rounding of three significant digits
    assert all(abs(float(m.group(2)) / 2 - float(m.group(3))) <= 0.05 * float(m.group(2)) for m in matches), lines
    assert len(shares) == len(blocks) // 2 and shares == sorted(shares) and shares[-1] == 100, lines
    assert shares[0] < 50 < shares[-2], lines  # the plain file is most of the bytes: its blocks come first
    quiet = []
    list(corpus.read_blocks(pieces, reading=progress.Reading("encode", pieces, quiet.append)))  # under 5 s
    assert quiet == []


def test_progress_bar_under_a_pty_through_mpi_launch(small, tmp_path):
    """mpi/launch sees a terminal and tells the rank (its own stderr is a pipe to mpirun): a bar is drawn,
    '\\r' without a newline, and no log line is printed for it."""
    code, text = run_in_pty([str(LAUNCH), "-n", "1", "--threads", "1", "hvd-w2v", "train", str(small), "--out",
                             str(tmp_path / "out"), "--epochs", "1", "--batch-words", "64", "--dim", "16", "--show",
                             "", "--format", "binary", "--checkpoint-every", "0"], TIMEOUT)
    assert code == 0, text[-3000:]
    assert "done: " in text, text[-3000:]
    bare = re.findall(r"\r(?!\n)([^\r\n]*)", text)  # the pty turns "\n" into "\r\n": those are not draws
    # Reports at steps 200 and 245 (the last, always drawn); the one at 200 only when 0.25 s have passed by then
    # (progress.DRAW_EVERY), which a fast machine may not reach.
    assert len(bare) in (1, 2) and all(len(d) == 79 for d in bare), bare
    assert "100.0%" in bare[-1] and re.search(r"\[#+\]", bare[-1])
    assert not LOG_LINE.search(text.replace("\r\n", "\n"))


def test_mpi_launch_gives_each_rank_its_thread_budget():
    """mpi/rank's budget on this host: all its cores without -n, shared among -n ranks, --threads when given;
    OpenMP waits passively only when a host's threads outnumber its cores (spinning there made such runs
    many times slower); a user's OMP_NUM_THREADS does not shrink the budget (nproc prints it when set)."""
    cores = len(os.sched_getaffinity(0))
    show = ["sh", "-c", 'echo "$HVD_W2V_THREADS $OMP_NUM_THREADS ${OMP_WAIT_POLICY:-spin}"']

    def budgets(*flags, env=None):
        r = subprocess.run([str(LAUNCH), *flags, *show], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **(env or {})})
        assert r.returncode == 0, r.stdout + r.stderr
        return sorted(r.stdout.split("\n")[:-1])

    assert budgets() == [f"{cores} {cores} spin"]
    assert budgets(env={"OMP_NUM_THREADS": "1"}) == [f"{cores} {cores} spin"]
    each = max(cores // 2, 1)
    assert budgets("-n", "2") == [f"{each} {each} {'passive' if cores < 2 else 'spin'}"] * 2
    assert budgets("-n", "2", "--threads", str(cores)) == [f"{cores} {cores} passive"] * 2
    assert budgets("-n", "1", "--threads", str(cores), env={"OMP_WAIT_POLICY": "active"}) == \
        [f"{cores} {cores} active"]


def test_a_rank_started_without_a_budget_says_what_its_cpus_could_do():
    """A script run alone (a job of one process, no mpi/launch) gets one thread; its layout line names the
    host's CPUs and how to use them, and says nothing once the budget is set, even to 1."""
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        pytest.skip("one CPU: one thread each uses it all")
    script = "from hvd_w2v.parallel import comm; print(comm.layout(comm.init())[1])"

    def layout(**env):
        clean = {k: v for k, v in os.environ.items() if k != "HVD_W2V_THREADS"}
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           env={**clean, **env}, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout.strip()

    host = os.uname().nodename
    assert layout() == (f"1 rank on 1 host ({host}: 0), 1 thread each; no thread budget was set, so {host}'s 1 "
                        f"rank uses 1 of its {cores} CPUs: --threads {cores} (threads={cores} in Python, or "
                        f"HVD_W2V_THREADS={cores}) uses them all, as mpi/launch does")
    assert layout(HVD_W2V_THREADS="1") == f"1 rank on 1 host ({host}: 0), 1 thread each"


def test_a_host_running_more_threads_than_cpus_says_so():
    """2 ranks x all the host's CPUs as threads each: the layout line names the host and the oversubscription;
    1 rank x the same threads does not."""
    cores = len(os.sched_getaffinity(0))
    script = ("from hvd_w2v.parallel import comm\nc = comm.init()\ntext = comm.layout(c)[1]\n"
              "if c.rank == 0:\n    print(text, flush=True)\n")
    host = os.uname().nodename

    def layout(ranks):
        r = bounded.run([str(LAUNCH), "-n", str(ranks), "--threads", str(cores), sys.executable, "-c", script],
                        TIMEOUT, cwd=ROOT)
        assert r.ok, r.output[-3000:]
        return [line for line in r.output.splitlines() if " on 1 host " in line]

    assert layout(2) == [f"2 ranks on 1 host ({host}: 0-1), {cores} thread{'s' if cores > 1 else ''} each; {host} "
                         f"runs {2 * cores} threads on {cores} CPUs (oversubscribed: its threads take turns, and "
                         f"each step waits for the slowest)"]
    assert layout(1) == [f"1 rank on 1 host ({host}: 0), {cores} thread{'s' if cores > 1 else ''} each"]


@pytest.mark.parametrize("how", [("--threads", "0"), ("--threads", "-2"), ("HVD_W2V_THREADS", "x"),
                                 ("HVD_W2V_THREADS", "0")], ids=["option-0", "option-negative", "env-word", "env-0"])
def test_a_bad_thread_budget_is_one_clear_error_before_anything_starts(small, tmp_path, how):
    """Through mpi/launch (its mpi/rank reads the variable first) and in one process: one line, exit 2, and no
    output folder made."""
    name, value = how
    args = ["hvd-w2v", "train", small, "--out", tmp_path / "out", "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != "HVD_W2V_THREADS"}
    if name.startswith("--"):
        args.append(f"{name}={value}")
    else:
        env[name] = value
    launched = bounded.run([str(LAUNCH), "-n", "2", *map(str, args)], TIMEOUT, env=env, cwd=ROOT)
    alone = subprocess.run([sys.executable, "-m", "hvd_w2v.cli", *map(str, args[1:])], cwd=ROOT,
                           capture_output=True, text=True, timeout=TIMEOUT, env=env)
    for code, output in ((launched.returncode, launched.output), (alone.returncode, alone.stdout + alone.stderr)):
        assert code == 2, output[-3000:]
        assert output.count("must be a whole number of at least 1") == 1 and "Traceback" not in output, output
    assert not (tmp_path / "out").exists()


def test_tensorboard_scalars_come_from_the_run(small, tmp_path):
    """2 ranks, 1 epoch of 64-position steps: reports at steps 200 and 245 (the last); the scalars read back
    equal the run's own figures (the last progress line's loss, the `done:` line's bytes, the learning-rate
    schedule). The output is a pipe, so the progress is the periodic log lines."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    board = tmp_path / "tb"
    result = launch(2, ["hvd-w2v", "train", small, "--out", tmp_path / "out", "--epochs", "1", "--batch-words",
                        "64", "--dim", "16", "--show", "", "--format", "binary", "--checkpoint-every", "0",
                        "--tensorboard", board], timeout=TIMEOUT)
    assert result.ok, result.output[-3000:]
    assert "\r" not in result.output
    lines = LOG_LINE.findall(result.output)
    assert lines and lines[-1].startswith("train: 100.0%  epoch 1/1  "), result.output[-3000:]
    done = re.search(r"^done: [\d,]+ words/s over [\d.]+ s; final loss (\d+\.\d{4}) per pair; exchange \d+% of "
                     r"step time and ([\d,]+) bytes sent per word", result.output, re.M)
    assert done, result.output[-3000:]

    events = EventAccumulator(str(board), size_guidance={"tensors": 0})
    events.Reload()
    tags = ["loss", "learning_rate", "words_per_second", "bytes_per_word", "exchange_share", "slowest_rank",
            "rank_lag_ms"]
    assert sorted(events.Tags()["tensors"]) == sorted(tags)
    series = {t: [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(t)] for t in tags}
    steps = [s for s, _ in series["loss"]]
    total = steps[-1]
    assert all([s for s, _ in series[t]] == steps for t in tags)
    positions = int(re.search(r"encode: ([\d,]+) positions", result.output).group(1).replace(",", ""))
    assert total == -(-positions // 64) == 245 and steps == [200, 245]  # the first report and the end
    final = {t: series[t][-1][1] for t in tags}
    last_report = float(re.search(r"loss (\d+\.\d{4})", lines[-1]).group(1))  # the done line's: the epoch's mean
    assert abs(final["loss"] - last_report) < 1e-4
    assert abs(final["bytes_per_word"] - float(done.group(2).replace(",", ""))) <= 0.5 + 1e-3 * final["bytes_per_word"]
    for step, lr in series["learning_rate"]:  # alpha of step `step` (1-based) decays linearly from 0.025
        assert abs(lr - max(1e-4, 0.025 - (0.025 - 1e-4) * (step - 1) / total)) < 1e-7
    assert all(v > 0 for _, v in series["words_per_second"])
    assert all(0 < v < 1 for _, v in series["exchange_share"])
    assert all(v in (0, 1) for _, v in series["slowest_rank"]) and all(v >= 0 for _, v in series["rank_lag_ms"])
    assert len(set(v for _, v in series["loss"])) == len(steps)  # a new figure at every report
