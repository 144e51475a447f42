"""An in-memory Slurm for tests of decisions: the `SlurmBackend` of slurm/api.py over a
few nodes and jobs held in dicts, with no slurmctld, no scontrol and no child process.

It is for tests of what slurm-hooks decides (act/actions.py, act/actuation.py,
decide/breaker.py): each operation changes the records the way slurmctld does and
answers them the way the real backends print them (`scontrol.Slurm`, `pyslurm.PyslurmBackend`):
State `IDLE+DRAIN`, `MIXED+DRAIN`, `DOWN+DRAIN`, `IDLE+DRAIN+REBOOT_REQUESTED`,
`DOWN+DRAIN+REBOOT_ISSUED`, `DOWN+NOT_RESPONDING`; a Reason
with Slurm's ` [user@YYYY-MM-DDTHH:MM:SS]` stamp in show_node and without it in
node_state; jobs keyed like squeue's records (JobId, ArrayJobId/ArrayTaskId,
UserId `name(uid)`, JobState, NodeList, Requeue, BatchFlag, Restarts, AdminComment).
It raises the real backends' errors in the same situations: `SlurmError` with
scontrol's words where Slurm refuses, `SlurmUnavailable` while `reachable` is False
(and for the rest of the run after one such call, as the real backends do),
`OutOfTime` once the run's `deadline` is spent.

tests/test_slurm_contract.py runs the same operations against this fake and against
both real backends on a real cluster (Slurm 22.05 and 25.11) and compares the records,
so the fake cannot drift from what Slurm does.

Where Slurm releases differ, `version` picks: 25.11 keeps a node's last reason after
RESUME and UNDRAIN, says `Invalid node state transition` where 22.05 says `Invalid
node state specified`, and requeues only a running job, leaving any other without a word (22.05
still refuses one that may never be requeued). Where the
backends differ, it does as scontrol does: `cancel` of a job that ended or is unknown
is no error (scancel exits 0; the pyslurm backend reports both).

What it does not model: scheduling (a job runs where and when the test says:
`add_job`, `start_job`), the node's boot and its slurmd (`complete_reboot` stands for
slurmd coming back after RebootProgram, `slurmd_lost` and `slurmd_back` for one that
stops answering and comes back), and the processes of jobs: a job's listpids entries
are the ones the test gives it (`add_job(pids=...)`), named as slurmstepd names them.
"""
from __future__ import annotations

import time

from .. import TYPE_CHECKING
from .api import (
    CAUSE_FIELD,
    MIN_CALL,
    STAMP_FORMAT,
    NodeTable,
    OutOfTime,
    PrimedNodes,
    SlurmError,
    SlurmUnavailable,
    reason_stamp,
)
from .scontrol import said_code

if TYPE_CHECKING:
    from .api import Choice

