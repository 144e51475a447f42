"""The incident, on the real 3-node cluster: a job rank stuck in D on a hung filesystem
is found by the health check slurmd runs, the node is drained with a reason naming the
job and the file, the job is requeued with the diagnosis recorded, and the healthy
nodes stay in service."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import journal, ours, proc_state, write_node_configs

pytestmark = pytest.mark.cluster
INTERVAL, GRACE = 3, 2

RANKS = """
import os, sys, time
hung, barrier = sys.argv[1], sys.argv[2]
rank = int(os.environ["SLURM_PROCID"])
open(os.path.join(barrier, f"started.{rank}"), "w").close()
if rank == 0:
    with open(os.path.join(hung, "main_log.txt"), "a") as log:   # never returns
        log.write("After clip in _do_batch\\n")
else:
    while not os.path.exists(os.path.join(barrier, "go")):       # the others wait in the barrier
        time.sleep(0.2)
"""

THREAD_STUCK = """
import os, sys, threading, time
threading.Thread(target=lambda: open(os.path.join(sys.argv[1], "ckpt.pt"), "wb"), daemon=True).start()
open(os.path.join(sys.argv[2], "started.0"), "w").close()
time.sleep(3600)
"""


def enable_healthcheck(cluster, tmp_path, conf_extra="", actions=None, **stuck):
    wrapper = write_node_configs(tmp_path, cluster, {}, {
        "filesystems": [{"path": str(tmp_path)}], "actions": actions or {},
        "stuck_tasks": {"grace": GRACE, "sample_window": 0.5, **stuck}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                        "HealthCheckNodeState=ANY\n" + conf_extra)


def started(barrier, n):
    return len(list(barrier.glob("started.*"))) >= n


def test_the_incident_ends_by_itself(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "ranks.py").write_text(RANKS)
    job = cluster.sbatch("-N3", "--requeue", "-o", str(tmp_path / "job.out"), script=(
        "#!/bin/sh\n"
        f"srun -N3 --ntasks-per-node=1 {sys.executable} {tmp_path}/ranks.py {hung_mount.path} {barrier}\n"))
    cluster.wait_for(lambda: started(barrier, 3), 30, what="all three ranks started")
    enable_healthcheck(cluster, tmp_path)
    t0 = time.monotonic()        # from the checks' start (the reconfigure is the test's)

    cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n1"), GRACE + 2 * INTERVAL + 5,
                     what="n1 drained")
    took = time.monotonic() - t0
    reason = cluster.show_node("n1")["Reason"]
    assert ours(reason, f"job {job} stuck in "), reason
    assert f"stuck in openat() on {hung_mount.path} (fuse.fusefs)" in reason
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 10, what="job requeued")
    comment = cluster.show_job(job)["AdminComment"]
    assert comment.startswith(f"slurm-hooks: node n1: job {job} rank 0 pid "), comment
    assert f"on {hung_mount.path}/main_log.txt (fuse.fusefs {hung_mount.path})" in comment
    assert took < GRACE + 2 * INTERVAL + 5

    # The other nodes ran the same checks, saw the same process (it is on this host),
    # knew from its cgroup it is n1's, and stayed in service.
    for n in ("n2", "n3"):
        assert "DRAIN" not in cluster.node_state(n)
        assert all(r["status"] != "unhealthy" for r in journal(tmp_path, n))

    # The journal has the full record (written after the run's last action).
    sick = cluster.wait_for(lambda: next((r for r in journal(tmp_path, "n1") if r["status"] == "unhealthy"), None),
                            10, what="the draining run's journal line")
    [f] = [f for c in sick["checks"] for f in c["findings"] if f["status"] == "stuck"]
    ev = f["evidence"]
    assert (ev["job"], ev["rank"], ev["node"], ev["syscall"]) == (str(job), "0", "n1", "openat")
    assert ev["file"] == f"{hung_mount.path}/main_log.txt" and ev["cause"] == "shared_filesystem"
    # A FUSE mount is a network mount: its scope is not known on the first look (is the
    # storage down for every node?), so the first run drains and holds the rest; one
    # health-check interval later, no other node naming it, the job is requeued.
    assert {a["kind"]: (a["outcome"], a["code"]) for a in sick["actions"]} == \
        {"drain": ("done", ""), "comment": ("held", "scope_unknown"), "requeue": ("held", "scope_unknown")}
    done = {a["kind"] for r in journal(tmp_path, "n1") for a in r["actions"] if a["outcome"] == "done"}
    assert {"drain", "comment", "requeue"} <= done, done

    # The requeue killed the stuck rank (this hang is killable, like an NFS wait), so
    # the next runs find nothing stuck and ask for no reboot.
    runs = len(journal(tmp_path, "n1"))
    cluster.wait_for(lambda: len(journal(tmp_path, "n1")) >= runs + 2, 3 * INTERVAL + 5, what="two more runs")
    assert not [a for r in journal(tmp_path, "n1") for a in r["actions"] if a["kind"] == "reboot"]
    assert journal(tmp_path, "n1")[-1]["status"] == "healthy"


def test_no_requeue_job_gets_the_fallback_and_each_action_happens_once(clean_cluster, hung_mount, tmp_path):
    cluster = clean_cluster
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "thread.py").write_text(THREAD_STUCK)
    job = cluster.sbatch("-N1", "-w", "n2", "--no-requeue", "-o", str(tmp_path / "job.out"), script=(
        "#!/bin/sh\n"
        f"srun {sys.executable} {tmp_path}/thread.py {hung_mount.path} {barrier}\n"))
    cluster.wait_for(lambda: started(barrier, 1), 30, what="the job started")
    enable_healthcheck(cluster, tmp_path)

    cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n2"), GRACE + 2 * INTERVAL + 5, what="n2 drained")
    assert f"job {job} stuck in " in cluster.show_node("n2")["Reason"]
    assert f"stuck in openat() on {hung_mount.path} (" in cluster.show_node("n2")["Reason"]
    # Let several more health checks run on the same stuck task.
    # (Once the mount's scope is known: the first run held everything for it.)
    cluster.wait_for(lambda: len([r for r in journal(tmp_path, "n2") if r["status"] == "unhealthy" and not any(
        a["code"] == "scope_unknown" for a in r["actions"])]) >= 3, 5 * INTERVAL + 5, what="three unhealthy runs on n2")

    info = cluster.show_job(job)
    assert info["JobState"] == "RUNNING" and info["Restarts"] == "0", "left running, as configured"
    comment = info["AdminComment"]
    assert comment.count(f"slurm-hooks: node n2: job {job}") == 1, comment
    assert comment.count("slurm-hooks: not requeued (requeue is disabled for this job") == 1
    assert "; left running" in comment

    # (Its scope known first: the runs that held everything for it are not counted.)
    runs = [r for r in journal(tmp_path, "n2") if r["status"] == "unhealthy"
            and not any(a["code"] == "scope_unknown" for a in r["actions"])]
    first = {a["kind"]: a for a in runs[0]["actions"]}
    assert first["requeue"]["outcome"] == "skipped" and "left running" in first["requeue"]["message"]
    for later in runs[1:]:
        acts = {a["kind"]: a for a in later["actions"]}
        for kind in ("comment", "requeue"):
            assert acts[kind]["outcome"] == "skipped" and "already done" in acts[kind]["message"]
    # The stuck thread is not the leader, and was found all the same.
    [f] = [f for c in runs[0]["checks"] for f in c["findings"] if f["status"] == "stuck"]
    assert f["evidence"]["tids"] != [f["evidence"]["pid"]]
    # A requeue skipped is not a kill: nothing ended the job, so no reboot is asked
    # while it runs here; each run says why.
    reboots = [a for r in runs[1:] for a in r["actions"] if a["kind"] == "reboot"]
    assert reboots and all(a["outcome"] == "skipped" and a["code"] == "job_running" for a in reboots), \
        [[(a["kind"], a["outcome"], a["code"]) for a in r["actions"]] for r in journal(tmp_path, "n2")]
    assert f"job {job} still runs here" in reboots[-1]["message"]
    assert "REBOOT" not in cluster.node_state("n2")


def test_listpids_fallback_names_the_job_of_a_process(clean_cluster, tmp_path):
    """What the stuck-task check asks Slurm when a task's cgroup does not say."""
    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm.connect import open_backend
    cluster = clean_cluster
    marker = tmp_path / "pid"
    job = cluster.sbatch("-N1", "-w", "n3", "-o", "/dev/null",
                         script=f"#!/bin/sh\nsrun sh -c 'echo $$ > {marker}; exec sleep 60'\n")
    cluster.wait_for(lambda: marker.exists() and marker.read_text().strip(), 30, what="the step started")
    pid = int(marker.read_text())
    slurm = open_backend(SlurmConfig(**cluster.hooks_slurm(timeout=10)))
    refs = slurm.listpids("n3")
    assert refs[pid].job == str(job) and refs[pid].step == "0"
    assert pid not in slurm.listpids("n1")


