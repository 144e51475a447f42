"""Hooks by Slurm's prolog/epilog rules, rolling out, and living beside NHC, on the
real cluster: no polling and no node list from a hook, what Slurm does with a job
whose prolog failed, a prolog.d glob that keeps a site's own scripts, the report-only
switch, one file for every node with per-group settings, and another health check run
beside slurm-hooks without resumes while it fails."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import yaml
from helpers import BIN, SLURM_HOOKS, hook_wrapper, journal, ours, problems, write_node_configs

pytestmark = pytest.mark.cluster
INTERVAL = 2


def rpc_counts(cluster) -> dict[str, int]:
    """slurmctld's count of each RPC type since the last `sdiag -r`."""
    out = cluster.run("sdiag").stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(REQUEST_\w+)\s+\(\s*\d+\)\s+count:(\d+)", out, re.M)}


def test_prolog_helper_asks_slurm_once_after_a_back_off(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "prolog": {"fs_timeout": 1, "reason_delay": 2}})
    cluster.reconfigure(f"Prolog={hook_wrapper(tmp_path, 'prolog')}\n")
    cluster.run("sdiag", "-r")
    cluster.sbatch("-N1", "-w", "n1", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")

    # The test looks with `scontrol show node` (the node list, REQUEST_NODE_INFO); the
    # helper may look at its own node alone (REQUEST_NODE_INFO_SINGLE), once.
    cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n1")), 30,
                     what="the precise reason in place of 'Prolog error'")
    time.sleep(1)
    counts = rpc_counts(cluster)
    assert counts.get("REQUEST_NODE_INFO_SINGLE", 0) == 1, counts     # one look, no polling


def test_epilog_never_reads_the_node_list(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {"n2": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "epilog": {"fs_timeout": 1}})
    cluster.reconfigure(f"Epilog={hook_wrapper(tmp_path, 'epilog')}\n")
    cluster.run("sdiag", "-r")
    cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    # The test looks at n2 alone (sinfo -n: REQUEST_NODE_INFO_SINGLE); the epilog must
    # never load the node list (REQUEST_NODE_INFO, what `scontrol show node` sends).
    def drained():
        out = cluster.run("sinfo", "-h", "-N", "-n", "n2", "-O", "Reason:0").stdout
        return ours(out, "fs ")
    cluster.wait_for(drained, 30, what="n2 drained by the epilog")
    counts = rpc_counts(cluster)
    assert counts.get("REQUEST_NODE_INFO", 0) == 0, counts


