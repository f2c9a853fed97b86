"""Who a failed collective lost: the ranks' hosts, learned at start, and a roll call after a failure.

A collective that fails says little: gloo's timeout names no peer ("Timed out waiting 300000ms
for recv operation to complete"), and a reset names only the one socket it read from. When a
step's collective fails, every rank that can still reach the process group's store answers a
roll call there (`sluice/alive/<rank>`); after `grace_s` the ranks that did not answer are the
lost ones, named with their hosts. A rank that cannot reach the store itself is cut off from the
store's host (rank 0's node), and says so. The store is new for every rendezvous round (file
store per attempt locally, a fresh TCPStore per round across nodes), so no old answer counts.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import torch.distributed as dist

ROLL_CALL = "sluice/alive"


class PeerLost(RuntimeError):
    """A collective failed because peers were lost (dead or cut off); the message names them."""


def my_host() -> str:
    """This rank's host as peers see it: its fully qualified name and the address on the interface
    its collectives use (GLOO_SOCKET_IFNAME), when one is set."""
    name = socket.getfqdn()
    ifname = os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME")
    addr = _interface_addr(ifname) if ifname else None
    return f"{name} ({addr})" if addr else name


def _interface_addr(ifname: str) -> str | None:
    import fcntl
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))  # SIOCGIFADDR
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None


def gather_hosts(world: int) -> tuple[str, ...]:
    """Every rank's `my_host()`, in rank order (one small collective at start)."""
    hosts: list[str] = [""] * world
    dist.all_gather_object(hosts, my_host())
    return tuple(hosts)


def is_collective_failure(exc: BaseException) -> bool:
    """A failed or timed-out collective (gloo, NCCL, the store), also when DDP's hook wraps it."""
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    signs = ("gloo/transport", "Timed out waiting", "Connection reset by peer", "Connection closed", "NCCL")
    return isinstance(exc, RuntimeError) and any(s in text for s in signs)


def roll_call(rank: int, world: int, grace_s: float) -> list[int] | None:
    """The ranks that did not answer within `grace_s` (None: this rank cannot reach the store). The
    store's calls are bounded here, in a thread: a TCPStore call to a host cut off blocks until TCP
    gives up, whatever the store's timeout."""
    answer: list[list[int]] = []

    def call() -> None:
        store = dist.distributed_c10d._get_default_store()
        store.set(f"{ROLL_CALL}/{rank}", "1")
        deadline = time.monotonic() + grace_s
        missing = list(range(world))
        while missing and time.monotonic() < deadline:
            missing = [r for r in missing if not store.check([f"{ROLL_CALL}/{r}"])]
            if missing:
                time.sleep(0.2)
        answer.append(missing)

    def guarded() -> None:
        try:
            call()
        except Exception:  # noqa: BLE001 - the store is out of reach: that is the answer
            pass

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    thread.join(grace_s + 1.0)
    return answer[0] if answer else None


def describe_loss(
    exc: BaseException, rank: int, hosts: tuple[str, ...], step: int, timeout_s: int, grace_s: float
) -> PeerLost:
    """The error to raise: what failed at which step, and which peers were lost (by roll call)."""
    world = len(hosts)
    missing = roll_call(rank, world, grace_s)
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if missing is None:
        lost = f"the process group's store on rank 0's host {hosts[0]} is out of reach from {hosts[rank]}"
    elif missing:
        by_host: dict[str, list[int]] = {}
        for r in missing:
            by_host.setdefault(hosts[r], []).append(r)
        lost = "; ".join(f"rank(s) {', '.join(map(str, rs))} on {h}" for h, rs in by_host.items())
        lost = f"lost peer(s), silent for {grace_s:g} s after the failure: {lost}"
    else:
        lost = "every rank answered the roll call afterwards (a transient network fault?)"
    return PeerLost(
        f"rank {rank} on {hosts[rank]}: a collective failed at step {step} "
        f"(timeout {timeout_s} s, SLUICE_DIST_TIMEOUT_S): {lost}. Cause: {first}"
    )


def leave_process_group() -> None:
    """A distributed worker's end: every rank meets, then the group is destroyed. Drop every DDP module
    first (del it, and what closes over it): a reducer freed after the group is destroyed holds the
    group's last reference and runs its destructor inside its own dealloc, under the GIL, joining the
    gloo loop thread, which may be waiting for the GIL to free a finished work's tensors; the rank then
    hangs at exit (torch 2.13, seen in the engine and the hierarchical-allreduce worker)."""
    import gc

    gc.collect()  # DDP modules in reference cycles go now, while the group lives
    dist.barrier()
    dist.destroy_process_group()