def test_unkillable_task_gets_the_node_rebooted(clean_cluster, stuck_mount, tmp_path):
    """Like GPFS in the incident: the task is in D from the start and SIGKILL does not
    end it. The requeue cannot clear it, so the next run asks for a reboot, which Slurm
    carries out (RebootProgram) once the node is idle."""
    cluster = clean_cluster
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "ranks.py").write_text(RANKS)
    marker = tmp_path / "rebooted"
    reboot = tmp_path / "reboot-program"
    reboot.write_text(f"#!/bin/sh\necho rebooted >> {marker}\n")
    reboot.chmod(0o755)
    # Before the job starts: slurmstepd reads UnkillableStepTimeout when it launches.
    # release_after above it: Slurm gives up killing the task first.
    enable_healthcheck(cluster, tmp_path, f"RebootProgram={reboot}\nUnkillableStepTimeout=5\n",
                       actions={"release_after": 8})
    job = cluster.sbatch("-N1", "-w", "n3", "--requeue", "-o", "/dev/null", script=(
        "#!/bin/sh\n"
        f"srun {sys.executable} {tmp_path}/ranks.py {stuck_mount.path} {barrier}\n"))
    cluster.wait_for(lambda: started(barrier, 1), 30, what="the job started")

    # (The grace, then one interval for the mount's scope: no other node names it.)
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", GRACE + 4 * INTERVAL + 10,
                     what="the job requeued")
    try:
        cluster.wait_for(lambda: any(a["kind"] == "reboot" and a["outcome"] != "held"
                                     for r in journal(tmp_path, "n3") for a in r["actions"]),
                         4 * INTERVAL + 10, what="a reboot asked for")
    except AssertionError:
        raise AssertionError([([(f["status"], f["summary"][:80]) for c in r["checks"] for f in c["findings"]
                                if f["severity"] != "ok"],
                               [(a["kind"], a["outcome"], a["code"], a.get("message", "")[:100]) for a in r["actions"]])
                              for r in journal(tmp_path, "n3")]) from None
    reboot_action = next(a for r in journal(tmp_path, "n3") for a in r["actions"]
                         if a["kind"] == "reboot" and a["outcome"] != "held")
    assert reboot_action["outcome"] == "done", reboot_action
    assert "REBOOT" in cluster.node_state("n3")
    assert ours(cluster.show_node("n3")["Reason"], f"job {job} stuck in ")
    # Slurm gives up killing the task (UnkillableStepTimeout) and runs RebootProgram
    # once the node is free: the only cure. 22.05 lets go of the node by itself; 25.11
    # holds it COMPLETING while the task lives, until slurm-hooks sets it DOWN.
    cluster.wait_for(marker.exists, 40, what="RebootProgram run by slurmd")
    if not cluster.version.startswith("22."):
        # The run that set it DOWN writes its journal line after doing so: with our
        # reboot pending, the node's release waits for the reboot's own (release_after),
        # which leaves time to withdraw the reboot.
        downs = cluster.wait_for(lambda: [a for r in journal(tmp_path, "n3") for a in r["actions"]
                                          if a["kind"] in ("release", "down") and a["outcome"] == "done"],
                                 10, what="the DOWN run's journal line")
        assert [a["kind"] for a in downs] == ["down"], downs
        assert [a["code"] for a in downs] == ["released"], downs
        assert downs[0]["reason"] == reboot_action["reason"]
    requeues = [a for r in journal(tmp_path, "n3") for a in r["actions"] if a["kind"] == "requeue"
                and a["outcome"] != "held"]
    assert [a["outcome"] for a in requeues][0] == "done"
    assert all(a["outcome"] == "skipped" and "left running" not in a["message"] for a in requeues[1:])
    assert all(r["status"] != "unhealthy" for n in ("n1", "n2") for r in journal(tmp_path, n))
    cluster.scontrol("cancel_reboot", "n3", check=False)


