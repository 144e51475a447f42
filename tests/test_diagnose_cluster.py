"""`slurm-hooks diagnose JOBID` on the real 3-node cluster: real ranks launched by srun,
a real thread blocked on a never-answering FUSE mount, a real lock never released, a
real node that does not answer, hostile environments and command lines."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers import ROOT, SLURM_HOOKS, journal, lock_ranks, write_config

pytestmark = pytest.mark.cluster

# Rank 0 writes its log on the hung filesystem from a thread and waits for it; the
# others spin in the training loop.
HUNG_RANKS = """
import os, sys, threading
hung, barrier = sys.argv[1], sys.argv[2]
rank = int(os.environ["SLURM_PROCID"])

def write_log():
    with open(os.path.join(hung, "main_log.txt"), "a") as log:    # never returns
        log.write("step 1000\\n")

def wait_for_writer(t):
    t.join()

def train_step():
    x = 0
    while True:
        x += 1

open(os.path.join(barrier, f"started.{rank}"), "w").close()
if rank == 0:
    t = threading.Thread(target=write_log, daemon=True)
    t.start()
    wait_for_writer(t)
else:
    train_step()
"""

LOCK_RANKS = lock_ranks(1)     # no D state anywhere: rank 1 waits on a lock


def config(tmp_path, cluster, sshd, **diag) -> dict:
    """The environment of an admin's `slurm-hooks diagnose` (root: ClusterShell over the
    session's sshd, unless `fanout` says otherwise)."""
    path = write_config(tmp_path / "diagnose.yaml", tmp_path, slurm=cluster.hooks_slurm(timeout=10),
                        diagnose={"ssh_options": sshd.options(), **diag})
    return {"PATH": "/usr/bin:/bin", "SLURM_HOOKS_CONFIG": str(path), "LANG": "C.UTF-8"}


def diagnose(env, job, *args, timeout=60):
    t0 = time.monotonic()
    r = subprocess.run([str(SLURM_HOOKS), "diagnose", str(job), *args], env=env, capture_output=True,
                       text=True, timeout=timeout)
    return r, time.monotonic() - t0


def start_job(cluster, tmp_path, script, args, n=3):
    barrier = tmp_path / "barrier"
    barrier.mkdir(exist_ok=True)
    (tmp_path / "ranks.py").write_text(script)
    job = cluster.sbatch(f"-N{n}", "-o", str(tmp_path / "job.out"), script=(
        "#!/bin/sh\n"
        f"srun -N{n} --ntasks-per-node=1 {sys.executable} {tmp_path}/ranks.py {' '.join(map(str, args))} {barrier}\n"))
    cluster.wait_for(lambda: len(list(barrier.glob("started.*"))) >= n, 30, what="all ranks started")
    return job


def test_names_the_rank_blocked_on_a_hung_mount(clean_cluster, hung_mount, tmp_path, sshd):
    cluster = clean_cluster
    job = start_job(cluster, tmp_path, HUNG_RANKS, [hung_mount.path])
    env = config(tmp_path, cluster, sshd)
    # Rank 0's thread blocks right after its start marker: held in D since about then.
    blocked_at = (tmp_path / "barrier" / "started.0").stat().st_mtime
    time.sleep(3)
    before = time.time() - blocked_at
    r, took = diagnose(env, job)
    after = time.time() - blocked_at
    assert r.returncode == 0, r.stderr + r.stdout
    summary = r.stdout.splitlines()[1]
    # The odd one out first, with its node, system call, file, filesystem and how long
    # it has been in D (the scheduler's figure: no lower bound mark).
    assert summary.strip().startswith("rank 0 on n1 is in openat() on "), r.stdout
    m = re.search(re.escape(f"{hung_mount.path}/main_log.txt (fuse.fusefs, D for ") + r"(\d+)s\) from write_log \(ranks.py\)",
                  summary)
    assert m and before - 1.5 <= int(m.group(1)) <= after + 1, (summary, before, after)
    assert "ranks 1-2 on n2,n3 busy in " in summary and "(2 of 3)" in summary
    # py-spy (the test extra) shows the Python frames of both groups.
    assert "write_log (ranks.py:" in r.stdout
    assert "train_step (ranks.py)" in summary

    d = json.loads(diagnose(env, job, "--json")[0].stdout)
    assert [g["who"] for g in d["groups"]] == ["rank 0 on n1", "ranks 1-2 on n2,n3"]
    assert d["groups"][0]["suspicious"] and not d["groups"][1]["suspicious"]
    assert d["missing"] == {}
    by_node = {rep["node"]: rep for rep in d["reports"]}
    rank0 = next(t for t in by_node["n1"]["tasks"] if t["rank"] == "0" and t["step"] != "batch")
    blocked = [t for t in rank0["threads"] if t["state"] == "D"]
    assert len(blocked) == 1 and blocked[0]["name"] == "Thread-1 (write_log)"
    assert blocked[0]["frames"][0].startswith("write_log (ranks.py:")
    assert blocked[0]["wchan"] and blocked[0]["syscall"] == "openat"
    assert not blocked[0]["d_at_least"] and before - 1.5 <= blocked[0]["d_seconds"] <= time.time() - blocked_at + 1
    busy = next(t for t in by_node["n2"]["tasks"] if t["rank"] == "1")
    # Spinning: on a CPU, or queued for one on a crowded host, nearly all the sample.
    assert busy["cpu_percent"] > 10 and busy["runnable_percent"] > 80, busy
    assert busy["local_rank"] == "0" and "ranks.py" in busy["cmdline"]


