"""The in-memory Slurm (slurm_hooks/slurm/fake.py) keeps to what the real backends do.

Each case is one sequence of operations, written once, run against the real backend
under test on the real cluster (scontrol on Debian's 22.05; scontrol and pyslurm on
25.11, by the per-backend parametrisation of a --slurm-prefix session) and against a
FakeSlurm of the same nodes and Slurm version. Each gives a transcript of the records
it read and the errors it met; the two must be equal. Only what must differ is
normalised: the time in a reason's stamp, job ids (counted from the case's first job),
pids (listpids' entries are compared by what they name), MIXED against ALLOCATED in
what pyslurm's one-node load says (it says either for a partly allocated node), and two
things of node records no operation sets: a NOT_RESPONDING that comes and goes with a loaded host's
pings (kept where a case stops a slurmd itself), and the reason of a node in service
(Slurm 25.11 keeps the last one, and drops it at moments no case controls; decisions
read a reason only beside a state it explains: slurm/api.py reason_is_current). The
jobs belong to an unprivileged user, as on a real cluster.

Beyond the records, the fake's count of slurmctld's RPCs is held to sdiag's, call by
call, for the backend under test.
"""
from __future__ import annotations

import pytest
from attacker import unprivileged_user
from helpers import sdiag_counts

from slurm_hooks.core.config import SlurmConfig
from slurm_hooks.core.reason import cause_text
from slurm_hooks.slurm.api import CAUSE_FIELD, STAMP_INSIDE, reason_is_current
from slurm_hooks.slurm.connect import open_backend
from slurm_hooks.slurm.fake import FakeSlurm

pytestmark = [pytest.mark.cluster, pytest.mark.per_backend]
USER = "shk-jobs"
P = "slurm-hooks:"
NODE_KEYS = ("NodeName", "State", "Reason")
JOB_KEYS = ("JobId", "ArrayJobId", "ArrayTaskId", "UserId", "JobState", "NodeList", "NumNodes",
            "Requeue", "BatchFlag", "Restarts", "AdminComment")
# Job states on their way somewhere: a real job passes them in a moment, the fake's never.
# The test cluster's AuthInfo=cred_expire: Slurm's requeue hold.
HOLD = 10
PASSING = ("COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT")


@pytest.fixture(scope="module")
def user():
    with unprivileged_user(USER) as u:
        yield u


class Side:
    """What a case needs besides the backend: jobs of the user, and waiting for Slurm
    to settle (the fake is settled at once)."""

    def __init__(self, slurm):
        self.slurm = slurm
        self.base: int | None = None
        self.seen: list[str] = []

    def job_id(self, value: str) -> str:
        """A job id counted from the case's first job: `J0`, `J1`, ..."""
        if not value.isdigit() or self.base is None:
            return value
        return f"J{int(value) - self.base}"

    def node(self, name: str) -> dict | None:
        info = self.slurm.show_node(name)
        return None if info is None else self._one(normal(info))

    def state(self, name: str) -> dict | None:
        info = self.slurm.node_state(name)
        return None if info is None else self._one(normal(info), one_node_load=True)

    def _one(self, record: dict, one_node_load: bool = False) -> dict:
        # Slurm's one-node load says MIXED or ALLOCATED for a partly allocated node, at
        # moments no case controls (its node list, and sinfo, say MIXED): pyslurm's every
        # read of one node, and node_state through the library (both backends).
        if self.backend == "pyslurm" or (one_node_load and self.library):
            record["State"] = record["State"].replace("MIXED", "ALLOCATED", 1)
        return record

    @property
    def backend(self) -> str:
        return getattr(self.slurm, "backend", self.slurm.name)

    @property
    def library(self) -> bool:
        # Whether node_state goes through Slurm's library: the scontrol backend's own,
        # or the one the pyslurm backend reads one node through.
        slurm = getattr(self.slurm, "_scontrol", self.slurm)
        return bool(getattr(slurm, "library", False))

    def job(self, job: str) -> dict | None:
        info = self.slurm.show_job(job)
        if info is None:
            return None
        out = {k: info[k] for k in JOB_KEYS if k in info}
        for k in ("JobId", "ArrayJobId"):
            if k in out:
                out[k] = self.job_id(out[k])
        return out

    def pids(self, node: str, running: bool = True) -> list:
        """listpids' entries of the case's jobs on `node`, by what they name (sorted)."""
        refs = self.slurm.listpids(node)
        return sorted((self.job_id(r.job), r.step or "-", r.task or "-") for r in refs.values()
                      if r.job.isdigit() and self.base is not None and int(r.job) >= self.base)

    def tried(self, op, *args) -> str:
        """"ok" when `op` succeeded, else the name of the error's type and its code (what
        decisions read)."""
        try:
            op(*args)
        except Exception as e:
            return f"{type(e).__name__}:{getattr(e, 'code', '')}"
        return "ok"


