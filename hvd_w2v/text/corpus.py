"""Text input: files split into byte ranges (one per rank), read in bounded, token-aligned blocks.

The token stream of the corpus does not depend on how it is split: a token belongs to the range that holds
its first byte, and each newline byte (and each file end without one) is one sentence end, wherever the cuts
fall. Tokens are runs of non-whitespace bytes (ASCII whitespace, as word2vec.c); text must be UTF-8.
Plain files are split anywhere; a gzip file cannot be sought, so it goes whole to the range holding its
first byte: a corpus of several .gz files is read by several ranks at once, one of a single .gz file by one.
The compiled passes read each block ahead (:func:`read_ahead`), which also inflates a .gz file's text, so that
reading overlaps their work: on a thread of their own, or where a rank reads several .gz files, on one
thread a file for as many files at once as the rank has threads (:func:`readers`), because inflating is
slower than the compiled passes' work on the text.
"""
import gzip
import os
import queue
import threading
from dataclasses import dataclass

from ..common.errors import UserError
from ..kernels import native

WHITESPACE = b" \t\n\r\x0b\x0c"
BLOCK_BYTES = 8 << 20  # text read per block: bounds the reader's memory


@dataclass(frozen=True)
class Piece:
    """Bytes ``[start, end)`` of ``path``: the tokens whose first byte lies there."""

    path: str
    start: int
    end: int
    size: int  # the whole file's size in bytes

    @property
    def gzipped(self):
        return self.path.endswith(".gz")


def files_of(paths):
    """The corpus files that ``paths`` name: a file as given; a folder's regular files, in name order, not its
    subfolders, its hidden files (names starting with ".") or its empty files. Returns ``(files, notes)``,
    ``notes`` a line on each folder. A folder that holds no such file is a UserError; a path that is neither
    is left for check_files to name."""
    files, notes = [], []
    for p in paths:
        if not os.path.isdir(p):
            files.append(p)
            continue
        try:
            names = sorted(os.listdir(p))
        except OSError as e:
            raise UserError(f"corpus folder cannot be listed: {p}: {e.strerror}") from None
        found = [os.path.join(p, n) for n in names if not n.startswith(".") and os.path.isfile(os.path.join(p, n))]
        sizes = {f: os.path.getsize(f) for f in found}  # one stat a file: folders may hold thousands
        kept = [f for f in found if sizes[f] > 0]
        if not kept:
            raise UserError(f"corpus folder {p} holds no non-empty file (its subfolders and hidden files are not "
                            f"read)")
        empty = len(found) - len(kept)
        notes.append(f"{p}: {len(kept):,} file{'s' if len(kept) > 1 else ''}, "
                     f"{sum(sizes.values()) / 2**20:,.1f} MiB" + (f" ({empty:,} empty left out)" if empty else ""))
        files += kept
    return files, notes


def check_files(paths):
    """Raise UserError unless every path is a readable, non-empty regular file."""
    if not paths:
        raise UserError("no corpus files given")
    for p in paths:
        if not os.path.exists(p):
            raise UserError(f"corpus file not found: {p}")
        if not os.path.isfile(p):
            raise UserError(f"corpus path is not a regular file: {p}")
        if not os.access(p, os.R_OK):
            raise UserError(f"corpus file is not readable: {p}")
        try:
            with open(p, "rb"):
                pass
        except OSError as e:
            raise UserError(f"corpus file cannot be opened: {p}: {e.strerror}") from None
        if os.path.getsize(p) == 0:
            raise UserError(f"corpus file is empty: {p}")


SAME_FILES = ("every host must see the corpus files at the same path, with the same contents (a filesystem "
              "every host sees, or the same copy on each)")


