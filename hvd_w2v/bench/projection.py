"""The cluster projection checked against runs: two pretend hosts, each behind a link shaped to a rate, train
the exact step and the shard mode; the planners project the same layouts at the same rate and the latency
measured on the link; one table of both, side by side, with their ratios.

    python -m hvd_w2v.bench.projection                      # 150,000 lines; unshaped, 100, 300, 1,000, 3,000 Mb/s
    python -m hvd_w2v.bench.projection --rates 200 --no-unshaped --lines 5000 --modes shard

Run from the checkout, as root: the hosts are tests/pretend_hosts.py's with links (a network namespace each, a
veth into one bridge, ``tc``'s token bucket on both ends of a shaped one), each running 1 rank of --threads
threads. For each rate, on the hosts: a probe (mpi4py between the two ranks over Open MPI's TCP: the median
round trip of an 8-byte message, and the rate 8 MiB messages get), then one training run of each mode with
train's defaults (the exact step is ``--shards 0``; the shard mode is what train picks on several hosts), whose
run.json gives the words per second of its whole training loop (one job: its start-up left out, its first
super-steps in) and the bytes it sent a word. Then, here, the planners project each run's layout from the
run's own configuration: plan.py's model of the exact step (localplan.exact_plan) and localplan.project for
the shard mode, on a network of the rate (plan.Network.line: TCP's payload share of it; for the unshaped link
the probe's rate both ways at once, a payload rate) with half the probe's round trip as a message's latency,
their compute timed here as they always are. "ratio" is planned over run. With ``--cores`` each host runs on
a core of its own (tests/pretend_hosts.py --cores), as hosts do: without it the two hosts' ranks, and the TCP
their sends cost, share this machine's cores.

"sent MB/s" is what a rank sent a second over its run: a shaped link keeps it under the rate. (Over the
exchange's own seconds it can seem faster than the link: the loop prepares steps while the bytes travel, and those
seconds are not the exchange's.) "exch": the exchange's share of the loop's time, the run's (run.json's
exchange_share: its waits and an owner's work on the rows, the steps prepared meanwhile left out) and the
planner's as near as it models that: the shard mode's gather and scatter past the prepare, and the owner's rows;
the exact step's gather, scatter and allreduce (its owner's work is in its compute).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np

from ..common.config import Config
from . import ROOT, checkout_env

RATES = "100,300,1000,3000"  # Mb/s: the 0.1 to 3 Gb/s
MODES = ("exact", "shard")
HOSTS = os.path.join(ROOT, "tests", "pretend_hosts.py")
COLUMNS = ["link", "RTT us", "one way MB/s", "both ways MB/s", "mode", "V", "S", "run words/s", "planned words/s",
           "ratio", "run B/word", "planned B/word", "ratio ", "sent MB/s", "run exch", "planned exch"]


# -- on the hosts ---------------------------------------------------------------------------------------------

def probe(repeats=200, big=8 << 20, sends=8):
    """Rank 0 and 1 of MPI_COMM_WORLD: the median round trip (s) of an 8-byte message, after 20 not counted;
    the bytes/s of ``sends`` messages of ``big`` bytes from rank 0 to rank 1 (each answered by 8 bytes, one
    round trip taken off); and the bytes/s each way of as many exchanges of ``big`` bytes both ways at once
    (Sendrecv), as the training's exchanges move them. Rank 0 prints them as JSON."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    other, small, block = 1 - comm.rank, np.zeros(1), np.zeros(big // 8)
    times = []
    for _ in range(repeats + 20):
        t = time.perf_counter()
        if comm.rank == 0:
            comm.Send(small, other), comm.Recv(small, other)
        else:
            comm.Recv(small, other), comm.Send(small, other)
        times.append(time.perf_counter() - t)
    rtt = statistics.median(times[20:])
    rates = []
    for _ in range(sends + 1):  # the first one sets the connection's buffers up: left out
        comm.Barrier()
        t = time.perf_counter()
        if comm.rank == 0:
            comm.Send(block, other), comm.Recv(small, other)
        else:
            comm.Recv(block, other), comm.Send(small, other)
        rates.append(big / max(time.perf_counter() - t - rtt, 1e-9))
    both, back = [], np.zeros_like(block)
    for _ in range(sends + 1):
        comm.Barrier()
        t = time.perf_counter()
        comm.Sendrecv(block, other, recvbuf=back, source=other)
        both.append(big / (time.perf_counter() - t))
    both = comm.allreduce(statistics.median(both[1:]), MPI.MIN)
    if comm.rank == 0:
        print(json.dumps(dict(rtt=rtt, rate=statistics.median(rates[1:]), both=both)), flush=True)


