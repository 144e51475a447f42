"""Command line: `slurm-hooks SUBCOMMAND`, plus the entry points Slurm runs directly.

Exit status: 0 healthy, 1 unhealthy, 2 usage or configuration error.
HealthCheckProgram is run by slurmd with no arguments, so it gets its own executable,
`slurm-hooks-healthcheck`, equivalent to `slurm-hooks healthcheck`.
"""
from __future__ import annotations

import os
import sys

from . import TYPE_CHECKING, __version__

if TYPE_CHECKING:
    from .checks._config import Config

EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE = 0, 1, 2
# What only root may run: the programs slurmd runs (they read every process, drain,
# keep root's state) and the Undo. The rest reads, and works for any user where the
# files and Slurm let it (status: Slurm's node list; explain: the journal and state).
ROOT_ONLY = ("healthcheck", "prolog", "epilog", "resume")
FOR_ANY_USER = "status, explain, check, config check, config show, diagnose (your own jobs), --help"
# status judges no node, so "Slurm could not be asked" must not read as "unhealthy".
EXIT_NO_SLURM = 3


def _config_option(parser, default) -> None:
    parser.add_argument("-c", "--config", metavar="FILE", default=default,
                        help="configuration file (default: $SLURM_HOOKS_CONFIG, else "
                        "/etc/slurm-hooks/slurm-hooks.yaml if present, else built-in defaults)")


