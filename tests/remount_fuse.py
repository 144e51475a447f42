#!/usr/bin/env python3
"""A site's remount command, for the recovery tests: starts tests/fusefs.py MODE on
MOUNTPOINT in a session of its own (so it outlives the hang-safe child that runs this)
and returns once the mount answers, as `mount` returns once a mount is back.

    remount_fuse.py MODE MOUNTPOINT READY_FILE
"""
import os
import subprocess
import sys
import time

FUSEFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fusefs.py")


def main() -> int:
    mode, mountpoint, ready = sys.argv[1:4]
    if os.path.exists(ready):
        os.unlink(ready)
    with open(ready + ".log", "ab") as log:
        subprocess.Popen([sys.executable, FUSEFS, mode, mountpoint, "--ready-file", ready,
                          "--name", "fusefs-remounted"], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=log, start_new_session=True)
    deadline = time.monotonic() + 8
    while not os.path.exists(ready):
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
