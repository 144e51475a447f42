"""Root's `slurm-hooks diagnose` on a real unprivileged user's job, on the real 3-node
cluster: Slurm refuses `srun --jobid` to root on another user's job, so root reaches
the nodes with ClusterShell over the session's sshd (tests/sshd.py), outside the job.

The seed: a real MPI program (Debian's python3-mpi4py, Open MPI, launched by mpirun in
the user's batch script) on 3 nodes, ranks 1-2 in a real collective while rank 0 is
stuck in write() on a filesystem that stopped answering. Then what the owner does to
change the report (planted modules, PYTHON* variables, forged JSON, a user-writable
directory to run it from), a node whose sshd or collector hangs, and the health
check's capture before its requeue, through the same fan-out."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from attacker import PY, unprivileged_user
from helpers import SLURM_HOOKS, journal, write_node_configs
from mounts_fixtures import start_fuse

pytestmark = pytest.mark.cluster

OWNER = "shk-owner"
MPIRUN = "/usr/bin/mpirun"

# Rank 0 logs every step to the shared filesystem (unbuffered: each log line is one
# write()) and stops in write() once the filesystem stops answering; the others wait
# for it in the gradients' allreduce.
MPI_RANKS = """
import os, sys, time
from mpi4py import MPI
fs, barrier = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()

def write_log(log, step):
    log.write(b"step %d\\n" % step)

def sync_gradients(step):
    return comm.allreduce(step)

log = open(os.path.join(fs, "train.log"), "ab", buffering=0) if rank == 0 else None
comm.Barrier()
open(os.path.join(barrier, "started.%d" % rank), "w").close()
step = 0
while True:
    step += 1
    if rank == 0:
        while not os.path.exists(os.path.join(barrier, "go")):
            time.sleep(0.05)
        write_log(log, step)
    sync_gradients(step)
