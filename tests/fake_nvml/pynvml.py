"""A stand-in for NVIDIA's pynvml (nvidia-ml-py) on machines without a GPU.

Faked only at the module boundary: slurm-hooks imports `pynvml` in its NVML child and
gets this module when tests put tests/fake_nvml first on PYTHONPATH. What the "driver"
answers comes from the JSON scenario named by $FAKE_NVML_SCENARIO:

{"init": null | "LIBRARY_NOT_FOUND" | "DRIVER_NOT_LOADED" | ...,
 "driver": "550.54.15",
 "count_error": null | "UNKNOWN",          # nvmlDeviceGetCount fails
 "missing": ["nvmlDeviceGetComputeRunningProcesses_v3", ...],  # not in this driver's libnvidia-ml
 "hang": {"call": "nvmlDeviceGetPowerUsage", "index": 1},   # never returns
 "hang_path": "/mnt/hung/x",     # ...by stat()ing this path (real D state), else sleeps
 "gpus": [{"pci": "00000000:3B:00.0", "uuid": "GPU-...", "name": "...", "minor": 0,
           "temperature": 31, "utilization": 100, "memory_utilization": 40, "power_mw": 650000,
           "power_limit_mw": 700000, "sm_clock": 1980,
           "memory_used": 1048576, "memory_reserved": 0,   # v2 `used` and `reserved`; v1 used = both
           "numa_node": null,            # set: GPU memory is a NUMA node (GH200, GB200)
           "mig": [0, 0],                # current, pending MIG mode
           "clock_events": 0, "ecc_uncorrected": 0, "remapped_rows": [0, 0, 0, 0],
           "retired_pending": 0, "pcie_replays": 0,
           "nvlink_links": 0, "nvlink_down": [2],          # links in state 0 (down)
           "nvlink_errors": 0 | {"replay": 1, "recovery": 0, "crc_flit": 0, "crc_data": 0},
           "recovery_action": null | 0..7,                 # null: the driver does not offer the field
           "recovery_value_type": 1,                       # NVML_VALUE_TYPE_* the driver answers in
           "recovery_return": null | "UNKNOWN",            # the field's own nvmlReturn
           "processes": [[pid, used_bytes]], "mps_processes": [[pid, used_bytes]],
           "errors": {"nvmlDeviceGetTemperature": "NOT_SUPPORTED", "*": "GPU_IS_LOST",
                      "nvmlDeviceGetClockInfo": "exception:TypeError"}}]}

A "*" error applies to every call on that GPU, its handle lookup included, as with a GPU
that fell off the bus ("Unable to determine the device handle for GPU ...: Unknown Error").

Names, values, messages, the per-error exception classes (NVMLError_Unknown, ...), the
version-mismatch error of the unversioned process query and the field-value union are
NVML's own; test_gpu.py checks them against the real pynvml.
"""
import json
import os
import string
import time

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
NVML_GPU_RECOVERY_ACTION_NONE = 0
NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1
NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2
NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3
NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
nvmlMemory_v2 = 0x02000028

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found", NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded", NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost", NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory", NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    _valClassMapping = dict()

    def __new__(typ, value):
        # As the real module: NVMLError(15) is an NVMLError_GpuIsLost.
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __init__(self, value):
        super().__init__(value)

    def __str__(self):
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def _error_classes():
    space = globals()
    for name in [n for n in list(space) if n.startswith("NVML_ERROR_")]:
        cls_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        value = space[name]

        def new(typ, *args, value=value):
            return NVMLError.__new__(typ, value)
        cls = type(cls_name, (NVMLError,), {"__new__": new})
        cls.__module__ = __name__
        space[cls_name] = cls
        NVMLError._valClassMapping[value] = cls


_error_classes()


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


def _function(name):
    """What _nvmlGetFunctionPointer does for a symbol this driver's library lacks."""
    if name in _sc().get("missing", []):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)


class _Handle:
    def __init__(self, index):
        self.index = index
        self.gpu = _sc()["gpus"][index]


