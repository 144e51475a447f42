"""The packages, built and installed for real: the wheel and sdist (`python -m build`),
the Debian package (packaging/build-deb.sh; installed with apt-get as CI does, run the
way slurmd runs it, then purged) and the RPM (packaging/build-rpm.sh; inspected, and
unpacked into a scratch root).

Both packages must pass their distribution's linter, lintian and rpmlint, with only
the reasoned overrides shipped in packaging/: any new warning fails here.

Needs dpkg-buildpackage + debhelper, rpmbuild, lintian, rpmlint, logrotate, man-db,
bash-completion and root: `bash tests/run.sh` installs the tools. Nothing here is
skipped: a missing tool fails with what to run.

Installing the .deb takes over /etc/slurm-hooks, /var/lib/slurm-hooks and
/var/log/slurm-hooks: whatever is there (packaging/install.sh's copy, other tests'
journal) is moved aside first and put back after the purge.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.search(r'^__version__ = "(.+)"$', (ROOT / "slurm_hooks" / "__init__.py").read_text(), re.M).group(1)
SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "slurm_hooks").rglob("*.py")
                 if "__pycache__" not in p.parts)
PROGRAMS = {"slurm-hooks": "slurm_hooks.cli:main",
            "slurm-hooks-healthcheck": "slurm_hooks.cli:healthcheck_main",
            "slurm-hooks-prolog": "slurm_hooks.cli:prolog_main",
            "slurm-hooks-epilog": "slurm_hooks.cli:epilog_main"}
TAKEN_OVER = ("/etc/slurm-hooks", "/var/lib/slurm-hooks", "/var/log/slurm-hooks")
NODE = "pkgtest"          # a node name no test cluster has: nothing real gets drained
# What admins wire into their own tools: man pages, completion, rules and dashboard.
ADMIN_FILES = ("/usr/share/man/man8/slurm-hooks.8.gz", "/usr/share/man/man5/slurm-hooks.yaml.5.gz",
               "/usr/share/bash-completion/completions/slurm-hooks",
               "/usr/share/slurm-hooks/prometheus/slurm-hooks-rules.yml",
               "/usr/share/slurm-hooks/grafana/slurm-hooks.json")
MAN_LINKS = tuple(f"/usr/share/man/man8/{name}.8.gz" for name in PROGRAMS if name != "slurm-hooks")
TIMINGS: dict[str, str] = {}


def need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} not found: install {package} (bash tests/run.sh installs it)")
    return path


def run(argv, timeout=300, check=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, **kw)
    if check and r.returncode != 0:
        pytest.fail(f"{' '.join(map(str, argv))} exited {r.returncode}\n"
                    f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
    return r


def timed(what: str, argv, **kw) -> subprocess.CompletedProcess:
    t = time.monotonic()
    r = run(argv, **kw)
    TIMINGS[what] = f"{time.monotonic() - t:.1f}s"
    return r


def copy_tree(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "*.pyc"))
    return dest


def build_env() -> dict:
    return dict(os.environ, PYTHON=sys.executable)


@pytest.fixture(scope="module", autouse=True)
def report_timings():
    yield
    if TIMINGS:
        print("\npackaging timings: " + ", ".join(f"{k} {v}" for k, v in TIMINGS.items()))


# --- versions -------------------------------------------------------------------------

def test_package_versions_match_the_code():
    changelog = (ROOT / "packaging/debian/changelog").read_text().splitlines()[0]
    assert changelog.startswith(f"slurm-hooks ({VERSION}) "), \
        f"packaging/debian/changelog starts {changelog!r}, slurm_hooks.__version__ is {VERSION}"
    spec = (ROOT / "packaging/rpm/slurm-hooks.spec").read_text()
    assert re.search(rf"^Version:\s+{re.escape(VERSION)}$", spec, re.M), \
        f"packaging/rpm/slurm-hooks.spec Version differs from slurm_hooks.__version__ {VERSION}"
    setup_cfg = (ROOT / "setup.cfg").read_text()
    for name, target in PROGRAMS.items():     # the launchers stage.py writes
        assert re.search(rf"^\s*{re.escape(name)} = {re.escape(target)}$", setup_cfg, re.M), name


def test_stage_refuses_the_fake_pynvml(tmp_path):
    r = run([sys.executable, ROOT / "packaging/stage.py", "--root", tmp_path / "root",
             "--pynvml", ROOT / "tests/fake_nvml/pynvml.py"], check=False)
    assert r.returncode == 1 and "refusing to bundle it" in r.stderr, r.stderr


# --- wheel and sdist --------------------------------------------------------------------

def test_wheel_and_sdist_build(tmp_path):
    try:
        import build  # noqa: F401
    except ImportError:
        pytest.fail(f"{sys.executable} has no 'build' package: pip install '.[test]' (tests/run.sh does)")
    src = copy_tree(tmp_path / "src")
    out = tmp_path / "dist"
    # No --sdist/--wheel: the sdist, then the wheel from the unpacked sdist, which also
    # proves the sdist is complete enough to build from.
    timed("python -m build", [sys.executable, "-m", "build", "--outdir", out, src])
    wheels = list(out.glob("*.whl"))
    sdists = list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(out)
    assert re.fullmatch(rf"slurm[-_]hooks-{re.escape(VERSION)}\.tar\.gz", sdists[0].name)

    with zipfile.ZipFile(wheels[0]) as z:
        names = set(z.namelist())
        missing = [s for s in SOURCES if s not in names]
        assert not missing, f"wheel lacks {missing}"
        assert not [n for n in names if n.endswith(".pyc")]
        ep = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = z.read(ep).decode()
    assert "[console_scripts]" in entry_points
    for name, target in PROGRAMS.items():
        assert re.search(rf"^{re.escape(name)} = {re.escape(target)}$", entry_points, re.M), entry_points

    with tarfile.open(sdists[0]) as t:
        top = sdists[0].name[:-len(".tar.gz")]
        names = {n[len(top) + 1:] for n in t.getnames()}
    for f in ("conf/slurm-hooks.yaml", "packaging/debian/control", "packaging/debian/rules",
              "packaging/rpm/slurm-hooks.spec", "packaging/stage.py", "packaging/slurm-hooks.logrotate",
              "packaging/slurm.conf.example", "packaging/install.sh", "packaging/gendocs.py",
              "packaging/prometheus/slurm-hooks-rules.yml", "packaging/grafana/slurm-hooks.json",
              "packaging/debian/slurm-hooks.lintian-overrides", "packaging/rpm/slurm-hooks.rpmlintrc",
              "packaging/rpm/rpmlint.toml", "tests/fake_nvml/pynvml.py",
              "tests/run.sh", "README.md", "docs/design.md", "docs/testing.md", "BENCHMARKS.md", "setup.cfg", "pyproject.toml", *SOURCES):
        assert f in names, f"sdist lacks {f}"
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]


# --- Debian package -------------------------------------------------------------------

@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    need("dpkg-buildpackage", "dpkg-dev")
    need("dh", "debhelper")
    out = tmp_path_factory.mktemp("deb")
    r = timed("build-deb.sh", ["bash", ROOT / "packaging/build-deb.sh", out], env=build_env())
    path = Path(r.stdout.strip().splitlines()[-1])
    assert path == out / f"slurm-hooks_{VERSION}_all.deb" and path.is_file(), r.stdout
    TIMINGS[".deb size"] = f"{path.stat().st_size // 1024} KiB"
    return path


def deb_listing(deb: Path) -> dict[str, str]:
    """path -> mode string, from `dpkg-deb -c`."""
    out = {}
    for line in run(["dpkg-deb", "-c", deb]).stdout.splitlines():
        fields = line.split()
        out[fields[5][1:].rstrip("/") or "/"] = fields[0]
    return out


def test_deb_contents(deb):
    files = deb_listing(deb)
    for name in PROGRAMS:
        assert files.get(f"/usr/sbin/{name}") == "-rwxr-xr-x", (name, files.get(f"/usr/sbin/{name}"))
    for f in ("/usr/share/slurm-hooks/pynvml.py", "/etc/slurm-hooks/slurm-hooks.yaml",
              "/etc/logrotate.d/slurm-hooks", "/usr/share/doc/slurm-hooks/copyright",
              "/usr/share/doc/slurm-hooks/nvidia-ml-py.LICENSE",
              "/usr/share/doc/slurm-hooks/slurm.conf.example",
              # The README and the reference it links to, by the names its links use.
              "/usr/share/doc/slurm-hooks/README.md", "/usr/share/doc/slurm-hooks/docs/configuration.md",
              "/usr/share/doc/slurm-hooks/SECURITY.md"):
        assert files.get(f) == "-rw-r--r--", (f, files.get(f))
    for f in ADMIN_FILES:
        assert files.get(f) == "-rw-r--r--", (f, files.get(f))
    for f in MAN_LINKS:
        assert files.get(f) == "lrwxrwxrwx", (f, files.get(f))
    assert files.get("/usr/share/lintian/overrides/slurm-hooks") == "-rw-r--r--"
    assert files.get("/usr/bin/slurm-hooks") == "lrwxrwxrwx", "slurm-hooks on every user's PATH"
    lib = sorted(f[len("/usr/share/slurm-hooks/"):] for f in files
                 if f.startswith("/usr/share/slurm-hooks/slurm_hooks/") and not files[f].startswith("d"))
    assert lib == SOURCES, "the package's modules differ from slurm_hooks/*.py (only .py files belong there)"
    assert files["/var/lib/slurm-hooks"] == "drwx------"
    assert files["/var/log/slurm-hooks"] == "drwxr-x---"
    fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Depends"]).stdout
    assert f"Version: {VERSION}\n" in fields and "Architecture: all\n" in fields
    depends = re.search(r"^Depends: (.*)$", fields, re.M).group(1)
    assert {d.strip() for d in depends.split(",")} >= {"python3 (>= 3.9)", "python3-yaml", "python3-psutil"}
    recommends = run(["dpkg-deb", "-f", deb, "Recommends"]).stdout
    assert "python3-clustershell" in {d.strip() for d in recommends.split(",")}, recommends
    assert run(["dpkg-deb", "-I", deb, "conffiles"]).stdout.split() == \
        ["/etc/logrotate.d/slurm-hooks", "/etc/slurm-hooks/slurm-hooks.yaml"]


def test_deb_passes_lintian(deb):
    """No error, warning or info from lintian; the deliberate directory modes are
    overridden with their reasons (packaging/debian/slurm-hooks.lintian-overrides), and
    an override that no longer matches shows as unused-override and fails too."""
    need("lintian", "lintian")
    t = time.monotonic()
    r = run(["lintian", "--fail-on", "error,warning", "--display-info", deb], check=False, timeout=300)
    TIMINGS["lintian"] = f"{time.monotonic() - t:.1f}s"
    tags = [line for line in r.stdout.splitlines() if re.match(r"[EWIXP]: ", line)]
    assert r.returncode == 0 and not tags, f"lintian {deb.name}:\n{r.stdout}{r.stderr}"


def installed(package: str) -> bool:
    r = run(["dpkg-query", "-W", "-f=${Status}", package], check=False)
    return r.returncode == 0 and r.stdout.endswith(" installed")


@pytest.fixture
def taken_over():
    """Move what lives at the package's paths aside; purge the package and put it back."""
    if os.geteuid() != 0:
        pytest.fail("installing the .deb needs root (CI runs as root)")
    need("apt-get", "apt")
    if installed("slurm-hooks"):
        pytest.fail("a slurm-hooks package is already installed here; this test installs and purges "
                    "its own build: apt-get purge slurm-hooks first")
    tag = f".pkgtest-{os.getpid()}"
    moved = []
    for p in TAKEN_OVER:
        if os.path.lexists(p):
            os.rename(p, p + tag)       # a sibling: same filesystem, nothing copied
            moved.append(p)
    try:
        yield
    finally:
        if run(["dpkg-query", "-W", "slurm-hooks"], check=False).returncode == 0:
            run(["dpkg", "--purge", "slurm-hooks"], check=False)     # also after a failure
        for p in TAKEN_OVER:
            if os.path.lexists(p):
                shutil.rmtree(p)        # what the test installed (install.sh, or a failed purge)
            if p in moved:
                os.rename(p + tag, p)


