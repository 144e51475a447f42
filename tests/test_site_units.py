"""The site check's rules in the test's own process (checks/site.py): what a drop-in
declares, how its output is read and capped, the listing and the run of one drop-in,
and how each outcome becomes a finding. test_site_checks.py runs the same drop-ins
through the installed program; here every rule is pinned where a change to it shows."""
from __future__ import annotations

import os
import time

import pytest

from slurm_hooks.checks import Context, site
from slurm_hooks.checks._config import default_config as Config
from slurm_hooks.checks.site import SiteCheck, SiteChecksConfig
from slurm_hooks.core.state import StateStore
from slurm_hooks.host.mounts import MountTable, parse_mountinfo
from slurm_hooks.host.runner import DONE, FAILED, HUNG, STILL_HUNG, Outcome, Runner


def script(directory, name, body, mode=0o755, header=""):
    p = directory / name
    p.write_text(f"#!/bin/sh\n{header}\n{body}\n")
    os.chmod(p, mode)
    return str(p)


# --- the pure rules ------------------------------------------------------------------------
def test_cap_keeps_text_at_the_limit_and_marks_a_cut():
    assert site._cap("abc", 3) == "abc"
    assert site._cap("abcd", 3) == "ab…"
    assert site._cap(12345, 4) == "123…"


@pytest.mark.parametrize("name, ok", [("real-check_1", True), ("A9", True), ("", False), ("old.bak", False),
                                      ("a b", False), ("café", False), ("x~", False), ("١٢", False)])
def test_names_follow_run_parts(name, ok):
    assert site._run_parts_name(name) is ok


@pytest.mark.parametrize("head, want", [
    (b"", (("healthcheck",), None, "")),
    (b"#!/bin/sh\necho hi\n", (("healthcheck",), None, "")),
    (b"#!/bin/sh\n# slurm-hooks: hooks=prolog,epilog timeout=5\n", (("prolog", "epilog"), 5.0, "")),
    (b"x = 1  # slurm-hooks: timeout=2.5\n", (("healthcheck",), 2.5, "")),
    (b"# slurm-hooks: hooks=prolog,,healthcheck\n", (("prolog", "healthcheck"), None, "")),
    (b"# slurm-hooks: timeout=55\n", (("healthcheck",), 55.0, "")),
    (b"# slurm-hooks:\n# slurm-hooks: timeout=bad\n", (("healthcheck",), None, "")),
    (b"\xff\xfe # slurm-hooks: timeout=1\n", (("healthcheck",), 1.0, "")),
    (b"# slurm-hooks: hooks=\n", ((), None, "hooks=: each must be one of healthcheck, prolog, epilog")),
    (b"# slurm-hooks: hooks=check\n", ((), None, "hooks=check: each must be one of healthcheck, prolog, epilog")),
    (b"# slurm-hooks: hooks=prolog,proog\n",
     ((), None, "hooks=prolog,proog: each must be one of healthcheck, prolog, epilog")),
    (b"# slurm-hooks: timeout=0\n", ((), None, "timeout=0: must be seconds, above 0 and at most 55")),
    (b"# slurm-hooks: timeout=55.5\n", ((), None, "timeout=55.5: must be seconds, above 0 and at most 55")),
    (b"# slurm-hooks: timeout=-1\n", ((), None, "timeout=-1: must be seconds, above 0 and at most 55")),
    (b"# slurm-hooks: timeout=soon\n", ((), None, "timeout=soon: must be seconds, above 0 and at most 55")),
    (b"# slurm-hooks: hooks=prolog when=now\n", ((), None, "unknown declaration 'when=now'; known: hooks=, timeout=")),
    (b"slurm-hooks: timeout=2\n", (("healthcheck",), 2.0, "")),
    (b"# slurm-hooks: timeout=1=2\n", ((), None, "timeout=1=2: must be seconds, above 0 and at most 55")),
    (b"# slurm-hooks: timeout=1 # slurm-hooks: timeout=2\n", ((), None, "unknown declaration '#'; known: hooks=, timeout=")),
])
def test_a_declaration_is_read_from_the_first_marked_line(head, want):
    assert site.declared(head) == want