class Real(Side):
    def __init__(self, slurm, cluster, user):
        super().__init__(slurm)
        self.cluster, self.user = cluster, user

    def _sbatch(self, *args: str) -> str:
        from test_security import readable_by_users
        conf = readable_by_users(self.cluster)
        r = self.user.run(self.cluster.binary("sbatch"), "--parsable", "--chdir", self.user.home, "-o", "/dev/null",
                          *args, self.user.write("job.sh", "#!/bin/sh\nsleep 300\n", 0o755),
                          env=self.user.env(SLURM_CONF=str(conf)))
        return r.stdout.strip().split(";")[0]

    def submit(self, node: str, *args: str, array: int = 0) -> str:
        job = self._sbatch("-N1", "-w", node, *(("-a", f"0-{array - 1}") if array else ()), *args)
        if self.base is None:
            self.base = int(job)
        ids = [f"{job}_{t}" for t in range(array)] if array else [job]
        self.cluster.wait_for(lambda: all(self.cluster.job_state(i) == "RUNNING" for i in ids), 30,
                              what=f"job {job} running")
        self.seen += ids
        return job

    def submit_later(self, node: str, seconds: int) -> str:
        """A job its user asked to begin `seconds` from now: pending until then."""
        job = self._sbatch("-N1", "-w", node, f"--begin=now+{seconds}")
        if self.base is None:
            self.base = int(job)
        self.cluster.wait_for(lambda: self.cluster.job_state(job) == "PENDING", 30, what=f"job {job} pending")
        self.seen.append(job)
        return job

    def srun(self, node: str) -> str:
        from test_security import readable_by_users
        conf = readable_by_users(self.cluster)
        self.user.spawn(self.cluster.binary("srun"), "-N1", "-w", node, "sleep", "300",
                        env=self.user.env(SLURM_CONF=str(conf)))

        def running():
            jobs = [j for j, s in self.cluster.squeue() if s == "RUNNING" and j not in self.seen]
            return jobs[0] if jobs else None
        job = self.cluster.wait_for(running, 30, what="the srun job running")
        if self.base is None:
            self.base = int(job)
        self.seen.append(job)
        return job

    def pids(self, node: str, running: bool = True) -> list:
        """As the fake's, once the job's processes have started (two readings in a row
        alike, wait_for's interval apart), or, `running` False, once they are gone."""
        last: list = [None]

        def steady():
            now = Side.pids(self, node)
            same, last[0] = now == last[0], now
            if not running:
                return now == [] and "none"
            return now if same and now else None
        got = self.cluster.wait_for(steady, 30, what=f"the job processes on {node}")
        return [] if got == "none" else got

    def lose(self, node: str) -> None:
        """The node's slurmd stops; past SlurmdTimeout slurmctld sets it DOWN."""
        self.cluster._stop_slurmd(node)
        self.cluster.wait_for(lambda: self.cluster.node_state(node).startswith("DOWN"), 60,
                              what=f"{node} DOWN, not responding")

    def back(self, node: str) -> None:
        self.cluster._start_slurmd(node)
        self.cluster.wait_for(lambda: "NOT_RESPONDING" not in self.slurm.node_state(node)["State"], 30,
                              what=f"{node}'s slurmd registered again")

    def issued(self, node: str) -> None:
        self.cluster.wait_for(lambda: "REBOOT_ISSUED" in self.slurm.node_state(node)["State"], 30,
                              what=f"the reboot of {node} issued")

    def boot(self, node: str) -> None:
        self.cluster.boot_slurmd(node)

    def keep_down(self) -> None:
        """ReturnToService=1 for the rest of the case (the reset after it restores 2): with
        the test cluster's 2, slurmctld returns a DOWN node to service at its next answered
        ping, racing the case's next call."""
        self.cluster.reconfigure(self.cluster.conf_extra + "\nReturnToService=1\n")

    def settle(self) -> None:
        """Until no node and no job of the case is on its way from one state to another."""
        def settled():
            nodes = self.cluster.show_nodes()
            if any("COMPLETING" in n.get("State", "") for n in nodes.values()):
                return False
            return all(not self.cluster.job_state(j).startswith(PASSING) for j in self.seen)
        self.cluster.wait_for(settled, 30, what="Slurm settled")


