"""Xid events of the GPU check: kernel-log records since the last real run's position
(host/kmsg.py: kernel facility only, matched at the start of the message), classified by
host/xid.py's table and, where the driver offers it, by NVML's recovery action; attached to
the GPU with that PCI address. The position and the last drain-worthy Xid per GPU are
kept in state (only a real run commits them: a look moves no cursor).
"""
from __future__ import annotations

from .. import TYPE_CHECKING
from ..core.model import FAIL, OK, WARN, Finding
from ..host import xid as xidmod

if TYPE_CHECKING:
    from . import Context
    from ._gpu_config import GpuConfig

NAME = "gpu"


def xid_findings(ctx: Context, cfg: GpuConfig, by_pci: dict[str, dict], jobs: dict) -> list[Finding]:
    """Xid events in the kernel log since the last real run's position, attached to the
    GPU with their PCI address and classified (host/xid.py, NVML's recovery action)."""
    from ..host import kmsg, procfs
    pos = ctx.state.load("kmsg-xid")
    boot = procfs.boot_id()
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


def remember_xids(ctx: Context, xids: list[Finding]) -> dict:
    """pci -> the last drain-worthy Xid seen for it (kept across runs)."""
    seen = ctx.state.load("gpu-xids")
    fresh = {f.evidence["pci"]: f.evidence["xid"] for f in xids
             if f.status == "xid_drain" or f.evidence.get("linked")}
    if fresh:
        seen.update(fresh)
        ctx.state.save("gpu-xids", seen)
    return seen
