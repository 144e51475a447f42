"""The Slurm backend: everything slurm-hooks asks of Slurm goes through scontrol here
(and squeue, for jobs).

scontrol rather than a library binding: pyslurm must match the running Slurm's
major.minor exactly and exists on PyPI for few releases, while `scontrol -o` output
(one line of Key=Value per object) is stable across versions. Every call is an argv
list (never a shell), uses an absolute path and a PATH we set ourselves
(HealthCheckProgram runs with no PATH), and has a deadline. Errors carry scontrol's
own message.

Jobs are read through squeue, with a fixed list of fields and the AdminComment last:
`scontrol show job` prints a job's name, comment, command line and paths as they are,
line breaks included, so a job's user could write a line that reads as the start of
another job's record (or cut their own short). squeue prints only fields no job user
writes, then the AdminComment, which only Slurm's administrators (and slurm-hooks) set.

All calls of one run can share one deadline (`Slurm.deadline`, monotonic): slurmd kills
the health check after 60 s, and an incident takes several calls in a row. A call is
given what is left of the deadline at most; with too little left it is not started
(`OutOfTime`), and the caller spools the action for the next run.
"""
from __future__ import annotations

import os
import re
import sys
import time

from .. import TYPE_CHECKING
from ..host.runner import MAX_RESULT, NOT_RUN, SAFE_PATH, CommandResult, run_command
from .api import (
    CAUSE_FIELD,
    MIN_CALL,
    NO_CONFIG,
    SAID,
    STAMP_INSIDE,
    UNREACHABLE,
    NodeTable,
    OutOfTime,
    PrimedNodes,
    SlurmCode,
    SlurmError,
    SlurmNotConfigured,
    SlurmUnavailable,
    no_config_message,
    no_value,
    node_state_of,
)

if TYPE_CHECKING:
    from .api import Choice

SEARCH_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")

# Fields whose value is free text and may contain spaces (and even "Word=" pieces).
FREE_TEXT = frozenset({"Reason", "Comment", "AdminComment", "Command", "WorkDir", "StdErr",
                       "StdIn", "StdOut", "SystemComment", "Extra", "OS", "Features",
                       "AvailableFeatures", "ActiveFeatures"})
_TOKEN = re.compile(r" (?=[A-Za-z][A-Za-z0-9_/:.\[\]]*=)")


def parse_oneliner(line: str, known: frozenset | None = None) -> dict[str, str]:
    """Parse one `scontrol -o show ...` line into a dict.

    Keys are words followed by '='. A free-text value (Reason, AdminComment, ...) keeps
    absorbing the following pieces until one starts with a key that scontrol really
    prints for this object (given in `known`, learnt from the line's own well-formed
    keys when not given), so "Reason=disk a=b broken" stays whole. A node's Reason runs
    to its stamp (see _cut_node_reason): it may hold our words, and a file name in them
    may read `x [u@2020-01-01T00:00:00] Comment=...`.
    """
    out: dict[str, str] = {}
    line = line.strip()
    node = line.startswith("NodeName=")
    head, reason, tail = _cut_node_reason(line) if node else (line, None, "")
    # A node's reason without a stamp (one Slurm gave no time) runs to the end of the
    # line: it may hold words that look like keys, `Kill task failed (JobId=7 StepId=0)`.
    _pieces(head, out, None, known, open_reason=node and reason is None)
    if reason is not None:
        out["Reason"] = reason
        _pieces(tail, out, "Reason", known, open_reason=False)
    return out


# The node table of a big cluster is a few MB (about 600 bytes a node: 2.4 MB at 4,096
# nodes), past the runner's default cap on a program's output (1 MiB), which would cut
# it short: nodes missing from the breaker's count, the node's own record too.
NODE_TABLE_MAX = 64 << 20

_HEAD_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_/:.\[\]]*)=")


