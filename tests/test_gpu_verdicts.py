"""GPU verdicts that agree with NVIDIA's documents: no lost GPU called healthy, no healthy
node drained. NVML is faked at the pynvml boundary (tests/fake_nvml), failing the way the
real library does; the kernel log is a file of kernel-facility records."""
from __future__ import annotations

import copy

import pytest
from test_gpu import hook_run, nvml  # noqa: F401 (a fixture)

from slurm_hooks.core.config import ActionsConfig
from slurm_hooks.core.model import Finding
from slurm_hooks.decide import policy
from slurm_hooks.host import xid


def bad(rec):
    return [(f["severity"], f["summary"]) for f in rec["bad"]]


# --- 1. a GPU not read cleanly is a failure naming the error ----------------------------
@pytest.mark.parametrize("errors,summary", [
    ({"nvmlDeviceGetHandleByIndex": "UNKNOWN"},
     "gpu 3 (0000:3e:00.0) not readable: nvmlDeviceGetHandleByIndex: UNKNOWN (Unknown Error)"),
    ({"*": "UNKNOWN"},
     "gpu 3 (0000:3e:00.0) not readable: nvmlDeviceGetHandleByIndex: UNKNOWN (Unknown Error)"),
    ({"nvmlDeviceGetPowerUsage": "IRQ_ISSUE"},
     "gpu 3 (0000:3e:00.0) not readable: nvmlDeviceGetPowerUsage: IRQ_ISSUE (Interrupt Request Issue)"),
    ({"nvmlDeviceGetTemperature": "INSUFFICIENT_POWER"},
     "gpu 3 (0000:3e:00.0) not readable: nvmlDeviceGetTemperature: INSUFFICIENT_POWER "
     "(Insufficient External Power)"),
    ({"nvmlDeviceGetTotalEccErrors": "CORRUPTED_INFOROM"},
     "gpu 3 (0000:3e:00.0) not readable: nvmlDeviceGetTotalEccErrors: CORRUPTED_INFOROM (Corrupted infoROM)"),
])
def test_a_gpu_not_read_cleanly_fails_naming_the_error(nvml, errors, summary):
    assert nvml.run()["rc"] == 0                 # the inventory learns where gpu 3 sits
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][3]["errors"] = errors
    rec = nvml.run(sc)
    assert rec["rc"] == 1
    assert bad(rec) == [("fail", summary)]
    assert not any("healthy" in f["summary"] for f in rec["findings"])


def test_an_unusable_gpu_frees_its_job_a_degraded_one_does_not(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][3]["errors"] = {"nvmlDeviceGetHandleByIndex": "UNKNOWN"}
    sc["gpus"][4]["errors"] = {"nvmlDeviceGetTotalEccErrors": "CORRUPTED_INFOROM"}
    rec = nvml.run(sc)
    by_gpu = {f["target"].split(" (")[0]: f for f in rec["bad"]}
    assert by_gpu["gpu 3"]["keep_job"] is False and by_gpu["gpu 3"]["needs_reboot"] is True
    assert by_gpu["gpu 4"]["keep_job"] is True and by_gpu["gpu 4"]["needs_reboot"] is False


def test_a_python_error_in_one_query_costs_that_value_only(nvml):
    nvml.run()
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][2]["errors"] = {"nvmlDeviceGetClockInfo": "exception:TypeError"}
    sc["gpus"][3]["errors"] = {"*": "GPU_IS_LOST"}
    rec = nvml.run(sc)
    assert sorted(bad(rec)) == [
        ("fail", "gpu 3 (0000:3e:00.0) lost (NVML: GPU is lost)"),
        ("warn", "gpu 2 (0000:3d:00.0) value not read: gpu 2: nvmlDeviceGetClockInfo: TypeError: "
                 "fake nvmlDeviceGetClockInfo failure")]


