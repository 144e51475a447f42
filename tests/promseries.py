"""Real health-check textfiles turned into `promtool test rules` input.

The series a rules test feeds promtool are the ones `slurm-hooks healthcheck` really
wrote: each Node below runs the installed program with its own configuration (node
name, state, journal and textfile directory under a scratch directory) and keeps every
textfile it wrote, parsed with the official Prometheus client. A renamed metric or
label changes these files, and so breaks the rules' tests.

Only time is translated: a run's `*_timestamp_seconds` values are real Unix times, and
promtool's clock starts at 0, so a history places each textfile at a minute of the test
and such a value becomes that minute in seconds (after checking it was a real, current
time). Prometheus adds `instance` and `job` to what it scrapes from node_exporter, and
renames a clashing label of the textfile; so does this.
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from helpers import ROOT, SLURM_HOOKS, KernelLog
from prometheus_client.parser import text_string_to_metric_families

RULES = ROOT / "packaging" / "prometheus" / "slurm-hooks-rules.yml"
SCRAPE_JOB = "node"


@dataclass
class Sample:
    name: str
    labels: dict
    value: float

    def key(self) -> tuple:
        return (self.name, tuple(sorted(self.labels.items())))


def parse(text: str) -> list[Sample]:
    return [Sample(s.name, dict(s.labels), s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples]


@dataclass
class Node:
    """One node's slurm-hooks: its configuration, and the textfiles its runs wrote."""
    name: str
    root: Path
    settings: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    snapshots: list[list[Sample]] = field(default_factory=list)

    def __post_init__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self.textfile_dir = self.root / "textfile"
        self.textfile_dir.mkdir(exist_ok=True)
        self.config = self.root / "slurm-hooks.yaml"
        doc = {"node_name": self.name, "state_dir": str(self.root / "state"),
               "journal": str(self.root / "journal.jsonl"), "syslog": False,
               "prometheus_textfile_dir": str(self.textfile_dir),
               # the node's own kernel log: empty unless a test writes records into it
               "kernel_log": str(KernelLog(self.root / "kmsg")),
               "slurm": {"bin_dir": str(self.root / "no-slurm-here")},
               "stuck_tasks": {"enabled": False}, "gpu": {"enabled": "false"}}
        for key, value in self.settings.items():
            if isinstance(value, dict) and isinstance(doc.get(key), dict):
                doc[key] = {**doc[key], **value}
            else:
                doc[key] = value
        self.config.write_text(yaml.safe_dump(doc))

    def healthcheck(self) -> list[Sample]:
        env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": self.name, **self.env}
        r = subprocess.run([str(SLURM_HOOKS), "-c", str(self.config), "healthcheck"], capture_output=True,
                           text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
        assert r.returncode in (0, 1), f"healthcheck on {self.name}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
        prom = self.textfile_dir / f"slurm_hooks_{self.name}.prom"
        samples = parse(prom.read_text())
        self.snapshots.append(samples)
        return samples

    def last(self, name: str) -> list[Sample]:
        return [s for s in self.snapshots[-1] if s.name == name]


def exported(labels: dict) -> dict:
    """Labels as Prometheus stores them: a scraped label that clashes with a target
    label (`job`, `instance`) is kept as `exported_NAME` (honor_labels: false, the
    default). slurm-hooks writes neither."""
    return {(f"exported_{k}" if k in ("job", "instance") else k): v for k, v in labels.items()}


def input_series(history: list[tuple[int, list[Sample] | None]], node: str, minutes: int) -> list[dict]:
    """promtool input_series for one node.

    history: (minute, samples) in time order: from that minute on, node_exporter serves
    those samples (None: nothing, the textfile is gone); `minutes` is the last minute.
    """
    keys: dict[tuple, Sample] = {}
    for _, samples in history:
        for s in samples or ():
            keys.setdefault(s.key(), s)
    out = []
    for key, first in keys.items():
        values = []
        for minute in range(minutes + 1):
            current = [(m, snap) for m, snap in history if m <= minute]
            at, snap = current[-1] if current else (None, None)
            got = {s.key(): s for s in snap or ()}.get(key)
            if got is None:
                values.append("_")
            elif got.name.endswith("_timestamp_seconds"):
                assert abs(got.value - time.time()) < 120, f"{got.name} is not the time of the run: {got.value}"
                values.append(str(at * 60))
            else:
                values.append(repr(float(got.value)))
        labels = {**exported(first.labels), "instance": f"{node}:9100", "job": SCRAPE_JOB}
        selector = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
        out.append({"series": f"{first.name}{{{selector}}}", "values": " ".join(values)})
    return out


def rule(alertname: str) -> dict:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for r in group["rules"]:
            if r.get("alert") == alertname:
                return r
    raise KeyError(f"{RULES}: no alert {alertname}")


def alert(alertname: str, summary: str, **labels) -> dict:
    """An expected alert: its labels (the rule's own added) and its annotations."""
    r = rule(alertname)
    return {"exp_labels": {**labels, **r.get("labels", {})},
            "exp_annotations": {"summary": summary, "description": r["annotations"]["description"]}}


def scrape_labels(node: str) -> dict:
    return {"node": node, "instance": f"{node}:9100", "job": SCRAPE_JOB}


def promtool_test(tmp_path: Path, tests: list[dict], rules: Path = RULES) -> str:
    """Run `promtool test rules` on these test groups; fail with its output."""
    import shutil
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (bash tests/run.sh does)"
    doc = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "rules-test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    r = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"promtool test rules {path} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout
