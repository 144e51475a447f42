"""The ledger: job and reboot actions done, kept in local state (actuation's
`actions-done` file) by their incident keys (Action.keys), so the next run, which
still sees the same stuck task, does not requeue again, repeat a comment or ask for a
second reboot."""
from __future__ import annotations

import time

from .. import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.model import Finding

# How long the ledger remembers an incident no finding has named. A stuck task can drop
# out of the findings for a while (a SIGKILL wakes it for a moment and its clock
# restarts) without being a new incident; a new stuck task has a new identity anyway.
LEDGER_KEEP = 6 * 3600


def refresh(ledger: dict, findings: list[Finding]) -> dict:
    now = time.time()
    live = {f.incident for f in findings if f.incident}
    out = {}
    for key, entry in ledger.items():
        if not isinstance(entry, dict) or "done" not in entry:
            continue                       # an unreadable entry: forget it
        if key.split(":", 2)[-1] in live:
            entry = dict(entry, seen=now)
        if now - float(entry.get("seen", entry["done"])) < LEDGER_KEEP:
            out[key] = entry
    return out