def test_json_fields_keep_only_what_a_check_may_set_each_capped():
    doc = {"summary": "s" * 300, "reason": 5, "detail": "d" * 2000, "resumable": "no", "evidence": [1],
           "severity": "ok"}
    assert site._json_fields(doc) == {"summary": "s" * 199 + "…", "detail": "d" * 999 + "…"}
    short = {"summary": "fan", "reason": "no SM", "detail": "timed out", "resumable": False}
    assert site._json_fields(short) == short
    assert site._json_fields({"summary": "x" * 200})["summary"] == "x" * 200
    assert site._json_fields({"detail": "y" * 1000})["detail"] == "y" * 1000


def test_json_evidence_keeps_scalars_and_caps_keys_and_strings():
    ev = {"flag": True, "n": 3, "f": 1.5, "none": None, "s": "x" * 300, "nested": {"a": 1}, "list": [1],
          "k" * 100: 1, "k" * 64: 2}
    assert site._json_fields({"evidence": ev})["evidence"] == {
        "flag": True, "n": 3, "f": 1.5, "none": None, "s": "x" * 199 + "…", "k" * 63 + "…": 1, "k" * 64: 2}
    many = {f"e{i:02}": i for i in range(25)}
    assert site._json_fields({"evidence": many})["evidence"] == {f"e{i:02}": i for i in range(20)}
    assert site._json_fields({"evidence": {}}) == {"evidence": {}}


# --- listing and verifying the drop-ins (a child's work, here called directly) ---------
def test_the_listing_verifies_each_drop_in_and_reads_its_declaration(root_only_dir):
    d = root_only_dir / "checks.d"
    d.mkdir(mode=0o755)
    a = script(d, "a-first", "exit 0", header="# slurm-hooks: hooks=prolog timeout=3")
    b = script(d, "b", "exit 0")
    script(d, "c.bak", "exit 2")
    script(d, "d-plain", "exit 0", mode=0o644)
    loose = script(d, "e-loose", "exit 0", mode=0o775)
    script(d, "f-bad", "exit 0", header="# slurm-hooks: hooks=nope")
    (d / "0-dir").mkdir()
    os.chmod(d / "0-dir", 0o755)
    os.symlink(str(d / "nowhere"), d / "0-dangling")
    others = script(d, "g-others", "exit 0", mode=0o645)     # executable by others alone: it runs
    steps = []
    got = site.list_site_checks(steps.append, str(d))
    assert got == {"entries": [
        {"name": "a-first", "path": a, "hooks": ["prolog"], "timeout": 3.0},
        {"name": "b", "path": b, "hooks": ["healthcheck"], "timeout": None},
        {"name": "e-loose", "path": loose, "refused": f"{loose} is group-writable (mode 0775)"},
        {"name": "f-bad", "path": str(d / "f-bad"),
         "refused": "bad declaration: hooks=nope: each must be one of healthcheck, prolog, epilog"},
        {"name": "g-others", "path": others, "hooks": ["healthcheck"], "timeout": None},
    ]}
    assert steps == ["list", "verify a-first", "verify b", "verify e-loose", "verify f-bad", "verify g-others"]


def test_the_listing_says_when_there_is_no_directory(root_only_dir):
    assert site.list_site_checks(lambda s: None, str(root_only_dir / "absent")) == {"missing": True}
    (root_only_dir / "file").write_text("")
    assert site.list_site_checks(lambda s: None, str(root_only_dir / "file")) == {"not_dir": True}
    os.symlink("loop", root_only_dir / "loop")
    assert site.list_site_checks(lambda s: None, str(root_only_dir / "loop")) == {
        "unreadable": "Too many levels of symbolic links"}


