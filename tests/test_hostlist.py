"""Slurm hostlists expanded in Python, and the Slurm confirmation built on them."""
from __future__ import annotations

import pytest

from slurm_hooks.act.actions import _refused, job_uid
from slurm_hooks.core.hostlist import HostlistError, contains, expand
from slurm_hooks.core.model import Action


def test_expand_ranges_lists_padding_and_several_brackets():
    assert expand("n[1-3,7],gpu[001-002]-ib,login") == ["n1", "n2", "n3", "n7", "gpu001-ib", "gpu002-ib", "login"]
    assert expand("r[1-2]-n[08-09]") == ["r1-n08", "r1-n09", "r2-n08", "r2-n09"]
    assert expand("") == [] and expand("(null)") == ["(null)"]


@pytest.mark.parametrize("bad", ["n[1-3", "n1-3]", "n[a-b]", "n[5-1]", "n[1-9999999]"])
def test_bad_hostlists_are_errors_that_name_the_value(bad):
    with pytest.raises(HostlistError) as e:
        expand(bad)
    assert repr(bad.split(",")[0]) in str(e.value) or bad in str(e.value)
    assert not contains(bad, "n1")


def test_slurm_must_place_the_job_on_this_node_and_give_it_the_tasks_user():
    info = {"JobId": "7", "UserId": "alice(1001)", "NodeList": "n[1-3]"}
    assert job_uid(info) == 1001
    assert _refused(Action("requeue", node="n2", job="7", uid=1001), info) is None
    elsewhere = _refused(Action("requeue", node="n9", job="7", uid=1001), info)
    assert elsewhere.outcome == "skipped" and "runs on n[1-3], not on n9" in elsewhere.message
    other = _refused(Action("comment", node="n1", job="7", uid=1002), info)
    assert "belongs to uid 1001, the diagnosed task to uid 1002" in other.message
    # A finding without a task's uid (a GPU's job) still needs the node.
    assert _refused(Action("comment", node="n3", job="7"), info) is None
