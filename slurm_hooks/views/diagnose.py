"""`slurm-hooks diagnose JOBID`: every node of a job at once, and the odd rank named.

A hung job is usually many ranks waiting in a collective for one rank that is doing
something else: blocked in a write on a dead filesystem, stuck on a lock, in another
collective. Looking at one node shows only waiting ranks. This command runs the
per-node collector (`slurm-hooks job-report JOBID --node N --json`, views/jobreport.py) on
every node of the job, reads one JSON document per node, groups the ranks by what they
do (same kernel wait, same system call and filesystem, or the same top Python frames)
and names the minority first.

Two ways onto the nodes (`diagnose.fanout`):
- `clush`: ClusterShell over ssh as root (views/fanout.py), outside the job. The only way
  root reaches another user's job: Slurm creates a step in a job for its owner only.
  Every answer is keyed by the node ssh reached, never by what the document says.
- `srun`: `srun --jobid=J --overlap` inside the job, for a caller who owns it (it works
  for batch and interactive jobs and any launcher inside them); keyed by the node each
  document names, which its owner could forge: the owner's own view of their own job.
`auto`: clush when the caller is root and ClusterShell is installed, else srun.

Nothing here can hang: the fan-out runs through runner.run_command with the deadline,
and the output of the nodes that answered is kept when it fires. A node that did not
answer is itself a finding ("n17 did not answer within 20 s"). The collector has its
own, shorter deadline, so a stuck node does not leave it behind for long.

The aggregation is a pure function of the node reports (aggregate()), so the same
code serves the command, its --json record, and the health check, which captures
the job-wide picture before it requeues a job for a stuck task (capture()).
"""
from __future__ import annotations

import json
import os
import sys
import time

from .. import library_dir
from ..core.hostlist import natural_key
from ..core.reason import duration, one_line, printable, printable_tree, shorten_path
from ..core.records import asdict, dataclass, field

BUSY_CPU = 50.0             # percent of one CPU over the sample: busy, not waiting
GPU_IDLE = 10               # utilisation percent below which a held GPU counts as idle
COLLECTOR_MARGIN = 2.0      # seconds the collector leaves srun to launch and to return


@dataclass
class Member:
    """One rank (or, when the job sets no rank, one top process) on one node."""
    node: str
    rank: str | None
    pid: int
    comm: str
    cpu_percent: float | None
    detail: list[str] = field(default_factory=list)   # a few lines for the text report


@dataclass
class Group:
    what: str                       # what its members are doing, one line
    key: tuple
    suspicious: bool = False        # a thread in D, or a node that did not answer
    members: list[Member] = field(default_factory=list)

    @property
    def ranks(self) -> list[str]:
        return [m.rank for m in self.members if m.rank is not None]

    def who(self) -> str:
        nodes = sorted({m.node for m in self.members}, key=natural_key)
        ranks = self.ranks
        where = nodes[0] if len(nodes) == 1 else _names(nodes)
        if ranks and len(ranks) == len(self.members):
            label = "rank" if len(ranks) == 1 else "ranks"
            return f"{label} {_ranges(ranks)} on {where}"
        pids = ",".join(str(m.pid) for m in self.members[:4]) + (",..." if len(self.members) > 4 else "")
        return f"pid{'s' if len(self.members) > 1 else ''} {pids} on {where}"


@dataclass
class Diagnosis:
    job: str
    nodes: list[str]
    groups: list[Group] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)     # node -> why no report
    gpu: str = ""
    summary: str = ""
    notes: list[str] = field(default_factory=list)
    others: int = 0                 # job processes that are not ranks (batch shell, srun, launchers)
    elapsed: float = 0.0
    fanout: str = ""                # how the nodes were reached (FANOUT_WORDS)
    reports: list[dict] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(len(g.members) for g in self.groups)

    def to_json(self) -> dict:
        d = asdict(self)
        for g, out in zip(self.groups, d["groups"]):
            out["who"] = g.who()
            out["count"] = len(g.members)
            out["key"] = list(g.key)
        return d


class DiagnoseError(Exception):
    """The job cannot be looked at (unknown, not running, Slurm unreachable, no way
    onto its nodes)."""


