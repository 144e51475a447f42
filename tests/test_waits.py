"""Whose the place is that a stuck task waits on (waits.py), on mount tables laid out as
the kernel writes them, and the path walk against a real tree of links and mounts.

The attacks themselves run as a real user in test_security.py; this pins each rule."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from proctree import task

from slurm_hooks.core.state import StateStore
from slurm_hooks.host import procfs, waits
from slurm_hooks.host.mounts import MountTable, parse_mountinfo
from slurm_hooks.host.runner import DONE, Runner, Task

HOST = ("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "30 1 0:40 / /tmp rw - tmpfs tmpfs rw\n"
        "40 1 0:50 / /shared rw - fuse.gcsfuse bucket rw,user_id=0,group_id=0,allow_other\n"
        "41 1 0:51 / /home/u/own rw - fuse.fusefs own rw,user_id=1000,group_id=1000\n"
        "42 1 0:52 / /nfs rw - nfs4 srv:/export rw,vers=4.2\n"
        "43 1 0:53 / /dev rw - devtmpfs udev rw\n")
# A user namespace of the user's own: the node's / and /shared bound in, and a FUSE
# mount of theirs, which reads user_id=0 there.
USERNS = ("101 100 8:1 / / rw - ext4 /dev/sda1 rw\n"
          "102 101 0:50 / /shared rw - fuse.gcsfuse bucket rw,user_id=0,group_id=0,allow_other\n"
          "103 101 0:77 / /home/u/ns rw - fuse.fusefs ns rw,user_id=0,group_id=0\n")
FUSE_STACK = ["request_wait_answer", "fuse_simple_request", "fuse_lookup_name"]
EXT4_STACK = ["jbd2_log_wait_commit", "ext4_sync_file", "vfs_fsync_range"]


def table(text: str) -> MountTable:
    return MountTable(parse_mountinfo(text))


def verdict(symbols, ids, mounts=HOST, uid=1000, fusectl="/nonexistent"):
    t = table(mounts)
    return waits.attribute(symbols, [(t.by_id(i) if i is not None else None, f"id {i}") for i in ids],
                           t, table(HOST), uid, fusectl)


def test_the_nodes_fuse_mount_found_by_id_is_the_nodes():
    p = verdict(FUSE_STACK, [40])
    assert (p.cause, p.node_fault, p.mount.mountpoint) == ("shared_filesystem", True, "/shared")


def test_a_users_fuse_mount_is_theirs():
    p = verdict(FUSE_STACK, [41])
    assert (p.cause, p.owner_uid, p.node_fault) == ("user_mount", 1000, False)


def test_a_mount_only_in_another_namespace_is_the_users_though_it_reads_user_id_0():
    p = verdict(FUSE_STACK, [103], mounts=USERNS)
    assert (p.cause, p.owner_uid) == ("user_mount", 1000)
    # The node's own superblock bound into their namespace stays the node's.
    assert verdict(FUSE_STACK, [102], mounts=USERNS).cause == "shared_filesystem"


def test_a_detached_mount_proves_nothing():
    p = verdict(FUSE_STACK, [999])       # lazily unmounted: no longer in the table
    assert p.cause == "unproven" and not p.node_fault


def test_a_stack_in_fuse_with_a_descriptor_on_the_nodes_disk_is_not_proven():
    # sendfile(out=/tmp file, in=their FUSE file): the descriptor named is the node's.
    p = verdict(FUSE_STACK, [30])
    assert p.cause == "unproven"


def test_every_descriptor_of_a_two_descriptor_call_counts():
    from slurm_hooks.host import syscalls
    assert syscalls.fds_of("sendfile", [4, 5, 0, 0]) == [4, 5]
    assert syscalls.fds_of("splice", [4, 0, 6, 0]) == [4, 6]
    assert syscalls.fds_of("openat", [3, 0x1000]) == []      # the path is what counts
    assert verdict(FUSE_STACK, [40, 41]).cause == "user_mount"


def test_node_only_filesystems_are_the_nodes_by_their_symbols_alone():
    p = verdict(["rpc_wait_bit_killable", "__rpc_execute", "nfs4_proc_getattr"], [])
    assert p.cause == "shared_filesystem" and p.node_fault
    assert verdict(["os_acquire_mutex", "_nv012345rm"], []).cause == "gpu_driver"
    # FUSE symbols say nothing of whose FUSE.
    assert verdict(FUSE_STACK, []).cause == "unproven"


def test_waits_on_nothing_of_the_nodes_are_other():
    assert verdict(["wait_for_vfork_done", "kernel_clone", "__do_sys_clone"], []).cause == "other"
    assert verdict(["pipe_write", "vfs_write"], [None]).cause == "unproven"


def test_a_lock_waiter_is_not_the_one_waiting_on_the_node():
    p = verdict(["__schedule", "rwsem_down_write_slowpath", "down_write", "filename_create"], [30])
    assert p.cause == "lock" and not p.node_fault


def test_a_local_filesystem_only_with_its_code_on_the_stack():
    assert verdict(EXT4_STACK, [1]).cause == "local_filesystem"
    assert verdict(["folio_wait_bit_common"], [1]).cause == "unproven"
    assert verdict(["pipe_read"], [43]).cause == "other"          # devtmpfs: no storage


def test_each_verdict_says_how_it_was_reached():
    """The words `explain` and the finding's attribution show, branch by branch."""
    nfs = ["rpc_wait_bit_killable", "__rpc_execute", "nfs4_proc_getattr"]
    p = verdict(["__schedule", "rwsem_down_write_slowpath", "down_write"], [30])
    assert (p.cause, p.how) == ("lock", ["id 30", "queued on a lock: the task holding it is the one waiting"])
    p = verdict(["os_acquire_mutex", "_nv012345rm"], [None])
    assert (p.cause, p.mount, p.how) == ("gpu_driver", None, ["id None", "the kernel stack is in the GPU driver"])
    p = verdict(nfs + ["ceph_osdc_wait_request"], [])
    assert p.how == ["the kernel stack is in ceph/nfs, which no user can mount"]
    # The mount of the stack's own family is the one named, whichever id came first;
    # with none of that family, none: a descriptor on another mount (a user's own FUSE
    # mount, its source name theirs) is not where an NFS wait waits.
    assert verdict(nfs, [40, 42]).mount.mountpoint == "/nfs"
    p = verdict(nfs, [40])
    assert (p.cause, p.mount) == ("shared_filesystem", None)
    p = verdict(FUSE_STACK + EXT4_STACK, [])
    assert (p.cause, p.how) == ("unproven", ["the kernel stack is in fuse/local, but no id names the mount"])
    p = verdict(FUSE_STACK, [40, 999])
    assert (p.cause, p.mount, p.how) == ("unproven", None, ["id 40", "id 999", "not every place the task's ids "
                                                                               "name is a mount of its table (detached?)"])
    p = verdict(EXT4_STACK, [40])
    assert (p.cause, p.how) == ("unproven", ["id 40", "the kernel stack is in local, the named mount is not"])
    p = verdict(FUSE_STACK + EXT4_STACK, [30])
    assert (p.cause, p.how) == ("unproven", ["id 30", "the kernel stack is in fuse/local, the named mount is not"])


