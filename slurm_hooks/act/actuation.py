"""Actuation: findings in, Slurm actions carried out (or spooled), local records kept.

Around the pure policy (decide/policy.py) and the Slurm backend (act/actions.py, slurm/scontrol.py):
- hysteresis counts, and the healthy fast path that asks Slurm nothing;
- the drain-storm breaker (decide/breaker.py): read the cluster before a drain, re-read after
  it; a prolog or epilog honours the health checks' latest view instead;
- the spool (act/spool.py): actions slurmctld did not take wait for the next run;
- the ledger (act/ledger.py): job and reboot actions once per incident;
- the way back after a reboot slurm-hooks asked for (act/after_reboot.py);
- the prolog's special case (Slurm drains on its non-zero exit).
Everything it keeps goes through the run's staged state store: a dry run keeps nothing.
"""
from __future__ import annotations

import time

from .. import TYPE_CHECKING
from ..checks import has_role
from ..core.behaviour import behaviour
from ..core.model import FAIL, MOUNT_PROBE, ActionResult, Finding

if TYPE_CHECKING:
    from ..checks._config import Config
    from ..core.state import StateStore

BREAKER_FRESH = 600.0
# The state files actuation keeps; it alone reads and writes them; act/spool.py,
# act/ledger.py and act/after_reboot.py decide over their contents, and are imported
# only past the healthy fast path (together 0.5 ms of every run otherwise).
SPOOL, LEDGER = "spool", "actions-done"
# Each network mount in trouble, from its first sighting to its answer
# (decide/mount_incident.py), and whether the node's Comment names them.
INCIDENTS = "mount-incidents"
# Those answered in the last hour, for `explain` (apart: a healthy run reads none).
PAST_INCIDENTS = "mount-incidents-answered"
# What releases before the mount incidents kept instead (read no more, removed).
OLD_SUSPECTS = "suspects"
# (act/mounts.py's SLURM_CONFIG: slurm.conf's HealthCheckInterval, read once a day.)
# What a run that read the node table leaves for the next run (_lean).
LAST_READ = "last-read"
RISKY = ("drain", "reboot", "requeue")
STATE = ("failures", "drain", SPOOL, LEDGER, "hook-failure", "reboot", "boot", "breaker", INCIDENTS, PAST_INCIDENTS,
         "slurm-config", LAST_READ)