def test_a_scripts_interpreter_must_be_roots_alone(root_only_dir):
    d = root_only_dir / "checks.d"
    d.mkdir(mode=0o755)
    open_dir = root_only_dir / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)       # anyone may replace what lies in it
    interp = open_dir / "sh"
    interp.write_bytes(b"")
    os.chmod(interp, 0o755)
    p = d / "odd"
    p.write_text(f"#!{interp} -e\nexit 0\n")
    os.chmod(p, 0o755)
    [entry] = site.list_site_checks(lambda s: None, str(d))["entries"]
    assert entry["refused"] == f"its interpreter: {open_dir} is world-writable (mode 0777)"
    p.write_text(f"#!{root_only_dir}/absent\nexit 0\n")
    [entry] = site.list_site_checks(lambda s: None, str(d))["entries"]
    assert entry["refused"] == f"its interpreter {root_only_dir}/absent: No such file or directory"
    # "#!" alone names no interpreter, whatever the next line says.
    p.write_text("#!\n/bin/sh\nexit 0\n")
    [entry] = site.list_site_checks(lambda s: None, str(d))["entries"]
    assert entry["refused"] == "its #! line names no interpreter"
    # An interpreter's name that is not UTF-8 is written out, not a crash.
    p.write_bytes(b"#!/usr/bin/\xffsh -e\nexit 0\n")
    [entry] = site.list_site_checks(lambda s: None, str(d))["entries"]
    assert entry["refused"] == "its interpreter /usr/bin/\ufffdsh: No such file or directory"


# --- running one drop-in (a child's work, here called directly) --------------------------
@pytest.fixture
def drop_ins(root_only_dir):
    d = root_only_dir / "checks.d"
    d.mkdir(mode=0o755)
    return d


def run_one(path, timeout=5.0, env=None):
    steps: list[str] = []
    out = site.run_site_check(steps.append, path, timeout, env or {"PATH": site.PATH})
    return out, steps


def test_a_run_reports_exit_first_lines_and_size(drop_ins):
    p = script(drop_ins, "two", "echo ' first '; echo second; echo ' oops ' >&2; echo more >&2; exit 1")
    out, steps = run_one(p)
    assert steps == ["verify", "exec"]
    assert (out["rc"], out["summary"], out["stderr"], out["bytes"], out["cut"], out["timed_out"]) == \
        (1, "first", "oops", len(" first \nsecond\n"), False, False)
    assert "json" not in out and "stuck_start" not in out and out["pid"] > 0 and 0 < out["elapsed"] < 5


def test_a_run_with_no_output_says_nothing(drop_ins):
    out, _ = run_one(script(drop_ins, "quiet", "exit 0"))
    assert (out["rc"], out["summary"], out["stderr"], out["bytes"]) == (0, "", "", 0)


def test_the_environment_given_is_the_programs(drop_ins):
    out, _ = run_one(script(drop_ins, "env", 'echo "$SLURM_HOOKS_HOOK:$SLURM_JOB_ID"'),
                     env={"PATH": site.PATH, "SLURM_HOOKS_HOOK": "prolog", "SLURM_JOB_ID": "7"})
    assert out["summary"] == "prolog:7"


def test_the_first_json_object_line_is_read_and_alone_it_is_the_summary(drop_ins):
    out, _ = run_one(script(drop_ins, "j0", """echo '{"summary": "fan 3", "resumable": false}'; echo plain"""))
    assert (out["summary"], out["json"]) == ("", {"summary": "fan 3", "resumable": False})
    out, _ = run_one(script(drop_ins, "j1", """echo plain; echo '  {"reason": "r"}'; echo '{"reason": "later"}'"""))
    assert (out["summary"], out["json"]) == ("plain", {"reason": "r"})
    # A line that only looks like JSON, or is JSON of another kind, is passed over.
    out, _ = run_one(script(drop_ins, "j2", """echo plain; echo '{not json'; echo '{"detail": "d"}'"""))
    assert out["json"] == {"detail": "d"}
    out, _ = run_one(script(drop_ins, "j3", "echo '{}'"))
    assert (out["summary"], out["json"]) == ("", {})


