"""The filesystem check against real mounts: hung, unkillable, slow, read-only, full,
failing and missing. Everything runs through the installed `slurm-hooks` command, as an
admin or slurmd would run it."""
from __future__ import annotations

import json
import os
import select
import subprocess
import time

import pytest
import yaml
from helpers import SLURM_HOOKS, poll, proc_state, run_record


@pytest.fixture
def hooks(tmp_path):
    """Write a config for the given filesystems and run slurm-hooks with it."""
    class Hooks:
        state_dir = tmp_path / "state"
        journal = tmp_path / "log" / "journal.jsonl"
        config = tmp_path / "slurm-hooks.yaml"

        def configure(self, filesystems, **defaults):
            doc = {"state_dir": str(self.state_dir), "journal": str(self.journal),
                   "node_name": "testnode", "filesystems": filesystems,
                   "filesystem_defaults": {"timeout": 2, "warn_after": 1, **defaults}}
            self.config.write_text(yaml.safe_dump(doc))

        def run(self, *args, timeout=30):
            env = {"PATH": "/usr/bin:/bin", "SLURM_HOOKS_CONFIG": str(self.config)}
            t0 = time.monotonic()
            r = subprocess.run([str(SLURM_HOOKS), *args], capture_output=True, text=True,
                               timeout=timeout, env=env)
            r.elapsed = time.monotonic() - t0
            return r

        def check(self):
            record = run_record(None, "check", env={"PATH": "/usr/bin:/bin", "SLURM_HOOKS_CONFIG": str(self.config)})
            record["by_path"] = {f["target"]: f for c in record["checks"] if c["name"] == "filesystem"
                                 for f in c["findings"]}
            return record

        def stuck(self):
            path = self.state_dir / "testnode" / "stuck-children.json"
            return json.loads(path.read_text()) if path.exists() else {}
    return Hooks()


def test_healthy_paths_pass(hooks, tmp_path, ok_mount):
    local = tmp_path / "local"
    local.mkdir()
    hooks.configure([{"path": str(local)}, {"path": str(ok_mount.path), "mountpoint": str(ok_mount.path),
                                            "fstype": "fuse.fusefs"}])
    rec = hooks.check()
    assert rec["rc"] == 0 and rec["status"] == "healthy"
    f = rec["by_path"][str(ok_mount.path)]
    assert f["status"] == "ok" and f["evidence"]["fstype"] == "fuse.fusefs"
    assert set(f["evidence"]["steps"]) == {"create", "write", "fsync", "read", "unlink"}
    # The probes work in a directory of their own, root's alone, and leave it empty.
    assert os.listdir(local) == [".slurm-hooks"]
    own = os.stat(local / ".slurm-hooks")
    assert (own.st_uid, own.st_mode & 0o7777) == (0, 0o700)
    assert os.listdir(local / ".slurm-hooks") == [], "the probe file is removed"


def test_hung_mount_is_hung_and_names_the_step(hooks, hung_mount):
    hooks.configure([{"path": str(hung_mount.path), "timeout": 1}])
    rec = hooks.check()
    f = rec["by_path"][str(hung_mount.path)]
    assert rec["rc"] == 1 and f["status"] == "hung" and f["severity"] == "fail"
    assert f["summary"] == f"fs {hung_mount.path} hung >1s (create, fuse.fusefs)"
    assert rec["elapsed"] < 1 + 1.0


def test_every_path_hung_still_ends_within_the_deadline(hooks, make_fuse):
    mounts = [make_fuse("unanswered") for _ in range(3)] + [make_fuse("swallow") for _ in range(2)]
    hooks.configure([{"path": str(m.path)} for m in mounts], timeout=1.5)
    rec = hooks.check()
    assert [f["status"] for f in rec["by_path"].values()] == ["hung"] * 5
    assert rec["elapsed"] < 1.5 + 0.5, "five hung paths are probed at once"


def test_unkillable_probe_is_remembered_and_never_duplicated(hooks, swallow_mount):
    target = str(swallow_mount.path)
    hooks.configure([{"path": target, "timeout": 0.5}])
    first = hooks.check()
    f = first["by_path"][target]
    assert f["status"] == "hung" and "cannot be killed" in f["detail"]
    stuck = hooks.stuck()
    assert list(stuck) == [f"filesystem:{target}"]
    pid = stuck[f"filesystem:{target}"]["pid"]
    assert proc_state(pid) == "D"

    for _ in range(9):
        rec = hooks.check()
        f = rec["by_path"][target]
        assert f["status"] == "hung" and f["detail"].startswith("still hung since ")
        assert f["evidence"]["pid"] == pid and f["evidence"]["step"] == "create"
        assert rec["elapsed"] < 0.5, "no new probe, no waiting"

    # Exactly one probe child is stuck on this mount after ten runs.
    stuck_probes = [p for p in os.listdir("/proc") if p.isdigit() and _comm(p) == "slurm-hooks-prb"
                    and proc_state(int(p)) == "D"]
    assert stuck_probes == [str(pid)]

    # Once the server answers (here: the connection is aborted), the child ends and
    # the next run probes afresh.
    swallow_mount.abort()
    poll(lambda: proc_state(pid) in (None, "Z"), 5, what="stuck probe to end")
    rec = hooks.check()
    assert not rec["by_path"][target]["detail"].startswith("still hung")
    assert hooks.stuck() == {}


