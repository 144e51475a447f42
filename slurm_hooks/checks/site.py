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

Trust: root runs these. A drop-in runs only when its whole path is root's alone
(host/trusted.py): every directory from `/` down, each link's target, the file, a
script's interpreter and every path its `#!` line names (`#!/bin/sh /x` runs /x, so
does `#!/usr/bin/env -S /x`; env's program is verified where PATH finds it, any other
bare word refused) owned by root and writable by no one else; otherwise it is refused
with a warning naming the component and never run (a user who could change any of them
would own the node). It is executed by the descriptor that walk opened (fexecve), so a
rename after the check changes nothing. Listing the directory, that walk and the read of
a file's first 4 KiB touch the filesystem: they run in runner children with deadlines,
never in the hook itself. Names follow run-parts (letters, digits, `_`, `-`), so
README, foo.bak and dpkg's leftovers are ignored. A check says in which runs it takes part with a line in
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
from ..host.trusted import Untrusted, open_root_only

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
                       "(letters, digits, _ and -), run with Nagios exit codes. One whose path "
                       "from / (every directory, link and the file) is not root's alone is "
                       "refused, never run.")
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
# The task that lists and verifies the drop-ins: its key, never a drop-in's (a
# run-parts name has no colon), and its deadline.
LISTING = ":list"
LIST_TIMEOUT = 5.0


def _stamp(since: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))


