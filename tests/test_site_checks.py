"""Site checks: drop-in executables with Nagios exit codes, run by the hang-safe runner
through the installed program; and Python checks of other packages found through the
entry-point group `slurm_hooks.checks`, from a real distribution on sys.path."""
from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
import yaml
from helpers import SLURM_HOOKS, poll, proc_state, run_record


@pytest.fixture
def site(tmp_path, root_only_dir):
    class Site:
        dir = root_only_dir / "checks.d"
        config = tmp_path / "slurm-hooks.yaml"
        marks = tmp_path / "marks"

        def __init__(self):
            self.dir.mkdir(mode=0o755)
            self.marks.mkdir()
            self.configure()

        def configure(self, **site_checks):
            doc = {"node_name": "s1", "state_dir": str(tmp_path / "state"), "syslog": False,
                   "journal": str(tmp_path / "journal.jsonl"), "prometheus_textfile_dir": None,
                   "filesystems": [{"path": str(tmp_path)}], "stuck_tasks": {"enabled": False},
                   "gpu": {"enabled": "false"}, "fabric": {"enabled": "false"},
                   "site_checks": {"dir": str(self.dir), "timeout": 2, **site_checks}}
            self.config.write_text(yaml.safe_dump(doc))

        def add(self, name, body, mode=0o755, header=""):
            """A shell script that leaves a mark when it runs, then does `body`."""
            p = self.dir / name
            p.write_text(f"#!/bin/sh\n{header}\n: > {self.marks}/{name}\n{body}\n")
            os.chmod(p, mode)
            return p

        def ran(self, name):
            return (self.marks / name).exists()

        def run(self, *args, env=None, timeout=60):
            rec = run_record(self.config, *args, env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=timeout)
            rec["by_name"] = {f["target"]: f for c in rec["checks"] for f in c["findings"] if f["check"] == "site"}
            return rec

        def check(self, **kw):
            return self.run("check", "site", **kw)

    return Site()


def test_nagios_exit_codes_and_the_first_line(site):
    site.add("ok", 'echo "all good"; exit 0')
    site.add("warns", 'echo "disk 85% full"; echo more; exit 1')
    site.add("fails", 'echo "ECC errors on DIMM A3"; exit 2')
    site.add("unsure", 'echo "cannot tell"; exit 3')
    site.add("odd", "exit 7")
    rec = site.check()
    got = {n: (f["status"], f["severity"], f["summary"]) for n, f in rec["by_name"].items()}
    assert got == {
        "ok": ("ok", "ok", "site ok: all good"),
        "warns": ("warning", "warn", "site warns: disk 85% full"),
        "fails": ("critical", "fail", "site fails: ECC errors on DIMM A3"),
        "unsure": ("unknown", "warn", "site unsure: cannot tell"),
        "odd": ("unknown", "warn", "site odd: exited 7 (exit 7: not a Nagios status)"),
    }
    assert rec["rc"] == 1 and rec["by_name"]["fails"]["resumable"] is True


def test_critical_drains_by_its_own_reason(site):
    site.add("ecc", 'echo "ECC errors on DIMM A3"; exit 2')
    rec = site.run("healthcheck", "--dry-run")
    [drain] = [a for a in rec["actions"] if a["kind"] == "drain"]
    assert drain["reason"] == "site ecc: ECC errors on DIMM A3 [slurm-hooks]"


def test_json_line_gives_a_richer_finding(site):
    site.add("ib-sm", 'echo "no subnet manager"\n'
             'echo \'{"reason": "no SM on ib0", "detail": "sminfo timed out", "resumable": false, '
             '"evidence": {"port": "mlx5_0/1", "tries": 3, "nested": {"x": 1}}}\'\nexit 2')
    f = site.check()["by_name"]["ib-sm"]
    assert (f["summary"], f["reason"], f["detail"]) == ("site ib-sm: no subnet manager", "site ib-sm: no SM on ib0",
                                                        "sminfo timed out")
    assert f["resumable"] is False
    assert f["evidence"]["port"] == "mlx5_0/1" and f["evidence"]["tries"] == 3 and "nested" not in f["evidence"]


def test_a_json_line_alone_says_the_summary(site):
    site.add("json-only", """echo '{"summary": "fan 3 stopped", "evidence": {"rpm": 0}}'; exit 1""")
    f = site.check()["by_name"]["json-only"]
    assert (f["status"], f["summary"], f["evidence"]["rpm"]) == ("warning", "site json-only: fan 3 stopped", 0)


