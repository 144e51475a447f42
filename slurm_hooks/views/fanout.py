"""Root's fan-out to the nodes of a job: ClusterShell over ssh, outside the job.

Slurm creates a step in a job only for the job's owner (or SlurmUser): `srun --jobid=J
--overlap` from root on a user's job is refused (ESLURM_ACCESS_DENIED), and running the
collector as the owner would hand it to them (same uid: ptrace, its stdout). So root's
`diagnose` reaches the nodes the way admins do by hand, with ClusterShell (`clush`'s
library) over ssh as root: the collector runs under the node's sshd, outside the job's
cgroup and session, as root, with an environment and a command line of ours alone.

The engine runs in a driver process of our own (`python -I`, this installation's
package by its absolute path), started through runner.run_command with the deadline:
ClusterShell waits for the ssh clients it kills (Popen.wait), which is fine for the
driver and never for this process. The driver prints one JSON line per node as soon as
that node's ssh ends, so what the nodes that answered said is kept when the deadline
kills the driver and the ssh clients with it (one process group). Each line is keyed by
the node ClusterShell connected to; the collector's document never names its node.
"""
from __future__ import annotations

import json
import os
import shlex
import sys

from .. import library_dir
from ..core.records import dataclass, field

SSH = "/usr/bin/ssh"
DRIVER_MARGIN = 0.5         # seconds the driver gets to start and to print what it has
SSH_MARGIN = 2.0            # seconds the collector leaves ssh to connect and to return
REMOTE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
ENV = "/usr/bin/env"
NODE = "{node}"             # the token of the remote command replaced by each node's name

_BOOTSTRAP = ("import sys; sys.path.insert(0, {lib!r}); from slurm_hooks.views.fanout import driver; "
              "sys.exit(driver(sys.argv[1]))")


@dataclass
class SshSettings:
    """How the driver reaches the nodes (diagnose.ssh_*, diagnose.fanout_width)."""
    user: str = "root"
    options: list[str] = field(default_factory=list)
    width: int = 64
    connect_timeout: float = 5.0


# NodeAnswer.code: how the node's ssh ended, read from ssh's own words here alone.
ANSWERED = "answered"           # ssh connected (the command's status is rc)
SSH_FAILED = "ssh_failed"       # ssh itself failed (its status 255)
SSH_TIMED_OUT = "ssh_timed_out" # ssh's connection timed out: a hung sshd, or a node gone
SSH_STATUS = 255


@dataclass
class NodeAnswer:
    """What ssh brought back from one node, keyed by the node ClusterShell reached."""
    node: str
    rc: int | None = None           # None: no exit status (killed at its deadline)
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""

    @property
    def code(self) -> str:
        if self.rc != SSH_STATUS:
            return ANSWERED
        said = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        return SSH_TIMED_OUT if said and "timed out" in said[-1].lower() else SSH_FAILED


def clustershell_missing() -> str | None:
    """None when this interpreter can import ClusterShell, else how to install it."""
    import importlib.util
    try:
        found = importlib.util.find_spec("ClusterShell") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return ("ClusterShell is not installed for " + sys.executable + " (Debian/Ubuntu: apt-get install "
            "python3-clustershell; EL: dnf install python3-clustershell; this installation's own "
            f"environment: {pip_of_this_installation()} install 'ClusterShell>=1.9')")


def pip_of_this_installation() -> str:
    """The pip that installs into the environment slurm-hooks runs in, not whichever `pip`
    is first on PATH. packaging/install.sh keeps each version's environment in
    PREFIX/envs/ and links the one in use as PREFIX/current: that name, which outlives
    the next upgrade, where it is this environment."""
    pip = os.path.join(os.path.dirname(sys.executable), "pip")
    envs = os.path.dirname(sys.prefix)
    if os.path.basename(envs) == "envs":
        current = os.path.join(os.path.dirname(envs), "current")
        try:
            if os.path.realpath(current) == os.path.realpath(sys.prefix):
                pip = os.path.join(current, "bin", "pip")
        except OSError:
            pass
    return pip if os.path.exists(pip) else f"{sys.executable} -m pip"


def ssh_advice(node: str, user: str, said: str) -> str:
    """What to do about an ssh that failed on its way in, from ssh's own words: the host
    key (which file, `ssh-keyscan`) or the authentication (which user, which key)."""
    import pwd
    try:
        me = pwd.getpwuid(os.geteuid())
        caller, home = me.pw_name, me.pw_dir
    except KeyError:
        caller, home = str(os.geteuid()), "~"
    low = said.lower()
    if "host key verification failed" in low or "remote host identification has changed" in low \
            or "no matching host key" in low:
        return (f"{caller}'s ssh does not know {node}'s host key: check its fingerprint, then add it to "
                f"{home}/.ssh/known_hosts (ssh-keyscan -H {node} >> {home}/.ssh/known_hosts) or to the "
                "site-wide /etc/ssh/ssh_known_hosts; a changed key: ssh-keygen -R " + node)
    if "permission denied" in low or "too many authentication failures" in low:
        return (f"{node} refused {caller}'s keys for user {user}: {caller} needs a key ({home}/.ssh/id_ed25519, "
                f"ssh-keygen -t ed25519) whose public half is in ~{user}/.ssh/authorized_keys on every node "
                f"(ssh-copy-id {user}@{node}), or host-based authentication; another user or key: "
                "diagnose.ssh_user, diagnose.ssh_options (-i KEY)")
    return ""