CLUSH, SRUN = "clush", "srun"
FANOUT_WORDS = {CLUSH: "ClusterShell over ssh as root", SRUN: "srun --overlap in the job"}
SRUN_REFUSED = ("Slurm creates a step in a job only for its owner: as root, reach the nodes with "
                "ClusterShell over ssh (diagnose.fanout: clush or auto)")
SSH_HOWTO = ("allow root ssh from here to the nodes: a key or host-based authentication, "
             "diagnose.ssh_user, diagnose.ssh_options")


@dataclass
class JobInfo:
    """What Slurm says of the job (squeue's fields): its nodes and its owner."""
    job: str
    nodes: list[str]
    owner: str                      # "user(uid)" as squeue gives it
    uid: int | None


def choose_fanout(setting: str, caller: int, job: JobInfo) -> str:
    """clush or srun for this caller and job, or DiagnoseError saying why neither can
    reach the nodes and how to make one work."""
    from .fanout import clustershell_missing
    missing = clustershell_missing() if setting in (CLUSH, "auto") else None
    if setting == CLUSH:
        if missing:
            raise DiagnoseError(f"cannot reach the nodes of job {job.job} (diagnose.fanout: clush): {missing}")
        return CLUSH
    if setting == SRUN:
        return SRUN
    if caller == 0 and not missing:
        return CLUSH
    if caller == 0 and job.uid != 0:
        raise DiagnoseError(f"cannot reach the nodes of job {job.job} of {job.owner} as root: {SRUN_REFUSED}; "
                            f"{missing}, then {SSH_HOWTO}")
    return SRUN


# --- fan-out ---------------------------------------------------------------------------
def srun_argv(srun: str, job: str, nodes: list[str], collector: list[str], timeout: float,
              sample: float, stacks: bool) -> list[str]:
    n = str(len(nodes))
    # --chdir=/: a step starts in the caller's directory on every node otherwise, which
    # may be a hung home directory, or one holding what somebody planted there.
    return [srun, f"--jobid={job}", "--overlap", f"--nodes={n}", f"--ntasks={n}",
            "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", "--chdir=/", "--label", "--quiet",
            "--kill-on-bad-exit=0", "--job-name=slurm-hooks-diagnose", "--time=2",
            *collector, "job-report", job, "--json", f"--sample={sample:g}",
            f"--deadline={max(1.0, timeout - COLLECTOR_MARGIN):g}",
            *([] if stacks else ["--no-stacks"])]


# The collector's program: this installation's package, from the absolute directory
# it was loaded from, then the command line that follows `-c`.
_BOOTSTRAP = "import sys; sys.path.insert(0, {lib!r}); from slurm_hooks.cli import main; sys.exit(main())"


def default_collector() -> list[str]:
    """This very installation, run on the nodes: a site installs slurm-hooks at the same
    path everywhere (a package, or a shared prefix).

    Isolated (`-I`): `python -m slurm_hooks` would put the working directory first on
    sys.path and read PYTHONPATH and the user's site directory, so a `slurm_hooks/`
    planted in the caller's directory, in /tmp or on PYTHONPATH would run as the caller
    (root) on every node of the job. The package is named by its absolute path instead."""
    return [sys.executable, "-I", "-c", _BOOTSTRAP.format(lib=library_dir())]


