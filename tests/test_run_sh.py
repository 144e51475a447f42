"""tests/run.sh, as CI runs it (`.ci/run`): the first failed step ends the run.

The script itself runs, in a copy of the checkout whose programs are stand-ins that log
how they were called: the venv's python (pytest, tests/namespaced.py), pip, ruff, mypy,
tests/build_slurm.sh and dpkg (every package installed: nothing to fetch).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOGGER = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
case " $* " in *" {fail} "*) exit 1 ;; esac
exit 0
"""


def _checkout(tmp_path: Path, fail: str) -> tuple[Path, Path]:
    co = tmp_path / "checkout"
    (co / "tests").mkdir(parents=True)
    (co / ".ci").mkdir()
    shutil.copy(ROOT / "tests/run.sh", co / "tests/run.sh")
    shutil.copy(ROOT / ".ci/run", co / ".ci/run")
    log = tmp_path / "calls.log"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (co / ".venv/bin").mkdir(parents=True)
    for path in [co / ".venv/bin" / n for n in ("python", "pip", "ruff", "mypy")] + [stubs / "dpkg"]:
        path.write_text(LOGGER.format(log=log, fail=fail))
        path.chmod(0o755)
    (co / "tests/build_slurm.sh").write_text("echo /opt/slurm-built\n")
    return co, log


@pytest.mark.parametrize("side_by_side", ["yes", "no"])
def test_a_failed_session_ends_the_run(tmp_path, side_by_side):
    co, log = _checkout(tmp_path, fail="--host-paths=without" if side_by_side == "yes" else "-rs")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SLURM_HOOKS_SIDE_BY_SIDE": side_by_side,
           "SLURM_HOOKS_TEST_PRIVATE": str(tmp_path / "private")}
    r = subprocess.run(["bash", str(co / ".ci/run")], capture_output=True, text=True, env=env, timeout=120)
    calls = log.read_text().splitlines()
    assert r.returncode == 1, (r.stdout, r.stderr, calls)
    assert "stopping here" in r.stderr, r.stderr
    pytest_runs = [c for c in calls if "pytest" in c]
    if side_by_side == "yes":
        # Both sessions ran (side by side); the host-path tests after them did not.
        assert len(pytest_runs) == 2 and not any("--host-paths=only" in c for c in pytest_runs), calls
    else:
        assert len(pytest_runs) == 1, calls     # the built Slurm's session did not follow


def test_a_failed_linter_ends_the_run_before_any_test(tmp_path):
    co, log = _checkout(tmp_path, fail="slurm_hooks/")
    r = subprocess.run(["bash", str(co / ".ci/run")], capture_output=True, text=True, timeout=120,
                       env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    assert r.returncode == 1 and not any("pytest" in c for c in log.read_text().splitlines()), r.stderr
