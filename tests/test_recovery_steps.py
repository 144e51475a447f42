"""What a recovery says of each step (act/recovery.py), for the journal and the job's
comment: a site command's placeholders, a step that fails or hangs, a remount after
which nothing is mounted, and the summary's words. The site commands are real programs
run by the hang-safe runner; the mount table is the one the recovery reads."""
from __future__ import annotations

import os
import time

import pytest
from helpers import still_in_d

from slurm_hooks.act import recovery
from slurm_hooks.core.model import Recovery
from slurm_hooks.core.state import StateStore
from slurm_hooks.host.mounts import MountTable, parse_mountinfo
from slurm_hooks.host.runner import Runner

ROOT_LINE = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
SHARED = "41 1 0:51 / /shared rw - nfs4 srv:/export rw\n"


def tables(monkeypatch, *present: bool) -> list:
    """MountTable.current() answers these in turn: /shared mounted or not (then the last, on)."""
    answers = list(present)
    seen: list = []

    def current(cls):
        here = answers.pop(0) if len(answers) > 1 else answers[0]
        seen.append(here)
        return MountTable(parse_mountinfo(ROOT_LINE + (SHARED if here else "")))
    monkeypatch.setattr(MountTable, "current", classmethod(current))
    return seen


def recover(tmp_path, **kw):
    r = Recovery(**{"mountpoint": "/shared", "dev": "0:51", "method": "command", "wait": 0.2, "timeout": 5, **kw})
    return r, recovery.recover(r, Runner(StateStore(str(tmp_path / "state"))), lambda: (True, "ok in 0.01s"))


def test_a_site_command_gets_the_mountpoint_and_the_source(tmp_path, monkeypatch):
    tables(monkeypatch, True)
    out_file = tmp_path / "said"
    r, out = recover(tmp_path, command=["/bin/sh", "-c", f"echo \"$0 $1\" > {out_file}", "{mountpoint}", "{source}"])
    assert out_file.read_text() == "/shared srv:/export\n"
    assert (out.recovered, out.steps) == (True, ["command: done", "probe: ok in 0.01s"])


def test_a_failing_step_says_its_status_and_output(tmp_path, monkeypatch):
    tables(monkeypatch, True)
    r, out = recover(tmp_path, command=["/bin/sh", "-c", "echo '  no such export  '; exit 3"])
    # Said, though what decides is what follows: the tasks gone and the probe passing.
    assert out.steps == ["command: exit 3: no such export", "probe: ok in 0.01s"]


