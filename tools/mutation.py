#!/usr/bin/env python3
"""Mutation testing of the modules that decide, one module at a time, each against its
own fast tests (mutmut 3.8). A mutant that survives and is not listed, with a reason, in
tools/mutation-survivors.txt fails the run.

    tools/mutation.sh                      every deciding module
    tools/mutation.sh MODULE.py ...        those modules
    tools/mutation.sh --changed BASE       the deciding modules changed since BASE's merge base
    tools/mutation.sh --list-changed BASE  only name them (CI's guard)

Each module is mutated in a scratch copy (.mutation/NAME/: the package, the tests and a
setup.cfg whose [mutmut] section names the module and its tests), so runs never share a
`mutants/` tree and the checkout is never touched. Only tests that run our code in the
test's own process can kill a mutant: a test that runs the installed program in a child
imports the unmutated package.
"""
from __future__ import annotations

import argparse
import configparser
import fnmatch
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURVIVORS = ROOT / "tools" / "mutation-survivors.txt"
WORK = ROOT / ".mutation"

# The deciding modules and the fast tests that run them in process.
MODULES: dict[str, list[str]] = {
    # In-process tests only: the cluster and program-level tests (test_stuck_tasks.py)
    # run our code in a child, where mutmut sees no test, and cost seconds each.
    "slurm_hooks/host/waits.py": ["tests/test_waits.py", "tests/test_promises.py", "tests/test_proof.py",
                                  "tests/test_stuck_tasks_fixture.py"],
    "slurm_hooks/checks/_stuck_diagnosis.py": ["tests/test_stuck_diagnosis.py", "tests/test_promises.py",
                                               "tests/test_proof.py", "tests/test_outage.py",
                                               "tests/test_stuck_tasks_fixture.py"],
    "slurm_hooks/checks/_stuck_waits.py": ["tests/test_stuck_diagnosis.py", "tests/test_promises.py",
                                           "tests/test_proof.py", "tests/test_stuck_tasks_fixture.py"],
    "slurm_hooks/checks/_stuck_reads.py": ["tests/test_stuck_diagnosis.py", "tests/test_promises.py",
                                           "tests/test_proof.py", "tests/test_stuck_tasks_fixture.py"],
    "slurm_hooks/decide/policy.py": ["tests/test_policy.py", "tests/test_decisions.py", "tests/test_recovery.py",
                                     "tests/test_outage.py", "tests/test_promises.py", "tests/test_proof.py",
                                     "tests/test_gpu_verdicts.py"],
    "slurm_hooks/decide/breaker.py": ["tests/test_policy.py", "tests/test_decisions.py"],
    "slurm_hooks/decide/correlate.py": ["tests/test_gpu_verdicts.py"],
    "slurm_hooks/decide/mount_incident.py": ["tests/test_mount_incident.py", "tests/test_outage.py",
                                             "tests/test_policy.py", "tests/test_recovery.py"],
    "slurm_hooks/act/recovery.py": ["tests/test_recovery_steps.py", "tests/test_promises.py", "tests/test_recovery.py"],
    "slurm_hooks/checks/site.py": ["tests/test_site_units.py", "tests/test_promises.py"],
    "slurm_hooks/core/model.py": ["tests/test_model.py", "tests/test_promises.py", "tests/test_outcomes.py",
                                  "tests/test_policy.py", "tests/test_decisions.py"],
    # The fan-out's parser alone: the driver runs in a child (ClusterShell).
    "slurm_hooks/views/fanout.py": ["tests/test_promises.py", "tests/test_diagnose.py"],
}
# Mutants of functions outside these are not made (mutmut's names: module.x_function).
ONLY = {"slurm_hooks/views/fanout.py": ["x_parse_answers"]}

LINE = re.compile(r"^\s*(?P<name>[\w.]+__mutmut_\d+): (?P<status>[\w ]+?)\s*$")