class Fake(Side):
    def __init__(self, slurm: FakeSlurm, user):
        super().__init__(slurm)
        self.user = user
        self.base = slurm._next_job + 1

    def submit(self, node: str, *args: str, array: int = 0) -> str:
        # The job script's shell (task 0) and its `sleep`, as on the real side.
        kw = dict(user=self.user.name, uid=self.user.uid, requeue="--no-requeue" not in args)
        if not array:
            job = self.slurm.add_job(node, pids=self._pids(2), **kw)
            self.seen.append(job)
            return job
        # Slurm gives the array's own id to the element that starts last.
        first = self.slurm._next_job + 1
        ids = [str(first + 1 + t) for t in range(array - 1)] + [str(first)]
        self.slurm._next_job = first + array - 1
        for t, job in enumerate(ids):
            self.slurm.add_job(node, job=job, array=str(first), task=t, pids=self._pids(2), **kw)
            self.seen.append(job)
        return str(first)

    def submit_later(self, node: str, seconds: int) -> str:
        import time
        job = self.slurm.add_job(node, user=self.user.name, uid=self.user.uid, state="PENDING",
                                 begin=time.time() + seconds)
        self.seen.append(job)
        return job

    def _pids(self, n: int) -> tuple:
        self._pid = getattr(self, "_pid", 100) + n
        return tuple(range(self._pid - n, self._pid))

    def srun(self, node: str) -> str:
        job = self.slurm.add_job(node, user=self.user.name, uid=self.user.uid, batch=False, pids=self._pids(1))
        self.seen.append(job)
        return job

    def lose(self, node: str) -> None:
        self.slurm.slurmd_lost(node)

    def back(self, node: str) -> None:
        self.slurm.slurmd_back(node)

    def issued(self, node: str) -> None:
        pass            # the fake issues a reboot the moment the node is idle

    def boot(self, node: str) -> None:
        self.slurm.complete_reboot(node)

    def keep_down(self) -> None:
        pass            # the fake never returns a DOWN node to service by itself

    def settle(self) -> None:
        pass


def normal(info: dict, responding: bool = True) -> dict:
    """A node record with only what the operations decide (see the module's docstring);
    `responding`: the case did not stop the node's slurmd (a NOT_RESPONDING is the
    host's load)."""
    flags = [f for f in info.get("State", "").replace("*", "").split("+")
             if f != "NOT_RESPONDING" or not responding]
    out = {"NodeName": info["NodeName"], "State": "+".join(flags)}
    if info.get("Reason") and reason_is_current(info):
        out["Reason"] = stamped(info["Reason"])
    if info.get(CAUSE_FIELD):
        out[CAUSE_FIELD] = info[CAUSE_FIELD]
    return out


def stamped(reason: str) -> str:
    """A reason as scontrol shows it, its stamp's time replaced (`[root@T]`)."""
    return STAMP_INSIDE.sub(lambda m: f" [{m.group(1)}@T]", reason)


@pytest.fixture
def sides(clean_cluster, user):
    """(the real backend, the fake), each wrapped for the cases."""
    cluster = clean_cluster
    real = Real(open_backend(SlurmConfig(**cluster.hooks_slurm(timeout=15))), cluster, user)
    fake = Fake(FakeSlurm(cluster.nodes, version=cluster.version, cpus=cluster.cpus, backend=real.slurm.name,
                          requeue_hold=HOLD), user)
    # Where the cluster stands: Slurm 25.11 keeps the last reason of a node in service.
    fake.slurm.seed(real.slurm.list_nodes())
    # Whether the real scontrol backend reads a node's state through Slurm's library
    # (known once it tried): the fake does the same.
    real.slurm.node_state("n1")
    fake.slurm.library = real.library
    yield real, fake
    user.cleanup()


def agree(sides, case) -> list:
    real, fake = sides
    want = case(real)
    got = case(fake)
    assert got == want, f"the fake differs from {real.slurm.name} on Slurm {real.cluster.version}"
    return want


