"""The kernel log: matchers against their own samples, and the real /dev/kmsg."""
from __future__ import annotations

import os
import uuid

import pytest

from slurm_hooks import kmsg


def test_every_matcher_matches_its_sample():
    for m in kmsg.MATCHERS:
        assert m.pattern.search(m.sample), m.event


def test_parse_record_with_continuation_lines():
    rec = kmsg.parse_record(b"4,1234,5678901,-;INFO: task python:42 blocked for more than 122 seconds.\n SUBSYSTEM=x\n")
    assert (rec.prio, rec.seq, rec.usec) == (4, 1234, 5678901)
    assert rec.text == "INFO: task python:42 blocked for more than 122 seconds."


@pytest.mark.skipif(not os.access("/dev/kmsg", os.W_OK), reason="needs root to write the kernel log")
def test_real_kernel_log_read_back_from_a_position():
    before = kmsg.read()
    last = before[-1].seq if before else -1
    tag = uuid.uuid4().hex[:8]
    with open("/dev/kmsg", "w") as f:
        f.write(f"<4>INFO: task t{tag}:4242 blocked for more than 122 seconds.\n")
    new = kmsg.read(after_seq=last)
    assert [r.text for r in new if tag in r.text] == [f"INFO: task t{tag}:4242 blocked for more than 122 seconds."]
    hits = [(r, m) for r, m in kmsg.match(new, "hung_task") if tag in r.text]
    assert len(hits) == 1 and hits[0][1].group("pid") == "4242" and hits[0][1].group("seconds") == "122"
    # Reading from the newest position finds nothing older.
    assert not [r for r in kmsg.read(after_seq=new[-1].seq) if tag in r.text]
