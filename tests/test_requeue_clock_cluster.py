"""The job runs again, on the real clusters (22.05 and 25.11): an unprivileged user's
2-node job whose rank on n1 is stuck for good (in D on the node's FUSE mount whose
server never answers, still in D after SIGKILL, like on a dead GPFS server). slurmd runs
the health check every few seconds; the test cluster's own timers: KillWait 2 s,
cred_expire 10 s (the requeue hold), sched_interval 1 s, UnkillableStepTimeout 60 s.

- The job alone on n1: slurm-hooks requeues it, then sets n1 DOWN once the task is
  killed and still in D; Slurm lets the job go (25.11.6+ would hold it COMPLETING for as
  long as the task lives) and it runs again on n2 and n3; with `actions.restart_now`
  Slurm's hold is ended at once. An admin's `slurm-hooks resume` brings n1 back after.
- Another user's job on n1: n1 is never set DOWN, that job runs on untouched, the
  requeued job waits as Slurm makes it, and the job's AdminComment and `explain` say why.
- A job whose user set a begin time is never started early (tests/test_release.py has
  the decision; the record it reads is held to Slurm by tests/test_slurm_contract.py)."""
from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import pytest
from attacker import PY, unprivileged_user
from helpers import SLURM_HOOKS, journal, write_node_configs
from mounts_fixtures import start_fuse
from test_security import mallory, mallory_session, readable_by_users  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster
INTERVAL, GRACE = 3, 2
HOLD = 10               # the test cluster's AuthInfo=cred_expire

RANK = """
import os, sys, time
stuck, marks = sys.argv[1], sys.argv[2]
node, run = os.environ["SLURMD_NODENAME"], os.environ.get("SLURM_RESTART_COUNT", "0")
open(f"{marks}/started.{run}.{node}", "w").write(str(time.time()))
if node == "n1" and run == "0":
    open(os.path.join(stuck, "ckpt.pt"), "rb")        # never returns, never dies
time.sleep(3600)
"""


@pytest.fixture
def node_mount(mallory_session):  # noqa: F811
    """The node's own FUSE mount (root's, allow_other), whose server reads requests and
    never answers them."""
    m = start_fuse(mallory_session.base / f"data-{time.monotonic_ns()}", "stuck")
    yield m
    m.close()


@pytest.fixture
def bob():
    with unprivileged_user("shk-bob") as user:
        yield user


def submit(user, cluster, body: str, *args: str) -> int:
    user._n = getattr(user, "_n", 0) + 1
    script = user.write(f"clock{user._n}.sh", "#!/bin/sh\n" + body, 0o755)
    conf = readable_by_users(cluster)
    r = user.run(cluster.binary("sbatch"), "--parsable", "--chdir", user.home, "-o", user.home / f"clock{user._n}.out",
                 *args, script, env=user.env(SLURM_CONF=str(conf)))
    return int(r.stdout.strip().split(";")[0])


