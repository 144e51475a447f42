"""The aggregation of `diagnose`, on node reports as the collector writes them: the
grouping, the order (odd one out first), the summary line, srun's labelled output."""
from __future__ import annotations

from slurm_hooks.diagnose import aggregate, parse_labelled, _ranges


def task(pid, rank, threads, cpu=0.0, gpus=(), step="0"):
    return {"pid": pid, "ppid": 1, "comm": "python3", "rank": rank, "step": step, "cpu_percent": cpu,
            "threads": threads, "gpus": list(gpus), "stacks": "ok"}


def thread(tid, state, frames=(), syscall="futex", wchan="futex_wait_queue", name="MainThread", **kw):
    return {"tid": tid, "state": state, "frames": list(frames), "syscall": syscall, "wchan": wchan,
            "name": name, **kw}


ALLREDUCE = ["allreduce (ProcessGroupNCCL.py:120)", "step (train.py:88)", "<module> (train.py:200)"]


def test_the_incident_shape_64_ranks_one_in_write():
    reports = []
    for n in range(8):
        tasks = []
        for local in range(8):
            rank = n * 8 + local
            pid = 1000 + rank
            if rank == 0:
                threads = [thread(pid, "S", ALLREDUCE[1:]),
                           thread(pid + 500, "D", ["write (logger.py:14)"], syscall="write",
                                  file="/gpfs/run/log.txt", fstype="gpfs", mountpoint="/gpfs",
                                  progress=False, wchan="mmfs_write", name="log", d_seconds=3785.2)]
                gpu = {"index": 0, "utilization": 0}
            else:
                threads = [thread(pid, "R", ALLREDUCE, syscall="running")]
                gpu = {"index": local, "utilization": 100}
            tasks.append(task(pid, str(rank), threads, cpu=0.0 if rank == 0 else 99.0, gpus=[gpu]))
        tasks.append(task(99, "0", [thread(99, "S", [], syscall="wait4")], step="batch") if n == 0 else
                     task(98, None, [thread(98, "S", [])], step="0"))
        reports.append({"node": f"n{n + 1}", "job": "7", "tasks": tasks, "notes": []})
    d = aggregate("7", [f"n{i}" for i in range(1, 9)], reports, {})
    assert d.summary == (
        "rank 0 on n1 is in write() on /gpfs/run/log.txt (gpfs, D for 1h03m) from write (logger.py); "
        "ranks 1-63 on n1,n2,n3,... (8 nodes) busy in allreduce (ProcessGroupNCCL.py) < step (train.py) "
        "< <module> (train.py) (63 of 64); GPU0 on n1 idle, 63 GPUs busy")
    assert [len(g.members) for g in d.groups] == [1, 63]
    assert d.others == 8          # the batch shell (SLURM_PROCID=0 too) and rankless helpers


def test_time_in_d_is_shown_and_a_lower_bound_says_so():
    def odd_one(**kw):
        blocked = thread(10, "D", [], syscall="write", file="/gpfs/log", fstype="gpfs", mountpoint="/gpfs", **kw)
        reports = [{"node": "n1", "job": "7", "tasks": [task(10, "0", [blocked])]},
                   {"node": "n2", "job": "7", "tasks": [task(11, "1", [thread(11, "S", ["wait (a.py:1)"])])]}]
        return aggregate("7", ["n1", "n2"], reports, {}).summary.split(";")[0]

    assert odd_one(progress=False, d_seconds=250.0, d_at_least=True) == \
        "rank 0 on n1 is in write() on /gpfs/log (gpfs, D for ≥4m10s)"
    assert odd_one(progress=False, d_seconds=12.4) == "rank 0 on n1 is in write() on /gpfs/log (gpfs, D for 12s)"
    assert odd_one(progress=False) == "rank 0 on n1 is in write() on /gpfs/log (gpfs, D, no progress)"
    assert odd_one(progress=True) == "rank 0 on n1 is in write() on /gpfs/log (gpfs, D, progressing)"


def test_missing_nodes_are_findings_and_every_rank_alike_says_so():
    reports = [{"node": "n1", "job": "7", "tasks": [task(10, "0", [thread(10, "S", ["wait (a.py:1)"])])]},
               {"node": "n2", "job": "7", "tasks": [task(11, "1", [thread(11, "S", ["wait (a.py:9)"])])]}]
    d = aggregate("7", ["n1", "n2", "n3"], reports, {"n3": "n3 did not answer within 20 s"})
    assert d.summary == "all 2 ranks alike: waiting in wait (a.py), in futex(); n3 did not answer within 20 s"


def test_srun_labelled_output_in_pieces():
    out = ('0: {"node":"n1","job":"7",\n1: {"node":"n2","job":"7","tasks":[]}\n'
           '0: "tasks":[]}\nsrun: something\n 2: not json\n')
    reports, seen = parse_labelled(out, ["n1", "n2", "n3"])
    assert seen == {"n1", "n2"} and sorted(r["node"] for r in reports) == ["n1", "n2"]


def test_rank_ranges():
    assert _ranges(["3", "0", "1", "2", "7", "9", "10"]) == "0-3,7,9-10"
    assert _ranges(["a", "b"]) == "a,b"


def test_a_polling_rank_caught_between_two_sleeps_is_not_the_odd_one_out():
    # Ranks poll in a sleep loop; the collector caught rank 5 awake (no system call to
    # show). The odd one out is still the rank on the lock, and rank 5 counts with its peers.
    barrier = ["wait_in_barrier (ranks.py:12)", "<module> (ranks.py:20)"]
    tasks = [task(100 + r, str(r), [thread(100 + r, "S", barrier, syscall="clock_nanosleep")]) for r in range(8)]
    tasks[5] = task(105, "5", [thread(105, "R", barrier, syscall="running")])
    tasks[3] = task(103, "3", [thread(103, "S", ["take_lock (ranks.py:9)", "<module> (ranks.py:18)"])])
    d = aggregate("7", ["n1"], [{"node": "n1", "job": "7", "tasks": tasks}], {})
    assert d.summary == ("rank 3 on n1 is waiting in take_lock (ranks.py) < <module> (ranks.py), in futex(); "
                         "ranks 0-2,4-7 on n1 waiting in wait_in_barrier (ranks.py) < <module> (ranks.py), "
                         "in clock_nanosleep() (7 of 8)")
    # A rank on another line of the same loop but in a different call stays apart.
    tasks[5] = task(105, "5", [thread(105, "S", barrier, syscall="read")])
    d = aggregate("7", ["n1"], [{"node": "n1", "job": "7", "tasks": tasks}], {})
    assert [len(g.members) for g in d.groups] == [1, 1, 6]
