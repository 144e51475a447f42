pytest_plugins = ["mounts_fixtures"]

import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from . import heavy
    from .slurmcluster import SlurmCluster
except ImportError:
    import heavy
    from slurmcluster import SlurmCluster

# The fixtures that start a real Slurm cluster. A test using any of them is
# Slurm-facing: it is marked `slurm_cluster`, and it is what a session against another
# Slurm (--slurm-prefix) runs: once, with slurm-hooks' default backend (auto), or once
# per backend when it is marked `per_backend` (a test of the backends' Slurm calls
# themselves: tests/test_slurm_contract.py and the semantics tests).
CLUSTER_FIXTURES = frozenset({"cluster", "clean_cluster", "scale_cluster"})
BACKENDS = ("scontrol", "pyslurm")
HOW_TO_BUILD = ("set SLURM_SRC=/path/to/slurm-25.11.x.tar.xz (a Slurm source release) and run "
                "`bash tests/run.sh`, which builds it (tests/build_slurm.sh) and pyslurm against it")


def pytest_addoption(parser):
    group = parser.getgroup("slurm", "which Slurm the test cluster runs")
    group.addoption("--slurm-prefix", default=os.environ.get("SLURM_HOOKS_TEST_SLURM_PREFIX") or None,
                    help="run only the Slurm-facing tests, on a cluster of the Slurm installed "
                    "under this prefix (tests/build_slurm.sh prints it), once per backend; "
                    "default: the whole suite on the distribution's Slurm")
    group.addoption("--slurm-missing", default=None, metavar="WHY",
                    help="the Slurm to test is not available: skip the Slurm-facing tests, saying WHY")
    group.addoption("--host-paths", default="all", choices=("all", "without", "only"),
                    help="the tests that take over slurm-hooks' own host paths (/etc/slurm-hooks, "
                    "/var/log/slurm-hooks, ...: they install the packages): all, without them, or "
                    "only them (tests/run.sh runs them after the two sessions side by side, "
                    "whose private copies of those paths are mounts on them)")
    group.addoption("--slurm-backends", default=None,
                    help="comma-separated slurm.backend values each Slurm-facing test runs with "
                    "(default with --slurm-prefix: scontrol,pyslurm; else slurm-hooks' default, auto)")


def pytest_configure(config):
    _stop_on_sigterm()
    config.addinivalue_line("markers", "slurm_cluster: uses a real Slurm test cluster (set automatically)")
    config.addinivalue_line("markers", "per_backend: a Slurm-facing test of slurm-hooks' Slurm backend "
                            "itself: run once per backend (--slurm-backends), not once per Slurm version")
    config.addinivalue_line("markers", "built_slurm: needs the Slurm built from source and pyslurm "
                            "built for it (runs in the --slurm-prefix session only)")


def _other_slurm(config) -> bool:
    return bool(config.getoption("--slurm-prefix") or config.getoption("--slurm-missing"))


def _backends(config) -> list[str] | None:
    given = config.getoption("--slurm-backends")
    if given:
        return [b.strip() for b in given.split(",") if b.strip()]
    return list(BACKENDS) if _other_slurm(config) else None


def _slurm_facing(fixturenames) -> bool:
    return bool(CLUSTER_FIXTURES & set(fixturenames))


def pytest_generate_tests(metafunc):
    backends = _backends(metafunc.config)
    if backends and _slurm_facing(metafunc.fixturenames) and \
            metafunc.definition.get_closest_marker("per_backend"):
        metafunc.fixturenames.append("slurm_backend")
        metafunc.parametrize("slurm_backend", backends, indirect=True)


# The fixture of the tests that move slurm-hooks' host paths aside and install the
# packages there (tests/test_packaging.py, tests/test_newcomer.py).
HOST_PATHS_FIXTURE = "taken_over"


