"""The Slurm backend: the one interface the rest of slurm-hooks asks Slurm through, and
the choice of its implementation (`slurm.backend: auto | scontrol | pyslurm`).

Two implementations, with the same results and the same errors (`SlurmError`,
`SlurmUnavailable` when no slurmctld answers, `OutOfTime` when the run's deadline is
spent, so the caller spools the action):

- `scontrol.Slurm`: scontrol, a program per call (works with every Slurm release);
- `pyslurm.PyslurmBackend`: libslurm through the pyslurm binding, each call in a
  hang-safe child with the same deadline. pyslurm only exists for the Slurm major.minor
  it was built against, and `import pyslurm` initialises libslurm, which exits the
  whole process (Slurm's `fatal()`) when no slurm.conf can be found: so it is never
  imported in this process, only in the child, and only when a Slurm call is due.

`auto` takes pyslurm only when its distribution says it was built for the running
Slurm's major.minor (`scontrol --version`) and it then imports and initialises in a
child; otherwise scontrol, and says why (the run's notes, hence the journal, and
`slurm-hooks config show`).
"""
from __future__ import annotations

from .. import TYPE_CHECKING
from .api import Choice, SlurmError, major_minor

if TYPE_CHECKING:
    from .api import SlurmBackend


def pyslurm_distribution() -> str | None:
    """The installed pyslurm's version (X.Y.Z: built for Slurm X.Y), read from its
    distribution metadata: pyslurm itself is never imported in this process."""
    from importlib import metadata
    try:
        return metadata.version("pyslurm")
    except metadata.PackageNotFoundError:
        return None


def choose(cfg, scontrol) -> Choice:
    """Which backend a run uses, and why. `scontrol`: a `scontrol.Slurm` for the version
    question. Costs nothing unless the setting is auto or pyslurm: then one
    `scontrol --version` (no RPC) and, on a version match, one child importing pyslurm."""
    setting = cfg.backend
    if setting == "scontrol":
        return Choice("scontrol", "slurm.backend: scontrol")
    why = _pyslurm_unusable(cfg, scontrol, forced=setting == "pyslurm")
    if why is None:
        running = scontrol.running_version
        return Choice("pyslurm", f"{setting}: pyslurm {pyslurm_distribution()} built for the running "
                      f"Slurm {running}" if running else
                      f"{setting}: pyslurm {pyslurm_distribution()}, the running Slurm's version unknown")
    if setting == "pyslurm":
        return Choice("pyslurm", "slurm.backend: pyslurm", error=f"slurm.backend is pyslurm, but {why}")
    return Choice("scontrol", f"auto: {why}")


def _pyslurm_unusable(cfg, scontrol, forced: bool) -> str | None:
    built = pyslurm_distribution()
    if built is None:
        return "pyslurm is not installed"
    try:
        running = scontrol.version()
    except SlurmError as e:
        if not forced:
            return f"the running Slurm's version is unknown ({e})"
        running = None      # forced: whether pyslurm itself works says more (below)
    if running is not None and major_minor(built) != major_minor(running):
        return (f"pyslurm {built} was built for Slurm {major_minor(built)}, the running Slurm is "
                f"{running}")
    from .pyslurm import probe
    try:
        return probe(cfg, scontrol.timeout_left())
    except SlurmError as e:
        return f"pyslurm could not be tried: {e}"


def open_backend(cfg, deadline: float | None = None) -> SlurmBackend:
    """The backend a run talks to Slurm through; `.choice` says which and why."""
    from .scontrol import Slurm
    scontrol = Slurm(cfg)
    scontrol.deadline = deadline
    if cfg.backend == "scontrol":
        scontrol.choice = Choice("scontrol", "slurm.backend: scontrol")
        return scontrol
    choice = choose(cfg, scontrol)
    if choice.backend == "scontrol":
        scontrol.choice = choice
        return scontrol
    from .pyslurm import PyslurmBackend
    return PyslurmBackend(cfg, scontrol, choice)
