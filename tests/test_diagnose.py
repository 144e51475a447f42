"""The aggregation of `diagnose`, on node reports as the collector writes them: the
grouping, the order (odd one out first), the summary line, srun's labelled output."""
from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

from slurm_hooks.host.runner import SAFE_PATH, run_command
from slurm_hooks.views.diagnose import _ranges, aggregate, default_collector, parse_labelled, render, step_env

# What a terminal acts on, a line break, text turned right to left (reason._UNPRINTABLE).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
HOSTILE = "\x1b]0;pwn\x07\n\u202e\x1b[2J"


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
        "< <module> (train.py) (63 of 64); GPU0 of rank 0 on n1 at 0% while 63 GPUs busy")
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


def test_what_nodes_send_back_is_printable_in_every_output():
    """A node's document is read like any user text: every string in it (names,
    command lines, paths, fstypes, frames, thread names, notes, errors) reaches the
    text and the JSON with its control characters written out."""
    h = HOSTILE
    stuck = thread(11, "D", [f"write{h} (log{h}.py:3)"], syscall="write", file=f"/gpfs/{h}.log",
                   fstype=f"fuse.{h}", mountpoint=f"/gpfs{h}", progress=False, name=f"log{h}", comm=f"c{h}")
    waiting = thread(12, "S", [f"wait{h} (a{h}.py:1)"], name="MainThread")
    tasks = [dict(task(11, "0", [stuck]), comm=f"py{h}", cmdline=f"python {h}", stacks=f"py-spy: {h}"),
             dict(task(12, "1", [waiting]), comm=f"py{h}", cmdline=f"python {h}", inspect=f"failed: {h}")]
    doc = {"node": "n1", "job": "7", "tasks": tasks, "notes": [f"NVML: {h}"], "pyspy": f"/x{h}"}
    out = "".join(f"0: {json.dumps(doc)[i:i + 100]}\n" for i in range(0, len(json.dumps(doc)), 100))
    reports, seen = parse_labelled(out, ["n1"])
    assert seen == {"n1"}
    d = aggregate("7", ["n1"], reports, {})
    text = render(d)
    lines = text.split("\n")
    assert [ln for ln in lines if CONTROL.search(ln)] == [], text
    assert "\\x1b]0;pwn\\x07\\x0a\\u202e\\x1b[2J" in lines[1], text
    assert any(ln.startswith("   note: n1: NVML: \\x1b]0;pwn") for ln in lines), text
    for dumped in (json.dumps(d.to_json(), ensure_ascii=False), d.summary):
        assert CONTROL.search(dumped) is None, dumped


# A package of the collector's name, wherever somebody could put one: it says so if run.
PLANTED = "open({marker!r}, 'a').write({where!r} + ' ' + __name__ + '\\n')\ndef main(argv=None):\n    return 0\n"


def test_the_collector_runs_this_installation_whatever_the_callers_directory_and_python_path(tmp_path, monkeypatch):
    """diagnose runs the collector as its caller (root) on every node: a `slurm_hooks/`
    in the caller's directory or on PYTHONPATH must never be what runs."""
    marker = tmp_path / "planted-code-ran"
    for where in ("cwd", "pythonpath"):
        package = tmp_path / where / "slurm_hooks"
        package.mkdir(parents=True)
        for name in ("__init__.py", "__main__.py", "cli.py"):
            (package / name).write_text(PLANTED.format(marker=str(marker), where=where))
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "pythonpath"))
    env = step_env(SimpleNamespace(env={"PATH": SAFE_PATH, "LANG": "C", "LC_ALL": "C"}))
    assert [k for k in env if k.startswith("PYTHON")] == []
    argv = [*default_collector(), "job-report", "424242", "--json", "--node=n1", "--sample=0",
            "--deadline=5", "--no-stacks"]
    # As fan_out starts it (through srun, which hands on the caller's directory and
    # environment); and with PYTHONPATH set all the same, for the interpreter to ignore.
    for child_env in (env, dict(env, PYTHONPATH=str(tmp_path / "pythonpath"))):
        r = run_command(argv, 60, child_env)
        assert not marker.exists(), marker.read_text()
        assert r.rc == 0, r.stderr
        doc = json.loads(r.stdout)
        assert (doc["job"], doc["node"], doc["tasks"]) == ("424242", "n1", [])


def test_an_answer_is_the_node_ssh_reached_whatever_its_document_says():
    from slurm_hooks.views.diagnose import _keyed, node_document
    out = "noise\n" + json.dumps({"node": "n3" + HOSTILE, "job": "99", "tasks": [], "notes": []}) + "\n"
    doc = _keyed(node_document(out), "n1", "7")
    assert (doc["node"], doc["job"]) == ("n1", "7")
    assert any("its report named node 'n3\\x1b]0;pwn" in n and "kept as n1's" in n for n in doc["notes"])
    assert not any(CONTROL.search(n) for n in doc["notes"])
    assert node_document("no json here\n") is None


def test_the_remote_command_carries_nothing_of_the_callers_environment():
    from slurm_hooks.views.fanout import NODE, remote_command
    argv = remote_command(["/usr/bin/python3", "-I", "-c", "x"], "7", 0.5, 3.0, False, "/etc/x.yaml")
    assert argv[:6] == ["/usr/bin/env", "-i", "-C", "/", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]
    assert "SLURM_HOOKS_CONFIG=/etc/x.yaml" in argv and argv[argv.index("--node") + 1] == NODE
    assert not [a for a in argv if a.startswith("PYTHON")]