def test_cancel_fallback(clean_cluster, hung_mount, tmp_path):
    import subprocess

    import yaml
    from helpers import SLURM_HOOKS
    cluster = clean_cluster
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "ranks.py").write_text(RANKS)
    job = cluster.sbatch("-N1", "-w", "n1", "--no-requeue", "-o", "/dev/null", script=(
        "#!/bin/sh\n"
        f"srun {sys.executable} {tmp_path}/ranks.py {hung_mount.path} {barrier}\n"))
    cluster.wait_for(lambda: started(barrier, 1), 30, what="the job started")
    cfg = tmp_path / "n1.yaml"
    cfg.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal-n1.jsonl"),
        "filesystems": [{"path": str(tmp_path)}], "slurm": cluster.hooks_slurm(),
        "stuck_tasks": {"grace": 0.5, "sample_window": 0.3}, "outage": {"interval": 1},
        "actions": {"requeue_fallback": "cancel", "reboot": False}}))

    def healthcheck():
        return subprocess.run([str(SLURM_HOOKS), "-c", str(cfg), "healthcheck"], capture_output=True,
                              text=True, timeout=60, env={"SLURMD_NODENAME": "n1"})
    healthcheck()
    time.sleep(0.6)
    r = healthcheck()          # stuck, the mount's scope not known yet: drained, the rest held
    assert r.returncode == 1 and "no requeue before the scope is known" in r.stdout, r.stdout
    time.sleep(1.1)            # one interval (outage.interval) alone with it: the node's fault
    r = healthcheck()
    assert r.returncode == 1
    assert "requeue job" in r.stdout and "cancelled instead: requeue is disabled for this job" in r.stdout
    cluster.wait_for(lambda: cluster.job_state(job) in ("CANCELLED", "COMPLETING"), 20, what="job cancelled")
    assert "slurm-hooks: not requeued (requeue is disabled for this job (--no-requeue or JobRequeue=0)); " \
           "cancelled instead" in cluster.show_job(job)["AdminComment"]


