"""Scale, on a 48-node test cluster (48 `slurmd -N` on this host): `diagnose` of a
32-node job names the one odd rank within 10 s; 32 simultaneous health checks during
one filesystem outage drain no more nodes than the breaker allows, `status` shows one
outage, and each failing run costs slurmctld one RPC when held, three when it drains
(sdiag); 48 slurmd running the health check themselves through a shared mount's
outage: no reboot, the drain limit held once each round settles, every node back by
itself, the RPCs per run counted."""
from __future__ import annotations

import collections
import contextlib
import json
import subprocess
import time

import pytest
import yaml
from helpers import (
    BIN,
    NODE_RPCS,
    SLURM_HOOKS,
    healthchecks_at_once,
    lock_ranks,
    node_rpcs_spent,
    sdiag_counts,
    write_node_configs,
)

pytestmark = [pytest.mark.cluster, pytest.mark.scale]

RANKS = lock_ranks(17, sleep=1)     # rank 17 waits on a lock, the rest in the barrier


def test_diagnose_of_a_32_node_job_names_the_odd_rank_within_10s(scale_cluster, sshd, tmp_path):
    """An unprivileged user's 32-node job (Slurm refuses root a step in it): root's
    diagnose reaches the nodes by its own fan-out and names the one odd rank. (How fast,
    a loaded test host aside, is bench/diagnose.py's to say: 5 s.)"""
    from attacker import PY, unprivileged_user
    from test_security import readable_by_users
    cluster = scale_cluster
    n = 32
    with unprivileged_user("shk-scale") as user:
        barrier = user.mkdir("barrier")
        ranks = user.write("ranks.py", RANKS, 0o644)
        script = user.write("job.sh", f"#!/bin/sh\nexec {cluster.binary('srun')} -N{n} --ntasks-per-node=1 "
                                      f"{PY} {ranks} {barrier}\n", 0o755)
        r = user.run(cluster.binary("sbatch"), "--parsable", f"-N{n}", "--chdir", user.home, "-o",
                     user.home / "job.out", script, env=user.env(SLURM_CONF=str(readable_by_users(cluster))))
        job = int(r.stdout.strip().split(";")[0])
        try:
            assert cluster.show_job(job)["UserId"].startswith(f"{user.name}(")
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
            user.cleanup()


def test_simultaneous_health_checks_in_one_outage_respect_the_breaker(scale_cluster, hung_mount, tmp_path):
    cluster = scale_cluster
    nodes = cluster.nodes[:32]
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
                 for node in nodes]
        return [p.communicate(timeout=120)[0] for p in procs]

    def drained_nodes():
        return [n for n, info in cluster.show_nodes().items() if "DRAIN" in info.get("State", "")]

    outs = simultaneous_runs()
    after = sdiag_counts(cluster)
    first = {node: json.loads((tmp_path / f"journal-{node}.jsonl").read_text().splitlines()[0])
             for node in nodes}
    try:
        # Every node's run failed and says so; the ones not drained say the breaker held them.
        runs = {}
        for node in nodes:
            for line in (tmp_path / f"journal-{node}.jsonl").read_text().splitlines():
                if json.loads(line).get("event") == "run":
                    runs[node] = json.loads(line)          # the node's last run
        assert len(runs) == len(nodes) and all(r["status"] == "unhealthy" for r in runs.values())
        drained = drained_nodes()
        held = [r for r in runs.values() if any(a["kind"] == "drain" and a["outcome"] == "held" for a in r["actions"])]
        assert len(held) == len(nodes) - len(drained), outs[:2]
        # What slurmctld paid for the first round (sdiag itself excluded), and what each
        # run cost (decide/breaker.py): every run reads the node table (REQUEST_NODE_INFO, no
        # partition list). One that may drain past the limit claims its place (an update)
        # and reads again: it drains (an update) or, beyond the limit, holds, its claim
        # naming the mount. One that found the limit full at once names the mount (an
        # update). A claim Slurm took too long to take holds at once, unread again.
        # (slurmd's own messages to slurmctld, MESSAGE_NODE_REGISTRATION_STATUS, left out)
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after
                 if k.startswith("REQUEST_") and after.get(k, 0) - before.get(k, 0) > 0}
        cost, slow = {}, []
        for node, rec in first.items():
            [drain] = [a for a in rec["actions"] if a["kind"] == "drain"]
            message = drain["message"]
            if drain["outcome"] == "done":
                cost[node] = (2, 2)                          # view + re-read; claim + drain
            elif "claiming ahead" in message or "ran out before its drain" in message:
                cost[node] = (2, 1)
            elif "to take this node's claim" in message or "no time left" in message:
                cost[node] = (1, 1)
                slow.append(node)
            else:
                assert message.startswith("drain-storm breaker open: "), message
                cost[node] = (1, 1)                          # view; the mount named
        print(f"RPCS {sum(spent.values())} for {len(nodes)} failing runs: {spent}; (reads, updates) per "
              f"run: {sorted(collections.Counter(cost.values()).items())}; drained {drained}; slow claims {slow}")
        assert set(spent) <= set(NODE_RPCS) and "REQUEST_PARTITION_INFO" not in spent, spent
        assert spent.get("REQUEST_NODE_INFO", 0) == sum(r for r, _ in cost.values()), (spent, cost)
        assert spent.get("REQUEST_UPDATE_NODE", 0) == sum(u for _, u in cost.values()), (spent, cost)
        assert spent.get("REQUEST_NODE_INFO_SINGLE", 0) == 0, spent
        # Never beyond the limit, at any moment: nothing was drained to be stepped back. The
        # earliest claims fill it, unless a claim Slurm was slow to take stood ahead.
        assert not any("stepped back" in a["message"] for r in runs.values() for a in r["actions"])
        assert 1 <= len(drained) <= limit and (slow or len(drained) == limit), (drained, slow)
        # `status` shows one outage naming the filesystem.
        st = subprocess.run([str(SLURM_HOOKS), "status"], env={
            "SLURM_HOOKS_CONFIG": str(conf_dir / "s1.yaml"), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=60).stdout
        assert st.count("OUTAGE") == 1 and f"filesystem {hung_mount.path}: OUTAGE on {len(drained)} nodes" in st, st
        # Every node, drained or held, names the mount: one outage of it on all of them.
        [line] = [x for x in st.splitlines() if x.strip().startswith("outage of ")]
        assert f" on {len(nodes)} nodes since " in line, st
        # A second round: the held nodes name it already, nothing more to update (with the
        # limit full; a first round that drained fewer leaves its room to the second's claims).
        full = len(drained) == limit
        cluster.run("sdiag", "-r")
        before = sdiag_counts(cluster)
        simultaneous_runs()
        after = sdiag_counts(cluster)
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after
                 if k.startswith("REQUEST_") and after.get(k, 0) - before.get(k, 0) > 0}
        print(f"RPCS second round {sum(spent.values())} for {len(nodes)} failing runs: {spent}")
        assert "REQUEST_PARTITION_INFO" not in spent, spent
        if full:
            assert spent.get("REQUEST_NODE_INFO", 0) == len(nodes), spent
            # A drained node whose first run did not know the outage yet now says it first in
            # its reason: at most one update each.
            assert spent.get("REQUEST_UPDATE_NODE", 0) <= len(drained), spent
        assert len(drained_nodes()) <= limit
    finally:
        cluster.resume_all()


