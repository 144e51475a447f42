"""The data that flows one way through slurm-hooks.

Checks produce Findings; policy turns findings (plus local state) into Actions; the
Slurm backend carries actions out and fills in an ActionResult; sinks (journal, report)
record all of it. Everything here is plain data that serialises to JSON, so the journal
holds exactly what the code decided on.
"""
from __future__ import annotations

import time

from .. import TYPE_CHECKING, __version__
from .records import asdict, dataclass, field

if TYPE_CHECKING:
    from .outcomes import Code, Outcome

# Severity decides what policy may do with a finding. Strings rather than an Enum keep
# the journal readable and avoid an import on the health-check hot path.
OK = "ok"            # healthy, or nothing to check here ("not applicable")
WARN = "warn"        # worth reporting, not worth taking the node away from users
FAIL = "fail"        # the node is sick: drain it
SEVERITY_ORDER = {OK: 0, WARN: 1, FAIL: 2}

# What a check's findings are, for the decisions that concern a kind of finding rather
# than a check (a check's class declares them in `roles`; checks.has_role asks):
MOUNT_PROBE = "mount_probe"   # target is a probed path; recovering its mount can heal it
STUCK_TASK = "stuck_task"     # a task stuck in D: evidence pid, start_ticks, mountpoint


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
    summary: str               # one short line, fit for a node reason: "fs /scratch hung >10s (write, fuse)"
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
class Recovery:
    """What a `recover` action frees, and how (act/recovery.py): a mount proven hung, or
    dead (remounted)."""
    mountpoint: str
    dev: str = ""              # the mount's major:minor: fusectl names a FUSE connection by its minor
    method: str = ""           # fuse-abort, nfs-force-unmount, command
    command: list = field(default_factory=list)
    remount: list = field(default_factory=list)
    wait: float = 10.0
    timeout: float = 10.0      # each step's deadline
    probe: str = ""            # the configured path whose probe must pass afterwards
    probe_mode: str = "write"
    tasks: list = field(default_factory=list)   # [pid, start ticks] stuck on the mount
    probes: list = field(default_factory=list)  # [pid, start ticks] of our own probes stuck on it
    jobs: list = field(default_factory=list)    # their jobs, told what became of it
    # Jobs with a task this run could not place (its place unproven, still watched, or
    # left for a later run's diagnosis): it may wait on the mount, so the recovery waits
    # for these jobs as for `jobs`, and tells them nothing.
    unplaced: list = field(default_factory=list)
    dead: bool = False         # the mount answers every call at once with an error: detach and remount only


@dataclass
class Action:
    kind: str                  # drain, resume, reboot, cancel_reboot, down, release (a node); comment, requeue, start (a job)
    node: str = ""
    reason: str = ""           # node reason (drain, reboot)
    job: str | None = None
    text: str = ""             # comment text; for requeue, the diagnosis to record
    incident: str | None = None  # actions on the same incident are taken once
    fallback: str = ""         # requeue: what to do with a job that cannot be requeued; start: "tell" (hold told, not ended)
    replaces: str = ""         # drain: a generic reason of Slurm's ("Prolog error") ours may replace
    replace_only: bool = False # drain: only put our reason in place of such a generic one
    uid: int | None = None     # job actions: the uid of the diagnosed task; Slurm must agree
    job_only: bool = False     # about the job alone (its own mount): no drain-storm budget
    after_job: str | None = None  # reboot: only once Slurm says this job no longer runs here
    recovery: Recovery | None = None  # recover: the mount, its method and what it must free
    ran_here: bool = False     # comment: about a job that ran here and was requeued since
    cause: str = ""            # drain: the machine-readable cause for the node's Comment
    # resume: the node is DOWN by our own release (act/actions.py _release): RESUME it;
    # drain: Slurm's generic reason over ours on it may be replaced.
    down_ours: bool = False
    # start: the lengths of Slurm's requeue hold on this cluster (s): a begin time that
    # far after the job's (re)submit time is Slurm's hold, any other its user's.
    holds: tuple = ()

    @property
    def keys(self) -> list[str]:
        """Identities for 'at most once per incident': one per incident the action is
        about; it counts as done when any of them is."""
        target = self.job or self.node
        return [f"{self.kind}:{target}:{i}" for i in (self.incident or "").split("+") if i]

    def describe(self) -> str:
        if self.kind in ("drain", "resume", "reboot", "cancel_reboot", "down"):
            tail = f": {self.reason}" if self.reason else ""
            return f"{self.kind} node {self.node}{tail}"
        if self.kind == "recover" and self.recovery is not None:
            return f"recover {self.recovery.mountpoint} on node {self.node} ({self.recovery.method})"
        if self.kind == "comment":
            return f"record on job {self.job}: {self.text}"
        if self.kind == "release":
            return f"release node {self.node} (DOWN) for job {self.job}"
        return f"{self.kind} job {self.job}"




