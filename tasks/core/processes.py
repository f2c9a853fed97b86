"""Process groups: the one way Sluice finds and stops the processes it started.

Every long-running child (Airflow's parts, the model server, torchrun) is started as the
leader of its own session, so its pid is its process group's id and the whole tree can be
signalled at once. Zombies do not count as live members.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


class ProcessGroupError(RuntimeError):
    """A process group could not be stopped."""


def reap(pgid: int) -> None:
    """Collect exited children of ours in this group: a zombie still counts as a group member."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def group_alive(pgid: int) -> bool:
    """Whether the group has a live member: zombies do not count (one that is not our child, we cannot reap)."""
    reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))


def proc_info(pid: int) -> tuple[str, int, int, tuple[str, ...]] | None:
    """(state letter, pgrp, start time in clock ticks, command line) of `pid`, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = stat[stat.rindex(")") + 2 :].split()  # rest[0] is field 3: the comm may hold spaces
    return rest[0], int(rest[2]), int(rest[19]), tuple(a.decode(errors="replace") for a in cmdline.split(b"\0") if a)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is `pgid`."""
    reap(pgid)
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = proc_info(int(entry.name))
            if info and info[1] == pgid and info[0] != "Z":
                members.append(int(entry.name))
    return members


def stop_groups(pgids: dict[str, int], grace_s: float = 15.0) -> None:
    """SIGTERM every group, wait, then SIGKILL whatever is left."""
    for pgid in pgids.values():
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(p) for p in pgids.values()):
        time.sleep(0.2)
    for name, pgid in pgids.items():
        if group_alive(pgid):
            print(f"[sluice] {name} ignored SIGTERM: killing its process group", file=sys.stderr)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    # Return only once every member is gone (orphans are reaped by init, not at once).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(group_alive(p) for p in pgids.values()):
        time.sleep(0.05)
    left = [n for n, p in pgids.items() if group_alive(p)]
    if left:
        raise ProcessGroupError(f"process groups of {left} survived SIGKILL")
