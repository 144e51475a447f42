"""A fault is proven before the node is blamed, and recovery acts only on the proven mount.

Each attack runs as a real unprivileged user (tests/attacker.py) on real FUSE mounts
(tests/fusefs.py; the user's own made with fusermount3) and real kernel state, through
the real health check; where the kernel state cannot be had here (the NVIDIA driver),
the rule is pinned on captured stacks and mount tables, as test_waits.py does.

- a page fault on a lazily unmounted FUSE mount of the user's, while the task also maps
  a file of the node's FUSE mount and keeps one of its requests in flight;
- a task that binds the node's hung mount over another recoverable mount in a
  namespace of its own: recovery must act on the proven device's mount only;
- a `fuseblk` connection, which fusectl names by the whole device number;
- a lock waiter whose stack shows the GPU driver.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from attacker import PY, unprivileged_user
from helpers import poll, run_record
from mounts_fixtures import FUSECTL_DIR, read_mountinfo, start_fuse

from slurm_hooks.act import recovery
from slurm_hooks.checks._config import load_config
from slurm_hooks.core.model import Finding, Recovery
from slurm_hooks.core.records import fields as record_fields
from slurm_hooks.core.state import StateStore
from slurm_hooks.decide import mount_incident, policy
from slurm_hooks.host import waits
from slurm_hooks.host.mounts import MountTable, parse_mountinfo
from slurm_hooks.host.runner import Runner

NODE_STUCK = ("stuck", "stuck_not_node", "stuck_own_mount")


@pytest.fixture(scope="module")
def mallory_module():
    with unprivileged_user() as user:
        yield user


@pytest.fixture
def mallory(mallory_module):
    yield mallory_module
    mallory_module.cleanup()


@pytest.fixture
def fusectl():
    """fusectl where the rules read it (a FUSE mount's `waiting`, its `abort`), for the
    test's own readings; taken away again after the test if it mounted it, so that no
    later test finds it mounted for the product (which mounts it itself)."""
    mounted_here = not any(m.fstype == "fusectl" for m in read_mountinfo())
    if mounted_here:
        subprocess.run(["mount", "-t", "fusectl", "fusectl", FUSECTL_DIR], check=True, timeout=10)
    yield FUSECTL_DIR
    if mounted_here:
        subprocess.run(["umount", FUSECTL_DIR], check=False, timeout=10)


@pytest.fixture
def node_mounts(mallory_module):
    """Root's FUSE mounts (allow_other) where the user can reach them; closed after."""
    made = []

    def make(name, mode, **kw):
        m = start_fuse(mallory_module.base / f"{name}-{time.monotonic_ns()}", mode, **kw)
        made.append(m)
        return m
    yield make
    for m in reversed(made):
        m.close()


def state_of(pid: int) -> str:
    try:
        data = open(f"/proc/{pid}/stat", "rb").read()
    except OSError:
        return ""
    return data[data.rfind(b")") + 2:].split()[0].decode()


def stays_in_d(pid: int, within: float = 15) -> None:
    def check():
        if state_of(pid) != "D":
            return False
        time.sleep(1.0)
        return state_of(pid) == "D"
    poll(check, within, what=f"pid {pid} staying in D")


def configure(tmp_path: Path, **extra) -> Path:
    """A real health check that only reports, stuck tasks outside jobs draining as a
    job's would: a finding the node is blamed for fails."""
    (tmp_path / "kmsg").touch()
    doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"), "syslog": False,
           "prometheus_textfile_dir": None, "node_name": "testnode", "kernel_log": str(tmp_path / "kmsg"),
           "filesystems": [{"path": str(tmp_path)}], "actions": {"report_only": True},
           "gpu": {"enabled": "false"},
           "stuck_tasks": {"grace": 1, "sample_window": 0.3, "inspect_timeout": 1, "non_job_tasks": "drain"},
           **extra}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def diagnosed(config: Path, pid: int, tries: int = 8) -> tuple[dict, dict]:
    """(the record, the finding) of the first run that diagnosed pid."""
    for _ in range(tries):
        rec = run_record(config, "healthcheck", check="stuck_tasks")
        found = [f for f in rec["findings"] if f["evidence"].get("pid") == pid and f["status"] in NODE_STUCK]
        if found:
            return rec, found[0]
        time.sleep(0.5)
    raise AssertionError(f"pid {pid} never diagnosed; last findings {rec['findings']}")


