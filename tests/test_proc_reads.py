"""The checker never blocks on what a user controls (SECURITY.md, "Reading other
processes"): each attack runs as a real unprivileged user with a real FUSE mount of
their own, against real health checks, while a real fault elsewhere on the node must
still be reported."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from attacker import unprivileged_user
from helpers import SLURM_HOOKS, poll
from mounts_fixtures import start_fuse

# Each run must end well inside slurmd's 60 s; a stalled read in the checker itself never
# ends (the old scan read every process's stat in the checker).
RUN_LIMIT = 40


@pytest.fixture(scope="module")
def eve():
    with unprivileged_user("shk-eve") as user:
        yield user


@pytest.fixture
def user(eve):
    yield eve
    eve.cleanup()


@pytest.fixture
def node_hung(eve):
    """The node's own FUSE mount (root's, allow_other) whose server never answers."""
    m = start_fuse(eve.base / f"node-hung-{time.monotonic_ns()}", "unanswered")
    yield m
    m.close()


def configure(root: Path, **extra) -> Path:
    doc = {"state_dir": str(root / "state"), "journal": str(root / "journal.jsonl"), "syslog": False,
           "prometheus_textfile_dir": None, "gpu": {"enabled": "false"}, "node_name": "n1",
           "kernel_log": str(root / "kmsg"), "filesystems": [{"path": str(root)}],
           "actions": {"report_only": True},
           "stuck_tasks": {"grace": 0.5, "sample_window": 0.3, "inspect_timeout": 1, "scan_timeout": 2,
                           "non_job_tasks": "warn", "listpids_fallback": False}}
    for k, v in extra.items():
        doc[k] = {**doc[k], **v} if isinstance(v, dict) and isinstance(doc.get(k), dict) else v
    (root / "kmsg").write_text("")
    path = root / "slurm-hooks.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def healthcheck(config: Path) -> tuple[dict, float]:
    t0 = time.monotonic()
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(config), "healthcheck", "--json"], capture_output=True,
                       text=True, timeout=RUN_LIMIT, env={"SLURMD_NODENAME": "n1"})
    took = time.monotonic() - t0
    assert r.returncode in (0, 1), r.stderr
    rec = json.loads(r.stdout)
    rec["findings"] = [f for c in rec["checks"] for f in c["findings"]]
    return rec, took


def stuck_children(root: Path) -> dict:
    path = root / "state" / "n1" / "stuck-children.json"
    return json.loads(path.read_text()) if path.exists() else {}


def state_of(pid: int) -> str:
    """The state letter from status (its stat may not answer: that is the point)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    return "?"


EXEC_WITH_UNANSWERED_FLUSH = """
import os, sys
fd = os.open(sys.argv[1] + "/held", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
os.write(fd, b"x")
open(sys.argv[2], "w").write("exec")
# The close-on-exec file is flushed inside execve; the user's server never answers.
os.execv("/bin/sleep", ["sleep", "3600"])
"""
OPEN_HUNG = """
import sys
open(sys.argv[1] + "/data.bin", "rb")
"""


def _stat_blocks(pid: int) -> bool:
    """Reading the task's stat does not answer (in a child of the test's, killed after 1 s)."""
    p = subprocess.Popen(["cat", f"/proc/{pid}/stat"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout=1)
        return False
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=5)
        return True


EXEC_MANY = """
import os, sys, time
# n processes, each in execve with a close-on-exec file of the user's own mount whose
# FLUSH the server never answers: each stalls every reader of its stat.
mnt, ready, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    if os.fork() == 0:
        fd = os.open(f"{mnt}/held{i}", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        os.write(fd, b"x")
        os.execv("/bin/sleep", ["sleep", "3600"])
open(ready, "w").write("forked")
time.sleep(3600)
"""


def _comm_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("\n", 1)[0].split("\t", 1)[1]
    except (OSError, IndexError):
        return "?"