# --- the cases --------------------------------------------------------------------------------
def drain_undrain_resume(s: Side) -> list:
    out = []
    out.append(("undrain idle", s.tried(s.slurm.undrain, "n1"), s.node("n1")))
    out.append(("resume idle", s.tried(s.slurm.resume, "n1"), s.node("n1")))
    s.slurm.drain("n1", f"{P} fs /scratch hung")
    out.append(("drained", s.node("n1"), s.state("n1")))
    s.slurm.drain("n1", f"{P} gpu 3 lost")            # a drain of a drained node replaces the reason
    out.append(("drained again", s.node("n1"), s.state("n1")))
    s.slurm.undrain("n1")
    out.append(("undrained", s.node("n1"), s.state("n1")))
    s.slurm.drain("n2", f"{P} fs /gpfs gone")
    s.slurm.resume("n2")
    out.append(("resumed", s.node("n2"), s.state("n2")))
    return out


def test_drain_undrain_resume(sides):
    agree(sides, drain_undrain_resume)


def drain_with_cause_and_release(s: Side) -> list:
    cause = cause_text("filesystem", "/scratch", "/scratch", "2026-12-02T03:50:00")
    out = []
    s.slurm.drain_with_cause("n1", "fs /scratch hung >10s (write, nfs4) [slurm-hooks]", cause)
    out.append(("drained with its cause", s.node("n1"), s.state("n1")))
    s.slurm.release("n1", "UNDRAIN")
    out.append(("undrained, cause emptied", s.node("n1"), s.state("n1")))
    s.slurm.drain_with_cause("n2", "gpu 3 lost: Xid 79 [slurm-hooks]", cause_text("gpu", "3", "3", "T"))
    s.slurm.release("n2", "RESUME")
    out.append(("resumed, cause emptied", s.node("n2"), s.state("n2")))
    out.append(("unknown node", s.tried(s.slurm.drain_with_cause, "nx", "x [slurm-hooks]", cause),
                s.tried(s.slurm.release, "nx", "RESUME")))
    return out


def test_drain_with_cause_and_release(sides):
    agree(sides, drain_with_cause_and_release)


def undo_keeps_an_admins_words(s: Side) -> list:
    """`slurm-hooks resume` (README, Undo): our cause out of the Comment, an admin's words
    beside it kept; a node in service loses a stale cause of ours alone."""
    cause = cause_text("filesystem", "/scratch", "/scratch", "2026-12-02T03:50:00")
    out = []
    s.slurm.drain_with_cause("n1", "fs /scratch hung >10s (write, nfs4) [slurm-hooks]", f"{cause} ticket 4711")
    out.append(("drained, cause and note", s.node("n1"), s.state("n1")))
    s.slurm.release("n1", "UNDRAIN", "ticket 4711")
    out.append(("undrained, the note kept", s.node("n1"), s.state("n1")))
    s.slurm.drain_with_cause("n2", "gpu 3 lost: Xid 79 [slurm-hooks]", cause)
    s.slurm.undrain("n2")
    out.append(("undrained by hand, cause left", s.node("n2"), s.state("n2")))
    s.slurm.set_node_comment("n2", "")
    out.append(("cause taken out", s.node("n2"), s.state("n2")))
    out.append(("unknown node", s.tried(s.slurm.set_node_comment, "nx", "")))
    return out


def test_undo_keeps_an_admins_words(sides):
    agree(sides, undo_keeps_an_admins_words)


def set_down(s: Side) -> list:
    out = []
    s.keep_down()
    s.slurm.set_down("n3", f"{P} pid 7 unkillable")
    out.append(("down", s.node("n3"), s.state("n3")))
    s.slurm.drain("n3", f"{P} pid 7 unkillable")
    out.append(("down, drained", s.node("n3"), s.state("n3")))
    out.append(("undrain down", s.tried(s.slurm.undrain, "n3"), s.state("n3")))
    s.slurm.resume("n3")
    s.settle()
    out.append(("resumed", s.state("n3")))
    return out


def test_set_down(sides):
    agree(sides, set_down)


