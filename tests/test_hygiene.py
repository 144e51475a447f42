"""The suite itself: stopped by SIGTERM it still stops the Slurm daemons it started,
and what it may not leave behind is what the session-end check looks for."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
from conftest import WATCHED, left_behind
from helpers import ROOT, poll

INNER = '''
import pathlib, time
import pytest
from slurmcluster import SlurmCluster

@pytest.fixture(scope="session")
def small(tmp_path_factory):
    c = SlurmCluster(tmp_path_factory.mktemp("term"), nodes=("t1",), cluster_name="hooksterm")
    try:
        c.start()
        yield c
    finally:
        c.stop()

def test_waits(small):
    pathlib.Path(OUT).write_text(" ".join(str(p) for p in small.pids.values()))
    time.sleep(600)
'''


@pytest.mark.cluster
def test_sigterm_stops_the_clusters_daemons(tmp_path):
    out = tmp_path / "pids"
    (tmp_path / "test_inner.py").write_text(INNER.replace("OUT", repr(str(out))))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "-c", os.devnull, "--basetemp", str(tmp_path / "base"),
                          str(tmp_path / "test_inner.py")],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        pids = [int(x) for x in poll(lambda: out.exists() and out.read_text().split(), 120,
                                     what="the inner cluster up")]
        assert len(pids) == 2 and all(psutil.pid_exists(x) for x in pids)
        p.send_signal(signal.SIGTERM)
        p.wait(90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)

    def gone(pid):
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    assert poll(lambda: all(gone(x) for x in pids), 30, what="slurmctld and slurmd gone"), \
        p.stdout.read().decode(errors="replace")


def test_the_session_check_sees_what_a_test_leaves(tmp_path):
    before = {d: {} for d in WATCHED}
    before["/var/log/slurm-hooks"] = {"journal.jsonl": (10, 1)}
    after = {"/var/log/slurm-hooks": {"journal.jsonl": (20, 2)},
             "/run/slurm-hooks": {"config%x.json": (1, 1)},
             "/tmp": {"shk-sec-abc": (0, 1), "someone-elses.log": (1, 1), "pytest-of-root": (0, 1)}}
    assert left_behind(before, after) == {"/var/log/slurm-hooks": ["journal.jsonl"],
                                          "/run/slurm-hooks": ["config%x.json"], "/tmp": ["shk-sec-abc"]}
    assert left_behind(after, after) == {}