def test_json_is_looked_for_in_the_first_200_lines_only(drop_ins):
    at = 'i=0; while [ $i -lt {n} ]; do echo line$i; i=$((i+1)); done; echo \'{{"reason": "r"}}\''
    out, _ = run_one(script(drop_ins, "late", at.format(n=200)))
    assert "json" not in out and out["summary"] == "line0"
    out, _ = run_one(script(drop_ins, "in-time", at.format(n=199)))
    assert out["json"] == {"reason": "r"}


def test_a_long_first_line_is_capped_and_a_megabyte_is_cut(drop_ins):
    out, _ = run_one(script(drop_ins, "chatty", "head -c 2097152 /dev/zero | tr '\\0' x; echo; echo y >&2"))
    assert out["summary"] == "x" * 199 + "…" and out["cut"] is True and out["bytes"] >= 1 << 20
    assert out["stderr"] == "y"


def test_a_program_past_its_deadline_is_killed_and_not_remembered_when_it_ends(drop_ins):
    t0 = time.monotonic()
    out, _ = run_one(script(drop_ins, "sleeper", "echo started; exec sleep 100"), timeout=0.3)
    assert out["timed_out"] is True and "stuck_start" not in out and time.monotonic() - t0 < 3
    assert out["summary"] == "started"


def test_a_drop_in_changed_since_the_listing_is_refused_when_run(drop_ins):
    p = script(drop_ins, "changed", "exit 0")
    os.chmod(p, 0o775)
    out, steps = run_one(p)
    assert out == {"refused": f"{p} is group-writable (mode 0775)"} and steps == ["verify"]
    os.chmod(p, 0o644)
    out, _ = run_one(p)
    assert out == {"refused": f"{p}: not executable"}
    os.unlink(p)
    out, _ = run_one(p)
    assert out == {"refused": f"{p}: No such file or directory"}


def test_a_program_executable_by_others_alone_runs(drop_ins):
    out, _ = run_one(script(drop_ins, "others", "echo ran", mode=0o645))
    assert (out["rc"], out["summary"]) == (0, "ran")


def test_what_runs_is_the_file_verified_not_what_the_path_names_now(drop_ins, monkeypatch):
    """The descriptor the verification opened is executed: a file swapped in at the
    path after the check would not run."""
    verified = script(drop_ins, "verified", "echo verified")
    swapped = script(drop_ins, "swapped", "echo swapped")
    real_open = site._open
    monkeypatch.setattr(site, "_open", lambda path, mounts=None: real_open(verified, mounts))
    out, _ = run_one(swapped)
    assert out["summary"] == "verified"


def test_a_program_stuck_in_the_kernel_past_its_deadline_is_named_by_its_start(drop_ins, swallow_mount):
    from slurm_hooks.host.runner import proc_start_time, reap
    p = script(drop_ins, "stuck", f"exec cat {swallow_mount.path}/x")
    out, _ = run_one(p, timeout=0.3)
    try:
        assert out["timed_out"] is True
        st = proc_start_time(out["pid"])
        assert st is not None and st[0] == "D" and out["stuck_start"] == st[1]
    finally:
        swallow_mount.abort()
        deadline = time.monotonic() + 5
        while not reap(out["pid"]) and time.monotonic() < deadline:
            time.sleep(0.01)


def test_a_binary_runs_by_its_descriptor(drop_ins):
    p = drop_ins / "true-bin"
    p.write_bytes(open("/bin/false", "rb").read())
    os.chmod(p, 0o755)
    out, _ = run_one(str(p))
    assert out["rc"] == 1 and out["summary"] == ""


# --- the check: tasks and findings ------------------------------------------------------------
class Answers:
    """The runner's answers laid down by the test: the listing's outcome and each drop-in's."""

    def __init__(self, outcomes):
        self.outcomes, self.ran, self.adopted = outcomes, [], []

    def run(self, tasks):
        self.ran += tasks
        return {t.key: self.outcomes[t.key] for t in tasks}

    def adopt(self, *args):
        self.adopted.append(args)


