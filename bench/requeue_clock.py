"""Freeze -> running again, phase by phase, on a real cluster with Slurm's default timers
(figures go to BENCHMARKS.md).

An unprivileged user's 2-node `--requeue` job (on n1 and n2, free to run anywhere once
requeued); its rank on n1 opens a file of the node's FUSE mount whose server never
answers: in D from the start, still in D after SIGKILL (the seed's hang). slurmd runs
the health check every HealthCheckInterval (10 s), stuck-task grace 5 s, shipped
settings otherwise; slurm.conf has Slurm's defaults for what decides the clock (set before slurmctld starts:
AuthInfo is read at start only):
KillWait 30, UnkillableStepTimeout 60, AuthInfo cred_expire 120 (the requeue hold),
SchedulerParameters sched_interval 60 (bf_interval 30). No RebootProgram: the reboot
slurm-hooks asks for fails, so the figures are Slurm's and slurm-hooks' alone.

Three runs per Slurm: today's path (`release_node: false`, `restart_now: false`),
`release_node` (the default), and `release_node` + `restart_now`. Each phase is
seconds from the freeze (the rank's entry into the mount); a run is cut at 330 s.

    .venv/bin/python bench/requeue_clock.py [--slurm-prefix=/var/cache/slurm-hooks-tests/slurm-25.11.7]
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
PY = "/usr/bin/python3"
INTERVAL = 10
CUT = 330.0
DEFAULTS = ("AuthInfo=cred_expire=120\nKillWait=30\nUnkillableStepTimeout=60\n"
            "SchedulerParameters=sched_interval=60\n")

RANK = """
import os, sys, time
stuck, marks = sys.argv[1], sys.argv[2]
node, run = os.environ["SLURMD_NODENAME"], os.environ.get("SLURM_RESTART_COUNT", "0")
open(f"{marks}/started.{run}.{node}", "w").write(str(time.time()))
if node == "n1" and run == "0":
    open(os.path.join(stuck, "ckpt.pt"), "rb")
time.sleep(3600)
"""


def runs(root: Path, node: str) -> list[dict]:
    path = root / f"journal-{node}.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, filter(None, path.read_text().splitlines())) if r.get("event") == "run"]


def _epoch(stamp: str) -> float:
    """A journal's time (with its offset) or Slurm's (local, without one) as seconds."""
    from datetime import datetime
    if len(stamp) > 19:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def one(c, user, mount, root: Path, release: bool, restart: bool) -> dict:
    from helpers import write_node_configs
    wrapper = write_node_configs(root, c, {}, {
        "filesystems": [{"path": str(root)}], "stuck_tasks": {"grace": 5, "sample_window": 0.5},
        "actions": {"release_node": release, "restart_now": restart}})
    c.reconfigure(DEFAULTS + f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                  "HealthCheckNodeState=ANY\n")
    marks = user.home / f"marks-{time.monotonic_ns()}"
    marks.mkdir()
    user.own(marks)
    rank = user.write("rank.py", RANK, 0o644)
    c.scontrol("update", "nodename=n3", "state=drain", "reason=bench: the job starts on n1 and n2")
    script = user.write("clock.sh", f"#!/bin/sh\n{c.binary('srun')} -N2 --ntasks-per-node=1 {PY} {rank} "
                        f"{mount.path} {marks}\n", 0o755)
    conf = c.conf_path
    for d in reversed(conf.parents):
        d.chmod(d.stat().st_mode | 0o001)
    conf.chmod(0o644)
    r = user.run(c.binary("sbatch"), "--parsable", "-N2", "--requeue", "-o", "/dev/null", script,
                 env=user.env(SLURM_CONF=str(conf)))
    job = r.stdout.strip().split(";")[0]
    c.wait_for(lambda: (marks / "started.0.n1").exists(), 60, what="the stuck rank started")
    c.scontrol("update", "nodename=n3", "state=resume")
    freeze = float((marks / "started.0.n1").read_text())
    seen: dict[str, float] = {}

    def mark(name: str) -> None:
        seen.setdefault(name, round(time.time() - freeze, 1))
    requeued_at = None
    while time.time() - freeze < CUT and "running again" not in seen:
        info = c.show_job(job)
        state = info.get("JobState", "")
        if "DRAIN" in c.node_state("n1"):
            mark("drained")
        if info.get("Restarts") == "1":
            mark("requeued")
            requeued_at = requeued_at or time.time()
            if state == "PENDING":
                mark("left COMPLETING")
                if "eligible" not in seen and info.get("Reason") == "BeginTime":
                    seen["eligible"] = round(_epoch(info["EligibleTime"]) - freeze, 1)
            if state == "RUNNING":
                mark("left COMPLETING")
                mark("running again")
        if "Kill task failed" in c.show_node("n1").get("Reason", ""):
            mark("Slurm gave up on the task")
        time.sleep(0.5)
    for r in runs(root, "n1"):
        t = _epoch(r["time"]) + float(r.get("duration") or 0) - freeze
        if any(f.get("evidence", {}).get("sigkill_pending") for ch in r["checks"] for f in ch["findings"]):
            seen.setdefault("seen killed, still in D", round(t, 1))
        for a in r["actions"]:
            if a["kind"] == "release" and a["outcome"] == "done":
                seen.setdefault("node released (DOWN)", round(t, 1))
            if a["kind"] == "start" and a["outcome"] == "done":
                seen.setdefault("start asked", round(t, 1))
    out = {"release_node": release, "restart_now": restart, "job state at the end": c.show_job(job).get("JobState")}
    out.update(dict(sorted(seen.items(), key=lambda kv: kv[1])))
    if "running again" not in seen:
        out["running again"] = f"not within {CUT:.0f} s"
    c.scontrol("cancel", job, check=False)
    return out


def main() -> int:
    from attacker import unprivileged_user
    from mounts_fixtures import start_fuse
    from slurmcluster import SlurmCluster
    prefix = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--slurm-prefix=")), None)
    only = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), "")
    tmp = Path(tempfile.mkdtemp(prefix="shk-bench-clock-"))
    with unprivileged_user("shk-clock" + ("25" if prefix else "22")) as user, \
            SlurmCluster(tmp / "slurm", prefix=prefix, conf_extra=DEFAULTS) as c:
        for i, (release, restart) in enumerate(((False, False), (True, False), (True, True))):
            if only and str(i) not in only.split(","):
                continue
            mount = start_fuse(user.base / f"data-{i}", "stuck")
            try:
                root = tmp / f"run-{i}"
                root.mkdir()
                res = one(c, user, mount, root, release, restart)
            finally:
                mount.close()
            print(json.dumps({"slurm": c.version, **res}), flush=True)
            c.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