def listed() -> dict[str, str]:
    """entry -> the reason its mutant stays (tools/mutation-survivors.txt, `ENTRY  # reason`).
    An entry is `FUNCTION | MUTATED LINE` (mutmut numbers a function's mutants afresh on
    each run: the mutated line is what stays), or a pattern of mutant names
    (`module.x_func__mutmut_*`)."""
    out = {}
    if SURVIVORS.exists():
        for ln in SURVIVORS.read_text().splitlines():
            if ln.strip() and not ln.lstrip().startswith("#"):
                entry, _, why = ln.rpartition("  # ")
                out[" ".join(entry.split())] = why.strip()
    return out


def identity(work: Path, mutmut: str, name: str) -> str:
    """`FUNCTION | MUTATED LINE` of a mutant, from `mutmut show`."""
    shown = subprocess.run([mutmut, "show", name], cwd=work, capture_output=True, text=True).stdout
    plus = [ln[1:] for ln in shown.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return " ".join(f"{name.rsplit('__mutmut_', 1)[0]} | {' '.join(plus)}".split())


def reason(known: dict[str, str], name: str, ident=None) -> str | None:
    """Why a surviving mutant stays: a pattern's reason, or its line's."""
    why = next((w for pat, w in known.items() if "*" in pat and "|" not in pat and fnmatch.fnmatchcase(name, pat)),
               None)
    if why is None and ident is not None:
        why = known.get(ident())
    return why


def changed(base: str) -> list[str]:
    merge = subprocess.run(["git", "merge-base", base, "HEAD"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    names = subprocess.run(["git", "diff", "--name-only", merge, "--", *MODULES], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    return [n for n in names if n in MODULES and (ROOT / n).exists()]


def scratch(module: str) -> Path:
    work = WORK / module.replace("/", "_").removesuffix(".py")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    # The checkout as git sees it (tests read the docs, the README, conf/).
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src, dst = ROOT / name, work / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    keep = configparser.ConfigParser()
    keep["tool:pytest"] = dict(cfg["tool:pytest"])
    keep["mutmut"] = dict(cfg["mutmut"])
    keep["mutmut"]["only_mutate"] = "\n" + module
    keep["mutmut"]["pytest_add_cli_args_test_selection"] = "\n" + "\n".join(MODULES[module])
    # The tests' own temporary files in the scratch copy: what a mutant made them leave
    # behind (a FUSE server, a mount on top of another) is found there, and cleared.
    keep["mutmut"]["pytest_add_cli_args"] += f"\n--basetemp={work / 'tmp'}"
    with open(work / "setup.cfg", "w") as f:
        keep.write(f)
    return work


def clear(work: Path) -> None:
    """Detach every mount a mutant made the tests leave under `work` (read from our own
    mountinfo), a FUSE one's connection aborted first (fusectl): its server then ends."""
    with open("/proc/self/mountinfo") as f:
        mounts = [ln.split() for ln in f]
    for m in sorted((m for m in mounts if m[4].startswith(str(work) + "/")), key=lambda m: -len(m[4])):
        fstype = m[m.index("-") + 1]
        if fstype.startswith("fuse"):
            try:
                with open(f"/sys/fs/fuse/connections/{m[2].split(':')[1]}/abort", "w") as f:
                    f.write("1")
            except OSError:
                pass
        subprocess.run(["umount", "-l", m[4]], capture_output=True)


STALL = 180.0      # seconds without a mutant judged: a test is stuck in D on its own mount


def watched(argv: list[str], work: Path) -> subprocess.CompletedProcess:
    """mutmut run, unblocked when it stalls: a mutant of code that frees hung mounts can
    leave a test stuck in D on the test's own FUSE mount, where mutmut's timeout kill
    cannot reach it. Aborting the mounts under `work` lets that test fail (the mutant is
    killed) and the run go on."""
    import tempfile
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, cwd=work, stdout=out, stderr=subprocess.STDOUT)
        last, seen = time.monotonic(), -1
        while p.poll() is None:
            time.sleep(5)
            judged = sum(f.stat().st_size for f in (work / "mutants").rglob("*.meta")) if (work / "mutants").exists() else 0
            if judged != seen:
                last, seen = time.monotonic(), judged
            elif time.monotonic() - last > STALL:
                print(f"  no mutant judged for {STALL:g}s: aborting the tests' mounts under {work}", flush=True)
                clear(work)
                last = time.monotonic()
        out.seek(0)
        return subprocess.CompletedProcess(argv, p.returncode, out.read().decode(errors="replace"), "")


def run(module: str, mutmut: str, again: bool = True) -> dict:
    work = WORK / module.replace("/", "_").removesuffix(".py")
    if again:
        work = scratch(module)
    dotted = module.removesuffix(".py").replace("/", ".")
    names = [f"{dotted}.{fn}__mutmut_*" for fn in ONLY.get(module, [])]
    t0 = time.monotonic()
    r = watched([mutmut, "run", "--max-children", "1", *names], work) if again else \
        subprocess.CompletedProcess([], 0, "", "")
    took = time.monotonic() - t0
    if again:
        clear(work)
    res = subprocess.run([mutmut, "results", "--all", "true"], cwd=work, capture_output=True, text=True)
    status: dict[str, str] = {}
    for ln in res.stdout.splitlines():
        m = LINE.match(ln)
        if m and m["name"].startswith(dotted + ".") and (not names or any(
                m["name"].startswith(n.removesuffix("*")) for n in names)):
            status[m["name"]] = m["status"]
    if "could not find any test case" in r.stdout:
        sys.exit(f"{module}: none of its tests ({', '.join(MODULES[module])}) runs it in the test's own "
                 "process, so no mutant can be judged: add one that does (tools/mutation.py MODULES)")
    if r.returncode != 0 or not status or any(v == "not checked" for v in status.values()):
        sys.exit(f"mutmut failed on {module} (exit {r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return {"module": module, "seconds": took, "status": status, "work": work}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("modules", nargs="*")
    p.add_argument("--changed", metavar="BASE")
    p.add_argument("--list-changed", metavar="BASE")
    p.add_argument("--mutmut", default=str(Path(sys.executable).parent / "mutmut"))
    p.add_argument("--results", action="store_true", help="judge the last run's results again (.mutation/), run nothing")
    a = p.parse_args(argv)
    if a.list_changed:
        print("\n".join(changed(a.list_changed)))
        return 0
    modules = changed(a.changed) if a.changed else (a.modules or list(MODULES))
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        sys.exit(f"not a deciding module: {', '.join(unknown)} (tools/mutation.py MODULES names them)")
    known = listed()
    new: list[str] = []
    for module in modules:
        out = run(module, a.mutmut, again=not a.results)
        counts: dict[str, int] = {}
        for s in out["status"].values():
            counts[s] = counts.get(s, 0) + 1
        survivors = sorted(n for n, s in out["status"].items() if s not in ("killed", "timeout", "segfault"))
        idents = {n: identity(out["work"], a.mutmut, n) for n in survivors if reason(known, n) is None}
        unexplained = [n for n in survivors if reason(known, n, lambda: idents[n]) is None]
        unreached = [n for n in survivors if n not in unexplained and out["status"][n] == "no tests"]
        equivalent = len(survivors) - len(unexplained) - len(unreached)
        print(f"{module}: {len(out['status'])} mutants, {counts.get('killed', 0) + counts.get('timeout', 0)} killed, "
              f"{equivalent} equivalent, {len(unreached)} run only in a child (listed), "
              f"{len(unexplained)} unexplained ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}) "
              f"in {out['seconds']:.0f}s")
        for n in unexplained:
            print(f"  survivor: {idents[n]}\n    ({n}: cd {out['work']} && {a.mutmut} show {n})")
        new += unexplained
    if new:
        print(f"{len(new)} surviving mutant(s) not in {SURVIVORS.relative_to(ROOT)}: add a test that kills "
              "each, or list it there with the reason it is equivalent.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
