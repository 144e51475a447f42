"""NVIDIA Xid events from the kernel log, and what each one calls for.

The driver logs `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen
off the bus.`, and on a MIG GPU `NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, ...` (the GPU
instance). An Xid names the GPU by PCI address, so events are attached to the GPU with
that bus id. What an Xid calls for is a table (data, not code), documented in docs/gpu.md
and overridable in `gpu.xid_actions`:

  drain   the GPU needs a reset or the node a reboot before it can run work again: take
          the node out of service, requeue the job that used that GPU (its work on it is
          lost), ask for a reboot once the job is gone.
  record  the application's own fault, or an event NVIDIA says to ignore: kept in the
          journal, the node stays in service.
  warn    worth an admin's look, not a reason to take the node away: a warning.
  Xids not in the table are warnings.

Source: NVIDIA's Xid catalogue for Ampere and newer GPUs ("Analyzing Xid Errors with the
Xid Catalog", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), column
"Resolution Bucket (Immediate Action)": RESET_GPU and RESTART_BM are `drain`;
RESTART_APP and IGNORE are `record` (or `warn` where the investigatory action is to
contact support); an Xid marked unused on these GPUs is `warn`.

Many Xids carry a "Xid 154 linkage" in the catalogue (R565 and later drivers): the
driver then states the recovery it needs itself, as NVML's GPU recovery action
(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) and as Xid 154. Where NVML offers that action, it
decides, not the Xid's number: the GPU check reads it in the same run, and a linked Xid
whose GPU says "none" needs no reset (a warning, so an admin still sees it), while one
whose GPU asks for a recovery is recorded and the recovery-action finding carries the
verdict, naming the Xid. The NVLink5 Xids (144-150) can only be told apart that way or
by decoding their registers; without NVML's word, the ones the catalogue resolves with a
GPU reset for some of their error bits drain, the others warn.
"""
from __future__ import annotations

from ..core.records import dataclass

DRAIN, RECORD, WARN = "drain", "record", "warn"


@dataclass(frozen=True)
class Xid:
    cls: str          # DRAIN, RECORD or WARN
    bucket: str       # the catalogue's immediate action
    meaning: str
    linked: bool = False   # "Xid 154 linkage": NVML's recovery action decides where offered


def _app(meaning: str, linked: bool = False) -> Xid:
    """The application's fault (RESTART_APP): recorded."""
    return Xid(RECORD, "RESTART_APP", meaning, linked)


def _reset(meaning: str, linked: bool = True) -> Xid:
    """The GPU needs a reset (RESET_GPU): drained."""
    return Xid(DRAIN, "RESET_GPU", meaning, linked)


def _nvlink5(cls: str, meaning: str) -> Xid:
    """An NVLink5 workflow Xid: its error bits decide, through NVML's recovery action."""
    return Xid(cls, "WORKFLOW_NVLINK5_ERR", f"NVLink5 {meaning}", linked=True)


TABLE: dict[int, Xid] = {
    # the application's fault: the job fails by itself, the GPU is fine
    8: _app("GPU stopped processing (channel idle timeout)"),
    11: _app("invalid or corrupted push buffer stream"),
    13: _app("graphics engine exception (application fault)"),
    31: _app("GPU memory page fault (application fault)"),
    32: _app("invalid or corrupted push buffer stream"),
    43: Xid(RECORD, "IGNORE", "GPU stopped processing (application fault)"),
    45: Xid(RECORD, "WORKFLOW_XID_45", "preemptive cleanup after an earlier error (process killed)"),
    68: _app("video decoder exception"),
    69: _app("graphics engine class error"),
    94: _app("contained ECC error (only the application that hit it is affected)", linked=True),
    # informational, or ignore per the catalogue
    63: Xid(RECORD, "IGNORE", "ECC page retirement or row remapping recorded (a reset activates it)",
            linked=True),
    154: Xid(RECORD, "XID_154", "GPU recovery action changed (NVML's recovery action says what to do)"),
    61: Xid(WARN, "CONTACT_SUPPORT", "internal micro-controller breakpoint/warning (unused on Ampere and newer)"),
    92: Xid(WARN, "IGNORE", "high single-bit ECC error rate"),
    121: Xid(WARN, "IGNORE", "C2C link error (corrected)"),
    147: _nvlink5(WARN, "TREX error (all error bits: ignore)"),
    148: _nvlink5(WARN, "NVLPW control error (ignore)"),
    # the GPU needs a reset, or the node a reboot
    46: _reset("GPU timeout", linked=False),
    48: Xid(DRAIN, "WORKFLOW_XID_48", "double-bit ECC error", linked=True),
    62: _reset("internal micro-controller halt"),
    64: _reset("ECC page retirement or row remapping failure"),
    74: Xid(DRAIN, "WORKFLOW_NVLINK_ERR", "NVLink error", linked=True),
    79: Xid(DRAIN, "RESTART_BM", "GPU has fallen off the bus", linked=True),
    95: _reset("uncontained ECC error"),
    109: _reset("context switch timeout"),
    110: _reset("security fault"),
    119: _reset("GSP RPC timeout", linked=False),
    120: _reset("GSP error"),
    136: _reset("NVLink link training (ALI) failed"),
    140: _reset("unrecovered ECC error", linked=False),
    143: _reset("GPU initialization failure"),
    144: _nvlink5(DRAIN, "SAW error"),
    145: _nvlink5(DRAIN, "RLW error"),
    146: _nvlink5(DRAIN, "TLW error"),
    149: _nvlink5(DRAIN, "NETIR error"),
    150: _nvlink5(DRAIN, "MSE error"),
    155: _reset("NVLink software-defined error"),
    156: _reset("resource retirement event"),
    158: _reset("GPU fatal timeout", linked=False),
}


@dataclass(frozen=True)
class Verdict:
    cls: str
    meaning: str
    note: str = ""     # why the class differs from the number's, when it does


def from_match(m) -> dict:
    pid = m.group("pid")
    name = (m.group("name") or "").strip().strip("'")
    gi = m.groupdict().get("gi")
    return {"xid": int(m.group("xid")), "pci": normalise_pci(m.group("pci")),
            "gpu_instance": int(gi) if gi is not None else None,
            "pid": int(pid) if pid and pid.isdigit() else None,
            "name": name if name not in ("", "<unknown>") else None, "message": m.group("msg").strip()}


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


def classify(xid: int, overrides: dict[int, str] | None = None, recovery: str | None = None) -> Verdict:
    """`recovery`: the GPU's NVML recovery action this run, None where not offered."""
    entry = TABLE.get(xid)
    meaning = entry.meaning if entry else "Xid not in the table"
    if overrides and xid in overrides:
        return Verdict(overrides[xid], meaning)
    if entry is None:
        return Verdict(WARN, meaning)
    if entry.linked and recovery is not None and entry.cls == DRAIN:
        if recovery == "none":
            return Verdict(WARN, meaning, "the driver asks for no recovery")
        return Verdict(RECORD, meaning, f"the driver asks for recovery: {recovery}")
    return Verdict(entry.cls, meaning)


def classes() -> dict[str, set[int]]:
    out: dict[str, set[int]] = {DRAIN: set(), RECORD: set(), WARN: set()}
    for n, entry in TABLE.items():
        out[entry.cls].add(n)
    return out