def launch(hostfile, threads, command, timeout):
    """``command`` on one rank a host of ``hostfile`` (mpi/launch), bounded: its stdout, or SystemExit."""
    args = [os.path.join(ROOT, "mpi", "launch"), "-n", "2", "--hostfile", hostfile, "--threads", str(threads),
            "--timeout", str(timeout), *command]
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=checkout_env())
    if out.returncode:
        raise SystemExit(f"projection: {' '.join(command[:3])} failed on the pretend hosts:\n"
                         f"{(out.stdout + out.stderr)[-3000:]}")
    return out.stdout


def cell(hostfile, corpus, modes, epochs, threads, out, timeout):
    """On the first pretend host: the probe, then a run of each mode; one JSON line of their figures."""
    found = dict(probe=json.loads(launch(hostfile, 1, [sys.executable, "-m", "hvd_w2v.bench.projection", "--probe"],
                                         timeout).strip().splitlines()[-1]), runs={})
    for mode in modes:
        folder = os.path.join(out, mode)
        launch(hostfile, threads, ["hvd-w2v", "train", corpus, "--out", folder, "--epochs", str(epochs), "--format",
                                   "binary", "--show", "", "--quiet", "--overwrite",
                                   *(["--shards", "0"] if mode == "exact" else [])], timeout)
        with open(os.path.join(folder, "run.json")) as f:
            run = json.load(f)
        found["runs"][mode] = {k: run[k] for k in ("config", "ranks", "seconds", "words_per_second",
                                                   "bytes_per_word", "exchange_share")}
    print(json.dumps(found), flush=True)


# -- here -----------------------------------------------------------------------------------------------------