def ctx_with(runner, directory="/var/lib", hook="check", **cfg):
    # The directory exists (else nothing is listed); its drop-ins are the fake runner's.
    config = Config(site_checks=SiteChecksConfig(dir=str(directory), **cfg))
    return Context(config, "s1", StateStore("/nonexistent"), runner, hook=hook)


def listing(entries, status=DONE, **kw):
    return Outcome(site.SiteCheck.key(site.LISTING), status, value={"entries": entries}, **kw)


def entry(name, hooks=("healthcheck",), timeout=None):
    return {"name": name, "path": f"/etc/slurm-hooks/checks.d/{name}", "hooks": list(hooks), "timeout": timeout}


def test_tasks_follow_the_hook_and_the_shorter_deadline(monkeypatch):
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)            # the test session's own (its ports, say)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURMD_NODENAME", "elsewhere")
    monkeypatch.setenv("HOME", "/root")
    entries = [{"name": "bad", "path": "/x/bad", "refused": "/x/bad is group-writable (mode 0775)"},
               entry("h"), entry("p", ("prolog",), timeout=3.0), entry("both", ("healthcheck", "prolog"), 30.0)]
    r = Answers({site.SiteCheck.key(site.LISTING): listing(entries)})
    check = SiteCheck()
    tasks = check.tasks(ctx_with(r, timeout=10.0))
    env = {"PATH": site.PATH, "LC_ALL": "C", "SLURM_HOOKS_HOOK": "check", "SLURMD_NODENAME": "s1"}
    assert [(t.key, t.args, t.timeout) for t in tasks] == [
        ("site:h", ("/etc/slurm-hooks/checks.d/h", 10.0, env), 12.0),
        ("site:both", ("/etc/slurm-hooks/checks.d/both", 10.0, env), 12.0)]
    assert all(t.func is site.run_site_check for t in tasks)
    [listed] = r.ran[:1]
    assert (listed.key, listed.func, listed.args, listed.timeout) == \
        ("site::list", site.list_site_checks, ("/var/lib",), 5.0)
    [refused] = check._early
    assert (refused.target, refused.status, refused.severity, refused.summary, refused.detail, refused.evidence) == (
        "bad", "refused", "warn", "site check bad refused: /x/bad is group-writable (mode 0775)",
        "not run: root runs site checks, so only root may be able to change them", {"path": "/x/bad"})

    r = Answers({site.SiteCheck.key(site.LISTING): listing(entries)})
    tasks = SiteCheck().tasks(ctx_with(r, hook="prolog", timeout=10.0))
    env = {"PATH": site.PATH, "LC_ALL": "C", "SLURM_HOOKS_HOOK": "prolog", "SLURMD_NODENAME": "s1",
           "SLURM_JOB_ID": "77"}
    assert [(t.key, t.args, t.timeout) for t in tasks] == [
        ("site:p", ("/etc/slurm-hooks/checks.d/p", 3.0, env), 5.0),
        ("site:both", ("/etc/slurm-hooks/checks.d/both", 10.0, env), 12.0)]


def test_a_short_check_deadline_bounds_the_listing_too():
    r = Answers({site.SiteCheck.key(site.LISTING): listing([])})
    assert SiteCheck().tasks(ctx_with(r, timeout=2.0)) == [] and r.ran[0].timeout == 2.0


@pytest.mark.parametrize("fstype, source", [("fuse.gcsfuse", "bucket"), ("nfs4", "srv:/export")])
def test_a_directory_absent_here_on_shared_storage_is_listed_by_a_child(fstype, source):
    """Whether it exists there is the storage's to say, and only a child may ask."""
    r = Answers({"site::list": Outcome("site::list", DONE, value={"missing": True})})
    ctx = ctx_with(r, directory="/shared/absent/checks.d")
    ctx._mounts = MountTable(parse_mountinfo("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
                                             f"50 1 0:50 / /shared rw - {fstype} {source} rw\n"))
    assert SiteCheck().tasks(ctx) == [] and [t.key for t in r.ran] == ["site::list"]


