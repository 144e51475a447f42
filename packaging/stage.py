#!/usr/bin/env python3
"""Lay out the installed slurm-hooks tree under a root directory.

Used by both package builds (packaging/debian/rules, packaging/rpm/slurm-hooks.spec):

    python3 packaging/stage.py --root DIR [--pynvml PATH] [--pynvml-version V] [--prefix /usr]

Produces, under DIR (PREFIX is /usr by default):

    PREFIX/share/slurm-hooks/slurm_hooks/...   the package (.py files only; private modules
                                               of an architecture-independent package)
    PREFIX/share/slurm-hooks/pynvml.py         bundled nvidia-ml-py (BSD-3-Clause)
    PREFIX/share/slurm-hooks/prometheus/slurm-hooks-rules.yml   alerting rules
    PREFIX/share/slurm-hooks/grafana/slurm-hooks.json           dashboard
    PREFIX/sbin/slurm-hooks{,-healthcheck,-prolog,-epilog}
    PREFIX/bin/slurm-hooks                     a link to sbin's, on every user's PATH
    PREFIX/share/man/man8/slurm-hooks.8.gz     and a link to it for each other program
    PREFIX/share/man/man5/slurm-hooks.yaml.5.gz
    PREFIX/share/bash-completion/completions/slurm-hooks
    etc/slurm-hooks/slurm-hooks.yaml           the default configuration
    etc/logrotate.d/slurm-hooks
    PREFIX/share/doc/slurm-hooks/              README.md, BENCHMARKS.md, SECURITY.md,
                                               slurm.conf.example, nvidia-ml-py.LICENSE,
                                               docs/*.md (the reference the README links to)
    var/lib/slurm-hooks (0700), var/log/slurm-hooks (0750)

The man pages and the completion are generated here (packaging/gendocs.py) from the
argument parser and the configuration table of the tree being packaged.

The launchers run `/usr/bin/python3 -I` (no PYTHON* variables, no user site, not the
current directory: slurmd runs them as root) with PREFIX/share/slurm-hooks first on
sys.path, so they work in HealthCheckProgram's empty environment and never pick up a
pynvml, yaml or slurm_hooks from anywhere a user could write.

    python3 packaging/stage.py --print-pynvml

prints "PATH<TAB>VERSION" of the pynvml module this python would bundle (the build
scripts use it to find the file), or fails saying how to provide one.

Only the standard library is used; output is deterministic (sorted, fixed modes).
"""
from __future__ import annotations

import argparse
import glob
import gzip
import importlib.util
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)  # the source tree: slurm_hooks/, conf/, packaging/, ...

ENTRY_POINTS = {  # keep in step with setup.cfg [options.entry_points]
    "slurm-hooks": "main",
    "slurm-hooks-healthcheck": "healthcheck_main",
    "slurm-hooks-prolog": "prolog_main",
    "slurm-hooks-epilog": "epilog_main",
}
DOCS = ("README.md", "BENCHMARKS.md", "SECURITY.md", "packaging/slurm.conf.example")
# The reference the README links to, kept at the same relative place (docs/NAME.md).
REFERENCE = "docs"
# What admins wire into their own tools, installed beside the code.
MONITORING = {"prometheus/slurm-hooks-rules.yml": "packaging/prometheus/slurm-hooks-rules.yml",
              "grafana/slurm-hooks.json": "packaging/grafana/slurm-hooks.json"}
PYNVML_URL = "https://pypi.org/project/nvidia-ml-py/"

LAUNCHER = """\
#!{python} -I
# {name}: slurm-hooks {version}, installed by the slurm-hooks package.
# -I: no PYTHON* environment variables, no user site, not the current directory.
import sys
sys.path.insert(0, {libdir!r})
from slurm_hooks.cli import exit_now, {func}
exit_now({func}())
"""


class StageError(Exception):
    pass


