"""Policy: findings in, actions out. A pure function, so it is tested on data alone.

- Any failing finding drains the node, with one reason naming every failing finding
  (job findings first: they say the most; as many whole ones as fit in 255 bytes),
  ending in our mark (core/reason.py), and the machine-readable cause of the first one
  for the node's Comment: what the breaker and `status` group an outage by.
- A failing finding tied to a job also records the diagnosis on the job and requeues
  it, so the job's healthy nodes are freed and it resumes elsewhere from its checkpoint.
- A stuck task asks for a reboot (`reboot ASAP`: once the node is idle) when killing
  has had its chance: it is outside any job, or its job was really ended (requeued or
  cancelled, in an earlier run) at least `stuck_tasks.grace` ago and the task is still
  there. A requeue that was skipped (--no-requeue, an srun job, requeue switched off)
  ended nothing: the reboot then waits until Slurm says the job no longer runs on the
  node. Many hangs are killable (NFS waits are), and ending the job clears them
  without a reboot; the ones that survive are the unkillable kind only a reboot clears.
- A finding that is the job's own problem (`job_action`: a task stuck on its user's
  own FUSE mount) drains nothing and asks for no reboot: the job gets the diagnosis and
  the action the finding names (comment, cancel or requeue), nothing else.
- A finding that lets running work finish (`keep_job`: a GPU with a row remap pending)
  drains the node and leaves its job alone; its reboot, if any, is asked for at once.
Each kind of action can be switched off in `actions:`. Job actions carry the uid of the
diagnosed task: Slurm must agree it is the job's user before anything is done.
"""
from __future__ import annotations

from ..checks import has_role
from ..core.model import FAIL, MOUNT_PROBE, STUCK_TASK, Action, Finding
from ..core.reason import cause_text, make_reason, one_line, with_note

COMMENT_LIMIT = 1000


def decide(findings: list[Finding], node: str, prefix: str, actions_cfg,
           ledger: dict | None = None, kill_grace: float = 0.0, now: float | None = None,
           suspects: list | None = None) -> list[Action]:
    """`ledger`: keys of actions already carried out (act/actions.py), from local state.
    `kill_grace`: how long a stuck task must outlive its job's end before a reboot.
    `suspects`: the node's suspect mounts (decide/outage.py), named in the drain's cause."""
    import time
    ledger = ledger or {}
    now = time.time() if now is None else now
    failing = [f for f in findings if f.severity == FAIL]
    out: list[Action] = _job_only(findings, node, prefix, actions_cfg)
    if not failing:
        return out
    failing.sort(key=lambda f: f.job is None)          # stable: job findings first
    reason = make_reason([f.reason_text for f in failing])
    if actions_cfg.drain:
        out.append(Action("drain", node=node, reason=reason, cause=cause_of(failing[0], now, suspects)))
    jobs: dict[str, list[Finding]] = {}
    for f in failing:
        if f.job is not None and not f.keep_job:
            jobs.setdefault(f.job, []).append(f)
    for job, fs in jobs.items():
        incident = "+".join(sorted(f.incident or f.target for f in fs))
        text = one_line(f"{prefix} node {node}: " + "; ".join(f.summary for f in fs))[:COMMENT_LIMIT]
        uid = _uid(fs)
        if actions_cfg.comment_job:
            out.append(Action("comment", node=node, job=job, text=text, incident=incident, uid=uid))
        if actions_cfg.requeue_job:
            out.append(Action("requeue", node=node, job=job, text=text, incident=incident,
                              fallback=actions_cfg.requeue_fallback, uid=uid))
    tried = {id(f): _killing_was_tried(f, ledger, kill_grace, now, actions_cfg.requeue_job) for f in failing if f.needs_reboot}
    reboot_for = [f for f in failing if tried.get(id(f)) == "tried"]
    if actions_cfg.reboot and reboot_for:
        incident = "+".join(sorted(f.incident or f.target for f in reboot_for))
        out.append(Action("reboot", node=node, reason=reason, incident=incident))
    elif actions_cfg.reboot:
        # Nothing of ours ended the job (requeue off, --no-requeue, an srun job): the
        # reboot waits until Slurm says the job no longer runs here.
        waiting = [f for f in failing if tried.get(id(f)) == "not_ended"]
        for f in waiting[:1]:
            out.append(Action("reboot", node=node, reason=reason, incident=f.incident or f.target,
                              after_job=f.job))
    return out