def test_one_shared_mount_hung_on_16_nodes_is_an_outage_no_node_aborts(scale_cluster, hung_mount, tmp_path):
    """16 nodes with `recover: fuse-abort` on the same hung mount, two rounds of
    simultaneous health checks (a probe must hang on consecutive runs): the same mount
    suspect on every node is the storage's outage, which no abort cures. No node
    recovers; the nodes the breaker let drain hold their recovery back, naming the
    outage."""
    cluster = scale_cluster
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
        # (A node drained only by the last round, after a race the breaker settled by
        # stepping another back, decides its recovery on its next run.)
        holding = set()
        for n in drained:
            for x in (tmp_path / f"journal-{n}.jsonl").read_text().splitlines():
                for a in json.loads(x).get("actions", []) if json.loads(x).get("event") == "run" else []:
                    if a["kind"] == "recover":
                        assert (a["outcome"], a["code"]) == ("held", "outage"), (n, a)
                        assert " on 16 nodes since " in a["message"], a["message"]
                        holding.add(n)
        assert holding, drained
    finally:
        cluster.resume_all()


SCALE_INTERVAL = 15     # 48 health checks every 15 s: two cores keep up, beside the other session


def test_48_slurmd_run_the_health_check_through_a_shared_mount_outage(scale_cluster, tmp_path):
    """Every slurmd runs the health check (HealthCheckInterval) on one shared mount that
    stops answering for a while, then answers again: the storage's outage. No reboot
    is asked, no more nodes drained than the limit at any moment, every node back in
    service by itself once it answers; slurmctld's RPCs per run (sdiag, the test's
    own reads taken out): at most 2.5 from the first sight, one per run after (a read and
    an update in turn), and no partition read."""
    from mounts_fixtures import start_fuse
    from test_fuse_client_cluster import reboot_program
    cluster = scale_cluster
    limit = 3
    mount = start_fuse(tmp_path / "gpfs", "ok", name="store-gpfs", subtype="gpfs")
    program, marker = reboot_program(tmp_path)
    wrapper = write_node_configs(tmp_path, cluster, {}, {
        "slurm": cluster.hooks_slurm(timeout=20),
        "filesystems": [{"path": str(mount.path), "mountpoint": str(mount.path), "timeout": 2, "mode": "read"}],
        "stuck_tasks": {"enabled": False}, "gpu": {"enabled": "false"},
        "prometheus_textfile_dir": None, "syslog": False,
        "policy": {"max_drained_nodes": limit, "max_drained_fraction": 0, "resume_after": 1}})
    nodes = cluster.nodes

    def runs() -> dict[str, int]:
        out = {}
        for n in nodes:
            path = tmp_path / f"journal-{n}.jsonl"
            text = path.read_text() if path.exists() else ""
            out[n] = sum(1 for x in text.splitlines() if x.strip() and json.loads(x).get("event") == "run")
        return out

    polls = {"count": 0}

    def ours_drained() -> list[str]:
        polls["count"] += 1
        return [n for n, i in cluster.show_nodes().items()
                if "DRAIN" in i.get("State", "") and "[slurm-hooks]" in i.get("Reason", "")]

    try:
        cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={SCALE_INTERVAL}\n"
                            f"HealthCheckNodeState=ANY\nRebootProgram={program}\n", timeout=120)
        cluster.wait_for(lambda: all(v >= 1 for v in runs().values()), 3 * SCALE_INTERVAL + 60,
                         what="a healthy run on every node")
        # What one of the test's own reads costs slurmctld, to take it out of the sums.
        cluster.run("sdiag", "-r")
        before = sdiag_counts(cluster)
        cluster.show_nodes()
        poll_cost = node_rpcs_spent(before, sdiag_counts(cluster))
        cluster.run("sdiag", "-r")
        before, polls["count"], start = sdiag_counts(cluster), 0, runs()
        mount.stall()
        most = 0

        def seen_twice() -> bool:
            nonlocal most
            most = max(most, len(ours_drained()))
            now = runs()
            return all(now[n] - start[n] >= 2 for n in nodes)
        cluster.wait_for(seen_twice, 4 * SCALE_INTERVAL + 60, interval=1, what="two failing runs on every node")
        first = node_rpcs_spent(before, sdiag_counts(cluster))
        first_runs = sum(runs().values()) - sum(start.values())
        first_polls = polls["count"]
        # Steady: the outage goes on, every node has named it.
        cluster.run("sdiag", "-r")
        before, polls["count"], start = sdiag_counts(cluster), 0, runs()
        t = time.monotonic()
        while time.monotonic() - t < 2 * SCALE_INTERVAL:
            most = max(most, len(ours_drained()))
            time.sleep(1)
        steady = node_rpcs_spent(before, sdiag_counts(cluster))
        steady_runs = sum(runs().values()) - sum(start.values())
        steady_polls = polls["count"]

        def ours_only(spent: dict, count: int) -> dict:
            return {k: v - count * poll_cost.get(k, 0) for k, v in spent.items() if v - count * poll_cost.get(k, 0)}
        first_ours, steady_ours = ours_only(first, first_polls), ours_only(steady, steady_polls)
        print(f"48 NODES first sight: {sum(first_ours.values())} RPCs for {first_runs} runs "
              f"({sum(first_ours.values()) / first_runs:.2f}/run) {first_ours}; steady: "
              f"{sum(steady_ours.values())} RPCs for {steady_runs} runs "
              f"({sum(steady_ours.values()) / max(1, steady_runs):.2f}/run) {steady_ours}; most drained {most}")
        assert "REQUEST_PARTITION_INFO" not in first_ours and "REQUEST_PARTITION_INFO" not in steady_ours
        assert sum(first_ours.values()) <= 2.5 * first_runs, (first_ours, first_runs)
        # Steady: one RPC per run. Each node rewrites its word on the mount every second run
        # (a word counts for two intervals only, so that a node gone quiet stops counting),
        # and that run reads nothing (act/actuation.py: _lean): a read, then a write. (A run
        # in flight at either end of the window may be counted by sdiag and not yet in the
        # journal: a few percent.)
        assert steady_runs >= len(nodes), steady_runs
        assert sum(steady_ours.values()) <= 1.05 * steady_runs, (steady_ours, steady_runs)
        assert steady_ours.get("REQUEST_NODE_INFO", 0) <= 0.6 * steady_runs, (steady_ours, steady_runs)
        assert steady_ours.get("REQUEST_UPDATE_NODE", 0) <= 0.6 * steady_runs, (steady_ours, steady_runs)
        assert set(steady_ours) <= {"REQUEST_NODE_INFO", "REQUEST_UPDATE_NODE"}, steady_ours
        # Simultaneous first sights claim their place before draining: never beyond the
        # limit, at any moment the test looked (every second).
        assert most <= limit and len(ours_drained()) <= limit, most
        # The storage answers: every node back in service by itself, none rebooted.
        mount.resume()

        def all_back() -> bool:
            nonlocal most
            drained = ours_drained()
            most = max(most, len(drained))
            return not drained
        cluster.wait_for(all_back, 6 * SCALE_INTERVAL + 60, interval=1, what="every node back in service")
        assert most <= limit, most
        assert not marker.exists() and not any("REBOOT" in i.get("State", "") for i in cluster.show_nodes().values())
    finally:
        mount.resume()
        with contextlib.suppress(Exception):
            cluster.reconfigure(cluster.initial_conf_extra, timeout=120)
        mount.close()
        cluster.resume_all()