def _parser():
    import argparse
    # --config is accepted before and after the subcommand; SUPPRESS keeps a
    # subcommand's unset option from overwriting the value given before it.
    common = argparse.ArgumentParser(add_help=False)
    _config_option(common, argparse.SUPPRESS)
    p = argparse.ArgumentParser(prog="slurm-hooks",
                                description="Slurm health check, prolog and epilog for GPU clusters.")
    _config_option(p, None)
    p.add_argument("--version", action="version", version=f"slurm-hooks {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser("check", parents=[common], help="run checks and print a report; no side effects")
    c.add_argument("names", nargs="*", metavar="CHECK", help="checks to run (default: all enabled)")
    c.add_argument("--json", action="store_true", help="print the full record as JSON")
    c.add_argument("--dry-run", action="store_true", help="accepted for symmetry; check never acts")

    h = sub.add_parser("healthcheck", parents=[common],
                       help="the HealthCheckProgram: check, drain the node if sick, journal the run")
    h.add_argument("--dry-run", action="store_true", help="print the actions instead of taking them")
    h.add_argument("--json", action="store_true", help="print the full record as JSON")

    for hook, what in (("prolog", "the Prolog: fast checks before a job starts; non-zero exit fails the start"),
                       ("epilog", "the Epilog: leftovers of the job that ended; drains a sick node at once")):
        hp = sub.add_parser(hook, parents=[common], help=what)
        hp.add_argument("--dry-run", action="store_true", help="print the actions instead of taking them")
        hp.add_argument("--json", action="store_true", help="print the full record as JSON")

    st = sub.add_parser("status", parents=[common],
                        help="nodes slurm-hooks drained across the cluster, grouped by cause (needs Slurm)")
    st.add_argument("--json", action="store_true", help="print JSON")
    ex = sub.add_parser("explain", parents=[common],
                        help="on a node: why it is drained and the last runs, from the local journal")
    ex.add_argument("--node", help="node name (default: this node's)")
    ex.add_argument("--runs", type=_count, default=10, metavar="N",
                    help="how many recent runs to list (default 10; 0: none)")
    ex.add_argument("--journal", metavar="FILE",
                    help="journal to read (default: the configuration's, else the default one)")
    ex.add_argument("--json", action="store_true", help="print JSON")

    dg = sub.add_parser("diagnose", parents=[common],
                        help="a hung job: every node at once, ranks grouped by what they do, the odd one named")
    dg.add_argument("job", metavar="JOBID")
    dg.add_argument("--json", action="store_true", help="print the full per-rank record as JSON")
    dg.add_argument("--timeout", type=float, metavar="S",
                    help="seconds the nodes get to answer (default: diagnose.timeout, 20)")
    dg.add_argument("--stacks", action=argparse.BooleanOptionalAction, default=None,
                    help="Python stacks with py-spy where installed (default: diagnose.stacks)")
    dg.add_argument("--record", action="store_true",
                    help="also write the summary into the job's AdminComment and the journal")
    jr = sub.add_parser("job-report", parents=[common],
                        help="on a node: what each task of a job does here (diagnose runs it on every node)")
    jr.add_argument("job", metavar="JOBID")
    jr.add_argument("--json", action="store_true", help="print one line of JSON")
    jr.add_argument("--node", help="node name (default: this node's)")
    jr.add_argument("--sample", type=float, default=0.5, metavar="S",
                    help="seconds to watch CPU time and context switches (default 0.5)")
    jr.add_argument("--deadline", type=float, default=15.0, metavar="S",
                    help="finish within this many seconds (default 15)")
    jr.add_argument("--stacks", action=argparse.BooleanOptionalAction, default=True,
                    help="Python stacks with py-spy where installed (default: yes)")

    rs = sub.add_parser("resume", parents=[common],
                        help="Undo: resume the nodes slurm-hooks drained and take its cause out of their Comment "
                        "(needs root)")
    rs.add_argument("nodes", nargs="*", metavar="NODE", help="nodes to resume (only those slurm-hooks drained)")
    rs.add_argument("--all", action="store_true", dest="every",
                    help="every node slurm-hooks drained or left its cause on")
    rs.add_argument("--dry-run", action="store_true", help="say what would be done")

    cf = sub.add_parser("config", parents=[common], help="configuration tools")
    csub = cf.add_subparsers(dest="config_command", metavar="ACTION")
    csub.required = True
    cc = csub.add_parser("check", parents=[common], help="validate a configuration file and exit")
    cc.add_argument("file", nargs="?", help="file to validate (default: the one in use)")
    cc.add_argument("--strict", action="store_true",
                    help="treat warnings (probe paths, mounts, fstypes not found on this node) as errors")
    cc.add_argument("--json", action="store_true", help="print the result as JSON")
    csub.add_parser("show", parents=[common], help="print the effective configuration as JSON")
    return p


def _count(text: str) -> int:
    """A count of 0 or more, for argparse (which names the option and the value)."""
    import argparse
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def _json_error(command: str, error: str, problems: list[str] | None = None) -> None:
    """--json promises a document on stdout whatever happens: the error is one too."""
    import json
    doc = {"command": command, "status": "error", "error": error, "problems": problems or [error]}
    print(json.dumps(doc, indent=2))


def _load_config(path_arg):
    from .checks._config import load_config
    from .core import config
    return load_config(config.config_path(path_arg), mount_kind=_mount_kind)


def _hook_config(hook: str, path_arg, as_json: bool = False) -> Config | int:
    """The configuration a node command (healthcheck, prolog, epilog) runs with, or its
    exit status when none loads: the failure is journalled the way slurmd's own
    programs report theirs, and nothing is acted on (no drain for our own mistake)."""
    from .core import config
    try:
        return _load_config(path_arg)
    except config.ConfigError as e:
        if as_json:
            _json_error(hook, "configuration error", e.problems)
        from .run.hooks import config_error
        return config_error(hook, e, config.config_path(path_arg))


# The node commands cron, wrappers and admins run on every node, in their plain forms:
# parsed by hand, since importing argparse and building the parser cost more than the
# rest of a healthy run. Anything else (--help, abbreviations, mistakes) goes to
# argparse, which gives the same result and the same messages.
_QUICK = {"healthcheck": ("--dry-run", "--json"), "prolog": ("--dry-run", "--json"),
          "epilog": ("--dry-run", "--json")}


class _Args:
    """What argparse's Namespace would hold for a command parsed by hand."""

    def __init__(self, **values):
        self.__dict__.update(values)


def _quick_args(argv: list[str]):
    """The arguments of `[-c FILE] healthcheck|prolog|epilog [--dry-run] [--json] [-c FILE]`
    exactly as argparse would parse them, or None for anything else."""
    config, command, flags = None, None, set()
    args = iter(argv)
    for arg in args:
        if arg in ("-c", "--config") or arg.startswith("--config="):
            value = arg[9:] if arg.startswith("--config=") else next(args, None)
            if not value or value.startswith("-"):
                return None
            config = value
        elif command is None and arg in _QUICK:
            command = arg
        elif command is not None and arg in _QUICK[command]:
            flags.add(arg)
        else:
            return None
    if command is None:
        return None
    return _Args(config=config, command=command, dry_run="--dry-run" in flags, json="--json" in flags)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    args = _quick_args(argv)
    if args is not None:
        _one_shot()
    else:
        args = _parser().parse_args(argv)
    from .core.config import ConfigError
    if args.command in ROOT_ONLY and os.geteuid() != 0:
        why = "it changes node states in Slurm" if args.command == "resume" else "slurmd runs it as root"
        print(f"slurm-hooks {args.command}: needs root ({why}); as any user: {FOR_ANY_USER}",
              file=sys.stderr)
        return EXIT_USAGE
    if args.command == "explain":          # reads the journal: a broken configuration must not stop it
        return _explain(args)
    if args.command in ("prolog", "epilog", "healthcheck"):
        loaded = _hook_config(args.command, args.config, args.json)
        if isinstance(loaded, int):
            return loaded
        cfg = loaded
    else:
        try:
            if args.command == "config":
                return _config_command(args)
            cfg = _load_config(args.config)
        except ConfigError as e:
            if getattr(args, "json", False):
                _json_error(args.command, "configuration error", e.problems)
            print(f"slurm-hooks: configuration error:\n{e}", file=sys.stderr)
            return EXIT_USAGE
    if args.command in ("prolog", "epilog"):
        from .run.hooks import run_hook
        return run_hook(cfg, args.command, dry_run=args.dry_run, as_json=args.json)
    if args.command == "check":
        return _check(cfg, args)
    if args.command == "status":
        return _status(cfg, args.json)
    if args.command == "diagnose":
        from .views.diagnose import main as diagnose_main
        if args.timeout is not None and args.timeout <= 0:
            print("slurm-hooks diagnose: --timeout must be positive", file=sys.stderr)
            return EXIT_USAGE
        return diagnose_main(cfg, args.job, args.json, args.timeout, args.stacks, args.record)
    if args.command == "job-report":
        from .views.jobreport import main as report_main
        return report_main(cfg, args.job, args.node, args.json, args.sample, args.stacks, args.deadline)
    if args.command == "healthcheck":
        return _healthcheck(cfg, dry_run=args.dry_run, as_json=args.json)
    if args.command == "resume":
        from .act.undo import main as undo_main
        return undo_main(cfg, args.nodes, args.every, args.dry_run)
    raise AssertionError(args.command)


def _check(cfg: Config, args) -> int:
    from .checks import names, plugins_on
    from .run import engine
    from .sinks import report
    known = names(cfg)           # other packages' checks (entry points) can be named too
    unknown = [n for n in args.names if n not in known]
    if unknown:
        off = "" if plugins_on(cfg) else "; other packages' checks are off (site_checks.entry_points: false)"
        print(f"slurm-hooks: unknown check {', '.join(unknown)}; known: {', '.join(sorted(known))}{off}",
              file=sys.stderr)
        return EXIT_USAGE
    record = engine.run(cfg, "check", names=args.names or None)
    print(report.render_json(record) if args.json else report.render(record))
    return record.exit_code()


def _healthcheck(cfg: Config, dry_run: bool, as_json: bool = False) -> int:
    from .core.lock import Busy
    from .run import engine
    from .sinks.record import record_and_show
    try:
        record = engine.run_locked(cfg, "healthcheck", cfg.policy.lock_timeout, act=True, dry_run=dry_run)
    except Busy as e:
        print(f"slurm-hooks healthcheck: {e}; not checking this time", file=sys.stderr)
        return EXIT_OK
    record_and_show(cfg, record, as_json)
    return record.exit_code()


def _status(cfg: Config, as_json: bool) -> int:
    import json

    from .act.mounts import DEFAULT_INTERVAL, fresh_for
    from .host.runner import Runner
    from .slurm.api import SlurmError
    from .slurm.conffile import health_check_interval
    from .slurm.connect import open_backend
    from .views.status import collect, render
    try:
        slurm = open_backend(cfg.slurm)
        # How long a node's word on a mount counts: two of its health-check intervals.
        every = cfg.outage.interval or health_check_interval(cfg.slurm.conf, Runner()) or DEFAULT_INTERVAL
        st = collect(slurm, cfg.reason_prefix, fresh_for=fresh_for(every))
    except SlurmError as e:
        if as_json:
            _json_error("status", f"cannot ask Slurm: {e}")
        print(f"slurm-hooks status: cannot ask Slurm: {e}", file=sys.stderr)
        return EXIT_NO_SLURM
    print(json.dumps(st.to_json(), indent=2) if as_json else render(st))
    return EXIT_OK


def _explain(args) -> int:
    import json

    from .core.config import node_name
    from .core.state import StateStore, state_dir
    from .sinks import journal
    from .views.explain import explain, explain_json, node_runs
    cfg = _explain_config(args.config)
    path = args.journal or cfg.journal
    node = args.node or node_name(cfg)
    closed = _not_readable(path) or _not_readable(state_dir(cfg, node), directory=True)
    if closed:
        msg = (f"cannot read {closed} as {_user()} (it names users' jobs: root's by default): run it as root, "
               "or give this user read access (--journal FILE: a copy)")
        if args.json:
            _json_error("explain", msg)
        print(f"slurm-hooks explain: {msg}", file=sys.stderr)
        return EXIT_USAGE
    records = journal.read(path)
    store = StateStore(state_dir(cfg, node))
    drain = store.load("drain")
    from .act.actuation import INCIDENTS, PAST_INCIDENTS
    from .decide.mount_incident import load
    incidents = load(store.load(PAST_INCIDENTS)) + load(store.load(INCIDENTS))
    named = any(r.get("node") == node for r in records)
    # A mistyped --node must not read as "healthy, not drained". Runs that could not
    # read their configuration name no node: this host's, so only without --node.
    if not drain and not named and (args.node is not None or not node_runs(records, node)):
        msg = (f"no run of node {node} in the journal {path} yet, and no drain recorded for it: the health "
               "check may not have run yet (slurm.conf's HealthCheckProgram and HealthCheckInterval), or the "
               "node has another name")
        if args.json:
            _json_error("explain", msg)
        print(f"slurm-hooks explain: {msg}", file=sys.stderr)
        return EXIT_UNHEALTHY
    # A drain recorded here may have been undone by another hand since: Slurm's word
    # on the node now, where it answers within a few seconds (explain works without it).
    slurm_now = _node_now(cfg, node) if drain else None
    if args.json:
        doc = dict(explain_json(records, node, drain, args.runs, incidents), journal=path, slurm_now=slurm_now)
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(explain(records, node, drain, args.runs, incidents, report_only=cfg.actions.report_only,
                      slurm_now=slurm_now))
    return EXIT_OK


EXPLAIN_SLURM_WAIT = 5.0


def _node_now(cfg: Config, node: str) -> dict | None:
    """The node's record in Slurm now (one single-node RPC), {"error": why} where Slurm
    does not answer within EXPLAIN_SLURM_WAIT seconds, or has no such node."""
    import time

    from .slurm.api import SlurmError
    from .slurm.connect import open_backend
    try:
        slurm = open_backend(cfg.slurm, time.monotonic() + EXPLAIN_SLURM_WAIT)
        info = slurm.node_state(node)
    except SlurmError as e:
        return {"error": str(e)}
    except Exception as e:          # explain must still tell the local record
        return {"error": f"{type(e).__name__}: {e}"}
    return info if info is not None else {"error": f"Slurm knows no node {node}"}


def _not_readable(path: str, directory: bool = False) -> str | None:
    """The first of `path`'s directories, or `path` itself, that exists and this user
    may not read; None when nothing stands in the way (or nothing is there)."""
    parts = path.rstrip("/").split("/")
    for i in range(2, len(parts) + (1 if directory else 0)):
        d = "/".join(parts[:i])
        if os.path.isdir(d) and not os.access(d, os.R_OK | os.X_OK):
            return d
    if not directory and os.path.exists(path) and not os.access(path, os.R_OK):
        return path
    return None


def _user() -> str:
    import pwd
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _explain_config(path_arg):
    """The configuration explain needs only for where the journal and the state are:
    a file that does not load still names them (config.journal_of), else the defaults."""
    from .checks._config import default_config, load_config
    from .core import config
    path = config.config_path(path_arg)
    try:
        return load_config(path, mount_kind=_mount_kind)
    except config.ConfigError as e:
        from .views.explain import plain_settings
        cfg = default_config()
        cfg.journal = config.journal_of(path)
        for key, value in plain_settings(path).items():
            setattr(cfg, key, value)
        print(f"slurm-hooks explain: {path} does not load ({e.problems[0]}); reading the journal "
              f"{cfg.journal}, state in {cfg.state_dir}", file=sys.stderr)
        return cfg


def _config_command(args) -> int:
    from .core import config
    if args.config_command == "check":
        return _config_check(args.file or config.config_path(args.config), args.strict, args.json)
    if args.config_command == "show":
        import json

        cfg = _load_config(args.config)
        shown = config.as_dict(cfg)
        # Not a setting: which backend slurm.backend resolves to here, and why.
        from .slurm.connect import choose
        from .slurm.scontrol import Slurm
        choice = choose(cfg.slurm, Slurm(cfg.slurm))
        shown["slurm_backend_in_use"] = {"backend": choice.backend, "why": choice.why,
                                         **({"error": choice.error} if choice.error else {})}
        print(json.dumps(shown, indent=2))
        return EXIT_OK
    raise AssertionError(args.config_command)


def _config_check(path: str | None, strict: bool, as_json: bool) -> int:
    """Valid (exit 0, `FILE: OK`), or not (2, a line per problem); then what this node
    says of the filesystems to probe: warnings, errors with --strict."""
    import json

    from .checks._config import load_config
    from .core import config
    from .views.configcheck import path_check, probe_plan, probe_warnings, render_plan
    if path is None:
        from .checks._config import default_config
        text = "no configuration file given or found; the built-in defaults are in use"
        cfg = default_config()
        plan = probe_plan(cfg)
        clock = _requeue_clock(cfg)
        print(json.dumps({"file": None, "ok": True, "problems": [], "warnings": [], "note": text, "plan": plan,
                          "requeue_clock": clock})
              if as_json else "\n".join([text, *render_plan(plan), *clock]))
        return EXIT_OK
    try:
        cfg = load_config(path, cache_dir=None, mount_kind=_mount_kind)  # the file as it is now, not a cached copy
    except config.ConfigError as e:
        if as_json:
            print(json.dumps({"file": path, "ok": False, "problems": e.problems, "warnings": []}, indent=2))
        print(f"slurm-hooks: configuration error:\n{e}", file=sys.stderr)
        return EXIT_USAGE
    found, notes = path_check(cfg)
    warnings = probe_warnings(path) + [f"{path}: {w}" for w in found]
    ok = not (strict and warnings)
    plan = probe_plan(cfg)
    clock = _requeue_clock(cfg)
    if as_json:
        print(json.dumps({"file": path, "ok": ok, "problems": warnings if strict else [],
                          "warnings": [] if strict else warnings, "notes": notes, "plan": plan,
                          "requeue_clock": clock}, indent=2))
    else:
        label = "error" if strict else "warning"
        for w in warnings:
            print(f"{label}: {w}", file=sys.stderr)
        print(f"{path}: OK" + (f" ({len(warnings)} warning{'s' * (len(warnings) != 1)})" if warnings else "")
              if ok else f"{path}: {len(warnings)} error{'s' * (len(warnings) != 1)} (--strict)")
        if notes:
            print("\n".join(f"note: {n}" for n in notes))
        # What this node's runs will probe, and why: seen before the first drain.
        print("\n".join(render_plan(plan)))
        print("\n".join(clock))
    return EXIT_OK if ok else EXIT_USAGE


def _requeue_clock(cfg) -> list[str]:
    """How soon a requeued job whose task cannot die runs again on this cluster, from
    slurm.conf (read in a hang-safe child) and `scontrol --version` (no RPC)."""
    from .host.runner import Runner
    from .slurm.api import SlurmError
    from .slurm.conffile import read_settings
    from .slurm.scontrol import Slurm
    from .views.requeueclock import lines
    try:
        version = Slurm(cfg.slurm).version()
    except SlurmError:
        version = ""
    return lines(read_settings(cfg.slurm.conf, Runner()), version, cfg)


def _one_shot() -> None:
    """A node command runs for seconds at most and makes next to no cyclic garbage:
    the cyclic collector only costs it time, during the imports and, in the forked
    probe children, by touching (and so copying) every page of the parent's heap."""
    import gc
    gc.disable()


def healthcheck_main() -> int:
    """Entry point for HealthCheckProgram (run by slurmd with no arguments)."""
    _one_shot()
    cfg = _hook_config("healthcheck", None)
    return cfg if isinstance(cfg, int) else _healthcheck(cfg, dry_run=False)


def _hook_main(hook: str) -> int:
    _one_shot()
    from .run.hooks import run_hook
    cfg = _hook_config(hook, None)
    return cfg if isinstance(cfg, int) else run_hook(cfg, hook)


def prolog_main() -> int:
    """Entry point for Prolog= (run by slurmd with no arguments)."""
    return _hook_main("prolog")


def epilog_main() -> int:
    """Entry point for Epilog= (run by slurmd with no arguments)."""
    return _hook_main("epilog")


def exit_now(code: int) -> None:
    """The launchers' last step: flush stdout and stderr and end the process at once,
    without the interpreter's teardown (freeing every module costs milliseconds of each
    run). Nothing here needs it: every file is closed when written, nothing registers
    exit handlers, children are reaped or detached."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)             # a closed pipe: let the interpreter say so
    import os
    os._exit(code)


def build_parser():
    """The argument parser; packaging/gendocs.py builds the man page and the shell
    completion from it, so they cannot drift from what the program accepts."""
    return _parser()


if __name__ == "__main__":
    sys.exit(main())


def _mount_kind(path: str) -> str | None:
    # What the loader asks of this host: read only for a recovery setting to check.
    from .host.mounts import fstype_at
    return fstype_at(path)
