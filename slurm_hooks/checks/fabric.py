"""Fabric check: are the InfiniBand and RoCE ports NCCL runs on up, at speed, stable?

Everything comes from sysfs, as the kernel lays it out (Documentation/ABI/stable/
sysfs-class-infiniband; the formats are drivers/infiniband/core/sysfs.c's):

    class/infiniband/DEV/ports/N/state          "4: ACTIVE"          (state_show)
    class/infiniband/DEV/ports/N/phys_state     "5: LinkUp"          (phys_state_show)
    class/infiniband/DEV/ports/N/rate           "400 Gb/sec (4X NDR)" (rate_show)
    class/infiniband/DEV/ports/N/link_layer     "InfiniBand" | "Ethernet"
    class/infiniband/DEV/ports/N/counters/NAME  a decimal count, or "N/A (no PMA)"
    class/infiniband/DEV/ports/N/gid_attrs/ndevs/0   the RoCE port's netdev name
    class/net/NETDEV/operstate, carrier         (Documentation/ABI/testing/sysfs-class-net)

Reading `state` or `rate` asks the driver (ib_query_port), a counter sends a MAD to
the HCA's firmware: a wedged HCA driver blocks those reads in the kernel. So the parent
only stats class/infiniband (kernfs, no driver) and a hang-safe child reads the rest,
announcing each port it starts on, so a hang names the port.

Which ports must be up: `fabric.ports` (per node group), else every port seen ACTIVE
since this boot (kept in state by boot id; the subnet manager may bring ports up after
the first health check, so "active at the first run" would expect nothing). The
expected rate is `fabric.rate`, else the highest seen since boot.

Flaps are link_downed growth: each run adds the growth as strikes; `flap_strikes` within
`flap_window` is flapping (a resumable drain), and `flap_recovery` seconds without a
new link down forget the strikes, so a healed flap lets policy resume the node (a node
kept drained by a flap long healed is what GPUd's users complained of). Error counters
warn when they grew by more than `error_warn` within `error_window`, measured against
samples kept in state (a few per window, not one per run: the state file stays small).
Only a real run keeps any of this; `check` and --dry-run compare and forget.
"""
from __future__ import annotations

import os
import time

from .. import TYPE_CHECKING
from ..core.config import setting, switch
from ..core.model import FAIL, OK, WARN, Finding
from ..core.records import dataclass
from ..host.runner import DONE, HUNG, STILL_HUNG, Task

if TYPE_CHECKING:
    from ..core.config import Config
    from ..host.runner import Outcome
    from . import Context

# The error counters of an InfiniBand port (Documentation/ABI/stable/sysfs-class-infiniband)
# and how much growth within fabric.error_window warns: the thresholds of
# infiniband-diags' ibqueryerrors (10 for the physical-layer counters, 100 for the rest).
FABRIC_ERROR_WARN = {
    "symbol_error": 10, "link_error_recovery": 10, "port_rcv_errors": 10,
    "local_link_integrity_errors": 10, "excessive_buffer_overrun_errors": 10,
    "port_rcv_remote_physical_errors": 100, "port_rcv_switch_relay_errors": 100,
    "port_xmit_discards": 100, "port_xmit_constraint_errors": 100,
    "port_rcv_constraint_errors": 100, "VL15_dropped": 100,
}


NAME = "fabric"
ORDER = 50
HOOKS = ("check", "healthcheck")


