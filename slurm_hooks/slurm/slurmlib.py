"""Slurm's node list in one RPC: a child program over Slurm's own client library.

`scontrol show node` and every form of `sinfo` (`-R`, `-t drain`, `--json`, `-n`) ask
slurmctld twice: for the nodes, then for the partitions, only to fill `Partitions=`
(22.05 and 25.11 alike, counted with `sdiag`; the state filters are applied in the
client). The drain-storm breaker reads the node list on every failing health check of
every node, so it asks for the nodes alone: `slurm_load_node()` (REQUEST_NODE_INFO),
printed by the library's own `slurm_print_node_info_msg()` in `scontrol -o`'s one-line
format, which slurm/scontrol.py already parses.

`nodes-alone MINE MARK PREFIX CAUSE` prints the table for the breaker and the outage's
witnesses, which act on nodes of ours alone (a reason with MARK or PREFIX, a Comment with
CAUSE: core/reason.py's words, from the caller) and on the node they run on (MINE): a
first line `OtherNodes=N` counts every other node (never read further), then those
nodes' lines, the library's own. At thousands of nodes, mostly without a word of ours,
that is a few lines to format, pipe and parse, not thousands. It needs `node_info_t`'s
layout, which changes with every Slurm release: known for the releases tested (LAYOUTS,
from slurm.h) and checked against the library's own line of the first and the last
node, else the whole table, as `nodes` prints it.

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

# node_info_t in slurm.h, by the library's API generation (slurm_api_version() >> 16,
# the soname's number: one per Slurm release), on a 64-bit Linux (LP64):
# (sizeof, offsetof name, node_state, comment, reason). Measured with offsetof() on each
# release's own slurm.h.
LAYOUTS = {
    38: (336, 176, 208, 256, 264),      # 22.05
    44: (416, 216, 248, 320, 328),      # 25.11
}


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
    if len(argv) < 2 or argv[1] not in ("nodes", "nodes-alone") or argv[1] == "nodes" and len(argv) > 3 \
            or argv[1] == "nodes-alone" and (len(argv) != 6 or not argv[3] or not argv[5]):
        sys.stderr.write("usage: slurm/slurmlib.py SCONTROL nodes [NODE] | nodes-alone MINE MARK PREFIX CAUSE\n")
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
    if argv[1] == "nodes" and len(argv) == 3:
        rc = lib.slurm_load_node_single(ctypes.byref(msg), argv[2].encode(), flags)
    else:
        rc = lib.slurm_load_node(0, ctypes.byref(msg), flags)
    if rc != 0 or not msg.value:
        err = ctypes.get_errno()
        text = err and hasattr(lib, "slurm_strerror") and _strerror(lib, err)
        sys.stderr.write(f"slurm_load_node error: {text or f'error {err}'}\n")
        return 1
    lean = _lean_lines(lib, msg.value, *argv[2:6]) if argv[1] == "nodes-alone" else None
    if lean is not None:
        sys.stdout.write(lean)
        sys.stdout.flush()
        return 0        # the table is not freed: thousands of frees, and this process ends now
    out = libc.fdopen(os.dup(1), b"w")
    lib.slurm_print_node_info_msg(out, msg, 1)
    libc.fflush(out)
    lib.slurm_free_node_info_msg(msg)
    return 0


def _lean_lines(lib, msg: int, mine: str, mark: str, prefix: str, cause: str) -> str | None:
    """The node table for the breaker: `OtherNodes=N`, the count of nodes without a
    word of ours (not `mine`), then the library's own line of `mine` and of each node
    with a word of ours; None where this release's layout is not known or does not
    match what the library prints (then the whole table). Our words (`mark` or `prefix`
    in a Reason, `cause` in a Comment) are looked for as plain bytes anywhere, a
    superset of what the caller parses as ours."""
    import struct
    if ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(ctypes.c_long) != 8 or sys.byteorder != "little" \
            or not all(hasattr(lib, f) for f in ("slurm_api_version", "slurm_sprint_node_table",
                                                 "slurm_node_state_string_complete")):
        return None
    layout = LAYOUTS.get(lib.slurm_api_version() >> 16)
    if layout is None:
        return None
    size, at_name, at_state, at_comment, at_reason = layout
    # As C lays out a struct with pointers on LP64: pointers on 8 bytes, the size a
    # multiple of 8, a uint32_t on 4; the fields in this order.
    if size % 8 or at_name % 8 or at_comment % 8 or at_reason % 8 or at_state % 4 \
            or not (at_name + 8 <= at_state and at_state + 4 <= at_comment and at_comment + 8 <= at_reason <= size - 8):
        return None
    # node_info_msg_t: time_t last_update; uint32_t record_count; node_info_t *node_array.
    count, array = struct.unpack_from("=I4xQ", ctypes.string_at(msg + 8, 16))
    if not count:
        return "OtherNodes=0\n"
    if not array:
        return None
    lib.slurm_sprint_node_table.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.slurm_sprint_node_table.restype = ctypes.c_void_p
    lib.slurm_node_state_string_complete.argtypes = [ctypes.c_uint32]
    lib.slurm_node_state_string_complete.restype = ctypes.c_void_p
    # The records as 64-bit words, and as the same words taken for C strings: a field of
    # every record is then one strided slice, read (and each string copied) by ctypes
    # in C, not a foreign call per record.
    step = size // 8
    words = (ctypes.c_uint64 * (count * step)).from_address(array)
    strings = (ctypes.c_char_p * (count * step)).from_address(array)

    def text(address: int) -> str:
        # The library's strings are xmalloc'd; this process ends in a moment: not freed.
        return ctypes.string_at(address).decode("utf-8", "surrogateescape") if address else ""

    def line(i: int) -> str:
        return text(lib.slurm_sprint_node_table(array + i * size, 1))

    # The layout is right only if the library agrees, checked before any pointer of
    # every record is followed: the first and the last record's own line say what ours
    # read (name, state, Comment and Reason at their offsets, the record size).
    for i in sorted({0, count - 1}):
        base = i * step
        name, comment, reason = (words[base + at // 8] for at in (at_name, at_comment, at_reason))
        state = ctypes.c_uint32.from_address(array + i * size + at_state).value
        printed = line(i)
        if name and not (printed.startswith(f"NodeName={text(name)} ")
                         and f" State={text(lib.slurm_node_state_string_complete(state))} " in printed
                         and (not comment or f" Comment={text(comment)}" in printed)
                         and (not reason or f" Reason={text(reason)}" in printed)):
            return None
    own, ours, tag = mine.encode(), mark.encode(), cause.encode()
    site = prefix.encode() if prefix.strip() else ours
    names = strings[at_name // 8::step]           # bytes, or None for a NULL pointer
    reasons = strings[at_reason // 8::step]
    comments = strings[at_comment // 8::step]
    listed = _holding(reasons, (ours, site)) | _holding(comments, (tag,))
    if own and own in names:
        listed.add(names.index(own))
    # As slurm_print_node_info_msg: a record without a name is not a node.
    listed = {i for i in listed if names[i]}
    others = count - names.count(None) - len(listed)
    return f"OtherNodes={others}\n" + "".join(line(i) for i in sorted(listed))


def _holding(texts: list, words: tuple) -> set:
    """The indices of the texts (bytes, or None) holding any of `words`. Searched as
    one string, the texts joined by NUL (no C string holds one): a search per word in C,
    not one per text, and the indices worked out only for what was found."""
    import bisect
    import itertools
    joined = b"\0".join([t or b"" for t in texts])
    starts: list = []
    found = set()
    for word in words:
        at = joined.find(word)
        while at >= 0:
            if not starts:
                starts = list(itertools.accumulate((len(t or b"") + 1 for t in texts), initial=0))
            i = bisect.bisect_right(starts, at) - 1
            found.add(i)
            at = joined.find(word, starts[i + 1])      # the next text: one index each
    return found


def _strerror(lib, err: int) -> str:
    lib.slurm_strerror.restype = ctypes.c_char_p
    lib.slurm_strerror.argtypes = [ctypes.c_int]
    return (lib.slurm_strerror(err) or b"").decode(errors="replace")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
