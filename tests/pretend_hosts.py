"""Pretend hosts: several hosts on this one machine, for the tests of several hosts and for trying them by hand.

    python tests/pretend_hosts.py                       # nodeA, nodeB: prints how to use them; Ctrl-C ends them
    python tests/pretend_hosts.py --hosts 3 -- mpi/launch -n 3 --hostfile HOSTFILE hvd-w2v check
                                                        # start, run one command on the first host, end
    python tests/pretend_hosts.py --slurm -- sbatch --wait -N 2 -n 2 slurm/multi-node.sbatch --epochs 1
                                                        # the same with a Slurm of one node per host
    python tests/pretend_hosts.py --rate 1000 -- mpi/launch -n 2 --hostfile HOSTFILE hvd-w2v train ...
                                                        # each host behind a link of 1,000 Mb/s each way

What a pretend host is, and what it shares with the others:

- **The sandbox**: one process tree in its own PID, mount and network namespaces (``unshare --pid --fork
  --kill-child --mount-proc --mount --net``). Its network has ``lo`` alone (and a bridge left down that holds
  127.0.0.2/32, because glibc's AI_ADDRCONFIG, which slurmd and slurmctld use, wants an IPv4 address other
  than 127.0.0.1 on some interface), so nothing inside can reach or be reached from outside, and every
  address is a loopback one. Inside it ``/etc/hosts``, ``/etc/nsswitch.conf`` (``hosts: files``) and
  ``/etc/resolv.conf`` are this folder's files, bind-mounted: nodeA is 127.0.1.1, nodeB 127.0.1.2, and so on.
  The machine's own /etc is never written. Ending the sandbox's first process ends every process inside (the
  kernel kills a PID namespace's members when its init dies): that is how :meth:`PretendHosts.stop` and a
  crash of the test both clean up, without looking for processes by name.
- **A host**: a UTS namespace (its own hostname) and a mount namespace inside the sandbox, held open by a
  sleeping process; a command runs on it by entering both (``nsenter``). Hosts share the files (as over NFS)
  and the processes' view, except the folders given in ``local``: each of those is an empty private tmpfs on
  that host (a node-local disk), hiding what the others see there.
- **ssh**: ``bin/ssh`` in this folder stands in for it (``OMPI_MCA_plm_rsh_agent``, in :attr:`env`): called as
  ``ssh [-options] HOST WORDS...``, it runs the words joined by spaces with ``sh -c`` on HOST, in a login-like
  environment (``env -i HOME PATH ...``), since ssh does not carry mpirun's variables either.
- **MPI traffic**: :attr:`env` restricts Open MPI's TCP (``btl_tcp_if_include``, ``oob_tcp_if_include``) to
  ``lo``; ranks on one host talk through shared memory, ranks on two hosts over TCP (Open MPI decides by
  hostname).
- **Links** (``links=True``, or a ``rate``): each host has a network namespace of its own instead, whose one
  interface ``link0`` (a veth) holds its address and leads to a bridge in the sandbox, as a NIC to a switch;
  its ``lo`` keeps 127.0.0.1 alone, so the other hosts' 127.0.1.x go out through ``link0``
  (``route_localnet`` lets loopback addresses leave ``lo``: the addresses stay loopback ones). Open MPI's
  TCP uses ``link0``. With ``rate`` (Mb/s) both ends of every host's veth have a token-bucket filter (``tc``
  ``tbf``) of that rate: a full-duplex link of ``rate`` each way. This kernel has no ``netem``: the
  latency is what the veths and the bridge give, measured, not set.

Needs root and util-linux's ``unshare``/``nsenter`` and iproute2's ``ip``; :func:`unavailable` says why not.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bounded

ROOT = Path(__file__).resolve().parent.parent
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The sandbox's first process: sets up the network and /etc, starts one holder per host (with links: gives
# each its link), then reaps orphans (it is the PID namespace's init) until it is killed. argv: folder, rate
# ("none": the shared loopback; "0": links, not shaped; else Mb/s), then one "host:address:local1:..." a host.
INIT = r"""
import os, subprocess, sys, time
folder, rate, hosts = sys.argv[1], sys.argv[2], sys.argv[3:]
def sh(*args):
    subprocess.run(args, check=True)
