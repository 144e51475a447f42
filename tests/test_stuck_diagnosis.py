"""The stuck-task diagnosis's own rules (checks/_stuck_diagnosis.py), in the test's
process: what its children read of a stuck task in a /proc tree laid out as the
kernel's (the look, the memory reader, the mount table), and how their answers are
taken back. Real stuck tasks are in test_stuck_tasks.py and the cluster tests."""
from __future__ import annotations

import os
import time

import pytest
from proctree import MOUNTINFO, task

from slurm_hooks.checks import Context
from slurm_hooks.checks import _stuck_diagnosis as sd
from slurm_hooks.checks import _stuck_reads as sr
from slurm_hooks.checks import _stuck_waits as sw
from slurm_hooks.checks._config import default_config as Config
from slurm_hooks.checks.stuck_tasks import StuckTasksConfig
from slurm_hooks.core.model import Finding
from slurm_hooks.core.state import StateStore
from slurm_hooks.host import procfs, waits
from slurm_hooks.host.jobs import JobRef
from slurm_hooks.host.mounts import MountTable, parse_mountinfo
from slurm_hooks.host.procfs import TaskSample
from slurm_hooks.host.runner import DONE, FAILED, HUNG, STILL_HUNG, Outcome, Runner


# --- which memory may be read ------------------------------------------------------------
def test_only_readable_memory_backed_by_no_file_is_read():
    maps = (b"00001000-00002000 rw-p 00000000 00:00 0 \n"
            b"00003000-00004000 rw-p 00000000 00:00 0 [heap]\n"
            b"00005000-00006000 r--p 00000000 00:00 0                          [stack]\n"
            b"00007000-00008000 ---p 00000000 00:00 0 \n"
            b"00009000-0000a000 r--p 00000000 00:00 0 [vvar]\n"
            b"0000b000-0000c000 r--s 00000000 00:33 7 /home/u/own/data.bin\n"
            b"0000d000-0000e000 rw-s 00000000 00:01 0 /dev/zero (deleted)\n"
            b"zzzz-0000f000 rw-p 00000000 00:00 0 \n"
            b"00010000-00011000 rw-p 00000000 00:00 0\n"
            b"short\n")
    assert sr._anonymous(maps) == [(0x1000, 0x2000), (0x3000, 0x4000), (0x5000, 0x6000), (0x10000, 0x11000)]


@pytest.mark.parametrize("start, end, inside", [(10, 20, True), (12, 18, True), (9, 20, False), (10, 21, False),
                                                (15, 15, False), (18, 12, False), (30, 35, True), (25, 31, False)])
def test_a_range_is_read_only_when_it_lies_inside_one_mapping(start, end, inside):
    assert sr._within([(10, 20), (30, 40)], start, end) is inside