def check_shared(comm, paths):
    """Raise UserError on every rank unless every rank can read every corpus file and sees rank 0's sizes.

    Collective: every rank calls it with the same ``paths``. Each rank checks the files as
    :func:`check_files` does, compares their sizes with rank 0's (broadcast) and sends (its host, its message
    or None, its first file of another size or None) in one allgather: a rank receives the files' sizes once
    and a few values of each rank, never every rank's list of sizes (ranks x files: ten million numbers for
    1,024 ranks reading a folder of 10,000 files). Every rank then raises the same message. A file missing
    (or of another size) on some ranks only, such as on a host without the corpus, is named with the first
    such rank and its host: :func:`split` cuts the files where rank 0's sizes say, so every rank must read
    the same bytes.
    """
    import socket

    error, sizes = None, None
    try:
        check_files(paths)
        sizes = [os.path.getsize(p) for p in paths]
    except (UserError, OSError) as e:
        error = str(e)
    want = comm.broadcast(sizes)  # mpi4py: rank 0's sizes (None where rank 0 could not read them)
    other = None
    if sizes is not None and want is not None:
        other = next(((p, w, g) for p, w, g in zip(paths, want, sizes) if w != g), None)
    views = comm.allgather((socket.gethostname(), error, other))  # mpi4py: every rank's view, in rank order
    failed = [r for r, (_, e, _) in enumerate(views) if e]
    if failed and len(failed) == comm.size:
        raise UserError(views[0][1])  # alike on every rank (a missing file, a typo): the message alone
    if failed:
        r, s = failed[0], next(s for s in range(comm.size) if s not in failed)
        raise UserError(f"rank {r} (host {views[r][0]}): {views[r][1]}, but rank {s} (host {views[s][0]}) reads "
                        f"it; {SAME_FILES}")
    for r, (host, _, seen) in enumerate(views):
        if seen:
            p, want_size, got = seen
            raise UserError(f"corpus file {p} holds {want_size:,} bytes on rank 0 (host {views[0][0]}) but "
                            f"{got:,} on rank {r} (host {host}); {SAME_FILES}")