@dataclass
class FabricConfig:
    enabled: str = switch(doc="auto: check the RDMA ports when sysfs has class/infiniband, else "
                           "not applicable. true: this node must have RDMA ports. false: never.")
    ports: list = setting([], kind="strlist",
                          doc="Ports that must be up, as DEVICE/PORT (mlx5_0/1); set per node "
                          "group. Empty: every port seen ACTIVE since the node booted.")
    rate: float | None = setting(None, kind="number", min=0, nullable=True,
                                 doc="Expected rate of every expected port, Gb/s (400 for 4X NDR). "
                                 "null: the highest rate the port had since boot.")
    slow_rate: str = setting("warn", kind="enum", choices=("warn", "fail"),
                             doc="A port up below its expected rate: a warning, or a resumable drain.")
    timeout: float = setting(5.0, kind="seconds",
                             doc="Deadline of the child that reads the ports (a wedged HCA driver "
                             "blocks sysfs reads).")
    flap_strikes: int = setting(3, kind="int", min=1, max=255,
                                doc="Link downs (growth of link_downed) within flap_window that make "
                                "a port flapping: a resumable drain.")
    flap_window: float = setting(3600.0, kind="seconds",
                                 doc="Window, seconds, in which flap_strikes link downs count.")
    flap_recovery: float = setting(1800.0, kind="seconds",
                                   doc="A flapping port is healed after this long without a new link "
                                   "down: its strikes are forgotten and the node is resumed after "
                                   "policy.resume_after passing runs.")
    error_window: float = setting(3600.0, kind="seconds",
                                  doc="Window, seconds, over which error-counter growth is measured.")
    error_warn: dict = setting(dict(FABRIC_ERROR_WARN), kind="map", key_kind="str",
                               value={"kind": "int", "min": 1},
                               doc="Growth of an error counter within error_window that warns, per "
                               "counter: {symbol_error: 10}. Counters not named keep their default; "
                               "defaults: docs/fabric.md.")

    def validate(self, v, node, prefix: str) -> None:
        """Rules that span several settings (the loader calls it with itself as v)."""
        fab = self
        for i, port in enumerate(fab.ports):
            dev, _, num = port.partition("/")
            if not dev or "/" in num or not num.isdigit() or dev in (".", ".."):
                v.fail(v.item_node(v.value_node(node, "ports"), i), f"{prefix}.ports[{i}]",
                          f"must be DEVICE/PORT as in /sys/class/infiniband (mlx5_0/1), got {port!r}")
        for name in fab.error_warn:
            if name not in FABRIC_ERROR_WARN:
                v.fail(v.key_node(v.value_node(node, "error_warn"), name), f"{prefix}.error_warn.{name}",
                          f"not an error counter; known: {', '.join(sorted(FABRIC_ERROR_WARN))}")
        # Counters not named keep their default threshold.
        fab.error_warn = {**FABRIC_ERROR_WARN, **fab.error_warn}


SECTIONS = {"fabric": setting(kind="section", cls=FabricConfig, doc="InfiniBand and RoCE ports (the fabric check).")}


def settings(cfg: Config) -> FabricConfig:
    """This check's section of the configuration."""
    out: FabricConfig = getattr(cfg, "fabric")
    return out



STATE = "fabric"
TASK_KEY = f"{NAME}:ports"
ACTIVE, LINK_UP = 4, 5
# sysfs.c's PORT_PMA_ATTR widths: a counter at its maximum has saturated and stops.
ERROR_COUNTERS = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16, "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4, "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16,
}
# Verdicts, worst first.
VERDICT_ORDER = ("hung", "missing", "down", "flapping", "slow", "errors", "ok", "unused")


# --- what runs in the child -----------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("ascii", "replace").strip()
    except OSError:
        return None


def _numbered(text: str | None) -> tuple[int | None, str]:
    """"4: ACTIVE" -> (4, "ACTIVE")."""
    if not text:
        return None, ""
    num, _, name = text.partition(":")
    try:
        return int(num), name.strip()
    except ValueError:
        return None, text


def parse_rate(text: str | None) -> float | None:
    """"400 Gb/sec (4X NDR)" -> 400.0; "2.5 Gb/sec (1X SDR)" -> 2.5."""
    if not text:
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def read_ports(progress, root: str, netroot: str) -> dict:
    """Every port of every RDMA device under `root` (sysfs class/infiniband)."""
    out: dict[str, dict] = {}
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return out
    for dev in devices:
        ports_dir = os.path.join(root, dev, "ports")
        try:
            ports = sorted(os.listdir(ports_dir), key=lambda p: (len(p), p))
        except OSError:
            continue
        for num in ports:
            key = f"{dev}/{num}"
            progress(key)
            d = os.path.join(ports_dir, num)
            state, state_name = _numbered(_read(os.path.join(d, "state")))
            phys, phys_name = _numbered(_read(os.path.join(d, "phys_state")))
            rate_text = _read(os.path.join(d, "rate"))
            port: dict = {"device": dev, "port": num, "state": state, "state_name": state_name,
                    "phys_state": phys, "phys_state_name": phys_name,
                    "rate_text": rate_text or "", "rate": parse_rate(rate_text),
                    "link_layer": _read(os.path.join(d, "link_layer")) or "InfiniBand"}
            counters = {}
            for name in ERROR_COUNTERS:
                raw = _read(os.path.join(d, "counters", name))
                if raw is not None and raw.isdigit():
                    counters[name] = int(raw)
            port["counters"] = counters
            if port["link_layer"] == "Ethernet":
                ndev = _read(os.path.join(d, "gid_attrs", "ndevs", "0"))
                port["netdev"] = ndev
                if ndev and "/" not in ndev and ndev not in (".", ".."):
                    nd = os.path.join(netroot, ndev)
                    port["operstate"] = _read(os.path.join(nd, "operstate"))
                    # carrier reads EINVAL while the interface is administratively down.
                    carrier = _read(os.path.join(nd, "carrier"))
                    port["carrier"] = int(carrier) if carrier in ("0", "1") else None
            out[key] = port
    return out


