#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine (as root) and run the
# whole suite:  bash tests/run.sh [pytest args]
# Debian packages: Slurm (slurmctld, slurmd, client), munge, FUSE, Python venv, and
# what the packaging tests build, install and lint with (debhelper, dpkg-dev, rpm,
# logrotate, lintian, rpmlint, man-db, bash-completion) and promtool for the alert rules.
# Python packages: the project with its test extra, in ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
pkgs=(slurmctld slurmd slurm-client munge fuse3 python3 python3-venv procps util-linux debhelper dpkg-dev rpm logrotate)
# The admins' own tools the tests run: promtool (Debian's prometheus package), the
# distributions' package linters, man(1) and bash-completion's loader.
pkgs+=(prometheus lintian rpmlint man-db bash-completion)
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
exec .venv/bin/python -m pytest "$@"
