"""Looking changes nothing: `slurm-hooks check` and every `--dry-run` leave the state a
real run decides on exactly as it was, so any sequence of them between two real runs
leaves the real runs' decisions unchanged (the README's promise)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, KernelLog, gpu, poll, proc_state, run_record

from slurm_hooks.checks import registry
from slurm_hooks.host.runner import STATE_NAME

FAKE = ROOT / "tests" / "fake_nvml"
OPEN_LOG = "import sys\nopen(sys.argv[1] + '/run/main_log.txt', 'a')\n"
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


class Node:
    """One node's configuration (state, journal) over a shared fake world: the fake
    NVML scenario, the fake kernel log and whatever the test puts on the machine."""

    def __init__(self, root: Path, name: str, kernel: KernelLog, scenario: Path, **extra):
        self.root, self.name = root / name, name
        self.root.mkdir(parents=True, exist_ok=True)
        self.state = self.root / "state"
        self.config = self.root / "c.yaml"
        doc = {"state_dir": str(self.state), "journal": str(self.root / "j.jsonl"), "node_name": name,
               "kernel_log": str(kernel), "actions": {"report_only": True},
               "gpu": {"enabled": "true", "timeout": 2, "count": 8}}
        doc.update(extra)
        self.config.write_text(yaml.safe_dump(doc))
        self.env = {"PYTHONPATH": str(FAKE), "FAKE_NVML_SCENARIO": str(scenario), "PATH": "/usr/bin:/bin"}

    def run(self, *args: str) -> dict:
        return run_record(self.config, *args, env=self.env)

    def snapshot(self) -> dict[str, bytes]:
        """Every state file, by name, with its bytes (lock files hold only a pid)."""
        out = {}
        for path in sorted(self.state.rglob("*")):
            if path.is_file() and not path.name.endswith(".lock"):
                out[str(path.relative_to(self.state))] = path.read_bytes()
        return out


def decisions(rec: dict) -> dict:
    """What a real run decided: its failing and warning findings, and its actions."""
    findings = sorted((f["check"], f["target"], f["status"], f["severity"])
                      for c in rec["checks"] for f in c["findings"] if f["severity"] != "ok")
    actions = sorted((a["kind"], a.get("job") or "", a["reason"]) for a in rec["actions"])
    return {"status": rec["status"], "findings": findings, "actions": actions}


def declared_state() -> set[str]:
    """node/NAME.json for every state file a check, actuation, the sinks or the runner
    says it keeps."""
    from slurm_hooks.act import actuation
    from slurm_hooks.act.actuation import LEDGER
    from slurm_hooks.checks import check_class, registry
    from slurm_hooks.host import runner
    from slurm_hooks.sinks import record as sinks
    names = {n for c in registry() for n in check_class(c).state}
    names |= set(actuation.STATE) | set(sinks.STATE) | {runner.STATE_NAME, LEDGER}
    return {f"{node}/{n}.json" for node in ("control", "looked") for n in names}


LOOKS = [("check",), ("check", "--dry-run"), ("healthcheck", "--dry-run"), ("prolog", "--dry-run"),
         ("epilog", "--dry-run"), ("check", "filesystem"), ("check", "stuck_tasks"), ("check", "gpu"),
         ("check", "leftovers"), ("healthcheck", "--dry-run")]


@pytest.fixture
def world(tmp_path):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"gpus": [gpu(i) for i in range(8)]}))
    kernel = KernelLog(tmp_path / "kmsg")
    procs = []

    def spawn(code, *args):
        p = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        return p

    def node(name, **extra):
        return Node(tmp_path, name, kernel, scenario, **extra)
    yield kernel, spawn, node
    for p in procs:
        p.kill()


def test_looks_between_real_runs_change_no_decision(world, hung_mount):
    """Two nodes see the same world; only one of them is looked at between its real
    runs. Their real runs decide the same, and the looks leave every state file as it
    was: the kernel-log cursor, the hysteresis counts, the GPU and stuck-task state."""
    kernel, spawn, node = world
    extra = {"filesystems": [{"path": "/nonexistent/slurm-hooks-test", "mountpoint": "/nonexistent/slurm-hooks-test"}],
             "policy": {"failures_to_drain": {"filesystem": 2}},
             "stuck_tasks": {"grace": 1, "sample_window": 0.3, "non_job_tasks": "drain"}}
    control, looked_at = node("control", **extra), node("looked", **extra)
    p = spawn(OPEN_LOG, hung_mount.path)
    poll(lambda: proc_state(p.pid) == "D", 5, what="the task in D")
    first = [n.run("healthcheck") for n in (control, looked_at)]
    assert decisions(first[0]) == decisions(first[1])
    kernel.write(XID_79)
    before = looked_at.snapshot()
    assert before, "the real run keeps state"
    for look in LOOKS:
        looked_at.run(*look)
    after = looked_at.snapshot()
    # The one file a look may write is the runner's record of children it left stuck in
    # the kernel (run/engine.py: forgetting them would start a second stuck probe). On a
    # slow host the looks run past the grace and walk the stuck task's path into the
    # hung mount: such a child is recorded, alive and hung there. Nothing else changes.
    children = f"looked/{STATE_NAME}.json"
    left = {k: v for k, v in json.loads(after.pop(children, b"{}")).items()
            if k not in json.loads(before.pop(children, b"{}"))}
    assert after == before
    for key, child in left.items():
        assert key.startswith("stuck_tasks:walk:") and child["step"].startswith("mnt "), (key, child)
        assert proc_state(child["pid"]) == "D", (key, child)
    time.sleep(1.2)          # past the stuck-task grace, for both nodes alike
    second = [n.run("healthcheck") for n in (control, looked_at)]
    assert decisions(second[1]) == decisions(second[0])
    # ... and what they decide is what the world says: the Xid drains, the filesystem's
    # second failure in a row drains, the task is stuck.
    assert set(control.snapshot()) <= declared_state(), "every state file is declared by its owner"
    statuses = {(f[0], f[2]) for f in decisions(second[0])["findings"]}
    assert {("gpu", "xid_drain"), ("filesystem", "missing"), ("stuck_tasks", "stuck")} <= statuses, statuses
    assert [a[0] for a in decisions(second[0])["actions"]].count("drain") == 1


def test_xid_seen_by_check_is_still_drained_by_the_next_real_run(world):
    kernel, _, node = world
    n = node("n")
    first = n.run("healthcheck")
    assert first["status"] == "healthy", [(c["name"], f["status"], f["summary"]) for c in first["checks"] for f in c["findings"] if f["severity"] != "ok"]
    kernel.write(XID_79)
    looked = n.run("check", "gpu")
    assert any("Xid 79" in f["summary"] for c in looked["checks"] for f in c["findings"])
    real = n.run("healthcheck")
    assert real["status"] == "unhealthy"
    assert [a["kind"] for a in real["actions"]][:1] == ["drain"] and "Xid 79" in real["actions"][0]["reason"]


def test_dry_runs_do_not_count_towards_hysteresis(world):
    _, _, node = world
    n = node("n", filesystems=[{"path": "/nonexistent/slurm-hooks-test",
                                "mountpoint": "/nonexistent/slurm-hooks-test"}],
             policy={"failures_to_drain": {"filesystem": 2}})
    for _ in range(2):
        dry = n.run("healthcheck", "--dry-run")
        assert dry["status"] == "warning"        # the first failure in a row, each time
    real = n.run("healthcheck")
    assert real["status"] == "warning" and real["actions"] == []
    assert n.run("healthcheck")["status"] == "unhealthy"


@pytest.mark.parametrize("name", list(registry()))
def test_check_alone_writes_no_state(world, name):
    """Every registered check, run alone, leaves the state directory as it was (and a
    node never checked before gets no state directory at all)."""
    kernel, _, node = world
    kernel.write(XID_79)
    fresh = node("fresh")
    fresh.run("check", name)
    fresh.run("check", name, "--dry-run")
    assert not fresh.state.exists()
    used = node("used")
    used.run("healthcheck")
    kernel.write(XID_79.replace("3b:00", "3c:00"))
    before = used.snapshot()
    used.run("check", name)
    assert used.snapshot() == before


def test_check_makes_no_slurm_call(world, tmp_path):
    """`check` asks Slurm nothing: a Slurm whose every command is recorded sees none."""
    _, _, node = world
    calls = tmp_path / "calls"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("scontrol", "sinfo", "squeue", "srun", "scancel"):
        script = bindir / tool
        script.write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {calls}\nexit 1\n")
        script.chmod(0o755)
    n = node("n", slurm={"bin_dir": str(bindir)}, gpu={"enabled": "true", "timeout": 2},
             stuck_tasks={"grace": 1, "sample_window": 0.3})
    n.run("check")
    assert not calls.exists() or calls.read_text() == ""


def test_every_check_declares_what_it_keeps_shows_and_exports():
    """The check interface (checks.Check): state, series, explain keys and samples, so
    no central module names a check."""
    from slurm_hooks.checks import Check, check_class, registry
    from slurm_hooks.core.model import Finding
    for name in registry():
        cls = check_class(name)
        assert cls.name == name
        for attr in ("order", "hooks", "state", "series", "explain_keys", "tasks", "findings", "samples"):
            assert hasattr(cls, attr), (name, attr)
        assert all(s.startswith("slurm_hooks_") for s in cls.series), name
        assert cls.samples([]) == []
        f = Finding(name, "x", "ok", "ok", "x")
        assert all(s[0] in cls.series for s in cls.samples([f])), name
        _: Check = cls()            # the Protocol, for the type checker


def test_each_check_runs_where_it_declares():
    """The registry is the package's check modules, in the order each declares; a run
    of a hook includes exactly the checks whose module names that hook. The lines read
    as text are the module's own values."""
    import importlib
    import os

    from slurm_hooks import checks
    from slurm_hooks.checks import check_class, for_hook, registry
    public = sorted(p[:-3] for p in os.listdir(os.path.dirname(checks.__file__))
                    if p.endswith(".py") and not p.startswith("_"))
    assert sorted(registry()) == public
    orders = [order for order, _ in registry().values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders), "ORDER must be unique"
    for name, (order, hooks) in registry().items():
        module = importlib.import_module(f"slurm_hooks.checks.{name}")
        assert (module.ORDER, module.HOOKS) == (order, hooks), name
        cls = check_class(name)
        assert (cls.order, cls.hooks) == (order, hooks), name
        assert set(hooks) <= {"check", "healthcheck", "prolog", "epilog"}, name
    for hook in ("check", "healthcheck", "prolog", "epilog"):
        builtin = [n for n in for_hook(hook) if n in registry()]
        assert builtin == [n for n, (_, hooks) in registry().items() if hook in hooks], hook
    # The filesystem probes come first (their children start before the /proc scan),
    # site checks last.
    assert list(registry())[0] == "filesystem" and list(registry())[-1] == "site"


