"""Recovery without a reboot (recovery.py, mount_incident.recoveries) on real FUSE mounts whose
callers stay in D after SIGKILL (tests/fusefs.py `stuck`): the kernel's own way out."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import poll, stuck_for_good

from slurm_hooks.act import recovery
from slurm_hooks.act.mounts import _probe
from slurm_hooks.core.model import FAIL, Action, Finding, Recovery
from slurm_hooks.core.state import StateStore
from slurm_hooks.decide import mount_incident
from slurm_hooks.host.mounts import MountTable
from slurm_hooks.host.runner import Runner

HERE = Path(__file__).resolve().parent


def dev_of(path) -> str:
    m = MountTable.current().at(str(path))
    assert m is not None, f"{path} is not mounted"
    return m.dev




@pytest.fixture
def remounted(tmp_path):
    """The server the remount starts; stopped and unmounted after the test."""
    ready = tmp_path / "remount.ready"
    yield ready
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(ready.read_text().strip() or 0), signal.SIGKILL)


def recovery_of(m, ready, tmp_path, **kw) -> Recovery:
    base = dict(mountpoint=str(m.path), dev=dev_of(m.path), method="fuse-abort",
                remount=[sys.executable, str(HERE / "remount_fuse.py"), "ok", "{mountpoint}", str(ready)],
                wait=5, timeout=5, probe=str(m.path), probe_mode="write")
    base.update(kw)
    return Recovery(**base)


def test_fuse_abort_frees_an_unkillable_task_and_the_remounted_mount_passes(make_fuse, remounted, tmp_path):
    m = make_fuse("stuck")
    p, start = stuck_for_good(m.path)
    r = recovery_of(m, remounted, tmp_path, tasks=[[p.pid, start]])
    runner = Runner(StateStore(str(tmp_path / "state")))
    out = recovery.recover(r, runner, lambda: _probe(runner, r, "n1"))
    assert out.recovered and out.freed == 1 and out.left == [], out.steps
    assert out.summary(r) == f"recovered without reboot (fuse-abort {m.path}, 1 task freed)"
    assert p.wait(timeout=5) == -signal.SIGKILL                 # it could die at last
    assert MountTable.current().at(str(m.path)).source == "fusefs-remounted"   # a fresh mount in its place
    assert [s.split(":")[0] for s in out.steps] == ["fuse-abort", "remount", "probe"], out.steps


def test_a_remount_that_fails_is_said_and_recovers_nothing(make_fuse, tmp_path):
    m = make_fuse("stuck")
    p, start = stuck_for_good(m.path)
    r = recovery_of(m, tmp_path / "unused", tmp_path, tasks=[[p.pid, start]], remount=["/bin/false"])
    runner = Runner(StateStore(str(tmp_path / "state")))
    out = recovery.recover(r, runner, lambda: _probe(runner, r, "n1"))
    assert not out.recovered and out.freed == 1
    assert "remount: exit 1" in out.summary(r) and out.summary(r).startswith("recovery tried (fuse-abort ")


def test_a_task_stuck_elsewhere_too_survives_the_recovery(make_fuse, remounted, tmp_path):
    m, other = make_fuse("stuck"), make_fuse("stuck")
    p, start = stuck_for_good(m.path)
    q, qstart = stuck_for_good(other.path)
    r = recovery_of(m, remounted, tmp_path, tasks=[[p.pid, start], [q.pid, qstart]], wait=1)
    runner = Runner(StateStore(str(tmp_path / "state")))
    out = recovery.recover(r, runner, lambda: _probe(runner, r, "n1"))
    assert not out.recovered and out.left == [[q.pid, qstart]] and out.freed == 1
    assert f"1 of 2 stuck tasks still stuck after 1s (pid {q.pid})" in out.summary(r)


def test_an_abort_of_a_mount_that_is_not_fuse_is_refused(tmp_path):
    tmpfs = tmp_path / "t"
    tmpfs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "t", str(tmpfs)], check=True)
    try:
        r = Recovery(mountpoint=str(tmpfs), dev=dev_of(tmpfs), method="fuse-abort", probe=str(tmpfs))
        out = recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok"))
        assert not out.recovered and out.steps == [f"refused: {tmpfs} is tmpfs, not FUSE"]
    finally:
        subprocess.run(["umount", "-l", str(tmpfs)], check=True)


def test_config_refuses_an_abort_on_a_mount_that_is_not_fuse(tmp_path):
    from slurm_hooks.checks._config import load_config as load
    from slurm_hooks.core.config import ConfigError
    path = tmp_path / "x.yaml"
    path.write_text("filesystems:\n  - path: /scratch\n    fstype: nfs4\n    recover:\n      method: fuse-abort\n"
                    "  - path: /data\n    recover:\n      method: command\n")
    with pytest.raises(ConfigError) as e:
        load(str(path))
    assert e.value.problems == [
        f"{path}:5: filesystems[0].recover.method: fuse-abort needs a FUSE mount, but /scratch is on nfs4",
        f"{path}:8: filesystems[1].recover.command: method command needs the command (an argv list)"]


# --- when: policy on data alone -------------------------------------------------------
def stuck(job="12", pid=345, mount="/scratch", dev="0:50"):
    return Finding(check="stuck_tasks", target=f"job {job} pid {pid}", status="stuck", severity=FAIL,
                   summary="s", reason=f"job {job} pid {pid} stuck in write() on {mount}/log (fuse.x)", job=job,
                   incident=f"n1:{pid}:100", needs_reboot=True, hard=True, resumable=False,
                   evidence={"pid": pid, "start_ticks": 100, "mountpoint": mount, "mount_dev": dev})


RECOVERABLE = {"/scratch": Recovery(mountpoint="/scratch", dev="0:50", method="fuse-abort", probe="/scratch")}


def reboot(f):
    return Action("reboot", node="n1", reason="p: " + f.reason, incident=f.incident)


def test_a_reboot_for_a_recoverable_mount_becomes_a_recovery_once():
    f = stuck()
    [a] = mount_incident.recoveries([reboot(f)], [f], [], {}, RECOVERABLE, {}, drained=True)
    assert a.kind == "recover" and a.recovery.tasks == [[345, 100]] and a.recovery.jobs == ["12"]
    # Tried already: the reboot, saying so.
    [b] = mount_incident.recoveries([reboot(f)], [f], [], {"recover:n1:n1:345:100": {"done": 1.0}}, RECOVERABLE, {}, True)
    assert b.kind == "reboot" and b.reason.endswith("(recovery tried: fuse-abort /scratch) [slurm-hooks]")


def test_no_recovery_where_we_did_not_drain_nor_for_another_mount():
    f = stuck()
    assert [a.kind for a in mount_incident.recoveries([reboot(f)], [f], [], {}, RECOVERABLE, {}, drained=False)] == ["reboot"]
    g = stuck(mount="/other", dev="0:60")
    assert [a.kind for a in mount_incident.recoveries([reboot(g)], [g], [], {}, RECOVERABLE, {}, drained=True)] == ["reboot"]


def test_a_probe_hung_on_consecutive_runs_is_recovered():
    f = Finding(check="filesystem", target="/scratch", status="hung", severity=FAIL, summary="fs hung")
    drain = Action("drain", node="n1", reason="p: fs hung")
    assert [a.kind for a in mount_incident.recoveries([drain], [f], [], {}, RECOVERABLE, {"filesystem:/scratch": 1}, True)] \
        == ["drain"]
    acts = mount_incident.recoveries([drain], [f], [], {}, RECOVERABLE, {"filesystem:/scratch": 2}, True)
    assert [a.kind for a in acts] == ["drain", "recover"] and acts[1].recovery.tasks == []


def test_a_users_own_fuse_mount_is_never_recoverable(tmp_path, monkeypatch):
    from slurm_hooks.act import mounts
    from slurm_hooks.checks._config import default_config as Config
    from slurm_hooks.checks.filesystem import FilesystemConfig, RecoverConfig
    from slurm_hooks.host.mounts import parse_mountinfo
    table = MountTable(parse_mountinfo("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
                                       "40 1 0:50 / /home/u/own rw - fuse.x own rw,user_id=1000,group_id=1000\n"
                                       "41 1 0:51 / /shared rw - fuse.x s rw,user_id=0,group_id=0,allow_other\n"))
    monkeypatch.setattr(MountTable, "current", classmethod(lambda cls: table))
    cfg = Config(filesystems=[FilesystemConfig(path=p, recover=RecoverConfig(method="fuse-abort"))
                              for p in ("/home/u/own", "/shared")])
    assert list(mounts.recoverable(cfg)) == ["/shared"]


# --- a hang two witnesses agree on acts at once ----------------------------------------
def test_a_task_stuck_on_a_mount_whose_probe_hung_needs_no_long_grace(make_fuse, tmp_path):
    import json

    import yaml
    from helpers import SLURM_HOOKS
    m = make_fuse("unanswered")
    p = subprocess.Popen([sys.executable, "-c", f"open({str(m.path)!r} + '/x', 'rb')"])
    try:
        poll(lambda: open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "D", 10, what="in D")
        doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"), "syslog": False,
               "prometheus_textfile_dir": None, "gpu": {"enabled": "false"},
               "stuck_tasks": {"grace": 600, "sample_window": 0.3, "non_job_tasks": "drain"}}

        def look(paths):
            (tmp_path / "c.yaml").write_text(yaml.safe_dump({**doc, "filesystems": [
                {"path": str(x), "timeout": 0.5} for x in paths]}))
            r = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "c.yaml"), "check", "--json"],
                               capture_output=True, text=True, timeout=60, env={"SLURMD_NODENAME": "n1"})
            rec = json.loads(r.stdout)
            return [f for c in rec["checks"] for f in c["findings"] if f["evidence"].get("pid") == p.pid]

        # The task alone, first seen now: watched, the grace (10 minutes) not over.
        assert [f["status"] for f in look([tmp_path])] == ["watching"]
        # Its mount's own probe hangs too: stuck at once, the node's, saying why.
        [f] = look([tmp_path, m.path])
        assert (f["status"], f["severity"], f["evidence"]["cause"]) == ("stuck", "fail", "shared_filesystem"), f
        assert f"corroborated by the hung probe of {m.path}" in f["detail"]
    finally:
        p.kill()
