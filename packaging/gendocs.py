#!/usr/bin/env python3
"""Man pages and bash completion, generated from the program itself.

    python3 packaging/gendocs.py --out DIR

writes DIR/slurm-hooks.8, DIR/slurm-hooks.yaml.5 and DIR/slurm-hooks.bash-completion.

Commands, options and their help come from the argument parser (slurm_hooks.cli's
build_parser), settings with their types, defaults and meaning from the configuration
table (slurm_hooks.core.config's iter_settings), check names from the check registry, exit
statuses and paths from the modules' constants. Only the prose around them lives
here. The package builds (packaging/stage.py) and packaging/install.sh run this at
install time, so a page cannot describe an option the program lacks, or miss one it has.

Only the standard library and slurm_hooks' own stdlib-only modules are imported: the
Debian build runs it with the build host's bare python3.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from slurm_hooks import __version__, cli
from slurm_hooks.core import config  # noqa: E402
from slurm_hooks.checks import registry  # noqa: E402
from slurm_hooks.checks._config import default_config, iter_settings  # noqa: E402
from slurm_hooks.core.records import MISSING  # noqa: E402

PROGRAMS = ("slurm-hooks", "slurm-hooks-healthcheck", "slurm-hooks-prolog", "slurm-hooks-epilog")
# Positionals and option values completed from a list (metavar -> words) or as files.
FILE_METAVARS = ("FILE",)

# Longer text for a command than its one-line help; the help is used where none is given.
DETAILS = {
    ("check",): "Runs the checks (all enabled ones, or those named) and prints a readable report, "
                "or the full record with --json. No side effects: no Slurm calls, no journal, no "
                "metrics.",
    ("healthcheck",): "What HealthCheckProgram runs: the checks, then the actions (drain the node when "
                      "a check fails, comment and requeue a job with a stuck task, ask for a reboot), "
                      "then one line in the journal, syslog lines and the Prometheus textfile. "
                      "With no Slurm reachable the actions are kept in a local spool and the report "
                      "says so. slurm-hooks-healthcheck is the same, as its own program: slurmd runs "
                      "HealthCheckProgram with no arguments.",
    ("prolog",): "The Prolog (slurm-hooks-prolog): the filesystems with a short deadline and the "
                 "GPUs given to the job. Exits 1 on a failure: Slurm then drains the node and "
                 "requeues the job, and a detached helper replaces Slurm's generic reason with the "
                 "precise one.",
    ("epilog",): "The Epilog (slurm-hooks-epilog): processes of the ended job still alive (stuck "
                 "in D), GPU memory held with no process, the filesystems. A sick node is drained "
                 "before the epilog returns.",
    ("status",): "From any host with Slurm client access: the nodes slurm-hooks drained, grouped "
                 "by cause, with their age and the jobs it diagnosed or requeued; many nodes drained "
                 "for the same filesystem are shown as one outage. Exits 1 when Slurm cannot be asked.",
    ("explain",): "On a node, from the local journal and state only (works with slurmctld down, "
                  "and with a configuration that does not load): why the node is drained, the "
                  "diagnosis of the run that drained it, the actions taken since, and the last runs "
                  "with what each decided, done or not, and the runs that could not read their "
                  "configuration. Exits 1 for a node with no run in the journal and no drain.",
    ("config", "check"): "Validates a configuration file and exits: 0 and FILE: OK, or 2 with one "
                         "line per problem, FILE:LINE: key: problem. Then warns, naming the file and "
                         "line, about each filesystem to probe this node would fail: a path that does "
                         "not exist, a mountpoint not mounted, another fstype. --strict: those are "
                         "errors (exit 2).",
    ("config", "show"): "Prints the effective configuration (the file plus the defaults) as JSON.",
}


# --- the parser, walked -------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser):
    """(name, help, subparser) of a parser's subcommands, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name) or "", sub