def as_finding(f: dict) -> Finding:
    names = {fl.name for fl in record_fields(Finding)}
    return Finding(**{k: v for k, v in f.items() if k in names})


# --- 1. a page fault after a lazy unmount ------------------------------------------------
# The user maps a file of the node's FUSE mount and one of their own, detaches their own
# mount (fusermount3 -u -z) and touches a page their server never answers. Meanwhile
# another of their processes keeps a request of the node's mount in flight, so fusectl
# says requests wait on it. The detached mount is gone from the task's mountinfo.
PAGE_FAULT = r"""
import mmap, os, signal, subprocess, sys, time
node, own, server, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(node + "/data.bin", "rb") as f:
    keep = mmap.mmap(f.fileno(), 65536, prot=mmap.PROT_READ)
with open(own + "/data.bin", "rb") as f:
    m = mmap.mmap(f.fileno(), 65536, prot=mmap.PROT_READ)
if how == "random":
    m.madvise(mmap.MADV_RANDOM)     # no readahead: the fault reads its page itself, in FUSE code
subprocess.run(["fusermount3", "-u", "-z", own], check=True)
os.kill(server, signal.SIGUSR1)
time.sleep(0.3)
m[40960]
"""
IN_FLIGHT = "import os, sys; os.statvfs(sys.argv[1])"


@pytest.mark.parametrize("how", ["readahead", "random"])
def test_a_page_fault_after_a_lazy_unmount_never_blames_the_node(mallory, node_mounts, fusectl, tmp_path, how):
    node = node_mounts("node", "slow", slow_op="statfs", delay=600)
    (Path(node.path) / "data.bin").write_bytes(b"\0" * 65536)
    own = mallory.fuse("ok", "own", "--no-interrupt")
    mallory.run("sh", "-c", "head -c 65536 /dev/zero > own/data.bin")
    holder = mallory.python(IN_FLIGHT, node.path)
    node_entry = MountTable.current().at(str(node.path))
    poll(lambda: waits.fuse_waiting(node_entry, fusectl), 10, what="a request of the node's mount in flight")
    attack = mallory.python(PAGE_FAULT, node.path, own.path, own.pid, how)
    stays_in_d(attack.pid)
    assert state_of(holder.pid) == "S", "the node's request waits interruptibly: no stuck task of its own"
    rec, f = diagnosed(configure(tmp_path), attack.pid)
    ev = f["evidence"]
    assert ev["syscall"] == "page fault" and str(own.path) not in open(f"/proc/{attack.pid}/mountinfo").read()
    assert ("request_wait_answer" in ev["stack"]) == (how == "random"), ev["stack"]
    # Neither the stack nor a device of the task's table proves the node's mount.
    assert (f["status"], ev["cause"], f["severity"]) == ("stuck_not_node", "unproven", "warn"), repr(ev)
    assert ev["mountpoint"] == ev["mount_dev"] == ""
    # The node takes no part (other tasks of this shared host may fail it, not this one).
    assert not [a for a in rec["actions"] if f"pid {attack.pid}" in str(a)], rec["actions"]
    decided = policy.decide([as_finding(f)], "testnode", "p:", load_config(None).actions, {}, 0.0)
    assert not [a for a in decided if a.kind in ("drain", "reboot", "recover")], decided
    own.close()           # its server gone, the fault fails and the task can die
    poll(lambda: attack.poll() is not None, 10, what="the task gone")


