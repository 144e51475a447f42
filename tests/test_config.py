"""Configuration: defaults, the shipped file, and errors that name file, line and key."""
from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest
from helpers import ROOT, SLURM_HOOKS

from slurm_hooks.checks._config import default_config, iter_settings, load_config, loads_config
from slurm_hooks.checks import filesystem
from slurm_hooks.core import config


def problems(tmp_path, text):
    p = tmp_path / "x.yaml"
    p.write_text(text)
    with pytest.raises(config.ConfigError) as e:
        load_config(str(p))
    return [line.replace(str(p), "x.yaml") for line in e.value.problems]


def test_shipped_file_is_the_builtin_defaults_but_report_only():
    """Every value of the shipped file is the built-in default, but one: it ships
    report-only, so that a node acts only after an admin's deliberate edit."""
    shipped = load_config(str(ROOT / "conf" / "slurm-hooks.yaml"))
    builtin = default_config()
    assert shipped.actions.report_only is True and builtin.actions.report_only is False
    acting = dataclasses.replace(shipped, source="", actions=dataclasses.replace(shipped.actions, report_only=False))
    assert acting == dataclasses.replace(builtin, source="")
    text = (ROOT / "conf" / "slurm-hooks.yaml").read_text()
    assert len(re.findall(r"^  report_only: true$", text, re.M)) == 1      # the one line to edit


def test_every_setting_is_documented_in_shipped_file_and_readme():
    conf_text = (ROOT / "conf" / "slurm-hooks.yaml").read_text()
    readme = (ROOT / "docs" / "configuration.md").read_text()
    for key, f in iter_settings():
        leaf = key.split(".")[-1].replace("[]", "")
        assert re.search(rf"\b{leaf}\b", conf_text), f"{key} not in conf/slurm-hooks.yaml"
        assert f"`{key}`" in readme, f"{key} not documented in docs/configuration.md"


def test_negative_timeout_names_file_line_and_key(tmp_path):
    text = "filesystems:\n  - path: /scratch\n    timeout: -3\n"
    assert problems(tmp_path, text) == ["x.yaml:3: filesystems[0].timeout: must be > 0 seconds, got -3"]


def test_zero_timeout_and_wrong_types(tmp_path):
    text = ("filesystem_defaults:\n  timeout: 0\n  payload_bytes: lots\n"
            "slurm:\n  timeout: '5'\nfilesystems: /scratch\n")
    assert problems(tmp_path, text) == [
        "x.yaml:2: filesystem_defaults.timeout: must be > 0 seconds, got 0",
        "x.yaml:3: filesystem_defaults.payload_bytes: must be a whole number, got 'lots'",
        "x.yaml:5: slurm.timeout: must be a number of seconds, got '5'",
        "x.yaml:6: filesystems: must be a list, got '/scratch'",
    ]


def test_unknown_keys_with_suggestion(tmp_path):
    text = "stat_dir: /x\nslurm:\n  timout: 5\nfilesystems:\n  - path: /a\n    bogus: 1\n"
    got = problems(tmp_path, text)
    assert got[0].startswith("x.yaml:1: stat_dir: unknown setting (did you mean state_dir?)")
    assert got[1].startswith("x.yaml:3: slurm.timout: unknown setting (did you mean timeout?)")
    assert got[2].startswith("x.yaml:6: filesystems[0].bogus: unknown setting")


def test_a_removed_setting_is_an_unknown_one(tmp_path):
    got = problems(tmp_path, "prolog:\n  reason_timeout: 60\n")
    assert len(got) == 1 and got[0].startswith("x.yaml:2: prolog.reason_timeout: unknown setting"), got


def test_missing_required_and_bad_values(tmp_path):
    text = ("filesystems:\n  - mode: write\n  - path: relative/dir\n  - path: /x\n    mode: writ\n"
            "  - path: /y\n    timeout: 2\n    warn_after: 5\n  - path: /y\nreason_prefix: '  '\n")
    assert problems(tmp_path, text) == [
        "x.yaml:2: filesystems[0].path: required setting is missing",
        "x.yaml:3: filesystems[1].path: must be an absolute path, got 'relative/dir'",
        "x.yaml:5: filesystems[2].mode: must be one of write, read, got 'writ'",
        "x.yaml:8: filesystems[3].warn_after: must be below timeout (2s), got 5",
        "x.yaml:9: filesystems[4].path: /y is already given in filesystems[3]",
        "x.yaml:10: reason_prefix: must not be empty: it is how slurm-hooks tells its own job comments, and older releases' drains, from an admin's",
    ]


