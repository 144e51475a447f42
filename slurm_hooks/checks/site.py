"""Site checks: the site's own executables, one file each, in `site_checks.dir`.

Each runs through the hang-safe runner, in parallel with the built-in checks' tasks,
with its deadline: a forked child runs the program (fork+exec, argv of one absolute
path, no shell, stdin /dev/null, its own session, output on pipes of the child's and
never the hook's own stdout, which slurmd reads) and reports what it said. Verdicts in
the Nagios tradition (Meta GCM's and NHC's checks speak it too):

    exit 0 OK, 1 WARNING, 2 CRITICAL (a drain by its own reason, resumable unless it
    says otherwise), 3 UNKNOWN and anything else (a signal, 126, 127): a warning.

The first line of stdout is the summary; a line holding one JSON object
({"summary", "detail", "reason", "evidence", "resumable"}) makes the finding richer.
Both are made printable and capped here, and only the first 64 KiB of output are
looked at: a check that prints a megabyte or escape sequences gets one clean line.

A program that outlives its deadline is killed; one stuck in the kernel even then is
handed to the runner's registry of stuck children, so later runs report it "still hung"
and never start a second one.

Trust: root runs these. A file, or the directory holding it, that anyone but root can
write is refused with a warning and never run (a user who could write it would own
the node). Names follow run-parts (letters, digits, `_`, `-`), so README, foo.bak and
dpkg's leftovers are ignored. A check says in which runs it takes part with a line in
its first 4 KiB, `slurm-hooks: hooks=healthcheck,prolog,epilog timeout=5`; without it,
the health check (and `slurm-hooks check`).
"""
from __future__ import annotations

import os
import stat
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

NAME = "site"
# Last, and in every run: each of the site's executables says in which runs it takes part.
ORDER = 90
HOOKS = ("check", "healthcheck", "prolog", "epilog")


@dataclass
class SiteChecksConfig:
    enabled: str = switch("Run the drop-in executables of `dir`. auto is true.")
    dir: str = setting("/etc/slurm-hooks/checks.d", kind="path",
                       doc="Directory of site checks: executables named as run-parts accepts "
                       "(letters, digits, _ and -), run with Nagios exit codes. A file or "
                       "directory writable by anyone but root is refused, never run.")
    timeout: float = setting(10.0, kind="seconds", max=55,
                             doc="Deadline of each site check (one may declare a shorter one); "
                             "killed, and remembered if stuck, past it.")
    on_hang: str = setting("fail", kind="enum", choices=("fail", "warn"),
                           doc="A site check that does not end by its deadline: a resumable drain "
                           "(fail) or a warning.")
    entry_points: bool = setting(True, kind="bool",
                                 doc="Also run Python checks other packages register in the entry-point "
                                 "group slurm_hooks.checks.")


SECTIONS = {"site_checks": setting(kind="section", cls=SiteChecksConfig,
                                   doc="The site's own checks: drop-in executables and Python entry points.")}


def settings(cfg: Config) -> SiteChecksConfig:
    """This check's section of the configuration."""
    out: SiteChecksConfig = getattr(cfg, "site_checks")
    return out



SUMMARY_CAP = 200            # characters of the summary (a node reason is 255 bytes)
DETAIL_CAP = 1000
LOOK_AT = 64 << 10           # bytes of output parsed; the rest is drained and dropped
HEADER = 4096
SCRIPT_HOOKS = ("healthcheck", "prolog", "epilog")
NAGIOS = {0: ("ok", OK), 1: ("warning", WARN), 2: ("critical", FAIL), 3: ("unknown", WARN)}
# The environment a site check gets: nothing of ours but where it runs.
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
MARK = "slurm-hooks:"