def test_no_d_state_names_the_rank_stuck_on_a_lock(clean_cluster, tmp_path, sshd):
    cluster = clean_cluster
    job = start_job(cluster, tmp_path, LOCK_RANKS, [])
    env = config(tmp_path, cluster, sshd)
    r, took = diagnose(env, job, "--record")
    assert r.returncode == 0, r.stderr + r.stdout
    summary = r.stdout.splitlines()[1].strip()
    assert summary.startswith("rank 1 on n2 is waiting in take_checkpoint_lock (ranks.py)"), r.stdout
    assert "ranks 0,2 on n1,n3 waiting in wait_in_barrier (ranks.py)" in summary
    assert "(2 of 3)" in summary
    # --record: the summary in the AdminComment and the journal.
    comment = cluster.show_job(job)["AdminComment"]
    assert "slurm-hooks: diagnose" in comment and "rank 1 on n2 is waiting in take_checkpoint_lock" in comment
    entry = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert entry[-1]["event"] == "diagnose" and entry[-1]["job"] == str(job)
    assert entry[-1]["summary"] == summary


def test_record_keeps_the_admins_comment(clean_cluster, tmp_path, sshd):
    cluster = clean_cluster
    job = start_job(cluster, tmp_path, LOCK_RANKS, [])
    cluster.scontrol("update", f"jobid={job}", "admincomment=ticket 4711")
    env = config(tmp_path, cluster, sshd)
    r, _ = diagnose(env, job, "--record", "--no-stacks")
    assert r.returncode == 0, r.stderr
    comment = cluster.show_job(job)["AdminComment"]
    assert comment.startswith("ticket 4711 | slurm-hooks: diagnose ")


def test_all_alike_says_so_with_the_common_stack(clean_cluster, tmp_path, sshd):
    cluster = clean_cluster
    script = lock_ranks(99)
    job = start_job(cluster, tmp_path, script, [])
    r, _ = diagnose(config(tmp_path, cluster, sshd), job)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].strip().startswith(
        "all 3 ranks alike: waiting in wait_in_barrier (ranks.py) < <module> (ranks.py)"), r.stdout


def test_a_node_that_does_not_answer_is_a_finding_and_the_command_ends_on_time(clean_cluster, tmp_path, sshd):
    cluster = clean_cluster
    job = start_job(cluster, tmp_path, LOCK_RANKS, [])
    # srun's path (the caller owns the job): a node whose slurmd does not answer.
    env = config(tmp_path, cluster, sshd, fanout="srun")
    slurmd = cluster.pids["n3"]
    os.kill(slurmd, signal.SIGSTOP)          # n3's slurmd takes connections and never answers
    try:
        r, took = diagnose(env, job, "--timeout", "6", "--no-stacks")
    finally:
        os.kill(slurmd, signal.SIGCONT)
    assert took < 6 + 2, took
    assert r.returncode == 1
    assert "n3 did not answer within 6 s" in r.stdout
    assert "rank 1 on n2 (1 of 2): waiting in take" not in r.stdout    # --no-stacks
    assert "rank 1 on n2 (1 of 2): waiting in futex() at" in r.stdout  # the nodes that answered count


def test_fast_when_every_node_answers(clean_cluster, tmp_path, sshd):
    cluster = clean_cluster
    job = start_job(cluster, tmp_path, LOCK_RANKS, [])
    r, took = diagnose(config(tmp_path, cluster, sshd), job, "--no-stacks")
    assert r.returncode == 0, r.stderr
    assert "rank 1 on n2 is waiting in futex() at " in r.stdout.splitlines()[1]


HOSTILE = """
import os, sys, threading, time
barrier = sys.argv[1]
rank = int(os.environ["SLURM_PROCID"])
open(os.path.join(barrier, f"started.{rank}"), "w").close()
if rank == 0:
    def evil\u00e9():
        threading.Lock().acquire(); threading.Lock().acquire()
    lk = threading.Lock(); lk.acquire(); lk.acquire()
else:
    while True:
        time.sleep(1)
"""