def test_a_check_that_hangs_for_ever_is_killed_at_its_deadline(site):
    site.add("sleeper", "exec sleep 1000")
    site.add("fast", "echo fine")
    rec = site.check()
    f = rec["by_name"]["sleeper"]
    assert (f["status"], f["severity"], f["summary"]) == ("hung", "fail", "site sleeper hung >2s")
    assert rec["by_name"]["fast"]["status"] == "ok"
    assert rec["elapsed"] < 4, "killed at its 2 s deadline, in parallel with the others"
    site.configure(on_hang="warn")
    assert site.check()["by_name"]["sleeper"]["severity"] == "warn"


def test_a_declared_timeout_is_shorter(site):
    site.add("sleeper", "exec sleep 1000", header="# slurm-hooks: timeout=0.5")
    rec = site.check()
    assert rec["by_name"]["sleeper"]["summary"] == "site sleeper hung >0.5s" and rec["elapsed"] < 2.5


def test_a_megabyte_of_output_becomes_one_capped_line(site):
    site.add("chatty", "head -c 1048576 /dev/zero | tr '\\0' x; echo; exit 1")
    f = site.check()["by_name"]["chatty"]
    assert f["status"] == "warning" and f["evidence"]["output_bytes"] >= 1 << 20 and f["evidence"]["output_cut"]
    assert len(f["summary"]) <= 240 and f["summary"].startswith("site chatty: xxxx") and f["summary"].endswith("…")


def test_control_characters_are_written_out(site):
    site.add("evil", r"printf 'fine\033[2J\033]0;owned\007 \342\200\256gnp.exe\r\n'; printf 'x\033[31m\n' >&2; exit 2")
    rec = site.check()
    f = rec["by_name"]["evil"]
    assert f["summary"] == "site evil: fine\\x1b[2J\\x1b]0;owned\\x07 \\u202egnp.exe"
    assert f["evidence"]["stderr"] == "x\\x1b[31m"
    # Nothing the check printed reaches our own output raw.
    assert "\x1b" not in json.dumps(rec, ensure_ascii=False)


def test_group_writable_file_is_refused_and_never_run(site):
    site.add("loose", "exit 0", mode=0o775)
    f = site.check()["by_name"]["loose"]
    assert (f["status"], f["severity"]) == ("refused", "warn")
    assert f["summary"] == f"site check loose refused: {site.dir}/loose is group-writable (mode 0775)"
    assert not site.ran("loose")


def test_file_of_another_owner_or_in_a_writable_directory_is_refused(site):
    p = site.add("theirs", "exit 0")
    os.chown(p, 65534, 0)
    assert site.check()["by_name"]["theirs"]["summary"] == f"site check theirs refused: {p} is owned by uid 65534"
    os.chown(p, 0, 0)
    os.chmod(site.dir, 0o777 | stat.S_ISVTX)
    f = site.check()["by_name"]["theirs"]
    assert f["status"] == "refused" and f"{site.dir} is world-writable (mode 1777)" in f["summary"]
    assert not site.ran("theirs")


def test_names_run_parts_ignores_and_what_is_not_executable(site):
    site.add("real-check_1", "exit 0")
    site.add("old.bak", "exit 2")
    site.add("check.dpkg-old", "exit 2")
    site.add("README", "exit 2", mode=0o644)
    assert list(site.check()["by_name"]) == ["real-check_1"]


def test_hooks_a_check_declares(site, tmp_path):
    site.add("everywhere", "echo job $SLURM_JOB_ID in $SLURM_HOOKS_HOOK", header="# slurm-hooks: hooks=healthcheck,prolog")
    site.add("health-only", "exit 0")
    site.add("bad", "exit 0", header="# slurm-hooks: hooks=proog")
    rec = site.run("prolog", "--dry-run", env={"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "s1",
                                               "SLURM_HOOKS_CONFIG": str(site.config)})
    assert rec["by_name"]["everywhere"]["summary"] == "site everywhere: job 77 in prolog"
    assert "health-only" not in rec["by_name"]
    bad = rec["by_name"]["bad"]
    assert bad["status"] == "refused" and "hooks=proog" in bad["summary"]


