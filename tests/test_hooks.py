"""Prolog, epilog and health check plumbing without Slurm: locks, corrupted state,
broken configuration, the prolog's pipes and its detached helper."""
from __future__ import annotations

import json
import os
import select
import subprocess
import time

import helpers
import pytest
from helpers import BIN, SLURM_HOOKS, poll

from slurm_hooks.core.model import JobInfo


def write_config(path, tmp_path, **extra):
    return helpers.write_config(path, tmp_path, **{"node_name": "hooknode",
                                                   "slurm": {"bin_dir": str(tmp_path / "noslurm")}, **extra})


def test_job_info_from_the_prolog_environment():
    j = JobInfo.from_env({"SLURM_JOB_ID": "42", "SLURM_JOB_UID": "1000", "SLURM_JOB_GPUS": "0,3"})
    assert (j.id, j.uid, j.gpus) == ("42", "1000", ["0", "3"])
    assert JobInfo.from_env({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}).gpus == ["GPU-a", "GPU-b"]
    assert JobInfo.from_env({"SLURM_JOB_ID": "7"}).gpus is None
    assert JobInfo.from_env({}) is None


def test_a_second_health_check_says_the_first_is_running_and_leaves(tmp_path, slow_mount):
    cfg = write_config(tmp_path / "c.yaml", tmp_path, filesystems=[{"path": str(slow_mount.path)}],
                       filesystem_defaults={"timeout": 10, "warn_after": 5}, policy={"lock_timeout": 0.3})
    first = subprocess.Popen([str(SLURM_HOOKS), "-c", str(cfg), "healthcheck"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        poll(lambda: (tmp_path / "state" / "hooknode" / "healthcheck.lock").exists(), 5, what="the lock")
        time.sleep(0.3)
        t0 = time.monotonic()
        r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "healthcheck"], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0 and time.monotonic() - t0 < 2
        assert f"another run (pid {first.pid}) still holds" in r.stderr and "not checking this time" in r.stderr
    finally:
        assert first.wait(timeout=30) == 0
    # Once it is done, the next one runs.
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "healthcheck"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "fs " in r.stdout


@pytest.mark.parametrize("name", ["stuck-tasks", "actions-done", "spool", "drain", "stuck-children", "failures"])
def test_corrupted_state_is_set_aside_not_fatal(tmp_path, name):
    cfg = write_config(tmp_path / "c.yaml", tmp_path, filesystems=[{"path": str(tmp_path)}],
                       gpu={"enabled": "false"})
    state = tmp_path / "state" / "hooknode"
    state.mkdir(parents=True)
    bad = b"\x00\xff{not json" if name != "spool" else b'{"a": 1}'     # the spool must be a list
    (state / f"{name}.json").write_bytes(bad)
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "healthcheck"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    aside = list(state.glob(f"{name}.json.corrupt-*"))
    assert aside and aside[0].read_bytes() == bad
    assert f"warning: state file {state}/{name}.json unreadable" in r.stdout


def test_state_store_sets_foreign_files_aside(tmp_path):
    from slurm_hooks.core.state import StateStore
    s = StateStore(str(tmp_path))
    (tmp_path / "x.json").write_text("[1, 2]")
    assert s.load("x") == {} and "expected a JSON dict, got list" in s.warnings[0]
    s.save("x", {"a": 1})
    assert s.load("x") == {"a": 1}


def test_broken_config_fails_no_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    # The journal it names is where its own error goes (never the host's).
    bad.write_text(f"journal: {tmp_path}/journal.jsonl\nfilesystems:\n  - path: /scratch\n    timeout: -3\n")
    env = {"SLURM_HOOKS_CONFIG": str(bad), "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "5"}
    for hook in ("prolog", "epilog"):
        r = subprocess.run([str(BIN / f"slurm-hooks-{hook}")], capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode == 0, (hook, r.stderr)
        assert f"slurm-hooks {hook}: configuration error, no checks run, the job is not held up" in r.stderr
        assert "filesystems[0].timeout: must be > 0 seconds, got -3" in r.stderr
    r = subprocess.run([str(BIN / "slurm-hooks-healthcheck")], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 2 and "configuration error" in r.stderr
    last = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert [(x["hook"], x["status"]) for x in last] == [("prolog", "config_error"), ("epilog", "config_error"),
                                                       ("healthcheck", "config_error")]


def test_failing_prolog_returns_at_once_and_frees_its_pipes(tmp_path, hung_mount):
    cfg = write_config(tmp_path / "c.yaml", tmp_path, filesystems=[{"path": str(hung_mount.path)}],
                       prolog={"fs_timeout": 1})
    env = {"SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "hooknode", "SLURM_JOB_ID": "77"}
    t0 = time.monotonic()
    p = subprocess.Popen([str(BIN / "slurm-hooks-prolog")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, open_fds = b"", {p.stdout.fileno(), p.stderr.fileno()}
    while open_fds and time.monotonic() - t0 < 10:
        for fd in select.select(list(open_fds), [], [], 0.1)[0]:
            data = os.read(fd, 65536)
            out += data
            if not data:
                open_fds.discard(fd)
    took = time.monotonic() - t0
    assert not open_fds, "a child (the probe or the detached helper) kept slurmd's pipe open"
    assert p.wait(timeout=5) == 1 and took < 1 + 1.5
    text = out.decode()
    assert f"fs {hung_mount.path} hung >1s" in text
    state = tmp_path / "state" / "hooknode"
    failure = json.loads((state / "hook-failure.json").read_text())
    assert failure["reason"] == f"fs {hung_mount.path} hung >1s (create, fuse.fusefs) [slurm-hooks]"
    assert failure["job"] == "77" and failure["replaces"] == "Prolog error"
    record = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()
              if json.loads(x)["event"] == "run"][-1]
    assert record["hook"] == "prolog" and record["job"] == "77" and record["status"] == "unhealthy"
    assert [a["outcome"] for a in record["actions"]] == ["deferred"]


def test_an_epilog_whose_drain_does_not_go_through_exits_1_saying_why(tmp_path, hung_mount):
    """README: the epilog exits non-zero only when slurmctld did not take its drain (here
    no Slurm configuration at all), with the reason on stderr, so that Slurm drains."""
    cfg = write_config(tmp_path / "c.yaml", tmp_path, filesystems=[{"path": str(hung_mount.path)}],
                       epilog={"fs_timeout": 1, "reason_delay": 30},
                       slurm={"conf": str(tmp_path / "no-slurm.conf"), "timeout": 5})
    env = {"SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "hooknode", "SLURM_JOB_ID": "78"}
    r = subprocess.run([str(BIN / "slurm-hooks-epilog")], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "slurm-hooks epilog: the drain did not go through (" in r.stderr, r.stderr
    assert "exit 1 so that Slurm drains the node itself" in r.stderr, r.stderr