def test_a_page_fault_proves_a_mount_only_by_its_filesystems_code_and_the_tasks_table(tmp_path):
    host = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n40 1 0:50 / /shared rw - fuse.gcsfuse b rw,user_id=0,allow_other\n"
    table = MountTable(parse_mountinfo(host))
    ctl = tmp_path / "connections"
    (ctl / "50").mkdir(parents=True)
    (ctl / "50" / "waiting").write_text("1\n")

    def verdict(stack, devs):
        return waits.attribute(stack, waits.fault_candidates(stack, devs, table), table, table, 1000, str(ctl))
    lock_page = ["folio_wait_bit_common", "filemap_fault", "__do_fault"]
    in_fuse = ["request_wait_answer", "fuse_simple_request", "fuse_read_folio", "filemap_fault"]
    assert verdict(lock_page, ["0:50"]).cause == "unproven"
    # A device that names no mount of the task's table (0:77: detached) may be the one.
    assert verdict(in_fuse, ["0:50", "0:77"]).cause == "unproven"
    # The true positive stays: the node's FUSE code, the node's mount, a request waiting.
    p = verdict(in_fuse, ["8:1", "0:50"])
    assert (p.cause, p.mount.mountpoint) == ("shared_filesystem", "/shared")
    assert verdict(["rpc_wait_bit_killable", "nfs_read_folio", "filemap_fault"], ["0:77"]).cause \
        == "shared_filesystem"


# --- 2. recovery acts only on the mount whose device is the proven one ---------------------
# The node's /home hangs; its /scratch is healthy. A user binds /home at /scratch in a
# mount namespace of their own and opens a file there: their task waits on /home's
# superblock while its own namespace calls the place /scratch.
BIND_OVER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(sys.argv[1].encode(), sys.argv[2].encode(), None, 4096, None) != 0:   # MS_BIND
    sys.exit("bind: " + os.strerror(ctypes.get_errno()))
open(sys.argv[2] + "/data.bin", "rb")
"""


def test_recovery_acts_on_the_proven_device_not_on_a_name_from_the_tasks_namespace(
        mallory, node_mounts, fusectl, tmp_path):
    home = node_mounts("home", "unanswered")
    scratch = node_mounts("scratch", "ok")
    (Path(scratch.path) / "kept.txt").write_text("kept")
    attack = mallory.spawn("unshare", "-Urm", PY, "-c", BIND_OVER, home.path, scratch.path)
    stays_in_d(attack.pid)
    rec, f = diagnosed(configure(tmp_path), attack.pid)
    table = MountTable.current()
    home_dev, scratch_dev = table.at(str(home.path)).dev, table.at(str(scratch.path)).dev
    ev = f["evidence"]
    assert (f["status"], ev["cause"]) == ("stuck", "shared_filesystem"), ev["attribution"]
    assert (ev["mountpoint"], ev["mount_dev"]) == (str(scratch.path), home_dev), "the vector: a name from its namespace"

    from slurm_hooks.act.mounts import recoverable as _recoverable
    cfg_path = tmp_path / "recover.yaml"
    cfg_path.write_text(yaml.safe_dump({"filesystems": [
        {"path": str(p), "recover": {"method": "fuse-abort", "wait": 5}} for p in (home.path, scratch.path)]}))
    cfg = load_config(str(cfg_path))
    stuck = as_finding(f)
    decided = policy.decide([stuck], "testnode", "p:", cfg.actions, {}, 0.0)
    [a] = [a for a in mount_incident.recoveries(decided, [stuck], [], {}, _recoverable(cfg), {}, True) if a.kind == "recover"]
    assert (a.recovery.mountpoint, a.recovery.dev) == (str(home.path), home_dev)

    runner = Runner(StateStore(str(tmp_path / "rstate")))
    out = recovery.recover(a.recovery, runner, lambda: (True, "ok"))
    assert out.freed == 1 and out.left == [], out.steps
    assert attack.wait(timeout=5) != 0
    # /scratch was never touched: its server still answers, its connection is there.
    assert (Path(scratch.path) / "kept.txt").read_text() == "kept" and scratch.server_alive()
    assert os.path.isdir(f"{fusectl}/{waits.fusectl_name(MountTable.current().at(str(scratch.path)))}")
    assert scratch_dev != home_dev


def test_a_recovery_whose_mount_point_now_holds_another_device_is_refused(node_mounts, fusectl, tmp_path):
    home = node_mounts("home", "unanswered")
    scratch = node_mounts("scratch", "ok")
    (Path(scratch.path) / "kept.txt").write_text("kept")
    table = MountTable.current()
    home_dev, scratch_dev = table.at(str(home.path)).dev, table.at(str(scratch.path)).dev
    r = Recovery(mountpoint=str(scratch.path), dev=home_dev, method="fuse-abort", probe=str(scratch.path), wait=1)
    out = recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok"))
    assert not out.recovered and out.steps == [
        f"refused: {scratch.path} is device {scratch_dev}, not {home_dev} the stuck tasks were proven to wait on"]
    assert (Path(scratch.path) / "kept.txt").read_text() == "kept" and scratch.server_alive()


# --- 3. fusectl names a fuseblk connection by the whole device number ----------------------
@pytest.fixture
def fuseblk(tmp_path):
    """A fuseblk mount (root's, on a loop device) whose server never answers INIT."""
    img = tmp_path / "blk.img"
    img.write_bytes(b"\0" * (1 << 20))
    loop = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True, timeout=10)
    if loop.returncode != 0:
        pytest.skip(f"no loop device: {loop.stderr.strip()}")
    dev = loop.stdout.strip()
    point = tmp_path / "blk"
    point.mkdir()
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other,blksize=4096".encode()
    try:
        if libc.mount(dev.encode(), str(point).encode(), b"fuseblk", 0, opts) != 0:
            pytest.skip(f"fuseblk mount: {os.strerror(ctypes.get_errno())}")
        yield point
    finally:
        os.close(fd)          # aborts whatever still waits
        subprocess.run(["umount", "-l", "-c", str(point)], capture_output=True, timeout=10)
        subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=10)