def _cap(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _run_parts_name(name: str) -> bool:
    return bool(name) and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def _unsafe(st: os.stat_result) -> str:
    """Why a file or directory with this status is not root's alone, or ""."""
    if st.st_uid != 0:
        return f"owned by uid {st.st_uid}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return f"world-writable (mode {mode:04o})"
    if mode & stat.S_IWGRP:
        # Even group root: a member added to it later is not root.
        return f"group-writable (mode {mode:04o})"
    return ""


def declared(path: str) -> tuple[tuple[str, ...], float | None, str]:
    """(hooks, timeout, problem) from the file's `slurm-hooks:` line."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER).decode("utf-8", "replace")
    except OSError as e:
        return (), None, f"cannot read: {e.strerror}"
    hooks: tuple[str, ...] = ("healthcheck",)
    timeout = None
    for line in head.splitlines():
        at = line.find(MARK)
        if at < 0:
            continue
        for word in line[at + len(MARK):].split():
            key, _, value = word.partition("=")
            if key == "hooks":
                names = tuple(h for h in value.split(",") if h)
                bad = [h for h in names if h not in SCRIPT_HOOKS]
                if bad or not names:
                    return (), None, f"hooks={value}: each must be one of {', '.join(SCRIPT_HOOKS)}"
                hooks = names
            elif key == "timeout":
                try:
                    timeout = float(value)
                except ValueError:
                    timeout = -1.0
                if not 0 < timeout <= 55:
                    return (), None, f"timeout={value}: must be seconds, above 0 and at most 55"
            else:
                return (), None, f"unknown declaration {word!r}; known: hooks=, timeout="
        break
    return hooks, timeout, ""


# --- what runs in the child -----------------------------------------------------------
def run_site_check(progress, path: str, timeout: float, env: dict) -> dict:
    from ..host.runner import MAX_RESULT, proc_start_time, reap, run_command
    progress("exec")
    r = run_command([path], timeout, env)
    # run_command keeps the first MiB and drains the rest, so the program never blocks.
    out: dict = {"rc": r.rc, "elapsed": r.elapsed, "timed_out": r.timed_out, "pid": r.pid,
                 "bytes": len(r.stdout), "cut": len(r.stdout) >= MAX_RESULT}
    if r.timed_out:
        # run_command killed it; one still there after a moment is stuck in the kernel.
        deadline = time.monotonic() + 0.05
        while not reap(r.pid) and time.monotonic() < deadline:
            time.sleep(0.002)
        st = proc_start_time(r.pid)
        if st is not None and st[0] not in ("Z", "X", "x") and not reap(r.pid):
            out["stuck_start"] = st[1]
    lines = r.stdout[:LOOK_AT].splitlines()
    out["summary"] = _cap(lines[0].strip(), SUMMARY_CAP) if lines else ""
    for i, line in enumerate(lines[:200]):
        if not line.lstrip().startswith("{"):
            continue
        from ..core import jsonio
        try:
            doc = jsonio.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out["json"] = _json_fields(doc)
            if i == 0:           # the JSON line is all it said: no plain summary
                out["summary"] = ""
            break
    err = r.stderr[:LOOK_AT].strip().splitlines()
    out["stderr"] = _cap(err[0], SUMMARY_CAP) if err else ""
    return out


def _json_fields(doc: dict) -> dict:
    """What a check's JSON line may set, each capped."""
    out: dict = {}
    for key, cap in (("summary", SUMMARY_CAP), ("reason", SUMMARY_CAP), ("detail", DETAIL_CAP)):
        if isinstance(doc.get(key), str):
            out[key] = _cap(doc[key], cap)
    if isinstance(doc.get("resumable"), bool):
        out["resumable"] = doc["resumable"]
    ev = doc.get("evidence")
    if isinstance(ev, dict):
        kept: dict = {}
        for k, v in list(ev.items())[:20]:
            if isinstance(v, (bool, int, float)) or v is None:
                kept[_cap(k, 64)] = v
            elif isinstance(v, str):
                kept[_cap(k, 64)] = _cap(v, SUMMARY_CAP)
        out["evidence"] = kept
    return out


# --- the check -----------------------------------------------------------------------
class SiteCheck:
    name = NAME
    order, hooks = ORDER, HOOKS
    roles: tuple[str, ...] = ()
    state: tuple[str, ...] = ()       # a stuck program is the runner's to remember
    series = {
        "slurm_hooks_site_check_status": (
            "gauge", "A site check's verdict, as a label (ok, warning, critical, unknown, hung, refused)."),
        "slurm_hooks_site_check_duration_seconds": ("gauge", "How long the site check ran in the last run."),
    }
    explain_keys = ("path", "exit", "output_bytes", "stderr", "timeout", "since")

    @staticmethod
    def samples(findings: list[Finding]) -> list[tuple[str, dict, float]]:
        out: list[tuple[str, dict, float]] = []
        for f in findings:
            if "path" not in f.evidence:
                continue
            out.append(("slurm_hooks_site_check_status", {"site_check": f.target, "status": f.status}, 1))
            if f.evidence.get("elapsed") is not None:
                out.append(("slurm_hooks_site_check_duration_seconds", {"site_check": f.target},
                            float(f.evidence["elapsed"])))
        return out

    def __init__(self):
        self._early: list[Finding] = []
        self._run: dict[str, tuple[str, float]] = {}     # name -> (path, timeout)

    @staticmethod
    def key(name: str) -> str:
        return f"{NAME}:{name}"

    def tasks(self, ctx: Context) -> list[Task]:
        cfg = settings(ctx.config)
        if cfg.enabled == "false":
            return []
        hook = ctx.behaviour.site_hook
        try:
            dir_st = os.stat(cfg.dir)
            entries = sorted(os.listdir(cfg.dir))
        except FileNotFoundError:
            return []                 # no site checks: nothing to say, nothing spent
        except OSError as e:
            self._early.append(self._finding(cfg.dir, "refused", WARN, f"site checks {cfg.dir} unreadable: {e.strerror}",
                                             path=cfg.dir))
            return []
        if not stat.S_ISDIR(dir_st.st_mode):
            self._early.append(self._finding(cfg.dir, "refused", WARN, f"site checks {cfg.dir} is not a directory",
                                             path=cfg.dir))
            return []
        why_dir = _unsafe(dir_st)
        tasks = []
        env = self._env(ctx)
        for name in entries:
            if not _run_parts_name(name):
                continue
            path = os.path.join(cfg.dir, name)
            try:
                lst = os.lstat(path)
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
                continue              # run-parts' rule: only executable files run
            why = why_dir and f"its directory {cfg.dir} is {why_dir}"
            why = why or _unsafe(st)
            if not why and stat.S_ISLNK(lst.st_mode):
                real = os.path.realpath(path)
                try:
                    why = _unsafe(os.stat(os.path.dirname(real)))
                    why = why and f"the directory of its target {real} is {why}"
                except OSError as e:
                    why = f"its target {real}: {e.strerror}"
            if why:
                self._early.append(self._finding(name, "refused", WARN, f"site check {name} refused: {why}",
                                                 path=path, detail="not run: root runs site checks, so only "
                                                 "root may be able to change them"))
                continue
            hooks, timeout, problem = declared(path)
            if problem:
                self._early.append(self._finding(name, "refused", WARN,
                                                 f"site check {name} refused: bad declaration: {problem}",
                                                 path=path))
                continue
            if hook not in hooks:
                continue
            t = min(timeout or cfg.timeout, cfg.timeout)
            self._run[name] = (path, t)
            # The child's own deadline is the program's plus the moment it needs to kill
            # the program and report.
            tasks.append(Task(self.key(name), run_site_check, (path, t, env), t + 2.0))
        return tasks

    @staticmethod
    def _env(ctx: Context) -> dict:
        env = {"PATH": PATH, "LC_ALL": "C", "SLURM_HOOKS_HOOK": ctx.hook, "SLURMD_NODENAME": ctx.node}
        if ctx.behaviour.for_job:
            env.update({k: v for k, v in os.environ.items() if k.startswith("SLURM_")})
            env["SLURMD_NODENAME"] = ctx.node
        return env

    def _finding(self, name: str, status: str, severity: str, summary: str, detail: str = "",
                 evidence: dict | None = None, path: str = "", **kw) -> Finding:
        ev = {"path": path, **(evidence or {})}
        return Finding(NAME, name, status, severity, _cap(summary, SUMMARY_CAP + 40),
                       detail=_cap(detail, DETAIL_CAP), evidence=ev, **kw)

    def findings(self, ctx: Context, outcomes: dict[str, Outcome]) -> list[Finding]:
        out = list(self._early)
        on_hang = FAIL if settings(ctx.config).on_hang == "fail" else WARN
        for name, (path, timeout) in self._run.items():
            o = outcomes[self.key(name)]
            base = {"timeout": timeout}
            if o.status in (HUNG, STILL_HUNG):
                since = o.since
                detail = o.error
                if o.status == STILL_HUNG:
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
                    detail = f"still hung since {stamp} (pid {o.pid} stuck in the kernel): not started again"
                out.append(self._finding(name, "hung", on_hang, f"site {name} hung >{timeout:g}s", detail=detail,
                                         path=path, evidence={**base, "since": since},
                                         incident=f"site:{name}:hung"))
                continue
            if o.status != DONE:
                out.append(self._finding(name, "unknown", WARN, f"site {name} could not be run", detail=o.error,
                                         path=path, evidence=base))
                continue
            v = o.value
            ev = {**base, "exit": v.get("rc"), "output_bytes": v.get("bytes"),
                  "output_cut": v.get("cut", False), "elapsed": round(v["elapsed"], 6),
                  "stderr": v.get("stderr", "")}
            if v.get("timed_out"):
                if v.get("stuck_start") is not None:
                    ctx.runner.adopt(self.key(name), int(v["pid"]), int(v["stuck_start"]), o.since)
                ev["since"] = o.since
                out.append(self._finding(name, "hung", on_hang, f"site {name} hung >{timeout:g}s",
                                         detail=f"no end within {timeout:g}s: killed"
                                         + ("; stuck in the kernel, remembered" if v.get("stuck_start") else ""),
                                         path=path, evidence=ev, incident=f"site:{name}:hung"))
                continue
            rc = v.get("rc")
            status, severity = NAGIOS.get(rc, ("unknown", WARN)) if isinstance(rc, int) else ("unknown", WARN)
            j = v.get("json") or {}
            said = j.get("summary") or v.get("summary") or ""
            if not said:
                said = f"exited {rc}" if isinstance(rc, int) and rc >= 0 else f"killed by signal {-rc}" \
                    if isinstance(rc, int) else "no status"
            if rc not in NAGIOS and isinstance(rc, int):
                said = f"{said} (exit {rc}: not a Nagios status)" if rc >= 0 else said
            summary = f"site {name}: {said}"
            reason = f"site {name}: {j['reason']}" if j.get("reason") else ""
            ev.update(j.get("evidence", {}))
            out.append(self._finding(name, status, severity, summary, detail=j.get("detail") or v.get("stderr", ""),
                                     path=path, evidence=ev, reason=_cap(reason, SUMMARY_CAP + 40),
                                     incident=f"site:{name}:{status}", resumable=j.get("resumable", True)))
        return out


CHECK = SiteCheck