def test_filesystem_families_by_type():
    def fam(fstype):
        return waits.fstype_family(table(f"1 0 0:9 / /m rw - {fstype} src rw\n").by_id(1))
    assert [fam(t) for t in ("fuse.gcsfuse", "fuseblk", "ext4", "xfs", "nfs4", "smb3", "ceph", "lustre")] == \
        ["fuse", "fuse", "local", "local", "nfs", "cifs", "ceph", "lustre"]
    # A subtype after a dot is the family's; what no family names is none.
    assert [fam(t) for t in ("ceph.k", "ceph.a.b", "tmpfs", "proc", "overlay")] == ["ceph", "ceph", "", "", ""]


def test_the_first_frame_below_the_scheduler_says_whether_it_queues_on_a_lock():
    assert waits.lock_wait(["__schedule", "schedule", "schedule_preempt_disabled", "__mutex_lock"])
    assert waits.lock_wait(["schedule_hrtimeout_range", "rwsem_down_read_slowpath"])
    assert not waits.lock_wait(["__schedule", "request_wait_answer", "__mutex_lock"])
    assert not waits.lock_wait([]) and not waits.lock_wait(["__schedule", "schedule"])


def test_a_superblock_the_host_has_only_as_a_users_fuse_mount_is_theirs():
    # In the task's namespace it reads user_id=0; in ours it is uid 1000's own FUSE mount.
    task_table = table("101 100 8:1 / / rw - ext4 /dev/sda1 rw\n"
                       "104 101 0:51 / /data rw - fuse.fusefs own rw,user_id=0,group_id=0\n")
    assert waits.owner(task_table.by_id(104), task_table, table(HOST), 0) == ("user", 1000)
    # A mount with a device the host does not have: the task's user's.
    alone = table("105 1 0:88 / /x rw - tmpfs t rw\n")
    assert waits.owner(alone.by_id(105), alone, table(HOST), 1234) == ("user", 1234)


