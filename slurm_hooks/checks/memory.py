"""Memory: what the kernel says is left (MemAvailable) and whether it has been killing.

- MemAvailable (/proc/meminfo) is the kernel's own estimate of what can be allocated
  without swapping: free memory plus the page cache and reclaimable slab it can drop.
  Below `memory.min_available_mib` the node fails: a job started there is OOM-killed or
  takes slurmd with it. It is a resumable drain: once memory comes back, the node is
  resumed after policy.resume_after passing runs. Below `memory.warn_percent` of
  MemTotal it is a warning.
- OOM kills (/proc/vmstat `oom_kill`, every kill since boot, a cgroup's included) that
  are new since the last real run are a warning naming how many: a job over its
  --mem is its own business, but kills the jobs cannot explain are worth a look.

Both files are made by the kernel from counters it keeps in memory (si_meminfo, the
vm event counters): reading them takes no lock a hung filesystem or a wedged device can
hold, and costs microseconds, so they are read in the parent, not in a hang-safe child.
"""
from __future__ import annotations

from .. import TYPE_CHECKING
from ..core.config import setting, switch
from ..core.model import FAIL, OK, WARN, Finding
from ..core.records import dataclass

if TYPE_CHECKING:
    from ..core.config import Config
    from ..host.runner import Outcome
    from . import Context

NAME = "memory"
ORDER = 60
HOOKS = ("check", "healthcheck")
STATE = "memory"
MEMINFO = "/proc/meminfo"
VMSTAT = "/proc/vmstat"
MIB = 1 << 20


@dataclass
class MemoryConfig:
    enabled: str = switch("Read MemAvailable and the kernel's OOM-kill count. auto: when "
                          "/proc/meminfo is there; true: it must be; false: never.")
    min_available_mib: int | None = setting(256, kind="int", min=0, nullable=True,
                                            doc="MemAvailable below this many MiB fails the run "
                                            "(a resumable drain). null: never fails.")
    warn_percent: float = setting(5.0, kind="number", min=0, max=100,
                                  doc="MemAvailable below this share (%) of MemTotal is a warning. "
                                  "0: none.")
    oom_kill_warn: bool = setting(True, kind="bool",
                                  doc="Warn when the kernel OOM-killed processes since the last "
                                  "health check (/proc/vmstat oom_kill).")


SECTIONS = {"memory": setting(kind="section", cls=MemoryConfig,
                              doc="Memory left (MemAvailable) and OOM kills (the memory check).")}


def settings(cfg: Config) -> MemoryConfig:
    """This check's section of the configuration."""
    out: MemoryConfig = getattr(cfg, NAME)
    return out


def meminfo(text: str) -> dict[str, int]:
    """Bytes of each `Key: N kB` line of /proc/meminfo."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def oom_kills(text: str) -> int | None:
    """The `oom_kill` count of /proc/vmstat (Linux 4.13 on), None where absent."""
    for line in text.splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class MemoryCheck:
    name = NAME
    order, hooks = ORDER, HOOKS
    roles: tuple[str, ...] = ()
    state: tuple[str, ...] = (STATE,)
    series = {
        "slurm_hooks_memory_available_bytes": ("gauge", "MemAvailable: what the kernel can give without swapping."),
        "slurm_hooks_memory_total_bytes": ("gauge", "MemTotal."),
        "slurm_hooks_memory_oom_kills_total": ("counter", "Processes the kernel OOM-killed since boot."),
    }
    explain_keys = ("available_mib", "total_mib", "min_available_mib", "warn_percent", "oom_kills_new",
                    "oom_kills")

    def __init__(self, proc: str = "/proc"):
        self.meminfo_path = f"{proc}/meminfo"
        self.vmstat_path = f"{proc}/vmstat"

    @staticmethod
    def samples(findings: list[Finding]) -> list[tuple[str, dict, float]]:
        out: list[tuple[str, dict, float]] = []
        for f in findings:
            ev = f.evidence
            if f.target == NAME and "available" in ev:
                out.append(("slurm_hooks_memory_available_bytes", {}, float(ev["available"])))
                out.append(("slurm_hooks_memory_total_bytes", {}, float(ev["total"])))
                if ev.get("oom_kills") is not None:
                    out.append(("slurm_hooks_memory_oom_kills_total", {}, float(ev["oom_kills"])))
        return out

    def tasks(self, ctx: Context) -> list:
        return []                   # nothing here can block (module docstring)

    def findings(self, ctx: Context, outcomes: dict[str, Outcome]) -> list[Finding]:
        cfg = settings(ctx.config)
        if cfg.enabled == "false":
            return [Finding(NAME, NAME, "disabled", OK, "memory: check disabled (memory.enabled: false)")]
        text = _read(self.meminfo_path)
        info = meminfo(text) if text is not None else {}
        if "MemAvailable" not in info or "MemTotal" not in info:
            if cfg.enabled == "auto" and text is None:
                return [Finding(NAME, NAME, "not_applicable", OK, f"memory not applicable: no {self.meminfo_path}")]
            return [Finding(NAME, NAME, "unreadable", WARN if cfg.enabled == "auto" else FAIL,
                            f"memory: {self.meminfo_path} shows no MemAvailable/MemTotal")]
        avail, total = info["MemAvailable"], info["MemTotal"]
        vm = _read(self.vmstat_path)
        kills = oom_kills(vm) if vm is not None else None
        ev: dict = {"available": avail, "total": total, "available_mib": avail // MIB, "total_mib": total // MIB,
                    "min_available_mib": cfg.min_available_mib, "warn_percent": cfg.warn_percent,
                    "oom_kills": kills}
        out = [self._level(cfg, avail, total, ev)]
        new = self._new_kills(ctx, kills)
        if new and cfg.oom_kill_warn:
            out.append(Finding(NAME, "oom", "oom_kill", WARN,
                               f"memory: the kernel OOM-killed {new} process(es) since the last health check",
                               detail="dmesg / the kernel log names them ('Out of memory: Killed process'); "
                               "a job over its --mem is killed in its cgroup, and counts too",
                               evidence={"oom_kills_new": new, "oom_kills": kills}))
        return out

    def _level(self, cfg: MemoryConfig, avail: int, total: int, ev: dict) -> Finding:
        have = f"{avail // MIB} MiB available of {total // MIB} MiB"
        if cfg.min_available_mib is not None and avail < cfg.min_available_mib * MIB:
            return Finding(NAME, NAME, "low", FAIL, f"memory low: {have} (below {cfg.min_available_mib} MiB)",
                           evidence=ev, reason=f"memory low: below {cfg.min_available_mib} MiB available")
        if total and avail * 100 < cfg.warn_percent * total:
            return Finding(NAME, NAME, "tight", WARN, f"memory tight: {have} (below {cfg.warn_percent:g}%)",
                           evidence=ev)
        return Finding(NAME, NAME, "ok", OK, f"memory: {have}", evidence=ev)

    def _new_kills(self, ctx: Context, kills: int | None) -> int:
        """OOM kills since the last real run of this boot (0 the first time: the kills
        before slurm-hooks looked are no news)."""
        if kills is None:
            return 0
        from ..host.procfs import boot_id
        boot = boot_id()
        saved = ctx.state.load(STATE)
        now = {"boot": boot, "oom_kills": kills}
        if saved != now:        # most runs see no new kill: no file written
            ctx.state.save(STATE, now, durable=False)
        if saved.get("boot") != boot or not isinstance(saved.get("oom_kills"), int):
            return 0
        return max(0, kills - saved["oom_kills"])


CHECK = MemoryCheck
