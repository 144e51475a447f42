"""A real OpenSSH server on loopback for the test session: root's way onto the "nodes".

`slurm-hooks diagnose` reaches the nodes of another user's job as root over ssh
(ClusterShell), as a site allows root ssh between its nodes. Every test node (n1..n3,
s1..s48) is 127.0.0.1 here, so one Debian `sshd` (openssh-server) serves them all on a
free port, with:

- a host key and a client key made for the session (ssh-keygen), root's public key in
  an authorized_keys file of the session (never /root/.ssh);
- a test `ssh_config` that maps every node name to 127.0.0.1 and that port, checks the
  session's host key (one alias for all the names), and uses the session's client key:
  slurm-hooks is pointed at it with `diagnose.ssh_options: [-F, PATH]`.

`extra()` starts another sshd on its own port (a node whose sshd a test stops with
SIGSTOP), and `config_with()` writes an ssh_config that sends chosen nodes there.
Everything is stopped with the session: the listeners and every session they forked.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterable

import psutil

SSHD = "/usr/sbin/sshd"
SSH = "/usr/bin/ssh"
KEYGEN = "/usr/bin/ssh-keygen"
ALIAS = "shk-test-node"           # the one name the session's host key is known under


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SshServer:
    """One sshd process listening on 127.0.0.1:port."""

    def __init__(self, base: Path, name: str, port: int, host_key: Path, authorized: Path):
        self.base, self.name, self.port = base, name, port
        self.config = base / f"sshd_config.{name}"
        self.log = base / f"sshd.{name}.log"
        self.config.write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", "PidFile none",
            f"AuthorizedKeysFile {authorized}", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
            # The session's files live under pytest's /tmp tree, which StrictModes refuses.
            "StrictModes no",
            # 32 nodes are 32 connections to this one server at once: sshd's default
            # (10:30:100) would drop some of them before they authenticate.
            "MaxStartups 512", "MaxSessions 64", "PermitUserEnvironment no",
            "PrintMotd no", "LogLevel ERROR",
            # bash sources ~/.bashrc for a command run by sshd unless SHLVL says it is
            # nested: this host's root ~/.bashrc runs `pyenv init` (~100 ms of CPU per
            # session), which 32 simultaneous "nodes" on one host would all pay here.
            "SetEnv SHLVL=1", ""]))
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> "SshServer":
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)     # privilege separation
        out = open(self.log, "wb")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=out, start_new_session=True)
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd {self.name} exited: {self.log.read_text()}")
            if self._banner():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"sshd {self.name} did not answer on port {self.port}: {self.log.read_text()}")

    def _banner(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                return s.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            sessions = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            sessions = []
        for p in [psutil.Process(self.proc.pid), *sessions] if self.proc.poll() is None else sessions:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGCONT)
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.proc = None


class Sshd:
    """The session's sshd and its ssh_config for node names `names`."""

    def __init__(self, base: Path, names: Iterable[str]):
        self.base = base
        self.names = list(names)
        self.host_key = base / "host_ed25519"
        self.client_key = base / "root_ed25519"
        self.authorized = base / "authorized_keys"
        self.known_hosts = base / "known_hosts"
        self.ssh_config = base / "ssh_config"
        self.servers: list[SshServer] = []
        self.main: SshServer | None = None

    def start(self) -> "Sshd":
        self.base.mkdir(parents=True, exist_ok=True)
        for key in (self.host_key, self.client_key):
            subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "slurm-hooks-tests", "-f", str(key)],
                           check=True, capture_output=True, timeout=30)
        self.authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        host_pub = Path(f"{self.host_key}.pub").read_text().split()
        self.known_hosts.write_text(f"{ALIAS} {host_pub[0]} {host_pub[1]}\n")
        self.main = self._server("main")
        self.write_config(self.ssh_config, {})
        return self

    def _server(self, name: str) -> SshServer:
        s = SshServer(self.base, name, free_port(), self.host_key, self.authorized).start()
        self.servers.append(s)
        return s

    def extra(self, name: str) -> SshServer:
        """Another sshd, for nodes a test wants to treat apart (stop, hang)."""
        return self._server(name)

    def write_config(self, path: Path, ports: dict[str, int]) -> Path:
        """An ssh_config: `ports` sends those nodes to their own server, every other
        name to the session's main sshd."""
        assert self.main is not None
        common = ["  HostName 127.0.0.1", "  User root", f"  IdentityFile {self.client_key}",
                  "  IdentitiesOnly yes", f"  UserKnownHostsFile {self.known_hosts}",
                  "  GlobalKnownHostsFile /dev/null", f"  HostKeyAlias {ALIAS}",
                  "  StrictHostKeyChecking yes", "  CheckHostIP no", "  LogLevel ERROR",
                  # Every "node" is this one host, so 32 nodes' key exchanges share its CPUs:
                  # OpenSSH 9's default hybrid post-quantum exchange (sntrup761x25519) costs
                  # about 7 times X25519's CPU here, which the scale test would measure.
                  "  KexAlgorithms curve25519-sha256", "  Ciphers aes128-gcm@openssh.com"]
        lines = []
        for node, port in ports.items():
            lines += [f"Host {node}", f"  Port {port}", *common]
        lines += [f"Host {' '.join(self.names)}", f"  Port {self.main.port}", *common, ""]
        path.write_text("\n".join(lines))
        return path

    def config_with(self, name: str, ports: dict[str, int]) -> Path:
        return self.write_config(self.base / f"ssh_config.{name}", ports)

    def options(self, config: Path | None = None) -> list[str]:
        """diagnose.ssh_options for this session."""
        return ["-F", str(config or self.ssh_config)]

    def ssh(self, node: str, *command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run([SSH, "-F", str(self.ssh_config), "-oBatchMode=yes", node, *command],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        self.servers = []
