"""Attacks with a stalled buffer, each by a real unprivileged user with their own FUSE
mount (SECURITY.md, "A system call held in a page fault").

The primitive (tests/stalled_buffer.py): the user maps a file of their own FUSE mount,
stops its server and passes the mapping as a system call's buffer. The call waits in D
in the page fault, holding what it took: getdents64 holds its directory's lock (an
O_CREAT there queues behind it), write() sits inside the target filesystem's write
path. None of it may make a drain, an outage suspect, a recovery, a reboot or a missed
victim.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from attacker import PY, pids_of, unprivileged_user
from helpers import SLURM_HOOKS, poll
from mounts_fixtures import start_fuse

HERE = Path(__file__).resolve().parent
RUN_LIMIT = 50


@pytest.fixture(scope="module")
def trudy_session():
    with unprivileged_user("shk-trudy") as user:
        shutil.copy(HERE / "stalled_buffer.py", user.home / "stalled_buffer.py")
        yield user


@pytest.fixture
def trudy(trudy_session):
    yield trudy_session
    trudy_session.cleanup()


@pytest.fixture(scope="module")
def victor_session():
    with unprivileged_user("shk-victor") as user:
        yield user


@pytest.fixture
def victor(victor_session):
    yield victor_session
    victor_session.cleanup()


def state_of(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except OSError:
        pass
    return "?"


class Buffer:
    """The user's own FUSE mount holding the file whose pages the system calls fault on."""

    def __init__(self, user):
        self.user = user
        self.fuse = user.fuse("ok", f"buf{time.monotonic_ns()}")
        self.file = self.fuse.path / "pages"
        user.run(PY, "-c", f"open({str(self.file)!r}, 'wb').write(b'x' * (1 << 20))")
        self.pending: list = []
        self.stalled = False

    def prepare(self, op: str, target, count: int = 1) -> None:
        """The user's `count` processes set up for `op` on target, their buffer mapped,
        not yet faulted in, waiting for go()."""
        tag = f"sb{time.monotonic_ns()}"
        ready, go = self.user.home / f"{tag}.ready", self.user.home / f"{tag}.go"
        src = "-" if op == "create" else self.file
        self.user.spawn(PY, self.user.home / "stalled_buffer.py", op, src, target, "--count", str(count),
                        "--ready-file", ready, "--go-file", go, log=tag)
        poll(ready.exists, 30, what=f"{op} set up")
        self.pending.append((go, [int(x) for x in ready.read_text().split()]))

    def go(self) -> list[int]:
        """The server stalled, every prepared process into its system call; their pids."""
        if not self.stalled:
            self.fuse.stall()
            self.stalled = True
        pids = []
        for go, some in self.pending:
            go.write_text("go")
            pids += some
        self.pending = []
        return pids

    def start(self, op: str, target, count: int = 1) -> list[int]:
        self.prepare(op, target, count)
        return self.go()

    def resume(self):
        if self.stalled:
            os.kill(self.fuse.pid, signal.SIGUSR2)
            self.stalled = False


@pytest.fixture
def buffers():
    made: list[Buffer] = []

    def make(user) -> Buffer:
        made.append(Buffer(user))
        return made[-1]
    yield make
    for b in made:          # answered first: nothing of the user's is left in the kernel
        b.resume()


def in_d(pids: list[int], within: float = 15) -> None:
    poll(lambda: all(state_of(p) == "D" for p in pids), within,
         what=f"{len(pids)} tasks in D ({[(p, state_of(p)) for p in pids[:4]]})")


def configure(root: Path, cluster=None, **extra) -> Path:
    doc = {"state_dir": str(root / "state"), "journal": str(root / "journal.jsonl"), "syslog": False,
           "prometheus_textfile_dir": None, "gpu": {"enabled": "false"}, "node_name": "n1",
           "kernel_log": str(root / "kmsg"), "filesystems": [{"path": str(root)}],
           "stuck_tasks": {"grace": 0.5, "sample_window": 0.3, "inspect_timeout": 1, "scan_timeout": 2,
                           "non_job_tasks": "drain", "listpids_fallback": False},
           "outage": {"interval": 1}}
    if cluster is not None:
        doc["slurm"] = cluster.hooks_slurm(timeout=10)
    for k, v in extra.items():
        doc[k] = {**doc[k], **v} if isinstance(v, dict) and isinstance(doc.get(k), dict) else v
    (root / "kmsg").write_text("")
    path = root / "slurm-hooks.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def healthcheck(config: Path) -> dict:
    t0 = time.monotonic()
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(config), "healthcheck", "--json"], capture_output=True,
                       text=True, timeout=RUN_LIMIT, env={"SLURMD_NODENAME": "n1"})
    assert r.returncode in (0, 1), r.stderr
    rec = json.loads(r.stdout)
    rec["took"] = time.monotonic() - t0
    rec["findings"] = [f for c in rec["checks"] for f in c["findings"]]
    return rec


