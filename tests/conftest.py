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