def step_env(slurm) -> dict:
    """The caller's environment without the variables of a job it may itself run in
    (srun would read SLURM_JOB_ID and friends as options) and without Python's, with
    Slurm's own settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")) or k.startswith("SLURM_HOOKS_")}
    # Nor anything that tells Python what to import or run (PYTHONPATH, PYTHONSTARTUP,
    # PYTHONHOME...): srun hands the environment to the collector on every node.
    env = {k: v for k, v in env.items() if not k.startswith("PYTHON")}
    env.update(slurm.env)
    env["PATH"] = slurm.env["PATH"]
    return env


def srun_fan_out(slurm, job: str, nodes: list[str], collector: list[str], timeout: float,
                 sample: float, stacks: bool, asked: float | None = None) -> tuple[list[dict], dict[str, str]]:
    """Node reports and {node: why none} for the nodes that gave none, through srun
    in the job. `asked`: the deadline the user gave, for the message (timeout is what
    is left of it)."""
    from ..host.runner import run_command
    from ..slurm.scontrol import step_refused
    srun = os.path.join(os.path.dirname(slurm.scontrol or ""), "srun")
    if slurm.scontrol is None or not os.access(srun, os.X_OK):
        raise DiagnoseError(f"srun not found next to scontrol in {slurm.where}")
    argv = srun_argv(srun, job, nodes, collector, timeout, sample, stacks)
    r = run_command(argv, timeout, step_env(slurm))
    reports, seen = parse_labelled(r.stdout, nodes)
    missing = {}
    errors = [printable(ln.strip()) for ln in r.stderr.splitlines() if ln.strip()]
    for node in nodes:
        if node in seen:
            continue
        said = next((e for e in errors if node in e.split()), "")
        if r.timed_out:
            missing[node] = f"{node} did not answer within {asked or timeout:g} s" + (f" ({said})" if said else "")
        else:
            out = printable(r.stdout.strip().splitlines()[0][:200]) if r.stdout.strip() else "nothing"
            said = said or (errors[-1] if errors else f"srun exited with status {r.rc}, its output: {out}")
            refused = " (" + SRUN_REFUSED + ")" if step_refused(said) else ""
            missing[node] = f"{node} gave no report: {said[:300]}{refused}"
    return reports, missing


def clush_fan_out(cfg, job: str, nodes: list[str], collector: list[str], timeout: float,
                  sample: float, stacks: bool, asked: float | None = None) -> tuple[list[dict], dict[str, str]]:
    """Node reports and {node: why none}, through ClusterShell over ssh as root. Each
    report is the node's by the ssh connection it came back on."""
    from . import fanout
    dc = cfg.diagnose
    ssh = fanout.SshSettings(user=dc.ssh_user, options=list(dc.ssh_options), width=dc.fanout_width,
                             connect_timeout=dc.ssh_connect_timeout)
    per_node = max(0.5, timeout - fanout.DRIVER_MARGIN)
    command = fanout.remote_command(collector, job, sample, max(1.0, per_node - fanout.SSH_MARGIN), stacks,
                                    os.environ.get("SLURM_HOOKS_CONFIG"))
    answers, said = fanout.run(nodes, command, ssh, timeout)
    reports, missing = [], {}
    for node in nodes:
        a = answers.get(node)
        doc = node_document(a.stdout) if a is not None and a.rc == 0 else None
        if doc is None:
            missing[node] = _no_answer(node, a, asked or timeout, ssh.user, said)
            continue
        reports.append(_keyed(doc, node, job))
    return reports, missing


