"""Test mounts that misbehave: hung, slow, failing FUSE filesystems, read-only
and full tmpfs; helpers to watch probe processes without hanging pytest.

Everything here is careful never to touch a mount that may hang from the
pytest process itself: no stat/realpath/ismount on mount points (mount state
comes from /proc/self/mountinfo), no waiting without a deadline on a process
that may sit in state D, `umount -l -c` (no path canonicalisation, which
would stat the mount point).

Use the fixtures by importing them into a test module
(`from mounts_fixtures import hung_mount, spawn_child`) or by registering
the module as a plugin in the root conftest.py:
`pytest_plugins = ["mounts_fixtures"]`.

Everything needs root; the fixtures skip the test otherwise.
"""

import collections
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FUSEFS = os.path.join(HERE, "fusefs.py")
FUSE_MODES = ("unanswered", "swallow", "stuck", "late", "ok", "slow",
              "errno")
FUSECTL_DIR = "/sys/fs/fuse/connections"


# --- /proc helpers ---------------------------------------------------------------

MountEntry = collections.namedtuple(
    "MountEntry", "mount_id parent_id major minor root mountpoint options "
                  "fstype source super_options")


def _unescape(field):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def read_mountinfo():
    """Parse /proc/self/mountinfo (reading it never contacts a filesystem)."""
    entries = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-", 6)
            major, minor = fields[2].split(":")
            entries.append(MountEntry(
                int(fields[0]), int(fields[1]), int(major), int(minor),
                _unescape(fields[3]), _unescape(fields[4]), fields[5],
                fields[sep + 1], _unescape(fields[sep + 2]),
                fields[sep + 3] if len(fields) > sep + 3 else ""))
    return entries


def mounts_at(path):
    """Mount entries whose mount point is exactly `path` (canonical path)."""
    return [m for m in read_mountinfo() if m.mountpoint == path]


def is_mounted(path):
    return bool(mounts_at(path))


def canonical_mountpoint(path):
    """Canonical path of a not-yet-mounted-on directory, resolving only the
    parent (resolving the mount point itself would stat it)."""
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent), name)


def proc_stat(pid):
    """(state, ppid) of pid from /proc/PID/stat, or None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = data[data.rindex(")") + 2:].split()
    return rest[0], int(rest[1])


def proc_state(pid):
    """One-letter state (R S D Z T ...) of pid, or None if it is gone."""
    st = proc_stat(pid)
    return st[0] if st else None


def proc_wchan(pid):
    try:
        with open("/proc/%d/wchan" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_syscall(pid):
    try:
        with open("/proc/%d/syscall" % pid) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return ""


def wait_for_state(pid, states, timeout):
    """Poll until pid's state is one of `states`; return it, or the last
    state seen (None: process gone) when the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        state = proc_state(pid)
        if state in states or state is None or time.monotonic() >= deadline:
            return state
        time.sleep(0.02)


def _under(link, path):
    return link == path or link.startswith(path.rstrip("/") + "/")


def processes_using(path):
    """[(pid, state, wchan, what)] of processes with cwd, root or an open
    fd under path.  Only readlinks in /proc: never touches the mount."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        base = "/proc/%d/" % pid
        links = ["cwd", "root"]
        try:
            links += ["fd/" + fd for fd in os.listdir(base + "fd")]
        except OSError:
            pass
        for link in links:
            try:
                target = os.readlink(base + link)
            except OSError:
                continue
            if _under(target, path):
                found.append((pid, proc_state(pid), proc_wchan(pid), link))
                break
    return found


def stuck_fuse_waiters():
    """[(pid, state, wchan)] of processes in state D waiting in FUSE code."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if proc_state(pid) == "D":
            wchan = proc_wchan(pid)
            if "fuse" in wchan or wchan == "request_wait_answer":
                found.append((pid, "D", wchan))
    return found


# --- bounded subprocesses -------------------------------------------------------