def test_fdinfo_ids_are_its_mount_and_inode():
    text = b"pos:\t0\nflags:\t012000000\nmnt_id:\t27\nino:\t2\n"
    assert procfs.fdinfo_ids(text) == (27, 2)
    assert procfs.fdinfo_ids(b"ino:\t2\nmnt_id:\t27\nlock:\t1: POSIX  ADVISORY  WRITE 99 00:1c:5 0 EOF\n") == (27, 2)
    assert procfs.fdinfo_ids(b"pos:\t0\nmnt_id:\t27\n") == (27, None)          # before 5.14
    assert procfs.fdinfo_ids(b"pos:\t0\nino:\t2\n") == (None, 2)
    assert procfs.fdinfo_ids(b"mnt_id:\tx\nino:\t2\nmnt_id:\t5\n") == (None, 2)
    assert procfs.fdinfo_ids(b"") == (None, None)
    fd = os.open("/", os.O_PATH)
    try:
        assert waits._where(fd) == procfs.fd_ids(os.getpid(), fd) and None not in waits._where(fd)
    finally:
        os.close(fd)


def test_a_kernel_that_does_not_give_the_inode_tells_no_root(monkeypatch):
    # Before 5.14: no `ino:` in fdinfo. The walk then knows the task's root only by
    # where it started (an absolute path or an absolute link).
    monkeypatch.setattr(procfs, "fd_ids", lambda pid, fd, proc=procfs.PROC: (27, None))
    assert waits._where(0) is None

def test_a_fuse_connection_with_nothing_waiting_is_not_the_one(tmp_path):
    ctl = tmp_path / "connections"
    (ctl / "50").mkdir(parents=True)
    (ctl / "50" / "waiting").write_text("0\n")
    p = verdict(FUSE_STACK, [40], fusectl=str(ctl))
    assert (p.cause, p.how) == ("unproven", ["id 40", "no request waits on the FUSE connection of /shared (fusectl)"])
    (ctl / "50" / "waiting").write_text("3\n")
    assert verdict(FUSE_STACK, [40], fusectl=str(ctl)).cause == "shared_filesystem"