def node_document(stdout: str) -> dict | None:
    """The collector's one JSON line (its last), made printable; None without one."""
    for line in reversed(stdout.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        return printable_tree(doc) if isinstance(doc, dict) else None
    return None


def _keyed(doc: dict, node: str, job: str) -> dict:
    """The report as the node's that ssh reached: a document that names another node
    (or job) is put right and says so."""
    claimed, claimed_job = doc.get("node"), doc.get("job")
    doc["node"], doc["job"] = node, job
    notes = [n for n in doc.get("notes") or [] if isinstance(n, str)]
    if claimed != node:
        notes.append(f"its report named node '{printable(str(claimed))[:64]}': kept as {node}'s, "
                     "the node ssh reached")
    if claimed_job != job:
        notes.append(f"its report named job '{printable(str(claimed_job))[:32]}': kept as job {job}'s")
    doc["notes"] = notes
    return doc


def _no_answer(node: str, a, deadline: float, user: str, said: str) -> str:
    """Why a node gave no report, in the words an admin acts on."""
    from .fanout import SSH_FAILED, SSH_TIMED_OUT
    err = [printable(ln.strip()) for ln in (a.stderr if a else "").splitlines() if ln.strip()]
    last = err[-1][:300] if err else ""
    if a is None or a.timed_out:
        why = last or (said if a is None else "")
        return f"{node} did not answer within {deadline:g} s" + (f" ({why})" if why else "")
    if a.code == SSH_TIMED_OUT:
        return f"{node} did not answer: ssh: {last}"          # a hung sshd, or a node gone
    if a.code == SSH_FAILED:
        from .fanout import ssh_advice
        advice = ssh_advice(node, user, " ".join(err))
        return (f"{node} gave no report: ssh as {user} failed: {last or 'no message'} ({SSH_HOWTO})"
                + (f"; {advice}" if advice else ""))
    if a.rc != 0:
        return f"{node} gave no report: the collector exited with status {a.rc}" + (f": {last}" if last else "")
    out = printable(a.stdout.strip().splitlines()[0][:200]) if a.stdout.strip() else "nothing"
    return f"{node} gave no report: its output was {out}"


def parse_labelled(stdout: str, nodes: list[str]) -> tuple[list[dict], set[str]]:
    """One JSON document per task from `srun --label` output ("  3: {...}")."""
    lines: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        label, sep, rest = line.partition(": ")
        if sep and label.strip().isdigit():
            lines.setdefault(label.strip(), []).append(rest)
    reports, seen = [], set()
    for chunks in lines.values():
        # srun forwards a long line in pieces, each labelled: put them back together.
        try:
            doc = json.loads("".join(chunks))
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("node") in nodes and doc["node"] not in seen:
            seen.add(doc["node"])
            # What a node sends is read like any user text: a collector there may be
            # another version, or run where the job's user has a say, and its strings
            # (names, command lines, paths, fstypes, frames, errors) reach the text, the
            # JSON, the journal and the AdminComment from here.
            reports.append(printable_tree(doc))
    return reports, seen


# --- aggregation ------------------------------------------------------------------------
def _ranges(ranks: list[str]) -> str:
    """"0-3,7" for numeric ranks, a plain list otherwise."""
    try:
        nums = sorted({int(r) for r in ranks})
    except ValueError:
        return ",".join(sorted(ranks))
    out, start, prev = [], None, None
    for n in nums:
        if start is None:
            start = prev = n
        elif prev is not None and n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(out)


def _names(nodes: list[str]) -> str:
    return ",".join(nodes) if len(nodes) <= 4 else f"{','.join(nodes[:3])},... ({len(nodes)} nodes)"


def _frame_key(frame: str) -> str:
    """A frame without its line number: ranks spinning in one loop stand on many lines."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def _main_thread(task: dict) -> dict | None:
    threads = task.get("threads") or []
    return (next((t for t in threads if t.get("name") == "MainThread"), None)
            or next((t for t in threads if t.get("tid") == task.get("pid")), None)
            or (threads[0] if threads else None))


def _number(v) -> float | None:
    """A figure of a node's document, or None: the document may come from another
    version, or from where the job's owner has a say."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def behaviour(task: dict) -> tuple[tuple, str, bool, list[str]]:
    """(grouping key, what it does in words, suspicious, detail lines) of one rank."""
    threads = task.get("threads") or []
    cpu = _number(task.get("cpu_percent"))
    # Runnable (on a CPU or queued for one) counts as busy: on a crowded node a spinning
    # rank gets less than half a CPU. A collector of an earlier version sends no figure.
    runnable = _number(task.get("runnable_percent"))
    wants = max(v for v in (cpu, runnable, -1.0) if v is not None)
    activity = "busy" if wants >= BUSY_CPU else "waiting"
    states: dict[str, int] = {}
    for t in threads:
        states[t.get("state", "?")] = states.get(t.get("state", "?"), 0) + 1
    queued = f" ({runnable:.0f}% runnable)" if runnable is not None and cpu is not None \
        and runnable >= BUSY_CPU > cpu else ""
    detail = [f"pid {task['pid']} {task.get('comm', '?')}, cpu "
              f"{'?' if cpu is None else f'{cpu:.0f}%'}{queued}, threads "
              + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))]
    blocked = [t for t in threads if t.get("state") == "D"]
    if blocked:
        t = next((b for b in blocked if b.get("file")), blocked[0])
        call = t.get("syscall") or ""
        call = f"{call}()" if call and call not in ("running", "page fault") else (call or "the kernel")
        if t.get("file"):
            fs = f"{t['fstype']}, " if t.get("fstype") else ""
            where = f" on {shorten_path(t['file'], 100)} ({fs}D"
        else:
            where = f" at {t.get('wchan') or '?'} (D"
        held = _d_for(t)
        if held:
            progress = f" for {held}"
        else:
            progress = {False: ", no progress", True: ", progressing"}.get(t.get("progress"), "")
        what = f"in {call}{where}{progress})"
        if t.get("frames"):
            what += f" from {_frame_key(t['frames'][0])}"
        detail.append(f"thread {t['tid']} {t.get('name') or t.get('comm', '')}: wchan {t.get('wchan') or '?'}"
                      + (f", D for {held}" if held else "")
                      + (f"; {' < '.join(t['frames'][:4])}" if t.get("frames") else ""))
        return ("D", t.get("syscall"), t.get("mountpoint") or t.get("file") or t.get("wchan")), what, True, detail
    main = _main_thread(task)
    if main is not None and main.get("frames"):
        top = [_frame_key(f) for f in main["frames"][:3]]
        detail.append(f"thread {main['tid']} {main.get('name') or main.get('comm', '')}: "
                      + " < ".join(main["frames"][:4]))
        # Frames without line numbers cannot tell a rank on a lock from one asleep a
        # line further down: a waiting thread's system call can.
        call = main.get("syscall") or ""
        call = call if activity == "waiting" and call not in ("running", "page fault") else ""
        what = f"{activity} in {' < '.join(top)}" + (f", in {call}()" if call else "")
        return ("py", activity, call, *top), what, False, detail
    if main is None:
        return ("gone",), "gone (no threads left)", False, detail
    call = main.get("syscall") or ""
    if main.get("state") == "R" or call == "running":
        what = "running on a CPU" if activity == "busy" else "running"
        key: tuple[str, ...] = ("k", activity, "running")
    else:
        wchan = main.get("wchan") or "?"
        what = f"{activity} in {call or '?'}() at {wchan}"
        key = ("k", activity, call, wchan)
    if task.get("stacks") not in ("ok", "not asked for", ""):
        detail.append(f"no Python stack: {task.get('stacks')}")
    return key, what, False, detail