def jobs_on_a_node(s: Side) -> list:
    out = []
    job = s.submit("n1")
    out.append(("running", s.job(job), s.node("n1")))
    s.slurm.drain("n1", f"{P} fs /scratch hung")
    out.append(("busy, drained", s.node("n1"), s.state("n1")))
    s.slurm.set_admin_comment(job, f"{P} node n1: stuck")
    s.slurm.set_admin_comment(job, f"{P} node n1: stuck | and more")
    s.slurm.requeue(job)
    s.settle()
    out.append(("requeued", s.job(job), s.node("n1")))
    out.append(("requeue pending", s.tried(s.slurm.requeue, job)))
    srun = s.srun("n2")
    out.append(("srun", s.job(srun)))
    out.append(("requeue srun", s.tried(s.slurm.requeue, srun)))
    s.slurm.cancel(srun)
    s.settle()
    out.append(("cancelled", s.job(srun), s.node("n2")))
    s.slurm.cancel(job)
    s.settle()
    out.append(("requeue ended", s.tried(s.slurm.requeue, job), s.job(job)["JobState"]))
    out.append(("comment ended", s.tried(s.slurm.set_admin_comment, job, "late")))
    return out


def test_admin_comment_requeue_and_cancel(sides):
    agree(sides, jobs_on_a_node)


def hold_of(s: Side, job: str) -> dict | None:
    """job_hold's record, its times as what decisions read of them: the begin time's
    distance from the submit time (Slurm's hold, or the user's), and whether it is past."""
    import time

    from slurm_hooks.act.actions import _local
    info = s.slurm.job_hold(job)
    if info is None:
        return None
    eligible, submit = _local(info["EligibleTime"]), _local(info["SubmitTime"])
    out = {k: info[k] for k in ("JobState", "Reason", "UserId")} | {"JobId": s.job_id(info["JobId"])}
    if out["JobState"] == "PENDING":
        hold = None if eligible is None or submit is None else round(eligible - submit)
        # Slurm sets the begin time at the requeue and the submit time as the job leaves
        # COMPLETING, a second later or not: its hold reads as HOLD or HOLD + 1, and the
        # decisions take both for it (act/actions.py `_start`).
        out["hold"] = HOLD if hold == HOLD + 1 else hold
    out["begun"] = eligible is not None and eligible <= time.time() + 1
    return out


def requeue_holds(s: Side) -> list:
    out = []
    job = s.submit("n1")
    later = s.submit_later("n2", 3600)
    ids = lambda jobs: sorted(s.job_id(j["JobId"]) for j in jobs)  # noqa: E731
    out.append(("on n1", ids(s.slurm.jobs_on("n1")), "on n2", ids(s.slurm.jobs_on("n2")),
                "on n3", ids(s.slurm.jobs_on("n3"))))
    out.append(("running", hold_of(s, job), "user's begin", hold_of(s, later)))
    s.slurm.requeue(job)
    s.settle()
    # Slurm's hold: cred_expire + 1 after the submit time it reset as the job left COMPLETING.
    out.append(("requeued", hold_of(s, job), ids(s.slurm.jobs_on("n1"))))
    out.append(("start running", s.tried(s.slurm.start_now, "999999"), s.slurm.job_hold("999999")))
    s.slurm.start_now(later)
    out.append(("started", {k: v for k, v in (hold_of(s, later) or {}).items() if k in ("JobId", "begun")}))
    s.slurm.cancel(later)
    s.settle()
    return out


def test_requeue_hold_jobs_on_a_node_and_start_now(sides):
    agree(sides, requeue_holds)


def array_elements(s: Side) -> list:
    out = []
    array = s.submit("n2", array=2)
    for t in range(2):
        out.append((f"element {t}", s.job(f"{array}_{t}")))
    out.append(("the array's own id", s.job(array)))
    out.append(("no such element", s.job(f"{array}_7")))
    s.slurm.set_admin_comment(f"{array}_0", f"{P} node n2: element 0")
    s.slurm.drain("n2", f"{P} gpu 1 lost")        # the requeued element waits, as on a node we drain
    s.slurm.requeue(f"{array}_0")
    s.settle()
    for t in range(2):
        out.append((f"after requeue {t}", s.job(f"{array}_{t}")))
    return out


def test_array_element_is_array_task(sides):
    agree(sides, array_elements)


def unknown(s: Side) -> list:
    return [s.slurm.show_node("nx"), s.slurm.node_state("nx"), s.slurm.show_job("999999"),
            s.slurm.show_job("999999_1"),
            *(s.tried(op, *args) for op, args in (
                (s.slurm.drain, ("nx", f"{P} x")), (s.slurm.undrain, ("nx",)), (s.slurm.resume, ("nx",)),
                (s.slurm.set_down, ("nx", f"{P} x")), (s.slurm.set_admin_comment, ("999999", "x")),
                (s.slurm.requeue, ("999999",))))]