def _comm(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def test_stuck_child_does_not_hold_the_callers_pipe(hooks, swallow_mount):
    """slurmd reads the hook's stdout until every holder closes it."""
    hooks.configure([{"path": str(swallow_mount.path), "timeout": 0.5}])
    env = {"SLURM_HOOKS_CONFIG": str(hooks.config)}
    p = subprocess.Popen([str(SLURM_HOOKS), "check"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    fds = [p.stdout.fileno(), p.stderr.fileno()]
    deadline = time.monotonic() + 5
    open_fds = set(fds)
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_fds), [], [], 0.1)
        for fd in ready:
            if not os.read(fd, 65536):
                open_fds.discard(fd)
    assert not open_fds, "stdout/stderr still open: a child kept slurmd's pipe"
    assert p.wait(timeout=5) == 1
    assert hooks.stuck(), "the probe child really is stuck"


def test_slow_mount_is_slow_not_failed(hooks, slow_mount):
    hooks.configure([{"path": str(slow_mount.path), "timeout": 5, "warn_after": 0.5}])
    rec = hooks.check()
    f = rec["by_path"][str(slow_mount.path)]
    assert rec["rc"] == 0 and f["status"] == "slow" and f["severity"] == "warn"
    assert f["evidence"]["latency"] >= 1.5            # create, write and fsync each 0.5 s
    assert f["evidence"]["steps"]["fsync"] >= 0.5


@pytest.mark.parametrize("errname,fail_op,step", [
    ("EIO", "fsync", "fsync"), ("ESTALE", "write", "write"), ("ENOTCONN", "create", "create"),
    ("EACCES", "create", "create")])
def test_server_errors_are_named(hooks, make_fuse, errname, fail_op, step):
    m = make_fuse("errno", errno=errname, fail_op=fail_op)
    hooks.configure([{"path": str(m.path)}])
    f = hooks.check()["by_path"][str(m.path)]
    assert f["status"] == "error" and f["evidence"]["errno"] == errname
    assert f["summary"] == f"fs {m.path} {step} failed {errname} (fuse.fusefs)"


def test_read_only_and_full_filesystems(hooks, ro_mount, full_mount):
    hooks.configure([{"path": f"{ro_mount.path}/probe"}, {"path": f"{full_mount.path}/probe"}])
    rec = hooks.check()
    ro = rec["by_path"][f"{ro_mount.path}/probe"]
    full = rec["by_path"][f"{full_mount.path}/probe"]
    assert (ro["status"], ro["evidence"]["errno"], ro["evidence"]["step"]) == ("error", "EROFS", "create")
    # A full node-local tmpfs is scratch a job filled (tests/test_scratch_full.py): its
    # own verdict, a failure that resumes.
    assert (full["status"], full["evidence"]["errno"], full["severity"]) == ("full", "ENOSPC", "fail")
    assert full["summary"] == f"fs {full_mount.path}/probe full (ENOSPC)" and full["resumable"]
    assert rec["rc"] == 1


def test_missing_mount_and_wrong_type(hooks, tmp_path, ok_mount):
    gone = tmp_path / "scratch"
    gone.mkdir()
    hooks.configure([{"path": str(gone), "mountpoint": str(gone)},
                     {"path": str(ok_mount.path), "fstype": "lustre"}])
    rec = hooks.check()
    assert rec["by_path"][str(gone)]["status"] == "missing"
    assert rec["by_path"][str(gone)]["summary"] == f"fs {gone} not mounted ({gone} absent)"
    wrong = rec["by_path"][str(ok_mount.path)]
    assert wrong["status"] == "missing" and "expected lustre" in wrong["summary"]
    assert os.listdir(gone) == [], "nothing was written to the directory under the missing mount"


def test_optional_path_only_warns(hooks, hung_mount):
    hooks.configure([{"path": str(hung_mount.path), "timeout": 0.5, "required": False}])
    rec = hooks.check()
    assert rec["rc"] == 0 and rec["status"] == "warning"


def test_defaults_probe_local_scratch_and_discovered_mounts(tmp_path, ok_mount):
    env = {"SLURM_HOOKS_CONFIG": "", "PATH": "/usr/bin:/bin"}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"state_dir: {tmp_path}/s\njournal: {tmp_path}/j.jsonl\n")
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "check"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert "note: no filesystems configured: probing local scratch /tmp, /dev/shm (write)" in r.stdout
    assert f"{ok_mount.path}" in r.stdout.split("network mounts from the mount table:")[1]
    assert f"OK    fs {ok_mount.path} ok" in r.stdout