def _d_for(thread: dict) -> str:
    """How long a thread without progress has been in D ("1h03m", "≥40s"), or ""."""
    seconds = thread.get("d_seconds")
    if thread.get("progress") is True or not isinstance(seconds, (int, float)):
        return ""
    return duration(seconds, bool(thread.get("d_at_least", False)))


def _ranks(report: dict, steps_ranked: bool, runtime_ranked: bool = False) -> tuple[list[dict], int]:
    """The tasks that are ranks (one per rank: a rank's own children, such as data
    loader workers, inherit its RANK and are not counted again), and how many other
    processes the job has here. The batch script's shell and its srun carry
    SLURM_PROCID=0 too: when the ranks run in steps, the batch step holds none.
    `runtime_ranked`: the job's runtime numbers its ranks (RANK, the MPI rank): then a
    process with SLURM_PROCID alone is a launcher (mpirun, Open MPI's orted, torchrun's
    agent, the batch shell), and a rank may live in the batch step (mpirun's own node)."""
    tasks = report.get("tasks") or []
    by_pid = {t["pid"]: t for t in tasks}
    if runtime_ranked:
        ranked = [t for t in tasks if t.get("rank") is not None and t.get("rank_var") != "SLURM_PROCID"]
    else:
        ranked = [t for t in tasks if t.get("rank") is not None
                  and not (steps_ranked and t.get("step") == "batch")]
    if ranked:
        # The batch script's shell is no rank: where the script runs the program itself
        # (no srun), the shell and the program both carry SLURM_PROCID=0, and the program
        # is the rank. The shell is the batch step's top task (its parent is slurmstepd)
        # with a ranked child.
        shells = {t["pid"] for t in ranked if t.get("step") == "batch" and t.get("ppid") not in by_pid
                  and any(o.get("ppid") == t["pid"] for o in ranked)}
        ranked = [t for t in ranked if t["pid"] not in shells]
        # A parent counts only as a rank itself: orted's SLURM_PROCID equals its rank's.
        ids = {t["pid"] for t in ranked}
        top = [t for t in ranked if not (t.get("ppid") in ids and by_pid[t["ppid"]].get("rank") == t["rank"])]
        return top, len(tasks) - len(top)
    # No rank variables: every process outside the batch script's step is a member.
    work = [t for t in tasks if t.get("step") != "batch"]
    leaves = [t for t in work if not any(o.get("ppid") == t["pid"] for o in work)] or work
    return leaves, len(tasks) - len(leaves)