def test_disabled_or_absent_on_a_local_disk_nothing_is_listed(tmp_path):
    r = Answers({})
    assert SiteCheck().tasks(ctx_with(r, enabled="false")) == [] and r.ran == []
    assert SiteCheck().tasks(ctx_with(r, directory=tmp_path / "absent")) == [] and r.ran == []
    r = Answers({site.SiteCheck.key(site.LISTING): Outcome("site::list", DONE, value={"missing": True})})
    check = SiteCheck()
    # Present (a file, even): the listing child says what it is.
    (tmp_path / "present").write_text("")
    assert check.tasks(ctx_with(r, directory=tmp_path / "present")) == [] and len(r.ran) == 1
    assert check.findings(ctx_with(r), {}) == []


@pytest.mark.parametrize("outcome, want", [
    (Outcome("site::list", HUNG, error="no answer in 5s", step="list", pid=9, since=100.0),
     ("hung", "fail", "site checks D hung (at list)", "no answer in 5s", "site::list:hung")),
    (Outcome("site::list", STILL_HUNG, pid=9, since=100.0),
     ("hung", "fail", "site checks D hung (at start)",
      f"still hung since {site._stamp(100.0)} (pid 9 stuck in the kernel): not started again",
      "site::list:still_hung")),
    (Outcome("site::list", FAILED, error="Traceback: boom"),
     ("unknown", "warn", "site checks D could not be listed (at start)", "Traceback: boom",
      "site::list:failed")),
    (Outcome("site::list", DONE, value={"not_dir": True}),
     ("refused", "warn", "site checks D is not a directory", "", None)),
    (Outcome("site::list", DONE, value={"unreadable": "Permission denied"}),
     ("refused", "warn", "site checks D unreadable: Permission denied", "", None)),
])
def test_a_listing_that_fails_is_one_finding(outcome, want, tmp_path):
    d = str(tmp_path)
    r = Answers({"site::list": outcome})
    check = SiteCheck()
    assert check.tasks(ctx_with(r, directory=d)) == []
    [f] = check.findings(ctx_with(r, directory=d), {})
    summary = want[2].replace("D", d, 1)
    assert (f.target, f.status, f.severity, f.summary, f.detail, f.incident, f.evidence) == \
        (d, want[0], want[1], summary, want[3], want[4], {"path": d})


def test_a_hung_listing_is_a_warning_where_the_site_says_so(tmp_path):
    r = Answers({"site::list": Outcome("site::list", HUNG, error="x")})
    check = SiteCheck()
    check.tasks(ctx_with(r, directory=tmp_path, on_hang="warn"))
    assert check.findings(ctx_with(r, on_hang="warn"), {})[0].severity == "warn"


def findings_for(value=None, status=DONE, timeout=None, cfg_timeout=10.0, **kw):
    """The one finding of drop-in `n` whose run ended with `status` and `value`."""
    r = Answers({"site::list": listing([entry("n", timeout=timeout)])})
    check = SiteCheck()
    ctx = ctx_with(r, timeout=cfg_timeout, **kw)
    check.tasks(ctx)
    o = Outcome("site:n", status, value=value, error="child said no", pid=41, since=1000.0)
    [f] = check.findings(ctx, {"site:n": o})
    return f, r


def ran(rc, summary="", **extra):
    return {"rc": rc, "elapsed": 0.1234567, "timed_out": False, "pid": 40, "bytes": 12, "cut": False,
            "summary": summary, "stderr": "", **extra}


@pytest.mark.parametrize("rc, said, status, severity", [
    (0, "all good", "ok", "ok"), (1, "disk 85%", "warning", "warn"), (2, "ECC", "critical", "fail"),
    (3, "cannot tell", "unknown", "warn"), (7, "odd", "unknown", "warn"), (-9, "cut short", "unknown", "warn"),
])
def test_exit_codes_are_read_as_nagios_says(rc, said, status, severity):
    f, _ = findings_for(ran(rc, said))
    tail = " (exit 7: not a Nagios status)" if rc == 7 else ""
    assert (f.check, f.target, f.status, f.severity, f.summary, f.reason, f.incident, f.resumable, f.detail) == \
        ("site", "n", status, severity, f"site n: {said}{tail}", "", f"site:n:{status}", True, "")
    assert f.evidence == {"path": "/etc/slurm-hooks/checks.d/n", "timeout": 10.0, "exit": rc, "output_bytes": 12,
                          "output_cut": False, "elapsed": 0.123457, "stderr": ""}


