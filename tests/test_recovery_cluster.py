"""The night ends without a reboot, on the real cluster: an unprivileged user's job is
stuck for good on the node's FUSE mount, whose server read its request and never
answers (callers stay in D after SIGKILL, like on a dead GPFS or NFS server). slurmd
runs the health check every few seconds; with `recover: fuse-abort` the node is drained,
the job requeued, the connection aborted, the task freed, the mount brought back and the
node resumed, and no reboot is asked for. A recovery that does not bring the mount back
ends in the reboot, saying recovery was tried."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from attacker import PY
from helpers import journal, write_node_configs
from mounts_fixtures import start_fuse
from promseries import alert, input_series, parse, promtool_test, scrape_labels
from test_security import mallory, mallory_session, sbatch_as  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster
HERE = Path(__file__).resolve().parent
INTERVAL, GRACE = 3, 2


def actions(root, node, kind):
    """The node's actions of `kind` that were tried: not those held (the mount's scope
    not known yet, decide/mount_incident.py), which nothing has done."""
    return [a for r in journal(root, node) for a in r["actions"] if a["kind"] == kind and a["outcome"] != "held"]


@pytest.fixture
def node_mount(mallory_session):  # noqa: F811
    """The node's own FUSE mount (root's, allow_other) where the user can reach it; its
    server reads requests and never answers them."""
    m = start_fuse(mallory_session.base / f"scratch-{time.monotonic_ns()}", "stuck")
    ready = Path(str(m.path) + ".remount.ready")
    yield m, ready
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(ready.read_text().strip() or 0), signal.SIGKILL)
    m.close()


def enable(cluster, tmp_path, m, remount, extra_conf="", prom=None):
    marker = tmp_path / "rebooted"
    reboot = tmp_path / "reboot-program"
    reboot.write_text(f"#!/bin/sh\necho rebooted >> {marker}\n")
    reboot.chmod(0o755)
    fs = {"path": str(m.path), "mountpoint": str(m.path), "timeout": 1,
          "recover": {"method": "fuse-abort", "remount": remount, "wait": 5}}
    n1 = {"filesystems": [fs], **({"prometheus_textfile_dir": str(prom)} if prom else {})}
    wrapper = write_node_configs(tmp_path, cluster, {"n1": n1}, {
        "filesystems": [{"path": str(tmp_path)}],
        "stuck_tasks": {"grace": GRACE, "sample_window": 0.5}, "policy": {"resume_after": 1}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                        f"HealthCheckNodeState=ANY\nRebootProgram={reboot}\n" + extra_conf)
    return marker


def stuck_job(cluster, user, m) -> int:
    return sbatch_as(user, cluster, f"exec {PY} -c 'open(\"{m.path}/main_log.txt\", \"a\").write(\"x\")'\n",
                     "--requeue")


def test_the_night_ends_without_a_reboot(clean_cluster, mallory, node_mount, tmp_path):  # noqa: F811
    cluster = clean_cluster
    m, ready = node_mount
    marker = enable(cluster, tmp_path, m, [sys.executable, str(HERE / "remount_fuse.py"), "ok",
                                           "{mountpoint}", str(ready)])
    job = stuck_job(cluster, mallory, m)
    cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n1"), GRACE + 3 * INTERVAL + 10, what="n1 drained")
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 3 * INTERVAL + 10, what="requeued")
    [rec] = cluster.wait_for(lambda: actions(tmp_path, "n1", "recover"), 4 * INTERVAL + 15, what="a recovery")
    assert (rec["outcome"], rec["code"]) == ("done", "recovered"), rec["message"]
    assert rec["message"].startswith(f"recovered without reboot (fuse-abort {m.path}, 1 task freed"), rec["message"]
    # The mount is back (a fresh server) and the node in service again, by itself.
    cluster.wait_for(lambda: "DRAIN" not in cluster.node_state("n1"), 3 * INTERVAL + 10, what="n1 resumed")
    assert ready.exists()
    assert not actions(tmp_path, "n1", "reboot") and not marker.exists()
    assert "REBOOT" not in cluster.node_state("n1")
    comment = cluster.show_job(job)["AdminComment"]
    assert f"job {job}" in comment and "recovered without reboot (fuse-abort" in comment, [(a["outcome"], a["code"], a["message"][:150], a["text"][-80:]) for a in actions(tmp_path, "n1", "comment")]
    assert all(r["status"] != "unhealthy" for n in ("n2", "n3") for r in journal(tmp_path, n))


def test_a_recovery_that_does_not_bring_the_mount_back_ends_in_the_reboot(clean_cluster, mallory, node_mount,  # noqa: F811
                                                                           tmp_path):
    cluster = clean_cluster
    m, _ = node_mount
    prom = tmp_path / "prom"
    prom.mkdir()
    enable(cluster, tmp_path, m, ["/bin/false"], prom=prom)
    stuck_job(cluster, mallory, m)
    [rec] = cluster.wait_for(lambda: actions(tmp_path, "n1", "recover"), GRACE + 8 * INTERVAL + 20,
                             what="a recovery")
    assert (rec["outcome"], rec["code"]) == ("done", "not_recovered") and "remount: exit 1" in rec["message"], rec
    reboots = cluster.wait_for(lambda: actions(tmp_path, "n1", "reboot"), 4 * INTERVAL + 10, what="the reboot")
    assert reboots[0]["outcome"] == "done", reboots
    assert reboots[0]["reason"].endswith(f"(recovery tried: fuse-abort {m.path}) [slurm-hooks]"), reboots[0]["reason"]
    assert "REBOOT" in cluster.node_state("n1")
    assert len(actions(tmp_path, "n1", "recover")) == 1, "once per incident"
    cluster.scontrol("cancel_reboot", "n1", check=False)
    # The counter a real run wrote, and the alert on it (promtool).
    samples = parse((prom / "slurm_hooks_n1.prom").read_text())
    assert [(s.labels["mount"], s.labels["outcome"], s.value) for s in samples
            if s.name == "slurm_hooks_recoveries_total"] == [(str(m.path), "failed", 1.0)]
    before = [s for s in samples if s.name != "slurm_hooks_recoveries_total"]
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series([(0, before), (3, samples)], "n1", 40),
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SlurmHooksRecoveryFailed",
             "exp_alerts": [alert("SlurmHooksRecoveryFailed",
                                  f"Recovery of {m.path} without a reboot failed on node n1",
                                  mount=str(m.path), outcome="failed", **scrape_labels("n1"))]},
            {"eval_time": "40m", "alertname": "SlurmHooksRecoveryFailed", "exp_alerts": []}]}])