def pytest_collection_modifyitems(config, items):
    other = _other_slurm(config)
    missing = config.getoption("--slurm-missing")
    host_paths = config.getoption("--host-paths")
    keep, dropped = [], []
    for item in items:
        takes_over = HOST_PATHS_FIXTURE in getattr(item, "fixturenames", ())
        if host_paths != "all" and takes_over != (host_paths == "only"):
            dropped.append(item)
            continue
        facing = _slurm_facing(getattr(item, "fixturenames", ()))
        if facing:
            item.add_marker("slurm_cluster")
            if missing:
                item.add_marker(pytest.mark.skip(reason=f"{missing}: {HOW_TO_BUILD}"))
        built_only = item.get_closest_marker("built_slurm") is not None
        (keep if (facing or not other) and (other or not built_only) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def slurm_backend(request):
    """slurm.backend of this run of a Slurm-facing test (see pytest_generate_tests)."""
    return getattr(request, "param", None)


@pytest.fixture(autouse=True)
def _backend_under_test(request):
    """Points the cluster's slurm-hooks configurations (cluster.hooks_slurm()) at the
    backend this test runs with."""
    # The parameter, not the fixture: pytest does not add a fixture that only
    # pytest_generate_tests names to the test's closure, so it would never be set up.
    callspec = getattr(request.node, "callspec", None)
    backend = callspec.params.get("slurm_backend") if callspec is not None else None
    if backend is None or not _slurm_facing(request.fixturenames):
        yield
        return
    clusters = [request.getfixturevalue(n) for n in ("cluster", "scale_cluster") if n in request.fixturenames]
    if "clean_cluster" in request.fixturenames:
        clusters.append(request.getfixturevalue("cluster"))
    for c in clusters:
        c.backend = backend
    yield
    for c in clusters:
        c.backend = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Side by side with the other session (tests/heavy.py): a test waits while a scale
    module runs there, setup and teardown included; the scale tests themselves hold the
    lock through their module's cluster."""
    if "scale_cluster" in getattr(item, "fixturenames", ()):
        yield
        return
    with heavy.beside():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed cluster test's report carries what each node's health check did, run by
    run (the journals under its tmp_path): a failure seen only in CI can be read there."""
    outcome = yield
    report = outcome.get_result()
    if report.passed or report.skipped or not CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return
    root = getattr(item, "funcargs", {}).get("tmp_path")
    if isinstance(root, Path):
        try:
            story = journal_story(root)
        except Exception as e:          # the report of a failure never fails itself
            story = f"(the journals could not be read: {e!r})"
        if story:
            report.sections.append(("slurm-hooks journals", story))


def journal_story(root: Path, last: int = 25) -> str:
    """Each node's last runs, one line each: when, its status, what it did with which
    outcome (and for a recovery, the jobs it waits for), and its notes."""
    import json
    lines = []
    for path in sorted(root.glob("journal-*.jsonl")):
        runs = []
        for text in path.read_text(errors="replace").splitlines():
            try:
                r = json.loads(text)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("event") == "run":
                runs.append(r)
        lines.append(f"--- {path.name}: {len(runs)} runs, the last {min(last, len(runs))}")
        for r in runs[-last:]:
            acts = []
            for a in r.get("actions") or []:
                one = f"{a.get('kind')}:{a.get('outcome')}" + (f"/{a['code']}" if a.get("code") else "")
                rec = a.get("recovery") or {}
                if rec.get("jobs"):
                    one += f"(jobs {','.join(map(str, rec['jobs']))})"
                acts.append(one)
            bad = []
            for c in r.get("checks") or []:
                for f in (c.get("findings") or []) if isinstance(c, dict) else []:
                    if f.get("severity") != "ok" or f.get("status") != "ok":
                        ev = f.get("evidence") or {}
                        bad.append(f"{f.get('check')}={f.get('status')}/{f.get('severity')}"
                                   + (f"(job {f['job']})" if f.get("job") else "")
                                   + (f"(dev {ev['mount_dev']})" if ev.get("mount_dev") else ""))
                if isinstance(c, dict) and c.get("error"):
                    bad.append(f"{c.get('name')}:error")
            notes = "; ".join(str(n)[:100] for n in r.get("notes") or [] if not str(n).startswith("slurm backend"))
            lines.append(f"{r.get('time')} {r.get('status')} {r.get('duration')}s checks[{' '.join(bad)}] "
                         f"acts[{' '.join(acts)}] {notes}".rstrip())
    return "\n".join(lines)


def _new_cluster(request, root, **kw) -> SlurmCluster:
    prefix = request.config.getoption("--slurm-prefix")
    return SlurmCluster(root, prefix=prefix, **kw)


@pytest.fixture(scope="session")
def cluster(request, tmp_path_factory):
    """A real 3-node Slurm cluster (n1, n2, n3) on 127.0.0.1, once per session: Debian's
    Slurm, or the one under --slurm-prefix.

    Fails (never skips) with a clear message when the Slurm/munge programs are
    missing or the daemons do not come up.  Always stopped at session end."""
    slurm = _new_cluster(request, tmp_path_factory.mktemp("slurm"))
    try:
        slurm.start()
        yield slurm
    finally:
        slurm.stop()


@pytest.fixture
def clean_cluster(cluster):
    """``cluster`` with no jobs, the initial slurm.conf and all nodes IDLE,
    before and after the test (restarts daemons a test killed)."""
    cluster.reset()
    yield cluster
    cluster.reset()


SCALE_NODES = tuple(f"s{i}" for i in range(1, 49))


@pytest.fixture(scope="module")
def scale_cluster(request, tmp_path_factory):
    """A second, separate Slurm cluster of 48 slurmd (s1..s48) on this one host, for
    the scale tests only; its own names, ports and cgroups, so it runs beside
    ``cluster``. Started per module and stopped after it (48 slurmd hold memory).
    Beside another session (tests/run.sh), the module runs alone (tests/heavy.py)."""
    with heavy.alone():
        slurm = _new_cluster(request, tmp_path_factory.mktemp("slurm48"), nodes=SCALE_NODES,
                             start_timeout=240.0, cluster_name="hooks48")
        try:
            slurm.start()
            yield slurm
        finally:
            slurm.stop()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """root's ssh onto every test node name (n1..n3, s1..s48), all 127.0.0.1: one real
    sshd for the session and an ssh_config that maps the names to it (tests/sshd.py).
    `slurm-hooks diagnose` reaches the nodes of another user's job this way."""
    try:
        from .sshd import Sshd
    except ImportError:
        from sshd import Sshd
    server = Sshd(tmp_path_factory.mktemp("sshd"), ("n1", "n2", "n3", *SCALE_NODES))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def root_only_dir():
    """A directory whose whole path from / is root's alone (owner root, writable by no one
    else), as a site check's must be: pytest's tmp_path lies under /tmp, which anyone can
    write to. Removed afterwards."""
    import shutil
    path = Path(tempfile.mkdtemp(prefix="shk-root-only-", dir="/var/lib"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- a session that is stopped, and one that ends ---------------------------------------
def _terminate(signum, frame):
    # SIGTERM (CI's timeout, `kill`) ends the session the way Ctrl-C does: pytest then
    # tears the fixtures down, so the Slurm cluster stops slurmctld, slurmd and the
    # munged it started, and the hung mounts are aborted. A second SIGTERM kills.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_on_sigterm():
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _terminate)


# What the suite may not leave behind. The configuration cache in /run/slurm-hooks is
# keyed by the configuration file: the entries the suite's own files made are its to
# remove. In /tmp only the suite's own names count (a shared host has others' files).
WATCHED = ("/var/log/slurm-hooks", "/run/slurm-hooks", "/tmp")
SUITE_TMP_NAMES = ("shk-", "child-", ".slurm-hooks", "slurm-hooks-", "fusefs")


def _entries(directory: str) -> dict[str, tuple]:
    """name -> (size, mtime) of what is in the directory."""
    out = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        try:
            st = os.lstat(os.path.join(directory, name))
            out[name] = (st.st_size, st.st_mtime_ns)
        except OSError:
            continue
    return out


def own_records(path: str, offset: int, marks: tuple[str, ...]) -> list[str]:
    """The lines appended to a journal since `offset` that name one of `marks` (the
    session's basetemp, its checkout): a run of this session's writes its config's path
    there. Other sessions on a shared host write the same journal: their lines are theirs.
    A journal now shorter than `offset` was replaced: all of it is read."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size >= offset:
                f.seek(offset)
            data = f.read()
    except OSError:
        return []
    return [ln for ln in data.decode("utf-8", "replace").splitlines() if any(m in ln for m in marks)]


def left_behind(before: dict[str, dict], after: dict[str, dict], ours=None) -> dict[str, list[str]]:
    """What is new or changed in each watched directory since `before` (in /tmp: only
    names the suite makes; pytest's own basetemp root is pytest's to keep). `ours(directory,
    name)`, when given, says whether a change is this session's own doing."""
    out = {}
    for directory in WATCHED:
        old, new = before.get(directory, {}), after.get(directory, {})
        changed = sorted(n for n, v in new.items() if old.get(n) != v and n != "journal.jsonl.lock")
        if directory == "/tmp":
            changed = [n for n in changed if n.startswith(SUITE_TMP_NAMES) and n not in old]
        if ours is not None:
            changed = [n for n in changed if ours(directory, n)]
        if directory == "/run/slurm-hooks":
            changed = [n for n in changed if n not in old]      # the cache may refresh its own entries
        if changed:
            out[directory] = changed
    return out


@pytest.fixture(scope="session", autouse=True)
def leaves_nothing_behind(tmp_path_factory):
    """Every temporary file of the suite goes under pytest's basetemp (TMPDIR points
    there for the tests and everything they start), and at the end nothing new is in
    the host's journal directory, /run/slurm-hooks or /tmp."""
    before = {d: _entries(d) for d in WATCHED}
    tmp = tmp_path_factory.getbasetemp() / "tmp"
    tmp.mkdir(exist_ok=True)
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = str(tmp)
    os.environ["TMPDIR"] = str(tmp)
    yield
    tempfile.tempdir = saved[0]
    if saved[1] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[1]
    _forget_cached_configs(before["/run/slurm-hooks"])
    marks = (str(tmp_path_factory.getbasetemp()), str(Path(__file__).resolve().parent.parent))

    def ours(directory: str, name: str) -> bool:
        if directory == "/tmp" and name == ".slurm-hooks":
            # The probes' own directory below the probed /tmp (root's, 0700): it stays,
            # as on every node whose /tmp is probed; it must hold nothing.
            return bool(os.listdir("/tmp/.slurm-hooks"))
        if directory == "/var/log/slurm-hooks" and name == "journal.jsonl":
            return bool(own_records(f"{directory}/{name}", before[directory].get(name, (0, 0))[0], marks))
        if directory == "/tmp" and name.startswith("shk-sec-"):
            attacker = sys.modules.get("attacker")
            return attacker is not None and name in attacker.MADE_IN_TMP
        return True
    left = left_behind(before, {d: _entries(d) for d in WATCHED}, ours)
    assert not left, f"the test session left these behind: {left}"


def _forget_cached_configs(before: dict) -> None:
    """Remove the configuration-cache entries this session made (new since it began), and
    the kept pyslurm try (slurm/pyslurm.py PROBE_CACHE) of runs slurmd started."""
    from slurm_hooks.slurm.pyslurm import PROBE_CACHE
    cache = Path("/run/slurm-hooks")
    for name in set(_entries(str(cache))) - set(before):
        if name.startswith("config") and name.endswith(".json") or name == PROBE_CACHE:
            try:
                (cache / name).unlink()
            except OSError:
                pass
    if not before:
        try:
            cache.rmdir()           # the suite made it: leave no empty directory
        except OSError:
            pass
