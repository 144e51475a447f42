"""Carrying actions out through the Slurm backend, or saying what would be done.

Never undo or overwrite what an admin did: a node already drained with a reason that
does not carry our prefix keeps that reason.
"""
from __future__ import annotations

from .model import Action, ActionResult
from .slurm import Slurm, SlurmError, SlurmUnavailable, node_is_drained, strip_reason_stamp

DONE, DRY_RUN, SKIPPED, FAILED = "done", "dry-run", "skipped", "failed"


def execute(actions: list[Action], slurm: Slurm | None, prefix: str, dry_run: bool) -> list[ActionResult]:
    results = []
    for action in actions:
        if dry_run:
            results.append(ActionResult(action, DRY_RUN, "dry run: not done"))
            continue
        try:
            results.append(_apply(action, slurm, prefix))
        except SlurmUnavailable as e:
            results.append(ActionResult(action, FAILED, f"Slurm unreachable, not done: {e}"))
        except SlurmError as e:
            results.append(ActionResult(action, FAILED, f"scontrol refused: {e}"))
    return results


def _apply(action: Action, slurm: Slurm | None, prefix: str) -> ActionResult:
    if slurm is None:
        raise SlurmUnavailable("no Slurm backend")
    if action.kind == "drain":
        info = slurm.show_node(action.node)
        if info is None:
            return ActionResult(action, FAILED, f"node {action.node} is not known to Slurm")
        current = strip_reason_stamp(info.get("Reason", ""))
        if node_is_drained(info):
            if not current.startswith(prefix):
                return ActionResult(action, SKIPPED,
                                    f"already drained by someone else (reason: {current or 'none'}); left as it is")
            if current == action.reason:
                return ActionResult(action, SKIPPED, "already drained with this reason")
        slurm.drain(action.node, action.reason)
        return ActionResult(action, DONE)
    if action.kind == "resume":
        info = slurm.show_node(action.node)
        if info is None:
            return ActionResult(action, FAILED, f"node {action.node} is not known to Slurm")
        current = strip_reason_stamp(info.get("Reason", ""))
        if not node_is_drained(info):
            return ActionResult(action, SKIPPED, "not drained")
        if not current.startswith(prefix):
            return ActionResult(action, SKIPPED,
                                f"drained by someone else (reason: {current or 'none'}); not ours to resume")
        slurm.resume(action.node)
        return ActionResult(action, DONE)
    return ActionResult(action, FAILED, f"unknown action {action.kind}")
