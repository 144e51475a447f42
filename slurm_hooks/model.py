"""The data that flows one way through slurm-hooks.

Checks produce Findings; policy turns findings (plus local state) into Actions; the
Slurm backend carries actions out and fills in an ActionResult; sinks (journal, report)
record all of it. Everything here is plain data that serialises to JSON, so the journal
holds exactly what the code decided on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

# Severity decides what policy may do with a finding. Strings rather than an Enum keep
# the journal readable and avoid an import on the health-check hot path.
OK = "ok"            # healthy, or nothing to check here ("not applicable")
WARN = "warn"        # worth reporting, not worth taking the node away from users
FAIL = "fail"        # the node is sick: drain it
SEVERITY_ORDER = {OK: 0, WARN: 1, FAIL: 2}


def worst(severities) -> str:
    result = OK
    for s in severities:
        if SEVERITY_ORDER[s] > SEVERITY_ORDER[result]:
            result = s
    return result


@dataclass
class Finding:
    check: str                 # the check that made it, e.g. "filesystem"
    target: str                # what it is about, e.g. "/scratch"
    status: str                # check-specific verdict: ok, slow, hung, error, missing, ...
    severity: str              # OK, WARN or FAIL
    summary: str               # one short line, fit for a node reason: "fs /scratch write hung >10s (fuse)"
    detail: str = ""           # a longer line for people reading a report
    evidence: dict = field(default_factory=dict)
    job: str | None = None     # the Slurm job it concerns, if any
    incident: str | None = None  # stable identity across runs: act once per incident
    reason: str = ""           # stable node-reason text (summary may carry a changing duration)
    needs_reboot: bool = False # only a reboot clears it (an unkillable task)
    hard: bool = False         # drains at the first sighting, whatever policy.failures_to_drain says
    resumable: bool = True     # false: a drain for it needs a reboot or a human, never auto-resumed
    # The job's own problem, not the node's (a task stuck on its user's own FUSE mount):
    # the node stays in service and only the job is acted on: "comment", "cancel" or
    # "requeue" (actions.comment_job still decides about the comment).
    job_action: str = ""
    # The node must take no new work, but the job running on it may finish (NVIDIA: a
    # pending row remap or DRAIN_AND_RESET lets running work continue; reset once it
    # drained): drain without commenting on or requeueing the job; a reboot, if needed,
    # is asked for at once (`reboot ASAP` waits for running jobs).
    keep_job: bool = False

    def __post_init__(self):
        # Process names, command lines, paths and kernel-log text are chosen by users:
        # everything that enters a finding is made printable here, once, so no sink
        # has to remember to.
        from .reason import printable, printable_tree
        self.target = printable(self.target)
        self.summary = printable(self.summary)
        self.detail = printable(self.detail)
        self.reason = printable(self.reason)
        if self.evidence:
            self.evidence = printable_tree(self.evidence)

    @property
    def reason_text(self) -> str:
        return self.reason or self.summary

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class CheckRun:
    """How one check fared in one run: the framework times every check the same way."""
    name: str
    seconds: float
    findings: list[Finding]
    error: str | None = None   # the check itself failed (a bug or an unreadable /proc)

    def to_json(self) -> dict:
        return {"name": self.name, "seconds": round(self.seconds, 6), "error": self.error,
                "findings": [f.to_json() for f in self.findings]}


@dataclass
class Action:
    kind: str                  # drain, resume, reboot (a node); comment, requeue (a job)
    node: str = ""
    reason: str = ""           # node reason (drain, reboot)
    job: str | None = None
    text: str = ""             # comment text; for requeue, the diagnosis to record
    incident: str | None = None  # actions on the same incident are taken once
    fallback: str = ""         # requeue: what to do with a job that cannot be requeued
    replaces: str = ""         # drain: a generic reason of Slurm's ("Prolog error") ours may replace
    replace_only: bool = False # drain: only put our reason in place of such a generic one
    uid: int | None = None     # job actions: the uid of the diagnosed task; Slurm must agree
    job_only: bool = False     # about the job alone (its own mount): no drain-storm budget

    @property
    def keys(self) -> list[str]:
        """Identities for 'at most once per incident': one per incident the action is
        about; it counts as done when any of them is."""
        target = self.job or self.node
        return [f"{self.kind}:{target}:{i}" for i in (self.incident or "").split("+") if i]

    def describe(self) -> str:
        if self.kind in ("drain", "resume", "reboot"):
            tail = f": {self.reason}" if self.reason else ""
            return f"{self.kind} node {self.node}{tail}"
        if self.kind == "comment":
            return f"record on job {self.job}: {self.text}"
        return f"{self.kind} job {self.job}"




class Outcome(str, Enum):
    """What became of an action: the journal's `outcome` field. Decisions read these
    and the `Code` beside them, never a message (messages are for people)."""
    DONE = "done"                  # carried out
    SKIPPED = "skipped"            # not needed or not ours to do (the code says which)
    FAILED = "failed"              # Slurm refused, or did not answer (retry: spooled)
    HELD = "held"                  # held back by the drain-storm breaker
    DEFERRED = "deferred"          # left to Slurm: a failing prolog makes Slurm drain the node
    DRY_RUN = "dry-run"            # --dry-run: what would be done
    REPORT_ONLY = "report-only"    # actions.report_only: what would be done

    def __str__(self) -> str:
        return self.value


class Code(str, Enum):
    """Why an action ended as it did: the journal's `code` field (machine-readable)."""
    NONE = ""                              # done, nothing to add
    ALREADY_DONE = "already_done"          # done for this incident by an earlier run (the ledger)
    DRY_RUN = "dry_run"
    REPORT_ONLY = "report_only"
    BREAKER = "breaker"                    # the drain-storm breaker holds it back
    LEFT_TO_SLURM = "left_to_slurm"        # prolog: Slurm drains on the non-zero exit
    SLURM_UNREACHABLE = "slurm_unreachable"  # no answer from slurmctld: spooled
    OUT_OF_TIME = "out_of_time"            # the run's deadline for Slurm calls: spooled
    REFUSED = "refused"                    # scontrol said no
    UNKNOWN_ACTION = "unknown_action"
    UNKNOWN_NODE = "unknown_node"
    UNKNOWN_JOB = "unknown_job"
    NOTHING_TO_REPLACE = "nothing_to_replace"  # replace_only: the node is no longer drained
    REPLACED_GENERIC = "replaced_generic"  # our reason went in place of Slurm's generic one
    ALREADY_OURS = "already_ours"          # out of service by us already (DOWN, reboot, ...)
    FOREIGN_STATE = "foreign_state"        # a state slurm-hooks did not set: left alone
    FOREIGN_DRAIN = "foreign_drain"        # drained by someone else: left as it is
    ALREADY_DRAINED = "already_drained"    # drained by us with this very reason
    NOT_DRAINED = "not_drained"            # nothing to resume
    NOT_OURS = "not_ours"                  # resume: the reason is another's
    AFTER_REBOOT = "after_reboot"          # resumed after our own reboot
    REBOOT_PENDING = "reboot_pending"
    NOT_ON_NODE = "not_on_node"            # Slurm says the job does not run here
    UID_MISMATCH = "uid_mismatch"          # Slurm says the job is another user's
    COMMENT_PRESENT = "comment_present"    # the AdminComment already holds the diagnosis
    JOB_ENDED = "job_ended"
    JOB_QUEUED = "job_queued"              # already pending or requeued
    NOT_REQUEUED = "not_requeued"          # cannot be requeued: left running
    CANCELLED_INSTEAD = "cancelled_instead"  # cannot be requeued: cancelled (fallback)
    NO_REBOOT_PROGRAM = "no_reboot_program"
    FAULT_SURVIVED_REBOOT = "fault_survived_reboot"  # no second reboot: no boot loop

    def __str__(self) -> str:
        return self.value


@dataclass
class ActionResult:
    action: Action
    outcome: Outcome
    message: str = ""          # for people; never read by code
    retry: bool = False        # not done for want of Slurm (or of time): spooled for a later run
    code: Code = Code.NONE

    def __post_init__(self):
        # Messages quote Slurm, which quotes reasons and comments people wrote.
        from .reason import printable
        self.message = printable(self.message)
        self.outcome = Outcome(self.outcome)
        self.code = Code(self.code)

    def to_json(self) -> dict:
        d = asdict(self.action)
        d.update(outcome=self.outcome.value, code=self.code.value, message=self.message)
        if self.retry:
            d["retry"] = True
        return d
