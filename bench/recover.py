"""The incident, end to end, timed phase by phase (figures go to BENCHMARKS.md).

A 2-node job of an unprivileged user on the 3-node test cluster; rank 0 (on n1) logs
to the node's FUSE mount, whose server then stops answering (SIGUSR1: requests read and
held; callers in D, still in D after SIGKILL, like on a dead GPFS). slurmd runs the
health check every 5 s (HealthCheckInterval=5, stuck_tasks.grace 15), the mount has
`recover: fuse-abort` and a remount that starts a fresh server. Timed from the freeze:
n1 drained, the job requeued, the mount recovered, the job running again on other
nodes, n1 back in service; and whether a reboot was asked.

Scenarios: the Slurm settings that decide how soon a requeued job may start again
(22.05: AuthInfo=cred_expire, default 120 s; 25.11: SchedulerParameters=requeue_delay,
default cred_expire). Targets: job running again <= 60 s with the README's
recommended settings, <= 150 s with Slurm's defaults; the node back <= 90 s.

Run as root from the repository (the Slurm test-cluster packages, see tests/run.sh):
    .venv/bin/python bench/recover.py [--slurm-prefix=/var/cache/slurm-hooks-tests/slurm-25.11.7]
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BIN = Path(sys.executable).parent
PY = "/usr/bin/python3"

RANK = """
import os, sys, time
mount, marks = sys.argv[1], sys.argv[2]
rank, again = os.environ["SLURM_PROCID"], os.environ.get("SLURM_RESTART_COUNT", "0")
open(os.path.join(marks, f"run.{again}.{rank}"), "w").close()
while True:                      # a training loop: rank 0 logs a line a step
    if rank == "0" and again == "0":
        with open(os.path.join(mount, "main_log.txt"), "a") as log:
            log.write("step\\n")
    time.sleep(0.2)
"""


def scenarios(prefix: str | None) -> list[tuple[str, str]]:
    sched = "SchedulerParameters=sched_interval=1,bf_interval=1,sched_min_interval=0"
    if prefix:            # 25.11
        return [("25.11 recommended: requeue_delay=10", f"AuthInfo=cred_expire=120\n{sched},requeue_delay=10"),
                ("25.11 Slurm's defaults (cred_expire=120)", "AuthInfo=cred_expire=120")]
    return [("22.05 recommended: AuthInfo=cred_expire=30", "AuthInfo=cred_expire=30"),
            ("22.05 Slurm's defaults (cred_expire=120)", "AuthInfo=cred_expire=120")]


def run(name: str, conf: str, prefix: str | None, tmp: Path) -> dict:
    from attacker import unprivileged_user
    from helpers import write_node_configs
    from slurmcluster import SlurmCluster
    root = tmp / name.split()[0].replace(".", "") / str(time.monotonic_ns())
    with unprivileged_user("shk-bench") as user, SlurmCluster(root / "slurm", conf_extra=conf, prefix=prefix) as c:
        # The server must hold what it read once it stalls: no_interrupt, as `stuck` sets.
        (user.base / "scratch").mkdir()
        fuse_log = user.base / "scratch.log"
        ready = user.base / "scratch.ready"
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fusefs.py"), "ok", str(user.base / "scratch"),
                                   "--no-interrupt", "--ready-file", str(ready), "--name", "fusefs-bench"],
                                  stdout=open(fuse_log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        while not ready.exists():
            time.sleep(0.05)
        mount = user.base / "scratch"
        os.chmod(mount, 0o777)
        remount_ready = root / "remount.ready"
        fs = {"path": str(mount), "mountpoint": str(mount), "timeout": 2,
              "recover": {"method": "fuse-abort", "wait": 10,
                          "remount": [sys.executable, str(ROOT / "tests" / "remount_fuse.py"), "ok", "{mountpoint}",
                                      str(remount_ready)]}}
        wrapper = write_node_configs(root, c, {"n1": {"filesystems": [fs]}}, {
            "filesystems": [{"path": str(root)}], "stuck_tasks": {"grace": 15, "sample_window": 1},
            "policy": {"resume_after": 1}})
        c.reconfigure(conf + f"\nHealthCheckProgram={wrapper}\nHealthCheckInterval=5\nHealthCheckNodeState=ANY\n")
        marks = user.mkdir("marks")
        os.chmod(marks, 0o777)
        rank = user.write("rank.py", RANK)
        script = user.write("job.sh", f"#!/bin/sh\n{c.binary('srun')} {PY} {rank} {mount} {marks}\n", 0o755)
        conf_path = c.conf_path
        for d in reversed(conf_path.parents):
            d.chmod(d.stat().st_mode | 0o001)
        conf_path.chmod(0o644)
        r = user.run(c.binary("sbatch"), "--parsable", "-N2", "--ntasks-per-node=1", "--requeue",
                     "-o", user.home / "job.out",
                     script, env=user.env(SLURM_CONF=str(conf_path)))
        job = r.stdout.strip().split(";")[0]
        try:
            c.wait_for(lambda: len(list(marks.glob("run.0.*"))) == 2, 60, what="the job running")
        except AssertionError:
            out = user.home / "job.out"
            raise AssertionError(f"{c.show_job(job)}: {out.read_text() if out.exists() else ''}") from None
        time.sleep(6)                                   # a healthy health check or so
        t0 = time.monotonic()
        os.kill(server.pid, signal.SIGUSR1)              # the freeze
        marks_at: dict[str, float] = {}

        def mark(what: str, cond) -> None:
            if what not in marks_at and cond():
                marks_at[what] = time.monotonic() - t0

        def journal(kind):
            path = root / "journal-n1.jsonl"
            if not path.exists():
                return []
            return [a for line in path.read_text().splitlines() if line.strip()
                    for a in json.loads(line).get("actions", []) if a.get("kind") == kind]
        deadline = t0 + 300
        while time.monotonic() < deadline and len(marks_at) < 5:
            mark("n1 drained", lambda: "DRAIN" in c.node_state("n1"))
            mark("job requeued", lambda: c.show_job(job).get("Restarts") == "1")
            mark("mount recovered", lambda: any(a["outcome"] == "done" and a["code"] == "recovered"
                                                for a in journal("recover")))
            mark("job running again", lambda: len(list(marks.glob("run.1.*"))) == 2)
            mark("n1 back in service", lambda: "n1 drained" in marks_at and "DRAIN" not in c.node_state("n1"))
            time.sleep(0.25)
        nodes = c.show_job(job).get("NodeList", "")
        reboots = journal("reboot")
        server.kill()
        c.scontrol("cancel", job, check=False)
        time.sleep(1)
        if remount_ready.exists():
            try:
                os.kill(int(remount_ready.read_text().strip()), signal.SIGKILL)
            except (ValueError, ProcessLookupError):
                pass
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        return {"name": name, "phases": marks_at, "nodes after": nodes, "reboots asked": len(reboots)}


def main() -> int:
    prefix = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--slurm-prefix=")), None)
    tmp = Path(tempfile.mkdtemp(prefix="shk-bench-recover-"))
    for name, conf in scenarios(prefix):
        out = run(name, conf, prefix, tmp)
        print(f"\n{out['name']}: the job ran again on {out['nodes after']}, reboots asked: {out['reboots asked']}")
        for what, t in sorted(out["phases"].items(), key=lambda x: x[1]):
            print(f"  {what:22s} {t:6.1f} s after the freeze")
        for what in ("n1 drained", "job requeued", "mount recovered", "job running again", "n1 back in service"):
            if what not in out["phases"]:
                print(f"  {what:22s} not within 300 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
