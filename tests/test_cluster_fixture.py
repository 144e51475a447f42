"""The real Slurm test cluster itself: start, drain/resume, jobs in cgroups,
scontrol parsing, reconfigure, restart and a clean stop."""

import os
import signal
import time

import psutil
import pytest

try:
    from .slurmcluster import SlurmCluster, cgroup_v1_freezer_mounted, parse_kv_line, stale_daemons
except ImportError:
    from slurmcluster import SlurmCluster, cgroup_v1_freezer_mounted, parse_kv_line, stale_daemons

# The fixture itself, not slurm-hooks: once per Slurm, not once per backend.
pytestmark = pytest.mark.cluster

NODES = ("n1", "n2", "n3")


def _dead(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _read_pids(cluster, directory, nodes):
    """{node: pid} once every node's task has written its pid file."""
    pids = {}
    for node in nodes:
        f = directory / f"pid.{node}"
        text = f.read_text().strip() if f.exists() else ""
        if not text.isdigit():
            return None
        pids[node] = int(text)
    return pids


# --------------------------------------------------------------------------
# start-up
# --------------------------------------------------------------------------

def test_start_brings_all_nodes_idle(cluster):
    nodes = cluster.show_nodes()
    assert sorted(nodes) == list(NODES)
    assert {n: d["State"] for n, d in nodes.items()} == {n: "IDLE" for n in NODES}
    for name, info in nodes.items():
        assert info["NodeAddr"] == "127.0.0.1"
        assert int(info["Port"]) == cluster.node_ports[name]
        assert info["CPUTot"] == "2"
        assert info["Partitions"] == "debug"
    assert all(psutil.pid_exists(pid) for pid in cluster.pids.values())
    assert cluster.start_seconds < 30
    # the proctrack branch follows the host's cgroup layout
    assert cluster.cgroup == cgroup_v1_freezer_mounted()
    cfg = cluster.show_config()
    assert cfg["ProctrackType"] == cluster.proctrack
    assert cfg["TaskPlugin"] == cluster.task_plugin
    assert cfg["SlurmctldPort"] == str(cluster.ctld_port)
    assert cfg["JobRequeue"] == "1"


# --------------------------------------------------------------------------
# drain / resume
# --------------------------------------------------------------------------

def test_drain_shows_state_and_reason_and_resume_all_undrains(clean_cluster):
    c = clean_cluster
    reason = "hc: /scratch hung (stat > 10s)"
    c.scontrol("update", "nodename=n2", "state=drain", f"reason={reason}")

    state = c.wait_for(lambda: "DRAIN" in c.node_state("n2") and c.node_state("n2"),
                       10, what="n2 drained")
    assert state == "IDLE+DRAIN"
    info = c.show_node("n2")
    assert "DRAIN" in info["State"]
    assert info["Reason"].startswith(reason + " [root@"), info["Reason"]
    assert c.node_state("n1") == "IDLE" and c.node_state("n3") == "IDLE"

    c.resume_all()
    assert {n: c.node_state(n) for n in NODES} == {n: "IDLE" for n in NODES}
    if c.prefix is None:                # 25.11 keeps the last reason of a resumed node
        assert "Reason" not in c.show_node("n2")


# --------------------------------------------------------------------------
# jobs
# --------------------------------------------------------------------------

def test_three_node_job_steps_run_in_their_node_cgroup(clean_cluster, tmp_path):
    c = clean_cluster
    script = ("srun sh -c 'echo $$ > %s/pid.$SLURMD_NODENAME; exec sleep 30'\n"
              % tmp_path)
    job = c.sbatch("-N3", "--job-name=cgroup probe", script=script)

    pids = c.wait_for(lambda: _read_pids(c, tmp_path, NODES), 30,
                      what=f"job {job}: a task pid on every node")
    info = c.show_job(job)
    assert info["JobState"] == "RUNNING"
    assert info["NodeList"] == "n[1-3]"
    assert info["JobName"] == "cgroup probe"
    assert {c.node_state(n) for n in NODES} == {"MIXED"}

    for node, pid in pids.items():
        env = psutil.Process(pid).environ()
        assert env["SLURM_JOB_ID"] == str(job)
        assert env["SLURMD_NODENAME"] == node
        cgroup = open(f"/proc/{pid}/cgroup").read()
        if c.cgroup:
            assert f":freezer:/slurm_{node}/uid_0/job_{job}/step_" in cgroup, cgroup
        else:
            assert "slurm_" not in cgroup

    c.run("scancel", str(job))
    c.wait_for(lambda: c.job_state(job) == "CANCELLED", 20, what=f"job {job} cancelled")
    c.wait_for(lambda: all(_dead(p) for p in pids.values()), 20,
               what="the job's tasks to exit")
    c.wait_for(lambda: {c.node_state(n) for n in NODES} == {"IDLE"}, 20,
               what="nodes IDLE after cancel")


def test_cancel_all_removes_running_and_pending_jobs(clean_cluster):
    c = clean_cluster
    running = c.sbatch("-N3", script="srun sleep 60\n")
    pending = c.sbatch("-N1", "--hold", script="sleep 60\n")
    c.wait_for(lambda: c.job_state(running) == "RUNNING", 20, what="job running")
    assert c.job_state(pending) == "PENDING"
    c.cancel_all()
    assert c.squeue() == []
    assert c.job_state(running) == "CANCELLED"
    assert c.job_state(pending) == "CANCELLED"


# --------------------------------------------------------------------------
# scontrol -o parsing
# --------------------------------------------------------------------------

def test_parser_on_synthetic_line():
    line = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 "
            "OS=Linux 6.1 #1 SMP @0  RealMemory=1000 Partitions=debug  "
            "State=IDLE+DRAIN Power= CfgTRES=cpu=2,mem=1000M "
            "Reason=gpu 0: xid=79 State=lost  [root@2024-01-01T00:00:00] "
            "Comment=rack=A7 slot 3 Extra=a b")
    d = parse_kv_line(line)
    assert d["CoresPerSocket"] == "1"
    assert d["OS"] == "Linux 6.1 #1 SMP @0"
    assert d["Partitions"] == "debug"
    assert d["State"] == "IDLE+DRAIN"
    assert d["Power"] == ""
    assert d["CfgTRES"] == "cpu=2,mem=1000M"
    assert d["Reason"] == "gpu 0: xid=79 State=lost  [root@2024-01-01T00:00:00]"
    assert d["Comment"] == "rack=A7 slot 3"
    assert d["Extra"] == "a b"
    assert parse_kv_line("") == {}


