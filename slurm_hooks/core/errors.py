"""Failures of slurm-hooks' own local machinery, as opposed to findings about the node.

The state directory, the journal, the hook lock, the metrics file and the configuration
cache live on local disk. When one of them is unusable (a full or read-only disk, a
missing directory, wrong permissions) that is slurm-hooks' own problem, not a job's:
the entry points (cli.py, run/hooks.py) report it on stderr and syslog (sinks/record.py) and then
- the prolog and the epilog exit 0: no job fails and no node drains for it;
- the health check reports it as its own problem (a warning in its report and the
  journal, and exit status 1) and still runs its checks where it can.
"""
from __future__ import annotations


class LocalError(Exception):
    """slurm-hooks' own local I/O failed; str() names the file and the cause."""