# The flags Slurm prints after a node's base state, in the order it prints them
# (node_state_string_complete).
FLAG_ORDER = ("CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "INVALID_REG", "FAIL",
              "MAINT", "POWER_DOWN", "POWER_UP", "NOT_RESPONDING", "POWERED_DOWN", "REBOOT_ISSUED",
              "REBOOT_REQUESTED", "RESERVED", "PLANNED")
ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE", "OUT_OF_MEMORY")
RUNS = ("RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "STOPPED")

# What scontrol (or scancel) says when slurmctld refuses: the words of Slurm's error
# codes (slurm_strerror), as the real backends pass them on.
INVALID_NODE = "Invalid node name specified"
INVALID_STATE = "Invalid node state specified"            # 22.05; "... transition" from 23.02
INVALID_JOB = "Invalid job id specified"
BATCH_ONLY = "Only batch jobs are accepted or processed"
DISABLED = "Requested operation is presently disabled"
FINISHED = "Job has already finished"
NO_REBOOT_PROGRAM = "RebootProgram isn't defined"
NOT_PENDING = "Job is no longer pending execution"
NO_REASON = "You must specify a reason when DOWNING or DRAINING a node. Request denied"
UNREACHABLE = "Unable to contact slurm controller (connect failure)"
REBOOT_COMPLETE = "reboot complete"
REBOOT_ISSUED = "reboot issued"
NOT_RESPONDING = "Not responding"

# What slurmctld counts (sdiag) for each operation, by backend, as measured on Slurm
# 22.05 and 25.11 (tests/test_slurm_contract.py holds these to sdiag): `scontrol show
# node` loads the partitions too, squeue's one-job load its partitions and federation,
# pyslurm's job load its steps; listpids asks the node's slurmstepd, not slurmctld.
# Anything not named is one RPC.
RPC_WEIGHTS = {
    "scontrol": {"show_node": 2, "node_state": 2, "list_nodes": 1, "list_nodes_alone": 1, "show_job": 3,
                 "list_jobs": 2, "listpids": 0, "jobs_on": 3, "job_hold": 3},
    "pyslurm": {"show_node": 2, "node_state": 2, "list_nodes": 2, "list_nodes_alone": 1, "show_job": 4,
                "list_jobs": 1, "listpids": 0, "jobs_on": 3, "job_hold": 3},
}



def _refused(said: str) -> SlurmError:
    # The code the real backends give for the same words (scontrol.said_code).
    return SlurmError(said, code=said_code(said))


class FakeNode:
    def __init__(self, name: str, cpus: int, gres: str):
        self.name, self.cpus, self.gres = name, cpus, gres
        self.base = "IDLE"                     # IDLE, MIXED, ALLOCATED, DOWN, FUTURE
        self.flags: set[str] = set()
        self.reason = ""
        self.reason_user = "root"
        self.reason_time: float | None = None
        self.next_state = ""                   # a pending reboot's nextstate
        self.asap_drain = False                # the drain came with the ASAP reboot itself
        self.comment = ""

    def state(self) -> str:
        return "+".join([self.base] + [f for f in FLAG_ORDER if f in self.flags])


class FakeSlurm(PrimedNodes):
    """The in-memory backend. `nodes`: names, or name -> {cpus, gres}; `version`: the
    Slurm it behaves as (25.11 keeps a node's last reason after RESUME and UNDRAIN,
    22.05 clears it). `reachable = False` makes slurmctld not answer; `reboot_program`
    False is a slurm.conf without RebootProgram. `calls` counts each operation asked of
    slurmctld (an answer from primed fields is not one); `rpcs()` adds them up the way
    slurmctld counts them."""

    def __init__(self, nodes=("n1", "n2", "n3"), version: str = "25.11", name: str = "fake",
                 cpus: int = 2, user: str = "root", reboot_program: bool = True, backend: str = "scontrol",
                 return_to_service: int = 2, requeue_hold: int = 120):
        self.name = name
        # cred_expire (AuthInfo), or SchedulerParameters=requeue_delay from 25.11: how
        # long a requeued job waits once it left COMPLETING (Slurm adds a second).
        self.requeue_hold = requeue_hold
        self.backend = backend                          # whose RPC counts rpcs() gives
        # Both backends read one node's state through Slurm's client library (one RPC)
        # where it loads, else through sinfo (two): what they do here.
        self.library = True
        self.return_to_service = return_to_service      # slurm.conf's ReturnToService
        self.version = version
        self.user = user                                # who the calls run as (the stamp's user)
        self.reachable = True
        self.reboot_program = reboot_program
        self.deadline: float | None = None
        self.choice: Choice | None = None
        self.down: str | None = None
        self.env = {"PATH": "/usr/bin:/bin", "LANG": "C", "LC_ALL": "C"}
        self.scontrol: str | None = None
        self.where = "nowhere: an in-memory Slurm (slurm/fake.py)"
        self.calls: dict[str, int] = {}
        self.opened = 0
        self.pids: dict[str, dict] = {}                 # node -> listpids' answer
        self.nodes: dict[str, FakeNode] = {}
        self.jobs: dict[str, dict] = {}
        self._primed: dict[str, dict] = {}
        self._next_job = 1000
        spec = nodes if isinstance(nodes, dict) else {n: {} for n in nodes}
        for n, s in spec.items():
            self.nodes[n] = FakeNode(n, int(s.get("cpus", cpus)), s.get("gres", "(null)"))

    # --- a run's connection -------------------------------------------------------------
    def open(self, cfg=None, deadline: float | None = None) -> FakeSlurm:
        """connect.open_backend's stand-in: each run opens the backend afresh (its own
        deadline, no "down" from a run before, nothing primed), over the same cluster."""
        self.opened += 1
        self.deadline, self.down = deadline, None
        self._primed = {}
        return self

    def rpcs(self) -> int:
        """The RPCs slurmctld served for the calls so far, as sdiag counts them for the
        real backend this fake stands for (RPC_WEIGHTS)."""
        weight = dict(RPC_WEIGHTS[self.backend])
        if self.library:
            weight["node_state"] = 1                    # REQUEST_NODE_INFO_SINGLE alone
        return sum(weight.get(op, 1) * n for op, n in self.calls.items())

    def _rpc(self, op: str) -> None:
        if self.down is not None:
            # No slurmctld a moment ago: the real backends do not try again this run.
            raise SlurmUnavailable(self.down)
        if self.deadline is not None and self.deadline - time.monotonic() < MIN_CALL:
            raise OutOfTime("the run's time for Slurm calls is spent")
        self.calls[op] = self.calls.get(op, 0) + 1
        if not self.reachable:
            self.down = UNREACHABLE
            raise SlurmUnavailable(UNREACHABLE)

    def _node(self, node: str) -> FakeNode:
        n = self.nodes.get(node)
        if n is None:
            raise _refused(INVALID_NODE)
        return n

    # --- what a test sets up (Slurm's own doing, or an admin's) --------------------------
    def add_job(self, nodes: str = "n1", user: str = "alice", uid: int = 1001, state: str = "RUNNING",
                batch: bool = True, requeue: bool = True, cpus: int = 1, job: str | None = None,
                array: str | None = None, task: int | None = None, admin_comment: str = "",
                pids: tuple = (), begin: float | None = None, unkillable: bool = False) -> str:
        """A job Slurm runs (or holds) on `nodes` (comma-separated); its JobId. An array
        element gets `array` (ArrayJobId) and `task`; the element that carries the
        array's own id has job == array. `pids`: its processes on its first node while it
        runs, as listpids names them: the first is the step's task 0 (`batch` for a batch
        job, else step 0), the others that task's children, which slurmstepd gives no
        task id. `begin`: the begin time its user set (`--begin`: pending until then).
        `unkillable`: a task of it on its first node cannot die: once ended (requeue,
        cancel) it stays COMPLETING there until the node is set DOWN."""
        now = time.time()
        if job is None:
            self._next_job += 1
            job = str(self._next_job)
        info = {"JobId": job, "UserId": f"{user}({uid})", "JobState": state,
                "NodeList": nodes if state in RUNS or state in ENDED else "(null)",
                "NumNodes": str(len(nodes.split(","))), "Requeue": "1" if requeue else "0",
                "BatchFlag": "1" if batch else "0", "Restarts": "0", "AdminComment": admin_comment or "(null)",
                "_cpus": cpus, "_nodes": nodes, "_pids": tuple(pids), "_unkillable": unkillable,
                "_submit": now, "_eligible": begin if begin is not None else now,
                "_reason": "BeginTime" if begin is not None and state == "PENDING" else "None"}
        if array is not None:
            info["ArrayJobId"], info["ArrayTaskId"] = str(array), str(task if task is not None else 0)
        self.jobs[job] = info
        self._occupancy()
        return job

    def end_job(self, job: str, state: str = "COMPLETED") -> None:
        self.jobs[job]["JobState"] = state
        self._occupancy()

    def start_job(self, job: str) -> None:
        """The scheduler starts a pending job again (where it ran before)."""
        info = self.jobs[job]
        info["JobState"], info["NodeList"] = "RUNNING", info["_nodes"]
        self._occupancy()

    def set_state(self, node: str, base: str | None = None, flags: tuple = (), reason: str | None = None,
                  user: str | None = None) -> None:
        """Put a node in a state by another's hand (an admin's DOWN, MAINT, ...)."""
        n = self._node(node)
        if base is not None:
            n.base = base
        n.flags = set(flags)
        if reason is not None:
            self._set_reason(n, reason, user)
        self._occupancy()

    def seed(self, records: list[dict]) -> None:
        """Take the nodes' state and reason from records as a real backend gives them
        (list_nodes): the fake starts where a real cluster stands, its reasons' stamps too."""
        for info in records:
            n = self.nodes.get(info["NodeName"])
            if n is None:
                continue
            states = info.get("State", "IDLE").replace("*", "").split("+")
            n.base, n.flags = states[0], set(states[1:])
            raw = info.get("Reason", "")
            stamp = reason_stamp(raw)
            if stamp is None:
                n.reason, n.reason_time = raw, None
            else:
                n.reason, n.reason_user = stamp[0], stamp[1]
                n.reason_time = time.mktime(time.strptime(stamp[2], STAMP_FORMAT))

    def complete_reboot(self, node: str) -> None:
        """slurmd is back after the reboot slurmctld issued: nextstate=DOWN keeps the
        node DOWN with its reason and Slurm's `reboot complete` after it."""
        n = self._node(node)
        n.flags -= {"REBOOT_REQUESTED", "REBOOT_ISSUED", "DRAIN", "NOT_RESPONDING"}
        if n.next_state == "DOWN":
            n.base = "DOWN"
            self._add_reason(n, REBOOT_COMPLETE)
        else:
            n.base, n.reason = "IDLE", ""
        n.next_state = ""
        self._occupancy()

    def slurmd_lost(self, node: str) -> None:
        """The node's slurmd stops answering, past SlurmdTimeout: slurmctld sets it DOWN
        and NOT_RESPONDING with `Not responding`, which 25.11 adds after any reason the
        node has (ours included) and 22.05 writes only where there is none. (The jobs a
        DOWN node had are not modelled: a test's node has none.)"""
        n = self._node(node)
        if self._running_on(node):
            raise NotImplementedError("slurmd_lost: the fake does not model the jobs of a node that stops answering")
        n.flags.add("NOT_RESPONDING")
        n.base = "DOWN"
        if self._major() >= 23:
            self._add_reason(n, NOT_RESPONDING)
        elif not n.reason or n.reason.startswith(NOT_RESPONDING):
            n.reason, n.reason_user, n.reason_time = NOT_RESPONDING, self.user, time.time()

    def slurmd_back(self, node: str) -> None:
        """The node's slurmd registers again: NOT_RESPONDING goes, and a DOWN node comes
        back to service as ReturnToService says (2: whatever put it DOWN; 1: only for
        `Not responding`), its DRAIN and reason left as they are."""
        n = self._node(node)
        n.flags.discard("NOT_RESPONDING")
        if n.base == "DOWN" and (self.return_to_service == 2
                                 or (self.return_to_service == 1 and n.reason == NOT_RESPONDING)):
            n.base = "IDLE"
            self._occupancy()

    def _add_reason(self, n: FakeNode, note: str) -> None:
        # Slurm's set_node_reason: a note after the reason there is, once.
        if not n.reason:
            n.reason = note
        elif f" : {note}" not in n.reason:
            n.reason = f"{n.reason} : {note}"
        n.reason_user, n.reason_time = self.user, time.time()

    def _set_reason(self, n: FakeNode, reason: str, user: str | None = None) -> None:
        n.reason, n.reason_user, n.reason_time = reason, user or self.user, time.time()

    def _clear_reason(self, n: FakeNode) -> None:
        # Slurm 25.11 keeps the last reason (and its stamp) on a node put back in service.
        if self._major() < 23:
            n.reason, n.reason_time = "", None

    def _major(self) -> int:
        return int(self.version.split(".")[0])

    def _running_on(self, node: str) -> list[dict]:
        return [j for j in self.jobs.values() if j["JobState"] in RUNS
                and node in j["_nodes"].split(",")]

    def _occupancy(self) -> None:
        """The base state from the jobs on each node (IDLE, MIXED, ALLOCATED), and the
        reboot slurmctld issues once a node with one pending has no job left."""
        for n in self.nodes.values():
            if n.base in ("DOWN", "FUTURE"):
                continue
            jobs = self._running_on(n.name)
            used = sum(int(j["_cpus"]) for j in jobs if j["JobState"] != "COMPLETING")
            n.base = "IDLE" if used == 0 else "MIXED" if used < n.cpus else "ALLOCATED"
            # A job held COMPLETING (a task it could not kill) holds the node COMPLETING,
            # and a reboot waits for it.
            held = any(j["JobState"] == "COMPLETING" for j in jobs)
            n.flags = n.flags | {"COMPLETING"} if held else n.flags - {"COMPLETING"}
            if used == 0 and not held and "REBOOT_REQUESTED" in n.flags:
                # Issued once idle: RebootProgram runs, the node is DOWN until slurmd
                # registers after the boot, and its reason says so.
                n.flags = (n.flags - {"REBOOT_REQUESTED"}) | {"REBOOT_ISSUED"}
                n.base = "DOWN"
                self._add_reason(n, REBOOT_ISSUED)

    # --- properties of the records ---------------------------------------------------------
    def _shown(self, n: FakeNode, how: str) -> str:
        """The node's state as the backend's call `how` shows it: a partly allocated node
        is MIXED, but for sinfo, which the scontrol backend reads one node's state
        through where Slurm's library does not load: on 22.05 it says ALLOCATED for one
        being drained. (Slurm's one-node load, pyslurm's and the library's, says MIXED or
        ALLOCATED at moments no test controls.)"""
        state = n.state()
        if n.base != "MIXED":
            return state
        if (self.backend == "scontrol" and not self.library and how == "state" and "DRAIN" in n.flags
                and self._major() < 23):
            return state.replace("MIXED", "ALLOCATED", 1)
        return state

    def _record(self, n: FakeNode, how: str = "list") -> dict:
        out = {"NodeName": n.name, "State": self._shown(n, how), "Gres": n.gres}
        if n.reason:
            stamp = (f" [{n.reason_user}@{time.strftime(STAMP_FORMAT, time.localtime(n.reason_time))}]"
                     if n.reason_time else "")
            out["Reason"] = n.reason + stamp
        if n.comment:
            out[CAUSE_FIELD] = n.comment       # scontrol shows a node's Comment only when set
        return out

    @staticmethod
    def _job_record(info: dict) -> dict:
        return {k: v for k, v in info.items() if not k.startswith("_")}

    # --- SlurmBackend ------------------------------------------------------------------------
    def _show_node(self, node: str) -> dict | None:
        self._rpc("show_node")
        n = self.nodes.get(node)
        return None if n is None else self._record(n, "show")

    def _node_state(self, node: str) -> dict | None:
        self._rpc("node_state")
        n = self.nodes.get(node)
        if n is None:
            return None
        return {"NodeName": n.name, "State": self._shown(n, "state"), "Reason": n.reason, CAUSE_FIELD: n.comment}

    def list_nodes(self) -> list[dict]:
        self._rpc("list_nodes")
        return [self._record(n) for n in self.nodes.values()]

    def list_nodes_alone(self, mine: str = "", prefix: str = "") -> NodeTable:
        """As the real backends (slurm/slurmlib.py `nodes-alone`): a node other than
        `mine` with no word of ours is counted, not listed."""
        from ..core.reason import CAUSE_TAG, MARK
        self._rpc("list_nodes_alone")
        out = NodeTable()
        marks = [MARK] + ([prefix] if prefix.strip() else [])
        for n in self.nodes.values():
            rec = self._record(n)
            if rec["NodeName"] != mine and CAUSE_TAG not in rec.get(CAUSE_FIELD, "") \
                    and not any(m in rec.get("Reason", "") for m in marks):
                out.others += 1
            else:
                out.append(rec)
        return out

    def show_job(self, job: str) -> dict | None:
        self._rpc("show_job")
        info = self.jobs.get(job)
        if info is None:
            info = next((j for j in self.jobs.values()
                         if f"{j.get('ArrayJobId')}_{j.get('ArrayTaskId')}" == job), None)
        return None if info is None else self._job_record(info)

    def list_jobs(self) -> list[dict]:
        self._rpc("list_jobs")
        return [self._job_record(j) for j in self.jobs.values()]

    def _job(self, job: str) -> dict:
        info = self.jobs.get(job)
        if info is None:
            info = next((j for j in self.jobs.values()
                         if f"{j.get('ArrayJobId')}_{j.get('ArrayTaskId')}" == job), None)
        if info is None:
            raise _refused(INVALID_JOB)
        return info

    def drain(self, node: str, reason: str) -> None:
        self.changing(node)
        if not reason:
            raise _refused(NO_REASON)          # scontrol's own check: no RPC
        self._rpc("drain")
        n = self._node(node)
        n.flags.add("DRAIN")
        self._set_reason(n, reason)

    def drain_with_cause(self, node: str, reason: str, cause: str) -> None:
        """One update: DRAIN, the reason and the node's Comment."""
        self.changing(node)
        if not reason:
            raise _refused(NO_REASON)
        self._rpc("drain_with_cause")
        n = self._node(node)
        n.flags.add("DRAIN")
        self._set_reason(n, reason)
        n.comment = cause

    def release(self, node: str, state: str, rest: str = "") -> None:
        """One update: UNDRAIN or RESUME, and the Comment set to what is left of it."""
        self.changing(node)
        self._rpc("release")
        n = self._node(node)
        if state.upper() == "RESUME":
            self._resume(n)
        else:
            self._undrain(n)
        n.comment = rest

    def set_node_comment(self, node: str, text: str) -> None:
        self.changing(node)
        self._rpc("set_node_comment")
        self._node(node).comment = text

    def undrain(self, node: str) -> None:
        self.changing(node)
        self._rpc("undrain")
        self._undrain(self._node(node))

    def _undrain(self, n: FakeNode) -> None:
        # Not refused on a node that is not drained (DOWN or IDLE): nothing changes.
        if "DRAIN" not in n.flags:
            return
        n.flags.discard("DRAIN")
        if n.base != "DOWN" and not n.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}:
            self._clear_reason(n)

    def resume(self, node: str) -> None:
        self.changing(node)
        self._rpc("resume")
        self._resume(self._node(node))

    def _resume(self, n: FakeNode) -> None:
        if n.base != "DOWN" and not n.flags & {"DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED"}:
            raise _refused(INVALID_STATE if self._major() < 23 else "Invalid node state transition")
        n.flags -= {"DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED"}
        n.next_state = ""
        if n.base == "DOWN":
            n.base = "IDLE"
        self._clear_reason(n)
        self._occupancy()

    def set_down(self, node: str, reason: str) -> None:
        self.changing(node)
        if not reason:
            raise _refused(NO_REASON)
        self._rpc("set_down")
        n = self._node(node)
        n.base = "DOWN"
        self._set_reason(n, reason)
        # slurmctld ends the jobs of a DOWN node: a batch job that may be requeued is.
        for j in self._running_on(node):
            if j["JobState"] == "COMPLETING":
                # Let go of, with the task it could not kill: 25.11 then holds it as any
                # requeued job; 22.05 starts it again at once (its bug: no hold).
                self._left_completing(j, hold=self._major() >= 23)
                continue
            if j["BatchFlag"] == "1" and j["Requeue"] == "1":
                j["JobState"], j["NodeList"] = "PENDING", "(null)"
                j["Restarts"] = str(int(j["Restarts"]) + 1)
            else:
                j["JobState"] = "NODE_FAIL"
        self._occupancy()

    def reboot(self, node: str, reason: str) -> None:
        self.changing(node)
        if not self.reboot_program:
            # scontrol reads slurm.conf and refuses before asking slurmctld anything.
            raise _refused(NO_REBOOT_PROGRAM)
        self._rpc("reboot")
        n = self._node(node)
        # `reboot ASAP nextstate=DOWN reason=...`: drained at once, rebooted once idle.
        n.asap_drain = "DRAIN" not in n.flags
        n.flags |= {"DRAIN", "REBOOT_REQUESTED"}
        n.next_state = "DOWN"
        self._set_reason(n, reason)
        self._occupancy()

    def cancel_reboot(self, node: str) -> None:
        self.changing(node)
        self._rpc("cancel_reboot")
        n = self._node(node)
        if "REBOOT_ISSUED" in n.flags:
            raise _refused("Reboot already in progress")
        if "REBOOT_REQUESTED" not in n.flags:
            raise _refused(INVALID_STATE if self._major() < 23 else "Invalid node state transition")
        n.flags.discard("REBOOT_REQUESTED")
        n.next_state = ""
        if n.asap_drain:
            # Only the drain the ASAP reboot added goes with it, its reason too.
            n.flags.discard("DRAIN")
            self._clear_reason(n)
        n.asap_drain = False
        self._occupancy()

    def set_admin_comment(self, job: str, text: str) -> None:
        self._rpc("set_admin_comment")
        info = self._job(job)
        if info["JobState"] in ENDED:
            raise _refused(FINISHED)
        info["AdminComment"] = text or "(null)"

    def requeue(self, job: str) -> None:
        self._rpc("requeue")
        info = self._job(job)
        state = info["JobState"]
        if info["BatchFlag"] != "1":
            raise _refused(BATCH_ONLY)
        if state not in RUNS:
            # Incomplete: a job that is not running is left as it is, without a word
            # (22.05 still refuses one that may never be requeued).
            if self._major() < 23 and info["Requeue"] != "1":
                raise _refused(DISABLED)
            return
        if info["Requeue"] != "1":
            raise _refused(DISABLED)
        info["Restarts"] = str(int(info["Restarts"]) + 1)
        if info["_unkillable"]:
            info["JobState"] = "COMPLETING"       # pending, held on its node by the task
        else:
            self._left_completing(info)
        self._occupancy()

    def _left_completing(self, info: dict, hold: bool = True) -> None:
        """A requeued job's nodes are free: it waits Slurm's hold (batch_requeue_fini:
        the begin time, unless its user's is later, and the submit time reset)."""
        now = time.time()
        info["JobState"], info["NodeList"], info["_unkillable"] = "PENDING", "(null)", False
        info["_submit"] = now
        if hold and info["_eligible"] <= now:
            info["_eligible"] = now + self.requeue_hold + 1
        info["_reason"] = "BeginTime" if info["_eligible"] > now else "None"

    def jobs_on(self, node: str) -> list[dict]:
        self._rpc("jobs_on")
        return [self._job_record(j) for j in self._running_on(node)]

    def job_hold(self, job: str) -> dict | None:
        self._rpc("job_hold")
        try:
            info = self._job(job)
        except SlurmError:
            return None
        uid = info["UserId"].rpartition("(")[2]
        out = {"JobId": info["JobId"], "UserId": f"({uid}", "JobState": info["JobState"],
               "EligibleTime": time.strftime(STAMP_FORMAT, time.localtime(info["_eligible"])),
               "SubmitTime": time.strftime(STAMP_FORMAT, time.localtime(info["_submit"])),
               "Reason": info["_reason"] if info["JobState"] == "PENDING" else "None"}
        if "ArrayJobId" in info:
            out["ArrayJobId"], out["ArrayTaskId"] = info["ArrayJobId"], info["ArrayTaskId"]
        return out

    def start_now(self, job: str) -> None:
        self._rpc("start_now")
        info = self._job(job)
        if info["JobState"] != "PENDING" and info["JobState"] != "COMPLETING":
            raise _refused(NOT_PENDING)
        info["_eligible"] = time.time()
        if info["JobState"] == "PENDING":
            info["_reason"] = "None"

    def cancel(self, job: str) -> None:
        self._rpc("cancel")
        # scancel says nothing (exit 0) of a job that is unknown or has ended.
        info = self.jobs.get(job) or next((j for j in self.jobs.values()
                                           if f"{j.get('ArrayJobId')}_{j.get('ArrayTaskId')}" == job), None)
        if info is None or info["JobState"] in ENDED:
            return
        info["JobState"] = "CANCELLED"
        self._occupancy()

    def listpids(self, node: str) -> dict:
        from ..host.jobs import JobRef
        self._rpc("listpids")
        out = dict(self.pids.get(node, {}))
        for j in self._running_on(node):
            if j["_nodes"].split(",")[0] != node:
                continue
            step = "batch" if j["BatchFlag"] == "1" else "0"
            for i, pid in enumerate(j["_pids"]):
                out[int(pid)] = JobRef(job=j["JobId"], step=step, task="0" if i == 0 else None)
        return out