def _call(call, handle, symbol=None):
    _function(symbol or call)
    _maybe_hang(call, handle.index)
    errors = handle.gpu.get("errors", {})
    err = errors.get(call) or errors.get("*")
    if err and err.startswith("exception:"):
        # Not an NVML error: what pynvml itself raises when it cannot build a call's
        # arguments or result (ctypes.ArgumentError, a TypeError, ...).
        raise {"TypeError": TypeError, "ValueError": ValueError}[err.split(":", 1)[1]](f"fake {call} failure")
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
    if _sc().get("count_error"):
        raise NVMLError(_code(_sc()["count_error"]))
    return len(_sc()["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    _maybe_hang("nvmlDeviceGetHandleByIndex", i)
    h = _Handle(i)
    errors = h.gpu.get("errors", {})
    err = errors.get("nvmlDeviceGetHandleByIndex") or errors.get("*")
    if err:
        raise NVMLError(_code(err))
    return h


def nvmlDeviceGetPciInfo(h):
    # nvidia-ml-py decodes a structure's char arrays (_PrintableStructure.__getattribute__): text.
    return _Obj(busId=_call("nvmlDeviceGetPciInfo", h)["pci"])


def nvmlDeviceGetUUID(h):
    return _call("nvmlDeviceGetUUID", h).get("uuid", f"GPU-fake-{h.index}")


def nvmlDeviceGetName(h):
    return _call("nvmlDeviceGetName", h).get("name", "NVIDIA H100 80GB HBM3")


def nvmlDeviceGetMinorNumber(h):
    return _call("nvmlDeviceGetMinorNumber", h).get("minor", h.index)


def nvmlDeviceGetNumaNodeId(h):
    node = _call("nvmlDeviceGetNumaNodeId", h).get("numa_node")
    if node is None:        # only platforms whose GPUs are NUMA nodes answer
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return node


def nvmlDeviceGetMigMode(h):
    return list(_call("nvmlDeviceGetMigMode", h).get("mig", [0, 0]))


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


def nvmlDeviceGetMemoryInfo(h, version=None):
    total = 80 << 30
    if not version:
        g = _call("nvmlDeviceGetMemoryInfo", h)
        used = g.get("memory_used", 0) + g.get("memory_reserved", 0)   # v1: reserved counts as used
        return _Obj(total=total, free=total - used, used=used)
    g = _call("nvmlDeviceGetMemoryInfo", h, symbol="nvmlDeviceGetMemoryInfo_v2")
    if version != nvmlMemory_v2:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    used, reserved = g.get("memory_used", 0), g.get("memory_reserved", 0)
    return _Obj(version=version, total=total, reserved=reserved, free=total - used - reserved, used=used)


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
    return NVML_FEATURE_DISABLED if link in g.get("nvlink_down", []) else NVML_FEATURE_ENABLED


_NVLINK_COUNTERS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}


def nvmlDeviceGetNvLinkErrorCounter(h, link, counter):
    errors = _call("nvmlDeviceGetNvLinkErrorCounter", h).get("nvlink_errors", 0)
    if isinstance(errors, dict):
        return errors.get(_NVLINK_COUNTERS.get(counter, ""), 0)
    return errors


_UNION = {NVML_VALUE_TYPE_DOUBLE: ("dVal", float), NVML_VALUE_TYPE_UNSIGNED_INT: ("uiVal", int),
          NVML_VALUE_TYPE_UNSIGNED_LONG: ("ulVal", int), NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", int),
          NVML_VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", int), NVML_VALUE_TYPE_SIGNED_INT: ("siVal", int),
          NVML_VALUE_TYPE_UNSIGNED_SHORT: ("usVal", int)}


def nvmlDeviceGetFieldValues(h, field_ids):
    g = _call("nvmlDeviceGetFieldValues", h)
    out = []
    for f in field_ids:
        action = g.get("recovery_action")
        if f != NVML_FI_DEV_GET_GPU_RECOVERY_ACTION or action is None:
            out.append(_Obj(fieldId=f, nvmlReturn=NVML_ERROR_NOT_SUPPORTED, valueType=0, value=_Obj()))
            continue
        if g.get("recovery_return"):
            out.append(_Obj(fieldId=f, nvmlReturn=_code(g["recovery_return"]), valueType=0, value=_Obj()))
            continue
        # A union: only the member of the value type the driver filled is there to read.
        vtype = g.get("recovery_value_type", NVML_VALUE_TYPE_UNSIGNED_INT)
        member, kind = _UNION[vtype]
        out.append(_Obj(fieldId=f, nvmlReturn=NVML_SUCCESS, valueType=vtype,
                        value=_Obj(**{member: kind(action)})))
    return out


def _processes(h, call, key):
    return [_Obj(pid=p, usedGpuMemory=m, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for p, m in _call(call.rsplit("_v", 1)[0], h, symbol=call).get(key, [])]


def nvmlDeviceGetComputeRunningProcesses_v3(h):
    return _processes(h, "nvmlDeviceGetComputeRunningProcesses_v3", "processes")


def nvmlDeviceGetComputeRunningProcesses_v2(h):
    return _processes(h, "nvmlDeviceGetComputeRunningProcesses_v2", "processes")


def nvmlDeviceGetComputeRunningProcesses(h):
    # The real module's unversioned query is _v3 behind throwOnVersionMismatch: a driver
    # older than R510 lacks the _v3 symbol and the caller gets this, not an NVMLError.
    try:
        return nvmlDeviceGetComputeRunningProcesses_v3(h)
    except NVMLError_FunctionNotFound:  # noqa: F821 (made by _error_classes)
        raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not match "
                                       "the NVML lib version. Either use matching pyNVML and NVML lib versions "
                                       "or use a versioned function such as "
                                       "nvmlDeviceGetComputeRunningProcesses_v2") from None


def nvmlDeviceGetMPSComputeRunningProcesses_v3(h):
    return _processes(h, "nvmlDeviceGetMPSComputeRunningProcesses_v3", "mps_processes")


def nvmlDeviceGetMPSComputeRunningProcesses_v2(h):
    return _processes(h, "nvmlDeviceGetMPSComputeRunningProcesses_v2", "mps_processes")