def _cap(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _run_parts_name(name: str) -> bool:
    return bool(name) and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def declared(head: bytes) -> tuple[tuple[str, ...], float | None, str]:
    """(hooks, timeout, problem) from the `slurm-hooks:` line of a file's first bytes."""
    hooks: tuple[str, ...] = ("healthcheck",)
    timeout = None
    for line in head.decode("utf-8", "replace").splitlines():
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


# --- what runs in the children ---------------------------------------------------------
# What a word of a `#!` line may hold: no quoting, escapes or expansions (`env -S`
# interprets them), so each word means what it reads.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=+,:@%-")


def _root_only(path: str, mounts, what: str) -> str:
    """Why `path` is not root's alone (every component, each link), or ""."""
    try:
        fd, _ = open_root_only(path, mounts=mounts)
    except Untrusted as e:
        return f"{what}: {e}"
    except OSError as e:
        return f"{what} {path}: {e.strerror}"
    os.close(fd)
    return ""


def _in_path(name: str) -> str | None:
    """Where env(1) finds `name` with the site checks' PATH (the first executable)."""
    for d in PATH.split(":"):
        candidate = os.path.join(d, name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _interpreter(head: bytes, mounts=None) -> str:
    """Why a `#!` script's interpreter, or anything its `#!` line names, is not root's
    alone, or "".

    The kernel runs `interpreter [argument] script`, the whole rest of the line one
    argument, which the interpreter may read as a program or a file to run first:
    `#!/bin/sh /x` runs /x, `#!/usr/bin/env -S /x` runs /x. So every word is verified:
    an absolute path as the interpreter is (its whole path root's alone); an option
    (`-e`, `-S`) only without a path inside it; a bare word only as env's program,
    found in the site checks' PATH and verified there. Anything else is refused."""
    if not head.startswith(b"#!"):
        return ""
    raw = head[2:].split(b"\n", 1)[0].split()
    interp = raw[0].decode("utf-8", "replace") if raw else ""
    if not interp:
        return "its #! line names no interpreter"
    why = _root_only(interp, mounts, "its interpreter")
    if why:
        return why
    try:
        words = [interp] + [w.decode("ascii") for w in raw[1:]]
    except UnicodeDecodeError:
        return "its #! line's arguments are not plain ASCII"
    env = os.path.basename(interp) == "env"
    program = None
    for word in words[1:]:
        if not set(word) <= _PLAIN:
            return f"its #! line: {word!r}: quoting, escapes or expansions are not verified"
        if word.startswith("/"):
            why = _root_only(word, mounts, "a path on its #! line")
            if why:
                return why
            if env and program is None:
                program = word
        elif "/" in word:
            return f"its #! line: {word!r}: a path inside an argument (or a relative path) is not verified"
        elif word.startswith("-") or (env and program is None and "=" in word):
            continue                    # an option, or env's NAME=value
        elif env and program is None:
            found = _in_path(word)
            if found is None:
                return f"its #! line: {word!r} is not in the site checks' PATH ({PATH})"
            why = _root_only(found, mounts, f"{word} (env finds {found})")
            if why:
                return why
            program = found
        else:
            return (f"its #! line: {word!r}: a bare word is a file the interpreter may run, "
                    "relative to the working directory: not verified")
    return ""


def _open(path: str, mounts=None) -> tuple[int, bytes]:
    """The drop-in's descriptor (opened by host/trusted.py's walk from /) and its first
    bytes; raises Untrusted with why it may not run."""
    try:
        fd, st = open_root_only(path, mounts=mounts)
    except OSError as e:
        raise Untrusted(f"{path}: {e.strerror}") from None
    try:
        if not st.st_mode & 0o111:
            raise Untrusted(f"{path}: not executable")
        head = os.pread(fd, HEADER, 0)
        why = _interpreter(head, mounts)
        if why:
            raise Untrusted(why)
    except BaseException:
        os.close(fd)
        raise
    return fd, head


def list_site_checks(progress, directory: str) -> dict:
    """In a child: the drop-ins of `directory`, each verified, with what it declares."""
    from ..host.mounts import MountTable
    progress("list")
    try:
        if not stat.S_ISDIR(os.stat(directory).st_mode):
            return {"not_dir": True}
        entries = sorted(os.listdir(directory))
    except FileNotFoundError:
        return {"missing": True}
    except OSError as e:
        return {"unreadable": e.strerror}
    mounts = MountTable.current()
    out: list[dict] = []
    for name in entries:
        if not _run_parts_name(name):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
            continue              # run-parts' rule: only executable files run
        progress(f"verify {name}")
        try:
            fd, head = _open(path, mounts)
        except Untrusted as e:
            out.append({"name": name, "path": path, "refused": str(e)})
            continue
        os.close(fd)
        hooks, timeout, problem = declared(head)
        if problem:
            out.append({"name": name, "path": path, "refused": f"bad declaration: {problem}"})
            continue
        out.append({"name": name, "path": path, "hooks": list(hooks), "timeout": timeout})
    return {"entries": out}


def run_site_check(progress, path: str, timeout: float, env: dict) -> dict:
    from ..host.runner import MAX_RESULT, proc_start_time, reap, run_command
    progress("verify")
    # Verified again here, in the process that executes it, and executed by the very
    # descriptor verified: what was listed a moment ago may have changed since.
    try:
        fd, head = _open(path)
    except Untrusted as e:
        return {"refused": str(e)}
    # A script runs as `interpreter /dev/fd/3`: the interpreter opens it by that name,
    # so the descriptor must stay open across the exec; a binary does not keep it.
    os.set_inheritable(fd, head.startswith(b"#!"))
    progress("exec")
    r = run_command([path], timeout, env, exec_fd=fd)
    os.close(fd)
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
    out["stderr"] = _cap(err[0].strip(), SUMMARY_CAP) if err else ""
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
        m = ctx.mounts.holding(cfg.dir)
        if m is not None and not (m.is_network or m.is_fuse) and not os.path.lexists(cfg.dir):
            # No directory, on a local filesystem (mountinfo says, nothing remote is
            # touched): nothing to list, and no child forked on every healthy run.
            return []
        # Listing the directory and verifying each drop-in (host/trusted.py) read the
        # filesystem: a child does it, with a deadline, before the drop-ins' own children.
        key = self.key(LISTING)
        o = ctx.runner.run([Task(key, list_site_checks, (cfg.dir,), min(cfg.timeout, LIST_TIMEOUT))])[key]
        if o.status != DONE:
            on_hang = FAIL if cfg.on_hang == "fail" else WARN
            hung = o.status in (HUNG, STILL_HUNG)
            detail = o.error
            if o.status == STILL_HUNG:
                detail = f"still hung since {_stamp(o.since)} (pid {o.pid} stuck in the kernel): not started again"
            self._early.append(self._finding(
                cfg.dir, "hung" if hung else "unknown", on_hang if hung else WARN,
                f"site checks {cfg.dir} {'hung' if hung else 'could not be listed'} "
                f"(at {o.step or 'start'})", detail=detail, path=cfg.dir, incident=f"site:{LISTING}:{o.status}"))
            return []
        found = o.value
        if found.get("missing"):
            return []                 # no site checks: nothing to say
        if found.get("unreadable") or found.get("not_dir"):
            why = f"unreadable: {found['unreadable']}" if found.get("unreadable") else "is not a directory"
            self._early.append(self._finding(cfg.dir, "refused", WARN, f"site checks {cfg.dir} {why}", path=cfg.dir))
            return []
        tasks = []
        env = self._env(ctx)
        for entry in found["entries"]:
            name, path = entry["name"], entry["path"]
            if entry.get("refused"):
                self._early.append(self._refused(name, path, entry["refused"]))
                continue
            if hook not in entry["hooks"]:
                continue
            t = min(entry["timeout"] or cfg.timeout, cfg.timeout)
            self._run[name] = (path, t)
            # The child's own deadline is the program's plus the moment it needs to kill
            # the program and report.
            tasks.append(Task(self.key(name), run_site_check, (path, t, env), t + 2.0))
        return tasks

    def _refused(self, name: str, path: str, why: str) -> Finding:
        return self._finding(name, "refused", WARN, f"site check {name} refused: {why}", path=path,
                             detail="not run: root runs site checks, so only root may be able to change them")

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
                    detail = f"still hung since {_stamp(since)} (pid {o.pid} stuck in the kernel): not started again"
                out.append(self._finding(name, "hung", on_hang, f"site {name} hung >{timeout:g}s", detail=detail,
                                         path=path, evidence={**base, "since": since},
                                         incident=f"site:{name}:hung"))
                continue
            if o.status != DONE:
                out.append(self._finding(name, "unknown", WARN, f"site {name} could not be run", detail=o.error,
                                         path=path, evidence=base))
                continue
            v = o.value
            if v.get("refused"):
                out.append(self._refused(name, path, v["refused"]))
                continue
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
