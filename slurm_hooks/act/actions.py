"""Carrying actions out through the Slurm backend, or saying what would be done.

- Never undo or overwrite what an admin did: a node already drained with a reason that
  does not end in our mark (core/reason.py: is_ours) keeps that reason, and is not
  resumed by us. A drain of ours records its cause in the node's Comment only where
  the Comment is empty or ours, and our resume empties only a Comment of ours.
- At most once per incident: job and reboot actions that succeeded are remembered in
  local state (the ledger, keyed by Action.keys), so the next health check, which still
  sees the same stuck task, does not requeue again or repeat the comment.
- A job comment keeps whatever an admin already wrote in AdminComment.
- A job is addressed the way Slurm means it: an array element as
  `ArrayJobId_ArrayTaskId` (`job_address`), since Slurm gives one element the array's
  own id and `scontrol requeue <ArrayJobId>` acts on every element.
- Node states that are not ours (DOWN, FAIL, MAINT, a pending reboot, ...) are left
  alone and reported; our own drains are undone with UNDRAIN, which cannot bring a
  DOWN node up. Only a node DOWN after the reboot slurm-hooks asked for is RESUMEd.
- A reboot is asked for only while the node's reason is ours, and never again for a
  fault that survived one (no boot loop).
- Slurm's word on who owns a job: before a job is commented, requeued or cancelled,
  Slurm must say the job has this node among its nodes and belongs to the uid of the
  diagnosed task. Where a process sits in the cgroup tree is no proof on its own.
"""
from __future__ import annotations

import re
import time

from .. import TYPE_CHECKING
from ..core.model import Action, ActionResult
from ..core.outcomes import Code, Outcome
from ..core.reason import KILL_TASK_FAILED, is_generic, is_our_cause, is_ours, one_line, without_our_cause
from ..slurm.api import (
    CAUSE_FIELD,
    REBOOT_STATES,
    BackendError,
    OutOfTime,
    SlurmCode,
    SlurmError,
    SlurmNotConfigured,
    SlurmUnavailable,
    admin_comment,
    append_admin_comment,
    foreign_states,
    node_flags,
    node_is_drained,
    reason_is_current,
)

if TYPE_CHECKING:
    from ..slurm.api import SlurmBackend

DONE, DRY_RUN, SKIPPED, FAILED, REPORT_ONLY = (Outcome.DONE, Outcome.DRY_RUN, Outcome.SKIPPED, Outcome.FAILED,
                                               Outcome.REPORT_ONLY)

# What Slurm appends to the reason of a node that came back from a reboot asked for
# with nextstate=DOWN.
REBOOT_COMPLETE = "reboot complete"
TERMINAL = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED")
# What a requeue or cancel ended as when the job really ended (or was already gone).
ENDED_CODES = frozenset({Code.NONE, Code.CANCELLED_INSTEAD, Code.JOB_ENDED, Code.JOB_QUEUED})
# Skipped for now, asked again by the next run: not yet the moment (the ledger keeps no
# entry for them).
WAITING = frozenset({Code.JOB_RUNNING, Code.OTHER_JOBS, Code.COMPLETING, Code.UNSCHEDULED, Code.REBOOT_FIRST})


