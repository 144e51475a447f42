#!/usr/bin/env python3
"""Tiny FUSE servers for tests: healthy, slow, failing, late and hung
filesystems.

No libfuse: this speaks the FUSE kernel protocol (minor 31 of
<linux/fuse.h>) directly on /dev/fuse with os.read/os.write and mounts with
mount(2) through ctypes.  Needs root (or CAP_SYS_ADMIN) and /dev/fuse.

    python tests/fusefs.py MODE MOUNTPOINT [--delay S] [--errno NAME]
        [--fail-op OPS] [--slow-op OPS] [--name NAME] [--subtype TYPE]
        [--ready-file PATH] [--debug]

Modes
  unanswered  mount and never read /dev/fuse: FUSE_INIT stays unanswered,
              every access blocks in fuse_get_req (state D, but killable).
  swallow     answer FUSE_INIT, then read every request and never answer:
              callers sleep in request_wait_answer (S); once SIGKILLed they
              stay in D and cannot die until the connection is aborted
              (what a hung NFS/GPFS server does to a prober).
  stuck       like swallow, but callers are in D from the start (not S)
              and stay in D, unkillable, after SIGKILL, until the connection
              is aborted: a process blocked on a dead GPFS/NFS server.
              How: request_wait_answer() (fs/fuse/dev.c) first waits
              interruptibly (S) unless the connection's no_interrupt is set,
              then killably (D), and once killed, if the server has already
              read the request, uninterruptibly (D).  no_interrupt is set
              when a FUSE_INTERRUPT is answered -ENOSYS.  So after INIT a
              warm-up runs before readiness: a forked helper stat()s
              .fusefs-warmup, its LOOKUP is read and held, the helper gets a
              non-fatal SIGUSR1, the kernel sends FUSE_INTERRUPT for the
              LOOKUP, that is answered -ENOSYS, the LOOKUP -ENOENT, and the
              helper is reaped.  Then every request is read, never answered.
  late        like unanswered (FUSE_INIT unanswered, callers wait in D in
              fuse_get_req) until SIGUSR2, then answer INIT and serve like
              ok: the blocked callers continue and succeed.  Readiness is
              signalled right after mount(2).  SIGUSR1 is ignored until
              then; afterwards SIGUSR1/SIGUSR2 stall/resume as for ok.
  ok          small working in-memory filesystem.
  slow        like ok, but replies to the ops in --slow-op (default
              write,fsync,create) are sent --delay seconds late, each from
              its own thread, so other requests keep being served.
  errno       like ok, but the ops in --fail-op (default write) answer
              -errno (--errno, default EIO).

OPS is a comma separated list of: write fsync create mkdir unlink rmdir
rename open read flush release lookup getattr setattr statfs readdir
opendir access all ("all" = every op but INIT, FORGET, INTERRUPT, DESTROY).

Runtime control (ok/slow/errno, and late once it serves): SIGUSR1 stalls
the server (requests are read and queued, callers hang as in 'swallow'),
SIGUSR2 resumes and answers everything queued.

--mkdir DIR (repeatable) pre-creates a directory in the in-memory tree.

Readiness: once mount(2) succeeded and FUSE_INIT was answered (not
waited for in 'unanswered' and 'late'; 'stuck' also waits for its
warm-up, and exits with status 1 if that fails), the --ready-file is
created (containing the pid), otherwise 'ready' is printed on stdout.
The server runs in the foreground until it is killed; killing it (any
signal) aborts the FUSE connection: blocked callers get ENOTCONN (or,
SIGKILLed ones, die).  Then the mount point still needs `umount -l`.
A normal umount makes the server exit with status 0.
"""

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import signal
import stat
import struct
import sys
import threading
import time

# --- protocol constants (linux/fuse.h) --------------------------------------

FUSE_KERNEL_VERSION = 7
FUSE_KERNEL_MINOR = 31