def take_actions(cfg: Config, node: str, findings: list[Finding], dry_run: bool, state: StateStore,
                 hook: str = "healthcheck", started: float | None = None,
                 others_failing: str | None = None, notes: list[str] | None = None,
                 picture=None, open_backend=None) -> list[ActionResult]:
    """Policy, breaker, the mounts' incidents, spool and ledger around the Slurm backend
    (see act/actions.py).

    `picture(cfg, job, timeout) -> str`: the job-wide picture of a job about to be
    requeued (views.diagnose.capture, handed down by the run: this layer does not
    reach up for it); None: no picture.

    `started`: the run's start (monotonic): every Slurm call ends by
    `actions.deadline` seconds after it, and what is left is spooled. `others_failing`:
    another health check run beside this one (NHC) failed, so nothing is resumed.
    `open_backend(cfg.slurm, deadline)`: how the run reaches Slurm (slurm.connect's by
    default; a test hands in slurm/fake.py's `FakeSlurm.open`)."""
    # A network mount's trouble is sighted before hysteresis: a failure held back is
    # still this node's word about the mount.
    seen: list = []
    if any(f.severity == FAIL for f in findings):
        from ..decide.mount_incident import sightings
        seen = sightings(findings)
    counts = new_counts = state.load("failures")
    if counts or any(f.severity == FAIL for f in findings):     # else nothing to count or reset
        from ..decide import policy
        new_counts, waiting = policy.hysteresis(findings, counts, cfg.policy.failures_to_drain)
        policy.hold_back(waiting)
        if new_counts != counts:
            state.save("failures", new_counts)
    run = behaviour(hook)
    drain = state.load("drain")
    spooled = state.load(SPOOL, list)
    hook_failure = state.load("hook-failure") if run.tends_node else {}
    reboot = state.load("reboot") if run.tends_node else {}
    new_boot = run.tends_node and not dry_run and _new_boot(state)
    failing = any(f.severity == FAIL or f.job_action for f in findings)
    if not failing and not seen and not drain and not spooled and not hook_failure and not reboot \
            and not new_boot and not state.load("actions-done") and not state.exists(INCIDENTS) \
            and not state.exists(OLD_SUSPECTS):
        return []          # the healthy fast path: no Slurm call (an empty ledger has nothing to expire)

    from ..core.model import Action
    from ..core.outcomes import Code, Outcome
    from ..decide import mount_incident as mounts
    from ..decide import policy
    from . import after_reboot, spool
    from . import ledger as ledger_of
    from . import mounts as mount_steps
    from .actions import execute
    report_only = cfg.actions.report_only and not dry_run     # a dry run says what it would do
    ledger = state.load(LEDGER)
    now = time.time()
    doc = state.load(INCIDENTS)
    live, answered = _incidents(cfg, run, doc, seen, now)
    actions = policy.decide(findings, node, cfg.reason_prefix, cfg.actions, ledger, cfg.stuck_tasks.grace)
    if run.acts_by_exit:
        return _prolog_actions(actions, state, dry_run, report_only)
    if run.tends_node:
        actions += _follow_requeues(cfg, node, ledger, state, now)
    if run.tends_node and _may_recover(actions, findings):
        actions = mounts.recoveries(actions, findings, live, ledger, mount_steps.recoverable(cfg), new_counts,
                                    bool(drain))
    for a in actions:
        if a.kind == "drain":
            a.replaces = "|".join(filter(None, [run.generic_reason, hook_failure.get("replaces", "")]))
            a.down_ours = bool(drain.get("released"))
        elif a.kind == "release":
            a.replaces = run.generic_reason       # Slurm's `Kill task failed` over our reason
    if hook_failure and not any(a.kind == "drain" for a in actions):
        actions.insert(0, Action("drain", node=node, reason=hook_failure.get("reason", ""),
                                 replaces=hook_failure.get("replaces", ""), replace_only=True,
                                 cause=str(hook_failure.get("cause") or "")))
    resume, drain = policy.resume_decision(findings, drain, node, cfg.policy.resume_after)
    if others_failing:
        # Never resume while another tool fails the node: it would drain it again, and
        # the node would flap between the two.
        resume, drain = None, (dict(drain, passes=0) if drain else drain)
    slurm = None
    if not dry_run and not report_only:
        if open_backend is None:
            from ..slurm.connect import open_backend
        slurm = open_backend(cfg.slurm, None if started is None else started + cfg.actions.deadline)
        if notes is not None and slurm.choice is not None:
            notes.append(slurm.choice.note())
    early: list[ActionResult] = []
    if drain and not failing and resume is None and slurm is not None and run.tends_node:
        # A passing run of a node we drained: back in service by someone else's hand
        # (an admin's resume)? Then our drain's word leaves its Comment now.
        gone = _back_in_service(slurm, node, cfg.reason_prefix, drain)
        if gone is not None:
            early.append(gone)
            drain = {}
    every = mount_steps.interval(cfg, state) if live else mount_steps.DEFAULT_INTERVAL
    last_read = state.load(LAST_READ) if run.tends_node else {}
    lean = None
    if slurm is not None and run.tends_node and not early and not spooled and not hook_failure \
            and not reboot and not new_boot:
        lean = _lean(last_read, findings, actions, live, now, every)
    if lean is not None:
        # Nothing new since the last run's read, which held every risky action, and the
        # node's word is due again: this run writes it and reads nothing (one RPC).
        held, view = lean
        kept = state.load("breaker")
        if kept.get("open"):
            # The prolog goes by the latest verdict while fresh: the last read's, still held.
            state.save("breaker", dict(kept, at=now))
    else:
        held, view = _breaker(cfg, node, actions, slurm, dry_run, state, hook)
    actions = [a for a in actions if not any(a is h for h, _ in held)]
    if live and run.tends_node and lean is None:
        if view is None and slurm is not None:
            view = _view(cfg, slurm, node)       # the other nodes' word on the mounts: one node-table read
        named: dict | None
        if view is not None:
            named = mounts.witnesses(view.infos, node, now, mount_steps.fresh_for(every), cfg.reason_prefix)
        else:
            # Slurm did not answer: no word from the cluster, the scope stays as it was. A
            # run that asks Slurm nothing (report-only, a dry run) has no word to wait for:
            # it tells what it would do alone with the mount.
            named = {} if slurm is None else None
        mounts.judge(live, named, now, every * _hysteresis(cfg))
    elif live and run.tends_node:
        mounts.judge(live, None, now, every * _hysteresis(cfg))      # no word read: the scope stays
    # What the scope allows: nothing irreversible before it is known, jobs that wait out
    # an outage, no reboot or recovery for the storage's trouble (decide/mount_incident.py).
    actions, kept_back = mounts.govern(actions, findings, live, node, cfg.reason_prefix,
                                       cfg.outage.requeue_after, now)
    actions += mounts.told(answered, node, cfg.reason_prefix, now)
    if slurm is not None and picture is not None:
        _job_picture(cfg, actions, slurm, picture)      # of a job about to be requeued, not of one held
    entries = mounts.entries(live, now)
    _name_mounts(actions + [a for a, _ in held], entries, mounts.drain_words(live))
    if notes is not None:
        notes += mounts.notes(live)
    if (reboot or new_boot) and slurm is not None:
        after, reboot = after_reboot.after_reboot(slurm, node, cfg.reason_prefix, reboot, failing or bool(others_failing),
                                      cfg.policy.resume_after, cfg.actions.release_after)
        if after is not None:
            resume = after          # the resume after the boot, or the DOWN that lets Slurm reboot
    if resume is not None:
        actions.append(resume)
    stale: list = []
    if report_only:
        queue = actions
    else:
        queue, stale = spool.due(spooled, actions, cfg.policy.spool_max_age, findings)
    if lean is not None:
        # As the last run ended them: held (for its reasons), or a drain found in place.
        last = {k: (c, o) for k, _, c, o, _ in last_read.get("held") or []}
        results = early + [ActionResult(a, Outcome(last[a.kind][1]), why, code=last[a.kind][0]) for a, why in held]
    else:
        results = early + [ActionResult(a, Outcome.HELD, why, code=Code.BREAKER) for a, why in held]
    results += [ActionResult(a, Outcome.HELD, why, code=code) for a, why, code in kept_back]
    results += [ActionResult(a, Outcome.SKIPPED, "spooled while Slurm could not be reached; its fault is gone "
                             "now: not done", code=Code.FAULT_GONE) for a in stale]
    recovering = [a for a in queue if a.kind == "recover"]
    queue = [a for a in queue if a.kind != "recover"]
    claimed = None
    if held == [] and view is not None and slurm is not None and run.tends_node and not dry_run and not report_only:
        queue, lost, claimed, view = _claim(cfg, node, queue, slurm, view, state)
        held += lost
        results += [ActionResult(a, Outcome.HELD, why, code=Code.BREAKER) for a, why in lost]
    results += execute(queue, slurm, cfg.reason_prefix, dry_run, ledger, report_only=report_only)
    told = _held_completing(results, node, cfg.reason_prefix)
    if told:
        results += execute(told, slurm, cfg.reason_prefix, dry_run, ledger, report_only=report_only)
    if recovering:
        until = None if started is None else started + cfg.actions.deadline
        results += mount_steps.recover(cfg, node, recovering, slurm, state, ledger, dry_run, report_only, drain, until)
    drained_now = bool(drain_record(drain, results, findings, node, True))
    published = bool(doc.get("published"))
    if run.tends_node:
        published = mount_steps.publish(node, entries, published, results, held, actions, view, slurm,
                                        drained_now, now, mount_steps.refresh_after(every))
    from ..decide.breaker import can_overflow
    if held == [] and slurm is not None and run.tends_node and (claimed is None or time.time() > claimed) and \
            (view is None or can_overflow(view, cfg.policy) and node not in view.ours):
        # Only the health check re-reads the cluster: a prolog or epilog never reads the
        # node list (Slurm's guide), it honours the health checks' last view instead.
        # A node drained by us already only re-words its reason: nothing to re-read.
        results = _breaker_recheck(cfg, node, results, slurm, state)

    if slurm is not None and run.tends_node:
        _remember_read(state, node, view, lean is not None, findings, results, last_read, now)
    if not dry_run and not report_only:
        state.save(LEDGER, ledger_of.refresh(ledger, findings))
        # Actions Slurm could not take (unreachable, or no time left) wait in the spool;
        # everything else is final.
        waiting_now = spool.entries(spooled, results)
        if waiting_now or spooled:
            state.save(SPOOL, waiting_now)
        drain = drain_record(drain, results, findings, node, mounts.resumable(findings, live))
        if drain and any(r.action.kind == "release" and r.outcome == Outcome.DONE for r in results):
            drain = dict(drain, released=True)      # DOWN by us: RESUMEd when it comes back
        if hook_failure and any(r.action.kind == "drain" and r.outcome in (Outcome.DONE, Outcome.SKIPPED)
                                for r in results):
            state.delete("hook-failure")      # the precise reason is in place (or moot)
        if drain or state.exists("drain"):
            state.save("drain", drain)
        reboot = after_reboot.record(reboot, results)
        if reboot or state.exists("reboot"):
            state.save("reboot", reboot)
    if not dry_run and run.tends_node:
        # What the node saw of its mounts is kept in report-only mode too: it is what the
        # report tells (an interval alone with one makes it the node's fault).
        mounts.record(live + answered, results, findings, now)
        revived = _remounted(live, results, now)
        if revived:
            live = [i for i in live if i not in revived]
            answered = answered + revived
        if live or published:
            state.save(INCIDENTS, dict(mounts.dump(live, now), published=published))
        elif doc:
            state.delete(INCIDENTS)
        if answered:
            gone = mounts.past(answered, mounts.load(state.load(PAST_INCIDENTS)), now)
            state.save(PAST_INCIDENTS, mounts.dump(gone, now))
        if state.exists(OLD_SUSPECTS):
            state.delete(OLD_SUSPECTS)
    return results