@dataclass
class ActionResult:
    action: Action
    outcome: Outcome           # core/outcomes.py: what became of it
    message: str = ""          # for people; never read by code
    retry: bool = False        # not done for want of Slurm (or of time): spooled for a later run
    code: Code | str = ""      # outcomes.Code: why (a plain string is taken as its value)
    # drain: the node was in service until this drain (not a re-wording of a drain
    # already in place): the local drain record dates from here.
    took_out: bool = False

    def __post_init__(self):
        # Messages quote Slurm, which quotes reasons and comments people wrote.
        from .reason import printable
        self.message = printable(self.message)
        from .outcomes import Code, Outcome
        self.outcome = Outcome(self.outcome)
        self.code = Code(self.code)

    def to_json(self) -> dict:
        d = asdict(self.action)
        from .outcomes import result_word
        d.update(outcome=str(self.outcome), code=str(self.code), message=self.message,
                 result=result_word(self.outcome, self.retry))
        if self.retry:
            d["retry"] = True
        return d


# What one run of a hook made: its checks, findings, actions and own failures.
HEALTHY, WARNING, UNHEALTHY = "healthy", "warning", "unhealthy"
STATUS_OF = {OK: HEALTHY, WARN: WARNING, FAIL: UNHEALTHY}


@dataclass
class RunRecord:
    hook: str
    node: str
    config: str
    started: float
    duration: float = 0.0
    checks: list[CheckRun] = field(default_factory=list)
    actions: list[ActionResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False
    report_only: bool = False      # actions.report_only on a run that acts: nothing it decides is done
    job: str | None = None         # the job a prolog or epilog ran for
    # slurm-hooks' own local failures (core/errors.py): state, journal, lock, metrics, config
    # cache. Never a finding about the node: they drain nothing and fail no job.
    local_errors: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for c in self.checks for f in c.findings]

    @property
    def status(self) -> str:
        status = STATUS_OF[worst(f.severity for f in self.findings)]
        # Our own failure is reported as a warning of the run itself, never as more.
        return WARNING if status == HEALTHY and self.local_errors else status

    def exit_code(self) -> int:
        return 1 if self.status == UNHEALTHY else 0

    def to_json(self) -> dict:
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "hook": self.hook, "node": self.node, "status": self.status,
            "duration": round(self.duration, 6), "version": __version__,
            "config": self.config, "dry_run": self.dry_run, "report_only": self.report_only, "job": self.job,
            "checks": [c.to_json() for c in self.checks],
            "actions": [a.to_json() for a in self.actions],
            "notes": self.notes, "warnings": self.warnings, "local_errors": self.local_errors,
        }


@dataclass
class JobInfo:
    id: str
    uid: str | None = None
    # The GPUs the job was given: device minor numbers (SLURM_JOB_GPUS), UUIDs or PCI
    # ids; None: none (Slurm sets no GPU variable for a job without GPUs).
    gpus: list[str] | None = None
    # Why the job's GPUs may hold other jobs' processes by design: the variable saying
    # it was given a Slurm shard or an MPS share; None: the GPUs are its alone.
    shared: str | None = None

    @classmethod
    def from_env(cls, env) -> "JobInfo | None":
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job:
            return None
        gpus = None
        for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
            if env.get(var):
                gpus = [g.strip() for g in env[var].split(",") if g.strip()]
                break
        shared = next((var for var in ("SLURM_SHARDS_ON_NODE", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
                       if (env.get(var) or "").strip()), None)
        return cls(id=job, uid=env.get("SLURM_JOB_UID"), gpus=gpus, shared=shared)
