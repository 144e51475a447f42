"""The package's layers: each imports only the layers before it, and no import circle
exists anywhere, counting imports inside functions and those only the type checker
reads. A function-level import is there for start-up cost, never to dodge a cycle:
this test reads every import of every module, wherever it stands."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "slurm_hooks"
# Lowest first. The top package itself (`slurm_hooks`: the version and the library
# directory) imports nothing and may be imported by every layer.
LAYERS = ["core", "host", "slurm", "checks", "decide", "act", "sinks", "views", "run", "cli"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every slurm_hooks module `name` imports, resolved to a module of the package."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                # `from .x import y`: module x.y where y is a submodule, else module x.
                target = f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                if target in known:
                    found.add(target)
    found.discard(name)
    return found


def layer_of(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) == 1:
        return None                        # the top package
    if parts[1] in ("cli", "__main__"):
        return LAYERS.index("cli")
    return LAYERS.index(parts[1])


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports_of(m, p, set(mods)) for m, p in mods.items()}


def test_every_module_belongs_to_a_layer():
    for m in modules():
        parts = m.split(".")
        assert len(parts) == 1 or parts[1] in LAYERS + ["__main__"], f"{m} is in no layer"
    # The top package carries no code that imports anything of ours.
    assert not graph()["slurm_hooks"]


def test_no_import_points_up_a_layer():
    up = []
    for m, targets in graph().items():
        mine = layer_of(m)
        for t in targets:
            theirs = layer_of(t)
            if mine is not None and theirs is not None and theirs > mine:
                up.append(f"{m} imports {t} ({LAYERS[mine]} -> {LAYERS[theirs]})")
    assert not up, "\n".join(sorted(up))


def test_no_import_circle():
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v):                       # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for v in g:
        if v not in index:
            visit(v)
    assert not circles, circles


def test_the_walk_sees_function_level_and_type_only_imports(tmp_path):
    """The walk itself: an import inside a function and one under TYPE_CHECKING count."""
    (tmp_path / "slurm_hooks" / "core").mkdir(parents=True)
    f = tmp_path / "slurm_hooks" / "core" / "x.py"
    f.write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from ..run.engine import run\n"
                 "def g():\n    from ..sinks import journal\n")
    found = imports_of("slurm_hooks.core.x", f, {"slurm_hooks.run.engine", "slurm_hooks.sinks.journal",
                                                  "slurm_hooks.sinks"})
    assert found == {"slurm_hooks.run.engine", "slurm_hooks.sinks.journal"}
