"""The README and the reference in docs/ cannot go stale: their shell commands parse
with the real CLI, their output blocks marked `<!-- output: tests/test_readme.py::NAME -->`
are what test NAME gets from the real CLI, their YAML blocks load with the real
configuration loader, the configuration reference (docs/configuration.md) lists exactly
the keys the loader knows, the commands table (docs/commands.md) names exactly each
command's flags, the metrics reference (docs/metrics.md) exactly the series and outcomes
the code writes, and every link to a heading, in the same file or another, finds one."""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess

import pytest
import yaml
from helpers import ROOT, SLURM_HOOKS

from slurm_hooks import cli

README = (ROOT / "README.md").read_text()
# The reference the README links to, one page a subject.
REFERENCE = ("install", "commands", "configuration", "filesystem", "stuck-tasks", "gpu", "fabric", "memory",
             "site-checks", "recovery", "metrics", "operations", "security")
PAGES = {"README.md": README, **{f"docs/{n}.md": (ROOT / "docs" / f"{n}.md").read_text() for n in REFERENCE}}
ALL = "\n".join(PAGES.values())
FENCE = re.compile(r"^( *)```([a-z]*)\n(.*?)^\1```", re.S | re.M)


class _Loader:
    """The configuration loader with every check's section, as the programs load it."""
    from slurm_hooks.checks._config import iter_settings
    from slurm_hooks.checks._config import loads_config as loads
    from slurm_hooks.core.config import ConfigError
    iter_settings = staticmethod(iter_settings)
    loads = staticmethod(loads)


def config_module():
    """The configuration loader, imported in one place so that a move of the module
    is one line to change."""
    return _Loader


def blocks(text: str = README) -> list[tuple[str, str, int]]:
    """(info string, body with the list indentation taken off, offset) of every fenced block."""
    out = []
    for m in FENCE.finditer(text):
        indent = len(m.group(1))
        body = "\n".join(line[indent:] for line in m.group(3).splitlines()) + "\n"
        out.append((m.group(2), body, m.start()))
    return out


def section(title: str, text: str = README) -> str:
    return text.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


def page(name: str) -> str:
    return PAGES[f"docs/{name}.md"]


def shell_lines(body: str) -> list[str]:
    """The commands of a shell block: `$ ` prompts where it has them (the rest is
    output), else every line that is not a comment; continuation lines joined."""
    lines = body.splitlines()
    if any(line.startswith("$ ") for line in lines):
        return [line[2:] for line in lines if line.startswith("$ ")]
    joined, out = "", []
    for line in lines:
        if line.strip().startswith("#") and not joined:
            continue
        joined += line.strip() + " "
        if not line.rstrip().endswith(("\\", "|", "&&")):
            out.append(joined.strip())
            joined = ""
    return [c for c in out if c]


