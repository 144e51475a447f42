"""The fabric check (InfiniBand and RoCE ports) on sysfs trees laid out as the kernel's
(ib_fixtures.py says where each file's format comes from), a real veth netdev in a
network namespace the test makes for the RoCE part, and, where the host has RDMA
devices, the real /sys. No InfiniBand HCA exists where the suite runs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
import yaml
from helpers import SLURM_HOOKS
from ib_fixtures import Port, hca

from slurm_hooks.checks._config import load_config, loads_config
from slurm_hooks.checks import fabric
from slurm_hooks.core import config
from slurm_hooks.run import engine


@pytest.fixture
def node(tmp_path):
    """Runs the fabric check the way the health check does (state kept between runs)."""
    class Node:
        sysfs = tmp_path / "sys"
        settings: dict = {}

        def cfg(self, **fabric):
            doc = {"node_name": "ib1", "state_dir": str(tmp_path / "state"), "syslog": False,
                   "journal": str(tmp_path / "journal.jsonl"), "prometheus_textfile_dir": None,
                   "host": {"sysfs": str(self.sysfs)}, "fabric": {**self.settings, **fabric}}
            return loads_config(yaml.safe_dump(doc), "test.yaml")

        def run(self, hook="healthcheck", **fabric):
            record = engine.run(self.cfg(**fabric), hook, names=["fabric"])
            return {f.target: f for f in record.findings}

    n = Node()
    n.sysfs.mkdir()
    return n


def test_port_active_since_boot_that_goes_down_fails_resumably_and_heals(node):
    a, b = hca(node.sysfs, 2)
    assert {k: f.status for k, f in node.run().items()} == {"mlx5_0/1": "ok", "mlx5_1/1": "ok"}
    b.set(state=1, phys=2)
    f = node.run()["mlx5_1/1"]
    assert (f.status, f.severity, f.summary) == ("down", "fail", "ib mlx5_1/1 down (Polling, was 400 Gb/s)")
    assert f.resumable and not f.hard and not f.needs_reboot
    assert f.evidence["expected"] == "active since boot"
    b.set()
    assert node.run()["mlx5_1/1"].status == "ok"


def test_a_port_never_active_is_not_expected(node):
    Port(node.sysfs, "mlx5_0").set(state=1, phys=3)
    f = node.run()["mlx5_0/1"]
    assert (f.status, f.severity) == ("unused", "ok") and "not in use (DOWN" in f.summary


def test_configured_ports_must_be_there_and_up(node):
    Port(node.sysfs, "mlx5_0").set(state=2, phys=4)
    found = node.run(ports=["mlx5_0/1", "mlx5_3/1"])
    assert found["mlx5_0/1"].status == "down" and found["mlx5_0/1"].evidence["expected"] == "configured"
    assert "PortConfigurationTraining" in found["mlx5_0/1"].summary
    assert (found["mlx5_3/1"].status, found["mlx5_3/1"].summary) == ("missing", "ib mlx5_3/1 missing")
    # ACTIVE in the port's logical state is not enough while the physical link recovers.
    Port(node.sysfs, "mlx5_1").set(state=4, phys=6)
    f = node.run(ports=["mlx5_1/1"])["mlx5_1/1"]
    assert (f.status, f.summary) == ("down", "ib mlx5_1/1 down (LinkErrorRecovery)")


def test_rate_below_the_expected_warns_or_fails_by_setting(node):
    [p] = hca(node.sysfs, 1)
    node.run()
    p.set(gbps=200)
    f = node.run()["mlx5_0/1"]
    assert (f.status, f.severity, f.summary) == ("slow", "warn", "ib mlx5_0/1 at 200 Gb/s, expected 400 Gb/s")
    assert node.run(slow_rate="fail")["mlx5_0/1"].severity == "fail"
    # A configured rate wins over what was seen.
    assert node.run(rate=100)["mlx5_0/1"].status == "ok"


def test_flaps_count_strikes_in_the_window_and_a_healed_flap_clears(node):
    [p] = hca(node.sysfs, 1)
    node.settings = {"flap_strikes": 3, "flap_window": 60, "flap_recovery": 1.5}
    node.run()
    for n in range(1, 3):
        p.bump("link_downed")
        f = node.run()["mlx5_0/1"]
        assert f.status == "ok" and f.evidence["flaps"] == n
    p.bump("link_downed")
    f = node.run()["mlx5_0/1"]
    assert (f.status, f.severity, f.summary) == ("flapping", "fail", "ib mlx5_0/1 flapping (3 link downs in 1m00s)")
    assert f.resumable
    assert node.run()["mlx5_0/1"].status == "flapping", "no new link down yet, still within recovery"
    time.sleep(1.6)
    f = node.run()["mlx5_0/1"]
    assert (f.status, f.evidence["flaps"]) == ("ok", 0), "healed after flap_recovery without a link down"


def test_a_look_keeps_no_strikes(node):
    [p] = hca(node.sysfs, 1)
    node.run()
    p.bump("link_downed", 5)
    assert node.run("check", flap_strikes=3)["mlx5_0/1"].status == "flapping"
    # `check` committed nothing: the real run still sees 5 new link downs.
    assert node.run(flap_strikes=3)["mlx5_0/1"].evidence["flaps"] == 5


def test_error_counters_growing_past_the_threshold_warn(node):
    [p] = hca(node.sysfs, 1)
    node.run()
    p.bump("symbol_error", 10)
    assert node.run()["mlx5_0/1"].status == "ok", "10 is the threshold, not above it"
    p.bump("symbol_error", 1)
    f = node.run()["mlx5_0/1"]
    assert (f.status, f.severity) == ("errors", "warn")
    assert f.summary.startswith("ib mlx5_0/1 symbol_error +11 in ")
    assert f.evidence["grown"]["symbol_error"]["by"] == 11
    # A reset counter (driver reload, perfquery -R) is a new baseline, not growth.
    p.counter("symbol_error", 0)
    assert node.run()["mlx5_0/1"].status == "ok"
    p.bump("port_rcv_errors", 50)
    assert node.run(error_warn={"port_rcv_errors": 100})["mlx5_0/1"].status == "ok"


def test_growth_after_a_counter_reset_counts_from_the_reset(node):
    """1000 errors, then a reset (perfquery -R, a driver reload), then 30 new ones: 30."""
    [p] = hca(node.sysfs, 1)
    node.settings = {"error_window": 1.2}     # a sample every 0.1 s
    p.counter("symbol_error", 1000)
    node.run()
    time.sleep(0.15)
    p.counter("symbol_error", 0)
    assert node.run()["mlx5_0/1"].status == "ok"
    time.sleep(0.15)
    p.counter("symbol_error", 30)
    f = node.run()["mlx5_0/1"]
    assert f.status == "errors" and f.evidence["grown"]["symbol_error"]["by"] == 30


def test_no_rdma_devices(node):
    assert node.run()["fabric"].status == "not_applicable"
    f = node.run(enabled="true")["fabric"]
    assert (f.status, f.severity, f.summary) == ("missing", "fail", "fabric: no RDMA ports")


def test_a_wedged_sysfs_read_is_a_finding_within_the_deadline(node):
    [p] = hca(node.sysfs, 2)[1:]
    # A FIFO with no writer: open() blocks in the kernel, as a read the HCA never answers.
    (p.dir / "counters" / "symbol_error").unlink()
    os.mkfifo(p.dir / "counters" / "symbol_error")
    t0 = time.monotonic()
    f = node.run(timeout=0.5)["fabric"]
    assert time.monotonic() - t0 < 1.5
    assert (f.status, f.severity) == ("hung", "fail")
    assert f.summary == "ib sysfs hung >0.5s at mlx5_1/1"


def test_port_specs_and_counter_names_are_checked_with_file_and_line(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("fabric:\n  ports:\n    - mlx5_0/1\n    - mlx5_1\n  error_warn:\n    symbol_eror: 5\n")
    with pytest.raises(config.ConfigError) as e:
        load_config(str(p), cache_dir=None)
    assert [line.replace(str(p), "x.yaml") for line in e.value.problems] == [
        "x.yaml:4: fabric.ports[1]: must be DEVICE/PORT as in /sys/class/infiniband (mlx5_0/1), got 'mlx5_1'",
        "x.yaml:6: fabric.error_warn.symbol_eror: not an error counter; known: " + ", ".join(
            sorted(fabric.FABRIC_ERROR_WARN)),
    ]


# --- RoCE: a real netdev ------------------------------------------------------------------

def _ip(*args, netns=None):
    argv = ["/usr/sbin/ip"] + (["-n", netns] if netns else []) + list(args)
    subprocess.run(argv, check=True, capture_output=True, timeout=10)


@pytest.fixture
def veth(tmp_path):
    """A veth pair in a network namespace made here: (netns, our end, its peer)."""
    if not shutil.which("ip"):
        pytest.fail("iproute2's ip is needed for the RoCE test (apt-get install iproute2)")
    ns = f"shk-fabric-{os.getpid()}"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", "roce0", "type", "veth", "peer", "name", "roce0p", netns=ns)
        _ip("link", "set", "roce0", "up", netns=ns)
        _ip("link", "set", "roce0p", "up", netns=ns)
        yield ns, "roce0", "roce0p"
    finally:
        subprocess.run(["/usr/sbin/ip", "netns", "delete", ns], capture_output=True, timeout=10)
    assert ns not in subprocess.run(["/usr/sbin/ip", "netns", "list"], capture_output=True,
                                    text=True, timeout=10).stdout


def test_roce_port_down_when_its_netdev_loses_carrier(tmp_path, veth):
    ns, dev, peer = veth
    sysfs = tmp_path / "sys"
    port = Port(sysfs, "mlx5_0").set(gbps=100, link_layer="Ethernet").roce(dev)
    # class/net/DEV is a symlink in the kernel's tree too; this one leads to the veth,
    # read in the namespace's own sysfs (`ip netns exec` mounts it on /sys).
    (sysfs / "class" / "net").mkdir(parents=True)
    (sysfs / "class" / "net" / dev).symlink_to(f"/sys/class/net/{dev}")
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({
        "node_name": "roce1", "state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
        "syslog": False, "prometheus_textfile_dir": None, "host": {"sysfs": str(sysfs)},
        "fabric": {"ports": [port.key]}}))

    def check():
        r = subprocess.run(["/usr/sbin/ip", "netns", "exec", ns, str(SLURM_HOOKS), "-c", str(conf),
                            "check", "fabric", "--json"], capture_output=True, text=True, timeout=30)
        [f] = [f for c in json.loads(r.stdout)["checks"] for f in c["findings"]]
        assert r.returncode == (1 if f["severity"] == "fail" else 0), (r.returncode, f, r.stderr)
        return f

    f = check()
    assert (f["status"], f["evidence"]["operstate"], f["evidence"]["carrier"]) == ("ok", "up", 1)
    assert f["summary"] == "roce mlx5_0/1 up 100 Gb/s"
    _ip("link", "set", peer, "down", netns=ns)
    f = check()
    assert (f["status"], f["severity"]) == ("down", "fail"), f
    assert f["evidence"]["carrier"] == 0 and f["summary"].startswith(f"roce mlx5_0/1 down ({dev} ")
    _ip("link", "set", peer, "up", netns=ns)
    for _ in range(50):          # carrier comes back asynchronously
        if check()["status"] == "ok":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the port did not come back up with its netdev's carrier")


# --- real hardware ------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.isdir("/sys/class/infiniband"),
                    reason="no RDMA devices here (/sys/class/infiniband absent): real-hardware test only")
def test_real_rdma_ports_are_read_within_the_deadline(tmp_path):
    """On a host with HCAs: every port under /sys is read and judged, none hangs."""
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "journal": str(tmp_path / "j.jsonl"),
                                    "syslog": False, "prometheus_textfile_dir": None}))
    r = subprocess.run([str(SLURM_HOOKS), "-c", str(conf), "check", "fabric", "--json"], capture_output=True,
                       text=True, timeout=30)
    rec = json.loads(r.stdout)
    findings = [f for c in rec["checks"] for f in c["findings"]]
    assert r.returncode == (1 if rec["status"] == "unhealthy" else 0), (r.returncode, rec["status"], r.stderr)
    assert [c["error"] for c in rec["checks"]] == [None], rec["checks"]
    ports = sorted(f"{d}/{p}" for d in os.listdir("/sys/class/infiniband")
                   for p in os.listdir(f"/sys/class/infiniband/{d}/ports"))
    assert sorted(f["target"] for f in findings) == ports
    assert all(f["status"] in ("ok", "unused", "slow", "errors") for f in findings), findings


# --- alert rules, on series real health checks wrote over a fixture tree -------------------

def test_alerts_port_down_flapping_and_errors_rising(tmp_path):
    from promseries import Node, alert, input_series, promtool_test, scrape_labels
    sysfs = tmp_path / "sys"
    flappy, dead, noisy = hca(sysfs, 3)
    node = Node("f1", tmp_path / "f1", {"host": {"sysfs": str(sysfs)},
                                         "filesystems": [{"path": str(tmp_path)}]})
    node.healthcheck()                       # minute 0: all up, seen active since boot
    dead.set(state=1, phys=2)
    noisy.bump("symbol_error", 500)
    for _ in range(3):                       # minutes 1-3: three link downs of mlx5_0
        flappy.bump("link_downed")
        node.healthcheck()
    info = {(s.labels["device"], s.labels["status"]) for s in node.last("slurm_hooks_fabric_port_info")}
    assert info == {("mlx5_0", "flapping"), ("mlx5_1", "down"), ("mlx5_2", "errors")}
    assert [s.value for s in node.last("slurm_hooks_fabric_port_flaps") if s.labels["device"] == "mlx5_0"] == [3]
    assert [s.value for s in node.last("slurm_hooks_fabric_port_up") if s.labels["device"] == "mlx5_1"] == [0]
    errors = {s.labels["counter"]: s.value for s in node.last("slurm_hooks_fabric_port_errors_total")
              if s.labels["device"] == "mlx5_2"}
    # Every error counter of the port, each as read: only the one that rose is not 0.
    assert errors == {"symbol_error": 500, "link_error_recovery": 0, "link_downed": 0, "port_rcv_errors": 0,
                      "port_rcv_remote_physical_errors": 0, "port_rcv_switch_relay_errors": 0,
                      "port_xmit_discards": 0, "port_xmit_constraint_errors": 0, "port_rcv_constraint_errors": 0,
                      "local_link_integrity_errors": 0, "excessive_buffer_overrun_errors": 0,
                      "VL15_dropped": 0}, errors
    history = [(m, snap) for m, snap in enumerate(node.snapshots)]
    port = {"node": "f1", "instance": "f1:9100", "job": "node"}
    assert port == scrape_labels("f1")
    promtool_test(tmp_path, [{
        "interval": "1m", "input_series": input_series(history, "f1", 6),
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "SlurmHooksFabricPortDown",
             "exp_alerts": [alert("SlurmHooksFabricPortDown", "Fabric port mlx5_1/1 down on node f1",
                                  device="mlx5_1", port="1", status="down", **port)]},
            {"eval_time": "5m", "alertname": "SlurmHooksFabricPortFlapping",
             "exp_alerts": [alert("SlurmHooksFabricPortFlapping", "Fabric port mlx5_0/1 flapping on node f1",
                                  device="mlx5_0", port="1", status="flapping", **port)]},
            {"eval_time": "5m", "alertname": "SlurmHooksFabricErrorsRising",
             "exp_alerts": [alert("SlurmHooksFabricErrorsRising",
                                  "Fabric port mlx5_2/1 error counters rising on node f1",
                                  device="mlx5_2", port="1", status="errors", **port)]},
            # Minute 0: everything up, nothing fires.
            {"eval_time": "0m", "alertname": "SlurmHooksFabricPortFlapping", "exp_alerts": []},
        ]}])


def test_explain_shows_the_port_evidence_of_a_fabric_drain(node):
    """`slurm-hooks explain` names what its explain keys say: the port's states and rates."""
    from slurm_hooks.views import explain
    [p] = hca(node.sysfs, 1)
    node.run()
    p.set(state=1, phys=2)
    record = engine.run(node.cfg(), "healthcheck", names=["fabric"]).to_json()
    [f] = record["checks"][0]["findings"]
    record["actions"] = [{"kind": "drain", "node": "ib1", "reason": f["summary"] + " [slurm-hooks]",
                          "outcome": "done"}]
    text = explain.explain([record], "ib1", {"reason": f["summary"] + " [slurm-hooks]", "resumable": True})
    for line in ("ib mlx5_0/1 down (Polling, was 400 Gb/s)", "device: mlx5_0", "state: 1: DOWN",
                 "phys_state: 2: Polling", "expected_rate: 400.0", "expected: active since boot"):
        assert line in text, (line, text)
    assert "auto-resume: yes" in text


def test_expected_ports_and_rate_per_node_group():
    text = ("fabric:\n  rate: 200\nnode_groups:\n  - nodes: gpu[01-04]\n    settings:\n"
            "      fabric: {ports: [mlx5_0/1, mlx5_1/1], rate: 400, slow_rate: fail}\n")
    gpu = loads_config(text, "x.yaml", node="gpu03").fabric
    login = loads_config(text, "x.yaml", node="login1").fabric
    assert (gpu.ports, gpu.rate, gpu.slow_rate) == (["mlx5_0/1", "mlx5_1/1"], 400, "fail")
    assert (login.ports, login.rate, login.slow_rate) == ([], 200, "warn")