"""


@pytest.fixture(scope="module")
def owner_session():
    with unprivileged_user(OWNER) as user:
        yield user


@pytest.fixture
def owner(owner_session):
    yield owner_session
    owner_session.cleanup()


@pytest.fixture
def shared_fs(owner_session):
    """The site's shared filesystem (root's FUSE mount, allow_other), serving until
    the test stalls it; then its callers wait in D (no_interrupt) until teardown."""
    m = start_fuse(owner_session.base / f"shared-{time.monotonic_ns()}", "ok", no_interrupt=True)
    yield m
    m.close()


def users_conf(cluster) -> Path:
    """slurm.conf readable by users, as /etc/slurm is on a real node (test_security's way)."""
    from test_security import readable_by_users
    return readable_by_users(cluster)


def submit(user, cluster, body: str, *args: str) -> int:
    """sbatch as the user, on 3 nodes, from their home; the job's PATH finds this
    Slurm's srun (mpirun launches its daemons with it)."""
    user._n += 1
    bindir = os.path.dirname(cluster.binary("srun"))
    # Debian's Open MPI puts its own prefix (/usr/bin) first on the PATH of the srun it
    # starts its daemons with, so beside a Slurm built from source it would run
    # Debian's srun against the other slurmctld. Its rsh launcher through this Slurm's
    # srun (a step per node, as the slurm launcher makes) is the same for both.
    # Each "node" gets a TMPDIR of its own, as separate hosts have: Open MPI's daemons on
    # the one host otherwise build and tear down one session directory tree together,
    # and one's mkdir can find a directory the other removes before it looks (orte_init
    # "mkdir ... File exists", seen with a second test session on the host).
    agent = user.write("srun-agent", f'#!/bin/sh\nhost=$1\nshift\nexec {cluster.binary("srun")} --overlap -N1 -n1 '
                                     f'-w "$host" /bin/sh -c "mkdir -p {user.home}/tmp-$host; '
                                     f'export TMPDIR={user.home}/tmp-$host; $*"\n', 0o755)
    launcher = f"export OMPI_MCA_plm=rsh OMPI_MCA_plm_rsh_agent={agent}\n"
    script = user.write(f"job{user._n}.sh", f"#!/bin/sh\nexport PATH={bindir}:/usr/bin:/bin\n" + launcher + body, 0o755)
    conf = users_conf(cluster)
    r = user.run(cluster.binary("sbatch"), "--parsable", "-N3", "--chdir", user.home,
                 "-o", user.home / f"job{user._n}.out", *args, script, env=user.env(SLURM_CONF=str(conf)))
    return int(r.stdout.strip().split(";")[0])


def mpi_job(user, cluster, fs, *args: str, env: str = "") -> tuple[int, Path]:
    barrier = user.mkdir(f"barrier{user._n + 1}")
    user.write("ranks.py", MPI_RANKS)
    # Open MPI between "nodes" that are all this host: TCP on loopback only. Each orted
    # maps hwloc's topology into a shared segment at an address it guesses from its own
    # memory map; where ASLR puts the stack in that hole, orted crashes in
    # hwloc_shmem_topology_write (seen in CI). vmhole=none skips the segment.
    body = (f"export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo "
            f"OMPI_MCA_rtc_hwloc_vmhole=none\n{env}"
            f"exec {MPIRUN} -n 3 --map-by node --bind-to none {PY} {user.home}/ranks.py {fs.path} {barrier}\n")
    job = submit(user, cluster, body, *args)
    try:
        cluster.wait_for(lambda: len(list(barrier.glob("started.*"))) >= 3, 60, what="all MPI ranks started")
    except AssertionError:
        out = user.home / f"job{user._n}.out"
        raise AssertionError(out.read_text() if out.exists() else "no job output") from None
    # The daemons on the other "nodes" keep their session directories apart (submit()).
    assert all(any((user.home / f"tmp-{n}").glob("ompi.*")) for n in ("n2", "n3")), \
        sorted(p.name for p in user.home.iterdir())
    return job, barrier


def stall(fs, barrier: Path) -> float:
    """The filesystem stops answering, then rank 0 writes its next line: when it blocked."""
    fs.stall()
    (barrier / "go").touch()
    time.sleep(0.3)
    return time.time()


def admin_env(tmp_path, cluster, sshd, **diag) -> dict:
    doc = {"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "journal.jsonl"),
           "slurm": cluster.hooks_slurm(timeout=10), "diagnose": {"ssh_options": sshd.options(), **diag}}
    path = tmp_path / "diagnose.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {"PATH": "/usr/bin:/bin", "SLURM_HOOKS_CONFIG": str(path), "LANG": "C.UTF-8"}


def diagnose(env, job, *args, cwd=None, timeout=60):
    t0 = time.monotonic()
    r = subprocess.run([str(SLURM_HOOKS), "diagnose", str(job), *args], env=env, capture_output=True,
                       text=True, timeout=timeout, cwd=cwd)
    return r, time.monotonic() - t0


def test_roots_diagnose_names_rank_0_stuck_in_write_on_the_users_mpi_job(clean_cluster, owner, shared_fs,
                                                                         sshd, tmp_path):
    cluster = clean_cluster
    job, barrier = mpi_job(owner, cluster, shared_fs)
    assert cluster.show_job(job)["UserId"].startswith(OWNER)
    blocked = stall(shared_fs, barrier)
    time.sleep(2)
    env = admin_env(tmp_path, cluster, sshd)
    r, took = diagnose(env, job, "--timeout", "10")
    assert r.returncode == 0, r.stdout + r.stderr
    head, summary = r.stdout.splitlines()[0], r.stdout.splitlines()[1].strip()
    assert head.endswith("through ClusterShell over ssh as root"), head
    m = re.fullmatch(re.escape(f"rank 0 on n1 is in write() on {shared_fs.path}/train.log (fuse.fusefs, D for ")
                     + r"(\d+)s\) from write_log \(ranks.py\); ranks 1-2 on n2,n3 busy in sync_gradients "
                     r"\(ranks.py\) < <module> \(ranks.py\) \(2 of 3\)", summary)
    assert m, r.stdout
    assert 2 <= int(m.group(1)) <= time.time() - blocked + 1, (m.group(1), time.time() - blocked)
    # The stuck rank held nothing up: no part of it waited out the deadline. (How fast
    # it is, a loaded test host aside, is bench/diagnose.py's to say.)
    assert took < 10, took


# --- what the owner cannot change ------------------------------------------------------------
# Records who imported it, and prints a forged report of every node where it runs
# (the owner's own ranks import it through their PYTHONPATH: their job goes on).
PLANTED = """
import json, os, sys
open({marker!r}, "a").write("imported as uid %d from %s\\n" % (os.getuid(), __file__))
for node in ("n1", "n2", "n3"):
    print(json.dumps({{"node": node, "job": "any", "tasks": [], "notes": ["forged"]}}), flush=True)
"""


def plant(user, where: Path, marker: Path) -> None:
    """A `slurm_hooks` package (and a `sitecustomize`) that records being imported."""
    pkg = where / "slurm_hooks"
    pkg.mkdir(exist_ok=True)
    for name in ("__init__.py", "__main__.py", "cli.py", "jobreport.py"):
        (pkg / name).write_text(PLANTED.format(marker=str(marker)))
    (where / "sitecustomize.py").write_text(PLANTED.format(marker=str(marker)))
    for p in (pkg, *pkg.iterdir(), where / "sitecustomize.py"):
        user.own(p)


def test_the_owner_cannot_change_roots_report(clean_cluster, owner, shared_fs, sshd, tmp_path):
    cluster = clean_cluster
    marker = owner.home / "imported.txt"
    marker.touch()
    owner.own(marker)
    marker.chmod(0o666)
    plant(owner, owner.home, marker)
    tmp_plant = Path("/tmp") / f"shk-planted-{os.getpid()}"
    tmp_plant.mkdir()
    try:
        plant(owner, tmp_plant, marker)
        # The job's Python variables point at the planted code: every rank imports it and
        # prints forged reports of every node among its output.
        env = (f"export PYTHONPATH={owner.home}:{tmp_plant} PYTHONSTARTUP={owner.home}/slurm_hooks/cli.py "
               f"PYTHONUSERBASE={owner.home} PYTHONSAFEPATH= PYTHONINSPECT=\n")
        job, barrier = mpi_job(owner, cluster, shared_fs, env=env)
        blocked = stall(shared_fs, barrier)
        time.sleep(1)
        # The admin runs diagnose from the owner's directory (the planted package in it).
        r, took = diagnose(admin_env(tmp_path, cluster, sshd), job, "--json", cwd=owner.home)
        assert r.returncode == 0, r.stdout + r.stderr
        d = json.loads(r.stdout)
    finally:
        import shutil
        shutil.rmtree(tmp_plant, ignore_errors=True)
    imported = marker.read_text().splitlines()
    assert imported and all(f"as uid {owner.uid} " in line for line in imported), imported  # root's: never
    assert d["fanout"] == "clush" and d["missing"] == {}
    # Rank 0 is the odd one out; ranks 1 and 2 spin between collectives, so a rank caught
    # on a CPU at the moment of the sample may stand alone: either way, both are there.
    who = [g["who"] for g in d["groups"]]
    assert who[0] == "rank 0 on n1" and who[1:] in (["ranks 1-2 on n2,n3"], ["rank 1 on n2", "rank 2 on n3"],
                                                   ["rank 2 on n3", "rank 1 on n2"]), d["summary"]
    assert d["summary"].startswith(f"rank 0 on n1 is in write() on {shared_fs.path}/train.log (fuse.fusefs, D for ")
    assert "forged" not in json.dumps(d) and "healthy (ok.py" not in json.dumps(d)
    assert sorted(rep["node"] for rep in d["reports"]) == ["n1", "n2", "n3"]
    held = time.time() - blocked
    [stuck] = [t for t in d["reports"][0]["tasks"] if t["rank"] == "0" and t["rank_var"] == "OMPI_COMM_WORLD_RANK"]
    assert any(th["state"] == "D" and 0 < th["d_seconds"] <= held + 1 for th in stuck["threads"])


WHERE_AM_I = """
import os, sys
with open(sys.argv[1], "a") as f:
    f.write("%d %d %s\\n" % (os.getuid(), os.getsid(0), open("/proc/self/cgroup").read().strip().replace("\\n", "|")))
os.execv(sys.argv[2], sys.argv[2:])
"""


def test_the_collector_runs_as_root_outside_the_job(clean_cluster, owner, shared_fs, sshd, tmp_path):
    """Not in the job's cgroup, not in a session of the job's, root: nothing of the
    owner's can trace it or write to its output."""
    cluster = clean_cluster
    job, barrier = mpi_job(owner, cluster, shared_fs)
    seen = tmp_path / "where.txt"
    probe = tmp_path / "where.py"
    probe.write_text(WHERE_AM_I)
    from slurm_hooks.views.diagnose import default_collector
    r, _ = diagnose(admin_env(tmp_path, cluster, sshd, collector=[PY, "-I", str(probe), str(seen),
                                                                    *default_collector()]), job, "--no-stacks")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = seen.read_text().splitlines()
    assert len(lines) == 3
    job_sessions = {os.getsid(p) for p in owner_pids(owner)}
    for line in lines:
        uid, sid, cgroup = line.split(" ", 2)
        assert uid == "0" and f"job_{job}" not in cgroup and int(sid) not in job_sessions, line


def owner_pids(user) -> list[int]:
    from attacker import pids_of
    return pids_of(user.uid)


# --- a node that does not answer ------------------------------------------------------------
def test_a_node_whose_sshd_hangs_is_reported_and_the_command_ends_on_time(clean_cluster, owner, shared_fs,
                                                                          sshd, tmp_path):
    cluster = clean_cluster
    job, barrier = mpi_job(owner, cluster, shared_fs)
    stall(shared_fs, barrier)
    n3 = sshd.extra("n3-hung")
    conf = sshd.config_with("n3-hung", {"n3": n3.port})
    os.kill(n3.pid, signal.SIGSTOP)             # takes connections (the kernel's backlog), never answers
    try:
        r, took = diagnose(admin_env(tmp_path, cluster, sshd, ssh_options=sshd.options(conf)), job,
                           "--timeout", "6", "--no-stacks")
    finally:
        os.kill(n3.pid, signal.SIGCONT)
        n3.stop()
    assert took < 6 + 2, took
    assert r.returncode == 1, r.stdout + r.stderr
    summary = r.stdout.splitlines()[1]
    assert "n3 did not answer" in summary, r.stdout
    assert summary.strip().startswith("rank 0 on n1 is in write() on "), r.stdout
    assert "rank 1 on n2 " in summary


HANG_ON_N3 = """#!/bin/sh
# The collector of node n3 hangs (what a collector stuck for good looks like from here).
case " $* " in *" n3 "*) echo $$ >> {pids}; exec /bin/sleep 600;; esac
exec "$@"
"""


def test_a_node_whose_collector_hangs_is_reported_and_the_command_ends_on_time(clean_cluster, owner, shared_fs,
                                                                              sshd, tmp_path):
    cluster = clean_cluster
    job, barrier = mpi_job(owner, cluster, shared_fs)
    pids = tmp_path / "hung-collectors"
    wrapper = tmp_path / "hang-on-n3"
    wrapper.write_text(HANG_ON_N3.format(pids=pids))
    wrapper.chmod(0o755)
    from slurm_hooks.views.diagnose import default_collector
    try:
        r, took = diagnose(admin_env(tmp_path, cluster, sshd, collector=[str(wrapper), *default_collector()]),
                           job, "--timeout", "5", "--no-stacks")
    finally:
        for pid in map(int, pids.read_text().split()) if pids.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert took < 5 + 2, took
    assert r.returncode == 1
    assert "n3 did not answer within 5 s" in r.stdout, r.stdout
    # n3's rank is not counted (nothing came back from it); rank 0 waits for "go" in its
    # sleep, rank 1 spins in the allreduce: two groups, rank 0's first, n3 named last.
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"job {job}: 3 nodes (2 answered), 2 ranks, "), lines[0]
    assert lines[1].startswith("  rank 0 on n1 is waiting in clock_nanosleep() "), lines[1]
    # On a loaded machine the fan-out itself may reach the deadline first: it says so after.
    assert re.search(r"; n3 did not answer within 5 s( \(the fan-out was stopped at the deadline\))?$", lines[1]), lines[1]
    assert " 1. rank 0 on n1 (1 of 2): waiting in clock_nanosleep() " in r.stdout, r.stdout


