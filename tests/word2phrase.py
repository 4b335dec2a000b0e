"""word2vec.c's word2phrase.c ported to pure Python, for tests: :func:`phrase` returns the bytes word2phrase
writes for the same text and options. A reference to compare hvd-w2v phrases with, not product code; names
follow word2phrase.c's (tests/test_word2phrase_port.py runs the C program beside it).

What word2phrase does, quirks included (MAX_STRING is 60):

- ReadWord: only ' ', '\\t' and '\\n' separate words; '\\r' is dropped wherever it stands (inside a word too);
  a '\\n' is a token of its own; runs of separators give no empty words. A word keeps its first
  MAX_STRING - 2 = 58 bytes (``if (a >= MAX_STRING - 1) a--;`` keeps overwriting word[58], which ``word[a] =
  0`` then ends the word on), multibyte UTF-8 characters cut as bytes. A word is a C string: it ends at its
  first NUL byte. A token with no separator after it at the end of the file comes back with eof set: both
  passes stop there, so it is neither counted nor written.
- LearnVocabFromTrainFile: words and pairs in one table keyed by their string, a pair as ``last_word + "_" +
  word`` cut to MAX_STRING - 1 = 59 bytes (so a literal token "a_b" adds to the pair a b's count, and every
  pair after a 58-byte word is the one string "<58 bytes>_"). ``start`` is set to 0 by every word before
  ``if (start) continue;`` reads it: pairs are counted across line ends (a line's last word with the next
  line's first). The first word's last_word is uninitialised stack memory: built with gcc -O2 it holds the
  bytes of a stack address (gdb shows e.g. "\xc8\xe7\xff\xff\xff\x7f"), so the first pair is a string no
  text holds, counted once and never looked up; this port leaves it out. Taking last_word as empty instead
  would count "_<first word>" once more, which a literal token "_<first word>" would see (a test shows it).
- SortVocab: strings seen fewer than min_count times are dropped (see sort_vocab for its edge case).
- TrainModel: every word is written after '_' (joined to the word before) or ' ', every newline as '\\n', so
  each line starts with a space and runs of separators become one. A word joins the word before when both
  and their pair are in the table, the word before was not itself joined (pb = 0 after a join, so pa <
  min_count next: no chains of three) and the float32 score (pab - min_count) / pa / pb * train_words
  passes the threshold. After a newline last_word is "\\n", so the pair is never found: the first word of a
  line never joins; the first word of the text neither (li == -1).
"""
import numpy as np

MAX_STRING = 60
EOF = -1
SEPARATORS = (ord(" "), ord("\t"), ord("\n"))


class File:
    """A FILE* opened on bytes: fgetc_unlocked and ungetc."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def fgetc(self):
        if self.pos == len(self.data):
            return EOF
        self.pos += 1
        return self.data[self.pos - 1]

    def ungetc(self):
        self.pos -= 1


def read_word(fin):
    """ReadWord: (word, eof). ``word`` is b"\\n" for a newline; with eof set, callers drop it."""
    word = bytearray()  # word[0:a]
    while True:
        ch = fin.fgetc()
        if ch == EOF:
            return c_string(word), True
        if ch == 13:
            continue
        if ch in SEPARATORS:
            if word:
                if ch == ord("\n"):
                    fin.ungetc()
                break
            if ch == ord("\n"):
                return b"\n", False
            continue
        if len(word) < MAX_STRING - 2:  # `a--` past MAX_STRING - 1: later bytes land on word[58], then cut
            word.append(ch)
    return c_string(word), False


def c_string(word):
    """``word`` read as a C string: up to its first NUL."""
    return bytes(word).split(b"\0", 1)[0]


def tokens(data):
    """The tokens both passes see in ``data``, in order (ReadWord until eof)."""
    fin = File(data)
    while True:
        word, eof = read_word(fin)
        if eof:
            return
        yield word


def bigram(last_word, word):
    """The table's string of the pair ``last_word word``: ``bigram_word[MAX_STRING - 1] = 0``."""
    return (last_word + b"_" + word)[:MAX_STRING - 1]


def learn_vocab(data, min_count):
    """LearnVocabFromTrainFile: ({string: count} of words and pairs, kept by SortVocab; train_words)."""
    vocab = {b"</s>": 0}  # AddWordToVocab("</s>"): vocab[0], count 0 unless the text holds "</s>"
    train_words = 0
    last_word = None  # uninitialised in C: its pair with the first word is a string of stack bytes, left out
    for word in tokens(data):
        if word == b"\n":  # start = 1, reset by the next word before anything reads it
            continue
        train_words += 1
        vocab[word] = vocab.get(word, 0) + 1
        if last_word is not None:
            bigram_word = bigram(last_word, word)
            vocab[bigram_word] = vocab.get(bigram_word, 0) + 1
        last_word = word
        # ReduceVocab (drop strings seen min_reduce times or fewer, min_reduce + 1 each time) runs only past
        # vocab_hash_size * 0.7 = 350M strings: left out.
    return sort_vocab(vocab, min_count), train_words


def sort_vocab(vocab, min_count):
    """SortVocab: the strings seen min_count times or more.

    Its loop, over the table sorted by count (but vocab[0], "</s>"), does ``vocab_size--`` for each entry
    below min_count and frees the table's last entry, not that one: the entries below min_count are at the
    end, so the entries kept are those of min_count or more, as here, while some entry is below min_count
    besides vocab[0]. When none is (every string seen min_count times or more, which min_count 1 gives) and
    "</s>" is (count 0), vocab[0]'s decrement drops the last entry of the sorted table, one of the least
    frequent strings (the last one added among them, glibc's qsort being a stable merge sort): word2phrase
    then treats it as unseen, this port does not."""
    return {w: cn for w, cn in vocab.items() if cn >= min_count}


def train_model(data, min_count=5, threshold=100.0):
    """TrainModel: the output file's bytes."""
    vocab, train_words = learn_vocab(data, min_count)
    threshold = np.float32(threshold)  # real threshold = atof(...)
    out = bytearray()
    pa = pb = pab = 0
    li = None  # -1
    word = b""
    fin = File(data)
    while True:
        last_word = word
        word, eof = read_word(fin)
        if eof:
            break
        if word == b"\n":
            out += b"\n"
            continue
        oov = False
        i = vocab.get(word)  # SearchVocab: here the count, None for -1
        if i is None:
            oov = True  # pb keeps the value it had
        else:
            pb = i
        if li is None:
            oov = True
        li = i
        i = vocab.get(bigram(last_word, word))
        if i is None:
            oov = True
        else:
            pab = i
        if pa < min_count or pb < min_count:
            oov = True
        if oov:
            score = np.float32(0)
        else:  # C's order and conversions: long long to float, float divisions (pa = 0 with min_count 0: inf)
            with np.errstate(divide="ignore", invalid="ignore"):
                score = np.float32(pab - min_count) / np.float32(pa) / np.float32(pb) * np.float32(train_words)
        if score > threshold:
            out += b"_"
            pb = 0
        else:
            out += b" "
        out += word
        pa = pb
    return bytes(out)


def phrase(data: bytes, min_count=5, threshold=100.0) -> bytes:
    """What ``word2phrase -train IN -output OUT -min-count min_count -threshold threshold`` writes to OUT
    when IN holds ``data``."""
    return train_model(data, min_count, threshold)


def joins(data, out):
    """The pairs ``out`` (phrase's output for ``data``) joined: its '_' less those inside the words written."""
    return out.count(b"_") - sum(w.count(b"_") for w in tokens(data) if w != b"\n")
