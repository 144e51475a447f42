"""Promises of the deciding code that a one-line change used to break unnoticed (each
test here was seen to fail with that line mutated; tools/mutation.sh keeps it so):
whose a mount is, what a recovery may do and claim, a symlinked site check's target,
what a site check's JSON may put in a finding, printable reasons, the fabric's memory
across a reboot, the fan-out's answers, and the fake Slurm's refusals."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml
from helpers import run_record, stuck_for_good

from slurm_hooks.act import recovery
from slurm_hooks.act.mounts import _probe
from slurm_hooks.core.model import FAIL, Finding, Recovery
from slurm_hooks.core.state import StateStore
from slurm_hooks.host import waits
from slurm_hooks.host.mounts import MountTable, parse_mountinfo
from slurm_hooks.host.runner import Runner

HERE = Path(__file__).resolve().parent


# --- whose a mount is (host/waits.owner) ------------------------------------------------
HOST = ("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "30 1 0:30 / /dev/shm rw - tmpfs tmpfs rw\n")


def test_a_node_filesystem_below_a_users_fuse_mount_in_their_namespace_is_theirs():
    """In the user's own mount namespace, a bind of a node filesystem (here /dev/shm's
    tmpfs) placed below their FUSE mount: the host sees the superblock as the node's,
    but the task reaches it only through the user's mount."""
    host = MountTable(parse_mountinfo(HOST))
    theirs = MountTable(parse_mountinfo(HOST + "50 1 0:60 / /tmp/u/m rw - fuse.sshfs u@h: rw,user_id=1000,group_id=1000\n"
                                               "51 50 0:30 / /tmp/u/m/inner rw - tmpfs tmpfs rw\n"))
    assert waits.owner(theirs.at("/tmp/u/m/inner"), theirs, host, 1000) == ("user", 1000)
    # The same superblock where the task's table has no FUSE mount above it: the node's.
    assert waits.owner(host.at("/dev/shm"), host, host, 1000) == ("node", None)


def test_owners_carried_with_a_table_sent_in_part_decide():
    """A table sent in part carries whose each mount is (its FUSE parent may not be in
    the part sent): that word wins over the host's view of the superblock."""
    host = MountTable(parse_mountinfo(HOST))
    part = MountTable(parse_mountinfo("51 50 0:30 / /tmp/u/m/inner rw - tmpfs tmpfs rw\n"), owners={51: 1000})
    assert waits.owner(part.at("/tmp/u/m/inner"), part, host, 1000) == ("user", 1000)


# --- recovery (act/recovery.py) ------------------------------------------------------------
def dev_of(path) -> str:
    m = MountTable.current().at(str(path))
    assert m is not None, f"{path} is not mounted"
    return m.dev




@pytest.fixture
def remounted(tmp_path):
    ready = tmp_path / "remount.ready"
    yield ready
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(ready.read_text().strip() or 0), signal.SIGKILL)


def test_a_mount_that_comes_back_from_its_recovery_still_hung_is_not_recovered(make_fuse, remounted, tmp_path):
    """The abort frees the task, the remount succeeds, but the fresh mount's server never
    answers: the probe hangs, and the recovery says so rather than "recovered"."""
    m = make_fuse("stuck")
    p, start = stuck_for_good(m.path)
    r = Recovery(mountpoint=str(m.path), dev=dev_of(m.path), method="fuse-abort", wait=5, timeout=1.5,
                 remount=[sys.executable, str(HERE / "remount_fuse.py"), "unanswered", "{mountpoint}", str(remounted)],
                 probe=str(m.path), probe_mode="write", tasks=[[p.pid, start]])
    runner = Runner(StateStore(str(tmp_path / "state")))
    out = recovery.recover(r, runner, lambda: _probe(runner, r, "n1"))
    assert p.wait(timeout=5) == -signal.SIGKILL
    assert (out.recovered, out.freed, out.left) == (False, 1, []), out.steps
    assert [s.split(":")[0] for s in out.steps] == ["fuse-abort", "remount", "probe"], out.steps
    assert out.steps[2].startswith("probe: hung"), out.steps
    assert out.summary(r).startswith(f"recovery tried (fuse-abort {m.path}): "), out.summary(r)


def table_of(text: str, monkeypatch) -> MountTable:
    table = MountTable(parse_mountinfo("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n" + text))
    monkeypatch.setattr(MountTable, "current", classmethod(lambda cls: table))
    return table


