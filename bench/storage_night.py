"""The storage's night on the test cluster, timed phase by phase, at 3 and 16 nodes
(figures go to BENCHMARKS.md).

The storage is Debian's rclone (`rclone serve webdav` of a directory); its clients are
root's `rclone mount`s of it (tests/rclone_storage.py). slurmd runs the health check on
every node every HealthCheckInterval (5 s), with slurm-hooks' shipped settings but the
paths to probe (read, 1 s deadline), a short stuck-task grace and `resume_after: 1`; the
drain-storm breaker keeps its defaults (10 nodes, or 10 %).

- outage: one client mount that every node probes; a 2-node job of an unprivileged
  user reads it a step every 0.1 s, recording each step. The server is frozen
  (SIGSTOP) for 60 s, then answers (SIGCONT). Timed: from the freeze, every node
  naming the outage; from the answer, the job stepping again and every node back in
  service. Counted: the job's restarts (0: it waited), reboots and recoveries asked.
- restart: one client per node (its own mount point, one source name), each node
  with `recover.remount` (the client's own mount command). Every client is killed at
  once, as a restart of the storage does (their mounts answer ENOTCONN). Timed: every
  node remounted and back in service; counted: the most nodes drained at once by
  slurm-hooks, reboots asked.

Run as root from the repository (the packages of tests/run.sh):
    .venv/bin/python bench/storage_night.py [--nodes 3,16] [--slurm-prefix=/var/cache/slurm-hooks-tests/slurm-25.11.7]
"""
from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
PY = "/usr/bin/python3"
INTERVAL = 5
OUTAGE = 60.0

READER = """
import os, sys, time
mount, progress = sys.argv[1], sys.argv[2] + "-" + os.environ.get("SLURMD_NODENAME", "x")
while True:
    try:
        fd = os.open(mount + "/shard", os.O_RDONLY)
        os.fstat(fd)
        os.close(fd)
    except OSError:
        pass
    with open(progress, "a") as f:
        f.write(f"{time.time()}\\n")
    time.sleep(0.1)
"""


def runs(root: Path, node: str) -> list[dict]:
    path = root / f"journal-{node}.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, filter(None, path.read_text().splitlines())) if r.get("event") == "run"]


def acted(root: Path, nodes, kind: str) -> int:
    return sum(1 for n in nodes for r in runs(root, n) for a in r["actions"]
               if a["kind"] == kind and a["outcome"] == "done")


def drained_by_us(c) -> list[str]:
    return [n for n in c.nodes if "DRAIN" in c.node_state(n) and "[slurm-hooks]" in c.out_of_service_reason(n)]


