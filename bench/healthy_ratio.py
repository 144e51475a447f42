"""The healthy health check against the bare interpreter, in one alternated run.

    .venv/bin/python bench/healthy_ratio.py NEW_PREFIX [OLD_PREFIX] [--runs N] [--old-config FILE]
        [--new-config FILE] [--without-probes]

PREFIX is an installed slurm-hooks (a virtual environment laid out by
packaging/install.sh: PREFIX/bin/python and the four programs). Each round runs, in a
rotating order so drift and caches hit all alike:

- the bare interpreter, `PREFIX/bin/python -I -S -c pass` (the yardstick);
- `slurm-hooks-healthcheck`, a real run as slurmd starts it (no arguments, only
  SLURMD_NODENAME; the configuration through $SLURM_HOOKS_CONFIG);
- `slurm-hooks healthcheck --dry-run`.

Both on a healthy machine with the shipped configuration (conf/slurm-hooks.yaml: every
check, the default filesystems /tmp and /dev/shm with write probes, network mounts
discovered), only state_dir and journal moved into a temporary directory. Each install
gets its own copy of the file, so their configuration caches do not evict each other.
An older install that does not know today's settings reads its own shipped file
(`--old-config`, e.g. `git show REV:conf/slurm-hooks.yaml`); `--new-config` does the same
for the new install (a host whose mount table holds other tests' mounts: list the
filesystems in both files alike).
With `--without-probes`, also a real run of the new install with the filesystem check
switched off (`filesystem_defaults.enabled: false`): what the write probes (their forks,
the fsync the parent waits for) add, and so the most that hiding them could save.
Prints the medians, the CPU time (user + system, probe children included) and each
median as a multiple of the bare interpreter's. Target: at most 3x.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall ms, CPU ms of the process and its children)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    took = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, f"{argv}: exit {code}: {err}"
    return took * 1000, (usage.ru_utime + usage.ru_stime) * 1000


def shipped_config(tmp: Path, name: str, source: Path | None = None, probes: bool = True) -> Path:
    text = (source or ROOT / "conf" / "slurm-hooks.yaml").read_text()
    if not probes:
        text, n = re.subn(r"(?ms)^(filesystem_defaults:.*?^  enabled: )auto$", r"\1false", text, count=1)
        assert n == 1, "the shipped file has no filesystem_defaults.enabled: auto"
    text = re.sub(r"(?m)^state_dir: .*$", f"state_dir: {tmp}/state-{name}", text)
    text = re.sub(r"(?m)^journal: .*$", f"journal: {tmp}/journal-{name}.jsonl", text)
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


def cases(prefix: Path, label: str, tmp: Path, source: Path | None = None) -> dict[str, tuple[list[str], dict]]:
    cfg = shipped_config(tmp, label, source)
    node = {"SLURMD_NODENAME": "bench"}
    return {
        f"{label}: slurm-hooks-healthcheck (real run)":
            ([str(prefix / "bin/slurm-hooks-healthcheck")], dict(node, SLURM_HOOKS_CONFIG=str(cfg))),
        f"{label}: slurm-hooks healthcheck --dry-run":
            ([str(prefix / "bin/slurm-hooks"), "-c", str(cfg), "healthcheck", "--dry-run"], node),
    }


def option(args: list[str], flag: str, default):
    """The value after `flag` (removed from args with it), else default."""
    if flag not in args:
        return default
    i = args.index(flag)
    value = args[i + 1]
    del args[i:i + 2]
    return value


def alternate(todo: dict[str, tuple[list[str], dict]], runs: int) -> tuple[dict, dict]:
    """Wall and CPU ms of each case over `runs` rounds, in a rotating order so drift
    and caches hit all alike, after 3 rounds of warm-up (caches, the first run of a boot)."""
    names = list(todo)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for i in range(runs + 3):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            w, c = once(*todo[name])
            if i >= 3:
                wall[name].append(w)
                cpu[name].append(c)
    return wall, cpu


def main() -> None:
    args = sys.argv[1:]
    runs = int(option(args, "--runs", 40))
    without_probes = "--without-probes" in args
    if without_probes:
        args.remove("--without-probes")
    old_config = Path(option(args, "--old-config", "")) if "--old-config" in args else None
    new_config = Path(option(args, "--new-config", "")) if "--new-config" in args else None
    new = Path(args[0])
    old = Path(args[1]) if len(args) > 1 else None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bare = "bare: python -I -S -c pass"
        todo = {bare: ([str(new / "bin/python"), "-I", "-S", "-c", "pass"], {})}
        todo.update(cases(new, "new", tmp, new_config))
        if without_probes:
            cfg = shipped_config(tmp, "new-no-probes", probes=False)
            todo["new: real run, filesystem check off"] = (
                [str(new / "bin/slurm-hooks-healthcheck")],
                {"SLURMD_NODENAME": "bench", "SLURM_HOOKS_CONFIG": str(cfg)})
        if old is not None:
            todo.update(cases(old, "old", tmp, old_config))
        names = list(todo)
        wall, cpu = alternate(todo, runs)
    base = statistics.median(wall[bare])
    base_cpu = statistics.median(cpu[bare])
    print(f"{runs} alternated rounds; median wall ms (min), CPU ms, multiple of the bare interpreter")
    for name in names:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"  {name:45s} {w:6.1f} ({min(wall[name]):5.1f})  cpu {c:6.1f}  "
              f"x{w / base:4.2f} wall  x{c / base_cpu:4.2f} cpu")


if __name__ == "__main__":
    main()