def test_yaml_syntax_error_names_line(tmp_path):
    got = problems(tmp_path, "slurm:\n  timeout: 5\n bad: [\n")
    assert len(got) == 1 and got[0].startswith("x.yaml:3: not valid YAML")


def test_top_level_must_be_mapping(tmp_path):
    assert problems(tmp_path, "- a\n- b\n") == ["x.yaml:1: (top level): must be a mapping of settings, got a list"]


def test_empty_file_is_defaults(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("# nothing\n")
    assert dataclasses.replace(load_config(str(p)), source="") == dataclasses.replace(default_config(), source="")


def test_values_are_applied(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("filesystems:\n  - path: /scratch/\n    mountpoint: /scratch\n    timeout: 3\n"
                 "filesystem_defaults:\n  warn_after: 0.5\n")
    cfg = load_config(str(p))
    fs = cfg.filesystems[0]
    assert (fs.path, fs.mountpoint, fs.timeout) == ("/scratch/", "/scratch", 3.0)
    assert filesystem.fs_timeout(cfg, fs) == 3.0 and filesystem.fs_warn_after(cfg, fs) == 0.5
    assert filesystem.fs_payload(cfg, fs) == 4096


def run_cli(*args, env=None):
    return subprocess.run([str(SLURM_HOOKS), *args], capture_output=True, text=True, timeout=60, env=env)


def test_config_check_command(tmp_path):
    good = run_cli("config", "check", str(ROOT / "conf" / "slurm-hooks.yaml"))
    assert good.returncode == 0 and good.stdout.splitlines()[0].endswith(": OK")
    bad = tmp_path / "bad.yaml"
    bad.write_text("filesystems:\n  - path: /scratch\n    timeout: -3\n")
    r = run_cli("config", "check", str(bad))
    assert r.returncode == 2
    assert f"{bad}:3: filesystems[0].timeout: must be > 0 seconds, got -3" in r.stderr


def test_every_command_rejects_bad_config_with_status_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    # The health check journals its configuration error where the file says (never the host's).
    bad.write_text(f"journal: {tmp_path}/j.jsonl\nfilesystems:\n  - path: /scratch\n    timeout: -3\n")
    for cmd in (["check"], ["healthcheck", "--dry-run"]):
        r = run_cli("--config", str(bad), *cmd)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "filesystems[0].timeout" in r.stderr


def test_missing_config_file_is_an_error(tmp_path):
    r = run_cli("--config", str(tmp_path / "nope.yaml"), "check")
    assert r.returncode == 2 and "nope.yaml: cannot read" in r.stderr


def test_cache_serves_unchanged_files_and_notices_edits(tmp_path):
    cache = tmp_path / "cache"
    p = tmp_path / "c.yaml"
    p.write_text("filesystems:\n  - path: /a\n    timeout: 3\n")
    first = load_config(str(p), cache_dir=str(cache))
    assert len(list(cache.iterdir())) == 1
    again = load_config(str(p), cache_dir=str(cache))
    assert again == first and again.filesystems[0].timeout == 3.0
    assert isinstance(again.filesystems[0], filesystem.FilesystemConfig)
    assert isinstance(again.slurm, config.SlurmConfig)

    p.write_text("filesystems:\n  - path: /a\n    timeout: 4\n")
    assert load_config(str(p), cache_dir=str(cache)).filesystems[0].timeout == 4.0
    p.write_text("filesystems:\n  - path: /a\n    timeout: -4\n")
    with pytest.raises(config.ConfigError):
        load_config(str(p), cache_dir=str(cache))


def test_corrupt_cache_is_ignored(tmp_path):
    cache = tmp_path / "cache"
    p = tmp_path / "c.yaml"
    p.write_text("reason_prefix: 'site:'\n")
    load_config(str(p), cache_dir=str(cache))
    for f in cache.iterdir():
        f.write_text("{not json")
    assert load_config(str(p), cache_dir=str(cache)).reason_prefix == "site:"


GROUPS = """\
filesystems: [{path: /tmp}]
actions: {reboot: false}
node_groups:
  - nodes: gpu[001-128]
    settings:
      actions: {requeue_job: false}
      filesystems: [{path: /scratch, timeout: 3}]
  - nodes: gpu007
    settings:
      actions: {report_only: true}
"""


def test_node_groups_apply_by_hostlist_in_order():
    cfg = loads_config(GROUPS, "x.yaml", node="gpu007")
    assert (cfg.actions.requeue_job, cfg.actions.reboot, cfg.actions.report_only) == (False, False, True)
    assert [f.path for f in cfg.filesystems] == ["/scratch"] and cfg.node_groups == ["gpu[001-128]", "gpu007"]
    other = loads_config(GROUPS, "x.yaml", node="gpu129")
    assert [f.path for f in other.filesystems] == ["/tmp"] and other.actions.requeue_job and not other.node_groups


def test_node_group_mistakes_are_errors_on_every_node(tmp_path):
    text = ("node_groups:\n"
            "  - nodes: gpu[01-\n    settings: {}\n"
            "  - nodes: cpu[1-2]\n    settings:\n      actions: {reboot: maybe}\n"
            "  - nodes: x1\n    settings:\n      node_name: x\n"
            "  - {nodes: x2}\n")
    assert problems(tmp_path, text) == [
        "x.yaml:2: node_groups[0].nodes: not a valid hostlist 'gpu[01-': unbalanced '[' in 'gpu[01-'",
        "x.yaml:9: node_groups[2].settings.node_name: cannot be set per node group",
        "x.yaml:10: node_groups[3]: needs settings",
        "x.yaml:6: node_groups[1].settings.actions.reboot: must be true or false, got 'maybe'",
    ]


def test_beside_command_needs_an_absolute_path(tmp_path):
    assert problems(tmp_path, "beside:\n  command: [nhc]\n") == [
        "x.yaml:2: beside.command: the program must be an absolute path (HealthCheckProgram has no PATH), got 'nhc'"]


def test_yaml_tags_that_build_objects_are_refused(tmp_path):
    from slurm_hooks.core import config
    path = tmp_path / "evil.yaml"
    path.write_text("node_name: !!python/object/apply:os.system ['touch /tmp/owned']\n")
    with pytest.raises(config.ConfigError) as e:
        load_config(str(path), cache_dir=None)
    assert str(path) in str(e.value)


def test_config_check_names_fusectl_where_it_matters():
    """fusectl is where a fuse-abort recovery writes, and what the stuck-task check asks
    about a FUSE mount; nothing guarantees it is mounted. `config check` says whether it
    is, and that slurm-hooks mounts it itself; where no FUSE mount or fuse-abort is in
    play it says nothing."""
    from slurm_hooks.checks.filesystem import FilesystemConfig, RecoverConfig
    from slurm_hooks.host.mounts import MountTable, parse_mountinfo
    from slurm_hooks.views.configcheck import probe_plan, render_plan
    root = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
    rclone = "40 1 0:42 / /data rw - fuse.rclone gpfs:/fs1 rw,user_id=0,group_id=0,allow_other\n"
    ctl = "41 1 0:43 / /sys/fs/fuse/connections rw - fusectl fusectl rw\n"
    cfg = default_config()
    assert probe_plan(cfg, MountTable(parse_mountinfo(root)))["fusectl"] == ""
    plan = probe_plan(cfg, MountTable(parse_mountinfo(root + rclone)))
    assert plan["fusectl"].startswith("fusectl: not mounted at /sys/fs/fuse/connections; slurm-hooks mounts it")
    assert plan["fusectl"] in render_plan(plan)
    assert probe_plan(cfg, MountTable(parse_mountinfo(root + rclone + ctl)))["fusectl"] == \
        "fusectl: mounted at /sys/fs/fuse/connections"
    f = FilesystemConfig(path="/scratch")
    f.recover = RecoverConfig(method="fuse-abort")
    cfg.filesystems[:] = [f]
    assert "before a fuse-abort recovery needs it" in probe_plan(cfg, MountTable(parse_mountinfo(root)))["fusectl"]


def test_an_unclosed_bracket_or_quote_is_named_where_it_opens(tmp_path):
    got = problems(tmp_path, "state_dir: /tmp/x\nfilesystems:\n  - path: /tmp\n    timeout: [1\nsyslog: false\n")
    assert got == ["x.yaml:4: not valid YAML: while parsing a flow sequence that starts here: did not find "
                   "expected ',' or ']' (line 5)"], got
    got = problems(tmp_path, 'state_dir: "/tmp/x\nsyslog: false\n')
    assert got[0].startswith("x.yaml:1: not valid YAML: while scanning a quoted scalar that starts here"), got