def test_nvml_that_cannot_count_the_gpus_fails(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["count_error"] = "UNKNOWN"
    rec = nvml.run(sc)
    assert rec["rc"] == 1
    assert ("fail", "gpu: NVML cannot count the GPUs: UNKNOWN (Unknown Error)") in bad(rec)


# --- 2. drivers older than R510: no _v3 process query --------------------------------------
PRE_R510 = ["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v3",
            "nvmlDeviceGetMemoryInfo_v2"]


def test_a_driver_older_than_r510_is_still_read_gpu_by_gpu(nvml):
    nvml.run()
    sc = copy.deepcopy(nvml.scenario)
    sc.update(driver="470.256.02", missing=PRE_R510)
    sc["gpus"][3]["errors"] = {"*": "GPU_IS_LOST"}
    sc["gpus"][2]["remapped_rows"] = [0, 1, 0, 1]
    rec = nvml.run(sc)
    assert rec["rc"] == 1
    assert sorted(bad(rec)) == [("fail", "gpu 2 (0000:3d:00.0) row remapping failed"),
                                ("fail", "gpu 3 (0000:3e:00.0) lost (NVML: GPU is lost)")]


def test_processes_are_listed_by_the_older_query(nvml):
    import os
    sc = copy.deepcopy(nvml.scenario)
    sc.update(driver="470.256.02", missing=PRE_R510)
    sc["gpus"][1]["processes"] = [[os.getpid(), 1 << 30]]
    rec = hook_run(nvml, "prolog", sc, gpus="1")
    assert [f["summary"] for f in rec["bad"]] == \
        [f"gpu 1 (0000:3c:00.0) still in use by pid {os.getpid()} before job 900 starts"]


# --- 3. MIG: Xids naming a GPU instance -------------------------------------------------------
def test_xid_on_a_mig_gpu_counts(nvml):
    nvml.kernel.write("NVRM: Xid (PCI:0000:3c:00 GPU-I:05): 48, pid=2407, name=python3, "
                      "DBE (double bit error) ECC error")
    rec = nvml.run()
    [f] = [f for f in rec["findings"] if f["status"].startswith("xid_")]
    assert (f["severity"], f["summary"]) == \
        ("fail", "gpu 1 (0000:3c:00.0) Xid 48 in GPU instance 5: double-bit ECC error")
    assert f["evidence"]["gpu_instance"] == 5


def test_mig_xid_lines_match_only_anchored_kernel_records():
    from slurm_hooks.host import kmsg
    line = "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=2407, name=python3, Contained: SM (0x1). RST: No"
    records = [
        kmsg.parse_record(f"4,1,10,-;{line}".encode()),                         # the driver's
        kmsg.parse_record(f"12,2,10,-;{line}".encode()),                        # a user's write
        kmsg.parse_record(f"6,3,10,-;python3[9]: segfault at 0 ip 0 sp 0 error 4 in {line}[7f+1]".encode()),
    ]
    found = [(r.seq, xid.from_match(m)) for r, m in kmsg.match(records, "xid")]
    assert [(seq, ev["xid"], ev["pci"], ev["gpu_instance"]) for seq, ev in found] == [(1, 94, "0000:01:00.0", 5)]


# --- 4. Xids the catalogue resolves with a GPU reset, and NVML's recovery action -----------
@pytest.mark.parametrize("n", [46, 109, 110, 136, 143, 155, 156, 158, 144, 145, 146, 149, 150])
def test_reset_class_xids_drain(nvml, n):
    nvml.kernel.write(f"NVRM: Xid (PCI:0000:3d:00): {n}, pid=1, name=python, details")
    rec = nvml.run()
    [f] = [f for f in rec["findings"] if f["status"].startswith("xid_")]
    assert f["severity"] == "fail" and f["needs_reboot"] is True and rec["rc"] == 1, f["summary"]


@pytest.mark.parametrize("n", [147, 148])
def test_nvlink5_xids_the_catalogue_ignores_warn(nvml, n):
    nvml.kernel.write(f"NVRM: Xid (PCI:0000:3d:00): {n}, pid=1, name=python, details")
    rec = nvml.run()
    assert [f["severity"] for f in rec["findings"] if f["status"].startswith("xid_")] == ["warn"]
    assert rec["rc"] == 0


def test_the_drivers_recovery_action_decides_for_linked_xids(nvml):
    nvml.run()
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][2]["recovery_action"] = 0          # the driver says: nothing to do
    sc["gpus"][3]["recovery_action"] = 1          # the driver says: reset the GPU
    nvml.kernel.write("NVRM: Xid (PCI:0000:3d:00): 145, pid=1, name=python, RLW_REMAP 0x1",
                      "NVRM: Xid (PCI:0000:3e:00): 48, pid=1, name=python, DBE")
    rec = nvml.run(sc)
    xids = {f["evidence"]["xid"]: f for f in rec["findings"] if f["status"].startswith("xid_")}
    assert xids[145]["severity"] == "warn" and "the driver asks for no recovery" in xids[145]["summary"]
    assert xids[48]["severity"] == "ok" and xids[48]["status"] == "xid_record"
    assert bad(rec) == [("fail", "gpu 3 (0000:3e:00.0) driver asks for recovery: gpu_reset: Xid 48"),
                        ("warn", "gpu 2 (0000:3d:00.0) Xid 145: NVLink5 RLW error (the driver asks for no recovery)")]


