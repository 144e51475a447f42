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
from slurm_hooks.slurm.connect import pyslurm_installed

try:
    from .conftest import HOW_TO_BUILD
except ImportError:
    from conftest import HOW_TO_BUILD

pytestmark = pytest.mark.cluster
PYSLURM = (pyslurm_installed() or [None])[0]
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


def test_pyslurm_installed_reads_the_distribution_as_importlib_metadata_does(tmp_path, monkeypatch):
    """The version auto compares with the running Slurm's, read from the distribution's
    metadata on sys.path without importing importlib.metadata (about 40 ms a run): the
    same answer, for a wheel's dist-info and an egg's PKG-INFO alike; None without one."""
    import sys
    from importlib import metadata

    try:
        installed = metadata.version("pyslurm")
    except metadata.PackageNotFoundError:
        installed = None
    assert (pyslurm_installed() or [None])[0] == installed == PYSLURM
    wheel = tmp_path / "wheel" / "pyslurm-1.2.3.dist-info"
    wheel.mkdir(parents=True)
    (wheel / "METADATA").write_text("Metadata-Version: 2.1\nName: pyslurm\nVersion: 1.2.3\n\nVersion: 9.9.9\n")
    egg = tmp_path / "egg"
    egg.mkdir()
    (egg / "pyslurm-4.5.6-py3.11.egg-info").write_text("Metadata-Version: 1.0\nName: pyslurm\nVersion: 4.5.6\n")
    for where, version in ((wheel.parent, "1.2.3"), (egg, "4.5.6")):
        monkeypatch.setattr(sys, "path", [str(where)])
        assert pyslurm_installed()[0] == metadata.version("pyslurm") == version
    monkeypatch.setattr(sys, "path", [str(tmp_path / "none")])
    assert pyslurm_installed() is None


@needs_pyslurm
def test_auto_tries_pyslurm_once_per_installation_not_once_per_run(cluster, tmp_path, monkeypatch):
    """Importing pyslurm in a child to choose the backend costs a failing run 100 to 400
    ms: a success is kept (pyslurm.py PROBE_CACHE) for the same pyslurm, running Slurm and
    slurm.conf, at most PROBE_MAX_AGE; tried again when any of them differs, when the
    kept one is too old, and after a pyslurm call could not import pyslurm. A failed
    try is not kept. On a Slurm pyslurm was not built for, nothing is tried or kept."""
    import time

    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm import connect
    from slurm_hooks.slurm import pyslurm as backend
    from slurm_hooks.slurm.api import Choice, SlurmError
    from slurm_hooks.slurm.scontrol import Slurm
    monkeypatch.setattr(backend, "probe_cache_dir", str(tmp_path / "cache"))
    kept = tmp_path / "cache" / backend.PROBE_CACHE
    tried: list[str | None] = []
    real_probe = backend.probe

    def probe(cfg, timeout):
        tried.append(real_probe(cfg, timeout))
        return tried[-1]
    monkeypatch.setattr(backend, "probe", probe)

    def choose(**slurm):
        cfg = SlurmConfig(**cluster.hooks_slurm(timeout=15, backend="auto", **slurm))
        return connect.choose(cfg, Slurm(cfg))

    first, second = choose(), choose()
    assert first == second
    if major_minor(cluster.version) != major_minor(PYSLURM):
        assert first.backend == "scontrol" and tried == [] and not kept.exists()
        return
    assert first.backend == "pyslurm" and tried == [None] and kept.exists()     # tried once, kept
    # Another slurm.conf (the same file by another name): tried again, kept for it.
    other = tmp_path / "slurm.conf"
    other.symlink_to(cluster.hooks_slurm(timeout=15)["conf"])
    assert choose(conf=str(other)).backend == "pyslurm" and tried == [None, None]
    assert choose(conf=str(other)).backend == "pyslurm" and tried == [None, None]
    # Too old: tried again.
    doc = json.loads(kept.read_text())
    kept.write_text(json.dumps(dict(doc, at=time.time() - backend.PROBE_MAX_AGE - 1)))
    assert choose(conf=str(other)).backend == "pyslurm" and len(tried) == 3
    # A pyslurm call that cannot import pyslurm (here one that raises on import, first on
    # the child's path) forgets the kept try; the call fails as its own error.
    broken = tmp_path / "broken" / "pyslurm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('built for another libslurm')\n")
    import sys
    monkeypatch.setattr(sys, "path", [str(broken.parent), *sys.path])
    cfg = SlurmConfig(**cluster.hooks_slurm(timeout=15, backend="auto"))
    with pytest.raises(SlurmError, match="import pyslurm failed"):
        backend.PyslurmBackend(cfg, Slurm(cfg), Choice("pyslurm", "kept")).show_job("1")
    assert not kept.exists()
    # The failed try that follows is not kept: every run tries until pyslurm imports.
    assert choose().backend == "scontrol" and tried[-1] is not None and not kept.exists()
    assert choose().backend == "scontrol" and len(tried) == 5 and not kept.exists()
