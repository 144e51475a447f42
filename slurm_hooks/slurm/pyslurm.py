"""The pyslurm backend: libslurm through the pyslurm binding, with the scontrol backend's
results and errors (see slurm/connect.py for the interface and the choice).

Every call runs in a hang-safe child (host/runner.py) with the deadline a scontrol call
would have: libslurm blocks on a dead slurmctld just as scontrol does, and a child that
does not answer in time is killed and reported as Slurm being unreachable, so the
action is spooled for the next run. The child imports pyslurm itself: `import pyslurm`
initialises libslurm, which calls Slurm's `fatal()` and exits the process when no
slurm.conf can be read, so this process never imports it, and such an exit comes back
as a clear error instead of ending the health check.

Records are shaped like `scontrol -o show` prints them (State `IDLE+DRAIN` from the
same libslurm function scontrol uses, Reason with its `[user@time]` stamp), so the
callers cannot tell the backends apart.

Two operations have no libslurm call pyslurm binds, and scontrol itself uses Slurm's
internal protocol for them, so they go through scontrol here too: `reboot`
(REQUEST_REBOOT_NODES) and `listpids` (read from this host's slurmstepd sockets, not
an RPC); so does `release`, whose emptied Comment pyslurm would send as "no change".
The drain-storm breaker's node list is the scontrol backend's one-RPC read
through libslurm (slurm/slurmlib.py): pyslurm's `Nodes.load()` (which `status` uses) always
loads the partitions too, a second RPC on every failing run of every node. Two others
use plain libslurm functions pyslurm does not expose, called with ctypes in the child:
`requeue` needs the `Incomplete` flag (`slurm_requeue(id, JOB_RUNNING)`: a job that
ended meanwhile stays ended) and `cancel` addresses an array element as `A_T`
(`slurm_kill_job2`, what scancel calls).
"""
from __future__ import annotations

import os
import time

from ..core.config import CACHE_DIR
from .api import (
    CAUSE_FIELD,
    STAMP_FORMAT,
    BackendError,
    Choice,
    NodeTable,
    OutOfTime,
    PrimedNodes,
    SlurmCode,
    SlurmError,
    SlurmUnavailable,
)
from .scontrol import said_code

JOB_RUNNING = 1           # enum job_states; as a requeue flag: only a running job ("Incomplete")
SIGKILL = 9
# A successful try of pyslurm (`tried`), kept for the runs after it: importing pyslurm in
# a child costs a failing run 100-400 ms (slurm/connect.py). In the cache directory
# (tmpfs: gone at boot), at most PROBE_MAX_AGE seconds old.
PROBE_CACHE = "pyslurm-probe.json"
PROBE_MAX_AGE = 3600
# Where PROBE_CACHE is kept (None: nowhere); read at each call, so a test may point it
# at its own directory.
probe_cache_dir: str | None = CACHE_DIR


