"""`slurm-hooks resume`: the README's Undo (step 2), done by slurm-hooks itself.

Gives back the nodes slurm-hooks took out of service (its reason, or DOWN after its own
reboot) and takes its cause out of each node's Comment, leaving whatever an admin wrote
there. An admin's, NHC's and Slurm's own drains stay: the resume action (act/actions.py)
is the one the health check uses, with the same "only ours" rules. A node already back in
service whose Comment still holds our cause (resumed by hand) gets its Comment cleaned.
"""
from __future__ import annotations

import sys

from .. import TYPE_CHECKING
from ..core.model import Action
from ..core.reason import is_our_cause, is_ours, without_our_cause
from ..slurm.api import CAUSE_FIELD, node_is_drained, strip_reason_stamp

if TYPE_CHECKING:
    from ..checks._config import Config
    from ..slurm.api import SlurmBackend


def _ours(info: dict, prefix: str) -> bool:
    return is_ours(strip_reason_stamp(info.get("Reason", "")), prefix) or is_our_cause(info.get(CAUSE_FIELD, ""))


def undo(slurm: SlurmBackend, nodes: list[str], prefix: str, dry_run: bool = False) -> tuple[list[str], bool]:
    """(one line per node, whether every node came out as asked)."""
    from .actions import execute
    lines, ok = [], True
    for node in nodes:
        info = slurm.node_state(node)
        if info is None:
            lines.append(f"{node}: not known to Slurm")
            ok = False
            continue
        comment = info.get(CAUSE_FIELD, "")
        out_of_service = node_is_drained(info) or "DOWN" in info.get("State", "")
        if out_of_service and is_ours(info.get("Reason", ""), prefix):
            # DOWN with our reason and no reboot behind it: DOWN by our own release
            # (act/actions.py _release), the admin's word brings it back.
            [result] = execute([Action("resume", node=node, down_ours=True)], slurm, prefix, dry_run=dry_run)
            word = {"done": "resumed", "dry-run": "would resume"}.get(result.outcome.value, result.outcome.value)
            message = "" if result.outcome.value == "dry-run" else result.message
            lines.append(f"{node}: {word}" + (f" ({message})" if message else ""))
            ok = ok and result.outcome.value in ("done", "dry-run", "skipped")
            continue
        if is_our_cause(comment):
            rest = without_our_cause(comment)
            if not dry_run:
                slurm.set_node_comment(node, rest)
            lines.append(f"{node}: {'would clear' if dry_run else 'cleared'} slurm-hooks' cause from the Comment"
                         + (f" (kept: {rest})" if rest else ""))
            continue
        lines.append(f"{node}: not drained by slurm-hooks ({info.get('State', '?')}"
                     + (f", reason: {info['Reason']}" if info.get("Reason") else "") + "): left alone")
    return lines, ok


def main(cfg: Config, nodes: list[str], every: bool, dry_run: bool) -> int:
    from ..slurm.api import SlurmError
    from ..slurm.connect import open_backend
    if not nodes and not every:
        print("slurm-hooks resume: name the nodes, or --all for every node slurm-hooks drained", file=sys.stderr)
        return 2
    try:
        slurm = open_backend(cfg.slurm)
        if every:
            nodes = [n["NodeName"] for n in slurm.list_nodes_alone(prefix=cfg.reason_prefix) if _ours(n, cfg.reason_prefix)]
        lines, ok = undo(slurm, nodes, cfg.reason_prefix, dry_run)
    except SlurmError as e:
        print(f"slurm-hooks resume: Slurm could not be asked: {e}", file=sys.stderr)
        return 3
    print("\n".join(lines) if lines else "no node is drained by slurm-hooks or carries its cause")
    return 0 if ok else 1