def test_a_program_stuck_in_the_kernel_is_remembered_and_not_started_again(site, swallow_mount):
    site.add("stuck", f"exec cat {swallow_mount.path}/x", header="# slurm-hooks: timeout=0.5")
    first = site.run("check", "site")["by_name"]["stuck"]
    assert first["status"] == "hung" and "stuck in the kernel" in first["detail"]
    stuck = json.loads((site.config.parent / "state" / "s1" / "stuck-children.json").read_text())
    pid = stuck["site:stuck"]["pid"]
    assert proc_state(pid) == "D"
    os.unlink(site.marks / "stuck")
    again = site.run("check", "site")
    f = again["by_name"]["stuck"]
    assert f["status"] == "hung" and f["detail"].startswith("still hung since ") and not site.ran("stuck")
    assert again["elapsed"] < 1.5
    swallow_mount.abort()
    poll(lambda: proc_state(pid) in (None, "Z"), 5, what="the stuck program to end")
    assert site.check()["by_name"]["stuck"]["detail"] != f["detail"]


# --- Python checks of other packages (entry points) ------------------------------------------

PLUGIN = '''
from slurm_hooks.core.model import FAIL, OK, Finding
from slurm_hooks.host.runner import Task


def _probe(progress, path):
    progress("reading")
    with open(path) as f:
        return f.read().strip()


class NvmeWear:
    name = "nvme_wear"
    hooks = ("check", "healthcheck")
    state = ()
    series = {"slurm_hooks_nvme_wear_percent": ("gauge", "Wear of the node's NVMe drive.")}
    explain_keys = ("wear",)

    def tasks(self, ctx):
        return [Task("nvme_wear:nvme0", _probe, (WEAR_FILE,), 1.0)]

    def findings(self, ctx, outcomes):
        o = outcomes["nvme_wear:nvme0"]
        if o.status != "done":
            return [Finding("nvme_wear", "nvme0", o.status, FAIL, f"nvme0 wear unreadable ({o.status})")]
        wear = int(o.value)
        bad = wear > 90
        return [Finding("whatever", "nvme0", "worn" if bad else "ok", FAIL if bad else OK,
                        f"nvme0 wear {wear}%\\x1b[0m", evidence={"wear": wear})]

    @staticmethod
    def samples(findings):
        return [("slurm_hooks_nvme_wear_percent", {"drive": f.target}, float(f.evidence["wear"]))
                for f in findings if "wear" in f.evidence] + [("undeclared_series", {}, 1.0)]
'''


@pytest.fixture
def plugin_path(tmp_path):
    """A tiny installed distribution: a module and its .dist-info with entry_points.txt."""
    root = tmp_path / "site-packages"
    root.mkdir()
    wear = tmp_path / "wear"
    wear.write_text("42\n")
    (root / "shk_nvme_plugin.py").write_text(f"WEAR_FILE = {str(wear)!r}\n" + PLUGIN)
    (root / "shk_broken.py").write_text("raise ImportError('needs libnvme')\n")
    info = root / "shk_nvme_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shk-nvme-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nx = y:z\n\n[slurm_hooks.checks]\n"
                                           "nvme_wear = shk_nvme_plugin:NvmeWear\nbroken = shk_broken:Check\n"
                                           "filesystem = shk_nvme_plugin:NvmeWear\n")
    return root, wear


def test_the_layout_is_one_importlib_metadata_finds(plugin_path):
    from importlib.metadata import distributions

    from slurm_hooks.checks._entry_points import GROUP, discover
    root, _ = plugin_path
    [dist] = list(distributions(path=[str(root)]))
    official = {ep.name: ep.value for ep in dist.entry_points if ep.group == GROUP}
    assert discover([str(root)]) == official
    assert set(official) == {"nvme_wear", "broken", "filesystem"}


