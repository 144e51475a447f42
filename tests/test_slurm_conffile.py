"""What slurm.conf says, read from the file slurmd reads (slurm/conffile.py): no RPC, a
child with a deadline, Include lines followed."""
from __future__ import annotations

from slurm_hooks.core.state import StateStore
from slurm_hooks.host.runner import Runner
from slurm_hooks.slurm import conffile


def test_settings_as_slurm_reads_them():
    text = ("# a comment HealthCheckInterval=1\n"
            "ClusterName=c1\nhealthcheckinterval=120  # the node check\n"
            "HealthCheckInterval=5\n"                      # Slurm takes the first: so do we
            "NodeName=n[1-3] HealthCheckInterval=9 CPUs=2\n"
            "SchedulerParameters=requeue_delay=10,sched_interval=60\n"
            "broken line\n")
    got = conffile.settings(text)
    assert got["healthcheckinterval"] == "120" and got["clustername"] == "c1"
    assert got["schedulerparameters"] == "requeue_delay=10,sched_interval=60"
    assert "nodename" not in got


def test_the_file_and_its_includes(tmp_path, monkeypatch):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.conf").write_text("HealthCheckInterval=30\n")
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nInclude conf.d/*.conf\n")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    runner = Runner(StateStore(str(tmp_path / "state")))
    assert conffile.health_check_interval(str(tmp_path / "slurm.conf"), runner) == 30.0
    # The file SLURM_CONF names where slurm-hooks names none; none at all: nothing known.
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    assert conffile.candidates(None) == [str(tmp_path / "slurm.conf")]
    assert conffile.health_check_interval(None, runner) == 30.0
    assert conffile.health_check_interval(str(tmp_path / "missing.conf"), runner) == 0.0
    monkeypatch.delenv("SLURM_CONF")
    assert conffile.candidates(None) == list(conffile.DEFAULTS)
    # An Include that names itself is followed a few levels, never for ever.
    (tmp_path / "loop.conf").write_text("Include loop.conf\nHealthCheckInterval=7\n")
    assert conffile.health_check_interval(str(tmp_path / "loop.conf"), runner) == 7.0
    (tmp_path / "bad.conf").write_text("HealthCheckInterval=soon\n")
    assert conffile.health_check_interval(str(tmp_path / "bad.conf"), runner) is None


def test_the_interval_a_mounts_scope_waits(tmp_path):
    """`outage.interval`, else slurmd's HealthCheckInterval as slurm.conf says it (read
    once a day, kept in state), else 60 s (slurmd runs no periodic health check)."""
    from slurm_hooks.act import mounts
    from slurm_hooks.checks._config import default_config
    conf = tmp_path / "slurm.conf"
    conf.write_text("HealthCheckInterval=45\n")
    cfg = default_config(state_dir=str(tmp_path / "state"))
    cfg.slurm.conf = str(conf)
    state = StateStore(str(tmp_path / "state" / "n1"))
    assert mounts.interval(cfg, state) == 45.0
    conf.write_text("HealthCheckInterval=90\n")
    assert mounts.interval(cfg, state) == 45.0            # kept a day
    cfg.outage.interval = 12
    assert mounts.interval(cfg, state) == 12.0
    cfg.outage.interval = None
    conf.write_text("HealthCheckInterval=0\n")
    state.save(mounts.SLURM_CONFIG, {})
    assert mounts.interval(cfg, state) == mounts.DEFAULT_INTERVAL
    assert mounts.fresh_for(30) == 2 * 30 + mounts.FRESH_SLACK


def test_the_settings_a_requeued_jobs_clock_is_made_of():
    none = conffile.timings({})
    assert none == {"kill_wait": 30, "unkillable_step_timeout": 60, "hold": 120, "sched_interval": 60,
                    "health_check_interval": 0}, "Slurm's defaults"
    assert conffile.requeue_holds({}) == [120]
    found = conffile.settings("AuthInfo=use_client_ids,cred_expire=30\nKillWait=10\nUnkillableStepTimeout=120\n"
                              "SchedulerParameters=bf_interval=5,requeue_delay=5,sched_interval=20\n")
    # requeue_delay is read from 25.11.0 on; 22.05 holds a requeued job for cred_expire.
    assert conffile.timings(found, "25.11.7")["hold"] == 5
    assert conffile.timings(found, "22.05.8")["hold"] == 30
    assert conffile.requeue_holds(found) == [5, 30]        # the version not known: either
    t = conffile.timings(found, "25.11.7")
    assert (t["kill_wait"], t["unkillable_step_timeout"], t["sched_interval"]) == (10, 120, 20)
    # Slurm refuses a cred_expire below 5 and keeps its default.
    assert conffile.requeue_holds(conffile.settings("AuthInfo=cred_expire=2\n")) == [120]