def remote_command(collector: list[str], job: str, sample: float, deadline: float, stacks: bool,
                   config: str | None) -> list[str]:
    """The argv each node runs, with NODE for its name: an empty environment but ours
    (`env -i`: sshd's session variables and whatever the node's root shell exports stay
    out), in `/` (never the caller's directory, a user's or a hung one)."""
    env = [ENV, "-i", "-C", "/", f"PATH={REMOTE_PATH}", "LANG=C.UTF-8"]
    if config:
        # root's own configuration file, the same path on every node (a site ships one).
        env.append(f"SLURM_HOOKS_CONFIG={config}")
    return [*env, *collector, "job-report", job, "--node", NODE, "--json", f"--sample={sample:g}",
            f"--deadline={deadline:g}", *([] if stacks else ["--no-stacks"])]


def driver_argv(nodes: list[str], command: list[str], ssh: SshSettings, timeout: float) -> list[str]:
    spec = {"nodes": nodes, "command": command, "user": ssh.user, "options": ssh.options,
            "width": ssh.width, "connect_timeout": ssh.connect_timeout, "timeout": timeout, "ssh": SSH}
    return [sys.executable, "-I", "-c", _BOOTSTRAP.format(lib=library_dir()), json.dumps(spec)]


def driver_env() -> dict[str, str]:
    """The driver's environment: a fixed PATH, and root's ssh agent when it has one."""
    env = {"PATH": REMOTE_PATH, "LANG": "C.UTF-8"}
    if os.environ.get("SSH_AUTH_SOCK"):
        env["SSH_AUTH_SOCK"] = os.environ["SSH_AUTH_SOCK"]
    return env


def run(nodes: list[str], command: list[str], ssh: SshSettings, timeout: float) -> tuple[dict[str, NodeAnswer], str]:
    """{node: answer} for the nodes whose ssh ended within `timeout`, and what the
    driver said on its way out (an import error, its kill at the deadline)."""
    from ..host.runner import run_command
    per_node = max(0.5, timeout - DRIVER_MARGIN)
    r = run_command(driver_argv(nodes, command, ssh, per_node), timeout, driver_env())
    answers = parse_answers(r.stdout, nodes)
    said = ""
    if r.timed_out:
        said = "the fan-out was stopped at the deadline"
    elif r.rc != 0:
        said = (r.stderr.strip().splitlines() or [f"exited with status {r.rc}"])[-1][:300]
    return answers, said


def parse_answers(stdout: str, nodes: list[str]) -> dict[str, NodeAnswer]:
    """The driver's lines, one per node it was asked about (anything else is dropped)."""
    wanted, out = set(nodes), {}
    for line in stdout.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict) or doc.get("node") not in wanted or doc["node"] in out:
            continue
        rc = doc.get("rc")
        out[doc["node"]] = NodeAnswer(node=doc["node"], rc=rc if isinstance(rc, int) else None,
                                      timed_out=bool(doc.get("timed_out")),
                                      stdout=str(doc.get("stdout", "")), stderr=str(doc.get("stderr", "")))
    return out


# --- the driver: runs in its own process (python -I), never in the caller's --------------
def driver(spec_json: str) -> int:
    """Run the command on every node through ClusterShell; one JSON line per node on
    stdout as soon as its ssh ends (exit status, output, or that it timed out)."""
    from ClusterShell.Event import EventHandler
    from ClusterShell.Task import task_self
    spec = json.loads(spec_json)
    task = task_self()
    task.set_info("fanout", int(spec["width"]))
    task.set_info("ssh_path", spec["ssh"])
    task.set_info("ssh_user", spec["user"])
    task.set_info("ssh_options", shlex.join(spec["options"]))
    task.set_info("connect_timeout", max(1, int(min(spec["connect_timeout"], spec["timeout"]))))

    # One worker per node (the node's name is in its own command line, --node), each
    # answer keyed by the host name that worker's ssh connected to.
    reached: dict[int, str] = {}

    class Answer(EventHandler):
        def ev_close(self, worker, timedout):
            _print_answer(worker, reached[id(worker)], timedout)

    handler = Answer()
    for node in spec["nodes"]:
        cmd = shlex.join(node if word == NODE else word for word in spec["command"])
        worker = task.shell(cmd, nodes=node, handler=handler, timeout=spec["timeout"], stderr=True, stdin=False)
        reached[id(worker)] = node
    task.run()
    return 0


def _print_answer(worker, node: str, timedout: bool) -> None:
    try:
        rc = worker.node_retcode(node)
    except KeyError:
        rc = None
    out = bytes(worker.node_buffer(node) or b"").decode("utf-8", "replace")
    err = bytes(worker.node_error_buffer(node) or b"").decode("utf-8", "replace")
    line = json.dumps({"node": node, "rc": rc, "timed_out": bool(timedout), "stdout": out, "stderr": err[-2000:]},
                      ensure_ascii=True)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
