"""Decisions read codes, never message text: every action result carries an Outcome
and a machine-readable Code, the journal records both, and the README's data model
lists them all."""
from __future__ import annotations

import re

from helpers import ROOT

from slurm_hooks.act import actuation
from slurm_hooks.core.model import Action, ActionResult, Finding
from slurm_hooks.core.outcomes import Code, Outcome


def _drain(node="n1", reason="fs /x hung [slurm-hooks]"):
    return Action("drain", node=node, reason=reason)


def test_drain_record_follows_codes_not_messages():
    failing = [Finding("filesystem", "/x", "hung", "fail", "fs /x hung")]
    ours = {"reason": "fs /x hung [slurm-hooks]", "resumable": True, "passes": 3, "at": 1.0}
    # An admin's drain in place of ours: not ours to resume, whatever the words say.
    foreign = ActionResult(_drain(), Outcome.SKIPPED, "reworded by a translator", code=Code.FOREIGN_DRAIN)
    assert actuation.drain_record(ours, [foreign], failing, "n1") == {}
    # Drained by us with this very reason already: our record stands, its count restarts.
    same = ActionResult(_drain(), Outcome.SKIPPED, "", code=Code.ALREADY_DRAINED)
    kept = actuation.drain_record(ours, [same], failing, "n1")
    assert kept["reason"] == ours["reason"] and kept["passes"] == 0 and kept["at"] == 1.0
    # A message that once meant something decides nothing without its code.
    words = ActionResult(_drain(), Outcome.SKIPPED, "already drained by someone else (reason: x)",
                         code=Code.FOREIGN_STATE)
    assert actuation.drain_record(ours, [words], failing, "n1") == ours


def test_journal_lines_carry_outcome_and_code():
    r = ActionResult(_drain(), "held", "drain-storm breaker open", code="breaker")
    assert r.outcome is Outcome.HELD and r.code is Code.BREAKER
    line = r.to_json()
    assert (line["outcome"], line["code"]) == ("held", "breaker")
    assert type(line["outcome"]) is str and type(line["code"]) is str


def test_design_data_model_lists_every_outcome_and_code():
    text = (ROOT / "docs/design.md").read_text()
    section = text.split("### Data model", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z_-]*)`", section))
    assert {o.value for o in Outcome} <= listed, {o.value for o in Outcome} - listed
    assert {c.value for c in Code if c.value} <= listed, {c.value for c in Code if c.value} - listed