def is_slurm_conf(body: str) -> bool:
    lines = [x for x in body.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    return bool(lines) and all(re.match(r"^[A-Z][A-Za-z]+=", x) for x in lines)


def slurm_hooks_invocations(command: str) -> list[list[str]]:
    """Each `slurm-hooks ...` of a command line (also after `&&`, `;`, `|`), as argv."""
    out = []
    for piece in re.split(r"&&|;|\|", command):
        try:
            argv = shlex.split(piece)
        except ValueError:
            continue
        if argv and argv[0].rsplit("/", 1)[-1] == "slurm-hooks":
            out.append(argv)
    return out


def test_every_slurm_hooks_command_shown_parses_with_the_real_cli():
    parser = cli.build_parser()
    seen = []
    for info, body, _ in blocks(ALL):
        if info not in ("", "sh", "console") or is_slurm_conf(body):
            continue
        for command in shell_lines(body):
            for argv in slurm_hooks_invocations(command):
                try:
                    parser.parse_args(argv[1:])
                except SystemExit as e:
                    pytest.fail(f"the docs show `{command}`, which slurm-hooks does not accept (exit {e.code})")
                seen.append(argv[1])
    # The quick start's own: the first run, the report-only runs, reading them back.
    assert {"healthcheck", "config", "explain", "status", "diagnose", "resume"} <= set(seen), seen


def _subparsers(parser) -> dict[str, argparse.ArgumentParser]:
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = sub
                for deeper, p in _subparsers(sub).items():
                    out[f"{name} {deeper}"] = p
    return out


def _flags(sub: argparse.ArgumentParser) -> set[str]:
    out = set()
    for action in sub._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        longs = [o for o in action.option_strings if o.startswith("--") and o not in ("--help", "--config")]
        if isinstance(action, argparse.BooleanOptionalAction):
            out.add("/".join(longs))
        elif longs:
            out.add(longs[0])
    return out


def test_the_commands_table_names_each_commands_flags_as_the_cli_has_them():
    """`job-report --no-stacks` when the CLI has `--stacks/--no-stacks`, a `check` without
    its `--dry-run`: the table says what the parser accepts, no more, no less."""
    subs = _subparsers(cli.build_parser())
    rows = re.findall(r"^\| `slurm-hooks ([a-z-]+(?: [a-z]+)?)([^`]*)`", page("commands"), re.M)
    assert rows
    named = {n if n in subs else n.split()[0] for n, _ in rows}
    parents = {n.split()[0] for n in subs if " " in n}
    assert sorted(set(subs) - parents - named) == [], "commands without a row in docs/commands.md"
    for name, synopsis in rows:
        name = name if name in subs else name.split()[0]
        if name not in subs:
            continue                        # `--version`
        shown = set(re.findall(r"--[a-z-]+(?:/--[a-z-]+)?", synopsis))
        assert shown == _flags(subs[name]), (name, shown, _flags(subs[name]))


def normalise(text: str) -> list[str]:
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", "DATE", text)
    text = re.sub(r"\b\d+(\.\d+)?(ms|s)\b", "TIME", text)
    text = re.sub(r"\(([a-z0-9]+)\)", "(FSTYPE)", text)        # the filesystem under a probe
    text = re.sub(r"memory: \d+ MiB available of \d+ MiB", "memory: N MiB available of N MiB", text)
    return [re.sub(r"\s+", " ", line).rstrip() for line in text.strip().splitlines()]


def output_blocks(name: str) -> list[str]:
    marker = f"<!-- output: tests/test_readme.py::{name} -->\n"
    found = []
    for text in PAGES.values():
        for _, body, start in blocks(text):
            if text[:start].rstrip(" ").endswith(marker):
                found.append(body)
    assert found, f"no block of the README or docs/ is marked {marker.strip()}"
    return found


def _run_shown(block: str, config_path, tmp_path) -> str:
    """Each `$ slurm-hooks ...` of the block, run against the given configuration; the
    prompts and what each printed, as the block shows them."""
    out = []
    for line in block.splitlines():
        if not line.startswith("$ "):
            continue
        [argv] = slurm_hooks_invocations(line[2:])
        r = subprocess.run([str(SLURM_HOOKS), "-c", str(config_path), *argv[1:]], capture_output=True,
                           text=True, timeout=60, cwd=tmp_path)
        out.append(line)
        out.append((r.stdout + r.stderr).rstrip("\n"))
    return "\n".join(out)


def test_report_only_outputs_are_what_the_cli_prints(tmp_path):
    """The report-only run of a node whose probe directory does not exist, and its
    explain, as the README shows them."""
    missing = tmp_path / "scratch" / "probe"
    conf = tmp_path / "slurm-hooks.yaml"
    conf.write_text(yaml.safe_dump({
        "node_name": "n1", "state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal.jsonl"),
        "syslog": False, "prometheus_textfile_dir": None,
        "filesystems": [{"path": "/tmp"}, {"path": str(missing)}],
        "actions": {"report_only": True}, "slurm": {"bin_dir": str(tmp_path / "noslurm")}}))
    for block in output_blocks("test_report_only_outputs_are_what_the_cli_prints"):
        got = _run_shown(block, conf, tmp_path)
        got = got.replace(str(conf), "/etc/slurm-hooks/slurm-hooks.yaml").replace(str(tmp_path), "")
        assert normalise(got) == normalise(block)


