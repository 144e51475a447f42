"""What one GPU's NVML reading means: the verdicts, and where they come from.

NVIDIA's documents, not guesses, decide what drains and what happens to the running job:

- Lost (NVML_ERROR_GPU_IS_LOST), needing a reset (RESET_REQUIRED), or not readable at
  all (its handle lookup fails, typically "Unknown Error" after it fell off the bus; an
  interrupt problem; insufficient external power): the GPU is gone for its job too.
  Drain, requeue the job that used it, reboot once the job is gone.
- Read, but not cleanly (a corrupted infoROM, an NVML/driver version mismatch, ...):
  drain, naming the error; the job on it runs on.
- NVML's GPU recovery action (A100 memory error management, "Error Recovery and Response
  Flags"): GPU_RESET, BUS_RESET, NODE_REBOOT, SYSTEM_REBOOT need the GPU free: drain,
  requeue, reboot. DRAIN_AND_RESET: running work may finish; no new work, reset once it
  drained: drain with the job left alone, `reboot ASAP` (which waits for it). DRAIN_P2P:
  quiesce peer-to-peer traffic (end the processes doing it) and ask again: drain and
  requeue the job, resumable: the next run asks NVML again and the node is resumed
  once the action is gone.
- Row remap pending, retired pages pending, volatile uncorrectable ECC errors: NVIDIA
  says running applications may continue and new ones should not start; the reset
  activates the remap: drain, leave the job running, reboot once it ends. A remap
  failure is a hardware fault (RMA): drain, job left alone, no reboot (it would not help).
- NVLink: a link down, and any growth of the replay or recovery counters, drain (DCGM's
  NVLink health watch fails on both); CRC counter growth warns above a threshold.
"""
from __future__ import annotations

from .. import TYPE_CHECKING
from ..core.model import FAIL, WARN, Finding

if TYPE_CHECKING:
    from ._gpu_config import GpuConfig

NAME = "gpu"
# NVML errors after which the GPU cannot run its job: it is as good as lost.
UNUSABLE = {"UNKNOWN", "IRQ_ISSUE", "INSUFFICIENT_POWER", "GPU_NOT_FOUND", "TIMEOUT", "DRIVER_NOT_LOADED",
            "NOT_FOUND", "MEMORY"}
# recovery action -> (what it says, requeue the job, needs a reboot, resumable)
RECOVERY = {
    "gpu_reset": ("driver asks for recovery: gpu_reset", True, True, False),
    "bus_reset": ("driver asks for recovery: bus_reset", True, True, False),
    "node_reboot": ("driver asks for recovery: node_reboot", True, True, False),
    "system_reboot": ("driver asks for recovery: system_reboot", True, True, False),
    "drain_and_reset": ("driver asks for recovery: drain_and_reset (reset once running work ends)",
                        False, True, False),
    "drain_p2p": ("driver asks to quiesce peer-to-peer traffic (drain_p2p)", True, False, True),
}


def system_errors(v: dict) -> list[Finding]:
    """NVML calls about the whole node (the GPU count) that failed: no GPU was read."""
    out = []
    for e in v.get("errors") or []:
        if e["call"] != "nvmlDeviceGetCount":
            continue
        what = f"gpu: NVML cannot count the GPUs: {e['error']} ({e['message']})"
        out.append(Finding(NAME, "nvml", "error", FAIL, what, evidence=dict(e),
                           reason=f"gpu NVML count failed: {e['error']}", incident=f"gpu-count-error:{e['error']}",
                           needs_reboot=True, hard=True, resumable=False))
    return out


