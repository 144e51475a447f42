"""The stuck-task check on a captured-style /proc tree: cgroup v2 attribution, other
nodes' jobs, kernel threads, our own probes, GPU-driver hangs, file and mount lookup.
Real D states are tested in test_stuck_tasks.py and test_stuck_jobs_cluster.py; this
covers the layouts this machine does not have (cgroup v2, GPFS, the NVIDIA driver)."""
from __future__ import annotations

import json
import subprocess
import time

from proctree import MOUNTINFO, task

from slurm_hooks.checks import Context
from slurm_hooks.checks.stuck_tasks import StuckTasksCheck
from slurm_hooks.checks._config import default_config as Config
from slurm_hooks.checks.stuck_tasks import StuckTasksConfig
from slurm_hooks.core.state import StateStore
from slurm_hooks.host.mounts import MountTable, parse_mountinfo
from slurm_hooks.host.runner import Runner

def build(root, ours=None):
    """`ours`: (pid, start) of a real process the runner's registry calls its own."""
    ours = ours or (500, 1500)
    keys = [
        task(root, 100, 100, "python", "S", cgroup="0::/system.slice/n1_slurmstepd.scope/job_55/step_0/user/task_3\n"),
        task(root, 100, 101, "pt_autograd_0", "D", syscall="1 0x7 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f01",
             wchan="wait_on_page_bit", stack="[<0>] folio_wait_bit+0x1/0x2\n[<0>] mmfs_write+0x5/0x9\n",
             fds={7: "/gpfs/run/main_log.txt"}, environ=b"SLURM_PROCID=3\0RANK=3\0PATH=/bin\0",
             cgroup="0::/system.slice/n1_slurmstepd.scope/job_55/step_0/user/task_3\n"),
        task(root, 200, 200, "python", "D", cgroup="0::/system.slice/n2_slurmstepd.scope/job_66/step_0/user/task_0\n",
             syscall="74 0x3 0 0 0 0 0 0x1 0x2", fds={3: "/gpfs/other"}),
        task(root, 300, 300, "nvidia-smi", "D", syscall="16 0x3 0xc020462a 0x7ffd 0 0 0 0x1 0x2",
             wchan="os_acquire_mutex", stack="[<0>] os_acquire_mutex+0x1/0x2 [nvidia]\n[<0>] _nv012345rm+0x1\n",
             fds={3: "/dev/nvidiactl"}),
        task(root, 400, 400, "kworker/1:1", "D", flags=0x00200000),
        task(root, ours[0], ours[0], "slurm-hooks-prb", "D", start=ours[1]),
        # A user's process that took our children's name: still a stuck task.
        task(root, 600, 600, "slurm-hooks-prb", "D", syscall="0 0x3 0 0 0 0 0 0x1 0x2"),
    ]
    (root / "loadavg").write_text("0.00 0.01 0.05 1/12 999\n")
    return keys


def test_captured_tree(tmp_path):
    proc = tmp_path / "proc"
    # A real live process stands for our stuck probe child: the registry keeps only
    # children still alive, by pid and start time.
    child = subprocess.Popen(["sleep", "60"])
    try:
        start = int(open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[19])
        keys = build(proc, ours=(child.pid, start))
        cfg = Config(state_dir=str(tmp_path / "state"), stuck_tasks=StuckTasksConfig(grace=60, sample_window=0.01))
        state = StateStore(str(tmp_path / "state" / "n1"))
        long_ago = time.time() - 600
        state.save("stuck-tasks", {k: {"first_seen": long_ago, "switches": [5, 1]} for k in keys})
        state.save("stuck-children", {"filesystem:/x": {"pid": child.pid, "start": start, "since": long_ago}})
        ctx = Context(cfg, "n1", state, Runner(state))
        ctx._mounts = MountTable(parse_mountinfo(MOUNTINFO))     # the captured host's own
        check = StuckTasksCheck(proc=str(proc))
        outcomes = ctx.runner.run(check.tasks(ctx))
        findings = {f.evidence["pid"]: f for f in check.findings(ctx, outcomes)}
    finally:
        child.kill()
        child.wait()

    assert set(findings) == {100, 300, 600}, "n2's job, the kernel thread and our own probe are skipped"
    assert findings[600].summary.startswith("pid 600 stuck") and findings[600].evidence["comm"] == "slurm-hooks-prb"
    job = findings[100]
    assert job.job == "55" and job.severity == "fail" and job.needs_reboot
    # No sched files in the captured tree: the first sighting (600 s ago) bounds it.
    assert job.summary.startswith("job 55 rank 3 pid 100 stuck for ≥10m0")
    assert job.summary.endswith("s in write() on /gpfs/run/main_log.txt (gpfs /gpfs)")
    assert job.evidence["d_at_least"] and 600 <= job.evidence["d_seconds"] < 660
    assert job.reason == "job 55 stuck in write() on /gpfs (gpfs), pid 100"
    assert "stuck" in job.reason[:20], "sinfo -R shows 20 columns"
    ev = job.evidence
    assert (ev["tids"], ev["fd"], ev["cause"], ev["step"], ev["task"]) == ([101], 7, "shared_filesystem", "0", "3")
    assert ev["stack"][:2] == ["folio_wait_bit", "mmfs_write"] and ev["cmdline"] == "python train.py"

    gpu = findings[300]
    assert gpu.job is None and gpu.severity == "warn"
    assert gpu.evidence["cause"] == "gpu_driver" and gpu.evidence["syscall"] == "ioctl"
    assert gpu.summary.endswith("in ioctl() on /dev/nvidiactl (ext4 /)")

    saved = json.loads((tmp_path / "state" / "n1" / "stuck-tasks.json").read_text())
    assert all(saved[k]["first_seen"] == long_ago for k in keys if k.startswith(("100/101", "300/")))


def test_progress_between_runs_restarts_the_clock(tmp_path):
    proc = tmp_path / "proc"
    keys = build(proc)
    cfg = Config(stuck_tasks=StuckTasksConfig(grace=60, sample_window=0.01))
    state = StateStore(str(tmp_path / "state"))
    # Last run saw pid 100's thread with other switch counts: it made progress since.
    state.save("stuck-tasks", {keys[1]: {"first_seen": time.time() - 600, "switches": [4, 1]}})
    ctx = Context(cfg, "n1", state, Runner(state))
    check = StuckTasksCheck(proc=str(proc))
    outcomes = ctx.runner.run(check.tasks(ctx))
    f = next(f for f in check.findings(ctx, outcomes) if f.evidence.get("pid") == 100)
    assert f.status == "watching" and f.severity == "ok"
