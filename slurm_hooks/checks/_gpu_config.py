"""The GPU check's settings (its section `gpu`, declared in gpu.py's SECTIONS).

Apart from gpu.py only because gpu.py imports its helpers (_gpu_*.py) and they take
these settings: here, neither imports the other.
"""
from __future__ import annotations

from ..core.config import setting, switch
from ..core.records import dataclass


@dataclass
class GpuIdleConfig:
    enabled: str = switch("Report a GPU that idles while the other GPUs of its job are busy. "
                          "auto is true.")
    window: float = setting(900.0, kind="seconds",
                            doc="How long a GPU must idle while its job's other GPUs are busy, "
                            "without a break, before it is a warning. Alone it never drains: "
                            "healthy jobs look like this for minutes (a checkpoint written by one "
                            "rank, RL trainers waiting for rollouts, a slow data loader). Tied to a "
                            "process of the job stuck in D it is one diagnosis with that task, at once.")
    busy_utilization: float = setting(50.0, kind="number", min=0, max=100,
                                      doc="Utilization (%) at which a GPU counts as busy.")
    idle_utilization: float = setting(5.0, kind="number", min=0, max=100,
                                      doc="Utilization (%) at or below which a GPU counts as idle.")
    idle_power_ratio: float = setting(0.5, kind="number", min=0, max=1,
                                      doc="An idle GPU must also draw at most this share of the power "
                                      "of its job's busiest GPU.")


@dataclass
class GpuConfig:
    enabled: str = switch(doc="auto: check GPUs when an NVIDIA driver is present, else not "
                           "applicable. true: this node must have working GPUs (no driver is a "
                           "failure). false: never.")
    count: int | None = setting(None, kind="int", min=0, max=1024, nullable=True,
                                doc="GPUs this node must show. null: the node's Gres=gpu:N in Slurm "
                                "(asked once an hour), else not checked.")
    timeout: float = setting(10.0, kind="seconds",
                             doc="Deadline of the NVML queries, all GPUs together. Past it the "
                             "driver is reported unresponsive, naming the call it did not answer.")
    temperature_warn: float = setting(87.0, kind="number", min=0, max=200,
                                      doc="Warn above this GPU temperature (C).")
    clock_event_warn: list = setting(["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                                      "sw_thermal_slowdown"], kind="strlist",
                                     choices=("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                                              "sw_thermal_slowdown", "sw_power_cap", "sync_boost"),
                                     doc="Clock-event (throttle) reasons that give a warning.")
    pcie_replay_warn: int = setting(100, kind="int", min=1,
                                    doc="Warn when a GPU's PCIe replay counter grows by this much "
                                    "between two runs.")
    nvlink_error_warn: int = setting(100, kind="int", min=1,
                                     doc="Warn when a GPU's NVLink CRC error counters grow by this much "
                                     "between two runs. A link down, and any growth of the replay or "
                                     "recovery counters, drains (as DCGM's NVLink health watch fails).")
    xid_actions: dict = setting({}, kind="map", key_kind="int",
                                value={"kind": "enum", "choices": ("drain", "record", "warn")},
                                doc="Override the class of an Xid: {79: drain, 13: record, 43: warn}. "
                                "Defaults: docs/gpu.md, Xid table.")
    idle: GpuIdleConfig = setting(kind="section", cls=GpuIdleConfig,
                                  doc="GPUs idle while the rest of their job is busy.")
