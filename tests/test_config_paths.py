"""`config check` verifies what a run will use, and a run whose Slurm configuration is
missing says so at once: the typos an admin makes (slurm.conf, state_dir, journal,
site_checks.dir, prometheus_textfile_dir) are named, not found out by a run."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_hooks.core.config import SlurmConfig
from slurm_hooks.slurm.api import SlurmCode, SlurmNotConfigured
from slurm_hooks.slurm.scontrol import Slurm

CLI = str(Path(sys.executable).parent / "slurm-hooks")


def check(tmp_path, text: str, *args: str) -> subprocess.CompletedProcess:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return subprocess.run([CLI, "config", "check", *args, str(f)], capture_output=True, text=True, timeout=60)


def test_each_typo_is_named(tmp_path):
    (tmp_path / "state").mkdir()
    r = check(tmp_path, f"slurm: {{conf: {tmp_path}/slurm.cnf}}\nstate_dir: {tmp_path}/stat\n"
                        f"journal: {tmp_path}/lgo/journal.jsonl\nsite_checks: {{dir: {tmp_path}/check.d}}\n"
                        f"prometheus_textfile_dir: {tmp_path}/nope/prom\n")
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert f"slurm.conf: {tmp_path}/slurm.cnf does not exist (or is not a file)" in err, err
    assert f"site_checks.dir: {tmp_path}/check.d does not exist: no site check would run (a typo?)" in err
    assert f"prometheus_textfile_dir: {tmp_path}/nope/prom does not exist and neither does its parent" in err
    out = r.stdout.splitlines()
    assert out[0].endswith("OK (3 warnings)"), r.stdout
    # A directory whose parent is there is made by the first run: named, so a typo shows.
    assert f"note: state_dir: {tmp_path}/stat does not exist yet: the first run creates it in {tmp_path}" in out
    assert f"note: journal: {tmp_path}/lgo does not exist yet: the first run creates it in {tmp_path}" in out
    strict = check(tmp_path, f"site_checks: {{dir: {tmp_path}/check.d}}\n", "--strict")
    assert strict.returncode == 2 and "error:" in strict.stderr


def test_what_is_there_passes(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=c\n")
    (tmp_path / "checks.d").mkdir()
    r = check(tmp_path, f"slurm: {{conf: {tmp_path}/slurm.conf}}\nstate_dir: {tmp_path}\n"
                        f"journal: {tmp_path}/journal.jsonl\nsite_checks: {{dir: {tmp_path}/checks.d}}\n")
    assert r.returncode == 0 and r.stderr == "" and r.stdout.splitlines()[0].endswith(": OK"), r.stdout + r.stderr


@pytest.mark.parametrize("call", ["version", "show_node"])
def test_a_missing_slurm_conf_is_said_at_once(tmp_path, call):
    slurm = Slurm(SlurmConfig(conf=str(tmp_path / "slurm.cnf"), bin_dir="/usr/bin", timeout=15))
    t0 = time.monotonic()
    with pytest.raises(SlurmNotConfigured) as e:
        getattr(slurm, call)(*(() if call == "version" else ("n1",)))
    assert time.monotonic() - t0 < 1 and e.value.code == SlurmCode.NO_CONFIG
    assert f"{tmp_path}/slurm.cnf does not exist" in str(e.value)
