"""Policy: findings in, actions out. A pure function, so it is tested on data alone.

Today: any failing finding drains the node, with one reason that names every failing
check's evidence (the first ones in full when they do not all fit in 255 bytes).
"""
from __future__ import annotations

from .model import FAIL, Action, Finding
from .reason import make_reason


def decide(findings: list[Finding], node: str, prefix: str) -> list[Action]:
    failing = [f for f in findings if f.severity == FAIL]
    if not failing:
        return []
    return [Action(kind="drain", node=node, reason=make_reason(prefix, [f.summary for f in failing]))]
