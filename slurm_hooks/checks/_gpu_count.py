"""The GPU count: fewer GPUs than expected is a failure naming the missing PCI addresses.

Expected is `gpu.count`, else the node's Gres=gpu:N in Slurm (cached for an hour;
`check` asks Slurm nothing). The missing ones are named from an inventory of the GPUs
seen in earlier runs of this boot and from the NVIDIA devices on the PCI bus, where a
GPU that fell out of NVML's view is still listed. The inventory also places a GPU that
no longer answers its handle lookup: within a boot, NVML's index names the same slot.
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.model import FAIL, WARN, Finding
from ..host import xid as xidmod

if TYPE_CHECKING:
    from . import Context
    from ._gpu_config import GpuConfig

NAME = "gpu"
NVIDIA_VENDOR = "0x10de"
GRES_TTL = 3600.0
SYSFS = "/sys/bus/pci/devices"


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


def pci_gpus(sysfs: str = SYSFS) -> set[str]:
    """NVIDIA display/3D controllers on the PCI bus, whatever NVML thinks of them."""
    out: set[str] = set()
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


def locate(ctx: Context, gpus: list[dict]) -> None:
    """Canonical PCI ids; a GPU that no longer answers (its handle lookup fails) is
    placed where the GPU of that index sat earlier in this boot: NVML numbers GPUs
    once per driver load, so within a boot the index still names the same slot."""
    from ..host.procfs import boot_id
    boot = boot_id()
    known = {entry["index"]: pci for pci, entry in ctx.state.load("gpu-inventory").items()
             if entry.get("boot") == boot}
    for g in gpus:
        if g.get("pci"):
            g["pci"] = xidmod.normalise_pci(g["pci"])
        elif g["status"] != "ok" and g["index"] in known:
            g["pci"] = known[g["index"]]


def count_findings(ctx: Context, cfg: GpuConfig, gpus: list[dict], by_pci: dict[str, dict],
                   sysfs: str = SYSFS) -> list[Finding]:
    from ..host.procfs import boot_id
    inventory = ctx.state.load("gpu-inventory")
    boot = boot_id()
    for pci, g in by_pci.items():
        inventory[pci] = {"index": g["index"], "uuid": g.get("uuid") or inventory.get(pci, {}).get("uuid"),
                          "name": g.get("name"), "boot": boot}
    ctx.state.save("gpu-inventory", inventory)
    expected = cfg.count if cfg.count is not None else gres_count(ctx)
    on_bus = pci_gpus(sysfs)
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


def gres_count(ctx: Context) -> int | None:
    """GPUs in this node's Gres (Slurm's word), cached for GRES_TTL; None when unknown."""
    cached = ctx.state.load("gres")
    if cached and time.time() - float(cached.get("at", 0)) < GRES_TTL:
        return cached.get("gpus")
    if ctx.behaviour.looks_only:
        ctx.notes.append("gpu count not checked against Slurm's Gres (check asks Slurm nothing; "
                         "set gpu.count, or a health check learns it)")
        return None
    from ..slurm.api import SlurmError
    from ..slurm.connect import open_backend
    try:
        info = open_backend(ctx.config.slurm).show_node(ctx.node)
    except SlurmError as e:
        ctx.notes.append(f"gpu count not checked: Slurm did not say this node's Gres ({e})")
        return None
    gpus = parse_gres_gpus(info.get("Gres", "")) if info else None
    ctx.state.save("gres", {"at": time.time(), "gpus": gpus})
    return gpus
