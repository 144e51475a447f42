pytest_plugins = ["mounts_fixtures"]

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
