"""A hang belongs to a mount: its callers asleep (S) on it are found while its probe hangs,
and no recovery of it runs before the jobs waiting on it are requeued or ended."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from attacker import unprivileged_user
from helpers import SLURM_HOOKS, poll
from mounts_fixtures import start_fuse


@pytest.fixture(scope="module")
def reader():
    with unprivileged_user("shk-rdr") as user:
        yield user


def state_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    return "?"


def wchan(pid: int) -> str:
    return Path(f"/proc/{pid}/wchan").read_text().strip()


def configure(root: Path, mount: Path | None) -> Path:
    doc = {"state_dir": str(root / "state"), "journal": str(root / "journal.jsonl"), "syslog": False,
           "prometheus_textfile_dir": None, "gpu": {"enabled": "false"}, "node_name": "n1",
           "kernel_log": str(root / "kmsg"), "actions": {"report_only": True},
           "filesystems": [{"path": str(root)}] + ([{"path": str(mount), "mode": "read", "timeout": 1}] if mount else []),
           "stuck_tasks": {"grace": 120, "sample_window": 0.3, "inspect_timeout": 1, "non_job_tasks": "drain",
                           "listpids_fallback": False}}
    (root / "kmsg").write_text("")
    path = root / "slurm-hooks.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def healthcheck(config: Path) -> dict:
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(config), "healthcheck", "--json"], capture_output=True,
                       text=True, timeout=60, env={"SLURMD_NODENAME": "n1"})
    assert r.returncode in (0, 1), r.stderr
    rec = json.loads(r.stdout)
    rec["findings"] = [f for c in rec["checks"] for f in c["findings"]]
    return rec


READ_EVERY_STEP = """
import os, sys, time
fd = os.open(sys.argv[1] + "/shard", os.O_RDONLY)
open(sys.argv[2], "w").write("open")
while True:
    # A request the caller waits for itself (a page read waits on the page lock, in D):
    # once the server froze, in request_wait_answer, asleep (S).
    os.fsync(fd)
    time.sleep(0.05)