class PyslurmBackend(PrimedNodes):
    name = "pyslurm"

    def __init__(self, cfg, scontrol, choice: Choice):
        self.cfg = cfg
        self.timeout = cfg.timeout
        self.choice = choice
        self._scontrol = scontrol           # version, reboot, listpids, and where srun lives
        self._primed: dict[str, dict] = {}
        self._elements: dict[str, str] = {}  # "A_T" -> the element's own JobId, from show_job

    # The run's deadline and "slurmctld is down" are shared with the scontrol calls.
    @property
    def deadline(self):
        return self._scontrol.deadline

    @deadline.setter
    def deadline(self, value):
        self._scontrol.deadline = value

    @property
    def down(self):
        return self._scontrol.down

    @property
    def env(self):
        return self._scontrol.env

    @property
    def scontrol(self):
        return self._scontrol.scontrol

    @property
    def where(self):
        return self._scontrol.where

    # --- plumbing ------------------------------------------------------------------------
    def _call(self, op: str, *args):
        if self.choice.error:
            raise BackendError(self.choice.error)
        if self._scontrol.down is not None:
            raise SlurmUnavailable(self._scontrol.down)
        timeout = self._scontrol.timeout_left()
        value = call_in_child(self.cfg.conf, op, args, timeout)
        if value.get("hung"):
            msg = f"pyslurm {op} gave no answer within {timeout:.0f}s"
            if timeout < self.timeout:
                raise OutOfTime(f"{msg}: the run's time for Slurm calls ran out")
            self._scontrol.down = msg
            raise SlurmUnavailable(msg)
        if "error" in value:
            msg = value["error"]
            if value.get("kind") in ("import", "exit"):
                # pyslurm did not import or initialise (or its child died): the try a
                # run may have taken from the cache is no longer true.
                forget_tried()
            code = said_code(msg) if value.get("kind") == "rpc" else SlurmCode.REFUSED
            if code == SlurmCode.UNREACHABLE:
                self._scontrol.down = msg
                raise SlurmUnavailable(msg)
            # The child is past libslurm's init, which exits on a missing configuration,
            # before any RPC can fail: a refusal, whatever its words.
            raise SlurmError(msg, code=SlurmCode.REFUSED if code == SlurmCode.NO_CONFIG else code)
        return value.get("ok")

    # --- operations ----------------------------------------------------------------------
    def _show_node(self, node: str) -> dict | None:
        return self._call("node", node)

    def _node_state(self, node: str) -> dict | None:
        # pyslurm's Node.load asks for the node, then for every partition (two RPCs): a
        # health check asks for the node alone, through the libslurm of the Slurm pyslurm
        # was matched to (slurm/slurmlib.py, REQUEST_NODE_INFO_SINGLE), as the scontrol
        # backend does.
        if self.choice.error:
            raise BackendError(self.choice.error)
        return self._scontrol.node_state(node)

    def list_nodes(self) -> list[dict]:
        return self._call("nodes")

    def list_nodes_alone(self, mine: str = "", prefix: str = "") -> NodeTable:
        # pyslurm's Nodes.load() also loads every partition (two RPCs), and the breaker
        # reads the node list on every failing run of every node: the nodes alone come
        # from the libslurm of the Slurm pyslurm was matched to (slurm/slurmlib.py, one RPC),
        # as in the scontrol backend.
        if self.choice.error:
            raise BackendError(self.choice.error)
        return self._scontrol.list_nodes_alone(mine, prefix)

    def show_job(self, job: str) -> dict | None:
        info = self._call("job", job)
        if info and info.get("ArrayJobId") and info.get("ArrayTaskId", "").isdigit():
            self._elements[f"{info['ArrayJobId']}_{info['ArrayTaskId']}"] = info["JobId"]
        return info

    def list_jobs(self) -> list[dict]:
        return self._call("jobs")

    def drain(self, node: str, reason: str) -> None:
        self.changing(node)
        self._call("node_state", node, "DRAIN", reason)

    def drain_with_cause(self, node: str, reason: str, cause: str) -> None:
        self.changing(node)
        self._call("node_state", node, "DRAIN", reason, cause)

    def release(self, node: str, state: str, rest: str = "") -> None:
        # pyslurm sends an empty string as "no change" (the field stays set): scontrol
        # empties it, in the same update as the state.
        if self.choice.error:
            raise BackendError(self.choice.error)
        self.changing(node)
        self._scontrol.release(node, state, rest)

    def set_node_comment(self, node: str, text: str) -> None:
        # As release: an emptied Comment must really be emptied.
        if self.choice.error:
            raise BackendError(self.choice.error)
        self.changing(node)
        self._scontrol.set_node_comment(node, text)

    def undrain(self, node: str) -> None:
        # UNDRAIN only clears the drain flag (never brings a DOWN node up).
        self.changing(node)
        self._call("node_state", node, "UNDRAIN", None)

    def resume(self, node: str) -> None:
        self.changing(node)
        self._call("node_state", node, "RESUME", None)

    def set_down(self, node: str, reason: str) -> None:
        self.changing(node)
        self._call("node_state", node, "DOWN", reason)

    def set_admin_comment(self, job: str, text: str) -> None:
        self._call("admin_comment", self._elements.get(job, job), text)

    def requeue(self, job: str) -> None:
        self._call("requeue", self._elements.get(job, job))

    # The three below go through squeue and scontrol, as reboot does: pyslurm's job list
    # has no filter by node (it would load every job of the cluster), and a job's
    # begin time is set by the same update scontrol sends.
    def jobs_on(self, node: str) -> list[dict]:
        if self.choice.error:
            raise BackendError(self.choice.error)
        return self._scontrol.jobs_on(node)

    def job_hold(self, job: str) -> dict | None:
        if self.choice.error:
            raise BackendError(self.choice.error)
        return self._scontrol.job_hold(job)

    def start_now(self, job: str) -> None:
        if self.choice.error:
            raise BackendError(self.choice.error)
        self._scontrol.start_now(job)

    def cancel(self, job: str) -> None:
        self._call("cancel", job)

    def reboot(self, node: str, reason: str) -> None:
        # No libslurm call for it (scontrol sends REQUEST_REBOOT_NODES itself).
        if self.choice.error:
            raise BackendError(self.choice.error)
        self.changing(node)
        self._scontrol.reboot(node, reason)

    def cancel_reboot(self, node: str) -> None:
        # As reboot: scontrol sends it (pyslurm binds no state for it).
        if self.choice.error:
            raise BackendError(self.choice.error)
        self.changing(node)
        self._scontrol.cancel_reboot(node)

    def listpids(self, node: str) -> dict:
        # Read from this host's slurmstepd sockets by scontrol, not asked of slurmctld.
        return self._scontrol.listpids(node)


