#!/usr/bin/python3
"""The "stalled buffer": a system call whose user buffer lives on a stalled FUSE mount.

Run by an unprivileged test user with Debian's /usr/bin/python3 (stdlib and ctypes only):

    python3 stalled_buffer.py getdents FUSEFILE DIR  [--count N] [--ready-file P] [--go-file P | --now]
    python3 stalled_buffer.py write    FUSEFILE FILE [--count N] [--ready-file P] [--go-file P | --now]
    python3 stalled_buffer.py create   -        PATH [--count N] [--ready-file P] [--go-file P | --now]

FUSEFILE is a regular file on the user's own FUSE mount (tests/fusefs.py), at least a
page long, written through the mount beforehand.  The script opens it, drops its page
cache (the open already does: fusefs answers OPEN without FOPEN_KEEP_CACHE; then
posix_fadvise(DONTNEED) as well) and maps it MAP_PRIVATE, PROT_READ|PROT_WRITE, touching
no page of it.  Then the FUSE server is stalled (SIGUSR1) and the script told to go:

  getdents  open DIR O_RDONLY|O_DIRECTORY and call getdents64(fd, page, PAGESIZE) (a raw
            syscall).  The kernel writes the entries into the buffer: a write fault on a
            private file mapping, which first reads the page from FUSE.  The call waits in
            that fault inside iterate_dir(), holding DIR's i_rwsem (shared): an O_CREAT open
            or unlink in DIR, which wants it exclusive, queues behind it.
  write     open FILE O_WRONLY|O_CREAT|O_APPEND and write(fd, page, PAGESIZE).  The kernel
            reads the buffer: fault_in_iov_iter_readable() faults the FUSE page in, inside
            FILE's filesystem's write path (for ext4 and FUSE with FILE's i_rwsem held).
  create    open(PATH, O_CREAT|O_WRONLY, 0644): no buffer (FUSEFILE is ignored, give '-');
            a writer to queue behind a getdents staller's lock from another process.

Protocol
  1. The parent opens and maps FUSEFILE, then forks --count N children (default 1); child
     i uses page i % (pages of FUSEFILE) of the mapping, so every child faults by itself
     (on the same file page as another child when N exceeds the pages: it then waits on
     that page's lock in D).
  2. Once every child is ready, the parent writes the children's pids (one a line) to
     --ready-file (atomically: a temporary name, then rename) and prints "ready PID..."
     on stdout.
  3. Go: with --go-file, when that path exists (polled every 20 ms; the test, as root,
     creates it after stalling the server); with --now, at once; otherwise when stdin
     gives a line "go", or EOF (stdin /dev/null: at once).  All children then make their
     system call together.
  4. Each child prints, when its call returns (the server resumed, or was killed):
         PID OP returned N
         PID OP failed ERRNONAME (message)
     and exits 0 or 1; the parent then prints "done OK/N" and exits 0 when all succeeded,
     else 1.

Stdout lines are written with a single write(2) each, so children do not interleave.
"""
import argparse
import ctypes
import ctypes.util
import errno
import os
import platform
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61}

PROT_READ, PROT_WRITE = 0x1, 0x2
MAP_PRIVATE = 0x02
MAP_FAILED = ctypes.c_void_p(-1).value

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_size_t]
libc.write.restype = ctypes.c_ssize_t
libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mincore.restype = ctypes.c_int
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def say(line):
    os.write(1, (line + "\n").encode())


def errno_text(err):
    return "%s (%s)" % (errno.errorcode.get(err, str(err)), os.strerror(err))


