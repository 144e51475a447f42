"""The per-node collector of `diagnose` on real processes of this machine."""
from __future__ import annotations

import subprocess
import sys
import time

from slurm_hooks.jobreport import TaskInfo, _rest_of_the_running, _thread

# Spins for a while, then rests in a sleep: caught during the spin, it is still a waiter.
SPIN_THEN_SLEEP = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {spin}: pass\ntime.sleep(600)\n"
# Busy, but asleep for a moment now and then (a lock handed between busy threads):
# asleep often enough that resampling is sure to see it so.
BUSY_WITH_NAPS = ("import time\nwhile True:\n    t = time.monotonic()\n"
                  "    while time.monotonic() - t < 0.02: pass\n    time.sleep(0.008)\n")


def caught_running(p: subprocess.Popen) -> TaskInfo:
    for _ in range(200):
        t, _ = _thread(p.pid, p.pid, "/proc", {})
        if t is not None and t.state == "R":
            return TaskInfo(pid=p.pid, ppid=0, comm="python3", uid=0, step=None, local_task=None, threads=[t])
        time.sleep(0.01)
    raise AssertionError("the child was never seen running")


def test_a_thread_caught_awake_is_shown_where_it_rests_and_a_busy_one_stays_running():
    rests = subprocess.Popen([sys.executable, "-c", SPIN_THEN_SLEEP.format(spin=0.2)])
    spins = subprocess.Popen([sys.executable, "-c", SPIN_THEN_SLEEP.format(spin=600)])
    naps = subprocess.Popen([sys.executable, "-c", BUSY_WITH_NAPS])
    procs = (rests, spins, naps)
    try:
        infos = {p.pid: caught_running(p) for p in procs}
        t0 = time.monotonic()
        _rest_of_the_running(infos, "/proc", {}, time.monotonic() + 3.0)
        # It waits out the whole sample, whatever it finds.
        assert time.monotonic() - t0 >= 2.9
        [rest] = infos[rests.pid].threads
        assert (rest.state, rest.syscall) == ("S", "clock_nanosleep"), rest
        assert rest.wchan and rest.wchan != "0"
        for busy in (spins, naps):
            [t] = infos[busy.pid].threads
            assert t.state == "R" and t.syscall in ("running", ""), t
    finally:
        for p in procs:
            p.kill()
            p.wait()