def apt_install(deb: Path) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", str(deb)]
    r = run(argv, check=False, env=env)
    if r.returncode != 0:               # stale or missing package lists
        run(["apt-get", "update", "-qq"], env=env)
        r = run(argv, env=env)


def sbin(name: str, *args, env=None, cwd="/", timeout=60) -> subprocess.CompletedProcess:
    return run([f"/usr/sbin/{name}", *args], env=env if env is not None else {}, cwd=cwd,
               check=False, timeout=timeout)


def journal_records() -> list[dict]:
    with open("/var/log/slurm-hooks/journal.jsonl") as f:
        return [json.loads(line) for line in f]


def test_deb_installs_runs_and_purges(deb, taken_over, tmp_path):
    t = time.monotonic()
    apt_install(deb)
    TIMINGS["apt-get install .deb"] = f"{time.monotonic() - t:.1f}s"

    # dpkg's view: installed, the right version, the configuration file a conffile.
    status = run(["dpkg", "-s", "slurm-hooks"]).stdout
    assert "Status: install ok installed" in status and f"Version: {VERSION}" in status, status
    conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", "slurm-hooks"]).stdout.split()
    assert "/etc/slurm-hooks/slurm-hooks.yaml" in conffiles and "/etc/logrotate.d/slurm-hooks" in conffiles
    assert (Path("/etc/slurm-hooks/slurm-hooks.yaml").read_text()
            == (ROOT / "conf/slurm-hooks.yaml").read_text())
    assert stat.S_IMODE(os.stat("/var/lib/slurm-hooks").st_mode) == 0o700
    assert stat.S_IMODE(os.stat("/var/log/slurm-hooks").st_mode) == 0o750
    # postinst byte-compiled the modules and the bundled pynvml
    assert list(Path("/usr/share/slurm-hooks/slurm_hooks/__pycache__").glob("cli.*.pyc"))
    assert list(Path("/usr/share/slurm-hooks/__pycache__").glob("pynvml.*.pyc"))

    r = sbin("slurm-hooks", "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"slurm-hooks {VERSION}", (r.stdout, r.stderr)

    r = sbin("slurm-hooks", "config", "check")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "/etc/slurm-hooks/slurm-hooks.yaml: OK", (r.stdout, r.stderr)

    r = sbin("slurm-hooks", "check", "--dry-run", env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "(config: /etc/slurm-hooks/slurm-hooks.yaml)" in r.stdout and "result: HEALTHY" in r.stdout, r.stdout

    # What slurmd does: no arguments, no PATH, only SLURMD_NODENAME. -I keeps a planted
    # PYTHONPATH and the current directory out: none of these modules may load.
    evil = tmp_path / "evil"
    evil.mkdir()
    for mod in ("slurm_hooks", "yaml", "pynvml", "psutil"):
        (evil / f"{mod}.py").write_text("raise SystemExit('imported from PYTHONPATH or the cwd')\n")
    before = len(journal_records()) if os.path.exists("/var/log/slurm-hooks/journal.jsonl") else 0
    t = time.monotonic()
    r = sbin("slurm-hooks-healthcheck", env={"SLURMD_NODENAME": NODE}, cwd=evil)
    took = time.monotonic() - t
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"slurm-hooks healthcheck on node {NODE}" in r.stdout and "result: HEALTHY" in r.stdout, r.stdout
    assert took < 30, f"the health check took {took:.1f}s (slurmd kills it at 60)"
    r = sbin("slurm-hooks-healthcheck", env={"SLURMD_NODENAME": NODE, "PYTHONPATH": str(evil),
                                             "PYTHONHOME": str(evil), "PYTHONSTARTUP": str(evil / "yaml.py")})
    assert r.returncode == 0 and "imported from" not in r.stdout + r.stderr, (r.stdout, r.stderr)
    runs = [x for x in journal_records()[before:] if x.get("event") == "run"]
    assert [(x["hook"], x["node"], x["status"]) for x in runs] == [("healthcheck", NODE, "healthy")] * 2, runs
    assert stat.S_IMODE(os.stat("/var/log/slurm-hooks/journal.jsonl").st_mode) == 0o640
    assert os.path.isdir(f"/var/lib/slurm-hooks/{NODE}")

    # An ordinary user: `slurm-hooks` on the PATH (/usr/bin), its read-only commands run,
    # and what needs root says so (rather than failing on a file it cannot read).
    from attacker import unprivileged_user
    assert os.readlink("/usr/bin/slurm-hooks") == "../sbin/slurm-hooks"
    with unprivileged_user("shk-admin") as user:
        r = user.run("slurm-hooks", "--help")
        assert "explain" in r.stdout and "status" in r.stdout, r.stdout
        r = user.run("slurm-hooks", "explain", "--node", NODE, check=False)
        assert r.returncode == 2 and f"cannot read /var/log/slurm-hooks as {user.name}" in r.stderr, r.stderr
        for command in ("healthcheck", "prolog", "epilog", "resume"):
            r = user.run("slurm-hooks", command, check=False)
            assert r.returncode == 2 and f"slurm-hooks {command}: needs root" in r.stderr, (command, r.stderr)
            assert "as any user: status, explain" in r.stderr, r.stderr

    # man finds every program's page and renders it without a warning; the completion
    # loads through bash-completion's own loader and offers the commands and checks.
    need("man", "man-db")
    for name in PROGRAMS:
        r = run(["man", "-w", name], env=dict(os.environ, MANPATH="/usr/share/man"))
        assert r.stdout.strip() == "/usr/share/man/man8/slurm-hooks.8.gz", (name, r.stdout)   # links resolved
    for page in ("slurm-hooks-healthcheck", "slurm-hooks.yaml"):
        r = run(["man", "--warnings", "-P", "cat", page], env=dict(os.environ, MANPATH="/usr/share/man",
                                                                      MANWIDTH="80", LC_ALL="C.UTF-8"))
        assert r.stderr == "" and "slurm-hooks" in r.stdout, r.stderr
    if not os.path.exists("/usr/share/bash-completion/bash_completion"):
        pytest.fail("bash-completion is not installed (bash tests/run.sh installs it)")
    script = ('source /usr/share/bash-completion/bash_completion; __load_completion slurm-hooks; '
              'COMP_WORDS=(slurm-hooks check ""); COMP_CWORD=2; _slurm_hooks; echo "${COMPREPLY[*]}"')
    r = run(["bash", "-c", script])
    assert {"filesystem", "stuck_tasks", "gpu", "--json"} <= set(r.stdout.split()), r.stdout

    # The prolog and epilog launchers, as slurmd starts them for a job.
    for hook in ("prolog", "epilog"):
        r = sbin(f"slurm-hooks-{hook}", env={"SLURMD_NODENAME": NODE, "SLURM_JOB_ID": "4242",
                                            "SLURM_JOB_USER": "nobody", "SLURM_JOB_UID": "65534"})
        assert r.returncode == 0, (hook, r.stdout, r.stderr)

    # The logrotate rule, forced once: a dated copy, a fresh 0640 journal.
    need("logrotate", "logrotate")
    run(["logrotate", "-f", "-s", tmp_path / "logrotate.state", "/etc/logrotate.d/slurm-hooks"])
    rotated = sorted(n for n in os.listdir("/var/log/slurm-hooks") if not n.endswith(".lock"))
    assert re.fullmatch(r"journal\.jsonl-\d{8}", rotated[-1]) and rotated[0] == "journal.jsonl", rotated
    assert stat.S_IMODE(os.stat("/var/log/slurm-hooks/journal.jsonl").st_mode) == 0o640

    # Purge: every file, the byte code, the configuration, state and journal go.
    t = time.monotonic()
    run(["dpkg", "--purge", "slurm-hooks"])
    TIMINGS["dpkg --purge"] = f"{time.monotonic() - t:.1f}s"
    assert not installed("slurm-hooks")
    for p in ("/usr/sbin/slurm-hooks", "/usr/bin/slurm-hooks", "/usr/share/slurm-hooks", "/usr/share/doc/slurm-hooks", *ADMIN_FILES,
              *MAN_LINKS, *TAKEN_OVER):
        assert not os.path.lexists(p), f"{p} left after purge"


# --- install.sh -------------------------------------------------------------------------

def test_install_sh_installs_the_man_pages_and_completion(taken_over, tmp_path):
    """The virtual-environment install, into scratch places: the program, the man pages
    (found by man through MANPATH, rendered without a warning), the completion, the
    rules and the dashboard, the configuration and the private directories."""
    prefix, mandir, completions = tmp_path / "opt", tmp_path / "man", tmp_path / "completions"
    sbindir = tmp_path / "sbin"            # not the host's /usr/local/sbin
    bindir = tmp_path / "bin"              # nor its /usr/local/bin
    env = dict(os.environ, PREFIX=str(prefix), MANDIR=str(mandir), COMPLETIONSDIR=str(completions),
               SBINDIR=str(sbindir), BINDIR=str(bindir))
    r = timed("install.sh", ["bash", ROOT / "packaging/install.sh"], env=env, timeout=600)
    # It names the configuration, created here, and says that actions are off in it.
    assert "configuration /etc/slurm-hooks/slurm-hooks.yaml: created" in r.stderr, r.stderr
    assert "actions off: report-only" in r.stderr, r.stderr
    # The programs on root's PATH, and man pages that name where this install put things.
    for name in PROGRAMS:
        assert os.readlink(sbindir / name) == str(prefix / "bin" / name), name
    # On every user's PATH: the command alone (its read-only commands), not the hooks.
    assert sorted(os.listdir(bindir)) == ["slurm-hooks"] and os.readlink(bindir / "slurm-hooks") == \
        str(prefix / "bin/slurm-hooks")
    page = gzip.decompress((mandir / "man8/slurm-hooks.8.gz").read_bytes()).decode()
    page = page.replace("\\-", "-").replace("\\:", "")         # roff's hyphens and break points
    assert f"HealthCheckProgram={sbindir}/slurm-hooks-healthcheck" in page
    assert f"{prefix}/share/slurm-hooks/prometheus/slurm-hooks-rules.yml" in page and "/usr/sbin/" not in page
    r = run([prefix / "bin/slurm-hooks", "--version"])
    assert r.stdout.strip() == f"slurm-hooks {VERSION}"
    # What diagnose needs, in the same environment (the fanout and stacks extras), and
    # the hints name that environment's own pip.
    run([prefix / "current/bin/python", "-I", "-c", "import ClusterShell.Task"])
    assert os.access(prefix / "current/bin/py-spy", os.X_OK)
    r = run([prefix / "current/bin/python", "-I", "-c",
             "from slurm_hooks.views.fanout import pip_of_this_installation as p; print(p())"])
    assert r.stdout.strip() == f"{prefix}/current/bin/pip"
    # The programs run the environment's python with -I -S: a planted PYTHONPATH, the
    # current directory and the user site stay out, the environment's packages are in.
    [env1] = os.listdir(prefix / "envs")
    assert os.readlink(prefix / "current") == f"envs/{env1}"
    for name in PROGRAMS:
        assert (prefix / "bin" / name).read_text().startswith(f"#!{prefix}/envs/{env1}/bin/python -IS\n"), name
    evil = tmp_path / "evil"
    evil.mkdir()
    for mod in ("slurm_hooks", "yaml", "psutil"):
        (evil / f"{mod}.py").write_text("raise SystemExit('imported from PYTHONPATH or the cwd')\n")
    (tmp_path / "fs").mkdir()
    cfg = tmp_path / "node.yaml"
    cfg.write_text(f"state_dir: {tmp_path}/state\njournal: {tmp_path}/journal.jsonl\n"
                   f"filesystems:\n  - path: {tmp_path}/fs\n")
    node = {"SLURMD_NODENAME": "n1", "SLURM_HOOKS_CONFIG": str(cfg), "PYTHONPATH": str(evil)}
    r = run([prefix / "bin/slurm-hooks", "config", "check"], env=node, cwd=evil)
    assert r.stdout.splitlines()[0] == f"{cfg}: OK"    # read with yaml from the environment
    r = run([prefix / "bin/slurm-hooks-prolog"], env=dict(node, SLURM_JOB_ID="7", SLURM_JOB_UID="0"), cwd=evil)
    assert "slurm-hooks prolog on node n1" in r.stdout and "result: HEALTHY" in r.stdout, r.stdout
    r = run([prefix / "bin/slurm-hooks-healthcheck"], env=node, cwd=evil, check=False)
    assert r.returncode in (0, 1) and "slurm-hooks healthcheck on node n1" in r.stdout, (r.stdout, r.stderr)
    assert "imported from" not in r.stdout + r.stderr
    for name in PROGRAMS:
        r = run(["man", "-w", name], env=dict(os.environ, MANPATH=str(mandir)))
        assert r.stdout.strip() == str(mandir / "man8/slurm-hooks.8.gz"), (name, r.stdout)
    r = run(["man", "--warnings", "-P", "cat", "slurm-hooks.yaml"],
            env=dict(os.environ, MANPATH=str(mandir), MANWIDTH="80", LC_ALL="C.UTF-8"))
    assert r.stderr == "" and "prometheus_textfile_dir" in r.stdout, r.stderr
    assert "complete -F _slurm_hooks slurm-hooks" in (completions / "slurm-hooks").read_text()
    for rel in ("share/slurm-hooks/prometheus/slurm-hooks-rules.yml", "share/slurm-hooks/grafana/slurm-hooks.json"):
        assert (prefix / rel).read_bytes() == (ROOT / "packaging" / rel.split("/", 2)[2]).read_bytes(), rel
    assert Path("/etc/slurm-hooks/slurm-hooks.yaml").read_text() == (ROOT / "conf/slurm-hooks.yaml").read_text()
    assert stat.S_IMODE(os.stat("/var/lib/slurm-hooks").st_mode) == 0o700
    assert stat.S_IMODE(os.stat("/var/log/slurm-hooks").st_mode) == 0o750

    # The upgrade: the installer again, over this copy, while the prolog runs back to back
    # (through root's PATH, as slurmd runs it). Not one prolog run may fail: slurmd would
    # drain the node with `Prolog error`.
    site = Path("/etc/slurm-hooks/slurm-hooks.yaml")
    site.write_text(site.read_text().replace("  report_only: true\n", "  report_only: false\n"))
    prolog = [str(sbindir / "slurm-hooks-prolog"), "--dry-run"]
    loop = subprocess.Popen(
        ["bash", "-c", 'n=0 bad=0; while [ ! -e "$1" ]; do "${@:2}" >/dev/null 2>"$1.err" || '
                       '{ bad=$((bad+1)); cat "$1.err" >&2; }; n=$((n+1)); done; echo "$n $bad"',
         "loop", str(tmp_path / "stop"), *prolog],
        env=dict(node, SLURM_JOB_ID="7", SLURM_JOB_UID="0"), cwd=evil, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1)
        r = timed("install.sh (upgrade)", ["bash", ROOT / "packaging/install.sh"], env=dict(env, EXTRAS=""),
                  timeout=600)
        time.sleep(1)
    finally:
        (tmp_path / "stop").touch()
        out, err = loop.communicate(timeout=120)
    runs, failed = map(int, out.split())
    assert failed == 0 and runs >= 10, (runs, failed, err[-3000:])
    TIMINGS["prolog runs through an upgrade"] = f"{runs}, {failed} failed"
    # The site's file kept, and said so; a new environment, the previous one kept for the
    # runs still in it.
    assert "configuration /etc/slurm-hooks/slurm-hooks.yaml: kept" in r.stderr, r.stderr
    assert "actions ON: it drains" in r.stderr, r.stderr
    assert "report_only: false" in site.read_text()
    env2 = os.readlink(prefix / "current").removeprefix("envs/")
    assert sorted(os.listdir(prefix / "envs")) == sorted([env1, env2]) and env2 != env1
    for name in PROGRAMS:
        assert (prefix / "bin" / name).read_text().startswith(f"#!{prefix}/envs/{env2}/bin/python -IS\n"), name
    assert run([sbindir / "slurm-hooks", "--version"]).stdout.strip() == f"slurm-hooks {VERSION}"
    # One more: the environment before the previous one goes.
    timed("install.sh (second upgrade)", ["bash", ROOT / "packaging/install.sh"], env=dict(env, EXTRAS=""),
          timeout=600)
    env3 = os.readlink(prefix / "current").removeprefix("envs/")
    assert sorted(os.listdir(prefix / "envs")) == sorted([env2, env3]), os.listdir(prefix / "envs")


# --- RPM --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rpm(tmp_path_factory) -> Path:
    need("rpmbuild", "rpm")
    out = tmp_path_factory.mktemp("rpm")
    r = timed("build-rpm.sh", ["bash", ROOT / "packaging/build-rpm.sh", out], env=build_env())
    path = Path(r.stdout.strip().splitlines()[-1])
    assert re.fullmatch(rf"slurm-hooks-{re.escape(VERSION)}-1(\.\w+)?\.noarch\.rpm", path.name), r.stdout
    assert path.parent == out and path.is_file(), r.stdout
    TIMINGS[".rpm size"] = f"{path.stat().st_size // 1024} KiB"
    return path


def rpmq(*args) -> str:
    return run(["rpm", "-q", "-p", *args]).stdout


def test_rpm_metadata(rpm):
    assert rpmq("--qf", "%{NAME} %{VERSION} %{ARCH}", rpm) == f"slurm-hooks {VERSION} noarch"
    requires = rpmq("--requires", rpm).splitlines()
    for req in ("python3 >= 3.9", "python3-pyyaml", "python3-psutil"):
        assert req in requires, requires
    assert "python3-clustershell" in rpmq("--recommends", rpm).split(), "diagnose's fan-out"
    pynvml_version = run([sys.executable, ROOT / "packaging/stage.py", "--print-pynvml"]).stdout.split("\t")[1].strip()
    assert [x for x in rpmq("--provides", rpm).splitlines() if x.startswith("bundled(")] == \
        [f"bundled(python3-nvidia-ml-py) = {pynvml_version}"]
    assert rpmq("-c", rpm).split() == ["/etc/logrotate.d/slurm-hooks", "/etc/slurm-hooks/slurm-hooks.yaml"]
    listing = {}
    for line in rpmq("-lv", rpm).splitlines():
        fields = line.split(" -> ")[0].split()          # a link: "PATH -> TARGET"
        listing[fields[-1]] = fields[0]
    for name in PROGRAMS:
        assert listing.get(f"/usr/sbin/{name}") == "-rwxr-xr-x", name
    assert listing.get("/usr/bin/slurm-hooks", "").startswith("l"), "slurm-hooks on every user's PATH"
    for f in ("/usr/share/slurm-hooks/pynvml.py", "/etc/slurm-hooks/slurm-hooks.yaml", "/etc/logrotate.d/slurm-hooks",
              "/usr/share/doc/slurm-hooks/README.md", "/usr/share/doc/slurm-hooks/slurm.conf.example",
              "/usr/share/doc/slurm-hooks/nvidia-ml-py.LICENSE", "/usr/share/doc/slurm-hooks/docs/configuration.md",
              "/usr/share/doc/slurm-hooks/SECURITY.md"):
        assert listing.get(f) == "-rw-r--r--", (f, listing.get(f))
    for f in ADMIN_FILES:
        assert listing.get(f) == "-rw-r--r--", (f, listing.get(f))
    for f in MAN_LINKS:
        assert listing.get(f, "").startswith("l"), (f, listing.get(f))
    lib = sorted(f[len("/usr/share/slurm-hooks/"):] for f, mode in listing.items()
                 if f.startswith("/usr/share/slurm-hooks/slurm_hooks/") and not mode.startswith("d"))
    assert lib == SOURCES
    assert listing["/var/lib/slurm-hooks"] == "drwx------"
    assert listing["/var/log/slurm-hooks"] == "drwxr-x---"
    assert "/usr/share/doc/slurm-hooks/nvidia-ml-py.LICENSE" in rpmq("-L", rpm).split()
    scripts = rpmq("--scripts", rpm)
    assert "compileall" in scripts and "__pycache__" in scripts


def test_rpm_passes_rpmlint(rpm):
    """No error or warning from rpmlint beyond the filters shipped with their reasons
    (packaging/rpm/slurm-hooks.rpmlintrc; rpmlint.toml says man pages are gzipped, as on EL)."""
    need("rpmlint", "rpmlint")
    r = run(["rpmlint", "-c", ROOT / "packaging/rpm/rpmlint.toml", "-r", ROOT / "packaging/rpm/slurm-hooks.rpmlintrc",
             rpm], check=False, timeout=300)
    tags = [line for line in r.stdout.splitlines() if re.search(r": [EW]: ", line)]
    assert r.returncode == 0 and not tags, f"rpmlint {rpm.name}:\n{r.stdout}{r.stderr}"
    assert re.search(r"\b0 errors, 0 warnings\b", r.stdout), r.stdout
    header = rpmq("--qf", "%{GROUP}|%{URL}|%{PACKAGER}", rpm)
    assert header == "System Environment/Daemons|https://slurm-hooks.invalid/|slurm-hooks developers <dev@slurm-hooks.invalid>", header


def test_rpm_payload_runs(rpm, tmp_path):
    """Unpacked into a scratch root (no scriptlets, no dependencies: this is not EL), the
    payload's modules and bundled pynvml work under /usr/bin/python3 -I."""
    root = tmp_path / "root"
    root.mkdir()
    run(["rpm", "-i", "--nodeps", "--noscripts", "--root", root, "--dbpath", "/.rpmdb", rpm])
    assert stat.S_IMODE(os.stat(root / "var/lib/slurm-hooks").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root / "var/log/slurm-hooks").st_mode) == 0o750
    launcher = (root / "usr/sbin/slurm-hooks-healthcheck").read_text()
    assert launcher.startswith("#!/usr/bin/python3 -I\n")
    assert "sys.path.insert(0, '/usr/share/slurm-hooks')" in launcher
    lib = root / "usr/share/slurm-hooks"
    code = launcher.replace("'/usr/share/slurm-hooks'", repr(str(lib))).replace("healthcheck_main", "main")
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import pynvml, slurm_hooks.cli; "
             "print(pynvml.__file__, slurm_hooks.cli.__file__)")
    r = run(["/usr/bin/python3", "-I", "-c", probe, lib], env={})
    assert r.stdout.split() == [str(lib / "pynvml.py"), str(lib / "slurm_hooks/cli.py")]
    conf = root / "etc/slurm-hooks/slurm-hooks.yaml"
    r = run(["/usr/bin/python3", "-I", "-c", code, "--config", conf, "config", "check"], env={})
    assert r.stdout.splitlines()[0] == f"{conf}: OK"
    r = run(["/usr/bin/python3", "-I", "-c", code, "--version"], env={})
    assert r.stdout.strip() == f"slurm-hooks {VERSION}"


# --- reproducible ---------------------------------------------------------------------

def test_packages_are_reproducible(deb, rpm, tmp_path):
    """A second build of the same tree gives byte-identical packages (file times, build
    time and host come from the changelogs)."""
    for script, first in (("build-deb.sh", deb), ("build-rpm.sh", rpm)):
        r = run(["bash", ROOT / "packaging" / script, tmp_path], env=build_env())
        again = Path(r.stdout.strip().splitlines()[-1])
        assert again.name == first.name
        assert again.read_bytes() == first.read_bytes(), f"{script}: two builds differ"