def test_failed_prolog_requeues_a_batch_job_held_unless_nohold_on_prolog_fail(clean_cluster, hung_mount, tmp_path):
    """What the README says Slurm does with the job whose prolog failed."""
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "prolog": {"fs_timeout": 1}})
    prolog = hook_wrapper(tmp_path, "prolog")
    cluster.reconfigure(f"Prolog={prolog}\n")
    srun = cluster.run("srun", "-N1", "-w", "n1", "-t", "1", "true", check=False, timeout=60)
    assert srun.returncode != 0, "an srun job whose prolog fails is not requeued"
    # Gone, not requeued: it may still be COMPLETING for a moment after srun returns.
    cluster.wait_for(lambda: cluster.squeue() == [], 30, what="the srun job gone, not requeued")
    cluster.resume_all()
    held = cluster.sbatch("-N1", "-w", "n1", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    cluster.wait_for(lambda: int(cluster.show_job(held)["Restarts"]) >= 1, 30, what="the batch job requeued")
    info = cluster.show_job(held)
    assert info["JobState"] == "PENDING" and info["Priority"] == "0", "requeued held"
    cluster.run("scancel", str(held))
    cluster.resume_all()
    sched = cluster.conf_value("SchedulerParameters")
    cluster.reconfigure(f"Prolog={prolog}\nSchedulerParameters={sched},nohold_on_prolog_fail\n")
    free = cluster.sbatch("-N1", "-w", "n1", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    cluster.wait_for(lambda: int(cluster.show_job(free)["Restarts"]) >= 1, 30, what="the batch job requeued")
    info = cluster.show_job(free)
    assert info["JobState"] == "PENDING" and info["Priority"] != "0", "requeued, not held"


def test_prolog_glob_keeps_the_sites_own_prolog(clean_cluster, hung_mount, tmp_path):
    """Before Slurm 24.05 Prolog= takes one value: a glob over a prolog.d directory
    runs the site's script and slurm-hooks' both."""
    cluster = clean_cluster
    write_node_configs(tmp_path, cluster, {"n3": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "prolog": {"fs_timeout": 1}})
    d = tmp_path / "prolog.d"
    d.mkdir()
    ran = tmp_path / "site-prolog-ran"
    (d / "50-site").write_text(f"#!/bin/sh\necho $SLURM_JOB_ID >> {ran}\n")
    (d / "50-site").chmod(0o755)
    (d / "90-slurm-hooks").symlink_to(hook_wrapper(tmp_path, "prolog"))
    cluster.reconfigure(f"Prolog={d}/*\n")
    ok = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    cluster.wait_for(lambda: cluster.job_state(ok) == "COMPLETED", 30, what="a job on a healthy node")
    bad = cluster.sbatch("-N1", "-w", "n3", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n3"), "fs "), 30,
                     what="n3 drained with the precise reason")
    # Slurm runs the matches in reverse alphabetical order; the failing slurm-hooks
    # prolog (90-) ran first for the job on n3, and Slurm went no further.
    assert ran.read_text().split() == [str(ok)], "the site's prolog ran on the healthy node"
    assert "DRAIN" not in cluster.node_state("n2")


STUCK_WRITER = """
import os, sys
open(os.path.join(sys.argv[2], "started"), "w").close()
open(os.path.join(sys.argv[1], "main_log.txt"), "a")      # never returns
"""


def test_report_only_turns_every_action_off(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    (tmp_path / "writer.py").write_text(STUCK_WRITER)
    write_node_configs(tmp_path, cluster, {"n2": {"filesystems": [{"path": str(hung_mount.path)}]}},
                       {"filesystems": [{"path": str(tmp_path)}], "prolog": {"fs_timeout": 1},
                        "stuck_tasks": {"grace": 0.5, "sample_window": 0.3}, "outage": {"interval": 1},
                        "actions": {"report_only": True}})
    cluster.reconfigure(f"Prolog={hook_wrapper(tmp_path, 'prolog')}\n")
    # A failing prolog fails no job: the job runs, the node stays in service.
    ran = cluster.sbatch("-N1", "-w", "n2", "-o", "/dev/null", script="#!/bin/sh\ntrue\n")
    cluster.wait_for(lambda: cluster.job_state(ran) == "COMPLETED", 30, what="the job to run")
    assert "DRAIN" not in cluster.node_state("n2")
    [prolog] = [r for r in journal(tmp_path, "n2") if r["hook"] == "prolog"]
    assert prolog["status"] == "unhealthy" and [a["outcome"] for a in prolog["actions"]] == ["report-only"]
    # A stuck job task: reported with every action it would take, none taken.
    job = cluster.sbatch("-N1", "-w", "n1", "--requeue", "-o", "/dev/null", script=(
        f"#!/bin/sh\nsrun {sys.executable} {tmp_path}/writer.py {hung_mount.path} {tmp_path}\n"))
    cluster.wait_for(lambda: (tmp_path / "started").exists(), 30, what="the job's task started")
    env = {"SLURMD_NODENAME": "n1", "SLURM_HOOKS_CONFIG": str(tmp_path / "conf" / "n1.yaml")}
    subprocess.run([str(BIN / "slurm-hooks-healthcheck")], env=env, capture_output=True, timeout=60)
    time.sleep(0.6)
    subprocess.run([str(BIN / "slurm-hooks-healthcheck")], env=env, capture_output=True, timeout=60)
    # One interval later: the task waits on a network mount no other node names (in
    # report-only no node names one: it is told as it would be alone with it).
    time.sleep(1.1)
    r = subprocess.run([str(BIN / "slurm-hooks-healthcheck")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    rec = journal(tmp_path, "n1")[-1]
    assert {a["kind"]: a["outcome"] for a in rec["actions"]} == \
        {"drain": "report-only", "comment": "report-only", "requeue": "report-only"}
    info = cluster.show_job(job)
    assert (info["JobState"], info["Restarts"], info.get("AdminComment", "(null)")) == ("RUNNING", "0", "(null)")
    assert "DRAIN" not in cluster.node_state("n1")
    assert "requeue job" in r.stdout and "report only" in r.stdout


def test_one_file_for_every_node_with_settings_per_node_group(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    conf = tmp_path / "slurm-hooks.yaml"
    conf.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal.jsonl"),
        "slurm": cluster.hooks_slurm(),
        "filesystems": [{"path": str(tmp_path)}], "filesystem_defaults": {"timeout": 1, "warn_after": 0.5},
        "node_groups": [{"nodes": "n[2-3]", "settings": {"filesystems": [{"path": str(hung_mount.path)}]}}]}))
    wrapper = tmp_path / "healthcheck"
    wrapper.write_text(f"#!/bin/sh\nSLURM_HOOKS_CONFIG={conf} exec {BIN}/slurm-hooks-healthcheck\n")
    wrapper.chmod(0o755)
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n")
    # The same mount hung on both: the storage's outage, which their reasons say first.
    cluster.wait_for(lambda: all(ours(cluster.out_of_service_reason(n), f"storage outage fusefs-")
                                 and f"; fs {hung_mount.path}" in cluster.out_of_service_reason(n)
                                 for n in ("n2", "n3")), 30, what="n2 and n3 drained")

    def runs():
        path = tmp_path / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    # Each slurmd keeps its own health-check timer, and a run journals after its drain:
    # poll for the lines, the drains show first.
    cluster.wait_for(lambda: any(r.get("node") == "n1" and r.get("event") == "run" and r["status"] == "healthy"
                                 for r in runs()), INTERVAL * 3, what="n1's healthy run in the journal")
    assert "DRAIN" not in cluster.node_state("n1")


FAKE_NHC = """#!/bin/sh
# Like LBNL NHC: fails while the flag file exists; drains only a node with no reason.
if [ -e {flag} ]; then echo "ERROR:  nhc:  Health check failed:  check_fs_mount:  /gpfs not mounted"; exit 1; fi
exit 0
"""


def test_beside_nhc_no_resume_while_it_fails(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    flag = tmp_path / "nhc-fails"
    flag.touch()
    nhc = tmp_path / "nhc"
    nhc.write_text(FAKE_NHC.format(flag=flag))
    nhc.chmod(0o755)
    wrapper = write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(hung_mount.path)}]}},
                                 {"filesystems": [{"path": str(tmp_path)}],
                                  "filesystem_defaults": {"timeout": 1, "warn_after": 0.5},
                                  "policy": {"resume_after": 1}, "beside": {"command": [str(nhc)], "timeout": 5}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n")
    cluster.wait_for(lambda: ours(cluster.out_of_service_reason("n1"), "fs "), 20,
                     what="n1 drained by slurm-hooks")
    hung_mount.close()                 # our own checks pass from now on; NHC still fails
    runs = len(journal(tmp_path, "n1"))
    cluster.wait_for(lambda: len(journal(tmp_path, "n1")) >= runs + 3, 5 * INTERVAL + 10, what="three more runs")
    last = journal(tmp_path, "n1")[-1]
    assert problems([last], slow_ok=[tmp_path]) == [] and any("nhc failed (exit 1)" in n for n in last["notes"]), last
    assert "DRAIN" in cluster.node_state("n1"), "not resumed while NHC fails"
    flag.unlink()
    cluster.wait_for(lambda: "DRAIN" not in cluster.node_state("n1"), 5 * INTERVAL + 10, what="n1 resumed")
    # The run that resumed says NHC passed (its journal line is written after the resume).
    resumed = cluster.wait_for(lambda: next((r for r in journal(tmp_path, "n1") if any(
        a["kind"] == "resume" and a["outcome"] == "done" for a in r.get("actions") or [])), None),
        10, what="the journal line of the run that resumed")
    assert any("nhc passed" in n for n in resumed["notes"]), resumed["notes"]


def test_beside_a_hung_tool_is_cut_off_within_its_deadline(clean_cluster, tmp_path):
    cluster = clean_cluster
    hang = tmp_path / "nhc"
    hang.write_text("#!/bin/sh\nsleep 300\n")
    hang.chmod(0o755)
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
                                    "slurm": cluster.hooks_slurm(), "filesystems": [{"path": str(tmp_path)}],
                                    "beside": {"command": [str(hang)], "timeout": 2}}))
    t0 = time.monotonic()
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(conf), "healthcheck", "--json"], capture_output=True,
                       text=True, timeout=60, env={"SLURMD_NODENAME": "n1"})
    assert time.monotonic() - t0 < 6
    assert any("nhc did not finish within 2s" in n for n in json.loads(r.stdout)["notes"])
