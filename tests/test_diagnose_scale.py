"""Scale, on a 32-node test cluster (32 `slurmd -N` on this host): `diagnose` of a
32-node job names the one odd rank within 10 s; 32 simultaneous health checks during
one filesystem outage drain no more nodes than the breaker allows, `status` shows one
outage, and each failing run costs slurmctld one RPC when held, three when it drains (sdiag)."""
from __future__ import annotations

import collections
import json
import subprocess
import sys
import time

import pytest
import yaml
from helpers import BIN, NODE_RPCS, SLURM_HOOKS, healthchecks_at_once, lock_ranks, sdiag_counts, write_node_configs

pytestmark = [pytest.mark.cluster, pytest.mark.scale]

RANKS = lock_ranks(17, sleep=1)     # rank 17 waits on a lock, the rest in the barrier


def test_diagnose_of_a_32_node_job_names_the_odd_rank_within_10s(cluster32, sshd, tmp_path):
    cluster = cluster32
    n = len(cluster.nodes)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "ranks.py").write_text(RANKS)
    job = cluster.sbatch(f"-N{n}", "-o", str(tmp_path / "job.out"), script=(
        f"#!/bin/sh\nsrun -N{n} --ntasks-per-node=1 {sys.executable} {tmp_path}/ranks.py {barrier}\n"))
    try:
        cluster.wait_for(lambda: len(list(barrier.glob("started.*"))) >= n, 90, what="all ranks started")
        conf = tmp_path / "diag.yaml"
        # root's fan-out: ClusterShell over ssh, 32 connections at once (the session's sshd).
        conf.write_text(yaml.safe_dump({"journal": str(tmp_path / "j.jsonl"), "state_dir": str(tmp_path / "st"),
                                        "slurm": cluster.hooks_slurm(),
                                        "diagnose": {"ssh_options": sshd.options()}}))
        env = {"PATH": "/usr/bin:/bin", "SLURM_HOOKS_CONFIG": str(conf)}
        t0 = time.monotonic()
        r = subprocess.run([str(SLURM_HOOKS), "diagnose", str(job), "--timeout", "10"], env=env,
                           capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stdout + r.stderr
        assert took < 10, took
        assert r.stdout.splitlines()[0].endswith("through ClusterShell over ssh as root"), r.stdout
        summary = r.stdout.splitlines()[1].strip()
        assert summary.startswith("rank 17 on s18 is waiting in take_checkpoint_lock (ranks.py)"), r.stdout
        assert "ranks 0-16,18-31 on s1,s2,s3,... (31 nodes) waiting in wait_in_barrier (ranks.py)" in summary
        assert "(31 of 32)" in summary
    finally:
        cluster.cancel_all()


def test_simultaneous_health_checks_in_one_outage_respect_the_breaker(cluster32, hung_mount, tmp_path):
    cluster = cluster32
    limit = 3
    conf_dir = tmp_path / "conf"
    write_node_configs(tmp_path, cluster, {}, {
        "slurm": cluster.hooks_slurm(timeout=20),
        "filesystems": [{"path": str(hung_mount.path), "timeout": 2, "mode": "read"}],
        "stuck_tasks": {"enabled": False}, "gpu": {"enabled": "false"},
        "prometheus_textfile_dir": None, "syslog": False,
        "policy": {"max_drained_nodes": limit, "max_drained_fraction": 0}})
    cluster.run("sdiag", "-r")
    before = sdiag_counts(cluster)
    # Started at the same moment, as slurmd starts HealthCheckProgram without CYCLE.
    def simultaneous_runs():
        procs = [subprocess.Popen([str(BIN / "slurm-hooks-healthcheck")], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  env={"SLURMD_NODENAME": node,
                                       "SLURM_HOOKS_CONFIG": str(conf_dir / f"{node}.yaml")})
                 for node in cluster.nodes]
        return [p.communicate(timeout=120)[0] for p in procs]

    def drained_nodes():
        return [n for n, info in cluster.show_nodes().items() if "DRAIN" in info.get("State", "")]

    outs = simultaneous_runs()
    after = sdiag_counts(cluster)
    first = {node: json.loads((tmp_path / f"journal-{node}.jsonl").read_text().splitlines()[0])
             for node in cluster.nodes}
    try:
        # Within the limit after this one round: every re-read waited for the second of
        # its drain to pass, so it saw every node ahead of it in the stable order.
        drained = drained_nodes()
        assert len(drained) == limit, (drained, outs[:2])
        # Every node's run failed and says so; the ones not drained say the breaker held them.
        runs = {}
        for node in cluster.nodes:
            for line in (tmp_path / f"journal-{node}.jsonl").read_text().splitlines():
                if json.loads(line).get("event") == "run":
                    runs[node] = json.loads(line)          # the node's last run
        runs = list(runs.values())
        assert len(runs) == len(cluster.nodes) and all(r["status"] == "unhealthy" for r in runs)
        held = [r for r in runs if any(a["kind"] == "drain" and a["outcome"] == "held" for a in r["actions"])]
        assert len(held) == len(cluster.nodes) - len(drained)
        # `status` shows one outage naming the filesystem.
        st = subprocess.run([str(SLURM_HOOKS), "status"], env={
            "SLURM_HOOKS_CONFIG": str(conf_dir / "s1.yaml"), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=60).stdout
        assert st.count("OUTAGE") == 1 and f"filesystem {hung_mount.path}: OUTAGE on {len(drained)} nodes" in st, st
        # What slurmctld paid for the first round (sdiag itself excluded), and what each
        # run cost: a held run reads the node list (1: REQUEST_NODE_INFO, no partition
        # list) and, the first time, names its suspect mount in its Comment (1: the
        # others tell the outage by it); a run that drains also drains (1) and re-reads
        # (1); one that then finds itself beyond the limit in the stable order undrains
        # (1, keeping its suspect mount in the same update).
        # (slurmd's own messages to slurmctld, MESSAGE_NODE_REGISTRATION_STATUS, left out)
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after
                 if k.startswith("REQUEST_") and after.get(k, 0) - before.get(k, 0) > 0}
        cost = {}
        for node, rec in first.items():
            [drain] = [a for a in rec["actions"] if a["kind"] == "drain"]
            stepped = drain["outcome"] == "held" and "stepped back" in drain["message"]
            cost[node] = 2 if drain["outcome"] == "held" and not stepped else 3 if drain["outcome"] == "done" else 4
        print(f"RPCS {sum(spent.values())} for {len(cluster.nodes)} failing runs: {spent}; "
              f"per run: {sorted(collections.Counter(cost.values()).items())}")
        assert set(spent) <= set(NODE_RPCS) and "REQUEST_PARTITION_INFO" not in spent, spent
        drains = sum(1 for c in cost.values() if c >= 3)
        assert spent.get("REQUEST_NODE_INFO", 0) == len(cluster.nodes) + drains, (spent, cost)
        assert spent.get("REQUEST_UPDATE_NODE", 0) == drains + sum(1 for c in cost.values() if c in (2, 4)), (spent, cost)
        assert spent.get("REQUEST_NODE_INFO_SINGLE", 0) == 0, spent
        # Every run that does not step back after a real race costs at most 3; one that
        # does, 4 (its drain had to be visible before it could know it came too late).
        assert all(c <= 3 for c in cost.values() if c != 4), cost
        # Every node, drained or held, names the mount: one outage of it on all of them.
        [line] = [x for x in st.splitlines() if x.strip().startswith("outage of ")]
        assert f" on {len(cluster.nodes)} nodes since " in line, st
        # A second round: the held nodes name it already, nothing more to update.
        cluster.run("sdiag", "-r")
        before = sdiag_counts(cluster)
        simultaneous_runs()
        after = sdiag_counts(cluster)
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after
                 if k.startswith("REQUEST_") and after.get(k, 0) - before.get(k, 0) > 0}
        print(f"RPCS second round {sum(spent.values())} for {len(cluster.nodes)} failing runs: {spent}")
        assert spent.get("REQUEST_NODE_INFO", 0) == len(cluster.nodes), spent
        # A drained node whose first run did not know the outage yet now says it first in
        # its reason: at most one update each.
        assert spent.get("REQUEST_UPDATE_NODE", 0) <= len(drained) and "REQUEST_PARTITION_INFO" not in spent, spent
    finally:
        cluster.resume_all()