def _failing_keys(findings: list[Finding]) -> list[str]:
    return sorted({f"{f.check}\x00{f.target}" for f in findings if f.severity == FAIL or f.job_action})


def _lean(last: dict, findings: list[Finding], actions: list, live: list, now: float, every: float):
    """(held, view) for a run that reads nothing, or None for a run that reads the node
    table as usual. In a long outage every run reads the table once and every second run
    also renews the node's word on the mount (mounts.refresh_after): that second run
    reads nothing instead, when the run before it read the table at most one and a half
    intervals ago and was not itself lean, held every risky action (drain, reboot,
    requeue) and did none, failed on exactly the same findings, and this run's risky
    actions are of the kinds it held. It holds them again, for the reasons that run gave
    (nothing irreversible is ever done on a view it did not read), the scope stays as it
    was, and its word is written over the node's Comment as that run read it. One RPC."""
    from ..decide.breaker import ClusterView
    from ..decide.mount_incident import SHARED, drain_words, published
    from . import mounts as mount_steps
    if not last or last.get("lean") or not last.get("held_all") or not isinstance(last.get("own"), dict):
        return None
    if not 0 <= now - float(last.get("at") or 0) <= 1.5 * every:
        return None
    if last.get("failing") != _failing_keys(findings):
        return None
    kept = last.get("held")
    if not isinstance(kept, list) or not all(isinstance(x, list) and len(x) == 5 for x in kept):
        return None                  # not what _remember_read writes: read as usual
    why = {k: (w, c, o, r) for k, w, c, o, r in kept}
    risky = [a for a in actions if a.kind in RISKY and not a.replace_only and not a.job_only]
    # Of the kinds the last run held, or found in place already (a drain of ours with
    # this very reason: nothing to send).
    first = drain_words(live)         # what this run's drain would say first (_name_mounts)
    if any(a.kind not in why or why[a.kind][2] != "held" and why[a.kind][3] != _worded(a.reason, first)
           for a in risky):
        return None
    own = last["own"]
    words = published(own)
    wanted = sorted([i.source, i.fstype, i.mountpoint, i.kind] for i in live if i.scope in SHARED and not i.marked)
    if not words or sorted([w.source, w.fstype, w.mountpoint, w.kind] for w in words) != wanted:
        return None
    if not any(now - w.seen >= mount_steps.refresh_after(every) for w in words):
        return None                  # not due: a usual run's one read costs as much
    held = [(a, f"{why[a.kind][0]} (as the last run read the cluster)" if why[a.kind][2] == "held"
             else why[a.kind][0]) for a in risky]
    return held, ClusterView(total=0, infos={own.get("NodeName", ""): own})


