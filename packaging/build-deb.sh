#!/usr/bin/env bash
# Build the Debian package (Architecture: all) from this source tree:
#
#   bash packaging/build-deb.sh [OUTDIR]        # default OUTDIR: dist/
#
# Prints the path of the .deb. Needs dpkg-dev and debhelper (bash tests/run.sh installs
# them), and NVIDIA's nvidia-ml-py to bundle: $PYNVML (a pynvml.py), else the pynvml
# importable by $PYTHON (default: ./.venv/bin/python when present, else python3).
# The build runs in a private copy of the tree (git's tracked and untracked, not ignored
# files; without git: everything but .git, .venv and build outputs), with packaging/debian
# as debian/; the working tree is never written to.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/dist}
die() { echo "build-deb.sh: $*" >&2; exit 1; }

for tool in dpkg-buildpackage dpkg-parsechangelog dh; do
    command -v "$tool" >/dev/null \
        || die "$tool not found: install dpkg-dev and debhelper (bash tests/run.sh installs them)"
done
python=${PYTHON:-}
if [ -z "$python" ]; then
    if [ -x "$src/.venv/bin/python" ]; then python=$src/.venv/bin/python; else python=python3; fi
fi

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$src/slurm_hooks/__init__.py")
[ -n "$version" ] || die "no __version__ in slurm_hooks/__init__.py"
deb_version=$(dpkg-parsechangelog -l "$src/packaging/debian/changelog" -S Version)
[ "$deb_version" = "$version" ] \
    || die "packaging/debian/changelog is at $deb_version but slurm_hooks.__version__ is $version: add a changelog entry (dch -v $version)"

IFS=$'\t' read -r pynvml pynvml_version < <("$python" "$src/packaging/stage.py" --print-pynvml) \
    || die "no nvidia-ml-py to bundle (see above)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/slurm-hooks-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/slurm-hooks-$version
mkdir "$tree"

if git -C "$src" rev-parse --show-toplevel 2>/dev/null | grep -qxF "$src"; then
    (cd "$src" && git ls-files -z -co --exclude-standard \
        | while IFS= read -r -d '' f; do
              [ -e "$f" ] || [ -L "$f" ] || continue    # deleted, not yet committed
              case "$f" in debian/*) continue;; esac
              printf '%s\0' "$f"
          done \
        | tar --null -T - -cf -) | tar -xf - -C "$tree"
else
    (cd "$src" && tar --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
        --exclude=./debian --exclude='*.egg-info' --exclude=__pycache__ --exclude=.pytest_cache \
        -cf - .) | tar -xf - -C "$tree"
fi
cp -a "$src/packaging/debian" "$tree/debian"
mkdir -p "$tree/debian/vendor"
cp "$pynvml" "$tree/debian/vendor/pynvml.py"
printf '%s\n' "$pynvml_version" > "$tree/debian/vendor/nvidia-ml-py.version"

if ! (cd "$tree" && dpkg-buildpackage -b -us -uc) >"$tmp/build.log" 2>&1; then
    tail -n 60 "$tmp/build.log" >&2
    die "dpkg-buildpackage failed (last lines above)"
fi
[ -n "${VERBOSE:-}" ] && cat "$tmp/build.log" >&2
deb=slurm-hooks_${version}_all.deb
[ -f "$tmp/$deb" ] || die "dpkg-buildpackage made no $deb"
mv -f "$tmp/$deb" "$out/$deb"
echo "$out/$deb"
