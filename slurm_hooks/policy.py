"""Policy: findings in, actions out. A pure function, so it is tested on data alone.

- Any failing finding drains the node, with one reason naming every failing finding
  (job findings first: they say the most; as many whole ones as fit in 255 bytes).
- A failing finding tied to a job also records the diagnosis on the job and requeues
  it, so the job's healthy nodes are freed and it resumes elsewhere from its checkpoint.
- A finding only a reboot can clear (an unkillable task) asks for a reboot once the
  node is idle.
Each kind of action can be switched off in `actions:`.
"""
from __future__ import annotations

from .model import FAIL, Action, Finding
from .reason import make_reason, one_line

COMMENT_LIMIT = 1000


def decide(findings: list[Finding], node: str, prefix: str, actions_cfg) -> list[Action]:
    failing = [f for f in findings if f.severity == FAIL]
    if not failing:
        return []
    failing.sort(key=lambda f: f.job is None)          # stable: job findings first
    reason = make_reason(prefix, [f.reason_text for f in failing])
    out: list[Action] = []
    if actions_cfg.drain:
        out.append(Action("drain", node=node, reason=reason))
    jobs: dict[str, list[Finding]] = {}
    for f in failing:
        if f.job is not None:
            jobs.setdefault(f.job, []).append(f)
    for job, fs in jobs.items():
        incident = "+".join(sorted(f.incident or f.target for f in fs))
        text = one_line(f"{prefix} node {node}: " + "; ".join(f.summary for f in fs))[:COMMENT_LIMIT]
        if actions_cfg.comment_job:
            out.append(Action("comment", node=node, job=job, text=text, incident=incident))
        if actions_cfg.requeue_job:
            out.append(Action("requeue", node=node, job=job, text=text, incident=incident,
                              fallback=actions_cfg.requeue_fallback))
    reboot_for = [f for f in failing if f.needs_reboot]
    if actions_cfg.reboot and reboot_for:
        incident = "+".join(sorted(f.incident or f.target for f in reboot_for))
        out.append(Action("reboot", node=node, reason=reason, incident=incident))
    return out