@pytest.mark.parametrize("stallers", [3, 65])
def test_processes_in_execve_with_an_unanswered_flush_never_blind_the_scan(user, node_hung, tmp_path, stallers):
    """3 such processes used to blind a run (each scan try stalled on a new one), 65 every
    run (past the 64 remembered). The scan reads status alone now: every run sees the
    victim, whose grace clock goes on, and no read of ours is left waiting on them."""
    own = user.fuse("slow", "flushless", "--slow-op", "flush", "--delay", "3600")
    try:
        ready = user.home / "exec.ready"
        user.python(EXEC_MANY, own.path, ready, str(stallers))
        poll(lambda: ready.exists(), 20, what="the stallers forked")
        poll(lambda: len([p for p in _children_named(user.uid, "python3")]) >= stallers + 1, 30,
             what="every staller in execve")
        some = _children_named(user.uid, "python3")[-1]
        poll(lambda: _stat_blocks(some), 10, what="a staller's stat to stop answering")
        # A real fault elsewhere on the node: a task stuck on the node's own hung mount.
        victim = user.python(OPEN_HUNG, node_hung.path)
        poll(lambda: state_of(victim.pid) == "D", 10, what="the victim in D")
        config = configure(tmp_path, filesystems=[{"path": str(tmp_path)},
                                                  {"path": str(node_hung.path), "mode": "read", "timeout": 1}],
                           stuck_tasks={"grace": 2})
        firsts = []
        for run in range(6):
            rec, took = healthcheck(config)
            assert took < RUN_LIMIT
            assert not [n for n in rec.get("notes", []) if "did not finish" in n], rec.get("notes")
            seen = [f for f in rec["findings"] if f["evidence"].get("pid") == victim.pid]
            assert seen and seen[0]["status"] in ("watching", "stuck"), f"run {run}: the scan missed the victim"
            # A staller read once (if ever it is in D) is never read again.
            for f in rec["findings"]:
                if f["status"] == "scan_blocked":
                    assert f["evidence"]["scans_stalled"] == 1, f
            if seen[0]["status"] == "stuck":
                break
            firsts.append(seen[0]["evidence"]["seconds"])
            time.sleep(0.5)
        assert seen[0]["status"] == "stuck", "the victim's grace clock went on across runs"
        assert seen[0]["evidence"]["mountpoint"] == str(node_hung.path), seen[0]["evidence"]
        assert firsts == sorted(firsts), firsts
        assert len(_children_named(user.uid, "python3")) >= stallers, "the attack held throughout"
        left = [k for k in stuck_children(tmp_path) if k.startswith(("stuck_tasks:scan", "stuck_tasks:starts"))]
        assert not left, stuck_children(tmp_path)
    finally:
        # Its server gone, the flushes fail and the execs go on.
        own.close()


def _children_named(uid: int, name: str) -> list[int]:
    from attacker import pids_of
    return sorted(pid for pid in pids_of(uid) if _comm_of(pid) == name)


EPOLL_LOCK = """
import os, select, sys, threading, time
mnt, ready = sys.argv[1], sys.argv[2]
f1 = os.open(mnt + "/f", os.O_CREAT | os.O_RDWR, 0o600)
f2 = os.open(mnt + "/f", os.O_RDWR)
f3 = os.open(mnt + "/g", os.O_CREAT | os.O_RDWR, 0o600)
# The server answers FLUSH with ENOSYS: the kernel sends no more flushes, so the dup2
# below can replace a file of the mount once the server is stalled.
os.close(os.open(mnt + "/h", os.O_CREAT | os.O_RDWR, 0o600))
ep = select.epoll()
open(ready, "w").write("opened")
while not os.path.exists(ready + ".stalled"):
    time.sleep(0.05)
# W1 waits on the stalled server holding the file's inode lock; W2 queues on that lock
# (D) in write(f2); A waits on the server's POLL answer holding the epoll's mutex.
threading.Thread(target=os.write, args=(f1, b"one"), daemon=True).start()
time.sleep(0.3)
threading.Thread(target=os.write, args=(f2, b"two"), daemon=True).start()
time.sleep(0.3)
threading.Thread(target=ep.register, args=(f3, select.EPOLLIN), daemon=True).start()
time.sleep(0.3)
# The descriptor W2's call names is now the epoll: its fdinfo waits on that mutex.
os.dup2(ep.fileno(), f2)
open(ready + ".armed", "w").write(str(f2))
time.sleep(3600)
"""


