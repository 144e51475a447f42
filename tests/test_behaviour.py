"""What a hook changes about a run is said once, in core/behaviour.py: no other module
branches on a hook's name."""
from __future__ import annotations

import ast

import pytest
from helpers import ROOT

from slurm_hooks.core.behaviour import BEHAVIOURS, behaviour

HOOK_NAMES = set(BEHAVIOURS)


def _is_hook(node) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name == "hook"


def _names_a_hook(node) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in HOOK_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_hook(e) for e in node.elts)
    return False


def hook_branches(tree) -> list[int]:
    """Lines comparing something called `hook` with a hook's name (==, !=, in, not in),
    or indexing a table by hook name literal."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_hook(s) for s in sides) and any(_names_a_hook(s) for s in sides):
                lines.append(node.lineno)
    return lines


def test_no_module_branches_on_a_hook_name():
    found = []
    for path in (ROOT / "slurm_hooks").rglob("*.py"):
        if path.name == "behaviour.py":
            continue        # the table itself
        for line in hook_branches(ast.parse(path.read_text())):
            found.append(f"{path.relative_to(ROOT)}:{line}")
    assert not found, found


def test_the_scan_finds_a_branch():
    assert hook_branches(ast.parse('if ctx.hook == "prolog":\n    pass\n')) == [1]
    assert hook_branches(ast.parse('x = hook in ("prolog", "epilog")\n')) == [1]
    assert hook_branches(ast.parse('x = ctx.behaviour.for_job\n')) == []


def test_what_each_run_may_do():
    hc, pro, epi, look = (behaviour(h) for h in ("healthcheck", "prolog", "epilog", "check"))
    # Only real hooks keep what they decide; a look keeps nothing and asks Slurm nothing.
    assert hc.commits and pro.commits and epi.commits and not look.commits
    assert look.looks_only and not any(b.looks_only for b in (hc, pro, epi))
    # One writer of the textfile; one periodic run that follows up on the node.
    assert [b.name for b in BEHAVIOURS.values() if b.writes_metrics] == ["healthcheck"]
    assert [b.name for b in BEHAVIOURS.values() if b.tends_node] == ["healthcheck"]
    # The job hooks run for a job; the prolog acts through its exit, the epilog drains first.
    assert pro.for_job and epi.for_job and not hc.for_job and not look.for_job
    assert pro.acts_by_exit and not epi.acts_by_exit and epi.drains_before_exit
    assert pro.generic_reason == "Prolog error" and epi.generic_reason == "Epilog error|Kill task failed"
    # A look runs the site checks a health check would.
    assert look.site_hook == "healthcheck"
    # A configuration error holds no job up and drains nothing; by hand it says 2.
    assert (pro.config_error_exit, epi.config_error_exit, hc.config_error_exit) == (0, 0, 2)
    with pytest.raises(ValueError, match="unknown hook 'nosuch'"):
        behaviour("nosuch")