def aggregate(job: str, nodes: list[str], reports: list[dict], missing: dict[str, str]) -> Diagnosis:
    d = Diagnosis(job=job, nodes=list(nodes), missing=dict(missing), reports=reports)
    groups: dict[tuple, Group] = {}
    gpus = []
    steps_ranked = any(t.get("rank") is not None and t.get("step") != "batch"
                       for rep in reports for t in rep.get("tasks") or [])
    runtime_ranked = any(t.get("rank") is not None and t.get("rank_var") not in (None, "SLURM_PROCID")
                         for rep in reports for t in rep.get("tasks") or [])
    for rep in reports:
        node = rep.get("node", "?")
        members, others = _ranks(rep, steps_ranked, runtime_ranked)
        d.others += others
        for note in rep.get("notes") or []:
            d.notes.append(f"{node}: {note}")
        for t in members:
            key, what, suspicious, detail = behaviour(t)
            g = groups.setdefault(key, Group(what=what, key=key, suspicious=suspicious))
            g.members.append(Member(node=node, rank=t.get("rank"), pid=t["pid"], comm=t.get("comm", ""),
                                    cpu_percent=_number(t.get("cpu_percent")), detail=detail))
            for gu in t.get("gpus") or []:
                gpus.append((node, gu.get("index"), gu.get("utilization"), t.get("rank")))
    _fold_caught_awake(groups)
    for g in groups.values():
        g.members.sort(key=lambda m: (_rank_sort(m.rank), natural_key(m.node), m.pid))
    # Most suspicious first: D state, then the smallest groups (the odd ones out).
    d.groups = sorted(groups.values(), key=lambda g: (not g.suspicious, len(g.members),
                                                       _rank_sort(g.members[0].rank)))
    d.gpu = _gpu_summary(gpus)
    d.summary = summarise(d)
    return d


def _fold_caught_awake(groups: dict[tuple, Group]) -> None:
    """A waiting rank that polls (sleeps, wakes, looks, sleeps) is now and then caught
    between two sleeps, with no system call to show: with the same frames as ranks
    asleep in one call, it does what they do, and is not an odd one out."""
    for key in [k for k in groups if k[0] == "py" and k[2] == ""]:
        peers = [k for k in groups if k[0] == "py" and k[1] == key[1] and k[2] and k[3:] == key[3:]]
        if not peers:
            continue
        into = groups[max(peers, key=lambda k: len(groups[k].members))]
        into.members.extend(groups.pop(key).members)


def _rank_sort(rank):
    try:
        return (0, int(rank), "")
    except (TypeError, ValueError):
        return (1, 0, str(rank))


def _gpu_summary(gpus: list[tuple]) -> str:
    seen = {}
    for node, index, util, rank in gpus:
        seen[(node, index)] = (util, rank)
    if not seen:
        return ""
    idle = sorted(((n, i) for (n, i), (u, _) in seen.items() if u is None or u < GPU_IDLE),
                  key=lambda x: (natural_key(x[0]), x[1]))
    busy = len(seen) - len(idle)
    if not idle:
        return f"all {busy} GPUs busy"
    if not busy:
        return f"all {len(idle)} GPUs idle"
    # The asymmetry that gives a hang away (the incident: rank 0's GPU at 0 % while the
    # 63 others spin in NCCL), each idle GPU with the rank that holds it.
    named = ", ".join(_idle_gpu(n, i, *seen[(n, i)]) for n, i in idle[:3]) + (", ..." if len(idle) > 3 else "")
    return f"{named} while {busy} GPU{'s' if busy != 1 else ''} busy"


def _idle_gpu(node: str, index, util, rank) -> str:
    held = f" of rank {rank}" if rank is not None else ""
    return f"GPU{index}{held} on {node} at {'?' if util is None else util}%"


