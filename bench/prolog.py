"""What the prolog adds to a healthy job start (target: at most +25 ms).

    .venv/bin/python bench/prolog.py [NEW_PREFIX [OLD_PREFIX]] [--runs N] [--skip-cluster]

PREFIX is an installed slurm-hooks (packaging/install.sh's layout: PREFIX/bin/python and
the programs); without one, $SLURM_HOOKS_BIN's or the programs beside this interpreter.
Three parts:

1. The prolog alone: whole-process wall time of `slurm-hooks-prolog` with the
   environment slurmd gives it, healthy node, 2 probed paths, alternated with the bare
   interpreter (`python -I -S -c pass`) and the old install; medians.
2. Where the new prolog's time goes, phase by phase (medians of in-process marks):
   interpreter start, imports, configuration (from its cache), lock, checks (probes
   included), journal and report, exit.
3. End to end on a real Slurm cluster on loopback (tests/slurmcluster.py): wall time of
   `srun -w n1 true` without a prolog, with `Prolog=/bin/true` (what slurmd charges for
   running any prolog), with an empty program of the prologs' interpreter (`python -I
   -S -c pass`: what any Python prolog pays), with the old and with the new
   slurm-hooks-prolog; rounds
   alternated, the prolog switched by a file read by one wrapper, so one reconfigure
   per round. The difference to "no prolog" is what a user's job start pays.

Part 3 starts nodes n1..n3: run it under the test suite's lock, as root:
    flock /tmp/slurm-hooks-tests.lock .venv/bin/python bench/prolog.py NEW OLD
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from healthy_ratio import alternate  # noqa: E402  (bench/, the script's own directory)

PHASES = r"""
import sys, time
t0 = time.perf_counter()
sys.path.extend(SITEDIRS)
marks = {}
def mark(name):
    marks[name] = time.perf_counter()
from slurm_hooks import cli
from slurm_hooks.core import config, lock
from slurm_hooks.run import engine, hooks
from slurm_hooks.sinks import journal, report
from slurm_hooks.sinks import record as sinks
mark("imports")
load, run, record, render, enter = config.load, engine.run, sinks.record_run, report.render, lock.HookLock.__enter__
def timed(f, before, after):
    def w(*a, **k):
        mark(before)
        r = f(*a, **k)
        mark(after)
        return r
    return w
