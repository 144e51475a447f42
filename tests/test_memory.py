"""The memory check: MemAvailable against its thresholds, new OOM kills, its settings,
series and explain keys, through the same interface as every check."""
from __future__ import annotations

import json
import subprocess

import pytest
from helpers import SLURM_HOOKS

from slurm_hooks.checks import Context, for_hook
from slurm_hooks.checks._config import default_config, loads_config
from slurm_hooks.checks.memory import MemoryCheck, MemoryConfig, meminfo, oom_kills
from slurm_hooks.core.config import ConfigError
from slurm_hooks.core.state import StateStore
from slurm_hooks.host.runner import Runner

MEMINFO = "MemTotal:       16000000 kB\nMemFree:          500000 kB\nMemAvailable:   {avail} kB\nHugePages_Total:       0\n"
VMSTAT = "nr_free_pages 125000\noom_kill {kills}\n"


def fake_proc(tmp_path, avail_kib: int, kills: int | None = 0):
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "meminfo").write_text(MEMINFO.format(avail=avail_kib))
    (proc / "vmstat").write_text(VMSTAT.format(kills=kills) if kills is not None else "nr_free_pages 1\n")
    return str(proc)


def run(tmp_path, proc, **memory):
    cfg = default_config(memory=MemoryConfig(**memory))
    state = StateStore(str(tmp_path / "state"))
    ctx = Context(cfg, "n1", state, Runner(state), hook="healthcheck")
    check = MemoryCheck(proc)
    assert check.tasks(ctx) == []
    return check.findings(ctx, {})


def test_parses_the_kernels_files():
    info = meminfo(MEMINFO.format(avail=8000000))
    assert info["MemAvailable"] == 8000000 * 1024 and info["MemTotal"] == 16000000 * 1024
    assert info["HugePages_Total"] == 0                      # a count, not kB
    assert oom_kills(VMSTAT.format(kills=7)) == 7
    assert oom_kills("nr_free_pages 1\n") is None            # kernels before 4.13


def test_plenty_passes_low_fails_tight_warns(tmp_path):
    [ok] = run(tmp_path, fake_proc(tmp_path, 8000000))
    assert (ok.status, ok.severity) == ("ok", "ok") and ok.evidence["available_mib"] == 7812
    [low] = run(tmp_path, fake_proc(tmp_path, 100 * 1024))
    assert (low.status, low.severity, low.resumable) == ("low", "fail", True)
    assert low.summary.startswith("memory low: 100 MiB available of 15625 MiB")
    assert low.reason == "memory low: below 256 MiB available"       # stable, for the node reason
    [tight] = run(tmp_path, fake_proc(tmp_path, 600 * 1024))          # < 5 % of MemTotal
    assert (tight.status, tight.severity) == ("tight", "warn")
    [never] = run(tmp_path, fake_proc(tmp_path, 100 * 1024), min_available_mib=None, warn_percent=0)
    assert never.severity == "ok"


def test_new_oom_kills_warn_once(tmp_path):
    proc = fake_proc(tmp_path, 8000000, kills=3)
    assert [f.status for f in run(tmp_path, proc)] == ["ok"]          # kills before we looked: no news
    fake_proc(tmp_path, 8000000, kills=5)
    findings = run(tmp_path, proc)
    assert [f.status for f in findings] == ["ok", "oom_kill"]
    assert findings[1].severity == "warn" and findings[1].evidence["oom_kills_new"] == 2
    assert [f.status for f in run(tmp_path, proc)] == ["ok"]          # the same count: nothing new
    fake_proc(tmp_path, 8000000, kills=9)
    assert [f.status for f in run(tmp_path, proc, oom_kill_warn=False)] == ["ok"]
    fake_proc(tmp_path, 8000000, kills=None)                          # no counter: never a warning
    assert [f.status for f in run(tmp_path, proc)] == ["ok"]


def test_switch_and_absent_files(tmp_path):
    assert [f.status for f in run(tmp_path, fake_proc(tmp_path, 1), enabled="false")] == ["disabled"]
    nothing = str(tmp_path / "none")
    assert [(f.status, f.severity) for f in run(tmp_path, nothing)] == [("not_applicable", "ok")]
    assert [(f.status, f.severity) for f in run(tmp_path, nothing, enabled="true")] == [("unreadable", "fail")]


def test_settings_load_and_are_checked():
    cfg = loads_config("memory:\n  enabled: no\n  min_available_mib: 1024\n  warn_percent: 2.5\n", "x.yaml")
    assert (cfg.memory.enabled, cfg.memory.min_available_mib, cfg.memory.warn_percent) == ("false", 1024, 2.5)
    assert default_config().memory == MemoryConfig()
    with pytest.raises(ConfigError) as e:
        loads_config("memory:\n  enabled: sometimes\n  warn_percent: 200\n  oom_kill_warm: true\n", "x.yaml")
    assert e.value.problems == [
        "x.yaml:2: memory.enabled: must be auto, true or false, got 'sometimes'",
        "x.yaml:3: memory.warn_percent: must be <= 100, got 200",
        "x.yaml:4: memory.oom_kill_warm: unknown setting (did you mean oom_kill_warn?); known: "
        "enabled, min_available_mib, oom_kill_warn, warn_percent",
    ]


def test_series_and_explain_keys(tmp_path):
    findings = run(tmp_path, fake_proc(tmp_path, 100 * 1024, kills=4))
    samples = MemoryCheck.samples(findings)
    assert samples == [("slurm_hooks_memory_available_bytes", {}, 100 * 1024 * 1024.0),
                       ("slurm_hooks_memory_total_bytes", {}, 16000000 * 1024.0),
                       ("slurm_hooks_memory_oom_kills_total", {}, 4.0)]
    assert all(s[0] in MemoryCheck.series for s in samples)
    assert {"available_mib", "min_available_mib"} <= set(MemoryCheck.explain_keys) & set(findings[0].evidence)


def test_runs_in_the_health_check_not_in_a_job_hook():
    assert "memory" in for_hook("healthcheck") and "memory" in for_hook("check")
    assert "memory" not in for_hook("prolog") and "memory" not in for_hook("epilog")


def test_on_this_host(tmp_path):
    """The real /proc: the installed command reports this machine's memory."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\njournal: {tmp_path / 'j.jsonl'}\n")
    r = subprocess.run([str(SLURM_HOOKS), "--config", str(cfg), "check", "memory", "--json"],
                       capture_output=True, text=True, timeout=60)
    record = json.loads(r.stdout)
    [run_] = record["checks"]
    f = run_["findings"][0]
    assert run_["name"] == "memory" and f["status"] in ("ok", "tight", "low"), r.stdout
    assert f["evidence"]["total_mib"] > 0 and f["evidence"]["available_mib"] <= f["evidence"]["total_mib"]