# Words outside slurm_hooks/checks/ that are spelled like a check but are not one:
# (module, word) -> what it is there.
NOT_A_CHECK = {
    ("slurm_hooks/host/waits.py", "gpu"): "the family of kernel symbols of the GPU driver",
}


def check_names_outside_the_checks(package: Path = ROOT / "slurm_hooks") -> list[str]:
    """FILE:LINE: NAME for each string literal naming a registered check in a comparison,
    a subscript, a dict key or a call's argument, in every module outside checks/."""
    import ast
    names = set(registry())

    def literals(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            yield node
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            for e in node.elts:
                yield from literals(e)
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        if rel.startswith("slurm_hooks/checks/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
            elif isinstance(node, ast.Dict):
                parts = [k for k in node.keys if k is not None]
            elif isinstance(node, ast.Call):
                parts = [*node.args, *(k.value for k in node.keywords)]
            elif isinstance(node, ast.Subscript):
                parts = [node.slice]
            else:
                continue
            out += [f"{rel}:{c.lineno}: {c.value}" for x in parts for c in literals(x)
                    if (rel, c.value) not in NOT_A_CHECK]
    return out


def test_no_module_outside_the_checks_names_a_check():
    """Knowledge about a check lives in its module: no decision, sink, view or entry
    point branches on a check's name (what they need, a check declares: its roles, its
    correlate, its series and explain keys)."""
    assert check_names_outside_the_checks() == []


def test_the_check_name_scan_sees_a_branch(tmp_path):
    """The scan above is not blind: each form it looks for is found."""
    import ast
    # Each form once, then every registered check in a call.
    code = ('if f.check == "gpu": pass\nd = {"fabric": 1}\ng(f, "stuck_tasks")\nx = y["site"]\n'
            'if f.check in ("filesystem", "leftovers"): pass\n'
            + "".join(f"h(check={n!r})\n" for n in registry()
                      if n not in ("gpu", "fabric", "stuck_tasks", "site", "filesystem", "leftovers")))
    seen = set()
    for node in ast.walk(ast.parse(code)):
        for c in ast.walk(node):
            if isinstance(c, ast.Constant) and c.value in registry():
                seen.add(c.value)
    assert seen == set(registry())
    (tmp_path / "slurm_hooks" / "decide").mkdir(parents=True)
    (tmp_path / "slurm_hooks" / "decide" / "probe.py").write_text(code)
    (tmp_path / "slurm_hooks" / "checks").mkdir()
    (tmp_path / "slurm_hooks" / "checks" / "mine.py").write_text(code)     # a check may name checks
    found = check_names_outside_the_checks(tmp_path / "slurm_hooks")
    assert sorted(x.split(": ")[1] for x in found) == sorted(registry())
    assert all(x.startswith("slurm_hooks/decide/probe.py:") for x in found)
    # The exceptions name real words of real modules.
    for (module, word), why in NOT_A_CHECK.items():
        assert f'"{word}"' in (ROOT / module).read_text() and why, module


def test_every_public_check_module_declares_itself(tmp_path):
    """A public module of the checks package that does not declare ORDER and HOOKS
    would be silently left out: each of ours declares both."""
    import os

    from slurm_hooks import checks
    here = os.path.dirname(checks.__file__)
    for p in sorted(os.listdir(here)):
        if p.endswith(".py") and not p.startswith("_"):
            assert checks.declared(os.path.join(here, p)) is not None, p
    stale = tmp_path / "old.py"
    stale.write_text('"""A module an older version left."""\nimport os\n\n\ndef f():\n    pass\n')
    assert checks.declared(str(stale)) is None
