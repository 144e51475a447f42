"""The stuck-task check against real processes stuck in D on a hung FUSE mount
(outside Slurm; the job cases run on the cluster in test_stuck_jobs_cluster.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from helpers import KernelLog, poll, proc_state, run_record

OPEN_LOG = """
import sys
open(sys.argv[1] + "/run/main_log.txt", "a")
"""
THREAD_OPENS_LOG = """
import sys, threading, time
t = threading.Thread(target=lambda: open(sys.argv[1] + "/main_log.txt", "a"), daemon=True)
t.start()
time.sleep(3600)
"""


@pytest.fixture
def stuck_check(tmp_path):
    procs = []

    class S:
        config = tmp_path / "c.yaml"
        kernel = KernelLog(tmp_path / "kmsg")

        def configure(self, **stuck):
            # Real health checks that only report: a look (`check`) keeps no state, and
            # the grace spans runs.
            doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
                   "node_name": "testnode", "kernel_log": str(self.kernel), "filesystems": [{"path": str(tmp_path)}],
                   "actions": {"report_only": True}, "gpu": {"enabled": "false"},
                   "stuck_tasks": {"grace": 1, "sample_window": 0.3, "non_job_tasks": "drain", **stuck}}
            self.config.write_text(yaml.safe_dump(doc))

        def spawn(self, code, *args):
            p = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], start_new_session=True,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            return p

        def run(self):
            return run_record(self.config, "healthcheck", check="stuck_tasks")

        def about(self, rec, pid):
            return [f for f in rec["findings"] if f["evidence"].get("pid") == pid]

    yield S()
    for p in procs:
        p.kill()      # killable D (fuse_get_req): dies now or when the mount is aborted


def wait_d(pid, tid=None):
    path = f"/proc/{pid}/task/{tid or pid}/stat"

    def state():
        try:
            data = open(path, "rb").read()
        except OSError:
            return None
        return data[data.rfind(b")") + 2:].split()[0] == b"D"
    poll(state, 5, what=f"{pid}/{tid} in D")


def test_stuck_process_is_found_after_grace_with_its_file_and_mount(stuck_check, hung_mount):
    stuck_check.configure()
    p = stuck_check.spawn(OPEN_LOG, hung_mount.path)
    wait_d(p.pid)
    first = stuck_check.run()
    [f] = stuck_check.about(first, p.pid)
    assert f["status"] == "watching" and f["severity"] == "ok", "not stuck before the grace"
    time.sleep(1.0)
    second = stuck_check.run()
    [f] = stuck_check.about(second, p.pid)
    ev = f["evidence"]
    assert f["status"] == "stuck" and f["severity"] == "fail" and second["rc"] == 1
    assert ev["syscall"] == "openat" and ev["file"] == f"{hung_mount.path}/run/main_log.txt"
    assert (ev["mountpoint"], ev["fstype"], ev["cause"]) == (str(hung_mount.path), "fuse.fusefs", "shared_filesystem")
    assert ev["tids"] == [p.pid] and ev["job"] is None and ev["seconds"] >= 1
    assert ev["wchan"] == "fuse_get_req" and ev["inspect"] == "ok"
    assert ev["cmdline"].startswith(f"{sys.executable} -c") and ev["cmdline"].endswith(str(hung_mount.path))
    assert f["summary"].startswith(f"pid {p.pid} stuck ") and \
        f["summary"].endswith(f"in openat() on {hung_mount.path}/run/main_log.txt (fuse.fusefs {hung_mount.path})")
    assert f["reason"] == f"stuck in openat() on {hung_mount.path} (fuse.fusefs), pid {p.pid}"


def test_non_leader_thread_is_found(stuck_check, hung_mount):
    stuck_check.configure(grace=0.5)
    p = stuck_check.spawn(THREAD_OPENS_LOG, hung_mount.path)
    tid = poll(lambda: [int(t) for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid], 5,
               what="the second thread")[0]
    wait_d(p.pid, tid)
    assert proc_state(p.pid) == "S", "the leader is not the stuck one"
    stuck_check.run()
    time.sleep(0.6)
    [f] = stuck_check.about(stuck_check.run(), p.pid)
    assert f["status"] == "stuck" and f["evidence"]["tids"] == [tid]
    assert f["evidence"]["file"] == f"{hung_mount.path}/main_log.txt"


def test_tasks_outside_jobs_follow_the_setting(stuck_check, hung_mount):
    p = stuck_check.spawn(OPEN_LOG, hung_mount.path)
    wait_d(p.pid)
    stuck_check.configure(non_job_tasks="warn", grace=0.2)
    stuck_check.run()
    time.sleep(0.3)
    warn = stuck_check.run()
    [f] = stuck_check.about(warn, p.pid)
    assert f["severity"] == "warn" and warn["rc"] == 0
    stuck_check.configure(non_job_tasks="ignore", grace=0.2)
    assert stuck_check.about(stuck_check.run(), p.pid) == []


def test_kernel_hung_task_line_corroborates_and_dates_the_hang(stuck_check, hung_mount):
    stuck_check.configure(grace=1.5)
    p = stuck_check.spawn(OPEN_LOG, hung_mount.path)
    wait_d(p.pid)
    time.sleep(2.2)
    comm = open(f"/proc/{p.pid}/comm").read().strip()
    line = f"INFO: task {comm}:{p.pid} blocked for more than 2 seconds."
    stuck_check.kernel.write(line, prio=3)
    # The first look at this task: without the kernel's word it would only be watched.
    [f] = stuck_check.about(stuck_check.run(), p.pid)
    assert f["status"] == "stuck" and f["evidence"]["kernel_log"] == line
    assert f["evidence"]["seconds"] >= 2


def test_a_task_not_in_d_is_forgotten(stuck_check, hung_mount, tmp_path):
    stuck_check.configure()
    p = stuck_check.spawn(OPEN_LOG, hung_mount.path)
    wait_d(p.pid)
    stuck_check.run()
    state = json.loads((tmp_path / "state" / "testnode" / "stuck-tasks.json").read_text())
    assert any(k.startswith(f"{p.pid}/{p.pid}/") for k in state)
    p.kill()
    poll(lambda: proc_state(p.pid) in (None, "Z"), 5, what="the process to die")
    p.wait(timeout=5)
    rec = stuck_check.run()
    assert stuck_check.about(rec, p.pid) == []
    state = json.loads((tmp_path / "state" / "testnode" / "stuck-tasks.json").read_text())
    assert not any(k.startswith(f"{p.pid}/") for k in state)


OPEN_WRITE_THEN_IDLE = """
import sys, time
with open(sys.argv[1] + "/probe/log", "w") as f:
    f.write("step 1\\n")
