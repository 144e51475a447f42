"""Readable reports for people at a terminal."""
from __future__ import annotations

from .. import TYPE_CHECKING
from ..core.model import FAIL, OK, WARN
from ..core.reason import clean_text

if TYPE_CHECKING:
    from ..core.model import RunRecord

LABEL = {OK: "OK  ", WARN: "WARN", FAIL: "FAIL"}
# Messages a header or the word itself already says (outcomes.result_word).
SAID = ("dry-run", "report-only")


def render(record: RunRecord) -> str:
    lines = [header(record)]
    for note in record.notes:
        lines.append(f"note: {note}")
    for warning in record.warnings:
        lines.append(f"warning: {warning}")
    for error in record.local_errors:
        lines.append(f"slurm-hooks itself: {error}")
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
        lines += [f"  {action_line(r)}" for r in record.actions]
    lines.append(f"result: {record.status.upper()} in {record.duration:.2f}s")
    return clean_text("\n".join(lines))


def header(record: RunRecord) -> str:
    """The first line; a run that acts on nothing says so before anything else."""
    line = f"slurm-hooks {record.hook} on node {record.node} (config: {record.config})"
    if record.dry_run:
        return line + " -- dry run: nothing is done, no state kept"
    if getattr(record, "report_only", False):
        return line + " -- report only (actions.report_only): no action is taken"
    return line


def action_line(r) -> str:
    """`WORD: what (why)` in the one vocabulary (outcomes.result_word); a dry run's
    actions read `would drain node ...`, since only a dry run would do them."""
    from ..core.outcomes import result_word
    value = str(r.outcome)
    msg = f" ({r.message})" if r.message and value not in SAID else ""
    if value == "dry-run":
        return f"would {r.action.describe()}"
    word = result_word(value, r.retry)
    if value == "report-only":
        word += " (report only)"
    elif value == "held":
        word += " (breaker)"
    return f"{word}: {r.action.describe()}{msg}"


def render_json(record: RunRecord) -> str:
    # Paths and process names may hold bytes that are not UTF-8: the output must stay
    # valid UTF-8 (and valid JSON) for whatever reads it.
    import json
    return clean_text(json.dumps(record.to_json(), indent=2, ensure_ascii=False, default=str))