def test_a_users_own_fuse_mount_is_refused_by_recover_itself(tmp_path, monkeypatch):
    """Even asked to (a stale config, a bad plan), recover() aborts no user's FUSE
    connection: the fusectl file is never written."""
    table_of("40 1 0:50 / /home/u/own rw - fuse.x own rw,user_id=1000,group_id=1000\n", monkeypatch)
    fusectl = tmp_path / "fusectl"
    (fusectl / "50").mkdir(parents=True)
    r = Recovery(mountpoint="/home/u/own", dev="0:50", method="fuse-abort", probe="/home/u/own")
    out = recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok"), fusectl=str(fusectl))
    assert (out.recovered, out.steps) == (False, ["refused: /home/u/own is a FUSE mount of uid 1000, not the node's"])
    assert not (fusectl / "50" / "abort").exists()


def test_another_mount_now_at_the_mountpoint_is_not_the_one_to_recover(tmp_path, monkeypatch):
    """The hung mount went away and another (another device) was mounted in its place:
    nothing of the new one is aborted."""
    table_of("41 1 0:51 / /shared rw - fuse.x s rw,user_id=0,group_id=0,allow_other\n", monkeypatch)
    fusectl = tmp_path / "fusectl"
    (fusectl / "50").mkdir(parents=True)
    (fusectl / "51").mkdir(parents=True)
    r = Recovery(mountpoint="/shared", dev="0:50", method="fuse-abort", probe="/shared")
    out = recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok"), fusectl=str(fusectl))
    assert (out.recovered, out.steps) == (
        False, ["refused: /shared is device 0:51, not 0:50 the stuck tasks were proven to wait on"])
    assert not (fusectl / "50" / "abort").exists() and not (fusectl / "51" / "abort").exists()


def test_a_pid_reused_by_another_process_is_not_a_task_left_behind(tmp_path, monkeypatch):
    """A stuck task is known by pid and start time: this process's pid with another
    start time is a task that went (and a pid reused), the right one is still there."""
    table_of("", monkeypatch)
    me = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    r = Recovery(mountpoint="/gone", dev="0:50", method="fuse-abort", tasks=[[os.getpid(), me + 1]])
    out = recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok"))
    assert (out.freed, out.left) == (1, [])
    r = Recovery(mountpoint="/gone", dev="0:50", method="fuse-abort", tasks=[[os.getpid(), me]])
    from helpers import still_in_d
    still_in_d(monkeypatch, os.getpid())
    out = recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok"))
    assert (out.freed, out.left) == (0, [[os.getpid(), me]])


# --- site checks: a symlinked drop-in, what a JSON line may set ------------------------------
def test_a_symlinked_site_check_whose_target_directory_others_may_write_is_refused(tmp_path, root_only_dir):
    """The file is root's and 0755, but its directory is world-writable: anyone could put
    another file in its place, so it is refused and never run. (Under a directory that is
    root's all the way from /: pytest's tmp_path lies under /tmp, refused by itself.)"""
    loose = root_only_dir / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    marks = tmp_path / "ran"
    target = loose / "probe"
    target.write_text(f"#!/bin/sh\n: > {marks}\necho fine\n")
    os.chmod(target, 0o755)
    d = root_only_dir / "checks.d"
    d.mkdir(mode=0o755)
    (d / "linked").symlink_to(target)
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({
        "node_name": "s1", "state_dir": str(tmp_path / "state"), "syslog": False,
        "journal": str(tmp_path / "journal.jsonl"), "prometheus_textfile_dir": None,
        "filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"enabled": False},
        "gpu": {"enabled": "false"}, "fabric": {"enabled": "false"},
        "site_checks": {"dir": str(d), "timeout": 2}}))
    rec = run_record(conf, "check", "site", env={"PATH": "/usr/bin:/bin"}, check="site")
    [f] = rec["findings"]
    assert (f["target"], f["status"], f["severity"]) == ("linked", "refused", "warn"), f
    assert f["summary"] == f"site check linked refused: {loose} is world-writable (mode 0777)", f
    assert not marks.exists()


def test_a_site_checks_json_evidence_is_capped():
    from slurm_hooks.checks.site import DETAIL_CAP, SUMMARY_CAP, _json_fields
    doc = {"summary": "s" * 5000, "detail": "d" * 50000, "reason": "r" * 5000,
           "evidence": {**{f"k{i:02d}": i for i in range(30)}, "x" * 100: "v" * 5000}}
    out = _json_fields(doc)
    assert list(out["evidence"]) == [f"k{i:02d}" for i in range(20)]
    assert out["summary"] == "s" * (SUMMARY_CAP - 1) + "…" and out["reason"] == "r" * (SUMMARY_CAP - 1) + "…"
    assert out["detail"] == "d" * (DETAIL_CAP - 1) + "…"
    long = _json_fields({"evidence": {"x" * 100: "v" * 5000, "nested": {"a": 1}, "n": None}})["evidence"]
    assert long == {"x" * 63 + "…": "v" * (SUMMARY_CAP - 1) + "…", "n": None}


