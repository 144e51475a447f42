"""Carrying actions out through the Slurm backend, or saying what would be done.

- Never undo or overwrite what an admin did: a node already drained with a reason that
  does not carry our prefix keeps that reason, and is not resumed by us.
- At most once per incident: job and reboot actions that succeeded are remembered in
  local state (the ledger, keyed by Action.keys), so the next health check, which still
  sees the same stuck task, does not requeue again or repeat the comment.
- A job comment keeps whatever an admin already wrote in AdminComment.
- Slurm's word on who owns a job: before a job is commented, requeued or cancelled,
  Slurm must say the job has this node among its nodes and belongs to the uid of the
  diagnosed task. Where a process sits in the cgroup tree is no proof on its own.
"""
from __future__ import annotations

import re
import time

from .model import Action, ActionResult
from .reason import one_line
from .slurm import Slurm, SlurmError, SlurmUnavailable, node_is_drained, strip_reason_stamp

DONE, DRY_RUN, SKIPPED, FAILED = "done", "dry-run", "skipped", "failed"
# What slurmctld writes when a hook fails or a task cannot be killed. slurm-hooks puts
# its own precise reason in their place, but only when it knows the cause (its own
# hook failed, or it diagnosed the task): never over an admin's words.
GENERIC_REASONS = ("Prolog error", "Epilog error", "Kill task failed")
LEDGER = "actions-done"
TERMINAL = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED")


def execute(actions: list[Action], slurm: Slurm | None, prefix: str, dry_run: bool,
            ledger: dict | None = None) -> list[ActionResult]:
    """Carry out actions in order; `ledger` (key -> {"done": t, "seen": t}) is read and updated."""
    ledger = ledger if ledger is not None else {}
    results = []
    for action in actions:
        done_at = min((ledger[k]["done"] for k in action.keys if k in ledger), default=None)
        if done_at is not None:
            when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(done_at))
            results.append(ActionResult(action, SKIPPED, f"already done for this incident at {when}"))
            continue
        if dry_run:
            results.append(ActionResult(action, DRY_RUN, "dry run: not done"))
            continue
        try:
            result = _apply(action, slurm, prefix)
        except SlurmUnavailable as e:
            result = ActionResult(action, FAILED, f"Slurm unreachable, not done: {e}")
        except SlurmError as e:
            result = ActionResult(action, FAILED, f"scontrol refused: {e}")
        if result.outcome in (DONE, SKIPPED):
            now = time.time()
            for k in action.keys:
                ledger[k] = {"done": now, "seen": now}
        results.append(result)
    return results


def _apply(action: Action, slurm: Slurm | None, prefix: str) -> ActionResult:
    if slurm is None:
        raise SlurmUnavailable("no Slurm backend")
    handler = _HANDLERS.get(action.kind)
    if handler is None:
        return ActionResult(action, FAILED, f"unknown action {action.kind}")
    return handler(action, slurm, prefix)


def _node(action: Action, slurm: Slurm):
    """(info, reason without its stamp), or (None, failure) for an unknown node."""
    info = slurm.show_node(action.node)
    if info is None:
        return None, ActionResult(action, FAILED, f"node {action.node} is not known to Slurm")
    return info, strip_reason_stamp(info.get("Reason", ""))


def _drain(action: Action, slurm: Slurm, prefix: str) -> ActionResult:
    info, current = _node(action, slurm)
    if info is None:
        return current
    if action.replace_only and not node_is_drained(info):
        return ActionResult(action, SKIPPED, "not drained (resumed since): nothing to replace")
    if node_is_drained(info):
        generic = current in GENERIC_REASONS and current in action.replaces.split("|")
        if not current.startswith(prefix) and not generic:
            return ActionResult(action, SKIPPED,
                                f"already drained by someone else (reason: {current or 'none'}); left as it is")
        if current == action.reason:
            return ActionResult(action, SKIPPED, "already drained with this reason")
        if generic:
            slurm.drain(action.node, action.reason)
            return ActionResult(action, DONE, f"replaced Slurm's generic reason {current!r}")
    slurm.drain(action.node, action.reason)
    return ActionResult(action, DONE)


def _resume(action: Action, slurm: Slurm, prefix: str) -> ActionResult:
    info, current = _node(action, slurm)
    if info is None:
        return current
    if not node_is_drained(info):
        return ActionResult(action, SKIPPED, "not drained")
    if not current.startswith(prefix):
        return ActionResult(action, SKIPPED,
                            f"drained by someone else (reason: {current or 'none'}); not ours to resume")
    slurm.resume(action.node)
    return ActionResult(action, DONE)