def _remember_read(state: StateStore, node: str, view, lean: bool, findings: list[Finding], results: list,
                   last: dict, now: float) -> None:
    """What the next run needs to know to skip its read (_lean); nothing when this run
    read nothing and was not lean (Slurm did not answer)."""
    from ..core.outcomes import Code, Outcome
    if lean:
        state.save(LAST_READ, dict(last, lean=True))
        return
    if view is None or node not in view.infos:
        if last:
            state.delete(LAST_READ)
        return
    risky = [r for r in results if r.action.kind in RISKY and not r.action.replace_only and not r.action.job_only]
    kept = [r for r in risky if r.outcome == Outcome.HELD or r.code == Code.ALREADY_DRAINED]
    held_all = bool(risky) and len(kept) == len(risky)
    from ..slurm.api import CAUSE_FIELD
    own = {k: view.infos[node].get(k, "") for k in ("NodeName", "State", "Reason", CAUSE_FIELD)}
    state.save(LAST_READ, {"at": now, "lean": False, "held_all": held_all, "failing": _failing_keys(findings),
                           "held": [[r.action.kind, r.message, str(r.code), str(r.outcome), r.action.reason]
                                    for r in kept],
                           "own": own})


def _remounted(live: list, results: list, now: float) -> list:
    """The dead mounts this run remounted and found answering: their incidents end now,
    as if the next run had found them answering, so that the next death of the same
    mount (another restart of the storage) is a new incident with its own remount, not
    the old one whose remount is done."""
    from ..core.outcomes import Code
    done = [r.action.recovery for r in results if r.action.kind == "recover" and r.code == Code.RECOVERED
            and r.action.recovery is not None and r.action.recovery.dead]
    out = [i for i in live if any(x.mountpoint == i.mountpoint or (x.dev and x.dev == i.dev) for x in done)]
    for i in out:
        i.answered = now
        i.step(now, "answered: remounted")
    return out


