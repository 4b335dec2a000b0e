"""Training progress: on rank 0 a one-line bar redrawn in place on a terminal, or a log line every LOG_EVERY
seconds when the output is not a terminal (a file under sbatch, a pipe under pytest); and, with
``--tensorboard DIR``, TensorBoard scalars at every loss report.

Is the output a terminal? Progress goes to stderr, as every hvd-w2v log line. Under mpirun a rank's stderr is
a pipe to mpirun whatever mpirun's own output is (and its stdout a pty even when mpirun's output goes to a
file), so a rank cannot tell by itself: ``mpi/launch`` sets ``HVD_W2V_TTY`` to the width of the terminal its
own stderr is, or 0 when it is not one. Without that variable (a process started directly, or by srun),
stderr.isatty() decides.

The log line's format is parsed by benchmarks: ``train: {percent:5.1f}%  epoch e/E  {words/s:,.0f} words/s
loss ...  alpha ...  eta ... s`` (two spaces between fields); keep it as it is. On more than one rank one
field follows: ``slowest rank R +X ms/step``, how much longer per step the slowest rank worked (its time
outside the exchange) than the fastest since the report before: a rank that falls behind shows there long
before it stalls the job (hvd_w2v/parallel/watchdog.py).
"""
import os
import sys
import time

import numpy as np

from .wording import readable_bytes

LOG_EVERY = 5.0  # seconds between log lines when the output is not a terminal
BAR_MIN, BAR_MAX = 10, 30  # characters of the bar between its brackets
DRAW_EVERY = 0.25  # seconds between redraws of the bar at least (reports come about every training.REPORT_SECONDS)
TTY_ENV = "HVD_W2V_TTY"

_open_bar = None  # the stream whose last line is a bar not yet ended by a newline


def end_line():
    """End the line of a bar being redrawn, so that the next line printed starts on a line of its own.
    Called by comm.log before every log line."""
    global _open_bar
    if _open_bar is not None:
        _open_bar.write("\n")
        _open_bar.flush()
        _open_bar = None


def terminal_columns(stream):
    """Columns of the terminal ``stream`` reaches, 0 when it is not a terminal (see the module docstring)."""
    env = os.environ.get(TTY_ENV, "").strip()
    if env:
        try:
            return max(int(env), 0)
        except ValueError:
            return 0
    try:
        if not stream.isatty():
            return 0
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0
    return columns or 80  # a pty whose size was never set reports 0 columns


def _count(n):
    """Three significant digits: 434,812 -> '435k', 23,749 -> '23.7k', 15,216,678 -> '15.2M'."""
    for value, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if n >= value or unit == "":
            x = n / value
            return f"{x:.0f}{unit}" if x >= 100 or not unit else f"{x:.1f}{unit}" if x >= 10 else f"{x:.2f}{unit}"


def _clock(seconds):
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Reading:
    """Rank 0's progress through its share of a pass over the corpus (the vocabulary's count, the encoding),
    a line every ``every`` seconds (LOG_EVERY) through ``log``: ``{what}: 35% of rank 0's 6.1 GiB read,
    93 MiB/s per rank, 46 MiB/s per thread, eta 45 s``, ``threads`` the rank's (the compiled passes run on
    them all). Every rank reads an equal share of the bytes at about the same speed, so rank 0's share stands
    for the pass; it is measured alone, without a collective. A pass shorter than ``every`` prints nothing.
    Bytes are those of the files: a .gz file's compressed bytes.

    corpus.read_blocks and corpus.read_ahead call :meth:`at` after each block with the piece it comes from and
    the position in its file the reading has reached; pieces may be read several at once (corpus.readers).
    """

    def __init__(self, what, pieces, log, every=LOG_EVERY, clock=None, threads=1):
        self.what, self.log, self.every, self.threads = what, log, every, max(threads, 1)
        self.clock = clock or time.monotonic
        self.start = self.last = self.clock()
        self.total = sum(p.end - p.start for p in pieces)
        self.read = {}  # piece: its bytes read so far
        self.done = 0  # the sum of those

    def at(self, piece, position):
        read = min(max(position - piece.start, 0), piece.end - piece.start)
        self.done += read - self.read.get(piece, 0)
        self.read[piece] = read
        now = self.clock()
        if now - self.last < self.every or not self.total:
            return
        self.last = now
        done = min(self.done, self.total)
        rate = done / max(now - self.start, 1e-9)
        eta = (self.total - done) / rate if rate else 0
        self.log(f"{self.what}: {100 * done / self.total:.0f}% of rank 0's {readable_bytes(self.total)} read, "
                 f"{readable_bytes(rate)}/s per rank, {readable_bytes(rate / self.threads)}/s per thread, "
                 f"eta {eta:,.0f} s")


def slowest_lag(work, steps):
    """(the slowest rank, how many ms per step longer it worked than the fastest) from every rank's ``work``
    seconds over ``steps`` steps; None on one rank or without figures. Work is a rank's time outside the
    exchange: the ranks meet twice a step, so what the slowest works more, every other rank waits."""
    if work is None or len(work) < 2 or steps <= 0:
        return None
    work = np.asarray(work, np.float64)
    slowest = int(np.argmax(work))
    return slowest, 1000.0 * float(work[slowest] - work.min()) / steps