def execute(actions: list[Action], slurm: SlurmBackend | None, prefix: str, dry_run: bool,
            ledger: dict | None = None, report_only: bool = False) -> list[ActionResult]:
    """Carry out actions in order; `ledger` (key -> {"done": t, "seen": t}) is read and updated."""
    ledger = ledger if ledger is not None else {}
    results = []
    for action in actions:
        done_at = min((ledger[k]["done"] for k in action.keys if k in ledger), default=None)
        if done_at is not None:
            when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(done_at))
            results.append(ActionResult(action, SKIPPED, f"already done for this incident at {when}",
                                        code=Code.ALREADY_DONE))
            continue
        if report_only:
            results.append(ActionResult(action, REPORT_ONLY, "report only (actions.report_only): not done",
                                        code=Code.REPORT_ONLY))
            continue
        if dry_run:
            results.append(ActionResult(action, DRY_RUN, "dry run: not done", code=Code.DRY_RUN))
            continue
        try:
            result = _apply(action, slurm, prefix)
        except OutOfTime as e:
            result = ActionResult(action, FAILED, f"not done, left for the next run: {e}", retry=True,
                                  code=Code.OUT_OF_TIME)
        except SlurmUnavailable as e:
            result = ActionResult(action, FAILED, f"Slurm unreachable, not done: {e}", retry=True,
                                  code=Code.SLURM_UNREACHABLE)
        except SlurmNotConfigured as e:
            result = ActionResult(action, FAILED, str(e), code=Code.NO_SLURM_CONFIG)
        except BackendError as e:
            result = ActionResult(action, FAILED, f"not done: {e}", code=Code.BACKEND_UNUSABLE)
        except SlurmError as e:
            result = ActionResult(action, FAILED, f"{getattr(slurm, 'name', 'scontrol')} refused: {e}",
                                  code=Code.REFUSED)
        if result.outcome in (DONE, SKIPPED) and result.code not in WAITING:
            now = time.time()
            for k in action.keys:
                ledger[k] = {"done": now, "seen": now}
                if action.kind in ("requeue", "cancel"):
                    # A requeue skipped (--no-requeue, srun) ended nothing: killing was not tried.
                    ledger[k]["ended"] = result.code in ENDED_CODES
        results.append(result)
    return results


def _apply(action: Action, slurm: SlurmBackend | None, prefix: str) -> ActionResult:
    if slurm is None:
        raise SlurmUnavailable("no Slurm backend")
    handler = _HANDLERS.get(action.kind)
    if handler is None:
        return ActionResult(action, FAILED, f"unknown action {action.kind}", code=Code.UNKNOWN_ACTION)
    return handler(action, slurm, prefix)


def _node(action: Action, slurm: SlurmBackend):
    """(info, reason without its stamp), or (None, failure) for an unknown node."""
    info = slurm.node_state(action.node)
    if info is None:
        return None, ActionResult(action, FAILED, f"node {action.node} is not known to Slurm",
                                  code=Code.UNKNOWN_NODE)
    return info, info.get("Reason", "")      # node_state gives it without the stamp


def _state(info: dict) -> str:
    return info.get("State", "?")


def rebooted_by_us(info: dict, reason: str, prefix: str, generic: str = "") -> bool:
    """DOWN after the reboot slurm-hooks asked for (nextstate=DOWN, our reason).

    `generic`: Slurm's reasons that may stand in for ours when we know we asked for the
    reboot: the task that could not be killed makes slurmstepd drain the node with
    `Kill task failed` over our reason, and Slurm issues the reboot in the same instant."""
    return ("DOWN" in node_flags(info) and reason.rstrip().endswith(REBOOT_COMPLETE)
            and (is_ours(reason, prefix) or is_generic(reason, generic)))


