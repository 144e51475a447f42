"""What defining the package's data classes costs at start-up, by kind of class.

    .venv/bin/python bench/classes.py [rounds]

Each variant runs in a fresh `python -I -S` (so module caches do not carry over), in
alternated rounds: importing the standard library's dataclasses module, then defining
25 classes of 6 typed fields (defaults, a default_factory, as in slurm_hooks) as
standard dataclasses (plain, frozen, slots, with a docstring), as slurm_hooks.core.records
classes, and as plain classes; then building 1,000 instances of one of them.
Prints medians in milliseconds.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BODY = '''
class C{i}:
    {doc}a: int
    b: str = ""
    c: float = 0.0
    d: list = field(default_factory=list)
    e: bool = False
    f: str | None = None
'''

DRIVER = r"""
import json, sys, time
sys.path.insert(0, ROOT)
variant = sys.argv[1]
t0 = time.perf_counter()
if variant.startswith("records"):
    from slurm_hooks.core.records import dataclass, field
elif variant != "plain class":
    from dataclasses import dataclass, field
else:
    field = lambda default_factory: None
t1 = time.perf_counter()
deco = {"dataclass": "@dataclass", "dataclass, docstring": "@dataclass",
        "dataclass(frozen=True)": "@dataclass(frozen=True)", "dataclass(slots=True)": "@dataclass(slots=True)",
        "records": "@dataclass", "records(frozen=True)": "@dataclass(frozen=True)", "plain class": ""}[variant]
doc = "'A record.'\n    " if variant == "dataclass, docstring" else ""
src = "".join((deco + "\n" if deco else "") + BODY.format(i=i, doc=doc) for i in range(25))
code = compile(src, "classes", "exec")
g = {"dataclass": globals().get("dataclass"), "field": field}
t2 = time.perf_counter()
exec(code, g)
t3 = time.perf_counter()
C = g["C0"]
if variant == "plain class":
    n = 0.0
else:
    t4 = time.perf_counter()
    for _ in range(1000):
        C(1, "x", d=[])
    n = time.perf_counter() - t4
print(json.dumps({"import": (t1 - t0) * 1000, "define": (t3 - t2) * 1000, "instances": n * 1000}))
"""

VARIANTS = ["dataclass", "dataclass, docstring", "dataclass(frozen=True)", "dataclass(slots=True)",
            "records", "records(frozen=True)", "plain class"]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    code = DRIVER.replace("BODY", repr(BODY)).replace("ROOT", repr(str(ROOT)))
    got: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
    for i in range(rounds + 1):
        for v in VARIANTS[i % len(VARIANTS):] + VARIANTS[:i % len(VARIANTS)]:
            out = subprocess.run([sys.executable, "-I", "-S", "-c", code, v], capture_output=True, text=True,
                                 check=True).stdout
            if i:
                for k, x in json.loads(out).items():
                    got[v].setdefault(k, []).append(x)
    print(f"median of {rounds} fresh interpreters, ms: import of the module, 25 classes defined, "
          "1,000 instances built")
    for v in VARIANTS:
        m = {k: statistics.median(x) for k, x in got[v].items()}
        print(f"  {v:24s} import {m['import']:5.2f}  define {m['define']:6.2f}  instances {m['instances']:5.2f}")


if __name__ == "__main__":
    main()
