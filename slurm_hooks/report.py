"""Readable reports for people at a terminal."""
from __future__ import annotations

from .model import FAIL, OK, WARN
from .reason import clean_text

LABEL = {OK: "OK  ", WARN: "WARN", FAIL: "FAIL"}
VERB = {"done": "", "dry-run": "would ", "skipped": "skipped: ", "failed": "would ", "held": "held back: would "}


def render(record) -> str:
    lines = [f"slurm-hooks {record.hook} on node {record.node} (config: {record.config})"]
    for note in record.notes:
        lines.append(f"note: {note}")
    for warning in record.warnings:
        lines.append(f"warning: {warning}")
    for check in record.checks:
        for f in check.findings:
            lines.append(f"  {LABEL[f.severity]}  {f.summary}")
            if f.detail and f.severity != OK:
                for d in f.detail.strip().splitlines()[-3:]:
                    lines.append(f"          {d}")
        if not check.findings:
            lines.append(f"  OK    {check.name}: nothing found")
    if record.actions:
        lines.append("actions:")
        for r in record.actions:
            verb = VERB.get(r.outcome, "")
            msg = f" ({r.message})" if r.message and r.outcome != "dry-run" else ""
            lines.append(f"  {verb}{r.action.describe()}{msg}")
    lines.append(f"result: {record.status.upper()} in {record.duration:.2f}s")
    return clean_text("\n".join(lines))


def render_json(record) -> str:
    # Paths and process names may hold bytes that are not UTF-8: the output must stay
    # valid UTF-8 (and valid JSON) for whatever reads it.
    import json
    return clean_text(json.dumps(record.to_json(), indent=2, ensure_ascii=False, default=str))
