"""A small cluster on this machine: node hosts and a storage host, each a network namespace.

Used by tests/cluster/ and bench/multinode.py. Layout (run as root, `ip` and `tc` on PATH):

    switch netns (a bridge, br0) <- veth -> node-i netns   (eth0, 10.77.0.(i+1)/24, tbf-shaped)
                                 <- veth -> storage netns  (eth0, 10.77.0.100/24, unshaped)

No interface of the cluster is in the root namespace: nothing outside reaches it and it reaches
nothing outside. The storage host runs an S3 server (moto, :9000) and `git daemon` (:9418) for
the registry's remote, both bound to its address. Each node runs a command as an Indexed Job's pod
would: its own UTS namespace with the pod's hostname (`job-NAME-i`), an /etc/hosts that resolves
the headless Service's names (`job-NAME-i.NAME`, through `ip netns exec`'s /etc/netns/NS/hosts
bind mount), and its own directories for the pod's emptyDir volumes.

Links: a node's port can leave the bridge (`cut`: its frames go nowhere, silently, with no carrier
change, as a partitioned network looks from a host) and join it again (`heal`). `rate` shapes both
directions of every node's link with tbf (this kernel has no netem: bandwidth, not delay).

Cleanup: `close()` SIGKILLs every process in the cluster's namespaces (`ip netns pids`), deletes
the namespaces (their veth ends go with them) and the /etc/netns/ files. It runs on `with` exit,
at interpreter exit (atexit) and from a fixture's `finally`; it is idempotent.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until

SUBNET = "10.77.0"
STORAGE_OCTET = 100
S3_PORT = 9000
GIT_PORT = 9418
IFNAME = "eth0"  # a pod's interface name: what GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name in the pod spec


def unavailable_reason() -> str | None:
    """Why a cluster cannot be built on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (this process is not root)"
    for tool in ("ip", "tc", "ss", "unshare", "git"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH"
    probe = f"slprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class Host:
    ns: str  # the network namespace's name
    addr: str
    port: str  # its bridge port, in the switch namespace
    hostname: str  # the pod's hostname (nodes) or "storage"
    root: Path  # its own disk: the pod's emptyDir volumes, logs


class Cluster:
    """`nodes` node hosts and a storage host. `job` names the Indexed Job whose pods the nodes
    play (hostnames `job-JOB-i`, the Service `JOB`). `rate_mbit`: tbf rate of each node's link
    in Mbit/s, None for unshaped."""

    def __init__(self, root: Path, nodes: int = 2, rate_mbit: float | None = None, job: str = "train-cluster"):
        if not 1 <= nodes <= 50:
            raise ValueError(f"nodes must be 1..50, got {nodes}")
        self.root, self.job, self.rate = Path(root), job, None
        tag = f"sl{os.getpid() % 100000}"
        self.switch = f"{tag}-sw"
        self.nodes = [
            Host(f"{tag}-n{i}", f"{SUBNET}.{i + 1}", f"{tag}p{i}", f"job-{job}-{i}", self.root / f"node{i}")
            for i in range(nodes)
        ]
        self.storage = Host(f"{tag}-st", f"{SUBNET}.{STORAGE_OCTET}", f"{tag}ps", "storage", self.root / "storage")
        self.services: dict[str, subprocess.Popen] = {}
        self.procs: list[subprocess.Popen] = []
        self._closed = False
        self._initial_rate = rate_mbit

    # ---- the namespaces and links -------------------------------------------------------

    @property
    def hosts(self) -> list[Host]:
        return [*self.nodes, self.storage]

    @property
    def namespaces(self) -> list[str]:
        return [self.switch, *(h.ns for h in self.hosts)]

    def hosts_file(self) -> str:
        """Every host by address: the pods' stable names `job-JOB-i.JOB` (headless Service) and hostnames."""
        lines = ["127.0.0.1 localhost"]
        lines += [f"{h.addr} {h.hostname}.{self.job} {h.hostname}" for h in self.nodes]
        lines.append(f"{self.storage.addr} storage")
        return "\n".join(lines) + "\n"

    def start(self) -> "Cluster":
        atexit.register(self.close)
        sweep_stale()
        try:
            sh("ip", "netns", "add", self.switch)
            sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            for h in self.hosts:
                h.root.mkdir(parents=True, exist_ok=True)
                sh("ip", "netns", "add", h.ns)
                etc = Path("/etc/netns") / h.ns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "hosts").write_text(self.hosts_file())
                sh("ip", "link", "add", h.port, "type", "veth", "peer", "name", f"{h.port}h")
                sh("ip", "link", "set", f"{h.port}h", "netns", h.ns, "name", IFNAME)
                sh("ip", "link", "set", h.port, "netns", self.switch)
                sh("ip", "-n", self.switch, "link", "set", h.port, "master", "br0", "up")
                sh("ip", "-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", IFNAME)
                sh("ip", "-n", h.ns, "link", "set", IFNAME, "up")
                sh("ip", "-n", h.ns, "link", "set", "lo", "up")
            if self._initial_rate:
                self.shape(self._initial_rate)
            self._start_storage()
        except BaseException:
            self.close()
            raise
        return self

    def shape(self, rate_mbit: float | None) -> None:
        """tbf at `rate_mbit` on both directions of every node's link (None: remove the shaping).
        Burst: 10 ms at the rate (at least 64 kbit); queue: 50 ms."""
        for h in self.nodes:
            for ns, dev in ((h.ns, IFNAME), (self.switch, h.port)):
                sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
                if rate_mbit:
                    burst = max(64, int(rate_mbit * 10))
                    sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                       "burst", f"{burst}kbit", "latency", "50ms")  # fmt: skip
        self.rate = rate_mbit

    def cut(self, host: Host) -> None:
        """Partition `host` from every other host: its port leaves the bridge, so frames from and to it
        go nowhere (its link stays up: no carrier change, as a partition looks from a host)."""
        sh("ip", "-n", self.switch, "link", "set", "dev", host.port, "nomaster")

    def heal(self, host: Host) -> None:
        sh("ip", "-n", self.switch, "link", "set", "dev", host.port, "master", "br0")

    # ---- processes ----------------------------------------------------------------------

    def popen(self, host: Host, argv: list[str], env: dict[str, str], log: Path | None = None) -> subprocess.Popen:
        """Start `argv` on `host` (its netns; for a node, its own UTS namespace and hostname), as
        the leader of a new session; its output is appended to `log`, each line prefixed with the
        time it arrived (or discarded)."""
        wrapped = ["ip", "netns", "exec", host.ns]
        if host in self.nodes:
            wrapped += ["unshare", "--uts", "sh", "-c", f'hostname {host.hostname} && exec "$@"', "sh"]
        proc = subprocess.Popen(
            [*wrapped, *argv],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE if log else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if log:
            threading.Thread(target=_stamp_lines, args=(proc.stdout, log), daemon=True).start()
        self.procs.append(proc)
        return proc

    def run(self, host: Host, argv: list[str], env: dict[str, str], timeout_s: float = 300) -> str:
        """Run `argv` on `host` to the end; its stdout (raises with its output if it fails)."""
        done = subprocess.run(
            ["ip", "netns", "exec", host.ns, *argv], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
            timeout=timeout_s,
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"{argv[:4]} on {host.ns} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def pids(self, host: Host) -> list[int]:
        """Every process in `host`'s network namespace (a pod's processes: launcher and workers)."""
        out = sh("ip", "netns", "pids", host.ns, check=False).stdout
        return [int(p) for p in out.split()]

    def kill(self, host: Host) -> int:
        """SIGKILL every process on `host` (a node lost with its pod); returns how many."""
        pids = self.pids(host)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(lambda: not self.pids(host), timeout_s=10, what=f"every process on {host.ns} gone")
        for p in self.procs:
            p.poll()  # reap our own children among them
        return len(pids)

    # ---- the storage host's services -------------------------------------------------------

    @property
    def s3_url(self) -> str:
        return f"http://{self.storage.addr}:{S3_PORT}"

    @property
    def git_root(self) -> Path:
        return self.storage.root / "git"

    def git_url(self, repo: str) -> str:
        return f"git://{self.storage.addr}/{repo}"

    def _start_storage(self) -> None:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.storage.root)}
        logs = self.storage.root
        self.git_root.mkdir(parents=True, exist_ok=True)
        self.services["s3"] = self.popen(
            self.storage,
            [sys.executable, "-m", "moto.server", "-H", self.storage.addr, "-p", str(S3_PORT)],
            env,
            logs / "moto.log",
        )
        self.services["git"] = self.popen(
            self.storage,
            ["git", "daemon", f"--listen={self.storage.addr}", f"--port={GIT_PORT}", "--export-all", "--reuseaddr",
             f"--base-path={self.git_root}", str(self.git_root)],
            env,
            logs / "git-daemon.log",
        )  # fmt: skip
        probe = (
            "import socket,sys\n"
            f"for port in ({S3_PORT}, {GIT_PORT}):\n"
            f"    socket.create_connection(('{self.storage.addr}', port), timeout=1).close()\n"
        )

        def up() -> bool:
            for name, proc in self.services.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"the storage host's {name} server exited ({proc.returncode}); see {logs}")
            return self.run(self.storage, [sys.executable, "-c", probe], env, timeout_s=10) == ""

        wait_until(up, timeout_s=60, what="the storage host's S3 and git servers", retry_on=(RuntimeError,))

    # ---- what listens where ------------------------------------------------------------------

    def listeners(self, ns: str | None = None) -> list[tuple[str, set[int]]]:
        """(local address, owner pids) of listening TCP and bound UDP sockets in `ns` (None: the
        root namespace)."""
        argv = ["ss", "-H", "-l", "-n", "-t", "-u", "-p"]
        out = sh(*(["ip", "netns", "exec", ns, *argv] if ns else argv)).stdout
        return [(line.split()[4], {int(p) for p in re.findall(r"pid=(\d+)", line)}) for line in out.splitlines()]

    # ---- cleanup -----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for h in self.hosts:
            for pid in self.pids(h) if h.ns in _existing() else []:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        for ns in self.namespaces:
            while ns in _existing():
                sh("ip", "netns", "del", ns, check=False)
                if ns in _existing() and time.monotonic() < deadline:
                    time.sleep(0.2)
                elif ns in _existing():
                    print(f"[cluster] could not delete netns {ns}", file=sys.stderr)
                    break
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


STALE = re.compile(r"^sl(\d+)-(sw|st|n\d+)$")


def sweep_stale() -> list[str]:
    """Delete the namespaces (and their processes, /etc/netns files) of clusters whose process is
    gone: one killed with SIGKILL could not clean up. Names carry the owner's pid (mod 100000); a
    live process with that pid keeps its namespaces (the safe side of a collision)."""
    swept = []
    for ns in sorted(_existing()):
        m = STALE.match(ns)
        if not m or int(m.group(1)) == os.getpid() % 100000 or Path(f"/proc/{m.group(1)}").exists():
            continue
        for pid in (int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        swept.append(ns)
    if swept:
        print(f"[cluster] deleted stale namespaces {swept}", file=sys.stderr)
    return swept


def _existing() -> set[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _stamp_lines(stream, log: Path) -> None:
    """Append each line of `stream` to `log` behind its arrival time (time.time())."""
    with open(log, "a") as f:
        for line in stream:
            f.write(f"{time.time():.3f} {line.decode(errors='replace')}")
            f.flush()
