"""A real unprivileged user for the attack tests (tests/test_security.py).

The user is made with `useradd` for the test session and removed after it; every
command of theirs runs through `setpriv` with their uid, gid and no supplementary
groups or capabilities, from a directory of their own under a world-traversable base
(pytest's tmp_path is root's 0700). /dev/fuse is made 0666 for the session, as udev
makes it on a standard Debian node, so the user can mount FUSE with fusermount3.

Their programs run with Debian's /usr/bin/python3 (the test venv's interpreter may live
under /root) and a copy of tests/fusefs.py they can read.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from helpers import poll

HERE = Path(__file__).resolve().parent
PY = "/usr/bin/python3"
USER = "shk-mallory"
# Users are the host's, not a session's: sessions side by side each name theirs with a
# suffix of their own (tests/run.sh), so neither removes a user the other still runs as.
USER_SUFFIX = os.environ.get("SLURM_HOOKS_TEST_USER_SUFFIX", "")


def pids_of(uid: int) -> list[int]:
    """Processes of uid, from /proc/PID/status alone: pgrep and pkill read command lines,
    which blocks behind a process whose memory map is locked by a stuck page fault (the
    very state some attacks here create)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if int(line.split()[1]) == uid:
                            out.append(int(pid))
                        break
        except (OSError, ValueError):
            continue
    return out


def _mounts_under(base: Path) -> list[str]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split(" ")[4].replace("\\040", " ")
            if point.startswith(str(base) + "/"):
                out.append(point)
    return sorted(out, key=len, reverse=True)


class UserFuse:
    """A FUSE filesystem the user mounted for themselves (fusermount3)."""

    def __init__(self, user: "Attacker", path: Path, proc: subprocess.Popen):
        self.user, self.path, self.proc, self.pid = user, path, proc, proc.pid

    def stall(self):
        os.kill(self.pid, signal.SIGUSR1)

    def close(self):
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        subprocess.run(["umount", "-l", "-c", str(self.path)], capture_output=True, timeout=10)


class Attacker:
    def __init__(self, name: str, base: Path):
        pw = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, pw.pw_uid, pw.pw_gid
        self.base = base                      # world-traversable, root's
        self.home = base / name               # the user's own
        self.procs: list[subprocess.Popen] = []
        self.mounts: list[UserFuse] = []
        self._n = 0

    # --- running things as the user ----------------------------------------------------
    def argv(self, *argv) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--", *map(str, argv)]

    def env(self, **extra) -> dict:
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8", **extra}

    def run(self, *argv, env: dict | None = None, timeout: float = 30, check: bool = True):
        r = subprocess.run(self.argv(*argv), env=env or self.env(), capture_output=True, text=True,
                           timeout=timeout, cwd=self.home)
        if check and r.returncode != 0:
            raise AssertionError(f"{argv} as {self.name}: rc {r.returncode}: {r.stderr}")
        return r

    def spawn(self, *argv, env: dict | None = None, log: str = "spawn") -> subprocess.Popen:
        self._n += 1
        out = open(self.home / f"{log}.{self._n}.log", "wb")
        p = subprocess.Popen(self.argv(*argv), env=env or self.env(), stdin=subprocess.DEVNULL,
                             stdout=out, stderr=out, cwd=self.home, start_new_session=True)
        out.close()
        self.procs.append(p)
        return p

    def python(self, code: str, *args, **kw) -> subprocess.Popen:
        return self.spawn(PY, "-c", code, *args, **kw)

    # --- files of theirs -----------------------------------------------------------------
    def own(self, path: Path) -> Path:
        os.chown(path, self.uid, self.gid)
        return path

    def mkdir(self, name: str) -> Path:
        p = self.home / name
        p.mkdir(parents=True, exist_ok=True)
        return self.own(p)

    def write(self, name: str, text: str, mode: int = 0o644) -> Path:
        p = self.home / name
        p.write_text(text)
        p.chmod(mode)
        return self.own(p)

    def fuse(self, mode: str, name: str, *extra: str) -> UserFuse:
        """Mount tests/fusefs.py in `mode` on ~/name as the user (fusermount3)."""
        path = self.mkdir(name)
        ready = self.home / f"{name}.ready"
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()
        proc = self.spawn(PY, self.home / "fusefs.py", mode, path, "--fusermount",
                          "--ready-file", ready, "--name", f"user-{name}", *extra, log=f"fuse-{name}")
        poll(lambda: ready.exists() or proc.poll() is not None, 10, what=f"{name} mounted")
        assert proc.poll() is None, (self.home / f"fuse-{name}.{self._n}.log").read_text()
        m = UserFuse(self, path, proc)
        self.mounts.append(m)
        return m

    def cleanup(self):
        """Kill every process of the user, unmount what they mounted."""
        for pid in pids_of(self.uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        for m in self.mounts:
            m.close()
        for point in _mounts_under(self.base):
            subprocess.run(["umount", "-l", "-c", point], capture_output=True, timeout=10)
        poll(lambda: not pids_of(self.uid), 10, what=f"every process of {self.name} gone")
        self.procs, self.mounts = [], []


def _shadow_tool(argv: list[str], check: bool = True) -> None:
    """useradd/userdel, waiting out the other session's lock on /etc/passwd."""
    deadline = time.monotonic() + 30
    while True:
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode == 0 or "lock" not in r.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if check and r.returncode != 0:
        raise subprocess.CalledProcessError(r.returncode, argv, r.stdout, r.stderr)


# What this test session made in /tmp (the users' homes must be reachable by them, so not
# under pytest's 0700 basetemp): the session's check counts these, not another session's.
MADE_IN_TMP: set[str] = set()


@contextlib.contextmanager
def unprivileged_user(name: str = USER):
    """The user for a test session (the name with this session's USER_SUFFIX); removed
    (with everything of theirs) afterwards."""
    name += USER_SUFFIX
    made = False
    try:
        pwd.getpwnam(name)
    except KeyError:
        _shadow_tool(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name])
        made = True
    base = Path(tempfile.mkdtemp(prefix="shk-sec-", dir="/tmp"))
    MADE_IN_TMP.add(base.name)
    base.chmod(0o755)
    fuse_mode = os.stat("/dev/fuse").st_mode & 0o777 if os.path.exists("/dev/fuse") else None
    try:
        if fuse_mode is not None:
            os.chmod("/dev/fuse", 0o666)
        user = Attacker(name, base)
        user.home.mkdir()
        user.own(user.home)
        shutil.copy(HERE / "fusefs.py", user.home / "fusefs.py")
        yield user
    finally:
        with contextlib.suppress(Exception):
            user.cleanup()
        if fuse_mode is not None:
            os.chmod("/dev/fuse", fuse_mode)
        if made:
            _shadow_tool(["userdel", name], check=False)
        for point in _mounts_under(base):
            subprocess.run(["umount", "-l", "-c", point], capture_output=True, timeout=10)
        time.sleep(0.1)
        shutil.rmtree(base, ignore_errors=True)