def test_mapping_devices_are_read_as_mountinfo_writes_them():
    maps = (b"55d000000000-55d000001000 r-xp 00000000 08:01 1234 /usr/bin/python3.11\n"
            b"7f0000000000-7f0000010000 r--s 00000000 00:33 7 /home/u/own/data.bin\n"
            b"7ffc00000000-7ffe00000000 rw-p 00000000 00:00 0 [stack]\n")
    assert waits.mapping_devs(maps) == ["8:1", "0:51"]
    # Anonymous and malformed lines pass; a name of several words, a repeated device,
    # a major in hex letters (device-mapper's 253) and a line with no name are read.
    maps = (b"7ffc00000000-7ffe00000000 rw-p 00000000 00:00 0 [heap]\n"
            b"7f0000000000-7f0000010000 r--s 00000000 zz:01 7 /bad\n"
            b"7f0000000000-7f0000010000 r--s 00000000 00:33 7 /home/u/a b c d e f.bin\n"
            b"7f0000010000-7f0000020000 r--s 00000000 00:33 7 /home/u/a b c d e f.bin\n"
            b"7f0000020000-7f0000030000 r--p 00000000 fd:01 9 /dm/lib.so\n"
            b"7f0000030000-7f0000040000 r--p 00000000 00:2a 11\n"
            b"short line\n")
    assert waits.mapping_devs(maps) == ["0:51", "253:1", "0:42"]


def test_a_page_fault_names_a_mount_only_with_its_filesystems_code_on_the_stack():
    host = table(HOST)
    fault = ["__schedule", "request_wait_answer", "fuse_simple_request", "fuse_readpages", "filemap_fault"]
    unknown = (None, "a page fault whose kernel stack shows no filesystem: the mapping it waits on is unknown")
    assert waits.fault_candidates(["folio_wait_bit_common", "filemap_fault"], ["0:50"], host) == [unknown]
    # The GPU driver's frames are no filesystem's.
    assert waits.fault_candidates(["nvidia_fault", "filemap_fault"], ["0:50"], host) == [unknown]
    # Every device of the task's mappings counts: one no mount of its table holds is
    # named as such, and the one whose filesystem the stack shows is named after it.
    assert waits.fault_candidates(fault, ["0:99", "8:1", "0:50"], host) == [
        (None, "a file mapping on device 0:99, a mount not in the task's table"),
        (host.by_id(40), "a file mapping on device 0:50, fuse as the kernel stack")]
    # A local disk's mapping is never the place, even with its code on the stack; nor
    # is a network mount of another family than the stack's.
    assert waits.fault_candidates(EXT4_STACK + ["filemap_fault"], ["8:1"], host) == []
    assert waits.fault_candidates(fault, ["0:52"], host) == []
    assert waits.fault_candidates(["rpc_wait_bit_killable", "nfs_read_folio"], ["0:52"], host) == [
        (host.by_id(42), "a file mapping on device 0:52, nfs as the kernel stack")]


def test_sleepers_in_a_filesystems_wait_are_found_and_its_servers_are_not(tmp_path):
    """scan_fs_waits on a /proc tree laid out as the kernel's: only threads asleep (S) in
    a filesystem's wait channel, not a FUSE server reading its device, not a thread in
    D (the stuck-task scan's), not a process the caller skips."""
    proc = tmp_path / "proc"
    task(proc, 91001, 91001, "reader", "S", wchan="request_wait_answer")
    task(proc, 91002, 91002, "fusefs", "S", wchan="fuse_dev_do_read")
    task(proc, 91003, 91003, "python", "S", wchan="do_epoll_wait")
    task(proc, 91004, 91004, "writer", "D", wchan="request_wait_answer")
    task(proc, 91005, 91005, "cp", "S", wchan="rpc_wait_bit_killable")
    task(proc, 91006, 91006, "skipped", "S", wchan="request_wait_answer")
    task(proc, 91007, 91007, "python", "S", wchan="")
    task(proc, 91008, 91009, "loader", "S", wchan="nfs_wait_on_request")
    rows = waits.scan_fs_waits(lambda step: None, str(proc), skip={91006})
    assert sorted(r[:4] for r in rows) == [[91001, 91001, "reader", "S"], [91005, 91005, "cp", "S"],
                                     [91008, 91009, "loader", "S"]]
    assert sorted(r[0] for r in waits.scan_fs_waits(lambda step: None, str(proc))) == [91001, 91005, 91006, 91008]


