"""Parsing scontrol's one-line Key=Value output, including free text with spaces."""
from __future__ import annotations

from slurm_hooks.slurm import parse_oneliner, strip_reason_stamp

NODE = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.12 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
        "NodeHostName=n1 Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC RealMemory=1 "
        "State=IDLE+DRAIN ThreadsPerCore=1 Partitions=debug "
        "Reason=slurm-hooks: fs /scratch write hung >10s (fuse); x=y z [root@2026-11-29T22:20:45]")
JOB = ("JobId=12 JobName=train UserId=root(0) Priority=1 JobState=RUNNING Reason=None "
       "Requeue=1 Restarts=0 BatchFlag=1 AdminComment=slurm-hooks: job 12 rank 0 pid 4 stuck a=b "
       "NodeList=n[1-3] Command=/tmp/run me.sh WorkDir=/tmp")


def test_node_reason_with_spaces_and_equals_stays_whole():
    d = parse_oneliner(NODE)
    assert d["State"] == "IDLE+DRAIN"
    assert d["OS"] == "Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC"
    assert d["Reason"] == "slurm-hooks: fs /scratch write hung >10s (fuse); x=y z [root@2026-11-29T22:20:45]"
    assert strip_reason_stamp(d["Reason"]) == "slurm-hooks: fs /scratch write hung >10s (fuse); x=y z"


def test_job_free_text_fields():
    d = parse_oneliner(JOB)
    assert d["AdminComment"] == "slurm-hooks: job 12 rank 0 pid 4 stuck a=b"
    assert d["NodeList"] == "n[1-3]" and d["Command"] == "/tmp/run me.sh" and d["WorkDir"] == "/tmp"
    assert d["Restarts"] == "0" and d["Reason"] == "None"


def test_a_newline_in_a_value_stays_in_its_record():
    """Slurm 25.11 prints an AdminComment written with a newline as it is, inside the
    `-o` one-liner: the line after it continues the record, never starts another."""
    from slurm_hooks.slurm import records
    out = ("JobId=7 JobName=a AdminComment=ops: keep\n'x';$(rm -rf /) ok StdErr= StdIn=/dev/null\n"
           "JobId=8 JobName=b AdminComment=(null) StdErr=\n")
    first, second = [parse_oneliner(r) for r in records(out, "JobId=")]
    assert first["AdminComment"] == "ops: keep\n'x';$(rm -rf /) ok" and first["StdIn"] == "/dev/null"
    assert second["JobId"] == "8"
