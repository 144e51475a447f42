"""What NVML says about every GPU. Runs only inside a hang-safe child (runner.py).

A wedged driver makes NVML calls sleep in the kernel (nvidia-smi is known to hang so),
so the check never calls NVML in its own process: it runs collect() in a child with a
deadline, and the child reports each call before making it. When the deadline fires,
the last call reported is what the driver did not answer.

pynvml comes from NVIDIA's nvidia-ml-py. Queries a GPU does not support
(NVML_ERROR_NOT_SUPPORTED and friends) are simply absent from the result: "not
supported" is not a failure. NVML_ERROR_GPU_IS_LOST and NVML_ERROR_RESET_REQUIRED on
any call mark the GPU lost or needing a reset, and end the queries for that GPU.
"""
from __future__ import annotations

# Clock-event (throttle) reason bits, stable across NVML versions.
CLOCK_EVENTS = {
    0x0000000000000001: "gpu_idle",
    0x0000000000000002: "applications_clocks_setting",
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000010: "sync_boost",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
    0x0000000000000100: "display_clock_setting",
}
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}
NVLINK_COUNTERS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
MAX_NVLINKS = 18


class _Lost(Exception):
    def __init__(self, status: str, call: str, message: str):
        super().__init__(message)
        self.status, self.call, self.message = status, call, message


def error_name(pynvml, e) -> str:
    value = getattr(e, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == value:
            return name[len("NVML_ERROR_"):]
    return str(value)


def collect(progress, processes: bool = True) -> dict:
    progress("import pynvml")
    try:
        import pynvml
    except ImportError as e:
        return {"init_error": "LIBRARY_NOT_FOUND", "message": f"pynvml (nvidia-ml-py) not importable: {e}"}
    progress("nvmlInit")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {"init_error": error_name(pynvml, e), "message": str(e)}
    try:
        return _collect(progress, pynvml, processes)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _collect(progress, pynvml, processes: bool) -> dict:
    quiet = {getattr(pynvml, n, None) for n in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND",
                                                 "NVML_ERROR_NOT_FOUND", "NVML_ERROR_NO_DATA",
                                                 "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_INVALID_ARGUMENT")}
    fatal = {getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", -1): "lost",
             getattr(pynvml, "NVML_ERROR_RESET_REQUIRED", -1): "reset_required"}
    out: dict = {"gpus": [], "errors": []}

    def call(label: str, fn_name: str, *args):
        fn = getattr(pynvml, fn_name, None)
        if fn is None:
            return None
        progress(label)
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            value = getattr(e, "value", None)
            if value in fatal:
                raise _Lost(fatal[value], fn_name, str(e)) from None
            if value not in quiet:
                out["errors"].append(f"{label}: {error_name(pynvml, e)}")
            return None

    out["driver"] = _text(call("nvmlSystemGetDriverVersion", "nvmlSystemGetDriverVersion"))
    count = call("nvmlDeviceGetCount", "nvmlDeviceGetCount") or 0
    for i in range(count):
        gpu: dict = {"index": i, "status": "ok"}
        out["gpus"].append(gpu)
        try:
            _one(pynvml, gpu, i, lambda name, fn, *a, i=i: call(f"gpu {i}: {name}", fn, *a), processes)
        except _Lost as e:
            gpu.update(status=e.status, lost_call=e.call, message=e.message)
    return out


def _one(pynvml, gpu: dict, i: int, call, processes: bool) -> None:
    h = call("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex", i)
    if h is None:
        gpu["status"] = "error"
        return
    pci = call("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo", h)
    if pci is not None:
        gpu["pci"] = _text(getattr(pci, "busId", "") or getattr(pci, "busIdLegacy", ""))
    gpu["uuid"] = _text(call("nvmlDeviceGetUUID", "nvmlDeviceGetUUID", h))
    gpu["name"] = _text(call("nvmlDeviceGetName", "nvmlDeviceGetName", h))
    gpu["temperature"] = call("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperature", h,
                              getattr(pynvml, "NVML_TEMPERATURE_GPU", 0))
    util = call("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetUtilizationRates", h)
    if util is not None:
        gpu["utilization"], gpu["memory_utilization"] = util.gpu, util.memory
    power = call("nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerUsage", h)
    gpu["power_w"] = None if power is None else power / 1000.0
    limit = call("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetEnforcedPowerLimit", h)
    gpu["power_limit_w"] = None if limit is None else limit / 1000.0
    gpu["sm_clock_mhz"] = call("nvmlDeviceGetClockInfo", "nvmlDeviceGetClockInfo", h,
                               getattr(pynvml, "NVML_CLOCK_SM", 1))
    mem = call("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo", h)
    if mem is not None:
        gpu["memory_used_mib"] = mem.used // (1 << 20)
    reasons = call("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons", h)
    if reasons is None:
        reasons = call("nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    if reasons is not None:
        gpu["clock_events"] = [name for bit, name in CLOCK_EVENTS.items() if reasons & bit]
    gpu["ecc_uncorrected_volatile"] = call(
        "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetTotalEccErrors", h,
        getattr(pynvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), getattr(pynvml, "NVML_VOLATILE_ECC", 0))
    remap = call("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRemappedRows", h)
    if remap is not None:
        corr, unc, pending, failure = remap
        gpu["remapped_rows"] = {"correctable": corr, "uncorrectable": unc,
                                "pending": bool(pending), "failure": bool(failure)}
    retired = call("nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRetiredPagesPendingStatus", h)
    if retired is not None:
        gpu["retired_pages_pending"] = bool(retired)
    gpu["pcie_replays"] = call("nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetPcieReplayCounter", h)
    gpu["nvlink_errors"] = _nvlink(pynvml, h, call)
    gpu["recovery_action"] = _recovery(pynvml, h, call)
    if processes:
        procs = call("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses", h) or []
        gpu["processes"] = [{"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) // (1 << 20)
                             if isinstance(getattr(p, "usedGpuMemory", None), int) else None} for p in procs]


def _nvlink(pynvml, h, call) -> dict | None:
    totals: dict[str, int] = {}
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", MAX_NVLINKS)):
        state = call(f"nvmlDeviceGetNvLinkState({link})", "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            break                     # no such link, or NVLink not supported
        for counter, name in NVLINK_COUNTERS.items():
            v = call(f"nvmlDeviceGetNvLinkErrorCounter({link})", "nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
            if v is not None:
                totals[name] = totals.get(name, 0) + int(v)
    return totals or None


def _recovery(pynvml, h, call) -> str | None:
    field = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field is None:
        return None
    values = call("nvmlDeviceGetFieldValues(recovery action)", "nvmlDeviceGetFieldValues", h, [field])
    if not values:
        return None
    v = values[0]
    if getattr(v, "nvmlReturn", 0) != 0:
        return None
    raw = getattr(getattr(v, "value", None), "uiVal", None)
    return None if raw is None else RECOVERY_ACTIONS.get(int(raw), f"action {raw}")


def _text(v) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
