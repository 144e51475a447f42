"""A stand-in for NVIDIA's pynvml (nvidia-ml-py) on machines without a GPU.

Faked only at the module boundary: slurm-hooks imports `pynvml` in its NVML child and
gets this module when tests put tests/fake_nvml first on PYTHONPATH. What the "driver"
answers comes from the JSON scenario named by $FAKE_NVML_SCENARIO:

{"init": null | "LIBRARY_NOT_FOUND" | "DRIVER_NOT_LOADED" | ...,
 "driver": "550.54.15",
 "hang": {"call": "nvmlDeviceGetPowerUsage", "index": 1},   # never returns
 "hang_path": "/mnt/hung/x",     # ...by stat()ing this path (real D state), else sleeps
 "gpus": [{"pci": "00000000:3B:00.0", "uuid": "GPU-...", "name": "...", "temperature": 31,
           "utilization": 100, "memory_utilization": 40, "power_mw": 650000,
           "power_limit_mw": 700000, "sm_clock": 1980, "memory_used": 1048576,
           "clock_events": 0, "ecc_uncorrected": 0, "remapped_rows": [0, 0, 0, 0],
           "retired_pending": 0, "pcie_replays": 0, "nvlink_links": 0, "nvlink_errors": 0,
           "recovery_action": 0, "processes": [[pid, used_bytes]],
           "errors": {"nvmlDeviceGetTemperature": "NOT_SUPPORTED", "*": "GPU_IS_LOST"}}]}

Error values and messages are NVML's own (test_gpu.py checks them against the real
pynvml when it is installed).
"""
import json
import os
import time

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found", NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found", NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart", NVML_ERROR_NO_DATA: "No data",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return _MESSAGES.get(self.value, f"NVML error {self.value}")


def _code(name):
    return globals()["NVML_ERROR_" + name]


_scenario = None


def _sc():
    global _scenario
    if _scenario is None:
        with open(os.environ["FAKE_NVML_SCENARIO"]) as f:
            _scenario = json.load(f)
    return _scenario


def _maybe_hang(call, index=None):
    h = _sc().get("hang")
    if h and h["call"] == call and h.get("index") in (None, index):
        path = _sc().get("hang_path")
        while True:
            if path:
                os.stat(path)     # blocks in the kernel on a hung mount
            time.sleep(3600)


class _Handle:
    def __init__(self, index):
        self.index = index
        self.gpu = _sc()["gpus"][index]


def _call(call, handle):
    _maybe_hang(call, handle.index)
    errors = handle.gpu.get("errors", {})
    err = errors.get(call) or errors.get("*")
    if err:
        raise NVMLError(_code(err))
    return handle.gpu


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def nvmlInit():
    _maybe_hang("nvmlInit")
    if _sc().get("init"):
        raise NVMLError(_code(_sc()["init"]))


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _sc().get("driver", "550.54.15")


def nvmlDeviceGetCount():
    _maybe_hang("nvmlDeviceGetCount")
    return len(_sc()["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    _maybe_hang("nvmlDeviceGetHandleByIndex", i)
    h = _Handle(i)
    if h.gpu.get("errors", {}).get("nvmlDeviceGetHandleByIndex"):
        raise NVMLError(_code(h.gpu["errors"]["nvmlDeviceGetHandleByIndex"]))
    return h


def nvmlDeviceGetPciInfo(h):
    return _Obj(busId=_call("nvmlDeviceGetPciInfo", h)["pci"].encode())


def nvmlDeviceGetUUID(h):
    return _call("nvmlDeviceGetUUID", h).get("uuid", f"GPU-fake-{h.index}")


def nvmlDeviceGetName(h):
    return _call("nvmlDeviceGetName", h).get("name", "NVIDIA H100 80GB HBM3")


def nvmlDeviceGetTemperature(h, sensor):
    return _call("nvmlDeviceGetTemperature", h).get("temperature", 30)


def nvmlDeviceGetUtilizationRates(h):
    g = _call("nvmlDeviceGetUtilizationRates", h)
    return _Obj(gpu=g.get("utilization", 0), memory=g.get("memory_utilization", 0))


def nvmlDeviceGetPowerUsage(h):
    return _call("nvmlDeviceGetPowerUsage", h).get("power_mw", 70000)


def nvmlDeviceGetEnforcedPowerLimit(h):
    return _call("nvmlDeviceGetEnforcedPowerLimit", h).get("power_limit_mw", 700000)


def nvmlDeviceGetClockInfo(h, clock):
    return _call("nvmlDeviceGetClockInfo", h).get("sm_clock", 1980)


def nvmlDeviceGetMemoryInfo(h):
    return _Obj(used=_call("nvmlDeviceGetMemoryInfo", h).get("memory_used", 0), total=80 << 30)


def nvmlDeviceGetCurrentClocksEventReasons(h):
    return _call("nvmlDeviceGetCurrentClocksEventReasons", h).get("clock_events", 0)


def nvmlDeviceGetTotalEccErrors(h, kind, counter):
    return _call("nvmlDeviceGetTotalEccErrors", h).get("ecc_uncorrected", 0)


def nvmlDeviceGetRemappedRows(h):
    return tuple(_call("nvmlDeviceGetRemappedRows", h).get("remapped_rows", [0, 0, 0, 0]))


def nvmlDeviceGetRetiredPagesPendingStatus(h):
    return _call("nvmlDeviceGetRetiredPagesPendingStatus", h).get("retired_pending", 0)


def nvmlDeviceGetPcieReplayCounter(h):
    return _call("nvmlDeviceGetPcieReplayCounter", h).get("pcie_replays", 0)


def nvmlDeviceGetNvLinkState(h, link):
    g = _call("nvmlDeviceGetNvLinkState", h)
    if link >= g.get("nvlink_links", 0):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED if link == 0 else NVML_ERROR_INVALID_ARGUMENT)
    return 1


def nvmlDeviceGetNvLinkErrorCounter(h, link, counter):
    return _call("nvmlDeviceGetNvLinkErrorCounter", h).get("nvlink_errors", 0)


def nvmlDeviceGetFieldValues(h, field_ids):
    g = _call("nvmlDeviceGetFieldValues", h)
    return [_Obj(fieldId=f, nvmlReturn=0, value=_Obj(uiVal=g.get("recovery_action", 0))) for f in field_ids]


def nvmlDeviceGetComputeRunningProcesses(h):
    return [_Obj(pid=p, usedGpuMemory=m) for p, m in _call("nvmlDeviceGetComputeRunningProcesses", h).get("processes", [])]
