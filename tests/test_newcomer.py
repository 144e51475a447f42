"""A newcomer's first day, from the README text alone: a clean clone of HEAD, the quick
start's commands taken from the README and run as written, as root, as on a fresh
machine; its slurm.conf lines applied to a test cluster of this test's own (never to
the system's slurm.conf). It ends with a report-only health check on that cluster's
node, run as slurmd runs it, that changes nothing in Slurm while `explain` shows what
it would have done; then the Undo section's resume loop, which resumes our drains only.

What the quick start installs lands on this machine's real paths: whatever is there
is moved aside first and put back afterwards (as tests/test_packaging.py does)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, ours
from slurmcluster import SlurmCluster
from test_packaging import installed
from test_readme import blocks, is_slurm_conf, section, shell_lines

pytestmark = pytest.mark.cluster

PROGRAMS = ("slurm-hooks", "slurm-hooks-healthcheck", "slurm-hooks-prolog", "slurm-hooks-epilog")
TAKEN_OVER = ("/etc/slurm-hooks", "/var/lib/slurm-hooks", "/var/log/slurm-hooks", "/run/slurm-hooks",
              "/opt/slurm-hooks", *(f"/usr/local/sbin/{p}" for p in PROGRAMS), "/usr/local/bin/slurm-hooks",
              *(f"/usr/local/share/man/man8/{p}.8.gz" for p in PROGRAMS),
              "/usr/local/share/man/man5/slurm-hooks.yaml.5.gz",
              "/usr/local/share/bash-completion/completions/slurm-hooks")
# root's PATH on Debian: the installed programs, not this suite's virtual environment.
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# An ordinary user's (Debian's /etc/profile).
USER_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
# The suite itself: run, it would run this test again.
THE_SUITE = "bash tests/run.sh"


@pytest.fixture
def taken_over():
    if os.geteuid() != 0:
        pytest.fail("the quick start is written for root (CI runs as root)")
    if installed("slurm-hooks"):
        pytest.fail("a slurm-hooks package is installed here: apt-get purge slurm-hooks first")
    tag = f".newcomer-{os.getpid()}"
    # Bind mounts of the same filesystem have its device number: mountinfo says, not ismount().
    with open("/proc/self/mountinfo") as f:
        mount_points = {line.split()[4] for line in f}
    moved, private = [], []
    for p in TAKEN_OVER:
        if p in mount_points:
            # A private path of a namespaced session (tests/namespaced.py): the session's
            # own, empty at its start; it cannot be moved, and need not be.
            private.append(p)
        elif os.path.lexists(p):
            os.rename(p, p + tag)
            moved.append(p)
    try:
        yield
    finally:
        for p in TAKEN_OVER:
            if p in private:
                for entry in os.listdir(p):
                    path = os.path.join(p, entry)
                    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            elif os.path.islink(p) or os.path.isfile(p):
                os.unlink(p)
            elif os.path.lexists(p):
                shutil.rmtree(p)
            if p in moved:
                os.rename(p + tag, p)


@pytest.fixture
def newcomers_cluster(tmp_path):
    c = SlurmCluster(tmp_path / "slurm", nodes=("q1", "q2"), cluster_name="hooksnew")
    try:
        c.start()
        yield c
    finally:
        c.stop()


def node_state(cluster, node: str) -> tuple[str, str]:
    info = cluster.show_node(node)
    return info.get("State", ""), info.get("Reason", "")


# The README's front door, in order: what a new admin copies, section by section.
WALK = ("Install", "Upgrade", "Hook into slurm.conf", "The first hour", "Undo")
# The README's example names, and what stands for them on the test cluster.
EXAMPLE_NODE, EXAMPLE_JOB = "n17", "1234"


def readme_steps(readme: str) -> list[tuple[str, str, str]]:
    """(section, "sh" | "slurm.conf", command or lines), in the README's order."""
    steps = []
    for title in WALK:
        for _, body, _ in blocks(section(title, readme)):
            if is_slurm_conf(body):
                steps.append((title, "slurm.conf", "\n".join(x for x in body.splitlines()
                                                             if x.strip() and not x.lstrip().startswith("#"))))
            else:
                steps += [(title, "sh", c) for c in shell_lines(body)]
    return steps


