"""The misbehaving-mount fixtures really misbehave, and clean up after
themselves.  Every access to a FUSE mount happens in a child process
that is watched through /proc with a deadline, so a broken fixture fails
the test instead of hanging pytest."""

import errno
import os
import time

import pytest
from mounts_fixtures import (  # noqa: F401  (fixtures are used by name)
    full_mount,
    hung_mount,
    is_mounted,
    late_mount,
    make_fuse,
    make_tmpfs,
    mounts_at,
    ok_mount,
    poll_exit,
    proc_stat,
    ro_mount,
    run_child,
    slow_mount,
    spawn_child,
    stuck_mount,
    swallow_mount,
)

STAT_CHILD = r'''
report(phase="before")
try:
    os.stat(sys.argv[1])
    report(phase="done", err=None)
except OSError as e:
    report(phase="done", err=errname(e))
'''

CREATE_CHILD = r'''
report(phase="before")
try:
    fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    report(phase="done", err=None)
except OSError as e:
    report(phase="done", err=errname(e))
'''

# create a unique file in a subdirectory, write, fsync, close, read back
WRITE_PROBE = r'''
root, size = sys.argv[1], int(sys.argv[2])
res = {"t": {}}
step = "start"
def timed(name, fn, *a):
    global step
    step = name
    t0 = time.monotonic()
    r = fn(*a)
    res["t"][name] = time.monotonic() - t0
    return r
try:
    sub = os.path.join(root, "probe")
    if not os.path.isdir(sub):
        timed("mkdir", os.mkdir, sub, 0o755)
    path = os.path.join(sub, "probe-%d" % os.getpid())
    data = os.urandom(size)
    fd = timed("create", os.open, path,
               os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    res["written"] = timed("write", os.write, fd, data)
    timed("fsync", os.fsync, fd)
    timed("close", os.close, fd)
    with open(path, "rb") as f:
        res["same"] = timed("read", f.read) == data
    res["size"] = os.stat(path).st_size
    res["listing"] = sorted(os.listdir(root))
    res["sub_listing"] = sorted(os.listdir(sub))
    timed("unlink", os.unlink, path)
    res["sub_after_unlink"] = sorted(os.listdir(sub))
    res["statvfs_bsize"] = os.statvfs(root).f_bsize
    res["err"] = None
except OSError as e:
    res["err"], res["step"] = errname(e), step
report(**res)
'''


# create + write + close, then read back
LATE_WRITE_CHILD = r'''
path = sys.argv[1]
report(phase="before")
t0 = time.monotonic()
try:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    n = os.write(fd, b"late but fine\n")
    os.close(fd)
    with open(path, "rb") as f:
        data = f.read().decode()
    report(phase="done", err=None, written=n, data=data,
           elapsed=time.monotonic() - t0)
except OSError as e:
    report(phase="done", err=errname(e))
'''


def wait_output(child, phase, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.get("phase") == phase for r in child.results()):
            return
        if child.state() is None:
            break
        time.sleep(0.01)
    pytest.fail("child never reported %r: %s" % (phase, child.describe()))


def test_unanswered_blocks_in_d_until_teardown(hung_mount, spawn_child):
    entry = mounts_at(hung_mount.path)[-1]
    assert entry.fstype == "fuse.fusefs"
    assert entry.source == "fusefs-unanswered"

    child = spawn_child(STAT_CHILD, os.path.join(hung_mount.path, "x"))
    wait_output(child, "before")
    state = child.wait_state({"D"}, timeout=2.0)
    assert state == "D", child.describe()
    # The wait for FUSE_INIT is killable: still blocked, not finished.
    time.sleep(0.2)
    assert child.state() == "D", child.describe()

    hung_mount.close()
    rc = child.wait(5.0)
    assert rc is not None, "child still blocked after teardown: %s" % (
        child.describe())
    assert rc < 0 or child.result() == {"phase": "done", "err": "ENOTCONN"}, (
        child.describe())
    assert not is_mounted(hung_mount.path)
    assert hung_mount.problems == [] and hung_mount.stuck == []


