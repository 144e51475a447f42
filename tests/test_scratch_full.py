"""Local scratch filled by a job: no job can make its node look sick.

A real tmpfs, mounted for the test (size and inode count chosen small), filled by a
real unprivileged user (tests/attacker.py) the way a job fills /tmp, then probed by the
installed `slurm-hooks` command as slurmd runs it: the health check fails it only
resumably (the drain is lifted once space is back), the prolog and epilog only warn
(exit 0: Slurm neither drains the node nor requeues the job for an earlier job's
files), and once the files are gone the probe is ok again.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from attacker import PY, unprivileged_user
from helpers import SLURM_HOOKS, run_record

from slurm_hooks.host.mounts import MountTable, parse_mountinfo

NODE = "scratchnode"
# Our own user: the security tests' user (shk-mallory) may be in use by another session.
FILLER = "shk-scratch"

# Run as the user with an open descriptor of the scratch directory (pytest's tmp_path
# is root's 0700, so the user could not walk to it by name): fill it until ENOSPC,
# one big file ("space") or empty files ("inodes").
FILL = r"""
import errno, os, sys
fd, how = int(sys.argv[1]), sys.argv[2]
n = 0
try:
    if how == "space":
        out = os.open("big", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        while True:
            n += os.write(out, b"x" * 65536)
    while True:
        os.close(os.open(f"f{n}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd))
        n += 1
except OSError as e:
    assert e.errno == errno.ENOSPC, e
print(n)
"""
EMPTY = r"""
import os, sys
fd = int(sys.argv[1])
for name in os.listdir(fd):
    if name != ".slurm-hooks":          # the probes' own directory, root's
        os.unlink(name, dir_fd=fd)
"""


@pytest.fixture(scope="module")
def filler():
    with unprivileged_user(FILLER) as user:
        yield user


@pytest.fixture
def scratch(tmp_path):
    """mount(**options) -> a fresh tmpfs under tmp_path, world-writable like /tmp;
    every one is unmounted at the end, whatever happened."""
    mounted: list[Path] = []

    def mount(**options) -> Path:
        path = tmp_path / f"scratch{len(mounted)}"
        path.mkdir()
        opts = ",".join(["mode=1777", *(f"{k}={v}" for k, v in options.items())])
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "shk-scratch", str(path)], check=True,
                       capture_output=True, timeout=30)
        mounted.append(path)
        return path

    try:
        yield mount
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def as_user(user, code: str, directory: Path, *args: str) -> str:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        r = subprocess.run(user.argv(PY, "-c", code, str(fd), *args), env=user.env(), cwd=user.home,
                           pass_fds=(fd,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def fill(user, directory: Path, how: str) -> None:
    as_user(user, FILL, directory, how)
    owners = {os.lstat(directory / n).st_uid for n in os.listdir(directory) if n != ".slurm-hooks"}
    assert owners == {user.uid}, "the job's user filled it, not root"


@pytest.fixture
def hooks(tmp_path):
    class Hooks:
        state = tmp_path / "state" / NODE
        config = tmp_path / "slurm-hooks.yaml"

        def configure(self, path: Path, **policy):
            doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal.jsonl"),
                   "node_name": NODE, "syslog": False, "prometheus_textfile_dir": None,
                   # No Slurm here: a drain or a resume is only spooled.
                   "slurm": {"backend": "scontrol", "bin_dir": str(tmp_path / "noslurm")},
                   "filesystems": [{"path": str(path)}],
                   "filesystem_defaults": {"timeout": 5, "warn_after": 4},
                   "stuck_tasks": {"enabled": False}, "gpu": {"enabled": False},
                   "policy": policy}
            self.config.write_text(yaml.safe_dump(doc))

        def run(self, hook: str) -> dict:
            env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": NODE, "SLURM_JOB_ID": "4242",
                   "SLURM_JOB_UID": "4242"}
            record = run_record(self.config, hook, env=env)
            [record["finding"]] = [f for c in record["checks"] if c["name"] == "filesystem"
                                   for f in c["findings"]]
            return record
    return Hooks()


def assert_resumable_failure(f: dict, path: Path, summary: str, step: str) -> None:
    assert (f["status"], f["severity"], f["summary"]) == ("full", "fail", summary)
    assert f["resumable"] is True and f["hard"] is False and f["needs_reboot"] is False
    assert (f["evidence"]["errno"], f["evidence"]["step"], f["evidence"]["scratch"]) == ("ENOSPC", step, True)
    assert f["evidence"]["fstype"] == "tmpfs" and f["evidence"]["mountpoint"] == str(path)
    assert "node-local scratch (tmpfs on" in f["detail"] and "lifted once space is back" in f["detail"]


def test_full_scratch_is_a_resumable_failure_of_the_health_check(hooks, scratch, filler):
    path = scratch(size="1m", nr_inodes=64)
    hooks.configure(path, resume_after=2)
    fill(filler, path, "space")

    rec = hooks.run("healthcheck")
    f = rec["finding"]
    assert rec["rc"] == 1 and rec["status"] == "unhealthy"
    assert_resumable_failure(f, path, f"fs {path} full (ENOSPC)", "write")
    assert f["evidence"]["free_bytes"] == 0 and f["evidence"]["free_inodes"] > 0
    assert [(a["kind"], a["reason"]) for a in rec["actions"]] == [("drain", f"fs {path} full (ENOSPC) [slurm-hooks]")]
    assert [n for n in os.listdir(path) if n.startswith(".slurm-hooks")] in ([], [".slurm-hooks"])
    assert not (path / ".slurm-hooks").exists() or os.listdir(path / ".slurm-hooks") == [], "the probe file is gone"

    # The drain, had Slurm taken it, is recorded as ours and resumable (actuation's
    # own record of it, from the finding the command printed) ...
    from dataclasses import fields

    from slurm_hooks.act.actuation import drain_record
    from slurm_hooks.core.model import Action, ActionResult, Finding
    from slurm_hooks.core.state import StateStore
    names = {f.name for f in fields(Action)}
    drain = Action(**{k: v for k, v in rec["actions"][0].items() if k in names})
    record = drain_record({}, [ActionResult(drain, "done")], [Finding(**f)], NODE)
    assert record["resumable"] is True and record["reason"] == drain.reason
    StateStore(str(hooks.state)).save("drain", record)
    (hooks.state / "spool.json").unlink()           # Slurm took it: nothing spooled

    # ... and still full: no pass counted, nothing resumed.
    rec = hooks.run("healthcheck")
    assert rec["finding"]["status"] == "full" and not [a for a in rec["actions"] if a["kind"] == "resume"]
    assert json.loads((hooks.state / "drain.json").read_text())["passes"] == 0
    (hooks.state / "spool.json").unlink()           # the node is drained already

    # The job's files go: the probe is ok, and after resume_after passing runs the
    # health check resumes the node.
    as_user(filler, EMPTY, path)
    first = hooks.run("healthcheck")
    assert first["rc"] == 0 and first["finding"]["status"] == "ok", first["finding"]
    assert [a["kind"] for a in first["actions"]] == []
    second = hooks.run("healthcheck")
    assert second["finding"]["status"] == "ok"
    assert [(a["kind"], a["reason"]) for a in second["actions"]] == [("resume", drain.reason)]


def test_out_of_inodes_is_the_same(hooks, scratch, filler):
    path = scratch(size="1m", nr_inodes=32)
    hooks.configure(path)
    fill(filler, path, "inodes")

    rec = hooks.run("healthcheck")
    assert rec["rc"] == 1
    assert_resumable_failure(rec["finding"], path, f"fs {path} out of inodes (ENOSPC)", "create")
    assert rec["finding"]["evidence"]["free_inodes"] == 0 and rec["finding"]["evidence"]["inodes"] == 32
    assert [a["reason"] for a in rec["actions"]] == [f"fs {path} out of inodes (ENOSPC) [slurm-hooks]"]

    for hook in ("prolog", "epilog"):
        rec = hooks.run(hook)
        assert rec["rc"] == 0, (hook, rec["finding"])
        assert (rec["finding"]["status"], rec["finding"]["severity"]) == ("full", "warn")

    as_user(filler, EMPTY, path)
    rec = hooks.run("healthcheck")
    assert rec["rc"] == 0 and rec["finding"]["status"] == "ok"


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_full_scratch_fails_no_job(hooks, scratch, filler, hook):
    """The earlier job's files: a warning, exit 0, no drain, no requeue, nothing kept
    for the health check to put in place of Slurm's `Prolog error`."""
    path = scratch(size="1m", nr_inodes=64)
    hooks.configure(path)
    fill(filler, path, "space")

    rec = hooks.run(hook)
    f = rec["finding"]
    assert rec["rc"] == 0 and rec["status"] == "warning"
    assert (f["status"], f["severity"], f["summary"]) == ("full", "warn", f"fs {path} full (ENOSPC)")
    assert f["resumable"] is True and f["hard"] is False
    assert f"not failing the {hook}" in f["detail"]
    assert rec["actions"] == []
    assert not (hooks.state / "hook-failure.json").exists() and not (hooks.state / "drain.json").exists()
    text = subprocess.run([str(SLURM_HOOKS), "-c", str(hooks.config), hook], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": NODE,
                                           "SLURM_JOB_ID": "4243"})
    assert text.returncode == 0 and f"WARN  fs {path} full (ENOSPC)" in text.stdout

    as_user(filler, EMPTY, path)
    rec = hooks.run(hook)
    assert rec["rc"] == 0 and rec["finding"]["status"] == "ok"


# --- what counts as local scratch: the mount table alone decides -----------------------
def _table(*rows: tuple[str, str, str]) -> MountTable:
    lines = [f"{i + 20} 1 0:{i} / {point} rw,relatime shared:{i} - {fstype} src{i} rw{extra}"
             for i, (point, fstype, extra) in enumerate(rows)]
    return MountTable(parse_mountinfo("\n".join(lines)))


@pytest.mark.parametrize("rows,path,scratch", [
    ([("/", "ext4", ""), ("/tmp", "tmpfs", "")], "/tmp", True),
    ([("/", "ext4", ""), ("/dev/shm", "tmpfs", "")], "/dev/shm", True),
    ([("/", "ext4", "")], "/var/tmp", True),
    ([("/", "ext4", ""), ("/local", "xfs", "")], "/local/scratch", True),
    ([("/", "ext4", ""), ("/scratch", "lustre", "")], "/scratch/.probe", False),
    ([("/", "ext4", ""), ("/home", "nfs4", "")], "/home", False),
    # A diskless node: /tmp on its NFS root is still where jobs put their files ...
    ([("/", "nfs", "")], "/tmp", True),
    ([("/", "nfs", "")], "/var/lib/x", False),
    # ... but a mount of its own below /tmp is judged by its own type.
    ([("/", "ext4", ""), ("/tmp", "tmpfs", ""), ("/tmp/mnt", "nfs4", "")], "/tmp/mnt", False),
    ([("/", "ext4", ""), ("/tmp/srv", "fuse.sshfs", ",user_id=0,group_id=0")], "/tmp/srv", False),
    # A user's own FUSE mount can say ENOSPC whenever its owner likes.
    ([("/", "ext4", ""), ("/tmp/u", "fuse.fusefs", ",user_id=1000,group_id=1000")], "/tmp/u/x", False),
    ([("/", "ext4", ""), ("/tmp/u", "fuse.fusefs", ",user_id=1000,group_id=1000"),
      ("/tmp/u/t", "tmpfs", "")], "/tmp/u/t", False),
    ([], "/tmp", False),
])
def test_local_scratch_is_decided_by_the_mount_table(rows, path, scratch):
    from slurm_hooks.checks.filesystem import local_scratch
    assert local_scratch(path, _table(*rows)) is scratch


def test_full_network_storage_stays_an_error(hooks, make_fuse):
    """ENOSPC from a filesystem that is not node-local (here a FUSE mount of root's,
    standing for a network filesystem, inside /tmp) is not one job's scratch: it fails
    as before, in the prolog too."""
    m = make_fuse("errno", errno="ENOSPC", fail_op="write")
    hooks.configure(m.path)
    rec = hooks.run("check")
    f = rec["finding"]
    assert (f["status"], f["severity"], f["evidence"]["errno"]) == ("error", "fail", "ENOSPC")
    assert f["summary"] == f"fs {m.path} write failed ENOSPC (fuse.fusefs)"
    rec = hooks.run("prolog")
    assert rec["rc"] == 1 and rec["finding"]["severity"] == "fail"