def test_mountinfo_is_read_whole_and_a_cut_is_said(tmp_path):
    big = tmp_path / "mountinfo"
    line = "200 1 0:60 / /home/u/pad rw - tmpfs pad rw\n"
    big.write_text(line * 2000 + "201 1 0:61 / /home/u/ns rw - fuse.x ns rw,user_id=1000\n")
    data, cut = procfs.read_whole(str(big), procfs.MOUNTINFO_MAX)
    assert not cut and table(data.decode()).by_id(201).mountpoint == "/home/u/ns"
    data, cut = procfs.read_whole(str(big), 65536)
    assert cut and len(data) == 65536


@pytest.fixture
def tree(tmp_path):
    """A real tree: a directory, links absolute and relative, a loop, and a tmpfs
    mounted inside it (a mount the walk must cross)."""
    root = tmp_path / "t"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f").write_text("x")
    (root / "mnt").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "walk", str(root / "mnt")], check=True)
    (root / "mnt" / "g").write_text("y")
    os.symlink(str(root / "mnt"), root / "abs")
    os.symlink("real", root / "rel")
    os.symlink("loop", root / "loop")
    yield root
    subprocess.run(["umount", "-l", str(root / "mnt")], check=True)


def _mnt(path) -> int:
    fd = os.open(path, os.O_PATH)
    try:
        return procfs.mnt_id(os.getpid(), fd)
    finally:
        os.close(fd)


def test_the_walk_follows_links_and_crosses_mounts_as_the_kernel_does(tree):
    walk = lambda path, start="cwd": waits.walk(lambda step: None, os.getpid(), "/proc", start, path)  # noqa: E731
    here = _mnt(tree / "real")
    assert walk(f"{tree}/abs/g") == {"mnt_id": _mnt(tree / "mnt"), "end": "found"}
    assert walk(f"{tree}/rel/f") == {"mnt_id": here, "end": "found"}
    assert walk(f"{tree}/abs/../real/f")["mnt_id"] == here        # .. of the link's target
    assert walk(f"{tree}/abs/nothing") == {"mnt_id": _mnt(tree / "mnt"), "end": "missing"}
    assert walk(f"{tree}/loop")["end"] == "loop"
    fd = os.open(tree / "mnt", os.O_RDONLY)
    try:
        assert walk("g", f"fd/{fd}")["mnt_id"] == _mnt(tree / "mnt")   # relative to a dirfd
    finally:
        os.close(fd)


def test_the_walk_goes_back_where_it_came_from_and_says_each_mount_it_looks_in(tree):
    steps: list[str] = []
    walk = lambda path, **kw: waits.walk(steps.append, os.getpid(), "/proc", "cwd", path, **kw)  # noqa: E731
    here, inner = _mnt(tree / "real"), _mnt(tree / "mnt")
    assert walk(f"{tree}/real/../mnt/g") == {"mnt_id": inner, "end": "found"}
    assert walk(f"{tree}/real/./../rel/f") == {"mnt_id": here, "end": "found"}
    assert steps[-4:] == [f"mnt {here}"] * 4
    assert walk(f"{tree}/real/f/x") == {"mnt_id": here, "end": "error", "error": "Not a directory"}
    # A mount of the user's ends the walk before anything in it is looked up; so does one
    # whose probe hangs.
    steps.clear()
    assert walk(f"{tree}/mnt/g/h", stop=[inner]) == {"mnt_id": inner, "end": "user mount"}
    assert steps and steps[-1] == f"mnt {here}"
    assert walk(f"{tree}/mnt/g", hung=[inner]) == {"mnt_id": inner, "end": "hung mount"}
    assert walk(f"{tree}/real/f", stop=[inner], hung=[inner]) == {"mnt_id": here, "end": "found"}