def test_fusectl_names_a_fuseblk_connection_by_its_whole_device_number(fuseblk, fusectl, tmp_path):
    m = MountTable.current().at(str(fuseblk))
    major, minor = map(int, m.dev.split(":"))
    assert m.fstype == "fuseblk" and major != 0
    p = subprocess.Popen([sys.executable, "-c", f"import os; os.stat({str(fuseblk)!r} + '/x')"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        stays_in_d(p.pid)
        assert waits.fuse_waiting(m, fusectl) >= 1        # INIT and the stat
        start = int(open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[19])
        r = Recovery(mountpoint=str(fuseblk), dev=m.dev, method="fuse-abort", probe=str(fuseblk), wait=5,
                     tasks=[[p.pid, start]])
        out = recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok"))
        assert out.steps[0] == "fuse-abort: done" and out.freed == 1, out.steps
        assert p.wait(timeout=5) == 1                 # ENOTCONN: the abort reached its connection
        # The kernel's dev_t, not os.makedev's encoding (stat(2)'s), which differs.
        assert waits.fusectl_name(m) == str(major << 20 | minor) != str(os.makedev(major, minor))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)


# --- 4. the lock rule before the GPU driver's ----------------------------------------------
def test_a_task_queued_on_a_gpu_driver_lock_is_the_holders_not_the_drivers():
    table = MountTable(parse_mountinfo("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"))
    # The NVIDIA driver's os_acquire_mutex is a semaphore: its waiters queue in down().
    waiter = ["__schedule", "schedule", "schedule_timeout", "__down_common", "__down", "down",
              "os_acquire_mutex", "_nv012345rm", "nvidia_ioctl"]
    p = waits.attribute(waiter, [], table, table, 1000)
    assert (p.cause, p.node_fault) == ("lock", False), p.how
    # The holder, waiting in the driver itself, is the driver's.
    assert waits.attribute(["os_delay", "_nv012345rm", "nvidia_ioctl"], [], table, table, 1000).cause == "gpu_driver"
