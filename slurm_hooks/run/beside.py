"""Another health check run beside slurm-hooks (LBNL NHC, a site script).

slurmd takes one HealthCheckProgram and kills it after 60 s. With `beside.command`
set, `slurm-hooks-healthcheck` is that one program and runs the other one itself, at
the same time as its own checks, with its own deadline (`beside.timeout`), so both fit
in slurmd's 60 s. The other tool keeps its own job: it drains the node with its own
reason when it fails (NHC does). slurm-hooks reads its exit status for one thing only:
while the other tool fails, slurm-hooks resumes nothing, so a node that NHC still
fails is not put back in service by slurm-hooks only to be drained again (flapping).

The other program runs in a child with a deadline through the runner, like every
other probe: a tool stuck on a hung filesystem is killed and left behind, never
waited for.
"""
from __future__ import annotations

import os

from .. import TYPE_CHECKING
from ..core.reason import one_line
from ..host.runner import DONE, SAFE_PATH, Task

if TYPE_CHECKING:
    from ..core.config import BesideConfig

TAIL = 400


def _run_other(progress, argv: list, timeout: float, env: dict) -> dict:
    from ..host.runner import run_command
    progress("run")
    r = run_command(argv, timeout, env)
    out = (r.stdout + r.stderr).strip()
    return {"rc": r.rc, "timed_out": r.timed_out, "elapsed": r.elapsed, "tail": out[-TAIL:]}


class Beside:
    """Starts the other health check at once; `finish` collects its verdict."""

    def __init__(self, cfg: BesideConfig, runner, environ=None):
        environ = os.environ if environ is None else environ
        self.name = cfg.name
        self.timeout = cfg.timeout
        self.runner = runner
        env = {"PATH": SAFE_PATH}
        # What slurmd gives HealthCheckProgram, passed on; NHC also honours these.
        for var in ("SLURMD_NODENAME", "SLURM_CONF"):
            if environ.get(var):
                env[var] = environ[var]
        self.key = f"beside:{self.name}"
        self.batch = runner.start([Task(key=self.key, func=_run_other,
                                        args=(list(cfg.command), cfg.timeout, env), timeout=cfg.timeout + 2)])

    def finish(self, notes: list[str]) -> str | None:
        """None when the other check passed; else why not, also added to `notes`."""
        outcome = self.runner.collect(self.batch)[self.key]
        value = outcome.value if outcome.status == DONE and isinstance(outcome.value, dict) else None
        if value is None:
            why = f"{self.name} could not be run to the end ({outcome.status}: {outcome.error})"
        elif value["timed_out"]:
            why = f"{self.name} did not finish within {self.timeout:g}s"
        elif value["rc"] != 0:
            last = one_line(value["tail"].splitlines()[-1]) if value["tail"] else ""
            why = f"{self.name} failed (exit {value['rc']})" + (f": {last}" if last else "")
        else:
            notes.append(f"{self.name} passed in {value['elapsed']:.1f}s")
            return None
        notes.append(f"{why}; slurm-hooks resumes no node while it fails")
        return why
