"""Benchmarks for `slurm-hooks diagnose` and the drain-storm breaker (figures go to
BENCHMARKS.md).

1. 3-node test cluster, a 3-rank job (one rank on a never-released lock): diagnose
   wall time with and without stacks (median of 5), through each fan-out: ClusterShell
   over ssh as root (an sshd on loopback, tests/sshd.py) and srun --overlap; with b3's
   sshd (clush) or slurmd (srun) stopped (SIGSTOP) and --timeout 5. Targets: <= 2 s;
   a node that does not answer costs only the deadline (<= timeout + 2 s).
2. 32-node test cluster (32 `slurmd -N` here), a 32-rank job: diagnose wall time
   (median of 3), each fan-out. Target: <= 5 s, the odd rank named. Then the same job
   of an unprivileged user (Slurm refuses root a step in it): root's own fan-out,
   ClusterShell over ssh, the same target.
3. The same 32 nodes, one filesystem outage (a required mount missing on every node),
   32 health checks started at the same moment, five times from a clean cluster: nodes
   drained against the breaker's limit (3), slurmctld RPCs by type from `sdiag` (reset
   before) and each run's cost by what it did; one read of the node list through
   Slurm's library against scontrol.

Run as root from the repository (needs the Slurm test-cluster packages, see tests/run.sh):
    .venv/bin/python bench/diagnose.py [--diagnose-only]
"""
from __future__ import annotations

import os
import re
import signal
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

RANKS = """
import os, sys, threading, time
lock = threading.Lock(); lock.acquire()
open(os.path.join(sys.argv[1], "started." + os.environ["SLURM_PROCID"]), "w").close()
if os.environ["SLURM_PROCID"] == sys.argv[2]:
    lock.acquire()
while True:
    time.sleep(1)
"""


def start_job(cluster, tmp: Path, odd: int) -> int:
    n = len(cluster.nodes)
    barrier = tmp / f"barrier-{cluster.cluster_name}"
    barrier.mkdir()
    (tmp / "ranks.py").write_text(RANKS)
    job = cluster.sbatch(f"-N{n}", "-o", "/dev/null", script=(
        f"#!/bin/sh\nsrun -N{n} --ntasks-per-node=1 {sys.executable} {tmp}/ranks.py {barrier} {odd}\n"))
    cluster.wait_for(lambda: len(list(barrier.glob("started.*"))) >= n, 120, what="ranks started")
    return job


def start_user_job(cluster, user, odd: int) -> int:
    """The same job, an unprivileged user's: their script, ranks and barrier in their home."""
    from attacker import PY
    from test_security import readable_by_users
    n = len(cluster.nodes)
    barrier = user.mkdir(f"barrier-{cluster.cluster_name}")
    ranks = user.write("ranks.py", RANKS, 0o644)
    script = user.write("job.sh", f"#!/bin/sh\nexec {cluster.binary('srun')} -N{n} --ntasks-per-node=1 {PY} "
                                  f"{ranks} {barrier} {odd}\n", 0o755)
    r = user.run(cluster.binary("sbatch"), "--parsable", f"-N{n}", "--chdir", user.home, "-o", "/dev/null",
                 script, env=user.env(SLURM_CONF=str(readable_by_users(cluster))))
    job = int(r.stdout.strip().split(";")[0])
    cluster.wait_for(lambda: len(list(barrier.glob("started.*"))) >= n, 120, what="the user's ranks started")
    return job


SSH_OPTIONS: list[str] = []          # the bench's sshd (main() starts it)


def diagnose(cluster, tmp: Path, job: int, *args, fanout: str = "clush") -> tuple[float, str]:
    conf = tmp / f"{cluster.cluster_name}-{fanout}.yaml"
    conf.write_text(yaml.safe_dump({"journal": str(tmp / "j.jsonl"), "state_dir": str(tmp / "st"),
                                    "slurm": cluster.hooks_slurm(),
                                    "diagnose": {"fanout": fanout, "ssh_options": SSH_OPTIONS}}))
    t0 = time.perf_counter()
    r = subprocess.run([str(BIN / "slurm-hooks"), "diagnose", str(job), *args], capture_output=True,
                       text=True, env={"PATH": "/usr/bin:/bin", "SLURM_HOOKS_CONFIG": str(conf)})
    return time.perf_counter() - t0, r.stdout.splitlines()[1].strip() if r.stdout.count("\n") > 1 else r.stdout