@pytest.mark.parametrize("rc, said", [(0, "exited 0"), (7, "exited 7 (exit 7: not a Nagios status)"),
                                      (-9, "killed by signal 9"), (None, "no status")])
def test_a_silent_program_is_named_by_how_it_ended(rc, said):
    f, _ = findings_for(ran(rc))
    assert f.summary == f"site n: {said}"
    assert f.status == {0: "ok"}.get(rc, "unknown")


def test_the_json_line_says_summary_reason_detail_evidence_and_resumable():
    j = {"summary": "fan 3 stopped", "reason": "fan 3", "detail": "rpm 0 for 60 s", "resumable": False,
         "evidence": {"rpm": 0, "exit": "theirs"}}
    f, _ = findings_for(ran(2, "plain", json=j, stderr="warn: x"))
    assert (f.summary, f.reason, f.detail, f.resumable, f.severity) == \
        ("site n: fan 3 stopped", "site n: fan 3", "rpm 0 for 60 s", False, "fail")
    assert f.evidence["rpm"] == 0 and f.evidence["exit"] == "theirs" and f.evidence["stderr"] == "warn: x"
    f, _ = findings_for(ran(1, "plain", json={"detail": ""}, stderr="warn: x"))
    assert (f.summary, f.reason, f.detail, f.resumable) == ("site n: plain", "", "warn: x", True)
    f, _ = findings_for(ran(1, "plain", json={"resumable": True}))
    assert f.resumable is True


def test_a_finding_is_capped_for_a_node_reason():
    f, _ = findings_for(ran(2, "s" * 400, stderr="d" * 2000, json={"reason": "r" * 400}))
    assert len(f.summary) == 240 and f.summary.endswith("…") and f.summary.startswith("site n: sss")
    assert len(f.reason) == 240 and f.reason.endswith("…")
    assert f.detail == "d" * 999 + "…"


def test_a_declared_deadline_shorter_than_the_sites_is_kept():
    f, _ = findings_for(ran(0, "fine"), timeout=2.5)
    assert f.evidence["timeout"] == 2.5
    f, _ = findings_for(ran(0, "fine"), timeout=30.0)
    assert f.evidence["timeout"] == 10.0


@pytest.mark.parametrize("on_hang, severity", [("fail", "fail"), ("warn", "warn")])
def test_a_program_killed_at_its_deadline_is_hung(on_hang, severity):
    f, r = findings_for({**ran(-9), "timed_out": True}, on_hang=on_hang)
    assert (f.status, f.severity, f.summary, f.detail, f.incident) == \
        ("hung", severity, "site n hung >10s", "no end within 10s: killed", "site:n:hung")
    assert f.evidence["since"] == 1000.0 and f.evidence["exit"] == -9 and r.adopted == []
    assert f.evidence["path"] == "/etc/slurm-hooks/checks.d/n"


def test_a_program_stuck_in_the_kernel_is_handed_to_the_runner():
    f, r = findings_for({**ran(-9), "timed_out": True, "stuck_start": 555})
    assert f.detail == "no end within 10s: killed; stuck in the kernel, remembered"
    assert r.adopted == [("site:n", 40, 555, 1000.0)]


def test_a_child_past_its_own_deadline_or_still_stuck_is_hung():
    f, _ = findings_for(status=HUNG)
    assert (f.status, f.severity, f.summary, f.detail, f.incident, f.evidence) == (
        "hung", "fail", "site n hung >10s", "child said no", "site:n:hung",
        {"path": "/etc/slurm-hooks/checks.d/n", "timeout": 10.0, "since": 1000.0})
    f, _ = findings_for(status=STILL_HUNG, on_hang="warn")
    assert (f.status, f.severity, f.detail) == (
        "hung", "warn", f"still hung since {site._stamp(1000.0)} (pid 41 stuck in the kernel): not started again")


