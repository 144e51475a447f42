"""What each run of slurm-hooks is allowed and expected to do, in one place.

The same pipeline runs for four callers: slurmd's HealthCheckProgram, the prolog, the
epilog and an admin's `check` (a look). They differ in what they keep, what they may
ask of Slurm and which of the node's loose ends they follow up. Each difference is a
named property here, so code reads `behaviour.commits`, never `hook == "prolog"`, and
a reader finds every way a hook changes the run on this page.
"""
from __future__ import annotations

from .reason import EPILOG_ERROR, KILL_TASK_FAILED, PROLOG_ERROR
from .records import dataclass


@dataclass(frozen=True)
class Behaviour:
    name: str                  # the hook's name, as the journal and site checks see it
    # Its decisions are kept (state committed, counters and metrics updated). A look
    # or any dry run keeps nothing.
    commits: bool
    # It owns the Prometheus textfile: the one periodic run writes it.
    writes_metrics: bool
    # It runs for one job (SLURM_JOB_ID set): the job's GPUs, the job's environment for
    # site checks, and a full local scratch never fails it (jobs' files fill it).
    for_job: bool
    # Before the job (prolog) rather than after it (epilog): what a leftover means.
    before_job: bool
    # A look: asks Slurm nothing (no listpids, no Gres), changes nothing.
    looks_only: bool
    # The periodic run that follows up on the node: a hook's generic reason replaced,
    # reboots asked for and their aftermath, recovery without a reboot, re-reading the
    # cluster for the drain-storm breaker, another health check run beside it.
    tends_node: bool
    # The prolog acts through its exit status: Slurm drains the node and requeues the
    # job itself, so only what must be remembered locally is done here.
    acts_by_exit: bool
    # The epilog drains before it returns, so the next job cannot land on the node:
    # a drain done with the precise reason needs no failing exit on top.
    drains_before_exit: bool
    # The generic reasons Slurm writes when this run fails ("A|B"), which our precise
    # reason may replace.
    generic_reason: str
    # The hook a site check declares for it (a look runs the health check's).
    site_hook: str
    # What a configuration error means for it, said on stderr and syslog.
    on_config_error: str
    # Its exit status then: a prolog or epilog that fails would hold the job up or drain
    # the node for our own mistake; the health check's 2 is for whoever runs it by hand
    # (slurmd ignores its status).
    config_error_exit: int = 0


_JOB = "no checks run, the job is not held up"
BEHAVIOURS = {
    "healthcheck": Behaviour("healthcheck", commits=True, writes_metrics=True, for_job=False, before_job=False,
                             looks_only=False, tends_node=True, acts_by_exit=False, drains_before_exit=False,
                             generic_reason=KILL_TASK_FAILED, site_hook="healthcheck",
                             on_config_error="no checks run, nothing drained or resumed", config_error_exit=2),
    "prolog": Behaviour("prolog", commits=True, writes_metrics=False, for_job=True, before_job=True,
                        looks_only=False, tends_node=False, acts_by_exit=True, drains_before_exit=False,
                        generic_reason=PROLOG_ERROR, site_hook="prolog", on_config_error=_JOB),
    "epilog": Behaviour("epilog", commits=True, writes_metrics=False, for_job=True, before_job=False,
                        looks_only=False, tends_node=False, acts_by_exit=False, drains_before_exit=True,
                        generic_reason=f"{EPILOG_ERROR}|{KILL_TASK_FAILED}", site_hook="epilog",
                        on_config_error=_JOB),
    "check": Behaviour("check", commits=False, writes_metrics=False, for_job=False, before_job=False,
                       looks_only=True, tends_node=False, acts_by_exit=False, drains_before_exit=False,
                       generic_reason="", site_hook="healthcheck",
                       on_config_error="no checks run", config_error_exit=2),
}


def behaviour(hook: str) -> Behaviour:
    try:
        return BEHAVIOURS[hook]
    except KeyError:
        raise ValueError(f"unknown hook {hook!r}; known: {', '.join(BEHAVIOURS)}") from None
