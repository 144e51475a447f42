"""NVIDIA Xid events from the kernel log, and what each one calls for.

The driver logs `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen
off the bus.` An Xid names the GPU by PCI address, so events are attached to the GPU
with that bus id. What an Xid calls for is a table (data, not code), documented here
and overridable in `gpu.xid_actions`:

  drain   the GPU or its memory is in a state that breaks the next job: take the node
          out of service (and requeue the job using that GPU).
  record  an application-level fault (bad kernel, illegal address, a process killed
          while using the GPU): the job that caused it fails by itself; the event is
          recorded in the journal, the node stays in service.
  warn    not in either list: reported as a warning, the node stays in service.

Sources for the classes: NVIDIA's Xid catalogue ("XID Errors" in the GPU deployment
and management documentation), which marks the events that need a GPU reset or a
node reboot.
"""
from __future__ import annotations

DRAIN, RECORD, WARN = "drain", "record", "warn"

# Xid -> (class, short meaning)
TABLE: dict[int, tuple[str, str]] = {
    13: (RECORD, "graphics engine exception (application fault)"),
    31: (RECORD, "GPU memory page fault (application fault)"),
    32: (RECORD, "invalid or corrupted push buffer stream"),
    43: (RECORD, "GPU stopped processing (application fault)"),
    45: (RECORD, "preemptive cleanup after an earlier error (process killed)"),
    68: (RECORD, "video decoder exception"),
    69: (RECORD, "graphics engine class error"),
    48: (DRAIN, "double-bit ECC error"),
    61: (DRAIN, "internal micro-controller breakpoint/warning"),
    62: (DRAIN, "internal micro-controller halt"),
    63: (DRAIN, "ECC page retirement or row remapping event"),
    64: (DRAIN, "ECC page retirement or row remapping failure"),
    74: (DRAIN, "NVLink error"),
    79: (DRAIN, "GPU has fallen off the bus"),
    92: (DRAIN, "high single-bit ECC error rate"),
    94: (DRAIN, "contained ECC error"),
    95: (DRAIN, "uncontained ECC error"),
    119: (DRAIN, "GSP RPC timeout"),
    120: (DRAIN, "GSP error"),
    121: (DRAIN, "C2C link error"),
    140: (DRAIN, "unrecovered ECC error"),
    154: (DRAIN, "GPU recovery action changed (reset or reboot required)"),
}

def parse(text: str) -> dict | None:
    from .kmsg import MATCHERS
    m = next(x.pattern for x in MATCHERS if x.event == "xid").search(text)
    if not m:
        return None
    return from_match(m)


def from_match(m) -> dict:
    pid = m.group("pid")
    return {"xid": int(m.group("xid")), "pci": normalise_pci(m.group("pci")),
            "pid": int(pid) if pid and pid.isdigit() else None,
            "name": (m.group("name") or "").strip().strip("'") not in ("", "<unknown>") and m.group("name").strip() or None, "message": m.group("msg").strip()}


def normalise_pci(bus_id: str) -> str:
    """Canonical `dddd:bb:dd.f` form: NVML says 00000000:3B:00.0, the kernel log 0000:3b:00."""
    bus_id = bus_id.strip().lower()
    parts = bus_id.split(":")
    if len(parts) == 2:
        parts = ["0000"] + parts
    domain, bus, devfn = parts[-3], parts[-2], parts[-1]
    if "." not in devfn:
        devfn += ".0"
    return f"{int(domain, 16):04x}:{bus}:{devfn}"


def classify(xid: int, overrides: dict[int, str] | None = None) -> tuple[str, str]:
    meaning = TABLE.get(xid, (WARN, "Xid not in the table"))[1]
    if overrides and xid in overrides:
        return overrides[xid], meaning
    return TABLE.get(xid, (WARN, meaning))[0], meaning