def test_without_root_ssh_the_report_says_so_and_how_to_enable_it(clean_cluster, owner, shared_fs, sshd, tmp_path):
    cluster = clean_cluster
    job, _ = mpi_job(owner, cluster, shared_fs)
    r, _ = diagnose(admin_env(tmp_path, cluster, sshd, ssh_user="nobody"), job, "--timeout", "8")
    assert r.returncode == 1
    assert "n1 gave no report: ssh as nobody failed: nobody@127.0.0.1: Permission denied (publickey)" in r.stdout
    assert "allow root ssh from here to the nodes: a key or host-based authentication" in r.stdout
    assert "n1 refused root's keys for user nobody" in r.stdout and "ssh-copy-id nobody@n1" in r.stdout, r.stdout
    # Root's ssh has never met the nodes: which file, and ssh-keyscan.
    unknown = [*sshd.options(), "-o", "UserKnownHostsFile=/dev/null"]
    r, _ = diagnose(admin_env(tmp_path, cluster, sshd, ssh_options=unknown), job, "--timeout", "8")
    assert r.returncode == 1
    assert "Host key verification failed" in r.stdout, r.stdout
    assert "root's ssh does not know n1's host key" in r.stdout and "ssh-keyscan -H n1 >> /root/.ssh/known_hosts" \
        in r.stdout, r.stdout
    # srun as root on another user's job: Slurm's refusal, and what to do instead.
    r, _ = diagnose(admin_env(tmp_path, cluster, sshd, fanout="srun"), job, "--timeout", "8")
    assert r.returncode == 1
    assert "Access/permission denied" in r.stdout and "as root, reach the nodes with ClusterShell" in r.stdout, r.stdout


