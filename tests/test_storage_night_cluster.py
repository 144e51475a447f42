"""The storage's night on the real cluster, with slurmd running the health check every
few seconds and an unprivileged user's jobs (decide/mount_incident.py):

- the storage freezes for 60 s under a running 2-node job (Debian's rclone: `rclone
  serve webdav` is the storage, root's `rclone mount` of it its client on every node):
  the job is never requeued, steps again soon after the storage answers, and its
  AdminComment says how long it waited; a job on a node whose `outage.requeue_after` is
  30 s is requeued once; no reboot, never more than the drain limit drained;
- the storage restarts: every node's client dies at once (ENOTCONN, nothing hangs):
  every node remounts by itself (`recover.remount`) and is back in service, the drain
  limit held at every moment, no reboot; then one node's client alone dies, and that
  node alone remounts;
- a node drained for its own hang, then resumed by an admin, is no witness: another
  node's own fault on the same storage is that node's, not an outage;
- a --no-requeue job reading a node mount whose server stops: the mount is not aborted
  under it while it runs; once it ends, the recovery aborts and remounts, on a node
  where nothing had mounted fusectl."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attacker import PY
from helpers import journal, write_node_configs
from mounts_fixtures import start_fuse
from rclone_storage import SOURCE, Storage
from test_security import mallory, mallory_session, readable_by_users  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster
INTERVAL = 3
HERE = Path(__file__).resolve().parent

# Each step opens the shard, looks at it and says so in a file of its own (on local
# disk): the job's progress, which stops while the storage does not answer.
READER = """
import os, sys, time
mount, progress = sys.argv[1], sys.argv[2] + "-" + os.environ.get("SLURMD_NODENAME", "x")
errors = 0
while True:
    try:
        fd = os.open(mount + "/shard", os.O_RDONLY)
        os.fstat(fd)
        os.close(fd)
    except OSError as e:
        errors += 1
    with open(progress, "a") as f:
        f.write(f"{time.time()} {errors}\\n")
    time.sleep(0.1)
"""


def actions(root, node, kind, outcome=None):
    return [a for r in journal(root, node) for a in r["actions"]
            if a["kind"] == kind and (outcome is None or a["outcome"] == outcome)]


def submit(user, cluster, body: str, *args: str) -> int:  # noqa: F811
    user._n += 1
    script = user.write(f"night{user._n}.sh", "#!/bin/sh\n" + body, 0o755)
    conf = readable_by_users(cluster)
    r = user.run(cluster.binary("sbatch"), "--parsable", "--chdir", user.home, "-o", user.home / f"night{user._n}.out",
                 *args, script, env=user.env(SLURM_CONF=str(conf)))
    return int(r.stdout.strip().split(";")[0])


def last_step(path: Path) -> tuple[float, int]:
    """(when the reader last stepped, how many of its calls failed)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        when, errors = path.read_text().splitlines()[-1].split()
        return float(when), int(errors)
    return 0.0, 0


def ours_drained(cluster) -> list[str]:
    return [n for n in cluster.nodes if "DRAIN" in cluster.node_state(n)
            and "[slurm-hooks]" in cluster.out_of_service_reason(n)]


class Limit:
    """The drain limit (1 here) at every moment the test looks (every 0.2 s): simultaneous
    runs claim their place before they drain (decide/breaker.py), so no node beyond the
    limit is ever drained, not even for a moment."""

    def __init__(self):
        self.most = 0

    def held(self, drained: list[str]) -> list[str]:
        assert len(drained) <= 1, drained
        self.most = max(self.most, len(drained))
        return drained


def reboot_program(tmp_path) -> tuple[Path, Path]:
    marker, program = tmp_path / "rebooted", tmp_path / "reboot-program"
    program.write_text(f"#!/bin/sh\necho rebooted >> {marker}\n")
    program.chmod(0o755)
    return program, marker


def run_health_checks(cluster, wrapper: Path, program: Path, extra: str = "") -> None:
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                        f"HealthCheckNodeState=ANY\nRebootProgram={program}\n" + extra)


