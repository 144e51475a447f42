"""The storage of the cluster tests, played by Debian's rclone: `rclone serve webdav` of a
directory is the storage, root's `rclone mount` of it (allow_other, no caches: each
read is a request to the server) its client, one per mount point, all of them known by
one source name (`--devname`), as a real shared filesystem's clients are on every node.
A frozen server (SIGSTOP) is the storage that stopped answering; a killed client the
storage's restart (its mount answers ENOTCONN at once)."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

# Debian's rclone, which tests/run.sh installs: its absence is a failure, never a skip.
RCLONE = shutil.which("rclone") or "/usr/bin/rclone"
SOURCE = "gpfs:/fs1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pids_of(comm: str, word: str) -> list[int]:
    """Our rclone processes, told apart by a word of their command line (read here, in
    the test, of processes that are ours and do not hang)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (p / "comm").read_text().strip() == comm and word in (p / "cmdline").read_bytes().decode(errors="replace"):
                out.append(int(p.name))
    return out


def mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())


class Storage:
    """`rclone serve webdav` of a directory (the storage) and root's `rclone mount` of it
    (its clients), one per mount point, all of them known by one source name."""

    def __init__(self, base: Path, points: list[Path]):
        self.data, self.points = base / "data", points
        self.data.mkdir(parents=True)
        os.chmod(base, 0o755)
        (self.data / "shard").write_bytes(b"x" * 8192)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(base / "rclone.log", "ab")
        self.server = subprocess.Popen([RCLONE, "serve", "webdav", str(self.data), "--addr", self.url[7:]],
                                       stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                       start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", int(self.url.rsplit(":", 1)[1])), 1).close()
                break
            assert time.monotonic() < deadline, "rclone serve did not start"
            time.sleep(0.05)
        for p in points:
            p.mkdir(parents=True, exist_ok=True)
            subprocess.run(self.mount_argv(p), check=True, timeout=70, stdin=subprocess.DEVNULL,
                           stdout=self.log, stderr=self.log)

    def mount_argv(self, point: Path) -> list[str]:
        return [RCLONE, "mount", ":webdav:", str(point), "--webdav-url", self.url, "--allow-other", "--daemon",
                "--vfs-cache-mode", "off", "--dir-cache-time", "0s", "--attr-timeout", "0s", "--devname", SOURCE]

    def clients(self, point: Path) -> list[int]:
        return pids_of("rclone", f"{point}\0")

    def close(self) -> None:
        for pid in [c for p in self.points for c in self.clients(p)] + [self.server.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        self.server.wait(10)
        for p in self.points:
            for _ in range(3):
                if not mounted(p):
                    break
                subprocess.run(["umount", "-l", str(p)], capture_output=True, timeout=10)
        self.log.close()