def median(cluster, tmp, job, runs, *args, fanout: str = "clush") -> str:
    times, line = [], ""
    for _ in range(runs):
        t, line = diagnose(cluster, tmp, job, *args, fanout=fanout)
        times.append(t)
    return f"{statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f}); {line[:120]}"


def sdiag(cluster) -> dict[str, int]:
    out = cluster.run("sdiag").stdout
    part = out.split("by message type", 1)[-1].split("by user", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", part, re.M)}


def run_cost(record: dict) -> int:
    """slurmctld RPCs one failing run made, by what it did: the node list (1), and for a
    drain the drain and the re-read (2 more), and an undrain when it stepped back."""
    [drain] = [a for a in record["actions"] if a["kind"] == "drain"]
    if drain["outcome"] == "done":
        return 3
    if drain["outcome"] == "held" and "stepped back" in drain["message"]:
        return 4 if record.get("_drained_first") else 2
    return 1


def storm(cluster, tmp: Path, limit: int = 3, rounds: int = 5) -> None:
    """`rounds` storms, each on a clean cluster (no drain, no local state): the race
    among simultaneous first runs is what the breaker must close."""
    import json
    import shutil
    from collections import Counter
    conf_dir = tmp / "storm"
    conf_dir.mkdir()
    for node in cluster.nodes:
        (conf_dir / f"{node}.yaml").write_text(yaml.safe_dump({
            "state_dir": str(tmp / "state"), "journal": str(tmp / f"journal-{node}.jsonl"),
            "slurm": cluster.hooks_slurm(timeout=20), "syslog": False,
            "prometheus_textfile_dir": None, "gpu": {"enabled": "false"}, "stuck_tasks": {"enabled": False},
            "filesystems": [{"path": "/gpfs-bench", "mountpoint": "/gpfs-bench", "required": True}],
            "policy": {"max_drained_nodes": limit, "max_drained_fraction": 0}}))
    for i in range(rounds):
        shutil.rmtree(tmp / "state", ignore_errors=True)
        for node in cluster.nodes:
            (tmp / f"journal-{node}.jsonl").unlink(missing_ok=True)
        cluster.run("sdiag", "-r")
        before = sdiag(cluster)
        t0 = time.perf_counter()
        procs = [subprocess.Popen([str(BIN / "slurm-hooks-healthcheck")], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL,
                                  env={"SLURMD_NODENAME": n, "SLURM_HOOKS_CONFIG": str(conf_dir / f"{n}.yaml")})
                 for n in cluster.nodes]
        for p in procs:
            p.wait()
        took = time.perf_counter() - t0
        after = sdiag(cluster)
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("REQUEST_")}
        spent = {k: v for k, v in spent.items() if v > 0 and k != "REQUEST_STATS_INFO"}
        drained = [n for n, i in cluster.show_nodes().items() if "DRAIN" in i.get("State", "")]
        costs = Counter()
        for node in cluster.nodes:
            rec = json.loads((tmp / f"journal-{node}.jsonl").read_text().splitlines()[0])
            rec["_drained_first"] = True          # a clean cluster: a step-back follows our own drain
            costs[run_cost(rec)] += 1
        total = sum(spent.values())
        print(f"storm {i + 1}: {len(cluster.nodes)} simultaneous failing health checks in {took:.1f} s; "
              f"drained {len(drained)} (limit {limit}): {drained}; slurmctld RPCs {total} "
              f"({total / len(cluster.nodes):.2f} per run): {spent}; runs by cost: "
              + ", ".join(f"{n} x {c}" for c, n in sorted(costs.items())))
        cluster.resume_all()