def job_uid(info: dict) -> int | None:
    """The uid in `UserId=alice(1001)`."""
    m = re.search(r"\((\d+)\)\s*$", info.get("UserId", ""))
    return int(m.group(1)) if m else None


def _refused(action: Action, info: dict) -> ActionResult | None:
    """A refusal when Slurm does not confirm the job is this node's and the task's user's."""
    from .hostlist import contains
    nodes = info.get("NodeList", "")
    if not contains(nodes, action.node):
        return ActionResult(action, SKIPPED, f"not acted on: Slurm says job {action.job} runs on "
                            f"{nodes or 'no node'}, not on {action.node}")
    owner = job_uid(info)
    if action.uid is not None and owner != action.uid:
        return ActionResult(action, SKIPPED, f"not acted on: job {action.job} belongs to uid "
                            f"{owner}, the diagnosed task to uid {action.uid}")
    return None


def _show_job(action: Action, slurm: Slurm) -> tuple[dict | None, ActionResult | None]:
    info = slurm.show_job(action.job)
    if info is None:
        return None, ActionResult(action, FAILED, f"job {action.job} is not known to Slurm")
    return info, _refused(action, info)


def _comment(action: Action, slurm: Slurm, prefix: str) -> ActionResult:
    info, refused = _show_job(action, slurm)
    if refused is not None:
        return refused
    if action.text in _admin_comment(info):
        return ActionResult(action, SKIPPED, "the job's AdminComment already holds this diagnosis")
    _append_comment(slurm, action.job, info, action.text)
    return ActionResult(action, DONE)


def _admin_comment(info: dict) -> str:
    value = info.get("AdminComment", "")
    return "" if value == "(null)" else value


def _append_comment(slurm: Slurm, job: str, info: dict, text: str) -> None:
    old = _admin_comment(info)
    slurm.set_admin_comment(job, f"{old} | {text}" if old else text)


def _requeue(action: Action, slurm: Slurm, prefix: str) -> ActionResult:
    info, refused = _show_job(action, slurm)
    if refused is not None:
        return refused
    state = info.get("JobState", "")
    if state in TERMINAL:
        return ActionResult(action, SKIPPED, f"job already ended ({state})")
    if state.startswith(("PENDING", "REQUEUE")):
        return ActionResult(action, SKIPPED, f"job already back in the queue ({state})")
    why = None
    if info.get("Requeue") == "0":
        why = "requeue is disabled for this job (--no-requeue or JobRequeue=0)"
    elif info.get("BatchFlag") == "0":
        why = "not a batch job (srun/salloc jobs cannot be requeued)"
    else:
        try:
            slurm.requeue(action.job)
            return ActionResult(action, DONE)
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            if "pending execution" in str(e):   # requeued by someone already
                return ActionResult(action, SKIPPED, f"job already requeued: {e}")
            why = f"scontrol requeue refused: {e}"
    return _fallback(action, slurm, prefix, info, why)


def _fallback(action: Action, slurm: Slurm, prefix: str, info: dict, why: str) -> ActionResult:
    cancel = action.fallback == "cancel"
    note = "cancelled instead" if cancel else "left running"
    msg = f"{note}: {why}" if cancel else f"not requeued, left running: {why}"
    # Record why on the job first: a cancelled job may no longer take updates.
    text = one_line(f"{prefix} not requeued ({why}); {note}")
    try:
        _append_comment(slurm, action.job, slurm.show_job(action.job) or info, text)
    except SlurmUnavailable:
        raise
    except SlurmError as e:
        msg += f"; could not record it on the job: {e}"
    if cancel:
        slurm.cancel(action.job)
        return ActionResult(action, DONE, msg)
    return ActionResult(action, SKIPPED, msg)


def _cancel(action: Action, slurm: Slurm, prefix: str) -> ActionResult:
    info, refused = _show_job(action, slurm)
    if refused is not None:
        return refused
    state = info.get("JobState", "")
    if state in TERMINAL:
        return ActionResult(action, SKIPPED, f"job already ended ({state})")
    slurm.cancel(action.job)
    return ActionResult(action, DONE)


def _reboot(action: Action, slurm: Slurm, prefix: str) -> ActionResult:
    try:
        slurm.reboot(action.node, action.reason)
    except SlurmUnavailable:
        raise
    except SlurmError as e:
        if "RebootProgram" in str(e):
            return ActionResult(action, FAILED, f"reboot not possible: {e} (set RebootProgram in slurm.conf)")
        raise
    return ActionResult(action, DONE, "reboot requested once the node is idle (nextstate=RESUME)")


_HANDLERS = {"drain": _drain, "resume": _resume, "comment": _comment, "requeue": _requeue,
             "cancel": _cancel, "reboot": _reboot}