def test_one_shared_mount_hung_on_16_nodes_is_an_outage_no_node_aborts(cluster32, hung_mount, tmp_path):
    """16 nodes with `recover: fuse-abort` on the same hung mount, two rounds of
    simultaneous health checks (a probe must hang on consecutive runs): the same mount
    suspect on every node is the storage's outage, which no abort cures. No node
    recovers; the nodes the breaker let drain hold their recovery back, naming the
    outage."""
    cluster = cluster32
    limit = 3
    nodes = cluster.nodes[:16]
    conf_dir = tmp_path / "conf"
    write_node_configs(tmp_path, cluster, {}, {
        "slurm": cluster.hooks_slurm(timeout=20),
        "filesystems": [{"path": str(hung_mount.path), "timeout": 2, "mode": "read",
                         "recover": {"method": "fuse-abort", "wait": 1}}],
        "stuck_tasks": {"enabled": False}, "gpu": {"enabled": "false"},
        "prometheus_textfile_dir": None, "syslog": False,
        "policy": {"max_drained_nodes": limit, "max_drained_fraction": 0}})

    def round_of_runs():
        healthchecks_at_once(nodes, conf_dir, timeout=120)

    try:
        round_of_runs()
        round_of_runs()
        drained = [n for n, info in cluster.show_nodes().items() if "DRAIN" in info.get("State", "")]
        recoveries = {}
        for node in nodes:
            for line in (tmp_path / f"journal-{node}.jsonl").read_text().splitlines():
                rec = json.loads(line)
                if rec.get("event") == "run":
                    recoveries[node] = recoveries.get(node, 0) + sum(
                        1 for a in rec["actions"] if a["kind"] == "recover" and a["outcome"] == "done")
        tried = {n: k for n, k in recoveries.items() if k}
        assert len(drained) == limit and not tried, (drained, tried)
        last = {n: [json.loads(x) for x in (tmp_path / f"journal-{n}.jsonl").read_text().splitlines()
                    if json.loads(x).get("event") == "run"][-1] for n in drained}
        for n, rec in last.items():
            [a] = [a for a in rec["actions"] if a["kind"] == "recover"]
            assert (a["outcome"], a["code"]) == ("held", "outage"), (n, a)
            assert " on 16 nodes since " in a["message"], a["message"]
    finally:
        cluster.resume_all()
