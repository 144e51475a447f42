"""Parsing scontrol's one-line Key=Value output, including free text with spaces."""
from __future__ import annotations

from slurm_hooks.slurm.api import SlurmCode, SlurmError, SlurmUnavailable, strip_reason_stamp
from slurm_hooks.slurm.scontrol import parse_oneliner, said_code, step_refused

NODE = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.12 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
        "NodeHostName=n1 Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC RealMemory=1 "
        "State=IDLE+DRAIN ThreadsPerCore=1 Partitions=debug "
        "Reason=fs /scratch write hung >10s (fuse); x=y z [slurm-hooks] [root@2026-11-29T22:20:45]")
JOB = ("JobId=12 JobName=train UserId=root(0) Priority=1 JobState=RUNNING Reason=None "
       "Requeue=1 Restarts=0 BatchFlag=1 AdminComment=slurm-hooks: job 12 rank 0 pid 4 stuck a=b "
       "NodeList=n[1-3] Command=/tmp/run me.sh WorkDir=/tmp")


def test_node_reason_with_spaces_and_equals_stays_whole():
    d = parse_oneliner(NODE)
    assert d["State"] == "IDLE+DRAIN"
    assert d["OS"] == "Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC"
    assert d["Reason"] == "fs /scratch write hung >10s (fuse); x=y z [slurm-hooks] [root@2026-11-29T22:20:45]"
    assert strip_reason_stamp(d["Reason"]) == "fs /scratch write hung >10s (fuse); x=y z [slurm-hooks]"


def test_job_free_text_fields():
    d = parse_oneliner(JOB)
    assert d["AdminComment"] == "slurm-hooks: job 12 rank 0 pid 4 stuck a=b"
    assert d["NodeList"] == "n[1-3]" and d["Command"] == "/tmp/run me.sh" and d["WorkDir"] == "/tmp"
    assert d["Restarts"] == "0" and d["Reason"] == "None"


def test_a_newline_in_a_value_stays_in_its_record():
    """Slurm 25.11 prints an AdminComment written with a newline as it is, inside the
    `-o` one-liner: the line after it continues the record, never starts another."""
    from slurm_hooks.slurm.scontrol import records
    out = ("JobId=7 JobName=a AdminComment=ops: keep\n'x';$(rm -rf /) ok StdErr= StdIn=/dev/null\n"
           "JobId=8 JobName=b AdminComment=(null) StdErr=\n")
    first, second = [parse_oneliner(r) for r in records(out, "JobId=")]
    assert first["AdminComment"] == "ops: keep\n'x';$(rm -rf /) ok" and first["StdIn"] == "/dev/null"
    assert second["JobId"] == "8"


def test_squeue_job_lines_take_only_the_admin_comment_as_free_text():
    """Jobs come from squeue's fixed fields, the AdminComment last: a line that does not
    start a record continues the AdminComment before it (only admins write one)."""
    from slurm_hooks.slurm.scontrol import JOB_FIELDS, JOB_FORMAT, parse_job_lines
    assert JOB_FORMAT.split(",")[-1] == "admin_comment:0" and len(JOB_FIELDS) == 12
    out = ("12|12|N/A|1001|alice|RUNNING|n[1-3]|3|1|1|0|ops: keep\n"
           "7|7|N/A|0|root|PENDING||1|0|0|2|(null)\n"
           "30|27|3|1001|alice|RUNNING|n2|1|1|1|1|slurm-hooks: job 27_3 on n2 | a|b\n"
           "31|27|4-9%2|1001|alice|PENDING||1|1|1|0|line one\n"
           "99|99|N/A|0|root|RUNNING|n1|1|1|1|0|written\n")
    jobs = parse_job_lines(out)
    assert [j["JobId"] for j in jobs] == ["12", "7", "30", "31", "99"]
    assert jobs[0] == {"JobId": "12", "UserId": "alice(1001)", "JobState": "RUNNING", "NodeList": "n[1-3]",
                       "NumNodes": "3", "Requeue": "1", "BatchFlag": "1", "Restarts": "0",
                       "AdminComment": "ops: keep"}
    assert jobs[1]["NodeList"] == "(null)" and "ArrayJobId" not in jobs[1]
    assert (jobs[2]["ArrayJobId"], jobs[2]["ArrayTaskId"]) == ("27", "3")
    assert jobs[2]["AdminComment"] == "slurm-hooks: job 27_3 on n2 | a|b"
    assert jobs[3]["ArrayTaskId"] == "4-9%2"
    # An admin's line break: the next line is part of the comment, not a job.
    jobs = parse_job_lines("5|5|N/A|0|root|RUNNING|n1|1|1|1|0|first\nsecond JobId=6\n")
    assert len(jobs) == 1 and jobs[0]["AdminComment"] == "first\nsecond JobId=6"


# Slurm's stamp as scontrol appends it, and stamps a job user could write into a reason
# of ours through a file name (our reasons quote paths).
REAL = " [root@2026-11-29T22:20:46]"
LATER = " [root@2026-11-29T22:20:47]"


