"""The Slurm seam: what slurm-hooks asks of Slurm (`SlurmBackend`), the errors every
backend raises, and the rules for reading a node record that every layer shares.

Every implementation (`scontrol.Slurm`, `pyslurm.PyslurmBackend`, `fake.FakeSlurm`)
gives the same records and raises the same errors: `SlurmError` (Slurm said no),
`SlurmUnavailable` (no slurmctld answered: the action is spooled), `SlurmNotConfigured`
(no configuration at all), `OutOfTime` (the run's deadline for Slurm calls is spent).
Each carries a `SlurmCode` (`code`), set where the backend reads Slurm's words;
decisions read these types and codes, never the words.
"""
from __future__ import annotations

import re

from .. import TYPE_CHECKING
from ..core.records import dataclass


class NodeTable(list):
    """Node records (dicts, as `SlurmBackend.list_nodes` gives them) and `others`: how
    many more nodes the table holds, counted and not listed (list_nodes_alone: no word
    of ours on them, and not the node asking). At thousands of nodes, mostly healthy,
    the breaker reads a handful of records and one count."""

    def __init__(self, records=(), others: int = 0):
        super().__init__(records)
        self.others = others


if TYPE_CHECKING:
    from typing import Protocol

    class SlurmBackend(Protocol):
        """What slurm-hooks asks of Slurm. Node and job records are dicts keyed the way
        `scontrol -o show node|job` prints them (State, Reason with its [user@time] stamp,
        Comment (node_state's too), Gres, JobId, ArrayJobId, ArrayTaskId, UserId, NodeList, JobState, Requeue,
        BatchFlag, AdminComment, Restarts)."""

        name: str
        deadline: float | None      # monotonic time by which every call of the run must end
        @property
        def choice(self) -> Choice | None: ...  # which backend open_backend chose, and why

        @property
        def down(self) -> str | None: ...       # set once slurmctld failed to answer
        @property
        def env(self) -> dict: ...              # environment for Slurm programs (srun for `diagnose`)
        @property
        def scontrol(self) -> str | None: ...   # scontrol's path; srun and sinfo live beside it
        @property
        def where(self) -> str: ...             # where scontrol was looked for, for messages

        def show_node(self, node: str) -> dict | None: ...
        def node_state(self, node: str) -> dict | None: ...
        def prime_node(self, info: dict) -> None: ...
        def list_nodes(self) -> list[dict]: ...
        # The same, one RPC: no partitions (the breaker). A node other than `mine` with
        # no word of ours (our mark or `prefix` in its reason, our cause in its Comment)
        # may be counted alone (NodeTable.others), or listed with NodeName and State.
        def list_nodes_alone(self, mine: str = "", prefix: str = "") -> NodeTable: ...
        def show_job(self, job: str) -> dict | None: ...
        def list_jobs(self) -> list[dict]: ...
        def drain(self, node: str, reason: str) -> None: ...
        # One update: DRAIN, the reason and our cause in the node's CAUSE_FIELD.
        def drain_with_cause(self, node: str, reason: str, cause: str) -> None: ...
        # One update: UNDRAIN or RESUME (`state`), and CAUSE_FIELD set to `rest` (what
        # is left once our cause is taken out: an admin's words, or empty).
        def release(self, node: str, state: str, rest: str = "") -> None: ...
        # CAUSE_FIELD alone set to `text` (our cause taken out of a node back in service).
        def set_node_comment(self, node: str, text: str) -> None: ...
        def undrain(self, node: str) -> None: ...
        def resume(self, node: str) -> None: ...
        def set_down(self, node: str, reason: str) -> None: ...
        def reboot(self, node: str, reason: str) -> None: ...
        # A reboot asked for and not yet issued, called off (the node stays drained).
        def cancel_reboot(self, node: str) -> None: ...
        def set_admin_comment(self, job: str, text: str) -> None: ...
        # The jobs Slurm has on the node: running, completing or suspended there.
        def jobs_on(self, node: str) -> list[dict]: ...
        # {JobId, UserId, JobState, EligibleTime, SubmitTime, Reason}; None if unknown.
        def job_hold(self, job: str) -> dict | None: ...
        # `scontrol update jobid=J StartTime=now`: a requeued job's hold ended at once.
        def start_now(self, job: str) -> None: ...
        def requeue(self, job: str) -> None: ...
        def cancel(self, job: str) -> None: ...
        def listpids(self, node: str) -> dict: ...