def test_parser_on_real_node_and_job_output(clean_cluster):
    c = clean_cluster
    reason = "hc: nvidia-smi: GPU 0 xid=79 State=lost"
    c.scontrol("update", "nodename=n1", "state=drain", f"reason={reason}")
    c.scontrol("update", "nodename=n1", "comment=rack=A7 slot=3 spare")
    node = c.show_node("n1")
    assert node["NodeName"] == "n1"
    assert node["State"] == "IDLE+DRAIN"
    assert node["Reason"].startswith(reason + " [root@")
    assert node["Comment"] == "rack=A7 slot=3 spare"
    assert node["Partitions"] == "debug"
    assert node["CfgTRES"].startswith("cpu=2,")

    admin = "slurm-hooks: requeued gpu=0 lost Reason=xid 79"
    job = c.sbatch("-N1", "--hold", "--comment=a=b c", "--job-name=parse me",
                   script="sleep 1\n")
    c.scontrol("update", f"jobid={job}", f"admincomment={admin}")
    info = c.show_job(job)
    assert info["JobId"] == str(job)
    assert info["JobName"] == "parse me"
    assert info["JobState"] == "PENDING"
    assert info["Reason"] == "JobHeldUser"
    assert info["AdminComment"] == admin
    assert info["Comment"] == "a=b c"
    assert (info.get("TRES") or info["ReqTRES"]).startswith("cpu=1,")   # ReqTRES from 23.02 on
    assert info["WorkDir"] == str(c.job_dir)


# --------------------------------------------------------------------------
# reconfigure / restart
# --------------------------------------------------------------------------

