"""A real FUSE network client this project did not write (Debian's rclone: `rclone mount`
of a WebDAV remote that `rclone serve webdav` serves on loopback), mounted by root with
allow_other, under an unprivileged user's job that opens a shard on it every step.

Its callers wait asleep (S, request_wait_answer) once it stops answering, where a scan
of D states never looks:
- the node's client hangs (the same storage answers elsewhere: a node-local fault):
  the node is drained at once; one health-check interval later, no other node naming
  the mount, the job is requeued with the mount and file *before* the mount is aborted
  and mounted again with rclone's own command, then the node resumes and the job runs
  again; it never ends FAILED.
The server itself freezing on every node (the storage's outage) and the clients dying
with a restart of the storage: tests/test_storage_night_cluster.py."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from attacker import PY
from helpers import journal, write_node_configs
from rclone_storage import RCLONE, free_port, mounted, pids_of
from test_security import mallory, mallory_session, sbatch_as  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster
INTERVAL = 3

# Each step opens the shard and looks at it: an OPEN, a GETATTR, a FLUSH that rclone must
# answer, each waited for asleep (S, request_wait_answer). Its data is not read: a read
# through the page cache may wait for a locked page instead, in D, which the scan of D
# tasks finds anyway; this test is about the sleepers in S.
READER = """
import os, sys, time
while True:
    fd = os.open(sys.argv[1] + "/shard", os.O_RDONLY)
    os.fstat(fd)
    os.close(fd)
    time.sleep(0.05)
"""


def actions(root, node, kind):
    return [a for r in journal(root, node) for a in r["actions"] if a["kind"] == kind]


class Remote:
    """`rclone serve webdav` of a directory, and root's `rclone mount` of it."""

    def __init__(self, base: Path):
        self.data, self.path = base / "data", base / "dataset"
        self.data.mkdir(parents=True)
        self.path.mkdir()
        os.chmod(base, 0o755)
        (self.data / "shard").write_bytes(b"x" * 8192)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(base / "rclone.log", "ab")
        self.server = subprocess.Popen([RCLONE, "serve", "webdav", str(self.data), "--addr", self.url[7:]],
                                       stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                       start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", int(self.url.rsplit(":", 1)[1])), 1):
                break
            assert time.monotonic() < deadline, "rclone serve did not start"
            time.sleep(0.05)
        subprocess.run(self.mount_argv(), check=True, timeout=70, stdin=subprocess.DEVNULL,
                       stdout=self.log, stderr=self.log)

    def mount_argv(self) -> list[str]:
        # No caches: each read is a request to the server, as a dataset reader's is.
        return [RCLONE, "mount", ":webdav:", str(self.path), "--webdav-url", self.url, "--allow-other",
                "--daemon", "--vfs-cache-mode", "off", "--dir-cache-time", "0s", "--attr-timeout", "0s"]

    def clients(self) -> list[int]:
        return pids_of("rclone", str(self.path))

    def close(self) -> None:
        for pid in self.clients() + [self.server.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        self.server.wait(10)
        with contextlib.suppress(OSError):
            # The connection of a killed client: abort it, then take the mount away.
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                f = line.split()
                if f[4] == str(self.path):
                    major, minor = map(int, f[2].split(":"))
                    with contextlib.suppress(OSError):
                        Path(f"/sys/fs/fuse/connections/{(major << 20) + minor}/abort").write_text("1")
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=10)
        self.log.close()


@pytest.fixture
def remote(mallory_session, tmp_path):  # noqa: F811
    r = Remote(mallory_session.base / f"rclone-{time.monotonic_ns()}")
    yield r
    r.close()


def configure(cluster, tmp_path, r: Remote, recover: dict | None, reboot: Path, nodes=("n1",)) -> None:
    fs = {"path": str(r.path), "mountpoint": str(r.path), "timeout": 1, "mode": "read"}
    if recover:
        fs["recover"] = recover
    per_node = {n: {"filesystems": [{"path": str(tmp_path)}, fs]} for n in nodes}
    wrapper = write_node_configs(tmp_path, cluster, per_node, {
        "filesystems": [{"path": str(tmp_path)}],
        "stuck_tasks": {"grace": 2, "sample_window": 0.5}, "policy": {"resume_after": 1}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL}\n"
                        f"HealthCheckNodeState=ANY\nRebootProgram={reboot}\n")


def reboot_program(tmp_path) -> tuple[Path, Path]:
    marker, program = tmp_path / "rebooted", tmp_path / "reboot-program"
    program.write_text(f"#!/bin/sh\necho rebooted >> {marker}\n")
    program.chmod(0o755)
    return program, marker


def start_reader(cluster, mallory, r: Remote) -> int:  # noqa: F811
    reader = mallory.write("reader.py", READER, 0o644)
    job = sbatch_as(mallory, cluster, f"exec {PY} {reader} {r.path}\n", "--requeue")
    cluster.wait_for(lambda: cluster.show_job(job).get("JobState") == "RUNNING", 30, what="the job running")
    return job


def test_the_nodes_rclone_client_hangs_the_job_first_then_the_mount_then_the_node(clean_cluster, mallory,  # noqa: F811
                                                                               remote, tmp_path):
    cluster = clean_cluster
    program, marker = reboot_program(tmp_path)
    configure(cluster, tmp_path, remote, {"method": "fuse-abort", "remount": remote.mount_argv(), "wait": 5}, program)
    job = start_reader(cluster, mallory, remote)
    [client] = remote.clients()
    hung = time.monotonic()
    os.kill(client, signal.SIGSTOP)          # this node's client stops answering
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 6 * INTERVAL + 20, what="the job requeued")
    requeued = time.monotonic() - hung
    # (The run's record is written once the run ends, a moment after the requeue.)
    [req] = cluster.wait_for(lambda: [a for a in actions(tmp_path, "n1", "requeue") if a["outcome"] == "done"],
                             2 * INTERVAL + 10, what="the requeue in the journal")
    assert f"on {remote.path}/shard" in req["text"] and "(asleep, S)" in req["text"], req["text"]
    recs = cluster.wait_for(lambda: [a for a in actions(tmp_path, "n1", "recover") if a["outcome"] == "done"],
                            6 * INTERVAL + 20, what="a recovery")
    assert recs[0]["code"] == "recovered", recs[0]["message"]
    # Jobs first: the recovery came after the requeue (a later run, or the same run
    # after it), never before it.
    runs = journal(tmp_path, "n1")
    first = {kind: min(i for i, r in enumerate(runs) for a in r["actions"] if a["kind"] == kind and a["outcome"] == "done")
             for kind in ("requeue", "recover")}
    assert first["requeue"] <= first["recover"], first
    cluster.wait_for(lambda: "DRAIN" not in cluster.node_state("n1"), 3 * INTERVAL + 15, what="n1 resumed")
    back = time.monotonic() - hung
    cluster.wait_for(lambda: cluster.show_job(job).get("JobState") == "RUNNING", 60, what="the job running again")
    assert mounted(remote.path) and remote.clients() != [client]
    assert not actions(tmp_path, "n1", "reboot") and not marker.exists()
    assert cluster.show_job(job).get("JobState") != "FAILED"
    print(f"rclone client hung: job requeued after {requeued:.1f}s, node back in service after {back:.1f}s")