def test_swallow_sigkilled_prober_is_unkillable(swallow_mount, spawn_child):
    child = spawn_child(CREATE_CHILD, os.path.join(swallow_mount.path, "f"))
    wait_output(child, "before")
    time.sleep(0.3)
    # Blocked waiting for an answer that never comes (interruptible sleep).
    assert child.wait_state({"S", "D"}, timeout=2.0) in ("S", "D"), (
        child.describe())
    assert child.result() == {"phase": "before"}

    child.kill()
    # The request was read by the server: after SIGKILL the caller waits
    # uninterruptibly for the answer. It must stay there.
    assert child.wait_state({"D"}, timeout=2.0) == "D", child.describe()
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        assert child.state() == "D", "SIGKILLed child escaped: %s" % (
            child.describe())
        time.sleep(0.05)

    swallow_mount.close()
    assert child.wait(5.0) == -9, child.describe()
    assert not is_mounted(swallow_mount.path)
    assert swallow_mount.problems == [] and swallow_mount.stuck == []


@pytest.mark.parametrize("code", [STAT_CHILD, CREATE_CHILD],
                         ids=["stat", "create"])
def test_stuck_caller_is_in_d_from_the_start_and_unkillable(
        stuck_mount, spawn_child, code):
    assert mounts_at(stuck_mount.path)[-1].source == "fusefs-stuck"
    # The warm-up helper (it made the kernel send one FUSE_INTERRUPT) is
    # gone and reaped.
    assert not [p for p in os.listdir("/proc") if p.isdigit()
                and (proc_stat(int(p)) or ("", 0))[1] == stuck_mount.pid]
    assert "no_interrupt set" in stuck_mount.log()

    child = spawn_child(code, os.path.join(stuck_mount.path, "f"))
    wait_output(child, "before")
    # Killable sleep (D) right away, never the interruptible one (S).
    assert child.wait_state({"D", "S"}, timeout=0.5) == "D", child.describe()
    until = time.monotonic() + 0.3
    while time.monotonic() < until:
        assert (child.state(), child.wchan()) == (
            "D", "request_wait_answer"), child.describe()
        time.sleep(0.02)
    assert child.result() == {"phase": "before"}

    child.kill()
    # The request was read by the server: after SIGKILL the wait becomes
    # uninterruptible, the child cannot die.  (It runs for a few ms, R,
    # going from the killable to the uninterruptible wait.)
    time.sleep(0.05)
    assert child.wait_state({"D"}, timeout=1.0) == "D", child.describe()
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        assert child.state() == "D", "SIGKILLed child escaped: %s" % (
            child.describe())
        time.sleep(0.05)

    stuck_mount.close()            # kills the server: connection aborted
    assert child.wait(5.0) == -9, child.describe()
    assert not is_mounted(stuck_mount.path)
    assert stuck_mount.problems == [] and stuck_mount.stuck == []


def test_late_caller_is_briefly_in_d_then_succeeds(late_mount, spawn_child,
                                                   tmp_path):
    assert mounts_at(late_mount.path)[-1].source == "fusefs-late"
    path = os.path.join(late_mount.path, "probe", "late.txt")
    child = spawn_child(LATE_WRITE_CHILD, path)
    wait_output(child, "before")
    time.sleep(0.5)
    # FUSE_INIT is not answered yet: waiting for the connection (killable D).
    assert (child.state(), child.wchan()) == ("D", "fuse_get_req"), (
        child.describe())
    assert child.result() == {"phase": "before"}

    t0 = time.monotonic()
    late_mount.resume()
    assert child.wait(2.0) == 0, child.describe()
    assert time.monotonic() - t0 < 2.0
    res = child.result()
    assert res["err"] is None, res
    assert res["written"] == 14 and res["data"] == "late but fine\n", res
    assert res["elapsed"] >= 0.5, res

    # The mount keeps working afterwards, for everybody.
    again = run_child(r'''
with open(sys.argv[1]) as f:
    data = f.read()
report(data=data, listing=sorted(os.listdir(os.path.dirname(sys.argv[1]))))
''', [path], out_dir=tmp_path).result()
    assert again == {"data": "late but fine\n", "listing": ["late.txt"]}


