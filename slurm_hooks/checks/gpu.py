"""GPU check: lost, wedged, missing and idle-while-busy NVIDIA GPUs, without ever hanging.

This module runs the one NVML reading (a single hang-safe task) and hands it to the
pieces, each in its own module and each keeping its own state: verdicts per GPU
(_gpu_health.py), count (_gpu_count.py), Xid events (_gpu_xid.py), idle-while-busy
(_gpu_idle.py), the prolog's and epilog's view (_gpu_hooks.py).

- NVML runs only in a hang-safe child (host/nvml.py). A child past its deadline means the
  driver stopped answering; the finding names the call it was making. A child stuck
  for good is remembered by the runner: later runs report "still hung" and do not
  pile up more stuck children.
- No driver on the node (no /dev/nvidiactl, no /proc/driver/nvidia): not applicable,
  decided with two stat() calls and no import, unless `gpu.enabled: true` says this
  node must have GPUs.
- Every GPU is read cleanly or fails, naming the NVML error (a GPU that fell off the bus
  answers its handle lookup with "Unknown Error"; nothing it says is "healthy").
- Verdicts follow NVIDIA's documents (_gpu_health.py): what needs a reset or a reboot
  drains and frees the GPU's job; what lets running work finish (a row remap pending)
  drains and leaves the job running; what the driver says to quiesce and ask again
  (DRAIN_P2P) is resumed once it clears.
- Count (_gpu_count.py): fewer GPUs than `gpu.count` (or the node's Gres=gpu:N in
  Slurm) is a failure naming the missing PCI addresses, from an inventory of GPUs seen
  in earlier runs and from the NVIDIA devices on the PCI bus.
- Xid events (_gpu_xid.py): kernel log records since the last real run's position
  (host/kmsg.py), classified by host/xid.py's table and, where the driver offers it, by NVML's
  recovery action; attached to the GPU with that PCI address.
- Idle while busy (_gpu_idle.py): a warning after a continuous window; correlate() joins
  it with a stuck task of the same process into one diagnosis.
- In the prolog and epilog (_gpu_hooks.py): only the job's GPUs, found by minor number,
  UUID or PCI id, never by NVML's index.

GPUs are known by PCI address and UUID everywhere in state; NVML's index only names them
in messages (its order is not guaranteed to be anyone else's).
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.config import setting
from ..core.model import FAIL, OK, WARN, Finding
from ..host.runner import DONE, HUNG, STILL_HUNG, Task
from ._gpu_config import GpuConfig, GpuIdleConfig  # noqa: F401 (the section's classes)

if TYPE_CHECKING:
    from ..core.config import Config
    from ..host.jobs import JobRef
    from ..host.runner import Outcome as TaskOutcome
    from . import Context

NAME = "gpu"
ORDER = 40
HOOKS = ("check", "healthcheck", "prolog", "epilog")


SECTIONS = {"gpu": setting(kind="section", cls=GpuConfig, doc="NVIDIA GPUs, through NVML.")}


def settings(cfg: Config) -> GpuConfig:
    """This check's section of the configuration."""
    out: GpuConfig = getattr(cfg, "gpu")
    return out



DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia/version")


def driver_present() -> bool:
    return any(os.path.exists(p) for p in DRIVER_PATHS)


def _nvml_collect(progress):
    from ..host.nvml import collect
    return collect(progress)


def who(g: dict) -> str:
    return f"gpu {g['index']} ({g.get('pci') or '?'})"


