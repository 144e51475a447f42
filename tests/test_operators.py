"""What admins look at: the journal (rotated), syslog lines, the Prometheus textfile
(parsed by the official client), and `explain`."""
from __future__ import annotations

import json
import socket
import subprocess

import pytest
import yaml
from helpers import SLURM_HOOKS
from prometheus_client.parser import text_string_to_metric_families

from slurm_hooks.sinks import journal


@pytest.fixture
def node(tmp_path):
    class N:
        config = tmp_path / "c.yaml"
        prom = tmp_path / "textfile"
        log = tmp_path / "log" / "journal.jsonl"

        def configure(self, filesystems, **extra):
            self.prom.mkdir(exist_ok=True)
            doc = {"state_dir": str(tmp_path / "state"), "journal": str(self.log), "node_name": "opsnode",
                   "prometheus_textfile_dir": str(self.prom), "filesystems": filesystems,
                   "filesystem_defaults": {"timeout": 1, "warn_after": 0.5},
                   "slurm": {"bin_dir": str(tmp_path / "noslurm")}, "syslog": False}
            doc.update(extra)
            self.config.write_text(yaml.safe_dump(doc))

        def run(self, *args):
            return subprocess.run([str(SLURM_HOOKS), "-c", str(self.config), *args], capture_output=True,
                                  text=True, timeout=60)
    return N()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_prometheus_textfile_parses_with_the_official_client(node, tmp_path, hung_mount):
    odd = tmp_path / 'scr"atch\\x'
    odd.mkdir()
    node.configure([{"path": str(odd)}, {"path": str(hung_mount.path)}])
    assert node.run("healthcheck").returncode == 1
    [prom] = list(node.prom.iterdir())
    assert prom.name == "slurm_hooks_opsnode.prom"
    fams = families(prom.read_text())
    ok = {s.labels["path"]: s.value for s in fams["slurm_hooks_filesystem_probe_ok"].samples}
    assert ok == {str(odd): 1.0, str(hung_mount.path): 0.0}, "label values survive quotes and backslashes"
    info = {(s.labels["path"], s.labels["status"]) for s in fams["slurm_hooks_filesystem_probe_info"].samples}
    assert (str(hung_mount.path), "hung") in info
    latency = {s.labels["path"]: s.value for s in fams["slurm_hooks_filesystem_probe_latency_seconds"].samples}
    assert latency[str(hung_mount.path)] >= 1.0
    status = {s.labels["check"]: s.value for s in fams["slurm_hooks_check_status"].samples}
    # Every check the health check runs (their modules say which), the failing one at 2.
    from slurm_hooks.checks import for_hook
    assert status == {**{name: 0.0 for name in for_hook("healthcheck")}, "filesystem": 2.0}
    assert fams["slurm_hooks_healthy"].samples[0].value == 0.0
    assert "slurm_hooks_last_success_timestamp_seconds" not in fams       # never healthy yet
    # The drain could not be taken (no Slurm): counted as such.
    actions = {(s.labels["kind"], s.labels["outcome"]): s.value for s in fams["slurm_hooks_actions"].samples
               if s.name == "slurm_hooks_actions_total"}
    assert actions == {("drain", "failed"): 1.0}
    assert fams["slurm_hooks_actions"].type == "counter"
    # A healthy run later: success time; the spooled drain, its fault gone, dropped and counted.
    node.configure([{"path": str(odd)}])
    assert node.run("healthcheck").returncode == 0
    fams = families(prom.read_text())
    assert fams["slurm_hooks_healthy"].samples[0].value == 1.0
    assert fams["slurm_hooks_last_success_timestamp_seconds"].samples[0].value > 0
    assert {(s.labels["kind"], s.labels["outcome"]): s.value for s in fams["slurm_hooks_actions"].samples
            if s.name.endswith("_total")} == {("drain", "failed"): 1.0, ("drain", "skipped"): 1.0}
    assert not [p for p in node.prom.iterdir() if p.name.endswith(".tmp")]


def test_a_probe_still_hung_reports_its_deadline_and_this_runs_time(node, tmp_path, hung_mount):
    """The latency of a hung probe is its deadline (the metric's help says so), and the
    check's duration is this run's, not the age of the probe left stuck by a run before."""
    import time
    node.configure([{"path": str(hung_mount.path)}])
    assert node.run("healthcheck").returncode == 1
    time.sleep(3)
    t0 = time.monotonic()
    assert node.run("healthcheck").returncode == 1
    took = time.monotonic() - t0
    [prom] = list(node.prom.iterdir())
    fams = families(prom.read_text())
    latency = {s.labels["path"]: s.value for s in fams["slurm_hooks_filesystem_probe_latency_seconds"].samples}
    assert latency[str(hung_mount.path)] == 1.0, latency
    duration = {s.labels["check"]: s.value for s in fams["slurm_hooks_check_duration_seconds"].samples}
    assert duration["filesystem"] <= took, (duration, took)
    last = [r for r in journal.read(str(node.log)) if r.get("event") == "run"][-1]
    [f] = [f for c in last["checks"] for f in c["findings"] if f["target"] == str(hung_mount.path)]
    # Its evidence says the same: the deadline, however long the probe has been hung.
    assert f["status"] == "hung" and f["evidence"]["latency"] == 1.0, f


