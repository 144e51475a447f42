"""Whose the place is that a stuck task waits on (waits.py), on mount tables laid out as
the kernel writes them, and the path walk against a real tree of links and mounts.

The attacks themselves run as a real user in test_security.py; this pins each rule."""
from __future__ import annotations

import os
import subprocess

import pytest

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


def test_a_fuse_connection_with_nothing_waiting_is_not_the_one(tmp_path):
    ctl = tmp_path / "connections"
    (ctl / "50").mkdir(parents=True)
    (ctl / "50" / "waiting").write_text("0\n")
    assert verdict(FUSE_STACK, [40], fusectl=str(ctl)).cause == "unproven"
    (ctl / "50" / "waiting").write_text("3\n")
    assert verdict(FUSE_STACK, [40], fusectl=str(ctl)).cause == "shared_filesystem"


def test_mapping_devices_are_read_as_mountinfo_writes_them():
    maps = (b"55d000000000-55d000001000 r-xp 00000000 08:01 1234 /usr/bin/python3.11\n"
            b"7f0000000000-7f0000010000 r--s 00000000 00:33 7 /home/u/own/data.bin\n"
            b"7ffc00000000-7ffe00000000 rw-p 00000000 00:00 0 [stack]\n")
    assert waits.mapping_devs(maps) == ["8:1", "0:51"]


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


def test_a_walk_that_hangs_names_the_mount_it_hung_in(make_fuse, tmp_path):
    hung = make_fuse("unanswered")
    parent = _mnt(os.path.dirname(hung.path))
    runner = Runner(StateStore(str(tmp_path / "state")))
    o = runner.run([Task("walk", waits.walk, (os.getpid(), "/proc", "cwd", f"{hung.path}/a/b"), 0.5)])["walk"]
    assert o.status != DONE
    mid = waits.hung_at(o.step)
    assert mid is not None and mid != parent
    assert table(open("/proc/self/mountinfo").read()).by_id(mid).mountpoint == str(hung.path)