def summarise(d: Diagnosis) -> str:
    total = d.total
    parts = []
    if not d.groups:
        answered = [n for n in d.nodes if n not in d.missing]
        if answered:
            parts.append(f"no process of job {d.job} found on {_names(answered)}")
    elif len(d.groups) == 1:
        g = d.groups[0]
        parts.append(f"all {total} ranks alike: {g.what}" if g.ranks else f"all {total} processes alike: {g.what}")
    else:
        first, rest = d.groups[0], d.groups[1:]
        parts.append(f"{first.who()} is {first.what}")
        for g in rest[:3]:
            parts.append(f"{g.who()} {g.what} ({len(g.members)} of {total})")
        if len(rest) > 3:
            parts.append(f"{len(rest) - 3} more groups")
    parts.extend(d.missing[n] for n in sorted(d.missing, key=natural_key))
    if d.gpu:
        parts.append(d.gpu)
    return one_line("; ".join(parts))


# --- output -----------------------------------------------------------------------------
def render(d: Diagnosis) -> str:
    answered = len(d.nodes) - len(d.missing)
    how = f", through {FANOUT_WORDS[d.fanout]}" if d.fanout in FANOUT_WORDS else ""
    lines = [f"job {d.job}: {len(d.nodes)} node{'s' if len(d.nodes) != 1 else ''} "
             f"({answered} answered), {d.total} ranks, {d.elapsed:.1f}s{how}",
             f"  {d.summary}", ""]
    for i, g in enumerate(d.groups, 1):
        mark = "!" if g.suspicious else " "
        lines.append(f"{mark}{i}. {g.who()} ({len(g.members)} of {d.total}): {g.what}")
        shown = g.members[:1] if len(g.members) > 1 else g.members
        for m in shown:
            prefix = f"     e.g. rank {m.rank} on {m.node}: " if len(g.members) > 1 else "     "
            for j, line in enumerate(m.detail[:3]):
                lines.append((prefix if j == 0 else "       ") + line)
    for node in sorted(d.missing, key=natural_key):
        lines.append(f"!  {d.missing[node]}")
    if d.others:
        lines.append(f"   other processes of the job (batch script, launchers, workers): {d.others}")
    for note in d.notes[:10]:
        lines.append(f"   note: {note}")
    return "\n".join(lines)


def render_node(report: dict) -> str:
    """job-report's text output: the node's ranks, one block each. Every string is
    made printable once more here, at the edge: a field the collector forgot must not
    bring a user's escape onto the admin's terminal."""
    report = printable_tree(report)
    d = aggregate(report.get("job", "?"), [report.get("node", "?")], [report], {})
    return render(d)


# --- the command, and the health check's capture ------------------------------------------
def diagnose(cfg, job: str, timeout: float, stacks: bool, sample: float | None = None) -> Diagnosis:
    started = time.monotonic()
    slurm, info = job_info(cfg, job)
    path = choose_fanout(cfg.diagnose.fanout, os.geteuid(), info)
    left = timeout - (time.monotonic() - started)
    collector = list(cfg.diagnose.collector) or default_collector()
    how = clush_fan_out if path == CLUSH else srun_fan_out
    reports, missing = how(cfg if path == CLUSH else slurm, job, info.nodes, collector, max(left, 1.0),
                           cfg.diagnose.sample if sample is None else sample, stacks, asked=timeout)
    d = aggregate(job, info.nodes, reports, missing)
    d.fanout = path
    d.elapsed = round(time.monotonic() - started, 3)
    return d


def job_info(cfg, job: str):
    """(the Slurm backend, JobInfo) of a running job, from squeue's fields; or
    DiagnoseError."""
    from ..core import hostlist
    from ..slurm.api import SlurmError
    from ..slurm.connect import open_backend
    try:
        slurm = open_backend(cfg.slurm)
        info = slurm.show_job(job)
    except SlurmError as e:
        raise DiagnoseError(f"cannot ask Slurm about job {job}: {e}") from None
    if info is None:
        raise DiagnoseError(f"job {job} is not known to Slurm")
    state = info.get("JobState", "?")
    if not state.startswith("RUNNING"):
        raise DiagnoseError(f"job {job} is {state}, not running: nothing to look at")
    try:
        nodes = hostlist.expand(info.get("NodeList", ""))
    except hostlist.HostlistError as e:
        raise DiagnoseError(f"job {job}: cannot read its NodeList: {e}") from None
    if not nodes:
        raise DiagnoseError(f"job {job} has no nodes")
    owner = printable(info.get("UserId", "?"))
    uid = owner.rpartition("(")[2].rstrip(")")
    return slurm, JobInfo(job=job, nodes=nodes, owner=owner, uid=int(uid) if uid.isdigit() else None)


