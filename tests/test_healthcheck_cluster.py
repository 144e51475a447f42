"""End to end on the real cluster: slurmd runs slurm-hooks as HealthCheckProgram, a hung
mount drains exactly the node that has it, with a reason naming the mount."""
from __future__ import annotations

import subprocess
import time

import pytest
from helpers import SLURM_HOOKS, journal, ours, problems, write_node_configs

from slurm_hooks.act.actions import execute
from slurm_hooks.core.config import SlurmConfig
from slurm_hooks.core.model import Action
from slurm_hooks.slurm.api import strip_reason_stamp
from slurm_hooks.slurm.connect import open_backend

pytestmark = pytest.mark.cluster
INTERVAL, DEADLINE = 3, 2


def test_slurmd_runs_healthcheck_and_drains_only_the_sick_node(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    scratch = {n: tmp_path / f"scratch-{n}" for n in cluster.nodes}
    for d in scratch.values():
        d.mkdir()
    per_node = {n: {"filesystems": [{"path": str(scratch[n])}]} for n in cluster.nodes}
    per_node["n1"]["filesystems"].append({"path": str(hung_mount.path)})
    wrapper = write_node_configs(tmp_path, cluster, per_node,
                                 {"filesystem_defaults": {"timeout": DEADLINE, "warn_after": 1}})
    t0 = time.monotonic()
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                        "HealthCheckNodeState=ANY")

    cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n1"), timeout=INTERVAL + DEADLINE + 5,
                     what="n1 drained by the health check")
    took = time.monotonic() - t0
    reason = cluster.show_node("n1")["Reason"]
    assert ours(reason, f"fs {hung_mount.path} hung >{DEADLINE}s (create, fuse.fusefs)"), reason
    assert took < INTERVAL + DEADLINE + 5

    # The healthy nodes ran the same program and stayed in service.
    cluster.wait_for(lambda: all(journal(tmp_path, n) for n in ("n2", "n3")), timeout=INTERVAL * 3,
                     what="health check runs on n2 and n3")
    for n in ("n2", "n3"):
        assert "DRAIN" not in cluster.node_state(n)
        runs = journal(tmp_path, n)
        assert runs and all(r["node"] == n for r in runs), runs
        assert problems(runs, slow_ok=[scratch[n]]) == []

    # The run journals after its drain and the breaker's second look at the cluster
    # (through pyslurm a forked child each): poll, the drain shows first.
    cluster.wait_for(lambda: any(r["status"] == "unhealthy" for r in journal(tmp_path, "n1")),
                     timeout=INTERVAL * 2, what="n1's unhealthy run in its journal")
    runs = journal(tmp_path, "n1")
    sick = next(r for r in runs if r["status"] == "unhealthy")
    assert sick["hook"] == "healthcheck" and sick["node"] == "n1"
    drains = [a for r in runs for a in r["actions"] if a["kind"] == "drain" and a["outcome"] == "done"]
    assert drains and drains[0]["reason"] == strip_reason_stamp(reason)
    # Later runs see the drain is ours and already says this: nothing is redone.
    cluster.wait_for(lambda: any(a["outcome"] == "skipped" for r in journal(tmp_path, "n1")
                                 for a in r["actions"]), timeout=INTERVAL * 3, what="a second run")