def parse_nodes_lean(lines: list[str]) -> list[dict[str, str]]:
    """What the breaker and the outage decision read of each node (NodeName, State,
    Reason, Comment, and what Slurm prints after them), as parse_oneliner gives them,
    at a fraction of its cost: the node table, thousands of nodes, is read on every
    failing run.

    Everything before ` Reason=` (or ` Comment=` without a reason) is Slurm's own and
    holds no free text (_cut_node_reason): of it only NodeName and State are taken, and
    its keys, learnt once from the first record (one layout per Slurm release), tell
    text after it from keys as the whole line's parse tells them. The rest is parsed as
    parse_oneliner does."""
    out: list[dict[str, str]] = []
    seen: frozenset | None = None
    for line in lines:
        line = line.strip()
        cut = line.find(" Reason=")
        if cut < 0:
            cut = line.find(" Comment=")
        end = len(line) if cut < 0 else cut
        at = line.find(" State=", 0, end)
        if at < 0 or not line.startswith("NodeName="):
            out.append(parse_oneliner(line))     # not the layout this expects: the whole parse
            continue
        stop = line.find(" ", at + 7, end)
        rec = {"NodeName": line[len("NodeName="):line.find(" ")], "State": line[at + 7:end if stop < 0 else stop]}
        if cut >= 0:
            if seen is None:
                seen = frozenset(_HEAD_KEY.findall(line, 0, cut))
            _tail(line[cut:], rec, seen)
        out.append(rec)
    return out


def _tail(tail: str, rec: dict[str, str], seen: frozenset) -> None:
    """A node line's Reason, Comment and what follows, from ` Reason=...`, into rec."""
    head, reason, after = _cut_node_reason(tail)
    _pieces(head.lstrip(" "), rec, None, None, open_reason=reason is None, seen=seen)
    if reason is not None:
        rec["Reason"] = reason
        _pieces(after, rec, "Reason", None, open_reason=False, seen=seen)


def _pieces(text: str, out: dict[str, str], current: str | None, known: frozenset | None,
            open_reason: bool, seen: frozenset = frozenset()) -> None:
    """The Key=Value pieces of `text` into `out`; `current`: the key a leading piece
    without one continues; `open_reason`: a Reason takes every piece after it; `seen`:
    keys of the line met before `text`, besides those in `out`."""
    if not text:
        return
    for piece in _TOKEN.split(text):
        key, sep, value = piece.partition("=")
        if current in FREE_TEXT and (not sep or (known is not None and key not in known)
                                     or (known is None and (_looks_like_text(key, out) or key in seen))
                                     or (open_reason and current == "Reason")):
            out[current] += " " + piece
            continue
        if not sep:
            if current is not None:
                out[current] += " " + piece
            continue
        out[key] = value
        current = key


def _cut_node_reason(line: str) -> tuple[str, str | None, str]:
    """(what comes before ` Reason=`, the Reason up to and with Slurm's stamp, what
    follows it), or (line, None, "") when the reason has no stamp.

    Slurm appends the stamp to the reason's first line, and prints after the reason
    only what admins and Slurm write (Comment, Extra, InstanceId, ReservationName,
    Topology, ...). Our reasons are one line, so any text of a user's inside one lies
    before the real stamp: the real stamp is the last one, and a stamp a file name
    forged is never taken for it."""
    head, sep, rest = line.partition(" Reason=")
    if not sep:
        return line, None, ""
    last = None
    for last in STAMP_INSIDE.finditer(rest):
        pass
    if last is None:
        return line, None, ""
    tail = rest[last.end():]
    # One blank separates the stamp from what follows; the blanks of a continued
    # reason's next line (`       more`) stay with it.
    return head, rest[:last.end()], tail[1:] if tail.startswith(" ") else tail


# slurmlib.py `nodes-alone`'s first line: how many nodes it counted and did not list.
OTHERS = "OtherNodes="


def records(out: str, head: str) -> list[str]:
    """The records of `scontrol -o show` output, each starting with `head` (`JobId=`).
    One line each, except that Slurm 25.11 prints a newline inside a value (an
    AdminComment an admin wrote with one) as it is: a line that does not start a
    record belongs to the one before, and the newline to its value."""
    out_records: list[str] = []
    for line in out.splitlines():
        if line.startswith(head):
            out_records.append(line)
        elif out_records:
            out_records[-1] += "\n" + line
    return out_records