def test_a_recovery_action_in_another_value_type_is_read(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][3].update(recovery_action=2, recovery_value_type=3)     # unsigned long long
    rec = nvml.run(sc)
    assert bad(rec) == [("fail", "gpu 3 (0000:3e:00.0) driver asks for recovery: node_reboot")]


def test_a_recovery_action_field_that_fails_is_named(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][3].update(recovery_action=0, recovery_return="UNKNOWN")
    rec = nvml.run(sc)
    assert bad(rec) == [("fail", "gpu 3 (0000:3e:00.0) not readable: nvmlDeviceGetFieldValues: "
                                 "UNKNOWN (Unknown Error)")]


# --- 5. NVLink down, replay and recovery errors --------------------------------------------
def test_nvlink_down_fails(nvml):
    sc = copy.deepcopy(nvml.scenario)
    for g in sc["gpus"]:
        g["nvlink_links"] = 4
    sc["gpus"][5]["nvlink_down"] = [2]
    rec = nvml.run(sc)
    assert rec["rc"] == 1 and bad(rec) == [("fail", "gpu 5 (0000:40:00.0) NVLink 2 down (3 up)")]


@pytest.mark.parametrize("counter", ["replay", "recovery"])
def test_any_nvlink_replay_or_recovery_error_growth_fails(nvml, counter):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][1].update(nvlink_links=2, nvlink_errors={counter: 5})
    assert nvml.run(sc)["bad"] == []
    sc["gpus"][1]["nvlink_errors"] = {counter: 6}          # one more on one of two links: +2
    rec = nvml.run(sc)
    assert bad(rec) == [("fail", f"gpu 1 (0000:3c:00.0) NVLink {counter} errors +2 since the last run")]


# --- 6. Xids the catalogue says to ignore, restart the application for, or read as info ---
@pytest.mark.parametrize("n,severity", [(63, "ok"), (94, "ok"), (154, "ok"), (92, "warn"), (121, "warn"),
                                        (61, "warn")])
def test_informational_xids_drain_nothing(nvml, n, severity):
    nvml.kernel.write(f"NVRM: Xid (PCI:0000:3b:00): {n}, pid=1, name=python, details")
    rec = nvml.run()
    [f] = [f for f in rec["findings"] if f["status"].startswith("xid_")]
    assert f["severity"] == severity and f["needs_reboot"] is False and rec["rc"] == 0


