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
from helpers import ROOT
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
# The suite itself: run, it would run this test again.
THE_SUITE = "bash tests/run.sh"


@pytest.fixture
def taken_over():
    if os.geteuid() != 0:
        pytest.fail("the quick start is written for root (CI runs as root)")
    if installed("slurm-hooks"):
        pytest.fail("a slurm-hooks package is installed here: apt-get purge slurm-hooks first")
    tag = f".newcomer-{os.getpid()}"
    moved = []
    for p in TAKEN_OVER:
        if os.path.lexists(p):
            os.rename(p, p + tag)
            moved.append(p)
    try:
        yield
    finally:
        for p in TAKEN_OVER:
            if os.path.islink(p) or os.path.isfile(p):
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


def quick_start(readme: str) -> list[tuple[str, str]]:
    """("sh", command) and ("slurm.conf", lines), in the README's order."""
    steps = []
    for _, body, _ in blocks(section("Quick start (fresh Debian machine, as root)", readme)):
        if is_slurm_conf(body):
            steps.append(("slurm.conf", "\n".join(x for x in body.splitlines()
                                                  if x.strip() and not x.lstrip().startswith("#"))))
        else:
            steps += [("sh", c) for c in shell_lines(body)]
    return steps


def test_the_quick_start_as_written_ends_in_a_report_only_run_that_changes_nothing(
        tmp_path, taken_over, newcomers_cluster):
    cluster = newcomers_cluster
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    readme = (clone / "README.md").read_text()
    env = {"PATH": ROOT_PATH, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
           "SLURM_CONF": str(cluster.conf_path)}        # the test cluster stands for the site's

    steps = quick_start(readme)
    ran = []
    for kind, what in steps:
        if kind == "slurm.conf":
            cluster.write_config(conf_extra=what)       # the cluster's own slurm.conf, not /etc/slurm
            ran.append("slurm.conf")
            continue
        if what == THE_SUITE:
            continue
        r = subprocess.run(["bash", "-c", what], cwd=clone, env=env, capture_output=True, text=True,
                           timeout=600)
        said = f"the quick start's `{what}` exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        if "slurm-hooks healthcheck" in what:
            # This host may well be unhealthy (1); what matters is that nothing was done.
            assert r.returncode in (0, 1), said
            header = next(x for x in r.stdout.splitlines() if x.startswith("slurm-hooks healthcheck on node"))
            assert "-- dry run" in header or "-- report only" in header, said
            assert not [x for x in r.stdout.splitlines() if x.lstrip().startswith("done:")], said
        else:
            assert r.returncode == 0, said
        ran.append(what)
    assert ran[0].startswith("bash packaging/install.sh") and "slurm.conf" in ran, ran
    assert ran[-1] == "scontrol reconfigure", "slurm.conf is read again once the lines are in"
    shown = cluster.scontrol("show", "config").stdout
    assert re.search(r"^HealthCheckProgram\s*= /usr/local/sbin/slurm-hooks-healthcheck$", shown, re.M), shown

    # The node as slurmd would run the check on it: a site check that always fails gives
    # the run something to do; slurm.conf outside Slurm's default place is named in
    # slurm-hooks' file, as the README says for such sites.
    conf = Path("/etc/slurm-hooks/slurm-hooks.yaml")
    text = conf.read_text()
    assert "  report_only: true\n" in text and "  conf: null\n" in text
    conf.write_text(text.replace("  conf: null\n", f"  conf: {cluster.conf_path}\n"))
    check = Path("/etc/slurm-hooks/checks.d/newcomer")
    check.parent.mkdir(mode=0o755, exist_ok=True)
    check.write_text("#!/bin/sh\necho 'newcomer: always critical'\nexit 2\n")
    check.chmod(0o755)
    before = {n: node_state(cluster, n) for n in cluster.nodes}
    r = subprocess.run(["/usr/local/sbin/slurm-hooks-healthcheck"], env={"SLURMD_NODENAME": "q1"}, cwd="/",
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr          # unhealthy, and said so
    assert "report only" in r.stdout.splitlines()[0], r.stdout
    assert "not done (report only): drain node q1: site newcomer" in r.stdout, r.stdout
    assert {n: node_state(cluster, n) for n in cluster.nodes} == before, "a report-only run changed Slurm"
    assert cluster.scontrol("show", "node", "q1").stdout.count("Reason=") == 0

    with open("/var/log/slurm-hooks/journal.jsonl") as f:
        journal = [json.loads(line) for line in f]
    # slurmd may have run the check on its own since the reconfigure: every run, report-only.
    actions = [a for a in journal if a.get("event") == "action" and a.get("node") == "q1"]
    assert actions and all(a["outcome"] == "report-only" and a["result"] == "not done" for a in actions), actions
    assert actions[-1]["kind"] == "drain", actions[-1]
    r = subprocess.run(["slurm-hooks", "explain", "--node", "q1"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "not done: drain node q1: site newcomer" in r.stdout, r.stdout

    # Undo: the README's loop resumes the nodes drained with our prefix, and no other.
    cluster.scontrol("update", "nodename=q1", "state=drain", "reason=fs /scratch hung >10s (write, nfs4) [slurm-hooks]")
    cluster.scontrol("update", "nodename=q2", "state=drain", "reason=disk swap, ticket 42")
    loop = next(c for _, body, _ in blocks(section("Undo", readme)) for c in shell_lines(body)
                if c.startswith("sinfo"))
    r = subprocess.run(["bash", "-c", loop], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "DRAIN" not in node_state(cluster, "q1")[0], node_state(cluster, "q1")
    state, reason = node_state(cluster, "q2")
    assert "DRAIN" in state and reason.startswith("disk swap, ticket 42"), (state, reason)
