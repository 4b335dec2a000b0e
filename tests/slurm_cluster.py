"""A real Slurm cluster on this machine, for tests/test_slurm.py and tests/test_hosts.py and for trying slurm/
by hand: one node (this host), or one node per pretend host (tests/pretend_hosts.py, ``hosts=``).

    python tests/slurm_cluster.py                      # start; prints `export SLURM_CONF=...`; Ctrl-C stops it
    python tests/slurm_cluster.py srun -n 2 hostname   # start, run one command against it, stop
    python tests/slurm_cluster.py sbatch --wait JOB     # (sbatch without --wait returns at once: then it stops)

Everything lives in one temporary folder (kept with --dir, removed otherwise): a munge key, munged's socket,
slurm.conf, slurmctld's state, slurmd's spool and every log. Nothing under /etc is written, nor are
/etc/slurm/slurm.conf and /etc/munge used: the Slurm commands find the cluster through SLURM_CONF, and
slurm.conf's AuthInfo points them at this munged's socket, so a site's own munged and Slurm (if any) are left
alone (the ports are free ones, not 6817/6818). The three daemons run in the foreground as children
of this process and are stopped by their pids.

On pretend hosts every daemon runs inside their sandbox: munged and slurmctld on the first host, a slurmd on
each (its node name the host's name, its port 6818, 6819, ...; the ports are the sandbox's own), and every
Slurm command of :meth:`SlurmCluster.run` on the first host. Jobs' tasks run on the host of their node, so
they see its hostname and reach the other nodes over loopback TCP.

Needs root (slurmd launches jobs as their owner, and munged and slurmd check who owns their files) and the
Debian packages `slurm-wlm` and `munge` (mpi/setup installs them); :func:`unavailable` says why not otherwise.
Verified with Slurm 22.05 and munge 0.5.15 (Debian 12).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
# A requeued job may start again only after the job credential's lifetime (AuthInfo cred_expire, 120 s by
# default in Slurm 22.05: job_mgr.c sets its begin time to now + cred_expire + 1). 10 s keeps the
# preemption test short and is still ample for a step launch on this machine.
CRED_EXPIRE = 10


def find(program):
    """The path of ``program``: on PATH, or in the sbin folders (where Debian puts the daemons), which a PATH
    outside a root login shell often lacks. None when absent."""
    return shutil.which(program, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin",
                                                        "/usr/sbin", "/sbin"]))


def unavailable():
    """Why a cluster cannot be started here (a sentence), or None when it can."""
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (slurmd starts jobs as their owner)"
    missing = [d for d in DAEMONS + ("sbatch", "scontrol", "sinfo") if not find(d)]
    if missing:
        return f"Slurm or munge not installed ({', '.join(missing)} not on PATH): run mpi/setup, or apt-get " \
               f"install slurm-wlm munge"
    return None


def _free_ports(n):
    """``n`` distinct TCP ports free on 127.0.0.1 now (all held open while choosing, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmCluster:
    """One partition, `debug`, of one node (this host, 127.0.0.1) or of one node per host of ``hosts`` (a
    started :class:`pretend_hosts.PretendHosts`; ``nodes``: which of its hosts, default all). Use as a context
    manager, or start/stop."""

    def __init__(self, folder=None, cred_expire=CRED_EXPIRE, hosts=None, nodes=None):
        self.keep = folder is not None
        self.folder = os.path.abspath(folder) if folder else tempfile.mkdtemp(prefix="hvd-w2v-slurm-")
        os.makedirs(self.folder, exist_ok=True)
        self.cred_expire = cred_expire
        self.hosts = hosts
        self.nodes = list(nodes or (hosts.names if hosts else []))
        self.conf = os.path.join(self.folder, "slurm.conf")
        self.procs = {}
        # The Slurm commands (and jobs: sbatch exports the environment) find this cluster through SLURM_CONF.
        self.env = dict(hosts.env if hosts else os.environ, SLURM_CONF=self.conf)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # --- start -----------------------------------------------------------------------------------------
    def start(self, timeout=60):
        """Write the key and slurm.conf, start munged, slurmctld and slurmd, and wait (at most ``timeout`` s)
        until the node is idle. On failure everything started is stopped and RuntimeError carries the logs."""
        try:
            self._write_files()
            self._start_daemons(timeout)
        except BaseException:
            self.stop()
            raise

    def _write_files(self):
        f = self.folder
        for sub in ("munge", "state", "spool", "log", "tmp"):
            os.makedirs(os.path.join(f, sub), exist_ok=True)
        # munged refuses a socket folder that others cannot enter, and a key that others can read.
        os.chmod(f, 0o755)
        os.chmod(os.path.join(f, "munge"), 0o755)
        key = os.path.join(f, "munge", "munge.key")
        if not os.path.exists(key):
            with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as k:
                k.write(os.urandom(1024))
        # This host as the only node, as slurmd sees it (its CPUs, sockets, cores, memory); NodeName must be
        # the short host name, which slurmd looks itself up by.
        probe = subprocess.run([find("slurmd"), "-C"], capture_output=True, text=True, timeout=30, env=self.env)
        node = next((line for line in probe.stdout.splitlines() if line.startswith("NodeName=")), None)
        if node is None:
            raise RuntimeError(f"slurmd -C printed no node line:\n{probe.stdout}{probe.stderr}")
        fields = dict(item.split("=", 1) for item in node.split() if "=" in item)
        self.cpus = int(fields["CPUs"])  # every node's, as Slurm counts them (SLURM_CPUS_ON_NODE of a whole node)
        hardware = " ".join(f"{k}={fields[k]}" for k in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket",
                                                          "ThreadsPerCore", "RealMemory") if k in fields)
        if self.hosts:
            # The sandbox's own ports; every node on its own address (the hosts' /etc/hosts) and port.
            ctld_port, slurmd_port = 6817, 6818
            nodes = "\n".join(f"NodeName={n} NodeAddr={self.hosts.address[n]} Port={slurmd_port + i} {hardware} "
                              f"State=UNKNOWN" for i, n in enumerate(self.nodes))
            head = f"{self.nodes[0]}({self.hosts.address[self.nodes[0]]})"
            for n in self.nodes:
                os.makedirs(os.path.join(f, "spool", n), exist_ok=True)
                os.makedirs(os.path.join(f, "tmp", n), exist_ok=True)
        else:
            # Free ports rather than 6817/6818, so that a site's Slurm on this host is not disturbed.
            self.nodes = [fields["NodeName"]]
            ctld_port, slurmd_port = _free_ports(2)
            nodes = f"NodeName={self.nodes[0]} NodeAddr=127.0.0.1 {hardware} State=UNKNOWN"
            head = f"{self.nodes[0]}(127.0.0.1)"
            os.makedirs(os.path.join(f, "spool", self.nodes[0]), exist_ok=True)
            os.makedirs(os.path.join(f, "tmp", self.nodes[0]), exist_ok=True)
        self.node = self.nodes[0]
        conf = f"""\
# Written by tests/slurm_cluster.py: a single-node cluster for tests; see that file.
ClusterName=hvdw2v
SlurmctldHost={head}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# socket: this cluster's munged; cred_expire: also the delay before a requeued job may start again.
AuthInfo=socket={f}/munge/munge.socket,cred_expire={self.cred_expire}
StateSaveLocation={f}/state
# %n: the node's name, so that the slurmds of several nodes on one machine keep apart; TmpFS is where the
# PMIx plugin makes its folders.
SlurmdSpoolDir={f}/spool/%n
TmpFS={f}/tmp/%n
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd-%n.pid
SlurmctldLogFile={f}/log/slurmctld.log
SlurmdLogFile={f}/log/slurmd-%n.log
# No cgroups (containers often lack them): processes tracked by parent id, tasks not pinned.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
# There is no slurmdbd (so no sacct): finished jobs stay visible to `scontrol show job` for an hour.
MinJobAge=3600
KillWait=10
# The scheduler looks at pending jobs every 2 s (default 60 s, backfill 30 s): a requeued job starts as soon
# as its begin time has passed.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as c:
            c.write(conf)

    def _spawn(self, name, args, host=None):
        log = open(os.path.join(self.folder, "log", f"{name}.console"), "ab")
        # Own session: a Ctrl-C meant for the test runner does not reach the daemons; stop() ends them.
        self.procs[name] = subprocess.Popen(self._on(host, [find(args[0]), *args[1:]]), env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        log.close()

    def _on(self, host, args, cwd=None):
        """``args`` as run on ``host`` (default: the first node's), or as they are without pretend hosts."""
        if not self.hosts:
            return args
        return self.hosts.command(host or self.nodes[0], args, cwd or os.getcwd())

    def _start_daemons(self, timeout):
        m = os.path.join(self.folder, "munge")
        self._spawn("munged", ["munged", "--foreground", f"--socket={m}/munge.socket",
                               f"--key-file={m}/munge.key", f"--log-file={m}/munged.log",
                               f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed"])
        self._wait(lambda: os.path.exists(f"{m}/munge.socket"), timeout, "munged to open its socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        for n in self.nodes:
            self._spawn(f"slurmd-{n}", ["slurmd", "-D", "-N", n], host=n)
        every = ",".join(self.nodes)
        self._wait(lambda: self.run(["sinfo", "-h", "-n", every, "-o", "%T %D"], check=False, timeout=10)
                   .stdout.strip() == f"idle {len(self.nodes)}", timeout, f"nodes {every} to be idle")

    def _wait(self, ready, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}\n{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout} s waiting for {what}\n{self.logs()}")

    # --- use -------------------------------------------------------------------------------------------
    def run(self, args, timeout=30, check=True, cwd=None, env=None):
        """A Slurm command against this cluster, bounded by ``timeout`` s, with ``env`` added to the
        environment (sbatch passes it on to the job); CompletedProcess (text)."""
        try:
            result = subprocess.run(self._on(None, args, cwd), env=dict(self.env, **(env or {})), cwd=cwd,
                                    capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{' '.join(args)}: no answer in {timeout} s\n{self.logs()}") from e
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {result.returncode}: {result.stderr.strip()}")
        return result

    def job(self, job_id):
        """`scontrol show job` as a dict (JobState, ExitCode, Restarts, ...); {} once the job is forgotten."""
        out = self.run(["scontrol", "-o", "show", "job", str(job_id)], check=False).stdout
        return dict(item.split("=", 1) for item in out.split() if "=" in item)

    def wait_job(self, job_id, done, timeout):
        """Poll the job until ``done(job_dict)`` is true; at most ``timeout`` s (then RuntimeError)."""
        deadline = time.monotonic() + timeout
        job = {}
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if done(job):
                return job
            time.sleep(0.5)
        raise RuntimeError(f"job {job_id} not done after {timeout} s: JobState={job.get('JobState')} "
                           f"Reason={job.get('Reason')}\n{self.logs()}")

    def logs(self, lines=30):
        """The last lines of every daemon's log, for failure messages."""
        parts = []
        for path in sorted(os.listdir(os.path.join(self.folder, "log"))) + ["../munge/munged.log"]:
            full = os.path.join(self.folder, "log", path)
            if os.path.exists(full):
                with open(full, errors="replace") as f:
                    tail = f.read().splitlines()[-lines:]
                parts.append(f"--- {os.path.normpath(full)}\n" + "\n".join(tail))
        return "\n".join(parts)

    # --- stop ------------------------------------------------------------------------------------------
    def stop(self, timeout=30):
        """Cancel every job (their steps outlive slurmd otherwise), stop the daemons, remove the folder."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                jobs = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10).stdout.split()
                if jobs:
                    self.run(["scancel", "--full", *jobs], check=False, timeout=10)
                    # Bounded: the jobs' processes get SIGTERM, then SIGKILL after KillWait (10 s).
                    deadline = time.monotonic() + timeout
                    while time.monotonic() < deadline and self.run(["squeue", "-h"], check=False,
                                                                   timeout=10).stdout.strip():
                        time.sleep(0.5)
            except (RuntimeError, OSError):
                pass  # stop the daemons regardless
        # slurmds, slurmctld, then munged, which they talk to
        for name in [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]:
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if not self.keep:
            shutil.rmtree(self.folder, ignore_errors=True)


def main(argv):
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="without a command: runs until Ctrl-C (or SIGTERM), then stops the cluster")
    p.add_argument("--dir", help="keep the cluster's files in this folder (default: a temporary folder, removed)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="a command to run with SLURM_CONF set, then stop")
    args = p.parse_args(argv)
    why = unavailable()
    if why:
        print(f"slurm_cluster: {why}", file=sys.stderr)
        return 2
    cluster = SlurmCluster(args.dir)
    # Run the `finally` below on SIGTERM too, and on SIGINT even when started in the background by a
    # non-interactive shell (which makes it ignore SIGINT).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cluster.start()
        if args.command:
            return subprocess.run(args.command, env=cluster.env).returncode
        print(f"slurm_cluster: node {cluster.node} up, files in {cluster.folder}; in another shell:\n"
              f"export SLURM_CONF={cluster.conf}\n(Ctrl-C here stops the cluster)", flush=True)
        while all(p.poll() is None for p in cluster.procs.values()):
            time.sleep(1)
        print(f"slurm_cluster: a daemon exited\n{cluster.logs()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
