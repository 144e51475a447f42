"""The kernel log: matchers against their own samples, and the real /dev/kmsg."""
from __future__ import annotations

import os

import pytest

from slurm_hooks.host import kmsg


def test_every_matcher_matches_its_whole_sample_line():
    assert {m.event for m in kmsg.MATCHERS} >= {"xid", "hung_task"}
    for m in kmsg.MATCHERS:
        rec = kmsg.Record(seq=1, usec=1, prio=4, text=m.sample, facility=0)
        [(_, found)] = kmsg.match([rec], m.event)
        # the whole line but perhaps its closing full stop
        assert m.sample.startswith(found.group(0)) and len(found.group(0)) >= len(m.sample) - 1, m.event


def test_only_kernel_facility_records_at_the_start_of_the_message_match():
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    hung = "INFO: task python:4242 blocked for more than 999 seconds."
    forged = [
        # what a user writing to /dev/kmsg gets: the user facility (prio 14 = user.info)
        kmsg.parse_record(f"14,10,1000,-;{xid}".encode()),
        kmsg.parse_record(f"14,11,1000,-;{hung}".encode()),
        # the kernel's own segfault line, ending with a file name the user chose
        kmsg.parse_record(f"6,12,1000,-;python3[99]: segfault at 0 ip 00007f sp 00007f error 4 in {xid}[7f+1000]".encode()),
        kmsg.parse_record(f"6,13,1000,-;python3[99]: segfault at 0 ip 00007f sp 00007f error 4 in {hung}[7f+1000]".encode()),
    ]
    assert [r.facility for r in forged] == [1, 1, 0, 0]
    assert list(kmsg.match(forged, "xid")) == [] and list(kmsg.match(forged, "hung_task")) == []
    real = [kmsg.parse_record(f"4,20,1000,-;{xid}".encode()), kmsg.parse_record(f"3,21,1000,-;{hung}".encode())]
    assert [m.group("xid") for _, m in kmsg.match(real, "xid")] == ["79"]
    assert [m.group("pid") for _, m in kmsg.match(real, "hung_task")] == ["4242"]


def test_a_file_of_records_reads_like_the_device(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text("4,1,10,-;first\n6,2,20,-;second\n\n14,3,30,-;third\n")
    assert [(r.seq, r.text, r.facility) for r in kmsg.read(path=str(log))] == \
        [(1, "first", 0), (2, "second", 0), (3, "third", 1)]
    assert [r.seq for r in kmsg.read(after_seq=2, path=str(log))] == [3]


def test_parse_record_with_continuation_lines():
    rec = kmsg.parse_record(b"4,1234,5678901,-;INFO: task python:42 blocked for more than 122 seconds.\n SUBSYSTEM=x\n")
    assert (rec.prio, rec.seq, rec.usec) == (4, 1234, 5678901)
    assert rec.text == "INFO: task python:42 blocked for more than 122 seconds."


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="needs root to read the kernel log")
def test_the_real_kernel_log_reads_in_order_and_from_a_position():
    """The real device, read only: tests never write into the host's kernel log (what a
    program writes stays there until reboot; records of the user facility are covered
    on data above)."""
    records = kmsg.read()
    assert records, "a running kernel has logged something since boot"
    seqs = [r.seq for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert any(r.from_kernel for r in records), "the kernel's own records are read as such"
    middle = seqs[len(seqs) // 2]
    assert [r.seq for r in kmsg.read(after_seq=middle)][:1] == [s for s in seqs if s > middle][:1]
    assert kmsg.read(after_seq=seqs[-1] + 10**9) == []


def test_a_log_with_nothing_to_match_compiles_no_pattern():
    """A healthy node's log is read on every health check: records that do not start as
    a matcher's messages start are never tried against its pattern, so `re` is never
    imported for them; and every matcher's samples start with its declared start."""
    import subprocess
    import sys
    for m in kmsg.MATCHERS:
        assert m.sample.startswith(m.start), m.event
    code = ("import sys\nfrom slurm_hooks.host import kmsg\n"
            "recs = [kmsg.Record(seq=i, usec=i, prio=6, text=f'eth0: link up {i}', facility=0) for i in range(5000)]\n"
            "assert not list(kmsg.match(recs, 'xid')) and not list(kmsg.match(recs, 'hung_task'))\n"
            "print('re' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stdout + r.stderr
