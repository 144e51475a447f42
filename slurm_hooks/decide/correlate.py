"""Findings that explain each other, joined into one diagnosis.

A stuck task and the GPU that idles because of it are one fault, not two; which
findings explain which is each check's own knowledge (its class's optional
`correlate(findings) -> findings`, checks/__init__.py), so this module names no check:
it hands the run's findings to every check that took part and knows how to join them,
in the checks' order.
"""
from __future__ import annotations

from ..checks import joiners
from ..core.model import Finding


def correlate(findings: list[Finding]) -> list[Finding]:
    for join in joiners({f.check for f in findings}):
        findings = join(findings)
    return findings
