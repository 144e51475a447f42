"""`config check`'s word on Slurm's clock after a requeue: from the running Slurm's
version and slurm.conf, how soon a job slurm-hooks requeued runs again when a task of
it cannot die (docs/recovery.md, "The job runs again").

The phases, each from Slurm's source and measured on 22.05.8 and 25.11.7
(BENCHMARKS.md): SIGKILL after KillWait; Slurm gives up on the task after
UnkillableStepTimeout (+1) and, up to 25.11.5, lets the job leave COMPLETING at slurmd's
next poll (10 s); from 25.11.6 it keeps the step for as long as the task lives. Then the
requeue hold (cred_expire, or requeue_delay from 25.11.0, +1), then the next full
scheduling pass (sched_interval: nothing schedules at a begin time). slurm-hooks'
`actions.release_node` ends the COMPLETING wait at its next run after the kill (the
node DOWN, the job alone on it; 22.05 then starts the job at once, without its hold,
through a bug fixed in 23.11.11, 24.05.6, 24.11.1 and 25.05), and
`actions.restart_now` ends the hold at its next run after that (RUNNING 1 to 2.5 s
later).
"""
from __future__ import annotations

# slurmd's poll for a job's end after its steps are gone (the epilog comes after it).
SLURMD_POLL = 10
# From `StartTime=now` to RUNNING, measured on both versions.
START_LAG = 2


def version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def keeps_the_step(version: str) -> bool:
    """25.11.6 and later: slurmstepd no longer ends after UnkillableStepTimeout, and the
    job stays COMPLETING for as long as the task lives."""
    v = version_tuple(version)
    return v >= (25, 11, 6) or (len(v) >= 2 and v[:2] > (25, 11))


def down_skips_the_hold(version: str) -> bool:
    """Before 23.11.11, 24.05.6, 24.11.1 and 25.05: a requeued job let go by a DOWN node
    is started again at once (no hold: Slurm's bug)."""
    v = version_tuple(version)
    fixed: dict[tuple[int, ...], tuple[int, ...]] = {(23, 11): (23, 11, 11), (24, 5): (24, 5, 6), (24, 11): (24, 11, 1)}
    if len(v) < 2:
        return False
    if v[:2] in fixed:
        return v < fixed[v[:2]]
    return v[:2] < (23, 11)


def clock(t: dict, version: str, interval: float, release: bool, restart: bool) -> tuple[float, float] | None:
    """(earliest, latest) seconds from the requeue until the job runs again, its task
    unkillable and the job alone on the node; None: never while the task lives. `t`:
    slurm/conffile.py timings(); `interval`: the health check's (HealthCheckInterval)."""
    kill = t["kill_wait"]
    sched = t["sched_interval"]
    hold = t["hold"] + 1
    if release:
        # Our first run after the kill sees SIGKILL pending and sets the node DOWN.
        let_go = (kill, kill + interval)
        if down_skips_the_hold(version):
            return let_go[0], let_go[1] + sched
        if restart:
            # The hold ended by the same run, or the next one.
            return let_go[0] + START_LAG, let_go[1] + interval + START_LAG
        return let_go[0] + hold, let_go[1] + hold + sched
    if keeps_the_step(version):
        return None
    gone = kill + t["unkillable_step_timeout"] + 1 + SLURMD_POLL
    if restart:
        return gone + START_LAG, gone + interval + START_LAG
    return gone + hold, gone + hold + sched


def lines(found: dict | None, version: str, cfg) -> list[str]:
    """What `config check` prints of the clock on this cluster."""
    from ..slurm.conffile import timings
    if found is None:
        return ["requeue clock: slurm.conf could not be read in time: not known"]
    t = timings(found, version)
    interval = float(cfg.outage.interval or t["health_check_interval"] or 60)
    release, restart = cfg.actions.release_node, cfg.actions.restart_now
    head = (f"requeue clock (Slurm {version or 'version unknown'}; KillWait {t['kill_wait']}s, "
            f"UnkillableStepTimeout {t['unkillable_step_timeout']}s, requeue hold {t['hold']}s, "
            f"sched_interval {t['sched_interval']}s, health check every {interval:g}s): a requeued job "
            "whose task cannot die runs again, from the requeue,")
    out = [head]
    if version:
        out.append(f"  Slurm alone: {_span(clock(t, version, interval, False, False))}")
    else:
        # Which it is, only the version says (scontrol --version found no slurm.conf).
        out.append(f"  Slurm alone: {_span(clock(t, '25.11.5', interval, False, False))} up to 25.11.5; "
                   f"{_span(None)} from 25.11.6")
    out.append(f"  these settings (release_node {'on' if release else 'off'}, restart_now "
               f"{'on' if restart else 'off'}): {_span(clock(t, version, interval, release, restart))}")
    # Before the requeue, slurm-hooks' own part: the stuck task's grace, seen by a run up
    # to one interval later, and one more interval for a network mount's scope.
    grace = float(cfg.stuck_tasks.grace)
    mine = clock(t, version, interval, release, restart)
    if mine is not None:
        out.append(f"  freeze -> running again with these settings: {grace + mine[0]:.0f} to "
                   f"{grace + 2 * interval + mine[1]:.0f} s (stuck_tasks.grace {grace:g}s, a health check, "
                   "and one more for a network mount's scope, before the requeue)")
    if release and down_skips_the_hold(version):
        out.append("  (this Slurm starts a job let go by a DOWN node at once, without its hold: a bug fixed "
                   "in 23.11.11)")
    if not restart:
        out.append("  with actions.restart_now: "
                   + _span(clock(t, version, interval, release, True)) + " (Slurm's hold ended at once)")
    return out


def _span(span: tuple[float, float] | None) -> str:
    return ("never while the task lives (Slurm 25.11.6+ keeps its step)" if span is None
            else f"{span[0]:.0f} to {span[1]:.0f} s")