def test_unknown_node_and_job(sides):
    agree(sides, unknown)


def cancel_twice(s: Side) -> list:
    job = s.submit("n3")
    s.slurm.cancel(job)
    s.settle()
    return [s.job(job)["JobState"], s.tried(s.slurm.cancel, job), s.tried(s.slurm.cancel, "999999")]


def test_cancel_of_an_ended_or_unknown_job(sides, slurm_backend, request):
    """scancel says nothing of a job that ended or that Slurm does not know; the fake
    does as scancel. The pyslurm backend (slurm_kill_job2) reports both as errors."""
    if slurm_backend == "pyslurm":
        request.applymarker(pytest.mark.xfail(strict=True, reason=(
            "the pyslurm backend refuses what scancel accepts: 'Job/step already completing or "
            "completed', 'Invalid job id specified'")))
    agree(sides, cancel_twice)


def node_lists(s: Side) -> list:
    s.slurm.drain("n2", f"{P} fs /scratch hung")
    keep = lambda infos: sorted(tuple(normal(i).values()) for i in infos)  # noqa: E731
    table = s.slurm.list_nodes_alone("n2", P)
    alone, full = keep(table), keep(s.slurm.list_nodes())
    return [alone, table.others, len(table) + table.others == len(full)]


def test_list_nodes_and_list_nodes_alone(sides):
    agree(sides, node_lists)


def nodes_alone(s: Side) -> list:
    """The breaker's read: every node counted; the records of the node it runs on and of
    the nodes with a word of ours whole; the others may be counted alone."""
    ours = cause_text("filesystem", "/scratch", "/scratch", "2026-12-06T03:12:00")
    s.slurm.drain("n1", "admin: memory test")                      # an admin's drain
    s.slurm.set_node_comment("n2", "rack 7, an admin's note")      # an admin's Comment
    s.slurm.drain_with_cause("n3", "fs /scratch hung [slurm-hooks]", ours)
    out = []
    for mine in ("n2", ""):
        table = s.slurm.list_nodes_alone(mine, P)
        out.append((mine, sorted((normal(i) for i in table), key=lambda i: i["NodeName"]), table.others))
    s.slurm.set_node_comment("n2", f"{ours} rack 7")                # our cause beside the admin's words
    out.append(("n2 ours", [normal(i) for i in s.slurm.list_nodes_alone("", P) if i["NodeName"] == "n2"]))
    return out


def test_list_nodes_alone_keeps_our_nodes_and_the_own_one_whole(sides):
    """Both real backends (through Slurm's library, where this release's node layout is
    known) and the fake leave out the words of nodes that carry none of ours: on 22.05
    and 25.11 they do, or a 4,096-node table costs each failing run the whole print."""
    agree(sides, nodes_alone)
    real, _ = sides
    if real.library:
        # n1 (an admin's drain) counted alone; n2 (our cause beside an admin's words)
        # and n3 (our drain) whole.
        table = real.slurm.list_nodes_alone("n3", P)
        assert [i["NodeName"] for i in table] == ["n2", "n3"] and table.others == 1, table
        assert "[slurm-hooks]" in table[1]["Reason"] and table[1]["Comment"].startswith("slurm-hooks:cause"), table
        assert real.slurm.list_nodes_alone("n1", P)[0].get("Reason", "").startswith("admin: memory test")


# Slurm's "no change since" (slurm_load_node with the time of a read kept): the child
# prints the table's time, or the library's errno (1900: SLURM_NO_CHANGE_IN_DATA).
SINCE = """
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import slurmlib
lib = slurmlib._load(sys.argv[2])
lib.slurm_init.argtypes = [ctypes.c_char_p]
lib.slurm_init(None)
lib.slurm_load_node.argtypes = [ctypes.c_long, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint16]
msg = ctypes.c_void_p()
rc = lib.slurm_load_node(int(sys.argv[3]), ctypes.byref(msg), slurmlib.SHOW_ALL)
print(ctypes.c_int64.from_address(msg.value).value if rc == 0 else f"errno {ctypes.get_errno()}")
"""