def test_ok_roundtrip(ok_mount, tmp_path):
    child = run_child(WRITE_PROBE, [ok_mount.path, 10000], out_dir=tmp_path)
    res = child.result()
    assert res is not None, child.describe()
    assert res["err"] is None, res
    assert res["written"] == 10000 and res["size"] == 10000
    assert res["same"] is True
    assert res["listing"] == ["probe"]
    assert res["sub_listing"] == ["probe-%d" % child.pid]
    assert res["sub_after_unlink"] == []
    assert res["statvfs_bsize"] == 4096
    assert mounts_at(ok_mount.path)[-1].source == "fusefs-ok"


def test_slow_write_and_fsync_take_the_delay(slow_mount, tmp_path):
    t0 = time.monotonic()
    child = run_child(WRITE_PROBE, [slow_mount.path, 4096], timeout=15.0,
                      out_dir=tmp_path)
    res = child.result()
    assert res is not None and res["err"] is None, child.describe()
    assert res["same"] is True
    write_fsync = res["t"]["write"] + res["t"]["fsync"]
    assert write_fsync >= 1.0, res["t"]
    assert res["t"]["create"] >= 0.5, res["t"]
    assert time.monotonic() - t0 < 10.0


@pytest.mark.parametrize("err, op, step", [
    ("EIO", "write", "write"),
    ("ESTALE", "write", "write"),
    ("EIO", "fsync", "fsync"),
    ("ENOSPC", "create", "create"),
])
def test_errno_mode(make_fuse, tmp_path, err, op, step):
    m = make_fuse("errno", errno=err, fail_op=op, dirs=["probe"])
    res = run_child(WRITE_PROBE, [m.path, 4096], out_dir=tmp_path).result()
    assert res is not None
    assert (res["err"], res["step"]) == (err, step), res
    assert "mkdir" not in res["t"]   # --mkdir made it beforehand


def test_stall_resume_and_abort(make_fuse, spawn_child):
    m = make_fuse("ok")
    m.stall()
    time.sleep(0.1)
    child = spawn_child(STAT_CHILD, os.path.join(m.path, "nothing"))
    wait_output(child, "before")
    time.sleep(0.3)
    assert child.wait_state({"S", "D"}, timeout=2.0) in ("S", "D"), (
        child.describe())
    assert child.result() == {"phase": "before"}
    m.resume()
    assert child.wait(5.0) == 0, child.describe()
    assert child.result() == {"phase": "done", "err": "ENOENT"}

    m.stall()
    time.sleep(0.1)
    child = spawn_child(STAT_CHILD, os.path.join(m.path, "nothing"))
    wait_output(child, "before")
    time.sleep(0.3)
    assert child.wait_state({"S", "D"}, timeout=2.0) in ("S", "D"), (
        child.describe())
    assert child.result() == {"phase": "before"}
    m.abort()                      # fusectl abort, server left running
    assert child.wait(5.0) == 0, child.describe()
    assert child.result()["err"] in ("ENOTCONN", "ECONNABORTED")
    assert poll_exit(m.proc, 5.0) == 0, m.log()   # server saw ENODEV


def test_ro_tmpfs_gives_erofs(ro_mount):
    assert "ro" in mounts_at(ro_mount.path)[-1].options.split(",")
    with pytest.raises(OSError) as exc:
        os.open(os.path.join(ro_mount.path, "existing.txt"), os.O_WRONLY)
    assert exc.value.errno == errno.EROFS
    with pytest.raises(OSError) as exc:
        os.open(os.path.join(ro_mount.path, "probe", "new"),
                os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    assert exc.value.errno == errno.EROFS
    with open(os.path.join(ro_mount.path, "existing.txt"), "rb") as f:
        assert f.read() == b"hello\n"


def test_full_tmpfs_gives_enospc(full_mount):
    path = os.path.join(full_mount.path, "probe", "new")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with pytest.raises(OSError) as exc:
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
        assert exc.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
        os.unlink(path)


def test_tmpfs_mounts_are_gone_after_close(make_tmpfs):
    m = make_tmpfs(size="128k")
    assert mounts_at(m.path)[-1].fstype == "tmpfs"
    m.close()
    assert not is_mounted(m.path)
