"""The hang-safe runner with ordinary children (hung filesystems: test_filesystem.py)."""
from __future__ import annotations

import os
import time

from helpers import proc_state

from slurm_hooks.core.state import StateStore
from slurm_hooks.host.runner import DONE, FAILED, HUNG, NOT_RUN, RAN, TIMED_OUT, Runner, Task, run_command


def _ok(progress, x):
    progress("working")
    return {"double": x * 2}


def _sleep(progress, seconds):
    progress("sleeping")
    time.sleep(seconds)
    return "late"


def _boom(progress):
    raise OSError(5, "Input/output error")


def _exit_hard(progress):
    os._exit(9)


def _environment(progress):
    links = {}
    for n in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            links[n] = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            pass   # the directory descriptor listdir itself used, closed by now
    return {"sid_is_pid": os.getsid(0) == os.getpid(), "links": links}


def test_results_errors_and_deaths_are_told_apart(tmp_path):
    r = Runner(StateStore(str(tmp_path)))
    out = r.run([Task("t:ok", _ok, (21,), 5), Task("t:boom", _boom, (), 5),
                 Task("t:exit", _exit_hard, (), 5)])
    assert out["t:ok"].status == DONE and out["t:ok"].value == {"double": 42}
    assert out["t:ok"].step == "working"
    assert out["t:boom"].status == FAILED and "Input/output error" in out["t:boom"].error
    assert out["t:exit"].status == FAILED and "without a result" in out["t:exit"].error


def test_deadline_kills_and_does_not_wait(tmp_path):
    r = Runner(StateStore(str(tmp_path)))
    t0 = time.monotonic()
    out = r.run([Task(f"t:{i}", _sleep, (30,), 0.5) for i in range(5)])
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0, "five 0.5 s deadlines run in parallel"
    for i in range(5):
        o = out[f"t:{i}"]
        assert o.status == HUNG and o.step == "sleeping" and 0.5 <= o.elapsed < 0.9
        # An ordinary sleeper dies on SIGKILL: reaped, not remembered as stuck.
        assert proc_state(o.pid) is None
    assert r.stuck() == {}


def test_child_has_own_session_and_inherits_no_descriptors(tmp_path):
    leak_r, leak_w = os.pipe()      # stands for slurmd's pipe to the hook
    leak = os.readlink(f"/proc/self/fd/{leak_w}")
    try:
        out = Runner(None).run([Task("t:env", _environment, (), 5)])
    finally:
        os.close(leak_r)
        os.close(leak_w)
    v = out["t:env"].value
    assert v["sid_is_pid"]
    links = v["links"]
    assert [links[n] for n in ("0", "1", "2")] == ["/dev/null"] * 3
    others = [link for n, link in links.items() if n not in ("0", "1", "2")]
    assert leak not in others
    assert len(others) == 1 and others[0].startswith("pipe:"), others   # the private result pipe


def test_run_command_reports_message_and_deadline():
    r = run_command(["/bin/sh", "-c", "echo 'Unable to contact slurm controller' >&2; exit 1"], 5)
    assert r.rc == 1 and r.message() == "Unable to contact slurm controller"
    t0 = time.monotonic()
    r = run_command(["/bin/sh", "-c", "sleep 30 & sleep 30"], 0.3)
    assert r.timed_out and r.rc is None and time.monotonic() - t0 < 0.6
    assert run_command(["/nonexistent/scontrol"], 5).rc == 127


def test_run_command_gives_a_code_of_how_it_ended():
    assert run_command(["/nonexistent/sinfo"], 5).code == NOT_RUN
    assert run_command(["/bin/sh", "-c", "exit 127"], 5).code == RAN          # a program's own 127
    assert run_command(["/bin/sh", "-c", "echo 'cannot run x' >&2; exit 1"], 5).code == RAN
    assert run_command(["/bin/sh", "-c", "sleep 5"], 0.2).code == TIMED_OUT


def test_a_child_that_answered_in_time_is_no_hang_when_collected_late(tmp_path):
    """The caller may work past a child's deadline before collecting (job-report waits
    for py-spy meanwhile): a child that finished in time gave its answer."""
    r = Runner(StateStore(str(tmp_path)))
    batch = r.start([Task("t:quick", _ok, (4,), 0.5), Task("t:slow", _sleep, (30,), 0.5)])
    time.sleep(1.0)
    out = r.collect(batch)
    assert out["t:quick"].status == DONE and out["t:quick"].value == {"double": 8}
    assert out["t:slow"].status == HUNG


def test_a_node_table_of_thousands_of_nodes_is_read_whole():
    """A program's output is capped (1 MiB) unless the caller allows more: the node table
    of a 4,096-node cluster (about 2.4 MB) is read whole, never cut to the first nodes."""
    import sys

    from slurm_hooks.host.runner import MAX_RESULT, run_command
    from slurm_hooks.slurm.scontrol import NODE_TABLE_MAX
    code = "import sys\nfor i in range(4096): sys.stdout.write('NodeName=x%d State=IDLE ' % i + 'x' * 580 + '\\n')"
    cut = run_command([sys.executable, "-c", code], 30)
    assert len(cut.stdout) <= MAX_RESULT + 65536 and cut.stdout.count("\n") < 4096
    whole = run_command([sys.executable, "-c", code], 30, max_output=NODE_TABLE_MAX)
    assert whole.ok and whole.stdout.count("\n") == 4096


def test_the_backend_reads_a_node_table_of_thousands_of_nodes_whole(tmp_path):
    """The scontrol backend's read of the node table passes the larger cap: a scontrol
    (a real program here, with no Slurm library beside it) that prints 4,096 nodes, 2.4 MB,
    gives the breaker 4,096 nodes, not the first 1,893."""
    import sys

    from slurm_hooks.core.config import SlurmConfig
    from slurm_hooks.slurm.scontrol import Slurm
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!{sys.executable}\nimport sys\n"
                        "assert sys.argv[1:] == ['-o', 'show', 'node'], sys.argv\n"
                        "for i in range(4096):\n"
                        "    sys.stdout.write('NodeName=x%d Arch=x86_64 State=IDLE Reason=none Comment=' % i"
                        " + 'c' * 560 + '\\n')\n")
    scontrol.chmod(0o755)
    (tmp_path / "slurm.conf").write_text("ClusterName=t\n")
    slurm = Slurm(SlurmConfig(conf=str(tmp_path / "slurm.conf"), bin_dir=str(bin_dir), timeout=30))
    nodes = slurm.list_nodes_alone()
    assert not slurm.library and len(nodes) == 4096 and nodes[-1]["NodeName"] == "x4095" and nodes.others == 0
