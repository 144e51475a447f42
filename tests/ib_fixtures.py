"""A sysfs tree of RDMA ports laid out as the kernel lays it out, under a root the
fabric check is pointed at (`host.sysfs`). No InfiniBand HCA exists where the suite
runs, so this is the boundary faked; everything above it is the real check.

Where each file and its format come from:
- class/infiniband/DEV/ports/N/{state,phys_state,rate,link_layer}: Linux
  Documentation/ABI/stable/sysfs-class-infiniband ("What: /sys/class/infiniband/
  <device>/ports/<port-num>/..."), printed by drivers/infiniband/core/sysfs.c:
  state_show "%d: %s\\n" (NOP, DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER),
  phys_state_show "5: LinkUp\\n" (1 Sleep, 2 Polling, 3 Disabled,
  4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test),
  rate_show "%d%s Gb/sec (%dX%s)\\n" ("400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)"),
  link_layer_show "InfiniBand" | "Ethernet".
- ports/N/counters/NAME: the same ABI file ("counters/"), show_pma_counter "%u\\n"
  for each PORT_PMA_ATTR (symbol_error, link_downed, port_rcv_errors, ...).
- ports/N/gid_attrs/ndevs/0: the same ABI file, print_ndev "%s\\n" (the netdev of a
  RoCE GID).
- class/infiniband/DEV is a symlink into devices/ in the kernel's tree; here a plain
  directory does (the check only reads below it).
- class/net/NETDEV: a symlink to the netdev's directory in a real sysfs (the RoCE test
  points it at a veth the test made: Documentation/ABI/testing/sysfs-class-net).
"""
from __future__ import annotations

from pathlib import Path

STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
        6: "LinkErrorRecovery", 7: "Phy Test"}
SPEEDS = {2.5: "SDR", 5: "DDR", 10: "QDR", 14: "FDR", 25: "EDR", 50: "HDR", 100: "NDR", 200: "XDR"}
COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
            "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
            "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
            "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_data", "port_rcv_data",
            "port_xmit_packets", "port_rcv_packets")


def rate_text(gbps: float, width: int = 4) -> str:
    per_lane = gbps / width
    speed = SPEEDS[per_lane]
    whole = int(gbps)
    return f"{whole}{'.5' if gbps != whole else ''} Gb/sec ({width}X {speed})"


class Port:
    def __init__(self, root: Path, device: str, port: int = 1):
        self.dir = root / "class" / "infiniband" / device / "ports" / str(port)
        (self.dir / "counters").mkdir(parents=True, exist_ok=True)
        self.key = f"{device}/{port}"

    def set(self, state: int = 4, phys: int = 5, gbps: float = 400, link_layer: str = "InfiniBand") -> Port:
        (self.dir / "state").write_text(f"{state}: {STATES[state]}\n")
        (self.dir / "phys_state").write_text(f"{phys}: {PHYS[phys]}\n")
        (self.dir / "rate").write_text(rate_text(gbps) + "\n")
        (self.dir / "link_layer").write_text(link_layer + "\n")
        for name in COUNTERS:
            p = self.dir / "counters" / name
            if not p.exists():
                p.write_text("0\n")
        return self

    def counter(self, name: str, value: int | None = None) -> int:
        p = self.dir / "counters" / name
        if value is not None:
            p.write_text(f"{value}\n")
        return int(p.read_text())

    def bump(self, name: str, by: int = 1) -> int:
        return self.counter(name, self.counter(name) + by)

    def roce(self, netdev: str) -> Port:
        (self.dir / "gid_attrs" / "ndevs").mkdir(parents=True, exist_ok=True)
        (self.dir / "gid_attrs" / "ndevs" / "0").write_text(netdev + "\n")
        return self


def hca(root: Path, n: int = 1, gbps: float = 400) -> list[Port]:
    """n single-port mlx5 HCAs, all ACTIVE/LinkUp at `gbps`."""
    return [Port(root, f"mlx5_{i}").set(gbps=gbps) for i in range(n)]