def test_journal_has_run_and_action_lines_and_rotates(node, tmp_path, hung_mount):
    node.configure([{"path": str(hung_mount.path)}], journal_max_bytes=8192, journal_keep=3)
    for _ in range(6):
        node.run("healthcheck")
    files = sorted(p.name for p in node.log.parent.iterdir())
    assert files == ["journal.jsonl", "journal.jsonl.1", "journal.jsonl.2", "journal.jsonl.3", "journal.jsonl.lock"]
    assert all(p.stat().st_size <= 8192 for p in node.log.parent.iterdir())
    records = journal.read(str(node.log))
    events = [r["event"] for r in records]
    assert "run" in events and "action" in events
    action = next(r for r in records if r["event"] == "action")
    assert action["kind"] == "drain" and action["outcome"] == "failed" and action["node"] == "opsnode"


def test_syslog_lines(node, tmp_path, hung_mount):
    sock_path = tmp_path / "log.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(5)
    try:
        node.configure([{"path": str(hung_mount.path)}], syslog=True, syslog_socket=str(sock_path),
                       syslog_facility="local3")
        node.run("healthcheck")
        got = [sock.recv(65536).decode() for _ in range(2)]
    finally:
        sock.close()
    assert got[0].startswith("<156>slurm-hooks[")           # local3 (19) * 8 + warning (4)
    assert got[0].endswith(f"healthcheck opsnode unhealthy: fs {hung_mount.path} hung >1s (create, fuse.fusefs)")
    # The report's word: failed for want of Slurm, kept in the spool for the next run.
    assert got[1].startswith("<155>") and "spooled: drain node opsnode" in got[1]   # error (3)


def test_syslog_without_a_socket_is_a_warning(node, tmp_path):
    missing = tmp_path / "nolog"
    (tmp_path / "scratch").mkdir()
    node.configure([{"path": str(tmp_path / "scratch"), "mountpoint": str(tmp_path / "not-mounted")}], syslog=True,
                   syslog_socket=str(missing))
    r = node.run("healthcheck", "--json")
    rec = json.loads(r.stdout)
    assert any(f"syslog: {missing} does not exist" in w for w in rec["warnings"]), rec["warnings"]


def test_explain_shows_the_diagnosis_behind_the_drain(node, tmp_path, hung_mount):
    node.configure([{"path": str(hung_mount.path)}])
    node.run("healthcheck")
    # As if the drain had gone through: explain reads the journal and local state only.
    state = tmp_path / "state" / "opsnode"
    reason = f"fs {hung_mount.path} hung >1s (create, fuse.fusefs) [slurm-hooks]"
    recs = [json.loads(x) for x in node.log.read_text().splitlines()]
    recs[-2]["actions"][0]["outcome"] = "done"
    node.log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (state / "drain.json").write_text(json.dumps({"reason": reason, "resumable": True, "passes": 1, "at": 1.7e9}))
    out = node.run("explain", "--runs", "3").stdout
    assert "drained by slurm-hooks since " in out and reason in out
    assert "auto-resume: yes, after passing runs (passed so far: 1)" in out
    assert f"  fs {hung_mount.path} hung >1s (create, fuse.fusefs)" in out
    assert "      step: create" in out and "      fstype: fuse.fusefs" in out
    assert "last 1 runs:" in out and "healthcheck unhealthy" in out


APPENDER = """
import sys
from slurm_hooks.sinks import journal
path, who = sys.argv[1], sys.argv[2]
for i in range(400):
    err = journal.append(path, {"event": "run", "who": who, "i": i, "pad": "x" * 200},
                         max_bytes=16384, keep=1000)
    assert err is None, err
"""


def test_concurrent_appends_and_rotations_lose_no_record(tmp_path):
    """The prolog, epilog and health check of a node write the journal at once."""
    import subprocess
    import sys
    path = tmp_path / "j" / "journal.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(w)]) for w in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    records = journal.read(str(path))
    assert len(records) == 8 * 400
    assert {(r["who"], r["i"]) for r in records} == {(str(w), i) for w in range(8) for i in range(400)}
    rotated = [p for p in path.parent.iterdir() if p.name.startswith("journal.jsonl.") and p.name[14:].isdigit()]
    assert len(rotated) > 20 and all(p.stat().st_size <= 16384 for p in rotated)