def _looks_like_text(key: str, seen: dict) -> bool:
    # Without a list of keys, treat lower-case words as text: scontrol's keys are
    # CamelCase (NodeName, State, AdminComment, MCS_label, ...).
    return not key[:1].isupper() or key in seen


# squeue --Format fields of a job ("Name:0|": no padding, no cut, `|` after it).
JOB_FIELDS = ("JobId", "ArrayJobId", "ArrayTaskId", "UserId", "UserName", "State", "NodeList",
              "NumNodes", "Requeue", "BatchFlag", "RestartCnt", "admin_comment")
JOB_FORMAT = ",".join(f"{f}:0|" for f in JOB_FIELDS[:-1]) + f",{JOB_FIELDS[-1]}:0"
_JOB_LINE = re.compile(r"(\d+)\|(\d+)\|([^|]*)\|(\d+)\|([^|]*)\|([A-Z_]+)\|([^|]*)\|(\d+)\|(\d+)\|(\d+)\|(\d+)\|(.*)")


def parse_job_lines(out: str) -> list[dict[str, str]]:
    """squeue's JOB_FORMAT lines as records keyed like `scontrol show job`'s. A line
    that does not start a record continues the AdminComment before it (an admin may
    write a line break into one)."""
    jobs: list[dict[str, str]] = []
    for line in out.splitlines():
        m = _JOB_LINE.fullmatch(line)
        if m is None:
            if jobs:
                jobs[-1]["AdminComment"] += "\n" + line
            continue
        job, array, task, uid, user, state, nodes, count, requeue, batch, restarts, comment = m.groups()
        info = {"JobId": job, "UserId": f"{user}({uid})", "JobState": state, "NodeList": nodes or "(null)",
                "NumNodes": count, "Requeue": requeue, "BatchFlag": batch, "Restarts": restarts,
                "AdminComment": comment}
        if task != "N/A":
            info["ArrayJobId"], info["ArrayTaskId"] = array, task
        jobs.append(info)
    return jobs


# A job's place in the queue, for the start slurm-hooks may ask after its requeue: the
# times strict (Slurm's ISO form, or its words for none), the Reason last, whatever it
# holds (a job_submit plugin's or slurmctld's own words).
HOLD_FIELDS = ("JobId", "ArrayJobId", "ArrayTaskId", "UserId", "State", "EligibleTime", "SubmitTime", "Reason")
HOLD_FORMAT = ",".join(f"{f}:0|" for f in HOLD_FIELDS[:-1]) + f",{HOLD_FIELDS[-1]}:0"
_TIME = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|N/A|Unknown|None)"
_HOLD_LINE = re.compile(r"(\d+)\|(\d+)\|([^|]*)\|(\d+)\|([A-Z_]+)\|" + _TIME + r"\|" + _TIME + r"\|(.*)")
# Where a job holds a node: running, being ended, or suspended on it.
ON_NODE_STATES = "running,completing,suspended,configuring,stopped"


def parse_hold_lines(out: str) -> list[dict[str, str]]:
    """squeue's HOLD_FORMAT lines as records: JobId (ArrayJobId, ArrayTaskId), UserId
    (the uid alone), JobState, EligibleTime, SubmitTime, Reason."""
    jobs: list[dict[str, str]] = []
    for line in out.splitlines():
        m = _HOLD_LINE.fullmatch(line)
        if m is None:
            continue
        job, array, task, uid, state, eligible, submit, reason = m.groups()
        info = {"JobId": job, "UserId": f"({uid})", "JobState": state, "EligibleTime": eligible,
                "SubmitTime": submit, "Reason": reason}
        if task != "N/A":
            info["ArrayJobId"], info["ArrayTaskId"] = array, task
        jobs.append(info)
    return jobs


