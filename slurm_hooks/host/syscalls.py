"""System calls: names by number, and which argument names the file a call waits on."""
from __future__ import annotations

import os

# Calls whose first argument is a file descriptor.
FD_ARG0 = frozenset("""
read write pread64 pwrite64 readv writev preadv pwritev preadv2 pwritev2 fsync fdatasync
sync_file_range fstat newfstat ftruncate fallocate fstatfs getdents getdents64 flock fcntl
ioctl lseek close fadvise64 syncfs fchmod fchown fgetxattr fsetxattr flistxattr
fremovexattr fchdir splice copy_file_range readahead sendfile vmsplice tee
""".split())
# Calls taking (dirfd, path, ...): the path is relative to dirfd, or to the cwd.
AT_PATH = frozenset("""
openat openat2 newfstatat fstatat statx mkdirat mknodat unlinkat renameat renameat2 linkat
faccessat faccessat2 fchmodat fchownat utimensat readlinkat name_to_handle_at
execveat getxattrat setxattrat
""".split())
# Calls whose first argument is a path.
PATH_ARG0 = frozenset("""
open creat stat lstat newstat newlstat access mkdir rmdir unlink chdir truncate statfs chmod
chown lchown readlink rename link execve getxattr lgetxattr setxattr lsetxattr listxattr
llistxattr utime utimes mknod chroot
""".split())
AT_FDCWD = (-100) & 0xFFFFFFFFFFFFFFFF


def table(machine: str | None = None) -> dict[int, str]:
    from . import syscalls_table
    machine = machine or os.uname().machine
    return syscalls_table.AARCH64 if machine in ("aarch64", "arm64") else syscalls_table.X86_64


def name(nr: int, machine: str | None = None) -> str:
    return table(machine).get(nr, f"syscall {nr}")


def file_args(call: str, args: list[int]) -> tuple[int | None, int | None]:
    """(fd, address of a path string) that the call works on, as far as known."""
    if call in FD_ARG0 and args:
        return _fd(args[0]), None
    if call == "mmap" and len(args) > 4:
        return _fd(args[4]), None
    if call in AT_PATH and len(args) > 1:
        dirfd = None if args[0] in (AT_FDCWD, 0xFFFFFF9C) else _fd(args[0])
        return dirfd, args[1]
    if call in PATH_ARG0 and args:
        return None, args[0]
    return None, None


# Calls on two descriptors at once: the wait may be on either.
TWO_FDS = {"sendfile": (0, 1), "splice": (0, 2), "tee": (0, 1), "copy_file_range": (0, 2)}


def fds_of(call: str, args: list[int]) -> list[int]:
    """Every descriptor argument of the call that names a file it may wait on."""
    if call in TWO_FDS:
        return [fd for i in TWO_FDS[call] if i < len(args) and (fd := _fd(args[i])) is not None]
    fd, _ = file_args(call, args)
    return [fd] if fd is not None and call not in AT_PATH else []


def _fd(v: int) -> int | None:
    v &= 0xFFFFFFFF
    return v if v < 0x80000000 else None