# --- verdicts ---------------------------------------------------------------------------
def is_up(p: dict) -> bool:
    if p.get("state") != ACTIVE or p.get("phys_state") != LINK_UP:
        return False
    if p.get("link_layer") == "Ethernet" and p.get("netdev"):
        return p.get("operstate") == "up" and p.get("carrier") == 1
    return True


def _kind(p: dict) -> str:
    return "roce" if p.get("link_layer") == "Ethernet" else "ib"


def _gbps(rate: float | None) -> str:
    return "?" if rate is None else f"{rate:g} Gb/s"


def _ago(seconds: float) -> str:
    from ..core.reason import duration
    return duration(seconds)


class FabricCheck:
    name = NAME
    order, hooks = ORDER, HOOKS
    roles: tuple[str, ...] = ()
    state: tuple[str, ...] = (STATE,)
    series = {
        "slurm_hooks_fabric_port_up": (
            "gauge", "1 when the RDMA port is ACTIVE and LinkUp (RoCE: its netdev up with carrier), else 0."),
        "slurm_hooks_fabric_port_rate_bytes_per_second": (
            "gauge", "The port's current rate (sysfs rate), bytes per second."),
        "slurm_hooks_fabric_port_info": (
            "gauge", "The port's verdict, as a label (ok, unused, down, missing, flapping, slow, errors, hung)."),
        "slurm_hooks_fabric_port_errors_total": (
            "counter", "The port's error counters as sysfs shows them (saturating, as the HCA keeps them)."),
        "slurm_hooks_fabric_port_flaps": (
            "gauge", "Link downs counted as strikes in the flap window (0 once healed)."),
    }
    explain_keys = ("device", "port", "link_layer", "state", "phys_state", "rate", "expected_rate",
                    "expected", "netdev", "operstate", "carrier", "flaps", "grown", "step", "since")

    @staticmethod
    def samples(findings: list[Finding]) -> list[tuple[str, dict, float]]:
        out: list[tuple[str, dict, float]] = []
        for f in findings:
            ev = f.evidence
            if "device" not in ev:
                continue
            where = {"device": ev["device"], "port": ev["port"]}
            out.append(("slurm_hooks_fabric_port_up", {**where, "link_layer": ev.get("link_layer", "")},
                        1 if ev.get("up") else 0))
            if ev.get("rate") is not None:
                out.append(("slurm_hooks_fabric_port_rate_bytes_per_second", where, float(ev["rate"]) * 1e9 / 8))
            out.append(("slurm_hooks_fabric_port_info", {**where, "status": f.status}, 1))
            for name, value in sorted((ev.get("counters") or {}).items()):
                out.append(("slurm_hooks_fabric_port_errors_total", {**where, "counter": name}, float(value)))
            out.append(("slurm_hooks_fabric_port_flaps", where, float(ev.get("flaps", 0))))
        return out

    def __init__(self):
        self._skip = ""

    def tasks(self, ctx: Context) -> list[Task]:
        cfg = settings(ctx.config)
        root = os.path.join(ctx.config.host.sysfs, "class", "infiniband")
        if cfg.enabled == "false":
            self._skip = "disabled (fabric.enabled: false)"
            return []
        if cfg.enabled == "auto" and not cfg.ports and not os.path.isdir(root):
            self._skip = f"not applicable: no RDMA devices ({root} absent)"
            return []
        netroot = os.path.join(ctx.config.host.sysfs, "class", "net")
        return [Task(TASK_KEY, read_ports, (root, netroot), cfg.timeout)]

    def findings(self, ctx: Context, outcomes: dict[str, Outcome]) -> list[Finding]:
        if self._skip:
            return [Finding(NAME, "fabric", "not_applicable", OK, f"fabric {self._skip}")]
        cfg = settings(ctx.config)
        o = outcomes[TASK_KEY]
        if o.status in (HUNG, STILL_HUNG):
            return [self._hung(cfg, o)]
        if o.status != DONE:
            return [Finding(NAME, "fabric", "error", WARN, "fabric ports not readable", detail=o.error)]
        ports: dict[str, dict] = o.value or {}
        now = time.time()
        from ..host import procfs
        boot = procfs.boot_id()
        saved = ctx.state.load(STATE)
        memory = saved.get("ports", {}) if saved.get("boot") == boot else {}
        # Strikes and samples survive a reboot: a flap before it still counts, and
        # counters reset at boot are a new baseline (see _grown).
        history = saved.get("history", {})
        out: list[Finding] = []
        if not ports and cfg.enabled == "true" and not cfg.ports:
            out.append(Finding(NAME, "fabric", "missing", FAIL, "fabric: no RDMA ports",
                               detail="fabric.enabled is true, and sysfs shows no InfiniBand or RoCE port",
                               incident="fabric:none"))
        for want in cfg.ports:
            if want not in ports:
                out.append(Finding(NAME, want, "missing", FAIL, f"ib {want} missing",
                                   detail=f"no {want} under {ctx.config.host.sysfs}/class/infiniband",
                                   evidence={"expected": "configured"}, incident=f"fabric:{want}:missing"))
        new_memory, new_history = {}, {}
        for key, p in ports.items():
            seen = dict(memory.get(key, {}))
            hist = dict(history.get(key, {}))
            f = self._port(cfg, key, p, seen, hist, now)
            out.append(f)
            new_memory[key], new_history[key] = seen, hist
        ctx.state.save(STATE, {"boot": boot, "ports": new_memory, "history": new_history})
        return out

    def _hung(self, cfg: FabricConfig, o) -> Finding:
        where = o.step or "listing the devices"
        detail = o.error
        if o.status == STILL_HUNG:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(o.since))
            detail = f"still hung since {stamp} (reader pid {o.pid} stuck in the kernel)"
        return Finding(NAME, "fabric", "hung", FAIL, f"ib sysfs hung >{cfg.timeout:g}s at {where}",
                       detail=detail, evidence={"step": where, "since": o.since},
                       incident=f"fabric:hung:{where}")

    def _port(self, cfg: FabricConfig, key: str, p: dict, seen: dict, hist: dict, now: float) -> Finding:
        up = is_up(p)
        rate = p.get("rate")
        if up:
            seen["active"] = True
            if rate is not None:
                seen["rate"] = max(float(seen.get("rate") or 0), rate)
        configured = bool(cfg.ports)
        expected = key in cfg.ports if configured else bool(seen.get("active"))
        expected_rate = cfg.rate if cfg.rate is not None else seen.get("rate")
        flaps, flap_note = self._flaps(cfg, p, hist, now)
        grown = self._grown(cfg, p, hist, now)
        kind = _kind(p)
        ev = {"device": p["device"], "port": p["port"], "link_layer": p.get("link_layer"),
              "state": f"{p.get('state')}: {p.get('state_name')}",
              "phys_state": f"{p.get('phys_state')}: {p.get('phys_state_name')}",
              "rate": rate, "rate_text": p.get("rate_text"), "expected_rate": expected_rate,
              "expected": ("configured" if configured else "active since boot") if expected else "no",
              "up": up, "counters": p.get("counters", {}), "flaps": flaps, "grown": grown}
        for k in ("netdev", "operstate", "carrier"):
            if k in p:
                ev[k] = p[k]
        problems: list[tuple[str, str, str]] = []     # (status, summary, detail)
        if expected and not up:
            was = f", was {_gbps(seen.get('rate'))}" if seen.get("rate") else ""
            why = self._why_down(p)
            problems.append(("down", f"{kind} {key} down ({why}{was})",
                             f"state {ev['state']}, phys_state {ev['phys_state']}"))
        if flaps >= cfg.flap_strikes:
            problems.append(("flapping", f"{kind} {key} flapping ({flaps} link downs in {_ago(cfg.flap_window)})",
                             flap_note))
        if up and expected and expected_rate and rate is not None and rate < expected_rate:
            problems.append(("slow", f"{kind} {key} at {_gbps(rate)}, expected {_gbps(expected_rate)}",
                             f"rate {p.get('rate_text')}"))
        if grown:
            worst = max(grown, key=lambda n: grown[n]["by"])
            g = grown[worst]
            problems.append(("errors", f"{kind} {key} {worst} +{g['by']} in {_ago(g['over'])}",
                             "; ".join(f"{n} +{v['by']} in {_ago(v['over'])} (warns above {v['warn']})"
                                       for n, v in sorted(grown.items()))))
        if not problems:
            if up:
                return Finding(NAME, key, "ok", OK, f"{kind} {key} up {_gbps(rate)}", evidence=ev)
            return Finding(NAME, key, "unused", OK,
                           f"{kind} {key} not in use ({p.get('state_name') or '?'}, not expected up)",
                           detail="neither in fabric.ports nor seen ACTIVE since boot", evidence=ev)
        problems.sort(key=lambda x: VERDICT_ORDER.index(x[0]))
        status, summary, _ = problems[0]
        severity = WARN if status == "errors" or (status == "slow" and cfg.slow_rate == "warn") else FAIL
        detail = "; ".join(d for _, _, d in problems if d)
        if len(problems) > 1:
            detail = "also " + ", ".join(s for _, s, _ in problems[1:]) + "; " + detail
        return Finding(NAME, key, status, severity, summary, detail=detail, evidence=ev,
                       incident=f"fabric:{key}:{status}", resumable=True)

    @staticmethod
    def _why_down(p: dict) -> str:
        if p.get("link_layer") == "Ethernet" and p.get("netdev") and \
                p.get("state") == ACTIVE and p.get("phys_state") == LINK_UP:
            if p.get("operstate") != "up":
                return f"{p['netdev']} {p.get('operstate') or 'unreadable'}"
            return f"{p['netdev']} no carrier"
        if p.get("phys_state") is not None and p.get("phys_state") != LINK_UP:
            return p.get("phys_state_name") or f"phys_state {p.get('phys_state')}"
        return p.get("state_name") or f"state {p.get('state')}"

    @staticmethod
    def _flaps(cfg: FabricConfig, p: dict, hist: dict, now: float) -> tuple[int, str]:
        """Strikes in the window after adding this run's link_downed growth."""
        value = p.get("counters", {}).get("link_downed")
        strikes = [s for s in hist.get("strikes", []) if now - s[0] <= cfg.flap_window]
        last = hist.get("link_downed")
        if value is not None:
            if last is not None and value > last:
                strikes.append([now, value - last])
            hist["link_downed"] = value
        if strikes and now - max(s[0] for s in strikes) >= cfg.flap_recovery:
            strikes = []             # healed: no new link down for flap_recovery
        hist["strikes"] = strikes
        n = sum(int(s[1]) for s in strikes)
        note = ""
        if strikes:
            last_at = max(s[0] for s in strikes)
            note = (f"link_downed grew {n} in the last {_ago(now - min(s[0] for s in strikes))}; the last "
                    f"{_ago(now - last_at)} ago; healed after {_ago(cfg.flap_recovery)} without one")
        if value is not None and value >= (1 << ERROR_COUNTERS["link_downed"]) - 1:
            note = (note + "; " if note else "") + "link_downed saturated at 255: new link downs are not counted"
        return n, note

    @staticmethod
    def _grown(cfg: FabricConfig, p: dict, hist: dict, now: float) -> dict:
        """Counters whose growth within error_window is above their threshold."""
        counters = {n: v for n, v in p.get("counters", {}).items() if n in cfg.error_warn}
        samples = [s for s in hist.get("samples", []) if now - s[0] <= cfg.error_window]
        out = {}
        for name, value in counters.items():
            base = None
            for t, values in samples:
                v = values.get(name)
                if v is None or v > value:     # reset (driver reload, perfquery -R): start again
                    base = None
                    continue
                if base is None:
                    base = (t, v)
            if base is not None and value - base[1] > cfg.error_warn[name]:
                out[name] = {"by": value - base[1], "over": now - base[0], "warn": cfg.error_warn[name]}
        # A few samples per window are enough to measure growth within it.
        if counters and (not samples or now - samples[-1][0] >= cfg.error_window / 12):
            samples.append([now, counters])
        hist["samples"] = samples
        return out


CHECK = FabricCheck