def test_a_60s_outage_is_waited_out_by_the_jobs(clean_cluster, mallory, tmp_path):  # noqa: F811
    cluster = clean_cluster
    base = mallory.base / f"night-{time.monotonic_ns()}"
    storage = Storage(base, [base / "gpfs"])
    try:
        point = storage.points[0]
        program, marker = reboot_program(tmp_path)
        fs = {"path": str(point), "mountpoint": str(point), "timeout": 1, "mode": "read"}
        wrapper = write_node_configs(tmp_path, cluster, {"n3": {"outage": {"requeue_after": 30}}}, {
            "filesystems": [{"path": str(tmp_path)}, fs],
            "stuck_tasks": {"grace": 2, "sample_window": 0.5},
            "policy": {"resume_after": 1, "max_drained_nodes": 3}})
        reader = mallory.write("night-reader.py", READER, 0o644)
        progress = mallory.home / "progress"
        # Slurm gives up killing the requeued job's task (held by the storage) soon: its
        # `Kill task failed` drain is the outage's to re-word and resume. slurmstepd reads
        # it when it starts the job.
        unkillable = "UnkillableStepTimeout=10\n"
        cluster.reconfigure(unkillable)
        wide = submit(mallory, cluster, f"exec {cluster.binary('srun')} {PY} {reader} {point} {progress}-wide\n",
                      "-N2", "-w", "n1,n2", "--requeue")
        alone = submit(mallory, cluster, f"exec {PY} {reader} {point} {progress}-alone\n",
                       "-N1", "-w", "n3", "--requeue")
        for job in (wide, alone):
            try:
                cluster.wait_for(lambda job=job: cluster.show_job(job).get("JobState") == "RUNNING", 30,
                                 what=f"job {job} running")
            except AssertionError as e:
                raise AssertionError(f"{e}: {cluster.show_job(job)}; {cluster.show_nodes()}") from None
        wide_steps = Path(f"{progress}-wide-n1")
        cluster.wait_for(lambda: last_step(wide_steps)[0], 30, what="the job stepping")
        run_health_checks(cluster, wrapper, program, unkillable)
        time.sleep(INTERVAL)
        os.kill(storage.server.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        while time.monotonic() - frozen < 60:
            assert cluster.show_job(wide).get("Restarts") == "0"
            time.sleep(0.5)
        assert ours_drained(cluster), "no node drained during the outage"
        # The job on n3 waited 30 s, then was requeued, once; the 2-node job never.
        assert cluster.show_job(alone).get("Restarts") == "1", cluster.show_job(alone)
        requeued = actions(tmp_path, "n3", "requeue", "done")
        assert len(requeued) == 1 and "requeued after waiting" in requeued[0]["text"], requeued
        for node in cluster.nodes:
            assert not actions(tmp_path, node, "reboot", "done") and not actions(tmp_path, node, "recover", "done")
        assert not marker.exists()
        said = cluster.show_job(wide).get("AdminComment", "")
        assert f"waiting on the outage of {SOURCE} ({point}) since " in said, said
        # The storage answers: the job steps again, every node back in service.
        os.kill(storage.server.pid, signal.SIGCONT)
        answered = time.monotonic()
        cluster.wait_for(lambda: last_step(wide_steps)[0] > time.time() - 0.5 and
                         time.monotonic() - answered > 0.5, 20, what="the 2-node job stepping again")
        stepping = time.monotonic() - answered
        cluster.wait_for(lambda: not [n for n in cluster.nodes if "DRAIN" in cluster.node_state(n)],
                         6 * INTERVAL + 20, what="every node back in service")
        back = time.monotonic() - answered
        info = cluster.show_job(wide)
        assert (info["JobState"], info["Restarts"]) == ("RUNNING", "0"), info
        cluster.wait_for(lambda: f"waited on the outage of {SOURCE} ({point}) " in
                         cluster.show_job(wide).get("AdminComment", ""), 4 * INTERVAL + 10,
                         what="the job told how long it waited")
        assert last_step(wide_steps)[1] == 0, "a call of the job failed: the mount was aborted under it"
        # Slurm's `Kill task failed` on n3 (the requeued job's task the storage held) was
        # the outage's: re-worded so, and resumed with it.
        reworded = [a for a in actions(tmp_path, "n3", "drain", "done") if a["code"] == "replaced_generic"]
        assert reworded and reworded[0]["reason"].startswith(f"storage outage {SOURCE} ({point})"), \
            actions(tmp_path, "n3", "drain")
        assert not marker.exists()
        print(f"60 s outage: the job stepping again {stepping:.1f}s after the storage answered, "
              f"every node back in service after {back:.1f}s")
    finally:
        storage.close()


def test_a_storage_restart_every_node_remounts_by_itself(clean_cluster, mallory, tmp_path):  # noqa: F811
    cluster = clean_cluster
    base = mallory.base / f"restart-{time.monotonic_ns()}"
    storage = Storage(base, [base / n for n in cluster.nodes])
    try:
        program, marker = reboot_program(tmp_path)
        per_node = {}
        for n, point in zip(cluster.nodes, storage.points):
            per_node[n] = {"filesystems": [{"path": str(tmp_path)}, {
                "path": str(point), "mountpoint": str(point), "timeout": 1, "mode": "read",
                "recover": {"remount": storage.mount_argv(point)}}]}
        wrapper = write_node_configs(tmp_path, cluster, per_node, {
            "policy": {"resume_after": 1, "max_drained_nodes": 1, "max_drained_fraction": 0}})
        run_health_checks(cluster, wrapper, program)
        time.sleep(INTERVAL)
        clients = {p: storage.clients(p) for p in storage.points}
        assert all(len(c) == 1 for c in clients.values()), clients
        for [pid] in clients.values():
            os.kill(pid, signal.SIGKILL)            # the storage restarted: every client is gone
        died = time.monotonic()
        limit = Limit()

        def remounted():
            drained = limit.held(ours_drained(cluster))
            done = [n for n in cluster.nodes if actions(tmp_path, n, "recover", "done")]
            return len(done) == 3 and not drained and all(
                storage.clients(p) and storage.clients(p) != clients[p] for p in storage.points)
        cluster.wait_for(remounted, 12 * INTERVAL + 30, interval=0.2, what="every node remounted and back")
        took = time.monotonic() - died
        # One node at a time drained (its remount may be quick enough to be missed by the
        # polls): never more.
        assert limit.most <= 1 and any(actions(tmp_path, n, "drain", "done") for n in cluster.nodes)
        for n, point in zip(cluster.nodes, storage.points):
            [rec] = actions(tmp_path, n, "recover", "done")
            assert rec["code"] == "recovered" and "remounted without reboot" in rec["message"], rec
            assert not actions(tmp_path, n, "reboot", "done"), n
            assert (point / "shard").read_bytes() == b"x" * 8192
        notes = [x for n in cluster.nodes for r in journal(tmp_path, n) for x in r.get("notes", [])
                 if x.startswith("storage restart: ")]
        assert notes and notes[0].startswith(f"storage restart: {SOURCE} ("), notes
        assert not marker.exists()
        # Now n1's client alone dies: n1 alone remounts.
        [pid] = storage.clients(storage.points[0])
        os.kill(pid, signal.SIGKILL)
        # A new death, a new remount (whether or not a run of n1 saw the mount answer in
        # between: the remount ended the first incident).
        cluster.wait_for(lambda: len(actions(tmp_path, "n1", "recover", "done")) == 2
                         and "DRAIN" not in cluster.node_state("n1"), 12 * INTERVAL + 30, what="n1 remounted again")
        assert [len(actions(tmp_path, n, "recover", "done")) for n in ("n2", "n3")] == [1, 1]
        assert not marker.exists()
        print(f"storage restart: every node of 3 remounted and back in service {took:.1f}s after its clients died")
    finally:
        storage.close()


def test_a_node_an_admin_resumed_is_no_witness_of_an_outage(clean_cluster, mallory, tmp_path):  # noqa: F811
    cluster = clean_cluster
    base = mallory.base / f"witness-{time.monotonic_ns()}"
    base.mkdir(mode=0o755)
    # Each node's own client of the same storage: one source name everywhere.
    mounts = {n: start_fuse(base / n, "ok", name=SOURCE, subtype="gpfs") for n in ("n1", "n2")}
    try:
        program, marker = reboot_program(tmp_path)
        per_node = {n: {"filesystems": [{"path": str(tmp_path)}, {"path": str(m.path), "mountpoint": str(m.path),
                                                                   "timeout": 1, "mode": "read"}]}
                    for n, m in mounts.items()}
        wrapper = write_node_configs(tmp_path, cluster, per_node, {
            "policy": {"resume_after": 50, "max_drained_nodes": 3}})
        run_health_checks(cluster, wrapper, program)
        mounts["n2"].stall()
        cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n2") and SOURCE in
                         cluster.show_node("n2").get("Comment", ""), 4 * INTERVAL + 10, what="n2 drained, naming it")
        seen = len(journal(tmp_path, "n2"))
        mounts["n2"].resume()
        # A run in flight may still have seen the hang (and drain again after the admin's
        # resume, rightly): the admin resumes once a run found the mount answering.
        cluster.wait_for(lambda: any(r.get("status") == "healthy" for r in journal(tmp_path, "n2")[seen:]),
                         2 * INTERVAL + 10, what="a run of n2 that finds its mount answering")
        cluster.scontrol("update", "nodename=n2", "state=resume")          # the admin's hand
        cluster.wait_for(lambda: SOURCE not in cluster.show_node("n2").get("Comment", ""), 4 * INTERVAL + 10,
                         what="n2's word taken out of its Comment")
        mounts["n1"].stall()
        stalled = time.monotonic()
        cluster.wait_for(lambda: [i for i in _incidents(tmp_path, "n1") if i.get("scope") == "node"],
                         6 * INTERVAL + 20, what="n1's own fault")
        assert time.monotonic() - stalled >= INTERVAL
        notes = [x for r in journal(tmp_path, "n1") for x in r.get("notes", []) if x.startswith("outage of ")]
        assert not notes, notes
    finally:
        for m in mounts.values():
            m.resume()
            m.close()