WAITS_THEN_STUCK = """
import os, sys, threading, time
hung, barrier = sys.argv[1], sys.argv[2]
open(os.path.join(barrier, "pid"), "w").write(str(os.getpid()))
while not os.path.exists(os.path.join(barrier, "go")):
    time.sleep(0.05)
threading.Thread(target=lambda: open(os.path.join(hung, "ckpt.pt"), "wb"), daemon=True).start()
time.sleep(3600)
"""


def _unified_hierarchy(tmp_path):
    """Where this host's cgroup2 hierarchy is mounted (hybrid hosts have it at
    /sys/fs/cgroup/unified, with no controllers); mounted here when it is not."""
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        fields = left.split()
        if right.split()[:1] == ["cgroup2"] and fields[3] == "/":
            return Path(fields[4]), None
    mnt = tmp_path / "cgroup2"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "cgroup2", "none", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"no cgroup2 hierarchy could be mounted: {r.stderr.strip()}")
    return mnt, mnt


def _own_v1_cgroups() -> dict[str, Path]:
    """Each cgroup v1 hierarchy this process is in: its directory, by controller list."""
    mounts = {}
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        fstype, _, opts = right.split()[:3]
        if fstype == "cgroup":
            fields = left.split()
            for o in opts.split(","):
                mounts.setdefault(o, (fields[3], Path(fields[4])))
    own = {}
    for line in open("/proc/self/cgroup"):
        num, ctrls, path = line.rstrip("\n").split(":", 2)
        if num != "0":
            root, where = mounts[ctrls.split(",")[0]]
            own[ctrls] = where / os.path.relpath(path, root)
    return own


