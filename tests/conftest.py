pytest_plugins = ["mounts_fixtures"]

import os
import signal
import tempfile
from pathlib import Path

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from .slurmcluster import SlurmCluster
except ImportError:
    from slurmcluster import SlurmCluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A real 3-node Slurm cluster (n1, n2, n3) on 127.0.0.1, once per session.

    Fails (never skips) with a clear message when the Slurm/munge programs are
    missing or the daemons do not come up.  Always stopped at session end."""
    slurm = SlurmCluster(tmp_path_factory.mktemp("slurm"))
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


SCALE_NODES = tuple(f"s{i}" for i in range(1, 33))


@pytest.fixture(scope="module")
def cluster32(tmp_path_factory):
    """A second, separate Slurm cluster of 32 slurmd (s1..s32) on this one host, for
    the scale tests only; its own names, ports and cgroups, so it runs beside
    ``cluster``. Started per module and stopped after it (32 slurmd hold memory)."""
    slurm = SlurmCluster(tmp_path_factory.mktemp("slurm32"), nodes=SCALE_NODES,
                         start_timeout=180.0, cluster_name="hooks32")
    try:
        slurm.start()
        yield slurm
    finally:
        slurm.stop()


# --- a session that is stopped, and one that ends ---------------------------------------
def _terminate(signum, frame):
    # SIGTERM (CI's timeout, `kill`) ends the session the way Ctrl-C does: pytest then
    # tears the fixtures down, so the Slurm cluster stops slurmctld, slurmd and the
    # munged it started, and the hung mounts are aborted. A second SIGTERM kills.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
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


def left_behind(before: dict[str, dict], after: dict[str, dict]) -> dict[str, list[str]]:
    """What is new or changed in each watched directory since `before` (in /tmp: only
    names the suite makes; pytest's own basetemp root is pytest's to keep)."""
    out = {}
    for directory in WATCHED:
        old, new = before.get(directory, {}), after.get(directory, {})
        changed = sorted(n for n, v in new.items() if old.get(n) != v and n != "journal.jsonl.lock")
        if directory == "/tmp":
            changed = [n for n in changed if n.startswith(SUITE_TMP_NAMES) and n not in old]
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
    left = left_behind(before, {d: _entries(d) for d in WATCHED})
    assert not left, f"the test session left these behind: {left}"


def _forget_cached_configs(before: dict) -> None:
    """Remove the configuration-cache entries this session made (new since it began)."""
    cache = Path("/run/slurm-hooks")
    for name in set(_entries(str(cache))) - set(before):
        if name.startswith("config") and name.endswith(".json"):
            try:
                (cache / name).unlink()
            except OSError:
                pass
    if not before:
        try:
            cache.rmdir()           # the suite made it: leave no empty directory
        except OSError:
            pass