def test_hostile_environment_and_command_line(clean_cluster, tmp_path, sshd):
    cluster = clean_cluster
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "ranks.py").write_text(HOSTILE)
    job = cluster.sbatch("-N3", "-o", str(tmp_path / "job.out"), script=(
        "#!/bin/sh\n"
        "export RANK=\"$(printf '\\033[2J\\033]0;pwned\\007\\nRANK=7')\"\n"
        f"srun -N3 --ntasks-per-node=1 {sys.executable} {tmp_path}/ranks.py {barrier} "
        "\"$(printf '\\033[31m\\nfake line')\"\n"))
    cluster.wait_for(lambda: len(list(barrier.glob("started.*"))) >= 3, 30, what="all ranks started")
    env = config(tmp_path, cluster, sshd)
    for args in ((), ("--json",)):
        r, _ = diagnose(env, job, *args)
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    d = json.loads(r.stdout)
    ranks = {t["rank"] for rep in d["reports"] for t in rep["tasks"] if t["step"] != "batch"}
    assert ranks == {"\\x1b[2J\\x1b]0;pwned\\x07\\x0aRANK=7"}
    cmd = next(t["cmdline"] for rep in d["reports"] for t in rep["tasks"] if "ranks.py" in t["cmdline"])
    assert "\\x1b[31m\\x0afake line" in cmd
    assert len(r.stdout.splitlines()) > 3


def test_gpus_held_by_the_ranks_from_nvml(clean_cluster, tmp_path, sshd):
    """NVML faked at the pynvml boundary: n1's GPU is idle, the others busy; each
    rank's GPU is found by its pid in NVML's process list."""
    cluster = clean_cluster
    job = start_job(cluster, tmp_path, LOCK_RANKS, [])
    pids = {}
    for p in psutil.process_iter(["cmdline", "environ"]):
        cmd = p.info["cmdline"] or []
        if cmd and cmd[0] == sys.executable and f"{tmp_path}/ranks.py" in cmd:
            pids[p.pid] = (p.info["environ"] or {})["SLURMD_NODENAME"]
    assert len(pids) == 3
    gpus = [{"pci": f"00000000:{0x3b + i:02X}:00.0", "uuid": f"GPU-{i}", "name": "NVIDIA H100",
             "utilization": 0 if node == "n1" else 100, "memory_used": 8 << 30,
             "processes": [[pid, 8 << 30]]} for i, (pid, node) in enumerate(sorted(pids.items(), key=lambda kv: kv[1]))]
    scenario = tmp_path / "nvml.json"
    scenario.write_text(json.dumps({"driver": "550.54.15", "gpus": gpus}))
    # The collector starts isolated, no PYTHON* variable reaches it: the fake module is
    # put first on its path by the configured command, as a site would wrap it.
    # The scenario goes in the command too: nothing of the caller's environment reaches
    # the nodes over ssh.
    fake = ["/usr/bin/env", f"PYTHONPATH={ROOT / 'tests' / 'fake_nvml'}", f"FAKE_NVML_SCENARIO={scenario}",
            sys.executable, "-m", "slurm_hooks"]
    env = config(tmp_path, cluster, sshd, collector=fake)
    r, _ = diagnose(env, job, "--no-stacks")
    assert r.returncode == 0, r.stderr
    # Every node sees the one fake "machine": each rank holds exactly its own GPU.
    assert "GPU0 of rank 0 on n1 at 0% while 2 GPUs busy" in r.stdout.splitlines()[1]
    d = json.loads(diagnose(env, job, "--json", "--no-stacks")[0].stdout)
    held = {t["rank"]: t["gpus"] for rep in d["reports"] for t in rep["tasks"] if t["rank"] is not None}
    assert held["1"] == [{"index": 1, "utilization": 100, "used_mib": 8192, "status": "ok"}]


def test_unknown_and_ended_jobs_are_clear_errors(clean_cluster, tmp_path, sshd):
    env = config(tmp_path, clean_cluster, sshd)
    r, _ = diagnose(env, 999999999)
    assert r.returncode == 1 and "job 999999999 is not known to Slurm" in r.stderr
    r, _ = diagnose(env, "12x")
    assert r.returncode == 2 and "'12x' is not a job id" in r.stderr


def test_without_py_spy_the_report_says_so(clean_cluster, tmp_path, sshd):
    cluster = clean_cluster
    job = start_job(cluster, tmp_path, LOCK_RANKS, [])
    r, _ = diagnose(config(tmp_path, cluster, sshd, pyspy=str(tmp_path / "no-such-py-spy")), job)
    assert r.returncode == 0, r.stderr
    # The kernel's view still tells the odd rank apart.
    assert r.stdout.splitlines()[1].strip().startswith("rank 1 on n2 is waiting in futex() at ")
    for node in ("n1", "n2", "n3"):
        assert f"note: {node}: py-spy not found at {tmp_path}/no-such-py-spy (diagnose.pyspy): " \
               "no Python stacks" in r.stdout


