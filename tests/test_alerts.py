"""The Prometheus alerting rules (packaging/prometheus/slurm-hooks-rules.yml), checked
and unit-tested with promtool on series the health check really wrote: a read-only
filesystem on three nodes (an outage) and a missing mount on a fourth, a GPU that needs
a reset and a driver that does not answer (NVML faked at the pynvml module boundary), a
job's task stuck in D on a hung FUSE mount, and, on the Slurm test cluster, a real drain
and a drain the breaker held back.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from helpers import ROOT, gpu, poll, proc_state
from mounts_fixtures import require_fuse, require_mount_privileges, start_fuse, start_tmpfs
from promseries import RULES, Node, alert, input_series, promtool_test, scrape_labels

FAKE_NVML = ROOT / "tests" / "fake_nvml"
OUTAGE_NODES = ("o1", "o2", "o3")
FREEZER = "/sys/fs/cgroup/freezer"


def test_promtool_check_rules():
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (bash tests/run.sh does)"
    r = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


# --- textfiles from real runs -------------------------------------------------------------

@pytest.fixture(scope="module")
def outage(tmp_path_factory):
    """Three nodes whose shared path is a read-only filesystem (EROFS), a fourth whose
    required mount is absent, and a healthy one; no Slurm: every drain fails."""
    require_mount_privileges()
    tmp = tmp_path_factory.mktemp("outage")
    ro = start_tmpfs(tmp / "shared", readonly=True, files={"probe/": None})
    try:
        shared = os.path.join(ro.path, "probe")
        nodes = {n: Node(n, tmp / n, {"filesystems": [{"path": shared}]}) for n in OUTAGE_NODES}
        (tmp / "local").mkdir()
        nodes["f1"] = Node("f1", tmp / "f1", {"filesystems": [{"path": str(tmp / "local"),
                                                               "mountpoint": str(tmp / "scratch")}]})
        nodes["ok1"] = Node("ok1", tmp / "ok1", {"filesystems": [{"path": str(tmp / "local")}]})
        for _ in range(2):          # two runs: the failed-drain counters grow
            for node in nodes.values():
                node.healthcheck()
    finally:
        ro.close()
    return nodes, shared, str(tmp / "local")


def test_outage_alerts_once_per_path_and_a_lone_failure_per_node(outage, tmp_path):
    nodes, shared, local = outage
    for n in OUTAGE_NODES:
        assert [(s.labels["path"], s.labels["status"]) for s in nodes[n].last("slurm_hooks_filesystem_probe_info")] \
            == [(shared, "error")]
    assert [(s.labels["path"], s.labels["status"]) for s in nodes["f1"].last("slurm_hooks_filesystem_probe_info")] \
        == [(local, "missing")]
    series = [s for n, node in nodes.items() for s in input_series([(0, node.snapshots[-1])], n, 10)]
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SlurmHooksFilesystemOutage",
             "exp_alerts": [alert("SlurmHooksFilesystemOutage", f"Filesystem {shared} failing on 3 nodes",
                                  path=shared)]},
            # The outage's own nodes are left out; the lone failure is not.
            {"eval_time": "5m", "alertname": "SlurmHooksFilesystemFailing",
             "exp_alerts": [alert("SlurmHooksFilesystemFailing", f"Filesystem {local} missing on node f1",
                                  path=local, status="missing", **scrape_labels("f1"))]},
            {"eval_time": "5m", "alertname": "SlurmHooksNodeDrained", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "SlurmHooksHealthCheckStale", "exp_alerts": []},
        ]}])


def test_two_failing_paths_are_no_outage(outage, tmp_path):
    """Two nodes failing the same path are two node alerts, not an outage."""
    nodes, shared, _ = outage
    series = [s for n in OUTAGE_NODES[:2] for s in input_series([(0, nodes[n].snapshots[-1])], n, 10)]
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SlurmHooksFilesystemOutage", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "SlurmHooksFilesystemFailing",
             "exp_alerts": [alert("SlurmHooksFilesystemFailing", f"Filesystem {shared} error on node {n}",
                                  path=shared, status="error", **scrape_labels(n)) for n in OUTAGE_NODES[:2]]},
        ]}])


def test_failing_actions_alert_while_the_counter_grows(outage, tmp_path):
    nodes, _, _ = outage
    o1 = nodes["o1"]
    counts = [[s.value for s in snap if s.name == "slurm_hooks_actions_total"
               and s.labels == {"node": "o1", "kind": "drain", "outcome": "failed"}] for snap in o1.snapshots]
    assert counts == [[1.0], [2.0]], counts
    # Run 1 at minute 0, run 2 at minute 2, and no failures after that.
    history = [(0, o1.snapshots[0]), (2, o1.snapshots[1])]
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series(history, "o1", 40),
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SlurmHooksActionsFailing",
             "exp_alerts": [alert("SlurmHooksActionsFailing", "slurm-hooks could not drain on node o1 (1 failed in 15m)",
                                  kind="drain", outcome="failed", **scrape_labels("o1"))]},
            {"eval_time": "30m", "alertname": "SlurmHooksActionsFailing", "exp_alerts": []},
        ]}])


def test_health_check_stale_or_gone(outage, tmp_path):
    """ok1 stops running at minute 0 (its textfile stays: stale); f1 keeps running for
    10 minutes, then its textfile is removed (gone)."""
    nodes, _, _ = outage
    ok1, f1 = nodes["ok1"].snapshots[-1], nodes["f1"].snapshots[-1]
    f1_history = [(m, f1) for m in range(0, 11, 2)] + [(12, None)]
    series = input_series([(0, ok1)], "ok1", 40) + input_series(f1_history, "f1", 40)
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": "SlurmHooksHealthCheckStale", "exp_alerts": []},
            {"eval_time": "11m", "alertname": "SlurmHooksHealthCheckStale",
             "exp_alerts": [alert("SlurmHooksHealthCheckStale",
                                  "slurm-hooks health check has not run on node ok1 for 11m 0s",
                                  hook="healthcheck", **scrape_labels("ok1"))]},
            {"eval_time": "20m", "alertname": "SlurmHooksHealthCheckAbsent", "exp_alerts": []},
            {"eval_time": "30m", "alertname": "SlurmHooksHealthCheckAbsent",
             "exp_alerts": [alert("SlurmHooksHealthCheckAbsent", "slurm-hooks metrics of node f1 are gone",
                                  hook="healthcheck", **scrape_labels("f1"))]},
        ]}])


# --- a failing GPU ------------------------------------------------------------------------

def test_failing_gpu_alerts_naming_the_gpu(tmp_path):
    scenario = tmp_path / "nvml.json"
    gpus = [gpu(i) for i in range(8)]
    gpus[3]["errors"] = {"nvmlDeviceGetPowerUsage": "RESET_REQUIRED"}
    scenario.write_text(json.dumps({"gpus": gpus}))
    node = Node("g1", tmp_path / "g1", {"filesystems": [{"path": str(tmp_path)}],
                                         "gpu": {"enabled": "true", "count": 8, "timeout": 5}},
                env={"PYTHONPATH": str(FAKE_NVML), "FAKE_NVML_SCENARIO": str(scenario)})
    node.healthcheck()
    health = {(s.labels["gpu"], s.labels["pci"]): s.value for s in node.last("slurm_hooks_gpu_health")}
    assert health.get(("3", "0000:3e:00.0")) == 2 and sum(health.values()) == 2, health
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series([(0, node.snapshots[-1])], "g1", 5),
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "SlurmHooksGpuFailing",
             "exp_alerts": [alert("SlurmHooksGpuFailing", "GPU 3 (0000:3e:00.0) failing on node g1",
                                  gpu="3", pci="0000:3e:00.0", **scrape_labels("g1"))]},
            # Named by the per-GPU alert: no second alert for the same failure.
            {"eval_time": "2m", "alertname": "SlurmHooksGpuCheckFailing", "exp_alerts": []},
        ]}])


def test_unresponsive_driver_alerts_for_the_node(tmp_path):
    scenario = tmp_path / "nvml.json"
    scenario.write_text(json.dumps({"gpus": [gpu(i) for i in range(2)],
                                    "hang": {"call": "nvmlDeviceGetPowerUsage", "index": 1}}))
    node = Node("g2", tmp_path / "g2", {"filesystems": [{"path": str(tmp_path)}],
                                         "gpu": {"enabled": "true", "count": 2, "timeout": 1}},
                env={"PYTHONPATH": str(FAKE_NVML), "FAKE_NVML_SCENARIO": str(scenario)})
    node.healthcheck()
    assert [s.value for s in node.last("slurm_hooks_check_status") if s.labels["check"] == "gpu"] == [2]
    assert not [s for s in node.last("slurm_hooks_gpu_health") if s.value == 2]
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series([(0, node.snapshots[-1])], "g2", 5),
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "SlurmHooksGpuCheckFailing",
             "exp_alerts": [alert("SlurmHooksGpuCheckFailing", "GPU check failing on node g2",
                                  check="gpu", **scrape_labels("g2"))]},
        ]}])


# --- a job's task stuck in D ----------------------------------------------------------------

# Joins the job's cgroup (where slurmstepd would have put it), then blocks in D.
STUCK_RANK = """
import os, sys
with open(sys.argv[2], "w") as f:
    f.write(str(os.getpid()))
