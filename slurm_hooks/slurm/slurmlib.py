"""Slurm's node list in one RPC: a child program over Slurm's own client library.

`scontrol show node` and every form of `sinfo` (`-R`, `-t drain`, `--json`, `-n`) ask
slurmctld twice: for the nodes, then for the partitions, only to fill `Partitions=`
(22.05 and 25.11 alike, counted with `sdiag`; the state filters are applied in the
client). The drain-storm breaker reads the node list on every failing health check of
every node, so it asks for the nodes alone: `slurm_load_node()` (REQUEST_NODE_INFO),
printed by the library's own `slurm_print_node_info_msg()` in `scontrol -o`'s one-line
format, which slurm/scontrol.py already parses.

This file runs as a separate process (`python3 -I -S slurm/slurmlib.py SCONTROL nodes [NODE]`) through
the hang-safe runner: the library may block on slurmctld, and Slurm's `fatal()` (a bad
slurm.conf) exits the whole process. It imports nothing but the standard library.

The library is the one that belongs to the scontrol in use (found next to it: the
client must match the daemons' release closely), else Debian's and the usual system
places when that scontrol is the system's. Exit status NO_LIBRARY means "no usable
library here": the caller falls back to scontrol.
"""
from __future__ import annotations

import ctypes
import os
import sys

NO_LIBRARY = 3
SHOW_ALL = 1 << 0        # nodes of hidden partitions too: the breaker counts every node
SHOW_MIXED = 1 << 3      # as scontrol asks: MIXED for partly allocated nodes

_NAMES = ("libslurmfull.so", "libslurm.so")


def candidates(scontrol: str) -> list[str]:
    """Where Slurm's client library may be for this scontrol, best first."""
    bin_dir = os.path.dirname(scontrol)
    prefix = os.path.dirname(bin_dir)
    out = []
    for lib in ("lib", "lib64", f"lib/{_triplet()}"):
        out += [os.path.join(prefix, lib, "slurm", n) for n in _NAMES]
        out += [os.path.join(prefix, lib, n) for n in _NAMES]
    if bin_dir in ("/usr/bin", "/bin"):
        out += [f"/usr/lib/{_triplet()}/slurm-wlm/libslurmfull.so", f"/usr/lib/{_triplet()}/libslurm.so",
                "/usr/lib64/slurm/libslurmfull.so", "/usr/lib64/libslurm.so"]
    return out


def _triplet() -> str:
    machine = os.uname().machine
    return {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
            "ppc64le": "powerpc64le-linux-gnu"}.get(machine, f"{machine}-linux-gnu")


def _load(scontrol: str):
    for path in candidates(scontrol):
        if not os.path.exists(path):
            continue
        try:
            # Global: the plugins Slurm loads (auth/munge) resolve their symbols in it.
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL, use_errno=True)
        except OSError:
            continue
        if all(hasattr(lib, f) for f in ("slurm_init", "slurm_load_node", "slurm_load_node_single",
                                          "slurm_print_node_info_msg", "slurm_free_node_info_msg")):
            return lib
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "nodes" or len(argv) > 3:
        sys.stderr.write("usage: slurm/slurmlib.py SCONTROL nodes [NODE]\n")
        return 2
    lib = _load(argv[0])
    if lib is None:
        sys.stderr.write(f"no Slurm client library found for {argv[0]}\n")
        return NO_LIBRARY
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.fflush.argtypes = [ctypes.c_void_p]
    lib.slurm_init.argtypes = [ctypes.c_char_p]
    lib.slurm_init.restype = None
    lib.slurm_load_node.argtypes = [ctypes.c_long, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint16]
    lib.slurm_load_node_single.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_uint16]
    lib.slurm_print_node_info_msg.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.slurm_print_node_info_msg.restype = None
    lib.slurm_free_node_info_msg.argtypes = [ctypes.c_void_p]
    lib.slurm_free_node_info_msg.restype = None

    lib.slurm_init(None)                    # SLURM_CONF from the environment, as scontrol
    msg = ctypes.c_void_p()
    flags = SHOW_ALL | SHOW_MIXED
    if len(argv) == 3:
        rc = lib.slurm_load_node_single(ctypes.byref(msg), argv[2].encode(), flags)
    else:
        rc = lib.slurm_load_node(0, ctypes.byref(msg), flags)
    if rc != 0 or not msg.value:
        err = ctypes.get_errno()
        text = err and hasattr(lib, "slurm_strerror") and _strerror(lib, err)
        sys.stderr.write(f"slurm_load_node error: {text or f'error {err}'}\n")
        return 1
    out = libc.fdopen(os.dup(1), b"w")
    lib.slurm_print_node_info_msg(out, msg, 1)
    libc.fflush(out)
    lib.slurm_free_node_info_msg(msg)
    return 0


def _strerror(lib, err: int) -> str:
    lib.slurm_strerror.restype = ctypes.c_char_p
    lib.slurm_strerror.argtypes = [ctypes.c_int]
    return (lib.slurm_strerror(err) or b"").decode(errors="replace")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
