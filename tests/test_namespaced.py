"""tests/namespaced.py, the side-by-side sessions' namespaces: a checkout anywhere works."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_a_checkout_under_tmp_is_seen_inside_the_session(tmp_path):
    """The session's private /tmp must not hide a checkout under /tmp (its venv, its tests)."""
    assert str(tmp_path).startswith("/tmp/"), tmp_path
    checkout = tmp_path / "slurm-hooks"
    (checkout / "tests").mkdir(parents=True)
    shutil.copy(HERE / "namespaced.py", checkout / "tests")
    (checkout / "marker").write_text("the checkout\n")
    private = Path("/var/tmp") / f"ns-test-{tmp_path.name}"
    try:
        r = subprocess.run([sys.executable, str(checkout / "tests/namespaced.py"), str(private), "--",
                            "cat", str(checkout / "marker")], capture_output=True, text=True, timeout=60,
                           cwd=checkout)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert r.returncode == 0 and r.stdout == "the checkout\n", r.stdout + r.stderr


def test_a_private_dir_that_would_be_hidden_is_refused_at_once(tmp_path):
    r = subprocess.run([sys.executable, str(HERE / "namespaced.py"), str(tmp_path / "ns"), "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "would be hidden by the session's own /tmp" in r.stderr, r.stderr
