"""`slurm-hooks explain` after real runs: it says what the journal shows slurm-hooks did,
and names what Slurm did as Slurm's."""
from __future__ import annotations

import subprocess

from helpers import BIN, SLURM_HOOKS, write_config


def _prolog_failed(tmp_path, hung_mount):
    """A real prolog failing on a hung mount (no Slurm here: the prolog asks it nothing)."""
    cfg = write_config(tmp_path / "c.yaml", tmp_path, filesystems=[{"path": str(hung_mount.path)}],
                       prolog={"fs_timeout": 1, "reason_delay": 0.1})
    env = {"SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "hooknode", "SLURM_JOB_ID": "77"}
    r = subprocess.run([str(BIN / "slurm-hooks-prolog")], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    return cfg, env


def _explain(cfg, env, *args):
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "explain", *args], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_a_failed_prologs_drain_is_said_to_be_slurms(tmp_path, hung_mount):
    cfg, env = _prolog_failed(tmp_path, hung_mount)
    out = _explain(cfg, env)
    head = out.splitlines()[1]
    assert "drained by slurm-hooks" not in out, out
    assert head.startswith("drained by Slurm (its own `Prolog error` when slurm-hooks' prolog failed"), out
