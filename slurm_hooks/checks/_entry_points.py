"""Python checks from other packages: the entry-point group `slurm_hooks.checks`.

A package declares, in its metadata (pyproject's `[project.entry-points."slurm_hooks.checks"]`),
`NAME = "module:Class"`, where the class implements checks.Check (name, state,
series, explain_keys, tasks, findings, samples) and may say in `hooks` which runs
include it (default: the health check and `slurm-hooks check`).

Discovery reads the `entry_points.txt` of every `*.dist-info` / `*.egg-info` on
sys.path, the files importlib.metadata reads, without importing importlib.metadata:
that import alone costs about 18 ms, six times this project's whole budget for a new
check on the healthy path. The plugin module is only imported when its check runs, and
none of this happens when `site_checks.entry_points` is false: checks.plugins() reads
the setting before it looks for any.

Behind the same interface as the built-in checks, with the framework's guarantees
kept: a plugin that does not import, returns something that is not a Finding, or names
another check's tasks is a warning about the plugin, never a crash and never a drain;
its findings carry its own name as check and are capped like a site check's; a name
that is a built-in check's is ignored (the built-in one runs).
"""
from __future__ import annotations

import os
import sys

from .. import TYPE_CHECKING
from ..core.model import WARN, Finding

if TYPE_CHECKING:
    from typing import Any

GROUP = "slurm_hooks.checks"
DEFAULT_HOOKS = ("check", "healthcheck")
SUMMARY_CAP, DETAIL_CAP = 240, 1000

_found: dict[str, str] | None = None


def discover(path: list[str] | None = None) -> dict[str, str]:
    """name -> "module:attr" for every entry point of the group on sys.path (first wins,
    as importlib.metadata's order does)."""
    global _found
    if path is None and _found is not None:
        return _found
    out: dict[str, str] = {}
    for entry in (sys.path if path is None else path):
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in sorted(names):
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(entry or ".", name, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            if GROUP not in text:
                continue
            for key, value in _section(text, GROUP):
                out.setdefault(key, value)
    if path is None:
        _found = out
    return out


def _section(text: str, group: str) -> list[tuple[str, str]]:
    """The `name = value` lines of [group] in an entry_points.txt (an INI file)."""
    out, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line[1:-1].strip() == group
            continue
        if inside and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def _resolve(value: str):
    module, _, attr = value.partition(":")
    obj = __import__(module.strip(), fromlist=["_"])
    for part in attr.strip().split(".") if attr.strip() else ():
        obj = getattr(obj, part)
    return obj


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


class PluginCheck:
    """A plugin's check behind the framework's guarantees (see the module's text)."""
    name = ""
    value = ""
    impl: Any = None
    error = ""
    hooks: tuple[str, ...] = DEFAULT_HOOKS
    order = 1000               # after every built-in check
    roles: tuple[str, ...] = ()  # decisions never single a plugin's findings out
    state: tuple[str, ...] = ()
    series: dict[str, tuple[str, str]] = {}
    explain_keys: tuple[str, ...] = ()

    def __init__(self):
        self._inner: Any = None
        self._skip = False

    @classmethod
    def samples(cls, findings: list[Finding]) -> list[tuple[str, dict, float]]:
        if cls.impl is None:
            return []
        try:
            got = list(cls.impl.samples(findings))
        except Exception:
            return []
        # Only the series the plugin declared: sinks/metrics.py writes no undeclared family. The
        # labels `node` (sinks/metrics.py's own) and `name`, `value` (its helper's parameters)
        # are refused rather than let a plugin break the textfile.
        return [s for s in got if isinstance(s, tuple) and len(s) == 3 and s[0] in cls.series
                and isinstance(s[1], dict) and not {"node", "name", "value"} & set(s[1])
                and isinstance(s[2], (int, float))]

    def tasks(self, ctx) -> list:
        run = ctx.behaviour
        if not getattr(ctx.config, "site_checks").entry_points or (run.site_hook not in self.hooks
                                                                   and not run.looks_only):
            self._skip = True
            return []
        if self.impl is None:
            return []
        self._inner = self.impl()
        tasks = list(self._inner.tasks(ctx))
        for t in tasks:
            if not str(t.key).startswith(self.name + ":"):
                raise ValueError(f"task key {t.key!r} does not start with {self.name + ':'!r}")
        return tasks

    def findings(self, ctx, outcomes: dict) -> list[Finding]:
        if self._skip:
            return []
        if self.impl is None:
            return [Finding(self.name, self.name, "not_loaded", WARN,
                            f"check {self.name} (entry point {self.value}) not loaded: {self.error}")]
        out = []
        mine = {k: v for k, v in outcomes.items() if k.startswith(self.name + ":")}
        for f in self._inner.findings(ctx, mine):
            if not isinstance(f, Finding):
                raise TypeError(f"findings() returned {type(f).__name__}, not a Finding")
            f.check = self.name
            f.summary = _cap(f.summary, SUMMARY_CAP)
            f.reason = _cap(f.reason, SUMMARY_CAP)
            f.detail = _cap(f.detail, DETAIL_CAP)
            out.append(f)
        return out


def check_class(name: str, value: str) -> type:
    attrs: dict = {"name": name, "value": value}
    try:
        impl = _resolve(value)
        attrs["impl"] = impl
        hooks = tuple(getattr(impl, "hooks", DEFAULT_HOOKS))
        attrs["hooks"] = tuple(h for h in hooks if h in ("check", "healthcheck", "prolog", "epilog"))
        attrs["state"] = tuple(getattr(impl, "state", ()))
        attrs["series"] = {k: v for k, v in dict(getattr(impl, "series", {})).items()
                           if isinstance(k, str) and k.startswith("slurm_hooks_")}
        attrs["explain_keys"] = tuple(getattr(impl, "explain_keys", ()))
    except Exception as e:
        attrs["impl"] = None
        attrs["error"] = f"{type(e).__name__}: {e}"
    return type(f"PluginCheck_{name}", (PluginCheck,), attrs)