def on_hosts(rate, corpus, args):
    """One cell of the table: the pretend hosts with links at ``rate`` Mb/s (None: not shaped) run :func:`cell`;
    its figures."""
    folder = os.path.join(args.out, f"rate-{rate or 'unshaped'}")
    command = [sys.executable, HOSTS, "--hosts", "2", "--links", *(["--rate", f"{rate:g}"] if rate else []),
               *(["--cores"] if args.cores else []), "--",
               sys.executable, "-m", "hvd_w2v.bench.projection", "--cell", "HOSTFILE", "--corpus", corpus,
               "--modes", ",".join(args.modes), "--epochs", str(args.epochs), "--threads", str(args.threads),
               "--out", folder, "--timeout", str(args.timeout)]
    hosts = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env=checkout_env())
    try:
        out, err = hosts.communicate(timeout=args.timeout * (1 + len(args.modes)) + 60)
    except subprocess.TimeoutExpired:
        hosts.terminate()  # pretend_hosts ends its hosts on SIGTERM (a SIGKILL would leave them running)
        hosts.communicate(timeout=60)
        raise SystemExit(f"projection: the pretend hosts at {rate or 'unshaped'} did not finish in time")
    if hosts.returncode:
        raise SystemExit(f"projection: the pretend hosts at {rate or 'unshaped'} failed:\n{(out + err)[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def run_config(run):
    """The Config a run trained with (its run.json's ``config``)."""
    return Config.from_dict(run["config"])


class Planners:
    """The two planners on one corpus, their compute measured here once per configuration (lazily)."""

    def __init__(self, corpus_path, cfg, say):
        from ..planning import plan

        self.corpus = plan.open_corpus([corpus_path], cfg, say)
        self.measured = {}

    def close(self):
        if self.corpus.folder is not None:
            self.corpus.folder.cleanup()

    def exact(self, cfg, ranks, threads, network):
        """plan.py's projection of the exact step: (words/s, bytes sent a word, all ranks; the exchange's share
        of the step)."""
        from ..planning import localplan

        key = ("exact", cfg)
        if key not in self.measured:
            self.measured[key] = localplan.measure_exact(self.corpus, cfg)
        compute, around = self.measured[key]
        row = localplan.exact_plan(self.corpus, cfg, ranks, threads, network, compute, 5, around)
        return row.words_per_second, row.bytes_per_word, (row.gather + row.scatter + row.reduce) / row.step

    def shard(self, cfg, ranks, threads, network, samples=2):
        """localplan's projection of the shard mode at the run's V = ranks x threads and S: (words/s, B/word; the
        exchange's share of the super-step, as the run counts it: see the module's docstring)."""
        from ..planning import localplan

        c = replace(cfg, shards=1)  # localplan's nodes host a shard a thread
        key = ("shard", c, ranks)
        if key not in self.measured:
            self.measured[key] = (localplan.measure_thread(self.corpus, c)[0],
                                  localplan.measure_prepare(self.corpus, c, threads, threads)[0],
                                  localplan.measure_owner(self.corpus, c, ranks, threads, range(samples), threads)[0])
        per_position, prepare, rows = self.measured[key]
        r = localplan.project(self.corpus, c, ranks, threads, cfg.hot_rows, network, per_position, range(samples),
                              (prepare, rows))
        exchange = max(0.0, r["gather"] + r["scatter"] - prepare) + r["reduce"] + rows  # as the run counts it
        return r["words"], r["bytes_per_word"], exchange / r["step"]


def table(cells, corpus, say):
    """The rows of the table: each cell's runs beside the planners' projections of them."""
    from ..planning import plan

    rows, planners = [], None
    try:
        for rate, found in cells:
            probe = found["probe"]
            rtt = probe["rtt"]
            network = plan.Network.line(rate * 1e6, rtt / 2) if rate else plan.Network(probe["both"], rtt / 2)
            for mode, run in found["runs"].items():
                cfg = run_config(run)
                threads = max(1, cfg.shards // run["ranks"]) if mode == "shard" else 1
                if planners is None:
                    planners = Planners(corpus, cfg, say)
                planned = (planners.shard(cfg, run["ranks"], threads, network) if mode == "shard"
                           else planners.exact(cfg, run["ranks"], threads, network))
                words = run["words_per_second"]
                sent = run["bytes_per_word"] * words / run["ranks"]  # a rank's bytes a second, over the run
                rows.append([f"{rate:g} Mb/s" if rate else "unshaped", f"{rtt * 1e6:,.0f}",
                             f"{probe['rate'] / 1e6:,.0f}", f"{probe['both'] / 1e6:,.0f}", mode, f"{cfg.shards or 0:,}",
                             f"{cfg.superstep:,}" if mode == "shard" else "-",
                             f"{words:,.0f}", f"{planned[0]:,.0f}", f"{planned[0] / words:.2f}",
                             f"{run['bytes_per_word']:,.1f}", f"{planned[1]:,.1f}",
                             f"{planned[1] / run['bytes_per_word']:.3f}" if run["bytes_per_word"] else "-",
                             f"{sent / 1e6:,.1f}", f"{run['exchange_share']:.0%}", f"{planned[2]:.0%}"])
    finally:
        if planners is not None:
            planners.close()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m hvd_w2v.bench.projection", description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=os.path.join(ROOT, "data", "real", "corpus.txt"))
    p.add_argument("--lines", type=int, default=150_000, help="the corpus's first LINES lines, 0: all (default: "
                                                              "%(default)s)")
    p.add_argument("--rates", default=RATES, help="Mb/s of each host's link, comma-separated (default: %(default)s)")
    p.add_argument("--no-unshaped", action="store_true", help="leave out the cell of links not shaped")
    p.add_argument("--modes", default=",".join(MODES), help="exact, shard or both (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="threads of each host's rank (default: %(default)s)")
    p.add_argument("--cores", action="store_true",
                   help="each host on a core of its own (tests/pretend_hosts.py --cores): its rank, and the TCP its "
                        "sends cost, off the other host's core")
    p.add_argument("--timeout", type=int, default=1200, help="seconds a launch may take (default: %(default)s)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "projection"), help="the runs' folder")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # on the hosts: the link's probe
    p.add_argument("--cell", metavar="HOSTFILE", help=argparse.SUPPRESS)  # on the first host: the probe and runs
    args = p.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    if args.probe:
        return probe()
    if args.cell:
        return cell(args.cell, args.corpus, args.modes, args.epochs, args.threads, args.out, args.timeout)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        p.error(f"--rates takes Mb/s, comma-separated, not {args.rates!r}")
    if any(r <= 0 for r in rates) or not set(args.modes) <= set(MODES) or not args.modes:
        p.error(f"--rates must be more than 0 and --modes among {', '.join(MODES)}")
    if not os.path.exists(HOSTS):
        raise SystemExit(f"projection: needs the checkout's tests/pretend_hosts.py ({HOSTS})")
    if not os.path.exists(args.corpus):
        raise SystemExit(f"projection: no corpus at {args.corpus} (python -m hvd_w2v.realcorpus makes the real one)")
    os.makedirs(args.out, exist_ok=True)
    corpus = os.path.join(args.out, "corpus.txt")
    with open(args.corpus, "rb") as src, open(corpus, "wb") as dst:
        for i, line in enumerate(src):
            if args.lines and i >= args.lines:
                break
            dst.write(line)
    cells = []
    for rate in ([] if args.no_unshaped else [None]) + rates:
        t = time.monotonic()
        cells.append((rate, on_hosts(rate, corpus, args)))
        say(f"projection: {f'{rate:g} Mb/s' if rate else 'unshaped'} ran in {time.monotonic() - t:.0f} s")
    rows = table(cells, corpus, say)
    print(f"corpus: {args.corpus}, first {args.lines:,} lines; 2 pretend hosts x 1 rank x {args.threads} "
          f"thread(s){', a core each' if args.cores else ''}, {args.epochs} epoch(s); RTT: the probe's median "
          f"round trip (a message's latency: half of it); ratio: planned / run")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(COLUMNS)]
    print("  ".join(h.rjust(w) for h, w in zip(COLUMNS, widths)))
    for r in rows:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