# --- the health check's capture before its requeue --------------------------------------------
def healthcheck_on(tmp_path, cluster, diag: dict) -> None:
    wrapper = write_node_configs(tmp_path, cluster, {}, {
        "filesystems": [{"path": str(tmp_path)}],
        "stuck_tasks": {"grace": 2, "sample_window": 0.5},
        "diagnose": {"on_requeue_timeout": 10, **diag}})
    cluster.reconfigure(f"HealthCheckProgram={wrapper}\nHealthCheckInterval=3\nHealthCheckNodeState=ANY\n")


def requeue_record(tmp_path, cluster, job: int) -> tuple[str, dict]:
    cluster.wait_for(lambda: cluster.show_job(job).get("Restarts") == "1", 40, what="job requeued")
    comment = cluster.show_job(job)["AdminComment"]
    # (Not a run that held the requeue: the mount's scope not known yet.)
    sick = cluster.wait_for(lambda: next((r for r in journal(tmp_path, "n1") if r["status"] == "unhealthy"
                                          and any(a["kind"] == "requeue" and a["outcome"] != "held"
                                                  for a in r["actions"])), None),
                            15, what="the journal line of the run that requeued")
    return comment, next(a for a in sick["actions"] if a["kind"] == "requeue" and a["outcome"] != "held")