def _held_completing(results, node: str, prefix: str) -> list:
    """What Slurm waits for, on the job's AdminComment once per requeue: a job we requeued
    that Slurm holds COMPLETING for its task here that cannot die."""
    from ..core.model import Action
    from ..core.outcomes import Code
    return [Action("comment", node=node, job=r.action.job, ran_here=True,
                   incident="+".join(f"{i}/completing" for i in (r.action.incident or "").split("+")),
                   text=f"{prefix} COMPLETING: a task on {node} cannot die; Slurm holds the job until it does")
            for r in results if r.action.kind == "start" and r.code == Code.COMPLETING]


def _follow_requeues(cfg: Config, node: str, ledger: dict, state: StateStore, now: float) -> list:
    """The jobs this node requeued, followed until they leave Slurm's requeue hold
    (decide/policy.py: follow_requeues): each `start` carries the hold's lengths from
    slurm.conf, and ends the hold only where `actions.restart_now` says so."""
    from ..decide.policy import follow_requeues
    from .mounts import slurm_config
    follows = follow_requeues(ledger, node, now) if ledger else []
    if follows:
        holds = tuple(slurm_config(cfg, state).get("requeue_holds") or ())
        for a in follows:
            a.holds, a.fallback = holds, "" if cfg.actions.restart_now else "tell"
    return follows


def _incidents(cfg: Config, run, doc: dict, seen: list, now: float) -> tuple[list, list]:
    """(the live incidents, those answered in this run). The health check keeps them; a
    prolog or an epilog, which read no node list, go by what it kept lately, and a
    mount only they see has no known scope."""
    from ..decide import mount_incident as mounts
    from .mounts import node_devs
    if run.tends_node:
        return mounts.advance(mounts.load(doc), seen, now, node_devs(cfg) if seen else frozenset())
    kept = {i.key: i for i in mounts.fresh(doc, BREAKER_FRESH, now)}
    live = {}
    for s in seen:
        live[s.key] = kept.get(s.key) or mounts.Incident(source=s.source, fstype=s.fstype, mountpoint=s.mountpoint,
                                                         dev=s.dev, kind=s.kind, first=now)
    return list(live.values()), []


def _hysteresis(cfg: Config) -> int:
    """The most runs a check of a mount waits before it drains (policy.failures_to_drain):
    another node names a mount only once it acts on it, so the scope waits as long."""
    wanted = cfg.policy.failures_to_drain
    return max([1] + [int(wanted.get(c, 1)) for c in ("filesystem", "stuck_tasks")])


def _view(cfg: Config, slurm, node: str):
    """The cluster's node table, read once for the run; this node's own record in it
    answers the run's later lookups of the node (no second RPC)."""
    from ..decide.breaker import cluster_view
    from ..slurm.api import SlurmError
    try:
        view = cluster_view(slurm, cfg.reason_prefix, node)
    except SlurmError:
        return None
    if node in view.infos:
        slurm.prime_node(view.infos[node])
    return view


def _name_mounts(actions: list, entries: list, words: str) -> None:
    """Each drain of this run names the node's mounts in its cause (what the other nodes
    read), and says first when the storage is down for everybody."""
    from ..core.reason import cause_with
    for a in actions:
        if a.kind != "drain" or a.replace_only:
            continue
        if a.cause:
            a.cause = cause_with(a.cause, entries)
        a.reason = _worded(a.reason, words)


def _worded(reason: str, words: str) -> str:
    """A drain's reason saying `words` (the storage down for everybody) first."""
    from ..core.reason import make_reason, words_of
    if words and not words_of(reason).startswith(words):
        return make_reason([words, words_of(reason)])
    return reason


def _back_in_service(slurm, node: str, prefix: str, drain: dict):
    """A node we drained that is no longer drained, by someone else's hand: the result
    saying so (our cause taken out of its Comment), or None while our drain stands."""
    from ..core.model import Action
    from ..slurm.api import SlurmError, foreign_states, node_is_drained
    from .actions import execute
    try:
        info = slurm.node_state(node)
    except SlurmError:
        return None
    if info is None or node_is_drained(info) or foreign_states(info):
        return None
    [result] = execute([Action("resume", node=node, reason=str(drain.get("reason", "")))], slurm, prefix, False)
    return result