def no_act(rec: dict) -> None:
    acts = [(a["kind"], a["outcome"]) for a in rec["actions"] if a["kind"] in
            ("drain", "reboot", "recover", "requeue", "cancel") and a["outcome"] == "done"]
    assert not acts, rec["actions"]


def by_target(rec: dict, target) -> dict:
    [f] = [f for f in rec["findings"] if f["target"] == str(target)]
    return f


# --- 1: the probe's lock ----------------------------------------------------------------
@contextlib.contextmanager
def scratch(base: Path, kind: str, name: str):
    """A world-writable sticky directory (/tmp's kind) on ext4 or on a tmpfs of its own."""
    d = base / name
    d.mkdir()
    if kind == "tmpfs":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=1777", "tmpfs", str(d)], check=True)
    d.chmod(0o1777)
    try:
        yield d
    finally:
        if kind == "tmpfs":
            subprocess.run(["umount", "-l", str(d)], capture_output=True)


@pytest.mark.parametrize("kind", ["ext4", "tmpfs"])
def test_a_users_lock_on_a_probed_directory_is_never_the_storages_hang(clean_cluster, trudy, buffers, tmp_path,
                                                                      kind):
    """The user holds the lock of two probed scratch directories (getdents64 into their
    stalled buffer, a create of theirs queued as a writer): one the probes used before
    (their own directory there is known), one never probed. The first probe works as
    ever in its own directory; the second, queued on the lock for its own directory,
    is `locked`: a warning naming the lock, never a drain, a suspect or a reboot."""
    cluster = clean_cluster
    with scratch(trudy.base, kind, f"warm-{kind}") as warm, scratch(trudy.base, kind, f"cold-{kind}") as cold:
        config = configure(tmp_path, cluster, filesystems=[{"path": str(warm), "timeout": 2}],
                           stuck_tasks={"enabled": False})
        assert by_target(healthcheck(config), warm)["status"] == "ok"
        buf = buffers(trudy)
        buf.prepare("getdents", warm)
        buf.prepare("getdents", cold)
        held = buf.go()
        in_d(held)
        writers = buf.start("create", warm / "x") + buf.start("create", cold / "x")
        in_d(writers)
        config = configure(tmp_path, cluster, filesystems=[{"path": str(warm), "timeout": 2},
                                                           {"path": str(cold), "timeout": 2}],
                           stuck_tasks={"enabled": False})
        for run in range(2):            # the second: the probe still queued (still hung)
            rec = healthcheck(config)
            assert rec["took"] < RUN_LIMIT
            assert by_target(rec, warm)["status"] == "ok", by_target(rec, warm)
            f = by_target(rec, cold)
            assert (f["status"], f["severity"]) == ("locked", "warn"), f
            assert f["summary"] == f"fs {cold} probe waits on a lock >2s (create, {kind})", f["summary"]
            assert "held by another task" in f["detail"] and f["evidence"]["lock"] is True
            no_act(rec)
            node = cluster.show_node("n1")
            assert "DRAIN" not in node["State"] and str(cold) not in node.get("Comment", ""), node
        buf.resume()
        rec = poll_ok(config, cold)
        assert by_target(rec, warm)["status"] == "ok"
        own = os.stat(cold / ".slurm-hooks")
        assert (own.st_uid, own.st_mode & 0o7777) == (0, 0o700)


def poll_ok(config: Path, target, tries: int = 10) -> dict:
    for _ in range(tries):
        rec = healthcheck(config)
        if by_target(rec, target)["status"] == "ok":
            return rec
        time.sleep(0.5)
    raise AssertionError(by_target(rec, target))


