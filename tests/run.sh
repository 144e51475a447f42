#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine (as root) and run the
# suite:  bash tests/run.sh [pytest args]
# Debian packages: Slurm (slurmctld, slurmd, client), munge, FUSE, Python venv, and
# what the packaging tests build, install and lint with (debhelper, dpkg-dev, rpm,
# logrotate, lintian, rpmlint, man-db, bash-completion) and promtool for the alert rules.
# Python packages: the project with its test extra, in ./.venv.
#
# Two Slurm generations: the whole suite runs on Debian's Slurm (22.05 on Debian 12);
# then the Slurm-facing tests (those using the cluster fixtures) run again on a cluster
# of Slurm built from source (tests/build_slurm.sh: SLURM_SRC, default
# ../shared/slurm/slurm-*.tar.xz; built once into /var/cache/slurm-hooks-tests), each
# once with slurm-hooks' default backend (auto: pyslurm built against that Slurm), and
# the tests of the backends' own Slurm calls (marked per_backend) once per backend.
# Without a source tarball those tests are skipped, with the reason.
# SLURM_HOOKS_SLURM=distro|built|both (default both) picks the sessions.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
pkgs=(slurmctld slurmd slurm-client munge fuse3 python3 python3-venv procps util-linux debhelper dpkg-dev rpm logrotate)
# The admins' own tools the tests run: promtool (Debian's prometheus package), the
# distributions' package linters, man(1) and bash-completion's loader.
pkgs+=(prometheus lintian rpmlint man-db bash-completion)
# root's diagnose over ssh (an sshd on loopback for the session, tests/sshd.py), and a
# real MPI job of an unprivileged user (mpi4py with Open MPI).
pkgs+=(openssh-server openssh-client python3-mpi4py openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python=${PYTHON:-/usr/bin/python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check '.[test]'
# The linter and the type checker first: both must pass before any test runs.
.venv/bin/ruff check slurm_hooks/
.venv/bin/mypy slurm_hooks/

sessions=${SLURM_HOOKS_SLURM:-both}
built_args=()
if [ "$sessions" != distro ]; then
    # Before the first session: pyslurm in the venv lets the distribution's session show
    # `auto` declining a pyslurm built for another Slurm.
    set +e
    prefix=$(bash tests/build_slurm.sh --pyslurm .venv/bin/python)
    rc=$?
    set -e
    if [ $rc -eq 0 ]; then
        built_args=("--slurm-prefix=$prefix")
    elif [ $rc -eq 3 ]; then
        built_args=("--slurm-missing=no Slurm source tarball at ${SLURM_SRC:-../shared/slurm/slurm-*.tar.xz}")
    else
        echo "tests/run.sh: building Slurm from source failed (exit $rc)" >&2
        exit $rc
    fi
fi
status=0
if [ "$sessions" != built ]; then
    .venv/bin/python -m pytest "$@" || status=$?
fi
if [ "$sessions" != distro ]; then
    echo "=== the Slurm-facing tests on the Slurm built from source (${built_args[*]}) ==="
    # Exit 5: the pytest arguments named no Slurm-facing test, nothing to run again.
    rc=0
    .venv/bin/python -m pytest "${built_args[@]}" "$@" || rc=$?
    [ $rc -eq 5 ] && rc=0
    [ $status -ne 0 ] || status=$rc
fi
exit $status