config.load = timed(load, "imports", "config")
lock.HookLock.__enter__ = timed(enter, "config", "lock")
engine.run = timed(run, "lock", "checks")
sinks.record_run = timed(record, "checks", "journal")
report.render = timed(render, "journal", "report")
rc = cli.prolog_main()
names = ["imports", "config", "lock", "checks", "journal", "report"]
at = [t0] + [marks[n] for n in names]
print(" ".join(f"{n}={(b - a) * 1000:.3f}" for n, a, b in zip(names, at, at[1:])), file=sys.stderr)
"""


def once(argv: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = (time.perf_counter() - t0) * 1000
    assert r.returncode == 0, f"{argv}: exit {r.returncode}: {r.stderr}"
    return took, r.stderr


def node_config(tmp: Path, name: str) -> Path:
    (tmp / "scratch").mkdir(exist_ok=True)
    cfg = tmp / f"n1-{name}.yaml"
    cfg.write_text(f"state_dir: {tmp}/state-{name}\njournal: {tmp}/journal-{name}.jsonl\nfilesystems:\n"
                   f"  - path: {tmp}/scratch\n  - path: /dev/shm\n")
    return cfg


def prolog_env(cfg: Path) -> dict:
    # What slurmd gives a prolog (no GPU variables: no GRES here).
    return {"SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "1",
            "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}


def alone(installs: dict[str, Path], tmp: Path, runs: int) -> None:
    cases = {"bare: python -I -S -c pass": ([str(next(iter(installs.values())) / "bin/python"),
                                             "-I", "-S", "-c", "pass"], {})}
    for name, prefix in installs.items():
        cases[f"{name}: slurm-hooks-prolog"] = ([str(prefix / "bin/slurm-hooks-prolog")],
                                                prolog_env(node_config(tmp, name)))
    times, _ = alternate(cases, runs)
    names = list(cases)
    base = statistics.median(times[names[0]])
    print(f"the prolog alone, healthy, 2 paths, {runs} alternated rounds: median wall ms (min)")
    for name in names:
        m = statistics.median(times[name])
        print(f"  {name:40s} {m:6.1f} ({min(times[name]):5.1f})  x{m / base:4.2f}")


def phases(prefix: Path, tmp: Path, runs: int) -> None:
    python = str(prefix / "bin/python")
    launcher = (prefix / "bin/slurm-hooks-prolog").read_text()
    sitedirs = next((line.split("(", 1)[1].rstrip(")\n") for line in launcher.splitlines()
                     if line.startswith("sys.path.extend(")), "[]")
    code = PHASES.replace("SITEDIRS", sitedirs)
    flags = ["-I", "-S"] if sitedirs != "[]" else ["-I"]     # pip's launchers leave the path to site
    env = prolog_env(node_config(tmp, "new"))
    start, got = [], {}
    for i in range(runs + 2):
        bare, _ = once([python, "-I", "-S", "-c", "pass"], {})
        _, err = once([python, *flags, "-c", code], env)
        if i < 2:
            continue
        start.append(bare)
        for item in err.strip().splitlines()[-1].split():
            name, value = item.split("=")
            got.setdefault(name, []).append(float(value))
    total = statistics.median(start) + sum(statistics.median(v) for v in got.values())
    print(f"where the new prolog's time goes, median of {runs} (ms):")
    print(f"  interpreter start and exit (python -I -S -c pass)  {statistics.median(start):5.1f}")
    for name, values in got.items():
        print(f"  {name:50s} {statistics.median(values):5.1f}")
    print(f"  sum {total:.1f}")


def end_to_end(installs: dict[str, Path], tmp: Path, runs: int) -> None:
    from slurmcluster import SlurmCluster
    cluster = SlurmCluster(tmp / "cluster").start()
    try:
        conf = tmp / "conf"
        conf.mkdir()
        mode = tmp / "mode"
        # `read`, a shell builtin: the switch itself forks nothing. `true` is the
        # target's yardstick, Prolog=/bin/true (its exec included); `python` an empty
        # program of the interpreter the prologs run, what any Python prolog pays.
        python = next(iter(installs.values())) / "bin/python"
        lines = [f'read m < "{mode}"', 'case "$m" in', "  true) exec /bin/true ;;",
                 f"  python) exec {python} -I -S -c pass ;;"]
        for name, prefix in installs.items():
            cfg = node_config(tmp, f"{name}-cluster")
            lines.append(f'  {name}) SLURM_HOOKS_CONFIG="{cfg}" exec {prefix}/bin/slurm-hooks-prolog ;;')
        lines.append("esac")
        wrapper = tmp / "prolog"
        wrapper.write_text("#!/bin/sh\n" + "\n".join(lines) + "\n")
        wrapper.chmod(0o755)
        with_prolog = ["true", "python", *installs]
        times: dict[str, list[float]] = {m: [] for m in ["none", *with_prolog]}
        for i in range(runs + 1):
            for block in (("none",), with_prolog) if i % 2 else (with_prolog, ("none",)):
                cluster.reconfigure("" if block == ("none",) else f"Prolog={wrapper}\n")
                k = i % len(block)
                for m in block[k:] + block[:k]:
                    mode.write_text(m + "\n")
                    t0 = time.perf_counter()
                    subprocess.run(["srun", "-w", "n1", "-N1", "true"], env=cluster.env, check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    if i >= 1:
                        times[m].append((time.perf_counter() - t0) * 1000)
        none = statistics.median(times["none"])
        print(f"srun -w n1 true on the test cluster, {runs} alternated rounds: median ms (min), added to no prolog")
        for m, values in times.items():
            label = {"none": "no prolog", "true": "Prolog=/bin/true (via the wrapper)",
                     "python": "python -I -S -c pass (via the wrapper)"}.get(m, f"{m} slurm-hooks-prolog")
            med = statistics.median(values)
            over = "" if m in ("none", "true") else f"  {med - statistics.median(times['true']):+6.1f} over /bin/true"
            print(f"  {label:40s} {med:6.1f} ({min(values):5.1f})  {med - none:+6.1f}{over}")
    finally:
        cluster.stop()


def main() -> None:
    args = sys.argv[1:]
    runs, skip_cluster = 20, "--skip-cluster" in args
    if skip_cluster:
        args.remove("--skip-cluster")
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i:i + 2]
    # An install's prefix; else $SLURM_HOOKS_BIN's (its slurm-hooks), else this interpreter's.
    binary = os.environ.get("SLURM_HOOKS_BIN") or str(Path(sys.executable).parent / "slurm-hooks")
    new = Path(args[0]) if args else Path(binary).parent.parent
    installs = {"new": new}
    if len(args) > 1:
        installs["old"] = Path(args[1])
    with tempfile.TemporaryDirectory() as d:
        alone(installs, Path(d), runs)
        phases(new, Path(d), runs)
        if not skip_cluster:
            end_to_end(installs, Path(d), max(10, runs // 2))


if __name__ == "__main__":
    main()
