"""What NVML says about every GPU. Runs only inside a hang-safe child (host/runner.py).

A wedged driver makes NVML calls sleep in the kernel (nvidia-smi is known to hang so),
so the check never calls NVML in its own process: it runs collect() in a child with a
deadline, and the child reports each call before making it. When the deadline fires,
the last call reported is what the driver did not answer.

pynvml comes from NVIDIA's nvidia-ml-py. What an NVML answer means (NVML API reference,
"Device Queries" and the nvmlReturn_t list):

- "this query does not apply here" (NOT_SUPPORTED, FUNCTION_NOT_FOUND, NOT_FOUND,
  NO_DATA, NO_PERMISSION, INVALID_ARGUMENT): the value is simply absent. Not a failure.
- GPU_IS_LOST and RESET_REQUIRED on any call: the GPU is lost or needs a reset; its
  queries end there.
- anything else (UNKNOWN, as a GPU that fell off the bus answers its handle lookup,
  IRQ_ISSUE, INSUFFICIENT_POWER, CORRUPTED_INFOROM, TIMEOUT, ...): the GPU was not
  read cleanly. Each such error is kept with the call that got it (`errors`), and the
  GPU's status is "error": the check fails it, naming the error.
- A query whose newer version the driver lacks is asked again in the older version:
  pynvml's unversioned process query is `_v3`, which a driver older than R510 does not
  have, and pynvml then raises NVMLLibraryMismatchError (not an NVMLError). Each call is
  guarded on its own, so one such surprise costs one value, never the whole reading.

GPUs are named by PCI bus id, UUID and device minor number (/dev/nvidiaN, what Slurm's
SLURM_JOB_GPUS counts), never by NVML's index alone: NVML's enumeration order is not
guaranteed to match anyone else's.
"""
from __future__ import annotations

import os

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
# nvmlGpuRecoveryAction_t (NVML_GPU_RECOVERY_ACTION_*).
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}
# nvmlNvLinkErrorCounter_t (NVML_NVLINK_ERROR_DL_*).
NVLINK_COUNTERS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
MAX_NVLINKS = 18
# nvmlValueType_t -> the member of nvmlValue_t that holds a field value of that type.
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

# A Python exception, not an NVML error (noted on the GPU as a warning).
UNREAD = "UNREAD"
QUIET = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NOT_FOUND", "NO_DATA", "NO_PERMISSION", "INVALID_ARGUMENT",
         UNREAD)
FATAL = {"GPU_IS_LOST": "lost", "RESET_REQUIRED": "reset_required"}
# The newer version of a query is missing from this driver: ask the older one.
MISSING = ("FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH")
PROC_DRIVER = "/proc/driver/nvidia/gpus"


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


class _Caller:
    """One guarded NVML call at a time, reporting progress; errors sorted as above."""

    def __init__(self, pynvml, progress, errors: list, notes: list | None = None):
        self.pynvml, self.progress, self.errors = pynvml, progress, errors
        self.notes = notes if notes is not None else []
        self.mismatch = getattr(pynvml, "NVMLLibraryMismatchError", ())

    def raw(self, label: str, fn_name: str, *args, **kw):
        """(value, None) or (None, error name); a missing function is FUNCTION_NOT_FOUND."""
        fn = getattr(self.pynvml, fn_name, None)
        if fn is None:
            return None, "FUNCTION_NOT_FOUND"
        self.progress(label)
        try:
            return fn(*args, **kw), None
        except self.pynvml.NVMLError as e:
            name = error_name(self.pynvml, e)
            if name in FATAL:
                raise _Lost(FATAL[name], fn_name, str(e)) from None
            return None, name
        except self.mismatch:
            return None, "FUNCTION_NOT_FOUND"
        except Exception as e:
            if isinstance(e, TypeError) and kw:
                # An older pynvml without this keyword (version=): not in this library.
                return None, "FUNCTION_NOT_FOUND"
            # Not NVML's answer but pynvml's or ours (a struct it could not build): this
            # one value is missing, said as a warning; never the whole reading.
            self.notes.append(f"{label}: {type(e).__name__}: {e}")
            return None, UNREAD

    def __call__(self, label: str, fn_name: str, *args, **kw):
        value, err = self.raw(label, fn_name, *args, **kw)
        if err is not None and err not in QUIET:
            self.fail(label, fn_name, err)
        return value

    def versions(self, label: str, fn_names: list[str], *args):
        """The first version of a query this driver has."""
        for fn_name in fn_names:
            value, err = self.raw(label, fn_name, *args)
            if err in MISSING:
                continue
            if err is not None and err not in QUIET:
                self.fail(label, fn_name, err)
            return value
        return None

    def fail(self, label: str, fn_name: str, err: str) -> None:
        message = _message(self.pynvml, err)
        self.errors.append({"call": fn_name, "label": label, "error": err, "message": message})


