"""Run a test session in its own PID and mount namespaces, beside another session on the
same host (tests/run.sh runs the two Slurm versions' sessions side by side this way).

    python3 tests/namespaced.py PRIVATE_DIR -- COMMAND [ARG...]

What would let two sessions see each other is made private to each:
- the PID namespace: each session's health checks, leftover-process sweeps and
  stale-daemon checks see only its own processes (the other session's stuck test tasks
  would otherwise be stuck tasks on this session's nodes);
- the mount namespace: each session's hung FUSE mounts, and a directory of its own
  (under PRIVATE_DIR) bound over each path in PRIVATE: its own /tmp (pytest's basetemp,
  and what the leftovers check watches), its own munged socket, and slurm-hooks' own
  host paths.
- what others left mounted where the session looks (detach_others): every mount below
  those paths and every FUSE mount present at the start (a test's server that died
  leaves its mount behind), lazily unmounted in the session's namespace alone, so the
  default probes discover only the session's own mounts.

Shared on purpose: the cgroup hierarchies (Slurm locks its cgroup roots with flock, and
the job ids of the two clusters differ), the users (tests/attacker.py takes a suffix
per session), TCP ports (each session gets its own range: SLURM_HOOKS_TEST_PORTS).

A checkout (and the virtual environment in it) that lies under one of those paths, say
/tmp/slurm-hooks, would be hidden by the session's own /tmp: it is bound through, at the
same path, so the command finds its interpreter and its tests (a bind that fails stops
the session at once, saying so).

The command runs as a child of this script, which is PID 1 of the new namespace: it
reaps every orphan (the checker leaves its hung children to be reaped), forwards
SIGINT, SIGTERM, SIGHUP and SIGQUIT to the command's process group, and exits with the
command's status. The host's mount points must exist (tests/run.sh makes them first).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

PRIVATE = ("/tmp", "/run/munge", "/run/slurm-hooks", "/var/log/slurm-hooks")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def private_dir(root: Path, path: str) -> Path:
    return root / path.strip("/").replace("/", "-")


def enter(root: Path, argv: list[str]) -> None:
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    if unshare is None:
        sys.exit("namespaced.py: unshare(1) is missing (util-linux)")
    missing = [p for p in PRIVATE if not os.path.isdir(p)]
    if missing:
        sys.exit(f"namespaced.py: make these mount points first: {', '.join(missing)}")
    os.execv(unshare, [unshare, "--pid", "--fork", "--mount-proc", "--propagation", "private",
                       sys.executable, os.path.abspath(__file__), "--init", str(root), "--", *argv])


CHECKOUT = Path(__file__).resolve().parent.parent
MS_BIND, MS_REC = 0x1000, 0x4000


def hidden(paths: list[Path]) -> list[Path]:
    """Those of `paths` that a private path would hide (one inside another: the outer)."""
    found = {p for p in paths for q in PRIVATE if p != Path(q) and Path(q) in p.parents}
    return sorted(p for p in found if not any(o in p.parents for o in found))


def carry_through(paths: list[Path]) -> dict[Path, int]:
    """Before the private binds: an open handle on each path they would hide."""
    return {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in paths}


def bind_back(handles: dict[Path, int]) -> None:
    """After the private binds: each hidden path bound back at its own place, from its
    handle (its path now names the private directory). mount(8) would resolve the
    handle's /proc/self/fd name to that path string: the system call follows the link."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for path, fd in handles.items():
        path.mkdir(parents=True, exist_ok=True)
        if libc.mount(f"/proc/self/fd/{fd}".encode(), str(path).encode(), None, MS_BIND | MS_REC, None) != 0:
            err = ctypes.get_errno()
            sys.exit(f"namespaced.py: cannot bind the checkout {path} through the session's private "
                     f"{', '.join(PRIVATE)}: {os.strerror(err)}; move the checkout elsewhere (not under /tmp)")
        os.close(fd)


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def detach_others() -> list[str]:
    """Lazily unmount, in this namespace only (its propagation is private), what other
    sessions or earlier runs left mounted where this session looks: every mount below a
    path made private here, and every FUSE mount (a test's server that died leaves its
    mount behind, answering ENOTCONN). Default probes discover network and FUSE mounts
    from the mount table: another's would fail this session's healthy runs."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split(" ")
            try:
                fstype = parts[parts.index("-", 6) + 1]
            except (ValueError, IndexError):
                continue
            point = _unescape(parts[4])
            below = any(point.startswith(p.rstrip("/") + "/") for p in PRIVATE)
            if below or fstype == "fuse" or fstype.startswith(("fuse.", "fuseblk")):
                points.append(point)
    gone = []
    for point in sorted(set(points), key=len, reverse=True):
        if subprocess.run(["umount", "-l", point], capture_output=True).returncode == 0:
            gone.append(point)
    return gone


def bind_private(root: Path) -> None:
    detach_others()
    for path in PRIVATE:
        own = private_dir(root, path)
        own.mkdir(parents=True, exist_ok=True)
        st = os.stat(path)
        os.chown(own, st.st_uid, st.st_gid)
        os.chmod(own, st.st_mode & 0o7777)
        subprocess.run(["mount", "--bind", str(own), path], check=True)


def init(root: Path, argv: list[str]) -> int:
    if os.getpid() != 1:
        sys.exit("namespaced.py --init runs only as PID 1 of a new PID namespace")
    handles = carry_through(hidden([CHECKOUT, Path(os.getcwd()).resolve()]))
    bind_private(root)
    bind_back(handles)
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)     # signals reach it once, through us, not also from the tty
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"namespaced.py: {argv[0]}: {e}", file=sys.stderr)
            os._exit(127)
    try:
        os.setpgid(child, child)
    except OSError:
        pass                 # it has exec'd already, having set it itself

    def forward(signum, frame):
        try:
            os.killpg(child, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def detached(args: list[str]) -> int:
    """`--detached -- COMMAND...`: the command in a mount namespace of its own (no PID
    namespace, no private paths), where what others left mounted is detached
    (detach_others): for the tests that take over the host's own paths, which must see
    the host, not another session's FUSE mounts."""
    if args[:1] == ["--inside"]:
        detach_others()
        os.execvp(args[2], args[2:])
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    if unshare is None:
        sys.exit("namespaced.py: unshare(1) is missing (util-linux)")
    os.execv(unshare, [unshare, "--mount", "--propagation", "private", sys.executable,
                       os.path.abspath(__file__), "--detached", "--inside", *args])
    return 0


def main(args: list[str]) -> int:
    if args[:1] == ["--detached"]:
        return detached(args[1:])
    inside = args[:1] == ["--init"]
    if inside:
        args = args[1:]
    if len(args) < 3 or args[1] != "--":
        sys.exit(__doc__.split("\n\n")[1])
    root, argv = Path(args[0]).resolve(), args[2:]
    if hidden([root]):
        sys.exit(f"namespaced.py: {root} would be hidden by the session's own {', '.join(PRIVATE)}: "
                 "give a PRIVATE_DIR elsewhere (tests/run.sh uses /var/tmp)")
    if inside:
        return init(root, argv)
    root.mkdir(parents=True, exist_ok=True)
    enter(root, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
