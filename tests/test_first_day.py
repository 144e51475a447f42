"""An admin's first day (issue 25): a quick start that acts on nothing, output that says
what happened in one vocabulary, `--json` that always prints a document, an `explain`
that works from the journal alone, a `config check` that knows this node's mounts,
metrics that say why they are off, and docs that name the installed paths. Each test
runs the real CLI, as an admin would."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from helpers import ROOT, SLURM_HOOKS

from slurm_hooks.sinks import journal

# The scontrol of a node with no slurm.conf and no configless DNS records: what real
# scontrol prints then (Slurm 22.05 to 25.11), before it asks anyone.
NO_CONFIG_SCONTROL = """#!/bin/sh
if [ "$1" = --version ]; then echo "slurm 22.05.8"; exit 0; fi
echo "scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2
echo "scontrol: fatal: Could not establish a configuration source" >&2
exit 1
"""


@pytest.fixture
def node(tmp_path):
    class N:
        config = tmp_path / "c.yaml"
        log = tmp_path / "log" / "journal.jsonl"
        prom = tmp_path / "textfile"
        missing = tmp_path / "no-such-dir"      # a probe path that does not exist: the check fails

        def configure(self, **extra):
            doc = {"state_dir": str(tmp_path / "state"), "journal": str(self.log), "node_name": "day1",
                   "prometheus_textfile_dir": str(self.prom), "filesystems": [{"path": str(self.missing)}],
                   "filesystem_defaults": {"timeout": 2, "warn_after": 1},
                   "slurm": {"bin_dir": str(tmp_path / "noslurm")}, "syslog": False}
            doc.update(extra)
            self.config.write_text(yaml.safe_dump(doc))

        def run(self, *args, config=None):
            return subprocess.run([str(SLURM_HOOKS), "-c", str(config or self.config), *args],
                                  capture_output=True, text=True, timeout=60)

        def no_config_slurm(self) -> dict:
            bindir = tmp_path / "slurm-bin"
            bindir.mkdir(exist_ok=True)
            (bindir / "scontrol").write_text(NO_CONFIG_SCONTROL)
            (bindir / "scontrol").chmod(0o755)
            return {"bin_dir": str(bindir), "backend": "scontrol"}

        def runs(self):
            return [r for r in journal.read(str(self.log)) if r.get("event") == "run"]

        def actions(self):
            return [r for r in journal.read(str(self.log)) if r.get("event") == "action"]
    n = N()
    n.prom.mkdir(mode=0o755)
    return n


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```\n(.*?)```", text, flags=re.S)


# --- 1. the quick start acts on nothing ---------------------------------------------

WIRING = {"HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState", "Prolog", "Epilog"}


def test_quick_start_makes_the_first_runs_report_only(tmp_path):
    """The configuration the installer puts in place is report-only, and no command of
    the quick start before the first real run turns actions on; the slurm.conf lines it
    and the example give live only wire the programs in."""
    readme = (ROOT / "README.md").read_text()
    quick = "".join(_section(readme, title) for title in ("Install", "Hook into slurm.conf", "The first hour"))
    commands = [line.strip().removeprefix("$ ") for block in _code_blocks(quick) for line in block.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    first_run = next(i for i, c in enumerate(commands)
                     if re.match(r"slurm-hooks( \S+)* healthcheck", c) and "--dry-run" not in c)
    edits = [c for c in commands[:first_run] if "/etc/slurm-hooks/slurm-hooks.yaml" in c]
    conf = tmp_path / "slurm-hooks.yaml"
    conf.write_text((ROOT / "conf/slurm-hooks.yaml").read_text())      # what install.sh puts there
    for c in edits:
        subprocess.run(shlex.split(c.replace("/etc/slurm-hooks/slurm-hooks.yaml", str(conf))), check=True)
    shown = json.loads(subprocess.run([str(SLURM_HOOKS), "-c", str(conf), "config", "show"],
                                      capture_output=True, text=True, check=True).stdout)
    assert shown["actions"]["report_only"] is True
    live = [c.split("=", 1)[0] for c in commands if re.match(r"^[A-Z][A-Za-z]+=", c)]
    assert live and set(live) <= WIRING, live
    # The example: site policy only commented, each with why.
    example = (ROOT / "packaging/slurm.conf.example").read_text().splitlines()
    set_lines = [line.split("=", 1)[0] for line in example if re.match(r"^[A-Z][A-Za-z]+=", line)]
    assert set(set_lines) <= WIRING, set_lines
    for key in ("SchedulerParameters", "ResumeTimeout", "ReturnToService"):
        at = next(i for i, line in enumerate(example) if line.startswith(f"#{key}="))
        above = "\n".join(example[max(0, at - 8):at])
        assert "Site policy" in above, (key, above)


# --- 2. one vocabulary for what became of an action ------------------------------------

def test_a_failed_drain_says_failed_and_why_never_would(node):
    node.configure(slurm=node.no_config_slurm())
    r = node.run("healthcheck")
    assert r.returncode == 1, r.stderr
    line = next(x for x in r.stdout.splitlines() if "drain node day1" in x)
    assert line.lstrip().startswith("failed: drain node day1"), line
    assert "(no Slurm configuration found; set slurm.conf" in line and "would" not in line, line
    [action] = node.actions()
    assert action["outcome"] == "failed" and action["result"] == "failed"
    assert action["code"] == "no_slurm_config", "nothing refused: no slurmctld was asked"
    assert action["message"].startswith("no Slurm configuration found; set slurm.conf")
    metrics = (node.prom / "slurm_hooks_day1.prom").read_text()
    assert 'slurm_hooks_actions_total{node="day1",kind="drain",outcome="failed"} 1' in metrics


def test_report_only_and_dry_run_say_so_and_differ(node):
    node.configure(actions={"report_only": True})
    out = node.run("healthcheck").stdout
    header, *rest = out.splitlines()
    assert "report only (actions.report_only): no action is taken" in header, header
    assert "  not done (report only): drain node day1: fs" in out, out
    assert "would" not in out, "report-only must not read like a dry run"
    assert node.actions()[-1]["result"] == "not done" and node.actions()[-1]["outcome"] == "report-only"
    # A dry run of a report-only node: what it would do, as any dry run; its journal
    # record still says the node is report-only.
    out = node.run("healthcheck", "--dry-run").stdout
    assert "-- dry run: nothing is done" in out.splitlines()[0], out
    assert "  would drain node day1: fs" in out and "(report only)" not in out, out
    run = node.runs()[-1]
    assert run["dry_run"] is True and run["report_only"] is True, run
    assert node.actions()[-1]["outcome"] == "dry-run"
    node.configure()
    out = node.run("healthcheck", "--dry-run").stdout
    assert "-- dry run: nothing is done" in out.splitlines()[0], out
    assert "  would drain node day1: fs" in out
    out = node.run("healthcheck").stdout                     # the real thing, Slurm absent
    assert "dry run" not in out.splitlines()[0] and "would drain" not in out
    assert "  spooled: drain node day1" in out and "scontrol not found" in out, out


# --- 3. --json always prints a document -------------------------------------------------

def test_json_is_printed_for_errors_too(node, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"journal: {node.log}\nfilesystems:\n  - path: /scratch\n    timeout: -3\n")
    for cmd in (["status"], ["diagnose", "1"], ["healthcheck"], ["check"], ["prolog"], ["config", "check"]):
        r = node.run(*cmd, "--json", config=bad)
        # A prolog with a broken configuration checks nothing and holds no job up (0);
        # everything else says the configuration is wrong (2).
        assert r.returncode == (0 if cmd == ["prolog"] else 2), (cmd, r.returncode)
        doc = json.loads(r.stdout)
        assert any("filesystems[0].timeout" in p for p in doc["problems"]), (cmd, doc)
    node.configure(slurm=node.no_config_slurm())
    r = node.run("status", "--json")
    assert r.returncode == 3 and "no Slurm configuration found" in json.loads(r.stdout)["error"]
    node.run("healthcheck")
    doc = json.loads(node.run("explain", "--json").stdout)
    assert doc["node"] == "day1" and doc["runs"][-1]["status"] == "unhealthy"
    doc = json.loads(node.run("config", "check", "--json").stdout)
    assert doc["ok"] is True and doc["file"] == str(node.config) and len(doc["warnings"]) == 1


# --- 4. explain from the journal alone ---------------------------------------------------

def test_explain_reads_the_journal_whatever_the_configuration(node, tmp_path):
    node.configure(actions={"report_only": True})
    node.run("healthcheck")
    # The same file broken by an edit: the health check journals a config error, and
    # explain still reads the journal the broken file names.
    text = node.config.read_text() + "policy: {failures_to_drain: nope}\n"
    node.config.write_text(text)
    assert node.run("healthcheck").returncode == 2
    r = node.run("explain", "--runs", "5")
    assert r.returncode == 0, r.stderr
    assert "does not load" in r.stderr
    assert "last 2 runs:" in r.stdout
    assert "not done: drain node day1: fs" in r.stdout, "report-only decisions are shown"
    assert "config_error nothing checked or done: " in r.stdout and "failures_to_drain" in r.stdout
    r = node.run("explain", "--runs", "0")
    assert "last 0 runs:" in r.stdout and "healthcheck" not in r.stdout, r.stdout
    assert node.run("explain", "--runs", "-2").returncode == 2
    r = node.run("explain", "--node", "nosuch")
    assert r.returncode == 1 and "no run of node nosuch" in r.stderr
    # With no configuration at all: --journal is enough.
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(tmp_path / "gone.yaml"), "explain", "--node", "day1",
                        "--journal", str(node.log)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "last 2 runs:" in r.stdout, (r.stdout, r.stderr)


# --- 5. config check knows this node --------------------------------------------------

def test_config_check_warns_about_probes_this_node_would_fail(tmp_path):
    real, other = tmp_path / "scratch", tmp_path / "home"
    real.mkdir()
    other.mkdir()
    conf = tmp_path / "site.yaml"
    conf.write_text(f"filesystems:\n"
                    f"  - path: {real}\n"
                    f"  - path: /nonexistent/dir\n"
                    f"  - path: {other}\n    mountpoint: /no/such/mount\n"
                    f"  - path: /\n    fstype: lustre\n")
    r = subprocess.run([str(SLURM_HOOKS), "config", "check", str(conf)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == f"{conf}: OK (3 warnings)", (r.stdout, r.stderr)
    assert f"warning: {conf}:3: filesystems[1].path: /nonexistent/dir does not exist" in r.stderr
    assert "mkdir -p /nonexistent/dir" in r.stderr, "says how to create the probe directory"
    assert f"warning: {conf}:5: filesystems[2].mountpoint: mountpoint /no/such/mount is not in" in r.stderr
    assert f"warning: {conf}:7: filesystems[3].fstype: fstype lustre does not match this node" in r.stderr
    r = subprocess.run([str(SLURM_HOOKS), "config", "check", "--strict", str(conf)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and f"error: {conf}:3: filesystems[1].path" in r.stderr


# --- 6. metrics say why they are off ----------------------------------------------------

def test_missing_or_unsafe_textfile_directory_is_in_the_runs_record(node, tmp_path):
    # A path that is there: an empty list would probe every network mount of the host.
    fine = [{"path": str(tmp_path)}]
    node.configure(prometheus_textfile_dir=str(tmp_path / "no-exporter"), filesystems=fine)
    r = node.run("healthcheck")
    assert r.returncode == 0
    [run] = node.runs()
    assert any("metrics off: prometheus_textfile_dir" in w and "no-exporter" in w for w in run["warnings"]), run
    assert run["status"] == "healthy", "a node without node_exporter is not unhealthy"
    assert "warning: metrics off" in r.stdout
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    node.configure(prometheus_textfile_dir=str(open_dir), filesystems=fine)
    node.run("healthcheck")
    last = node.runs()[-1]
    assert any("not be writable by others" in e for e in last["local_errors"]), last
    assert not list(open_dir.iterdir())


# --- 8. status says why it could not ask Slurm, in one line, with its own exit code ----

def test_status_without_a_slurm_configuration_says_so_in_one_line_and_exits_3(node):
    """No raw `resolve_ctls_from_dns_srv` chatter: the cause, what to set, scontrol's
    verdict; and 3, not 1, which means "unhealthy" everywhere else."""
    node.configure(slurm=node.no_config_slurm())
    r = node.run("status")
    assert r.returncode == 3 and r.stdout == "", (r.returncode, r.stdout)
    [line] = r.stderr.splitlines()
    assert line.startswith("slurm-hooks status: cannot ask Slurm: no Slurm configuration found; set slurm.conf")
    assert "SLURM_CONF" in line and "configless DNS SRV records" in line, line
    assert "resolve_ctls_from_dns_srv" not in line and "res_nsearch" not in line, line
    assert line.endswith("scontrol said: scontrol: fatal: Could not establish a configuration source"), line


# --- 7. docs name the installed paths ---------------------------------------------------

def test_man_pages_name_the_layout_they_were_built_for(tmp_path):
    out = tmp_path / "docs"
    subprocess.run([sys.executable, str(ROOT / "packaging/gendocs.py"), "--out", str(out),
                    "--bindir", "/usr/local/sbin", "--datadir", "/opt/sh/share/slurm-hooks",
                    "--docdir", "/opt/sh/share/doc/slurm-hooks"], check=True)
    page = _plain(out / "slurm-hooks.8")
    assert "HealthCheckProgram=/usr/local/sbin/slurm-hooks-healthcheck" in page
    assert "/usr/sbin/" not in page and "/usr/share/slurm-hooks" not in page
    assert "/opt/sh/share/slurm-hooks/prometheus/slurm-hooks-rules.yml" in page
    assert "Prometheus server" in page
    assert "/opt/sh/share/doc/slurm-hooks/" in _plain(out / "slurm-hooks.yaml.5")
    default = tmp_path / "pkg"
    subprocess.run([sys.executable, str(ROOT / "packaging/gendocs.py"), "--out", str(default)], check=True)
    assert "HealthCheckProgram=/usr/sbin/slurm-hooks-healthcheck" in _plain(default / "slurm-hooks.8")
    # install.sh builds them for its own layout and puts the programs on root's PATH.
    script = (ROOT / "packaging/install.sh").read_text()
    assert '--bindir "${SBINDIR:-$prefix/bin}"' in script and 'relink "$prefix/bin/$name" "$sbindir/$name"' in script
    readme = (ROOT / "docs" / "metrics.md").read_text()
    assert "a file for the\n  Prometheus server, not the nodes" in readme
    assert "Grafana\n  server, not the nodes" in readme


def _plain(page) -> str:
    """A man page's source with roff's escaped hyphens, break points and line breaks undone."""
    return re.sub(r"\s+", " ", page.read_text().replace("\\-", "-").replace("\\:", ""))


def test_config_check_lists_what_each_hook_probes_here_and_what_it_leaves_alone(tmp_path, hung_mount):
    """With `filesystems: []`: the default scratch (write), every root-mounted network or
    FUSE mount (read) and why, each hook's deadline; a user's own FUSE mount is named as
    left alone. With a list: the listed paths only."""
    from attacker import unprivileged_user
    conf = tmp_path / "defaults.yaml"
    conf.write_text("filesystems: []\n")
    with unprivileged_user("shk-mounter") as user:
        own = user.fuse("ok", "bucket")
        r = subprocess.run([str(SLURM_HOOKS), "config", "check", str(conf)], capture_output=True, text=True,
                           timeout=60)
        j = json.loads(subprocess.run([str(SLURM_HOOKS), "config", "check", "--json", str(conf)],
                                      capture_output=True, text=True, timeout=60).stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"{conf}: OK"
    assert lines[1].startswith("filesystem probes on this node"), r.stdout
    probes = {p["path"]: p for p in j["plan"]["probes"]}
    assert probes["/tmp"]["mode"] == "write" and probes["/tmp"]["why"] == "default: local scratch", probes
    hung = probes[str(hung_mount.path)]
    assert hung["mode"] == "read" and hung["why"] == "default: fuse.fusefs mount found in the mount table", hung
    assert hung["deadlines"] == {"healthcheck": 10, "prolog": 3, "epilog": 3}, hung
    assert any(ln.split()[:2] == [str(hung_mount.path), "read"] and "fuse.fusefs mount found" in ln for ln in lines)
    assert str(own.path) not in probes
    assert {"mountpoint": str(own.path), "fstype": "fuse.user-bucket", "uid": user.uid} in j["plan"]["left_alone"] \
        or any(m["mountpoint"] == str(own.path) and m["uid"] == user.uid for m in j["plan"]["left_alone"]), j["plan"]
    assert "left alone (users' own FUSE mounts" in r.stdout and f"  {own.path} (" in r.stdout, r.stdout
    listed = tmp_path / "listed.yaml"
    listed.write_text(f"filesystems:\n  - path: {tmp_path}\n")
    j = json.loads(subprocess.run([str(SLURM_HOOKS), "config", "check", "--json", str(listed)],
                                  capture_output=True, text=True, timeout=60).stdout)
    assert [(p["path"], p["mode"], p["why"]) for p in j["plan"]["probes"]] == \
        [(str(tmp_path), "write", "listed in filesystems")], j["plan"]


def test_check_as_an_ordinary_user_says_what_it_could_not_do_without_failing(root_only_dir):
    """`check` as a user other than root: the state and the probe's directory are root's.
    One note says the look runs without the state, each probe says it was not made, no
    line per state file, and nothing of that makes the node unhealthy."""
    import os
    probe = root_only_dir / "scratch"
    probe.mkdir(mode=0o755)
    conf = root_only_dir / "slurm-hooks.yaml"
    conf.write_text(yaml.safe_dump({
        "node_name": "day1", "state_dir": str(root_only_dir / "state"), "journal": str(root_only_dir / "j.jsonl"),
        "syslog": False, "prometheus_textfile_dir": None, "filesystems": [{"path": str(probe)}],
        "gpu": {"enabled": False}, "actions": {"report_only": True}}))
    conf.chmod(0o644)
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(conf), "healthcheck"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr           # root's run: the state it keeps
    assert os.listdir(root_only_dir / "state" / "day1")
    r = subprocess.run(["runuser", "-u", "nobody", "--", str(SLURM_HOOKS), "-c", str(conf), "check"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "result: HEALTHY" in out, out
    assert f"fs {probe} not probed: uid " in out and "the health check runs as root" in out, out
    assert out.count("is root's: this look as uid") == 1, out
    assert "not readable" not in out and "Permission denied" not in out.replace("\n          Permission denied", ""), out