STUCK_RANKS = """
import os, sys, time
hung, barrier = sys.argv[1], sys.argv[2]
rank = int(os.environ["SLURM_PROCID"])
open(os.path.join(barrier, f"started.{rank}"), "w").close()
if rank == 0:
    with open(os.path.join(hung, "main_log.txt"), "a") as log:   # never returns
        log.write("step 1000\\n")
else:
    while True:
        time.sleep(0.2)
"""


def test_the_health_check_records_the_job_wide_picture_before_requeueing(clean_cluster, hung_mount, tmp_path, sshd):
    from helpers import write_node_configs
    cluster = clean_cluster
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "ranks.py").write_text(STUCK_RANKS)
    job = cluster.sbatch("-N3", "--requeue", "-o", str(tmp_path / "job.out"), script=(
        "#!/bin/sh\n"
        f"srun -N3 --ntasks-per-node=1 {sys.executable} {tmp_path}/ranks.py {hung_mount.path} {barrier}\n"))
    cluster.wait_for(lambda: len(list(barrier.glob("started.*"))) >= 3, 30, what="all ranks started")
    wrapper = write_node_configs(tmp_path, cluster, {}, {
        "filesystems": [{"path": str(tmp_path)}],
        "stuck_tasks": {"grace": 2, "sample_window": 0.5},
        "diagnose": {"on_requeue_timeout": 10, "ssh_options": sshd.options()}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval=3\nHealthCheckNodeState=ANY\n")
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 40, what="job requeued")
    comment = cluster.show_job(job)["AdminComment"]
    assert comment.startswith(f"slurm-hooks: node n1: job {job} rank 0 pid "), comment
    assert re.search(re.escape(f"; job-wide: rank 0 on n1 is in openat() on {hung_mount.path}/main_log.txt "
                               "(fuse.fusefs, D for ") + r"\d+s\) from <module> \(ranks.py\); ", comment), comment
    # The others wait in their loop; one may be caught between two sleeps, so they can
    # come out as one group or two.
    others = comment.split("; job-wide: ", 1)[1]
    assert "n2" in others and "n3" in others and "waiting in <module> (ranks.py)" in others, others
    # The run's journal line is written after its actions: it may follow the requeue.
    sick = cluster.wait_for(lambda: next((r for r in journal(tmp_path, "n1") if any(
        a["kind"] == "requeue" and a["outcome"] == "done" for a in r["actions"])), None),
                            10, what="the journal line of the run that requeued")
    # The runs before it (the mount's scope not known yet) took no picture: that is for a
    # job about to be requeued, and costs the run seconds.
    runs = journal(tmp_path, "n1")
    before = [r for r in runs[:runs.index(sick)] if r["status"] == "unhealthy"]
    assert before and all(a["outcome"] == "held" and "job-wide:" not in a.get("text", "")
                          for r in before for a in r["actions"] if a["kind"] == "requeue"), before
    requeue = next(a for a in sick["actions"] if a["kind"] == "requeue")
    assert requeue["outcome"] == "done" and "job-wide: rank 0 on n1 is in openat()" in requeue["text"]
    # The health check's own finding says how long the task has been in D, by the scheduler.
    [stuck] = [f for c in sick["checks"] for f in c["findings"] if f["check"] == "stuck_tasks" and f["status"] == "stuck"]
    held = time.time() - (barrier / "started.0").stat().st_mtime
    assert not stuck["evidence"]["d_at_least"] and 2 <= stuck["evidence"]["d_seconds"] <= held + 1, stuck
    assert re.search(r" stuck for \d+s in openat\(\) on ", stuck["summary"]), stuck["summary"]


SAME_FUNCTION = """
import os, sys, threading, time
barrier = sys.argv[1]
lock = threading.Lock()
lock.acquire()
open(os.path.join(barrier, "started." + os.environ["SLURM_PROCID"]), "w").close()
if os.environ["SLURM_PROCID"] == "2":
    lock.acquire()
while True:
    time.sleep(1)
"""


def test_same_function_told_apart_by_what_the_thread_waits_for(clean_cluster, tmp_path, sshd):
    """Rank 2 hangs on a lock one line above where the others sleep: the same frames
    without line numbers, told apart by the system call the thread waits in."""
    job = start_job(clean_cluster, tmp_path, SAME_FUNCTION, [])
    r, _ = diagnose(config(tmp_path, clean_cluster, sshd), job)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].strip() == (
        "rank 2 on n3 is waiting in <module> (ranks.py), in futex(); ranks 0-1 on n1,n2 waiting in "
        "<module> (ranks.py), in clock_nanosleep() (2 of 3)"), r.stdout
