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

from ..core.model import FAIL, Action, Finding
from ..core.reason import cause_text, make_reason, one_line

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
    if actions_cfg.release_node:
        # After the reboot asked (if any): a DOWN node with a reboot pending is rebooted
        # by Slurm at once.
        out += _releases(failing, node, reason, ledger)
    return out


def _releases(failing: list[Finding], node: str, reason: str, ledger: dict) -> list[Action]:
    """Let Slurm go of a job we ended whose task here cannot die: killed and still in D
    (SIGKILL pending), on a place the node owns (a failing stuck task: the kernel's ids
    proved it), the job really ended by us (requeued or cancelled). Slurm 25.11.6+
    holds such a job COMPLETING for as long as the task lives; a DOWN node's jobs it
    lets go. Whether the job is alone on the node is Slurm's word, asked when the
    action is carried out (act/actions.py)."""
    out: list[Action] = []
    seen: set[str] = set()
    for f in failing:
        if f.job is None or f.keep_job or not f.needs_reboot or not f.evidence.get("sigkill_pending") \
                or f.job in seen:
            continue
        incident = f.incident or f.target
        ended = [ledger.get(f"{kind}:{f.job}:{incident}") for kind in ("requeue", "cancel")]
        if any(isinstance(e, dict) and e.get("ended") for e in ended):
            seen.add(f.job)
            out.append(Action("release", node=node, job=f.job, reason=reason, incident=incident, uid=_uid([f])))
    return out


# How long after its requeue a job is followed (its hold told or ended): past it, what
# Slurm does with the job is no news of ours.
FOLLOW_FOR = 3600.0


def follow_requeues(ledger: dict, node: str, now: float) -> list[Action]:
    """One `start` per job we requeued (the ledger's ended requeues) in the last
    FOLLOW_FOR seconds and not yet followed to its end: once it left COMPLETING, its
    hold is told on the job, or ended (actions.restart_now; act/actions.py decides
    from Slurm's record of the job)."""
    jobs: dict[str, list[str]] = {}
    for key, entry in ledger.items():
        kind, _, rest = key.partition(":")
        job, _, incident = rest.partition(":")
        if kind != "requeue" or not isinstance(entry, dict) or not entry.get("ended") or not incident:
            continue
        if now - float(entry.get("done", 0)) >= FOLLOW_FOR or f"start:{job}:{incident}" in ledger:
            continue
        jobs.setdefault(job, []).append(incident)
    return [Action("start", node=node, job=job, incident="+".join(sorted(incs))) for job, incs in sorted(jobs.items())]


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
        return Action("resume", node=node, reason=str(drain.get("reason", "")),
                      down_ours=bool(drain.get("released"))), record
    return None, record
