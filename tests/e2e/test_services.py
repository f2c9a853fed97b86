import subprocess
import sys
import time

import psutil

from tasks.core.processes import group_alive, stop_groups


def test_stop_escalates_to_sigkill_of_the_whole_group():
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)']); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 10
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    members = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children()]
    assert len(members) == 2
    t0 = time.monotonic()
    stop_groups({"stubborn": proc.pid}, grace_s=1.0)
    assert time.monotonic() - t0 < 10
    assert not group_alive(proc.pid)  # the whole group, grandchild included, is gone
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in members)