def cause_of(f: Finding, now: float, suspects: list | None = None) -> str:
    """The cause a drain for `f` records: its check, where it failed (the mount a task
    is stuck on, else its target), its incident and when, and the node's suspect mounts."""
    import time
    where = str(f.evidence.get("mountpoint") or f.target)
    return cause_text(f.check, where, f.incident or f.target, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)),
                      suspects)


def _uid(findings: list[Finding]) -> int | None:
    """The uid of the job's diagnosed tasks (the first one's, should they differ)."""
    for f in findings:
        uid = f.evidence.get("uid")
        if isinstance(uid, int) and uid >= 0:
            return uid
    return None


def _job_only(findings: list[Finding], node: str, prefix: str, actions_cfg) -> list[Action]:
    out: list[Action] = []
    for f in findings:
        if not f.job_action or f.job is None or f.severity == FAIL:
            continue
        text = one_line(f"{prefix} node {node}: {f.summary}")[:COMMENT_LIMIT]
        def about_job(kind: str, fallback: str = "") -> Action:
            return Action(kind, node=node, job=f.job, text=text, incident=f.incident or f.target,
                          uid=_uid([f]), job_only=True, fallback=fallback)
        if actions_cfg.comment_job:
            out.append(about_job("comment"))
        if f.job_action == "cancel":
            out.append(about_job("cancel"))
        elif f.job_action == "requeue" and actions_cfg.requeue_job:
            out.append(about_job("requeue", actions_cfg.requeue_fallback))
    return out


def _killing_was_tried(f: Finding, ledger: dict, grace: float, now: float, requeue: bool) -> str:
    """"tried": the job was really ended (requeued or cancelled, by us or Slurm) at
    least `grace` ago and the task outlived it; "wait": ended, not long enough ago;
    "not_ended": nothing of ours ended it (requeue switched off or refused)."""
    if f.job is None or f.keep_job:
        return "tried"
    entries = [ledger.get(f"{kind}:{f.job}:{f.incident or f.target}") for kind in ("requeue", "cancel")]
    ended = [e for e in entries if isinstance(e, dict) and e.get("ended")]
    if ended:
        if f.evidence.get("sigkill_pending"):
            return "tried"     # killed and still in D: the kernel says it will not die
        return "tried" if now - min(float(e["done"]) for e in ended) >= grace else "wait"
    if not requeue or any(isinstance(e, dict) for e in entries):
        return "not_ended"
    return "wait"          # the requeue this run asks for has not happened yet


def hysteresis(findings: list[Finding], counts: dict, failures_to_drain: dict) -> tuple[dict, list]:
    """Count consecutive failing runs per (check, target). Returns the new counts and
    the failing findings still below their check's `failures_to_drain`, each as
    (finding, failures so far, failures needed): those are to be reported as warnings,
    not acted on (`hold_back`). Hard failures (a lost GPU, a stuck task) are exempt.
    Reads its inputs only."""
    new = {}
    waiting = []
    for f in findings:
        if f.severity != FAIL:
            continue
        key = f"{f.check}:{f.target}"
        new[key] = int(counts.get(key, 0)) + 1
        need = int(failures_to_drain.get(f.check, 1))
        if not f.hard and new[key] < need:
            waiting.append((f, new[key], need))
    return new, waiting


def hold_back(waiting: list) -> None:
    """The run's record says what hysteresis decided: a failure not yet acted on reads
    as a warning, with how many more it takes. The one step that changes findings,
    done by the caller that owns the run's record (actuation)."""
    from ..core.model import WARN
    for f, seen, need in waiting:
        f.severity = WARN
        f.detail = (f"failure {seen} of {need} before draining; " + f.detail).strip("; ")


def resume_decision(findings: list[Finding], drain: dict, node: str, resume_after: int) -> tuple[Action | None, dict]:
    """After a drain of ours, count passing runs; resume after `resume_after` of them.

    `drain` is the local record of our drain ({} when we did not drain this node):
    {"reason": ..., "resumable": bool, "passes": n}. A drain for a cause that needs a
    reboot or a human is never resumed. Returns (resume action or None, new record).
    """
    if not drain:
        return None, drain
    if any(f.severity == FAIL for f in findings):
        return None, dict(drain, passes=0)
    passes = int(drain.get("passes", 0)) + 1
    record = dict(drain, passes=passes)
    if resume_after and drain.get("resumable") and passes >= resume_after:
        return Action("resume", node=node, reason=str(drain.get("reason", ""))), record
    return None, record


