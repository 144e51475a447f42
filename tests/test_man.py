"""The man pages and the bash completion (packaging/gendocs.py), generated from the
argument parser and the configuration table: rendered by man(1) without a warning,
naming every command, option and setting, and completing in a real bash."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT

sys.path.insert(0, str(ROOT / "packaging"))
import gendocs  # noqa: E402

from slurm_hooks.checks._config import iter_settings
from slurm_hooks import cli
from slurm_hooks.checks import registry  # noqa: E402
from slurm_hooks.core import config  # noqa: E402


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    r = subprocess.run([sys.executable, ROOT / "packaging/gendocs.py", "--out", out], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out


def render(path) -> str:
    """man -l, as a reader sees it; any groff or man warning fails."""
    r = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-P", "cat", "-l", str(path)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, MANWIDTH="200", LC_ALL="C.UTF-8"))
    assert r.returncode == 0 and r.stderr == "", f"man -l {path}:\n{r.stderr}"
    return r.stdout


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_slurm_hooks_8_names_every_command_and_option(pages):
    text = flat(render(pages / "slurm-hooks.8"))
    assert text.startswith("SLURM-HOOKS(8)")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT",
                    "FILES", "EXAMPLES", "SEE ALSO"):
        assert f" {section} " in text, section
    for words, _, parser in gendocs.commands(cli.build_parser()):
        assert f"slurm-hooks {' '.join(words)}" in text, words
        for action in parser._actions:
            for option in action.option_strings:
                assert option in text, (words, option)
    for program in ("slurm-hooks-healthcheck", "slurm-hooks-prolog", "slurm-hooks-epilog"):
        assert program in text
    for name in registry():
        assert name in text
    for code in (cli.EXIT_OK, cli.EXIT_UNHEALTHY, cli.EXIT_USAGE, cli.EXIT_NO_SLURM):
        assert f" {code} " in text
    for path in (config.DEFAULT_PATH, config.ENV_VAR, "/var/lib/slurm-hooks", "/var/log/slurm-hooks/journal.jsonl",
                 "/etc/slurm-hooks/checks.d/"):
        assert path in text, path


def test_exit_status_says_what_each_command_means_by_it(pages):
    """diagnose's 1 (a node did not answer) and status's own code for "Slurm could not be
    asked" (3: status judges no node, so not 1, "unhealthy") are in the page."""
    text = flat(render(pages / "slurm-hooks.8"))
    codes = text.split(" EXIT STATUS ", 1)[1].split(" ENVIRONMENT ", 1)[0]
    one = codes.split(f" {cli.EXIT_UNHEALTHY} ", 1)[1].split(f" {cli.EXIT_USAGE} ", 1)[0]
    assert "diagnose: a node did not answer" in one, one
    assert "status" not in one, "status never exits 1"
    three = codes.split(f" {cli.EXIT_NO_SLURM} ", 1)[1]
    assert cli.EXIT_NO_SLURM == 3 and three.startswith("status: Slurm could not be asked"), three
    assert len({cli.EXIT_OK, cli.EXIT_UNHEALTHY, cli.EXIT_USAGE, cli.EXIT_NO_SLURM}) == 4


def test_slurm_hooks_yaml_5_names_every_setting_with_its_default(pages):
    text = render(pages / "slurm-hooks.yaml.5")
    assert text.startswith("SLURM-HOOKS.YAML(5)")
    body = flat(text)
    for key, f in iter_settings():
        assert re.search(rf"^\s+{re.escape(key)}\b", text, re.M), f"setting {key} not in slurm-hooks.yaml(5)"
        if f.metadata.get("kind") not in ("section", "list"):
            default = gendocs._default(f)
            facts = "required" if default is None else f"default {default}"
            assert facts in body, (key, facts)
    # Defaults as the program has them, not as someone remembered them.
    assert "default /var/lib/prometheus/node-exporter" in body
    assert "(seconds (> 0); default 10)" in body           # filesystem_defaults.timeout


def test_pages_follow_the_parser_and_the_table():
    """A command or option added to the parser is in the page and the completion."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    extra = sub.add_parser("frobnicate", help="an imaginary command")
    extra.add_argument("--widgets", metavar="N", help="how many widgets")
    page = gendocs.manpage_cli(parser)
    assert "\\fBslurm\\-hooks frobnicate\\fR [\\fB\\-\\-widgets\\fR \\fIN\\fR]" in page
    assert "An imaginary command." in page and "How many widgets." in page
    assert "'frobnicate') words=\"-h --help --widgets\"" in gendocs.bash_completion(parser)


def test_roff_escapes_what_groff_would_read_as_requests():
    assert gendocs.roff(".hidden\n'quoted\n-x a\\b `code`") == \
        "\\&.hidden\n\\&'quoted\n\\-x a\\eb \\fBcode\\fR"


def complete(pages, *words) -> list[str]:
    """What bash offers after `slurm-hooks WORDS...` (the last word is the one typed)."""
    script = (f"source {pages / 'slurm-hooks.bash-completion'}; COMP_WORDS=(slurm-hooks"
              + "".join(f" {w!r}" for w in words) + f"); COMP_CWORD={len(words)}; _slurm_hooks; "
              'printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, timeout=30,
                       cwd=pages)
    assert r.returncode == 0, r.stderr
    return sorted(x for x in r.stdout.splitlines() if x)


def test_completion_offers_commands_options_and_checks(pages):
    assert {"check", "healthcheck", "prolog", "epilog", "status", "explain", "config", "--config",
            "--version"} <= set(complete(pages, ""))
    assert complete(pages, "he") == ["healthcheck"]
    assert complete(pages, "check", "") == sorted(["--config", "--dry-run", "--help", "--json", "-c", "-h",
                                                   *registry()])
    assert complete(pages, "check", "gpu", "st") == ["stuck_tasks"]
    assert complete(pages, "-c", "/etc/x.yaml", "check", "fi") == ["filesystem"]
    assert complete(pages, "config", "") == ["--config", "--help", "-c", "-h", "check", "show"]
    assert complete(pages, "healthcheck", "--") == ["--config", "--dry-run", "--help", "--json"]
    assert complete(pages, "explain", "--node", "") == []


def test_completion_completes_files_where_a_file_is_wanted(pages):
    assert "slurm-hooks.yaml.5" in complete(pages, "--config", "slurm-hooks.y")
    assert complete(pages, "config", "check", "slurm-hooks.y") == ["slurm-hooks.yaml.5"]
    assert complete(pages, "status", "slurm-hooks.y") == []
