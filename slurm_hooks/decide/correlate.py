"""Findings that explain each other, joined into one diagnosis.

The incident's signature: seven GPUs of a job at 100 % (NCCL spinning in a barrier),
one at 0 %, and that GPU's process stuck in D in write() on a frozen filesystem. The
GPU check sees an idle GPU; the stuck-task check sees a stuck process. Reported apart,
they point an admin at the GPU. Joined, they say what happened: the GPU idles because
its process is blocked in the kernel, not because the GPU is broken.

An idle GPU alone is at most a warning (checks/gpu_idle.py: checkpoints, RL rollouts and
slow data loaders look the same). Joined to a stuck task it becomes part of that task's
finding, which fails, at once, whatever the idle GPU's own window says.
"""
from __future__ import annotations

from ..core.model import FAIL, WARN, Finding


def correlate(findings: list[Finding]) -> list[Finding]:
    for f in findings:
        if f.check == "gpu" and f.status == "idle_while_busy" and f.severity == FAIL:
            f.severity = WARN               # never a failure by itself
    stuck_by_pid = {f.evidence.get("pid"): f for f in findings
                    if f.check == "stuck_tasks" and f.status == "stuck"}
    if not stuck_by_pid:
        return findings
    out = []
    for f in findings:
        if f.check == "gpu" and f.status == "idle_while_busy":
            stuck = next((stuck_by_pid[p] for p in f.evidence.get("pids", []) if p in stuck_by_pid), None)
            if stuck is not None:
                busy = len(f.evidence.get("busy", []))
                stuck.summary += (f"; {f.target} idles because of it while {busy} other GPU(s) of "
                                  f"job {f.job} are busy (the GPU is not the fault)")
                stuck.evidence["idle_gpu"] = f.evidence.get("gpu")
                stuck.evidence["idle_seconds"] = f.evidence.get("seconds")
                stuck.severity = FAIL
                continue                    # the GPU finding is now part of the stuck one
        out.append(f)
    return out