def recoveries(actions: list[Action], findings: list[Finding], ledger: dict, recoverable: dict,
               counts: dict, drained: bool) -> list[Action]:
    """Put a recovery in place of a reboot where the kernel allows another way out.

    `recoverable`: mountpoint -> Recovery (without tasks) for every configured mount
    with `recover` on, as mounted now in the host's table (its `dev`, from one reading).
    A reboot asked for tasks stuck on one such mount becomes a `recover` of it, once
    per incident; once tried, the reboot goes ahead, saying so. The mount is the one
    whose device is the proven one (the findings' `mount_dev`), never the one at the
    path the task's own namespace shows: a task can bind the node's /home at /scratch
    in a namespace of its own. A mount whose probe hung on consecutive runs of a node
    we drained is recovered too. Never a user's mount (their findings do not fail),
    never where we did not drain (the drain-storm breaker bounds recoveries as it
    bounds drains).
    """
    from ..core.model import Recovery
    if not recoverable or not drained:
        return actions
    by_dev: dict[str, str] = {}
    for p, r in recoverable.items():
        if r.dev:
            by_dev.setdefault(r.dev, p)
    out: list[Action] = []
    for a in actions:
        if a.kind != "reboot" or a.after_job:
            out.append(a)
            continue
        ids = (a.incident or "").split("+")
        stuck = [f for f in findings if f.needs_reboot and (f.incident or f.target) in ids]
        devs = {str(f.evidence.get("mount_dev") or "") for f in stuck}
        if len(devs) != 1 or next(iter(devs)) not in by_dev:
            out.append(a)            # several places, or one without recovery: the reboot
            continue
        point = by_dev[next(iter(devs))]
        tried = [ledger[k] for k in (f"recover:{a.node}:{i}" for i in ids) if k in ledger]
        if tried:
            how = recoverable[point].method
            out.append(Action("reboot", node=a.node, reason=_tried(a.reason, how, point),
                              incident=a.incident))
            continue
        base = recoverable[point]
        tasks = [[int(f.evidence["pid"]), int(f.evidence.get("start_ticks") or 0)] for f in stuck
                 if isinstance(f.evidence.get("pid"), int)]
        jobs = sorted({f.job for f in stuck if f.job})
        out.append(Action("recover", node=a.node, reason=a.reason, incident=a.incident,
                          recovery=Recovery(**{**_fields(base), "tasks": tasks, "jobs": jobs})))
    node = _node_of(actions)
    for f in findings:
        point = next((p for p, r in recoverable.items() if r.probe == f.target), "")
        if f.severity != FAIL or not point or not has_role(f.check, MOUNT_PROBE):
            continue
        before = ledger.get(f"recover:{node}:{point}")
        if isinstance(before, dict) and not before.get("recovered"):
            # Recovery was tried and the mount did not come back healthy: the reboot.
            if not any(x.kind in ("reboot", "recover") for x in out):
                drain = next((x for x in out if x.kind == "drain"), None)
                reason = drain.reason if drain is not None else f.reason_text
                out.append(Action("reboot", node=node, reason=_tried(reason, recoverable[point].method, point),
                                  incident=point))
            continue
        if (f.status in ("hung", "still_hung") and int(counts.get(f"{f.check}:{f.target}", 0)) >= 2
                and before is None and not any(x.kind == "recover" for x in out)):
            dev = recoverable[point].dev
            on_it = [g for g in findings if g.severity == FAIL and dev and g.evidence.get("mount_dev") == dev
                     and isinstance(g.evidence.get("pid"), int) and has_role(g.check, STUCK_TASK)]
            out.append(Action("recover", node=node, reason=f.reason_text, incident=point,
                              recovery=Recovery(**{**_fields(recoverable[point]),
                                                   "tasks": [[g.evidence["pid"], int(g.evidence.get("start_ticks") or 0)]
                                                             for g in on_it],
                                                   "jobs": sorted({g.job for g in on_it if g.job})})))
    return out


def _fields(r) -> dict:
    from ..core.records import asdict
    return asdict(r)


def _node_of(actions: list[Action]) -> str:
    return next((a.node for a in actions if a.node), "")


def _tried(reason: str, method: str, point: str) -> str:
    return with_note(reason, f"(recovery tried: {one_line(method)} {one_line(point)})")