def _new_boot(state: StateStore) -> bool:
    """True once per boot: a node whose state_dir did not survive the reboot (diskless)
    must still learn from Slurm that it is DOWN after a reboot of ours."""
    from ..host.procfs import boot_id
    now = boot_id()
    if state.load("boot").get("id") == now:
        return False
    state.save("boot", {"id": now})
    return True


def _prolog_actions(actions, state: StateStore, dry_run: bool, report_only: bool = False) -> list[ActionResult]:
    """The prolog takes no action itself: Slurm drains the node and requeues the job
    when it exits non-zero, and a detached helper sets the precise reason (run/hooks.py).
    The breaker is honoured from the health checks' latest cluster view: the prolog
    must not wait on slurmctld to ask."""
    from ..core.outcomes import Code, Outcome
    drains = [a for a in actions if a.kind == "drain"]
    if report_only:
        return [ActionResult(a, Outcome.REPORT_ONLY, "report only (actions.report_only): not done",
                             code=Code.REPORT_ONLY) for a in drains]
    held = _cached_breaker(state)
    if drains and held:
        return [ActionResult(a, Outcome.HELD, held, code=Code.BREAKER) for a in drains]
    if dry_run:
        return [ActionResult(a, Outcome.DRY_RUN, "dry run: not done", code=Code.DRY_RUN) for a in drains]
    return [ActionResult(a, Outcome.DEFERRED, "Slurm drains the node when the prolog fails; "
                         "the precise reason follows", code=Code.LEFT_TO_SLURM) for a in drains]


# The picture may take at most this share of what is left of the run's action time:
# the drain, comment and requeue it precedes must still fit before slurmd's kill.
PICTURE_SHARE = 0.5


def remember_hook_failure(state: StateStore, run, reason: str, cause: str, job: str | None,
                          resumable: bool) -> None:
    """A prolog or epilog failed: the drain is Slurm's (its generic reason) or ours
    without the health check's follow-up yet. What the next health check needs to put
    the precise reason in place and, later, to resume: actuation's own state files,
    written here and nowhere else."""
    now = time.time()
    state.save("hook-failure", {"hook": run.name, "reason": reason, "cause": cause, "at": now, "job": job,
                                "replaces": run.generic_reason})
    # A node drained already (an earlier failure, a drain of ours) keeps the drain's time.
    since = (state.load("drain") or {}).get("at") or now
    state.save("drain", {"reason": reason, "resumable": resumable, "passes": 0, "at": since})


def _job_picture(cfg: Config, actions, slurm, capture) -> None:
    """Before a job is requeued, the job-wide picture (views/diagnose.py) joins the diagnosis
    recorded on it, so the post-mortem shows what the other ranks were doing. It lives
    inside the run's action deadline: at most half of what is left of it."""
    jobs = sorted({a.job for a in actions if a.kind == "requeue" and a.job})
    if not jobs:
        return
    for job in jobs:
        limit = cfg.diagnose.on_requeue_timeout
        deadline = getattr(slurm, "deadline", None)
        if deadline is not None:
            limit = min(limit, (deadline - time.monotonic()) * PICTURE_SHARE)
        if limit < 1:
            break                    # no time left for it: the requeue comes first
        line = capture(cfg, job, limit)
        for a in actions:
            if line and a.job == job and a.kind in ("comment", "requeue"):
                a.text = f"{a.text}; {line}" if a.text else line


def _cached_breaker(state: StateStore) -> str | None:
    breaker = state.load("breaker")
    if breaker.get("open") and time.time() - float(breaker.get("at", 0)) < BREAKER_FRESH:
        return breaker.get("why", "drain-storm breaker open")
    return None