def test_reads_are_bounded(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(bytes(range(256)) * 800)            # 204,800 bytes
    assert sr._read_bounded(str(f), 70000) == f.read_bytes()[:70000]
    assert sr._read_bounded(str(f), 1 << 20) == f.read_bytes()
    assert sr._read_bounded(str(f), 0) == b""


def test_the_rank_follows_the_launchers_precedence():
    assert sr.rank_from({"PMI_RANK": "4", "OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "2", "RANK": "1"}) == "1"
    assert sr.rank_from({"PMI_RANK": "4", "OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "2"}) == "2"
    assert sr.rank_from({"PMI_RANK": "4", "OMPI_COMM_WORLD_RANK": "3", "LOCAL_RANK": "0"}) == "3"
    assert sr.rank_from({"PMI_RANK": "4", "SLURM_LOCALID": "0"}) == "4"
    assert sr.rank_from({"LOCAL_RANK": "0", "SLURM_JOB_ID": "5"}) is None


# --- the children's reads, on a /proc tree laid out as the kernel's -------------------------
def stat_line(pid, comm, state="D", start=1000, args=(0, 0), env=(0, 0)):
    fields = [state, "1", str(pid), str(pid), "0", "-1", "0"] + ["0"] * 12 + [str(start)] + ["0"] * 25 \
        + [str(a) for a in args + env] + ["0"]
    return f"{pid} ({comm}) {' '.join(fields)}\n"


def test_the_system_call_and_its_file_are_read_from_what_the_kernel_answers(tmp_path):
    proc = tmp_path / "proc"
    task(proc, 10, 10, "running", "R", syscall="running")
    task(proc, 11, 11, "faulting", "D", syscall="-1 0x7ffd 0x7f01")
    task(proc, 12, 12, "reader", "D", syscall="0 0x7 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f01",
         fds={7: "/gpfs/run/data"})
    task(proc, 13, 13, "opener", "D", syscall="257 0x5 0x7f0000001000 0x0 0x0 0x0 0x0 0x7ffd 0x7f01",
         fds={5: "/gpfs/run"})
    task(proc, 14, 14, "odd", "D", syscall="x 0 0")
    task(proc, 15, 15, "mute", "D", syscall="")
    task(proc, 16, 16, "absolute", "D", syscall="2 0x7f0000002000 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f01")
    task(proc, 17, 17, "closed", "D", syscall="0 0x9 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f01")
    call = lambda pid: sr.syscall_of(pid, pid, str(proc))  # noqa: E731
    assert call(10) == sr.Syscall(name="running")
    assert call(11) == sr.Syscall(name="page fault")
    assert call(12) == sr.Syscall(name="read", nr=0, fd=7, file="/gpfs/run/data", fds=[7])
    assert call(13) == sr.Syscall(name="openat", nr=257, addrs=[0x7f0000001000], dirfd=5)
    assert call(14) == sr.Syscall() and call(15) == sr.Syscall()
    assert call(16) == sr.Syscall(name="open", nr=2, addrs=[0x7f0000002000], dirfd=None)
    assert call(17) == sr.Syscall(name="read", nr=0, fd=9, file="", fds=[9])        # its link is gone


def test_the_look_reports_what_the_kernel_says_of_one_thread(tmp_path):
    proc = tmp_path / "proc"
    task(proc, 20, 21, "pt_data", "D", syscall="0 0x7 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f01",
         wchan="request_wait_answer\n", stack="[<0>] request_wait_answer+0x1/0x2\n[<0>] fuse_simple_request+0x3\n",
         fds={7: "/gpfs/run/data"}, start=4242)
    (proc / "20" / "ns").mkdir()
    os.symlink("mnt:[4026531841]", proc / "20" / "ns" / "mnt")
    steps = []
    got = sr._look(steps.append, 20, 21, str(proc))
    assert steps == ["stat", "syscall", "wchan", "stack", "sched", "fdinfo", "links"]
    assert got == {"comm": "pt_data", "state": "D", "start": 4242,
                   "call": {"name": "read", "nr": 0, "fd": 7, "file": "/gpfs/run/data", "addrs": [], "fds": [7],
                            "dirfd": None},
                   "wchan": "request_wait_answer", "stack": ["request_wait_answer", "fuse_simple_request"],
                   "blocked": None, "mnt_ids": {"7": 50}, "anon": {}, "mntns": "mnt:[4026531841]",
                   "links": {"cwd": "/gpfs/run"}}


def test_the_look_says_how_long_the_scheduler_has_not_run_it_and_what_it_could_not_read(tmp_path):
    proc = tmp_path / "proc"
    task(proc, 22, 22, "sleeper", "D", syscall="257 0x5 0x7f0000001000 0x0 0x0 0x0 0x0 0x7ffd 0x7f01")
    (proc / "22" / "task" / "22" / "sched").write_text("sleeper (22, #threads: 1)\n---\nse.exec_start : 1000.5\n")
    (proc / "thread-self").mkdir()
    (proc / "thread-self" / "sched").write_text("python (9, #threads: 1)\n---\nse.exec_start : 13500.5\n")
    os.unlink(proc / "22" / "cwd")
    os.unlink(proc / "22" / "task" / "22" / "wchan")
    got = sr._look(lambda s: None, 22, 22, str(proc))
    assert (got["blocked"], got["wchan"], got["mntns"], got["links"]) == (12.5, "", "", {"cwd": "", "fd/5": ""})


def test_the_look_never_reads_an_anonymous_inodes_fdinfo_and_names_the_dirfd(tmp_path):
    proc = tmp_path / "proc"
    task(proc, 30, 30, "poller", "D", syscall="0 0x9 0x7f00 0x8 0x0 0x0 0x0 0x7ffd 0x7f01",
         fds={9: "anon_inode:[eventpoll]"})
    # Its fdinfo, were it read, would name a mount: it must not be.
    got = sr._look(lambda s: None, 30, 30, str(proc))
    assert (got["call"]["name"], got["mnt_ids"], got["anon"]) == ("read", {"9": None},
                                                                  {"9": "anon_inode:[eventpoll]"})
    task(proc, 31, 31, "opener", "D", syscall="257 0x5 0x7f0000001000 0x0 0x0 0x0 0x0 0x7ffd 0x7f01",
         fds={5: "/gpfs/run"})
    got = sr._look(lambda s: None, 31, 31, str(proc))
    assert got["links"] == {"cwd": "/gpfs/run", "fd/5": "/gpfs/run"} and got["mnt_ids"] == {}
    # A thread whose stat is gone says no comm, state or start.
    os.unlink(proc / "31" / "task" / "31" / "stat")
    assert not {"comm", "state", "start"} & set(sr._look(lambda s: None, 31, 31, str(proc)))


def memory(proc, pid, *, args, env, environ, cmdline, maps, mem=b""):
    """A process whose argument and environment ranges, mappings and memory are given."""
    p = proc / str(pid)
    p.mkdir(parents=True)
    (p / "stat").write_text(stat_line(pid, "python", args=args, env=env))
    (p / "maps").write_bytes(maps)
    (p / "environ").write_bytes(environ)
    (p / "cmdline").write_bytes(cmdline)
    (p / "mem").write_bytes(mem)


ANON = (b"00001000-00003000 rw-p 00000000 00:00 0 [heap]\n"
        b"00004000-00005000 r--s 00000000 00:33 7 /home/u/own/data.bin\n"
        b"00006000-00007000 r--p 00000000 fd:01 9 /usr/lib/x.so\n")


def test_the_memory_reader_reads_ranks_command_line_and_paths_from_anonymous_memory(tmp_path):
    proc = tmp_path / "proc"
    mem = bytearray(0x5000)
    mem[0x1800:0x1800 + 12] = b"/gpfs/a/b\0zz"
    mem[0x2ff8:0x3000] = b"/x/edge!"          # runs to the mapping's end: read no further
    memory(proc, 40, args=(0x1000, 0x1100), env=(0x1100, 0x1200),
           environ=b"RANK=3\0SLURM_PROCID=3\0PMI_RANK=3\0LOCAL_RANK=1\0SLURM_LOCALID=1\0SLURM_JOB_ID=55\0"
                   b"OMPI_COMM_WORLD_RANK=3\0HOME=/root\0NOEQUALS\0",
           cmdline=b"python\0train.py\0--lr\0", maps=ANON, mem=bytes(mem))
    steps = []
    got = sr._inspect(steps.append, 40, str(proc), [0x1800, 0x4800, 0x2ff8])
    assert steps == ["maps", "environ", "cmdline", "mem"]
    assert got == {"devs": ["0:51", "253:1"], "RANK": "3", "SLURM_PROCID": "3", "OMPI_COMM_WORLD_RANK": "3",
                   "PMI_RANK": "3", "LOCAL_RANK": "1", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "55",
                   "cmdline": "python train.py --lr", "paths": ["/gpfs/a/b", None, "/x/edge!"],
                   "skipped": "path argument not in anonymous memory: not read"}
    assert sr.read_task_memory(lambda s: None, 40, str(proc), (0x1800,))["paths"] == ["/gpfs/a/b"]


def test_the_memory_reader_takes_what_users_write_as_it_is(tmp_path):
    proc = tmp_path / "proc"
    mem = bytearray(0x5000)
    mem[0x1000:0x1008] = b"/at/lo\0\0"               # at the mapping's very start
    mem[0x2ff8:0x3000] = b"/x/edge!"
    mem[0x3000:0x3008] = b"/beyond\0"                 # past the mapping: never read
    memory(proc, 45, args=(0x1000, 0x1100), env=(0x1100, 0x1200),
           environ=b"RANK=a=b\0SLURM_PROCID=\xff3\0", cmdline=b"python\0\xff.py\0", maps=ANON, mem=bytes(mem))
    (proc / "45" / "stat").write_text(stat_line(45, "evil) D 1 2 3", args=(0x1000, 0x1100), env=(0x1100, 0x1200)))
    got = sr._inspect(lambda s: None, 45, str(proc), [0x1000, 0x2ff8, 0x3000])
    assert (got["RANK"], got["SLURM_PROCID"], got["cmdline"]) == ("a=b", "\ufffd3", "python \ufffd.py")
    assert got["paths"] == ["/at/lo", "/x/edge!", None]


def test_ranges_pointed_at_a_file_are_not_read(tmp_path):
    proc = tmp_path / "proc"
    # PR_SET_MM_MAP: the environment points into a file mapping (a FUSE file the user
    # can stall); the command line is safe alone, but the kernel reads on into the
    # environment when it does not end in NUL: neither is read.
    memory(proc, 41, args=(0x1000, 0x1100), env=(0x4000, 0x4100), environ=b"RANK=9\0", cmdline=b"x\0", maps=ANON)
    assert sr._inspect(lambda s: None, 41, str(proc), []) == {
        "devs": ["0:51", "253:1"], "paths": [],
        "skipped": "environment, command line not in anonymous memory: not read"}
    # No environment at all (the kernel would not say where): the command line is read.
    memory(proc, 42, args=(0x1000, 0x1100), env=(0, 0), environ=b"RANK=9\0", cmdline=b"x\0", maps=ANON)
    assert sr._inspect(lambda s: None, 42, str(proc), []) == {"devs": ["0:51", "253:1"], "cmdline": "x",
                                                              "paths": []}
    # The arguments on the file: only the environment is read.
    memory(proc, 43, args=(0x4000, 0x4100), env=(0x1100, 0x1200), environ=b"RANK=9\0", cmdline=b"x\0", maps=ANON)
    assert sr._inspect(lambda s: None, 43, str(proc), []) == {
        "devs": ["0:51", "253:1"], "RANK": "9", "paths": [], "skipped": "command line not in anonymous memory: not read"}


def test_a_stat_without_the_ranges_reads_neither(tmp_path):
    proc = tmp_path / "proc"
    memory(proc, 44, args=(0x1000, 0x1100), env=(0x1100, 0x1200), environ=b"RANK=9\0", cmdline=b"x\0", maps=ANON)
    (proc / "44" / "stat").write_text("44 (python) D 1 44 44 0 -1 0 x y\n")
    assert sr._inspect(lambda s: None, 44, str(proc), []) == {
        "devs": ["0:51", "253:1"], "paths": [], "skipped": "command line not in anonymous memory: not read"}


HOST = MOUNTINFO + "60 1 0:60 / /home/u/own rw - fuse.fusefs own rw,user_id=1000,group_id=1000\n"


def test_a_mount_table_comes_back_whole_when_small(tmp_path):
    proc = tmp_path / "proc"
    (proc / "50").mkdir(parents=True)
    (proc / "50" / "mountinfo").write_text(HOST)
    steps = []
    view = sr._mount_view(steps.append, 50, str(proc), [50], [])
    assert steps == ["mountinfo", "parse"]
    assert view == {"whole": True, "count": 3, "cut": False, "mounts": [
        [1, "/", "ext4", "/dev/sda1", "rw", "rw", "8:1", None],
        [50, "/gpfs", "gpfs", "gpfs0", "rw", "rw", "0:50", None],
        [60, "/home/u/own", "fuse.fusefs", "own", "rw", "rw,user_id=1000,group_id=1000", "0:60", 1000]]}
    table, whole, count = sr._table_from(view)
    assert (whole, count, [m.mountpoint for m in table]) == (True, 3, ["/", "/gpfs", "/home/u/own"])
    assert table.user_owner(table.by_id(60)) == 1000


def test_a_mount_point_that_is_not_utf8_is_kept_byte_for_byte(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    (proc / "50").mkdir(parents=True)
    (proc / "50" / "mountinfo").write_bytes(HOST.encode() + b"61 60 0:61 / /home/u/own/\xff rw - tmpfs t rw\n")
    monkeypatch.setattr(sr, "TABLE_WHOLE", 4)           # exactly at the limit: still whole
    view = sr._mount_view(lambda s: None, 50, str(proc), [], [])
    assert view["whole"] is True and view["mounts"][-1][:2] == [61, "/home/u/own/\udcff"]
    assert view["mounts"][-1][7] == 1000


def test_a_large_mount_table_comes_back_in_part_with_each_owner(tmp_path, monkeypatch):
    monkeypatch.setattr(sr, "TABLE_WHOLE", 2)
    proc = tmp_path / "proc"
    (proc / "50").mkdir(parents=True)
    many = "".join(f"{100 + i} 1 0:70 / /home/u/m{i} rw - tmpfs t rw\n" for i in range(10))
    (proc / "50" / "mountinfo").write_text(HOST + many)
    view = sr._mount_view(lambda s: None, 50, str(proc), [60, "x", 999], ["0:50", "0:70"])
    assert (view["whole"], view["count"]) == (False, 13)
    assert [r[0] for r in view["mounts"]] == [60, 50, 100, 101, 102, 103, 104, 105, 106, 107]
    assert view["mounts"][0][7] == 1000
    table, whole, count = sr._table_from(view)
    assert (whole, count, len(list(table))) == (False, 13, 10)
    # Sent in part, each mount keeps the owner the whole table gave it.
    assert table.user_owner(table.by_id(60)) == 1000 and table.user_owner(table.by_id(50)) is None
    view = sr._mount_view(lambda s: None, 50, str(proc), [50], [])
    assert [r[0] for r in view["mounts"]] == [50]


def test_a_mount_table_answer_is_taken_back_row_by_row():
    view = {"mounts": [[7, "/a", "nfs4", "srv:/a", "rw", "rw", "0:7", None], ["x", "/b"], [8, "/c"],
                       [9, "/d", "tmpfs", "t", "rw", "rw", "0:9", "1000"]], "whole": False}
    table, whole, count = sr._table_from(view)
    assert ([m.mount_id for m in table], whole, count) == ([7, 9], False, 2)
    assert table.user_owner(table.by_id(9)) is None
    assert sr._table_from({})[1:] == (False, 0)
    assert sr._table_from({"mounts": [], "whole": True, "count": 5})[1:] == (True, 5)


def test_owners_sent_with_a_part_are_kept_and_a_whole_table_says_its_own():
    row = [61, "/home/u/own/inner", "tmpfs", "t", "rw", "rw", "0:61", 1000]    # below the user's FUSE mount
    table, _, _ = sr._table_from({"mounts": [row], "whole": False})
    assert table.user_owner(table.by_id(61)) == 1000
    table, _, _ = sr._table_from({"mounts": [row], "whole": True})
    assert table.user_owner(table.by_id(61)) is None       # whole: the table itself says, and it has no FUSE mount


def test_a_pending_sigkill_is_read_from_the_threads_or_the_processs_set(tmp_path):
    proc = tmp_path / "proc"
    t = proc / "60" / "task" / "61"
    t.mkdir(parents=True)
    for status, pending in [("SigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", True),
                            ("SigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n", True),
                            ("SigPnd:\t0000000000000200\nShdPnd:\t0000000000000080\n", False),
                            ("SigPnd:\t00000000000001ff\nShdPnd:\t0000000000000000\n", True),
                            ("SigPnd:\t0000000000000000\nShdPnd:\t00000000000001ff\n", True),
                            ("ShdPnd:\t0000000000000100\n", True),
                            ("SigPnd:\t0000000000000100\n", True),
                            ("SigPnd:\tzz\nShdPnd:\t0000000000000100\n", False),
                            ("Name:\tx\n", False)]:
        (t / "status").write_text(status)
        assert sr._sigkill_pending(str(proc), 60, 61) is pending, status
    assert sr._sigkill_pending(str(proc), 60, 62) is False


def test_parsed_mount_tables_agree_with_the_hosts():
    # The rows _mount_view sends are what _table_from rebuilds, field by field.
    table = MountTable(parse_mountinfo(HOST))
    rows = [sr._mount_row(m, table.user_owner(m)) for m in table]
    back, _, _ = sr._table_from({"mounts": rows, "whole": True})
    assert [(m.mount_id, m.mountpoint, m.fstype, m.source, m.options, m.super_options, m.dev) for m in back] == \
        [(m.mount_id, m.mountpoint, m.fstype, m.source, m.options, m.super_options, m.dev) for m in table]


# --- the finding: every word of it, branch by branch ----------------------------------------

JOB = JobRef(job="55", step="0", task="3", uid=1000)
KERNEL = "INFO: task python:101 blocked for more than 120 seconds."


def diagnosis(tmp_path, proc=None, **settings):
    cfg = Config(stuck_tasks=StuckTasksConfig(**settings))
    state = StateStore(str(tmp_path / "state"))
    ctx = Context(cfg, "n1", state, Runner(state))
    return sd.Diagnosis("stuck_tasks", cfg.stuck_tasks, **({"proc": str(proc)} if proc else {})), ctx


def stuck(state="D", ref=JOB, **kw):
    d = sr.Stuck(sample=TaskSample(pid=100, tid=101, start=5000, comm="python", state=state, uid=1000),
                 tids=[101], seconds=600.0, ref=ref)
    for k, v in kw.items():
        setattr(d, k, v)
    return d


GPFS = dict(syscall="write", syscall_nr=1, fd=7, file="/gpfs/run/main_log.txt", mountpoint="/gpfs", fstype="gpfs",
            wchan="wait_on_page_bit", stack=["folio_wait_bit", "mmfs_write", "vfs_write", "ksys_write", "do_syscall"],
            cause="shared_filesystem", how=["fd 7: mnt_id 50"], mount_dev="0:50", source="gpfs0", network=True)


def test_a_jobs_task_stuck_on_the_nodes_storage_drains_and_asks_for_a_reboot(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    d = stuck(**GPFS, tids=[101, 102], blocked=700.0, rank="3", cmdline="python train.py", inspect="ok",
              kernel=KERNEL)
    f = diag.finding(ctx, d)
    assert (f.check, f.target, f.status, f.severity, f.job, f.incident) == \
        ("stuck_tasks", "job 55 rank 3 pid 100", "stuck", "fail", "55", "n1:100:5000")
    assert (f.needs_reboot, f.hard, f.resumable, f.job_action, f.keep_job) == (True, True, False, "", False)
    assert f.summary == ("job 55 rank 3 pid 100 (2 threads) stuck for 11m40s in write() on /gpfs/run/main_log.txt "
                         "(gpfs /gpfs)")
    assert f.reason == "job 55 stuck in write() on /gpfs (gpfs), pid 100"
    assert f.detail == ("cause: shared filesystem; comm python; wchan wait_on_page_bit; stack folio_wait_bit < "
                        f"mmfs_write < vfs_write < ksys_write; kernel: {KERNEL}")
    assert f.evidence == {
        "node": "n1", "job": "55", "step": "0", "task": "3", "rank": "3", "pid": 100, "tids": [101, 102],
        "start_ticks": 5000, "comm": "python", "uid": 1000, "state": "D", "seconds": 600.0, "d_seconds": 700.0,
        "d_at_least": False, "syscall": "write", "syscall_nr": 1, "fd": 7, "file": "/gpfs/run/main_log.txt",
        "mountpoint": "/gpfs", "fstype": "gpfs", "wchan": "wait_on_page_bit", "stack": GPFS["stack"],
        "cause": "shared_filesystem", "cmdline": "python train.py", "inspect": "ok", "kernel_log": KERNEL,
        "mount_owner": None, "attribution": ["fd 7: mnt_id 50"], "mount_dev": "0:50", "sigkill_pending": False,
        "source": "gpfs0", "network": True, "placed_earlier": None}


@pytest.mark.parametrize("blocked, summary, d_seconds, at_least", [
    (None, "stuck for ≥10m00s", 600.0, True),          # our own sightings bound it from below
    (587.0, "stuck for 10m00s", 600.0, False),         # the scheduler's clock runs a little behind
    (586.9, "stuck for ≥10m00s", 600.0, True),         # too far behind: a later sleep
    (3725.0, "stuck for 1h02m", 3725.0, False),
])
def test_how_long_comes_from_the_scheduler_when_it_can_be_trusted(tmp_path, blocked, summary, d_seconds, at_least):
    diag, ctx = diagnosis(tmp_path)
    f = diag.finding(ctx, stuck(**GPFS, blocked=blocked))
    assert summary in f.summary and (f.evidence["d_seconds"], f.evidence["d_at_least"]) == (d_seconds, at_least)


def test_asleep_and_killed_tasks_say_so_and_only_d_asks_for_a_reboot(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    f = diag.finding(ctx, stuck(**GPFS, state="S", blocked=600.0))
    assert f.summary == "job 55 task 3 pid 100 stuck for 10m00s (asleep, S) in write() on /gpfs/run/main_log.txt " \
                        "(gpfs /gpfs)"
    assert f.needs_reboot is False and f.severity == "fail"
    f = diag.finding(ctx, stuck(**GPFS, sigkill=True, blocked=600.0))
    assert "stuck for 10m00s (killed, still in D: unkillable) in write()" in f.summary and f.needs_reboot
    assert f.evidence["sigkill_pending"] is True


def test_a_task_left_when_its_job_ended(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    f = diag.finding(ctx, stuck(**GPFS, blocked=600.0), after_end=True)
    assert f.summary == "job 55 task 3 pid 100 still stuck after the job ended in write() on " \
                        "/gpfs/run/main_log.txt (gpfs /gpfs)"
    # The node's reason does not change when the job ends: its cause did not.
    assert f.reason == "job 55 stuck in write() on /gpfs (gpfs), pid 100"


@pytest.mark.parametrize("mode, severity", [("warn", "warn"), ("drain", "fail"), ("ignore", None)])
def test_a_task_of_no_job_on_the_nodes_storage_follows_the_setting(tmp_path, mode, severity):
    diag, ctx = diagnosis(tmp_path, non_job_tasks=mode)
    f = diag.finding(ctx, stuck(ref=None, **GPFS, blocked=600.0))
    if severity is None:
        assert f is None
        return
    assert (f.target, f.severity, f.job, f.status) == ("pid 100", severity, None, "stuck")
    assert f.summary == "pid 100 stuck for 10m00s in write() on /gpfs/run/main_log.txt (gpfs /gpfs)"
    assert f.reason == "stuck in write() on /gpfs (gpfs), pid 100"
    assert (f.evidence["job"], f.evidence["step"], f.evidence["task"]) == (None, None, None)


FUSE = dict(syscall="read", syscall_nr=0, fd=5, file="/home/u/m/data", mountpoint="/home/u/m", fstype="fuse.sshfs",
            wchan="request_wait_answer", stack=["request_wait_answer"], cause="user_mount", how=["fd 5: mnt_id 60"],
            mount_dev="0:60", source="u@h:")


@pytest.mark.parametrize("owner, fstype, action, tail", [
    (1000, "fuse.sshfs", "requeue", " (a FUSE mount of uid 1000, the task's own user)"),
    (2000, "fuse.sshfs", "comment", " (a FUSE mount of uid 2000)"),
    (2000, "nfs4", "comment", " (a mount of uid 2000)"),
])
def test_a_task_on_a_users_own_mount_is_the_jobs_problem(tmp_path, owner, fstype, action, tail):
    diag, ctx = diagnosis(tmp_path, own_mount="requeue")
    f = diag.finding(ctx, stuck(**{**FUSE, "fstype": fstype}, mount_owner=owner, blocked=600.0))
    assert (f.check, f.status, f.severity, f.job, f.job_action, f.needs_reboot, f.hard, f.resumable) == \
        ("stuck_tasks", "stuck_own_mount", "warn", "55", action, False, False, True)
    assert f.summary == f"job 55 task 3 pid 100 stuck for 10m00s in read() on /home/u/m/data ({fstype} /home/u/m){tail}"
    assert f.reason == f"job 55 stuck in read() on /home/u/m ({fstype}), pid 100"
    assert f.detail.startswith("cause: the user's own mount; comm python; wchan request_wait_answer")
    assert (f.incident, f.target, f.evidence["mount_owner"]) == ("n1:100:5000", "job 55 task 3 pid 100", owner)


def test_a_users_own_mount_outside_any_job_is_told_or_ignored(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    f = diag.finding(ctx, stuck(ref=None, **FUSE, mount_owner=1000, blocked=600.0))
    assert (f.status, f.job, f.job_action, f.target) == ("stuck_own_mount", None, "", "pid 100")
    diag, ctx = diagnosis(tmp_path, non_job_tasks="ignore")
    assert diag.finding(ctx, stuck(ref=None, **FUSE, mount_owner=1000, blocked=600.0)) is None


@pytest.mark.parametrize("cause, label", [("unproven", "a place not proven to be the node's"),
                                          ("lock", "a lock another task holds"),
                                          ("other", "nothing of the node's (no filesystem or device)")])
def test_a_task_waiting_on_nothing_proven_the_nodes_is_told_to_its_job(tmp_path, cause, label):
    diag, ctx = diagnosis(tmp_path, not_node="cancel")
    f = diag.finding(ctx, stuck(cause=cause, syscall="", wchan="pipe_read", blocked=600.0))
    assert (f.check, f.target, f.status, f.severity, f.job, f.incident, f.job_action, f.needs_reboot, f.hard,
            f.resumable) == ("stuck_tasks", "job 55 task 3 pid 100", "stuck_not_node", "warn", "55", "n1:100:5000",
                             "cancel", False, False, True)
    assert f.summary == f"job 55 task 3 pid 100 stuck for 10m00s in the kernel at pipe_read (not the node's: {label})"
    assert f.reason == "job 55 stuck in the kernel at pipe_read, pid 100"
    assert f.detail == f"cause: {label}; comm python; wchan pipe_read; stack unreadable"
    f = diag.finding(ctx, stuck(ref=None, cause=cause, blocked=600.0))
    assert (f.job, f.job_action, f.summary) == (None, "", f"pid 100 stuck for 10m00s in the kernel (not the node's: "
                                                          f"{label})")
    diag, ctx = diagnosis(tmp_path, non_job_tasks="ignore")
    assert diag.finding(ctx, stuck(ref=None, cause=cause, blocked=600.0)) is None


@pytest.mark.parametrize("syscall, call", [("page fault", "page fault"), ("running", "running"), ("", "the kernel"),
                                           ("fsync", "fsync()")])
def test_the_call_is_named_as_the_kernel_says(tmp_path, syscall, call):
    diag, ctx = diagnosis(tmp_path)
    f = diag.finding(ctx, stuck(**{**GPFS, "syscall": syscall, "file": "", "wchan": "mmfs_fault"}, blocked=600.0))
    assert f.summary == f"job 55 task 3 pid 100 stuck for 10m00s in {call} at mmfs_fault"
    assert f.reason == f"job 55 stuck in {call} at mmfs_fault (gpfs), pid 100"


def test_a_task_with_nothing_known_says_so(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    f = diag.finding(ctx, stuck(cause="other", seconds=600.46))
    assert f.reason == "job 55 stuck in the kernel, pid 100"
    assert f.detail == "cause: nothing of the node's (no filesystem or device); comm python; wchan ?; stack unreadable"
    assert (f.evidence["seconds"], f.evidence["d_seconds"]) == (600.5, 600.5)


def test_a_file_without_its_mount_and_a_long_name(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    f = diag.finding(ctx, stuck(**{**GPFS, "fstype": "", "mountpoint": ""}, blocked=600.0))
    assert f.summary.endswith("in write() on /gpfs/run/main_log.txt") and f.reason.endswith(
        "in write() at wait_on_page_bit, pid 100")
    long = "/gpfs/" + "d" * 300 + "/file\x1b[2J"
    f = diag.finding(ctx, stuck(**{**GPFS, "file": long}, cmdline="python \x1b]0;x\x07", blocked=600.0))
    shown = "/gpfs/" + "d" * 300 + "/file\\x1b[2J"
    assert f" on {shown[:59]}…{shown[-60:]} (gpfs /gpfs)" in f.summary
    # The node's reason, every user's to read, names the mount, never the user's file.
    assert f.reason == "job 55 stuck in write() on /gpfs (gpfs), pid 100" and "ddd" not in f.reason
    assert (f.evidence["file"], f.evidence["cmdline"]) == (shown, "python \\x1b]0;x\\x07")


# --- the look's answer taken back ------------------------------------------------------------


def test_a_look_that_did_not_answer_proves_nothing(tmp_path):
    diag, _ = diagnosis(tmp_path)
    d = stuck()
    diag._apply_look(d, None)
    assert d.look == "not run"
    for o, look in [(Outcome("k", HUNG, error="no answer in 2s"), "hung: no answer in 2s (at start)"),
                    (Outcome("k", HUNG, error="no answer in 2s", step="wchan"), "hung: no answer in 2s (at wchan)"),
                    (Outcome("k", DONE, value=["not", "a", "dict"]), "done:  (at start)"),
                    (Outcome("k", FAILED, value={"call": {"name": "read"}}, error="boom"), "failed: boom (at start)")]:
        d = stuck()
        diag._apply_look(d, o)
        assert (d.look, d.syscall, d.fds, d.wchan) == (look, "", [], "")


def test_a_looks_answer_is_taken_field_by_field_and_junk_is_dropped(tmp_path):
    diag, _ = diagnosis(tmp_path)
    d = stuck()
    d.sample.start = -1             # seen through status only: the look gives it
    diag._apply_look(d, Outcome("k", DONE, value={
        "start": 4242, "call": {"name": "openat", "nr": 257, "fd": 5, "file": "/gpfs/run", "addrs": [4096, "x"],
                                "fds": [5, None, "6"], "dirfd": 5},
        "wchan": "request_wait_answer", "stack": ["a", 2], "blocked": 12.5,
        "mnt_ids": {"5": 50, "x": 1}, "anon": {"9": "anon_inode:[eventfd]", "y": "z"}, "mntns": "mnt:[4026531841]",
        "links": {"cwd": "/gpfs/run", "fd/5": "/gpfs/run"}}))
    assert (d.sample.start, d.syscall, d.syscall_nr, d.fd, d.file, d.addrs, d.fds, d.dirfd) == \
        (4242, "openat", 257, 5, "/gpfs/run", [4096], [5], 5)
    assert (d.wchan, d.stack, d.blocked, d.mnt_ids, d.anon, d.mntns, d.links, d.look) == \
        ("request_wait_answer", ["a", "2"], 12.5, {5: 50}, {9: "anon_inode:[eventfd]"}, "mnt:[4026531841]",
         {"cwd": "/gpfs/run", "fd/5": "/gpfs/run"}, "ok")
    # A start the sample already has stays; values of the wrong type are none.
    d = stuck()
    diag._apply_look(d, Outcome("k", DONE, value={"start": 1, "call": {"fd": "5", "dirfd": "5", "name": None},
                                                  "blocked": "12", "wchan": None, "mntns": None}))
    assert (d.sample.start, d.fd, d.file, d.dirfd, d.blocked, d.syscall, d.wchan, d.mntns, d.links) == \
        (5000, None, "", None, None, "", "", "", {})
    d = stuck()
    d.sample.start = -1
    diag._apply_look(d, Outcome("k", DONE, value={"start": "4242", "call": {"fd": 7, "file": ""}}))
    assert (d.sample.start, d.fd, d.file) == (-1, 7, "")


# --- where it waits: the kernel's ids against its own table ---------------------------------
TABLE = MountTable(parse_mountinfo(HOST))


def located(tmp_path, d, proc=None, table=TABLE):
    diag, ctx = diagnosis(tmp_path, proc=proc)
    diag._host = MountTable(parse_mountinfo(HOST))
    d.table = table
    diag._locate(ctx, d)
    return d


def test_a_descriptor_on_the_nodes_mount_places_it_there(tmp_path):
    d = located(tmp_path, stuck(syscall="write", fds=[7], mnt_ids={7: 50}, stack=["mmfs_write"]))
    assert (d.cause, d.mountpoint, d.fstype, d.mount_dev, d.source, d.network, d.how) == \
        ("shared_filesystem", "/gpfs", "gpfs", "0:50", "gpfs0", True, [
            "fd 7: mnt_id 50", "the kernel stack is in gpfs, which no user can mount"])


def test_an_anonymous_inode_is_named_and_places_nothing(tmp_path):
    d = located(tmp_path, stuck(syscall="read", fds=[9], anon={9: "anon_inode:[eventpoll]\x1b"}, mnt_ids={9: None},
                                wchan="ep_poll"))
    assert (d.cause, d.mountpoint, d.how) == ("unproven", "", [
        "fd 9: anon_inode:[eventpoll]\\x1b, no mount (its fdinfo not read)",
        "not every place the task's ids name is a mount of its table (detached?)"])
    d = located(tmp_path, stuck(syscall="read", fds=[9], mnt_ids={}, wchan="pipe_read"))
    assert (d.cause, d.how) == ("unproven", ["fd 9: mnt_id None", "not every place the task's ids name is a mount "
                                                                  "of its table (detached?)"])


def test_a_walked_path_places_it_by_the_mount_the_walk_reached(tmp_path):
    d = located(tmp_path, stuck(syscall="openat", walk={"mnt_id": 60, "end": "user mount"},
                                stack=["request_wait_answer", "fuse_lookup_name"]))
    assert (d.cause, d.mount_owner, d.mountpoint, d.how) == ("user_mount", 1000, "/home/u/own", [
        "path resolved from the task's root: user mount, mnt_id 60"])
    d = located(tmp_path, stuck(syscall="openat", walk={"mnt_id": None, "end": "hung", "error": "x"},
                                stack=["request_wait_answer"]))
    assert (d.cause, d.mount_owner, d.how) == ("unproven", None, [
        "path resolved from the task's root: hung, mnt_id None (x)", "not every place the task's ids name is a mount "
        "of its table (detached?)"])
    d = located(tmp_path, stuck(syscall="openat", walk={"mnt_id": "50", "end": "found"}, stack=["mmfs_lookup"]))
    assert d.how[0] == "path resolved from the task's root: found, mnt_id 50" and d.mountpoint == ""


def test_a_page_fault_is_placed_by_its_mappings_only_without_a_walk(tmp_path):
    d = located(tmp_path, stuck(syscall="page fault", devs=["0:60"], wchan="request_wait_answer",
                                stack=["fuse_simple_request", "filemap_fault"]))
    assert (d.cause, d.mount_owner, d.how) == ("user_mount", 1000, [
        "a file mapping on device 0:60, fuse as the kernel stack"])
    d = located(tmp_path, stuck(syscall="page fault", devs=["0:60"], walk={"mnt_id": 50, "end": "found"},
                                stack=["mmfs_fault"]))
    assert d.how[0] == "path resolved from the task's root: found, mnt_id 50"
    d = located(tmp_path, stuck(syscall="read", devs=["0:60"], stack=["fuse_simple_request"]))
    assert (d.cause, d.how) == ("unproven", ["the kernel stack is in fuse, but no id names the mount"])


def test_what_was_not_read_is_said(tmp_path):
    d = located(tmp_path, stuck(look="hung: no answer (at stat)", table_cut=True,
                                table_note="its mount table was not read: failed: boom"))
    assert (d.cause, d.how) == ("other", ["its /proc files did not answer: hung: no answer (at stat)",
                                          "its mountinfo is over 16 MiB: read in part",
                                          "its mount table was not read: failed: boom"])
    d = located(tmp_path, stuck(fds=[7], mnt_ids={7: 50}, stack=["mmfs_write"]), table=None)
    assert (d.cause, d.mountpoint, d.how[0]) == ("shared_filesystem", "", "fd 7: mnt_id 50")


def test_whose_a_mount_is_comes_from_the_hosts_table_read_for_this_diagnosis(tmp_path):
    # The node's own FUSE mount, in the host's table the diagnosis read (diag._host),
    # though the context's older table has no such device.
    shared = "80 1 0:80 / /shared rw - fuse.gcsfuse bucket rw,user_id=0,group_id=0,allow_other\n"
    diag, ctx = diagnosis(tmp_path)
    diag._host = MountTable(parse_mountinfo(HOST + shared))
    ctx._mounts = MountTable(parse_mountinfo(HOST))
    d = stuck(walk={"mnt_id": 80, "end": "found"}, stack=["request_wait_answer", "fuse_lookup_name"])
    d.table = MountTable(parse_mountinfo(HOST + shared))
    diag._locate(ctx, d)
    assert (d.cause, d.mount_owner, d.mountpoint) == ("shared_filesystem", None, "/shared")


def test_a_mount_only_the_tasks_namespace_has_is_its_users(tmp_path):
    own = MountTable(parse_mountinfo(HOST + "77 1 0:77 / /ns rw - tmpfs t rw\n"))
    d = located(tmp_path, stuck(walk={"mnt_id": 77, "end": "found"}, stack=["shmem_fault"]), table=own)
    assert (d.cause, d.mount_owner) == ("user_mount", 1000)


def test_a_pending_sigkill_is_read_for_the_located_thread(tmp_path):
    proc = tmp_path / "proc"
    t = proc / "100" / "task" / "101"
    t.mkdir(parents=True)
    (t / "status").write_text("SigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n")
    assert located(tmp_path, stuck(fds=[7], mnt_ids={7: 50}), proc=proc).sigkill is True
    assert located(tmp_path, stuck(fds=[7], mnt_ids={7: 50})).sigkill is False


# --- an earlier run's place, kept by a task in its exit path ---------------------------------
PLACE = {"cause": "shared_filesystem", "file": "/gpfs/run/shard", "mountpoint": "/gpfs", "fstype": "gpfs",
         "mount_dev": "0:50", "source": "gpfs0", "network": True, "syscall": "fsync", "job": "55"}


def test_a_killed_task_keeps_the_place_an_earlier_run_proved(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    diag.places = {"100:5000": dict(PLACE)}
    d = stuck(ref=None, cause="other", syscall="", how=["x"])
    diag._remembered(d)
    assert (d.cause, d.file, d.mountpoint, d.fstype, d.mount_dev, d.source, d.network, d.syscall, d.earlier) == \
        ("shared_filesystem", "/gpfs/run/shard", "/gpfs", "gpfs", "0:50", "gpfs0", True, "fsync", "fsync()")
    assert d.ref == JobRef(job="55", uid=1000)
    assert d.how == ["x", "placed on /gpfs by an earlier run (same pid and start time); now in no system call: "
                          "its exit path", "job 55 named by the job's cgroup in that run; Slurm has since moved the "
                          "task out of it"]
    diag.places = {}
    f = diag.finding(ctx, stuck(ref=JOB, cause="unproven", syscall="exit_group", file="", sigkill=True, blocked=600.0))
    assert f.status == "stuck_not_node"          # no place kept for it
    diag.places = {"100:5000": dict(PLACE)}
    f = diag.finding(ctx, stuck(ref=JOB, cause="unproven", syscall="exit_group", file="", sigkill=True, blocked=600.0))
    assert f.summary == ("job 55 task 3 pid 100 stuck for 10m00s (killed, still in D), now in its exit path in "
                         "fsync() on /gpfs/run/shard (gpfs /gpfs)")
    assert (f.status, f.evidence["placed_earlier"], f.job) == ("stuck", "fsync()", "55")
    assert f.evidence["attribution"][-1] == ("placed on /gpfs by an earlier run (same pid and start time); now "
                                             "exit_group: its exit path")


@pytest.mark.parametrize("then, earlier", [("page fault", "page fault"), ("running", "running"), ("", "stuck"),
                                           (None, "stuck")])
def test_what_the_task_did_then_is_named_as_the_kernel_said(tmp_path, then, earlier):
    diag, _ = diagnosis(tmp_path)
    diag.places = {"100:5000": {**PLACE, "syscall": then, "file": None, "mountpoint": None, "fstype": None,
                                "mount_dev": None, "source": None, "job": None}}
    d = stuck(ref=None, cause="other", file="")
    diag._remembered(d)
    assert d.file == ""
    d = stuck(ref=None, cause="other", file="/x")
    diag._remembered(d)
    assert (d.earlier, d.file, d.mountpoint, d.fstype, d.mount_dev, d.source, d.ref) == (earlier, "/x", "", "", "",
                                                                                           "", None)


@pytest.mark.parametrize("change", [dict(cause="shared_filesystem"), dict(cause="gpu_driver"), dict(mount_owner=1000)])
def test_a_task_proven_now_or_on_a_users_mount_keeps_what_this_run_says(tmp_path, change):
    diag, _ = diagnosis(tmp_path)
    diag.places = {"100:5000": dict(PLACE)}
    d = stuck(**{"cause": "user_mount", **change})
    before = d.cause
    diag._remembered(d)
    assert (d.cause, d.earlier, d.mountpoint) == (before, "", "")


def test_only_a_place_of_the_nodes_is_kept(tmp_path):
    diag, _ = diagnosis(tmp_path)
    diag.places = {"100:5000": {**PLACE, "cause": "user_mount"}}
    d = stuck(cause="other")
    diag._remembered(d)
    assert (d.cause, d.earlier) == ("other", "")
    diag.places = {"100:4999": dict(PLACE)}
    diag._remembered(d)
    assert (d.cause, d.earlier) == ("other", "")


def test_a_finding_of_the_nodes_place_is_kept_for_later_runs():
    ev = {"pid": 100, "cause": "shared_filesystem", "file": "/f", "mountpoint": "/gpfs", "fstype": "gpfs",
          "mount_dev": "0:50", "source": "gpfs0", "network": True, "syscall": "fsync", "comm": "x"}
    f = Finding("stuck_tasks", "pid 100", "stuck", "fail", "s", evidence=ev, job="55")
    assert sd.place_of(f) == {k: ev[k] for k in sd.PLACE_FIELDS} | {"job": "55"}
    assert sd.place_of(Finding("stuck_tasks", "t", "stuck_not_node", "warn", "s", evidence=ev)) is None
    assert sd.place_of(Finding("stuck_tasks", "t", "stuck", "fail", "s", evidence={**ev, "cause": "lock"})) is None
    assert sd.place_of(Finding("stuck_tasks", "t", "stuck", "fail", "s", evidence={**ev, "pid": "100"})) is None


# --- the witnesses: hung probes and the kernel's own line ------------------------------------


def test_a_hung_probe_witnesses_for_its_mounts_device(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    ctx._mounts = MountTable(parse_mountinfo(HOST + "70 1 0:70 / /scratch rw - nfs4 srv:/s rw\n"
                                                    "71 1 0:71 / /data:1 rw - nfs4 srv:/d rw\n"))
    outcomes = {"filesystem:/gpfs/run": Outcome("filesystem:/gpfs/run", HUNG),
                "filesystem:/data:1/a:b": Outcome("filesystem:/data:1/a:b", HUNG),
                "filesystem:/scratch": Outcome("filesystem:/scratch", STILL_HUNG),
                "filesystem:/home/u/own": Outcome("filesystem:/home/u/own", DONE),
                "gpu:0": Outcome("gpu:0", HUNG), "filesystem:/nowhere": Outcome("filesystem:/nowhere", FAILED)}
    assert diag.hung_probes(ctx, outcomes) == {"0:50": "/gpfs/run", "0:70": "/scratch", "0:71": "/data:1/a:b"}


def kmsg_file(tmp_path, *lines):
    p = tmp_path / "kmsg"
    p.write_text("".join(f"3,{i},{usec},-;{text}\n" for i, (usec, text) in enumerate(lines)))
    return str(p)


def test_the_kernels_hung_task_line_is_the_tasks_only_when_tid_comm_and_age_agree(tmp_path):
    ticks = procfs.boot_ticks()
    diag, ctx = diagnosis(tmp_path)
    ctx.config.kernel_log = kmsg_file(
        tmp_path,
        (100_000_000_000, "INFO: task python:101 blocked for more than 120 seconds."),
        (100_000_000_000, "INFO: task other:102 blocked for more than 120 seconds."),
        (100_000_000_000, "INFO: task a_very_long_pro:103 blocked for more than 120 seconds."),
        (100_000_000_000, "INFO: task late:104 blocked for more than 120 seconds."),
        (100_000_000_000, "INFO: task ghost:999 blocked for more than 120 seconds."),
        (100_000_000_000, "INFO: task edge:105 blocked for more than 120 seconds."))
    samples = [TaskSample(100, 101, 50 * ticks, "python", "D"), TaskSample(100, 102, 50 * ticks, "python", "D"),
               TaskSample(103, 103, 50 * ticks, "a_very_long_process_name", "D"),
               TaskSample(104, 104, 99881 * ticks, "late", "D"), TaskSample(105, 105, 99880 * ticks, "edge", "D")]
    # 27 hours up: a clock off by a millionth would be 0.1 s off.
    wall = time.time() - (time.monotonic() - 99880.0)
    got = diag.kernel_lines(ctx, samples)
    assert sorted(got) == [101, 103, 105]          # 105 started the very second it blocked: still the one
    assert got[101][0] == "INFO: task python:101 blocked for more than 120 seconds."
    assert got[101][1] == pytest.approx(wall, abs=0.02) and got[103][1] == pytest.approx(wall, abs=0.02)
    assert got[105][1] == pytest.approx(wall, abs=0.02)


def test_the_job_is_the_cgroups_when_its_uid_is_the_tasks(tmp_path):
    proc = tmp_path / "proc"
    (proc / "100").mkdir(parents=True)
    (proc / "100" / "cgroup").write_text("0::/system.slice/n1_slurmstepd.scope/job_55/step_0/user/task_3\n")
    (proc / "200").mkdir()
    (proc / "200" / "cgroup").write_text("4:memory:/slurm/uid_1000/job_66/step_batch/task_0\n")
    diag, _ = diagnosis(tmp_path, proc=proc)
    assert diag.ref(100, 1000) == JobRef(job="55", step="0", task="3", node="n1")
    assert diag.ref(200, 1000) == JobRef(job="66", step="batch", task="0", uid=1000)
    assert diag.ref(200, 2000) is None and diag.ref(300, 1000) is None


# --- reading memory and tables: what each child is asked, and what it says -------------------
class Kids:
    """The runner's answers, by what each task reads; the tasks asked are kept."""

    def __init__(self, answer, stuck=()):
        self.answer, self.asked, self._stuck = answer, [], {k: {} for k in stuck}

    def run(self, tasks):
        self.asked.append(list(tasks))
        return {t.key: self.answer(t) for t in tasks}

    def stuck(self):
        return dict(self._stuck)


def looked(pid, mntns="mnt:[1]", **kw):
    d = stuck(**kw)
    d.sample = TaskSample(pid=pid, tid=pid, start=pid * 10, comm="python", state="D", uid=1000)
    d.mntns = mntns
    return d


VIEW = {"mounts": [sr._mount_row(m, TABLE.user_owner(m)) for m in TABLE], "whole": True, "count": 3, "cut": True}


def test_each_process_gets_a_memory_reader_and_each_namespace_one_table(tmp_path):
    diag, ctx = diagnosis(tmp_path, inspect_timeout=1.5)

    def answer(t):
        if t.key == "stuck_tasks:inspect:100:1000:1000":
            return Outcome(t.key, DONE, value={"RANK": "3", "cmdline": "python x", "devs": ["0:50", 5],
                                               "paths": [None, "/gpfs/a"], "skipped": "environment not read"})
        if t.key == "stuck_tasks:inspect:300:3000:1000":
            return Outcome(t.key, HUNG, error="no answer in 1.5s")
        if t.key == "stuck_tasks:mounts:mnt:[1]":
            return Outcome(t.key, DONE, value=VIEW)
        return Outcome(t.key, FAILED, error="boom")
    ctx.runner = Kids(answer)
    a, b, c = looked(100, mnt_ids={7: 50, 8: None}, addrs=[4096]), looked(200, look="hung: x"), looked(300, "mnt:[2]")
    diag._read_memory_and_tables(ctx, [a, b, c])
    [asked] = ctx.runner.asked
    assert [(t.key, t.func, t.args, t.timeout) for t in asked] == [
        ("stuck_tasks:inspect:100:1000:1000", sr._inspect, (100, "/proc", [4096]), 1.5),
        ("stuck_tasks:inspect:300:3000:1000", sr._inspect, (300, "/proc", []), 1.5),
        ("stuck_tasks:mounts:mnt:[1]", sr._mount_view, (100, "/proc", [50], []), sr.TABLE_TIMEOUT),
        ("stuck_tasks:mounts:mnt:[2]", sr._mount_view, (300, "/proc", [], []), sr.TABLE_TIMEOUT)]
    assert (a.rank, a.cmdline, a.inspect, a.devs, a.path, a.table_whole, a.table_count, a.table_cut, a.table_note) == \
        ("3", "python x", "environment not read", ["0:50"], "/gpfs/a", True, 3, True, "")
    assert [m.mount_id for m in a.table] == [1, 50, 60]
    assert (b.inspect, b.table_whole, list(b.table), b.table_note) == (
        "not read: its /proc files do not answer", False, [],
        "its mount table was not read: its /proc files do not answer")
    assert (c.inspect, c.rank, c.table_whole, list(c.table), c.table_note) == (
        "hung: no answer in 1.5s", None, False, [], "its mount table was not read: failed: boom")


def test_a_reader_that_says_nothing_more_is_ok(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    ctx.runner = Kids(lambda t: Outcome(t.key, DONE, value={} if ":inspect:" in t.key else VIEW))
    a = looked(100, mntns="")
    diag._read_memory_and_tables(ctx, [a])
    assert (a.inspect, a.cmdline, a.devs, a.path, a.rank) == ("ok", "", [], None, None)
    assert [t.key for t in ctx.runner.asked[0]] == ["stuck_tasks:inspect:100:1000:1000", "stuck_tasks:mounts:pid 100"]


def test_readers_and_tables_are_bounded_per_run(tmp_path):
    diag, ctx = diagnosis(tmp_path)
    ctx.runner = Kids(lambda t: Outcome(t.key, DONE, value={} if ":inspect:" in t.key else VIEW))
    many = [looked(100 + i, f"mnt:[{i % 5}]") for i in range(sr.INSPECT_PER_RUN + 1)]
    diag._read_memory_and_tables(ctx, many)
    keys = [t.key for t in ctx.runner.asked[0]]
    assert sum(":inspect:" in k for k in keys) == sr.INSPECT_PER_RUN
    assert [k for k in keys if ":mounts:" in k] == [f"stuck_tasks:mounts:mnt:[{i}]" for i in range(4)]
    assert many[-1].inspect == f"not read: at most {sr.INSPECT_PER_RUN} processes are read per run"
    assert [d.table_note for d in many if d.mntns == "mnt:[4]"] == \
        ["its mount table was not read: at most 4 namespaces per run"] * 3
    # Earlier readers of the same user's tasks stuck in the kernel: no more are started
    # for that user; another user's task is still read.
    diag, ctx = diagnosis(tmp_path)
    stuck_keys = ([f"stuck_tasks:inspect:{i}:0:1000" for i in range(3)]
                  + ["stuck_tasks:walk:9:0:1000", "other:inspect:1:0:2000", "stuck_tasks:inspect:8:0:2000"])
    ctx.runner = Kids(lambda t: Outcome(t.key, DONE, value=VIEW), stuck=stuck_keys)
    a, b = looked(100), looked(200)
    b.sample.uid = 2000
    diag._read_memory_and_tables(ctx, [a, b])
    assert a.inspect == "not read: 4 earlier readers of uid 1000's tasks are stuck in the kernel"
    assert diag._stuck == {1000: 4, 2000: 1} and b.inspect == "ok"
    assert [t.key for t in ctx.runner.asked[0]] == ["stuck_tasks:inspect:200:2000:2000", "stuck_tasks:mounts:mnt:[1]"]
    # Past INSPECT_STUCK_ALL in all, none is started for anyone.
    diag, ctx = diagnosis(tmp_path)
    stuck_keys = [f"stuck_tasks:inspect:{i}:0:{3000 + i}" for i in range(sr.INSPECT_STUCK_ALL)]
    ctx.runner = Kids(lambda t: Outcome(t.key, DONE, value=VIEW), stuck=stuck_keys)
    b = looked(200)
    b.sample.uid = 2000
    diag._read_memory_and_tables(ctx, [b])
    assert b.inspect == f"not read: {sr.INSPECT_STUCK_ALL} earlier readers are stuck in the kernel"


def walked(tmp_path, ds, answer=None, stuck_readers=0, hung_devs=()):
    diag, ctx = diagnosis(tmp_path, inspect_timeout=1.5)
    diag._host = MountTable(parse_mountinfo(HOST))
    diag._stuck = {1000: stuck_readers}
    diag.hung_devs = set(hung_devs)
    ctx.runner = Kids(answer or (lambda t: Outcome(t.key, DONE, value={"mnt_id": 50, "end": "found"})))
    diag._walk(ctx, ds)
    return ctx.runner.asked


def test_a_path_argument_is_walked_from_where_the_task_would_start(tmp_path):
    absolute = looked(100, path="/gpfs/run/x", table=TABLE, table_whole=True)
    relative = looked(200, path="data/x", table=TABLE, table_whole=True, links={"cwd": "/gpfs/run"})
    at_dirfd = looked(300, path="x", dirfd=5, table=TABLE, table_whole=True, links={"cwd": "/", "fd/5": "/gpfs/d"})
    named = looked(400, path="/gpfs/y", file="/gpfs/y", table=TABLE, table_whole=True)
    nothing = looked(500, path=None, table=TABLE, table_whole=True)
    bare = looked(600, path="data/x", table=TABLE, table_whole=True)
    [asked] = walked(tmp_path, [named, nothing, absolute, relative, at_dirfd, bare], hung_devs={"0:50"})
    assert [(t.key, t.func, t.args, t.timeout) for t in asked] == [
        ("stuck_tasks:walk:100:1000:1000", waits.walk, (100, "/proc", "root", "/gpfs/run/x", [60], [50]), 1.5),
        ("stuck_tasks:walk:200:2000:1000", waits.walk, (200, "/proc", "cwd", "data/x", [60], [50]), 1.5),
        ("stuck_tasks:walk:300:3000:1000", waits.walk, (300, "/proc", "fd/5", "x", [60], [50]), 1.5),
        ("stuck_tasks:walk:600:6000:1000", waits.walk, (600, "/proc", "cwd", "data/x", [60], [50]), 1.5)]
    assert (absolute.file, relative.file, at_dirfd.file, bare.file) == ("/gpfs/run/x", "/gpfs/run/data/x", "/gpfs/d/x",
                                                                         "data/x")
    assert absolute.walk == {"mnt_id": 50, "end": "found"} and named.walk == {} and nothing.walk == {}


def test_a_walk_that_never_came_back_names_the_mount_it_was_in(tmp_path):
    d = looked(100, path="/gpfs/run/x", table=TABLE, table_whole=True)
    walked(tmp_path, [d], answer=lambda t: Outcome(t.key, HUNG, step="mnt 50"))
    assert d.walk == {"mnt_id": 50, "end": "hung"}
    d = looked(100, path="/gpfs/run/x", table=TABLE, table_whole=True)
    walked(tmp_path, [d], answer=lambda t: Outcome(t.key, DONE, value="junk"))
    assert d.walk == {"mnt_id": None, "end": "done"}


def test_a_walk_needs_the_whole_table_and_a_free_reader(tmp_path):
    part = looked(100, path="/gpfs/x", table=TABLE, table_whole=False, table_count=99000)
    noted = looked(200, path="/gpfs/x", table=TABLE, table_whole=False, table_note="its mount table was not read: x")
    none = looked(300, path="/gpfs/x", table=None, table_whole=True)
    assert walked(tmp_path, [part, noted]) == []
    assert part.walk == {"end": "not resolved", "error": "its mount table holds 99000 mounts: too many to walk a path "
                                                          "through"}
    assert noted.walk == {"end": "not resolved", "error": "its mount table was not read: x"}
    [asked] = walked(tmp_path, [none])
    assert asked[0].args[4:] == ([], [])
    d = looked(100, path="/gpfs/x", table=TABLE, table_whole=True)
    assert walked(tmp_path, [d], stuck_readers=4) == []
    assert d.walk == {"end": "not resolved", "error": "4 earlier readers of uid 1000's tasks are stuck in the kernel"}
    many = [looked(100 + i, path="/gpfs/x", table=TABLE, table_whole=True) for i in range(sr.INSPECT_PER_RUN + 1)]
    [asked] = walked(tmp_path, many, stuck_readers=3)
    assert len(asked) == sr.INSPECT_PER_RUN and many[-1].walk == {"end": "not resolved", "error": "at most 16 per run"}


# --- the whole diagnosis, its children run by the real runner on a /proc tree ---------------
JOB_CG = "0::/system.slice/n1_slurmstepd.scope/job_55/step_0/user/task_3\n"
WRITE = dict(syscall="1 0x7 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f01", wchan="wait_on_page_bit",
             stack="[<0>] folio_wait_bit+0x1/0x2\n[<0>] mmfs_write+0x5/0x9\n", fds={7: "/gpfs/run/main_log.txt"},
             environ=b"SLURM_PROCID=3\0RANK=3\0PATH=/bin\0", cgroup=JOB_CG)


def tree(tmp_path):
    proc = tmp_path / "proc"
    task(proc, 100, 101, "pt_a", "D", **WRITE)
    task(proc, 100, 102, "pt_b", "D", **{k: v for k, v in WRITE.items() if k != "fds"})     # the process's fds
    task(proc, 200, 200, "python", "D", cgroup="0::/system.slice/n2_slurmstepd.scope/job_66/step_0/user/task_0\n",
         syscall="74 0x3 0 0 0 0 0 0x1 0x2", fds={3: "/gpfs/other"})
    task(proc, 300, 300, "python", "D", syscall="74 0x3 0 0 0 0 0 0x1 0x2", fds={3: "/gpfs/other"},
         stack="[<0>] mmfs_fsync+0x1/0x2\n")
    return proc


def sample(pid, tid, comm="pt_a"):
    return TaskSample(pid=pid, tid=tid, start=1000 + pid, comm=comm, state="D", uid=1000)


def test_diagnose_places_each_stuck_process_longest_held_first(tmp_path, monkeypatch):
    proc = tree(tmp_path)
    monkeypatch.setattr(sw, "_listpids", lambda ctx: {300: JobRef(job="77", uid=1000)})
    diag, ctx = diagnosis(tmp_path, proc=proc)
    found = diag.diagnose(ctx, {100: [(sample(100, 101), 30.0), (sample(100, 102, "pt_b"), 50.0)],
                                200: [(sample(200, 200), 90.0)], 300: [(sample(300, 300), 5.0)]},
                          {102: ("INFO: task pt_b:102 blocked for more than 120 seconds.", 0.0)})
    assert [(d.sample.pid, d.sample.tid, d.tids, d.seconds) for d in found] == [(100, 102, [102, 101], 50.0),
                                                                                (300, 300, [300], 5.0)]
    a, b = found
    assert (a.ref, b.ref) == (JobRef(job="55", step="0", task="3", node="n1"), JobRef(job="77", uid=1000))
    assert a.kernel == "INFO: task pt_b:102 blocked for more than 120 seconds." and b.kernel == ""
    assert (a.syscall, a.fd, a.file, a.fds, a.wchan, a.stack, a.look) == (
        "write", 7, "/gpfs/run/main_log.txt", [7], "wait_on_page_bit", ["folio_wait_bit", "mmfs_write"], "ok")
    assert (a.rank, a.cmdline, a.inspect, a.devs) == ("3", "python train.py", "ok", ["8:1"])
    assert (a.cause, a.mountpoint, a.fstype, a.mount_dev, a.source, a.table_whole, a.table_count) == \
        ("shared_filesystem", "/gpfs", "gpfs", "0:50", "gpfs0", True, 2)
    assert a.how == ["fd 7: mnt_id 50", "the kernel stack is in gpfs, which no user can mount"]
    assert (b.syscall, b.cause, b.mountpoint) == ("fsync", "shared_filesystem", "/gpfs")
    assert diag.deferred == []


def test_without_the_fallback_a_process_outside_any_cgroup_has_no_job(tmp_path, monkeypatch):
    proc = tree(tmp_path)
    monkeypatch.setattr(sw, "_listpids", lambda ctx: {300: JobRef(job="77", uid=1000)})
    diag, ctx = diagnosis(tmp_path, proc=proc, listpids_fallback=False)
    [d] = diag.diagnose(ctx, {300: [(sample(300, 300), 5.0)]}, {})
    assert d.ref is None
    # The fallback asks Slurm once per run, and only for a process no cgroup names.
    calls = []
    monkeypatch.setattr(sw, "_listpids", lambda ctx: calls.append(1) or {})
    diag, ctx = diagnosis(tmp_path, proc=proc)
    found = diag.diagnose(ctx, {300: [(sample(300, 300), 5.0)], 301: [(sample(301, 301), 5.0)],
                                100: [(sample(100, 101), 5.0)]}, {})
    assert calls == [1] and [d.ref.job if d.ref else None for d in found] == ["55", None, None]


def test_at_most_so_many_processes_are_diagnosed_per_run(tmp_path, monkeypatch):
    proc = tree(tmp_path)
    monkeypatch.setattr(sw, "DIAGNOSE_PER_RUN", 1)
    diag, ctx = diagnosis(tmp_path, proc=proc, listpids_fallback=False)
    found = diag.diagnose(ctx, {100: [(sample(100, 101), 5.0)], 300: [(sample(300, 300), 50.0)]}, {})
    assert [d.sample.pid for d in found] == [300] and diag.deferred == [100]
    diag, ctx = diagnosis(tmp_path, proc=proc, listpids_fallback=False)
    assert diag.diagnose(ctx, {200: [(sample(200, 200), 5.0)]}, {}) == []


def test_a_probe_that_hung_on_the_same_mount_corroborates_before_the_grace(tmp_path):
    proc = tree(tmp_path)
    task(proc, 400, 400, "python", "D", syscall="0 0x3 0 0 0 0 0 0x1 0x2", fds={3: "pipe:[77]"}, wchan="pipe_read",
         cgroup=JOB_CG)
    diag, ctx = diagnosis(tmp_path, proc=proc, listpids_fallback=False)
    diag.hung_devs = {"0:99"}
    out: list = []
    watching = [(sample(100, 101), 30.0), (sample(300, 300), 20.0), (sample(400, 400, "python"), 40.0)]
    left = diag.corroborated(ctx, watching, {"0:50": "/gpfs/run"}, {}, out)
    assert [f.evidence["pid"] for f in out] == [100, 300] and left == [watching[2]]
    assert diag.hung_devs == {"0:99", "0:50"}
    f = out[0]
    assert f.detail.startswith("corroborated by the hung probe of /gpfs/run, before the grace; cause: shared "
                               "filesystem; comm pt_a;")
    assert f.evidence["attribution"][-1] == "corroborated: the probe of /gpfs/run on the same mount hung in this run"
    assert (f.status, f.severity, f.job) == ("stuck", "fail", "55")
    # A probe of another mount witnesses for nothing here.
    diag, ctx = diagnosis(tmp_path, proc=proc, listpids_fallback=False)
    out = []
    assert diag.corroborated(ctx, watching[:2], {"0:99": "/scratch"}, {}, out) == watching[:2] and out == []
    # Nor for a task not proven to wait on the node's storage, or one of no job left to ignore.
    diag, ctx = diagnosis(tmp_path, proc=proc, listpids_fallback=False, non_job_tasks="ignore")
    out = []
    assert diag.corroborated(ctx, watching[:2], {"0:50": "/gpfs/run"}, {}, out) == [watching[1]]
    assert [f.evidence["pid"] for f in out] == [100]


def test_the_slurm_fallback_asks_nothing_in_a_look(tmp_path):
    _, ctx = diagnosis(tmp_path)
    assert ctx.behaviour.looks_only and sw._listpids(ctx) == {}


def test_diagnose_asks_each_child_in_turn_and_walks_with_the_hosts_fresh_table(tmp_path):
    """The look, then the memory reader and the namespace's table, then the walk of the
    path the reader found; whose each mount is comes from the host's table read after
    the task's (here the node's own: the configured ctx table says otherwise)."""
    proc = tmp_path / "proc"
    task(proc, 500, 500, "python", "D", cgroup="4:memory:/slurm/uid_1000/job_88/step_0/task_0\n")
    diag, ctx = diagnosis(tmp_path, proc=proc, inspect_timeout=1.5, listpids_fallback=False)
    root = next(ln.split()[2] for ln in open("/proc/self/mountinfo") if ln.split()[4] == "/")
    theirs = f"1 0 {root} / / rw - ext4 /dev/root rw\n42 1 0:4242 / /proj rw - nfs4 srv:/proj rw\n"
    ctx._mounts = MountTable(parse_mountinfo(theirs))
    view = {"mounts": [sr._mount_row(m, None) for m in MountTable(parse_mountinfo(theirs))], "whole": True}

    def answer(t):
        if ":look:" in t.key:
            return Outcome(t.key, DONE, value={"call": {"name": "openat", "nr": 257, "addrs": [4096], "dirfd": None},
                                               "stack": ["nfs_lookup"], "mntns": "mnt:[9]", "links": {"cwd": "/"}})
        if ":inspect:" in t.key:
            return Outcome(t.key, DONE, value={"paths": ["/proj/x"]})
        if ":mounts:" in t.key:
            return Outcome(t.key, DONE, value=view)
        return Outcome(t.key, DONE, value={"mnt_id": 42, "end": "found"})
    ctx.runner = Kids(answer)
    [d] = diag.diagnose(ctx, {500: [(sample(500, 500, "python"), 5.0)]}, {})
    looks, readers, walks = ctx.runner.asked
    assert [(t.key, t.func, t.args, t.timeout) for t in looks] == [
        ("stuck_tasks:look:500:1500:1000", sr._look, (500, 500, str(proc)), 1.5)]
    assert [t.key for t in readers] == ["stuck_tasks:inspect:500:1500:1000", "stuck_tasks:mounts:mnt:[9]"]
    # 0:4242 is no mount of this host's own table: a place only the task's namespace has.
    assert [(t.key, t.args[2:]) for t in walks] == [("stuck_tasks:walk:500:1500:1000", ("root", "/proj/x", [42], []))]
    assert d.ref == JobRef(job="88", step="0", task="0", uid=1000)
    assert (d.file, d.walk, d.cause, d.mount_owner) == ("/proj/x", {"mnt_id": 42, "end": "found"}, "shared_filesystem",
                                                        None)