def enable(cluster, tmp_path, conf: str = "", **actions) -> None:
    wrapper = write_node_configs(tmp_path, cluster, {}, {
        "filesystems": [{"path": str(tmp_path)}], "actions": actions,
        "stuck_tasks": {"grace": GRACE, "sample_window": 0.5}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                        "HealthCheckNodeState=ANY\n" + conf)


def acts(root, node, kind) -> list[dict]:
    return [a for r in journal(root, node) for a in r["actions"] if a["kind"] == kind]


def the_stuck_job(cluster, user, mount, *args: str) -> tuple[int, Path, float]:
    """The 2-node job, its rank on n1 stuck: (job, where its ranks mark their start, the
    freeze: when that rank went into the mount)."""
    # On n1 and n2, and free to run anywhere once requeued (`-w` would bind it to n1):
    # n3 is kept out while it starts.
    cluster.scontrol("update", "nodename=n3", "state=drain", "reason=test: the job starts on n1 and n2")
    marks = user.home / f"marks-{time.monotonic_ns()}"
    marks.mkdir()
    user.own(marks)
    rank = user.write("rank.py", RANK, 0o644)
    job = submit(user, cluster, f"{cluster.binary('srun')} -N2 --ntasks-per-node=1 {PY} {rank} {mount.path} {marks}\n",
                 "-N2", "--requeue", *args)
    try:
        cluster.wait_for(lambda: (marks / "started.0.n1").exists() and len(list(marks.glob("started.0.*"))) == 2,
                         30, what="both ranks started")
    except AssertionError:
        out = user.home / f"clock{user._n}.out"
        raise AssertionError((out.read_text() if out.exists() else "no output", cluster.show_job(job))) from None
    assert cluster.show_job(job)["NodeList"] == "n[1-2]"
    cluster.scontrol("update", "nodename=n3", "state=resume")
    return job, marks, float((marks / "started.0.n1").read_text())


def runs_again(cluster, job) -> bool:
    info = cluster.show_job(job)
    return info.get("JobState") == "RUNNING" and info.get("Restarts") == "1"


@pytest.mark.parametrize("restart_now", [True, False], ids=["restart_now", "slurms_hold"])
def test_the_job_alone_on_the_node_runs_again_on_the_others(clean_cluster, mallory, node_mount, tmp_path,  # noqa: F811
                                                              restart_now):
    cluster = clean_cluster
    enable(cluster, tmp_path, restart_now=restart_now)
    job, marks, freeze = the_stuck_job(cluster, mallory, node_mount)
    cluster.wait_for(lambda: runs_again(cluster, job), 60, interval=0.2, what="the job running again")
    took = time.time() - freeze
    assert "n1" not in cluster.show_job(job)["NodeList"]
    # n1 was set DOWN with our reason by the run that found the task killed and still in D
    # (the test cluster's ReturnToService=2 brings a DOWN node back at its next ping: it
    # stays drained with our reason).
    info = cluster.show_node("n1")
    assert "DOWN" in info["State"] or "DRAIN" in info["State"], info
    assert "[slurm-hooks]" in info["Reason"] and f"job {job}" in info["Reason"], info
    [released] = cluster.wait_for(lambda: [a for a in acts(tmp_path, "n1", "release") if a["outcome"] == "done"],
                                  10, what="the release in the journal")
    assert released["code"] == "released" and released["job"] == str(job)
    comment = cluster.show_job(job)["AdminComment"]
    assert "slurm-hooks: node n1 set DOWN: a task of the job on it cannot die" in comment, comment
    starts = [a for a in acts(tmp_path, "n1", "start") if a["outcome"] != "skipped" or a["code"] != "completing"]
    if cluster.version.startswith("22."):
        # 22.05 starts a job let go by a DOWN node at once, without its hold (a Slurm bug,
        # fixed in 23.11.11): nothing left for slurm-hooks to do. (How soon, a loaded test
        # host aside, is bench/requeue_clock.py's to say.)
        # (a run may still see it let go and not yet scheduled: asked again later, nothing done)
        assert {a["code"] for a in starts} <= {"not_waiting", "unscheduled"}, starts
        assert not [a for a in starts if a["outcome"] == "done"], starts
    elif restart_now:
        assert [(a["outcome"], a["code"]) for a in starts] == [("done", "start_asked")], starts
        assert "start asked at " in comment, comment
    else:
        # Slurm's hold runs its course (the next pass starts the job: sched_interval 1 s);
        # how soon is bench/requeue_clock.py's to say.
        assert took >= HOLD, took
        assert not [a for a in starts if a["outcome"] == "done"], starts
    (tmp_path / f"took-{cluster.version}-{restart_now}").write_text(f"{took:.1f}")
    print(f"freeze -> running again: {took:.1f}s (Slurm {cluster.version}, restart_now {restart_now})")

    # The fault gone (the storage answers: its server gone, the task dies), an admin's
    # `slurm-hooks resume` brings back the node slurm-hooks set DOWN.
    node_mount.close()
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "conf" / "n1.yaml"), "resume", "n1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "n1: resumed" in r.stdout, r.stdout + r.stderr
    cluster.wait_for(lambda: cluster.node_state("n1").split("+")[0] in ("IDLE", "MIXED", "ALLOCATED"), 30,
                     what="n1 back in service")


