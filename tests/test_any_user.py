"""`slurm-hooks` as an ordinary user: the read-only commands run where the files they read
allow it, and the rest says it needs root (README, Requirements)."""
from __future__ import annotations

import json
import shutil
import time

from attacker import unprivileged_user
from helpers import ROOT

# The distribution's python, as the packages' /usr/bin/slurm-hooks runs it.
RUN = "import sys; sys.path.insert(0, sys.argv[1]); from slurm_hooks.cli import main; sys.exit(main(sys.argv[2:]))"


def test_an_ordinary_user_reads_what_it_may_and_is_told_what_needs_root():
    with unprivileged_user("shk-reader") as user:
        lib = user.base / "lib"
        shutil.copytree(ROOT / "slurm_hooks", lib / "slurm_hooks", ignore=shutil.ignore_patterns("__pycache__"))
        log, state = user.base / "log", user.base / "state"
        log.mkdir(mode=0o750)
        (state / "n1").mkdir(parents=True, mode=0o700)
        state.chmod(0o700)
        journal = log / "journal.jsonl"
        journal.write_text(json.dumps({"event": "run", "node": "n1", "hook": "healthcheck", "status": "healthy",
                                       "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "duration": 0.1,
                                       "checks": [], "actions": []}) + "\n")
        conf = user.base / "c.yaml"
        conf.write_text(f"journal: {journal}\nstate_dir: {state}\nnode_name: n1\n")

        def slurm_hooks(*args):
            return user.run("/usr/bin/python3", "-I", "-c", RUN, lib, "-c", conf, *args, check=False)

        for command in ("healthcheck", "prolog", "epilog", "resume"):
            r = slurm_hooks(command)
            assert r.returncode == 2 and r.stderr.startswith(f"slurm-hooks {command}: needs root"), r.stderr
            assert "as any user: status, explain" in r.stderr, r.stderr
            # Why: slurmd runs the hooks as root; resume changes node states.
            why = "it changes node states in Slurm" if command == "resume" else "slurmd runs it as root"
            assert f"needs root ({why})" in r.stderr, r.stderr
        # A look as the user: root's state is said once, as a note, never as a failure.
        r = slurm_hooks("check", "--json")
        rec = json.loads(r.stdout)
        assert not [e for e in rec.get("local_errors", []) + rec.get("warnings", []) if "state file" in e], rec
        assert sum("slurm-hooks' state" in n and "is root's" in n for n in rec["notes"]) == 1, rec["notes"]
        r = slurm_hooks("explain")
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.startswith(f"slurm-hooks explain: cannot read {log} as {user.name}"), r.stderr
        # Where the site lets its admins' group (here everyone) read them, explain works.
        log.chmod(0o755)
        r = slurm_hooks("explain")
        assert r.returncode == 2 and f"cannot read {state}" in r.stderr, r.stderr
        state.chmod(0o755)
        (state / "n1").chmod(0o755)
        r = slurm_hooks("explain")
        assert r.returncode == 0 and "healthcheck healthy" in r.stdout, r.stdout + r.stderr
