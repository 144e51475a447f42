"""fusectl, the kernel's control filesystem for FUSE: each connection's `waiting` count
(requests not yet answered) and its `abort`.

Nothing guarantees it is mounted: systemd mounts it at boot, a node without systemd
(a minimal image, a container) has an empty /sys/fs/fuse/connections. Where slurm-hooks
needs it (the stuck-task check asks whether a FUSE mount has a request waiting, a
`fuse-abort` recovery writes `abort`) and it is not mounted, slurm-hooks mounts it the
kernel's own way (`mount -t fusectl none /sys/fs/fuse/connections`), once, and says
so. Whether it is mounted is read from /proc/self/mountinfo; the mount runs as a
program with a deadline (host/runner.py: run_command), never waited on.
"""
from __future__ import annotations

import os

FUSECTL = "/sys/fs/fuse/connections"
MOUNT = ("/usr/bin/mount", "/bin/mount")
MOUNT_TIMEOUT = 5.0


def mounted(path: str = FUSECTL) -> bool:
    from .mounts import MountTable
    try:
        m = MountTable.current().at(path)
    except OSError:
        return False
    return m is not None and m.fstype == "fusectl"


def ensure(path: str = FUSECTL) -> str:
    """Mount fusectl at `path` unless it is there: "" when it was mounted already,
    else what was done (said in the run's notes, or a recovery's steps)."""
    if path != FUSECTL or mounted(path):
        return ""        # a test's own tree, or mounted already: nothing to do
    if not os.path.isdir(path):
        return f"fusectl: {path} does not exist (the fuse module is not loaded): not mounted"
    from .runner import run_command
    program = next((p for p in MOUNT if os.path.exists(p)), MOUNT[0])
    result = run_command([program, "-t", "fusectl", "none", path], MOUNT_TIMEOUT,
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
    if result.ok and mounted(path):
        return f"fusectl was not mounted: mounted it at {path}"
    return f"fusectl was not mounted, and mounting it at {path} failed: {result.message()}"