def test_the_health_check_records_the_job_wide_picture_of_a_users_job(clean_cluster, owner, shared_fs, sshd,
                                                                      tmp_path):
    cluster = clean_cluster
    job, barrier = mpi_job(owner, cluster, shared_fs, "--requeue")
    stall(shared_fs, barrier)
    healthcheck_on(tmp_path, cluster, {"ssh_options": sshd.options()})
    comment, requeue = requeue_record(tmp_path, cluster, job)
    line = (f"; job-wide: rank 0 on n1 is in write() on {shared_fs.path}/train.log (fuse.fusefs, D for ")
    assert re.search(re.escape(line) + r"\d+s\) from write_log \(ranks.py\); ranks 1-2 on n2,n3 busy in "
                     r"sync_gradients \(ranks.py\)", comment), comment
    assert requeue["outcome"] == "done" and line.lstrip("; ") in requeue["text"], requeue


def test_where_the_node_cannot_reach_the_others_the_requeue_says_why(clean_cluster, owner, shared_fs, sshd,
                                                                     tmp_path):
    cluster = clean_cluster
    job, barrier = mpi_job(owner, cluster, shared_fs, "--requeue")
    stall(shared_fs, barrier)
    healthcheck_on(tmp_path, cluster, {"ssh_options": sshd.options(), "ssh_user": "nobody"})
    comment, requeue = requeue_record(tmp_path, cluster, job)
    # Which nodes were not reached, not ssh's own words: the job's record is its user's
    # to read, the transport's trouble the admin's (`diagnose` says why).
    why = f"; job-wide picture unavailable: 3 node(s) not reached (n1, n2, n3); `slurm-hooks diagnose {job}` says why"
    assert why in comment and "ssh" not in comment, comment
    assert requeue["outcome"] == "done" and why.lstrip("; ") in requeue["text"], requeue
