import subprocess
import sys
import time

from ops.services import _group_alive, stop_groups


def test_stop_escalates_to_sigkill_of_the_whole_group():
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)']); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    time.sleep(1.0)                                  # let the child start
    t0 = time.monotonic()
    stop_groups({"stubborn": proc.pid}, grace_s=1.0)
    assert not _group_alive(proc.pid)                # parent and grandchild both gone
    assert time.monotonic() - t0 < 10
    assert proc.wait(timeout=5) == -9
