"""GPU check: lost, wedged, missing and idle-while-busy NVIDIA GPUs, without ever hanging.

- NVML runs only in a hang-safe child (nvml.py). A child past its deadline means the
  driver stopped answering; the finding names the call it was making. A child stuck
  for good is remembered by the runner: later runs report "still hung" and do not
  pile up more stuck children.
- No driver on the node (no /dev/nvidiactl, no /proc/driver/nvidia): not applicable,
  decided with two stat() calls and no import, unless `gpu.enabled: true` says this
  node must have GPUs.
- Every GPU is read cleanly or fails, naming the NVML error (a GPU that fell off the bus
  answers its handle lookup with "Unknown Error"; nothing it says is "healthy").
- Verdicts follow NVIDIA's documents (gpu_health.py): what needs a reset or a reboot
  drains and frees the GPU's job; what lets running work finish (a row remap pending)
  drains and leaves the job running; what the driver says to quiesce and ask again
  (DRAIN_P2P) is resumed once it clears.
- Count: fewer GPUs than `gpu.count` (or the node's Gres=gpu:N in Slurm) is a failure
  naming the missing PCI addresses, from an inventory of GPUs seen in earlier runs and
  from the NVIDIA devices on the PCI bus.
- Xid events: kernel log records since the last run's position (kmsg.py), classified by
  xid.py's table and, where the driver offers it, by NVML's recovery action; attached to
  the GPU with that PCI address.
- Idle while busy (gpu_idle.py): a warning after a continuous window; correlate.py joins
  it with a stuck task of the same process into one diagnosis.
- In the prolog and epilog (gpu_hooks.py): only the job's GPUs, found by minor number,
  UUID or PCI id, never by NVML's index.

GPUs are known by PCI address and UUID everywhere in state; NVML's index only names them
in messages (its order is not guaranteed to be anyone else's).
"""
from __future__ import annotations

import os
import time

from .. import xid as xidmod
from ..jobs import JobRef
from ..model import FAIL, OK, WARN, Finding
from ..runner import DONE, HUNG, STILL_HUNG, Task
from .gpu_health import health, system_errors

NAME = "gpu"
DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia/version")
NVIDIA_VENDOR = "0x10de"
GRES_TTL = 3600.0


def driver_present() -> bool:
    return any(os.path.exists(p) for p in DRIVER_PATHS)


def _nvml_collect(progress):
    from ..nvml import collect
    return collect(progress)


def parse_gres_gpus(gres: str) -> int | None:
    """GPUs in a Gres string: gpu:8, gpu:h100:8(S:0-1), gpu:a100:4,gpu:h100:4; None if none."""
    total, found = 0, False
    for item in (gres or "").split(","):
        item = item.split("(", 1)[0].strip()
        parts = item.split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        try:
            total += int(parts[-1])
            found = True
        except ValueError:
            continue
    return total if found else None


def pci_gpus(sysfs: str = "/sys/bus/pci/devices") -> set[str]:
    """NVIDIA display/3D controllers on the PCI bus, whatever NVML thinks of them."""
    out = set()
    try:
        names = os.listdir(sysfs)
    except OSError:
        return out
    for name in names:
        try:
            with open(f"{sysfs}/{name}/vendor") as f:
                if f.read().strip() != NVIDIA_VENDOR:
                    continue
            with open(f"{sysfs}/{name}/class") as f:
                if not f.read().strip().startswith(("0x0300", "0x0302")):
                    continue
        except OSError:
            continue
        out.add(xidmod.normalise_pci(name))
    return out


def who(g: dict) -> str:
    return f"gpu {g['index']} ({g.get('pci') or '?'})"


