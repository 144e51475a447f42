"""`config check`'s requeue clock (views/requeueclock.py): how soon a requeued job whose
task cannot die runs again, from the running Slurm's version and slurm.conf. The
phases are those measured on 22.05.8 and 25.11.7 (BENCHMARKS.md, bench/requeue_clock.py)."""
from __future__ import annotations

import os
import subprocess

from slurm_hooks.checks._config import default_config
from slurm_hooks.slurm.conffile import timings
from slurm_hooks.views import requeueclock as rc

DEFAULTS = timings({})          # KillWait 30, UnkillableStepTimeout 60, hold 120, sched_interval 60


def test_the_versions_that_keep_the_step_and_skip_the_hold():
    assert not rc.keeps_the_step("25.11.5") and rc.keeps_the_step("25.11.6") and rc.keeps_the_step("26.05.0")
    assert not rc.keeps_the_step("22.05.8")
    assert rc.down_skips_the_hold("22.05.8") and rc.down_skips_the_hold("23.11.10")
    assert not rc.down_skips_the_hold("23.11.11") and not rc.down_skips_the_hold("24.11.1")
    assert rc.down_skips_the_hold("24.11.0") and not rc.down_skips_the_hold("25.05.0")
    assert not rc.down_skips_the_hold("25.11.7")


def test_the_clock_phase_by_phase():
    # Slurm alone, 22.05: KillWait 30, gives up +61, leaves COMPLETING +10, hold +121, pass +0-60.
    assert rc.clock(DEFAULTS, "22.05.8", 60, False, False) == (222, 282)
    # 25.11.6+: the task never dies, the job never leaves COMPLETING.
    assert rc.clock(DEFAULTS, "25.11.7", 60, False, False) is None
    # Released at the first health check after the kill, then the hold and the pass.
    assert rc.clock(DEFAULTS, "25.11.7", 60, True, False) == (151, 271)
    # The hold ended by that run or the next: neither the hold nor the pass waited for.
    assert rc.clock(DEFAULTS, "25.11.7", 10, True, True) == (32, 52)
    assert rc.clock(DEFAULTS, "22.05.8", 60, False, True) == (103, 163)
    # 22.05 starts a job let go by a DOWN node at once (its bug).
    assert rc.clock(DEFAULTS, "22.05.8", 60, True, False) == (30, 150)


def test_config_check_prints_it_from_this_clusters_slurm_conf(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nKillWait=30\nHealthCheckInterval=60\n"
                    "SchedulerParameters=requeue_delay=5\n")
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(f"slurm: {{conf: {conf}, bin_dir: {tmp_path}}}\n")
    r = subprocess.run([os.path.join(os.path.dirname(__import__("sys").executable), "slurm-hooks"),
                        "config", "check", str(cfg_file)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("requeue clock"))
    # No scontrol here: the version is not known, so both of Slurm's answers are given.
    assert "requeue hold 5s" in lines[head] and "health check every 60s" in lines[head], lines[head]
    assert lines[head + 1] == ("  Slurm alone: 107 to 167 s up to 25.11.5; never while the task lives "
                               "(Slurm 25.11.6+ keeps its step) from 25.11.6")
    assert lines[head + 2] == "  these settings (release_node on, restart_now off): 36 to 156 s"


def test_the_lines_follow_the_settings():
    cfg = default_config()
    cfg.actions.release_node = False
    out = rc.lines({"killwait": "30"}, "25.11.7", cfg)
    assert out[1] == "  Slurm alone: never while the task lives (Slurm 25.11.6+ keeps its step)"
    assert out[2] == "  these settings (release_node off, restart_now off): never while the task lives " \
                     "(Slurm 25.11.6+ keeps its step)"
    assert rc.lines(None, "", cfg) == ["requeue clock: slurm.conf could not be read in time: not known"]