def poll_exit(proc, timeout):
    """Popen.poll() until it exits or the deadline passes (never blocks)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc.returncode


def run_bounded(argv, timeout=10.0, log_path=None):
    """Run argv with stdin from /dev/null and output into a file; on timeout
    SIGKILL it and give up after 2 more seconds (it may be in state D).
    Returns (returncode or None, output)."""
    out = open(log_path, "w+b") if log_path else tempfile.TemporaryFile()
    with out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd="/",
                                start_new_session=True)
        rc = poll_exit(proc, timeout)
        if rc is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            rc = poll_exit(proc, 2.0)
        out.seek(0)
        return rc, out.read().decode(errors="replace")


def _umount_lazy(path, timeout=10.0):
    try:
        return run_bounded(["umount", "-l", "-c", path], timeout)
    except FileNotFoundError:  # no util-linux: umount2(MNT_DETACH) in a child
        code = ("import ctypes,os,sys; l=ctypes.CDLL(None,use_errno=True); "
                "sys.exit(0 if l.umount2(os.fsencode(sys.argv[1]),2)==0 "
                "else ctypes.get_errno())")
        return run_bounded([sys.executable, "-c", code, path], timeout)


# --- probe children ---------------------------------------------------------------

CHILD_PRELUDE = r'''
import errno, json, os, sys, time
def report(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()
def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))
'''


class Child:
    """A Python child in its own session, cwd '/', output into a file.
    Never waited on without a deadline."""

    def __init__(self, code, args=(), out_dir=None, label="child"):
        out_dir = out_dir or tempfile.gettempdir()
        fd, self.out_path = tempfile.mkstemp(prefix=label + "-", suffix=".out",
                                             dir=out_dir)
        with os.fdopen(fd, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD_PRELUDE + code] + [
                    a if isinstance(a, (str, bytes)) else
                    os.fspath(a) if hasattr(a, "__fspath__") else str(a)
                    for a in args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd="/", start_new_session=True)
        self.pid = self.proc.pid

    def state(self):
        """State letter; None once it exited (reaped or zombie)."""
        if self.proc.poll() is not None:
            return None
        state = proc_state(self.pid)
        return None if state in (None, "Z", "X") else state

    def wchan(self):
        return proc_wchan(self.pid)

    def wait_state(self, states, timeout):
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if state in states or state is None or time.monotonic() >= deadline:
                return state
            time.sleep(0.02)

    def wait(self, timeout):
        """Exit status, or None if still running after timeout."""
        return poll_exit(self.proc, timeout)

    def kill(self):
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def output(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def results(self):
        """Every JSON line the child wrote with report()."""
        out = []
        for line in self.output().splitlines():
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    out.append(obj)
        return out

    def result(self):
        res = self.results()
        return res[-1] if res else None

    def describe(self):
        return "pid %d state %s wchan %s rc %s output %r" % (
            self.pid, proc_state(self.pid), self.wchan(),
            self.proc.returncode, self.output()[-2000:])


def run_child(code, args=(), timeout=10.0, out_dir=None):
    """Run code in a Child and wait for it with a deadline; on timeout kill
    it and raise AssertionError. Returns the Child (see .result())."""
    child = Child(code, args, out_dir and os.fspath(out_dir))
    if child.wait(timeout) is None:
        info = child.describe()
        child.kill()
        child.wait(2.0)
        raise AssertionError("child did not finish in %.1fs: %s" % (timeout,
                                                                     info))
    return child


# --- FUSE mounts --------------------------------------------------------------------

class MountError(RuntimeError):
    pass


class FuseMount:
    """A fusefs.py server mounted on .path.  close() is idempotent."""

    def __init__(self, path, mode, proc, log_path, name):
        self.path = path
        self.mode = mode
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path
        self.name = name
        self.closed = False
        self.stuck = []          # D-state leftovers seen at close()
        self.problems = []       # teardown problems seen at close()

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return "<FuseMount %s mode=%s pid=%d>" % (self.path, self.mode,
                                                  self.pid)

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def entry(self):
        found = mounts_at(self.path)
        return found[-1] if found else None

    def server_alive(self):
        return self.proc.poll() is None

    def stall(self):
        """ok/slow/errno: stop answering (requests queue up, callers hang)."""
        os.kill(self.pid, signal.SIGUSR1)

    def resume(self):
        """Answer everything queued since stall() and go on normally.
        late mode: answer FUSE_INIT and start serving (callers blocked in
        fuse_get_req continue)."""
        os.kill(self.pid, signal.SIGUSR2)

    def abort(self):
        """Abort the connection through fusectl without killing the server
        (blocked callers get ENOTCONN, the server sees ENODEV and exits)."""
        entry = self.entry()
        if entry is None:
            raise MountError("%s is not mounted" % self.path)
        abort_fuse_connection(entry)

    def close(self):
        if self.closed:
            return
        self.closed = True
        problems = []
        entry = self.entry()
        # 1. Kill the server: releasing /dev/fuse aborts the connection.
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if poll_exit(self.proc, 5.0) is None:
            problems.append("server %d did not exit after SIGKILL (state %s)"
                            % (self.pid, proc_state(self.pid)))
            if entry is not None:
                with contextlib.suppress(Exception):
                    abort_fuse_connection(entry)
        # 2. Nothing may stay blocked on this connection (best effort,
        # bounded): fusectl's per-connection count of waiting requests, and
        # D-state processes with their cwd or an fd under the mount.
        # Only where fusectl is mounted already: a teardown that mounted it would do for
        # the product what a node without it never does (slurm-hooks mounts it itself).
        conn = fusectl_connection(entry, mount=False) if entry is not None else None
        deadline = time.monotonic() + 3.0
        while True:
            waiting = _read_int(os.path.join(conn, "waiting")) if conn else 0
            stuck = [p for p in processes_using(self.path) if p[1] == "D"]
            if (not stuck and not waiting) or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if waiting:
            problems.append("%d requests still waiting on the connection"
                            % waiting)
        # 3. Detach the mount (every stacked instance).
        for _ in range(4):
            if not mounts_at(self.path):
                break
            rc, out = _umount_lazy(self.path)
            if rc != 0:
                problems.append("umount -l %s: rc %s %s" % (self.path, rc,
                                                            out.strip()))
        if mounts_at(self.path):
            raise MountError("%s still mounted after umount -l; %s\nlog:\n%s"
                             % (self.path, "; ".join(problems), self.log()))
        self.stuck = stuck
        self.problems = problems
        if stuck or problems:
            warnings.warn("fuse mount %s (%s) teardown: %s; D-state processes "
                          "under it: %s" % (self.path, self.mode,
                                            "; ".join(problems), stuck))


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def fusectl_connection(entry, mount=True):
    """/sys/fs/fuse/connections/DEV for a mountinfo entry of a FUSE mount,
    mounting fusectl there first if needed (and `mount`); None if absent."""
    if not any(m.fstype == "fusectl" for m in read_mountinfo()):
        if not mount:
            return None
        rc, _out = run_bounded(["mount", "-t", "fusectl", "fusectl",
                                FUSECTL_DIR], 10.0)
        if rc != 0:
            return None
    conn = os.path.join(FUSECTL_DIR, str((entry.major << 20) | entry.minor))
    return conn if os.path.isdir(conn) else None


def abort_fuse_connection(entry):
    """Write 1 to /sys/fs/fuse/connections/DEV/abort for a mountinfo entry. Where
    fusectl is not mounted it is mounted for this and taken away again: the test's own
    teardown leaves the node as it found it (the product must mount it itself)."""
    mounted_here = not any(m.fstype == "fusectl" for m in read_mountinfo())
    conn = fusectl_connection(entry)
    try:
        if conn is None:
            raise MountError("no fusectl connection directory for %s"
                             % entry.mountpoint)
        with open(os.path.join(conn, "abort"), "w") as f:
            f.write("1")
    finally:
        if mounted_here:
            run_bounded(["umount", FUSECTL_DIR], 10.0)


@contextlib.contextmanager
def fuse_mount(path, mode, *, delay=None, errno=None, fail_op=None,
               slow_op=None, name=None, subtype=None, entry_timeout=None,
               dirs=(), debug=False, timeout=10.0, log_dir=None):
    """Mount tests/fusefs.py in `mode` on path (created if needed) and yield
    a FuseMount (.path .pid .mode .log() .stall() .resume() .abort()
    .close()).  Teardown kills the server, lazily unmounts and checks.

    Options (None: fusefs.py's default): delay (slow), errno and fail_op
    (errno mode, e.g. errno="ESTALE", fail_op="write,fsync"), slow_op,
    name (mount source, default fusefs-MODE), subtype (type fuse.SUBTYPE,
    default fuse.fusefs), entry_timeout, dirs (directories present from
    the start, ok/slow/errno/late), debug (log every request), timeout
    (to get ready), log_dir (default: the mount point's parent)."""
    m = start_fuse(path, mode, delay=delay, errno=errno, fail_op=fail_op,
                   slow_op=slow_op, name=name, subtype=subtype,
                   entry_timeout=entry_timeout, dirs=dirs, debug=debug,
                   timeout=timeout, log_dir=log_dir)
    try:
        yield m
    finally:
        m.close()


def start_fuse(path, mode, *, delay=None, errno=None, fail_op=None,
               slow_op=None, name=None, subtype=None, entry_timeout=None,
               dirs=(), debug=False, timeout=10.0, log_dir=None, no_interrupt=False):
    """Non-context-manager form of fuse_mount(); call .close(). no_interrupt: callers
    of a stalled ok/slow/errno server wait in D, not S (fusefs.py --no-interrupt)."""
    if mode not in FUSE_MODES:
        raise ValueError("mode must be one of %s" % (FUSE_MODES,))
    path = canonical_mountpoint(path)
    if is_mounted(path):
        raise MountError("%s is already a mount point" % path)
    os.makedirs(path, exist_ok=True)
    log_dir = log_dir or os.path.dirname(path)
    base = os.path.basename(path)
    log_path = os.path.join(log_dir, base + ".fusefs.log")
    ready = os.path.join(log_dir, base + ".fusefs.ready")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(ready)
    name = name or "fusefs-" + mode
    argv = [sys.executable, FUSEFS, mode, path, "--ready-file", ready,
            "--name", name]
    for flag, value in (("--delay", delay), ("--errno", errno),
                        ("--fail-op", fail_op), ("--slow-op", slow_op),
                        ("--subtype", subtype),
                        ("--entry-timeout", entry_timeout)):
        if value is not None:
            argv += [flag, str(value)]
    for d in dirs:
        argv += ["--mkdir", d]
    if debug:
        argv.append("--debug")
    if no_interrupt:
        argv.append("--no-interrupt")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, cwd="/", start_new_session=True)
    m = FuseMount(path, mode, proc, log_path, name)
    deadline = time.monotonic() + timeout
    while True:
        if os.path.exists(ready) and is_mounted(path):
            return m
        if proc.poll() is not None or time.monotonic() >= deadline:
            why = ("server exited with %s" % proc.returncode
                   if proc.poll() is not None
                   else "not ready after %.0fs" % timeout)
            with contextlib.suppress(Exception):
                m.close()
            raise MountError("fusefs %s on %s: %s\nlog %s:\n%s"
                             % (mode, path, why, log_path, m.log()))
        time.sleep(0.02)


# --- tmpfs mounts -----------------------------------------------------------------------

class TmpfsMount:
    def __init__(self, path, source):
        self.path = path
        self.source = source
        self.closed = False

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return "<TmpfsMount %s>" % self.path

    def close(self):
        if self.closed:
            return
        self.closed = True
        for _ in range(4):
            if not mounts_at(self.path):
                break
            _umount_lazy(self.path)
        if mounts_at(self.path):
            raise MountError("%s still mounted after umount -l" % self.path)


def _mount(argv):
    rc, out = run_bounded(argv, 10.0)
    if rc != 0:
        raise MountError("%s: rc %s: %s" % (" ".join(argv), rc, out.strip()))


def _populate(root, files):
    for rel, content in (files or {}).items():
        target = os.path.join(root, rel)
        if rel.endswith("/"):
            os.makedirs(target, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(content if isinstance(content, bytes)
                    else str(content).encode())


def start_tmpfs(path, size="1m", readonly=False, files=None,
                source="slurmhooks-tmpfs"):
    """Mount a tmpfs; `files` maps relative paths to contents (a path ending
    in '/' makes a directory) and is written before a read-only remount."""
    path = canonical_mountpoint(path)
    if is_mounted(path):
        raise MountError("%s is already a mount point" % path)
    os.makedirs(path, exist_ok=True)
    _mount(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size,
            source, path])
    m = TmpfsMount(path, source)
    try:
        _populate(path, files)
        if readonly:
            _mount(["mount", "-o", "remount,ro", path])
    except BaseException:
        m.close()
        raise
    return m


@contextlib.contextmanager
def tmpfs_mount(path, size="1m", readonly=False, files=None,
                source="slurmhooks-tmpfs"):
    m = start_tmpfs(path, size, readonly, files, source)
    try:
        yield m
    finally:
        m.close()


def fill_filesystem(root, filler=".filler"):
    """Fill the filesystem under root so that a 4 KiB write + fsync of a new
    file fails with ENOSPC (verified).  Returns the filler's size."""
    target = os.path.join(root, filler)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    written = 0
    try:
        for chunk in (1 << 16, 4096, 512, 64, 8, 1):
            buf = b"\0" * chunk
            while True:
                try:
                    n = os.write(fd, buf)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
                written += n
                if n < chunk:
                    break
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
    verify = os.path.join(root, ".verify-full")
    fd = os.open(verify, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            n = os.write(fd, b"x" * 4096)
            os.fsync(fd)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        else:
            raise MountError("%s not full: a 4 KiB write wrote %d bytes"
                             % (root, n))
    finally:
        os.close(fd)
        os.unlink(verify)
    return written


def start_full_tmpfs(path, size="64k", files=None):
    m = start_tmpfs(path, size=size, files=files)
    try:
        fill_filesystem(m.path)
    except BaseException:
        m.close()
        raise
    return m


@contextlib.contextmanager
def full_tmpfs(path, size="64k", files=None):
    """A small tmpfs filled up: writing 4 KiB more fails with ENOSPC."""
    m = start_full_tmpfs(path, size, files)
    try:
        yield m
    finally:
        m.close()


# --- pytest fixtures ----------------------------------------------------------------------

def require_mount_privileges():
    if os.geteuid() != 0:
        pytest.skip("needs root to mount")


def require_fuse():
    require_mount_privileges()
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    with open("/proc/filesystems") as f:
        if not any(line.split()[-1:] == ["fuse"] for line in f):
            pytest.skip("kernel has no fuse filesystem")


@pytest.fixture
def spawn_child(tmp_path):
    """Factory: spawn_child(code, *args) -> Child.  The code runs after a
    prelude defining report(**kw) (JSON line on stdout) and errname(exc).
    Requested by every mount fixture, so it is torn down after them:
    children are killed only once the mounts are gone."""
    children = []

    def spawn(code, *args):
        child = Child(code, args, out_dir=str(tmp_path), label="child")
        children.append(child)
        return child

    yield spawn
    for child in children:
        child.kill()
    for child in children:
        if child.wait(2.0) is None:
            warnings.warn("child %s did not die" % child.describe())


@pytest.fixture
def make_fuse(tmp_path, spawn_child):
    """Factory: make_fuse(mode, **opts) -> FuseMount on a fresh directory
    under tmp_path (opts as for fuse_mount, plus dirname=...)."""
    require_fuse()
    mounts = []

    def make(mode, dirname=None, **opts):
        path = tmp_path / (dirname or "%s%d" % (mode, len(mounts)))
        m = start_fuse(path, mode, **opts)
        mounts.append(m)
        return m

    yield make
    errors = []
    for m in reversed(mounts):
        try:
            m.close()
        except Exception as e:  # keep tearing down the others
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture
def make_tmpfs(tmp_path):
    """Factory: make_tmpfs(size=None, readonly=False, files=None,
    full=False, dirname=None) -> TmpfsMount (size defaults to 1m, or 64k
    when full)."""
    require_mount_privileges()
    mounts = []

    def make(size=None, readonly=False, files=None, full=False, dirname=None):
        path = tmp_path / (dirname or "tmpfs%d" % len(mounts))
        if full:
            m = start_full_tmpfs(path, size or "64k", files)
        else:
            m = start_tmpfs(path, size or "1m", readonly, files)
        mounts.append(m)
        return m

    yield make
    for m in reversed(mounts):
        m.close()


@pytest.fixture
def hung_mount(make_fuse):
    """FUSE mount whose server never reads /dev/fuse: accesses block in D
    (fuse_get_req) until teardown aborts the connection."""
    return make_fuse("unanswered", dirname="hung")


@pytest.fixture
def swallow_mount(make_fuse):
    """FUSE mount answering only INIT: requests are never answered; SIGKILLed
    callers stay in D (unkillable) until teardown."""
    return make_fuse("swallow", dirname="swallow")


@pytest.fixture
def stuck_mount(make_fuse):
    """FUSE mount answering only INIT (and, once, a warm-up FUSE_INTERRUPT
    with -ENOSYS, which sets the connection's no_interrupt): callers sleep in
    D from the start (request_wait_answer) and stay in D, unkillable, after
    SIGKILL, like on a dead NFS/GPFS server, until teardown aborts the
    connection."""
    return make_fuse("stuck", dirname="stuck")


@pytest.fixture
def late_mount(make_fuse):
    """FUSE mount that does not answer FUSE_INIT until .resume(): callers
    block in D (fuse_get_req) meanwhile, then continue and succeed; an
    in-memory fs with an empty `probe/` dir afterwards."""
    return make_fuse("late", dirname="late", dirs=["probe"])


@pytest.fixture
def ok_mount(make_fuse):
    return make_fuse("ok", dirname="ok")


@pytest.fixture
def slow_mount(make_fuse):
    """Working FUSE mount whose write, fsync and create replies take 0.5 s."""
    return make_fuse("slow", dirname="slow", delay=0.5)


@pytest.fixture
def ro_mount(make_tmpfs):
    """Read-only tmpfs holding `existing.txt` and an empty `probe/` dir."""
    return make_tmpfs(readonly=True, dirname="ro",
                      files={"existing.txt": b"hello\n", "probe/": None})


@pytest.fixture
def full_mount(make_tmpfs):
    """Full tmpfs (64 KiB) with an empty `probe/` dir: 4 KiB more -> ENOSPC."""
    return make_tmpfs(full=True, dirname="full", files={"probe/": None})
