"""The Slurm backend: everything slurm-hooks asks of Slurm goes through scontrol here.

scontrol rather than a library binding: pyslurm must match the running Slurm's
major.minor exactly and exists on PyPI for few releases, while `scontrol -o` output
(one line of Key=Value per object) is stable across versions. Every call is an argv
list (never a shell), uses an absolute path and a PATH we set ourselves
(HealthCheckProgram runs with no PATH), and has a deadline. Errors carry scontrol's
own message.
"""
from __future__ import annotations

import os
import re

from .runner import CommandResult, run_command

SEARCH_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Fields whose value is free text and may contain spaces (and even "Word=" pieces).
FREE_TEXT = frozenset({"Reason", "Comment", "AdminComment", "Command", "WorkDir", "StdErr",
                       "StdIn", "StdOut", "SystemComment", "Extra", "OS", "Features",
                       "AvailableFeatures", "ActiveFeatures"})
_TOKEN = re.compile(r" (?=[A-Za-z][A-Za-z0-9_/:.\[\]]*=)")


class SlurmError(Exception):
    """A Slurm operation failed; str() is what scontrol said."""


class SlurmUnavailable(SlurmError):
    """No scontrol, or no slurmctld answering."""


def parse_oneliner(line: str, known: frozenset | None = None) -> dict[str, str]:
    """Parse one `scontrol -o show ...` line into a dict.

    Keys are words followed by '='. A free-text value (Reason, AdminComment, ...) keeps
    absorbing the following pieces until one starts with a key that scontrol really
    prints for this object (given in `known`, learnt from the line's own well-formed
    keys when not given), so "Reason=disk a=b broken" stays whole.
    """
    out: dict[str, str] = {}
    current = None
    for piece in _TOKEN.split(line.strip()):
        key, sep, value = piece.partition("=")
        if current in FREE_TEXT and (not sep or (known is not None and key not in known)
                                     or (known is None and _looks_like_text(key, out))):
            out[current] += " " + piece
            continue
        if not sep:
            if current is not None:
                out[current] += " " + piece
            continue
        out[key] = value
        current = key
    return out


def _looks_like_text(key: str, seen: dict) -> bool:
    # Without a list of keys, treat lower-case words as text: scontrol's keys are
    # CamelCase (NodeName, State, AdminComment, MCS_label, ...).
    return not key[:1].isupper() or key in seen


def strip_reason_stamp(reason: str) -> str:
    """Drop the ` [user@2026-11-29T22:20:45]` that scontrol appends to a node reason."""
    return re.sub(r"\s*\[[^\]@]*@[^\]]*\]\s*$", "", reason)


def find_scontrol(bin_dir: str | None) -> str | None:
    """scontrol's path. Slurm often lives on a shared filesystem (/opt/slurm over NFS):
    a directory on a network mount is not even looked at here (access() there can hang
    this process); the hang-safe exec in run_command finds out whether it works."""
    from .mounts import MountTable
    dirs = (bin_dir,) if bin_dir else SEARCH_DIRS
    mounts = None
    for d in dirs:
        path = os.path.join(d, "scontrol")
        if mounts is None:
            try:
                mounts = MountTable.current()
            except OSError:
                mounts = MountTable([])
        m = mounts.holding(path)
        if m is not None and m.is_network:
            return path
        if os.access(path, os.X_OK):
            return path
    return None


class Slurm:
    def __init__(self, cfg):
        self.timeout = cfg.timeout
        self.scontrol = find_scontrol(cfg.bin_dir)
        self.where = cfg.bin_dir or ", ".join(SEARCH_DIRS)
        self.env = {"PATH": SAFE_PATH, "LANG": "C", "LC_ALL": "C"}
        self.down: str | None = None       # set once slurmctld failed to answer
        self._primed: dict[str, dict] = {}  # node fields a caller has just read (used once)
        conf = cfg.conf or os.environ.get("SLURM_CONF")
        if conf:
            self.env["SLURM_CONF"] = conf

    # --- plumbing ------------------------------------------------------------------------
    def _run(self, *args: str) -> CommandResult:
        if self.scontrol is None:
            raise SlurmUnavailable(f"scontrol not found in {self.where}")
        if self.down is not None:
            # slurmctld did not answer a moment ago: each new try would cost the
            # whole timeout again, and a health check has 60 s in all.
            raise SlurmUnavailable(self.down)
        result = run_command([self.scontrol, *args], self.timeout, self.env)
        if result.timed_out:
            self.down = result.message()
            raise SlurmUnavailable(self.down)
        if not result.ok:
            msg = result.message()
            if "Unable to contact slurm controller" in msg or "Zero Bytes were transmitted" in msg:
                self.down = msg
                raise SlurmUnavailable(msg)
            raise SlurmError(msg)
        return result

    # --- operations ----------------------------------------------------------------------
    def _show(self, kind: str, name: str, unknown: str) -> dict[str, str] | None:
        """`scontrol -o show KIND NAME` as a dict; None when Slurm says `unknown`."""
        try:
            out = self._run("-o", "show", kind, name).stdout
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if unknown in str(e).lower():
                return None
            raise
        head = "NodeName=" if kind == "node" else "JobId="
        line = next((ln for ln in out.splitlines() if ln.startswith(head)), None)
        return parse_oneliner(line) if line else None

    def prime_node(self, info: dict[str, str]) -> None:
        """Fields of a node just read by a wider query (the breaker's cluster view):
        the next show_node of it answers from them instead of asking slurmctld again."""
        self._primed[info["NodeName"]] = info

    def show_node(self, node: str) -> dict[str, str] | None:
        primed = self._primed.pop(node, None)
        if primed is not None:
            return primed
        return self._show("node", node, f"node {node.lower()} not found")

    def show_job(self, job: str) -> dict[str, str] | None:
        return self._show("job", job, "invalid job id")

    def set_admin_comment(self, job: str, text: str) -> None:
        self._run("update", f"jobid={job}", f"admincomment={text}")

    def requeue(self, job: str) -> None:
        self._run("requeue", job)

    def cancel(self, job: str) -> None:
        scancel = os.path.join(os.path.dirname(self.scontrol or ""), "scancel")
        if self.scontrol is None or not os.access(scancel, os.X_OK):
            raise SlurmUnavailable(f"scancel not found next to scontrol in {self.where}")
        result = run_command([scancel, job], self.timeout, self.env)
        if not result.ok:
            raise SlurmError(result.message())

    def reboot(self, node: str, reason: str) -> None:
        # ASAP: drain now, reboot once the node's jobs are gone; RESUME afterwards.
        self._run("reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", node)

    def listpids(self, node: str) -> dict:
        """pid -> JobRef for every job process this node's slurmd knows of."""
        from .jobs import parse_listpids
        try:
            return parse_listpids(self._run("listpids", "*", node).stdout)
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if "no job steps exist" in str(e).lower():
                return {}
            raise

    def drain(self, node: str, reason: str) -> None:
        self._run("update", f"nodename={node}", "state=drain", f"reason={reason}")

    def resume(self, node: str) -> None:
        self._run("update", f"nodename={node}", "state=resume")


def node_is_drained(info: dict[str, str]) -> bool:
    # DRAIN, DRAINING, DRAINED and IDLE+DRAIN all mean "no new jobs here".
    return "DRAIN" in info.get("State", "").upper()