def test_a_users_lock_on_a_shared_mountpoint_never_aborts_it(clean_cluster, trudy, buffers, tmp_path):
    """The node's shared FUSE mount, probed in read mode with `recover: fuse-abort`: the
    user holds its root directory's lock and queues a create there (the lock is taken
    before the permission check). The probe never lists that directory; where it must
    wait on the lock it is `locked`. The mount is never aborted: a bystander's read
    still succeeds."""
    cluster = clean_cluster
    shared = start_fuse(trudy.base / f"shared-{time.monotonic_ns()}", "ok", dirs=("data",))
    try:
        (Path(shared.path) / "data" / "f").write_text("bystander")
        config = configure(tmp_path, cluster, filesystems=[
            {"path": str(Path(shared.path)), "mode": "read", "timeout": 2, "recover": {"method": "fuse-abort"}}],
            stuck_tasks={"enabled": False})
        buf = buffers(trudy)
        held = buf.start("getdents", Path(shared.path))
        in_d(held)
        in_d(buf.start("create", Path(shared.path) / "x"))
        for _ in range(3):
            rec = healthcheck(config)
            f = by_target(rec, Path(shared.path))
            assert f["status"] in ("ok", "locked") and f["severity"] in ("ok", "warn"), f
            no_act(rec)
            node = cluster.show_node("n1")
            assert "DRAIN" not in node["State"] and str(Path(shared.path)) not in node.get("Comment", ""), node
        assert (Path(shared.path) / "data" / "f").read_text() == "bystander", "the mount was not aborted"
        buf.resume()
        poll_ok(config, Path(shared.path))
    finally:
        shared.close()


# --- 2: a write from the stalled buffer to a node mount ----------------------------------
@pytest.mark.parametrize("fusectl", ["absent", "mounted"])
def test_a_write_from_a_stalled_buffer_to_a_node_mount_is_the_users(trudy, buffers, tmp_path, fusectl):
    """The user writes to a file of the node's FUSE mount from a buffer in their own
    stalled mount, and keeps a slow read of the node's mount in flight (its fusectl
    `waiting` above 0). The task waits in the page fault, the node mount's write path
    below it: judged by the fault, it is the user's, never the node's (no drain)."""
    conn = "/sys/fs/fuse/connections"
    if fusectl == "absent":
        subprocess.run(["umount", conn], capture_output=True)
    else:
        subprocess.run(["mount", "-t", "fusectl", "none", conn], capture_output=True)
    node = start_fuse(trudy.base / f"node-{time.monotonic_ns()}", "slow", slow_op="read", delay=0.8,
                      dirs=("scratch",))
    try:
        (Path(node.path) / "scratch").chmod(0o1777)
        (Path(node.path) / "slow").write_text("slow")
        # Slow, not stuck: a read of 0.8 s after another, its switches moving.
        reader = trudy.python(f"while True: open({str(Path(node.path) / 'slow')!r}).read()")
        buf = buffers(trudy)
        [pid] = buf.start("write", Path(node.path) / "scratch" / "out")
        in_d([pid])
        config = configure(tmp_path, filesystems=[{"path": str(tmp_path)}],
                           stuck_tasks={"grace": 1.5})
        for _ in range(8):
            rec = healthcheck(config)
            mine = [f for f in rec["findings"] if f["evidence"].get("pid") == pid]
            if mine and mine[0]["status"] not in ("watching",):
                break
            time.sleep(0.5)
        [f] = mine
        ev = f["evidence"]
        assert ev["cause"] in ("user_mount", "unproven"), ev
        assert ev["syscall"] == "write" and f["severity"] != "fail", f
        assert "a page fault inside the system call" in json.dumps(ev), ev
        assert ev.get("mountpoint") != str(Path(node.path)), ev
        no_act(rec)
        assert not [a for a in rec["actions"] if a["kind"] == "drain"], rec["actions"]
        assert reader.poll() is None
    finally:
        node.close()
        subprocess.run(["mount", "-t", "fusectl", "none", conn], capture_output=True)


# --- 3: a user's own stuck tasks beside a real victim ------------------------------------
STUCK_MANY = """
import os, sys, time
mnt, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    if os.fork() == 0:
        try:
            os.stat(f"{mnt}/f{i}")
        finally:
            os._exit(0)
time.sleep(3600)
"""
IN_NAMESPACE = """
import os, sys
os.stat(sys.argv[1] + "/ns")
"""
OPEN_HUNG = """
import sys
open(sys.argv[1] + "/data.bin", "rb")
"""


