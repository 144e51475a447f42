"""Node reasons stay one clean line of at most 255 bytes whatever users put in names."""
from __future__ import annotations

import os

from slurm_hooks.core.reason import MARK, REASON_LIMIT, make_reason, one_line, shorten_path


def test_control_characters_and_quotes_are_neutralised():
    hostile = 'fs /scratch/a\nb"c\'d`e\x1b[31m;$(reboot)\r\tend'
    r = make_reason([hostile])
    assert "\n" not in r and "\r" not in r and "\x1b" not in r and "\t" not in r
    assert not any(q in r for q in "\"'`")
    assert r == "fs /scratch/a b?c?d?e [31m;$(reboot) end [slurm-hooks]"


def test_non_utf8_bytes_become_replacement_characters():
    name = os.fsdecode(b"/scratch/\xff\xfe/log")   # surrogate escapes, as os.listdir gives
    r = make_reason([f"fs {name} write hung"])
    r.encode("utf-8")   # must not raise
    assert "\ufffd" in r


def test_long_reason_is_cut_at_255_bytes_on_a_character_boundary():
    long_path = "/scratch/" + "é" * 4096
    r = make_reason([f"fs {long_path} write hung >10s (fuse)"])
    assert len(r.encode("utf-8")) <= REASON_LIMIT
    assert r.startswith("fs /scratch/é") and r.endswith("… [slurm-hooks]")


def test_many_parts_keep_whole_ones_and_count_the_rest():
    parts = [f"fs /mnt/shared{i} write hung >10s (nfs4)" for i in range(20)]
    r = make_reason(parts)
    assert len(r.encode()) <= REASON_LIMIT
    assert r.startswith("fs /mnt/shared0 write hung >10s (nfs4); fs /mnt/shared1")
    kept = r.count("write hung")
    assert r.endswith(f"(+{20 - kept} more) [slurm-hooks]")


def test_short_reason_unchanged():
    assert make_reason(["fs /scratch write hung >10s (fuse)"]) == \
        "fs /scratch write hung >10s (fuse) [slurm-hooks]"


def test_the_first_20_columns_are_the_key_words():
    # `sinfo -R` shows a reason's first 20 characters: what failed and where.
    assert make_reason(["fs /scratch hung >10s (write, fuse)"])[:20] == "fs /scratch hung >10"
    assert make_reason(["ib mlx5_0/1 down (was 400 Gb/s)"])[:20] == "ib mlx5_0/1 down (wa"


def test_ours_is_the_mark_at_the_end_never_inside():
    from slurm_hooks.core.reason import is_ours, with_note, words_of
    r = make_reason(["fs /scratch write hung >10s (fuse)"])
    assert is_ours(r) and words_of(r) == "fs /scratch write hung >10s (fuse)"
    # Slurm's notes on a reboot follow the mark.
    assert is_ours(r + " : reboot issued : reboot complete")
    # 25.11 adds `Not responding` to any reason of a node whose slurmd stopped answering.
    assert is_ours(r + " : Not responding") and words_of(r + " : Not responding") == words_of(r)
    assert words_of(r + " : reboot complete") == "fs /scratch write hung >10s (fuse)"
    # A user's file name holding the mark is inside our words, never at their end.
    forged = make_reason([f"job 7 pid 5 stuck in open() on /home/u/x {MARK}"])
    assert forged.endswith(f"{MARK} {MARK}") and words_of(forged).endswith(MARK)
    # An admin's reason is not ours, even one naming slurm-hooks or quoting our mark.
    for admin in ("disk swap", "slurm-hooks said fs hung, checking", f"{MARK} was wrong", "x[slurm-hooks]",
                  "fs /scratch hung [slurm-hooks] : reboot pending"):
        assert not is_ours(admin), admin
    # Reasons of older releases (their prefix) are still ours: an upgrade strands nothing.
    assert is_ours("slurm-hooks: fs /x hung") and words_of("slurm-hooks: fs /x hung") == "fs /x hung"
    assert is_ours("acme: fs /x hung", "acme:") and not is_ours("acme: fs /x hung")
    # A note added keeps the mark last, and the whole within 255 bytes.
    long = make_reason(["fs /scratch/" + "é" * 300])
    noted = with_note(long, "(recovery tried: fuse-abort /scratch)")
    assert noted.endswith(f"(recovery tried: fuse-abort /scratch) {MARK}") and len(noted.encode()) <= REASON_LIMIT


def test_the_cause_is_json_without_blanks_or_bars():
    from slurm_hooks.core.reason import UNKNOWN_CAUSE, cause_group, cause_text, read_cause
    text = cause_text("stuck_tasks", "/home/u/a b|c Reason=x", "/home/u/a b|c", "2026-12-02T03:50:00")
    assert text.startswith("slurm-hooks:cause {") and " " not in text[len("slurm-hooks:cause "):]
    assert "|" not in text
    cause = read_cause(text)
    assert cause == {"check": "stuck_tasks", "where": "/home/u/a b|c Reason=x", "incident": "/home/u/a b|c",
                     "since": "2026-12-02T03:50:00"}
    assert cause_group(cause) == "stuck_tasks /home/u/a b|c Reason=x"
    for other in ("", "rack 12: new PSU", "slurm-hooks:cause {bad json", 'x slurm-hooks:cause {"check":"a"}'):
        assert read_cause(other) is None and cause_group(read_cause(other)) == UNKNOWN_CAUSE


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
