"""What became of an action, and why: the two enumerations decisions read.

Kept apart from core/model.py so that a healthy run, which takes no action, never builds
them. Both are str enumerations: the journal holds their values, and code compares
members, never a message (messages are for people).
"""
from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """What became of an action: the journal's `outcome` field. Decisions read these
    and the `Code` beside them, never a message (messages are for people)."""
    DONE = "done"                  # carried out
    SKIPPED = "skipped"            # not needed or not ours to do (the code says which)
    FAILED = "failed"              # Slurm refused, or did not answer (retry: spooled)
    HELD = "held"                  # held back: the drain-storm breaker, or the mount's incident
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
    NO_SLURM_CONFIG = "no_slurm_config"    # scontrol found no slurm.conf (nor a configless source)
    BACKEND_UNUSABLE = "backend_unusable"  # slurm.backend: pyslurm forced but unusable here
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
    RELEASED = "released"                  # down: set DOWN so Slurm lets go of an unkillable step
    NOT_HELD = "not_held"                  # down, release: Slurm holds the node for the job no more
    REBOOT_FIRST = "reboot_first"          # release: our reboot is pending; its own release (release_after) lets go
    OTHER_JOBS = "other_jobs"              # down, release: another job is on the node: never set DOWN
    COMPLETING = "completing"              # start: the requeued job is still COMPLETING (a task cannot die)
    UNSCHEDULED = "unscheduled"            # start: let go just now, not yet looked at by the scheduler
    START_ASKED = "start_asked"            # start: Slurm's requeue hold lifted (StartTime=now)
    HOLD_KEPT = "hold_kept"                # start: Slurm's requeue hold left to run (actions.restart_now off)
    USERS_BEGIN = "users_begin"            # start: the begin time is its user's: never started early
    NOT_WAITING = "not_waiting"            # start: the job runs again, ended, or waits for something else
    NOT_ON_NODE = "not_on_node"            # Slurm says the job does not run here
    UID_MISMATCH = "uid_mismatch"          # Slurm says the job is another user's
    COMMENT_PRESENT = "comment_present"    # the AdminComment already holds the diagnosis
    JOB_ENDED = "job_ended"
    JOB_QUEUED = "job_queued"              # already pending or requeued
    NOT_REQUEUED = "not_requeued"          # cannot be requeued: left running
    CANCELLED_INSTEAD = "cancelled_instead"  # cannot be requeued: cancelled (fallback)
    NO_REBOOT_PROGRAM = "no_reboot_program"
    JOB_RUNNING = "job_running"            # reboot: nothing has ended the stuck task's job yet
    RECOVERED = "recovered"                # recover: tasks freed, mount back, probe passes
    NOT_RECOVERED = "not_recovered"        # recover: tried; tasks survived or the probe fails
    JOBS_FIRST = "jobs_first"              # recover: a job with a task on the mount is not requeued or ended yet
    OUTAGE = "outage"                      # reboot, recover: the mount is suspect on other nodes too (the storage's outage)
    SCOPE_UNKNOWN = "scope_unknown"        # reboot, recover, requeue: not before the mount's scope is known
    WAITS_OUT = "waits_out"                # requeue, comment: in an outage the job waits for the storage
    NO_REBOOT_PENDING = "no_reboot_pending"  # cancel_reboot: nothing (any more) to withdraw
    REBOOT_ISSUED = "reboot_issued"        # cancel_reboot: Slurm issued it already: it goes ahead
    WITHDRAWN = "withdrawn"                # cancel_reboot: our reboot, not yet issued, called off
    FAULT_SURVIVED_REBOOT = "fault_survived_reboot"  # no second reboot: no boot loop
    FAULT_GONE = "fault_gone"              # a spooled action whose fault is gone by the run that could do it

    def __str__(self) -> str:
        return self.value


# The one word for what became of an action, shared by the report, the JSON record,
# the journal (`result`, beside the older `outcome` and `code`) and syslog, so that no
# two of them can describe the same action differently. By Outcome's value, plus
# whether a failure waits in the spool (plain strings: no enumeration is built).
RESULT = {"done": "done", "dry-run": "would do", "report-only": "not done", "failed": "failed",
          "held": "held", "skipped": "skipped", "deferred": "left to Slurm"}
SPOOLED = "spooled"


def result_word(outcome: str, retry: bool = False) -> str:
    """done, would do (dry run), not done (report-only), failed, spooled (failed, and
    tried again by a later run), held (the breaker), skipped, left to Slurm."""
    value = str(outcome)
    if value == "failed" and retry:
        return SPOOLED
    return RESULT.get(value, value)
