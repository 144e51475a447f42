"""Failures of slurm-hooks' own local machinery, as opposed to findings about the node.

The state directory, the journal, the hook lock, the metrics file and the configuration
cache live on local disk. When one of them is unusable (a full or read-only disk, a
missing directory, wrong permissions) that is slurm-hooks' own problem, not a job's:
the entry points (cli.py, hooks.py) report it on stderr and syslog and then
- the prolog and the epilog exit 0: no job fails and no node drains for it;
- the health check reports it as its own problem (a warning in its report and the
  journal, and exit status 1) and still runs its checks where it can.
"""
from __future__ import annotations

TYPE_CHECKING = False          # not typing's: importing typing costs milliseconds
if TYPE_CHECKING:
    from .config import Config


class LocalError(Exception):
    """slurm-hooks' own local I/O failed; str() names the file and the cause."""


def report_local(cfg: Config, hook: str, errors: list[str]) -> None:
    """stderr (slurmd logs it) and syslog (the journal may be what failed)."""
    import sys

    from .syslog import ERR, send
    for e in errors:
        print(f"slurm-hooks {hook}: local failure: {e}", file=sys.stderr)
    if cfg.syslog:
        send([(ERR, f"{hook}: local failure: {e}") for e in errors], cfg.syslog_socket, cfg.syslog_facility)
