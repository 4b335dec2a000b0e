"""Bad input: one clear message, exit code 2, no traceback, no hang, and nothing saved before is lost."""
import os

import pytest

from conftest import launch
from hvd_w2v.synthetic import generate


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "zipf.txt"
    generate(str(path), 20000, vocab=1000, seed=1)
    return str(path)


def run(args, nranks=2, timeout=120):
    return launch(nranks, ["hvd-w2v", "train", "--epochs", "1", "--quiet", "--show", "", *args], timeout=timeout)


def assert_one_clear_error(result, fragment):
    assert not result.hung, "hung on bad input"
    assert result.returncode == 2, result.output[-2000:]
    errors = [line for line in result.output.splitlines() if line.startswith("hvd-w2v: error:")]
    assert len(errors) == 1, result.output[-2000:]
    assert fragment in errors[0], errors[0]
    assert "Traceback" not in result.output and "MPI_ABORT" not in result.output, result.output[-2000:]


def test_missing_file_keeps_earlier_results(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "vectors.bin").write_bytes(b"an earlier model")
    result = run([str(tmp_path / "nope.txt"), "--out", str(out)])
    assert_one_clear_error(result, "corpus file not found")
    assert (out / "vectors.bin").read_bytes() == b"an earlier model"


@pytest.mark.parametrize("content, fragment", [
    (b"", "is empty"),
    (b"  \n\t\n   \n", "holds no words"),
    (b"some text\x00\x01\x02 then binary", "looks binary"),
    ("caf\u00e9 ".encode("latin-1") * 100, "is not UTF-8"),
], ids=["empty", "whitespace-only", "binary", "latin-1"])
def test_unreadable_corpus(tmp_path, content, fragment):
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    assert_one_clear_error(run([str(path), "--out", str(tmp_path / "out")]), fragment)


def test_non_utf8_deep_in_the_second_rank_range(tmp_path, good):
    path = tmp_path / "corpus.txt"
    path.write_bytes(open(good, "rb").read() + b"\nbad \xff\xfe byte\n")
    assert_one_clear_error(run([str(path), "--out", str(tmp_path / "out")]), "is not UTF-8")


def test_too_few_words_for_the_ranks(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("alpha beta alpha beta alpha beta gamma\n" * 10)
    assert_one_clear_error(run([str(path), "--out", str(tmp_path / "out"), "--min-count", "11"], nranks=3),
                           "fewer than the 3 ranks")


@pytest.mark.parametrize("option, value, fragment", [
    ("--dim", "0", "--dim must be"),
    ("--dim", "1000000", "--dim must be"),
    ("--window", "0", "--window must be"),
    ("--window", "100000", "--window must be"),
    ("--epochs", "0", "--epochs must be"),
    ("--negative", "-1", "--negative must be"),
    ("--sample", "2", "--sample must be"),
])
def test_absurd_parameters(tmp_path, good, option, value, fragment):
    assert_one_clear_error(run([good, "--out", str(tmp_path / "out"), option, value]), fragment)


def test_output_folder_that_cannot_be_written(tmp_path, good):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert_one_clear_error(run([good, "--out", str(blocker / "out")]), "is not writable")


def test_one_long_line_without_newline_trains(tmp_path, good):
    path = tmp_path / "oneline.txt"
    path.write_bytes(open(good, "rb").read().replace(b"\n", b" ").rstrip())
    result = run([str(path), "--out", str(tmp_path / "out"), "--format", "binary"], nranks=3)
    assert result.ok, result.output[-2000:]
    assert os.path.getsize(tmp_path / "out" / "vectors.bin") > 0


@pytest.mark.parametrize("values, fragment", [
    ({"dim": "100"}, "--dim (dim=) must be a whole number, got '100'"),
    ({"epochs": 2.5}, "--epochs (epochs=) must be a whole number, got 2.5"),
    ({"alpha": True}, "--alpha (alpha=) must be a number, got True"),
    ({"sg": 2}, "sg must be True or False (or 1, 0), got 2"),
])
def test_python_values_of_the_wrong_type_are_refused_by_name(values, fragment):
    """What the command line's parser would refuse, from a Python caller (hvd_w2v.train's options): one
    message naming the option. gensim's sg=0 and sg=1 mean CBOW and skip-gram."""
    from hvd_w2v.common.config import Config
    from hvd_w2v.common.errors import UserError

    assert Config(sg=0).sg is False and Config(sg=1).sg is True
    with pytest.raises(UserError) as caught:
        Config(**values)
    assert str(caught.value) == fragment
