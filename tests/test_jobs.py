"""Attribution of processes to Slurm jobs from their cgroup paths."""
from __future__ import annotations

from slurm_hooks.host.jobs import JobRef, from_cgroup, init_root, of_pid, parse_listpids

V1 = """12:pids:/slurm/uid_1000/job_1234/step_0/task_3
11:freezer:/slurm/uid_1000/job_1234/step_0
4:cpuset:/slurm/uid_1000/job_1234/step_0
1:name=systemd:/system.slice/slurmd.service
"""
V1_MULTI = "7:freezer:/slurm_n2/uid_0/job_77/step_batch\n6:memory:/\n"
V2 = "0::/system.slice/slurmstepd.scope/job_4242/step_interactive/user/task_0\n"
V2_MULTI = "0::/system.slice/n3_slurmstepd.scope/job_9/step_extern/user/task_special\n"
V2_STEPD = "0::/system.slice/slurmstepd.scope/job_9/step_2/slurm\n"
NOT_A_JOB = "0::/user.slice/user-0.slice/session-3.scope\n9:freezer:/\n"


def test_cgroup_v1_keeps_the_most_precise_controller():
    assert from_cgroup(V1) == JobRef(job="1234", step="0", task="3", uid=1000, node=None)


def test_cgroup_v1_multiple_slurmd_names_the_node():
    ref = from_cgroup(V1_MULTI)
    assert ref == JobRef(job="77", step="batch", task=None, uid=0, node="n2")
    assert ref.belongs_to("n2") and not ref.belongs_to("n1")


def test_cgroup_v2_single_and_multiple_slurmd():
    assert from_cgroup(V2) == JobRef(job="4242", step="interactive", task="0")
    ref = from_cgroup(V2_MULTI)
    assert (ref.job, ref.step, ref.node) == ("9", "extern", "n3")
    assert from_cgroup(V2_STEPD).step == "2"


def test_cgroup_v2_in_the_slice_cgroup_conf_names():
    """CgroupSlice= (25.11 on) moves the slurmstepd scope out of system.slice; systemd
    nests a-b.slice in a.slice."""
    assert from_cgroup("0::/slurm.slice/slurmstepd.scope/job_5/step_0/user/task_1\n") == \
        JobRef(job="5", step="0", task="1")
    ref = from_cgroup("0::/hpc.slice/hpc-jobs.slice/n1_slurmstepd.scope/job_6/step_batch/user/task_0\n")
    assert (ref.job, ref.step, ref.node) == ("6", "batch", "n1")
    # Only the unified hierarchy is cgroup/v2's; a v1 hierarchy's path there is no job.
    assert from_cgroup("1:name=systemd:/system.slice/slurmstepd.scope/job_7/step_0\n") is None


def test_cgroup_v2_below_the_init_cgroup_of_a_container(tmp_path):
    """slurmd in a container without a cgroup namespace: Slurm roots its slice at the
    directory of PID 1's cgroup, and so is it read here; a job of a slurmd outside
    (on the host) or a path the container's users could make is none of this node's."""
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "cgroup").write_text("0::/docker.slice/docker-abc.scope/init.scope\n")
    assert init_root(str(tmp_path)) == "/docker.slice/docker-abc.scope"
    paths = {
        42: "/docker.slice/docker-abc.scope/system.slice/slurmstepd.scope/job_7/step_0/user/task_0",
        43: "/system.slice/slurmstepd.scope/job_8/step_0/user/task_0",
        44: "/docker.slice/docker-abc.scope/user.slice/user-1001.slice/user@1001.service/"
            "app.slice/system.slice/slurmstepd.scope/job_9/step_0",
        45: "/docker.slice/docker-abcd.scope/system.slice/slurmstepd.scope/job_10/step_0",
    }
    for pid, path in paths.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::{path}\n")
    assert of_pid(42, str(tmp_path)) == JobRef(job="7", step="0", task="0")
    assert [of_pid(pid, str(tmp_path)) for pid in (43, 44, 45)] == [None, None, None]


def test_init_root_on_a_host(tmp_path):
    """PID 1 in init.scope, at the root, or on a hybrid host: slices sit at the root."""
    texts = ("0::/init.scope\n", "0::/\n", "9:name=systemd:/init.scope\n1:cpu:/\n0::/\n", "")
    for i, text in enumerate(texts):
        (tmp_path / str(i) / "1").mkdir(parents=True)
        (tmp_path / str(i) / "1" / "cgroup").write_text(text)
        assert init_root(str(tmp_path / str(i))) == "", text


def test_single_slurmd_paths_belong_to_any_node_name():
    # /slurm/ (one slurmd on the host) names no node; /slurm_n2/ names n2 only.
    ref = from_cgroup(V1)
    assert ref.node is None and ref.belongs_to("n1") and ref.belongs_to("gpu042")
    assert from_cgroup(V1.replace("/slurm/", "/slurm_n2/")).node == "n2"
    assert not from_cgroup(V1.replace("/slurm/", "/slurm_n2/")).belongs_to("n1")


def test_of_pid_reads_the_process_cgroup(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(V1_MULTI)
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cgroup").write_text(NOT_A_JOB)
    assert of_pid(42, str(tmp_path)) == JobRef(job="77", step="batch", uid=0, node="n2")
    assert of_pid(43, str(tmp_path)) is None
    assert of_pid(44, str(tmp_path)) is None            # gone


def test_outside_any_job():
    assert from_cgroup(NOT_A_JOB) is None
    assert from_cgroup("") is None


def test_listpids_output():
    out = "PID      JOBID    STEPID   LOCALID GLOBALID\n1234     55       0        0       0\n1240     55       batch    -       -\n"
    refs = parse_listpids(out)
    assert refs[1234] == JobRef(job="55", step="0", task="0")
    assert refs[1240] == JobRef(job="55", step="batch", task=None)


SPOOFED = [
    # a cgroup subtree systemd delegated to uid 1001, dressed up as root's job 42
    "1:name=systemd:/user.slice/user-1001.slice/user@1001.service/slurm/uid_0/job_42/step_batch/task_0\n",
    "0::/user.slice/user-1001.slice/user@1001.service/app.slice/system.slice/slurmstepd.scope/job_42/step_0\n",
    "7:freezer:/user.slice/slurm_n1/uid_0/job_42/step_0\n",
    "0::/system.slice/slurmstepd.scope/job_42x/step_0\n",
]


def test_only_paths_rooted_where_slurm_puts_jobs_count():
    for text in SPOOFED:
        assert from_cgroup(text) is None, text
    assert from_cgroup(SPOOFED[0] + V1_MULTI).job == "77"       # the real one still counts


def test_cpu_and_memory_of_a_jobs_tasks_come_from_psutil_in_the_child():
    """job-report's sample (run in a child with a deadline): CPU over the window and
    resident memory, for each pid still there."""
    import os
    import time

    from slurm_hooks.host.runner import DONE, Runner, Task
    from slurm_hooks.views.jobreport import _cpu_sample

    busy = os.fork()
    if busy == 0:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            pass
        os._exit(0)
    try:
        o = Runner().run([Task("t:cpu", _cpu_sample, ([busy, os.getpid(), 999999999], 0.3), 5.0)])["t:cpu"]
    finally:
        os.kill(busy, 9)
        os.waitpid(busy, 0)
    assert o.status == DONE
    assert o.value["cpu"][str(busy)] > 50 and str(999999999) not in o.value["cpu"]
    assert o.value["rss_mib"][str(os.getpid())] > 5