def test_mig_contained_error_is_the_applications(nvml):
    nvml.kernel.write("NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 94, pid=2407, name=python3, "
                      "Contained: SM (0x1). RST: No, D-RST: No")
    rec = nvml.run()
    [f] = [f for f in rec["findings"] if f["status"].startswith("xid_")]
    assert f["status"] == "xid_record" and rec["rc"] == 0


# --- 7. running work may finish: drain, job left alone --------------------------------------
@pytest.mark.parametrize("change,status", [
    ({"remapped_rows": [0, 1, 1, 0]}, "remap_pending"),
    ({"retired_pending": 1}, "retired_pages_pending"),
    ({"ecc_uncorrected": 2}, "ecc"),
    ({"recovery_action": 4}, "recovery_action"),
])
def test_memory_errors_drain_but_let_the_job_finish(nvml, change, status):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][3].update(change)
    rec = nvml.run(sc)
    [f] = rec["bad"]
    assert (f["status"], f["severity"], f["keep_job"], f["needs_reboot"]) == (status, "fail", True, True)
    # Policy with the job attached: drain and reboot ASAP (which waits for the job); no
    # comment, no requeue.
    finding = Finding(**{k: v for k, v in f.items()})
    finding.job = "4242"
    kinds = [a.kind for a in policy.decide([finding], "gpunode", "slurm-hooks:", ActionsConfig())]
    assert kinds == ["drain", "reboot"]


def test_policy_still_requeues_a_job_whose_gpu_is_lost():
    f = Finding("gpu", "gpu 3", "lost", "fail", "gpu 3 lost", job="4242", incident="gpu:x:lost",
                needs_reboot=True, hard=True, resumable=False)
    kinds = [a.kind for a in policy.decide([f], "gpunode", "slurm-hooks:", ActionsConfig())]
    assert kinds == ["drain", "comment", "requeue"]


# --- 10. DRAIN_P2P: quiesce and ask again ---------------------------------------------------
def test_drain_p2p_is_resumable_and_asked_again(nvml):
    sc = copy.deepcopy(nvml.scenario)
    sc["gpus"][6]["recovery_action"] = 3
    rec = nvml.run(sc)
    [f] = rec["bad"]
    assert f["summary"] == "gpu 6 (0000:41:00.0) driver asks to quiesce peer-to-peer traffic (drain_p2p)"
    assert (f["resumable"], f["needs_reboot"], f["keep_job"]) == (True, False, False)
    sc["gpus"][6]["recovery_action"] = 0                 # drained: the driver clears it
    assert nvml.run(sc)["bad"] == []


def test_xid_table_classes_are_known():
    for n, entry in xid.TABLE.items():
        assert entry.cls in (xid.DRAIN, xid.RECORD, xid.WARN), n
        assert entry.bucket, n



# --- 8. idle while busy: never a failure alone ----------------------------------------------
def test_an_idle_gpu_alone_never_fails_joined_to_a_stuck_task_it_does():
    from slurm_hooks.decide.correlate import correlate

    def idle(severity):
        return Finding("gpu", "gpu 0 (0000:3b:00.0)", "idle_while_busy", severity,
                       "gpu 0 (0000:3b:00.0) idle (0%, 70W) for 1200s while 7 other GPU(s) of job 7 are busy",
                       evidence={"pids": [4242], "busy": list(range(1, 8)), "seconds": 1200.0}, job="7")
    [alone] = correlate([idle("fail")])
    assert alone.severity == "warn"
    stuck = Finding("stuck_tasks", "pid 4242", "stuck", "warn", "job 7 rank 0 pid 4242 stuck 612s in write()",
                    evidence={"pid": 4242}, job="7")
    [joined] = correlate([stuck, idle("ok")])       # the idle GPU's window is not even over
    assert joined is stuck and joined.severity == "fail"
    assert joined.summary.endswith("; gpu 0 (0000:3b:00.0) idles because of it while 7 other GPU(s) of job 7 "
                                   "are busy (the GPU is not the fault)")
