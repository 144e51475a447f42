"""slurm-hooks' own local failures (state, journal, lock, configuration) never fail a
job and never vanish: said on stderr and in syslog; the prolog and epilog exit 0; the
health check reports them as its own problem."""
from __future__ import annotations

import json
import socket
import subprocess

import pytest
from helpers import BIN, SLURM_HOOKS, write_config


@pytest.fixture
def syslog(tmp_path):
    """A syslog socket of our own: what slurm-hooks sends there."""
    path = tmp_path / "log.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.setblocking(False)

    class Log:
        socket = path

        def lines(self) -> list[str]:
            out = []
            while True:
                try:
                    out.append(s.recv(65536).decode())
                except BlockingIOError:
                    return out
    yield Log()
    s.close()


def config(tmp_path, syslog, **extra) -> str:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where a directory should be\n")
    doc = {"node_name": "n1", "slurm": {"bin_dir": str(tmp_path / "noslurm")},
           "filesystems": [{"path": str(tmp_path)}], "gpu": {"enabled": "false"},
           "syslog_socket": str(syslog.socket)}
    doc.update({k: (str(blocker / v) if k in ("state_dir", "journal") else v) for k, v in extra.items()})
    return str(write_config(tmp_path / "c.yaml", tmp_path, **doc))


def run(program: str, cfg: str, *args: str) -> subprocess.CompletedProcess:
    env = {"SLURM_HOOKS_CONFIG": cfg, "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "42"}
    return subprocess.run([str(BIN / program), *args], capture_output=True, text=True, timeout=60, env=env)


def journal(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_unusable_state_dir_fails_no_job_and_loses_nothing(tmp_path, syslog, hook):
    cfg = config(tmp_path, syslog, state_dir="state")
    r = run(f"slurm-hooks-{hook}", cfg)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert f"slurm-hooks {hook}: local failure: " in r.stderr and "not-a-directory/state" in r.stderr
    [rec] = journal(tmp_path)[-1:]
    assert rec["hook"] == hook and rec["job"] == "42" and rec["checks"], "the run itself is journalled"
    assert any("not-a-directory/state" in e for e in rec["local_errors"])
    assert any("local failure" in line and "not-a-directory/state" in line for line in syslog.lines())


def test_unusable_state_dir_is_the_health_checks_own_problem(tmp_path, syslog):
    cfg = config(tmp_path, syslog, state_dir="state")
    r = run("slurm-hooks-healthcheck", cfg)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "slurm-hooks itself: " in r.stdout and "result: WARNING" in r.stdout
    rec = journal(tmp_path)[-1]
    assert rec["status"] == "warning" and rec["actions"] == [] and rec["local_errors"]
    assert any("local failure" in line for line in syslog.lines())


@pytest.mark.parametrize("hook", ["prolog", "epilog", "healthcheck"])
def test_unusable_journal_is_said_on_stderr_and_syslog(tmp_path, syslog, hook):
    cfg = config(tmp_path, syslog, journal="journal.jsonl")
    r = run(f"slurm-hooks-{hook}", cfg)
    assert r.returncode == 0, r.stderr
    assert f"slurm-hooks {hook}: local failure: journal " in r.stderr
    assert any("local failure: journal" in line for line in syslog.lines())


def test_both_health_check_programs_treat_a_bad_config_alike(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"journal: {tmp_path}/journal.jsonl\nfilesystems:\n  - path: /scratch\n    timeout: -3\n")
    env = {"SLURM_HOOKS_CONFIG": str(bad), "SLURMD_NODENAME": "n1"}
    for argv in ([str(BIN / "slurm-hooks-healthcheck")], [str(SLURM_HOOKS), "healthcheck"]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode == 2, r.stderr
        assert "slurm-hooks healthcheck: configuration error, no checks run, nothing drained or resumed" \
            in r.stderr
        assert "filesystems[0].timeout: must be > 0 seconds, got -3" in r.stderr
        assert "job" not in r.stderr.splitlines()[0]
    assert [(x["hook"], x["status"]) for x in journal(tmp_path)] == [("healthcheck", "config_error")] * 2


def test_status_exits_3_when_it_cannot_ask_slurm(tmp_path, syslog):
    """As the README says: `status` judges no node itself; 3 (not 1, "unhealthy") means
    Slurm could not be asked."""
    cfg = config(tmp_path, syslog)
    r = subprocess.run([str(SLURM_HOOKS), "-c", cfg, "status"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 3 and "slurm-hooks status: cannot ask Slurm: scontrol not found" in r.stderr