def test_a_child_that_failed_is_unknown_and_a_refusal_at_run_time_is_refused():
    f, _ = findings_for(status=FAILED)
    assert (f.target, f.status, f.severity, f.summary, f.detail, f.evidence) == (
        "n", "unknown", "warn", "site n could not be run", "child said no",
        {"path": "/etc/slurm-hooks/checks.d/n", "timeout": 10.0})
    f, _ = findings_for({"refused": "/x is group-writable"})
    assert (f.target, f.status, f.severity, f.summary, f.evidence) == (
        "n", "refused", "warn", "site check n refused: /x is group-writable", {"path": "/etc/slurm-hooks/checks.d/n"})


def test_each_drop_in_gets_its_own_finding_in_order():
    names = ["hung", "failed", "refused", "timed-out", "fine"]
    r = Answers({"site::list": listing([entry(n) for n in names])})
    check = SiteCheck()
    ctx = ctx_with(r)
    check.tasks(ctx)
    outcomes = {"site:hung": Outcome("site:hung", HUNG, error="x"), "site:failed": Outcome("site:failed", FAILED),
                "site:refused": Outcome("site:refused", DONE, value={"refused": "no"}),
                "site:timed-out": Outcome("site:timed-out", DONE, value={**ran(-9), "timed_out": True}),
                "site:fine": Outcome("site:fine", DONE, value=ran(0, "fine"))}
    got = [(f.target, f.status, f.evidence["path"]) for f in check.findings(ctx, outcomes)]
    assert got == [(n, s, f"/etc/slurm-hooks/checks.d/{n}") for n, s in
                   zip(names, ["hung", "unknown", "refused", "hung", "ok"])]


def test_a_cut_output_is_said():
    f, _ = findings_for(ran(1, "x", cut=True))
    assert f.evidence["output_cut"] is True


def test_a_finding_without_a_path_says_none():
    f = SiteCheck()._finding("x", "ok", "ok", "x")
    assert f.evidence == {"path": ""}


def test_samples_name_each_drop_in_by_its_verdict_and_time():
    ok, _ = findings_for(ran(0, "fine"))
    hung, _ = findings_for(status=HUNG)
    other = site.SiteCheck()._finding("x", "ok", "ok", "x")
    other.evidence.pop("path")
    assert SiteCheck.samples([other, ok, hung]) == [
        ("slurm_hooks_site_check_status", {"site_check": "n", "status": "ok"}, 1),
        ("slurm_hooks_site_check_duration_seconds", {"site_check": "n"}, 0.123457),
        ("slurm_hooks_site_check_status", {"site_check": "n", "status": "hung"}, 1)]


# --- the whole check, in this process, with the real runner ----------------------------------
def test_the_check_runs_real_drop_ins_through_the_runner(root_only_dir, tmp_path):
    d = root_only_dir / "checks.d"
    d.mkdir(mode=0o755)
    script(d, "fine", "echo fine")
    script(d, "ecc", "echo 'ECC errors'; exit 2")
    script(d, "sleeper", "exec sleep 100", header="# slurm-hooks: timeout=0.3")
    script(d, "job-only", "exit 2", header="# slurm-hooks: hooks=prolog")
    state = StateStore(str(tmp_path / "state"))
    ctx = Context(Config(site_checks=SiteChecksConfig(dir=str(d), timeout=5.0)), "s1", state, Runner(state))
    check = SiteCheck()
    outcomes = ctx.runner.run(check.tasks(ctx))
    got = {f.target: (f.status, f.severity, f.summary) for f in check.findings(ctx, outcomes)}
    assert got == {"fine": ("ok", "ok", "site fine: fine"), "ecc": ("critical", "fail", "site ecc: ECC errors"),
                   "sleeper": ("hung", "fail", "site sleeper hung >0.3s")}