def _message(pynvml, name: str) -> str:
    value = getattr(pynvml, f"NVML_ERROR_{name}", None)
    try:
        return str(pynvml.NVMLError(value)) if value is not None else name
    except Exception:   # an error string NVML itself cannot give
        return name


def _collect(progress, pynvml, processes: bool) -> dict:
    from .xid import normalise_pci
    out: dict = {"gpus": [], "errors": []}
    call = _Caller(pynvml, progress, out["errors"])
    out["driver"] = _text(call("nvmlSystemGetDriverVersion", "nvmlSystemGetDriverVersion"))
    count = call("nvmlDeviceGetCount", "nvmlDeviceGetCount") or 0
    minors = _proc_minors()
    for i in range(count):
        gpu: dict = {"index": i, "status": "ok", "errors": [], "notes": []}
        out["gpus"].append(gpu)
        one = _Caller(pynvml, progress, gpu["errors"], gpu["notes"])
        try:
            _one(pynvml, gpu, i, one, processes)
        except _Lost as e:
            gpu.update(status=e.status, lost_call=e.call, message=e.message)
        if gpu["status"] == "ok" and gpu["errors"]:
            gpu["status"] = "error"
        if gpu.get("minor") is None and gpu.get("pci"):
            gpu["minor"] = minors.get(normalise_pci(gpu["pci"]))
    return out


def _one(pynvml, gpu: dict, i: int, call: _Caller, processes: bool) -> None:
    def label(name):
        return f"gpu {i}: {name}"

    def q(name, *args, **kw):
        return call(label(name), name, *args, **kw)

    h = q("nvmlDeviceGetHandleByIndex", i)
    if h is None:
        if not gpu["errors"]:       # a quiet "not found": still not a GPU we could read
            call.fail(label("nvmlDeviceGetHandleByIndex"), "nvmlDeviceGetHandleByIndex", "NOT_FOUND")
        return
    pci = q("nvmlDeviceGetPciInfo", h)
    if pci is not None:
        gpu["pci"] = _text(getattr(pci, "busId", "") or getattr(pci, "busIdLegacy", ""))
    gpu["uuid"] = _text(q("nvmlDeviceGetUUID", h))
    gpu["name"] = _text(q("nvmlDeviceGetName", h))
    gpu["minor"] = q("nvmlDeviceGetMinorNumber", h)
    gpu["numa_node"] = q("nvmlDeviceGetNumaNodeId", h)
    mig = q("nvmlDeviceGetMigMode", h)
    gpu["mig"] = bool(mig[0]) if mig else None
    gpu["temperature"] = q("nvmlDeviceGetTemperature", h, getattr(pynvml, "NVML_TEMPERATURE_GPU", 0))
    util = q("nvmlDeviceGetUtilizationRates", h)
    if util is not None:
        gpu["utilization"], gpu["memory_utilization"] = util.gpu, util.memory
    power = q("nvmlDeviceGetPowerUsage", h)
    gpu["power_w"] = None if power is None else power / 1000.0
    limit = q("nvmlDeviceGetEnforcedPowerLimit", h)
    gpu["power_limit_w"] = None if limit is None else limit / 1000.0
    gpu["sm_clock_mhz"] = q("nvmlDeviceGetClockInfo", h, getattr(pynvml, "NVML_CLOCK_SM", 1))
    _memory(pynvml, gpu, h, call, label)
    reasons = call.versions(label("nvmlDeviceGetCurrentClocksEventReasons"),
                            ["nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"], h)
    if reasons is not None:
        gpu["clock_events"] = [name for bit, name in CLOCK_EVENTS.items() if reasons & bit]
    gpu["ecc_uncorrected_volatile"] = q(
        "nvmlDeviceGetTotalEccErrors", h,
        getattr(pynvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), getattr(pynvml, "NVML_VOLATILE_ECC", 0))
    remap = q("nvmlDeviceGetRemappedRows", h)
    if remap is not None:
        corr, unc, pending, failure = remap
        gpu["remapped_rows"] = {"correctable": corr, "uncorrectable": unc,
                                "pending": bool(pending), "failure": bool(failure)}
    retired = q("nvmlDeviceGetRetiredPagesPendingStatus", h)
    if retired is not None:
        gpu["retired_pages_pending"] = bool(retired)
    gpu["pcie_replays"] = q("nvmlDeviceGetPcieReplayCounter", h)
    _nvlink(pynvml, gpu, h, call, label)
    gpu["recovery_action"] = _recovery(pynvml, h, call, label)
    if processes:
        gpu["processes"] = _processes(call, label("nvmlDeviceGetComputeRunningProcesses"), h,
                                      ["nvmlDeviceGetComputeRunningProcesses_v3",
                                       "nvmlDeviceGetComputeRunningProcesses_v2",
                                       "nvmlDeviceGetComputeRunningProcesses"])
        mps = _processes(call, label("nvmlDeviceGetMPSComputeRunningProcesses"), h,
                         ["nvmlDeviceGetMPSComputeRunningProcesses_v3",
                          "nvmlDeviceGetMPSComputeRunningProcesses_v2"])
        if mps:
            gpu["mps_processes"] = mps


