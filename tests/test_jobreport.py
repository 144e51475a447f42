"""The per-node collector of `diagnose` on real processes of this machine."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from mounts_fixtures import proc_state, require_fuse, start_fuse, wait_for_state

from slurm_hooks.checks._config import loads_config
from slurm_hooks.core import config
from slurm_hooks.core.state import StateStore
from slurm_hooks.host.jobs import JobRef
from slurm_hooks.host.runner import PYSPY_STATE, Runner
from slurm_hooks.views import jobreport
from slurm_hooks.views.jobreport import NodeReport, TaskInfo, _place, _rest_of_the_running, _thread

# What a terminal acts on, or a line break, or text turned right to left: none of it may
# leave a report raw (reason._UNPRINTABLE's set).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
# A window title set by OSC (ended by BEL), a line break, a right-to-left override.
HOSTILE = "\x1b]0;pwn\x07\n\u202e"

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
        # The wait channel is the kernel's best effort: "0" (kept out: shown as none) when it
        # finds the task on a CPU or cannot unwind it at that instant, as on a loaded host.
        assert rest.wchan != "0"
        for busy in (spins, naps):
            [t] = infos[busy.pid].threads
            assert t.state == "R" and t.syscall in ("running", ""), t
    finally:
        for p in procs:
            p.kill()
            p.wait()



# Names itself, then stats a path on the mount that never answers: blocked there in D.
NAMED_AND_STUCK = "import os, sys\nopen('/proc/self/comm', 'w').write(sys.argv[1])\nos.stat(sys.argv[2])\n"


def test_user_strings_reach_the_text_report_only_printable(tmp_path):
    """A task's name, the file it waits on and the type of the user's FUSE mount holding
    it (a FUSE server names its own subtype) go through the collector's own readers on
    a real process and a real mount, then into job-report's text output."""
    require_fuse()
    mount = start_fuse(tmp_path / "m", "unanswered", subtype=f"{HOSTILE}\x1b[31m")
    path = os.path.join(mount.path, f"{HOSTILE}doc.txt")
    child = subprocess.Popen([sys.executable, "-c", NAMED_AND_STUCK, HOSTILE, path])
    try:
        assert wait_for_state(child.pid, ("D",), 10.0) == "D"
        t, _ = _thread(child.pid, child.pid, "/proc", {})
        assert t is not None and t.state == "D"
        _place(t, child.pid, path, "/proc", {})
        assert t.fstype.startswith("fuse.") and CONTROL.search(t.fstype + t.file + t.comm) is None, t
        t.progress = False
        task = TaskInfo(pid=child.pid, ppid=1, comm=t.comm, uid=0, step="0", local_task="0", threads=[t])
        from slurm_hooks.views.diagnose import render_node
        text = render_node(NodeReport(node="n1", job="7", tasks=[task]).to_json())
    finally:
        child.kill()
        mount.close()
        child.wait(10)
    lines = text.split("\n")
    assert [ln for ln in lines if CONTROL.search(ln)] == [], text
    # Written out, not dropped: the admin sees what the user wrote, on the report's own
    # lines (the kernel writes a newline in a mount's type as \\012).
    assert "(fuse.\\x1b]0;pwn\\x07\\012\\u202e\\x1b[31m, D, no progress)" in lines[1], text
    assert lines[1].startswith("  all 1 processes alike: in newfstatat() on ") and \
        lines[1].count("/m/\\x1b]0;pwn\\x07\\x0a\\u202edoc.txt ") == 1, text
    assert lines[5].startswith(f"       thread {child.pid} \\x1b]0;pwn\\x07\\x0a\\u202e: wchan "), text


# Stands in for py-spy where it blocks in the kernel: on a target whose binary lies on a
# stalled mount, it reads that file. This one counts its starts, then stats a file on a
# FUSE mount whose server has read the request and never answers (D, and still D after
# SIGKILL until the connection goes).
STUCK_PYSPY = "#!{python}\nopen({count!r}, 'a').write('started\\n')\nimport os\nos.stat({path!r})\n"


def _report(cfg, capsys) -> dict:
    assert jobreport.main(cfg, "7", "n1", as_json=True, sample=0.05, stacks=True, deadline=8.0) == 0
    return json.loads(capsys.readouterr().out)


def test_a_py_spy_stuck_in_the_kernel_is_remembered_and_never_started_again(tmp_path, monkeypatch, capsys):
    require_fuse()
    stalled = start_fuse(tmp_path / "stalled", "stuck")
    starts = tmp_path / "py-spy-starts"
    standin = tmp_path / "py-spy"
    standin.write_text(STUCK_PYSPY.format(python=sys.executable, count=str(starts),
                                          path=os.path.join(stalled.path, "python3")))
    standin.chmod(0o755)
    cfg = loads_config(f"state_dir: {tmp_path / 'state'}\ndiagnose:\n  pyspy: {standin}\n", node="n1")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    # The job's one task: the target (its cgroup would say so on a real node).
    monkeypatch.setattr(jobreport, "job_tasks", lambda job, node, proc="/proc": [(target.pid, JobRef("7", "0", "0"))])
    stuck = None
    try:
        [first] = _report(cfg, capsys)["tasks"]
        assert "gave no answer within 3s and is stuck in the kernel" in first["stacks"], first["stacks"]
        [entry] = StateStore(os.path.join(cfg.state_dir, "n1")).load(PYSPY_STATE).values()
        stuck = entry["pid"]
        assert proc_state(stuck) == "D"
        # The health check's runner knows it for ours: never a job's stuck task.
        assert (stuck, entry["start"]) in {(e["pid"], e["start"]) for e in
                                           Runner(StateStore(os.path.join(cfg.state_dir, "n1")),
                                                  others=(PYSPY_STATE,)).stuck().values()}
        # Later runs (job-report again, a second diagnose) say so and start none.
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(entry["since"]))
        for _ in range(2):
            [again] = _report(cfg, capsys)["tasks"]
            assert again["stacks"] == (f"py-spy for pid {target.pid} is still stuck since {since} "
                                       f"(py-spy pid {stuck}): not started again")
        assert starts.read_text() == "started\n"
    finally:
        target.kill()
        target.wait()
        stalled.close()           # the connection goes: the stuck stand-in dies
        if stuck is not None:
            # It was the collecting child's: reparented, and reaped by init once it dies.
            deadline = time.monotonic() + 10
            while proc_state(stuck) not in (None, "Z") and time.monotonic() < deadline:
                time.sleep(0.05)


SPIN = "while True: pass\n"


def test_the_cpu_sample_sees_spinners_on_one_cpu_as_runnable_all_the_time():
    """Three processes spinning on one CPU each get about a third of it; on a CPU or in
    its run queue they are all the time (schedstat). A sleeper is neither."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(3)]
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(600)"],
                               stdout=subprocess.PIPE)
    try:
        sleeper.stdout.readline()           # its interpreter's start is behind it
        for p in spinners:
            os.sched_setaffinity(p.pid, {cpu})
        pids = [p.pid for p in (*spinners, sleeper)]
        sample = jobreport._cpu_sample(None, pids, 1.0)
        for p in spinners:
            assert sample["cpu"][str(p.pid)] < 60, sample
            assert sample["runnable"][str(p.pid)] > 85, sample
        assert sample["runnable"][str(sleeper.pid)] < 5, sample
        assert sample["cpu"][str(sleeper.pid)] < 5, sample
    finally:
        for p in (*spinners, sleeper):
            p.kill()
            p.wait()
        sleeper.stdout.close()