def shaped(*dev):  # a token bucket of the rate on a device's egress; burst: 1 ms of it, at least 32 KiB
    if float(rate):
        burst = max(32 * 1024, int(float(rate) * 1e6 / 8 / 1000))
        sh(*dev[:-1], "tc", "qdisc", "add", "dev", dev[-1], "root", "tbf", "rate", f"{rate}mbit", "burst", str(burst),
           "latency", "100ms")
sh("ip", "link", "set", "lo", "up")
sh("ip", "link", "add", "hvdw2v0", "type", "bridge")  # the switch of the links; see tests/pretend_hosts.py
if rate == "none":  # left down, for glibc's AI_ADDRCONFIG
    sh("ip", "addr", "add", "127.0.0.2/32", "dev", "hvdw2v0")
else:
    sh("ip", "link", "set", "hvdw2v0", "up")
for name in ("hosts", "nsswitch.conf", "resolv.conf"):
    sh("mount", "--bind", os.path.join(folder, "etc", name), "/etc/" + name)
for i, spec in enumerate(hosts):
    host, address, *local = spec.split(":")
    mounts = "".join(f" && mount -t tmpfs local-{host} '{p}'" for p in local if p)
    ready = "" if rate != "none" else f" && mv {folder}/hosts/{host}.pid.tmp {folder}/hosts/{host}.pid"
    subprocess.Popen(["unshare", "--uts", "--mount", *(["--net"] if rate != "none" else []), "--propagation",
                      "private", "sh", "-c",
                      f"hostname {host}{mounts} && echo $$ > {folder}/hosts/{host}.pid.tmp{ready} && "
                      f"exec sleep infinity"])
    if rate == "none":
        continue
    tmp = f"{folder}/hosts/{host}.pid.tmp"
    while not os.path.exists(tmp) or not open(tmp).read().strip():
        time.sleep(0.01)
    pid = open(tmp).read().strip()
    inside = ("nsenter", "-t", pid, "--net")
    sh("ip", "link", "add", f"hvdw2v-h{i}", "type", "veth", "peer", "name", "link0", "netns", pid)
    sh("ip", "link", "set", f"hvdw2v-h{i}", "master", "hvdw2v0", "up")
    sh(*inside, "ip", "link", "set", "lo", "up")
    sh(*inside, "ip", "addr", "del", "127.0.0.1/8", "dev", "lo")  # 127/8 is no longer all this host's own
    sh(*inside, "ip", "addr", "add", "127.0.0.1/32", "dev", "lo")
    for conf in ("all", "link0"):
        sh(*inside, "sh", "-c", f"echo 1 > /proc/sys/net/ipv4/conf/{conf}/route_localnet")
    sh(*inside, "ip", "addr", "add", f"{address}/24", "dev", "link0")
    sh(*inside, "ip", "link", "set", "link0", "up")
    shaped(*inside, "link0")
    shaped(f"hvdw2v-h{i}")
    os.rename(tmp, f"{folder}/hosts/{host}.pid")
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(1)
"""

SSH = """#!/bin/sh
# Stands in for ssh on the pretend hosts (tests/pretend_hosts.py): ssh [-options] HOST WORDS...
while [ $# -gt 0 ]; do
  case "$1" in -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;; -*) shift ;; *) break ;; esac