def node_list_reads(cluster, n: int = 20) -> None:
    """Wall time of one read of the node list: through Slurm's library (1 RPC) and
    through scontrol (2)."""
    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm.scontrol import Slurm
    for label, library in (("library", True), ("scontrol", False)):
        times = []
        for _ in range(n):
            slurm = Slurm(SlurmConfig(conf=str(cluster.conf_path)))
            slurm.library = library
            t0 = time.perf_counter()
            slurm.node_lines()
            times.append(time.perf_counter() - t0)
        print(f"node list via {label}, {len(cluster.nodes)} nodes, median of {n}: "
              f"{statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})")


def hung_node(cluster, tmp: Path, job: int, sshd, fanout: str) -> str:
    """b3 stopped (SIGSTOP): its sshd for clush (a second sshd, b3 sent there), its
    slurmd for srun."""
    global SSH_OPTIONS
    saved = SSH_OPTIONS
    if fanout == "clush":
        server = sshd.extra("b3-hung")
        SSH_OPTIONS = sshd.options(sshd.config_with("b3-hung", {"b3": server.port}))
        pid = server.pid
    else:
        pid = cluster.pids["b3"]
    os.kill(pid, signal.SIGSTOP)
    try:
        return median(cluster, tmp, job, 1, "--timeout", "5", "--no-stacks", fanout=fanout)
    finally:
        os.kill(pid, signal.SIGCONT)
        SSH_OPTIONS = saved
        if fanout == "clush":
            server.stop()


def main() -> None:
    global SSH_OPTIONS
    from slurmcluster import SlurmCluster
    from sshd import Sshd
    with tempfile.TemporaryDirectory(prefix="bench-diag-") as t:
        tmp = Path(t)
        sshd = Sshd(tmp / "sshd", [f"b{i}" for i in range(1, 33)]).start()
        SSH_OPTIONS = sshd.options()
        try:
            three_nodes(SlurmCluster, tmp, sshd)
            thirty_two_nodes(SlurmCluster, tmp, diagnose_only="--diagnose-only" in sys.argv)
        finally:
            sshd.stop()


def three_nodes(SlurmCluster, tmp: Path, sshd) -> None:
    c3 = SlurmCluster(tmp / "c3", nodes=("b1", "b2", "b3"), cluster_name="bench3")
    c3.start()
    try:
        job = start_job(c3, tmp, odd=1)
        for fanout in ("clush", "srun"):
            print(f"3 nodes, {fanout}, no stacks:", median(c3, tmp, job, 5, "--no-stacks", fanout=fanout))
            print(f"3 nodes, {fanout}, stacks:   ", median(c3, tmp, job, 5, fanout=fanout))
            print(f"3 nodes, {fanout}, b3 stopped, --timeout 5:", hung_node(c3, tmp, job, sshd, fanout))
        c3.cancel_all()
    finally:
        c3.stop()


def thirty_two_nodes(SlurmCluster, tmp: Path, diagnose_only: bool) -> None:
    c32 = SlurmCluster(tmp / "c32", nodes=[f"b{i}" for i in range(1, 33)], cluster_name="bench32",
                       start_timeout=180)
    c32.start()
    try:
        job = start_job(c32, tmp, odd=17)
        for fanout in ("clush", "srun"):
            print(f"32 nodes, {fanout}, no stacks:", median(c32, tmp, job, 3, "--no-stacks", fanout=fanout))
            print(f"32 nodes, {fanout}, stacks:   ", median(c32, tmp, job, 3, fanout=fanout))
        c32.cancel_all()
        from attacker import unprivileged_user
        with unprivileged_user("shk-bench") as user:
            job = start_user_job(c32, user, odd=17)
            print("32 nodes, a user's job, clush, no stacks:", median(c32, tmp, job, 3, "--no-stacks"))
            print("32 nodes, a user's job, clush, stacks:   ", median(c32, tmp, job, 3))
            c32.cancel_all()
            user.cleanup()
        if not diagnose_only:
            node_list_reads(c32)
            storm(c32, tmp)
    finally:
        c32.stop()


if __name__ == "__main__":
    main()