def test_forty_links_are_followed_and_the_forty_first_is_a_loop(tree):
    for i in range(41):
        os.symlink(f"l{i + 1}" if i < 40 else "real", tree / f"l{i}")
    walk = lambda path: waits.walk(lambda step: None, os.getpid(), "/proc", "cwd", path)  # noqa: E731
    assert walk(f"{tree}/l1/f") == {"mnt_id": _mnt(tree / "real"), "end": "found"}     # 40 links
    assert walk(f"{tree}/l0/f") == {"mnt_id": _mnt(tree / "real"), "end": "loop"}    # 41


@pytest.fixture
def chrooted(tree):
    """A process whose root is `tree` (a chroot), its working directory given."""
    procs = []

    def start(cwd="/"):
        code = ("import os, sys, time; os.chroot(sys.argv[1]); os.chdir(sys.argv[2]); "
                "print('ready', flush=True); time.sleep(60)")
        p = subprocess.Popen([sys.executable, "-c", code, str(tree), cwd], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline() == "ready\n"
        return p.pid

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_dot_dot_never_climbs_above_the_tasks_root(tree, chrooted):
    """The kernel resolves `..` of a chrooted task's root to that root: the walk too,
    though the root is a directory of the checker's own tree."""
    walk = lambda pid, path, start="cwd": waits.walk(lambda step: None, pid, "/proc", start, path)  # noqa: E731
    real, inner = _mnt(tree / "real"), _mnt(tree / "mnt")
    pid = chrooted()
    assert walk(pid, "/real/../../real/f") == {"mnt_id": real, "end": "found"}
    assert walk(pid, "/../../mnt/g") == {"mnt_id": inner, "end": "found"}
    assert walk(pid, "/abs/../../real/f") == {"mnt_id": real, "end": "missing"}    # /abs: a host path
    assert walk(pid, "../real/f") == {"mnt_id": real, "end": "found"}              # from its cwd, the root
    os.symlink("/real", tree / "up")          # an absolute link, read as the task reads it
    assert walk(pid, "/up/../../real/f") == {"mnt_id": real, "end": "found"}
    pid = chrooted("/real")
    assert walk(pid, "../../mnt/g") == {"mnt_id": inner, "end": "found"}
    assert walk(pid, "f") == {"mnt_id": real, "end": "found"}
    (tree / "real" / "sub").mkdir()
    pid = chrooted("/real/sub")
    assert walk(pid, "../../mnt/g") == {"mnt_id": inner, "end": "found"}
    assert walk(pid, "../../../../real/f") == {"mnt_id": real, "end": "found"}


def test_the_tasks_root_is_looked_up_never_opened(make_fuse, tmp_path):
    """The walk opens the task's root with O_PATH: a root on a mount that answers
    lookups but not OPENDIR does not hold it up."""
    slow = make_fuse("slow", slow_op="opendir", delay=5)
    code = "import os, sys, time; os.chroot(sys.argv[1]); print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code, str(slow.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        runner = Runner(StateStore(str(tmp_path / "state")))
        o = runner.run([Task("walk", waits.walk, (p.pid, "/proc", "cwd", "/"), 1.5)])["walk"]
        assert (o.status, o.value) == (DONE, {"mnt_id": _mnt(slow.path), "end": "found"})
        assert waits.walk(lambda step: None, p.pid, "/proc", "cwd", "/")["end"] == "found"
    finally:
        p.kill()
        p.wait()


def test_a_walk_that_hangs_names_the_mount_it_hung_in(make_fuse, tmp_path):
    hung = make_fuse("unanswered")
    parent = _mnt(os.path.dirname(hung.path))
    runner = Runner(StateStore(str(tmp_path / "state")))
    o = runner.run([Task("walk", waits.walk, (os.getpid(), "/proc", "cwd", f"{hung.path}/a/b"), 0.5)])["walk"]
    assert o.status != DONE
    mid = waits.hung_at(o.step)
    assert mid is not None and mid != parent
    assert table(open("/proc/self/mountinfo").read()).by_id(mid).mountpoint == str(hung.path)
