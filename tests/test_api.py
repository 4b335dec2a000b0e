"""The Python API (hvd_w2v.train, hvd_w2v.load) in a user's script launched on the ranks: the same run as the
command line with the same options, errors as exceptions of the package's type, and a job that ends when one
rank's script fails (the queries themselves are compared with gensim in tests/test_keyedvectors.py)."""
import textwrap

from conftest import launch
from hvd_w2v.synthetic import generate

TIMEOUT = 120

SCRIPT = """
import sys
import hvd_w2v

corpus, out = sys.argv[1], sys.argv[2]
try:
    hvd_w2v.train([corpus + ".missing"], out=out + "-bad")
except hvd_w2v.UserError as e:
    sys.stdout.write(f"caught: {str(e).split(':')[0]}\\n")  # one write: the ranks' lines do not interleave
for bad in ({"vector_size": 50}, {"min_cont": 3}, {"dim": "50"}):  # gensim's name, a typo, a type
    try:
        hvd_w2v.train([corpus], out=out + "-bad", **bad)
    except hvd_w2v.UserError as e:
        sys.stdout.write(f"caught: {e}\\n")
run = hvd_w2v.train(corpus, out=out, epochs=1, batch_words=512, quiet=True, format=["binary"])  # a path alone
kv = hvd_w2v.load(out)
word = kv.index_to_key[3]
assert (run.wv[word] == kv[word]).all()
assert run.wv.most_similar(word, topn=5) == kv.most_similar(word, topn=5)
rank = run.comm.rank
nearest = kv.most_similar(word, topn=1)[0][0]
sys.stdout.write(f"rank {rank}: {len(kv)} words, dim {kv.vector_size}, state {run.record['state']}, "
                 f"nearest {nearest!r}\\n")
sys.stdout.flush()
"""


def test_a_script_trains_as_the_command_line_does(tmp_path):
    corpus = tmp_path / "z.txt"
    generate(str(corpus), 30000, vocab=1500, seed=3)
    script = tmp_path / "my.py"
    script.write_text(textwrap.dedent(SCRIPT))
    api = launch(2, ["python", script, corpus, tmp_path / "api"], timeout=TIMEOUT)
    assert api.ok, api.output[-3000:]
    assert api.output.count("caught: corpus file not found") == 2, api.output[-3000:]  # on every rank
    for caught in ("train() has no option 'vector_size': hvd-w2v calls it 'dim'",
                   "train() has no option 'min_cont': did you mean 'min_count'?",
                   "--dim (dim=) must be a whole number, got '50'"):
        assert api.output.count(f"caught: {caught}") == 2, api.output[-3000:]
    lines = sorted(line for line in api.output.splitlines() if line.startswith("rank "))
    assert len(lines) == 2 and lines[0][8:] == lines[1][8:], lines  # the same answers on both ranks
    assert "state finished" in lines[0], lines
    cli = launch(2, ["hvd-w2v", "train", corpus, "--out", tmp_path / "cli", "--epochs", "1", "--batch-words", "512",
                     "--quiet", "--format", "binary", "--show", ""], timeout=TIMEOUT)
    assert cli.ok, cli.output[-3000:]
    assert (tmp_path / "api" / "vectors.bin").read_bytes() == (tmp_path / "cli" / "vectors.bin").read_bytes()


def test_an_exception_on_one_rank_ends_the_job(tmp_path):
    """Rank 1 raises while rank 0 waits in a collective: the job ends at once, naming the rank."""
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent("""
        import hvd_w2v.pipeline
        comm = hvd_w2v.pipeline.start()
        if comm.rank == 1:
            raise RuntimeError("a bug on rank 1")
        comm.barrier()
    """))
    result = launch(2, ["python", script], timeout=60)
    assert not result.hung and result.returncode != 0, result.output[-3000:]
    assert "[rank 1] RuntimeError: a bug on rank 1" in result.output, result.output[-3000:]
    assert result.seconds < 40, result  # not the stall watchdog's 120 s: MPI_Abort


def test_the_readme_example_runs(tmp_path):
    """README.md's Python API script, as written there, on 2 ranks: one line of answers, from rank 0."""
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API"):]
    script = section[section.index("```python\n") + 10:section.index("```\n", section.index("```python\n") + 10)]
    (tmp_path / "my.py").write_text(script)
    generate(str(tmp_path / "corpus.txt"), 20000, vocab=1000, seed=4)
    result = bounded_in(tmp_path, ["python", "my.py", "corpus.txt"])
    assert result.ok, result.output[-3000:]
    answers = [line for line in result.output.splitlines() if " 100 True [" in line]  # len, dim, in, kv[word]
    assert len(answers) == 1, result.output[-3000:]
    assert (tmp_path / "runs" / "mine" / "again.bin").stat().st_size > 0


def bounded_in(folder, args):
    """mpi/launch -n 2 ARGS with ``folder`` as the working directory (the README's relative paths)."""
    import os

    import bounded
    from conftest import LAUNCH

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return bounded.run([str(LAUNCH), "-n", "2", "--threads", "1", *args], TIMEOUT, env=env, cwd=folder)
