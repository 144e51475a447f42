"""What the healthy path's speed rests on keeps the behaviour it replaced.

The node commands are parsed by hand (argparse is the slow path), JSON goes through the
interpreter's C accelerator without the `json` package, data classes are defined
without the standard library's code generation, patterns compile on first use, and
probes start before the /proc scan. Each is held here to what it stands in for; the
time itself is measured in bench/ (BENCHMARKS.md), not here.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import pytest
import yaml
from helpers import SLURM_HOOKS, poll, proc_state

from slurm_hooks import cli
from slurm_hooks.core import jsonio, lazyre, records

# --- the node commands, parsed by hand -------------------------------------------------

PLAIN = [  # every plain form of the node commands: the hand parser must take these
    [*before, hook, *flags, *after]
    for hook in ("healthcheck", "prolog", "epilog")
    for before in ([], ["-c", "a.yaml"], ["--config", "a.yaml"], ["--config=a.yaml"])
    for flags in ([], ["--dry-run"], ["--json"], ["--json", "--dry-run"], ["--dry-run", "--dry-run"])
    for after in ([], ["-c", "b.yaml"], ["--config=b.yaml"], ["--config", "/etc/x y.yaml"])
]
OTHER = [  # forms argparse alone decides: the hand parser must pass them on
    [], ["healthcheck", "-h"], ["--help"], ["--version"], ["healthcheck", "--dry"], ["healthcheck", "--js"],
    ["-ca.yaml", "prolog"], ["--conf", "a.yaml", "epilog"], ["healthcheck", "--config="], ["healthcheck", "-c"],
    ["healthcheck", "-c", "--json"], ["healthcheck", "--bogus"], ["healthcheck", "extra"], ["healthcheck", "--"],
    ["prolog", "healthcheck"], ["check"], ["check", "gpu", "--json"], ["status"], ["config", "show"],
    ["diagnose", "12"], ["--dry-run", "healthcheck"], ["healthcheck", "-c", "-x.yaml"],
]


def argparse_result(argv):
    try:
        return vars(cli.build_parser().parse_args(argv))
    except SystemExit as e:
        return f"exit {e.code}"


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_plain_node_commands_parse_by_hand_as_argparse_would(argv):
    quick = cli._quick_args(argv)
    assert quick is not None, "a plain node command took the slow path"
    assert vars(quick) == argparse_result(argv)


@pytest.mark.parametrize("argv", OTHER, ids=" ".join)
def test_everything_else_goes_to_argparse(argv, capsys):
    assert cli._quick_args(argv) is None
    argparse_result(argv)               # and argparse takes it or says what is wrong


@pytest.mark.parametrize("argv, message", [
    (["healthcheck", "--bogus"], "slurm-hooks: error: unrecognized arguments: --bogus"),
    (["healthcheck", "-c"], "argument -c/--config: expected one argument"),
    (["prolog", "--dry-run", "now"], "slurm-hooks: error: unrecognized arguments: now"),
    (["healtcheck"], "argument COMMAND: invalid choice: 'healtcheck'"),
])
def test_bad_node_commands_are_refused_with_argparse_messages(argv, message):
    r = subprocess.run([str(SLURM_HOOKS), *argv], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert r.stderr.startswith("usage: slurm-hooks"), r.stderr


# --- JSON without the json package -----------------------------------------------------

VALUES = [
    {}, [], "", 0, -1, 1.5, -0.0, 1e300, True, False, None, "é\u2028\x00\x1b\ud800",
    {"b": [1, 2.5, {"c": None}], "a": "x", "ä": ["\n", "\t"]},
    {"nested": {"deep": [[[]]], "n": 123456789012345678901234567890}},
    [float("inf"), float("-inf")], {1: "int key", "s": "str key"},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
@pytest.mark.parametrize("opts", [{}, {"sort_keys": True, "separators": (",", ":")},
                                  {"ensure_ascii": False, "separators": (",", ":"), "default": str}])
def test_jsonio_writes_what_json_writes_and_reads_it_back(value, opts):
    if opts.get("sort_keys") and isinstance(value, dict) and 1 in value:
        value = {"1": value[1], "s": value["s"]}       # json itself refuses mixed key types sorted
    text = jsonio.dumps(value, **opts)
    assert text == json.dumps(value, **opts)
    assert jsonio.loads(text) == json.loads(text)
    assert jsonio.loads(text.encode("utf-8", "surrogatepass") if "\ud800" in text else text.encode()) \
        == json.loads(text)


def test_jsonio_reads_what_json_reads():
    for text in ['  {"a": [1, 2]}\n', "\t[NaN, Infinity, -Infinity]", '"\\u00e9\\ud83d\\ude00"', "1e5", "-0"]:
        ours, theirs = jsonio.loads(text), json.loads(text)
        assert repr(ours) == repr(theirs) or (math.isnan(ours[0]) and math.isnan(theirs[0]))


@pytest.mark.parametrize("text", ["", " ", "{", '{"a": 1} x', "[1,]", "nul", '"\\x"', '{"a" 1}',
                                  "\ufeff{}", "[1] [2]", b"\xff\xfe"])
def test_jsonio_refuses_what_json_refuses_with_its_message(text):
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    with pytest.raises(ValueError) as ours:
        jsonio.loads(text)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


def test_jsonio_refuses_what_json_cannot_write():
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        jsonio.dumps({"a": object()})
    with pytest.raises(ValueError, match="Circular reference"):
        x: list = []
        x.append(x)
        jsonio.dumps(x)
    assert jsonio.dumps({"a": 1}) == '{"a": 1}'        # the markers of a failed call do not linger


# --- data classes without code generation ----------------------------------------------

def pair(frozen=False):
    """The same declaration made by records and by the standard library."""
    def declare(dataclass, field):
        @dataclass(frozen=frozen)
        class Thing:
            name: str
            size: int = 0
            tags: list = field(default_factory=list)
            meta: dict = field(default_factory=dict, metadata={"kind": "map"})
            note: str | None = None
        return Thing
    return declare(records.dataclass, records.field), declare(dataclasses.dataclass, dataclasses.field)


@pytest.mark.parametrize("frozen", [False, True])
def test_records_behave_as_standard_dataclasses(frozen):
    ours, std = pair(frozen)
    for args, kwargs in [(("a",), {}), (("a", 2, ["t"]), {"note": "n"}), ((), {"name": "b", "meta": {"k": 1}})]:
        a, b = ours(*args, **kwargs), std(*args, **kwargs)
        assert repr(a).replace("pair.<locals>.declare.<locals>.", "") == \
            repr(b).replace("pair.<locals>.declare.<locals>.", "")
        assert records.asdict(a) == dataclasses.asdict(b) == dataclasses.asdict(a)
        assert a == ours(*args, **kwargs) and a != ours("other")
        assert (a == b) is False                         # another class is never equal
    assert ours("a").tags is not ours("a").tags          # a fresh default per instance
    assert [f.name for f in records.fields(ours)] == [f.name for f in dataclasses.fields(std)] \
        == [f.name for f in dataclasses.fields(ours)]
    assert records.fields(ours)[3].metadata == {"kind": "map"} == dict(dataclasses.fields(ours)[3].metadata)
    assert dataclasses.replace(ours("a"), size=5) == ours("a", 5)
    for call in (lambda c: c(), lambda c: c("a", nope=1), lambda c: c("a", name="b"), lambda c: c(*"abcdef")):
        with pytest.raises(TypeError):
            call(std)
        with pytest.raises(TypeError):
            call(ours)
    if frozen:
        for cls in (std, ours):
            with pytest.raises(TypeError):
                hash(cls("a"))                      # a list field: unhashable, as in the standard library
        from slurm_hooks.host.mounts import Mount
        assert len({Mount(1, "/", "ext4", "/dev/x", "rw", ""), Mount(1, "/", "ext4", "/dev/x", "rw", "")}) == 1
        with pytest.raises(AttributeError):
            ours("a").size = 3
    else:
        with pytest.raises(TypeError):
            hash(ours("a"))
        x = ours("a")
        x.size = 3
        assert x.size == 3


def test_records_refuse_what_dataclasses_refuse():
    with pytest.raises(ValueError):
        @records.dataclass
        class Shared:
            items: list = []            # noqa: RUF012 - the mistake under test
    with pytest.raises(TypeError):
        @records.dataclass
        class Order:
            a: int = 1
            b: int


def test_post_init_runs_once_with_the_fields_set():
    seen = []

    @records.dataclass
    class P:
        a: int
        b: int = 2

        def __post_init__(self):
            seen.append((self.a, self.b))
    P(1)
    assert seen == [(1, 2)]


# --- patterns compiled on first use ----------------------------------------------------

def test_lazy_patterns_match_as_compiled_ones():
    source = r"job_(?P<job>\d+)"
    lazy = lazyre.compile(source)
    assert lazy.match("job_12/x").group("job") == re.compile(source).match("job_12/x").group("job")
    assert lazy.sub("J", "a job_1 b job_22") == "a J b J" and lazy.pattern == source
    assert lazy.search("nothing") is None


# --- what the healthy path imports -----------------------------------------------------

# The standard modules whose import costs more than the rest of a healthy run, YAML, the
# configuration's validator (only a file not in the cache is validated) and what only a
# run that acts needs (the spool, the ledger, the way back after a reboot), what only a
# run that saw a task in D needs (its diagnosis and what that reads), and a check the
# health check does not run (its metrics table is of the checks that ran).
HEAVY = ("re", "json", "enum", "dataclasses", "inspect", "argparse", "typing", "signal", "shutil", "yaml",
         "slurm_hooks.core.config_yaml", "slurm_hooks.act.spool", "slurm_hooks.act.ledger",
         "slurm_hooks.act.after_reboot", "slurm_hooks.checks._stuck_diagnosis", "slurm_hooks.checks._stuck_waits",
         "slurm_hooks.checks._stuck_reads", "slurm_hooks.decide.mount_incident", "slurm_hooks.host.waits",
         "slurm_hooks.host.syscalls", "slurm_hooks.host.jobs", "slurm_hooks.checks.leftovers",
         "slurm_hooks.decide.policy", "slurm_hooks.decide.correlate")


def test_a_healthy_run_imports_none_of_the_heavy_modules(tmp_path):
    """The healthy health check (real run and dry run) through the node entry points,
    config from the cache: none of the standard modules whose import cost more than the
    rest of the run. (A failing run may import anything it needs.)"""
    (tmp_path / "fs").mkdir()
    (tmp_path / "prom").mkdir(mode=0o755)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
                                   "filesystems": [{"path": str(tmp_path / "fs")}, {"path": "/dev/shm"}],
                                   "prometheus_textfile_dir": str(tmp_path / "prom")}))
    # What the run imports, not what the interpreter had before it: an editable install's
    # import hook (a .pth file) loads `re` and `enum` at startup, before any of ours.
    code = ("import sys\nbefore = set(sys.modules)\n"
            "from slurm_hooks import cli\nfrom slurm_hooks.core import config\n"
            # the validated-configuration cache in a scratch directory, not the host's /run
            f"config.load.__defaults__ = ({str(tmp_path / 'cache')!r}, None, None, None)\n"
            "rc = cli.healthcheck_main() if sys.argv[1] == 'real' else cli.main(['healthcheck', '--dry-run'])\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules and m not in before), rc, file=sys.stderr)\n")
    env = {"SLURMD_NODENAME": "testnode", "SLURM_HOOKS_CONFIG": str(cfg)}
    # A node of its own: in a PID namespace, another test's task in D elsewhere on this
    # host is not seen (a task in D is a reason to import the diagnosis).
    alone = ["/usr/bin/unshare", "--pid", "--fork", "--mount-proc"]
    subprocess.run([*alone, sys.executable, "-I", "-c", code, "real"], env=env, capture_output=True, timeout=60)
    for how in ("real", "dry"):
        r = subprocess.run([*alone, sys.executable, "-I", "-c", code, how], env=env, capture_output=True, text=True,
                           timeout=60)
        assert "result: HEALTHY" in r.stdout, (r.stdout, r.stderr)
        assert r.stderr.strip().splitlines()[-1] == "[] 0", (how, r.stderr)
    assert "slurm_hooks_check_status" in (tmp_path / "prom" / "slurm_hooks_testnode.prom").read_text()


def _state_files(directory) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in directory.glob("*.json")}


def test_healthy_runs_rewrite_only_the_state_that_changed(tmp_path):
    """A healthy health check rewrites the metrics state (its last success, which its
    textfile shows) and nothing else it kept; a healthy prolog, which writes no textfile
    and took no action, writes no state file at all. Each rewrite is a file created and
    renamed on the node's disk, on every run or every job start."""
    (tmp_path / "fs").mkdir()
    (tmp_path / "prom").mkdir(mode=0o755)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
                                   "filesystems": [{"path": str(tmp_path / "fs")}],
                                   "prometheus_textfile_dir": str(tmp_path / "prom")}))
    code = ("import sys\n"
            "from slurm_hooks import cli\nfrom slurm_hooks.core import config\n"
            f"config.load.__defaults__ = ({str(tmp_path / 'cache')!r}, None, None, None)\n"
            "sys.exit(getattr(cli, sys.argv[1])())\n")
    env = {"SLURMD_NODENAME": "testnode", "SLURM_HOOKS_CONFIG": str(cfg)}
    # A job of an unprivileged user, as every job on a real cluster is.
    job = dict(env, SLURM_JOB_ID="7", SLURM_JOB_UID="65534", SLURM_JOB_USER="nobody",
               SLURM_SCRIPT_CONTEXT="prolog_slurmd")

    def run(entry, environ):
        r = subprocess.run([sys.executable, "-I", "-c", code, entry], env=environ, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, (entry, r.stdout, r.stderr)

    state = tmp_path / "state" / "testnode"
    run("healthcheck_main", env)
    run("healthcheck_main", env)            # the memory check's first look is behind it
    before = _state_files(state)
    assert {"metrics.json", "memory.json"} <= set(before), before
    run("prolog_main", job)
    assert _state_files(state) == before
    run("healthcheck_main", env)
    after = _state_files(state)
    assert {k for k in after if after[k] != before.get(k)} == {"metrics.json"}


# --- probes started before the /proc scan ----------------------------------------------

def _open_under(progress, path):
    progress("open")
    open(os.path.join(path, "probe"), "a")


def test_this_runs_probes_in_d_are_not_taken_for_stuck_tasks(hung_mount, tmp_path):
    """Probes now run while the stuck-task scan reads /proc: a probe of this run caught
    in D is its own check's business, while any other task in D still is found."""
    from slurm_hooks.checks import Context
    from slurm_hooks.checks._config import default_config as Config
    from slurm_hooks.checks.stuck_tasks import StuckTasksCheck
    from slurm_hooks.core.state import StateStore
    from slurm_hooks.host.runner import HUNG, Runner, Task

    other = subprocess.Popen([sys.executable, "-c", "import sys; open(sys.argv[1] + '/other', 'a')",
                              str(hung_mount.path)], start_new_session=True)
    state = StateStore(str(tmp_path / "state"))
    runner = Runner(state)
    batch = runner.start([Task("filesystem:hung", _open_under, (str(hung_mount.path),), 6.0)])
    [probe] = runner.running()
    try:
        poll(lambda: proc_state(probe) == "D" and proc_state(other.pid) == "D", 5, what="both in D")
        cfg = Config(kernel_log=str(tmp_path / "kmsg"))
        (tmp_path / "kmsg").write_text("")
        cfg.stuck_tasks.sample_window = 0.1
        cfg.stuck_tasks.listpids_fallback = False
        ctx = Context(cfg, "testnode", state, runner)
        check = StuckTasksCheck()
        # The scan runs in a child of its own while the probe is still at work.
        scan = runner.run(check.tasks(ctx))
        about = {f.evidence.get("pid") for f in check.findings(ctx, scan)}
        assert other.pid in about, "the scan found no task in D at all"
        assert probe not in about
    finally:
        outcome = runner.collect(batch)["filesystem:hung"]
        other.kill()
    assert outcome.status == HUNG and runner.running() == set()