class GpuCheck:
    name = NAME
    order, hooks = ORDER, HOOKS
    roles: tuple[str, ...] = ()
    state = ("gpu-counters", "gpu-inventory", "gres", "kmsg-xid", "gpu-jobs", "gpu-xids", "gpu-idle")
    series = {"slurm_hooks_gpu_health": ("gauge", "Worst verdict for a GPU: 0 ok, 1 warning, 2 failing.")}
    explain_keys = ("index", "pci", "name", "xid", "meaning", "kernel_log", "recovery_action", "ecc_uncorrected_volatile",
                    "remapped_rows", "memory_used_mib", "pids", "busy", "count", "visible", "expected", "missing", "call")

    @staticmethod
    def correlate(findings: list[Finding]) -> list[Finding]:
        """An idle GPU whose process is stuck in D is part of that stuck task's finding."""
        if not any(f.status == "idle_while_busy" for f in findings):
            return findings         # the usual run: nothing to join, nothing to import
        from ._gpu_idle import correlate
        return correlate(findings)

    @staticmethod
    def samples(findings: list[Finding]) -> list[tuple[str, dict, float]]:
        """slurm_hooks_gpu_health{gpu,pci}: each GPU's worst verdict this run."""
        from ..core.model import SEVERITY_ORDER
        gpus: dict[tuple[str, str], int] = {}
        for f in findings:
            if f.target.startswith("gpu ") and "(" in f.target:
                idx = f.target.split()[1]
                pci = f.target.split("(", 1)[1].rstrip(")")
                gpus[(idx, pci)] = max(gpus.get((idx, pci), 0), SEVERITY_ORDER[f.severity])
            if f.status == "ok" and "gpus" in f.evidence:
                for g in f.evidence["gpus"]:
                    gpus.setdefault((str(g["index"]), g.get("pci") or "?"), 0)
        return [("slurm_hooks_gpu_health", {"gpu": idx, "pci": pci}, v) for (idx, pci), v in sorted(gpus.items())]

    def __init__(self, sysfs: str | None = None):
        self.sysfs = sysfs          # None: gpu_count.SYSFS
        self._skip: Finding | None = None

    def tasks(self, ctx: Context) -> list[Task]:
        cfg = settings(ctx.config)
        if cfg.enabled == "false":
            self._skip = Finding(NAME, "gpu", "disabled", OK, "gpu: check disabled (gpu.enabled: false)")
            return []
        if cfg.enabled == "auto" and not driver_present():
            self._skip = Finding(NAME, "gpu", "not_applicable", OK,
                                 "gpu: no NVIDIA driver on this node: not applicable")
            return []
        if ctx.behaviour.for_job:
            from ._gpu_hooks import given_none
            self._skip = given_none(ctx)
            if self._skip is not None:
                return []
        return [Task(f"{NAME}:nvml", _nvml_collect, (), cfg.timeout)]

    def findings(self, ctx: Context, outcomes: dict[str, TaskOutcome]) -> list[Finding]:
        if self._skip is not None:
            return [self._skip]
        cfg = settings(ctx.config)
        o = outcomes[f"{NAME}:nvml"]
        if o.status in (HUNG, STILL_HUNG):
            asked = o.step or "nvmlInit"
            detail = o.error
            if o.status == STILL_HUNG:
                detail = (f"still hung since {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(o.since))} "
                          f"(NVML child pid {o.pid} stuck in the driver)")
            return [Finding(NAME, "driver", "unresponsive", FAIL,
                            f"gpu driver unresponsive: no answer to {asked} within {cfg.timeout:g}s",
                            detail=detail, evidence={"call": asked, "pid": o.pid, "since": o.since},
                            reason=f"gpu driver unresponsive ({asked.split(': ')[-1]})",
                            incident=f"gpu-driver:{o.since:.0f}", needs_reboot=True, hard=True,
                            resumable=False)]
        if o.status != DONE:
            return [Finding(NAME, "nvml", "error", WARN, f"gpu: NVML query failed: {o.error}")]
        v = o.value
        if "init_error" in v:
            return [self._init_failure(cfg, v)]
        # Imported here, not at the top: a node without a driver (and every prolog on
        # one) never needs them, and importing them costs a job start milliseconds.
        from ._gpu_count import SYSFS, count_findings, locate
        from ._gpu_health import health, system_errors
        from ._gpu_xid import remember_xids, xid_findings
        gpus = v.get("gpus", [])
        locate(ctx, gpus)
        if ctx.behaviour.for_job:
            from ._gpu_hooks import hook_findings
            return system_errors(v) + hook_findings(ctx, cfg, gpus, v)
        out = system_errors(v)
        by_pci = {g["pci"]: g for g in gpus if g.get("pci")}
        jobs = self._jobs(ctx, gpus)
        last_jobs = self._remember_jobs(ctx, gpus, jobs)
        out += count_findings(ctx, cfg, gpus, by_pci, self.sysfs or SYSFS)
        xids = xid_findings(ctx, cfg, by_pci, jobs)
        last_xid = remember_xids(ctx, xids)
        counters = ctx.state.load("gpu-counters")
        for g in gpus:
            job = jobs.get(g["index"])
            jobid = job[0].job if job else last_jobs.get(g.get("pci") or "")
            linked = [f.evidence["xid"] for f in xids
                      if f.evidence.get("pci") == g.get("pci") and f.evidence.get("linked")]
            found = health(cfg, g, jobid, counters.get(g.get("uuid") or "", {}), last_xid, linked)
            out += found
            if any(f.status in ("lost", "reset_required") for f in found):
                # "gpu 3 (...) lost: Xid 79" says it all; no second line for the Xid.
                xids = [f for f in xids if f.evidence.get("pci") != g.get("pci")]
        out += xids
        ctx.state.save("gpu-counters", {g["uuid"]: {"pcie_replays": g.get("pcie_replays"),
                                                     "nvlink": g.get("nvlink_errors")}
                                        for g in gpus if g.get("uuid")})
        if cfg.idle.enabled != "false":
            from ._gpu_idle import idle_findings
            out += idle_findings(ctx, cfg.idle, gpus, jobs)
        if not [f for f in out if f.severity != OK]:
            out.append(Finding(NAME, "gpus", "ok", OK,
                               f"gpu: {len(gpus)} GPU(s) healthy (driver {v.get('driver') or '?'})",
                               evidence={"gpus": gpus, "driver": v.get("driver")}))
        return out

    # --- pieces ------------------------------------------------------------------------
    def _init_failure(self, cfg: GpuConfig, v) -> Finding:
        err = v["init_error"]
        if err == "LIBRARY_NOT_FOUND" and cfg.enabled == "auto":
            return Finding(NAME, "nvml", "error", WARN,
                           f"gpu: NVIDIA driver present but NVML unavailable ({err})",
                           detail=v.get("message", ""))
        return Finding(NAME, "nvml", "error", FAIL, f"gpu: NVML init failed: {err}",
                       detail=v.get("message", ""), reason=f"gpu NVML init failed: {err}",
                       incident=f"gpu-init:{err}", hard=True, resumable=False)

    def _jobs(self, ctx: Context, gpus: list[dict]) -> dict[int, tuple[JobRef, list[int]]]:
        """GPU index (this run's) -> (the job using it on this node, its pids on the GPU)."""
        from ..host.jobs import of_pid
        out: dict[int, tuple[JobRef, list[int]]] = {}
        for g in gpus:
            for p in (g.get("processes") or []) + (g.get("mps_processes") or []):
                ref = of_pid(p["pid"])
                if ref is None or not ref.belongs_to(ctx.node):
                    continue
                if g["index"] not in out:
                    out[g["index"]] = (ref, [])
                if out[g["index"]][0].job == ref.job and p["pid"] not in out[g["index"]][1]:
                    out[g["index"]][1].append(p["pid"])
        return out

    @staticmethod
    def _remember_jobs(ctx: Context, gpus: list[dict], jobs: dict) -> dict:
        """pci -> the job seen on that GPU last run. A GPU that is lost can no longer
        say which processes used it; the job that did is the one to requeue."""
        before = ctx.state.load("gpu-jobs")
        now = {g["pci"]: jobs[g["index"]][0].job for g in gpus if g.get("pci") and g["index"] in jobs}
        if now != before:
            ctx.state.save("gpu-jobs", now)
        return before


CHECK = GpuCheck
