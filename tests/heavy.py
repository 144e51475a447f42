"""The scale tests run alone on the host, when two sessions run side by side.

tests/run.sh runs the two Slurm versions' sessions at once on a small machine. A scale
test starts 48 slurmd and runs 48 health checks every few seconds; beside it, the other
session's tests that wait on Slurm's timers or on a health check's next run miss their
deadlines (seen in CI: a remount and a drain that took longer than the test allowed).
So, where tests/run.sh names a lock file (SLURM_HOOKS_TEST_HEAVY_LOCK, on a path both
sessions share), a scale module holds it exclusively from its cluster's start to its
stop, and every other test holds it shared while it runs.

Two flock(2) locks, so that a scale module waiting for its turn is not passed by ever
new shared holders: the gate, held exclusively by a scale module from before it waits
until it is done and taken shared only for a moment by the others, and the lock itself.
Without the variable (one session alone) nothing is locked.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

ENV = "SLURM_HOOKS_TEST_HEAVY_LOCK"


def _open(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def _hold(exclusive: bool) -> Iterator[None]:
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    gate, lock = _open(path + ".gate"), _open(path)
    try:
        # The gate: held by a scale module until it is done, by the others for a moment.
        fcntl.flock(gate, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            os.close(gate)
            gate = -1
        yield
    finally:
        os.close(lock)
        if gate >= 0:
            os.close(gate)


def alone() -> contextlib.AbstractContextManager[None]:
    """Held by a scale module: no other test of either session runs meanwhile."""
    return _hold(exclusive=True)


def beside() -> contextlib.AbstractContextManager[None]:
    """Held by every other test: it waits while a scale module runs."""
    return _hold(exclusive=False)