def _breaker(cfg: Config, node: str, actions, slurm, dry_run: bool, state: StateStore, hook: str = "healthcheck") -> tuple:
    """([(action, why)] for the actions the drain-storm breaker holds back, the cluster
    view it read or None)."""
    # A job's own problem (job_only) costs the node nothing and is never held back.
    risky = [a for a in actions if a.kind in ("drain", "reboot", "requeue")
             and not a.replace_only and not a.job_only]
    if not risky or dry_run or slurm is None:
        return [], None
    if not behaviour(hook).tends_node:
        # A prolog or epilog never reads the whole node list (Slurm's guide: hooks
        # should not call Slurm commands): it honours the health checks' last view.
        why = _cached_breaker(state)
        return ([(a, why) for a in risky] if why else []), None
    from ..decide.breaker import cluster_view, verdict
    from ..slurm.api import SlurmError
    try:
        view = cluster_view(slurm, cfg.reason_prefix, node)
    except SlurmError:
        return [], None        # no view: the drain itself will fail and be spooled
    from ..decide.breaker import step_back
    back = step_back(view, node, cfg.policy)
    if back:
        # Drained in a storm by a run that read the cluster before the others drained.
        try:
            _step_back(slurm, view, node, next((a.cause for a in risky if a.kind == "drain"), ""))
        except SlurmError:
            return [], view
        state.save("breaker", {"open": True, "why": back, "at": time.time()})
        return [(a, back) for a in risky], view
    if node in view.infos:
        slurm.prime_node(view.infos[node])      # the drain's own node lookup: no second RPC
        # Our reason in place of Slurm's own generic one (`Kill task failed` for a task
        # the storage holds): the node is out of service already, nothing is taken away.
        risky = [a for a in risky if not _rewords(a, view.infos[node])]
    why = None if node in view.ours else verdict(view, node, cfg.policy)
    state.save("breaker", {"open": bool(why), "why": why or "", "at": time.time()})
    return ([(a, why) for a in risky] if why else []), view


def _rewords(a, info: dict) -> bool:
    """A drain that puts our reason in place of Slurm's generic one on a node Slurm
    drained already."""
    from ..core.reason import is_generic
    from ..slurm.api import node_is_drained, strip_reason_stamp
    return a.kind == "drain" and node_is_drained(info) and \
        is_generic(strip_reason_stamp(info.get("Reason", "")), a.replaces)


def _breaker_recheck(cfg: Config, node: str, results: list, slurm, state: StateStore) -> list:
    """Simultaneous health checks all pass the breaker's check, then all drain: after
    our own drain, read the cluster again and step back when beyond the limit in the
    breaker's stable order (decide/breaker.py)."""
    from ..core.outcomes import Code, Outcome
    from ..decide.breaker import cluster_view, settle, step_back
    from ..slurm.api import MIN_CALL, SlurmError
    # (Not a re-worded drain of Slurm's: stepping back would resume a node Slurm took out.)
    drained = [r for r in results if r.action.kind == "drain" and r.action.node == node
               and r.outcome == Outcome.DONE and not r.action.replace_only and r.code != Code.REPLACED_GENERIC]
    if not drained:
        return results
    wait = settle(time.time())
    if slurm.deadline is None or time.monotonic() + wait + MIN_CALL < slurm.deadline:
        time.sleep(wait)         # every drain that sorts ahead of ours is visible after it
    try:
        view = cluster_view(slurm, cfg.reason_prefix, node)
        why = step_back(view, node, cfg.policy)
        if why:
            _step_back(slurm, view, node, drained[0].action.cause)
    except SlurmError:
        return results          # the drain stands; the next run re-reads
    if not why:
        return results
    state.save("breaker", {"open": True, "why": why, "at": time.time()})
    return [ActionResult(r.action, Outcome.HELD, why, code=Code.BREAKER) if r in drained else r for r in results]


