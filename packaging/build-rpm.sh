#!/usr/bin/env bash
# Build the RPM (noarch; for EL 9 and later, where /usr/bin/python3 is >= 3.9):
#
#   bash packaging/build-rpm.sh [OUTDIR]        # default OUTDIR: dist/
#
# Prints the path of the .rpm. Works on EL and on Debian (package `rpm`, which
# bash tests/run.sh installs). Steps: `python -m build --sdist` of a private copy of the
# tree (Source0), nvidia-ml-py's pynvml.py (Source1: $PYNVML, else the pynvml importable
# by $PYTHON, default ./.venv/bin/python when present, else python3), then
# `rpmbuild -bb` in a private _topdir. $PYTHON needs the `build` package (the test
# extra has it); BUILD_ARGS adds options to `python -m build` (e.g. --no-isolation);
# PACKAGER sets the Packager: header (a site's own name and address).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/dist}
spec=$src/packaging/rpm/slurm-hooks.spec
die() { echo "build-rpm.sh: $*" >&2; exit 1; }

command -v rpmbuild >/dev/null \
    || die "rpmbuild not found: install rpm (Debian) or rpm-build (EL); bash tests/run.sh installs it"
python=${PYTHON:-}
if [ -z "$python" ]; then
    if [ -x "$src/.venv/bin/python" ]; then python=$src/.venv/bin/python; else python=python3; fi
fi
"$python" -c 'import build' 2>/dev/null \
    || die "$python has no 'build' package: $python -m pip install build (it is in the test extra)"

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$src/slurm_hooks/__init__.py")
[ -n "$version" ] || die "no __version__ in slurm_hooks/__init__.py"
spec_version=$(sed -n 's/^Version:[[:space:]]*//p' "$spec")
[ "$spec_version" = "$version" ] \
    || die "packaging/rpm/slurm-hooks.spec has Version: $spec_version but slurm_hooks.__version__ is $version: update Version (and %changelog)"

IFS=$'\t' read -r pynvml pynvml_version < <("$python" "$src/packaging/stage.py" --print-pynvml) \
    || die "no nvidia-ml-py to bundle (see above)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/slurm-hooks-rpm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/src
mkdir "$tree"
if git -C "$src" rev-parse --show-toplevel 2>/dev/null | grep -qxF "$src"; then
    (cd "$src" && git ls-files -z -co --exclude-standard \
        | while IFS= read -r -d '' f; do
              [ -e "$f" ] || [ -L "$f" ] || continue    # deleted, not yet committed
              printf '%s\0' "$f"
          done \
        | tar --null -T - -cf -) | tar -xf - -C "$tree"
else
    (cd "$src" && tar --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
        --exclude='*.egg-info' --exclude=__pycache__ --exclude=.pytest_cache -cf - .) \
        | tar -xf - -C "$tree"
fi

top=$tmp/rpmbuild
mkdir -p "$top"/{SOURCES,SPECS,BUILD,RPMS,SRPMS}
# shellcheck disable=SC2086
if ! "$python" -m build --sdist ${BUILD_ARGS:-} --outdir "$top/SOURCES" "$tree" >"$tmp/sdist.log" 2>&1; then
    tail -n 40 "$tmp/sdist.log" >&2
    die "python -m build --sdist failed (last lines above)"
fi
sdist=$(cd "$top/SOURCES" && ls -- *.tar.gz)
[ "$(printf '%s\n' "$sdist" | wc -l)" = 1 ] || die "expected one sdist, got: $sdist"
cp "$pynvml" "$top/SOURCES/pynvml.py"
cp "$spec" "$top/SPECS/"

# rpmbuild checks BuildRequires against the rpm database, which is empty on Debian.
nodeps=()
rpm -q --quiet --whatprovides python3 2>/dev/null || nodeps=(--nodeps)
if ! rpmbuild -bb "${nodeps[@]}" \
        --define "_topdir $top" \
        --define "sdist_dir ${sdist%.tar.gz}" \
        --define "pynvml_version $pynvml_version" \
        --define "packager ${PACKAGER:-slurm-hooks developers <dev@slurm-hooks.invalid>}" \
        "$top/SPECS/slurm-hooks.spec" >"$tmp/rpmbuild.log" 2>&1; then
    tail -n 60 "$tmp/rpmbuild.log" >&2
    die "rpmbuild failed (last lines above)"
fi
[ -n "${VERBOSE:-}" ] && cat "$tmp/sdist.log" "$tmp/rpmbuild.log" >&2
rpmfile=$(cd "$top/RPMS/noarch" && ls -- slurm-hooks-"$version"-*.noarch.rpm)
cp "$top/RPMS/noarch/$rpmfile" "$out/$rpmfile"
echo "$out/$rpmfile"
