#!/usr/bin/env bash
# Build Slurm from a source release into a cache outside the clone, once, so that the
# suite can run a cluster of a current Slurm beside Debian's 22.05:
#   bash tests/build_slurm.sh                   # prints the install prefix on stdout
#   bash tests/build_slurm.sh --pyslurm PYTHON  # also pyslurm for it, into PYTHON's environment
# SLURM_SRC        the source tarball (default ../shared/slurm/slurm-*.tar.xz beside the clone)
# SLURM_CACHE_DIR  where builds are kept (default /var/cache/slurm-hooks-tests)
# SLURM_BUILD_JOBS make -j (default 2)
# Exit 3 without a tarball: the caller skips the tests of that Slurm.
# The prefix is reused when its stamp names the same tarball digest; the stamp is written
# only after `make install` succeeded, so an interrupted build is redone, not trusted.
set -euo pipefail
pyslurm_python=
if [ "${1:-}" = "--pyslurm" ]; then
    pyslurm_python=${2:?--pyslurm needs the python of the environment to install into}
fi
here=$(cd "$(dirname "$0")/.." && pwd)
src=${SLURM_SRC:-}
if [ -z "$src" ]; then
    for f in "$here"/../shared/slurm/slurm-*.tar.xz "$here"/../shared/slurm/slurm-*.tar.bz2; do
        [ -f "$f" ] && src=$f && break
    done
fi
if [ -z "$src" ] || [ ! -f "$src" ]; then
    echo "build_slurm: no Slurm source tarball (set SLURM_SRC=/path/to/slurm-25.11.x.tar.xz)" >&2
    exit 3
fi
src=$(cd "$(dirname "$src")" && pwd)/$(basename "$src")
name=$(basename "$src"); name=${name%.tar.*}          # slurm-25.11.7
cache=${SLURM_CACHE_DIR:-/var/cache/slurm-hooks-tests}
prefix=$cache/$name
digest=$(sha256sum "$src" | cut -d' ' -f1)
stamp=$prefix/.slurm-hooks-built

# pyslurm X.Y.* builds only against Slurm X.Y (its setup refuses any other libslurm). The
# wheel is kept beside the build (compiling it takes minutes); the rpath in it points at
# $prefix/lib/slurm, so it needs no LD_LIBRARY_PATH (HealthCheckProgram has none).
install_pyslurm() {
    local series wheels
    series=$(echo "$name" | sed -E 's/^slurm-([0-9]+\.[0-9]+).*/\1/')
    wheels=$prefix/wheels
    if ! ls "$wheels"/pyslurm-"$series".*.whl >/dev/null 2>&1; then
        echo "build_slurm: building pyslurm==$series.* against $prefix (several minutes; cached afterwards)" >&2
        mkdir -p "$wheels"
        SLURM_INCLUDE_DIR=$prefix/include SLURM_LIB_DIR=$prefix/lib PYSLURM_BUILD_JOBS=${SLURM_BUILD_JOBS:-2} \
            nice -n 10 "$pyslurm_python" -m pip wheel -q --disable-pip-version-check --no-deps \
            -w "$wheels" "pyslurm==$series.*" >&2
    fi
    "$pyslurm_python" -m pip install -q --disable-pip-version-check --no-deps --no-index \
        --find-links "$wheels" "pyslurm==$series.*" >&2
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] && [ -x "$prefix/sbin/slurmctld" ]; then
    [ -z "$pyslurm_python" ] || install_pyslurm
    echo "$prefix"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
deps=(build-essential pkg-config libmunge-dev libjson-c-dev libyaml-dev libhttp-parser-dev libdbus-1-dev xz-utils)
missing=()
for p in "${deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "build_slurm: building $name into $prefix (several minutes; cached afterwards)" >&2
# A release tarball has one top directory; a `git archive` of a tag has none.
top=$work/src
mkdir -p "$top"
tar -xf "$src" -C "$top"
if [ ! -x "$top/configure" ]; then
    top=$(dirname "$(find "$top" -mindepth 2 -maxdepth 2 -name configure | head -1)")
fi
rm -rf "$prefix"
log=$work/build.log
# --enable-multiple-slurmd: several slurmd -N on one host; without it multi-node steps fail.
if ! ( cd "$top" \
        && ./configure --prefix="$prefix" --sysconfdir="$prefix/etc" --disable-debug \
             --without-rpath --enable-multiple-slurmd \
        && nice -n 10 make -j"${SLURM_BUILD_JOBS:-2}" \
        && make install ) >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "build_slurm: building $name failed (log above)" >&2
    exit 1
fi
echo "$digest" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
[ -z "$pyslurm_python" ] || install_pyslurm
echo "$prefix"