done
[ $# -gt 0 ] || { echo "ssh: no host given" >&2; exit 255; }
host=$1; shift
exec "{bin}/on-host" "$host" env -i HOME="${HOME:-/root}" USER="${USER:-root}" LOGNAME="${USER:-root}" \\
  SHELL=/bin/sh LANG=C.UTF-8 PATH={path} /bin/sh -c "$*"
"""

ON_HOST = """#!/bin/sh
# Runs a command on one pretend host (tests/pretend_hosts.py): on-host HOST COMMAND...; inside the sandbox.
pidfile="{hosts}/$1.pid"
[ -f "$pidfile" ] || {{ echo "ssh: Could not resolve hostname $1: not a pretend host" >&2; exit 255; }}
pid=$(cat "$pidfile"); host=$1; shift
[ ! -f "{hosts}/$host.cpus" ] || set -- taskset -c "$(cat "{hosts}/$host.cpus")" "$@"  # the host's own cores
exec nsenter -t "$pid" --uts --mount --net --wd="$PWD" -- "$@"
"""


def unavailable(shaped=False):
    """Why pretend hosts (``shaped``: with a rate) cannot run here (a sentence), or None when they can."""
    if os.geteuid() != 0:
        return "pretend hosts need root (namespaces, mounts)"
    tools = ("unshare", "nsenter", "ip", "mount") + (("tc",) if shaped else ())
    missing = [p for p in tools if not shutil.which(p, path=LOGIN_PATH)]
    if missing:
        return f"pretend hosts need {', '.join(missing)} (util-linux, iproute2)"
    if shaped:  # the kernel's veth and tbf, tried in a network namespace of their own
        script = ("ip link add hvdw2v-a type veth peer name hvdw2v-b && "
                  "tc qdisc add dev hvdw2v-a root tbf rate 1mbit burst 32kb latency 50ms")
        tried = subprocess.run(["unshare", "--net", "sh", "-c", script], capture_output=True, text=True,
                               env=dict(os.environ, PATH=LOGIN_PATH), timeout=30)
        if tried.returncode:
            return f"shaped pretend hosts need the kernel's veth and tbf: {tried.stderr.strip()[:200]}"
    return None


class PretendHosts:
    """Hosts ``names`` (default nodeA, nodeB) in one sandbox. ``local``: {host: [folders]} private to it.

    Use as a context manager, or :meth:`start` / :meth:`stop`. Commands run on a host with :meth:`run`
    (bounded) or :meth:`popen`; :attr:`env` is what they need to start mpirun across hosts."""

    def __init__(self, names=("nodeA", "nodeB"), local=None, folder=None, links=False, rate=None, cores=False):
        if rate is not None and not rate > 0:
            raise ValueError(f"a link's rate is more than 0 Mb/s, not {rate}")
        # With ``cores``, every process of host i runs on this process's CPU i (taskset; round robin where the
        # hosts outnumber the CPUs): hosts that compute beside each other, not on each other's cores.
        usable = sorted(os.sched_getaffinity(0))
        self.cores = {h: usable[i % len(usable)] for i, h in enumerate(names)} if cores else {}
        self.names, self.links, self.rate = list(names), links or rate is not None, rate
        self.local = {h: [os.path.abspath(p) for p in paths] for h, paths in (local or {}).items()}
        self.keep = folder is not None
        self.folder = os.path.abspath(folder) if folder else tempfile.mkdtemp(prefix="hvd-w2v-hosts-")
        self.bin = os.path.join(self.folder, "bin")
        self.address = {h: f"127.0.1.{i + 1}" for i, h in enumerate(self.names)}
        self._sandbox = None
        self.init_pid = None
        # What mpirun needs to reach the other hosts, and only over loopback. No tree spawn: every daemon
        # is started from the first host, as the agent would be by a real ssh. The hosts share this machine's
        # cores, where Open MPI sees each host's own: a rank waiting for a message gives its core up (as
        # Open MPI does by itself where it knows a host is oversubscribed) instead of spinning on the core the
        # other host's rank needs, which made 2 hosts x 2 ranks about three times slower. (Real hosts have
        # cores of their own: the product leaves Open MPI's default.)
        interface = "link0" if self.links else "lo"
        self.env = dict(os.environ, OMPI_MCA_plm_rsh_agent=os.path.join(self.bin, "ssh"),
                        OMPI_MCA_plm_rsh_no_tree_spawn="1", OMPI_MCA_btl_tcp_if_include=interface,
                        OMPI_MCA_oob_tcp_if_include=interface, OMPI_MCA_mpi_yield_when_idle="1")

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # --- start -----------------------------------------------------------------------------------------
    def start(self, timeout=30):
        """Write /etc's stand-ins and the scripts, start the sandbox and its hosts; RuntimeError on failure."""
        try:
            self._write_files()
            for h in self.names:
                for p in self.local.get(h, []):
                    os.makedirs(p, exist_ok=True)  # the mount point; the host sees an empty tmpfs there
            specs = [":".join([h, self.address[h], *self.local.get(h, [])]) for h in self.names]
            rate = "none" if not self.links else f"{self.rate or 0:g}"
            self._sandbox = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount", "--net",
                 "--propagation", "private", sys.executable, "-c", INIT, self.folder, rate, *specs],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.folder, "sandbox.log"), "ab"),
                stdin=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + timeout
            while not all(os.path.exists(self._pidfile(h)) for h in self.names):
                if self._sandbox.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the pretend hosts did not start:\n{self._log()}")
                time.sleep(0.05)
            children = Path(f"/proc/{self._sandbox.pid}/task/{self._sandbox.pid}/children").read_text().split()
            self.init_pid = int(children[0])  # the sandbox's init, as this process sees it
        except BaseException:
            self.stop()
            raise

    def _pidfile(self, host):
        return os.path.join(self.folder, "hosts", f"{host}.pid")

    def _log(self):
        with open(os.path.join(self.folder, "sandbox.log"), errors="replace") as f:
            return f.read()[-3000:]

    def _write_files(self):
        for sub in ("etc", "bin", "hosts"):
            os.makedirs(os.path.join(self.folder, sub), exist_ok=True)
        os.chmod(self.folder, 0o755)  # munged and slurmd, run from here, check who may enter their folders
        lines = ["127.0.0.1 localhost"] + [f"{a} {h}" for h, a in self.address.items()]
        files = {
            "etc/hosts": "\n".join(lines) + "\n",
            "etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
            "etc/resolv.conf": "nameserver 127.0.0.1\n",
            "bin/ssh": SSH.replace("{bin}", self.bin).replace("{path}", LOGIN_PATH),
            "bin/on-host": ON_HOST.format(hosts=os.path.join(self.folder, "hosts")),
            **{f"hosts/{h}.cpus": f"{cpu}\n" for h, cpu in self.cores.items()},
        }
        for name, text in files.items():
            path = os.path.join(self.folder, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755 if name.startswith("bin/") else 0o644)

    # --- use -------------------------------------------------------------------------------------------
    def command(self, host, args, cwd=ROOT):
        """The argv that runs ``args`` on ``host``, in folder ``cwd``, from outside the sandbox."""
        if host not in self.names:
            raise ValueError(f"{host} is not one of {self.names}")
        return ["nsenter", "-t", str(self.init_pid), "--pid", "--mount", "--net", f"--wd={cwd}", "--",
                os.path.join(self.bin, "on-host"), host, *map(str, args)]

    def popen(self, host, args, env=None, **kw):
        """Start ``args`` on ``host`` with :attr:`env` plus ``env``, in its own session (see :meth:`run`)."""
        return subprocess.Popen(self.command(host, args, kw.pop("cwd", ROOT)), env=dict(self.env, **(env or {})),
                                start_new_session=True, **kw)

    def run(self, host, args, timeout=120, env=None, cwd=ROOT):
        """Run ``args`` on ``host`` (default cwd: the checkout), bounded: after ``timeout`` s its process group
        is killed and the bounded.Result says hung. Output is stdout and stderr together."""
        return bounded.run(self.command(host, args, cwd), timeout, env=dict(self.env, **(env or {})))

    def hostfile(self, path, slots):
        """Write an Open MPI hostfile: ``slots`` is {host: slots}, in order. Returns ``path``."""
        with open(path, "w") as f:
            f.write("".join(f"{h} slots={n}\n" for h, n in slots.items()))
        return str(path)

    def pids(self, host):
        """The PIDs (as this process sees them) of every process running on ``host``, its holder excepted."""
        holder_ns = os.readlink(f"/proc/{self._holder(host)}/ns/uts")
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self._holder(host):
                try:
                    if os.readlink(f"/proc/{entry}/ns/uts") == holder_ns:
                        found.append(int(entry))
                except OSError:
                    pass  # ended meanwhile
        return found

    def _holder(self, host):
        """The outer PID of ``host``'s holder: the sandbox init's child whose UTS namespace is that host's."""
        if not hasattr(self, "_holders"):
            inner = {int(open(self._pidfile(h)).read()): h for h in self.names}
            self._holders = {}
            for pid in Path(f"/proc/{self.init_pid}/task/{self.init_pid}/children").read_text().split():
                status = Path(f"/proc/{pid}/status").read_text()
                nspid = [line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:")]
                if nspid and int(nspid[0]) in inner:
                    self._holders[inner[int(nspid[0])]] = int(pid)
        return self._holders[host]

    def kill_host(self, host):
        """SIGKILL every process on ``host`` (what a power cut does to its processes). Returns their PIDs."""
        pids = self.pids(host)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    # --- stop ------------------------------------------------------------------------------------------
    def stop(self):
        """End the sandbox (and so every process inside it) and remove the folder unless it was given."""
        if self._sandbox is not None and self._sandbox.poll() is None:
            if self.init_pid:
                try:
                    os.kill(self.init_pid, signal.SIGKILL)  # the PID namespace's init: all inside end with it
                except ProcessLookupError:
                    pass
            self._sandbox.kill()
            self._sandbox.wait(30)
        if not self.keep:
            shutil.rmtree(self.folder, ignore_errors=True)


def main(argv):
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="without a command: runs until Ctrl-C (or SIGTERM), then ends the hosts")
    p.add_argument("--hosts", type=int, default=2, help="how many hosts: nodeA, nodeB, ... (default 2)")
    p.add_argument("--slots", type=int, default=1, help="slots per host in the hostfile written (default 1)")
    p.add_argument("--slurm", action="store_true", help="also a Slurm cluster with one node per host")
    p.add_argument("--dir", help="keep the files in this folder (default: a temporary folder, removed)")
    p.add_argument("--links", action="store_true", help="a network namespace and a link to a bridge per host")
    p.add_argument("--rate", type=float, help="with links: each host's link shaped to this many Mb/s each way")
    p.add_argument("--cores", action="store_true", help="each host's processes on a CPU of its own (round robin)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="a command to run on the first host, then end")
    args = p.parse_args(argv)
    why = unavailable(shaped=args.rate is not None)
    if args.slurm and not why:
        from slurm_cluster import unavailable as slurm_unavailable
        why = slurm_unavailable()
    if why:
        print(f"pretend_hosts: {why}", file=sys.stderr)
        return 2
    names = [f"node{chr(ord('A') + i)}" for i in range(args.hosts)]
    if args.rate is not None and not args.rate > 0:
        print(f"pretend_hosts: --rate must be more than 0 Mb/s, not {args.rate:g}", file=sys.stderr)
        return 2
    hosts = PretendHosts(names, folder=args.dir, links=args.links, rate=args.rate, cores=args.cores)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cluster = None
    try:
        hosts.start()
        hostfile = hosts.hostfile(os.path.join(hosts.folder, "hostfile"), {h: args.slots for h in names})
        if args.slurm:
            from slurm_cluster import SlurmCluster
            cluster = SlurmCluster(os.path.join(hosts.folder, "slurm"), hosts=hosts)
            cluster.start()
        command = [w.replace("HOSTFILE", hostfile) for w in args.command if w != "--"]
        env = cluster.env if cluster else hosts.env
        if command:
            return subprocess.run(hosts.command(names[0], command, os.getcwd()), env=env).returncode
        enter = " ".join(hosts.command(names[0], ["bash"], os.getcwd()))
        exports = " ".join(f"{k}={env[k]}" for k in sorted(env) if k.startswith(("OMPI_MCA_", "SLURM_CONF")))
        print(f"pretend_hosts: {', '.join(names)} up ({hosts.folder}); hostfile {hostfile}\n"
              f"a shell on {names[0]}, in another terminal:\n  {exports} {enter}\n"
              f"then e.g. mpi/launch -n {args.hosts} --hostfile {hostfile} hvd-w2v check\n"
              f"(Ctrl-C here ends the hosts)", flush=True)
        while hosts._sandbox.poll() is None:
            time.sleep(1)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if cluster:
            cluster.stop()
        hosts.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
