"""Attacks by a real unprivileged cluster user, each of which must fail.

slurm-hooks runs as root on every node; a job's user controls process names, command
lines, environments, file names, their own FUSE mounts (fusermount3, user namespaces),
cgroups delegated to them and text inside kernel records. Every test here runs the
attack as that user (tests/attacker.py: useradd, setpriv, sbatch as them) against the
real kernel and the real test cluster, and asserts that no node is drained, no other
job is touched and no child of ours is left stuck.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from attacker import PY, unprivileged_user
from helpers import ROOT, SLURM_HOOKS, KernelLog, gpu, ours, poll
from mounts_fixtures import start_fuse

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture(scope="session")
def mallory_session():
    with unprivileged_user() as user:
        yield user


@pytest.fixture
def mallory(mallory_session):
    yield mallory_session
    mallory_session.cleanup()


@pytest.fixture
def sys_hung(mallory_session):
    """The node's own FUSE mount (root's, allow_other) whose server never answers, where
    the user can reach it."""
    m = start_fuse(mallory_session.base / f"sys-hung-{time.monotonic_ns()}", "unanswered")
    yield m
    m.close()


# --- helpers ---------------------------------------------------------------------------
def _merge(into: dict, extra: dict) -> dict:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v
    return into


def configure(root: Path, cluster=None, **cfg) -> Path:
    doc = {"state_dir": str(root / "state"), "journal": str(root / "journal.jsonl"), "syslog": False,
           "prometheus_textfile_dir": None, "gpu": {"enabled": "false"},
           "filesystems": [{"path": str(root)}],
           "stuck_tasks": {"grace": 0.5, "sample_window": 0.3}, "outage": {"interval": 1}}
    if cluster is not None:
        doc["slurm"] = cluster.hooks_slurm(timeout=10)
    _merge(doc, cfg)
    path = root / "slurm-hooks.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def slurm_hooks(config: Path, *args, node: str = "n1", env: dict | None = None, timeout: float = 60):
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(config), *args], capture_output=True, text=True,
                       timeout=timeout, env={"SLURMD_NODENAME": node, **(env or {})})
    assert r.returncode in (0, 1), r.stderr
    return r


def healthcheck(config: Path, *args, **kw) -> dict:
    rec = json.loads(slurm_hooks(config, "healthcheck", "--json", *args, **kw).stdout)
    rec["findings"] = [f for c in rec["checks"] for f in c["findings"]]
    return rec


def about(rec: dict, pid: int) -> list[dict]:
    return [f for f in rec["findings"] if f["evidence"].get("pid") == pid]


def until_diagnosed(run, pid: int, statuses=("stuck", "stuck_own_mount"), tries: int = 10) -> dict:
    """Run the health check until it has diagnosed pid (grace is short in these tests)
    and, for a task on a network mount, knows the mount's scope (outage.interval is 1 s
    here): what it then does is what these tests look at."""
    for _ in range(tries):
        rec = run()
        if any(f["status"] in statuses for f in about(rec, pid)) and \
                not any(a.get("code") == "scope_unknown" for a in rec["actions"]):
            return rec
        time.sleep(0.3)
    raise AssertionError(f"pid {pid} never diagnosed; last findings {rec['findings']}")


def d_task(uid: int, within: float = 15) -> tuple[int, int]:
    """(pid, tid) of a thread of uid that stays in D. A thread that waits a moment for
    a disk read (paging in a program on a busy machine) is in D too, and gone soon."""
    def in_d() -> set[tuple[int, int, bytes]]:
        found = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{pid}").st_uid != uid:
                    continue
                for tid in os.listdir(f"/proc/{pid}/task"):
                    data = open(f"/proc/{pid}/task/{tid}/stat", "rb").read()
                    fields = data[data.rfind(b")") + 2:].split()
                    if fields[0] == b"D":
                        found.add((int(pid), int(tid), fields[19]))     # with its start time
            except OSError:
                continue
        return found

    def find():
        first = in_d()
        if not first:
            return None
        time.sleep(1.0)
        stays = sorted(first & in_d())
        return stays[0][:2] if stays else None
    return poll(find, within, what=f"a task of uid {uid} that stays in D")


def readable_by_users(cluster) -> Path:
    """The cluster's configuration lives in pytest's tmp, root's alone; users must read
    slurm.conf and plugstack.conf as they read /etc/slurm on a real node. Only the way
    there becomes traversable (o+x), nothing else becomes readable."""
    conf = Path(cluster.conf_path)
    for d in reversed(conf.parents):
        mode = d.stat().st_mode
        if not mode & 0o001:
            d.chmod((mode & 0o7777) | 0o001)
    for f in conf.parent.glob("*.conf"):
        f.chmod(0o644)
    return conf


def sbatch_as(user, cluster, body: str, *args: str) -> int:
    user._n += 1
    script = user.write(f"job{user._n}.sh", "#!/bin/sh\n" + body, 0o755)
    conf = readable_by_users(cluster)
    r = user.run(cluster.binary("sbatch"), "--parsable", "-N1", "-w", "n1", "--chdir", user.home,
                 "-o", user.home / f"job{user._n}.out", *args, script, env=user.env(SLURM_CONF=str(conf)))
    return int(r.stdout.strip().split(";")[0])


def actions(root: Path) -> list[dict]:
    path = root / "journal.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("event") == "action"]


def untouched(cluster, job: int) -> None:
    info = cluster.show_job(job)
    assert info["JobState"] == "RUNNING", info["JobState"]
    assert info.get("Restarts") == "0"
    assert info.get("AdminComment", "") in ("", "(null)"), info.get("AdminComment")


def not_drained(cluster, node: str = "n1") -> None:
    state = cluster.node_state(node)
    assert "DRAIN" not in state, (state, cluster.show_node(node).get("Reason"))


# --- 1. the user's own FUSE mount, found by discovery -------------------------------------
def test_a_users_fuse_mount_is_never_probed_and_drains_nothing(clean_cluster, mallory, tmp_path):
    hung = mallory.fuse("unanswered", "hung")       # root gets EACCES, or would hang
    fine = mallory.fuse("ok", "fine")
    # The shipped defaults: no filesystems listed, discovery of network/FUSE mounts on.
    config = configure(tmp_path, clean_cluster, filesystems=[], stuck_tasks={"enabled": False})
    probed = json.loads(slurm_hooks(config, "check", "filesystem", "--json").stdout)
    targets = [f["target"] for c in probed["checks"] for f in c["findings"]]
    assert "/tmp" in targets and str(hung.path) not in targets and str(fine.path) not in targets
    rec = healthcheck(config)
    assert not [f for f in rec["findings"] if str(mallory.home) in json.dumps(f)]
    assert not [a for a in rec["actions"] if a["kind"] == "drain"], rec["actions"]
    not_drained(clean_cluster)


# --- 2. a job stuck on its user's own FUSE mount is the job's problem ----------------------
OWN_MOUNT_JOB = f"""
rm -f own.ready
{PY} fusefs.py unanswered "$PWD/own" --fusermount --ready-file "$PWD/own.ready" --name own &
while [ ! -e own.ready ]; do sleep 0.05; done
exec {PY} -c 'open("own/data.bin", "rb")'
"""
USERNS_JOB = f"""
rm -f ns.ready
exec unshare -Urm sh -c '{PY} fusefs.py unanswered "$PWD/ns" --ready-file "$PWD/ns.ready" --name ns &
while [ ! -e ns.ready ]; do sleep 0.05; done
exec {PY} -c "open(\\"ns/data.bin\\", \\"rb\\")"'
"""


@pytest.mark.parametrize("how,own_mount", [("fusermount", "comment"), ("fusermount", "cancel"),
                                           ("fusermount", "requeue"), ("userns", "comment")])
def test_a_job_stuck_on_its_users_own_mount_is_the_jobs_problem(clean_cluster, mallory, tmp_path,
                                                                how, own_mount):
    cluster = clean_cluster
    mallory.mkdir("own" if how == "fusermount" else "ns")
    job = sbatch_as(mallory, cluster, OWN_MOUNT_JOB if how == "fusermount" else USERNS_JOB, "--requeue")
    pid, _ = d_task(mallory.uid)
    config = configure(tmp_path, cluster, stuck_tasks={"own_mount": own_mount})
    rec = until_diagnosed(lambda: healthcheck(config), pid)
    [f] = [f for f in about(rec, pid) if f["status"] == "stuck_own_mount"]
    assert f["severity"] == "warn" and f["job"] == str(job) and f["evidence"]["mount_owner"] == mallory.uid
    assert "the task's own user" in f["summary"] and rec["status"] != "unhealthy"
    kinds = [a["kind"] for a in rec["actions"]]
    assert "drain" not in kinds and "reboot" not in kinds, rec["actions"]
    assert kinds == ["comment"] + ([own_mount] if own_mount != "comment" else []), rec["actions"]
    assert all(a["outcome"] == "done" for a in rec["actions"]), rec["actions"]
    assert f"job {job}" in cluster.show_job(job)["AdminComment"]
    if own_mount == "cancel":
        cluster.wait_for(lambda: cluster.job_state(job) in ("CANCELLED", "COMPLETED"), 15, what="cancelled")
    elif own_mount == "requeue":
        cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 15, what="requeued")
    else:
        assert cluster.job_state(job) == "RUNNING"
    # No drain, no reboot, no drain-storm budget: the node took no part.
    not_drained(cluster)
    again = healthcheck(config)
    done = [a for a in again["actions"] if a["outcome"] == "done"]
    if own_mount == "requeue" and cluster.job_state(job) == "COMPLETING":
        # Slurm's wait for the task that cannot die is said on the job once: news of
        # Slurm's, not the diagnosis again.
        assert [(a["kind"], a["incident"].endswith("/completing")) for a in done] in ([], [("comment", True)]), done
        again = healthcheck(config)
        done = [a for a in again["actions"] if a["outcome"] == "done"]
    assert not done, ("once per incident", done)
    assert not (tmp_path / "state" / "n1" / "breaker.json").exists()


# --- 3. kernel-log lines a user forged into a kernel record ------------------------------
def forge(log: KernelLog, text: str):
    """The kernel's own segfault record for a process of the user whose faulting code
    lies in a file named `text` (the kernel ends the line with that name), written into
    a fake kernel log: a test never puts such a line into the host's buffer, where it
    would stay until reboot. Returns the record as slurm-hooks reads it."""
    from slurm_hooks.host import kmsg
    log.write(f"python3[{os.getpid()}]: segfault at 0 ip 00007f0000000000 sp 00007ffd00000000 error 4 "
              f"in {text}[7f0000000000+1000]", prio=6)
    rec = kmsg.read(path=str(log))[-1]
    assert rec.from_kernel and "segfault at" in rec.text, rec
    return rec


def test_a_forged_xid_in_a_segfault_record_is_not_an_xid(tmp_path):
    from slurm_hooks.host import kmsg
    log = KernelLog(tmp_path / "kmsg")
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    rec = forge(log, xid)
    assert list(kmsg.match([rec], "xid")) == []
    # The GPU check reading that kernel log: no event.
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"gpus": [gpu(i) for i in range(2)]}))
    config = configure(tmp_path, gpu={"enabled": "true", "count": 2, "timeout": 5}, kernel_log=str(log))
    out = json.loads(slurm_hooks(config, "check", "gpu", "--json", env={
        "PYTHONPATH": str(ROOT / "tests" / "fake_nvml"), "FAKE_NVML_SCENARIO": str(scenario)}).stdout)
    findings = [f for c in out["checks"] for f in c["findings"]]
    assert not [f for f in findings if f["status"].startswith("xid")], findings
    assert out["status"] == "healthy"


HANG_ON = """
import sys
open(sys.argv[1] + "/x", "rb")
"""


def test_a_forged_hung_task_line_does_not_skip_the_grace(mallory, sys_hung, tmp_path):
    p = mallory.python(HANG_ON, sys_hung.path)
    pid, _ = d_task(mallory.uid)
    assert pid == p.pid
    time.sleep(2.2)
    log = KernelLog(tmp_path / "kmsg")
    forge(log, f"INFO: task python3:{pid} blocked for more than 2 seconds.")
    config = configure(tmp_path, stuck_tasks={"grace": 2, "sample_window": 0.3, "non_job_tasks": "drain"},
                       kernel_log=str(log))
    out = json.loads(slurm_hooks(config, "check", "stuck_tasks", "--json").stdout)
    [f] = [f for c in out["checks"] for f in c["findings"] if f["evidence"].get("pid") == pid]
    # Our first look at the task: without the kernel's (real) word, it is only watched.
    assert f["status"] == "watching", f


# --- 4. cgroups a user made to look like a job's ----------------------------------------
FREEZER = Path("/sys/fs/cgroup/freezer")
INTO_CGROUP = """
import os, sys, time
cgroup, hung, go = sys.argv[1], sys.argv[2], sys.argv[3]
if cgroup != "-":
    with open(cgroup + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
while not os.path.exists(go):
    time.sleep(0.05)
open(hung + "/x", "rb")
"""


@pytest.fixture
def cgroups(mallory_session):
    made: list[Path] = []
    yield made
    mallory_session.cleanup()              # a cgroup with a process in it cannot go
    for path in sorted(made, key=lambda p: len(str(p)), reverse=True):
        for _ in range(50):
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def test_a_spoofed_job_cgroup_does_not_make_the_task_that_job(clean_cluster, mallory, sys_hung,
                                                               tmp_path, cgroups):
    cluster = clean_cluster
    victim = cluster.sbatch("-N1", "-w", "n1", script="sleep 300\n")
    cluster.wait_for(lambda: cluster.job_state(victim) == "RUNNING", 20, what="victim running")
    # What systemd does for user@UID.service: a cgroup subtree the user owns.
    delegated = FREEZER / "user.slice" / f"user-{mallory.uid}.slice" / f"user@{mallory.uid}.service"
    delegated.mkdir(parents=True)
    cgroups.extend([delegated.parent.parent, delegated.parent, delegated])
    for path in (delegated, delegated / "cgroup.procs", delegated / "tasks"):
        os.chown(path, mallory.uid, mallory.gid)
    spoof = delegated / "slurm" / "uid_0" / f"job_{victim}" / "step_batch" / "task_0"
    mallory.run("mkdir", "-p", spoof)
    cgroups.extend(spoof.parents[i] for i in range(4))
    cgroups.append(spoof)
    go = mallory.home / "go"
    p = mallory.python(INTO_CGROUP, spoof, sys_hung.path, go)
    poll(lambda: f"job_{victim}" in open(f"/proc/{p.pid}/cgroup").read(), 10, what="moved")
    go.touch()
    d_task(mallory.uid)
    config = configure(tmp_path, clean_cluster)
    rec = until_diagnosed(lambda: healthcheck(config), p.pid)
    [f] = [f for f in about(rec, p.pid) if f["status"] == "stuck"]
    assert f["job"] is None and f["severity"] == "warn", f     # a task outside any job
    assert rec["actions"] == []
    untouched(cluster, victim)
    not_drained(cluster)


def test_job_actions_need_slurms_word_on_the_jobs_user(clean_cluster, mallory, sys_hung, tmp_path, cgroups):
    """Even a real Slurm cgroup path is not enough: the job must be Slurm's job of the
    task's user on this node. Root puts the user's task into a cgroup saying it is job J
    of the user's uid, where Slurm's job J is root's."""
    cluster = clean_cluster
    victim = cluster.sbatch("-N1", "-w", "n1", script="sleep 300\n")
    cluster.wait_for(lambda: cluster.job_state(victim) == "RUNNING", 20, what="victim running")
    fake = FREEZER / "slurm_n1" / f"uid_{mallory.uid}" / f"job_{victim}" / "step_0"
    fake.mkdir(parents=True)
    cgroups.extend([fake.parent.parent, fake.parent, fake])
    go = mallory.home / "go"
    p = mallory.python(INTO_CGROUP, "-", sys_hung.path, go)
    (fake / "cgroup.procs").write_text(str(p.pid))
    go.touch()
    d_task(mallory.uid)
    config = configure(tmp_path, clean_cluster, actions={"drain": False})
    rec = until_diagnosed(lambda: healthcheck(config), p.pid)
    [f] = [f for f in about(rec, p.pid) if f["status"] == "stuck"]
    assert f["job"] == str(victim)
    refused = {a["kind"]: a for a in rec["actions"]}
    assert set(refused) == {"comment", "requeue"}, rec["actions"]
    for a in refused.values():
        assert a["outcome"] == "skipped" and \
            f"belongs to uid 0, the diagnosed task to uid {mallory.uid}" in a["message"], a
    untouched(cluster, victim)


# --- 5. memory reads a user can make hang --------------------------------------------------
MEM_ATTACK = """
import ctypes, os, signal, sys, threading, time
own, hung, server, ready = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.open.argtypes = [ctypes.c_void_p, ctypes.c_int]
path = (hung + "/x").encode()
with open(own + "/page", "wb") as f:
    f.write(path + bytes(4096 - len(path)))
fd = os.open(own + "/page", os.O_RDONLY)
addr = libc.mmap(None, 4096, 1, 1, fd, 0)       # the path lives in a page of the user's file
ctypes.string_at(addr, 1)
threading.Thread(target=lambda: libc.open(addr, 0), daemon=True).start()   # stuck in D, arg = addr
time.sleep(0.5)
libc.madvise(addr, 4096, 4)                     # unmap the page and drop it from the cache:
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # reading it means asking the server again
os.kill(server, signal.SIGUSR1)                 # which no longer answers
open(ready, "w").close()
time.sleep(3600)
"""


def test_reading_a_stuck_tasks_memory_never_touches_a_users_file_pages(mallory, sys_hung, tmp_path):
    own = mallory.fuse("ok", "own")
    ready = mallory.home / "mem.ready"
    p = mallory.python(MEM_ATTACK, own.path, sys_hung.path, own.pid, ready)
    poll(lambda: ready.exists() or p.poll() is not None, 10, what="attack ready")
    assert p.poll() is None
    # Real runs that only report: the grace spans runs, and a look keeps no state.
    config = configure(tmp_path, stuck_tasks={"grace": 0.5, "sample_window": 0.3, "inspect_timeout": 1},
                       actions={"report_only": True})
    run = lambda: json.loads(slurm_hooks(config, "healthcheck", "--json").stdout)  # noqa: E731
    for _ in range(6):
        out = run()
        found = [f for c in out["checks"] for f in c["findings"]
                 if f["evidence"].get("pid") == p.pid and f["status"] == "stuck_not_node"]
        if found:
            break
        time.sleep(0.3)
    [f] = found
    assert f["evidence"]["syscall"] == "openat" and f["evidence"]["inspect"] == \
        "path argument not in anonymous memory: not read", f["evidence"]
    # A path the user hid where it cannot be read proves nothing: not the node's.
    assert f["evidence"]["cause"] == "unproven" and f["severity"] == "warn", f["evidence"]
    # Nothing of ours is stuck reading the user's page.
    stuck = tmp_path / "state" / "n1" / "stuck-children.json"
    assert not stuck.exists() or json.loads(stuck.read_text()) == {}


ENV_ATTACK = """
import ctypes, mmap, os, sys, threading, time
hung, ready = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
libc.sbrk.restype = ctypes.c_void_p
size = 1 << 30                                     # a 1 GiB "environment", never touched
big = libc.mmap(None, size, 1, 0x22 | 0x4000, -1, 0)  # PROT_READ, MAP_PRIVATE|ANON|NORESERVE
f = open("/proc/self/stat").read()
v = [int(x) for x in f[f.rfind(")") + 2:].split()[1:]]
field = lambda n: v[n - 4]
auxv = open("/proc/self/auxv", "rb").read()
auxbuf = ctypes.create_string_buffer(auxv)
class MM(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("start_code", "end_code", "start_data", "end_data",
                "start_brk", "brk", "start_stack", "arg_start", "arg_end", "env_start", "env_end")] + \\
               [("auxv", ctypes.c_uint64), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]
mm = MM(field(26), field(27), field(45), field(46), field(47), libc.sbrk(0), field(28), field(48), field(49),
        big, big + size, ctypes.addressof(auxbuf), len(auxv), 0xffffffff)
rc = libc.prctl(35, 14, ctypes.addressof(mm), ctypes.sizeof(mm), 0)   # PR_SET_MM, PR_SET_MM_MAP
open(ready, "w").write(str(rc if rc == 0 else ctypes.get_errno()))
threading.Thread(target=lambda: open(hung + "/x", "rb"), daemon=True).start()
time.sleep(3600)
"""


def test_a_huge_environment_is_read_only_so_far(mallory, sys_hung, tmp_path):
    ready = mallory.home / "env.ready"
    p = mallory.python(ENV_ATTACK, sys_hung.path, ready)
    poll(lambda: ready.exists() and ready.read_text(), 10, what="attack ready")
    assert ready.read_text() == "0", f"prctl(PR_SET_MM_MAP) failed: errno {ready.read_text()}"
    stat = open(f"/proc/{p.pid}/stat").read()
    env_start, env_end = (int(x) for x in stat[stat.rfind(")") + 2:].split()[47:49])
    assert env_end - env_start == 1 << 30
    config = configure(tmp_path, stuck_tasks={"grace": 0.5, "sample_window": 0.3, "inspect_timeout": 2},
                       actions={"report_only": True})
    for _ in range(6):
        t0 = time.monotonic()
        out = json.loads(slurm_hooks(config, "healthcheck", "--json").stdout)
        took = time.monotonic() - t0
        found = [f for c in out["checks"] for f in c["findings"]
                 if f["evidence"].get("pid") == p.pid and f["status"] == "stuck"]
        if found:
            break
        time.sleep(0.3)
    [f] = found
    assert f["evidence"]["inspect"] == "ok", f["evidence"]      # read, but only 128 KiB of it
    assert took < 5


# --- 6. control characters a user chose --------------------------------------------------
EVIL_JOB = f"""
ARG=$(printf 'arg-\\033]0;title\\007-end')
exec {PY} -c '
import sys
open("/proc/self/comm", "w").write("\\033[2J\\033[31mX\\nY")
open(sys.argv[1] + "/\\033[31mlog\\n.txt", "a")
' "$HUNG" "$ARG"
"""


def test_no_control_character_of_a_user_reaches_any_output(clean_cluster, mallory, sys_hung, tmp_path):
    cluster = clean_cluster
    prom = tmp_path / "prom"
    prom.mkdir()
    sock_path = str(tmp_path / "syslog.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(0.2)
    job = sbatch_as(mallory, cluster, f"HUNG={sys_hung.path}\n" + EVIL_JOB, "--requeue")
    pid, _ = d_task(mallory.uid)
    config = configure(tmp_path, cluster, syslog=True, syslog_socket=sock_path,
                       prometheus_textfile_dir=str(prom))
    rec = until_diagnosed(lambda: healthcheck(config), pid)
    [f] = [f for f in about(rec, pid) if f["status"] == "stuck"]
    assert f["evidence"]["comm"].startswith("\\x1b[2J") and "\\x0a" in f["evidence"]["file"], f
    assert "arg-\\x1b]0;title\\x07-end" in f["evidence"]["cmdline"]
    texts = {
        "report": slurm_hooks(config, "healthcheck", "--dry-run").stdout,
        "json": json.dumps(rec, ensure_ascii=False),
        "explain": slurm_hooks(config, "explain", "--node", "n1").stdout,
        "status": slurm_hooks(config, "status").stdout,
        "prometheus": (prom / "slurm_hooks_n1.prom").read_text(),
        "reason": cluster.show_node("n1")["Reason"],
        "admincomment": cluster.show_job(job).get("AdminComment", ""),
    }
    syslog = []
    while True:
        try:
            syslog.append(sock.recv(65536).decode("utf-8", "replace"))
        except (socket.timeout, BlockingIOError):
            break
    sock.close()
    texts["syslog"] = "\n".join(syslog)
    assert syslog and f"pid {pid}" in texts["reason"] and f"job {job}" in texts["admincomment"]
    for name, text in texts.items():
        assert "\x1b" not in text and "\x07" not in text, name
        assert not CONTROL.search(text.replace("\n", "").replace("\t", "")), name
    # Written out, not dropped: an admin still sees what the user chose.
    assert "\\x1b[31mlog\\x0a.txt" in texts["report"] and "\\x1b[31mlog\\x0a.txt" in texts["explain"]


# A job's name and comment are its user's, line breaks included: `scontrol show job`
# prints them as they are. A line written to look like the start of another record:
FORGED = ("x\nJobId={fake} JobName=y UserId=root(0) JobState=REQUEUED Restarts=5 NodeList=n1 "
          "BatchFlag=1 Requeue=1 AdminComment=slurm-hooks: node n1: job {fake} forged\n")


def test_line_breaks_in_a_jobs_name_and_comment_neither_forge_a_job_nor_cut_its_own(
        clean_cluster, mallory, sys_hung, tmp_path):
    cluster = clean_cluster
    fake = 424242
    forged = FORGED.format(fake=fake)
    job = sbatch_as(mallory, cluster, f"exec {PY} -c 'open(\"{sys_hung.path}/x\")'\n", "--requeue",
                    f"--job-name={forged}", f"--comment={forged}")
    pid, _ = d_task(mallory.uid)
    cluster.scontrol("update", f"jobid={job}", "admincomment=ticket 4711")
    config = configure(tmp_path, cluster, actions={"reboot": False, "requeue_job": False})
    rec = until_diagnosed(lambda: healthcheck(config), pid)
    # Slurm's word on the job is read whole: it runs on n1 and is mallory's, so it is acted on.
    acts = {a["kind"]: a for a in rec["actions"]}
    assert acts["comment"]["outcome"] == "done", rec["actions"]
    comment = cluster.run("squeue", "--noheader", f"--jobs={job}", "--Format=admin_comment:0").stdout
    assert comment.startswith(f"ticket 4711 | slurm-hooks: node n1: job {job} "), comment      # the admin's text kept
    # `status` lists the real job on the drained node, and no job the user made up.
    st = json.loads(slurm_hooks(config, "status", "--json").stdout)
    jobs = {j["job"]: j for d in st["groups"] for n in d["nodes"] for j in n["jobs"]}
    assert str(fake) not in jobs and jobs[str(job)]["restarts"] == "0", st


# --- 7. files root writes where a user can reach --------------------------------------------
def test_metrics_are_never_written_through_a_users_directory_or_link(mallory, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    shared = mallory.base / "textfile"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)                                   # writable by everyone
    # The user plants links at every name the old fixed temporary name could take.
    for pid in range(os.getpid(), os.getpid() + 2000):
        mallory_link = shared / f"slurm_hooks_n1.prom.{pid}.tmp"
        os.symlink(victim, mallory_link)
        os.lchown(mallory_link, mallory.uid, mallory.gid)
    theirs = mallory.mkdir("textfile")                     # owned by the user
    for directory in (shared, theirs):
        config = configure(tmp_path, prometheus_textfile_dir=str(directory), filesystems=[
            {"path": str(tmp_path)}], stuck_tasks={"enabled": False})
        rec = healthcheck(config)
        assert [w for w in rec["local_errors"] if "not written" in w and str(directory) in w], rec["local_errors"]
        assert not (directory / "slurm_hooks_n1.prom").exists()
    assert victim.read_text() == "precious\n"
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o755)
    config = configure(tmp_path, prometheus_textfile_dir=str(ours), stuck_tasks={"enabled": False})
    healthcheck(config)
    assert (ours / "slurm_hooks_n1.prom").read_text().startswith("# HELP")
    assert [p.name for p in ours.iterdir()] == ["slurm_hooks_n1.prom"]


def test_the_write_probe_leaves_nothing_behind_when_the_read_back_fails(make_fuse, tmp_path):
    m = make_fuse("errno", errno="EIO", fail_op="read")
    config = configure(tmp_path, filesystems=[{"path": str(m.path)}], stuck_tasks={"enabled": False})
    out = json.loads(slurm_hooks(config, "check", "filesystem", "--json").stdout)
    [f] = [f for c in out["checks"] for f in c["findings"]]
    assert (f["status"], f["evidence"]["step"], f["evidence"]["errno"]) == ("error", "read", "EIO")
    assert not [n for n in os.listdir(m.path) if n.startswith(".slurm-hooks-probe")]


# --- 8. a task of the job's own making is never proven to be the node's ------------------
# Each job below gets one of its tasks stuck in D by its own doing, in a way the
# stuck-task check once blamed on the node (a drain for good and a reboot). The place
# a task waits on is the node's only when the kernel's own ids prove it (waits.py).
OWN_OK_FUSE = f"""
rm -f own.ready; mkdir -p own
{PY} fusefs.py ok "$PWD/own" --fusermount --no-interrupt --ready-file "$PWD/own.ready" --name own &
FUSE=$!
while [ ! -e own.ready ]; do sleep 0.05; done
head -c 65536 /dev/zero > own/data.bin
"""
STALL = 'kill -USR1 $FUSE; sleep 0.3\n'
ATTACKS = {
    # clone(CLONE_VFORK) without CLONE_VM, a child that never execs: the parent waits
    # in wait_for_vfork_done, in D, with no file at all.
    "vfork": f"""exec {PY} -c '
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
nr = {{"x86_64": 56, "aarch64": 220}}[os.uname().machine]
if libc.syscall(nr, 0x4000 | 17, 0, 0, 0, 0) == 0:
    time.sleep(3600)
    os._exit(0)
time.sleep(3600)
'
""",
    # open() of a link on the node's disk that leads into the user's own stalled mount.
    "symlink": OWN_OK_FUSE + 'ln -sfn "$PWD/own/data.bin" "$LINK"\n' + STALL
    + f"exec {PY} -c 'open(\"'\"$LINK\"'\", \"rb\")'\n",
    # openat(fd of /tmp, absolute path on the user's mount): the dirfd names the node's /tmp.
    "dirfd": OWN_OK_FUSE + STALL + f"""exec {PY} -c '
import os, sys
os.open(sys.argv[1], os.O_RDONLY, dir_fd=os.open("/tmp", os.O_RDONLY))
' "$PWD/own/data.bin"
""",
    # A file opened, its mount lazily unmounted: fd/N then reads "/data.bin", as if on /.
    "lazy_unmount": OWN_OK_FUSE + f"""exec {PY} -c '
import os, signal, subprocess, sys, time
fd = os.open("own/data.bin", os.O_RDONLY)
subprocess.run(["fusermount3", "-u", "-z", "own"], check=True)
os.kill(int(sys.argv[1]), signal.SIGUSR1)
time.sleep(0.3)
os.read(fd, 4096)
' $FUSE
""",
    # A page fault on a mapping of the user's own file: no system call, no path.
    "page_fault": OWN_OK_FUSE + f"""exec {PY} -c '
import mmap, os, signal, sys, time
f = open("own/data.bin", "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
os.kill(int(sys.argv[1]), signal.SIGUSR1)
time.sleep(0.3)
m[40000]
' $FUSE
""",
    # 800 mounts in a user namespace of the user's own push their FUSE line past the
    # first 64 KiB of the task's mountinfo.
    "mountinfo": f"""rm -f ns.ready
exec unshare -Urm sh -c 'mkdir -p pad ns; i=0; while [ $i -lt 800 ]; do mount -t tmpfs pad pad; i=$((i+1)); done
{PY} fusefs.py unanswered "$PWD/ns" --ready-file "$PWD/ns.ready" --name ns &
while [ ! -e ns.ready ]; do sleep 0.05; done
exec {PY} -c "open(\\"ns/data.bin\\", \\"rb\\")"'
""",
}
# What the check must make of each: never the node's.
EXPECTED = {"vfork": ("stuck_not_node", "other"), "symlink": ("stuck_own_mount", "user_mount"),
            "dirfd": ("stuck_own_mount", "user_mount"), "lazy_unmount": ("stuck_not_node", "unproven"),
            "page_fault": ("stuck_not_node", "unproven"), "mountinfo": ("stuck_own_mount", "user_mount")}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_task_stuck_by_its_own_jobs_doing_never_drains_or_reboots_the_node(
        clean_cluster, mallory, tmp_path, attack):
    cluster = clean_cluster
    link = Path(f"/tmp/shk-link-{os.getpid()}-{attack}")
    # --no-requeue: once, a requeue skipped counted as a kill and the next run rebooted.
    job = sbatch_as(mallory, cluster, f"LINK={link}\n" + ATTACKS[attack], "--no-requeue")
    try:
        try:
            pid, _ = d_task(mallory.uid, within=30)
        except AssertionError as e:
            out = mallory.home / f"job{mallory._n}.out"
            raise AssertionError(f"{e}; the job said: {out.read_text() if out.exists() else '(nothing)'}")
        config = configure(tmp_path, cluster, stuck_tasks={"inspect_timeout": 1})
        status, cause = EXPECTED[attack]
        rec = until_diagnosed(lambda: healthcheck(config), pid, statuses=(status, "stuck"))
        [f] = [f for f in about(rec, pid) if f["status"] in (status, "stuck")]
        assert (f["status"], f["evidence"]["cause"], f["severity"]) == (status, cause, "warn"), f
        assert f["job"] == str(job) and rec["status"] != "unhealthy"
        if cause == "user_mount":
            assert f["evidence"]["mount_owner"] == mallory.uid, f["evidence"]
        # The job gets the diagnosis; the node takes no part: no drain, no reboot, no
        # share of the drain-storm breaker, however many runs see the task.
        assert [(a["kind"], a["outcome"]) for a in rec["actions"]] == [("comment", "done")], rec["actions"]
        assert f"job {job}" in cluster.show_job(job)["AdminComment"]
        for _ in range(2):
            again = healthcheck(config)
            assert not [a for a in again["actions"] if a["kind"] in ("drain", "reboot")], again["actions"]
        not_drained(cluster)
        assert cluster.job_state(job) == "RUNNING"
        assert not (tmp_path / "state" / "n1" / "breaker.json").exists()
    finally:
        if link.is_symlink():
            link.unlink()


LINK_TO_NODE_MOUNT = f"""ln -sfn "$HUNG/data.bin" "$PWD/node-link"
exec {PY} -c 'open("node-link", "rb")'
"""


def test_a_link_that_does_lead_to_the_nodes_hung_mount_drains_and_requeues(clean_cluster, mallory,
                                                                            sys_hung, tmp_path):
    """The true positive stays: the walk follows the user's link to the node's own mount."""
    cluster = clean_cluster
    job = sbatch_as(mallory, cluster, f"HUNG={sys_hung.path}\n" + LINK_TO_NODE_MOUNT, "--requeue")
    pid, _ = d_task(mallory.uid)
    config = configure(tmp_path, cluster, stuck_tasks={"inspect_timeout": 1}, actions={"reboot": False})
    rec = until_diagnosed(lambda: healthcheck(config), pid)
    [f] = [f for f in about(rec, pid) if f["status"] == "stuck"]
    ev = f["evidence"]
    assert (ev["mountpoint"], ev["cause"], f["severity"]) == (str(sys_hung.path), "shared_filesystem", "fail"), ev
    kinds = {a["kind"]: (a["outcome"], a["code"]) for a in rec["actions"]}
    # (Drained by the run that found it, before the mount's scope was known.)
    assert kinds.get("drain") == ("skipped", "already_drained") and kinds.get("requeue") == ("done", ""), \
        rec["actions"]
    # The path is the task's own (for people: its link), the mount the one the walk
    # proved, in the summary; the node's reason is the finding's, with our mark.
    assert f"on {mallory.home}/node-link ({ev['fstype']} {sys_hung.path})" in f["summary"], f["summary"]
    # (`sinfo -R` is every user's: the mount, not the user's path.)
    want = f"job {job} stuck in openat() on {sys_hung.path} ({ev['fstype']}), pid {pid}"
    assert f["reason"] == want, f["reason"]
    reason = cluster.show_node("n1")["Reason"]
    assert ours(reason, want), reason


# --- site checks: a path only root can have made -----------------------------------------------
def _site_findings(config: Path) -> dict:
    rec = json.loads(slurm_hooks(config, "check", "site", "--json").stdout)
    return {f["target"]: f for c in rec["checks"] for f in c["findings"] if f["check"] == "site"}


def _drop_in(path: Path, mark: Path, interpreter: str = "/bin/sh") -> Path:
    path.write_text(f"#!{interpreter}\n: > {mark}\necho ran\n")
    path.chmod(0o755)
    return path


def test_a_site_check_whose_hashbang_line_names_the_users_program_is_refused(mallory, root_only_dir, tmp_path):
    """Root-owned drop-ins whose `#!` line passes the user's program as the interpreter's
    argument (`#!/bin/sh /user/x` runs /user/x, so does `#!/usr/bin/env -S /user/x`) are
    refused, naming the user's path; a bare word the shell would run from the working
    directory too. Lines that name only root's files still run, env's program found in
    the site checks' PATH."""
    checks = root_only_dir / "checks.d"
    checks.mkdir(mode=0o755)
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = mallory.write("x", f"#!/bin/sh\n: > {mallory.home}/ran-as-root\necho evil\n", mode=0o755)
    _drop_in(checks / "viash", marks / "viash", interpreter=f"/bin/sh {evil}")
    _drop_in(checks / "viaenv", marks / "viaenv", interpreter=f"/usr/bin/env -S {evil}")
    _drop_in(checks / "bare", marks / "bare", interpreter="/bin/sh x")
    _drop_in(checks / "envsh", marks / "envsh", interpreter="/usr/bin/env sh")
    _drop_in(checks / "shopt", marks / "shopt", interpreter="/bin/sh -e")
    config = configure(tmp_path, site_checks={"dir": str(checks), "timeout": 5},
                       filesystems=[{"path": str(tmp_path)}], stuck_tasks={"enabled": False})
    found = _site_findings(config)
    for name in ("viash", "viaenv"):
        f = found[name]
        assert (f["status"], f["severity"]) == ("refused", "warn"), f
        head = f"site check {name} refused: a path on its #! line: "
        assert f["summary"].startswith(head), f["summary"]
        # The first component of the user's path that is not root's alone (/tmp's kind,
        # or their own home), named.
        named = f["summary"][len(head):].split(" is ", 1)[0]
        assert str(evil).startswith(named) and named != "/", f["summary"]
    assert found["bare"]["status"] == "refused" and "'x': a bare word" in found["bare"]["summary"]
    for name in ("envsh", "shopt"):
        assert (found[name]["status"], found[name]["summary"]) == ("ok", f"site {name}: ran"), found[name]
        assert (marks / name).exists()
    assert not (mallory.home / "ran-as-root").exists()
    for name in ("viash", "viaenv", "bare"):
        assert not (marks / name).exists()
    # The health check itself (the prolog's and epilog's path is the same) runs none.
    healthcheck(config)
    assert not (mallory.home / "ran-as-root").exists()


def test_a_site_check_behind_a_directory_the_user_owns_is_refused(mallory, root_only_dir, tmp_path):
    """The drop-in is a link to a root-owned program in a root-owned directory, but a
    directory above them is the user's: they can rename what lies below it (swap the
    program between the check and the exec), so the walk from / refuses it, naming that
    directory. A drop-in whose whole path is root's still runs."""
    checks = root_only_dir / "checks.d"
    checks.mkdir(mode=0o755)
    marks = tmp_path / "marks"
    marks.mkdir()
    theirs = root_only_dir / "opt"
    theirs.mkdir(mode=0o755)
    mallory.own(theirs)
    tools = theirs / "tools"                      # root's, 0755: all the old check looked at
    tools.mkdir(mode=0o755)
    (checks / "probe").symlink_to(_drop_in(tools / "probe", marks / "probe"))
    lib = root_only_dir / "lib"
    lib.mkdir(mode=0o755)
    (checks / "good").symlink_to(_drop_in(lib / "good", marks / "good"))
    config = configure(tmp_path, site_checks={"dir": str(checks), "timeout": 5},
                       filesystems=[{"path": str(tmp_path)}], stuck_tasks={"enabled": False})
    found = _site_findings(config)
    f = found["probe"]
    assert (f["status"], f["severity"]) == ("refused", "warn"), f
    assert f["summary"] == f"site check probe refused: {theirs} is owned by uid {mallory.uid}"
    assert not (marks / "probe").exists()
    assert (found["good"]["status"], found["good"]["summary"]) == ("ok", "site good: ran")
    # What the user can do from there, as themselves: put their own program in its place.
    mallory.run("mv", tools, theirs / "old")
    mallory.run("mkdir", tools)
    mallory.run("sh", "-c", f"printf '#!/bin/sh\\n: > {marks}/evil\\n' > {tools}/probe; chmod 755 {tools}/probe")
    f = _site_findings(config)["probe"]
    assert f["status"] == "refused" and str(theirs) in f["summary"]
    assert not (marks / "evil").exists() and not (marks / "probe").exists()


def test_a_site_check_under_a_world_writable_directory_is_refused(mallory, root_only_dir, tmp_path):
    """A sticky world-writable directory (/tmp's kind) anywhere on the path, or holding a
    script's interpreter, refuses the drop-in: anyone can add names there."""
    checks = root_only_dir / "checks.d"
    checks.mkdir(mode=0o755)
    marks = tmp_path / "marks"
    marks.mkdir()
    spool = root_only_dir / "spool"
    spool.mkdir()
    spool.chmod(0o1777)
    mallory.run("touch", spool / "mallory-was-here")            # anyone can put names there
    tools = spool / "tools"
    tools.mkdir(mode=0o755)
    (checks / "probe").symlink_to(_drop_in(tools / "probe", marks / "probe"))
    shell = tools / "sh"
    shell.write_bytes(Path("/bin/sh").read_bytes())
    shell.chmod(0o755)
    _drop_in(checks / "interp", marks / "interp", interpreter=str(shell))
    config = configure(tmp_path, site_checks={"dir": str(checks), "timeout": 5},
                       filesystems=[{"path": str(tmp_path)}], stuck_tasks={"enabled": False})
    found = _site_findings(config)
    assert found["probe"]["status"] == "refused"
    assert found["probe"]["summary"] == f"site check probe refused: {spool} is world-writable (mode 1777)"
    assert found["interp"]["status"] == "refused"
    assert found["interp"]["summary"] == (f"site check interp refused: its interpreter: {spool} is "
                                          "world-writable (mode 1777)")
    assert not (marks / "probe").exists() and not (marks / "interp").exists()
