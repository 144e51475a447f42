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
`slurm-hooks config show`). That child (importing pyslurm, 100 to 400 ms) is the
largest cost of a failing run that asks Slurm for one read: a success is kept in the
cache directory (pyslurm.py PROBE_CACHE, tmpfs: gone at boot) for the same pyslurm installation
(its metadata file and that file's time), the same running Slurm and the same
slurm.conf, at most PROBE_MAX_AGE seconds, and forgotten as soon as a pyslurm call
fails to import or initialise. A failed probe is not kept: it is tried again.
"""
from __future__ import annotations

import os
import sys

from .. import TYPE_CHECKING
from .api import Choice, SlurmError, major_minor

if TYPE_CHECKING:
    from .api import SlurmBackend


def pyslurm_installed() -> tuple[str, str, int] | None:
    """The installed pyslurm: (its version X.Y.Z, built for Slurm X.Y; its metadata
    file; that file's modification time in ns), found on sys.path as importlib.metadata
    finds a distribution (`pyslurm-*.dist-info/METADATA`, or an egg's PKG-INFO), without
    importing importlib.metadata (about 40 ms a run) or pyslurm."""
    for entry in sys.path:
        if not os.path.isabs(entry):
            continue        # the directory the run started in (slurmd's): never listed
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for name in names:
            low = name.lower()
            if not low.startswith("pyslurm-"):
                continue
            if low.endswith(".dist-info"):
                meta = os.path.join(entry, name, "METADATA")
            elif low.endswith(".egg-info"):
                meta = os.path.join(entry, name, "PKG-INFO") if os.path.isdir(os.path.join(entry, name)) \
                    else os.path.join(entry, name)
            else:
                continue
            try:
                with open(meta, "rb") as f:
                    stamp = os.fstat(f.fileno()).st_mtime_ns
                    head = f.read(8192).decode("utf-8", "replace")
            except OSError:
                continue
            # The headers end at the first blank line; Version is one of them.
            for line in head.split("\n\n", 1)[0].splitlines():
                if line.startswith("Version:") and line[8:].strip():
                    return line[8:].strip(), meta, stamp
    return None


def choose(cfg, scontrol) -> Choice:
    """Which backend a run uses, and why. `scontrol`: a `scontrol.Slurm` for the version
    question. Costs nothing unless the setting is auto or pyslurm: then one
    `scontrol --version` (no RPC) and, on a version match, one child importing pyslurm
    unless a run before this one did so with success (pyslurm.py `tried`)."""
    setting = cfg.backend
    if setting == "scontrol":
        return Choice("scontrol", "slurm.backend: scontrol")
    found = pyslurm_installed()
    why = _pyslurm_unusable(cfg, scontrol, found, forced=setting == "pyslurm")
    if why is None and found is not None:
        running = scontrol.running_version
        return Choice("pyslurm", f"{setting}: pyslurm {found[0]} built for the running "
                      f"Slurm {running}" if running else
                      f"{setting}: pyslurm {found[0]}, the running Slurm's version unknown")
    if setting == "pyslurm":
        return Choice("pyslurm", "slurm.backend: pyslurm", error=f"slurm.backend is pyslurm, but {why}")
    return Choice("scontrol", f"auto: {why}")


def _pyslurm_unusable(cfg, scontrol, found: tuple[str, str, int] | None, forced: bool) -> str | None:
    if found is None:
        return "pyslurm is not installed"
    built = found[0]
    try:
        running = scontrol.version()
    except SlurmError as e:
        if not forced:
            return f"the running Slurm's version is unknown ({e})"
        running = None      # forced: whether pyslurm itself works says more (below)
    if running is not None and major_minor(built) != major_minor(running):
        return (f"pyslurm {built} was built for Slurm {major_minor(built)}, the running Slurm is "
                f"{running}")
    # Whose probe a kept one is: this pyslurm installation, this Slurm, this slurm.conf,
    # this interpreter (the child's).
    key = [*found, running, cfg.conf or os.environ.get("SLURM_CONF", ""), sys.executable]
    from .pyslurm import tried
    try:
        return tried(cfg, scontrol.timeout_left(), key)
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