def _incidents(root: Path, node: str) -> list[dict]:
    import json
    path = root / "state" / node / "mount-incidents.json"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text()).get("incidents", [])
    return []


def test_no_abort_under_a_job_that_cannot_be_requeued(clean_cluster, mallory, tmp_path):  # noqa: F811
    cluster = clean_cluster
    base = mallory.base / f"noreq-{time.monotonic_ns()}"
    base.mkdir(mode=0o755)
    m = start_fuse(base / "scratch", "ok", name="scratch-n1")
    fusectl = "/sys/fs/fuse/connections"
    if any(line.split()[4] == fusectl for line in Path("/proc/self/mountinfo").read_text().splitlines()):
        subprocess.run(["umount", fusectl], check=True, timeout=10)        # a node where nothing mounted it
    try:
        Path(m.path, "shard").write_bytes(b"x" * 8192)
        program, marker = reboot_program(tmp_path)
        ready = Path(str(m.path) + ".remount.ready")
        fs = {"path": str(m.path), "mountpoint": str(m.path), "timeout": 1, "mode": "read",
              "recover": {"method": "fuse-abort", "wait": 5,
                          "remount": [sys.executable, str(HERE / "remount_fuse.py"), "ok", "{mountpoint}", str(ready)]}}
        wrapper = write_node_configs(tmp_path, cluster, {"n1": {"filesystems": [{"path": str(tmp_path)}, fs]}}, {
            "filesystems": [{"path": str(tmp_path)}], "outage": {"interval": INTERVAL},
            "stuck_tasks": {"grace": 2, "sample_window": 0.5}, "policy": {"resume_after": 1}})
        reader = mallory.write("noreq-reader.py", READER, 0o644)
        progress = mallory.home / "noreq"
        job = submit(mallory, cluster, f"exec {PY} {reader} {m.path} {progress}\n", "-N1", "-w", "n1", "--no-requeue")
        cluster.wait_for(lambda: cluster.show_job(job).get("JobState") == "RUNNING", 30, what="the job running")
        run_health_checks(cluster, wrapper, program)
        m.stall()
        cluster.wait_for(lambda: [a for a in actions(tmp_path, "n1", "recover") if a["code"] == "jobs_first"],
                         8 * INTERVAL + 20, what="the recovery waiting for the job")
        time.sleep(3 * INTERVAL)
        assert cluster.show_job(job)["JobState"] == "RUNNING"
        assert not actions(tmp_path, "n1", "recover", "done")
        assert last_step(Path(f"{progress}-n1"))[1] == 0, "a call of the job failed: the mount was aborted under it"
        # The job ends: now the mount may be aborted and brought back.
        mallory.run(cluster.binary("scancel"), str(job), env=mallory.env(SLURM_CONF=str(readable_by_users(cluster))))
        [rec] = cluster.wait_for(lambda: actions(tmp_path, "n1", "recover", "done"), 8 * INTERVAL + 30,
                                 what="the recovery after the job ended")
        assert rec["code"] == "recovered", rec["message"]
        said = [x for r in journal(tmp_path, "n1") for x in r.get("notes", []) + [a.get("message", "")
                for a in r["actions"]] if "fusectl was not mounted" in str(x)]
        assert said, "fusectl was mounted by someone else than slurm-hooks"
        assert not marker.exists()
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(Path(str(m.path) + ".remount.ready").read_text().strip() or 0), signal.SIGKILL)
        m.resume()
        m.close()