def _claim(cfg: Config, node: str, queue: list, slurm, view, state: StateStore) -> tuple:
    """A drain that simultaneous drains could take past the limit claims its place first
    (decide/breaker.py): (the queue, [(action, why)] held back, until when a drain of
    this run needs no re-read (None: no claim), the cluster view, re-read if claimed)."""
    from ..core.reason import cause_text, cause_with, read_cause, without_our_cause
    from ..decide.breaker import (
        CLAIM_LIFE,
        CLAIM_TRIP,
        CLOCK_SKEW,
        can_overflow,
        claim_late,
        claim_verdict,
        claim_wait,
        cluster_view,
    )
    from ..slurm.api import CAUSE_FIELD, MIN_CALL, SlurmError
    drain = next((a for a in queue if a.kind == "drain" and a.node == node and not a.replace_only
                  and not a.job_only), None)
    if drain is None or node in view.ours or not can_overflow(view, cfg.policy) or node not in view.infos:
        return queue, [], None, view
    if _rewords(drain, view.infos[node]):
        return queue, [], None, view
    risky = [a for a in queue if a.kind in ("drain", "reboot", "requeue") and not a.replace_only
             and not a.job_only]

    def lose(why: str) -> tuple:
        state.save("breaker", {"open": True, "why": why, "at": time.time()})
        return [a for a in queue if not any(a is r for r in risky)], [(a, why) for a in risky]

    ours = drain.cause or cause_text("drain", "", "", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()))
    stamp = time.time()
    text = cause_with(ours, (read_cause(ours) or {}).get("mounts"), held=True, claim=stamp)
    try:
        slurm.set_node_comment(node, f"{text} {without_our_cause(view.infos[node].get(CAUSE_FIELD, ''))}".strip())
    except SlurmError:
        return queue, [], None, view          # no claim: the drain re-reads after it, as before
    took = time.time() - stamp
    if took > CLAIM_TRIP:
        return (*lose(f"drain-storm breaker: Slurm took {took:.1f}s to take this node's claim under the "
                      f"limit (more than {CLAIM_TRIP:.0f}s): drain held, tried again next run"), None, view)
    wait = claim_wait(stamp)
    if slurm.deadline is not None and time.monotonic() + wait + MIN_CALL >= slurm.deadline:
        return (*lose("drain-storm breaker: no time left in this run to claim a place under the limit: "
                      "drain held, tried again next run"), None, view)
    time.sleep(wait)
    try:
        again = cluster_view(slurm, cfg.reason_prefix, node)
    except SlurmError:
        return (*lose("drain-storm breaker: the cluster could not be read after this node's claim: "
                      "drain held, tried again next run"), None, view)
    if node in again.infos:
        slurm.prime_node(again.infos[node])
    why = claim_verdict(again, node, stamp, cfg.policy)
    if why is None and claim_late(stamp, time.time()):
        why = "drain-storm breaker: this node's claim under the limit ran out before its drain: drain held"
    if why is not None:
        return (*lose(why), None, again)
    return queue, [], stamp + CLAIM_LIFE - 2 * CLOCK_SKEW, again


def _step_back(slurm, view, node: str, keep: str = "") -> None:
    """Resume our own drain, emptying the cause it recorded in the same update; `keep`:
    a cause naming the node's suspect mounts, which stays for the others to read
    (decide/mount_incident.py): a node that stepped back is still a witness of the
    outage, and says it is held."""
    from ..core.reason import cause_with, is_our_cause, read_cause, without_our_cause
    from ..slurm.api import CAUSE_FIELD
    text = view.infos.get(node, {}).get(CAUSE_FIELD, "")
    mounts = (read_cause(keep) or {}).get("mounts")
    keep = cause_with(keep, mounts, held=True) if mounts else ""
    if is_our_cause(text) or keep:
        slurm.release(node, "RESUME", f"{keep} {without_our_cause(text)}".strip())
    else:
        slurm.resume(node)


# --- recovery without a reboot (decide/mount_incident.py, act/mounts.py) -----------------
def _may_recover(actions: list, findings: list[Finding]) -> bool:
    """Is there a reboot a recovery could stand in for, or a failing probe of a mount?"""
    return any(a.kind == "reboot" for a in actions) or any(
        f.severity == FAIL and has_role(f.check, MOUNT_PROBE) for f in findings)


def drain_record(drain: dict, results, findings: list[Finding], node: str, resumable: bool | None = None) -> dict:
    """Our local note of why we drained this node (for auto-resume). `resumable`: may
    passing runs lift it (decide/mount_incident.py: resumable); None: where every
    failing finding allows it."""
    from ..core.outcomes import Code, Outcome
    # The mount a stuck task held came back without a reboot: the drain for it may be
    # resumed as any resumable one is (at once, or after passing runs).
    if any(r.action.kind == "recover" and r.code == Code.RECOVERED for r in results):
        if any(r.action.kind == "resume" and r.outcome == Outcome.DONE for r in results):
            return {}
        return dict(drain, resumable=True) if drain else drain
    for r in results:
        a = r.action
        if a.kind == "drain" and a.node == node and (r.outcome == Outcome.DONE or r.code == Code.ALREADY_DRAINED):
            if resumable is None:
                failing = [f for f in findings if f.severity == FAIL]
                resumable = all(f.resumable for f in failing) and bool(failing)
            keep = drain if drain.get("reason") == a.reason else {}
            # Since when the node is out of service: a re-worded reason of ours does not
            # put it back in service, so the drain's own time stays.
            # A node put out of service now (its earlier drain undone by another hand)
            # dates from now.
            since = None if r.took_out else drain.get("at")
            return {"reason": a.reason, "resumable": resumable and keep.get("resumable", True),
                    "passes": 0, "at": since or time.time()}
        if a.kind == "drain" and r.code == Code.FOREIGN_DRAIN:
            return {}          # an admin's drain now: not ours to resume
        if a.kind == "resume" and r.outcome in (Outcome.DONE, Outcome.SKIPPED):
            return {}
    return drain