class SlurmCode:
    """Why a Slurm operation failed: `SlurmError.code`. A backend sets it where it reads
    Slurm's words (or pyslurm's), the one place that does; every decision reads it."""
    REFUSED = "refused"                      # Slurm said no, for no reason below
    UNREACHABLE = "unreachable"              # no slurmctld answered (or no scontrol)
    NO_CONFIG = "no_config"                  # no Slurm configuration at all
    OUT_OF_TIME = "out_of_time"              # the run's time for Slurm calls is spent
    NO_PROGRAM = "no_program"                # the Slurm program (sinfo, scancel) cannot be run
    UNKNOWN_NODE = "unknown_node"            # Slurm knows no such node
    UNKNOWN_JOB = "unknown_job"              # Slurm knows no such job (any more)
    NO_STEPS = "no_steps"                    # listpids: no job step on the node
    JOB_PENDING = "job_pending"              # requeue: the job is pending already (requeued by someone)
    NO_REBOOT_PROGRAM = "no_reboot_program"  # reboot: slurm.conf sets no RebootProgram
    BACKEND_UNUSABLE = "backend_unusable"    # the backend asked for cannot be used here


# Where a drain of ours keeps its machine-readable cause (core/reason.py: cause_text):
# the node's Comment, which `scontrol update nodename=N comment=...` sets and empties on
# Slurm 22.05 and 25.11 alike, and pyslurm's Node(comment=...) sets. Not Extra: from
# 23.02 on it is what `--extra` job constraints match against, and slurmd may set it.
CAUSE_FIELD = "Comment"