def test_configuration_errors_are_what_config_check_prints(tmp_path):
    """A file with a bad value on line 12 and a mistyped key on line 14: every problem
    at once, each with its file, line and key."""
    conf = tmp_path / "slurm-hooks.yaml"
    conf.write_text("# this site's slurm-hooks configuration\n" + "#\n" * 8
                    + "filesystems:\n  - path: /scratch\n    timeout: -3\nslurm:\n  timout: 5\n")
    lines = conf.read_text().splitlines()
    assert (lines[11], lines[13]) == ("    timeout: -3", "  timout: 5")
    for block in output_blocks("test_configuration_errors_are_what_config_check_prints"):
        got = _run_shown(block, conf, tmp_path).replace(str(conf), "/etc/slurm-hooks/slurm-hooks.yaml")
        assert normalise(got) == normalise(block)


def test_every_yaml_block_loads_with_the_real_loader(tmp_path):
    """Every block that is slurm-hooks configuration (fenced `yaml`, or a mapping of its
    top-level keys whatever the fence) loads, node_groups and all."""
    config = config_module()
    top = {key for key, _ in config.iter_settings() if "." not in key and "[" not in key}
    loaded = 0
    for info, body, _ in blocks(ALL):
        try:
            doc = yaml.safe_load(body)
        except yaml.YAMLError:
            assert info != "yaml", body
            continue
        if info != "yaml" and not (isinstance(doc, dict) and doc and set(doc) <= top):
            continue
        assert isinstance(doc, dict) and set(doc) <= top, (sorted(set(doc) - top), body)
        try:
            config.loads(body, path="README.md", node="gpu001")
        except config.ConfigError as e:
            pytest.fail(f"a README YAML block does not load:\n{body}\n{e}")
        loaded += 1
    assert loaded >= 5, loaded


def _reference_keys() -> set[str]:
    keys = set()
    for row in re.findall(r"^\| (`[^|]+`) \|", page("configuration"), re.M):
        keys |= set(re.findall(r"`([^`]+)`", row))
    return keys


def test_the_configuration_reference_lists_exactly_the_loaders_keys():
    """Every key the loader knows is a row of the README's configuration table (not only
    named somewhere: `actions.release_after` once was only mentioned in passing), and
    every row is a key the loader knows."""
    known = {key for key, _ in config_module().iter_settings()}
    listed = _reference_keys()
    assert sorted(known - listed) == [], "settings without a row in docs/configuration.md's table"
    assert sorted(listed - known) == [], "rows of the Configuration table the loader does not know"


def test_reason_delay_names_each_hooks_own_generic_reason():
    row = next(line for line in page("configuration").splitlines() if line.startswith("| `prolog.reason_delay`"))
    assert "`Prolog error`" in row and "`Epilog error`" in row, row
    doc = dict(config_module().iter_settings())["epilog.reason_delay"].metadata["doc"]
    assert "Epilog error" in doc, doc


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", path.read_text()), re.M)}