FUSE_LOOKUP = 1
FUSE_FORGET = 2
FUSE_GETATTR = 3
FUSE_SETATTR = 4
FUSE_READLINK = 5
FUSE_SYMLINK = 6
FUSE_MKNOD = 8
FUSE_MKDIR = 9
FUSE_UNLINK = 10
FUSE_RMDIR = 11
FUSE_RENAME = 12
FUSE_LINK = 13
FUSE_OPEN = 14
FUSE_READ = 15
FUSE_WRITE = 16
FUSE_STATFS = 17
FUSE_RELEASE = 18
FUSE_FSYNC = 20
FUSE_SETXATTR = 21
FUSE_GETXATTR = 22
FUSE_LISTXATTR = 23
FUSE_REMOVEXATTR = 24
FUSE_FLUSH = 25
FUSE_INIT = 26
FUSE_OPENDIR = 27
FUSE_READDIR = 28
FUSE_RELEASEDIR = 29
FUSE_FSYNCDIR = 30
FUSE_ACCESS = 34
FUSE_CREATE = 35
FUSE_INTERRUPT = 36
FUSE_DESTROY = 38
FUSE_BATCH_FORGET = 42
FUSE_RENAME2 = 45

OPNAMES = {v: k[5:] for k, v in list(globals().items())
           if k.startswith("FUSE_") and isinstance(v, int) and k not in
           ("FUSE_KERNEL_VERSION", "FUSE_KERNEL_MINOR")}

NO_REPLY = {FUSE_FORGET, FUSE_BATCH_FORGET, FUSE_INTERRUPT}
# The unique of a FUSE_INTERRUPT request (and of its reply) is the unique
# of the interrupted request with this bit set.
FUSE_INT_REQ_BIT = 1 << 0

# INIT flags
FUSE_ASYNC_READ = 1 << 0
FUSE_BIG_WRITES = 1 << 5
FUSE_PARALLEL_DIROPS = 1 << 18

FATTR_MODE = 1 << 0
FATTR_UID = 1 << 1
FATTR_GID = 1 << 2
FATTR_SIZE = 1 << 3
FATTR_ATIME = 1 << 4
FATTR_MTIME = 1 << 5
FATTR_ATIME_NOW = 1 << 7
FATTR_MTIME_NOW = 1 << 8

ROOT_ID = 1
MAX_WRITE = 128 * 1024
# The kernel wants a read buffer of at least max(8192, max_write + headers).
READ_BUFSIZE = 1024 * 1024 + 4096

IN_HEADER = struct.Struct("<IIQQIIIHH")      # fuse_in_header, 40 bytes
OUT_HEADER = struct.Struct("<IiQ")           # fuse_out_header, 16 bytes
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")    # fuse_attr, 88 bytes
ENTRY_OUT_HEAD = struct.Struct("<QQQQII")    # fuse_entry_out without attr
ATTR_OUT_HEAD = struct.Struct("<QII")        # fuse_attr_out without attr
OPEN_OUT = struct.Struct("<QII")             # fuse_open_out
INTERRUPT_IN = struct.Struct("<Q")        # fuse_interrupt_in: unique
INIT_IN = struct.Struct("<IIII")             # major minor max_readahead flags
INIT_OUT = struct.Struct("<IIIIHHIIHHI28x")  # fuse_init_out, 64 bytes
SETATTR_IN = struct.Struct("<IIQQQQQQIIIIIIII")  # fuse_setattr_in, 88 bytes
RW_IN = struct.Struct("<QQIIQII")            # fuse_read_in / fuse_write_in
WRITE_OUT = struct.Struct("<II")
CREATE_IN = struct.Struct("<IIII")           # flags mode umask open_flags
MKNOD_IN = struct.Struct("<IIII")            # mode rdev umask padding
MKDIR_IN = struct.Struct("<II")              # mode umask
RENAME_IN = struct.Struct("<Q")
RENAME2_IN = struct.Struct("<QII")
STATFS_OUT = struct.Struct("<QQQQQIIII24x")  # fuse_kstatfs, 80 bytes
DIRENT = struct.Struct("<QQII")              # fuse_dirent without name

assert IN_HEADER.size == 40 and ATTR.size == 88 and INIT_OUT.size == 64
assert SETATTR_IN.size == 88 and RW_IN.size == 40 and STATFS_OUT.size == 80