def _drain(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    info, current = _node(action, slurm)
    if info is None:
        return current
    if action.replace_only and not node_is_drained(info):
        return ActionResult(action, SKIPPED, "not drained (resumed since): nothing to replace",
                            code=Code.NOTHING_TO_REPLACE)
    foreign = foreign_states(info)
    if foreign and set(foreign) <= set(REBOOT_STATES) and is_generic(current, action.replaces):
        # A reboot is pending and Slurm's generic reason went over the one it was
        # asked with: put the precise one back (a drain leaves the reboot pending).
        _set_drain(action, slurm, info)
        return ActionResult(action, DONE, f"replaced Slurm's generic reason {current!r} (reboot pending)",
                            code=Code.REPLACED_GENERIC)
    if foreign == ["DOWN"] and action.down_ours and is_generic(current, action.replaces):
        # DOWN by our own release, and Slurm's `Kill task failed` went over our reason
        # when it gave up on the task: put the precise one back (the node stays DOWN).
        _set_drain(action, slurm, info)
        return ActionResult(action, DONE, f"replaced Slurm's generic reason {current!r} (DOWN by slurm-hooks' "
                            "release)", code=Code.REPLACED_GENERIC)
    if foreign:
        # A drain on top would overwrite the reason of whoever set this state.
        if is_ours(current, prefix) and reason_is_current(info):
            return ActionResult(action, SKIPPED, f"already out of service ({_state(info)}) by slurm-hooks "
                                f"(reason: {current}); left as it is", code=Code.ALREADY_OURS)
        return ActionResult(action, SKIPPED, f"node is {_state(info)} (reason: {current or 'none'}), not "
                            "by slurm-hooks: left alone, report only", code=Code.FOREIGN_STATE)
    if node_is_drained(info):
        generic = is_generic(current, action.replaces)
        if not is_ours(current, prefix) and not generic:
            return ActionResult(action, SKIPPED,
                                f"already drained by someone else (reason: {current or 'none'}); left as it is",
                                code=Code.FOREIGN_DRAIN)
        if current == action.reason:
            return ActionResult(action, SKIPPED, "already drained with this reason", code=Code.ALREADY_DRAINED)
        if generic:
            _set_drain(action, slurm, info)
            return ActionResult(action, DONE, f"replaced Slurm's generic reason {current!r}",
                                code=Code.REPLACED_GENERIC)
    _set_drain(action, slurm, info)
    return ActionResult(action, DONE, took_out=not node_is_drained(info))


def _set_drain(action: Action, slurm: SlurmBackend, info: dict) -> None:
    """Drain with our reason, and our cause in the same update unless the node's Comment
    is somebody else's (an admin's note stays as it is)."""
    comment = info.get(CAUSE_FIELD, "")
    if action.cause and (not comment or is_our_cause(comment)):
        # Words an admin added after our earlier cause stay after the new one.
        slurm.drain_with_cause(action.node, action.reason, f"{action.cause} {without_our_cause(comment)}".strip())
    else:
        slurm.drain(action.node, action.reason)


def _ours_to_clear(info: dict) -> bool:
    return is_our_cause(info.get(CAUSE_FIELD, ""))


def _resume(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    info, current = _node(action, slurm)
    if info is None:
        return current
    after_reboot = rebooted_by_us(info, current, prefix, action.replaces)
    if not is_ours(current, prefix) and not after_reboot:
        if not node_is_drained(info) and not foreign_states(info):
            return _back_already(action, slurm, info)
        return ActionResult(action, SKIPPED, f"{_state(info)} with another's reason ({current or 'none'}); "
                            "not ours to resume", code=Code.NOT_OURS)
    if after_reboot:
        # RESUME, not UNDRAIN: the node is DOWN by our own reboot's nextstate.
        if _ours_to_clear(info):
            slurm.release(action.node, "RESUME", without_our_cause(info.get(CAUSE_FIELD, "")))
        else:
            slurm.resume(action.node)
        return ActionResult(action, DONE, "back in service after its reboot: the health check passed",
                            code=Code.AFTER_REBOOT)
    foreign = foreign_states(info)
    if any(s in foreign for s in REBOOT_STATES):
        return ActionResult(action, SKIPPED, f"a reboot is pending ({_state(info)}); the node comes back "
                            "after it, once a health check passes", code=Code.REBOOT_PENDING)
    if action.down_ours and foreign == ["DOWN"] and "NOT_RESPONDING" not in node_flags(info):
        # DOWN by our own release (our record says so, the reason is ours): RESUME.
        slurm.release(action.node, "RESUME", without_our_cause(info.get(CAUSE_FIELD, "")))
        return ActionResult(action, DONE, "back in service: DOWN by slurm-hooks' release, the health check passed")
    if foreign:
        return ActionResult(action, SKIPPED, f"node is {_state(info)}, not by slurm-hooks: our drain is "
                            "left in place, report only", code=Code.FOREIGN_STATE)
    if not node_is_drained(info):
        return _back_already(action, slurm, info)
    if _ours_to_clear(info):
        slurm.release(action.node, "UNDRAIN", without_our_cause(info.get(CAUSE_FIELD, "")))
    else:
        slurm.undrain(action.node)
    return ActionResult(action, DONE)


def _back_already(action: Action, slurm: SlurmBackend, info: dict) -> ActionResult:
    """The node is back in service by someone else's hand (an admin's `scontrol update
    state=resume`): our drain's cause leaves its Comment, which other nodes would
    otherwise read as this node's word about a mount (decide/mount_incident.py)."""
    if _ours_to_clear(info):
        slurm.set_node_comment(action.node, without_our_cause(info.get(CAUSE_FIELD, "")))
        return ActionResult(action, SKIPPED, "not drained (resumed by someone else): our cause taken out of "
                            "its Comment", code=Code.NOT_DRAINED)
    return ActionResult(action, SKIPPED, "not drained", code=Code.NOT_DRAINED)


def job_address(info: dict, job: str) -> str:
    """The id to act on `job` with, from Slurm's record of it.

    An array element is addressed as ArrayJobId_ArrayTaskId: the cgroup names the
    element's own JobId, and the last element to start carries the array's own id,
    which `requeue`, `scancel` and `update` read as the whole array.
    """
    array, task = info.get("ArrayJobId", ""), info.get("ArrayTaskId", "")
    if array and task.isdigit():
        return f"{array}_{task}"
    return job


def job_uid(info: dict) -> int | None:
    """The uid in `UserId=alice(1001)`."""
    m = re.search(r"\((\d+)\)\s*$", info.get("UserId", ""))
    return int(m.group(1)) if m else None


def _refused(action: Action, info: dict) -> ActionResult | None:
    """A refusal when Slurm does not confirm the job is this node's and the task's user's."""
    from ..core.hostlist import contains
    nodes = info.get("NodeList", "")
    # A job we requeued from here runs nowhere yet: the note of what became of it is still ours to add.
    if not contains(nodes, action.node) and not (action.ran_here and nodes in ("", "(null)")):
        return ActionResult(action, SKIPPED, f"not acted on: Slurm says job {action.job} runs on "
                            f"{nodes or 'no node'}, not on {action.node}", code=Code.NOT_ON_NODE)
    owner = job_uid(info)
    if action.uid is not None and owner != action.uid:
        return ActionResult(action, SKIPPED, f"not acted on: job {action.job} belongs to uid "
                            f"{owner}, the diagnosed task to uid {action.uid}", code=Code.UID_MISMATCH)
    return None


def _show_job(action: Action, slurm: SlurmBackend) -> tuple[str, dict, ActionResult | None]:
    """(the id to act on, Slurm's record, a refusal or None)."""
    job = action.job or ""
    info = slurm.show_job(job)
    if info is None:
        return job, {}, ActionResult(action, FAILED, f"job {job} is not known to Slurm", code=Code.UNKNOWN_JOB)
    return job_address(info, job), info, _refused(action, info)


def _comment(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    job, info, refused = _show_job(action, slurm)
    if refused is not None:
        return refused
    if action.text in admin_comment(info):
        return ActionResult(action, SKIPPED, "the job's AdminComment already holds this diagnosis",
                            code=Code.COMMENT_PRESENT)
    append_admin_comment(slurm, job, info, action.text)
    return ActionResult(action, DONE, f"on {job}" if job != action.job else "")




def _running_job(action: Action, slurm: SlurmBackend) -> tuple[str, dict, ActionResult | None]:
    """(the id to act on, Slurm's record, a result that ends the action here or None):
    the job must be Slurm's, this node's and the task user's, and not ended."""
    job, info, refused = _show_job(action, slurm)
    if refused is not None:
        return job, info, refused
    state = info.get("JobState", "")
    if state in TERMINAL:
        return job, info, ActionResult(action, SKIPPED, f"job already ended ({state})", code=Code.JOB_ENDED)
    return job, info, None


def _requeue(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    job, info, ended = _running_job(action, slurm)
    if ended is not None:
        return ended
    state = info.get("JobState", "")
    if state.startswith(("PENDING", "REQUEUE")):
        return ActionResult(action, SKIPPED, f"job already back in the queue ({state})", code=Code.JOB_QUEUED)
    why = None
    if info.get("Requeue") == "0":
        why = "requeue is disabled for this job (--no-requeue or JobRequeue=0)"
    elif info.get("BatchFlag") == "0":
        why = "not a batch job (srun/salloc jobs cannot be requeued)"
    else:
        try:
            slurm.requeue(job)
            return ActionResult(action, DONE, f"requeued {job}" if job != action.job else "")
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if e.code == SlurmCode.JOB_PENDING:   # requeued by someone already
                return ActionResult(action, SKIPPED, f"job already requeued: {e}", code=Code.JOB_QUEUED)
            why = f"scontrol requeue refused: {e}"
    return _fallback(action, slurm, prefix, job, info, why)


def _fallback(action: Action, slurm: SlurmBackend, prefix: str, job: str, info: dict, why: str) -> ActionResult:
    cancel = action.fallback == "cancel"
    note = "cancelled instead" if cancel else "left running"
    msg = f"{note}: {why}" if cancel else f"not requeued, left running: {why}"
    # Record why on the job first: a cancelled job may no longer take updates.
    text = one_line(f"{prefix} not requeued ({why}); {note}")
    try:
        append_admin_comment(slurm, job, slurm.show_job(job) or info, text)
    except SlurmUnavailable:
        raise
    except SlurmError as e:
        msg += f"; could not record it on the job: {e}"
    if cancel:
        slurm.cancel(job)
        return ActionResult(action, DONE, msg, code=Code.CANCELLED_INSTEAD)
    return ActionResult(action, SKIPPED, msg, code=Code.NOT_REQUEUED)


def job_runs_here(slurm: SlurmBackend, job: str, node: str) -> str:
    """The job's state when Slurm says it still runs on this node, else "" (ended,
    back in the queue, being killed by Slurm, running elsewhere, or forgotten)."""
    from ..core.hostlist import contains
    info = slurm.show_job(job)
    if info is None:
        return ""
    state = info.get("JobState", "")
    if state in TERMINAL or state.startswith(("PENDING", "REQUEUE", "COMPLETING")):
        return ""
    return state if contains(info.get("NodeList", ""), node) else ""


def _still_running_here(action: Action, slurm: SlurmBackend) -> str:
    return job_runs_here(slurm, action.after_job or "", action.node)


def _cancel(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    job, _, ended = _running_job(action, slurm)
    if ended is not None:
        return ended
    slurm.cancel(job)
    return ActionResult(action, DONE)


def _reboot(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    if action.after_job:
        running = _still_running_here(action, slurm)
        if running:
            return ActionResult(action, SKIPPED, f"no reboot yet: job {action.after_job} still runs here "
                                f"({running}) and nothing has ended it", code=Code.JOB_RUNNING)
    info, current = _node(action, slurm)
    if info is None:
        return current
    if not is_ours(current, prefix):
        return ActionResult(action, SKIPPED, f"the node's reason is not ours ({current or 'none'}, "
                            f"{_state(info)}): no reboot asked for", code=Code.NOT_OURS)
    if rebooted_by_us(info, current, prefix):
        return ActionResult(action, SKIPPED, "the fault survived a reboot: the node stays DOWN for a "
                            "human, no second reboot (no boot loop)", code=Code.FAULT_SURVIVED_REBOOT)
    if any(s in node_flags(info) for s in REBOOT_STATES):
        return ActionResult(action, SKIPPED, f"a reboot is already pending ({_state(info)})",
                            code=Code.REBOOT_PENDING)
    try:
        slurm.reboot(action.node, action.reason)
    except SlurmUnavailable:
        raise
    except SlurmError as e:
        if e.code == SlurmCode.NO_REBOOT_PROGRAM:
            return ActionResult(action, FAILED, f"reboot not possible: {e} (set RebootProgram in slurm.conf)",
                                code=Code.NO_REBOOT_PROGRAM)
        raise
    return ActionResult(action, DONE, "reboot requested once the node is idle (nextstate=DOWN: back in "
                        "service when a health check after the boot passes)")


def _cancel_reboot(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    """Withdraw a reboot slurm-hooks asked for before the storage's outage was known:
    only ours (our reason, or Slurm's `Kill task failed` over it), only while Slurm has
    not issued it. The node stays drained with our reason (Slurm undoes only a drain
    the ASAP reboot itself added, and ours came first)."""
    info, current = _node(action, slurm)
    if info is None:
        return current
    flags = node_flags(info)
    if "REBOOT_ISSUED" in flags:
        return ActionResult(action, SKIPPED, "the reboot was issued already: it goes ahead", code=Code.REBOOT_ISSUED)
    if "REBOOT_REQUESTED" not in flags:
        return ActionResult(action, SKIPPED, f"no reboot pending ({_state(info)}): nothing to withdraw",
                            code=Code.NO_REBOOT_PENDING)
    if not (is_ours(current, prefix) or is_generic(current, KILL_TASK_FAILED)):
        return ActionResult(action, SKIPPED, f"the pending reboot is not ours (reason: {current or 'none'}): "
                            "left as it is", code=Code.NOT_OURS)
    slurm.cancel_reboot(action.node)
    return ActionResult(action, DONE, action.reason or "reboot withdrawn", code=Code.WITHDRAWN)


def _down(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    """Let Slurm go of a node it holds COMPLETING for a task it could not kill, with
    our reboot pending: slurmctld ends a DOWN node's jobs and issues the reboot. Only
    while exactly that holds: our reason (or Slurm's `Kill task failed` over it), the
    reboot requested and not yet issued, the node COMPLETING, and no job on it but the
    ones being ended (DOWN would end any other with them)."""
    info, current = _node(action, slurm)
    if info is None:
        return current
    flags = node_flags(info)
    ours = is_ours(current, prefix) or is_generic(current, action.replaces)
    if not (ours and "REBOOT_REQUESTED" in flags and "COMPLETING" in flags and "DOWN" not in flags):
        return ActionResult(action, SKIPPED, f"no longer held for our reboot ({_state(info)}, reason: "
                            f"{current or 'none'}): left as it is", code=Code.NOT_HELD)
    others = [j for j in slurm.jobs_on(action.node) if j.get("JobState") != "COMPLETING"]
    if others:
        return ActionResult(action, SKIPPED, f"not set DOWN: {_jobs_words(others)} on {action.node} "
                            "(DOWN would end it too); the reboot waits for it", code=Code.OTHER_JOBS)
    slurm.set_down(action.node, action.reason)
    return ActionResult(action, DONE, "set DOWN: Slurm held the node COMPLETING for a task it could not "
                        "kill, with our reboot pending; it lets go of the step and reboots the node",
                        code=Code.RELEASED)


def _jobs_words(jobs: list[dict]) -> str:
    ids = [f"{j.get('JobId')} ({j.get('JobState', '?')})" for j in jobs[:3]]
    more = f" and {len(jobs) - 3} more" if len(jobs) > 3 else ""
    return ("job " if len(jobs) == 1 else "jobs ") + ", ".join(ids) + more + (" runs" if len(jobs) == 1 else " run")


def _same_job(info: dict, job: str) -> bool:
    """Whether a record of Slurm's is `job` (a JobId, or an element ArrayJobId_TaskId)."""
    return info.get("JobId") == job or job_address(info, info.get("JobId", "")) == job


def _release(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    """Set the node DOWN so that Slurm lets go of the job we ended, whose task here
    cannot die (decide/policy.py: _releases): Slurm 25.11.6+ holds it COMPLETING for as
    long as the task lives. Only while the job is the only one Slurm has on the node
    (DOWN ends every job of a node), the node still drained by us (our reason, or
    Slurm's `Kill task failed` over it), in no state another set. The job's
    AdminComment says what became of it."""
    info, current = _node(action, slurm)
    if info is None:
        return current
    flags = node_flags(info)
    ours = is_ours(current, prefix) or is_generic(current, action.replaces)
    foreign = [f for f in foreign_states(info) if f != "REBOOT_REQUESTED"]
    if not ours or foreign:
        return ActionResult(action, SKIPPED, f"not set DOWN: the node is {_state(info)} (reason: "
                            f"{current or 'none'}), not held by slurm-hooks' drain", code=Code.NOT_OURS)
    if "REBOOT_REQUESTED" in flags:
        # Our reboot is pending: DOWN would have Slurm issue it at once, past the time
        # left to withdraw it should the mount turn out to be the storage's outage. The
        # reboot's own release (`down`, actions.release_after) lets go of the node.
        return ActionResult(action, SKIPPED, "our reboot is pending: the node is let go by its release "
                            "(actions.release_after), which leaves time to withdraw it", code=Code.REBOOT_FIRST)
    jobs = slurm.jobs_on(action.node)
    job = action.job or ""
    others = [j for j in jobs if not _same_job(j, job)]
    mine = [j for j in jobs if _same_job(j, job)]
    if others:
        _tell(slurm, job, f"{prefix} COMPLETING: a task on {action.node} cannot die; {action.node} not set DOWN "
                          f"({_jobs_words(others)} there): Slurm keeps the job until it dies")
        return ActionResult(action, SKIPPED, f"not set DOWN: {_jobs_words(others)} on {action.node} too (DOWN "
                            f"would end it); job {job} waits as Slurm makes it", code=Code.OTHER_JOBS)
    if not mine or "COMPLETING" not in flags and all(j.get("JobState") != "COMPLETING" for j in mine):
        return ActionResult(action, SKIPPED, f"Slurm holds {action.node} for job {job} no more "
                            f"({_state(info)}): nothing to let go", code=Code.NOT_HELD)
    slurm.set_down(action.node, action.reason)
    _tell(slurm, job, f"{prefix} node {action.node} set DOWN: a task of the job on it cannot die, and Slurm "
                      "held the job COMPLETING for it")
    return ActionResult(action, DONE, f"set DOWN: job {job} was the only one on {action.node}, held COMPLETING "
                        "by a task that cannot die; Slurm lets it go", code=Code.RELEASED)


def _tell(slurm: SlurmBackend, job: str, note: str) -> None:
    """Add `note` to the job's AdminComment once (a later run finds it there), where
    Slurm still takes it: a word on the job never stops the action it is about."""
    try:
        info = slurm.show_job(job)
        if info is not None and note not in admin_comment(info):
            append_admin_comment(slurm, job_address(info, job), info, one_line(note))
    except SlurmUnavailable:
        raise
    except SlurmError:
        pass


def _local(stamp: str) -> float | None:
    """Slurm's ISO time (local, as squeue prints it) as seconds, None for none."""
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _start(action: Action, slurm: SlurmBackend, prefix: str) -> ActionResult:
    """Follow a job we requeued until it leaves Slurm's requeue hold: while COMPLETING,
    say so (a later run asks again); once PENDING with Reason=BeginTime and a begin time
    that is Slurm's hold (its submit time, which Slurm resets as the job leaves
    COMPLETING, + one of `action.holds` (+1 s)), end the hold, or with
    `fallback="tell"` (actions.restart_now off) say on the job until when it holds. A
    begin time its user set is never touched."""
    job = action.job or ""
    hold = slurm.job_hold(job)
    if hold is None:
        return ActionResult(action, SKIPPED, f"Slurm knows job {job} no more", code=Code.NOT_WAITING)
    state, reason = hold.get("JobState", ""), hold.get("Reason", "")
    if state == "COMPLETING":
        return ActionResult(action, SKIPPED, f"COMPLETING: a task on {action.node} cannot die; Slurm holds the job "
                            "until it does (or the node is DOWN)", code=Code.COMPLETING)
    eligible, submit = _local(hold.get("EligibleTime", "")), _local(hold.get("SubmitTime", ""))
    later = state == "PENDING" and eligible is not None and eligible > time.time()
    if state == "PENDING" and not later and reason == "None":
        # Just let go (its node set DOWN): the scheduler has not looked at it yet, and
        # Slurm may still set its hold.
        return ActionResult(action, SKIPPED, f"job {job} is PENDING, not yet looked at by the scheduler",
                            code=Code.UNSCHEDULED)
    if not later:
        return ActionResult(action, SKIPPED, f"job {job} is {state} (reason: {reason or 'none'}): no hold of "
                            "Slurm's to end", code=Code.NOT_WAITING)
    until = hold.get("EligibleTime", "?").partition("T")[2] or "?"
    holds = {float(h) + d for h in action.holds for d in (0, 1)}
    if eligible is None or submit is None or eligible - submit not in holds:
        return ActionResult(action, SKIPPED, f"begin time {hold.get('EligibleTime')} is not Slurm's requeue hold "
                            f"(submit time {hold.get('SubmitTime')} + {'/'.join(str(h) for h in action.holds)} s "
                            "+1): its user's, never started early", code=Code.USERS_BEGIN)
    if action.fallback == "tell":
        _tell(slurm, job, f"{prefix} requeued job waits in Slurm's requeue hold until {until}")
        return ActionResult(action, SKIPPED, f"hold until {until}: Slurm's requeue hold, left to run "
                            "(actions.restart_now is off)", code=Code.HOLD_KEPT)
    slurm.start_now(job)
    _tell(slurm, job, f"{prefix} start asked at {time.strftime('%H:%M:%S')}: Slurm's requeue hold until {until} "
                      "ended (actions.restart_now)")
    return ActionResult(action, DONE, f"StartTime=now: Slurm's requeue hold until {until} ended",
                        code=Code.START_ASKED)


_HANDLERS = {"drain": _drain, "resume": _resume, "comment": _comment, "requeue": _requeue,
             "cancel": _cancel, "reboot": _reboot, "cancel_reboot": _cancel_reboot, "down": _down,
             "release": _release, "start": _start}