def run_healthcheck(cluster, tmp_path, node, filesystems, *args, slurm=None):
    cfg = tmp_path / f"{node}.yaml"
    import yaml
    cfg.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal.jsonl"),
        "filesystems": filesystems, "filesystem_defaults": {"timeout": 1, "warn_after": 0.5},
        "slurm": slurm or cluster.hooks_slurm(timeout=10)}))
    env = {"SLURMD_NODENAME": node}
    return subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "healthcheck", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_admin_drain_is_never_overwritten(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=admin: DIMM replacement")
    r = run_healthcheck(cluster, tmp_path, "n2", [{"path": str(hung_mount.path)}])
    assert r.returncode == 1
    assert "skipped: drain node n2" in r.stdout and "already drained by someone else" in r.stdout
    assert cluster.show_node("n2")["Reason"].startswith("admin: DIMM replacement")


def test_dry_run_prints_and_does_nothing(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    r = run_healthcheck(cluster, tmp_path, "n3", [{"path": str(hung_mount.path)}], "--dry-run")
    assert r.returncode == 1
    assert f"would drain node n3: fs {hung_mount.path} hung >1s" in r.stdout
    assert "DRAIN" not in cluster.node_state("n3")


def test_without_slurm_it_says_what_it_would_do(clean_cluster, hung_mount, tmp_path):
    r = run_healthcheck(clean_cluster, tmp_path, "n3", [{"path": str(hung_mount.path)}],
                        slurm={"bin_dir": str(tmp_path)})
    assert r.returncode == 1
    # Not done, and kept for the next run: never "would drain", which only a dry run says.
    assert (f"spooled: drain node n3: fs {hung_mount.path} hung >1s (create, fuse.fusefs) [slurm-hooks] "
            f"(Slurm unreachable, not done: scontrol not found in {tmp_path})") in r.stdout


def _comment(cluster, node: str) -> str:
    value = cluster.show_node(node).get("Comment", "")
    return "" if value == "(null)" else value


def test_backend_resumes_only_its_own_drains(clean_cluster):
    from slurm_hooks.core.reason import cause_text
    cluster = clean_cluster
    slurm = open_backend(SlurmConfig(**cluster.hooks_slurm(timeout=10)))
    cause = cause_text("filesystem", "/x y", "/x y", "2026-12-02T03:50:00")
    slurm.drain_with_cause("n1", "fs /x y hung [slurm-hooks]", cause)
    assert _comment(cluster, "n1") == cause and slurm.node_state("n1")["Comment"] == cause
    assert {k: v for k, v in slurm.list_nodes_alone()[0].items() if k in ("NodeName", "Comment")} == \
        {"NodeName": "n1", "Comment": cause}
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=admin says no", "comment=ticket 4711")
    # Drained by an older release (its prefix): still ours after an upgrade.
    cluster.scontrol("update", "nodename=n3", "state=drain", "reason=slurm-hooks: fs /x hung")
    results = execute([Action("resume", node="n1"), Action("resume", node="n2"),
                       Action("resume", node="n3")], slurm, "slurm-hooks:", dry_run=False)
    assert [r.outcome for r in results] == ["done", "skipped", "done"]
    assert "not ours to resume" in results[1].message
    assert "DRAIN" not in cluster.node_state("n1") and "DRAIN" in cluster.node_state("n2")
    assert "DRAIN" not in cluster.node_state("n3")
    # Our cause goes with our drain; the admin's Comment stays with theirs.
    assert _comment(cluster, "n1") == "" and _comment(cluster, "n2") == "ticket 4711"
    assert slurm.node_state("n1")["Comment"] == "" and slurm.node_state("n2")["Comment"] == "ticket 4711"
    assert slurm.show_node("nosuchnode") is None
    info = slurm.show_node("n2")
    assert info["Reason"].startswith("admin says no")


def test_scontrol_on_a_hung_shared_filesystem_costs_a_deadline_not_a_hang(hung_mount, tmp_path):
    """Slurm installed on NFS that stopped answering: the health check neither stats nor
    execs scontrol in its own process, and still ends, saying what it would do."""
    from helpers import SLURM_HOOKS as hooks
    cfg = tmp_path / "c.yaml"
    import yaml
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"), "node_name": "n9",
        "filesystems": [{"path": str(hung_mount.path), "timeout": 1}],
        "slurm": {"bin_dir": str(hung_mount.path), "timeout": 2}}))
    t0 = time.monotonic()
    r = subprocess.run([str(hooks), "-c", str(cfg), "healthcheck"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and time.monotonic() - t0 < 1 + 2 + 2
    assert "spooled: drain node n9" in r.stdout and "scontrol gave no answer within 2s" in r.stdout