def call_in_child(conf: str | None, op: str, args: tuple, timeout: float) -> dict:
    """Run `op` in a hang-safe child that imports pyslurm: {"ok": value},
    {"error": message, "kind": ...} or {"hung": True}."""
    from ..host.runner import DONE, HUNG, STILL_HUNG, Runner, Task
    key = f"pyslurm:{op}"
    out = Runner(None).run([Task(key=key, func=_child, args=(conf, op, list(args)), timeout=timeout)])[key]
    if out.status in (HUNG, STILL_HUNG):
        return {"hung": True}
    if out.status == DONE and isinstance(out.value, dict):
        return out.value
    if out.step in ("import", "init"):
        where = conf or "$SLURM_CONF or Slurm's default slurm.conf"
        return {"error": f"pyslurm: the child process exited while libslurm "
                         f"{'was loaded' if out.step == 'import' else 'read its configuration'} "
                         f"(Slurm's fatal(): is {where} readable and its SlurmctldHost resolvable?)",
                "kind": "exit"}
    return {"error": f"pyslurm {op} failed: {out.error or 'the child ended without an answer'}", "kind": "exit"}


def tried(cfg, timeout: float, key: list) -> str | None:
    """probe(), or its success kept from an earlier run for the same `key` (the caller's:
    pyslurm's installation, the running Slurm, slurm.conf, the interpreter) within
    PROBE_MAX_AGE. Only a success is kept: a failure is tried again by the next run."""
    if _kept(probe_cache_dir, key):
        return None
    why = probe(cfg, timeout)
    if why is None:
        _keep(probe_cache_dir, key)
    return why


def _kept(cache_dir: str | None, key: list) -> bool:
    if not cache_dir:
        return False
    from ..core import jsonio
    try:
        with open(os.path.join(cache_dir, PROBE_CACHE), "rb") as f:
            doc = jsonio.loads(f.read())
        at = doc["at"]
        return doc["key"] == key and isinstance(at, (int, float)) and time.time() - PROBE_MAX_AGE < at <= time.time()
    except (OSError, ValueError, TypeError, KeyError):
        return False        # none kept, a stale one, or a foreign file: tried again


def _keep(cache_dir: str | None, key: list) -> None:
    if not cache_dir:
        return
    from ..core import jsonio
    target = os.path.join(cache_dir, PROBE_CACHE)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(jsonio.dumps({"key": key, "at": time.time()}))
        os.replace(tmp, target)
    except OSError:
        # Not kept (a user's own look: root's cache is root's): the next run tries again.
        try:
            os.unlink(tmp)
        except OSError:
            pass


def forget_tried() -> None:
    """A pyslurm call could not import or initialise pyslurm: a kept try is wrong."""
    if probe_cache_dir:
        try:
            os.unlink(os.path.join(probe_cache_dir, PROBE_CACHE))
        except OSError:
            pass


def probe(cfg, timeout: float) -> str | None:
    """None when pyslurm imports, initialises libslurm and was built against the
    running libslurm's major.minor; else why not."""
    value = call_in_child(cfg.conf, "probe", (), timeout)
    if value.get("hung"):
        return f"importing pyslurm gave no answer within {timeout:.0f}s"
    if "error" in value:
        return value["error"]
    return None


# --- in the child -------------------------------------------------------------------------
def _child(progress, conf, op, args):
    os.environ["PYSLURM_DISABLE_AUTO_INIT"] = "1"   # initialised below, with our slurm.conf
    if conf:
        os.environ["SLURM_CONF"] = conf
    progress("import")
    try:
        import pyslurm
    except Exception as e:                             # not installed, built for another libslurm
        return {"error": f"import pyslurm failed: {type(e).__name__}: {e}", "kind": "import"}
    progress("init")
    pyslurm.slurm_init(conf)
    progress(op)
    try:
        return {"ok": _OPS[op](pyslurm, *args)}
    except pyslurm.RPCError as e:
        return {"error": str(e), "errno": getattr(e, "errno", None), "kind": "rpc"}


def _stamp(when) -> str:
    return time.strftime(STAMP_FORMAT, time.localtime(when))