class Progress:
    """What loop.train calls at every loss report (every rank, same steps).

    ``display``: show progress on rank 0 (a bar or log lines, see the module docstring); ``tensorboard``: a
    folder for TensorBoard event files, written by rank 0 (the same value on every rank: with it, each report
    is collective). ``stream`` (default sys.stderr) and ``columns`` (default: :func:`terminal_columns`) are for
    tests.
    """

    def __init__(self, comm, display=True, tensorboard=None, stream=None, columns=None):
        self.comm = comm
        self.display = display and comm.rank == 0
        self.stream = stream or sys.stderr
        self.columns = (terminal_columns(self.stream) if columns is None else columns) if self.display else 0
        self.tensorboard = bool(tensorboard)
        self.writer = None
        if tensorboard and comm.rank == 0:
            import tensorflow as tf

            self.writer = tf.summary.create_file_writer(tensorboard)
        self.shown_at = 0.0  # run seconds at the last line or bar

    @classmethod
    def of(cls, comm, progress):
        """``progress`` itself when it is a Progress; a default one (display only) for ``progress=True``."""
        return progress if isinstance(progress, Progress) else cls(comm)

    def report(self, step, first, total_steps, epoch, epochs, words, seconds, loss, alpha, exchange_seconds,
               bytes_sent, work=None, steps=0):
        """After global step ``step`` (1-based) of ``total_steps``; this process started after step ``first``
        and has run ``seconds``. ``words``: raw corpus words over all epochs; ``loss``: mean per pair since the
        last report (all ranks); ``alpha``: the step's learning rate; ``exchange_seconds`` and ``bytes_sent``:
        this rank's exchange time and bytes sent to other ranks since it started; ``work``: every rank's
        seconds outside the exchange over the ``steps`` steps since the report before (rank order), for the
        slowest rank's lag. Collective when TensorBoard is on (one mpi4py allreduce of two numbers)."""
        last = step == total_steps
        lag = slowest_lag(work, steps)
        frac = step / total_steps
        ran = (step - first) / total_steps  # the part of the run this process trained
        done_words = words * ran
        rate = done_words / seconds if seconds > 0 else 0.0
        eta = seconds * (1 - frac) / ran
        if self.tensorboard:
            # mpi4py: every rank's bytes and exchange seconds, summed, so the figures are the job's.
            sent, exchange = self.comm.allreduce(np.array([bytes_sent, exchange_seconds], np.float64))
            if self.writer is not None:
                self._scalars(step, loss=loss, learning_rate=alpha, words_per_second=rate,
                              bytes_per_word=sent / max(done_words, 1),
                              exchange_share=exchange / self.comm.size / seconds if seconds > 0 else 0.0,
                              **({"slowest_rank": lag[0], "rank_lag_ms": lag[1]} if lag else {}))
                if last:
                    self.writer.close()
        if not self.display:
            return
        if self.columns:
            if last or seconds - self.shown_at >= DRAW_EVERY:
                self.shown_at = seconds
                self._draw(frac, [f"{_count(done_words)}/{_count(words * (1 - first / total_steps))} words",
                                  f"{_count(rate)}/s", f"loss {loss:.4f}", f"lr {alpha:.5f}", f"eta {_clock(eta)}"],
                           [f"epoch {epoch}/{epochs}", *([f"r{lag[0]} +{lag[1]:.1f}ms"] if lag else [])], last)
        elif last or seconds - self.shown_at >= LOG_EVERY:
            self.shown_at = seconds
            end_line()
            behind = f"  slowest rank {lag[0]} +{lag[1]:,.1f} ms/step" if lag else ""
            print(f"train: {100 * frac:5.1f}%  epoch {epoch}/{epochs}  {rate:,.0f} words/s  loss {loss:.4f}  "
                  f"alpha {alpha:.5f}  eta {eta:,.0f} s{behind}", file=self.stream, flush=True)

    def _draw(self, frac, fields, optional, last):
        """Redraw the bar line: ``\\r``, the bar, the percentage and ``fields``, then as many of ``optional`` as
        fit, padded to the terminal's width less one column (a line as wide as the terminal would wrap, and
        ``\\r`` would then return to the wrong line). A terminal too narrow for all ``fields`` cuts the line."""
        global _open_bar
        room = self.columns - 1
        text = " ".join([f"{100 * frac:5.1f}%", *fields])
        for field in optional:
            if len(text) + 1 + len(field) + len("[] ") + BAR_MIN <= room:
                text += " " + field
        width = min(BAR_MAX, room - len(text) - len("[] "))
        if width >= BAR_MIN:
            full = int(frac * width)
            text = f"[{'#' * full}{'.' * (width - full)}] {text}"
        line = text[:room].ljust(room)  # padded: overwrites a longer earlier line
        self.stream.write("\r" + line)
        _open_bar = self.stream
        if last:
            end_line()
        else:
            self.stream.flush()

    def _scalars(self, step, **values):
        import tensorflow as tf

        with self.writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
        self.writer.flush()  # readable while the run goes on (the default flushes every 2 minutes)