def record(cfg, d: Diagnosis) -> list[str]:
    """The summary into the job's AdminComment (after the admin's own text) and the
    journal. Returns what could not be done."""
    from ..core.reason import truncate_bytes
    from ..sinks import journal
    from ..slurm.api import SlurmError, append_admin_comment
    from ..slurm.connect import open_backend
    problems = []
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    text = truncate_bytes(one_line(f"{cfg.reason_prefix} diagnose {stamp}: {d.summary}"), 1000)
    try:
        slurm = open_backend(cfg.slurm)
        append_admin_comment(slurm, d.job, slurm.show_job(d.job) or {}, text)
    except SlurmError as e:
        problems.append(f"AdminComment of job {d.job} not updated: {e}")
    err = journal.append(cfg.journal, {"event": "diagnose", "time": time.time(), "job": d.job,
                                       "summary": d.summary, "missing": d.missing,
                                       "groups": d.to_json()["groups"]},
                         max_bytes=cfg.journal_max_bytes, keep=cfg.journal_keep)
    if err:
        problems.append(err)
    return problems


UNAVAILABLE = "job-wide picture unavailable"


def capture(cfg, job: str, timeout: float | None = None) -> str:
    """The health check's job-wide picture before a requeue, through the same fan-out
    as the command (from this node: root's ssh to the job's other nodes): one line,
    "job-wide picture unavailable: why" when no node could be read, "" when it is
    switched off. Never an exception, never past `timeout` (default: the configured
    `diagnose.on_requeue_timeout`)."""
    if not cfg.diagnose.on_requeue:
        return ""
    from ..core.config import node_name
    try:
        _, info = job_info(cfg, job)
        if set(info.nodes) <= {node_name(cfg)}:
            return ""          # a job of this node alone: its diagnosis is this run's own
        d = diagnose(cfg, job, timeout or cfg.diagnose.on_requeue_timeout, stacks=cfg.diagnose.stacks)
    except DiagnoseError as e:
        return f"{UNAVAILABLE}: {one_line(str(e))[:400]}"
    except Exception as e:          # the requeue must go on whatever happened here
        return f"{UNAVAILABLE}: {one_line(str(e))[:200]}"
    # The job's record says which nodes were not reached, not the transport's own words
    # (ssh's `Connection refused`, a host key): those are the admin's, from `diagnose`.
    unreached = sorted(d.missing, key=natural_key)
    if not d.reports:
        return (f"{UNAVAILABLE}: {len(unreached)} node(s) not reached ({', '.join(unreached[:8])}"
                f"{' ...' if len(unreached) > 8 else ''}); `slurm-hooks diagnose {job}` says why")
    d.missing = {n: f"{n} not reached" for n in unreached}
    d.summary = summarise(d)
    return f"job-wide: {d.summary}"


def main(cfg, job: str, as_json: bool, timeout: float | None, stacks: bool | None,
         do_record: bool) -> int:
    if not job.isdigit():
        print(f"slurm-hooks diagnose: {printable(job)!r} is not a job id (a number)", file=sys.stderr)
        return 2
    try:
        d = diagnose(cfg, job, timeout or cfg.diagnose.timeout,
                     cfg.diagnose.stacks if stacks is None else stacks)
    except DiagnoseError as e:
        print(f"slurm-hooks diagnose: {e}", file=sys.stderr)
        return 1
    problems = record(cfg, d) if do_record else []
    print(json.dumps(d.to_json(), indent=2) if as_json else render(d))
    for p in problems:
        print(f"slurm-hooks diagnose: {p}", file=sys.stderr)
    return 1 if d.missing or problems else 0
