"""The storage of the whole cluster stops, then comes back, on the real cluster: one
network mount (root's FUSE mount, allow_other; its server stops answering after INIT,
so callers wait asleep in S), probed on all three nodes with `recover: fuse-abort` set,
drain limit 1. An unprivileged user's job reads from it every step.

The same mount hung on every node is one outage: no reboot and no abort anywhere, at
most the breaker's drain, one outage named in the journal and `status`; once the
storage answers every node is back in service by itself within three runs, and the
job is not lost."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from attacker import PY
from helpers import SLURM_HOOKS, journal, write_node_configs
from mounts_fixtures import start_fuse
from promseries import alert, input_series, parse, promtool_test
from test_security import mallory, mallory_session, sbatch_as  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster
INTERVAL = 3

READER = """
import os, sys, time
fd = os.open(sys.argv[1] + "/shard", os.O_RDONLY)
while True:
    os.fsync(fd)
    time.sleep(0.05)
"""


def actions(root, node, kind):
    return [a for r in journal(root, node) for a in r["actions"] if a["kind"] == kind]


def test_the_storage_of_the_whole_cluster_stops_then_answers_again(clean_cluster, mallory, mallory_session,  # noqa: F811
                                                                   tmp_path):
    cluster = clean_cluster
    m = start_fuse(mallory_session.base / f"gpfs-{time.monotonic_ns()}", "ok")
    try:
        Path(m.path, "shard").write_bytes(b"x" * 8192)
        marker = tmp_path / "rebooted"
        reboot = tmp_path / "reboot-program"
        reboot.write_text(f"#!/bin/sh\necho rebooted >> {marker}\n")
        reboot.chmod(0o755)
        fs = {"path": str(m.path), "mountpoint": str(m.path), "timeout": 1, "mode": "read",
              "recover": {"method": "fuse-abort", "wait": 5}}
        textfiles = tmp_path / "textfile"
        textfiles.mkdir(mode=0o755)
        wrapper = write_node_configs(tmp_path, cluster, {}, {
            "prometheus_textfile_dir": str(textfiles),
            "filesystems": [{"path": str(tmp_path)}, fs],
            "stuck_tasks": {"grace": 2, "sample_window": 0.5},
            "policy": {"resume_after": 1, "max_drained_nodes": 1, "max_drained_fraction": 0}})
        reader = mallory.write("reader.py", READER, 0o644)
        job = sbatch_as(mallory, cluster, f"exec {PY} {reader} {m.path}\n", "--requeue")
        cluster.wait_for(lambda: cluster.show_job(job).get("JobState") == "RUNNING", 30, what="the job running")
        cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                            f"HealthCheckNodeState=ANY\nRebootProgram={reboot}\n")
        frozen = time.monotonic()
        m.stall()

        def named():
            return [n for node in cluster.nodes for r in journal(tmp_path, node) for n in r.get("notes", [])
                    if n.startswith("outage of ") and " on 3 nodes since " in n]
        cluster.wait_for(named, 8 * INTERVAL + 20, what="the outage named")
        # Several failing runs on every node: still no abort, no reboot.
        time.sleep(3 * INTERVAL)
        for node in cluster.nodes:
            assert not [a for a in actions(tmp_path, node, "recover") if a["outcome"] == "done"], node
            assert not [a for a in actions(tmp_path, node, "reboot") if a["outcome"] == "done"], node
        assert not marker.exists()
        # The metrics name it on every node, and one alert for the mount, not the
        # nodes' filesystem alerts.
        [line] = set(named())
        snaps = {n: parse((textfiles / f"slurm_hooks_{n}.prom").read_text()) for n in cluster.nodes}
        for node, snap in snaps.items():
            [o] = [s for s in snap if s.name == "slurm_hooks_storage_outage_nodes"]
            assert o.value == 3 and o.labels["mountpoint"] == str(m.path), (node, o)
            assert line.startswith(f"outage of {o.labels['source']} ({m.path}) on 3 nodes since "), (line, o)
        promtool_test(tmp_path, [{
            "interval": "1m",
            "input_series": [s for n, snap in snaps.items() for s in input_series([(0, snap)], n, 5)],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "SlurmHooksStorageOutage",
                 "exp_alerts": [alert("SlurmHooksStorageOutage",
                                      f"outage of {o.labels['source']} ({m.path}) on 3 nodes since "
                                      "1970-01-01 00:00:00 +0000 UTC",
                                      **{k: o.labels[k] for k in ("source", "fstype", "mountpoint")})]},
                {"eval_time": "3m", "alertname": "SlurmHooksFilesystemOutage", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "SlurmHooksFilesystemFailing", "exp_alerts": []},
            ]}])
        drained = [n for n in cluster.nodes if "DRAIN" in cluster.node_state(n)]
        assert len(drained) <= 1, drained
        for node in drained:
            # `explain` on the drained node names the scope: the storage's, not the node's.
            out = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "conf" / f"{node}.yaml"), "explain"],
                                 capture_output=True, text=True, timeout=60, env={"SLURMD_NODENAME": node}).stdout
            assert "scope: outage of " in out and "auto-resume: yes" in out, out
        held = [a for node in cluster.nodes for a in actions(tmp_path, node, "recover") + actions(tmp_path, node, "reboot")
                if a["code"] == "outage"]
        assert held, "no recovery or reboot was held for the outage"
        # The storage answers: every node back in service within three runs.
        m.resume()
        answered = time.monotonic()
        cluster.wait_for(lambda: not [n for n in cluster.nodes if "DRAIN" in cluster.node_state(n)],
                         3 * INTERVAL + 15, what="every node back in service")
        back = time.monotonic() - answered
        # The job is not lost: running on, or requeued and running again.
        cluster.wait_for(lambda: cluster.show_job(job).get("JobState") == "RUNNING", 60, what="the job running again")
        assert cluster.show_job(job).get("JobState") != "FAILED"
        print(f"freeze {answered - frozen:.0f}s; back in service {back:.1f}s after the storage answered; "
              f"job restarts {cluster.show_job(job).get('Restarts')}")
    finally:
        m.resume()
        m.close()


def test_a_reboot_asked_before_the_outage_was_known_is_withdrawn(clean_cluster, mallory, mallory_session,  # noqa: F811
                                                                 tmp_path):
    """n1 alone probes the mount when its server stops: one interval later, no other node
    naming it, it is n1's fault: the job is requeued, its killed reader stays in D, the
    reboot is asked (n1 COMPLETING: requested, not issued). Then the other nodes look at
    the same mount and name it: an outage after all. n1 withdraws its own reboot
    (`scontrol cancel_reboot`), stays drained, resumable, and is back in service with the
    others once the storage answers; RebootProgram never runs."""
    import yaml
    cluster = clean_cluster
    m = start_fuse(mallory_session.base / f"gpfs-{time.monotonic_ns()}", "ok")
    try:
        Path(m.path, "shard").write_bytes(b"x" * 8192)
        marker = tmp_path / "rebooted"
        reboot = tmp_path / "reboot-program"
        reboot.write_text(f"#!/bin/sh\necho rebooted >> {marker}\n")
        reboot.chmod(0o755)
        fs = {"path": str(m.path), "mountpoint": str(m.path), "timeout": 1, "mode": "read"}
        common = {"filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"grace": 2, "sample_window": 0.5},
                  "policy": {"resume_after": 1, "max_drained_nodes": 3}}
        wrapper = write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(tmp_path)}, fs]}}, common)
        reader = mallory.write("reader.py", READER, 0o644)
        job = sbatch_as(mallory, cluster, f"exec {PY} {reader} {m.path}\n", "--requeue")
        cluster.wait_for(lambda: cluster.show_job(job).get("JobState") == "RUNNING", 30, what="the job running")
        cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                            f"HealthCheckNodeState=ANY\nRebootProgram={reboot}\n")
        m.stall()
        cluster.wait_for(lambda: [a for a in actions(tmp_path, "n1", "reboot") if a["outcome"] == "done"],
                         12 * INTERVAL + 30, what="n1's reboot asked")
        assert "REBOOT_REQUESTED" in cluster.node_state("n1") and not marker.exists()
        # The others look at the same mount now (what a slower spread of the outage is).
        for n in ("n2", "n3"):
            path = tmp_path / "conf" / f"{n}.yaml"
            doc = yaml.safe_load(path.read_text())
            doc["filesystems"].append(fs)
            path.write_text(yaml.safe_dump(doc))
        [w] = cluster.wait_for(lambda: [a for a in actions(tmp_path, "n1", "cancel_reboot") if a["outcome"] == "done"],
                               6 * INTERVAL + 20, what="n1's reboot withdrawn")
        assert w["code"] == "withdrawn" and w["reason"].startswith(f"outage of fusefs-ok ({m.path}) on "), w
        state = cluster.node_state("n1")
        assert "REBOOT" not in state and "DRAIN" in state, state
        out = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "conf" / "n1.yaml"), "explain"],
                             capture_output=True, text=True, timeout=60, env={"SLURMD_NODENAME": "n1"}).stdout
        assert "cancel_reboot done" in out and "auto-resume: yes" in out, out
        m.resume()
        cluster.wait_for(lambda: not [n for n in cluster.nodes if "DRAIN" in cluster.node_state(n)],
                         6 * INTERVAL + 30, what="every node back in service")
        cluster.wait_for(lambda: cluster.show_job(job).get("JobState") == "RUNNING", 90, what="the job running again")
        assert not marker.exists()
    finally:
        m.resume()
        m.close()
