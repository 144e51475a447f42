"""Node reasons as Slurm's own tools print them: the key words in the 20 columns
`sinfo -R` shows, our mark at the end, the cause in the Comment; and docs/operations.md shows
exactly that output (times normalised), so the example cannot go stale."""
from __future__ import annotations

import re

import pytest
from helpers import ROOT, ours

from slurm_hooks.act.actions import execute
from slurm_hooks.core.config import ActionsConfig, SlurmConfig
from slurm_hooks.core.model import FAIL, Finding
from slurm_hooks.core.reason import read_cause
from slurm_hooks.decide.policy import decide
from slurm_hooks.slurm.connect import open_backend

pytestmark = pytest.mark.cluster

README_BLOCK = "<!-- real output: tests/test_reasons_slurm.py compares it -->"
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def _normalised(text: str) -> str:
    return _TIME.sub("2026-12-02T03:50:00", text)


def _readme_example() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    after = text.split(README_BLOCK, 1)[1]
    return after.split("```\n", 1)[1].split("```", 1)[0]


def _drain(slurm, node: str, finding: Finding) -> str:
    drains = [a for a in decide([finding], node, "slurm-hooks:", ActionsConfig()) if a.kind == "drain"]
    [result] = execute(drains, slurm, "slurm-hooks:", dry_run=False)
    assert result.outcome == "done", result
    return drains[0].reason


def test_sinfo_and_scontrol_show_our_reasons_as_the_readme_says(clean_cluster):
    cluster = clean_cluster
    slurm = open_backend(SlurmConfig(**cluster.hooks_slurm(timeout=10)))
    fs = _drain(slurm, "n1", Finding("filesystem", "/scratch", "hung", FAIL, "fs /scratch hung >10s (write, lustre)",
                                     incident="/scratch", evidence={"mountpoint": "/scratch"}))
    ib = _drain(slurm, "n2", Finding("fabric", "mlx5_0/1", "down", FAIL, "ib mlx5_0/1 down (Polling, was 400 Gb/s)",
                                     incident="fabric:mlx5_0/1:down"))
    cluster.scontrol("update", "nodename=n3", "state=drain", "reason=disk swap, ticket 4711")
    # The first 20 characters are what failed and where; ours end in the mark.
    assert (fs[:20], ib[:16]) == ("fs /scratch hung >10", "ib mlx5_0/1 down")
    for node, words in (("n1", "fs /scratch hung >10s"), ("n2", "ib mlx5_0/1 down")):
        assert ours(cluster.show_node(node)["Reason"], words)
    assert not ours(cluster.show_node("n3")["Reason"])
    assert read_cause(cluster.show_node("n1")["Comment"])["check"] == "filesystem"
    sinfo = cluster.run("sinfo", "-R").stdout
    show = cluster.scontrol("show", "node", "n1").stdout
    shown = "\n".join(ln for ln in show.splitlines() if re.match(r"\s*(Reason|Comment)=", ln))
    real = _normalised(f"$ sinfo -R\n{sinfo}$ scontrol show node n1 | grep -E 'Reason|Comment'\n{shown}\n")
    assert _readme_example() == real, f"docs/operations.md's example differs from what Slurm {cluster.version} prints:\n{real}"