def _node_dict(n) -> dict:
    out = {"NodeName": n.name, "State": n.state or ""}
    gres = n.configured_gres or {}
    out["Gres"] = ",".join(f"{k}:{v}" for k, v in gres.items()) if gres else "(null)"
    if n.comment:
        out[CAUSE_FIELD] = n.comment
    if n.reason:
        # pyslurm gives the reason alone: the stamp is appended here as scontrol does
        # it, only for a reason with a time (every reason an update or a reboot sets),
        # so that strip_reason_stamp removes exactly this one, never a user's text.
        stamp = f" [{n.reason_user or 'root'}@{_stamp(n.reason_time)}]" if n.reason_time else ""
        out["Reason"] = n.reason + stamp
    return out


def _job_dict(j) -> dict:
    out = {"JobId": str(j.id), "UserId": f"{j.user_name}({j.user_id})", "JobState": j.state or "",
           "Requeue": "1" if j.is_requeueable else "0", "BatchFlag": "1" if j.is_batch_job else "0",
           "Restarts": str(j.requeue_count or 0), "NodeList": j.allocated_nodes or "(null)",
           "AdminComment": j.admin_comment or "(null)", "NumNodes": str(j.num_nodes or "")}
    if j.array_id:
        # pyslurm reads an element id of 0 as "no value".
        out["ArrayJobId"] = str(j.array_id)
        out["ArrayTaskId"] = str(j.array_task_id or 0)
    return out


def _unknown(e, *words) -> bool:
    text = str(e).lower()
    return any(w in text for w in words)


def _op_probe(ps):
    return {"pyslurm": ps.__version__, "api": list(ps.slurm_api_version())}


def _op_node(ps, name):
    try:
        return _node_dict(ps.Node.load(name))
    except ps.RPCError as e:
        if _unknown(e, "does not exist", "invalid node name"):
            return None
        raise


def _op_nodes(ps):
    return [_node_dict(n) for n in ps.Nodes.load().values()]


def _find_job(ps, job: str):
    """The record of `job` (an id, or an array element A_T), None if Slurm has none."""
    array, _, task = job.partition("_")
    if not task:
        try:
            j = ps.Job.load(int(job))
        except ps.RPCError as e:
            if _unknown(e, "invalid job id"):
                return None
            raise
        if j.id == int(job):
            return j
    # An array's own id, or A_T: the record that is exactly that element.
    for j in ps.Jobs.load().values():
        if task and j.array_id == int(array) and (j.array_task_id or 0) == int(task):
            return j
        if not task and j.id == int(job):
            return j
    return None


def _op_job(ps, job):
    j = _find_job(ps, job)
    return _job_dict(j) if j is not None else None


def _op_jobs(ps):
    return [_job_dict(j) for j in ps.Jobs.load().values()]


def _job_id(ps, job) -> int:
    if "_" not in job:
        return int(job)
    j = _find_job(ps, job)
    if j is None:
        raise ps.RPCError(msg="Invalid job id specified")
    return j.id


def _op_node_state(ps, node, state, reason, cause=None):
    fields = {"state": state}
    if reason is not None:
        fields["reason"] = reason
    if cause is not None:
        fields[CAUSE_FIELD.lower()] = cause
    ps.Node(node).modify(ps.Node(**fields))


def _op_admin_comment(ps, job, text):
    ps.Job(_job_id(ps, job)).modify(ps.JobSubmitDescription(admin_comment=text))


def _libslurm():
    """libslurm as pyslurm loaded it, for the functions pyslurm does not bind."""
    import ctypes
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if len(line.split()) >= 6}
    for name in ("libslurmfull", "libslurm."):
        for path in sorted(paths):
            if os.path.basename(path).startswith(name):
                return ctypes.CDLL(path, use_errno=True)
    raise RuntimeError("libslurm is not loaded")


def _check(ps, rc: int) -> None:
    if rc != 0:
        import ctypes
        errno = ctypes.get_errno() if rc == -1 else rc
        raise ps.RPCError(errno=errno)


def _op_requeue(ps, job):
    import ctypes
    lib = _libslurm()
    lib.slurm_requeue.argtypes = (ctypes.c_uint32, ctypes.c_uint32)
    _check(ps, lib.slurm_requeue(_job_id(ps, job), JOB_RUNNING))


def _op_cancel(ps, job):
    import ctypes
    lib = _libslurm()
    lib.slurm_kill_job2.argtypes = (ctypes.c_char_p, ctypes.c_uint16, ctypes.c_uint16, ctypes.c_char_p)
    _check(ps, lib.slurm_kill_job2(job.encode(), SIGKILL, 0, None))


_OPS: dict = {"probe": _op_probe, "node": _op_node, "nodes": _op_nodes, "job": _op_job, "jobs": _op_jobs,
        "node_state": _op_node_state, "admin_comment": _op_admin_comment, "requeue": _op_requeue,
        "cancel": _op_cancel}
