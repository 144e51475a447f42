"""What the fabric check adds to a healthy health check (targets: +3 ms with no RDMA
devices, +10 ms with 8 ports).

`slurm-hooks healthcheck --dry-run`, whole process, three configurations alternated
round by round, median of RUNS each (default 60):
- `off`: fabric.enabled: false (the baseline);
- `none`: fabric.enabled: auto on a sysfs without class/infiniband (one stat());
- `8 ports`: auto on a fixture tree of 8 single-port HCAs laid out as the kernel's
  (tests/ib_fixtures.py), all ACTIVE at 400 Gb/s, every counter present: the child
  that reads them and the verdicts.
Wall time and CPU time (user + system of the process and its children, the reader
child included) are printed; CPU time is the steadier figure on a shared machine.

Run: SLURM_HOOKS_BIN=/opt/slurm-hooks/bin/slurm-hooks .venv/bin/python bench/fabric.py [RUNS]
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
BIN = Path(os.environ.get("SLURM_HOOKS_BIN") or Path(sys.executable).parent / "slurm-hooks")


def main(runs: int) -> None:
    from ib_fixtures import hca
    with tempfile.TemporaryDirectory() as d:
        empty, ports = Path(d, "sys-empty"), Path(d, "sys-8")
        empty.mkdir()
        hca(ports, 8)
        common = (f"state_dir: {d}/s\njournal: {d}/j\nsyslog: false\nprometheus_textfile_dir: null\n"
                  f"filesystems:\n  - path: {d}\n")
        configs = {"off": "fabric: {enabled: 'false'}\n",
                   "none": f"host: {{sysfs: {empty}}}\n",
                   "8 ports": f"host: {{sysfs: {ports}}}\n"}
        for name, text in configs.items():
            Path(d, f"{name}.yaml").write_text(common + text)
        wall: dict[str, list[float]] = {n: [] for n in configs}
        cpu: dict[str, list[float]] = {n: [] for n in configs}
        for i in range(runs + 3):
            for name in configs:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run([str(BIN), "-c", f"{d}/{name}.yaml", "healthcheck", "--dry-run"],
                               stdout=subprocess.DEVNULL, check=True)
                elapsed = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if i >= 3:          # the first runs fill the configuration cache
                    wall[name].append(elapsed * 1000)
                    cpu[name].append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
        base_w, base_c = statistics.median(wall["off"]), statistics.median(cpu["off"])
        print(f"healthcheck --dry-run, median of {runs} alternated runs each")
        for name, target in (("off", None), ("none", 3), ("8 ports", 10)):
            w, c = statistics.median(wall[name]), statistics.median(cpu[name])
            vs = "" if target is None else f"   {w - base_w:+.1f} ms wall, {c - base_c:+.1f} ms CPU (target +{target} ms)"
            print(f"  fabric {name:8}: wall {w:6.1f} ms (min {min(wall[name]):.1f}), CPU {c:6.1f} ms{vs}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
