"""A/B of the two Slurm backends on a Slurm built from source (figures go to BENCHMARKS.md).

On the 3-node test cluster of that Slurm, alternating the backends in one run:
1. `slurm-hooks status` (the node list and the job list), wall time of the command,
   median of 7 per backend;
2. the actions of one incident through the backend: the node lookup, drain, the job
   lookup, AdminComment update (keeping the admin's text) and requeue of a running
   batch job, the way actions.py calls them: wall time of the sequence, median of 5;
3. slurmctld RPCs of that sequence per backend, from `sdiag` (reset just before).

Run as root from the repository, after `bash tests/run.sh` built Slurm and pyslurm:
    .venv/bin/python bench/backend_ab.py [PREFIX]
PREFIX defaults to what tests/build_slurm.sh prints.
"""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BIN = Path(sys.executable).parent
BACKENDS = ("scontrol", "pyslurm")


def status_once(cluster, conf: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([str(BIN / "slurm-hooks"), "-c", str(conf), "status"], capture_output=True, text=True,
                       timeout=60)
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    return took


def incident_once(cluster, backend: str) -> tuple[float, dict]:
    from slurm_hooks.act.actions import execute
    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.core.model import Action
    from slurm_hooks.slurm.connect import open_backend
    job = cluster.sbatch("-N1", "-w", "n1", "--requeue", "-o", "/dev/null", script="sleep 300\n")
    cluster.wait_for(lambda: cluster.job_state(job) == "RUNNING", 30, what="job running")
    cluster.scontrol("update", f"jobid={job}", "admincomment=admin: keep this")
    actions = [Action("drain", node="n1", reason="slurm-hooks: bench drain"),
               Action("comment", node="n1", job=str(job), uid=0, text="slurm-hooks: bench diagnosis"),
               Action("requeue", node="n1", job=str(job), uid=0, text="slurm-hooks: bench diagnosis")]
    cluster.run("sdiag", "-r")
    t0 = time.perf_counter()
    slurm = open_backend(SlurmConfig(**cluster.hooks_slurm(timeout=10, backend=backend)),
                         deadline=time.monotonic() + 45)
    results = execute(actions, slurm, "slurm-hooks:", dry_run=False)
    took = time.perf_counter() - t0
    calls = {k: v for k, v in rpcs(cluster).items() if k != "REQUEST_STATS_INFO"}
    assert [r.outcome for r in results] == ["done"] * 3, [(r.outcome, r.message) for r in results]
    info = cluster.show_job(job)
    assert info["AdminComment"].startswith("admin: keep this | slurm-hooks: bench diagnosis"), info
    cluster.reset()
    return took, calls


def rpcs(cluster) -> dict[str, int]:
    out = cluster.run("sdiag").stdout
    counts = {}
    part = out.split("Remote Procedure Call statistics by message type", 1)[-1]
    part = part.split("Remote Procedure Call statistics by user", 1)[0]
    for m in re.finditer(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)", part, re.M):
        counts[m.group(1)] = int(m.group(2))
    return counts


def main() -> None:
    from slurmcluster import SlurmCluster
    prefix = sys.argv[1] if len(sys.argv) > 1 else subprocess.run(
        ["bash", str(ROOT / "tests/build_slurm.sh")], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cluster = SlurmCluster(tmp / "slurm", prefix=prefix)
        cluster.start()
        try:
            print(f"Slurm {cluster.version}")
            jobs = [cluster.sbatch("-N1", "-o", "/dev/null", script="sleep 300\n") for _ in range(3)]
            for i, j in enumerate(jobs):
                cluster.scontrol("update", f"jobid={j}", f"admincomment=slurm-hooks: node n1: job diagnosed {i}")
            status = {b: [] for b in BACKENDS}
            for _ in range(7):
                for b in BACKENDS:
                    conf = tmp / f"{b}.yaml"
                    conf.write_text(yaml.safe_dump({"journal": str(tmp / "j.jsonl"), "state_dir": str(tmp / "st"),
                                                    "slurm": cluster.hooks_slurm(backend=b)}))
                    status[b].append(status_once(cluster, conf))
            for j in jobs:
                cluster.run("scancel", str(j))
            cluster.reset()
            seq = {b: [] for b in BACKENDS}
            calls = {}
            for _ in range(5):
                for b in BACKENDS:
                    took, calls[b] = incident_once(cluster, b)
                    seq[b].append(took)
            for b in BACKENDS:
                print(f"{b:9} status median {statistics.median(status[b]) * 1000:.0f} ms "
                      f"(min {min(status[b]) * 1000:.0f}); drain+comment+requeue median "
                      f"{statistics.median(seq[b]) * 1000:.0f} ms (min {min(seq[b]) * 1000:.0f})")
            for b in BACKENDS:
                print(f"{b:9} slurmctld RPCs of one sequence: {calls[b]}")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