def version() -> str:
    ns: dict = {}
    with open(os.path.join(SRC, "slurm_hooks", "__init__.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                exec(line, ns)
                return ns["__version__"]
    raise StageError("no __version__ in slurm_hooks/__init__.py")


def find_pynvml() -> str:
    """The file of the pynvml module importable by this python."""
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise StageError(
            f"{sys.executable} cannot import pynvml (NVIDIA's nvidia-ml-py, bundled in the "
            "packages because Debian and EL do not ship it). Install it for this python "
            "(`pip install nvidia-ml-py`), or give the file with --pynvml PATH / "
            "PYNVML=PATH (e.g. .venv/lib/python3*/site-packages/pynvml.py).")
    return spec.origin


def check_pynvml(path: str) -> None:
    if not os.path.isfile(path):
        raise StageError(f"--pynvml {path}: no such file")
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(4096)
    if "NVIDIA Corporation" not in head or "Redistribution and use" not in head:
        raise StageError(
            f"{path} does not look like NVIDIA's nvidia-ml-py pynvml.py (no NVIDIA copyright "
            "and license header); refusing to bundle it (the test stand-in in "
            "tests/fake_nvml must never be packaged)")


def dist_info(path: str) -> str | None:
    """The nvidia_ml_py-*.dist-info next to an installed pynvml.py, if any."""
    found = sorted(glob.glob(os.path.join(os.path.dirname(path), "nvidia_ml_py-*.dist-info")))
    return found[-1] if found else None


def pynvml_version(path: str) -> str:
    di = dist_info(path)
    if di:
        meta = os.path.join(di, "METADATA")
        try:
            with open(meta, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return os.path.basename(di)[len("nvidia_ml_py-"):-len(".dist-info")]
    return "unknown"


def license_text(path: str) -> str:
    """nvidia-ml-py's license: a file in its dist-info when there is one, else the
    license header at the top of pynvml.py (that is where NVIDIA keeps it)."""
    di = dist_info(path)
    if di:
        names = sorted(glob.glob(os.path.join(di, "licenses", "**", "*"), recursive=True)
                       + glob.glob(os.path.join(di, "LICEN[CS]E*"))
                       + glob.glob(os.path.join(di, "COPYING*")))
        for name in names:
            if os.path.isfile(name):
                with open(name, encoding="utf-8", errors="replace") as f:
                    return f.read().rstrip() + "\n"
    lines = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("#"):
                break
            text = line[1:].rstrip()
            if text.strip("#") == "" and text:     # the ##### rulers
                continue
            lines.append(text[1:] if text.startswith(" ") else text)
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if not any("Redistribution" in x for x in lines):
        return "BSD-3-Clause; see the header of pynvml.py and " + PYNVML_URL + "\n"
    return "\n".join(lines) + "\n"


class Stager:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *(p.lstrip("/") for p in parts))

    def mkdir(self, *parts: str, mode: int = 0o755) -> str:
        d = self.path(*parts)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, mode)
        return d

    def write(self, dest: str, data: bytes, mode: int = 0o644) -> None:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = dest + ".stage-tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)

    def symlink(self, target: str, dest: str) -> None:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.lexists(dest):
            os.unlink(dest)
        os.symlink(target, dest)

    def copy(self, src: str, dest: str, mode: int = 0o644) -> None:
        with open(src, "rb") as f:
            self.write(dest, f.read(), mode)


def _gzip(text: str) -> bytes:
    # No name and no time in the header: the same page gives the same bytes.
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def stage(root: str, pynvml: str | None, pynvml_ver: str | None, prefix: str, python: str) -> list[str]:
    ver = version()
    pynvml = os.path.abspath(pynvml) if pynvml else find_pynvml()
    check_pynvml(pynvml)
    pynvml_ver = pynvml_ver or pynvml_version(pynvml)
    s = Stager(root)
    libdir = os.path.join(prefix, "share", "slurm-hooks")
    docdir = os.path.join(prefix, "share", "doc", "slurm-hooks")

    # The package: .py files only, no __pycache__ (postinst / %post byte-compiles).
    pkg_src = os.path.join(SRC, "slurm_hooks")
    dest_pkg = s.path(libdir, "slurm_hooks")
    if os.path.isdir(dest_pkg):
        shutil.rmtree(dest_pkg)     # no stale modules from an earlier staging
    for dirpath, dirnames, filenames in os.walk(pkg_src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        rel = os.path.relpath(dirpath, pkg_src)
        if "__init__.py" not in filenames:
            dirnames[:] = []       # not a package: nothing under it is importable
            continue
        s.mkdir(libdir, "slurm_hooks", rel)
        for name in sorted(filenames):
            if name.endswith(".py"):
                s.copy(os.path.join(dirpath, name), os.path.join(dest_pkg, rel, name))
    s.mkdir(libdir)
    s.copy(pynvml, s.path(libdir, "pynvml.py"))

    for name, func in ENTRY_POINTS.items():
        text = LAUNCHER.format(python=python, name=name, version=ver, libdir=libdir, func=func)
        s.write(s.path(prefix, "sbin", name), text.encode(), 0o755)
    # The read-only commands (status, explain, --help) for every user: /usr/bin is on
    # everyone's PATH, /usr/sbin often only on root's.
    s.mkdir(prefix, "bin")
    s.symlink("../sbin/slurm-hooks", s.path(prefix, "bin", "slurm-hooks"))

    for dest, src in MONITORING.items():
        s.copy(os.path.join(SRC, src), s.path(libdir, dest))

    sys.path.insert(0, HERE)
    import gendocs
    mandir = os.path.join(prefix, "share", "man")
    s.write(s.path(mandir, "man8", "slurm-hooks.8.gz"), _gzip(gendocs.manpage_cli()))
    for name in gendocs.PROGRAMS[1:]:
        s.symlink("slurm-hooks.8.gz", s.path(mandir, "man8", f"{name}.8.gz"))
    s.write(s.path(mandir, "man5", "slurm-hooks.yaml.5.gz"), _gzip(gendocs.manpage_config()))
    s.write(s.path(prefix, "share", "bash-completion", "completions", "slurm-hooks"),
            gendocs.bash_completion().encode())

    s.mkdir("etc", "slurm-hooks")
    s.copy(os.path.join(SRC, "conf", "slurm-hooks.yaml"), s.path("etc", "slurm-hooks", "slurm-hooks.yaml"))
    s.copy(os.path.join(HERE, "slurm-hooks.logrotate"), s.path("etc", "logrotate.d", "slurm-hooks"))

    s.mkdir(docdir)
    for doc in DOCS:
        s.copy(os.path.join(SRC, doc), s.path(docdir, os.path.basename(doc)))
    s.mkdir(docdir, REFERENCE)
    for page in sorted(os.listdir(os.path.join(SRC, REFERENCE))):
        if page.endswith(".md"):
            s.copy(os.path.join(SRC, REFERENCE, page), s.path(docdir, REFERENCE, page))
    notice = (f"nvidia-ml-py {pynvml_ver} ({PYNVML_URL}), NVIDIA's Python bindings for NVML,\n"
              f"is bundled unmodified as {libdir}/pynvml.py (Debian and EL do not package it).\n"
              "License: BSD-3-Clause\n\n" + license_text(pynvml))
    s.write(s.path(docdir, "nvidia-ml-py.LICENSE"), notice.encode())

    s.mkdir("var", "lib", "slurm-hooks", mode=0o700)
    s.mkdir("var", "log", "slurm-hooks", mode=0o750)

    out = []
    for dirpath, dirnames, filenames in os.walk(s.root):
        dirnames.sort()
        out.extend(os.path.join(dirpath, f) for f in sorted(filenames))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", help="directory to lay the installed tree out in (DESTDIR)")
    p.add_argument("--pynvml", default=os.environ.get("PYNVML") or None, metavar="PATH",
                   help="nvidia-ml-py's pynvml.py to bundle (default: $PYNVML, else the pynvml "
                   "this python imports)")
    p.add_argument("--pynvml-version", metavar="V",
                   help="its version, for the notice (default: from its dist-info, else unknown)")
    p.add_argument("--prefix", default="/usr", help="installation prefix (default /usr)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter in the launchers' #! line (default /usr/bin/python3)")
    p.add_argument("--print-pynvml", action="store_true",
                   help="print PATH<TAB>VERSION of the pynvml that would be bundled, and exit")
    args = p.parse_args(argv)
    try:
        if args.print_pynvml:
            path = os.path.abspath(args.pynvml) if args.pynvml else find_pynvml()
            check_pynvml(path)
            print(f"{path}\t{args.pynvml_version or pynvml_version(path)}")
            return 0
        if not args.root:
            p.error("--root is required")
        if not args.prefix.startswith("/"):
            p.error("--prefix must be absolute")
        files = stage(args.root, args.pynvml, args.pynvml_version, args.prefix, args.python)
    except (StageError, OSError) as e:
        print(f"stage.py: error: {e}", file=sys.stderr)
        return 1
    print(f"stage.py: slurm-hooks {version()}: {len(files)} files under {os.path.abspath(args.root)}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