class SlurmError(Exception):
    """A Slurm operation failed; str() is what Slurm said (for people), `code` why (for
    decisions)."""
    code = SlurmCode.REFUSED

    def __init__(self, message: str = "", code: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class SlurmUnavailable(SlurmError):
    """No scontrol, or no slurmctld answering."""
    code = SlurmCode.UNREACHABLE


class SlurmNotConfigured(SlurmError):
    """scontrol found no Slurm configuration (no slurm.conf, no configless source): no
    controller was asked, so nothing refused; retrying the same call cannot help."""
    code = SlurmCode.NO_CONFIG


class OutOfTime(SlurmUnavailable):
    """The run's time for Slurm calls is spent: not tried, to be tried by a later run."""
    code = SlurmCode.OUT_OF_TIME


# A call needs at least this long: scontrol itself takes a few tens of milliseconds,
# and a call cut short by the deadline is a call wasted.
MIN_CALL = 1.0
# What Slurm says, read by the backends alone (slurm/scontrol.py's said_code): the
# messages that mean "no slurmctld answered", not "slurmctld said no".
UNREACHABLE = ("Unable to contact slurm controller", "Zero Bytes were transmitted",
                "Socket timed out on send/recv")
# What scontrol says when it has no configuration at all (before asking anyone).
NO_CONFIG = ("Could not establish a configuration source",)
# Slurm's words (lower case) for each reason a decision tells apart, in the order tried.
SAID = ((SlurmCode.UNKNOWN_JOB, ("invalid job id",)),
        (SlurmCode.NO_STEPS, ("no job steps exist",)),
        (SlurmCode.JOB_PENDING, ("pending execution",)),
        (SlurmCode.NO_REBOOT_PROGRAM, ("rebootprogram",)))


def no_config_message(said: str) -> str:
    """The real cause first, and what to set; scontrol's own verdict after, without the
    DNS SRV lookups it tried on the way (they only restate the cause)."""
    verdict = [part for part in said.split("; ") if any(m in part for m in NO_CONFIG)]
    return ("no Slurm configuration found; set slurm.conf (slurm-hooks' `slurm: {conf: PATH}`, or "
            f"SLURM_CONF) or configless DNS SRV records; scontrol said: {'; '.join(verdict) or said}")


# Slurm's stamp: ` [USER@TIME]`, appended by scontrol (slurm_sprint_node_table) to the
# first line of a node reason that has a time, which every reason set by an update or
# a reboot request has. USER is a user name or a uid (no blank, bracket or @), TIME is
# slurm_make_time_str's ISO form to the second: SLURM_TIME_FORMAT, which could change
# it, is never in the environment of our Slurm calls (Slurm.env).
_STAMP_BODY = r" \[([^\s\[\]@]+)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]"
_STAMP = re.compile(_STAMP_BODY + r"$")
STAMP_INSIDE = re.compile(_STAMP_BODY + r"(?= |$)")
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%S"


def reason_stamp(reason: str) -> tuple[str, str, str] | None:
    """(reason, user, time) of a node reason as scontrol shows it, ending in Slurm's
    ` [user@2026-11-29T22:20:45]`; None when it does not end in one. The one place a
    stamp is read: anchored at the end, an exact time, so text of ours before it (a
    file name holding `[x@0000]`) is never taken for it."""
    m = _STAMP.search(reason)
    if m is None:
        return None
    return reason[:m.start()], m.group(1), m.group(2)


def strip_reason_stamp(reason: str) -> str:
    """Drop the ` [user@2026-11-29T22:20:45]` that scontrol appends to a node reason.
    Only for a reason as Slurm shows it: one without a stamp (node_state's, sinfo's)
    is already plain, and its end may be a user's text."""
    found = reason_stamp(reason)
    return reason if found is None else found[0]


def stamp_time(reason: str) -> str:
    """The time of Slurm's stamp on a node reason (`2026-11-29T22:20:45`), "" if none."""
    found = reason_stamp(reason)
    return "" if found is None else found[2]


def node_flags(info: dict[str, str]) -> set[str]:
    """`IDLE+DRAIN+REBOOT_REQUESTED` -> {"IDLE", "DRAIN", "REBOOT_REQUESTED"}."""
    return {f for f in info.get("State", "").upper().replace("*", "").split("+") if f}


def node_is_drained(info: dict[str, str]) -> bool:
    # DRAIN, DRAINING, DRAINED and IDLE+DRAIN all mean "no new jobs here".
    return "DRAIN" in info.get("State", "").upper()


# States somebody other than a drain puts a node in. slurm-hooks leaves such a node
# alone (report only) unless the state and the reason are its own doing: a drain on
# top would overwrite the reason, and a resume would bring a DOWN node up or cancel
# a pending reboot.
FOREIGN_STATES = ("DOWN", "FAIL", "FAILING", "MAINT", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED",
                  "POWER_DOWN", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "FUTURE", "INVAL")
REBOOT_STATES = ("REBOOT_REQUESTED", "REBOOT_ISSUED")


# States whose reason says why the node is in them. Slurm 25.11 keeps the last reason
# on a node after RESUME or UNDRAIN, and a maintenance reservation sets none: beside
# any other state the reason may be a stale one, nobody's word about now.
REASON_STATES = ("DRAIN", "DOWN", "FAIL", "FAILING", "REBOOT_REQUESTED", "REBOOT_ISSUED")


def reason_is_current(info: dict[str, str]) -> bool:
    flags = node_flags(info)
    return any(s in flags for s in REASON_STATES) or node_is_drained(info)


def foreign_states(info: dict[str, str]) -> list[str]:
    flags = node_flags(info)
    return [s for s in FOREIGN_STATES if s in flags]


def admin_comment(job: dict[str, str]) -> str:
    """A job record's AdminComment, "" when it has none."""
    value = job.get("AdminComment", "")
    return "" if value == "(null)" else value


def append_admin_comment(slurm: SlurmBackend, job: str, info: dict[str, str], text: str) -> None:
    """Add `text` to the AdminComment of `job` (its record: `info`) after what an
    admin, or an earlier run, wrote there: never in its place."""
    old = admin_comment(info).strip()
    slurm.set_admin_comment(job, f"{old} | {text}" if old else text)


class BackendError(SlurmError):
    """`slurm.backend: pyslurm` was asked for and cannot be used here."""
    code = SlurmCode.BACKEND_UNUSABLE


@dataclass
class Choice:
    backend: str                # "scontrol" or "pyslurm"
    why: str
    error: str | None = None    # pyslurm forced but unusable: every call fails with this

    def note(self) -> str:
        return f"slurm backend: {self.backend} ({self.why})"


def major_minor(version: str) -> str:
    """'25.11.7' -> '25.11'."""
    return ".".join(version.split(".")[:2])


def no_value(text: str) -> str:
    """"" for Slurm's words for an empty field ("none", "(null)")."""
    return "" if text in ("none", "(null)") else text


def node_state_of(info: dict | None) -> dict | None:
    """node_state's record {NodeName, State, Reason (no stamp), Comment} from a record as
    show_node gives it: what every backend answers for a node it already has."""
    if info is None:
        return None
    return {"NodeName": info["NodeName"], "State": info.get("State", "").upper(),
            "Reason": no_value(strip_reason_stamp(info.get("Reason", ""))),
            CAUSE_FIELD: no_value(info.get(CAUSE_FIELD, ""))}


class PrimedNodes:
    """What every backend shares about node records a caller has just read by a wider
    query (the breaker's cluster view): show_node and node_state answer from them
    instead of asking slurmctld again, until this run changes the node (drain,
    undrain, resume, reboot: each calls `changing`). A backend supplies `_show_node`
    and `_node_state`, its own one-node queries."""

    _primed: dict[str, dict]

    def prime_node(self, info: dict) -> None:
        self._primed[info["NodeName"]] = info

    def changing(self, node: str) -> None:
        self._primed.pop(node, None)

    def show_node(self, node: str) -> dict | None:
        primed = self._primed.get(node)
        return primed if primed is not None else self._show_node(node)

    def node_state(self, node: str) -> dict | None:
        """{NodeName, State (`IDLE+DRAIN`), Reason (no stamp), Comment} of one node, None if
        unknown."""
        primed = self._primed.get(node)
        return node_state_of(primed) if primed is not None else self._node_state(node)

    def _show_node(self, node: str) -> dict | None:
        raise NotImplementedError

    def _node_state(self, node: str) -> dict | None:
        raise NotImplementedError
