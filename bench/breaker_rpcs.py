"""What failing health checks cost slurmctld while the drain-storm breaker holds them.

    flock /tmp/shk-pytest.lock .venv/bin/python bench/breaker_rpcs.py [--slurm-prefix=PREFIX] [--runs 16] [--hung]
        [--nodes 32]

A 32-node (--nodes) Slurm cluster on this host (tests/slurmcluster.py, as the scale tests start
it), every node's health check failing (a configured filesystem that is not mounted),
`policy.max_drained_nodes: 3`. Round 1: RUNS health checks started at the same moment
(slurmd starts HealthCheckProgram without CYCLE), from no node drained: some drain,
the others are held. Round 2: the same again, now at the limit: every run not drained
already is held. slurmctld's RPC counters (`sdiag`, reset before each round, its own
request left out) give what each round cost, by message type; each run's journal says
what became of its drain (done, held, stepped back, skipped: already drained). With
PREFIX (the 25.11 build) once per backend, scontrol and pyslurm; Debian's 22.05 without.
Run it under the test suite's lock: it starts 32 slurmd.

--hung: the failing filesystem is one FUSE mount (root's, on every node alike) whose
server never answers, the storage's outage (decide/outage.py): each node names it in
its Comment, a held node by one update of its own the first time; round 3 is one
more, nothing changed.
"""
from __future__ import annotations

import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BIN = Path(sys.executable).parent
NODES = tuple(f"s{i}" for i in range(1, 33))


def nodes_of(count: int) -> tuple[str, ...]:
    return tuple(f"s{i}" for i in range(1, count + 1))
LIMIT = 3


def _round(c, nodes, conf_dir: Path, tmp: Path) -> tuple[dict, collections.Counter]:
    from helpers import healthchecks_at_once, sdiag_counts
    for node in nodes:
        (tmp / f"journal-{node}.jsonl").unlink(missing_ok=True)
    c.run("sdiag", "-r")
    before = sdiag_counts(c)
    healthchecks_at_once(nodes, conf_dir, timeout=180)
    after = sdiag_counts(c)
    spent = {k: after.get(k, 0) - before.get(k, 0) for k in after
             if k.startswith("REQUEST_") and after.get(k, 0) - before.get(k, 0) > 0}
    outcomes: collections.Counter = collections.Counter()
    for node in nodes:
        [rec] = [json.loads(ln) for ln in (tmp / f"journal-{node}.jsonl").read_text().splitlines()
                 if json.loads(ln).get("event") == "run"]
        for a in rec["actions"]:
            if a["kind"] == "drain":
                stepped = a["outcome"] == "held" and "stepped back" in a["message"]
                outcomes["stepped back" if stepped else a["outcome"]] += 1
    return spent, outcomes


def bench(prefix: str | None, backend: str | None, runs: int, tmp: Path, hung: bool = False,
          nodes: tuple[str, ...] = NODES) -> list[dict]:
    from helpers import write_node_configs
    from slurmcluster import SlurmCluster
    out = []
    root = tmp / f"{backend or 'auto'}-{time.monotonic_ns()}"
    mount = None
    if hung:
        from mounts_fixtures import start_fuse
        mount = start_fuse(root / "gpfs", "unanswered")
        fs = {"path": str(mount.path), "timeout": 2, "mode": "read"}
    else:
        fs = {"path": str(root / "absent" / "scratch"), "mountpoint": str(root / "absent")}
    rounds = ("round 1: from none drained", "round 2: at the limit") + (("round 3: the same",) if hung else ())
    with SlurmCluster(root / "slurm", nodes=nodes, start_timeout=180.0, cluster_name="hooksrpc", prefix=prefix) as c:
        c.backend = backend
        conf_dir = root / "conf"
        write_node_configs(root, c, {}, {
            "slurm": c.hooks_slurm(timeout=20),
            "filesystems": [fs],
            "stuck_tasks": {"enabled": False}, "gpu": {"enabled": "false"},
            "prometheus_textfile_dir": None, "syslog": False,
            "policy": {"max_drained_nodes": LIMIT, "max_drained_fraction": 0}})
        running = nodes[:runs]
        for name in rounds:
            spent, outcomes = _round(c, running, conf_dir, root)
            out.append({"slurm": c.version, "backend": backend or "auto", "round": name, "runs": len(running),
                        "rpcs": spent, "total": sum(spent.values()), "drains": dict(outcomes)})
        c.resume_all()
    if mount is not None:
        mount.close()
    return out


def main() -> int:
    prefix = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--slurm-prefix=")), None)
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 16
    count = int(sys.argv[sys.argv.index("--nodes") + 1]) if "--nodes" in sys.argv else len(NODES)
    tmp = Path(tempfile.mkdtemp(prefix="shk-bench-rpcs-"))
    for backend in (("scontrol", "pyslurm") if prefix else ("scontrol",)):
        for r in bench(prefix, backend, runs, tmp, "--hung" in sys.argv, nodes_of(max(count, runs))):
            held = r["drains"].get("held", 0)
            print(f"Slurm {r['slurm']} {r['backend']:8} {r['round']:27} {r['runs']} runs: {r['total']} RPCs "
                  f"({r['total'] / r['runs']:.2f}/run) {r['rpcs']}; drains {r['drains']}")
            if r["round"].startswith(("round 2", "round 3")) and held == r["runs"] - r["drains"].get("skipped", 0):
                # Round 2: the drained nodes' runs skip (their drain is in place: 1 read
                # each), every other run is held.
                print(f"    every run held or skipped: {r['total'] / r['runs']:.2f} RPCs per run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
