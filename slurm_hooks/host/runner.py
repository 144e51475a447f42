"""The hang-safe runner: the one place that knows about children and deadlines.

Anything that may touch a suspect filesystem, the GPU driver or another process's
memory runs in a forked child:

- the child starts its own session (so slurmd's process-group kill and our own kill
  reach it and its helpers) and gets /dev/null on stdin/stdout/stderr with every other
  inherited descriptor closed: slurmd reads the hook's output pipe until the last holder
  of it exits, so a stuck child that kept it would keep slurmd waiting;
- it reports progress ("create", "write", "fsync", ...) and its result as JSON lines on a
  private pipe, so a child that never finishes still tells us how far it got;
- at the deadline the parent SIGKILLs the child's process group, records "hung" and
  does NOT wait: a child in uninterruptible sleep cannot die until the kernel call
  returns, and waitpid (and therefore subprocess.run(timeout=), Popen.__exit__,
  multiprocessing's exit handler, coreutils timeout) would hang with it.

A killed child that is still alive a moment later is stuck in the kernel. It is written
to local state (pid, start time, target); later runs report "still hung since T" for
that target and start no new child for it while the old one lives, so any number of
runs leaves at most one stuck child per target. Children that did end are reaped with
WNOHANG. A program run through `Runner.command` (py-spy, which reads another process's
binary and memory) is remembered the same way, under a key for what it looks at.

Forking the running interpreter costs about a millisecond; exec'ing a fresh Python
would cost tens of milliseconds per probe on every health check.
"""
from __future__ import annotations

import errno
import gc
import os
import select
import time

from .. import TYPE_CHECKING
from ..core import jsonio
from ..core.records import dataclass, field
from ..core.state import StateStore

if TYPE_CHECKING:
    from typing import Any, Callable

try:
    # The C module under `signal`, loaded with the interpreter: `signal` itself wraps
    # the numbers in enums, and importing enum costs milliseconds on every run.
    import _signal as signal
except ImportError:            # not CPython
    import signal

DONE = "done"              # the child finished and returned a value
HUNG = "hung"              # the child missed its deadline and was killed
STILL_HUNG = "still_hung"  # an earlier run's child for this target is still stuck
FAILED = "failed"          # the child died or returned garbage (a bug, OOM kill, ...)

STATE_NAME = "stuck-children"
PYSPY_STATE = "stuck-pyspy"      # job-report's: its py-spy children stuck in the kernel
# How long killed children get to disappear before we call them stuck. Killable sleeps
# (most FUSE and NFS waits) end within microseconds of SIGKILL.
KILL_SETTLE = 0.05
MAX_RESULT = 1 << 20
PROBE_COMM = "slurm-hooks-prb"   # at most 15 characters: the kernel's comm limit


@dataclass
class Task:
    key: str                       # the target it touches: at most one stuck child per key
    func: Callable[..., Any]       # runs in the child as func(progress, *args)
    args: tuple = ()
    timeout: float = 10.0


@dataclass
class Outcome:
    key: str
    status: str
    value: Any = None
    error: str = ""
    elapsed: float = 0.0           # seconds from start to result (or to the kill)
    step: str = ""                 # the last step the child said it was starting
    pid: int = 0
    since: float = 0.0             # wall-clock start of the (possibly earlier) child
    reading: list = field(default_factory=list)   # files the child had open at its deadline


@dataclass
class _Child:
    task: Task
    pid: int
    fd: int
    started: float                 # monotonic
    started_wall: float
    buf: bytearray = field(default_factory=bytearray)
    step: str = ""
    result: Any = None
    error: str = ""
    got_result: bool = False