def test_reconfigure_activates_health_check_that_drains(clean_cluster):
    c = clean_cluster
    log = c.root / "hc-ran.log"
    hc = c.make_script("hc-test.sh", f"""
echo "$SLURMD_NODENAME" >> {log}
if [ "$SLURMD_NODENAME" = n3 ]; then
    scontrol update nodename=n3 state=drain reason="hc-test: n3 is sick"
fi
""")
    c.reconfigure(f"HealthCheckProgram={hc}\nHealthCheckInterval=2\n"
                  "HealthCheckNodeState=ANY")
    assert c.show_config()["HealthCheckProgram"] == str(hc)

    c.wait_for(lambda: "DRAIN" in c.node_state("n3"), 20, what="health check drains n3")
    assert c.show_node("n3")["Reason"].startswith("hc-test: n3 is sick")
    c.wait_for(lambda: log.exists() and set(log.read_text().split()) >= set(NODES),
               10, what="health check ran on every node")
    assert c.node_state("n1") == "IDLE" and c.node_state("n2") == "IDLE"

    c.reconfigure("")          # back to no health check, as reset() would
    assert c.show_config()["HealthCheckProgram"] == "(null)"
    c.resume_all()
    assert c.node_state("n3") == "IDLE"


def test_restart_slurmd_registers_again(clean_cluster):
    c = clean_cluster
    old_pid = c.pids["n1"]
    old_start = c.show_node("n1")["SlurmdStartTime"]
    c.restart_slurmd(["n1"])
    assert c.pids["n1"] != old_pid and _dead(old_pid)
    assert c.show_node("n1")["SlurmdStartTime"] != old_start
    assert c.node_state("n1") == "IDLE"


def test_wait_for_names_what_and_last_value(cluster):
    calls = []

    def not_yet():
        calls.append(1)
        return [] if len(calls) < 3 else cluster.show_job(999_999_999)

    with pytest.raises(AssertionError) as err:
        cluster.wait_for(not_yet, 0.5, interval=0.05, what="the answer")
    msg = str(err.value)
    assert "waiting for the answer" in msg
    assert "SlurmCommandError" in msg and "Invalid job id" in msg, msg
    assert len(calls) >= 3
    assert cluster.wait_for(lambda: len(calls) > 3 and "yes", 1, what="x") == "yes"


# --------------------------------------------------------------------------
# stop
# --------------------------------------------------------------------------

def test_stop_with_running_job_leaves_nothing(tmp_path):
    # A second, one-node cluster on the proctrack/linuxproc branch.
    c = SlurmCluster(tmp_path / "s", nodes=("s1",), cgroup=False)
    c.start()
    try:
        assert c.show_config()["ProctrackType"] == "proctrack/linuxproc"
        job = c.sbatch(script="srun sh -c 'echo $$ > %s/pid.s1; exec sleep 60'\n" % tmp_path)
        task = c.wait_for(lambda: _read_pids(c, tmp_path, ["s1"]), 20, what="task pid")["s1"]
        assert c.job_state(job) == "RUNNING"
        pids = dict(c.pids)
    finally:
        c.stop()
    assert all(_dead(p) for p in pids.values()), pids
    assert _dead(task)
    assert c.leftover_processes() == []
    c.stop()                                     # idempotent


def test_stop_after_daemons_crashed_kills_their_job(tmp_path):
    c = SlurmCluster(tmp_path / "k", nodes=("k1",))
    c.start()
    try:
        c.sbatch(script="srun sh -c 'echo $$ > %s/pid.k1; exec sleep 60'\n" % tmp_path)
        task = c.wait_for(lambda: _read_pids(c, tmp_path, ["k1"]), 20, what="task pid")["k1"]
        pids = dict(c.pids)
        stepds = [p for p in c.leftover_processes() if p.name() == "slurmstepd"]
        assert stepds, "expected slurmstepd processes for the running job"
        for pid in pids.values():              # simulate a crash of every daemon
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not all(_dead(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _dead(task), "job task should outlive its daemons"
    finally:
        c.stop()
    assert _dead(task)
    assert all(_dead(p.pid) for p in stepds)
    assert c.leftover_processes() == []
    assert not [d for d in stale_daemons() if d[2] == str(c.conf_path)]