def _threads_in_d(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if "State:\tD" in Path(f"/proc/{pid}/task/{tid}/status").read_text():
                out.append(int(tid))
        except OSError:
            continue
    return out


def test_an_epoll_whose_mutex_is_held_never_puts_a_reader_of_ours_in_d(user, tmp_path):
    own = user.fuse("errno", "pollless", "--fail-op", "flush", "--errno", "ENOSYS")
    ready = user.home / "epoll.ready"
    p = user.python(EPOLL_LOCK, own.path, ready)
    poll(lambda: ready.exists() or p.poll() is not None, 10, what="the files opened")
    own.stall()
    Path(str(ready) + ".stalled").write_text("")
    armed = Path(str(ready) + ".armed")
    poll(lambda: armed.exists() or p.poll() is not None, 10, what="the epoll armed")
    assert p.poll() is None
    [w2] = poll(lambda: _threads_in_d(p.pid), 10, what="the queued writer in D")
    config = configure(tmp_path)
    found = None
    for _ in range(6):
        rec, took = healthcheck(config)
        assert took < RUN_LIMIT
        found = [f for f in rec["findings"] if f["evidence"].get("pid") == p.pid and f["status"].startswith("stuck")]
        if found:
            break
        time.sleep(0.3)
    assert found, rec["findings"]
    [f] = found
    ev = f["evidence"]
    assert ev["tids"] == [w2] and ev["syscall"] == "write" and ev["fd"] == int(armed.read_text())
    # The descriptor its call names is an epoll now: no mount, nothing proven, the job's
    # problem; its fdinfo (which waits on the epoll's mutex) is never read.
    assert (f["status"], f["severity"], ev["cause"]) == ("stuck_not_node", "warn", "unproven"), ev
    assert ev["attribution"][0] == f"fd {ev['fd']}: anon_inode:[eventpoll], no mount (its fdinfo not read)", ev
    # No reader of ours went into D on the epoll's mutex.
    assert not [k for k in stuck_children(tmp_path) if k.startswith("stuck_tasks:")], stuck_children(tmp_path)
    again, took = healthcheck(config)
    assert took < 10 and not stuck_children(tmp_path), "a later run stalls on nothing"


MANY_MOUNTS = """
import ctypes, os, sys, time
hung, ready, mounts, stuck = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
# A user namespace of our own, with a mount namespace: mounts there are ours to make.
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000 | 0x00020000) != 0:            # CLONE_NEWUSER | CLONE_NEWNS
    raise SystemExit("unshare: %d" % ctypes.get_errno())
open("/proc/self/setgroups", "w").write("deny")
open("/proc/self/uid_map", "w").write("0 %d 1" % uid)
open("/proc/self/gid_map", "w").write("0 %d 1" % gid)
base = os.path.join(os.environ["HOME"], "stack")
os.makedirs(base, exist_ok=True)
libc.mount(b"none", base.encode(), b"tmpfs", 0, None)
made = 0
# Each on a directory of its own: mounts stacked on one point cost a walk of the stack each.
while made < mounts:
    point = ("%s/%d" % (base, made)).encode()
    os.mkdir(point)
    if libc.mount(b"none", point, b"tmpfs", 0, None) != 0:
        break
    made += 1
for _ in range(stuck):
    if os.fork() == 0:
        try:
            open(hung + "/data.bin", "rb")
        finally:
            os._exit(0)
open(ready, "w").write(str(made))
time.sleep(3600)
"""


def test_a_namespace_of_100k_mounts_and_many_stuck_tasks_keep_the_run_bounded(user, node_hung, tmp_path):
    ready = user.home / "mounts.ready"
    p = user.python(MANY_MOUNTS, node_hung.path, ready, 99_000, 40)
    poll(lambda: ready.exists() or p.poll() is not None, 120, what="the mounts made")
    assert p.poll() is None
    assert int(ready.read_text()) > 90_000, "the namespace holds some 100k mounts"
    stuck_pids = poll(lambda: (lambda s: s if len(s) >= 40 else None)(
        [int(x) for x in os.listdir("/proc") if x.isdigit() and _uid(int(x)) == user.uid
         and int(x) != p.pid and state_of(int(x)) == "D"]), 30, what="40 tasks in D")
    config = configure(tmp_path)
    diagnosed: set[int] = set()
    walked = False
    for _ in range(8):
        rec, took = healthcheck(config)
        assert took < 30, f"one run took {took:.1f}s"
        found = [f for f in rec["findings"]
                 if f["status"].startswith("stuck") and f["evidence"].get("pid") in stuck_pids]
        now = {f["evidence"]["pid"] for f in found}
        # At most 16 processes diagnosed per run; the rest are named in the next runs.
        assert len(now) <= 16
        if now and len(diagnosed | now) < len(stuck_pids):
            assert any("diagnosed in the next runs" in n for n in rec["notes"]), rec["notes"]
        diagnosed |= now
        # The first opener waits in the mount's LOOKUP; the other 39 queue behind it on the
        # directory's lookup lock, and a lock waiter is never walked. Either way the huge
        # mount table is never walked in full: each finding says which of the two it is.
        for f in found:
            hows = f["evidence"]["attribution"]
            assert any("mounts: too many to walk" in h or "holds" in h or h.startswith("queued on a lock")
                       for h in hows), hows
            walked |= any("mounts: too many to walk" in h or "holds" in h for h in hows)
        if walked:
            break
        time.sleep(0.3)
    assert diagnosed, "the stuck tasks were diagnosed"
    assert walked, "the task waiting in the mount itself was diagnosed within a few runs"
    # The sightings kept between runs are bounded, whatever the number of D threads.
    saved = json.loads((tmp_path / "state" / "n1" / "stuck-tasks.json").read_text())
    assert len(saved) <= 256


def _uid(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def test_job_report_leaves_out_a_task_whose_proc_files_stall_and_reports_the_rest(user, tmp_path, monkeypatch):
    from slurm_hooks.host.jobs import JobRef
    from slurm_hooks.views import jobreport
    own = user.fuse("slow", "flushless", "--slow-op", "flush", "--delay", "3600")
    try:
        ready = user.home / "exec.ready"
        attacker = user.python(EXEC_WITH_UNANSWERED_FLUSH, own.path, ready)
        poll(lambda: ready.exists(), 10, what="the attacker in execve")
        poll(lambda: _stat_blocks(attacker.pid), 10, what="its stat to stop answering")
        other = user.python("import time; time.sleep(600)")
        # Both are the job's tasks (their cgroups would say so on a real node).
        monkeypatch.setattr(jobreport, "job_tasks", lambda job, node, proc="/proc": [
            (attacker.pid, JobRef("7", "0", "0")), (other.pid, JobRef("7", "0", "1"))])
        t0 = time.monotonic()
        doc = jobreport.collect_guarded("7", "n1", deadline=5.0, sample=0.1, stacks=False)
        took = time.monotonic() - t0
        assert took < 20, took
        assert [t["pid"] for t in doc["tasks"]] == [other.pid], doc
        assert any(n.startswith(f"pid {attacker.pid}: its /proc files do not answer") for n in doc["notes"]), doc
    finally:
        own.close()
