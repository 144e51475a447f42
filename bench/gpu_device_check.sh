#!/usr/bin/env bash
# The GPU checks that need a real NVIDIA GPU, in one script for a GPU machine: installs
# this tree into the machine's Python (no network), runs the `gpu` tests, prints a real
# report and times the GPU check. Writes logs under $OUT when set.
OUT=${OUT:-/tmp}
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,temperature.gpu,power.draw --format=csv
python3 --version; uname -r
python3 -m pip install -q --no-deps --no-build-isolation --no-index . 2>&1 | tail -2
B=$(dirname $(python3 -c 'import sys; print(sys.executable)'))/slurm-hooks
ls -l $B
timeout 240 python3 -m pytest -q -m gpu -s -p no:cacheprovider -rs tests/test_gpu_real.py 2>&1 | tee $OUT/gpu-tests.log
$B check 2>&1 | tee $OUT/check.txt
$B check --json > $OUT/check.json
python3 - <<'PY' 2>&1 | tee $OUT/timing.txt
import subprocess, time, statistics, sys, os
b = os.path.join(os.path.dirname(sys.executable), "slurm-hooks")
def t(args, n=10):
    xs = []
    for _ in range(n + 2):
        t0 = time.perf_counter(); subprocess.run([b] + args, stdout=subprocess.DEVNULL); xs.append((time.perf_counter() - t0) * 1000)
    xs = xs[2:]
    return f"median {statistics.median(xs):.1f} ms min {min(xs):.1f} max {max(xs):.1f}"
print("check gpu:", t(["check", "gpu"]))
print("healthcheck --dry-run (all checks, GPU present):", t(["healthcheck", "--dry-run"]))
PY
