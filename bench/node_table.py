"""What a failing health check's read of the node table costs, on a 3-node table and on
a 4,096-node one.

    flock /tmp/shk-pytest.lock .venv/bin/python bench/node_table.py [--slurm-prefix=PREFIX] [--runs 25] [--slurmd-timeout=300]
    ... bench/node_table.py --against=CHECKOUT [--rounds 60] [--slurm-prefix=PREFIX]

Two real slurmctld up at once, their runs taken in turns, each with 3 slurmd (tests/slurmcluster.py): one declares only those
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

`--against=CHECKOUT`: this code against another checkout's (run through PYTHONPATH), on
the same two tables: ROUNDS rounds of four runs (either code, either table), their order
turned every round; the medians, each code's 4,096/3 ratios, and this code's time over
that code's, round by round.
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
SLURMD_TIMEOUT = 300


def sdiag_times(cluster) -> dict[str, tuple[int, int]]:
    """RPC type -> (count, total microseconds) since the last `sdiag -r`."""
    out = cluster.run("sdiag").stdout
    part = out.split("Remote Procedure Call statistics by message type", 1)[-1]
    part = part.split("Remote Procedure Call statistics by user", 1)[0]
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", part, re.M)}


def start_table(prefix: str | None, declared: int, tmp: Path, stack) -> tuple:
    """A cluster with `declared` nodes, its node n1 drained by a first failing run: (the
    cluster, the run's environment, the program)."""
    from helpers import write_node_configs
    from slurmcluster import SlurmCluster
    root = tmp / f"table-{declared}"
    # Slurm's default SlurmdTimeout (300 s; the test clusters' 10 s makes slurmctld ping
    # every node every few seconds, thousands of dead ones here, which on a 2-core machine
    # takes the CPU from the runs measured); --slurmd-timeout=10 measures it so.
    extra = f"SlurmdTimeout={SLURMD_TIMEOUT}\n"
    if declared > 3:
        # Never started: no slurmd answers on port 1. In no partition, as spares are.
        extra += (f"NodeName=x[1-{declared - 3}] NodeAddr=127.0.0.1 Port=1 CPUs=2 RealMemory=1000 "
                  "State=UNKNOWN\n")
    c = stack.enter_context(SlurmCluster(root / "slurm", conf_extra=extra, start_timeout=180.0,
                                         cluster_name=f"table{declared}", prefix=prefix))
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
    c.run("sdiag", "-r")
    return c, env, prog


def one_run(table: tuple, code: str | None = None) -> float:
    """One failing run's wall time. Waited for with a blocking wait: `subprocess.run`'s
    `timeout=` polls the child with sleeps that double up to 50 ms, which measured every
    run as 64, 114, 164, 214 ... ms (the earlier rows' "steps of about 50 ms"). A timer
    kills a run that hangs. `code`: a checkout of other code to run instead (PYTHONPATH)."""
    import threading
    c, env, prog = table
    if code:
        env = dict(env, PYTHONPATH=code)
    t = time.monotonic()
    p = subprocess.Popen([prog], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    guard = threading.Timer(120, p.kill)
    guard.start()
    p.wait()
    took = time.monotonic() - t
    guard.cancel()
    return took


def table_figures(table: tuple, declared: int, walls: list[float]) -> dict:
    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm.connect import open_backend
    from slurm_hooks.slurm.scontrol import parse_nodes_lean, parse_oneliner, records
    c = table[0]
    runs = len(walls)
    spent = sdiag_times(c)
    spent.pop("REQUEST_STATS_INFO", None)
    count, total = spent.get("REQUEST_NODE_INFO", (0, 0))
    slurm = open_backend(SlurmConfig(**dict(c.hooks_slurm(timeout=20), backend="scontrol")))
    text = slurm.node_lines()
    lines = records(text, "NodeName=")
    # What the run reads: the lines of its own node and of the nodes with a word of
    # ours, the others counted (slurmlib.py `nodes-alone`: `OtherNodes=N` first).
    from slurm_hooks.core.reason import CAUSE_TAG, MARK
    alone_text = slurm.node_lines(alone=("n1", MARK, "slurm-hooks:", CAUSE_TAG))
    alone = records(alone_text, "NodeName=")
    parse = {}
    for name, fn in (("whole", lambda: [parse_oneliner(x) for x in lines]),
                     ("lean", lambda: parse_nodes_lean(lines)),
                     ("alone", lambda: parse_nodes_lean(alone))):
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
            "parse_whole_ms": parse["whole"] * 1000, "parse_lean_ms": parse["lean"] * 1000,
            "parse_alone_ms": parse["alone"] * 1000, "bytes_whole": len(text), "bytes_alone": len(alone_text)}


def main() -> int:
    import contextlib
    prefix = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--slurm-prefix=")), None)
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 25
    global SLURMD_TIMEOUT
    SLURMD_TIMEOUT = int(next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--slurmd-timeout=")), 300))
    against = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--against=")), None)
    tmp = Path(tempfile.mkdtemp(prefix="shk-bench-table-"))
    if against:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 60
        with contextlib.ExitStack() as stack:
            tables = {n: start_table(prefix, n, tmp, stack) for n in (3, BIG)}
            return compare(tables, str(Path(against).resolve()), rounds)
    with contextlib.ExitStack() as stack:
        # Both clusters up at once, their runs taken in turns: whatever else the machine
        # does at a moment weighs on both tables alike, and each pair's ratio is taken.
        tables = {n: start_table(prefix, n, tmp, stack) for n in (3, BIG)}
        walls: dict[int, list[float]] = {3: [], BIG: []}
        for i in range(runs):
            for n in ((3, BIG) if i % 2 == 0 else (BIG, 3)):
                walls[n].append(one_run(tables[n]))
        results = [table_figures(tables[n], n, walls[n]) for n in (3, BIG)]
    for r in results:
        print(f"Slurm {r['slurm']} table of {r['declared']:5} nodes ({r['nodes_listed']} listed): failing run "
              f"{r['wall_median'] * 1000:.0f} ms median (min {r['wall_min'] * 1000:.0f}) of {r['runs']}, "
              f"{r['rpcs_per_run']:.2f} RPCs/run {r['rpcs']}, slurmctld {r['ctld_ms_per_read'] or 0:.2f} ms per "
              f"node-table read; parse whole {r['parse_whole_ms']:.1f} ms, lean {r['parse_lean_ms']:.1f} ms, "
              f"of the run's own read {r['parse_alone_ms']:.1f} ms; the table {r['bytes_whole']} bytes whole, "
              f"{r['bytes_alone']} as the run reads it")
    small, big = results
    pairs = sorted(b / a for a, b in zip(walls[3], walls[BIG]))
    print(f"ratio 4,096 / 3 nodes: {big['wall_median'] / small['wall_median']:.2f}x of the medians; "
          f"median of the {len(pairs)} pairs' ratios {statistics.median(pairs):.2f}x")
    return 0


def compare(tables: dict, against: str, rounds: int) -> int:
    """This code against the code in `against`, on both tables: each round the four runs
    (this or that code, 3 or 4,096 nodes) in an order that turns, so that the machine's
    drift weighs on all four alike."""
    variants = [(code, n) for code in ("this", "that") for n in (3, BIG)]
    walls: dict[tuple, list[float]] = {v: [] for v in variants}

    def run(code: str, n: int) -> float:
        return one_run(tables[n], against if code == "that" else None)
    for v in variants:
        run(*v)                 # compiled, cached, pyslurm tried: as on a node after its first run
    for r in range(rounds):
        order = variants[r % 4:] + variants[:r % 4]
        for v in (order[::-1] if r % 2 else order):
            walls[v].append(run(*v))
    med = {v: statistics.median(w) * 1000 for v, w in walls.items()}
    version = tables[3][0].version
    for code, name in (("that", f"code in {against}"), ("this", "this code")):
        small, big = walls[(code, 3)], walls[(code, BIG)]
        print(f"Slurm {version}, {name}: 3 nodes {med[(code, 3)]:.0f} ms, {BIG} nodes {med[(code, BIG)]:.0f} ms "
              f"(medians of {rounds}); ratio of medians {med[(code, BIG)] / med[(code, 3)]:.2f}x, median pair "
              f"ratio {statistics.median(b / a for a, b in zip(small, big)):.2f}x, median pair difference "
              f"{statistics.median(b - a for a, b in zip(small, big)) * 1000:.0f} ms")
    for n in (3, BIG):
        print(f"table of {n} nodes: this code / that code, median pair ratio "
              f"{statistics.median(b / a for a, b in zip(walls[('that', n)], walls[('this', n)])):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