def split(paths, parts):
    """The pieces of each of ``parts`` ranges, cut at equal byte offsets of the files laid end to end."""
    sizes = [os.path.getsize(p) for p in paths]
    total = sum(sizes)
    cuts = [total * k // parts for k in range(parts + 1)]
    out = [[] for _ in range(parts)]
    offset = 0
    for path, size in zip(paths, sizes):
        if path.endswith(".gz"):
            owner = max(k for k in range(parts) if cuts[k] <= offset)
            out[owner].append(Piece(path, 0, size, size))
        else:
            for k in range(parts):
                lo, hi = max(cuts[k], offset), min(cuts[k + 1], offset + size)
                if lo < hi:
                    out[k].append(Piece(path, lo - offset, hi - offset, size))
        offset += size
    return out


def read_blocks(pieces, block_bytes=None, reading=None, threads=1):
    """Yield ``(text, file_end)`` blocks of whole tokens; ``file_end`` is True when a file ends the block.
    ``reading`` (a progress.Reading, or None) is told after each block how far into its file the reading is.

    ``block_bytes``: the text read at a time (default BLOCK_BYTES, looked up at each call: tests make it small).
    Raises UserError for binary (NUL bytes) or non-UTF-8 input, naming the file and byte offset: checked in
    text_kernel.cc on ``threads`` threads where it is built, else by Python's decoder (the same message).
    """
    check = _checker(threads)
    for piece in pieces:
        for block, file_end, position in _piece_blocks(piece, block_bytes, check):
            yield block, file_end
            if reading is not None:
                reading.at(piece, position)


def _piece_blocks(piece, block_bytes, check):
    """``(text, file_end, position)`` of ``piece``: read_blocks's blocks, with how far into the file (its
    compressed bytes for a .gz file) the reading is after each."""
    opener = gzip.open if piece.gzipped else open
    try:
        with opener(piece.path, "rb") as f:
            raw = f.fileobj if piece.gzipped else f  # the compressed file, whose bytes progress.Reading counts
            for block, file_end in _blocks(f, piece, block_bytes or BLOCK_BYTES, check):
                yield block, file_end, raw.tell()
    except (OSError, EOFError) as e:
        raise UserError(f"cannot read {piece.path}: {e}") from None


def _blocks(f, piece, block_bytes, check=None):
    pos = piece.start
    if pos > 0:
        f.seek(pos - 1)
        if f.read(1) not in WHITESPACE:  # mid-token: it belongs to the previous range
            pos += len(_until_whitespace(f))
    end = piece.end if not piece.gzipped else float("inf")
    f.seek(pos)
    while pos < end:
        block = f.read(int(min(block_bytes, end - pos)))
        if not block:
            break
        if block[-1] not in WHITESPACE:  # finish the token that straddles the cut
            block += _until_whitespace(f)
        (check or _check_text)(block, piece.path, pos)
        pos += len(block)
        yield block, False
    if piece.end >= piece.size:  # the range that holds the file's end closes its last sentence, once
        yield b"", True


def _until_whitespace(f, step=256):
    out = b""
    while True:
        at = f.tell()
        data = f.read(step)
        if not data:
            return out
        for i, byte in enumerate(data):
            if byte in WHITESPACE:
                f.seek(at + i)
                return out + data[:i]
        out += data


def _check_text(block, path, offset):
    nul = block.find(b"\0")
    if nul >= 0:
        raise UserError(f"{path} looks binary (NUL byte at offset {offset + nul}); give plain UTF-8 text")
    try:
        block.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (invalid byte at offset {offset + e.start})") from None


def _checker(threads):
    """corpus._check_text's test, compiled on ``threads`` threads where text_kernel.cc is built."""
    lib = native.text_kernel()
    if lib is None:
        return _check_text

    def check(block, path, offset):
        kind, at = native.check_text(lib, block, threads)
        if kind == 1:
            raise UserError(f"{path} looks binary (NUL byte at offset {offset + at}); give plain UTF-8 text")
        if kind == 2:
            raise UserError(f"{path} is not UTF-8 text (invalid byte at offset {offset + at})")
    return check


def readers(pieces, threads):
    """How many threads :func:`read_ahead` reads a rank's ``pieces`` on: one a .gz file, as many at once as
    the rank's ``threads``; one where they hold at most one .gz file. Why: inflating (zlib, about 200 MB/s of
    text a thread) is slower than the compiled passes' work on the text it gives, and a file is the least a
    gzip stream can be read from; a plain file's reading is a small share of that work. Each reader holds up
    to two blocks (memory.reading_bytes)."""
    return max(1, min(threads, sum(p.gzipped for p in pieces)))


def most_readers(paths, ranks, threads):
    """The most :func:`readers` any of ``ranks`` ranks of ``threads`` threads reads ``paths`` on (for the
    memory plan: every rank can tell, from the files' sizes alone)."""
    return max(readers(pieces, threads) for pieces in split(paths, ranks))


def read_ahead(pieces, readers=1, reading=None, block_bytes=None):
    """``(i, (text, file_end))``: read_blocks's blocks of ``pieces``, ``i`` the index of the piece each comes
    from, each read (and checked, on one thread) while the ones before it are used: the file's reading and a
    .gz file's inflating (both outside the GIL) overlap the caller's work (the compiled passes, also outside
    the GIL). ``readers`` threads read a piece each, taking the next unread one in order as each finishes:
    a piece's blocks come in order, and on one reader the pieces too; on more, the pieces' blocks come
    interleaved as they are read (a caller that needs the file order keeps each piece's results apart:
    encode). At most two blocks a reader are held, one handed over and one read. ``reading`` is told as each
    block is handed over.

    Bad input raises the error that reading the pieces in order would: a piece's error is raised once every
    piece before it is read to its end or to its own error, the first piece's in order."""
    check = _checker(1)
    team_size = max(1, min(readers, len(pieces)))
    ahead = queue.Queue(maxsize=team_size)  # (i, item, error): a block, a piece's end (item None) or its error
    stop = threading.Event()
    order = iter(range(len(pieces)))
    lock = threading.Lock()

    def put(entry):
        while not stop.is_set():
            try:
                ahead.put(entry, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce():
        while not stop.is_set():
            with lock:  # pieces are taken in order: every piece before one being read is taken already
                i = next(order, None)
            if i is None:
                return
            try:
                for item in _piece_blocks(pieces[i], block_bytes, check):
                    if not put((i, item, None)):
                        return
                put((i, None, None))
            except BaseException as e:  # noqa: B036 - handed to the consumer, raised there
                put((i, None, e))

    team = [threading.Thread(target=produce, daemon=True, name=f"hvd-w2v read-ahead {k}") for k in range(team_size)]
    for thread in team:
        thread.start()
    open_pieces, errors = set(range(len(pieces))), {}
    try:
        while True:
            if errors and not any(i < min(errors) for i in open_pieces):
                raise errors[min(errors)]
            if not open_pieces:
                return
            i, item, error = ahead.get()
            if item is None:
                open_pieces.discard(i)
                if error is not None:
                    errors[i] = error
                continue
            if errors and i > min(errors):
                continue  # read past an error: what the pieces before it still give is all that is used
            text, file_end, position = item
            yield i, (text, file_end)
            if reading is not None:
                reading.at(pieces[i], position)
    finally:
        stop.set()  # a reader stops within 0.1 s of waiting, or after the block it reads
        for thread in team:
            thread.join()


def sentences(block, file_end):
    """The token lists of a block: one per newline-ended piece; the last piece is open unless at file end.

    Returns ``(lists, closed)``: ``closed[i]`` says whether sentence ``i`` ends (newline or file end).
    """
    lines = block.split(b"\n")
    closed = [True] * (len(lines) - 1) + [file_end]
    return [line.split() for line in lines], closed