def proc_start_time(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, None if it is gone.

    Reading /proc/PID/stat never blocks on the target, even one in D state.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        return None


def _alive(pid: int, start: int) -> bool:
    st = proc_start_time(pid)
    return st is not None and st[1] == start and st[0] not in ("Z", "X", "x")


def _child_main(task: Task, wfd: int) -> None:
    """Runs in the forked child; never returns."""
    # A collection here would touch every object inherited from the parent and so copy
    # its whole heap, page by page: the child lives for one task, refcounting suffices.
    gc.disable()
    code = 0
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, wfd)
        os.closerange(wfd + 1, 1 << 20)
        try:
            # The thread name is what a D-state scan sees; it marks the child as ours.
            with open("/proc/self/comm", "w") as f:
                f.write(PROBE_COMM)
        except OSError:
            pass

        def progress(step: str) -> None:
            os.write(wfd, jsonio.dumps({"step": step}).encode() + b"\n")

        try:
            value = task.func(progress, *task.args)
            line = jsonio.dumps({"result": value}, default=str)
        except BaseException as e:  # report, never propagate into the parent's code
            line = jsonio.dumps({"error": f"{type(e).__name__}: {e}"})
            code = 1
        data = memoryview(line.encode() + b"\n")
        while data:
            data = data[os.write(wfd, data):]
    except BaseException:
        code = 2
    finally:
        os._exit(code)


@dataclass
class Batch:
    children: dict = field(default_factory=dict)      # read fd -> _Child
    outcomes: dict = field(default_factory=dict)      # key -> Outcome