def _memory(pynvml, gpu: dict, h, call: _Caller, label) -> None:
    """v2 tells memory reserved by the driver and firmware apart from memory allocated;
    v1's `used` counts both (NVML API reference, nvmlMemory_v2_t)."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        mem, err = call.raw(label("nvmlDeviceGetMemoryInfo_v2"), "nvmlDeviceGetMemoryInfo", h, version=version)
        if err is None and mem is not None and getattr(mem, "reserved", None) is not None:
            gpu["memory_used_mib"] = mem.used // (1 << 20)
            gpu["memory_reserved_mib"] = mem.reserved // (1 << 20)
            return
        if err is not None and err not in QUIET + MISSING:
            call.fail(label("nvmlDeviceGetMemoryInfo_v2"), "nvmlDeviceGetMemoryInfo", err)
            return
    mem = call(label("nvmlDeviceGetMemoryInfo"), "nvmlDeviceGetMemoryInfo", h)
    if mem is not None:
        gpu["memory_used_mib"] = mem.used // (1 << 20)
        gpu["memory_version"] = 1


def _nvlink(pynvml, gpu: dict, h, call: _Caller, label) -> None:
    """Link state (NVML_FEATURE_ENABLED: up, NVML_FEATURE_DISABLED: down) and the DL error
    counters of every link. Link 0 "not supported": no NVLink on this GPU; a link past
    the GPU's last one answers INVALID_ARGUMENT."""
    totals: dict[str, int] = {}
    down, up = [], 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", MAX_NVLINKS)):
        state, err = call.raw(label(f"nvmlDeviceGetNvLinkState({link})"), "nvmlDeviceGetNvLinkState", h, link)
        if err is not None:
            if err == "INVALID_ARGUMENT" or (err in QUIET and link == 0):
                break
            if err not in QUIET:
                call.fail(label(f"nvmlDeviceGetNvLinkState({link})"), "nvmlDeviceGetNvLinkState", err)
            continue
        if state == getattr(pynvml, "NVML_FEATURE_DISABLED", 0):
            down.append(link)
            continue
        up += 1
        for counter, name in NVLINK_COUNTERS.items():
            v = call(label(f"nvmlDeviceGetNvLinkErrorCounter({link})"), "nvmlDeviceGetNvLinkErrorCounter",
                     h, link, counter)
            if v is not None:
                totals[name] = totals.get(name, 0) + int(v)
    gpu["nvlink_errors"] = totals or None
    if up or down:
        gpu["nvlink_up"] = up
        gpu["nvlink_down"] = down


def _recovery(pynvml, h, call: _Caller, label) -> str | None:
    """The driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R565 and later).
    A field value is a union read by its valueType; the field has its own nvmlReturn."""
    field = getattr(pynvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field is None:
        return None
    what = label("nvmlDeviceGetFieldValues(recovery action)")
    values = call(what, "nvmlDeviceGetFieldValues", h, [field])
    if not values:
        return None
    v = values[0]
    ret = getattr(v, "nvmlReturn", 0)
    if ret:
        name = next((n[len("NVML_ERROR_"):] for n in dir(pynvml)
                     if n.startswith("NVML_ERROR_") and getattr(pynvml, n) == ret), str(ret))
        if name in FATAL:
            raise _Lost(FATAL[name], "nvmlDeviceGetFieldValues", _message(pynvml, name))
        if name not in QUIET:
            call.fail(what, "nvmlDeviceGetFieldValues", name)
        return None
    member = VALUE_MEMBERS.get(getattr(v, "valueType", 1), "uiVal")
    raw = getattr(getattr(v, "value", None), member, None)
    if raw is None:
        return None
    return RECOVERY_ACTIONS.get(int(raw), f"action {int(raw)}")


def _processes(call: _Caller, label: str, h, versions: list[str]) -> list[dict]:
    procs = call.versions(label, versions, h) or []
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        out.append({"pid": p.pid, "used_mib": used // (1 << 20) if isinstance(used, int) else None})
    return out


def _proc_minors(root: str = PROC_DRIVER) -> dict[str, int]:
    """pci -> device minor number from the driver's own /proc files, for a GPU whose
    NVML minor-number query fails (read here, in the child: the driver may hang)."""
    from .xid import normalise_pci
    out: dict[str, int] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for name in names:
        try:
            with open(f"{root}/{name}/information") as f:
                for line in f:
                    if line.startswith("Device Minor:"):
                        out[normalise_pci(name)] = int(line.split(":", 1)[1])
        except (OSError, ValueError):
            continue
    return out


def _text(v) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