open(sys.argv[1] + "/run/main_log.txt", "a")
"""


def test_stuck_task_alert_names_the_job(tmp_path):
    require_fuse()
    if not os.path.isdir(FREEZER):
        pytest.fail(f"{FREEZER} missing: the cgroup v1 freezer hierarchy is needed for job attribution")
    node_name, job = "s1", "4242"
    cgroup = os.path.join(FREEZER, f"slurm_{node_name}", "uid_0", f"job_{job}", "step_0")
    hung = start_fuse(tmp_path / "hung", "unanswered")
    proc = None
    try:
        os.makedirs(cgroup, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", STUCK_RANK, hung.path, os.path.join(cgroup, "cgroup.procs")],
                                start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        poll(lambda: proc_state(proc.pid) == "D", 10, what="the rank in D")
        node = Node(node_name, tmp_path / node_name,
                    {"filesystems": [{"path": str(tmp_path)}],
                     "stuck_tasks": {"enabled": True, "grace": 1, "sample_window": 0.3}})

        def stuck():
            node.healthcheck()      # (other D tasks on this host show as job="")
            return [s for s in node.last("slurm_hooks_stuck_tasks") if s.labels["slurm_job"] == job]
        got = poll(stuck, 30, interval=0.5, what=f"slurm_hooks_stuck_tasks{{slurm_job={job!r}}} in the textfile")
        assert [s.value for s in got] == [1.0], got
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
        hung.close()            # aborts the connection: the rank leaves D and dies
        if proc is not None:
            proc.wait(10)
        for d in (cgroup, os.path.dirname(cgroup), os.path.dirname(os.path.dirname(cgroup)),
                  os.path.join(FREEZER, f"slurm_{node_name}")):
            try:
                os.rmdir(d)
            except OSError:
                pass
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series([(0, node.snapshots[-1])], node_name, 5),
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "SlurmHooksStuckTask",
             "exp_alerts": [alert("SlurmHooksStuckTask",
                                  f"1 task(s) of job {job} stuck in uninterruptible sleep on node {node_name}",
                                  slurm_job=job, **scrape_labels(node_name))]},
            {"eval_time": "1m", "alertname": "SlurmHooksStuckTaskOutsideJob", "exp_alerts": []},
        ]}])


# --- drains on the Slurm test cluster ---------------------------------------------------------

@pytest.mark.cluster
def test_drained_node_and_the_breaker_on_the_cluster(clean_cluster, tmp_path):
    """n1's required mount is absent: slurm-hooks drains it. With a limit of one drained
    node, n2's drain for the same cause is then held back by the breaker."""
    (tmp_path / "data").mkdir()
    settings = {"filesystems": [{"path": str(tmp_path / "data"), "mountpoint": str(tmp_path / "scratch")}],
                "slurm": clean_cluster.hooks_slurm(timeout=10),
                "policy": {"max_drained_nodes": 1, "max_drained_fraction": 0}}
    n1 = Node("n1", tmp_path / "n1", settings)
    n2 = Node("n2", tmp_path / "n2", settings)
    n1.healthcheck()
    [drained] = n1.last("slurm_hooks_drained")
    reason = drained.labels["reason"]
    assert drained.value == 1 and reason.startswith("fs ") and reason.endswith(" [slurm-hooks]"), drained
    assert clean_cluster.show_node("n1")["Reason"].startswith(reason), clean_cluster.show_node("n1")
    n2.healthcheck()
    n2.healthcheck()
    assert [s.value for s in n2.last("slurm_hooks_drained")] == [0]
    held = [s.value for s in n2.last("slurm_hooks_actions_total") if s.labels["outcome"] == "held"
            and s.labels["kind"] == "drain"]
    assert held == [2.0], n2.snapshots[-1]
    series = (input_series([(0, n1.snapshots[-1])], "n1", 10)
              + input_series([(0, n2.snapshots[0]), (2, n2.snapshots[1])], "n2", 10))
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "SlurmHooksNodeDrained",
             "exp_alerts": [alert("SlurmHooksNodeDrained", f"Node n1 drained by slurm-hooks: {reason}",
                                  reason=reason, **scrape_labels("n1"))]},
            {"eval_time": "3m", "alertname": "SlurmHooksDrainBreakerOpen",
             "exp_alerts": [alert("SlurmHooksDrainBreakerOpen",
                                  "slurm-hooks drain-storm breaker is holding back drains of 1 node(s)")]},
        ]}])