def test_every_link_to_a_heading_finds_one():
    """In the README and every page of docs/: `[x](#a)` names a heading of the same file,
    `[x](other.md#a)` one of that file (relative to the linking file), `[x](other.md)` a file."""
    checked = 0
    for path in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "SECURITY.md"):
        prose = FENCE.sub("", path.read_text())
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md|)(?:#([^)]+))?\)", prose):
            where = (path.parent / target).resolve() if target else path
            assert where.is_file(), f"{path.relative_to(ROOT)}: link to {target}: no such file"
            if anchor:
                assert anchor in _headings(where), f"{path.relative_to(ROOT)}: link to {target}#{anchor}: no such heading"
            checked += 1
    assert checked > 50, checked


def test_the_readme_is_the_front_door_and_links_every_reference_page():
    """What it does, install, upgrade, hook into slurm.conf, the first hour, Undo; the reference in
    docs/, each page linked from the README."""
    heads = re.findall(r"^## (.+)$", FENCE.sub("", README), re.M)
    assert heads == ["Contents", "What it is", "Install", "Upgrade", "Hook into slurm.conf", "The first hour",
                     "Undo", "Reference", "Contributing"], heads
    assert len(README.splitlines()) <= 330, len(README.splitlines())
    contents = section("Contents")
    for h in heads[1:]:
        assert f"[{h}](#{_slug(h)})" in contents, h
    reference = section("Reference")
    for name in REFERENCE:
        assert f"](docs/{name}.md)" in reference, name
    assert "](SECURITY.md)" in reference or "](../SECURITY.md)" in page("security")
    # Contributors' material lives in docs/; the README keeps the one test command.
    assert "## Design" not in README and "### Data model" not in README
    assert (ROOT / "docs/design.md").read_text().startswith("## Design")
    assert "tests/build_slurm.sh" in (ROOT / "docs/testing.md").read_text()
    assert "bash tests/run.sh" in section("Contributing") and "docs/testing.md" in section("Contributing")


def _table(text: str, title: str) -> list[list[str]]:
    """The rows of the first table from `title` on (a heading, or the table's own header
    row), header left out, cells stripped."""
    after = text[text.index(title):]
    out, started = [], False
    for ln in after.splitlines():
        if ln.strip().startswith("|"):
            started = True
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                out.append(cells)
        elif started:
            break
    assert len(out) > 1, title
    return out[1:]


def test_the_metrics_reference_lists_every_series_and_outcome_the_code_writes():
    """docs/metrics.md's series table is the code's list (the run's own series and every
    check's `series`), and its outcomes table is core/outcomes.py's Outcome with the words
    the report prints (RESULT): a series or outcome added to the code without a row fails."""
    from slurm_hooks.core.outcomes import RESULT, SPOOLED, Outcome
    from slurm_hooks.sinks.metrics import help_table
    metrics = page("metrics")
    listed = {re.match(r"`(slurm_hooks_\w+)\{", row[0]).group(1) for row in _table(metrics, "| series | meaning |")}
    assert listed == set(help_table()), (sorted(set(help_table()) - listed), sorted(listed - set(help_table())))
    outcomes = {row[0].strip("`"): row[1] for row in _table(metrics, "## Outcomes")}
    assert set(outcomes) == {o.value for o in Outcome}, outcomes
    for value, word in RESULT.items():
        assert word.split()[0] in outcomes[value], (value, word, outcomes[value])
    assert SPOOLED in outcomes["failed"]
    for word in (*RESULT.values(), SPOOLED):
        assert f"`{word}`" in section("Outcomes", metrics), word
    # The memory check's series are also named where the memory check is described.
    from slurm_hooks.checks import check_class
    for name in check_class("memory").series:
        assert name in page("memory"), name


def test_the_alerts_table_names_every_alerting_rule_shipped():
    rules = yaml.safe_load((ROOT / "packaging/prometheus/slurm-hooks-rules.yml").read_text())
    shipped = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    listed = {name for row in _table(page("metrics"), "| alert | fires when |")
              for name in re.findall(r"`(SlurmHooks\w+)`", row[0])}
    assert listed == shipped, (sorted(shipped - listed), sorted(listed - shipped))


def test_the_readme_says_when_the_first_health_check_comes():
    """slurmd runs its first health check when its timer fires, up to HealthCheckInterval
    after `scontrol reconfigure`: a new admin who waits for it should know."""
    hook = " ".join(section("Hook into slurm.conf").split())
    assert "up to `HealthCheckInterval`" in hook and "after the reconfigure" in hook, hook


def undo_loop() -> str:
    """The shell loop that resumes every node whose reason is ours, with Slurm's commands alone."""
    alone = section("Undo with Slurm's commands alone", page("operations"))
    return next(c for _, body, _ in blocks(alone) for c in shell_lines(body) if c.startswith("sinfo"))


def test_undo_says_how_to_remove_each_install_and_resume_only_our_drains():
    undo = section("Undo")
    for how in ("packaging/install.sh", "apt-get purge slurm-hooks", "dnf remove slurm-hooks",
                "pip uninstall slurm-hooks", "scontrol reconfigure", "slurm-hooks resume --all",
                "/var/lib/slurm-hooks", "/var/log/slurm-hooks", "/etc/slurm-hooks", "/run/slurm-hooks",
                "docs/operations.md#undo-with-slurms-commands-alone"):
        assert how in undo, how
    loop = undo_loop()
    # Ours: the mark at the end (Slurm's reboot notes aside), or an older release's prefix.
    assert "\\[slurm-hooks\\]" in loop and "/^slurm-hooks:/" in loop and "state=resume" in loop, loop