time.sleep(3600)
"""


def test_briefly_in_d_then_continues_is_not_flagged(stuck_check, late_mount, tmp_path):
    stuck_check.configure(grace=1)
    p = stuck_check.spawn(OPEN_WRITE_THEN_IDLE, late_mount.path)
    wait_d(p.pid)
    [f] = stuck_check.about(stuck_check.run(), p.pid)
    assert f["status"] == "watching"
    late_mount.resume()            # the server answers: the write completes
    poll(lambda: proc_state(p.pid) == "S", 5, what="the process to go on")
    time.sleep(1.1)                # past the grace
    rec = stuck_check.run()
    assert stuck_check.about(rec, p.pid) == [] and rec["rc"] == 0
    state = json.loads((tmp_path / "state" / "testnode" / "stuck-tasks.json").read_text())
    assert not any(k.startswith(f"{p.pid}/") for k in state)


def test_the_scheduler_says_how_long_a_thread_has_not_run():
    """se.exec_start of /proc/PID/task/TID/sched against our own: a process asleep for
    2 s has been off the CPU for 2 s (no CONFIG_SCHEDSTATS needed)."""
    import subprocess
    import time

    from slurm_hooks.host import procfs
    spawned = time.monotonic()          # it cannot have slept longer than it has lived
    p = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.3)
        time.sleep(2)
        off = procfs.off_cpu_seconds(p.pid, p.pid)
        assert off is not None and 2.0 - 0.1 <= off <= time.monotonic() - spawned + 0.5, off
    finally:
        p.kill()
        p.wait()
    assert procfs.off_cpu_seconds(p.pid, p.pid) is None        # gone: unknown, not zero


def _stat(pid: int, comm: str, state: str, threads: int, flags: int = 0, start: int = 1000) -> str:
    # The fields after "(comm) ": state is the first, flags the 7th, num_threads the
    # 18th, starttime the 20th (proc(5)).
    after = [state] + ["0"] * 49
    after[6], after[17], after[19] = str(flags), str(threads), str(start)
    return f"{pid} ({comm}) {' '.join(after)}\n"


def test_the_scan_reads_a_single_threaded_process_by_its_own_status(tmp_path):
    """One thread: the process's own status is its thread's, and its task directory is
    not listed (here it has none). Several: every thread's status, the leader's state
    notwithstanding; a zombie leader's one live thread too. Kernel threads in D are never
    a job's. Only status is read (a stat a user can stall is not even there): the start
    time is procfs.start_times', for the rows found."""
    from slurm_hooks.host.procfs import scan_pids, start_times
    proc = tmp_path / "proc"

    def status(name, state, threads, kthread=0):
        return (f"Name:\t{name}\nUmask:\t0022\nState:\t{state} (x)\nUid:\t1000\t1000\t1000\t1000\n"
                f"Kthread:\t{kthread}\nThreads:\t{threads}\nvoluntary_ctxt_switches:\t7\n"
                "nonvoluntary_ctxt_switches:\t2\n")

    def task(pid, text, tids=None):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "status").write_text(text)
        for tid, ttext in (tids or {}).items():
            (proc / str(pid) / "task" / str(tid)).mkdir(parents=True)
            (proc / str(pid) / "task" / str(tid) / "status").write_text(ttext)

    task(10, status("writer) D x", "D", 1))                          # no task directory at all
    task(11, status("sleeper", "S", 1))
    task(20, status("trainer", "S", 3), {20: status("trainer", "S", 3), 21: status("loader", "S", 3),
                                         22: status("ckpt", "D", 3)})
    task(30, status("kworker/0:1", "D", 1, kthread=1))
    task(40, status("main", "Z", 1), {40: status("main", "Z", 1), 41: status("worker", "D", 1)})
    found = scan_pids(["10", "11", "20", "30", "40", "99"], str(proc))
    assert [row[:7] for row in found] == [[10, 10, "writer) D x", "D", -1, 7, 2], [20, 22, "ckpt", "D", -1, 7, 2],
                                          [41 - 1, 41, "worker", "D", -1, 7, 2]]
    (proc / "10" / "task" / "10").mkdir(parents=True)
    (proc / "10" / "task" / "10" / "stat").write_text(_stat(10, "writer) D x", "D", 1))
    assert start_times(lambda step: None, str(proc), [[10, 10], [20, 22]]) == {"10/10": 1000}


def test_explain_shows_the_time_in_d_as_the_summary_says_it(stuck_check, hung_mount):
    """explain's diagnosis of a real stuck-task run: one figure for the time in D (the
    summary's), no raw seconds beside it, no epoch."""
    import re

    from slurm_hooks.views.explain import _diagnosis
    stuck_check.configure()
    p = stuck_check.spawn(OPEN_LOG, hung_mount.path)
    wait_d(p.pid)
    stuck_check.run()
    time.sleep(1.0)
    rec = stuck_check.run()
    [f] = stuck_check.about(rec, p.pid)
    held = re.search(r" stuck for (\S+) in ", f["summary"]).group(1)
    lines = _diagnosis({"checks": [{"findings": [f]}]})
    assert f"      stuck for: {held}" in lines, lines
    assert not any(ln.strip().startswith("seconds:") for ln in lines), lines
    assert not any(re.search(r"\b1\d{9}(\.\d+)?\b", ln) for ln in lines), lines
