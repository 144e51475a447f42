"""What the file layout alone costs a healthy health check: the import machinery's own
work for each module, before any line of the module runs.

    .venv/bin/python bench/import_floor.py PREFIX [--runs N]

PREFIX is an installed slurm-hooks (packaging/install.sh's layout). The modules a
healthy real run imports are read from `python -X importtime` of
PREFIX/bin/slurm-hooks-healthcheck with the shipped configuration. A tree of empty
modules with the same names, packages and import order is written to a temporary
directory (each a docstring and `from __future__ import annotations`, like ours) and
compiled. Alternated rounds, whole-process wall time:

- the bare interpreter, `python -I -S -c pass`;
- the same importing `os` (every run of ours needs it; the bare interpreter does not
  import it);
- the same importing the empty tree.

The difference of the last two is what the files themselves cost: the most that
merging every module of the healthy path into one could save.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from healthy_ratio import alternate, option, shipped_config


def imported(prefix: Path, tmp: Path) -> list[str]:
    cfg = shipped_config(tmp, "floor")
    env = {"SLURMD_NODENAME": "bench", "SLURM_HOOKS_CONFIG": str(cfg)}
    for _ in range(2):   # the first run parses the file and fills the configuration cache
        subprocess.run([str(prefix / "bin/slurm-hooks-healthcheck")], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    r = subprocess.run([str(prefix / "bin/python"), "-I", "-S", "-X", "importtime",
                        str(prefix / "bin/slurm-hooks-healthcheck")],
                       env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    names = []
    for line in r.stderr.splitlines():
        name = line.rpartition("|")[2].strip()
        if name == "slurm_hooks" or name.startswith("slurm_hooks."):
            names.append(name)
    # importtime prints a module when its import ends: a package after its submodules.
    # Python imports the parents first, in the order their first submodule needs them.
    order: list[str] = []
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix_name = ".".join(parts[:i])
            if prefix_name not in order:
                order.append(prefix_name)
    return order


def empty_tree(root: Path, names: list[str]) -> None:
    packages = {n.rpartition(".")[0] for n in names if "." in n}
    body = '"""An empty module of the same name."""\nfrom __future__ import annotations\n'
    for name in names:
        path = root.joinpath(*name.split("."))
        if name in packages:
            path.mkdir(parents=True, exist_ok=True)
            (path / "__init__.py").write_text(body)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".py").write_text(body)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root)], check=True)


def main() -> None:
    args = sys.argv[1:]
    runs = int(option(args, "--runs", 60))
    prefix = Path(args[0])
    python = str(prefix / "bin/python")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        names = imported(prefix, tmp)
        root = tmp / "tree"
        empty_tree(root, names)
        packages = sum(1 for n in names if (root.joinpath(*n.split(".")) / "__init__.py").exists())
        code = f"import sys; sys.path.insert(0, {str(root)!r}); import os\n" + \
            "".join(f"import {n}\n" for n in names)
        todo = {
            "bare: python -I -S -c pass": [python, "-I", "-S", "-c", "pass"],
            "import os": [python, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(root)!r}); import os"],
            f"import os and {len(names)} empty modules": [python, "-I", "-S", "-c", code],
        }
        wall, _ = alternate({n: (argv, {}) for n, argv in todo.items()}, runs)
        keys = list(todo)
    med = {n: statistics.median(v) for n, v in wall.items()}
    print(f"{runs} alternated rounds; the healthy run imports {len(names)} of our modules "
          f"({packages} packages); median wall ms (min)")
    for name in keys:
        print(f"  {name:40s} {med[name]:6.2f} ({min(wall[name]):5.2f})")
    print(f"  the files alone cost {med[keys[2]] - med[keys[1]]:.2f} ms "
          f"({(med[keys[2]] - med[keys[1]]) / len(names) * 1000:.0f} us a module)")


if __name__ == "__main__":
    main()