def test_slurms_no_change_since_misses_a_reboot_request(sides, tmp_path):
    """Why the breaker's node table is read whole on every failing run, never kept and
    asked "changed since?" (slurm_load_node's update_time, what scontrol's and sinfo's
    repeated reads use): slurmctld takes a reboot request (REBOOT_REQUESTED, DRAIN, the
    reason: proc_req.c _slurm_rpc_reboot_nodes) without moving its last_node_update, and
    answers "no change" after it, on 22.05 and 25.11 alike. A kept table hid a node's
    own reboot request from its next run, which then set the node DOWN and so had its
    reboot issued before the outage was known."""
    import os
    import subprocess
    import sys
    import time

    from slurm_hooks.slurm import slurmlib
    real, _ = sides
    prog = tmp_path / "reboot-program"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    real.cluster.reconfigure(f"RebootProgram={prog}\nReturnToService=1\n")
    real.submit("n1")                         # a job on n1: the reboot stays requested
    env = {**os.environ, "SLURM_CONF": str(real.cluster.conf_path)}

    def load(since: int) -> str:
        return subprocess.run([sys.executable, "-c", SINCE, os.path.dirname(slurmlib.__file__),
                               str(real.slurm.scontrol), str(since)],
                              env=env, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    seen = []
    try:
        for _ in range(5):
            time.sleep(1.1)           # "no change" only for a read a second past the last change
            since = load(0)
            real.slurm.reboot("n1", f"{P} fs /scratch hung")
            assert "REBOOT_REQUESTED" in real.cluster.node_state("n1")
            seen.append(load(int(since)))
            real.slurm.cancel_reboot("n1")        # an update: moves last_node_update
            if seen[-1] == "errno 1900":
                break
    finally:
        real.cluster.scontrol("cancel_reboot", "n1", check=False)   # never rebooted for real
    assert seen[-1] == "errno 1900", f"slurmctld saw the reboot request as a change: {seen}"


def reboot(s: Side) -> list:
    s.submit("n1")
    s.slurm.reboot("n1", f"{P} pid 7 stuck in write()")
    out = [("reboot asked", s.node("n1"), s.state("n1"))]
    # Withdrawn before it is issued (its job still runs): a node drained before the
    # reboot was asked (as slurm-hooks always drains first) stays drained, its reason
    # the reboot's; one the ASAP reboot drained itself is undrained with it.
    s.slurm.cancel_reboot("n1")
    out.append(("withdrawn, drained before", s.node("n1"), s.state("n1")))
    s.submit("n2")
    s.slurm.drain("n2", f"{P} fs /gpfs hung")
    s.slurm.reboot("n2", f"{P} fs /gpfs hung")
    s.slurm.cancel_reboot("n2")
    out.append(("withdrawn, our drain first", s.node("n2"), s.state("n2")))
    out.append(("nothing to withdraw", s.tried(s.slurm.cancel_reboot, "n2")))
    return out


def test_reboot(sides, tmp_path):
    """`reboot ASAP nextstate=DOWN`: drained at once, REBOOT_REQUESTED while its job
    runs, the reason ours; refused without a RebootProgram."""
    real, fake = sides
    fake.slurm.reboot_program = False
    assert [s.tried(s.slurm.reboot, "n3", f"{P} x") for s in sides] == ["SlurmError:no_reboot_program"] * 2
    prog = tmp_path / "reboot-program"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    real.cluster.reconfigure(f"RebootProgram={prog}\nReturnToService=1\n")
    fake.slurm.reboot_program = True
    try:
        agree(sides, reboot)
    finally:
        # Before the reset cancels the job: the node is not to be rebooted for real.
        real.cluster.scontrol("cancel_reboot", "n1,n2", check=False)


def partly_allocated(s: Side) -> list:
    """A one-CPU job on a two-CPU node: MIXED, drained or not."""
    out = []
    job = s.submit("n1")
    out.append(("one cpu of two", s.node("n1"), s.state("n1"), [normal(i) for i in s.slurm.list_nodes()]))
    s.slurm.drain("n1", f"{P} fs /scratch hung")
    out.append(("drained", s.node("n1"), s.state("n1"), [normal(i) for i in s.slurm.list_nodes_alone()]))
    s.slurm.cancel(job)
    s.settle()
    out.append(("its job gone", s.node("n1")))
    return out


def test_a_partly_allocated_node_is_mixed(sides):
    agree(sides, partly_allocated)


def lost_and_back(s: Side) -> list:
    """A node's slurmd stops answering (DOWN, NOT_RESPONDING, `Not responding` added to
    the reason 25.11 kept), is drained by us meanwhile, and registers again: back to
    service (the test cluster's ReturnToService=2), still drained, our reason kept."""
    out = []
    s.slurm.drain("n3", f"{P} fs /scratch hung")
    s.slurm.undrain("n3")
    s.lose("n3")
    out.append(("lost", normal(s.slurm.show_node("n3"), False), normal(s.slurm.node_state("n3"), False)))
    s.slurm.drain("n3", f"{P} gpu 3 lost")
    out.append(("lost, drained", normal(s.slurm.show_node("n3"), False), normal(s.slurm.node_state("n3"), False)))
    s.back("n3")
    out.append(("back", normal(s.slurm.show_node("n3"), False)))
    s.slurm.resume("n3")
    out.append(("resumed", s.state("n3")))
    return out


def test_a_node_that_stops_answering_and_comes_back(sides):
    agree(sides, lost_and_back)


def reboot_course(s: Side) -> list:
    """`reboot ASAP nextstate=DOWN` of an idle node: issued at once (DOWN, `reboot
    issued`), then slurmd registers after the boot: DOWN, `reboot complete`."""
    out = []
    s.slurm.reboot("n3", f"{P} pid 7 stuck in write()")
    s.issued("n3")
    out.append(("issued", s.node("n3"), s.state("n3")))
    s.boot("n3")
    out.append(("booted", s.node("n3"), s.state("n3")))
    s.slurm.resume("n3")
    s.settle()
    out.append(("resumed", s.state("n3")))
    return out


def test_the_course_of_a_reboot(sides, tmp_path):
    real, fake = sides
    prog = tmp_path / "reboot-program"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    real.cluster.reconfigure(f"RebootProgram={prog}\nReturnToService=1\n")
    fake.slurm.return_to_service = 1
    agree(sides, reboot_course)


def job_processes(s: Side) -> list:
    """listpids: a batch job's script (task 0 of step `batch`) and its child (no task
    id), an srun's task (step 0, task 0), an array element under its own job id;
    nothing once the job is gone."""
    out = []
    job = s.submit("n1")
    out.append(("batch", s.pids("n1")))
    s.srun("n2")
    out.append(("srun", s.pids("n2")))
    s.submit("n3", array=1)
    out.append(("array element", s.pids("n3")))
    s.slurm.cancel(job)
    s.settle()
    out.append(("cancelled", s.pids("n1", running=False)))
    return out


def test_listpids_names_the_job_step_and_task(sides):
    agree(sides, job_processes)


RPC_CALLS = ("show_node", "node_state", "list_nodes", "list_nodes_alone", "show_job", "list_jobs", "listpids",
             "drain", "set_node_comment", "undrain", "set_admin_comment", "jobs_on", "job_hold", "start_now")


def test_the_rpcs_each_call_costs_slurmctld(sides):
    """What the fake counts (FakeSlurm.rpcs) is what sdiag counts, call by call."""
    real, fake = sides
    jobs = {side: side.submit("n1") for side in sides}
    args = {"drain": ("n2", f"{P} fs /scratch hung"), "set_node_comment": ("n2", ""), "undrain": ("n2",)}

    def call(side, op):
        fn = getattr(side.slurm, op)
        if op in ("show_job", "set_admin_comment", "job_hold"):
            return fn(jobs[side], *(("x",) if op == "set_admin_comment" else ()))
        if op == "start_now":
            return side.tried(fn, jobs[side])          # refused (running): one RPC all the same
        if op in ("list_nodes", "list_nodes_alone", "list_jobs"):
            return fn()
        return fn(*args.get(op, ("n1",)))
    want, got = {}, {}
    for op in RPC_CALLS:
        for side in sides:
            if hasattr(side.slurm, "_primed"):
                side.slurm._primed = {}         # nothing known from an earlier call
        before = sdiag_counts(real.cluster)
        call(real, op)
        after = sdiag_counts(real.cluster)
        want[op] = sum(after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("REQUEST_"))
        fake.slurm.calls.clear()
        call(fake, op)
        got[op] = fake.slurm.rpcs()
    assert got == want, f"the fake's RPC counts differ from sdiag's for {real.slurm.name} on Slurm {real.cluster.version}"