# --- printable findings ----------------------------------------------------------------------
def test_a_findings_reason_is_printable_in_json():
    """A reason built from a user's process name: no raw escape byte reaches --json, the
    journal or the node's reason."""
    f = Finding("stuck_tasks", "/scratch", "stuck", FAIL, "s\x1b[2Jx", detail="d\x1b]0;t\x07",
                reason="task \x1b[31mevil\x1b[0m stuck\n", evidence={"comm": "\x1b[1m"})
    line = json.dumps(f.to_json(), ensure_ascii=False)
    assert "\x1b" not in line and "\x07" not in line and "\n" not in json.loads(line)["reason"]
    assert f.reason == "task \\x1b[31mevil\\x1b[0m stuck\\x0a"
    assert f.reason_text == f.reason


# --- fabric: what was seen before a reboot is not expected after it ---------------------------
def test_a_port_active_only_before_a_reboot_is_not_expected_after_it(tmp_path, monkeypatch):
    from ib_fixtures import Port

    from slurm_hooks.checks._config import loads_config
    from slurm_hooks.host import procfs
    from slurm_hooks.run import engine
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    doc = {"node_name": "ib1", "state_dir": str(tmp_path / "state"), "syslog": False,
           "journal": str(tmp_path / "journal.jsonl"), "prometheus_textfile_dir": None,
           "host": {"sysfs": str(sysfs)}, "fabric": {}}

    def run() -> Finding:
        [f] = [f for f in engine.run(loads_config(yaml.safe_dump(doc), "t.yaml"), "healthcheck",
                                      names=["fabric"]).findings if f.target == "mlx5_0/1"]
        return f
    boot = ["boot-a"]
    monkeypatch.setattr(procfs, "boot_id", lambda: boot[0])
    port = Port(sysfs, "mlx5_0").set()
    assert run().status == "ok"
    port.set(state=1, phys=2)
    assert (run().status, run().severity) == ("down", "fail")     # active since this boot, now down
    boot[0] = "boot-b"
    f = run()
    assert (f.status, f.severity) == ("unused", "ok"), f            # never active since the reboot


# --- the fan-out's answers (views/fanout.parse_answers) -------------------------------------
def test_the_fan_outs_answers_keep_one_line_per_asked_node():
    from slurm_hooks.views.fanout import NodeAnswer, parse_answers
    lines = [
        "Traceback: not json",
        json.dumps(["n1"]),
        json.dumps({"node": "n9", "rc": 0, "stdout": "not asked"}),
        json.dumps({"node": "n1", "rc": 0, "timed_out": False, "stdout": "first", "stderr": ""}),
        json.dumps({"node": "n1", "rc": 1, "stdout": "second"}),
        json.dumps({"node": "n2", "rc": None, "timed_out": True, "stdout": "", "stderr": "e"}),
        json.dumps({"node": "n3", "rc": "255", "timed_out": 0, "stdout": 5}),
        json.dumps({"rc": 0}),
        json.dumps({"node": "n4"}),
    ]
    got = parse_answers("\n".join(lines) + "\n", ["n1", "n2", "n3", "n4"])
    assert got == {
        "n1": NodeAnswer("n1", rc=0, timed_out=False, stdout="first", stderr=""),
        "n2": NodeAnswer("n2", rc=None, timed_out=True, stdout="", stderr="e"),
        "n3": NodeAnswer("n3", rc=None, timed_out=False, stdout="5", stderr=""),
        "n4": NodeAnswer("n4", rc=None, timed_out=False, stdout="", stderr=""),
    }
    assert parse_answers("", ["n1"]) == {}


# --- the fake Slurm refuses as slurmctld does -------------------------------------------------
@pytest.mark.parametrize("version,said", [("22.05", "Invalid node state specified"),
                                          ("25.11", "Invalid node state transition")])
def test_the_fake_refuses_to_resume_a_node_that_is_not_drained(version, said):
    from slurm_hooks.slurm.api import SlurmError
    from slurm_hooks.slurm.fake import FakeSlurm
    s = FakeSlurm(version=version)
    with pytest.raises(SlurmError) as e:
        s.resume("n1")
    assert str(e.value) == said
    s.drain("n1", "x [slurm-hooks]")
    s.resume("n1")
    with pytest.raises(SlurmError):
        s.resume("n1")