def _on_network(path: str) -> bool:
    from ..host.mounts import MountTable
    try:
        m = MountTable.current().holding(path)
    except OSError:
        return True
    return m is not None and m.is_network


def find_scontrol(bin_dir: str | None) -> str | None:
    """scontrol's path. Slurm often lives on a shared filesystem (/opt/slurm over NFS):
    a directory on a network mount is not even looked at here (access() there can hang
    this process); the hang-safe exec in run_command finds out whether it works."""
    from ..host.mounts import MountTable
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


class Slurm(PrimedNodes):
    """The scontrol backend (see slurm/connect.py for the interface)."""
    name = "scontrol"

    def __init__(self, cfg):
        self.choice: Choice | None = None   # when chosen by open_backend
        self.running_version: str | None = None
        self.timeout = cfg.timeout
        self.scontrol = find_scontrol(cfg.bin_dir)
        self.where = cfg.bin_dir or ", ".join(SEARCH_DIRS)
        self.env = {"PATH": SAFE_PATH, "LANG": "C", "LC_ALL": "C"}
        self.down: str | None = None       # set once slurmctld failed to answer
        self._primed: dict[str, dict] = {}  # node fields a caller has just read (used once)
        self.deadline: float | None = None  # monotonic time by which every call must end
        self.library = True                 # slurm/slurmlib.py may be tried (False once it failed)
        conf = cfg.conf or os.environ.get("SLURM_CONF")
        if conf:
            self.env["SLURM_CONF"] = conf
        # A slurm.conf named and missing: scontrol would retry it for 60 s, and every call
        # of the run would look like a Slurm outage. Said at once instead. Only where the
        # file would be on a local filesystem: a network one is never stat()ed here.
        self.missing_conf = conf if conf and not _on_network(conf) and not os.path.exists(conf) else None

    # --- plumbing ------------------------------------------------------------------------
    def _beside(self, tool: str) -> str:
        """The path of a Slurm command next to scontrol, if Slurm can be asked at all.
        Never access()ed here: Slurm may live on a hung network filesystem, and only
        the hang-safe exec may touch it."""
        if self.scontrol is None:
            raise SlurmUnavailable(f"scontrol not found in {self.where}")
        if self.missing_conf is not None:
            raise SlurmNotConfigured(f"the Slurm configuration {self.missing_conf} does not exist (slurm-hooks' "
                                     "`slurm: {conf: PATH}`, or SLURM_CONF): no Slurm call made")
        if self.down is not None:
            # slurmctld did not answer a moment ago: each new try would cost the
            # whole timeout again, and a health check has 60 s in all.
            raise SlurmUnavailable(self.down)
        return os.path.join(os.path.dirname(self.scontrol), tool)

    def _run(self, *args: str) -> CommandResult:
        return self._exec([self._beside("scontrol"), *args])

    def _call_timeout(self) -> float:
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left < MIN_CALL:
            raise OutOfTime("the run's time for Slurm calls is spent")
        return min(self.timeout, left)

    def _exec(self, argv: list, max_output: int = MAX_RESULT) -> CommandResult:
        timeout = self._call_timeout()
        result = run_command(argv, timeout, self.env, max_output=max_output)
        if result.timed_out:
            if timeout < self.timeout:
                raise OutOfTime(f"{result.message()}: the run's time for Slurm calls ran out")
            self.down = result.message()
            raise SlurmUnavailable(self.down)
        if not result.ok:
            msg = result.message()
            if result.code == NOT_RUN:
                raise SlurmError(msg, code=SlurmCode.NO_PROGRAM)
            code = said_code(msg)
            if code == SlurmCode.UNREACHABLE:
                self.down = msg
                raise SlurmUnavailable(msg)
            if code == SlurmCode.NO_CONFIG:
                raise SlurmNotConfigured(no_config_message(msg))
            raise SlurmError(msg, code=code)
        return result

    def timeout_left(self) -> float:
        """The deadline one call may have now (raises OutOfTime when none is left)."""
        return self._call_timeout()

    def version(self) -> str:
        """The running Slurm's version (`scontrol --version`: no RPC), e.g. '25.11.7'."""
        if self.running_version is None:
            if self.scontrol is None:
                raise SlurmUnavailable(f"scontrol not found in {self.where}")
            if self.missing_conf is not None:
                self._beside("scontrol")          # says the configuration is missing
            out = self._exec([self.scontrol, "--version"]).stdout.split()
            if len(out) < 2 or not re.match(r"\d+\.\d+", out[-1]):
                raise SlurmError(f"unexpected `scontrol --version` output: {' '.join(out)!r}")
            self.running_version = out[-1]
        return self.running_version

    # --- operations ----------------------------------------------------------------------
    def list_nodes(self) -> list[dict[str, str]]:
        """Every node's record (one RPC: the node list), for `status` and the breaker."""
        return [parse_oneliner(r) for r in records(self.node_lines(), "NodeName=")]

    def list_nodes_alone(self, mine: str = "", prefix: str = "") -> NodeTable:
        """Every node's NodeName, State, Reason and Comment (parse_nodes_lean), from the
        node list alone (node_lines: one RPC): the breaker's and the outage's read. A
        node other than `mine` with no word of ours (core/reason.py: our mark or
        `prefix` in its reason, our cause in its Comment) is counted alone where Slurm's
        library read the table (slurmlib.py `nodes-alone`: its first line)."""
        from ..core.reason import CAUSE_TAG, MARK
        text = self.node_lines(alone=(mine, MARK, prefix, CAUSE_TAG))
        others = 0
        if text.startswith(OTHERS):
            first, _, text = text.partition("\n")
            others = int(first[len(OTHERS):])
        return NodeTable(parse_nodes_lean(records(text, "NodeName=")), others)

    def list_jobs(self) -> list[dict[str, str]]:
        """Every job's record Slurm still holds, for `status`."""
        return parse_job_lines(self._squeue().stdout)

    def _squeue(self, *args: str, states: str = "all", fmt: str = JOB_FORMAT) -> CommandResult:
        return self._exec([self._beside("squeue"), "--noheader", "--all", f"--states={states}", f"--Format={fmt}",
                           *args])

    def _show_node(self, name: str) -> dict[str, str] | None:
        """`scontrol -o show node NAME` as a dict; None when Slurm knows no such node."""
        try:
            out = self._run("-o", "show", "node", name).stdout
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if e.code == SlurmCode.UNKNOWN_NODE:
                return None
            raise
        found = records(out, "NodeName=")
        line = next((r for r in found if r.startswith(f"NodeName={name} ")), found[0] if found else None)
        return parse_oneliner(line) if line else None

    def node_lines(self, alone: tuple[str, str, str, str] | None = None) -> str:
        """`scontrol -o show node` lines of every node. In one RPC to slurmctld through
        Slurm's client library (slurm/slurmlib.py: the nodes alone, no `Partitions=`), else
        through scontrol, which also loads the partitions (two RPCs). `alone`: (mine,
        mark, prefix, cause) for list_nodes_alone (slurmlib.py's `nodes-alone`)."""
        scontrol = self._beside("scontrol")
        if self.library:
            from . import slurmlib
            try:
                return self._exec([sys.executable, "-I", "-S", slurmlib.__file__, scontrol,
                                   *(["nodes-alone", *alone] if alone is not None else ["nodes"])],
                                  max_output=NODE_TABLE_MAX).stdout
            except SlurmUnavailable:
                raise
            except SlurmError:
                # No library next to this scontrol, or one this code cannot drive: scontrol
                # answers the same, at the cost of the partition list.
                self.library = False
        return self._exec([scontrol, "-o", "show", "node"], max_output=NODE_TABLE_MAX).stdout

    def _node_state(self, node: str) -> dict[str, str] | None:
        # Through Slurm's client library where it is there: that node alone, one RPC
        # (REQUEST_NODE_INFO_SINGLE). Else `sinfo -n NODE`, which asks for that node alone
        # too but then for every partition (a second RPC, only to print them);
        # `scontrol show node NODE` loads the whole node list and filters it in the
        # client, and a prolog or epilog must not read the node list.
        if self.library:
            from . import slurmlib
            try:
                out = self._exec([sys.executable, "-I", "-S", slurmlib.__file__, self._beside("scontrol"), "nodes",
                                  node]).stdout
            except SlurmUnavailable:
                raise
            except SlurmError as e:
                if "Invalid node name" in str(e):
                    return None
                self.library = False         # no usable library: sinfo answers the same
            else:
                found = records(out, "NodeName=")
                line = next((r for r in found if r.startswith(f"NodeName={node} ")), None)
                return node_state_of(parse_oneliner(line)) if line else None
        sinfo = self._beside("sinfo")
        try:
            # The reason last: it is free text and may hold the separator.
            # The Comment before it ends in a unit separator: an admin's Comment may hold
            # `|`, ours never does, and no one's holds a control character.
            out = self._exec([sinfo, "-h", "-N", "-n", node, "-O",
                              f"NodeList:0|,StateComplete:0|,{CAUSE_FIELD}:0\x1f,Reason:0"]).stdout
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if e.code == SlurmCode.NO_PROGRAM:   # no sinfo installed: the node list it is
                return node_state_of(self.show_node(node))
            raise
        for line in out.splitlines():
            name, _, rest = line.partition("|")
            if name != node:
                continue
            state, _, rest = rest.partition("|")
            comment, _, reason = rest.partition("\x1f")
            reason = reason.rstrip()
            return {"NodeName": name, "State": state.upper(), "Reason": "" if reason == "none" else reason,
                    CAUSE_FIELD: no_value(comment.strip())}
        return None

    def show_job(self, job: str) -> dict[str, str] | None:
        """The job's record, None when Slurm does not know it. `job` is a JobId or an
        array element's ArrayJobId_ArrayTaskId; an array's own id lists every element,
        and the one whose JobId it is is taken."""
        try:
            found = parse_job_lines(self._squeue(f"--jobs={job}").stdout)
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if e.code == SlurmCode.UNKNOWN_JOB:
                return None
            raise
        return next((j for j in found if j["JobId"] == job
                     or f"{j.get('ArrayJobId')}_{j.get('ArrayTaskId')}" == job), None)

    def set_admin_comment(self, job: str, text: str) -> None:
        self._run("update", f"jobid={job}", f"admincomment={text}")

    def jobs_on(self, node: str) -> list[dict[str, str]]:
        """The jobs Slurm has on `node` (running, completing, suspended): squeue filters
        on the node in slurmctld's answer, one job-list load."""
        return parse_job_lines(self._squeue(f"--nodelist={node}", states=ON_NODE_STATES).stdout)

    def job_hold(self, job: str) -> dict[str, str] | None:
        """Where `job` stands in the queue (JobState, EligibleTime, SubmitTime, Reason),
        None when Slurm does not know it."""
        try:
            out = self._squeue(f"--jobs={job}", fmt=HOLD_FORMAT).stdout
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if e.code == SlurmCode.UNKNOWN_JOB:
                return None
            raise
        return next((j for j in parse_hold_lines(out) if j["JobId"] == job
                     or f"{j.get('ArrayJobId')}_{j.get('ArrayTaskId')}" == job), None)

    def start_now(self, job: str) -> None:
        # The begin time Slurm's requeue set (its hold), now: the next scheduling pass
        # may start the job at once. Never for a job still COMPLETING (Slurm sets the
        # hold again when it leaves), never for a begin time its user set.
        self._run("update", f"jobid={job}", "starttime=now")

    def requeue(self, job: str) -> None:
        # Incomplete: only a job still CONFIGURING, RUNNING, STOPPED or SUSPENDED is
        # requeued; one that ended meanwhile is left as it is (22.05 and later).
        self._run("requeue", "Incomplete", job)

    def cancel(self, job: str) -> None:
        try:
            self._exec([self._beside("scancel"), job])
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if e.code == SlurmCode.NO_PROGRAM:
                raise SlurmUnavailable(f"scancel not found next to scontrol in {self.where}: {e}") from None
            raise

    def reboot(self, node: str, reason: str) -> None:
        self.changing(node)
        # ASAP: drain now, reboot once the node's jobs are gone. nextstate=DOWN keeps
        # the node out of service after the boot, with our reason (Slurm appends
        # "reboot complete"), until a health check passes and slurm-hooks resumes it:
        # nextstate=RESUME would clear the reason and put back a node whose fault
        # survived the reboot before any check could stop it.
        self._run("reboot", "ASAP", "nextstate=DOWN", f"reason={reason}", node)

    def cancel_reboot(self, node: str) -> None:
        self.changing(node)
        # Clears REBOOT_REQUESTED while the reboot is not yet issued; a node drained
        # before the reboot was asked (ours always is) stays drained with its reason
        # (slurmctld undoes only the drain an ASAP reboot itself added).
        self._run("cancel_reboot", node)

    def listpids(self, node: str) -> dict:
        """pid -> JobRef for every job process this node's slurmd knows of."""
        from ..host.jobs import parse_listpids
        try:
            return parse_listpids(self._run("listpids", "*", node).stdout)
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if e.code == SlurmCode.NO_STEPS:
                return {}
            raise

    def drain(self, node: str, reason: str) -> None:
        self.changing(node)
        self._run("update", f"nodename={node}", "state=drain", f"reason={reason}")

    def drain_with_cause(self, node: str, reason: str, cause: str) -> None:
        self.changing(node)
        self._run("update", f"nodename={node}", "state=drain", f"reason={reason}", f"{CAUSE_FIELD.lower()}={cause}")

    def release(self, node: str, state: str, rest: str = "") -> None:
        self.changing(node)
        # An empty value empties the field (no value at all would leave it as it is).
        self._run("update", f"nodename={node}", f"state={state.lower()}", f"{CAUSE_FIELD.lower()}={rest}")

    def set_node_comment(self, node: str, text: str) -> None:
        self.changing(node)
        self._run("update", f"nodename={node}", f"{CAUSE_FIELD.lower()}={text}")

    def undrain(self, node: str) -> None:
        self.changing(node)
        # UNDRAIN (22.05+) only clears the drain flag: unlike RESUME it never brings a
        # DOWN node up nor cancels a pending reboot.
        self._run("update", f"nodename={node}", "state=undrain")

    def resume(self, node: str) -> None:
        self.changing(node)
        # Only for a node that is DOWN by our own doing (our reboot's nextstate=DOWN).
        self._run("update", f"nodename={node}", "state=resume")

    def set_down(self, node: str, reason: str) -> None:
        self.changing(node)
        # Only for a node held COMPLETING by a task Slurm could not kill, and no other
        # job on it: slurmctld lets go of a DOWN node's jobs (and issues a pending reboot).
        self._run("update", f"nodename={node}", "state=down", f"reason={reason}")


_UNKNOWN_NODE = re.compile(r"\bnode \S+ not found")


def said_code(said: str) -> str:
    """The SlurmCode of what a Slurm program or libslurm said on failing: the one place
    Slurm's words are read (pyslurm's backend reads its errors here too)."""
    if any(m in said for m in UNREACHABLE):
        return SlurmCode.UNREACHABLE
    if any(m in said for m in NO_CONFIG):
        return SlurmCode.NO_CONFIG
    lower = said.lower()
    if _UNKNOWN_NODE.search(lower):
        return SlurmCode.UNKNOWN_NODE
    for code, words in SAID:
        if any(w in lower for w in words):
            return code
    return SlurmCode.REFUSED


def step_refused(said: str) -> bool:
    """Whether srun's words say Slurm refused to create the step (only a job's owner,
    or SlurmUser, may create one in it)."""
    return "Access/permission denied" in said