def test_a_step_that_hangs_is_cut_at_its_deadline_and_named(tmp_path, monkeypatch):
    tables(monkeypatch, True)
    t0 = time.monotonic()
    r, out = recover(tmp_path, command=["/bin/sleep", "30"], timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert out.steps[0] == "command: hung at sleep: no answer within 0.5s", out.steps


def test_a_remount_that_mounts_nothing_is_not_a_recovery(tmp_path, monkeypatch):
    seen = tables(monkeypatch, True, False, False)
    r, out = recover(tmp_path, command=["/bin/true"], remount=["/bin/true"])
    assert (out.recovered, out.steps) == (False, ["command: done", "remount: done, but nothing is mounted at /shared"])
    assert seen == [True, False, False]


def test_umount_is_looked_for_where_distributions_put_it(monkeypatch, tmp_path):
    first, second = tmp_path / "usr-umount", tmp_path / "umount"
    monkeypatch.setattr(recovery, "UMOUNT", (str(first), str(second)))
    assert recovery._umount() == str(first)           # neither there: the first, for the error
    second.touch()
    assert recovery._umount() == str(second)


def test_the_summary_counts_tasks_and_probes():
    r = Recovery(mountpoint="/shared", method="fuse-abort")
    assert recovery.Outcome(recovered=True, freed=1).summary(r) == \
        "recovered without reboot (fuse-abort /shared, 1 task freed)"
    assert recovery.Outcome(recovered=True, freed=2, probes=1).summary(r) == \
        "recovered without reboot (fuse-abort /shared, 2 tasks freed, 1 stuck probe gone)"
    assert recovery.Outcome(recovered=True, freed=0, probes=2).summary(r) == \
        "recovered without reboot (fuse-abort /shared, 0 tasks freed, 2 stuck probes gone)"
    assert recovery.Outcome(steps=["a", "b"]).summary(r) == "recovery tried (fuse-abort /shared): a; b"


@pytest.fixture
def umount(tmp_path, monkeypatch):
    """umount as the recovery finds it: a program that writes down each call's arguments."""
    said = tmp_path / "umount.calls"
    prog = tmp_path / "umount"
    prog.write_text(f"#!/bin/sh\necho \"$@\" >> {said}\n")
    prog.chmod(0o755)
    monkeypatch.setattr(recovery, "UMOUNT", (str(prog),))
    return lambda: said.read_text().splitlines() if said.exists() else []


def test_nfs_is_force_unmounted_by_its_mountpoint(tmp_path, monkeypatch, umount):
    tables(monkeypatch, True)
    r, out = recover(tmp_path, method="nfs-force-unmount")
    assert umount() == ["-f /shared"]
    assert out.steps == ["nfs-force-unmount: done", "probe: ok in 0.01s"]


def test_the_dead_mount_is_detached_before_the_remount(tmp_path, monkeypatch, umount):
    tables(monkeypatch, True)
    r, out = recover(tmp_path, command=["/bin/true"], remount=["/bin/true"])
    assert umount() == ["-l /shared"]
    assert (out.recovered, out.steps) == (True, ["command: done", "remount: done", "probe: ok in 0.01s"])


def test_a_mount_gone_before_the_remount_is_not_detached(tmp_path, monkeypatch, umount):
    tables(monkeypatch, True, False, True)
    r, out = recover(tmp_path, command=["/bin/true"], remount=["/bin/true"])
    assert umount() == []
    assert out.steps == ["command: done", "remount: done", "probe: ok in 0.01s"]


def test_tasks_left_are_named_five_at_most(tmp_path, monkeypatch):
    """Six tasks still stuck (this process, six times over, seen in D): the first five
    pids said."""
    tables(monkeypatch, True)
    me = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    pid = os.getpid()
    still_in_d(monkeypatch, pid)
    r, out = recover(tmp_path, command=["/bin/true"], tasks=[[pid, me]] * 6)
    assert out.steps == ["command: done",
                         f"6 of 6 stuck tasks still stuck after 0.2s (pid {pid}, {pid}, {pid}, {pid}, {pid})"]
    assert (out.recovered, out.freed, len(out.left)) == (False, 0, 6)


def test_a_freed_task_that_lives_on_is_freed(tmp_path, monkeypatch):
    """A task whose wait the recovery ended may well live on (its call failed, it handles
    the error): what counts is that it no longer waits in D. This process, running,
    is such a task."""
    tables(monkeypatch, True)
    me = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    r, out = recover(tmp_path, command=["/bin/true"], tasks=[[os.getpid(), me]])
    assert (out.recovered, out.freed, out.left) == (True, 1, []), out.steps


def test_our_own_probes_gone_are_counted_apart_from_the_tasks(tmp_path, monkeypatch):
    tables(monkeypatch, True)
    me = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    r, out = recover(tmp_path, command=["/bin/true"], probes=[[os.getpid(), me + 1]])
    assert (out.recovered, out.freed, out.probes) == (True, 0, 1)
    assert out.summary(r) == "recovered without reboot (command /shared, 0 tasks freed, 1 stuck probe gone)"


def test_a_failing_steps_output_is_cut_to_200_characters(tmp_path, monkeypatch):
    tables(monkeypatch, True)
    r, out = recover(tmp_path, command=["/bin/sh", "-c", "printf 'x%.0s' $(seq 300); exit 1"])
    assert out.steps[0] == "command: exit 1: " + "x" * 200
