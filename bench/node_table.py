"""What a failing health check's read of the node table costs, on a 3-node table and on
a 4,096-node one.

    flock /tmp/shk-pytest.lock .venv/bin/python bench/node_table.py [--slurm-prefix=PREFIX] [--runs 15]

Two real slurmctld, each with 3 slurmd (tests/slurmcluster.py): one declares only those
3 nodes, the other 4,093 more that never start (a cluster with nodes down: each such
node carries Slurm's `Not responding` reason, the table's worst case for a parser).
Node n1's health check fails (a configured filesystem that is not mounted) and drains
it on the first run; every later run is the failing run of a drained node: one read of
the node table (the breaker's view, which the outage decision reads too), nothing else
asked. For each table: the median wall time of RUNS such runs (each a new process, as
slurmd starts it), slurmctld's time per node-table read (`sdiag`: REQUEST_NODE_INFO's
total time over its count), the RPCs per run, and, in this process over the same table
as the run reads it, the whole parse (parse_oneliner, every field) against the lean
one the run uses (parse_nodes_lean). With PREFIX the 25.11 build, else Debian's 22.05.
"""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
BIG = 4096


def sdiag_times(cluster) -> dict[str, tuple[int, int]]:
    """RPC type -> (count, total microseconds) since the last `sdiag -r`."""
    out = cluster.run("sdiag").stdout
    part = out.split("Remote Procedure Call statistics by message type", 1)[-1]
    part = part.split("Remote Procedure Call statistics by user", 1)[0]
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", part, re.M)}


def one_table(prefix: str | None, declared: int, runs: int, tmp: Path) -> dict:
    from helpers import write_node_configs
    from slurmcluster import SlurmCluster

    from slurm_hooks.slurm.connect import open_backend
    from slurm_hooks.slurm.scontrol import parse_nodes_lean, parse_oneliner, records
    from slurm_hooks.core.config import SlurmConfig
    root = tmp / f"table-{declared}"
    extra = ""
    if declared > 3:
        # Never started: no slurmd answers on port 1. In no partition, as spares are.
        extra = (f"NodeName=x[1-{declared - 3}] NodeAddr=127.0.0.1 Port=1 CPUs=2 RealMemory=1000 "
                 "State=UNKNOWN\n")
    with SlurmCluster(root / "slurm", conf_extra=extra, start_timeout=180.0, cluster_name=f"table{declared}",
                      prefix=prefix) as c:
        if declared > 3:
            # Slurm marks never-registered nodes DOWN after SlurmdTimeout; at once here.
            c.scontrol("update", f"nodename=x[1-{declared - 3}]", "state=down", "reason=Not responding")
        write_node_configs(root, c, {}, {
            "slurm": c.hooks_slurm(timeout=20),
            "filesystems": [{"path": str(root / "absent" / "scratch"), "mountpoint": str(root / "absent")}],
            "stuck_tasks": {"enabled": False}, "gpu": {"enabled": "false"},
            "prometheus_textfile_dir": None, "syslog": False,
            "policy": {"max_drained_nodes": 3, "max_drained_fraction": 0}})
        env = {"SLURMD_NODENAME": "n1", "SLURM_HOOKS_CONFIG": str(root / "conf" / "n1.yaml")}
        prog = str(BIN / "slurm-hooks-healthcheck")
        subprocess.run([prog], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        assert "DRAIN" in c.node_state("n1"), c.node_state("n1")
        walls = []
        c.run("sdiag", "-r")
        for _ in range(runs):
            t = time.monotonic()
            subprocess.run([prog], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            walls.append(time.monotonic() - t)
        spent = sdiag_times(c)
        spent.pop("REQUEST_STATS_INFO", None)
        count, total = spent.get("REQUEST_NODE_INFO", (0, 0))
        slurm = open_backend(SlurmConfig(**dict(c.hooks_slurm(timeout=20), backend="scontrol")))
        lines = records(slurm.node_lines(), "NodeName=")
        parse = {}
        for name, fn in (("whole", lambda: [parse_oneliner(x) for x in lines]),
                         ("lean", lambda: parse_nodes_lean(lines))):
            best = []
            for _ in range(7):
                t = time.perf_counter()
                fn()
                best.append(time.perf_counter() - t)
            parse[name] = min(best)
        return {"slurm": c.version, "declared": declared, "nodes_listed": len(lines), "runs": runs,
                "wall_median": statistics.median(walls), "wall_min": min(walls),
                "rpcs_per_run": sum(n for n, _ in spent.values()) / runs, "rpcs": {k: n for k, (n, _) in spent.items()},
                "ctld_ms_per_read": total / count / 1000 if count else None,
                "parse_whole_ms": parse["whole"] * 1000, "parse_lean_ms": parse["lean"] * 1000}


def main() -> int:
    prefix = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--slurm-prefix=")), None)
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 15
    tmp = Path(tempfile.mkdtemp(prefix="shk-bench-table-"))
    results = [one_table(prefix, n, runs, tmp) for n in (3, BIG)]
    for r in results:
        print(f"Slurm {r['slurm']} table of {r['declared']:5} nodes ({r['nodes_listed']} listed): failing run "
              f"{r['wall_median'] * 1000:.0f} ms median (min {r['wall_min'] * 1000:.0f}) of {r['runs']}, "
              f"{r['rpcs_per_run']:.2f} RPCs/run {r['rpcs']}, slurmctld {r['ctld_ms_per_read'] or 0:.2f} ms per "
              f"node-table read; parse whole {r['parse_whole_ms']:.1f} ms, lean {r['parse_lean_ms']:.1f} ms")
    small, big = results
    print(f"ratio 4,096 / 3 nodes: {big['wall_median'] / small['wall_median']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
