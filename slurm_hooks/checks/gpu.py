"""GPU check: lost, wedged, missing and idle-while-busy NVIDIA GPUs, without ever hanging.

- NVML runs only in a hang-safe child (nvml.py). A child past its deadline means the
  driver stopped answering; the finding names the call it was making. A child stuck
  for good is remembered by the runner: later runs report "still hung" and do not
  pile up more stuck children.
- No driver on the node (no /dev/nvidiactl, no /proc/driver/nvidia): not applicable,
  decided with two stat() calls and no import, unless `gpu.enabled: true` says this
  node must have GPUs.
- Count: fewer GPUs than `gpu.count` (or the node's Gres=gpu:N in Slurm) is a failure
  naming the missing PCI addresses, from an inventory of GPUs seen in earlier runs and
  from the NVIDIA devices on the PCI bus.
- Xid events: kernel log records since the last run's position (kmsg.py), classified by
  xid.py's table, attached to the GPU with that PCI address.
- Idle while busy: among the GPUs one job uses on this node, one whose utilization and
  power stay near idle while the job's others are busy, for `idle.samples` consecutive
  runs. correlate.py joins it with a stuck task of the same process into one diagnosis.
"""
from __future__ import annotations

import os
import time

from .. import xid as xidmod
from ..jobs import JobRef
from ..model import FAIL, OK, WARN, Finding
from ..runner import DONE, HUNG, STILL_HUNG, Task

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
        out = []
        gpus = v.get("gpus", [])
        known = {entry["index"]: pci for pci, entry in ctx.state.load("gpu-inventory").items()}
        for g in gpus:
            if g.get("pci"):
                g["pci"] = xidmod.normalise_pci(g["pci"])
            elif g["index"] in known:
                g["pci"] = known[g["index"]]     # a lost GPU no longer says where it sits
        by_pci = {xidmod.normalise_pci(g["pci"]): g for g in gpus if g.get("pci")}
        if ctx.hook in ("prolog", "epilog"):
            return self._hook_findings(ctx, cfg, gpus, v)
        jobs = self._jobs(ctx, gpus)
        last_jobs = self._remember_jobs(ctx, gpus, jobs)
        out += self._count(ctx, cfg, gpus, by_pci)
        xids = self._xids(ctx, cfg, by_pci, jobs)
        last_xid = self._remember_xids(ctx, xids)
        counters = ctx.state.load("gpu-counters")
        for g in gpus:
            job = jobs.get(g["index"])
            jobid = job[0].job if job else last_jobs.get(g.get("pci") or "")
            health = self._health(cfg, g, jobid, counters, last_xid)
            out += health
            if any(f.status in ("lost", "reset_required") for f in health):
                # "gpu 3 (...) lost: Xid 79" says it all; no second line for the Xid.
                xids = [f for f in xids if f.evidence.get("pci") != g.get("pci") and
                        f.evidence.get("pci") != (g.get("pci") and xidmod.normalise_pci(g["pci"]))]
        out += xids
        ctx.state.save("gpu-counters", {g["uuid"]: {"pcie_replays": g.get("pcie_replays"),
                                                     "nvlink": g.get("nvlink_errors")}
                                        for g in gpus if g.get("uuid")})
        if cfg.idle.enabled:
            out += self._idle(ctx, cfg, gpus, jobs)
        if not [f for f in out if f.severity != OK]:
            out.append(Finding(NAME, "gpus", "ok", OK,
                               f"gpu: {len(gpus)} GPU(s) healthy (driver {v.get('driver') or '?'})",
                               evidence={"gpus": gpus, "driver": v.get("driver")}))
        return out

    def _hook_findings(self, ctx, cfg, gpus: list[dict], v: dict) -> list[Finding]:
        """Prolog and epilog: the job's GPUs only, and what earlier jobs left on them."""
        job = ctx.job
        wanted = job.gpus if job is not None and job.gpus is not None else None
        mine = [g for g in gpus if wanted is None or str(g["index"]) in wanted or g.get("uuid") in wanted]
        leak = (ctx.config.prolog if ctx.hook == "prolog" else ctx.config.epilog).gpu_memory_leak_mib
        out = []
        for g in mine:
            out += self._health(cfg, g, None, {}, {})
            if g["status"] != "ok":
                continue
            who = f"gpu {g['index']} ({g.get('pci') or '?'})"
            procs = g.get("processes") or []
            if ctx.hook == "prolog" and procs:
                users = ", ".join(_owner(p["pid"]) for p in procs[:4])
                out.append(Finding(NAME, who, "in_use", FAIL,
                                   f"{who} still in use by {users} before job {job.id if job else '?'} starts",
                                   evidence=dict(g), reason=f"{who} still in use by {users}",
                                   incident=f"gpu-busy:{g.get('pci')}", hard=True, resumable=False))
            elif not procs and (g.get("memory_used_mib") or 0) > leak:
                out.append(Finding(NAME, who, "memory_held", FAIL,
                                   f"{who} holds {g['memory_used_mib']} MiB with no process on it "
                                   f"(left by an earlier job)", evidence=dict(g),
                                   reason=f"{who} holds {g['memory_used_mib']} MiB with no process",
                                   incident=f"gpu-leak:{g.get('pci')}", hard=True, resumable=False))
        if not [f for f in out if f.severity != OK]:
            out.append(Finding(NAME, "gpus", "ok", OK,
                               f"gpu: the job's {len(mine)} GPU(s) healthy and free (driver {v.get('driver') or '?'})"))
        return out

    # --- pieces ------------------------------------------------------------------------
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
        """GPU index -> (the job using it on this node, its pids on the GPU)."""
        from ..jobs import from_cgroup
        from ..procfs import text
        out = {}
        for g in gpus:
            for p in g.get("processes") or []:
                cg = text(f"/proc/{p['pid']}/cgroup")
                ref = from_cgroup(cg) if cg else None
                if ref is None or not ref.belongs_to(ctx.node):
                    continue
                if g["index"] not in out:
                    out[g["index"]] = (ref, [])
                if out[g["index"]][0].job == ref.job:
                    out[g["index"]][1].append(p["pid"])
        return out

    def _count(self, ctx, cfg, gpus, by_pci) -> list[Finding]:
        inventory = ctx.state.load("gpu-inventory")
        for pci, g in by_pci.items():
            inventory[pci] = {"index": g["index"], "uuid": g.get("uuid"), "name": g.get("name")}
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
        from ..slurm import Slurm, SlurmError
        try:
            info = Slurm(ctx.config.slurm).show_node(ctx.node)
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
            cls, meaning = xidmod.classify(ev["xid"], cfg.xid_actions)
            g = by_pci.get(ev["pci"])
            idx = f"gpu {g['index']}" if g else "gpu ?"
            job = jobs.get(g["index"]) if g else None
            ev.update(seq=rec.seq, kernel_log=rec.text, class_=cls, meaning=meaning)
            severity = {xidmod.DRAIN: FAIL, xidmod.WARN: WARN, xidmod.RECORD: OK}[cls]
            out.append(Finding(NAME, f"{idx} ({ev['pci']})", f"xid_{cls}", severity,
                               f"{idx} ({ev['pci']}) Xid {ev['xid']}: {meaning}",
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
        fresh = {f.evidence["pci"]: f.evidence["xid"] for f in xids if f.status == "xid_drain"}
        if fresh:
            seen.update(fresh)
            ctx.state.save("gpu-xids", seen)
        return seen

    def _health(self, cfg, g: dict, jobid: str | None, counters: dict, last_xid: dict) -> list[Finding]:
        idx, pci = g["index"], g.get("pci") and xidmod.normalise_pci(g["pci"])
        who = f"gpu {idx} ({pci or '?'})"
        out = []

        def fail(status, what, reboot=True):
            out.append(Finding(NAME, who, status, FAIL, f"{who} {what}", evidence=dict(g), job=jobid,
                               reason=f"{who} {what}", incident=f"gpu:{pci or idx}:{status}",
                               needs_reboot=reboot, hard=True, resumable=False))

        def warn(status, what):
            out.append(Finding(NAME, who, status, WARN, f"{who} {what}", evidence=dict(g)))

        if g["status"] in ("lost", "reset_required"):
            what = "lost" if g["status"] == "lost" else "needs a reset"
            xid = last_xid.get(pci) if pci else None
            fail(g["status"], f"{what}: Xid {xid}" if xid else
                 f"{what} (NVML: {g.get('message') or ('GPU is lost' if what == 'lost' else 'reset required')})")
            return out
        action = g.get("recovery_action")
        if action and action != "none":
            fail("recovery_action", f"driver asks for recovery: {action}",
                 reboot=action in ("node_reboot", "system_reboot"))
        if (g.get("ecc_uncorrected_volatile") or 0) > 0:
            fail("ecc", f"{g['ecc_uncorrected_volatile']} uncorrectable ECC errors since driver load", reboot=False)
        remap = g.get("remapped_rows") or {}
        if remap.get("failure"):
            fail("remap_failure", "row remapping failed", reboot=False)
        elif remap.get("pending"):
            fail("remap_pending", "row remapping pending (needs a GPU reset)", reboot=False)
        if g.get("retired_pages_pending"):
            fail("retired_pages_pending", "retired pages pending (needs a GPU reset)", reboot=False)
        temp = g.get("temperature")
        if temp is not None and temp > cfg.temperature_warn:
            warn("hot", f"temperature {temp}C > {cfg.temperature_warn:g}C")
        events = [e for e in g.get("clock_events") or [] if e in cfg.clock_event_warn]
        if events:
            warn("clocks", f"clocks held down: {', '.join(events)}")
        before = counters.get(g.get("uuid") or "", {})
        if g.get("pcie_replays") is not None and before.get("pcie_replays") is not None:
            grew = g["pcie_replays"] - before["pcie_replays"]
            if grew >= cfg.pcie_replay_warn:
                warn("pcie_replays", f"PCIe replays +{grew} since the last run")
        if g.get("nvlink_errors") and before.get("nvlink"):
            grew = sum(g["nvlink_errors"].values()) - sum(before["nvlink"].values())
            if grew >= cfg.nvlink_error_warn:
                warn("nvlink_errors", f"NVLink errors +{grew} since the last run")
        return out

    def _idle(self, ctx, cfg, gpus, jobs) -> list[Finding]:
        idle_cfg = cfg.idle
        history = ctx.state.load("gpu-idle")
        seen_now: dict = {}
        out = []
        by_job: dict[str, list[dict]] = {}
        for g in gpus:
            if g["index"] in jobs and g.get("utilization") is not None:
                by_job.setdefault(jobs[g["index"]][0].job, []).append(g)
        for job, members in by_job.items():
            busy = [g for g in members if g["utilization"] >= idle_cfg.busy_utilization]
            if len(members) < 2 or not busy:
                continue
            top_power = max((g.get("power_w") or 0) for g in busy)
            for g in members:
                if g["utilization"] > idle_cfg.idle_utilization:
                    continue
                if g.get("power_w") is not None and top_power and g["power_w"] > idle_cfg.idle_power_ratio * top_power:
                    continue
                key = g.get("uuid") or str(g["index"])
                count = history.get(key, {}).get("count", 0) + 1 if history.get(key, {}).get("job") == job else 1
                seen_now[key] = {"job": job, "count": count}
                ref, pids = jobs[g["index"]]
                pci = g.get("pci") and xidmod.normalise_pci(g["pci"])
                who = f"gpu {g['index']} ({pci or '?'})"
                confirmed = count >= idle_cfg.samples
                out.append(Finding(
                    NAME, who, "idle_while_busy", FAIL if confirmed else WARN,
                    f"{who} idle ({g['utilization']}%, {g.get('power_w') or 0:.0f}W) while {len(busy)} other GPU(s) "
                    f"of job {job} are busy; its process: pid {', '.join(map(str, pids))}"
                    + ("" if confirmed else f" (seen {count} of {idle_cfg.samples} runs)"),
                    evidence={"gpu": g, "pids": pids, "busy": [b["index"] for b in busy], "count": count,
                              "samples": idle_cfg.samples},
                    job=job, reason=f"{who} idle while job {job} busy (pid {pids[0]})",
                    incident=f"gpu-idle:{key}:{job}", hard=True))
        if seen_now or history:
            ctx.state.save("gpu-idle", seen_now)
        return out


def _owner(pid: int) -> str:
    from ..jobs import from_cgroup
    from ..procfs import text
    cg = text(f"/proc/{pid}/cgroup")
    ref = from_cgroup(cg) if cg else None
    return f"pid {pid} (job {ref.job})" if ref else f"pid {pid}"


CHECK = GpuCheck
