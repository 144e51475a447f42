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
    from slurm_hooks.act.actions import LEDGER
    from slurm_hooks.checks import REGISTRY, check_class
    from slurm_hooks.host import runner
    from slurm_hooks.sinks import record as sinks
    names = {n for c in REGISTRY for n in check_class(c).state}
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
    assert looked_at.snapshot() == before
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
    assert n.run("healthcheck")["status"] == "healthy"
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


@pytest.mark.parametrize("name", ["filesystem", "stuck_tasks", "gpu", "leftovers", "fabric", "site"])
def test_check_alone_writes_no_state(world, name):
    """Every registered check, run alone, leaves the state directory as it was (and a
    node never checked before gets no state directory at all)."""
    from slurm_hooks.checks import REGISTRY
    assert sorted(REGISTRY) == sorted(["filesystem", "stuck_tasks", "gpu", "leftovers", "fabric", "site"])
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
    from slurm_hooks.checks import REGISTRY, Check, check_class, for_hook
    from slurm_hooks.core.model import Finding
    for name in REGISTRY:
        cls = check_class(name)
        assert cls.name == name
        for attr in ("state", "series", "explain_keys", "tasks", "findings", "samples"):
            assert hasattr(cls, attr), (name, attr)
        assert all(s.startswith("slurm_hooks_") for s in cls.series), name
        assert cls.samples([]) == []
        f = Finding(name, "x", "ok", "ok", "x")
        assert all(s[0] in cls.series for s in cls.samples([f])), name
        _: Check = cls()            # the Protocol, for the type checker
    assert for_hook("healthcheck") == ["filesystem", "stuck_tasks", "gpu", "fabric", "site"]
    assert for_hook("prolog") == ["filesystem", "gpu", "site"]
    assert for_hook("epilog") == ["filesystem", "leftovers", "gpu", "site"]
    for module in ("sinks/metrics", "views/explain"):
        text = (ROOT / "slurm_hooks" / f"{module}.py").read_text()
        assert not [n for n in REGISTRY if f'== "{n}"' in text or f'"{n}": (' in text], f"{module}.py branches on a check"