class GpuCheck:
    name = NAME

    def __init__(self, sysfs: str = "/sys/bus/pci/devices"):
        self.sysfs = sysfs
        self._skip: Finding | None = None

    def tasks(self, ctx) -> list[Task]:
        cfg = ctx.config.gpu
        if cfg.enabled == "false":
            self._skip = Finding(NAME, "gpu", "disabled", OK, "gpu: check disabled (gpu.enabled: false)")
            return []
        if cfg.enabled == "auto" and not driver_present():
            self._skip = Finding(NAME, "gpu", "not_applicable", OK,
                                 "gpu: no NVIDIA driver on this node: not applicable")
            return []
        if ctx.hook in ("prolog", "epilog"):
            from .gpu_hooks import given_none
            self._skip = given_none(ctx)
            if self._skip is not None:
                return []
        return [Task(f"{NAME}:nvml", _nvml_collect, (), cfg.timeout)]

    def findings(self, ctx, outcomes) -> list[Finding]:
        if self._skip is not None:
            return [self._skip]
        cfg = ctx.config.gpu
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
        gpus = v.get("gpus", [])
        self._locate(ctx, gpus)
        if ctx.hook in ("prolog", "epilog"):
            from .gpu_hooks import hook_findings
            return system_errors(v) + hook_findings(ctx, cfg, gpus, v)
        out = system_errors(v)
        by_pci = {g["pci"]: g for g in gpus if g.get("pci")}
        jobs = self._jobs(ctx, gpus)
        last_jobs = self._remember_jobs(ctx, gpus, jobs)
        out += self._count(ctx, cfg, gpus, by_pci)
        xids = self._xids(ctx, cfg, by_pci, jobs)
        last_xid = self._remember_xids(ctx, xids)
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
        if cfg.idle.enabled:
            from .gpu_idle import idle_findings
            out += idle_findings(ctx, cfg.idle, gpus, jobs)
        if not [f for f in out if f.severity != OK]:
            out.append(Finding(NAME, "gpus", "ok", OK,
                               f"gpu: {len(gpus)} GPU(s) healthy (driver {v.get('driver') or '?'})",
                               evidence={"gpus": gpus, "driver": v.get("driver")}))
        return out

    # --- pieces ------------------------------------------------------------------------
    def _locate(self, ctx, gpus: list[dict]) -> None:
        """Canonical PCI ids; a GPU that no longer answers (its handle lookup fails) is
        placed where the GPU of that index sat earlier in this boot: NVML numbers GPUs
        once per driver load, so within a boot the index still names the same slot."""
        from ..kmsg import boot_id
        boot = boot_id()
        known = {entry["index"]: pci for pci, entry in ctx.state.load("gpu-inventory").items()
                 if entry.get("boot") == boot}
        for g in gpus:
            if g.get("pci"):
                g["pci"] = xidmod.normalise_pci(g["pci"])
            elif g["status"] != "ok" and g["index"] in known:
                g["pci"] = known[g["index"]]

    def _init_failure(self, cfg, v) -> Finding:
        err = v["init_error"]
        if err == "LIBRARY_NOT_FOUND" and cfg.enabled == "auto":
            return Finding(NAME, "nvml", "error", WARN,
                           f"gpu: NVIDIA driver present but NVML unavailable ({err})",
                           detail=v.get("message", ""))
        return Finding(NAME, "nvml", "error", FAIL, f"gpu: NVML init failed: {err}",
                       detail=v.get("message", ""), reason=f"gpu NVML init failed: {err}",
                       incident=f"gpu-init:{err}", hard=True, resumable=False)

    def _jobs(self, ctx, gpus: list[dict]) -> dict[int, tuple[JobRef, list[int]]]:
        """GPU index (this run's) -> (the job using it on this node, its pids on the GPU)."""
        from ..jobs import from_cgroup
        from ..procfs import text
        out = {}
        for g in gpus:
            for p in (g.get("processes") or []) + (g.get("mps_processes") or []):
                cg = text(f"/proc/{p['pid']}/cgroup")
                ref = from_cgroup(cg) if cg else None
                if ref is None or not ref.belongs_to(ctx.node):
                    continue
                if g["index"] not in out:
                    out[g["index"]] = (ref, [])
                if out[g["index"]][0].job == ref.job and p["pid"] not in out[g["index"]][1]:
                    out[g["index"]][1].append(p["pid"])
        return out

    def _count(self, ctx, cfg, gpus, by_pci) -> list[Finding]:
        from ..kmsg import boot_id
        inventory = ctx.state.load("gpu-inventory")
        boot = boot_id()
        for pci, g in by_pci.items():
            inventory[pci] = {"index": g["index"], "uuid": g.get("uuid") or inventory.get(pci, {}).get("uuid"),
                              "name": g.get("name"), "boot": boot}
        ctx.state.save("gpu-inventory", inventory)
        expected = cfg.count if cfg.count is not None else self._gres_count(ctx)
        on_bus = pci_gpus(self.sysfs)
        missing = sorted((set(inventory) | on_bus) - set(by_pci))
        if expected is None or len(gpus) >= expected:
            if missing and on_bus - set(by_pci):
                return [Finding(NAME, "count", "missing", WARN,
                                f"gpu: on the PCI bus but not visible to NVML: {', '.join(sorted(on_bus - set(by_pci)))}")]
            return []
        names = ", ".join(f"{p} (was gpu {inventory[p]['index']})" if p in inventory else p for p in missing)
        where = f": missing {names}" if names else ""
        return [Finding(NAME, "count", "missing", FAIL,
                        f"gpu count {len(gpus)} < expected {expected}{where}",
                        evidence={"visible": len(gpus), "expected": expected, "missing": missing},
                        reason=f"gpu count {len(gpus)} < {expected}" + (f" missing {', '.join(missing)}" if missing else ""),
                        incident=f"gpu-count:{len(gpus)}<{expected}", needs_reboot=True, hard=True,
                        resumable=False)]

    def _gres_count(self, ctx) -> int | None:
        cached = ctx.state.load("gres")
        if cached and time.time() - float(cached.get("at", 0)) < GRES_TTL:
            return cached.get("gpus")
        from ..backend import open_backend
        from ..slurm import SlurmError
        try:
            info = open_backend(ctx.config.slurm).show_node(ctx.node)
        except SlurmError as e:
            ctx.notes.append(f"gpu count not checked: Slurm did not say this node's Gres ({e})")
            return None
        gpus = parse_gres_gpus(info.get("Gres", "")) if info else None
        ctx.state.save("gres", {"at": time.time(), "gpus": gpus})
        return gpus

    def _xids(self, ctx, cfg, by_pci, jobs) -> list[Finding]:
        from .. import kmsg
        pos = ctx.state.load("kmsg-xid")
        boot = kmsg.boot_id()
        after = int(pos.get("seq", -1)) if pos.get("boot") == boot else -1
        records = kmsg.read(after_seq=after, path=ctx.config.kernel_log)
        if records:
            ctx.state.save("kmsg-xid", {"boot": boot, "seq": records[-1].seq})
        out = []
        for rec, m in kmsg.match(records, "xid"):
            ev = xidmod.from_match(m)
            g = by_pci.get(ev["pci"])
            verdict = xidmod.classify(ev["xid"], cfg.xid_actions, g.get("recovery_action") if g else None)
            cls = verdict.cls
            idx = f"gpu {g['index']}" if g else "gpu ?"
            job = jobs.get(g["index"]) if g else None
            entry = xidmod.TABLE.get(ev["xid"])
            ev.update(seq=rec.seq, kernel_log=rec.text, class_=cls, meaning=verdict.meaning,
                      linked=bool(entry and entry.linked and verdict.note and cls == xidmod.RECORD),
                      bucket=entry.bucket if entry else None)
            where = f" in GPU instance {ev['gpu_instance']}" if ev.get("gpu_instance") is not None else ""
            note = f" ({verdict.note})" if verdict.note else ""
            severity = {xidmod.DRAIN: FAIL, xidmod.WARN: WARN, xidmod.RECORD: OK}[cls]
            out.append(Finding(NAME, f"{idx} ({ev['pci']})", f"xid_{cls}", severity,
                               f"{idx} ({ev['pci']}) Xid {ev['xid']}{where}: {verdict.meaning}{note}",
                               detail=rec.text, evidence=ev, job=job[0].job if job and cls == xidmod.DRAIN else None,
                               reason=f"{idx} ({ev['pci']}) Xid {ev['xid']}",
                               incident=f"xid:{ev['pci']}:{ev['xid']}:{rec.seq}",
                               needs_reboot=cls == xidmod.DRAIN, hard=True, resumable=cls != xidmod.DRAIN))
        return out

    @staticmethod
    def _remember_jobs(ctx, gpus: list[dict], jobs: dict) -> dict:
        """pci -> the job seen on that GPU last run. A GPU that is lost can no longer
        say which processes used it; the job that did is the one to requeue."""
        before = ctx.state.load("gpu-jobs")
        now = {g["pci"]: jobs[g["index"]][0].job for g in gpus if g.get("pci") and g["index"] in jobs}
        if now != before:
            ctx.state.save("gpu-jobs", now)
        return before

    @staticmethod
    def _remember_xids(ctx, xids: list[Finding]) -> dict:
        """pci -> the last drain-worthy Xid seen for it (kept across runs)."""
        seen = ctx.state.load("gpu-xids")
        fresh = {f.evidence["pci"]: f.evidence["xid"] for f in xids
                 if f.status == "xid_drain" or f.evidence.get("linked")}
        if fresh:
            seen.update(fresh)
            ctx.state.save("gpu-xids", seen)
        return seen


CHECK = GpuCheck