def node_line(name: str, reason: str, after: str = "") -> str:
    return (f"NodeName={name} Arch=x86_64 CPUTot=2 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=debug "
            f"Reason={reason}{after}")


def test_only_slurms_own_stamp_at_the_end_is_the_stamp():
    forged = "fs /scratch write hung >10s (fuse) /scratch/u/a [x@2020-01-01T00:00:00] Comment=b [slurm-hooks]"
    # scontrol's line: the reason runs to the last stamp, not to the first one a file
    # name holds, and what follows the real one (an admin's Comment) is its own field.
    d = parse_oneliner(node_line("n1", forged + REAL, " Comment=ops ReservationName=maint"))
    assert d["Reason"] == forged + REAL
    assert (d["Comment"], d["ReservationName"]) == ("ops", "maint")
    assert strip_reason_stamp(d["Reason"]) == forged
    # A reason without a stamp (sinfo's, node_state's) keeps a user's text at its end.
    assert strip_reason_stamp("fs /s/a [x@0000]") == "fs /s/a [x@0000]"
    from slurm_hooks.slurm.api import reason_stamp, stamp_time
    assert stamp_time(d["Reason"]) == "2026-11-29T22:20:46"
    assert reason_stamp(d["Reason"]) == (forged, "root", "2026-11-29T22:20:46")
    for tail in ("[x@0000]", " [x@0000]", " [x@2020-01-01T00:00]", " [a b@2020-01-01T00:00:00]",
                 " [x@2020-01-01T00:00:00]x", " [x[@2020-01-01T00:00:00]", "/[x@2020-01-01T00:00:00]"):
        assert strip_reason_stamp(f"fs /s/a{tail}") == f"fs /s/a{tail}"
        assert stamp_time(f"fs /s/a{tail}") == ""
    # An opening bracket a file name leaves unclosed is not the start of the stamp.
    assert strip_reason_stamp("fs /s/[a@0 [slurm-hooks]" + REAL) == "fs /s/[a@0 [slurm-hooks]"
    # A reason Slurm gave no time keeps every piece to the end of the line, as before.
    d = parse_oneliner(node_line("n1", "Kill task failed (JobId=7 StepId=0)"))
    assert d["Reason"] == "Kill task failed (JobId=7 StepId=0)"


class _Nodes:
    def __init__(self, lines):
        self.records = [parse_oneliner(line) for line in lines]

    def list_nodes_alone(self, mine="", prefix=""):
        from slurm_hooks.slurm.api import NodeTable
        return NodeTable(self.records)

    def list_nodes(self):
        return self.records

    def list_jobs(self):
        return []


def test_a_forged_stamp_neither_reorders_the_breaker_nor_is_cut_from_the_reason():
    """Two nodes drained by us, one slot: the earlier drain keeps it. n2's reason names
    a file whose name reads as an older stamp; it must not win the slot."""
    from slurm_hooks.core.config import PolicyConfig
    from slurm_hooks.decide.breaker import cluster_view, keepers
    from slurm_hooks.views.status import collect
    policy = PolicyConfig(max_drained_nodes=1, max_drained_fraction=0)
    for words in ("fs /scratch hung /scratch/u/[a@0",
                  "fs /scratch hung /scratch/u/a [x@2020-01-01T00:00:00] Comment=x"):
        forged = f"{words} [slurm-hooks]"
        slurm = _Nodes([node_line("n1", "fs /scratch hung [slurm-hooks]" + REAL), node_line("n2", forged + LATER)])
        view = cluster_view(slurm, "slurm-hooks:")
        assert view.stamps == {"n1": REAL[7:-1], "n2": LATER[7:-1]}
        assert view.ours["n2"] == words
        assert keepers(view, policy) == ["n1"]
        [group] = collect(slurm, "slurm-hooks:", now=0).groups
        shown = {d.node: (d.reason, d.since) for d in group.nodes}
        assert shown["n2"] == (words, LATER[7:-1])
    # A drain by an older release (its prefix, no mark) is still read as ours.
    slurm = _Nodes([node_line("n1", "slurm-hooks: fs /scratch hung" + REAL)])
    assert cluster_view(slurm, "slurm-hooks:").ours == {"n1": "fs /scratch hung"}


def test_pyslurm_records_carry_the_stamp_as_scontrol_prints_it():
    """pyslurm gives the reason alone; the backend appends Slurm's stamp itself, and
    only where Slurm has a time for it (scontrol prints none then either)."""
    import time

    from slurm_hooks.slurm.pyslurm import _node_dict

    class Node:
        name, state, configured_gres, reason_user = "n1", "IDLE+DRAIN", {}, "root"
        reason = "fs /s/[x@2020-01-01T00:00:00] [slurm-hooks]"
        reason_time = None
        comment = None

    assert _node_dict(Node())["Reason"] == Node.reason
    Node.reason_time = time.mktime((2026, 11, 29, 22, 20, 46, 0, 0, -1))
    assert _node_dict(Node())["Reason"] == Node.reason + REAL
    assert strip_reason_stamp(_node_dict(Node())["Reason"]) == Node.reason


