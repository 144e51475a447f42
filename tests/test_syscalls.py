"""Syscall names for both architectures, and which argument names the file."""
from __future__ import annotations

from slurm_hooks.host import syscalls


def test_tables_for_both_architectures():
    assert [syscalls.name(n, "x86_64") for n in (0, 1, 74, 257, 202)] == ["read", "write", "fsync", "openat", "futex"]
    assert [syscalls.name(n, "aarch64") for n in (63, 64, 82, 56, 98, 79)] == \
        ["read", "write", "fsync", "openat", "futex", "fstatat"]
    assert syscalls.name(99999, "x86_64") == "syscall 99999"


def test_file_arguments():
    AT_FDCWD = 0xFFFFFFFFFFFFFF9C
    assert syscalls.file_args("write", [3, 0x7F00, 10]) == (3, None)
    assert syscalls.file_args("openat", [AT_FDCWD, 0x5555, 0]) == (None, 0x5555)
    assert syscalls.file_args("openat", [0xFFFFFF9C, 0x5555, 0]) == (None, 0x5555)
    assert syscalls.file_args("openat", [7, 0x5555, 0]) == (7, 0x5555)
    assert syscalls.file_args("mmap", [0, 4096, 1, 1, 9, 0]) == (9, None)
    assert syscalls.file_args("stat", [0x1234, 0]) == (None, 0x1234)
    assert syscalls.file_args("futex", [0x1234, 0]) == (None, None)
