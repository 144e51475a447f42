"""The drain-storm breaker: slurm-hooks must not empty the cluster.

A wrong configuration, or a shared filesystem that is down for everybody, makes every
node's health check fail at once. Draining them all would turn an outage into a
complete stop. Before draining, the cluster is asked how many nodes slurm-hooks
already drained; at the limit (`policy.max_drained_nodes`, or the share
`policy.max_drained_fraction`, whichever is larger) new drains are only reported, loudly,
and many nodes drained for the same cause are reported as one outage: the same cause is
the same check failing in the same place, as each drain recorded it in the node's
Comment (core/reason.py: cause_text), never a reading of the reason's words.

Checking first is not enough: slurmd starts every node's health check at the same
moment (no CYCLE), so during one outage all of them read "0 drained" and all drain.
So a node that has just drained itself reads the cluster again, and when more nodes
are drained by slurm-hooks than the limit allows, the ones beyond the limit in one
stable order (earliest reason stamp, then node name) step back: each resumes itself
(only its own drain, with our mark) and reports the drain as held. Every node
computes the same order from the same reasons, so no coordination is needed.

The re-read waits for the second of its own drain to pass (`settle`). Slurm stamps a
reason to the second, with slurmctld's clock, under the node lock: once slurmctld's
clock has left our second, every drain stamped in it or before is visible, so the
re-read sees every node that sorts ahead of ours, and none can come later and sort
ahead. Each node's keep-or-step-back is then the one the whole order gives: after one
round of simultaneous runs no more than the limit stay drained.

Cost to slurmctld, counted with sdiag: the view is one REQUEST_NODE_INFO through
Slurm's client library (scontrol.Slurm.node_lines; `scontrol show node` and every `sinfo`
also ask for the partitions), and it primes the node lookup the drain would make. A
held run costs 1 RPC, a run that drains 3 (view, drain, re-read; no re-read where the
limit is at least the cluster's size: `can_overflow`), a run that steps
back after a real race 4 (its undrain). Those four cannot be fewer: the node's own
state must be read before a drain (a drain overwrites any reason, an admin's too), and
its drain must be visible to the others before it can learn it came too late.
"""
from __future__ import annotations

import math
import time

from ..core.hostlist import natural_key
from ..core.reason import UNKNOWN_CAUSE, cause_group, is_ours, read_cause, words_of
from ..core.records import dataclass, field
from ..slurm.api import CAUSE_FIELD, foreign_states, node_is_drained, reason_is_current, stamp_time, strip_reason_stamp


@dataclass
class ClusterView:
    total: int
    ours: dict = field(default_factory=dict)     # node -> our reason, for nodes we drained
    causes: dict = field(default_factory=dict)   # node -> what its drain is grouped by (cause_group)
    stamps: dict = field(default_factory=dict)   # node -> when its reason was set (Slurm's stamp)
    infos: dict = field(default_factory=dict)    # node -> `scontrol show node` fields


def cluster_view(slurm, prefix: str) -> ClusterView:
    view = ClusterView(total=0)
    for info in slurm.list_nodes_alone():
        view.total += 1
        view.infos[info["NodeName"]] = info
        raw = info.get("Reason", "")
        reason = strip_reason_stamp(raw)
        # Ours: drained, or DOWN/rebooting after a reboot we asked for.
        if (node_is_drained(info) or foreign_states(info)) and reason_is_current(info) \
                and is_ours(reason, prefix):
            view.ours[info["NodeName"]] = words_of(reason, prefix)
            view.stamps[info["NodeName"]] = stamp_time(raw)
            view.causes[info["NodeName"]] = cause_group(read_cause(info.get(CAUSE_FIELD, "")))
    return view


# How far this node's clock may be from slurmctld's (NTP keeps them milliseconds apart;
# Slurm's munge credentials already fail past a few minutes).
CLOCK_SKEW = 0.3


def settle(after: float, now: float | None = None, skew: float = CLOCK_SKEW) -> float:
    """Seconds to wait, after a drain that returned by wall time `after`, until
    slurmctld's clock has surely left the second the drain was stamped in."""
    now = time.time() if now is None else now
    return max(0.0, math.floor(after + skew) + 1 + skew - now)


def can_overflow(view: ClusterView, policy) -> bool:
    """Could simultaneous drains go past the limit? Not when the limit is at least the
    cluster's size (a small cluster under the default 10 nodes): no re-read then."""
    cap = limit(view, policy)
    return cap is not None and cap < view.total


def keepers(view: ClusterView, policy) -> list[str] | None:
    """The nodes drained by us that keep their drain, in the stable order every node
    computes alike; None when there is no limit or the count is within it."""
    cap = limit(view, policy)
    if cap is None or len(view.ours) <= cap:
        return None
    order = sorted(view.ours, key=lambda n: (view.stamps.get(n, ""), natural_key(n)))
    return order[:cap]


def step_back(view: ClusterView, node: str, policy) -> str | None:
    """Why `node`, drained by us, must resume itself (beyond the limit in the stable
    order), or None when it keeps its drain."""
    keep = keepers(view, policy)
    if keep is None or node not in view.ours or node in keep:
        return None
    return (f"drain-storm breaker: {len(view.ours)} nodes drained by slurm-hooks at once, over the "
            f"limit {limit(view, policy)} of {view.total}; {node} stepped back (kept: "
            f"{', '.join(keep[:8])}{', ...' if len(keep) > 8 else ''})")


def limit(view: ClusterView, policy) -> int | None:
    limits = []
    if policy.max_drained_nodes:
        limits.append(policy.max_drained_nodes)
    if policy.max_drained_fraction:
        limits.append(math.ceil(policy.max_drained_fraction * view.total))
    return max(limits) if limits else None


def verdict(view: ClusterView, node: str, policy) -> str | None:
    """None when draining `node` is fine, else why not."""
    others = {n: r for n, r in view.ours.items() if n != node}
    cap = limit(view, policy)
    if cap is None or len(others) < cap:
        return None
    groups: dict[str, list[str]] = {}
    for n in sorted(others):
        groups.setdefault(view.causes.get(n, UNKNOWN_CAUSE), []).append(n)
    # The largest group of a known cause; drains without a recorded cause (older ones)
    # are one "unknown cause" group, never called an outage.
    cause, nodes = max(groups.items(), key=lambda kv: (kv[0] != UNKNOWN_CAUSE, len(kv[1])))
    outage = (f"; {len(nodes)} of them for {cause} ({', '.join(nodes[:8])}{', ...' if len(nodes) > 8 else ''}): "
              f"looks like one outage, not {len(nodes)} sick nodes"
              if len(nodes) >= 2 and cause != UNKNOWN_CAUSE else "")
    return (f"drain-storm breaker open: {len(others)} nodes already drained by slurm-hooks "
            f"(limit {cap} of {view.total}){outage}")