def test_entry_point_checks_run_behind_the_check_interface(site, plugin_path, tmp_path):
    root, wear = plugin_path
    env = {"PYTHONPATH": str(root)}
    rec = site.run("check", env=env)
    by_check = {c["name"]: c["findings"] for c in rec["checks"]}
    [f] = by_check["nvme_wear"]
    assert (f["check"], f["status"], f["summary"]) == ("nvme_wear", "ok", "nvme0 wear 42%\\x1b[0m")
    [broken] = by_check["broken"]
    assert broken["severity"] == "warn" and "not loaded: ImportError: needs libnvme" in broken["summary"]
    # A plugin cannot stand in for a built-in check.
    assert [c["name"] for c in rec["checks"]].count("filesystem") == 1
    assert [x["check"] for x in by_check["filesystem"]] == ["filesystem"]
    wear.write_text("97\n")
    rec = site.run("check", "nvme_wear", env=env)
    assert rec["rc"] == 1 and [c["name"] for c in rec["checks"]] == ["nvme_wear"]
    # Its metrics: only the series it declared.
    textfile = tmp_path / "prom"
    textfile.mkdir()
    doc = yaml.safe_load(site.config.read_text())
    doc["prometheus_textfile_dir"] = str(textfile)
    site.config.write_text(yaml.safe_dump(doc))
    site.run("healthcheck", env=env)
    prom = (textfile / "slurm_hooks_s1.prom").read_text()
    assert 'slurm_hooks_nvme_wear_percent{node="s1",drive="nvme0"} 97.0' in prom
    assert "undeclared_series" not in prom
    site.configure(entry_points=False)
    assert "nvme_wear" not in {c["name"] for c in site.run("check", env=env)["checks"] if c["findings"]}


def test_an_entry_point_task_that_hangs_is_cut_at_its_deadline(site, plugin_path):
    root, wear = plugin_path
    wear.unlink()
    os.mkfifo(wear)              # open() blocks: the plugin's probe hangs
    rec = site.run("check", "nvme_wear", env={"PYTHONPATH": str(root)})
    [f] = [f for c in rec["checks"] for f in c["findings"]]
    assert f["summary"] == "nvme0 wear unreadable (hung)" and rec["elapsed"] < 3


def test_no_site_checks_costs_nothing_and_says_nothing(site):
    os.rmdir(site.dir)
    rec = site.check()
    assert rec["by_name"] == {} and rec["rc"] == 0


def test_alerts_for_a_critical_and_a_refused_site_check(site, tmp_path):
    from promseries import Node, alert, input_series, promtool_test, scrape_labels
    site.add("ecc", 'echo "ECC errors on DIMM A3"; exit 2')
    site.add("loose", "exit 0", mode=0o777)
    site.add("fine", "echo ok")
    node = Node("s2", tmp_path / "s2", {"site_checks": {"dir": str(site.dir)},
                                         "filesystems": [{"path": str(tmp_path)}]})
    node.healthcheck()
    status = {s.labels["site_check"]: s.labels["status"] for s in node.last("slurm_hooks_site_check_status")}
    assert status == {"ecc": "critical", "loose": "refused", "fine": "ok"}
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series([(0, node.snapshots[-1])], "s2", 10),
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "SlurmHooksSiteCheckFailing",
             "exp_alerts": [alert("SlurmHooksSiteCheckFailing", "Site check ecc critical on node s2",
                                  site_check="ecc", status="critical", **scrape_labels("s2"))]},
            {"eval_time": "2m", "alertname": "SlurmHooksSiteCheckRefused", "exp_alerts": []},
            {"eval_time": "6m", "alertname": "SlurmHooksSiteCheckRefused",
             "exp_alerts": [alert("SlurmHooksSiteCheckRefused", "Site check loose refused on node s2",
                                  site_check="loose", status="refused", **scrape_labels("s2"))]},
        ]}])


def test_a_process_left_holding_the_checks_output_never_holds_ours(site):
    """The program's output goes to a pipe of the runner's child, never to the hook's
    own stdout (slurmd reads that until its last holder exits): a check that leaves a
    process behind holding its output is cut at its deadline with its whole session."""
    site.add("daemon", "sleep 31.4159 &\necho started")
    rec = site.check()          # capture_output: our pipes; they must close when we exit
    f = rec["by_name"]["daemon"]
    assert f["status"] == "hung" and rec["elapsed"] < 5

    def gone():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if fh.read() == b"sleep\x0031.4159\x00":
                        return False
            except OSError:
                pass
        return True
    poll(gone, 5, what="the left-behind sleep to be killed with the check's session")