def test_slurm_words_become_codes_in_one_place():
    cases = {
        "slurm_load_node error: Unable to contact slurm controller (connect failure)": SlurmCode.UNREACHABLE,
        "Could not establish a configuration source": SlurmCode.NO_CONFIG,
        "Node n9 not found": SlurmCode.UNKNOWN_NODE,
        "slurm_load_jobs error: Invalid job id specified": SlurmCode.UNKNOWN_JOB,
        "No job steps exist on this node.": SlurmCode.NO_STEPS,
        "Requested operation is presently disabled for job 7: Job is pending execution": SlurmCode.JOB_PENDING,
        "reboot_nodes error: RebootProgram isn't defined": SlurmCode.NO_REBOOT_PROGRAM,
        "Access/permission denied": SlurmCode.REFUSED,
    }
    assert {said: said_code(said) for said in cases} == cases


def test_an_error_carries_its_code_and_its_words_apart():
    assert SlurmError("x").code == SlurmCode.REFUSED
    assert SlurmError("Invalid job id", code=SlurmCode.UNKNOWN_JOB).code == SlurmCode.UNKNOWN_JOB
    assert SlurmUnavailable("x").code == SlurmCode.UNREACHABLE and str(SlurmUnavailable("x")) == "x"


def test_srun_refusing_a_step_to_someone_not_the_job_s_owner():
    assert step_refused("srun: error: Unable to create step for job 7: Access/permission denied")
    assert not step_refused("srun: error: b3: task 2: Exited with exit code 1")


def test_the_breakers_lean_parse_reads_what_the_whole_parse_reads():
    """The node table is read on every failing run (thousands of nodes): the lean parse
    takes NodeName, State, Reason, Comment and what follows them, exactly as the whole
    parse does, forged stamps, keys inside free text and reasons without a stamp too."""
    from slurm_hooks.slurm.scontrol import parse_nodes_lean
    comment = 'slurm-hooks:cause {"check":"filesystem","where":"/g a=b","mounts":[["s","gpfs","/g CPUTot=1"]]}'
    lines = [
        NODE,
        node_line("n2", "fs /scratch hung /scratch/u/a [x@2020-01-01T00:00:00] Comment=b [slurm-hooks]" + REAL,
                  f" Comment={comment} Extra=e ReservationName=maint"),
        node_line("n3", "Kill task failed (JobId=7 StepId=0)"),
        node_line("n4", "Not responding" + REAL, " Comment=ops CPUTot=9 later words"),
        "NodeName=n5 Arch=x86_64 CPUTot=2 State=IDLE ThreadsPerCore=1 Partitions=debug",
        f"NodeName=n6 Arch=x86_64 CPUTot=2 State=MIXED Partitions=debug Comment={comment}",
        "NodeName=n7 Arch=x86_64 CPUTot=2 ThreadsPerCore=1",            # no State: the whole parse
        node_line("n8", "fs /s/[a@0 [slurm-hooks]" + REAL),
    ]
    lean = parse_nodes_lean(lines)
    for line, got in zip(lines, lean):
        whole = parse_oneliner(line)
        assert {"NodeName", "State"} <= set(got) or "State" not in whole, got
        assert got == {k: whole[k] for k in got}, line
        for key in ("NodeName", "State", "Reason", "Comment", "Extra", "ReservationName"):
            assert got.get(key) == whole.get(key), (key, line)
    assert lean[1]["Comment"] == comment and lean[3]["Comment"] == "ops CPUTot=9 later words"


def test_the_library_childs_search_for_our_words_finds_each_text_that_holds_one():
    """slurmlib.py searches every node's Reason (and Comment) for our words at once, the
    texts joined by NUL: it finds exactly the texts a search of each would, at the first
    and the last, next to each other, several times in one, and never across two."""
    import random

    from slurm_hooks.slurm.slurmlib import _holding
    words = (b"[slurm-hooks]", b"site:")
    texts = [b"[slurm-hooks]", None, b"", b"fs hung [slurm-hooks]", b"site: a site: b", b"sit", b"e: no",
             b"Not responding", None, b"site:"]
    assert _holding(texts, words) == {0, 3, 4, 9}
    assert _holding([None, None], words) == set() and _holding([], words) == set()
    pieces = [b"[slurm-hooks]", b"site:", b"Not responding", b" ", b"slurm", b"-hooks]", b"si", b"te:", b"\xff"]
    rng = random.Random(47)
    for _ in range(300):
        texts = [None if rng.random() < 0.2 else b"".join(rng.choice(pieces) for _ in range(rng.randrange(4)))
                 for _ in range(rng.randrange(12))]
        assert _holding(texts, words) == {i for i, t in enumerate(texts) if t and any(w in t for w in words)}, texts
