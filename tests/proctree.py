"""A /proc tree laid out as the kernel's, for tests of what is read of a stuck task:
one process per `task()` call, with its stat, status, syscall, wchan, stack, cgroup,
descriptors and their fdinfo (mnt_id), maps, environment and command line."""
from __future__ import annotations

import os

MOUNTINFO = ("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
             "50 1 0:50 / /gpfs rw - gpfs gpfs0 rw\n")


ARGS, ENV = (0x7ffd00000000, 0x7ffd00000010), (0x7ffd00000010, 0x7ffd00000100)
MAPS = ("55d000000000-55d000001000 r-xp 00000000 08:01 1234 /usr/bin/python3.11\n"
        "55d000100000-55d000200000 rw-p 00000000 00:00 0 [heap]\n"
        "7ffc00000000-7ffe00000000 rw-p 00000000 00:00 0 [stack]\n")


def task(root, pid, tid, comm, state, *, flags=0, cgroup="0::/user.slice\n", syscall="running",
         wchan="0", stack="", fds=None, environ=b"", switches=(5, 1), start=None, uid=1000):
    p = root / str(pid)
    t = p / "task" / str(tid)
    t.mkdir(parents=True, exist_ok=True)
    start = 1000 + pid if start is None else start
    fields = ([state, "1", str(pid), str(pid), "0", "-1", str(flags)] + ["0"] * 12 + [str(start)]
              + ["0"] * 25 + [str(a) for a in ARGS + ENV] + ["0"])
    line = f"{tid} ({comm}) {' '.join(fields)}\n"
    (t / "stat").write_text(line)
    (p / "stat").write_text(line)
    (p / "maps").write_text(MAPS)
    kthread = 1 if flags & 0x00200000 else 0
    status = (f"Name:\t{comm}\nState:\t{state} (x)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
              f"Kthread:\t{kthread}\nThreads:\t{{threads}}\n"
              f"voluntary_ctxt_switches:\t{switches[0]}\nnonvoluntary_ctxt_switches:\t{switches[1]}\n")
    threads = len(os.listdir(p / "task"))
    (t / "status").write_text(status.format(threads=threads))
    # The process's own status is its leader's (the first task made), with the count of
    # its threads, as the kernel's.
    leader = p / "status"
    if pid == tid:
        leader.write_text(status.format(threads=threads))
    elif not leader.exists():
        # A thread made without its leader: the leader has exited (a zombie whose
        # status the process's is), as after pthread_exit() in main.
        leader.write_text(status.format(threads=threads).replace(f"State:\t{state} (x)", "State:\tZ (zombie)"))
    else:
        text = leader.read_text()
        leader.write_text(text.replace(f"Threads:\t{threads - 1}\n", f"Threads:\t{threads}\n"))
    (t / "syscall").write_text(syscall + "\n")
    (t / "wchan").write_text(wchan)
    (t / "stack").write_text(stack)
    (p / "cgroup").write_text(cgroup)
    (p / "mountinfo").write_text(MOUNTINFO)
    (p / "environ").write_bytes(environ)
    (p / "cmdline").write_bytes(b"python\0train.py\0")
    (p / "fd").mkdir(exist_ok=True)
    (p / "fdinfo").mkdir(exist_ok=True)
    for n, target in (fds or {}).items():
        os.symlink(target, p / "fd" / str(n))
        # The kernel's id of the mount the descriptor is open on, as fdinfo gives it.
        mnt = 50 if target.startswith("/gpfs/") else 1
        (p / "fdinfo" / str(n)).write_text(f"pos:\t0\nflags:\t02\nmnt_id:\t{mnt}\nino:\t7\n")
    if not os.path.lexists(p / "cwd"):
        os.symlink("/gpfs/run", p / "cwd")
    return f"{pid}/{tid}/{start}"