def test_the_first_hour_as_written_from_install_to_undo(tmp_path, taken_over, newcomers_cluster):
    """The README's install, slurm.conf lines, first hour and Undo, every command copied
    from its text and run as it says, as root on a node of a test cluster of its own (the
    README's n17 and job 1234 stand for that cluster's node and job): report-only runs
    that change nothing, `config check` listing what it will probe, one drill drain that
    `explain` and `status` show, `diagnose` over root's ssh between the nodes, and
    `slurm-hooks resume`, which gives the node back with its Comment cleared. The
    read-only commands (`--help`, `status`, `explain`) also as an ordinary user, from
    the PATH every user has."""
    from attacker import unprivileged_user
    from sshd import Sshd
    from test_security import readable_by_users
    cluster = newcomers_cluster
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    readme = (clone / "README.md").read_text()
    env = {"PATH": ROOT_PATH, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
           "SLURM_CONF": str(cluster.conf_path)}        # the test cluster stands for the site's
    on_node = {**env, "SLURMD_NODENAME": "q1"}           # a shell on q1 (its hostname, on a real node)
    server = Sshd(tmp_path / "sshd", cluster.nodes).start()
    job = None

    def sh(command: str, environ=None) -> subprocess.CompletedProcess:
        command = command.replace(EXAMPLE_NODE, "q1").replace(EXAMPLE_JOB, str(job))
        return subprocess.run(["bash", "-c", command], cwd=clone, env=environ or on_node, capture_output=True,
                              text=True, timeout=600)

    ran: list[str] = []
    try:
        with unprivileged_user("shk-newcomer") as user:
            user_env = user.env(PATH=USER_PATH, SLURM_CONF=str(cluster.conf_path))

            def as_user(command: str) -> subprocess.CompletedProcess:
                readable_by_users(cluster)          # slurm.conf readable, as /etc/slurm is on a node
                return user.run("bash", "-c", command, env={**user_env, "SLURMD_NODENAME": "q1"}, check=False,
                                timeout=60)

            for title, kind, what in readme_steps(readme):
                said = f"README, {title}: `{what}`"
                if kind == "slurm.conf":
                    # Into the test cluster's own slurm.conf, not /etc/slurm; and, as the
                    # README says for a slurm.conf outside Slurm's place, named in our file.
                    cluster.write_config(conf_extra=what if title != "Undo" else None)
                    ran.append("slurm.conf")
                    continue
                if title == "Undo" and what == "scontrol reconfigure":
                    cluster.write_config()              # the lines taken out again
                r = sh(what)
                out = f"{said} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
                ran.append(what)
                if title == "Upgrade":
                    # Over the copy just installed: the site's file kept as edited, the
                    # programs switched to a new environment, the previous one kept.
                    assert r.returncode == 0, out
                    conf = Path("/etc/slurm-hooks/slurm-hooks.yaml")
                    assert f"  conf: {cluster.conf_path}\n" in conf.read_text()
                    assert f"configuration {conf}: kept" in r.stderr and "actions off: report-only" in r.stderr, out
                    envs = sorted(os.listdir("/opt/slurm-hooks/envs"))
                    assert len(envs) == 2 and os.readlink("/opt/slurm-hooks/current") in [f"envs/{e}" for e in envs], envs
                elif what.startswith("bash packaging/install.sh"):
                    assert r.returncode in (0, 1), out      # this host may be unhealthy; nothing done
                    assert "-- dry run" in r.stdout and "done:" not in r.stdout.replace("not done:", ""), out
                    conf = Path("/etc/slurm-hooks/slurm-hooks.yaml")
                    # The site's own: its slurm.conf, root's ssh to its nodes (a key and
                    # known hosts of the test's sshd, which maps the node names).
                    text = conf.read_text()
                    assert "  conf: null\n" in text and "  ssh_options: []\n" in text, text
                    conf.write_text(text.replace("  conf: null\n", f"  conf: {cluster.conf_path}\n")
                                    .replace("  ssh_options: []\n", f"  ssh_options: {json.dumps(server.options())}\n"))
                    # Any user: --help, from the PATH every user has.
                    r = as_user("slurm-hooks --help")
                    assert r.returncode == 0 and "diagnose" in r.stdout, r.stdout + r.stderr
                elif what == "slurm-hooks config check":
                    assert r.returncode == 0, out
                    assert "filesystem probes on this node" in r.stdout, out
                elif what.startswith("scontrol reconfigure") and title != "Undo":
                    assert r.returncode == 0, out
                    shown = cluster.scontrol("show", "config").stdout
                    assert re.search(r"^HealthCheckProgram\s*= /usr/local/sbin/slurm-hooks-healthcheck$", shown, re.M)
                    # An ordinary user's job on both nodes, to look at later: root reaches
                    # it only over ssh (Slurm creates no step of root's in another's job).
                    script = user.write("job.sh", "#!/bin/sh\nsrun sleep 600\n", 0o755)
                    readable_by_users(cluster)
                    r = user.run(cluster.binary("sbatch"), "--parsable", "-N2", "-w", "q1,q2", "--chdir", user.home,
                                 "-o", user.home / "job.out", script, env=user_env)
                    job = int(r.stdout.strip().split(";")[0])
                    cluster.wait_for(lambda: cluster.job_state(job) == "RUNNING", 30, what=f"job {job} running")
                elif what == "slurm-hooks healthcheck":
                    assert r.returncode in (0, 1), out
                    assert "-- report only" in r.stdout.splitlines()[0], out
                    assert "\n  done:" not in r.stdout, out
                    assert "DRAIN" not in cluster.show_node("q1").get("State", ""), "a report-only run drained"
                elif what.startswith("slurm-hooks --config") and "healthcheck" in what:
                    # The drill: actions on for one run, and the node drained.
                    assert r.returncode == 1, out
                    assert "site drill: taken out by hand" in r.stdout and "  done: drain node q1: " in r.stdout, out
                    assert ours(cluster.show_node("q1").get("Reason", "")), cluster.show_node("q1")
                    assert "DRAIN" in cluster.show_node("q1")["State"], cluster.show_node("q1")
                elif what == "slurm-hooks explain":
                    assert r.returncode == 0, out
                    assert "left to Slurm (left to Slurm" not in r.stdout, out
                    assert not re.search(r"since: \d{9,}", r.stdout), "a raw epoch: " + out
                    if "DRAIN" in cluster.show_node("q1").get("State", ""):
                        assert "drained by slurm-hooks" in r.stdout and "site drill" in r.stdout, out
                    u = as_user(what)
                    # Root's journal and state are root's: it says which it cannot read.
                    assert "/var/log/slurm-hooks" in u.stdout + u.stderr or "/var/lib/slurm-hooks" in u.stdout + u.stderr, \
                        u.stdout + u.stderr
                    assert "no run" not in u.stdout, u.stdout
                elif what == "slurm-hooks status":
                    assert r.returncode == 0, out
                    drained = "DRAIN" in cluster.show_node("q1").get("State", "")
                    if drained:
                        assert "q1" in r.stdout and "site" in r.stdout, out
                    assert "requeued" not in r.stdout, "nothing was requeued by slurm-hooks: " + out
                    u = as_user(what)
                    assert u.returncode == 0, u.stdout + u.stderr
                    assert ("q1" in u.stdout) == drained, u.stdout
                elif what.startswith("slurm-hooks diagnose"):
                    assert r.returncode == 0, out
                    head = r.stdout.splitlines()[0]
                    assert f"job {job}: 2 nodes (2 answered)" in head and "ClusterShell over ssh as root" in head, out
                elif what.startswith("slurm-hooks resume"):
                    assert r.returncode == 0, out
                    if what.endswith("q1") or what.endswith(EXAMPLE_NODE):
                        info = cluster.show_node("q1")
                        assert "DRAIN" not in info["State"], info
                        assert "slurm-hooks:cause" not in info.get("Comment", ""), info
                else:
                    assert r.returncode == 0, out
                if title == "Undo" and what == "scontrol reconfigure":
                    # Before the Undo's resume: one drain of ours, one of an admin's.
                    cluster.scontrol("update", "nodename=q1", "state=drain",
                                     "reason=fs /scratch hung >10s (write, nfs4) [slurm-hooks]")
                    cluster.scontrol("update", "nodename=q2", "state=drain", "reason=disk swap, ticket 42")
    finally:
        server.stop()

    assert ran[0].startswith("bash packaging/install.sh") and "slurm.conf" in ran, ran
    for needed in ("slurm-hooks config check", "slurm-hooks explain", "slurm-hooks status",
                   f"slurm-hooks diagnose {EXAMPLE_JOB}", f"slurm-hooks resume {EXAMPLE_NODE}", "slurm-hooks resume --all"):
        assert needed in ran, (needed, ran)
    # Undo: `slurm-hooks resume --all` gave back our drain, and left the admin's.
    assert "DRAIN" not in node_state(cluster, "q1")[0], node_state(cluster, "q1")
    state, reason = node_state(cluster, "q2")
    assert "DRAIN" in state and reason.startswith("disk swap, ticket 42"), (state, reason)
    with open("/var/log/slurm-hooks/journal.jsonl") as f:
        journal = [json.loads(line) for line in f]
    # slurmd's own runs (report-only) and the README's: one drain done, by the drill.
    done = [a for a in journal if a.get("event") == "action" and a.get("outcome") == "done"]
    assert [a["kind"] for a in done if a.get("node") == "q1"].count("drain") == 1, done


def test_the_undo_loop_with_slurms_commands_resumes_our_drains_only(newcomers_cluster):
    """docs/operations.md's loop, for a site without slurm-hooks any more: only the nodes
    whose reason is ours are resumed."""
    from test_readme import undo_loop
    cluster = newcomers_cluster
    env = {"PATH": ROOT_PATH, "LANG": "C.UTF-8", "SLURM_CONF": str(cluster.conf_path)}
    cluster.scontrol("update", "nodename=q1", "state=drain", "reason=fs /scratch hung >10s (write, nfs4) [slurm-hooks]")
    cluster.scontrol("update", "nodename=q2", "state=drain", "reason=disk swap, ticket 42")
    r = subprocess.run(["bash", "-c", undo_loop()], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "DRAIN" not in node_state(cluster, "q1")[0], node_state(cluster, "q1")
    state, reason = node_state(cluster, "q2")
    assert "DRAIN" in state and reason.startswith("disk swap, ticket 42"), (state, reason)