@pytest.mark.parametrize("many", [16, 260])
def test_a_users_own_stuck_tasks_never_starve_a_real_victim(trudy, victor, tmp_path, many):
    """`many` D tasks of the user's (on their own stalled mount, held longer than the
    victim) and 4 more in 4 user namespaces of theirs, beside another user's task stuck
    on the node's hung mount: the victim is diagnosed (its place proven, in the host's
    own mount table) in its first run past the grace, and its sighting is kept across
    runs (its clock never restarts)."""
    own = trudy.fuse("stuck", "own")
    hung = start_fuse(trudy.base / f"node-hung-{time.monotonic_ns()}", "unanswered")
    try:
        trudy.python(STUCK_MANY, own.path, str(many))
        for _ in range(4):
            trudy.spawn("unshare", "-Urm", PY, "-c", IN_NAMESPACE, own.path)
        poll(lambda: sum(state_of(p) == "D" for p in pids_of(trudy.uid)) >= many + 4, 60,
             what=f"{many + 4} of the user's tasks in D")
        config = configure(tmp_path, filesystems=[{"path": str(tmp_path)}],
                           stuck_tasks={"grace": 3, "non_job_tasks": "warn"})
        healthcheck(config)                 # the user's tasks seen first: held longer
        time.sleep(1)
        victim = victor.python(OPEN_HUNG, Path(hung.path))
        poll(lambda: state_of(victim.pid) == "D", 10, what="the victim in D")
        first = None
        for run in range(10):
            rec = healthcheck(config)
            assert rec["took"] < RUN_LIMIT
            state = json.loads((tmp_path / "state" / "n1" / "stuck-tasks.json").read_text())
            kept = [e["first_seen"] for k, e in state.items() if k.startswith(f"{victim.pid}/")]
            assert kept, f"run {run}: the victim's sighting was dropped"
            first = kept[0] if first is None else first
            assert kept[0] == first, "the victim's clock restarted"
            seen = [f for f in rec["findings"] if f["evidence"].get("pid") == victim.pid]
            if seen and seen[0]["status"] == "stuck":
                break
            assert not seen or seen[0]["status"] == "watching", seen
            time.sleep(0.5)
        [f] = seen
        ev = f["evidence"]
        assert (f["status"], ev["cause"], ev["mountpoint"]) == ("stuck", "shared_filesystem", str(Path(hung.path))), ev
        assert "namespaces per run" not in json.dumps(ev)
        deferred = [n for n in rec.get("notes", []) if "diagnosed in the next runs" in n]
        assert not [n for n in deferred if str(victim.pid) in n], deferred
    finally:
        hung.close()
        own.close()


# --- 4: lock waiters beside a real victim -------------------------------------------------
OPEN_PATH_HUNG = """
import sys
open(sys.argv[1] + "/sub/data.bin", "rb")
"""


def test_four_lock_waiters_never_use_up_the_readers(trudy, victor, buffers, tmp_path):
    """The user holds a directory's lock and queues 4 creates on it; past the grace they
    are stuck tasks of theirs, queued on a lock: never walked (a walk would queue on the
    same lock and stay), so no reader of ours is left stuck and another user's victim on
    the node's hung mount is still walked and proven, run after run."""
    hung = start_fuse(trudy.base / f"node-hung-{time.monotonic_ns()}", "unanswered")
    locked = trudy.base / "locked"
    locked.mkdir()
    locked.chmod(0o1777)
    try:
        buf = buffers(trudy)
        in_d(buf.start("getdents", locked))
        waiters = buf.start("create", locked / ".x", count=4)
        in_d(waiters)
        victim = victor.python(OPEN_PATH_HUNG, Path(hung.path))
        poll(lambda: state_of(victim.pid) == "D", 10, what="the victim in D")
        config = configure(tmp_path, filesystems=[{"path": str(tmp_path)}],
                           stuck_tasks={"grace": 0.5, "non_job_tasks": "warn"})
        for _ in range(3):
            rec = healthcheck(config)
            time.sleep(0.3)
        for pid in waiters:
            [w] = [f for f in rec["findings"] if f["evidence"].get("pid") == pid]
            assert w["evidence"]["cause"] == "lock" and w["severity"] != "fail", w
        [f] = [f for f in rec["findings"] if f["evidence"].get("pid") == victim.pid]
        assert (f["evidence"]["cause"], f["evidence"]["mountpoint"]) == ("shared_filesystem", str(Path(hung.path))), f
        children = tmp_path / "state" / "n1" / "stuck-children.json"
        left = json.loads(children.read_text()) if children.exists() else {}
        theirs = [k for k in left if k.endswith(f":{trudy.uid}")]
        assert not theirs, left
    finally:
        hung.close()