def last_step(path: Path) -> float:
    try:
        return float(path.read_text().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return 0.0


def outage(n: int, prefix: str | None, tmp: Path) -> dict:
    from attacker import unprivileged_user
    from helpers import write_node_configs
    from rclone_storage import Storage
    from slurmcluster import SlurmCluster
    root = tmp / f"outage-{n}"
    nodes = tuple(f"n{i}" for i in range(1, n + 1))
    with unprivileged_user("shk-bench") as user, \
            SlurmCluster(root / "slurm", nodes=nodes, prefix=prefix, start_timeout=180.0) as c:
        storage = Storage(user.base / "storage", [user.base / "storage" / "gpfs"])
        try:
            point = storage.points[0]
            wrapper = write_node_configs(root, c, {}, {
                "filesystems": [{"path": str(point), "mountpoint": str(point), "timeout": 1, "mode": "read"}],
                "stuck_tasks": {"grace": 5, "sample_window": 0.5}, "policy": {"resume_after": 1}})
            reader = user.write("reader.py", READER)
            progress = user.home / "progress"
            job = _sbatch(c, user, f"exec {c.binary('srun')} {PY} {reader} {point} {progress}\n", "-N2", "--requeue")
            c.wait_for(lambda: len(list(user.home.glob("progress-*"))) == 2, 60, what="the job stepping")
            steps = list(user.home.glob("progress-*"))
            c.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n")
            time.sleep(INTERVAL + 1)
            t0 = time.monotonic()
            os.kill(storage.server.pid, signal.SIGSTOP)
            named = None
            most = 0
            while time.monotonic() - t0 < OUTAGE:
                most = max(most, len(drained_by_us(c)))
                if named is None and all(any(x.startswith("outage of ") for r in runs(root, node)[-1:]
                                             for x in r.get("notes", [])) for node in nodes):
                    named = time.monotonic() - t0
                time.sleep(0.5)
            os.kill(storage.server.pid, signal.SIGCONT)
            t1 = time.monotonic()
            stepping = back = None
            while time.monotonic() - t1 < 120 and (stepping is None or back is None):
                if stepping is None and all(last_step(p) > time.time() - 0.5 for p in steps):
                    stepping = time.monotonic() - t1
                if back is None and not [x for x in nodes if "DRAIN" in c.node_state(x)]:
                    back = time.monotonic() - t1
                time.sleep(0.2)
            info = c.show_job(job)
            return {"nodes": n, "named on every node": named, "most drained": most,
                    "stepping again": stepping, "every node back": back, "restarts": info.get("Restarts"),
                    "waited told": "waited on the outage of" in info.get("AdminComment", ""),
                    "reboots": acted(root, nodes, "reboot"), "recoveries": acted(root, nodes, "recover")}
        finally:
            storage.close()


def restart(n: int, prefix: str | None, tmp: Path) -> dict:
    from attacker import unprivileged_user
    from helpers import write_node_configs
    from rclone_storage import Storage
    from slurmcluster import SlurmCluster
    root = tmp / f"restart-{n}"
    nodes = tuple(f"n{i}" for i in range(1, n + 1))
    with unprivileged_user("shk-bench") as user, \
            SlurmCluster(root / "slurm", nodes=nodes, prefix=prefix, start_timeout=180.0) as c:
        storage = Storage(user.base / "storage", [user.base / "storage" / x for x in nodes])
        try:
            per_node = {x: {"filesystems": [{"path": str(p), "mountpoint": str(p), "timeout": 1, "mode": "read",
                                             "recover": {"remount": storage.mount_argv(p)}}]}
                        for x, p in zip(nodes, storage.points)}
            wrapper = write_node_configs(root, c, per_node, {"policy": {"resume_after": 1}})
            c.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY\n")
            time.sleep(INTERVAL + 1)
            clients = {p: storage.clients(p) for p in storage.points}
            t0 = time.monotonic()
            for pids in clients.values():
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
            most = 0
            done = None
            while time.monotonic() - t0 < 600 and done is None:
                most = max(most, len(drained_by_us(c)))
                if acted(root, nodes, "recover") >= n and not [x for x in nodes if "DRAIN" in c.node_state(x)] \
                        and all(storage.clients(p) and storage.clients(p) != clients[p] for p in storage.points):
                    done = time.monotonic() - t0
                time.sleep(0.5)
            return {"nodes": n, "every node remounted and back": done, "most drained": most,
                    "remounts": acted(root, nodes, "recover"), "reboots": acted(root, nodes, "reboot")}
        finally:
            storage.close()


def _sbatch(c, user, body: str, *args: str) -> str:
    conf = c.conf_path
    for d in reversed(conf.parents):
        d.chmod(d.stat().st_mode | 0o001)
    conf.chmod(0o644)
    script = user.write("job.sh", "#!/bin/sh\n" + body, 0o755)
    r = user.run(c.binary("sbatch"), "--parsable", "--ntasks-per-node=1", "-o", user.home / "job.out", *args,
                 script, env=user.env(SLURM_CONF=str(conf)))
    return r.stdout.strip().split(";")[0]


def main() -> int:
    prefix = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--slurm-prefix=")), None)
    sizes = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--nodes=")), "3,16")
    tmp = Path(tempfile.mkdtemp(prefix="shk-bench-night-"))
    for n in (int(x) for x in sizes.split(",")):
        for what in (outage, restart):
            print(json.dumps({"scenario": what.__name__, **what(n, prefix, tmp)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
