"""Decisions read codes, never message text.

A program's or a library's words (an exception's str() or args, a command's stderr,
a result's message) change between versions and locales, and a user can put words in
them (a job name, a file name). Only the translators read them, each turning them into
a code once: the Slurm backends (what scontrol, sinfo, squeue, srun and pyslurm say),
the runner (what exec said) and the ssh fan-out (what ssh said). Everywhere else, a comparison, an `in`, a
startswith/endswith or a regular-expression match whose operand is such text is a
decision made on words, and this test names it."""
from __future__ import annotations

import ast

from helpers import ROOT

PACKAGE = ROOT / "slurm_hooks"
# The modules that read a backend's or a program's words and give them a code.
TRANSLATORS = [
    "slurm_hooks/host/runner.py",
    "slurm_hooks/slurm/pyslurm.py",
    "slurm_hooks/slurm/scontrol.py",
    "slurm_hooks/views/fanout.py",
]
# Attributes that hold what a program or an operation said.
TEXT_ATTRIBUTES = {"args", "message", "stderr", "strerror", "error"}
# Calls on text that give text still.
TEXT_METHODS = {"lower", "upper", "casefold", "strip", "lstrip", "rstrip", "replace", "split",
                "splitlines", "partition", "rpartition", "format"}
REGEX_FUNCTIONS = {"match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


class Scope(ast.NodeVisitor):
    """One function (or a module's top level): the names that hold error text, found
    by following assignments until nothing changes, and the places that decide on them."""

    def __init__(self, body: list[ast.stmt], exceptions: set[str]):
        self.body = body
        self.exceptions = set(exceptions)     # names bound by `except ... as NAME`
        self.text: set[str] = set()           # names assigned from error text
        self.found: list[tuple[int, str]] = []

    def own_nodes(self):
        """The nodes of this scope, not of the functions defined inside it."""
        todo = list(self.body)
        while todo:
            node = todo.pop()
            yield node
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    todo.append(child)

    def is_text(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.text
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("str", "repr") and node.args:
                return self.is_exception(node.args[0]) or self.is_text(node.args[0])
            if isinstance(f, ast.Attribute):
                if f.attr == "message" and not node.args:          # CommandResult.message()
                    return True
                if f.attr in TEXT_METHODS:
                    return self.is_text(f.value)
            return False
        if isinstance(node, ast.Attribute):
            if node.attr in TEXT_ATTRIBUTES:
                return True
            return False
        if isinstance(node, ast.Subscript):
            return self.is_text(node.value)
        if isinstance(node, ast.BoolOp):
            return any(self.is_text(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.is_text(node.body) or self.is_text(node.orelse)
        if isinstance(node, ast.JoinedStr):
            return any(isinstance(v, ast.FormattedValue) and (self.is_text(v.value) or self.is_exception(v.value))
                       for v in node.values)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.is_text(node.elt) or any(self.is_text(g.iter) for g in node.generators)
        return False

    def is_exception(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.exceptions

    def holds_text(self, value: ast.AST) -> bool:
        """An assigned value that carries error text: text itself, or a call given it
        (`next(e for e in errors ...)`, `one_line(str(e))`)."""
        if self.is_text(value):
            return True
        if isinstance(value, ast.Call):
            return any(self.holds_text(a) for a in value.args)
        if isinstance(value, ast.GeneratorExp):
            return self.is_text(value.elt) or any(self.is_text(g.iter) for g in value.generators)
        return False

    def follow(self) -> None:
        while True:
            before = len(self.text)
            for node in self.own_nodes():
                if isinstance(node, ast.Assign) and self.holds_text(node.value):
                    self.text |= {t.id for t in node.targets if isinstance(t, ast.Name)}
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None \
                        and self.holds_text(node.value) and isinstance(node.target, ast.Name):
                    self.text.add(node.target.id)
                elif isinstance(node, ast.NamedExpr) and self.holds_text(node.value):
                    self.text.add(node.target.id)
            if len(self.text) == before:
                return

    def decisions(self) -> list[tuple[int, str]]:
        self.follow()
        for node in self.own_nodes():
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                ops = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
                if any(isinstance(op, ops) for op in node.ops) and any(self.is_text(o) for o in operands):
                    self.found.append((node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if f.attr in ("startswith", "endswith") and self.is_text(f.value):
                    self.found.append((node.lineno, ast.unparse(node)))
                elif f.attr in REGEX_FUNCTIONS and any(self.is_text(a) for a in node.args):
                    self.found.append((node.lineno, ast.unparse(node)))
        return self.found


def exception_names(tree: ast.AST) -> set[str]:
    return {h.name for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.name}


def message_decisions(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    names = exception_names(tree)
    scopes = [Scope(tree.body, names)]
    scopes += [Scope(f.body, names) for f in ast.walk(tree)
               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return sorted({d for s in scopes for d in s.decisions()})


def test_no_decision_reads_a_message():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in TRANSLATORS:
            continue
        offenders += [f"{name}:{line}: {text}" for line, text in message_decisions(path.read_text())]
    assert offenders == [], "decisions on message text:\n" + "\n".join(offenders)


def test_the_translators_exist():
    # A translator renamed away would leave an allowlist entry that admits nothing.
    assert [p for p in TRANSLATORS if not (ROOT / p).is_file()] == []


def test_it_sees_each_kind_of_message_decision():
    source = '''
import re
def f(slurm, r, result):
    try:
        slurm.requeue("1")
    except Exception as e:
        if "pending execution" in str(e): pass
        if str(e).lower().startswith("job"): pass
        if e.args[0] == "x": pass
        msg = str(e)
        said = msg.strip()
        if said.endswith("."): pass
        if re.search("RebootProgram", said): pass
    text = r.message()
    if "cannot run" in text: pass
    errors = [ln for ln in r.stderr.splitlines()]
    line = next((x for x in errors if x), "")
    if "denied" in line: pass
    if result.message == "done": pass
'''
    found = [line for line, _ in message_decisions(source)]
    assert found == [7, 8, 9, 12, 13, 15, 18, 19], message_decisions(source)


def test_codes_and_data_are_not_messages():
    source = '''
def f(slurm, r, result, e2):
    try:
        slurm.requeue("1")
    except Exception as e:
        if e.code == "job_pending": pass
        if isinstance(e, OSError) and e.errno == 2: pass
        note = f"refused: {e}"
    if r.rc == 127 or r.stdout.startswith("NodeName="): pass
    if result.code in ("a", "b"): pass
    if "x" in str(e2): pass
'''
    assert message_decisions(source) == []
