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
moment (no CYCLE), so during one outage all of them read "0 drained" and all would
drain. So a node that may drain past the limit claims its place first (`claim`): it
writes a claim with its own clock's time into its Comment (our cause, saying `held`
and naming its suspect mounts: the claim is also its word on them), waits until every
claim stamped before its own must be visible (`claim_wait`), reads the cluster again
and drains only when the nodes drained by us and the claims ahead of its own (earlier
stamp, then node name) leave room under the limit (`claim_verdict`). Otherwise it holds,
and its claim expires by itself (`CLAIM_LIFE`): no update to take it back.

Why no moment goes past the limit: a claim counts only when Slurm took it within
`CLAIM_TRIP` of its stamp (the claimer measures its own update and gives up when it took
longer), so a claim stamped before ours is visible once our clock passed our stamp plus
CLAIM_TRIP and twice the clocks' skew. Of the nodes that drain in one storm, the one
with the latest claim saw all the others (claiming, or drained already) and every drain
before them: it drained only if all of them together are within the limit. The drain
replaces the claim in the same update, and lands before the claim expires (a drain that
would come later is not sent; one that returned later is checked as before: re-read,
and step back beyond the limit in the stable order, earliest reason stamp, then name).

Cost to slurmctld, counted with sdiag: the view is one REQUEST_NODE_INFO through
Slurm's client library (scontrol.Slurm.node_lines; `scontrol show node` and every `sinfo`
also ask for the partitions), and it primes the node lookup the drain would make. A
held run costs 1 RPC; a run that drains 4 (view, claim, re-read, drain) where simultaneous
drains could pass the limit, 2 where they cannot (the limit at least the cluster's
size: `can_overflow`); a claim that loses 3, and holds the node's word on its mounts
(nothing more to publish). The node's own state must be read before a drain (a drain
overwrites any reason, an admin's too), and its claim must be visible to the others
before it can learn whether it came in time.
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
    claims: dict = field(default_factory=dict)   # node -> its claim's stamp (our clocks), not drained


def cluster_view(slurm, prefix: str, node: str = "") -> ClusterView:
    """The node table as the breaker and the outage read it (one RPC): every node
    counted, and the records of `node` and of every node with a word of ours."""
    table = slurm.list_nodes_alone(node, prefix)
    view = ClusterView(total=table.others)      # counted, not listed: no word of ours
    for info in table:
        view.total += 1
        view.infos[info["NodeName"]] = info
        raw = info.get("Reason", "")
        if not raw and not info.get(CAUSE_FIELD):
            continue                      # no reason, no Comment: not ours, no claim (most nodes)
        reason = strip_reason_stamp(raw)
        # Ours: drained, or DOWN/rebooting after a reboot we asked for.
        if (node_is_drained(info) or foreign_states(info)) and reason_is_current(info) \
                and is_ours(reason, prefix):
            view.ours[info["NodeName"]] = words_of(reason, prefix)
            view.stamps[info["NodeName"]] = stamp_time(raw)
            view.causes[info["NodeName"]] = cause_group(read_cause(info.get(CAUSE_FIELD, "")))
        elif CLAIM_KEY in info.get(CAUSE_FIELD, ""):
            stamp = claim_of(read_cause(info.get(CAUSE_FIELD, "")))
            if stamp is not None and not node_is_drained(info) and not foreign_states(info):
                view.claims[info["NodeName"]] = stamp
    return view


# How far this node's clock may be from slurmctld's (NTP keeps them milliseconds apart;
# Slurm's munge credentials already fail past a few minutes).
CLOCK_SKEW = 0.3


# A claim counts only when Slurm took it within CLAIM_TRIP seconds of its stamp, and
# for CLAIM_LIFE seconds after it: the claimer's drain is sent only while at least
# CLAIM_TRIP of that life is left. An update is milliseconds; these are wide, because a
# storm starts dozens of runs at once on the nodes' few cores, and a claim that came
# too late holds its drain until the next run. A claim that lost is left to expire.
CLAIM_KEY = '"claim":'
CLAIM_TRIP = 2.0
CLAIM_LIFE = 8.0


def claim_of(cause: dict | None) -> float | None:
    """The stamp of the claim a cause carries, None when it carries none."""
    value = (cause or {}).get("claim")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        stamp = float(value)
    except ValueError:
        return None
    return stamp if math.isfinite(stamp) else None


def claim_wait(stamp: float, now: float | None = None, skew: float = CLOCK_SKEW) -> float:
    """Seconds to wait after our claim stamped `stamp` until every claim stamped before
    it that counts is visible in the node table."""
    now = time.time() if now is None else now
    return max(0.0, stamp + CLAIM_TRIP + 2 * skew - now)


def claim_late(stamp: float, now: float, skew: float = CLOCK_SKEW) -> bool:
    """Too late to send the drain: it might land after the others stopped counting the
    claim."""
    return now > stamp + CLAIM_LIFE - CLAIM_TRIP - 2 * skew


def claim_verdict(view: ClusterView, node: str, stamp: float, policy, now: float | None = None,
                  skew: float = CLOCK_SKEW) -> str | None:
    """None when `node`, which claimed at `stamp`, may drain: the nodes drained by us and
    the live claims ahead of its own leave room under the limit. Else why it holds."""
    now = time.time() if now is None else now
    cap = limit(view, policy)
    if cap is None:
        return None
    drained = sorted(n for n in view.ours if n != node)
    mine = (stamp, natural_key(node))
    ahead = sorted(n for n, s in view.claims.items()
                   if n != node and -skew <= now - s <= CLAIM_LIFE and (s, natural_key(n)) < mine)
    if len(drained) + len(ahead) < cap:
        return None
    return (f"drain-storm breaker: {len(drained)} nodes drained by slurm-hooks and {len(ahead)} claiming "
            f"ahead of {node} (limit {cap} of {view.total}){_outage(view, drained)}")


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
    return (f"drain-storm breaker open: {len(others)} nodes already drained by slurm-hooks "
            f"(limit {cap} of {view.total}){_outage(view, sorted(others))}")


def _outage(view: ClusterView, drained: list[str]) -> str:
    """"; N of them for CAUSE (...): looks like one outage", when two or more of the
    `drained` nodes were drained for one recorded cause; else ""."""
    if not drained:
        return ""
    groups: dict[str, list[str]] = {}
    for n in drained:
        groups.setdefault(view.causes.get(n, UNKNOWN_CAUSE), []).append(n)
    # The largest group of a known cause; drains without a recorded cause (older ones)
    # are one "unknown cause" group, never called an outage.
    cause, nodes = max(groups.items(), key=lambda kv: (kv[0] != UNKNOWN_CAUSE, len(kv[1])))
    return (f"; {len(nodes)} of them for {cause} ({', '.join(nodes[:8])}{', ...' if len(nodes) > 8 else ''}): "
            f"looks like one outage, not {len(nodes)} sick nodes"
            if len(nodes) >= 2 and cause != UNKNOWN_CAUSE else "")