def test_a_configuration_that_does_not_load_alerts_at_once(tmp_path):
    """A run that cannot load its configuration says so in the node's textfile (the
    directory the broken file names), and the alert fires at the next evaluation; the
    next good run clears it."""
    from promseries import SLURM_HOOKS, Node, parse
    node = Node("cfg1", tmp_path / "cfg1")
    good = node.config.read_text()
    node.config.write_text(good + "filesystem_defaults: {timeout: soon}\n")
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(node.config), "healthcheck"], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "cfg1"})
    assert "configuration error" in r.stderr, r.stderr
    broken = parse((node.textfile_dir / "slurm_hooks_cfg1.prom").read_text())
    assert [(s.name, s.value) for s in broken if s.name == "slurm_hooks_config_ok"] == [("slurm_hooks_config_ok", 0.0)]
    node.config.write_text(good)
    fixed = node.healthcheck()
    assert [s.value for s in fixed if s.name == "slurm_hooks_config_ok"] == [1.0]
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series([(0, broken), (5, fixed)], "cfg1", 8),
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "SlurmHooksConfigBroken",
             "exp_alerts": [alert("SlurmHooksConfigBroken", "slurm-hooks on node cfg1 cannot load its configuration",
                                  hook="healthcheck", **scrape_labels("cfg1"))]},
            {"eval_time": "6m", "alertname": "SlurmHooksConfigBroken", "exp_alerts": []},
        ]}])