def health(cfg: GpuConfig, g: dict, jobid: str | None, before: dict, last_xid: dict,
           linked_xids: list[int] | None = None) -> list[Finding]:
    """Findings for one GPU. `before`: its counters from the last run; `last_xid`: pci ->
    the last drain-worthy Xid seen; `linked_xids`: Xids of this run whose verdict is the
    driver's recovery action."""
    idx, pci = g["index"], g.get("pci")
    who = f"gpu {idx} ({pci or '?'})"
    out: list[Finding] = []

    def fail(status, what, reboot=True, keep_job=False, resumable=False):
        out.append(Finding(NAME, who, status, FAIL, f"{who} {what}", evidence=dict(g), job=jobid,
                           reason=f"{who} {what}", incident=f"gpu:{pci or idx}:{status}",
                           needs_reboot=reboot, hard=True, resumable=resumable, keep_job=keep_job))

    def warn(status, what):
        out.append(Finding(NAME, who, status, WARN, f"{who} {what}", evidence=dict(g)))

    if g["status"] in ("lost", "reset_required"):
        what = "lost" if g["status"] == "lost" else "needs a reset"
        xid = last_xid.get(pci) if pci else None
        fail(g["status"], f"{what}: Xid {xid}" if xid else
             f"{what} (NVML: {g.get('message') or ('GPU is lost' if what == 'lost' else 'reset required')})")
        return out
    errors = g.get("errors") or []
    if errors:
        first = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        unusable = first["call"] == "nvmlDeviceGetHandleByIndex" or first["error"] in UNUSABLE
        what = f"not readable: {first['call']}: {first['error']} ({first['message']}){more}"
        fail("error", what, reboot=unusable, keep_job=not unusable)
        if first["call"] == "nvmlDeviceGetHandleByIndex":
            return out                       # nothing else could be read
    action = g.get("recovery_action")
    if action and action != "none":
        text, requeue, reboot, resumable = RECOVERY.get(
            action, (f"driver asks for recovery: {action}", True, False, False))
        if linked_xids:
            text += f": Xid {', '.join(map(str, sorted(set(linked_xids))))}"
        fail("recovery_action", text, reboot=reboot, keep_job=not requeue, resumable=resumable)
    if (g.get("ecc_uncorrected_volatile") or 0) > 0:
        fail("ecc", f"{g['ecc_uncorrected_volatile']} uncorrectable ECC errors since driver load", keep_job=True)
    remap = g.get("remapped_rows") or {}
    if remap.get("failure"):
        fail("remap_failure", "row remapping failed", reboot=False, keep_job=True)
    elif remap.get("pending"):
        fail("remap_pending", "row remapping pending (needs a GPU reset)", keep_job=True)
    if g.get("retired_pages_pending"):
        fail("retired_pages_pending", "retired pages pending (needs a GPU reset)", keep_job=True)
    if g.get("nvlink_down"):
        links = ", ".join(map(str, g["nvlink_down"]))
        fail("nvlink_down", f"NVLink {links} down ({g.get('nvlink_up', 0)} up)")
    for note in g.get("notes") or []:
        warn("unread", f"value not read: {note}")
    temp = g.get("temperature")
    if temp is not None and temp > cfg.temperature_warn:
        warn("hot", f"temperature {temp}C > {cfg.temperature_warn:g}C")
    events = [e for e in g.get("clock_events") or [] if e in cfg.clock_event_warn]
    if events:
        warn("clocks", f"clocks held down: {', '.join(events)}")
    if g.get("pcie_replays") is not None and before.get("pcie_replays") is not None:
        grew = g["pcie_replays"] - before["pcie_replays"]
        if grew >= cfg.pcie_replay_warn:
            warn("pcie_replays", f"PCIe replays +{grew} since the last run")
    now, then = g.get("nvlink_errors") or {}, before.get("nvlink") or {}
    if now and then:
        fatal = {k: now.get(k, 0) - then.get(k, 0) for k in ("replay", "recovery")}
        fatal = {k: n for k, n in fatal.items() if n > 0}
        if fatal:
            fail("nvlink_errors", "NVLink " + ", ".join(f"{k} errors +{n}" for k, n in fatal.items())
                 + " since the last run", reboot=False, keep_job=True)
        crc = sum(now.get(k, 0) - then.get(k, 0) for k in ("crc_flit", "crc_data"))
        if crc >= cfg.nvlink_error_warn:
            warn("nvlink_crc", f"NVLink CRC errors +{crc} since the last run")
    return out
