"""Which Slurm backend a run uses (slurm.backend: auto | scontrol | pyslurm), and why:
`auto` declines a pyslurm built for another Slurm and says so, a forced pyslurm fails
clearly on a mismatch, and libslurm's fatal() exit (no readable slurm.conf) is an error
of one call, never the end of the health check."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from helpers import SLURM_HOOKS, journal

from slurm_hooks.slurm.api import major_minor
from slurm_hooks.slurm.connect import pyslurm_distribution

try:
    from .conftest import HOW_TO_BUILD
except ImportError:
    from conftest import HOW_TO_BUILD

pytestmark = pytest.mark.cluster
PYSLURM = pyslurm_distribution()
needs_pyslurm = pytest.mark.skipif(PYSLURM is None, reason=f"pyslurm is not installed: {HOW_TO_BUILD}")


def write_config(tmp_path, slurm: dict, **more) -> str:
    doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal-n1.jsonl"),
           "slurm": slurm, "stuck_tasks": {"enabled": False}, "gpu": {"enabled": False},
           # A required mount that is not there: the health check drains n1.
           "filesystems": [{"path": str(tmp_path), "mountpoint": str(tmp_path / "not-mounted")}]}
    doc.update(more)
    path = tmp_path / "n1.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def hooks(conf: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SLURM_HOOKS), "-c", conf, *args], capture_output=True, text=True,
                          timeout=120, env={"SLURMD_NODENAME": "n1"})


def in_use(conf: str) -> dict:
    r = hooks(conf, "config", "show")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["slurm_backend_in_use"]


@needs_pyslurm
def test_auto_uses_pyslurm_only_for_the_slurm_it_was_built_for(clean_cluster, tmp_path):
    """On Debian's 22.05, auto declines pyslurm 25.11 and says why, in `config show` and
    in the journal of the run that drained; on 25.11 it takes pyslurm."""
    cluster = clean_cluster
    running = cluster.version
    conf = write_config(tmp_path, cluster.hooks_slurm(timeout=10, backend="auto"))
    shown = in_use(conf)
    r = hooks(conf, "healthcheck")
    assert r.returncode == 1, r.stdout + r.stderr
    cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n1"), 10, what="n1 drained")
    [run] = journal(tmp_path, "n1")
    if major_minor(running) == major_minor(PYSLURM):
        assert shown == {"backend": "pyslurm",
                         "why": f"auto: pyslurm {PYSLURM} built for the running Slurm {running}"}
        assert f"slurm backend: pyslurm (auto: pyslurm {PYSLURM} built for the running Slurm {running})" \
            in run["notes"]
    else:
        why = (f"auto: pyslurm {PYSLURM} was built for Slurm {major_minor(PYSLURM)}, the running Slurm "
               f"is {running}")
        assert shown == {"backend": "scontrol", "why": why}
        assert f"slurm backend: scontrol ({why})" in run["notes"]
    assert [a["outcome"] for a in run["actions"] if a["kind"] == "drain"] == ["done"]


@needs_pyslurm
def test_forced_pyslurm_for_another_slurm_fails_clearly_and_drains_nothing(tmp_path):
    """Debian's scontrol (22.05) and pyslurm 25.11, slurm.backend: pyslurm: `config show`
    names the mismatch, and the drain fails with it instead of talking to a Slurm the
    binding was not built for. scontrol --version needs no slurmctld."""
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmctldHost=localhost\n")
    running = subprocess.run(["/usr/bin/scontrol", "--version"], capture_output=True, text=True,
                             env={"SLURM_CONF": str(tmp_path / "slurm.conf")}).stdout.split()[-1]
    if major_minor(running) == major_minor(PYSLURM):
        pytest.fail(f"this test needs a distribution Slurm other than pyslurm's ({PYSLURM}), got {running}")
    # scontrol --version parses slurm.conf (no RPC): any readable one will do.
    conf = write_config(tmp_path, {"bin_dir": "/usr/bin", "conf": str(tmp_path / "slurm.conf"),
                                   "backend": "pyslurm"})
    error = (f"slurm.backend is pyslurm, but pyslurm {PYSLURM} was built for Slurm {major_minor(PYSLURM)}, "
             f"the running Slurm is {running}")
    assert in_use(conf) == {"backend": "pyslurm", "why": "slurm.backend: pyslurm", "error": error}
    r = hooks(conf, "healthcheck")
    assert r.returncode == 1
    assert error in r.stdout, r.stdout
    [run] = journal(tmp_path, "n1")
    [drain] = [a for a in run["actions"] if a["kind"] == "drain"]
    assert drain["outcome"] == "failed" and error in drain["message"] and not drain.get("retry")


@needs_pyslurm
@pytest.mark.built_slurm
def test_libslurm_fatal_exit_is_a_clear_error_not_the_end_of_the_run(cluster, tmp_path):
    """No slurm.conf where libslurm looks (none set, none at Slurm's default path, no DNS
    SRV record), as for HealthCheckProgram on a node that was never given one: libslurm
    calls fatal(), which exits the process. auto falls back to scontrol saying why;
    forced, the drain fails with a clear error; the health check itself runs to its end."""
    auto = write_config(tmp_path, {"bin_dir": cluster.bin_dir, "backend": "auto", "timeout": 20})
    shown = in_use(auto)
    assert shown["backend"] == "scontrol", shown
    # The cause in words an admin acts on (outcomes' vocabulary), then scontrol's own.
    assert shown["why"].startswith("auto: the running Slurm's version is unknown (no Slurm configuration "
                                   "found; set slurm.conf"), shown
    assert "fatal: Could not establish a configuration source" in shown["why"], shown

    forced = write_config(tmp_path, {"bin_dir": cluster.bin_dir, "backend": "pyslurm", "timeout": 20})
    fatal = ("slurm.backend is pyslurm, but pyslurm: the child process exited while libslurm read its "
             "configuration (Slurm's fatal(): is $SLURM_CONF or Slurm's default slurm.conf readable")
    assert in_use(forced)["error"].startswith(fatal)
    r = hooks(forced, "healthcheck", "--json")
    assert r.returncode == 1, r.stderr
    record = json.loads(r.stdout)
    [drain] = [a for a in record["actions"] if a["kind"] == "drain"]
    assert drain["outcome"] == "failed" and drain["message"].startswith(f"not done: {fatal}"), drain
    assert record["status"] == "unhealthy" and any(n.startswith("slurm backend: pyslurm") for n in record["notes"])


@pytest.mark.per_backend
def test_each_backend_run_of_a_slurm_facing_test_uses_that_backend(cluster, tmp_path, request):
    """The suite itself: a `per_backend` test run once per backend (--slurm-prefix) gets a
    configuration naming that backend, and slurm-hooks uses it; without --slurm-prefix
    the configuration names none (slurm-hooks' default, auto)."""
    callspec = getattr(request.node, "callspec", None)
    wanted = callspec.params.get("slurm_backend") if callspec is not None else None
    slurm = cluster.hooks_slurm(timeout=10)
    if wanted is None:
        assert "backend" not in slurm, slurm
        return
    assert slurm["backend"] == wanted
    assert in_use(write_config(tmp_path, slurm))["backend"] == wanted


def test_a_test_not_marked_per_backend_runs_once_with_the_default(cluster, request):
    """Feature tests run once per Slurm version, with slurm-hooks' default backend (auto):
    only the backends' own tests run once per backend."""
    callspec = getattr(request.node, "callspec", None)
    assert callspec is None or "slurm_backend" not in callspec.params
    assert "backend" not in cluster.hooks_slurm(timeout=10)
