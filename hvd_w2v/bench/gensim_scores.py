"""Score exported word2vec files with gensim's own evaluators (a cross-check, one process, not sharded).

    python -m hvd_w2v.bench.gensim_scores runs/default/vectors.bin [more.bin ...]

Prints, per file: analogy accuracy on questions-words.txt restricted to the 30,000 most frequent words (as
gensim's ``restrict_vocab``), and the Spearman correlation on WordSim353 and SimLex-999. The sets are the
ones `python -m hvd_w2v.realcorpus` puts in data/real/eval.
"""
import argparse
import os


def scores(path, eval_dir):
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(path, binary=path.endswith(".bin"))
    analogy = kv.evaluate_word_analogies(os.path.join(eval_dir, "questions-words.txt"), restrict_vocab=30000)[0]
    ws = kv.evaluate_word_pairs(os.path.join(eval_dir, "wordsim353.tsv"))[1][0]
    simlex = kv.evaluate_word_pairs(os.path.join(eval_dir, "simlex999.txt"))[1][0]
    return analogy, ws, simlex


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("vectors", nargs="+", help="word2vec files (.bin: binary, else text)")
    p.add_argument("--eval-dir", default=os.path.join("data", "real", "eval"))
    args = p.parse_args(argv)
    print(f"{'vectors':40} {'analogy':>8} {'ws353':>7} {'simlex':>7}")
    for path in args.vectors:
        a, ws, sl = scores(path, args.eval_dir)
        print(f"{path:40} {a:8.3f} {ws:7.3f} {sl:7.3f}")


if __name__ == "__main__":
    main()