def test_a_task_in_slurms_cgroup_v2_layout_is_tied_to_its_job(clean_cluster, hung_mount, tmp_path):
    """Slurm's cgroup/v2 refuses this hybrid host, so its layout is built here by hand in
    the host's real cgroup2 hierarchy: a job's task on n2 is moved to where 25.11 puts it
    with CgroupSlice=slurm.slice and several slurmd on the host
    (/slurm.slice/n2_slurmstepd.scope/job_J/step_0/user/task_0) and out of Slurm's v1
    cgroups, listpids is turned off, and it hangs on a dead filesystem. The health
    check ties it to the job by that path alone: n2 is drained naming the job, the job
    gets its comment; n1 and n3 see the same process and leave it to n2."""
    cluster = clean_cluster
    unified, mounted = _unified_hierarchy(tmp_path)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "stuck.py").write_text(WAITS_THEN_STUCK)
    job = cluster.sbatch("-N1", "-w", "n2", "--no-requeue", "-o", str(tmp_path / "job.out"), script=(
        "#!/bin/sh\n"
        f"srun {sys.executable} {tmp_path}/stuck.py {hung_mount.path} {barrier}\n"))
    cluster.wait_for(lambda: (barrier / "pid").exists() and (barrier / "pid").read_text(), 30,
                     what="the job's task started")
    pid = int((barrier / "pid").read_text())
    scope = unified / "slurm.slice" / "n2_slurmstepd.scope"
    task = scope / f"job_{job}" / "step_0" / "user" / "task_0"
    try:
        task.mkdir(parents=True)
        (task / "cgroup.procs").write_text(str(pid))
        for ctrls, own in _own_v1_cgroups().items():
            if f":{ctrls}:/slurm" in Path(f"/proc/{pid}/cgroup").read_text():
                (own / "cgroup.procs").write_text(str(pid))
        text = Path(f"/proc/{pid}/cgroup").read_text()
        assert f"0::/slurm.slice/n2_slurmstepd.scope/job_{job}/step_0/user/task_0\n" in text, text
        assert not [line for line in text.splitlines() if ":/slurm" in line and not line.startswith("0::")], text
        (barrier / "go").touch()
        cluster.wait_for(lambda: any(proc_state(int(t.name)) == "D"
                                     for t in Path(f"/proc/{pid}/task").iterdir()), 10,
                         what="the task's thread in D")
        enable_healthcheck(cluster, tmp_path, listpids_fallback=False)

        cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n2"), GRACE + 2 * INTERVAL + 5,
                         what="n2 drained")
        reason = cluster.show_node("n2")["Reason"]
        assert ours(reason, f"job {job} stuck in ") and f", pid {pid} [slurm-hooks]" in reason, reason
        assert f"stuck in openat() on {hung_mount.path} (" in reason
        cluster.wait_for(lambda: f"slurm-hooks: node n2: job {job}" in cluster.show_job(job)["AdminComment"],
                         10, what="the job's comment")
        # The run writes its journal line after its actions.
        sick = cluster.wait_for(lambda: next((r for r in journal(tmp_path, "n2")
                                              if r["status"] == "unhealthy"), None),
                                10, what="the draining run's journal line")
        [f] = [f for c in sick["checks"] for f in c["findings"] if f["status"] == "stuck"]
        assert (f["evidence"]["job"], f["evidence"]["node"]) == (str(job), "n2")
        for n in ("n1", "n3"):
            assert "DRAIN" not in cluster.node_state(n)
            assert all(r["status"] != "unhealthy" for r in journal(tmp_path, n))
    finally:
        # Out of Slurm's v1 cgroups, the task is no longer Slurm's to kill.
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        cluster.wait_for(lambda: proc_state(pid) in (None, "Z"), 10, what="the moved task gone")
        cluster.cancel_all()
        for d in (task, task.parent, task.parent.parent, task.parent.parent.parent, scope, scope.parent):
            cluster.wait_for(lambda d=d: _rmdir(d), 10, what=f"{d} removed")
        if mounted:
            subprocess.run(["umount", str(mounted)], check=False)


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