def commands(parser=None) -> list[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Every leaf command as (words, help, parser): ("check",), ("config", "show"), ..."""
    parser = parser or cli.build_parser()
    out = []

    def walk(p, words, help_):
        subs = list(_subcommands(p))
        if not subs:
            out.append((words, help_, p))
        for name, h, sp in subs:
            walk(sp, words + (name,), h)
    walk(parser, (), "")
    return out


def options(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help is not argparse.SUPPRESS]


def positionals(parser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]


def _metavar(action) -> str:
    return action.metavar or action.dest.upper()


def _takes_value(action) -> bool:
    return action.nargs != 0 and not isinstance(action, (argparse._VersionAction, argparse._HelpAction))


# --- roff -------------------------------------------------------------------------------

def roff(text: str) -> str:
    """Plain text to roff: escapes, `code` in bold, no line starting with a control char."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.split("\n"))


def _b(text: str) -> str:
    return f"\\fB{roff(text)}\\fR"


def _path(text: str) -> str:
    """A bold path troff may break after any slash (\\:): an installation's prefix can
    be longer than the line."""
    return _b(text).replace("/", "/\\:")


def _example(what: str, command: str) -> list[str]:
    """A man page example: what it does, then the command set apart."""
    return [".PP", roff(what), ".PP", ".nf", ".RS", roff(command), ".RE", ".fi"]


def _i(text: str) -> str:
    return f"\\fI{roff(text)}\\fR"


def _usage(words: tuple[str, ...], parser) -> str:
    parts = [_b(" ".join(("slurm-hooks",) + words))]
    for a in options(parser):
        if isinstance(a, argparse._HelpAction) or a.dest == "config":
            continue
        opt = _b(a.option_strings[-1])
        parts.append(f"[{opt} {_i(_metavar(a))}]" if _takes_value(a) else f"[{opt}]")
    for a in positionals(parser):
        m = _i(_metavar(a))
        parts.append({"*": f"[{m} ...]", "?": f"[{m}]", "+": f"{m} ..."}.get(a.nargs, m))
    return " ".join(parts)


def _option_item(a) -> str:
    names = ", ".join(_b(o) for o in a.option_strings)
    if _takes_value(a):
        names += " " + _i(_metavar(a))
    return f".TP\n{names}\n{roff(_sentence(a.help or ''))}"


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _date() -> str:
    """The date of the newest Debian changelog entry: the same for every build of a tree."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return time.strftime("%Y-%m-%d", time.gmtime(int(os.environ["SOURCE_DATE_EPOCH"])))
    try:
        with open(os.path.join(HERE, "debian", "changelog")) as f:
            for line in f:
                m = re.match(r" -- .*>  (\w{3}, \d{1,2} \w{3} \d{4})", line)
                if m:
                    return time.strftime("%Y-%m-%d", time.strptime(m.group(1), "%a, %d %b %Y"))
    except OSError:
        pass
    return "1970-01-01"


def _th(title: str, section: int, manual: str) -> str:
    # .nh: no hyphenation, so option names and paths stay whole for copying.
    return f'.TH "{title}" "{section}" "{_date()}" "slurm\\-hooks {__version__}" "{manual}"\n.nh'


# --- slurm-hooks(8) ---------------------------------------------------------------------

# Where the programs, the shared files and the docs are, as the man pages name them:
# the packages' layout by default; install.sh passes its own (--bindir, ...), so a man
# page never points at files its installation does not have.
LAYOUT = {"bindir": "/usr/sbin", "datadir": "/usr/share/slurm-hooks", "docdir": "/usr/share/doc/slurm-hooks"}


def manpage_cli(parser=None) -> str:
    parser = parser or cli.build_parser()
    cmds = commands(parser)
    top = options(parser)
    d = default_config()
    out = [
        _th("SLURM-HOOKS", 8, "System Administration"),
        ".SH NAME",
        roff(", ".join(PROGRAMS) + " - Slurm health check, prolog and epilog for GPU clusters"),
        ".SH SYNOPSIS",
        f"{_b('slurm-hooks')} [{_b('-c')} {_i('FILE')}] {_i('COMMAND')} [{_i('OPTIONS')}]",
    ]
    for words, _, p in cmds:
        out += [".br", _usage(words, p)]
    out += [".br", f"{_b('slurm-hooks')} {_b('--version')}"]
    for prog in PROGRAMS[1:]:
        out += [".br", _b(prog)]
    out += [
        ".SH DESCRIPTION",
        roff("slurm-hooks finds what silently wedges large training jobs on a GPU cluster: a shared "
             "filesystem that stopped answering, job processes stuck in uninterruptible sleep (D), "
             "GPUs that are lost or idle while the rest of their job is busy. It drains the sick node "
             "with a reason an admin understands at a glance in `scontrol show node` and `sinfo -R`, "
             "requeues the job that was held hostage, records the diagnosis on the job, and asks for "
             "the reboot that an unkillable process needs."),
        ".PP",
        roff("The checker never hangs: everything that touches a suspect filesystem or the GPU driver "
             "runs in a child process with a deadline, and a child stuck in the kernel is left behind, "
             "remembered and reported as still hung by later runs instead of being probed again."),
        ".PP",
        roff("slurmd runs " + ", ".join(PROGRAMS[1:]) + " with no arguments, as HealthCheckProgram, "
             "Prolog and Epilog in slurm.conf(5). Each is the same as the slurm-hooks command of that "
             "name. Checks that can be named: " + ", ".join(sorted(registry())) + "."),
        ".SH OPTIONS",
        roff("These are accepted before the command; --config also after it."),
    ]
    out += [_option_item(a) for a in top]
    out.append(".SH COMMANDS")
    for words, help_, p in cmds:
        out += [".TP", _usage(words, p), roff(_sentence(DETAILS.get(words) or help_))]
        items = [a for a in options(p) if not isinstance(a, argparse._HelpAction) and a.dest != "config"]
        pos = [a for a in positionals(p) if a.help]
        if items or pos:
            out.append(".RS")
            for a in pos:
                out += [".TP", _i(_metavar(a)), roff(_sentence(a.help))]
                if words == ("check",):
                    out[-1] += " " + roff("One of: " + ", ".join(sorted(registry())) + ".")
            out += [_option_item(a) for a in items]
            out.append(".RE")
    out += [
        ".SH EXIT STATUS",
        ".TP", _b(str(cli.EXIT_OK)),
        roff("Healthy (warnings allowed), or the command did what was asked. A health check that "
             "finds the previous one still running also exits 0: it did not check this time. So does "
             "a run whose only problem is slurm-hooks' own (an unusable state directory, journal, "
             "lock, metrics file or configuration cache): it says so on stderr and in syslog, and "
             "the prolog and epilog fail no job for it."),
        ".TP", _b(str(cli.EXIT_UNHEALTHY)),
        roff("Unhealthy: a check failed (the prolog: Slurm drains the node; the epilog drains it itself "
             "and exits 1 only when slurmctld did not take the drain, so that Slurm drains it). resume: a "
             "node could not be resumed or is not known to Slurm. diagnose: "
             "a node did not answer, a --record write failed, or the job could not be looked up "
             "(not known to Slurm, or Slurm could not be asked). explain: no run of the node in the "
             "journal and no drain recorded for it."),
        ".TP", _b(str(cli.EXIT_USAGE)),
        roff("Usage or configuration error; nothing was checked and nothing was done. The prolog and "
             "epilog exit 0 instead when the configuration is broken, so that a bad file pushed to "
             "every node fails no job; they log the error."),
        ".TP", _b(str(cli.EXIT_NO_SLURM)),
        roff("status: Slurm could not be asked (no configuration found on this node, slurmctld not "
             "answering, scontrol missing); it judges no node, so this is not \"unhealthy\". resume: the same, "
             "nothing was resumed."),
        ".SH ENVIRONMENT",
        ".TP", _b(config.ENV_VAR),
        roff(f"The configuration file, when --config is not given. Without either, "
             f"{config.DEFAULT_PATH} if it exists, else the built-in defaults."),
        ".TP", _b("SLURMD_NODENAME"),
        roff("This node's Slurm name; slurmd sets it for every hook (see node_name in "
             "slurm-hooks.yaml(5))."),
        ".TP", _b("SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES"),
        roff("The job and its GPUs, as slurmd gives them to the prolog and epilog."),
        ".TP", _b("SLURM_CONF"),
        roff("The slurm.conf scontrol reads. slurmd gives HealthCheckProgram none: set slurm.conf in "
             "slurm-hooks.yaml(5) when slurm.conf is not in Slurm's default place."),
        ".PP",
        roff("The installed programs run Python with -I: PYTHON* variables, the user site and the "
             "current directory are ignored."),
        ".SH FILES",
        ".ad l",            # paths of a long install prefix leave nothing to justify
        ".TP", _b(config.DEFAULT_PATH),
        roff("The configuration; see slurm-hooks.yaml(5). Validate it with "
             "`slurm-hooks config check` before deploying."),
        ".TP", _b(d.state_dir + "/NODE/"),
        roff("Local state between runs (stuck probe children, hysteresis, spool of actions Slurm "
             "could not take, the drain slurm-hooks set). Mode 0700: it names other users' jobs."),
        ".TP", _b(d.journal),
        roff("The journal: one JSON line per run with every finding and action, and one per action. "
             "Mode 0640 in a 0750 directory."),
        ".TP", _b(f"{d.prometheus_textfile_dir}/slurm_hooks_NODE.prom"),
        roff("Metrics for node_exporter's textfile collector, written by the health check when the "
             "directory exists."),
        ".TP", _b(d.site_checks.dir + "/"),
        roff("Site checks: executables with Nagios exit codes (0 OK, 1 WARNING, 2 CRITICAL drains, "
             "3 UNKNOWN), the first line of output as the summary. One that anyone but root can "
             "write, or in a directory anyone but root can write, is refused and never run."),
        ".TP", _b(config.CACHE_DIR),
        roff("Cache of validated configurations (tmpfs)."),
        ".TP", _path(f"{LAYOUT['datadir']}/prometheus/slurm-hooks-rules.yml"),
        roff("Prometheus alerting rules for these metrics. For the Prometheus server, not the "
             "node: copy it there and name it in rule_files of prometheus.yml."),
        ".TP", _path(f"{LAYOUT['datadir']}/grafana/slurm-hooks.json"),
        roff("A Grafana dashboard for these metrics, to import into Grafana (not used on the node)."),
        ".SH EXAMPLES",
        roff("In slurm.conf:"),
        ".PP", ".nf", ".RS",
        roff(f"HealthCheckProgram={LAYOUT['bindir']}/slurm-hooks-healthcheck\nHealthCheckInterval=120\n"
             f"HealthCheckNodeState=ANY,CYCLE\nProlog={LAYOUT['bindir']}/slurm-hooks-prolog\n"
             f"Epilog={LAYOUT['bindir']}/slurm-hooks-epilog"),
        ".RE", ".fi",
        *_example("What the health check would do on this node, without doing it:",
                  "slurm-hooks healthcheck --dry-run"),
        *_example("Probe the filesystems only, and print the full record:", "slurm-hooks check filesystem --json"),
        *_example("Check an edited configuration before pushing it to every node:",
                  "slurm-hooks config check /tmp/slurm-hooks.yaml"),
        *_example("Why is node gpu042 drained? On the node:", "slurm-hooks explain --runs 5"),
        ".SH SEE ALSO",
        roff("slurm-hooks.yaml(5), slurm.conf(5), scontrol(1), sinfo(1)"),
    ]
    return "\n".join(out) + "\n"


# --- slurm-hooks.yaml(5) ----------------------------------------------------------------

def _default(f):
    if f.default is not MISSING:
        value = f.default
    elif f.default_factory is not MISSING:
        value = f.default_factory()
    else:
        return None
    return _yaml(value)


def _yaml(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml(k)}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and (value == "" or value[-1:] == ":" or value in ("true", "false", "null")):
        return f'"{value}"'
    return str(value)


def _kind(meta) -> str:
    kind = meta.get("kind")
    text = {
        "str": "string", "path": "absolute path", "int": "whole number", "seconds": "seconds (> 0)",
        "number": "number", "bool": "true or false", "list": "list of mappings",
        "map": "mapping", "section": "section",
    }.get(kind, kind)
    if kind == "enum":
        text = "one of " + ", ".join(meta["choices"])
    elif kind == "strlist":
        text = "list of " + (", ".join(meta["choices"]) if meta.get("choices") else "strings")
    elif kind == "map":
        value = meta.get("value", {})
        vk = "one of " + ", ".join(value["choices"]) if value.get("kind") == "enum" else value.get("kind", "")
        text = f"mapping of {meta.get('key_kind', 'str')} to {vk}"
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        text += f", {lo} to {hi}"
    elif lo is not None:
        text += f", at least {lo}"
    elif hi is not None:
        text += f", at most {hi}"
    if meta.get("nullable"):
        text += ", or null"
    return text


def settings() -> list[tuple[str, object]]:
    return list(iter_settings())


def manpage_config() -> str:
    d = default_config()
    out = [
        _th("SLURM-HOOKS.YAML", 5, "File Formats"),
        ".SH NAME",
        roff("slurm-hooks.yaml - configuration of slurm-hooks"),
        ".SH SYNOPSIS",
        _b(config.DEFAULT_PATH),
        ".SH DESCRIPTION",
        roff(f"slurm-hooks(8) reads its configuration from the file given with --config, else "
             f"${config.ENV_VAR}, else {config.DEFAULT_PATH} if it exists, else it runs with the "
             f"built-in defaults. The file is YAML: a mapping of the settings below, each optional; "
             f"a setting left out keeps its default, and sections (like `gpu`) are mappings of their "
             f"own settings, written with the dotted names below nested."),
        ".PP",
        roff("Every value is checked when the file is read, and every problem is reported at once, "
             "one line each, naming the file, the line and the setting:"),
        ".PP", ".nf", ".RS",
        roff(f"{config.DEFAULT_PATH}:12: filesystems[0].timeout: must be > 0 seconds, got -3\n"
             f"{config.DEFAULT_PATH}:14: slurm.timout: unknown setting (did you mean timeout?)"),
        ".RE", ".fi",
        ".PP",
        roff("A health check with a broken file exits 2 and acts on nothing; the prolog and epilog "
             "run no check and exit 0. Run `slurm-hooks config check FILE` before deploying, and "
             "`slurm-hooks config show` to see the values in effect."),
        ".SH SETTINGS",
    ]
    for key, f in settings():
        meta = f.metadata
        if meta.get("kind") == "section" or meta.get("kind") == "list":
            out += [".SS " + roff(key), roff(_sentence(meta.get("doc", "")))]
            if meta.get("kind") == "list":
                out.append(roff(f"Each item of {key} is a mapping of the {key}[] settings below."))
            continue
        default = _default(f)
        head = _b(key)
        facts = _kind(meta) + ("; required" if default is None else f"; default {default}")
        out += [".TP", head, f"({roff(facts)})", ".br", roff(_sentence(meta.get("doc", "")))]
    out += [
        ".SH EXAMPLE",
        roff("Two shared filesystems, one of which must be mounted as Lustre; drain for a "
             "filesystem only after two failing runs in a row:"),
        ".PP", ".nf", ".RS",
        roff("filesystems:\n"
             "  - path: /scratch/.slurm-hooks\n"
             "    mountpoint: /scratch\n"
             "    fstype: lustre\n"
             "  - path: /home/.slurm-hooks\n"
             "    timeout: 20\n"
             "policy:\n"
             "  failures_to_drain: {filesystem: 2}\n"
             "gpu:\n"
             "  count: 8"),
        ".RE", ".fi",
        ".SH FILES",
        ".ad l",            # paths of a long install prefix leave nothing to justify
        ".TP", _b(config.DEFAULT_PATH), roff("The configuration."),
        ".TP", _path(LAYOUT["docdir"] + "/"),
        roff("README.md, the reference it links to (docs/: configuration, each check, recovery, "
             "metrics, operations, security) and an annotated slurm.conf excerpt; the packaged default "
             "configuration has every setting, commented."),
        ".TP", _b(d.state_dir), roff("Default state_dir."),
        ".SH SEE ALSO",
        roff("slurm-hooks(8), slurm.conf(5)"),
    ]
    return "\n".join(out) + "\n"


# --- bash completion --------------------------------------------------------------------

def bash_completion(parser=None) -> str:
    parser = parser or cli.build_parser()
    cmds = commands(parser)
    value_opts = sorted({o for p in [parser] + [p for _, _, p in cmds] for a in options(p)
                         if _takes_value(a) for o in a.option_strings})
    file_opts = sorted({o for p in [parser] + [p for _, _, p in cmds] for a in options(p)
                        if _takes_value(a) and _metavar(a) in FILE_METAVARS for o in a.option_strings})

    def words_of(p) -> str:
        return " ".join(o for a in options(p) for o in a.option_strings)

    # One case per position in the command tree: "" (top), "config", "check", "config check".
    cases = []
    top_words = " ".join([name for name, _, _ in _subcommands(parser)] + [words_of(parser)])
    cases.append(("", top_words, ""))
    for name, _, sp in _subcommands(parser):
        subs = list(_subcommands(sp))
        if subs:
            cases.append((name, " ".join([n for n, _, _ in subs] + [words_of(sp)]), ""))
    for words, _, p in cmds:
        extra, files = [], ""
        for a in positionals(p):
            m = _metavar(a)
            if m == "CHECK":
                extra += sorted(registry())
            elif m in FILE_METAVARS:
                files = "f"
        cases.append((" ".join(words), " ".join(extra + [words_of(p)]), files))
    nested = sorted({name for name, _, sp in _subcommands(parser) if list(_subcommands(sp))})

    lines = [
        "# bash completion for slurm-hooks(8): commands, options and check names.",
        f"# Generated by packaging/gendocs.py from slurm-hooks {__version__}'s own argument parser.",
        "_slurm_hooks()",
        "{",
        "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
        "    local i w cmd= words= files=",
        "    case $prev in",
    ]
    if file_opts:
        lines += [f"        {'|'.join(file_opts)})",
                  '            mapfile -t COMPREPLY < <(compgen -f -- "$cur"); compopt -o filenames 2>/dev/null',
                  "            return ;;"]
    other = [o for o in value_opts if o not in file_opts]
    if other:
        lines += [f"        {'|'.join(other)})", "            COMPREPLY=(); return ;;"]
    lines += [
        "    esac",
        "    # The command words so far, skipping options and the values they take.",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        "        w=${COMP_WORDS[i]}",
        "        case $w in",
        f"            {'|'.join(value_opts) or '--'}) ((i++)) ;;",
        "            -*) ;;",
        "            *) if [ -z \"$cmd\" ]; then cmd=$w",
        f"               elif [[ \" {' '.join(nested)} \" == *\" $cmd \"* && \"$cmd\" != *\" \"* ]]; then cmd=\"$cmd $w\"",
        "               fi ;;",
        "        esac",
        "    done",
        "    case $cmd in",
    ]
    for key, words, files in cases:
        lines.append(f"        {repr(key) if key else chr(39) * 2}) words=\"{words}\"{' files=1' if files else ''} ;;")
    lines += [
        "    esac",
        '    mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")',
        '    if [ -n "$files" ] && [[ $cur != -* ]]; then',
        '        mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -f -- "$cur")',
        "        compopt -o filenames 2>/dev/null",
        "    fi",
        "}",
        "complete -F _slurm_hooks slurm-hooks",
    ]
    return "\n".join(lines) + "\n"


OUTPUTS = {
    "slurm-hooks.8": manpage_cli,
    "slurm-hooks.yaml.5": manpage_config,
    "slurm-hooks.bash-completion": bash_completion,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory to write " + ", ".join(OUTPUTS) + " in")
    for key, value in LAYOUT.items():
        p.add_argument(f"--{key}", default=value, help=f"as the man pages name it (default {value})")
    args = p.parse_args(argv)
    for key in LAYOUT:
        LAYOUT[key] = getattr(args, key)
    os.makedirs(args.out, exist_ok=True)
    for name, make in OUTPUTS.items():
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(make())
    return 0


if __name__ == "__main__":
    sys.exit(main())