def test_how_a_node_s_ssh_ended_is_read_from_ssh_s_words_once():
    from slurm_hooks.views.diagnose import _no_answer
    from slurm_hooks.views.fanout import ANSWERED, SSH_FAILED, SSH_TIMED_OUT, NodeAnswer
    hung = NodeAnswer(node="b3", rc=255, stderr="ssh: connect to host b3 port 22: Connection timed out\n\n")
    refused = NodeAnswer(node="b3", rc=255, stderr="root@b3: Permission denied (publickey).\n")
    said = NodeAnswer(node="b3", rc=3, stderr="the collector timed out\n")
    assert [a.code for a in (hung, refused, said)] == [SSH_TIMED_OUT, SSH_FAILED, ANSWERED]
    assert _no_answer("b3", hung, 5, "root", "").startswith("b3 did not answer: ssh: ")
    assert _no_answer("b3", refused, 5, "root", "").startswith("b3 gave no report: ssh as root failed")
    assert _no_answer("b3", said, 5, "root", "").startswith("b3 gave no report: the collector exited with status 3")


def test_an_ssh_that_fails_on_its_way_in_says_what_to_do():
    """Root's ssh meeting a node for the first time, or a key the node refuses: which
    file, which user, which key, ssh-keyscan (ssh's own words, as OpenSSH 9 says them)."""
    import pwd

    from slurm_hooks.views.diagnose import _no_answer
    from slurm_hooks.views.fanout import NodeAnswer
    me = pwd.getpwuid(os.geteuid())
    unknown = NodeAnswer(node="b3", rc=255, stderr="No ED25519 host key is known for b3 and you have requested "
                         "strict checking.\nHost key verification failed.\n")
    said = _no_answer("b3", unknown, 5, "root", "")
    assert f"{me.pw_name}'s ssh does not know b3's host key" in said, said
    assert f"ssh-keyscan -H b3 >> {me.pw_dir}/.ssh/known_hosts" in said and "/etc/ssh/ssh_known_hosts" in said, said
    refused = NodeAnswer(node="b3", rc=255, stderr="admin@b3: Permission denied (publickey).\n")
    said = _no_answer("b3", refused, 5, "admin", "")
    assert f"b3 refused {me.pw_name}'s keys for user admin" in said and "~admin/.ssh/authorized_keys" in said, said
    assert "ssh-copy-id admin@b3" in said, said


def test_a_rank_spinning_on_a_crowded_node_is_busy_not_waiting():
    """Ranks spinning in an all-reduce on a node with more runnable threads than CPUs get
    less than half a CPU each, yet are runnable all the time: busy, with the share shown.
    A rank that sleeps (little CPU, not runnable) still waits; a collector that sends no
    runnable share is judged by CPU alone."""
    def what(cpu, runnable=None):
        t = task(11, "1", [thread(11, "R", ALLREDUCE, syscall="running")], cpu=cpu)
        if runnable is not None:
            t["runnable_percent"] = runnable
        reports = [{"node": "n1", "job": "7", "tasks": [
            task(10, "0", [thread(10, "D", [], syscall="write", file="/gpfs/log", fstype="gpfs",
                                  mountpoint="/gpfs", progress=False)]), t]}]
        d = aggregate("7", ["n1"], reports, {})
        return d.summary.split("; ")[1], d.groups[-1].members[0].detail[0]

    summary, detail = what(38.0, 97.0)
    assert summary.startswith("rank 1 on n1 busy in allreduce"), summary
    assert detail == "pid 11 python3, cpu 38% (97% runnable), threads 1 R", detail
    summary, detail = what(3.0, 4.0)
    assert summary.startswith("rank 1 on n1 waiting in allreduce"), summary
    assert detail == "pid 11 python3, cpu 3%, threads 1 R"
    assert what(38.0)[0].startswith("rank 1 on n1 waiting in allreduce")
    assert what(80.0)[0].startswith("rank 1 on n1 busy in allreduce")
    # A node's document is read like user text: a figure that is not a number is none.
    assert what("99", "100")[0].startswith("rank 1 on n1 waiting in allreduce")


def test_a_batch_script_that_runs_python_itself_shows_python_not_the_shell():
    """No srun: the batch shell and the program it runs both carry SLURM_PROCID=0. The
    program is the rank (its data-loader children are not ranks again); the shell is no
    rank (its parent, slurmstepd, is no task of the job)."""
    shell = dict(task(500, "0", [thread(500, "S", [], syscall="wait4", wchan="do_wait")], step="batch"),
                 comm="slurm_script", ppid=1)
    worker = dict(task(501, "0", [thread(501, "S", ALLREDUCE)], step="batch"), ppid=500)
    loader = dict(task(502, "0", [thread(502, "S", ["__next__ (dataloader.py:9)"])], step="batch"), ppid=501)
    d = aggregate("7", ["n1"], [{"node": "n1", "job": "7", "tasks": [shell, worker, loader], "notes": []}], {})
    [g] = d.groups
    assert [(m.pid, m.comm) for m in g.members] == [(501, "python3")], d.summary
    assert "slurm_script" not in d.summary and "wait4" not in d.summary, d.summary
    assert d.others == 2
