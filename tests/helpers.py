"""Paths and small utilities shared by the tests."""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SLURM_HOOKS = BIN / "slurm-hooks"


def poll(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Call predicate until it returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()[0].decode()


def write_node_configs(root: Path, cluster, per_node: dict, common: dict | None = None,
                       hook: str = "healthcheck") -> Path:
    """One slurm-hooks config per node of the test cluster, and the wrapper slurmd runs.

    The three slurmd share this host, so each node gets its own config file, chosen by
    $SLURMD_NODENAME in a two-line wrapper (the way a site points HealthCheckProgram at
    a config outside /etc). The wrapper sets nothing else: slurm-hooks must work with
    HealthCheckProgram's bare environment (no PATH, no SLURM_CONF).
    """
    import yaml
    conf_dir = root / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    for node in cluster.nodes:
        doc = {"state_dir": str(root / "state"), "journal": str(root / f"journal-{node}.jsonl"),
               "slurm": cluster.hooks_slurm(timeout=10)}
        doc.update(common or {})
        doc.update(per_node.get(node, {}))
        (conf_dir / f"{node}.yaml").write_text(yaml.safe_dump(doc))
    return hook_wrapper(root, hook)


def hook_wrapper(root: Path, hook: str) -> Path:
    """The program slurmd runs for `hook` (healthcheck, prolog, epilog) on each node."""
    wrapper = root / hook
    wrapper.write_text("#!/bin/sh\n"
                       f'SLURM_HOOKS_CONFIG="{root}/conf/$SLURMD_NODENAME.yaml" '
                       f'exec {BIN}/slurm-hooks-{hook}\n')
    wrapper.chmod(0o755)
    return wrapper


def journal(root: Path, node: str) -> list[dict]:
    """The run records of a node's journal (not the per-action lines)."""
    import json
    path = root / f"journal-{node}.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("event") == "run"]


def problems(runs: list[dict], slow_ok: list) -> list[dict]:
    """What makes these run records other than healthy: their local errors and the
    findings that are not OK, but for a `slow` probe of one of the paths in slow_ok (a
    healthy node's scratch can take longer than a test's short warn_after when the
    other test session loads the disk during its fsync)."""
    paths = {str(p) for p in slow_ok}

    def excused(f: dict) -> bool:
        return f["check"] == "filesystem" and f["status"] == "slow" and f["target"] in paths
    return [e for r in runs for e in r["local_errors"]] + \
        [f for r in runs for c in r["checks"] for f in c["findings"] if f["severity"] != "ok" and not excused(f)]


# --- cluster tests: a task stuck on a hung mount, a health check run by hand ------------
# argv: the hung mount, a directory where it says it started.
STUCK_WRITER = """
import os, sys
with open(os.path.join(sys.argv[2], "started.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(sys.argv[2], "started.tmp"), os.path.join(sys.argv[2], "started"))
open(os.path.join(sys.argv[1], "main_log.txt"), "a")      # never returns
"""


def _in_d_state(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "D"
    except (OSError, IndexError):
        return False


def stuck_writer_job(cluster, root: Path, hung: str, node: str = "n1") -> str:
    """A requeueable batch job on NODE whose one task is stuck in open() on `hung`;
    returns once the task is in D (on a loaded host it may take a moment to get there),
    with the job id."""
    (root / "writer.py").write_text(STUCK_WRITER)
    job = cluster.sbatch("-N1", "-w", node, "--requeue", "-o", "/dev/null", script=(
        f"#!/bin/sh\nsrun {sys.executable} {root}/writer.py {hung} {root}\n"))
    cluster.wait_for(lambda: (root / "started").exists(), 30, what="the job's task started")
    pid = int((root / "started").read_text())
    cluster.wait_for(lambda: _in_d_state(pid), 30, what=f"the job's task (pid {pid}) in D")
    return job


# A job's ranks (argv: ..., a barrier directory last): each says it started; rank ODD
# waits forever on a lock nobody releases (no D state), the others sleep in a barrier.
LOCK_RANKS = """
import os, sys, threading, time
barrier = sys.argv[-1]
rank = int(os.environ["SLURM_PROCID"])
lock = threading.Lock()
lock.acquire()

def take_checkpoint_lock():
    lock.acquire()

def wait_in_barrier():
    while True:
        time.sleep(SLEEP)

open(os.path.join(barrier, f"started.{rank}"), "w").close()
if rank == ODD:
    take_checkpoint_lock()
else:
    wait_in_barrier()
"""


def lock_ranks(odd: int, sleep: float = 0.5) -> str:
    """LOCK_RANKS with its odd rank and the barrier's poll interval."""
    return LOCK_RANKS.replace("ODD", str(odd)).replace("SLEEP", repr(sleep))


def write_config(path: Path, root: Path, **doc) -> Path:
    """A slurm-hooks configuration file at `path`: state and journal under `root`
    (journal.jsonl), then `doc`'s settings over them."""
    import yaml
    path.write_text(yaml.safe_dump({"state_dir": str(root / "state"), "journal": str(root / "journal.jsonl"),
                                    **doc}))
    return path


def run_record(config, *args: str, env: dict | None = None, timeout: float = 60, check: str | None = None) -> dict:
    """`slurm-hooks [-c CONFIG] ARGS --json`, which must exit 0 (healthy) or 1 (not):
    its record, with `rc`, `elapsed` (seconds) and `findings` (of every check kept in
    `checks`: only `check`'s when given) added. `env` is the whole environment."""
    import json
    import subprocess
    t0 = time.monotonic()
    r = subprocess.run([str(SLURM_HOOKS), *(["-c", str(config)] if config is not None else []), *args, "--json"],
                       capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode in (0, 1), (args, r.stdout + r.stderr)
    rec = json.loads(r.stdout)
    rec["rc"], rec["elapsed"] = r.returncode, time.monotonic() - t0
    if check is not None:
        rec["checks"] = [c for c in rec["checks"] if c["name"] == check]
    rec["findings"] = [f for c in rec["checks"] for f in c["findings"]]
    return rec


def manual_healthcheck(cluster, root: Path, node: str, timed: bool = False, **cfg):
    """`slurm-hooks healthcheck --json` as NODE of the test cluster, by hand: its record
    (and how long it took, when `timed`)."""
    doc = {"journal": str(root / f"journal-{node}.jsonl"), "slurm": cluster.hooks_slurm(timeout=10), **cfg}
    conf = write_config(root / f"{node}-manual.yaml", root, **doc)
    rec = run_record(conf, "healthcheck", timeout=120, env={"SLURMD_NODENAME": node})
    return (rec, rec["elapsed"]) if timed else rec


# --- GPU tests: NVML scenarios for tests/fake_nvml and the kernel log ------------------
def gpu(i, **kw):
    g = {"pci": f"00000000:{0x3b + i:02X}:00.0", "uuid": f"GPU-{i:08x}", "name": "NVIDIA H100 80GB HBM3",
         "temperature": 31, "utilization": 0, "power_mw": 70000}
    g.update(kw)
    return g


class KernelLog:
    """A file of /dev/kmsg records (the `kernel_log` setting) that tests append to.

    Tests never write into the host's real kernel log: userspace writes land in the user
    facility, which slurm-hooks rightly ignores, and they would stay in the buffer until
    reboot. Records written here are of the kernel facility, as the driver's would be.
    """

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        self.seq = 0

    def write(self, *lines, prio: int = 4, facility: int = 0):
        with open(self.path, "a") as f:
            for line in lines:
                self.seq += 1
                usec = int(time.monotonic() * 1e6)
                f.write(f"{facility << 3 | prio},{self.seq},{usec},-;{line}\n")

    def __fspath__(self):
        return str(self.path)

    __str__ = __fspath__


def sdiag_counts(cluster) -> dict[str, int]:
    """slurmctld's count of each RPC type since the last `sdiag -r` ("REQUEST_NODE_INFO
    ( 2007) count:12 ..."), sdiag's own request left out."""
    import re
    out = cluster.run("sdiag").stdout
    part = out.split("Remote Procedure Call statistics by message type", 1)[-1]
    part = part.split("Remote Procedure Call statistics by user", 1)[0]
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", part, re.M)}
    counts.pop("REQUEST_STATS_INFO", None)
    return counts


# What a health check may ask slurmctld about nodes: the list, one node, the partitions
# (`scontrol show node` and `sinfo` load them too), and a drain or undrain.
NODE_RPCS = ("REQUEST_NODE_INFO", "REQUEST_NODE_INFO_SINGLE", "REQUEST_PARTITION_INFO", "REQUEST_UPDATE_NODE")


def node_rpcs_spent(before: dict, after: dict) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in NODE_RPCS if after.get(k, 0) - before.get(k, 0)}


def ours(reason: str, words: str = "") -> bool:
    """Is `reason` (as Slurm shows it, stamp or not) one slurm-hooks set, in the current
    form (its words, then the mark), and do its words start with `words`?"""
    from slurm_hooks.core.reason import MARK, SLURM_NOTES, words_of
    from slurm_hooks.slurm.api import strip_reason_stamp
    plain = strip_reason_stamp(reason).rstrip()
    for note in SLURM_NOTES:
        plain = plain.replace(note, "")
    return plain.endswith(" " + MARK) and words_of(plain, "").startswith(words)


def healthchecks_at_once(nodes, conf_dir: Path, timeout: float = 120) -> None:
    """One `slurm-hooks-healthcheck` per node, all started before any is waited for (as
    slurmd's interval starts them across a cluster), each with its node's configuration
    `conf_dir/NODE.yaml` and only SLURMD_NODENAME beside it."""
    import subprocess
    procs = [subprocess.Popen([str(BIN / "slurm-hooks-healthcheck")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              env={"SLURMD_NODENAME": n, "SLURM_HOOKS_CONFIG": str(conf_dir / f"{n}.yaml")})
             for n in nodes]
    for p in procs:
        p.wait(timeout=timeout)


def stuck_for_good(path, tries: int = 5):
    """A process blocked on a 'stuck' FUSE mount (tests/fusefs.py), SIGKILLed and still
    in D: what a requeue leaves. A kill that lands before the server has read the
    request frees the caller (the kernel drops an unsent request): that try is
    repeated, so a loaded machine cannot turn it into a killable hang."""
    import os
    import signal
    import subprocess
    for _ in range(tries):
        p = subprocess.Popen([sys.executable, "-c", f"open({str(path)!r} + '/x', 'rb')"])
        poll(lambda: proc_state(p.pid) == "D", 10, what="the task in D")
        start = int(open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[19])
        time.sleep(0.2)          # the server reads the request: from then on it is unkillable
        os.kill(p.pid, signal.SIGKILL)
        try:
            p.wait(0.5)
        except subprocess.TimeoutExpired:
            if proc_state(p.pid) == "D":
                return p, start
    raise AssertionError(f"no unkillable task on {path} in {tries} tries")


def still_in_d(monkeypatch, pid: int) -> None:
    """The kernel's word on `pid` (this process) as a task still stuck would give it:
    its status says D."""
    from slurm_hooks.host import procfs
    real = procfs.read_small

    def read_small(path, *a, **kw):
        data = real(path, *a, **kw)
        if path == f"/proc/{pid}/status" and data:
            data = re.sub(rb"State:\t\S+ \([^)]*\)", b"State:\tD (disk sleep)", data)
        return data
    monkeypatch.setattr(procfs, "read_small", read_small)