def map_fusefile(path):
    """Open, uncache and map FUSEFILE: (address, pages)."""
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    pages = size // PAGE
    if pages < 1:
        raise SystemExit("%s: %d bytes, need at least one page (%d)" % (path, size, PAGE))
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    addr = libc.mmap(None, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)
    if addr in (None, MAP_FAILED):
        raise SystemExit("mmap %s: %s" % (path, errno_text(ctypes.get_errno())))
    os.close(fd)  # the mapping keeps the file
    vec = ctypes.create_string_buffer(pages)
    if libc.mincore(addr, pages * PAGE, vec) == 0:
        resident = sum(b & 1 for b in vec.raw)
        if resident:
            sys.stderr.write("warning: %d of %d pages of %s still in the page cache\n"
                             % (resident, pages, path))
    return addr, pages


def do_op(op, target, buf):
    """The system call; returns (result, errno)."""
    if op == "create":
        try:
            fd = os.open(target, os.O_CREAT | os.O_WRONLY, 0o644)
        except OSError as e:
            return -1, e.errno
        os.close(fd)
        return fd, 0
    if op == "getdents":
        nr = SYS_GETDENTS64.get(platform.machine())
        if nr is None:
            raise SystemExit("getdents64: unknown syscall number on %s" % platform.machine())
        flags = os.O_RDONLY | os.O_DIRECTORY
    else:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    try:
        fd = os.open(target, flags, 0o644)
    except OSError as e:
        return -1, e.errno
    ctypes.set_errno(0)
    if op == "getdents":
        rc = libc.syscall(nr, fd, buf, PAGE)
    else:
        rc = libc.write(fd, buf, PAGE)
    err = ctypes.get_errno() if rc < 0 else 0
    os.close(fd)
    return rc, err


def wait_go(a):
    if a.go_file:
        while not os.path.exists(a.go_file):
            time.sleep(0.02)
    elif not a.now:
        for line in sys.stdin:
            if line.strip() == "go":
                break


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("op", choices=["getdents", "write", "create"])
    p.add_argument("fusefile", help="file on the user's FUSE mount ('-' for create)")
    p.add_argument("target", help="directory (getdents), file (write), new path (create)")
    p.add_argument("--count", type=int, default=1, help="processes making the call")
    p.add_argument("--ready-file", help="written with the children's pids once mapped")
    p.add_argument("--go-file", help="make the call once this path exists")
    p.add_argument("--now", action="store_true", help="make the call at once")
    a = p.parse_args(argv)
    if a.count < 1:
        p.error("--count must be at least 1")

    addr, pages = (None, 1) if a.op == "create" else map_fusefile(a.fusefile)

    ready_r, ready_w = os.pipe()      # a byte from each child once it is set up
    go_r, go_w = os.pipe()            # closed by the parent: every child goes
    sys.stdout.flush()
    children = []
    for i in range(a.count):
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(ready_r)
                os.close(go_w)
                buf = None if addr is None else addr + (i % pages) * PAGE
                os.write(ready_w, b"r")
                os.close(ready_w)
                os.read(go_r, 1)      # EOF when the parent closes go_w
                rc, err = do_op(a.op, a.target, buf)
                if err:
                    say("%d %s failed %s" % (os.getpid(), a.op, errno_text(err)))
                else:
                    say("%d %s returned %d" % (os.getpid(), a.op, rc))
                    status = 0
            except BaseException as e:  # report, never fall back into the parent's code
                say("%d %s error %r" % (os.getpid(), a.op, e))
            finally:
                os._exit(status)
        children.append(pid)
    os.close(ready_w)
    os.close(go_r)
    got = 0
    while got < a.count:
        chunk = os.read(ready_r, a.count)
        if not chunk:
            break
        got += len(chunk)
    os.close(ready_r)
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join("%d\n" % pid for pid in children))
        os.rename(tmp, a.ready_file)
    say("ready " + " ".join(map(str, children)))

    wait_go(a)
    os.close(go_w)
    ok = 0
    for pid in children:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        ok += os.waitstatus_to_exitcode(status) == 0
    say("done %d/%d" % (ok, a.count))
    return 0 if ok == a.count else 1


if __name__ == "__main__":
    sys.exit(main())
