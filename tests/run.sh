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
# SLURM_HOOKS_SLURM=distro|built|both (default both) picks the sessions. With both, the
# two sessions run side by side, each in its own PID and mount namespaces
# (tests/namespaced.py, under SLURM_HOOKS_TEST_PRIVATE, default /var/tmp/slurm-hooks-tests);
# SLURM_HOOKS_SIDE_BY_SIDE=no runs them one after the other.
# The first step that fails ends the run with its status (the linters, a session).
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
# A real FUSE network client this project did not write, hung under a user's job
# (tests/test_fuse_client_cluster.py: rclone mount of an rclone serve webdav).
pkgs+=(rclone)
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
# A separate, fast step: the mutation check of the deciding modules this change touched
# (tools/mutation.sh --changed), each against its own fast tests; a surviving mutant not
# listed in tools/mutation-survivors.txt fails the run. It runs only where a deciding
# module differs from the merge base with SLURM_HOOKS_MUTATION_BASE (default main), and
# costs from 20 s to a few minutes a module (BENCHMARKS.md); SLURM_HOOKS_MUTATION=no skips it.
mbase=${SLURM_HOOKS_MUTATION_BASE:-main}
if [ "${SLURM_HOOKS_MUTATION:-yes}" != no ] && git rev-parse -q --verify "$mbase^{commit}" >/dev/null 2>&1; then
    mchanged=$(.venv/bin/python tools/mutation.py --list-changed "$mbase")
    if [ -n "$mchanged" ]; then
        echo "=== mutation check of the deciding modules changed since $mbase:" $mchanged "==="
        .venv/bin/pip install -q --disable-pip-version-check 'mutmut>=3.8,<3.9'
        .venv/bin/python tools/mutation.py --changed "$mbase"
    fi
fi

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
distro_session() { .venv/bin/python -m pytest "$@"; }
built_session() {
    # Exit 5: the pytest arguments named no Slurm-facing test, nothing to run again.
    local rc=0
    .venv/bin/python -m pytest "${built_args[@]}" "$@" || rc=$?
    [ $rc -eq 5 ] && rc=0
    return $rc
}
# The status of background job $1, once it has ended (a trapped signal ends `wait` early).
finished() {
    local rc
    while :; do
        wait "$1" && rc=0 || rc=$?
        kill -0 "$1" 2>/dev/null || return $rc
    done
}
if [ "$sessions" = both ] && [ -n "${built_args[0]:-}" ] && [ "${built_args[0]#--slurm-prefix=}" != "${built_args[0]}" ] \
        && [ "${SLURM_HOOKS_SIDE_BY_SIDE:-yes}" = yes ] \
        && { unshare --pid --fork --mount-proc true 2>/dev/null \
             || { echo "tests/run.sh: no PID and mount namespaces here (unshare failed): the sessions run one after the other" >&2; false; }; }; then
    # The two sessions side by side, each in its own PID and mount namespaces
    # (tests/namespaced.py): its own processes, mounts, /tmp and munged, its own TCP
    # ports and test users. Most of a session's time is Slurm's own timers.
    private=${SLURM_HOOKS_TEST_PRIVATE:-/var/tmp/slurm-hooks-tests}
    made=()
    for d in /tmp /run/munge /run/slurm-hooks /var/log/slurm-hooks; do
        [ -d "$d" ] || { mkdir -p "$d"; made+=("$d"); }
    done
    # Both sessions' unprivileged users mount FUSE: open /dev/fuse for the whole run, so
    # neither session's restore closes it under the other.
    fuse_mode=$(stat -c %a /dev/fuse 2>/dev/null || true)
    [ -z "$fuse_mode" ] || chmod 0666 /dev/fuse
    rm -rf "$private"
    mkdir -p "$private"
    # The scale tests run alone on the host: the other session waits (tests/heavy.py).
    # For these two sessions only: the directory goes with them.
    heavy=$private/heavy.lock
    log="$private-built.log"
    echo "=== the whole suite on Debian's Slurm, and beside it the Slurm-facing tests on the Slurm built from source (${built_args[*]}; its output follows the first) ==="
    SLURM_HOOKS_TEST_HEAVY_LOCK=$heavy SLURM_HOOKS_TEST_PORTS=26500-32700 SLURM_HOOKS_TEST_USER_SUFFIX=-b \
        .venv/bin/python tests/namespaced.py "$private/built" -- \
        .venv/bin/python -m pytest "${built_args[@]}" -p no:cacheprovider "$@" > "$log" 2>&1 &
    built_pid=$! distro_pid=
    # Each session's PID 1 (unshare's child: unshare itself blocks SIGTERM) passes a
    # signal on to its pytest, which then stops its cluster and mounts.
    stopped=
    stop_sessions() {
        stopped=yes
        local p
        for p in $built_pid $distro_pid; do
            kill -TERM $(cat "/proc/$p/task/$p/children" 2>/dev/null) 2>/dev/null || true
        done
    }
    trap stop_sessions TERM INT
    SLURM_HOOKS_TEST_HEAVY_LOCK=$heavy SLURM_HOOKS_TEST_PORTS=20000-26400 \
        .venv/bin/python tests/namespaced.py "$private/distro" -- \
        .venv/bin/python -m pytest --host-paths=without "$@" &
    distro_pid=$!
    finished $distro_pid || status=$?
    rc=0
    finished $built_pid || rc=$?
    [ $rc -eq 5 ] && rc=0
    trap - TERM INT
    echo "=== the Slurm-facing tests on the Slurm built from source (${built_args[*]}) ==="
    cat "$log"
    [ $status -ne 0 ] || status=$rc
    [ -z "$fuse_mode" ] || chmod "$fuse_mode" /dev/fuse
    rm -rf "$private" "$log"
    if [ -n "$stopped" ]; then
        for d in "${made[@]}"; do rmdir "$d" 2>/dev/null || true; done
        exit 143
    fi
    # The first failed step ends the run: what follows would only bury its output.
    if [ $status -ne 0 ]; then
        for d in "${made[@]}"; do rmdir "$d" 2>/dev/null || true; done
        echo "tests/run.sh: a session failed (exit $status): stopping here, the host-path tests not run" >&2
        exit $status
    fi
    # Last, on the host itself: the tests that install the packages over slurm-hooks'
    # own paths, where the sessions had their private copies mounted.
    echo "=== the tests that take over slurm-hooks' host paths (the packages installed) ==="
    rc=0
    # In a mount namespace of their own, without what other sessions or earlier runs left
    # mounted (a default health check probes every FUSE mount it finds).
    .venv/bin/python tests/namespaced.py --detached -- \
        .venv/bin/python -m pytest --host-paths=only -p no:cacheprovider "$@" || rc=$?
    [ $rc -eq 5 ] && rc=0
    [ $status -ne 0 ] || status=$rc
    for d in "${made[@]}"; do rmdir "$d" 2>/dev/null || true; done
    exit $status
fi
if [ "$sessions" != built ]; then
    distro_session "$@" || status=$?
    if [ $status -ne 0 ] && [ "$sessions" != distro ]; then
        echo "tests/run.sh: the session on Debian's Slurm failed (exit $status): stopping here, the built Slurm's not run" >&2
        exit $status
    fi
fi
if [ "$sessions" != distro ]; then
    echo "=== the Slurm-facing tests on the Slurm built from source (${built_args[*]}) ==="
    rc=0
    built_session "$@" || rc=$?
    [ $status -ne 0 ] || status=$rc
fi
exit $status