def test_entry_points_off_imports_no_plugin_in_any_run(site, tmp_path):
    """`site_checks.entry_points: false` is read before any plugin is found or imported:
    the plugin's module, which leaves a mark when imported, is never imported by a run of
    the installed program (as root, in every hook), and cannot be named; on, it is."""
    root = tmp_path / "site-packages"
    root.mkdir()
    mark = tmp_path / "imported"
    (root / "shk_marker_plugin.py").write_text(
        f"open({str(mark)!r}, 'a').write('imported\\n')\n\n"
        "class Check:\n    hooks = ('check', 'healthcheck', 'prolog', 'epilog')\n"
        "    def tasks(self, ctx):\n        return []\n\n    def findings(self, ctx, outcomes):\n        return []\n")
    info = root / "shk_marker_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shk-marker-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[slurm_hooks.checks]\nmarker = shk_marker_plugin:Check\n")
    env = {"PYTHONPATH": str(root), "SLURMD_NODENAME": "s1", "SLURM_JOB_ID": "7",
           "SLURM_HOOKS_CONFIG": str(site.config)}
    site.configure(entry_points=False)
    for args in (("check",), ("healthcheck", "--dry-run"), ("prolog", "--dry-run"), ("epilog", "--dry-run")):
        rec = site.run(*args, env=env)
        assert "marker" not in {c["name"] for c in rec["checks"]}, args
        assert not mark.exists(), f"{args}: the plugin was imported with entry_points false"
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(site.config), "check", "marker"], capture_output=True,
                       text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})
    assert r.returncode == 2 and "unknown check marker" in r.stderr and "entry_points: false" in r.stderr
    assert not mark.exists()
    site.configure(entry_points=True)
    rec = site.run("check", env=env)
    assert "marker" in {c["name"] for c in rec["checks"]} and mark.exists()


# --- the program run is the file verified, and verifying it never blocks the hook ----------

def test_the_program_run_is_the_descriptor_verified_not_the_name(root_only_dir):
    """The walk from / opens the file; that descriptor is executed (fexecve), so a rename
    after the check changes nothing. A `#!` script needs its descriptor across the exec
    (the interpreter opens /dev/fd/3); a binary does not get it."""
    import shutil

    from slurm_hooks.host.runner import run_command
    from slurm_hooks.host.trusted import open_root_only
    env = {"PATH": "/usr/bin:/bin"}
    script = root_only_dir / "probe"
    script.write_text("#!/bin/sh\necho verified $0\n")
    script.chmod(0o755)
    fd, _ = open_root_only(str(script))
    other = root_only_dir / "other"
    other.write_text("#!/bin/sh\necho swapped\n")
    other.chmod(0o755)
    os.rename(other, script)                       # the name now leads to another file
    try:
        os.set_inheritable(fd, True)
        r = run_command([str(script)], 5, env, exec_fd=fd)
        assert (r.rc, r.stdout) == (0, "verified /dev/fd/3\n")
        os.set_inheritable(fd, False)              # close-on-exec: the interpreter finds nothing
        r = run_command([str(script)], 5, env, exec_fd=fd)
        assert r.rc == 127 and "cannot run" in r.stderr
    finally:
        os.close(fd)
    binary = root_only_dir / "ls-fds"
    shutil.copy("/usr/bin/ls", binary)
    fd, _ = open_root_only(str(binary))
    try:
        r = run_command([str(binary), "/proc/self/fd"], 5, env, exec_fd=fd)
    finally:
        os.close(fd)
    assert r.rc == 0 and r.stdout.split() == ["0", "1", "2", "3"]   # 3: ls's own listing of the directory


def test_a_binary_drop_in_runs_by_its_descriptor(site):
    import shutil
    shutil.copy("/usr/bin/true", site.dir / "bin-true")
    site.add("script", 'echo "as $0"')
    rec = site.check()
    assert rec["by_name"]["bin-true"]["status"] == "ok"
    assert rec["by_name"]["script"]["summary"] == "site script: as /dev/fd/3"


def test_site_checks_on_a_hung_mount_never_hold_the_hook(site, swallow_mount):
    """Listing the directory, the walk from / and the first bytes' read are a child's:
    a site_checks.dir on a mount that never answers is a finding, not a hung hook."""
    site.configure(timeout=1)
    doc = yaml.safe_load(site.config.read_text())
    doc["site_checks"]["dir"] = swallow_mount.path + "/checks.d"
    site.config.write_text(yaml.safe_dump(doc))
    rec = site.check(timeout=20)
    [f] = [f for c in rec["checks"] for f in c["findings"] if f["check"] == "site"]
    assert f["status"] == "hung" and f["target"] == swallow_mount.path + "/checks.d", f
    assert rec["elapsed"] < 4
    again = site.check(timeout=20)
    [f] = [f for c in again["checks"] for f in c["findings"] if f["check"] == "site"]
    assert f["detail"].startswith("still hung since ") and again["elapsed"] < 2