def test_another_job_on_the_node_keeps_it_up_and_the_requeued_job_waits(clean_cluster, mallory, bob,  # noqa: F811
                                                                         node_mount, tmp_path):
    cluster = clean_cluster
    enable(cluster, tmp_path, restart_now=True)
    beside = submit(bob, cluster, "sleep 300\n", "-N1", "-w", "n1", "-n1")
    cluster.wait_for(lambda: cluster.job_state(beside) == "RUNNING", 30, what="bob's job running")
    job, marks, freeze = the_stuck_job(cluster, mallory, node_mount)
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", GRACE + 5 * INTERVAL + 10,
                     what="the job requeued")
    # The task is killed (KillWait 2 s) and stays in D: several runs see it so.
    cluster.wait_for(lambda: len([a for a in acts(tmp_path, "n1", "release") if a["code"] == "other_jobs"]) >= 2,
                     6 * INTERVAL + 10, what="two runs not releasing n1")
    assert not [a for a in acts(tmp_path, "n1", "release") if a["outcome"] == "done"]
    assert "DOWN" not in cluster.node_state("n1")
    assert cluster.job_state(beside) == "RUNNING"
    comment = cluster.show_job(job)["AdminComment"]
    said = f"slurm-hooks: COMPLETING: a task on n1 cannot die; n1 not set DOWN (job {beside} (RUNNING) runs there)"
    assert comment.count(said) == 1, comment
    if not cluster.version.startswith("22."):
        # 25.11.6+: the job is held COMPLETING for as long as the task lives.
        assert cluster.job_state(job) == "COMPLETING"
        assert [a["code"] for a in acts(tmp_path, "n1", "start")][-1] == "completing"
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "conf" / "n1.yaml"), "explain", "--node", "n1"],
                       capture_output=True, text=True, timeout=60)
    assert f"release job {job}: skipped (not set DOWN: job {beside} (RUNNING) runs on n1 too" in r.stdout, r.stdout
    with contextlib.suppress(Exception):
        cluster.scontrol("cancel", str(beside), check=False)


def test_a_begin_time_its_user_set_is_never_started_early(clean_cluster, mallory, node_mount, tmp_path):  # noqa: F811
    """The job's user sets a begin time an hour away after the requeue: once the job left
    COMPLETING it waits for it, `actions.restart_now` or not. (22.05 would start a job
    let go by a DOWN node at once, its own bug: there the node is not released, and
    Slurm gives up on the task after UnkillableStepTimeout.)"""
    cluster = clean_cluster
    old = cluster.version.startswith("22.")
    enable(cluster, tmp_path, conf="UnkillableStepTimeout=5\n" if old else "", restart_now=True,
           release_node=not old)
    job, marks, freeze = the_stuck_job(cluster, mallory, node_mount)
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", GRACE + 5 * INTERVAL + 10,
                     interval=0.1, what="the job requeued")
    conf = readable_by_users(cluster)
    mallory.run(cluster.binary("scontrol"), "update", f"jobid={job}", "StartTime=now+3600",
                env=mallory.env(SLURM_CONF=str(conf)))
    cluster.wait_for(lambda: cluster.job_state(job) == "PENDING", 60, what="the job out of COMPLETING")
    users = cluster.wait_for(lambda: [a for a in acts(tmp_path, "n1", "start") if a["code"] == "users_begin"],
                             4 * INTERVAL + 10, what="the start refused for the user's begin time")
    assert users[0]["outcome"] == "skipped", users
    time.sleep(2 * INTERVAL)
    assert not [a for a in acts(tmp_path, "n1", "start") if a["outcome"] == "done"]
    info = cluster.show_job(job)
    assert info["JobState"] == "PENDING" and info["Reason"] == "BeginTime", info
    assert time.mktime(time.strptime(info["EligibleTime"], "%Y-%m-%dT%H:%M:%S")) - time.time() > 3000, info
