"""The Grafana dashboard (packaging/grafana/slurm-hooks.json): valid dashboard JSON,
every query parsed by promtool (as recording rules built from the panels' expressions)
and naming only metrics slurm-hooks writes, evaluated by promtool on series a real
health check wrote."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml
from helpers import ROOT
from promseries import Node, input_series, promtool_test

from slurm_hooks.sinks.metrics import HELP

DASHBOARD = ROOT / "packaging" / "grafana" / "slurm-hooks.json"
# What Grafana puts in place of its variables before the query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h",
                     "$fs_deadline": "10", "$fs_warn_after": "2", "$node": ".*"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                "bool", "offset", "inf", "nan"}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard) -> list[tuple[str, str]]:
    """(where, PromQL as sent to Prometheus) for every panel target."""
    out = []
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            expr = t["expr"]
            for var, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(var, value)
            out.append((f"panel {panel['id']} {panel['title']!r} target {t['refId']}", expr))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, labels or keywords)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)               # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)                          # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)                         # ranges
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or m.group() in PROMQL_WORDS:
            continue                                               # a function or a keyword
        if m.start() > 0 and (expr[m.start() - 1].isdigit() or expr[m.start() - 1] == "."):
            continue                                               # 1e3, 5m
        names.add(m.group())
    return names


def test_is_grafana_dashboard_json(dashboard):
    assert dashboard["title"] == "slurm-hooks" and dashboard["uid"] == "slurm-hooks"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 30
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["node"]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid) and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"stat", "table", "timeseries", "piechart"}, panel["type"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for t in panel["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    # No two panels overlap on the grid.
    cells = {}
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_covers_what_admins_asked_for(dashboard):
    titles = " | ".join(p["title"] for p in dashboard["panels"])
    exprs = " ".join(e for _, e in queries(dashboard))
    for words in ("Healthy nodes", "Nodes with warnings", "Drained by slurm-hooks", "Drained nodes by cause",
                  "Probe latency per path", "Stuck tasks by job", "GPUs failing", "Actions taken",
                  "Fabric ports down", "Fabric error growth", "Link flaps", "Site checks not ok"):
        assert words in titles, words
    assert "vector(10)" in exprs, "the filesystem deadline is drawn on the latency panel"


def test_every_query_names_only_slurm_hooks_metrics(dashboard):
    seen = set()
    for where, expr in queries(dashboard):
        names = metric_names(expr)
        unknown = names - set(HELP)
        assert not unknown, f"{where}: {expr}\n  names metrics slurm-hooks does not write: {unknown}"
        seen |= names
    # Every family the health check writes today is shown somewhere.
    shown = {"slurm_hooks_healthy", "slurm_hooks_drained", "slurm_hooks_check_status",
             "slurm_hooks_check_duration_seconds", "slurm_hooks_filesystem_probe_ok",
             "slurm_hooks_filesystem_probe_latency_seconds", "slurm_hooks_filesystem_probe_info",
             "slurm_hooks_stuck_tasks", "slurm_hooks_gpu_health", "slurm_hooks_run_duration_seconds",
             "slurm_hooks_last_run_timestamp_seconds", "slurm_hooks_last_success_timestamp_seconds",
             "slurm_hooks_actions_total", "slurm_hooks_fabric_port_up", "slurm_hooks_fabric_port_info",
             "slurm_hooks_fabric_port_errors_total", "slurm_hooks_fabric_port_rate_bytes_per_second",
             "slurm_hooks_fabric_port_flaps", "slurm_hooks_site_check_status",
             "slurm_hooks_site_check_duration_seconds"}
    assert shown <= seen, f"not on the dashboard: {shown - seen}"


def test_every_query_parses_with_promtool(dashboard, tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (bash tests/run.sh does)"
    rules = [{"record": f"slurm_hooks_dashboard:panel{i}", "expr": expr}
             for i, (_, expr) in enumerate(queries(dashboard))]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, width=1000))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in r.stdout, r.stdout + r.stderr


def test_queries_give_values_on_real_series(dashboard, tmp_path):
    """On a node whose required mount is missing: the overview counts it failing, the
    failing-probe table lists the path."""
    (tmp_path / "data").mkdir()
    node = Node("d1", tmp_path / "d1", {"filesystems": [{"path": str(tmp_path / "data"),
                                                         "mountpoint": str(tmp_path / "absent")}]})
    node.healthcheck()
    by_title = {p["title"]: p for p in dashboard["panels"]}

    def expr(title, ref="A"):
        t = next(t for t in by_title[title]["targets"] if t["refId"] == ref)
        return dict(queries({"panels": [{**by_title[title], "targets": [t]}]}))[
            f"panel {by_title[title]['id']} {title!r} target {ref}"]
    rules = [("failing", expr("Nodes failing")), ("healthy", expr("Healthy nodes")),
             ("probes", expr("Failing probes"))]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [
        {"record": f"panel:{name}", "expr": e} for name, e in rules]}]}, width=1000))
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series([(0, node.snapshots[-1])], "d1", 5),
        "promql_expr_test": [
            {"expr": "panel:failing", "eval_time": "2m", "exp_samples": [{"labels": "panel:failing", "value": 1}]},
            {"expr": "panel:healthy", "eval_time": "2m", "exp_samples": [{"labels": "panel:healthy", "value": 0}]},
            {"expr": "panel:probes", "eval_time": "2m", "exp_samples": [{
                "labels": f'panel:probes{{instance="d1:9100",job="node",node="d1",'
                          f'path="{tmp_path / "data"}",status="missing"}}', "value": 1}]},
        ]}], rules=path)