OP_GROUPS = {
    "write": {FUSE_WRITE},
    "fsync": {FUSE_FSYNC, FUSE_FSYNCDIR},
    "create": {FUSE_CREATE, FUSE_MKNOD},
    "mkdir": {FUSE_MKDIR},
    "unlink": {FUSE_UNLINK},
    "rmdir": {FUSE_RMDIR},
    "rename": {FUSE_RENAME, FUSE_RENAME2},
    "open": {FUSE_OPEN},
    "read": {FUSE_READ},
    "flush": {FUSE_FLUSH},
    "release": {FUSE_RELEASE},
    "lookup": {FUSE_LOOKUP},
    "getattr": {FUSE_GETATTR},
    "stat": {FUSE_LOOKUP, FUSE_GETATTR},
    "setattr": {FUSE_SETATTR},
    "statfs": {FUSE_STATFS},
    "readdir": {FUSE_READDIR},
    "opendir": {FUSE_OPENDIR},
    "access": {FUSE_ACCESS},
    "all": set(OPNAMES) - {FUSE_INIT, FUSE_FORGET, FUSE_BATCH_FORGET,
                           FUSE_INTERRUPT, FUSE_DESTROY},
}

MS_NOSUID = 2
MS_NODEV = 4


def log(msg):
    sys.stderr.write("fusefs[%d] %.3f %s\n" % (os.getpid(), time.time(), msg))
    sys.stderr.flush()


def parse_ops(spec):
    ops = set()
    for word in spec.split(","):
        word = word.strip().lower()
        if not word:
            continue
        if word not in OP_GROUPS:
            raise SystemExit("unknown op %r (known: %s)"
                             % (word, " ".join(sorted(OP_GROUPS))))
        ops |= OP_GROUPS[word]
    return ops


def parse_errno(name):
    if name.lstrip("-").isdigit():
        return abs(int(name))
    value = getattr(errno, name.upper(), None)
    if not isinstance(value, int):
        raise SystemExit("unknown errno name %r" % name)
    return value


# --- mounting ----------------------------------------------------------------

def do_mount(mountpoint, fd, source, fstype):
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.c_ulong, ctypes.c_char_p]
    opts = "fd=%d,rootmode=%o,user_id=0,group_id=0,allow_other" % (
        fd, stat.S_IFDIR | 0o755)
    rc = libc.mount(source.encode(), os.fsencode(mountpoint), fstype.encode(),
                    MS_NOSUID | MS_NODEV, opts.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount(%s, type %s): %s"
                      % (mountpoint, fstype, os.strerror(err)))


def fusermount(mountpoint, source, subtype):
    """Mount as an unprivileged user would: through the setuid fusermount3, which
    mounts with user_id/group_id of the caller and no allow_other, and hands the
    /dev/fuse descriptor back over a socket (the libfuse protocol: _FUSE_COMMFD)."""
    import shutil
    import socket
    helper = shutil.which("fusermount3") or "/usr/bin/fusermount3"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    os.set_inheritable(theirs.fileno(), True)
    opts = "fsname=%s" % source + (",subtype=%s" % subtype if subtype else "")
    env = dict(os.environ, _FUSE_COMMFD=str(theirs.fileno()))
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(helper, [helper, "-o", opts, "--", mountpoint], env)
        finally:
            os._exit(127)
    theirs.close()
    try:
        _msg, fds, _flags, _addr = socket.recv_fds(ours, 16, 1)
    finally:
        ours.close()
    _, status = os.waitpid(pid, 0)
    if not fds:
        raise OSError(errno.EPERM, "fusermount3 failed on %s (status %d)"
                      % (mountpoint, os.waitstatus_to_exitcode(status)))
    return fds[0]


def signal_ready(ready_file):
    if ready_file:
        tmp = ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(tmp, ready_file)
    else:
        sys.stdout.write("ready\n")
        sys.stdout.flush()


# --- in-memory filesystem ----------------------------------------------------

class Node:
    __slots__ = ("ino", "mode", "data", "children", "nlink", "uid", "gid",
                 "atime", "mtime", "ctime", "rdev")

    def __init__(self, ino, mode, uid=0, gid=0):
        now = time.time()
        self.ino = ino
        self.mode = mode
        self.data = bytearray()
        self.children = {} if stat.S_ISDIR(mode) else None
        self.nlink = 2 if stat.S_ISDIR(mode) else 1
        self.uid, self.gid, self.rdev = uid, gid, 0
        self.atime = self.mtime = self.ctime = now

    def attr(self):
        size = len(self.data) if self.children is None else 4096
        def split(t):
            return int(t), int((t - int(t)) * 1e9)
        (a, an), (m, mn), (c, cn) = (split(self.atime), split(self.mtime),
                                     split(self.ctime))
        return ATTR.pack(self.ino, size, (size + 511) // 512, a, m, c,
                         an, mn, cn, self.mode, self.nlink, self.uid,
                         self.gid, self.rdev, 4096, 0)


class FuseError(Exception):
    def __init__(self, err):
        super().__init__(err)
        self.errno = err


def cstr(buf):
    """Split a NUL-terminated name off buf: (name, rest)."""
    i = buf.index(b"\0")
    return bytes(buf[:i]), buf[i + 1:]


class Server:
    def __init__(self, fd, mode, delay=0.0, err=errno.EIO, fail_ops=(),
                 slow_ops=(), entry_timeout=0.0, debug=False):
        self.fd = fd
        self.mode = mode
        self.delay = delay
        self.err = err
        self.fail_ops = set(fail_ops) if mode == "errno" else set()
        self.slow_ops = set(slow_ops) if mode == "slow" else set()
        self.entry_timeout = entry_timeout
        self.debug = debug
        self.nodes = {ROOT_ID: Node(ROOT_ID, stat.S_IFDIR | 0o755)}
        self.next_ino = ROOT_ID + 1
        self.next_fh = 1
        self.lock = threading.Lock()     # guards fs state and the stall queue
        self.stalled = False
        self.no_interrupt = False        # --no-interrupt: warm up as 'stuck' does, then serve
        self.queue = []
        self.initialized = False
        self.mountpoint = None

    def make_dirs(self, relpath):
        d = self.nodes[ROOT_ID]
        for part in os.fsencode(relpath).split(b"/"):
            if not part or part == b".":
                continue
            ino = d.children.get(part)
            d = (self.nodes[ino] if ino is not None else
                 self.new_node(d, part, stat.S_IFDIR | 0o755, 0, 0))

    # -- transport --

    def send(self, unique, error=0, payload=b""):
        data = OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error,
                               unique) + payload
        try:
            os.write(self.fd, data)
        except OSError as e:
            # ENOENT: the request was interrupted/aborted meanwhile.
            if self.debug or e.errno != errno.ENOENT:
                log("reply to %d failed: %s" % (unique, e))

    def read_request(self):
        while True:
            try:
                return os.read(self.fd, READ_BUFSIZE)
            except OSError as e:
                if e.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                    continue
                if e.errno == errno.ENODEV:      # unmounted / aborted
                    return None
                raise

    # -- main loop --

    def serve(self, ready_file):
        """Main loop; returns the exit status.  ready_file=False: readiness
        was already signalled (late mode)."""
        while True:
            buf = self.read_request()
            if buf is None:
                log("connection gone (unmounted or aborted), exiting")
                return 0
            hdr = IN_HEADER.unpack_from(buf)
            opcode, unique = hdr[1], hdr[2]
            if self.debug:
                log("req %d %s node=%d pid=%d len=%d"
                    % (unique, OPNAMES.get(opcode, opcode), hdr[3], hdr[6],
                       hdr[0]))
            if opcode == FUSE_INIT:
                self.reply_init(unique, buf[IN_HEADER.size:])
                if not self.initialized:
                    self.initialized = True
                    if self.mode == "stuck" or self.no_interrupt:
                        status = self.warm_up_no_interrupt()
                        if status:
                            return status
                    if ready_file is not False:
                        signal_ready(ready_file)
                continue
            if self.mode in ("swallow", "stuck"):
                continue
            if opcode == FUSE_DESTROY:
                self.send(unique)
                log("DESTROY, exiting")
                return 0
            with self.lock:
                if self.stalled:
                    self.queue.append(buf)
                    continue
                self.handle(buf)

    def reply_init(self, unique, body):
        major, minor, max_readahead, _flags = INIT_IN.unpack_from(body)
        if major != FUSE_KERNEL_VERSION:
            log("kernel speaks FUSE %d.%d, need 7.x" % (major, minor))
            self.send(unique, errno.EPROTO)
            return
        flags = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_PARALLEL_DIROPS
        out = INIT_OUT.pack(FUSE_KERNEL_VERSION, min(minor, FUSE_KERNEL_MINOR),
                            max_readahead, flags, 16, 12, MAX_WRITE, 1,
                            MAX_WRITE // 4096, 0, 0)
        self.send(unique, 0, out)
        log("INIT answered (kernel %d.%d, using 7.%d), mode %s"
            % (major, minor, min(minor, FUSE_KERNEL_MINOR), self.mode))

    # -- stuck mode --

    WARMUP_NAME = b".fusefs-warmup"

    def warm_up_no_interrupt(self, timeout=10.0):
        """Make the kernel set fc->no_interrupt for this connection.

        A forked helper stat()s WARMUP_NAME; its LOOKUP is read and held,
        the helper gets SIGUSR1 (it has a handler, so the signal is not
        fatal) and the kernel queues a FUSE_INTERRUPT for the held request
        (it was already read).  Answering that INTERRUPT with -ENOSYS sets
        fc->no_interrupt; then the LOOKUP is answered -ENOENT, the helper
        exits and is reaped.  From then on request_wait_answer() skips its
        interruptible wait: callers sleep killable (D) and, once SIGKILLed
        after their request was read, uninterruptibly (D) until abort.
        Returns 0, or an exit status on failure."""
        warm_path = os.path.join(self.mountpoint,
                                 os.fsdecode(self.WARMUP_NAME))
        pid = os.fork()
        if pid == 0:                                   # helper
            status = 3
            try:
                os.close(self.fd)   # must not keep the connection alive
                signal.signal(signal.SIGUSR1, lambda *_: None)
                try:
                    os.stat(warm_path)
                    status = 2
                except FileNotFoundError:
                    status = 0
                except OSError:
                    status = 1
            finally:
                os._exit(status)
        deadline = time.monotonic() + timeout
        held = None            # unique of the helper's LOOKUP
        interrupted = False    # INTERRUPT answered with -ENOSYS
        signalled_at = 0.0

        poller = select.poll()       # bounds every wait for a request
        poller.register(self.fd, select.POLLIN)
        try:
            while not interrupted and time.monotonic() < deadline:
                if held is not None and time.monotonic() - signalled_at > 0.5:
                    os.kill(pid, signal.SIGUSR1)   # lost the race? again
                    signalled_at = time.monotonic()
                if not poller.poll(100):
                    continue
                try:
                    buf = os.read(self.fd, READ_BUFSIZE)
                except OSError as e:
                    if e.errno in (errno.EAGAIN, errno.ENOENT):
                        continue
                    log("warm-up: reading /dev/fuse: %s" % e)
                    return 1
                hdr = IN_HEADER.unpack_from(buf)
                opcode, unique = hdr[1], hdr[2]
                body = bytes(buf[IN_HEADER.size:hdr[0]])
                if self.debug:
                    log("warm-up req %d %s node=%d pid=%d"
                        % (unique, OPNAMES.get(opcode, opcode), hdr[3],
                           hdr[6]))
                if (held is None and opcode == FUSE_LOOKUP
                        and hdr[3] == ROOT_ID
                        and cstr(body)[0] == self.WARMUP_NAME):
                    held = unique
                    os.kill(pid, signal.SIGUSR1)
                    signalled_at = time.monotonic()
                elif opcode == FUSE_INTERRUPT:
                    (target,) = INTERRUPT_IN.unpack_from(body)
                    self.send(unique, errno.ENOSYS)
                    if target == held:
                        interrupted = True
                        self.send(held, errno.ENOENT)
                else:          # anything else (nobody else should be here)
                    with self.lock:
                        self.handle(buf)
        finally:
            poller.unregister(self.fd)
        status = None
        while time.monotonic() < deadline + 5.0:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            status = None
        if not interrupted or status != 0:
            log("warm-up failed: interrupt answered %s, helper status %s"
                % (interrupted, status))
            if status is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return 1
        log("warm-up done: FUSE_INTERRUPT answered -ENOSYS, no_interrupt set")
        return 0

    # -- stall / resume --

    def stall(self):
        with self.lock:
            self.stalled = True
        log("stalled")

    def resume(self):
        with self.lock:
            self.stalled = False
            queued, self.queue = self.queue, []
            for buf in queued:
                self.handle(buf)
        log("resumed, answered %d queued requests" % len(queued))

    def handle(self, buf):
        """Dispatch one request (called with self.lock held)."""
        hdr = IN_HEADER.unpack_from(buf)
        opcode, unique, nodeid, uid, gid = hdr[1], hdr[2], hdr[3], hdr[4], hdr[5]
        body = bytes(buf[IN_HEADER.size:hdr[0]])
        if opcode in NO_REPLY:
            return
        if opcode in self.fail_ops:
            self.send(unique, self.err)
            return
        method = getattr(self, "op_" + OPNAMES.get(opcode, "").lower(), None)
        if method is None:
            self.send(unique, errno.ENOSYS)
            return
        try:
            payload = method(nodeid, body, uid, gid) or b""
            error = 0
        except FuseError as e:
            payload, error = b"", e.errno
        except Exception as e:  # a bug here must not hang the caller
            log("op %s failed: %r" % (OPNAMES.get(opcode), e))
            payload, error = b"", errno.EIO
        if opcode in self.slow_ops and self.delay > 0:
            t = threading.Thread(target=self._late_reply,
                                 args=(unique, error, payload), daemon=True)
            t.start()
        else:
            self.send(unique, error, payload)

    def _late_reply(self, unique, error, payload):
        time.sleep(self.delay)
        self.send(unique, error, payload)

    # -- helpers --

    def node(self, nodeid):
        try:
            return self.nodes[nodeid]
        except KeyError:
            raise FuseError(errno.ESTALE)

    def dir(self, nodeid):
        n = self.node(nodeid)
        if n.children is None:
            raise FuseError(errno.ENOTDIR)
        return n

    def timeout(self):
        t = self.entry_timeout
        return int(t), int((t - int(t)) * 1e9)

    def entry(self, n):
        sec, nsec = self.timeout()
        return ENTRY_OUT_HEAD.pack(n.ino, 0, sec, sec, nsec, nsec) + n.attr()

    def attr_out(self, n):
        sec, nsec = self.timeout()
        return ATTR_OUT_HEAD.pack(sec, nsec, 0) + n.attr()

    def new_node(self, parent, name, mode, uid, gid):
        if not name or b"/" in name:
            raise FuseError(errno.EINVAL)
        if name in parent.children:
            raise FuseError(errno.EEXIST)
        n = Node(self.next_ino, mode, uid, gid)
        self.next_ino += 1
        self.nodes[n.ino] = n
        parent.children[name] = n.ino
        if stat.S_ISDIR(mode):
            parent.nlink += 1
        parent.mtime = parent.ctime = time.time()
        return n

    def open_out(self):
        fh = self.next_fh
        self.next_fh += 1
        return OPEN_OUT.pack(fh, 0, 0)

    # -- operations --

    def op_lookup(self, nodeid, body, uid, gid):
        name, _ = cstr(body)
        d = self.dir(nodeid)
        if name == b".":
            return self.entry(d)
        ino = d.children.get(name)
        if ino is None:
            raise FuseError(errno.ENOENT)
        return self.entry(self.nodes[ino])

    def op_getattr(self, nodeid, body, uid, gid):
        return self.attr_out(self.node(nodeid))

    def op_setattr(self, nodeid, body, uid, gid):
        n = self.node(nodeid)
        (valid, _pad, _fh, size, _lo, atime, mtime, _ctime, atimens, mtimens,
         _ctimens, mode, _u4, nuid, ngid, _u5) = SETATTR_IN.unpack_from(body)
        now = time.time()
        if valid & FATTR_MODE:
            n.mode = (n.mode & stat.S_IFMT(n.mode)) | (mode & 0o7777)
        if valid & FATTR_UID:
            n.uid = nuid
        if valid & FATTR_GID:
            n.gid = ngid
        if valid & FATTR_SIZE:
            if n.children is not None:
                raise FuseError(errno.EISDIR)
            if size < len(n.data):
                del n.data[size:]
            else:
                n.data.extend(bytes(size - len(n.data)))
            n.mtime = now
        if valid & FATTR_ATIME:
            n.atime = atime + atimens / 1e9
        if valid & FATTR_ATIME_NOW:
            n.atime = now
        if valid & FATTR_MTIME:
            n.mtime = mtime + mtimens / 1e9
        if valid & FATTR_MTIME_NOW:
            n.mtime = now
        n.ctime = now
        return self.attr_out(n)

    def op_mknod(self, nodeid, body, uid, gid):
        mode, rdev, _umask, _pad = MKNOD_IN.unpack_from(body)
        name, _ = cstr(body[MKNOD_IN.size:])
        if not stat.S_ISREG(mode):
            raise FuseError(errno.EPERM)
        n = self.new_node(self.dir(nodeid), name, mode, uid, gid)
        return self.entry(n)

    def op_mkdir(self, nodeid, body, uid, gid):
        mode, _umask = MKDIR_IN.unpack_from(body)
        name, _ = cstr(body[MKDIR_IN.size:])
        n = self.new_node(self.dir(nodeid), name,
                          stat.S_IFDIR | (mode & 0o7777), uid, gid)
        return self.entry(n)

    def op_create(self, nodeid, body, uid, gid):
        _flags, mode, _umask, _oflags = CREATE_IN.unpack_from(body)
        name, _ = cstr(body[CREATE_IN.size:])
        n = self.new_node(self.dir(nodeid), name,
                          stat.S_IFREG | (mode & 0o7777), uid, gid)
        return self.entry(n) + self.open_out()

    def _remove(self, nodeid, body, want_dir):
        name, _ = cstr(body)
        d = self.dir(nodeid)
        ino = d.children.get(name)
        if ino is None:
            raise FuseError(errno.ENOENT)
        n = self.nodes[ino]
        if want_dir:
            if n.children is None:
                raise FuseError(errno.ENOTDIR)
            if n.children:
                raise FuseError(errno.ENOTEMPTY)
            d.nlink -= 1
        elif n.children is not None:
            raise FuseError(errno.EISDIR)
        del d.children[name]
        n.nlink = 0
        n.ctime = d.mtime = d.ctime = time.time()
        # Keep the node: open handles may still use it (no lookup counts).

    def op_unlink(self, nodeid, body, uid, gid):
        self._remove(nodeid, body, want_dir=False)

    def op_rmdir(self, nodeid, body, uid, gid):
        self._remove(nodeid, body, want_dir=True)

    def _rename(self, olddir, newdir, names):
        old, rest = cstr(names)
        new, _ = cstr(rest)
        src, dst = self.dir(olddir), self.dir(newdir)
        ino = src.children.get(old)
        if ino is None:
            raise FuseError(errno.ENOENT)
        target = dst.children.get(new)
        if target is not None:
            t = self.nodes[target]
            if t.children:
                raise FuseError(errno.ENOTEMPTY)
            t.nlink = 0
        del src.children[old]
        dst.children[new] = ino
        src.mtime = dst.mtime = time.time()

    def op_rename(self, nodeid, body, uid, gid):
        (newdir,) = RENAME_IN.unpack_from(body)
        self._rename(nodeid, newdir, body[RENAME_IN.size:])

    def op_rename2(self, nodeid, body, uid, gid):
        newdir, flags, _pad = RENAME2_IN.unpack_from(body)
        if flags:
            raise FuseError(errno.EINVAL)
        self._rename(nodeid, newdir, body[RENAME2_IN.size:])

    def op_open(self, nodeid, body, uid, gid):
        n = self.node(nodeid)
        if n.children is not None:
            raise FuseError(errno.EISDIR)
        return self.open_out()

    def op_opendir(self, nodeid, body, uid, gid):
        self.dir(nodeid)
        return self.open_out()

    def op_read(self, nodeid, body, uid, gid):
        _fh, offset, size = RW_IN.unpack_from(body)[:3]
        n = self.node(nodeid)
        n.atime = time.time()
        return bytes(n.data[offset:offset + size])

    def op_write(self, nodeid, body, uid, gid):
        _fh, offset, size = RW_IN.unpack_from(body)[:3]
        data = body[RW_IN.size:RW_IN.size + size]
        n = self.node(nodeid)
        if offset > len(n.data):
            n.data.extend(bytes(offset - len(n.data)))
        n.data[offset:offset + len(data)] = data
        n.mtime = n.ctime = time.time()
        return WRITE_OUT.pack(len(data), 0)

    def op_readdir(self, nodeid, body, uid, gid):
        _fh, offset, size = RW_IN.unpack_from(body)[:3]
        d = self.dir(nodeid)
        entries = [(b".", d.ino, stat.S_IFDIR), (b"..", ROOT_ID, stat.S_IFDIR)]
        for name, ino in d.children.items():
            entries.append((name, ino, stat.S_IFMT(self.nodes[ino].mode)))
        out = bytearray()
        for i in range(offset, len(entries)):
            name, ino, fmt = entries[i]
            rec = DIRENT.pack(ino, i + 1, len(name), fmt >> 12) + name
            rec += b"\0" * (-len(rec) % 8)
            if len(out) + len(rec) > size:
                break
            out += rec
        return bytes(out)

    def op_statfs(self, nodeid, body, uid, gid):
        used = sum(len(n.data) for n in self.nodes.values()) // 4096
        total = 262144  # 1 GiB in 4 KiB blocks
        return STATFS_OUT.pack(total, total - used, total - used, 1 << 20,
                               (1 << 20) - len(self.nodes), 4096, 255, 4096, 0)

    def op_access(self, nodeid, body, uid, gid):
        self.node(nodeid)

    def op_flush(self, nodeid, body, uid, gid):
        return b""

    def op_release(self, nodeid, body, uid, gid):
        return b""

    def op_releasedir(self, nodeid, body, uid, gid):
        return b""

    def op_fsync(self, nodeid, body, uid, gid):
        self.node(nodeid)

    def op_fsyncdir(self, nodeid, body, uid, gid):
        self.node(nodeid)


# --- main ----------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["unanswered", "swallow", "stuck", "late",
                                    "ok", "slow", "errno"])
    p.add_argument("mountpoint")
    p.add_argument("--delay", type=float, default=1.0,
                   help="slow mode: seconds to delay replies (default 1.0)")
    p.add_argument("--errno", default="EIO",
                   help="errno mode: error name or number (default EIO)")
    p.add_argument("--fail-op", default="write",
                   help="errno mode: ops that fail (default write)")
    p.add_argument("--slow-op", default="write,fsync,create",
                   help="slow mode: ops answered late")
    p.add_argument("--name", default=None,
                   help="mount source shown in mountinfo (default fusefs-MODE)")
    p.add_argument("--subtype", default="fusefs",
                   help="fs type becomes fuse.SUBTYPE; '' for plain 'fuse'")
    p.add_argument("--entry-timeout", type=float, default=0.0,
                   help="entry/attr cache seconds (default 0: always ask)")
    p.add_argument("--mkdir", action="append", default=[], metavar="DIR",
                   help="ok/slow/errno/late: directory (relative, nested "
                        "ok) that exists from the start; repeatable")
    p.add_argument("--ready-file", default=None)
    p.add_argument("--no-interrupt", action="store_true",
                   help="ok/slow/errno: first make the kernel set no_interrupt (as 'stuck' "
                   "does), so callers of a stalled server wait in D, not S")
    p.add_argument("--fusermount", action="store_true",
                   help="mount through fusermount3, as an unprivileged user "
                        "(user_id=UID, no allow_other)")
    p.add_argument("--debug", action="store_true", help="log every request")
    a = p.parse_args(argv)

    mountpoint = os.path.abspath(a.mountpoint)
    source = a.name or "fusefs-" + a.mode
    fstype = "fuse." + a.subtype if a.subtype else "fuse"
    server = Server(-1, a.mode, delay=a.delay, err=parse_errno(a.errno),
                    fail_ops=parse_ops(a.fail_op), slow_ops=parse_ops(a.slow_op),
                    entry_timeout=a.entry_timeout, debug=a.debug)
    server.no_interrupt = a.no_interrupt
    for d in a.mkdir:
        server.make_dirs(d)

    # Default dispositions: any terminating signal kills us, which closes
    # /dev/fuse and aborts the connection.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    if a.fusermount:
        fd = fusermount(mountpoint, source, a.subtype)
    else:
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    server.fd = fd
    server.mountpoint = mountpoint
    if a.mode == "late":
        # Block SIGUSR2 before anybody may send it: sigwait() below picks
        # it up even if it arrives before we get there.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if not a.fusermount:
        do_mount(mountpoint, fd, source, fstype)
    log("mounted %s on %s type %s, mode %s" % (source, mountpoint, fstype,
                                                a.mode))

    if a.mode == "unanswered":
        signal_ready(a.ready_file)
        while True:       # never read /dev/fuse: FUSE_INIT stays queued
            signal.pause()

    if a.mode == "late":
        signal_ready(a.ready_file)
        # Like 'unanswered' (FUSE_INIT stays queued, callers wait in D in
        # fuse_get_req) until SIGUSR2; then serve like 'ok'.
        signal.sigwait({signal.SIGUSR2})
        log("SIGUSR2: start serving")

    if a.mode in ("ok", "slow", "errno", "late"):
        # Handlers run in the main thread between reads; do the work in a
        # thread so they never wait for the lock the main loop may hold.
        signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(
            target=server.stall, daemon=True).start())
        signal.signal(signal.SIGUSR2, lambda *_: threading.Thread(
            target=server.resume, daemon=True).start())
    if a.mode == "late":
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        return server.serve(False)
    return server.serve(a.ready_file)


if __name__ == "__main__":
    sys.exit(main())
