"""Node reasons stay one clean line of at most 255 bytes whatever users put in names."""
from __future__ import annotations

import os

from slurm_hooks.core.reason import REASON_LIMIT, make_reason, one_line, shorten_path


def test_control_characters_and_quotes_are_neutralised():
    hostile = 'fs /scratch/a\nb"c\'d`e\x1b[31m;$(reboot)\r\tend'
    r = make_reason("slurm-hooks:", [hostile])
    assert "\n" not in r and "\r" not in r and "\x1b" not in r and "\t" not in r
    assert not any(q in r for q in "\"'`")
    assert r == "slurm-hooks: fs /scratch/a b?c?d?e [31m;$(reboot) end"


def test_non_utf8_bytes_become_replacement_characters():
    name = os.fsdecode(b"/scratch/\xff\xfe/log")   # surrogate escapes, as os.listdir gives
    r = make_reason("slurm-hooks:", [f"fs {name} write hung"])
    r.encode("utf-8")   # must not raise
    assert "\ufffd" in r


def test_long_reason_is_cut_at_255_bytes_on_a_character_boundary():
    long_path = "/scratch/" + "é" * 4096
    r = make_reason("slurm-hooks:", [f"fs {long_path} write hung >10s (fuse)"])
    assert len(r.encode("utf-8")) <= REASON_LIMIT
    assert r.startswith("slurm-hooks: fs /scratch/é") and r.endswith("…")


def test_many_parts_keep_whole_ones_and_count_the_rest():
    parts = [f"fs /mnt/shared{i} write hung >10s (nfs4)" for i in range(20)]
    r = make_reason("slurm-hooks:", parts)
    assert len(r.encode()) <= REASON_LIMIT
    assert r.startswith("slurm-hooks: fs /mnt/shared0 write hung >10s (nfs4); fs /mnt/shared1")
    kept = r.count("write hung")
    assert r.endswith(f"(+{20 - kept} more)")


def test_short_reason_unchanged():
    assert make_reason("slurm-hooks:", ["fs /scratch write hung >10s (fuse)"]) == \
        "slurm-hooks: fs /scratch write hung >10s (fuse)"


def test_shorten_path_keeps_both_ends():
    p = "/gpfswork/" + "x" * 300 + "/main_log.txt"
    s = shorten_path(p, 60)
    assert len(s) == 60 and s.startswith("/gpfswork/") and s.endswith("main_log.txt")
    assert one_line("a\n\nb") == "a b"


def test_durations_read_like_a_clock():
    from slurm_hooks.core.reason import duration
    assert [duration(s) for s in (0, 12.7, 59.9, 60, 250, 3599, 3785, 90000)] == \
        ["0s", "12s", "59s", "1m00s", "4m10s", "59m59s", "1h03m", "25h00m"]
    assert duration(250, at_least=True) == "≥4m10s"