"""


def test_a_reader_asleep_on_the_nodes_frozen_fuse_mount_is_found_while_its_probe_hangs(reader, tmp_path):
    """A FUSE client whose server froze after INIT: its callers wait in S
    (request_wait_answer), where a scan of D states never looks. While the mount's own
    probe hangs, they are found, placed on that mount by the kernel's ids, and stuck at
    once: their job is what the mount holds hostage."""
    m = start_fuse(reader.base / f"dataset-{time.monotonic_ns()}", "ok")
    try:
        Path(m.path, "shard").write_bytes(b"x" * 8192)
        ready = reader.home / "reader.ready"
        p = reader.python(READ_EVERY_STEP, m.path, ready)
        poll(lambda: ready.exists() or p.poll() is not None, 10, what="the reader started")
        m.stall()
        poll(lambda: state_of(p.pid) == "S" and wchan(p.pid) == "request_wait_answer", 10,
             what="the reader asleep on the frozen mount")
        config = configure(tmp_path, Path(m.path))
        rec = healthcheck(config)
        probe = [f for f in rec["findings"] if f["target"] == str(m.path)]
        assert probe and probe[0]["status"] == "hung", rec["findings"]
        [f] = [f for f in rec["findings"] if f["evidence"].get("pid") == p.pid]
        ev = f["evidence"]
        assert (f["status"], f["severity"], ev["state"], ev["cause"]) == ("stuck", "fail", "S", "shared_filesystem"), ev
        assert (ev["syscall"], ev["mountpoint"]) == ("fsync", str(m.path)), ev
        assert "(asleep, S)" in f["summary"] and "corroborated by the hung probe" in f["detail"], f
        # Asleep, it wakes for a signal: its job's requeue or the mount's recovery frees it,
        # never a reboot (the same mount asleep on every node is an outage).
        assert not [a for a in rec["actions"] if a["kind"] == "reboot"], rec["actions"]
        # A sleeper of the same user on no filesystem is nothing.
        idle = reader.python("import time; time.sleep(600)")
        poll(lambda: state_of(idle.pid) == "S", 10, what="the idle process asleep")
        again = healthcheck(config)
        assert not [f for f in again["findings"] if f["evidence"].get("pid") == idle.pid]
    finally:
        m.close()


def test_an_asleep_reader_is_nothing_while_no_probe_hangs(reader, tmp_path):
    """No mount suspect: sleepers are not looked at (nothing for a healthy run to pay)."""
    m = start_fuse(reader.base / f"dataset-{time.monotonic_ns()}", "ok")
    try:
        Path(m.path, "shard").write_bytes(b"x" * 8192)
        ready = reader.home / "reader2.ready"
        p = reader.python(READ_EVERY_STEP, m.path, ready)
        poll(lambda: ready.exists() or p.poll() is not None, 10, what="the reader started")
        m.stall()
        poll(lambda: wchan(p.pid) == "request_wait_answer", 10, what="the reader asleep")
        # The mount is not probed: nothing says it hangs.
        config = configure(tmp_path, None)
        rec = healthcheck(config)
        assert not [f for f in rec["findings"] if f["evidence"].get("pid") == p.pid], rec["findings"]
    finally:
        m.close()


def test_no_recovery_before_slurm_says_the_jobs_waiting_on_the_mount_are_gone(tmp_path):
    """Jobs first, by Slurm's word: an abort fails every call it frees, and a job whose
    reader dies of it while it runs here ends FAILED. A requeue skipped (a --no-requeue
    job, "left running") leaves a ledger entry and ends nothing: the recovery waits
    until Slurm says the job no longer runs on the node."""
    from slurm_hooks.act import mounts
    from slurm_hooks.checks._config import default_config as Config
    from slurm_hooks.core.model import Action, Recovery
    from slurm_hooks.core.outcomes import Code
    from slurm_hooks.core.state import StateStore
    from slurm_hooks.slurm.fake import FakeSlurm

    slurm = FakeSlurm()
    job = slurm.add_job("n1,n2", requeue=False)
    cfg = Config(state_dir=str(tmp_path / "state"))
    state = StateStore(str(tmp_path / "state" / "n1"))
    r = Recovery(mountpoint="/nowhere-mounted", dev="0:999", method="fuse-abort", probe="/nowhere-mounted",
                 jobs=[job], tasks=[[999999, 1]])
    a = Action("recover", node="n1", reason="x", incident="n1:1:1", recovery=r)
    skipped = {f"requeue:{job}:n1:1:1": {"done": time.time(), "seen": time.time(), "ended": False}}
    [res] = mounts.recover(cfg, "n1", [a], slurm, state, skipped, False, False, {})
    assert res.code == Code.JOBS_FIRST and f"job {job} still runs here" in res.message, res
    # Slurm cannot be asked: the job is taken to run, the recovery waits.
    [res] = mounts.recover(cfg, "n1", [a], None, state, {}, False, False, {})
    assert res.code == Code.JOBS_FIRST, res
    # The job ended (or was requeued: it runs nowhere now): the recovery goes ahead.
    slurm.end_job(job)
    res, told = mounts.recover(cfg, "n1", [a], slurm, state, skipped, False, False, {})
    assert res.code != Code.JOBS_FIRST and told.action.kind == "comment", (res, told)
    # The site lets such jobs end as they end (actions.requeue_job: false): no wait at all.
    cfg.actions.requeue_job = False
    [res] = mounts.recover(cfg, "n1", [a], None, state, {}, False, False, {})
    assert res.code != Code.JOBS_FIRST, res


def test_a_job_whose_task_was_not_placed_keeps_the_mount_from_being_aborted(tmp_path):
    """A job with a task the run saw waiting but could not place on a mount (its look
    timed out under load, it is still within its grace, its diagnosis was left for the
    next run) may be on the mount: the recovery waits for it as for a placed one, and
    tells it nothing once done."""
    from slurm_hooks.act import mounts
    from slurm_hooks.checks._config import default_config as Config
    from slurm_hooks.core.model import Action, Recovery
    from slurm_hooks.core.outcomes import Code
    from slurm_hooks.core.state import StateStore
    from slurm_hooks.slurm.fake import FakeSlurm

    slurm = FakeSlurm()
    job = slurm.add_job("n1", requeue=False)
    cfg = Config(state_dir=str(tmp_path / "state"))
    state = StateStore(str(tmp_path / "state" / "n1"))
    r = Recovery(mountpoint="/nowhere-mounted", dev="0:999", method="fuse-abort", probe="/nowhere-mounted",
                 unplaced=[job])
    a = Action("recover", node="n1", reason="x", incident="/nowhere-mounted", recovery=r)
    [res] = mounts.recover(cfg, "n1", [a], slurm, state, {}, False, False, {})
    assert res.code == Code.JOBS_FIRST and f"job {job} still runs here with a task this run could not place" \
        in res.message, res
    slurm.end_job(job)
    out = mounts.recover(cfg, "n1", [a], slurm, state, {}, False, False, {})
    assert out[0].code != Code.JOBS_FIRST and not [x for x in out[1:] if x.action.kind == "comment"], out


OPEN_UNDER = """
import sys
open(sys.argv[1] + "/ckpt/model.pt", "rb")
"""


def test_nothing_of_ours_walks_into_a_mount_whose_probe_hangs(reader, tmp_path):
    """A mount that hangs for good (its callers unkillable): its probe's child stays stuck,
    once. The walk that places a stuck task's path stops at the hung mount, where it would
    only leave one more child of ours stuck; run after run, the only child of ours stuck
    is the probe's."""
    m = start_fuse(reader.base / f"gpfs-{time.monotonic_ns()}", "stuck")
    try:
        victim = reader.python(OPEN_UNDER, m.path)
        poll(lambda: state_of(victim.pid) == "D", 10, what="the task in D on the hung mount")
        config = configure(tmp_path, Path(m.path))
        doc = yaml.safe_load(config.read_text())
        doc["stuck_tasks"]["grace"] = 0.5
        config.write_text(yaml.safe_dump(doc))
        found = []
        for _ in range(4):
            rec = healthcheck(config)
            found = [f for f in rec["findings"] if f["evidence"].get("pid") == victim.pid and f["status"] == "stuck"]
            registry = json.loads((tmp_path / "state" / "n1" / "stuck-children.json").read_text())
            assert sorted(registry) == [f"filesystem:{m.path}"], registry
        [f] = found
        ev = f["evidence"]
        assert (ev["mountpoint"], ev["cause"], ev["syscall"]) == (str(m.path), "shared_filesystem", "openat"), ev
        assert any("hung mount" in h for h in ev["attribution"]), ev["attribution"]
    finally:
        m.close()
