"""`slurm-hooks status`: the cluster as slurm-hooks sees it, from any node with Slurm
client access. Nodes drained by slurm-hooks, grouped by cause, with their age, the
jobs it diagnosed there (its AdminComment; their state and restarts as Slurm records
them: who requeued a job is not Slurm's to say, the node's journal has what slurm-hooks
did, `explain`) and how far a reboot it asked for has got; many nodes drained
for the same cause (the check and the place each drain recorded in the node's Comment,
never the reason's words) are shown as one outage, since that is what they are; drains
with no cause recorded (by older releases) are one "unknown cause" group. Nodes
out of service by anyone else (an admin's drain, DOWN, MAINT, a pending reboot) are
listed as left alone.
"""
from __future__ import annotations

import re
import time

from ..core.reason import UNKNOWN_CAUSE, cause_group, is_ours, read_cause, words_of
from ..core.records import asdict, dataclass, field
from ..slurm.api import (
    CAUSE_FIELD,
    STAMP_FORMAT,
    foreign_states,
    node_flags,
    node_is_drained,
    reason_is_current,
    stamp_time,
    strip_reason_stamp,
)

_JOB_NODE = re.compile(r"node (\S+?):")


@dataclass
class DrainedNode:
    node: str
    reason: str
    since: str | None
    age_seconds: float | None
    jobs: list[dict] = field(default_factory=list)
    state: str = ""
    reboot: str | None = None      # how far the reboot slurm-hooks asked for has got
    cause: dict | None = None      # what its drain recorded in the node's Comment


def reboot_progress(info: dict, reason: str) -> str | None:
    flags = node_flags(info)
    if "REBOOT_REQUESTED" in flags:
        return "reboot requested: waiting for the node's jobs to end"
    if "REBOOT_ISSUED" in flags:
        return "rebooting (RebootProgram run), waiting for slurmd to register"
    if reason.rstrip().endswith("reboot timed out"):
        return "reboot timed out (ResumeTimeout): DOWN, needs a human"
    if "DOWN" in flags and reason.rstrip().endswith("reboot complete"):
        return "rebooted: DOWN until a health check passes"
    return None


@dataclass
class Group:
    cause: str
    outage: bool
    nodes: list[DrainedNode]


@dataclass
class Status:
    total_nodes: int
    drained_by_us: int
    drained_by_others: list[dict]
    groups: list[Group]
    # The same mount suspect on several nodes (drained or held back by the breaker), as
    # each node's Comment names it (decide/mount_incident.py): one outage of the storage.
    outages: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def collect(slurm, prefix: str, now: float | None = None, fresh_for: float = 135.0) -> Status:
    """`fresh_for`: how old a node's word on a mount may be and still count (two
    health-check intervals and a little: act/mounts.py's fresh_for)."""
    now = time.time() if now is None else now
    nodes = slurm.list_nodes()
    jobs_by_node: dict[str, list[dict]] = {}
    for info in slurm.list_jobs():
        comment = info.get("AdminComment", "")
        if prefix not in comment:
            continue
        for node in set(_JOB_NODE.findall(comment)):
            # Slurm's record says how often the job was restarted, not who requeued it
            # (Slurm itself after a failed prolog, an admin, slurm-hooks): only the
            # diagnosis in the AdminComment is known to be slurm-hooks'.
            jobs_by_node.setdefault(node, []).append({
                "job": info.get("JobId"), "state": info.get("JobState"), "restarts": info.get("Restarts"),
                "restarted": int(info.get("Restarts", "0") or 0) > 0})
    ours, others, total = [], [], 0
    from ..decide.mount_incident import across
    storage = across({i["NodeName"]: i for i in nodes}, prefix, now, fresh_for)
    for info in nodes:
        total += 1
        if not node_is_drained(info) and not foreign_states(info):
            continue
        raw = info.get("Reason", "")
        reason = strip_reason_stamp(raw)
        if not is_ours(reason, prefix) or not reason_is_current(info):
            others.append({"node": info["NodeName"], "reason": reason if reason_is_current(info) else "",
                           "state": info.get("State", "")})
            continue
        since, age = stamp_time(raw) or None, None
        if since:
            try:
                age = max(0.0, now - time.mktime(time.strptime(since, STAMP_FORMAT)))
            except ValueError:
                pass
        # The jobs of this drain: those its reason or cause names. A job diagnosed on the
        # node in an earlier incident is that incident's, not this drain's.
        cause = read_cause(info.get(CAUSE_FIELD, ""))
        named = f"{reason} {cause or ''}"
        jobs = [j for j in jobs_by_node.get(info["NodeName"], [])
                if re.search(rf"\bjob {re.escape(str(j['job']))}\b", named)]
        ours.append(DrainedNode(node=info["NodeName"], reason=words_of(reason, prefix), since=since,
                                age_seconds=age, jobs=jobs,
                                state=info.get("State", ""), reboot=reboot_progress(info, reason),
                                cause=cause))
    groups: dict[str, list[DrainedNode]] = {}
    for d in ours:
        groups.setdefault(cause_group(d.cause), []).append(d)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0] == UNKNOWN_CAUSE, -len(kv[1]), kv[0]))
    return Status(total_nodes=total, drained_by_us=len(ours), drained_by_others=others, outages=storage,
                  groups=[Group(cause=c, outage=len(ns) >= 2 and _shared(ns[0].cause), nodes=ns)
                          for c, ns in ordered])


# The checks whose drains have a mount behind them (views/explain.py: MOUNT_CHECKS).
MOUNT_CHECKS = ("filesystem", "stuck_tasks")


def _shared(cause: dict | None) -> bool:
    """Can one cause be the storage's outage? Only a shared mount's: a mount check's drain
    that named the node's suspect network mounts (decide/mount_incident.py). A site
    check, a GPU, the memory, a local disk failing on many nodes is many nodes' fault."""
    return cause is not None and str(cause.get("check", "")) in MOUNT_CHECKS and bool(cause.get("mounts"))


def age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def render(st: Status) -> str:
    lines = [f"slurm-hooks status: {st.drained_by_us} of {st.total_nodes} nodes drained by slurm-hooks"]
    for o in st.outages:
        lines.append(f"  {o['line']}: {', '.join(o['nodes'][:8])}{' ...' if len(o['nodes']) > 8 else ''} "
                     "(no reboot or recovery for it; the nodes resume when it answers)")
    for g in st.groups:
        head = f"{g.cause}: OUTAGE on {len(g.nodes)} nodes" if g.outage else f"{g.cause}: {len(g.nodes)} node(s)"
        lines.append(f"  {head}")
        for d in g.nodes:
            lines.append(f"    {d.node:<12} {age(d.age_seconds):>5} ago  {d.reason}")
            if d.reboot:
                lines.append(f"    {'':<12} {'':>5}      {d.state}: {d.reboot}")
            for j in d.jobs:
                lines.append(f"    {'':<12} {'':>5}      job {j['job']} diagnosed by slurm-hooks "
                             f"(Slurm's record: {j['state']}, restarts {j['restarts']})")
    if st.drained_by_others:
        lines.append("  out of service by others (left alone): "
                     + ", ".join(f"{o['node']} {o['state']} ({o['reason'] or 'no reason'})"
                                 for o in st.drained_by_others))
    return "\n".join(lines)