class Runner:
    """Runs tasks in parallel children; never blocks past the longest deadline.

    `name`: the state file of its registry of stuck children; `others`: the registries
    of other programs' runners in the same directory (job-report's py-spy children),
    read only, so that stuck() knows their children as ours too."""

    def __init__(self, state: StateStore | None = None, name: str = STATE_NAME,
                 others: tuple[str, ...] = ()):
        self.state = state
        self.name = name
        self.others = others
        self._stuck: dict[str, dict] | None = None
        self._dirty = False
        self._running: set[int] = set()   # children started and not yet collected

    # --- the registry of stuck children --------------------------------------------
    def _registry(self) -> dict[str, dict]:
        if self._stuck is None:
            loaded = self.state.load(self.name) if self.state else {}
            self._stuck = _living(loaded)
            self._dirty = len(self._stuck) != len(loaded)
        return self._stuck

    def stuck(self) -> dict[str, dict]:
        """Targets with a live stuck child: key -> {pid, start, since, step}."""
        found = {}
        if self.state is not None:
            for name in self.others:
                found.update(_living(self.state.load(name)))
        found.update(self._registry())
        return found

    def running(self) -> set[int]:
        """Pids of the children at work now: a /proc scan run meanwhile must not take
        our own probes (in D during an fsync, say) for stuck tasks."""
        return set(self._running)

    def _save(self) -> None:
        if self._dirty and self.state is not None:
            self.state.save(self.name, self._stuck or {})
            self._dirty = False

    def _remember(self, key: str, pid: int, step: str, since: float) -> bool:
        """Record a killed child that is still alive; False if it is gone after all."""
        st = proc_start_time(pid)
        if st is None:
            return False
        self._registry()[key] = {"pid": pid, "start": st[1], "step": step, "since": since}
        self._dirty = True
        return True

    def adopt(self, key: str, pid: int, start: int, since: float, step: str = "exec") -> bool:
        """Remember a process a task's child started and could not kill (a site check's
        program stuck in the kernel) as the stuck child of `key`: later runs then get
        STILL_HUNG for the key, as for a stuck probe, and no second one is started.
        False if that process (same pid and start) is gone already."""
        st = proc_start_time(pid)
        if st is None or st[1] != start or st[0] in ("Z", "X", "x"):
            return False
        self._registry()[key] = {"pid": pid, "start": start, "step": step, "since": since}
        self._dirty = True
        self._save()
        return True

    # --- programs -------------------------------------------------------------------
    def command(self, key: str, argv: list, timeout: float, env: dict | None = None) -> CommandResult:
        """run_command() for a program that may get stuck in the kernel on what it looks
        at (py-spy on a process whose binary lies on a stalled mount), with `key` naming
        that target: killed at the deadline and still alive, it is remembered like a
        stuck probe, and while it lives no other is started for the key (the result
        says `not_started`, with the old one's pid and start)."""
        entry = self._registry().get(key)
        if entry is not None:
            return CommandResult(argv=list(argv), rc=None, pid=int(entry["pid"]),
                                 since=float(entry.get("since", 0.0)), not_started=True)
        result = run_command(argv, timeout, env)
        if result.timed_out and _left_alive([result.pid]) and \
                self._remember(key, result.pid, "exec", result.since):
            result.stuck = True
            self._save()
        return result

    # --- running --------------------------------------------------------------------
    def run(self, tasks: list[Task]) -> dict[str, Outcome]:
        return self.collect(self.start(tasks))

    def start(self, tasks: list[Task], batch: "Batch | None" = None) -> "Batch":
        """Start the tasks' children and return at once; the caller may work meanwhile.
        With `batch`, the children join it (one collect() waits for all)."""
        registry = self._registry()
        batch = batch if batch is not None else Batch()
        for task in tasks:
            entry = registry.get(task.key)
            if entry is not None:
                since = float(entry.get("since", time.time()))
                batch.outcomes[task.key] = Outcome(
                    key=task.key, status=STILL_HUNG, pid=int(entry["pid"]), since=since,
                    step=str(entry.get("step", "")), elapsed=time.time() - since,
                    error="an earlier probe of this target is still stuck")
                continue
            child = self._spawn(task)
            batch.children[child.fd] = child
        return batch

    def collect(self, batch: "Batch") -> dict[str, Outcome]:
        """Wait for a started batch, never past its deadlines."""
        killed = self._collect(batch.children, batch.outcomes)
        self._settle(killed, batch.outcomes)
        self._running.difference_update(c.pid for c in batch.children.values())
        self._save()
        return batch.outcomes

    def _spawn(self, task: Task) -> _Child:
        rfd, wfd = os.pipe()
        started, wall = time.monotonic(), time.time()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            _child_main(task, wfd)
        os.close(wfd)
        os.set_blocking(rfd, False)
        self._running.add(pid)
        return _Child(task=task, pid=pid, fd=rfd, started=started, started_wall=wall)

    def _collect(self, children: dict[int, _Child], outcomes: dict[str, Outcome]) -> list[_Child]:
        poller = select.poll()
        for fd in children:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        pending = dict(children)
        killed: list[_Child] = []
        while pending:
            now = time.monotonic()
            for fd, child in list(pending.items()):
                if now - child.started >= child.task.timeout:
                    if not self._read(child):
                        # It ended in time while the caller was busy elsewhere (a
                        # py-spy that hung, say): its answer is there, it is no hang.
                        self._close(poller, pending, fd)
                        outcomes[child.task.key] = self._finished(child)
                        continue
                    reading = open_files(child.pid)
                    self._kill(child)
                    killed.append(child)
                    outcomes[child.task.key] = Outcome(
                        key=child.task.key, status=HUNG, pid=child.pid, step=child.step,
                        elapsed=now - child.started, since=child.started_wall,
                        error=f"no answer within {child.task.timeout:g}s", reading=reading)
                    self._close(poller, pending, fd)
            if not pending:
                break
            wait = min(c.started + c.task.timeout for c in pending.values()) - now
            try:
                events = poller.poll(max(0.0, wait) * 1000 + 1)
            except InterruptedError:
                continue
            for fd, _ in events:
                found = pending.get(fd)
                if found is None:
                    continue
                child = found
                if self._read(child):
                    continue
                # EOF: the child closed its end, it has finished (or died).
                self._close(poller, pending, fd)
                outcomes[child.task.key] = self._finished(child)
        return killed

    def _read(self, child: _Child) -> bool:
        """Read what is there; False at end of file."""
        while True:
            try:
                data = os.read(child.fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            child.buf += data
            if len(child.buf) > MAX_RESULT:
                child.error = "child output too large"
                return False
            while b"\n" in child.buf:
                line, _, rest = bytes(child.buf).partition(b"\n")
                child.buf = bytearray(rest)
                self._line(child, line)

    @staticmethod
    def _line(child: _Child, line: bytes) -> None:
        try:
            msg = jsonio.loads(line)
        except ValueError:
            child.error = "unreadable child output"
            return
        if "step" in msg:
            child.step = str(msg["step"])
        elif "result" in msg:
            child.result, child.got_result = msg["result"], True
        elif "error" in msg:
            child.error = str(msg["error"])

    def _finished(self, child: _Child) -> Outcome:
        elapsed = time.monotonic() - child.started
        reap(child.pid)
        if child.got_result:
            return Outcome(key=child.task.key, status=DONE, value=child.result, pid=child.pid,
                           elapsed=elapsed, step=child.step, since=child.started_wall)
        return Outcome(key=child.task.key, status=FAILED, pid=child.pid, step=child.step,
                       elapsed=elapsed, since=child.started_wall,
                       error=child.error or "child exited without a result")

    @staticmethod
    def _close(poller, pending: dict[int, _Child], fd: int) -> None:
        poller.unregister(fd)
        os.close(fd)
        del pending[fd]

    @staticmethod
    def _kill(child: _Child) -> None:
        for kill, target in ((os.killpg, child.pid), (os.kill, child.pid)):
            try:
                kill(target, signal.SIGKILL)
                return
            except ProcessLookupError:
                continue
            except PermissionError:
                return

    def _settle(self, killed: list[_Child], outcomes: dict[str, Outcome]) -> None:
        """Give killed children a moment to die; remember the ones that cannot."""
        if not killed:
            return
        alive = set(_left_alive([c.pid for c in killed]))
        for child in killed:
            if child.pid in alive and self._remember(child.task.key, child.pid, child.step, child.started_wall):
                outcomes[child.task.key].error += "; the probe is stuck in the kernel and cannot be killed"


def open_files(pid: int) -> list[str]:
    """The files one of our own children has open, by their links in /proc/PID/fd,
    read at its deadline: a child stuck reading another process's /proc file names that
    process, at no cost to the children that answer. Our child is in no execve, so
    these links answer."""
    out: list[str] = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("/") and target != os.devnull:
            out.append(target)
    return out


def _living(loaded: dict) -> dict[str, dict]:
    """The entries of a registry whose child still lives (same pid, same start)."""
    out = {}
    for key, entry in loaded.items():
        try:
            if _alive(int(entry["pid"]), int(entry["start"])):
                out[key] = entry
        except (KeyError, TypeError, ValueError):
            pass
    return out


def _left_alive(pids: list[int]) -> list[int]:
    """The killed children among `pids` that have not died within KILL_SETTLE."""
    deadline = time.monotonic() + KILL_SETTLE
    left = list(pids)
    while left:
        left = [p for p in left if not reap(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.002)
    return left


def reap(pid: int) -> bool:
    """Reap pid if it has ended; never blocks."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def reap_finished() -> int:
    """Reap every ended child of this process without blocking; returns how many."""
    n = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        except OSError as e:
            if e.errno == errno.EINTR:
                continue
            return n
        if pid == 0:
            return n
        n += 1


# The PATH of every program we run: HealthCheckProgram runs with none, and a job's
# user must not choose what our programs find.
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# CommandResult.code: how a program's run ended, for decisions (message() is for people).
RAN = "ran"                  # it ran and exited (rc says how)
NOT_RUN = "not_run"          # exec failed: no such program, or not executable
TIMED_OUT = "timed_out"      # no exit within its deadline: killed
NOT_STARTED = "not_started"  # an earlier run's child for this target is still stuck
# What the child says when exec fails, with EXEC_FAILED as its exit status (a shell's).
_CANNOT_RUN = "cannot run "
EXEC_FAILED = 127


@dataclass
class CommandResult:
    argv: list
    rc: int | None                 # None when it did not finish in time
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    elapsed: float = 0.0
    pid: int = 0
    since: float = 0.0             # wall-clock start (of the earlier child, when not_started)
    stuck: bool = False            # killed at the deadline and alive still: stuck in the kernel
    not_started: bool = False      # an earlier run's child for this target is still stuck (pid)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def code(self) -> str:
        if self.not_started:
            return NOT_STARTED
        if self.timed_out:
            return TIMED_OUT
        if self.rc == EXEC_FAILED and self.stderr.startswith(_CANNOT_RUN):
            return NOT_RUN
        return RAN

    def message(self) -> str:
        """What the command itself said, for error reports."""
        name = os.path.basename(self.argv[0])
        if self.not_started:
            return (f"{name} (pid {self.pid}) is still stuck since "
                    f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(self.since))}: not started again")
        if self.timed_out:
            stuck = f", and is stuck in the kernel (pid {self.pid})" if self.stuck else ""
            return f"{name} gave no answer within {self.elapsed:.0f}s{stuck}"
        text = (self.stderr.strip() or self.stdout.strip()).replace("\n", "; ")
        return text or f"{os.path.basename(self.argv[0])} exited with status {self.rc}"


def run_command(argv: list, timeout: float, env: dict | None = None, exec_fd: int | None = None,
                max_output: int = MAX_RESULT) -> CommandResult:
    """Run a program (argv list, absolute path, no shell) with a hard deadline.

    Built on fork+exec rather than subprocess.Popen, whose parent blocks until exec()
    has succeeded: exec'ing a binary on a hung shared filesystem (Slurm under
    /opt/slurm on NFS is common) would block the health check with it.

    With `exec_fd`, the program is the file open on that descriptor (fexecve), not
    whatever argv[0] names by then; it is descriptor 3 in the program when it is
    inheritable (a `#!` script: its interpreter opens /dev/fd/3), else closed at exec.
    """
    started, since = time.monotonic(), time.time()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            target: int | str = argv[0]
            if exec_fd is not None:
                inherit = os.get_inheritable(exec_fd)
                if exec_fd != 3:
                    os.dup2(exec_fd, 3, inheritable=inherit)
                target = 3
            os.closerange(3 if exec_fd is None else 4, 1 << 20)
            os.execve(target, argv, env if env is not None else os.environ)
        except OSError as e:
            try:
                os.write(2, f"{_CANNOT_RUN}{argv[0]}: {e.strerror}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(EXEC_FAILED)
    os.close(out_w)
    os.close(err_w)
    bufs = {out_r: bytearray(), err_r: bytearray()}
    poller = select.poll()
    for fd in bufs:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    open_fds = set(bufs)
    deadline = started + timeout
    rc = None
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for fd, _ in poller.poll(left * 1000 + 1):
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if data and len(bufs[fd]) < max_output:
                    bufs[fd] += data
                elif not data:
                    poller.unregister(fd)
                    open_fds.discard(fd)
        # Output closed: the program is exiting. Poll for its status, never block.
        while rc is None and time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.001)
    finally:
        for fd in bufs:
            os.close(fd)
    elapsed = time.monotonic() - started
    if rc is None:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
                break
            except OSError:
                continue
        reap(pid)
    return CommandResult(argv=list(argv), rc=rc, timed_out=rc is None, elapsed=elapsed, pid=pid, since=since,
                         stdout=bufs[out_r].decode("utf-8", "replace"),
                         stderr=bufs[err_r].decode("utf-8", "replace"))


def spawn_detached(func, *args) -> int:
    """Run func(*args) in a grandchild that outlives us: own session, /dev/null for
    stdio, no inherited descriptors (slurmd's pipes included), reparented to init.
    Returns at once; the intermediate child exits immediately and is reaped here."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, 1 << 20)
            func(*args)
        except BaseException:
            pass
        finally:
            os._exit(0)
    while True:
        try:
            os.waitpid(pid, 0)      # the intermediate child exits at once
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    return pid
