"""The session's "leaves nothing behind" check counts this session's own doing only: on a
shared host other sessions write the same journal and make their own users' homes in
/tmp at the same time."""
from __future__ import annotations

import json

from conftest import WATCHED, left_behind, own_records


def test_only_the_sessions_own_journal_lines_count(tmp_path):
    journal = tmp_path / "journal.jsonl"
    old = json.dumps({"hook": "healthcheck", "config": "/etc/slurm-hooks/slurm-hooks.yaml"}) + "\n"
    journal.write_text(old)
    theirs = json.dumps({"hook": "check", "config": "/tmp/pytest-of-root/pytest-7/t0/c.yaml"}) + "\n"
    mine = json.dumps({"hook": "prolog", "error": f"{tmp_path}/c.yaml:3: bad"}) + "\n"
    with open(journal, "a") as f:
        f.write(theirs)
    marks = (str(tmp_path),)
    assert own_records(str(journal), len(old), marks) == []
    with open(journal, "a") as f:
        f.write(mine)
    assert own_records(str(journal), len(old), marks) == [mine.strip()]
    # Replaced by a shorter file (rotated): all of it is read.
    journal.write_text(mine)
    assert own_records(str(journal), len(old) + len(theirs), marks) == [mine.strip()]
    assert own_records(str(tmp_path / "none.jsonl"), 0, marks) == []


def test_another_sessions_changes_are_not_left_behind_by_this_one():
    before = {d: {} for d in WATCHED}
    after = {"/var/log/slurm-hooks": {"journal.jsonl": (20, 2)}, "/run/slurm-hooks": {},
             "/tmp": {"shk-sec-mine": (0, 1), "shk-sec-theirs": (0, 1)}}
    mine = {("/var/log/slurm-hooks", "journal.jsonl"), ("/tmp", "shk-sec-mine")}
    assert left_behind(before, after, lambda d, n: (d, n) in mine) == {
        "/var/log/slurm-hooks": ["journal.jsonl"], "/tmp": ["shk-sec-mine"]}
    assert left_behind(before, after, lambda d, n: False) == {}
