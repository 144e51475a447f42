"""The way back after a reboot slurm-hooks asked for: Slurm keeps the node DOWN with
our reason after the boot (ReturnToService=1 or nextstate=DOWN) and health checks that
pass resume it; a node Slurm still holds COMPLETING long after our request is set DOWN
so that Slurm reboots it. The decisions read the node's state and the local record of
the request; the caller (act/actuation.py, which keeps the record and learns of a new
boot) carries the action out."""
from __future__ import annotations

import time

from ..core.behaviour import behaviour


def after_reboot(slurm, node: str, prefix: str, reboot: dict, failing: bool, resume_after: int,
                 release_after: float):
    """After the reboot we asked for (Slurm keeps the node DOWN with our reason, then
    "reboot complete"), resume it once health checks pass. Before it, a node Slurm
    still holds COMPLETING `release_after` seconds after we asked (the task it cannot
    kill: Slurm 25.11 waits for it for ever) is set DOWN, so that Slurm reboots it.
    Returns (the action: resume or down, or None; the record)."""
    from ..core.model import Action
    from ..core.reason import is_generic, is_ours
    from ..slurm.api import REBOOT_STATES, SlurmError, node_flags
    from .actions import rebooted_by_us
    try:
        info = slurm.node_state(node)
    except SlurmError:
        return None, reboot
    if info is None:
        return None, reboot
    # node_state gives the reason without its stamp: stripping again could cut a
    # user's file name at its end that reads like one.
    reason = info.get("Reason", "")
    # Asked for by us (our record): Slurm's "Kill task failed" may have replaced our reason.
    generic = behaviour("healthcheck").generic_reason if reboot else ""
    if not rebooted_by_us(info, reason, prefix, generic):
        flags = node_flags(info)
        waiting = any(s in flags for s in REBOOT_STATES) and \
            (is_ours(reason, prefix) or is_generic(reason, generic))
        if not waiting:
            return None, {}
        asked = (reboot or {}).get("at")
        if asked is not None and {"REBOOT_REQUESTED", "COMPLETING"} <= flags and "DOWN" not in flags \
                and time.time() - asked >= release_after:
            ours = reboot.get("reason") or reason
            return Action("down", node=node, reason=ours, replaces=generic), reboot
        return None, reboot
    record = dict(reboot or {"at": time.time()}, reason=reason)
    if failing:
        return None, dict(record, passes=0)
    record["passes"] = int(record.get("passes", 0)) + 1
    if record["passes"] >= max(1, resume_after):
        return Action("resume", node=node, reason=reason, replaces=generic), record
    return None, record


def record(reboot: dict, results) -> dict:
    """Remember a reboot we asked for (to bring the node back after it); forget it once
    the node is resumed."""
    from ..core.outcomes import Outcome
    for r in results:
        if r.action.kind == "reboot" and r.outcome == Outcome.DONE:
            return {"reason": r.action.reason, "at": time.time(), "passes": 0}
        if r.action.kind == "resume" and r.outcome == Outcome.DONE:
            return {}
    return reboot
