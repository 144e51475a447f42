#!/usr/bin/env bash
# Install slurm-hooks on this node, as root, into its own virtual environment.
#   bash packaging/install.sh            # installs into /opt/slurm-hooks
#   PREFIX=/opt/x bash packaging/install.sh
# Puts the default configuration at /etc/slurm-hooks/slurm-hooks.yaml (an existing file
# is kept), creates the state and log directories on local disk, installs the man pages
# slurm-hooks(8) and slurm-hooks.yaml(5) in $MANDIR (default /usr/local/share/man) and
# the bash completion in $COMPLETIONSDIR (default
# /usr/local/share/bash-completion/completions), both generated from this tree, and the
# Prometheus rules and Grafana dashboard in PREFIX/share/slurm-hooks (files for the
# Prometheus and Grafana servers, not used on the node), README.md and
# slurm.conf.example in PREFIX/share/doc/slurm-hooks, and links to the four programs in
# $SBINDIR (default /usr/local/sbin, on root's PATH; SBINDIR= to skip), so that the
# bare `slurm-hooks` of every example works; and `slurm-hooks` alone in $BINDIR (default
# /usr/local/bin, on every user's PATH; BINDIR= to skip) for the commands any user may run
# (status, explain, --help; the others say that they need root).
# With the optional packages `diagnose` and `job-report` use: ClusterShell (root's
# fan-out over ssh) and py-spy (Python stacks), the `fanout` and `stacks` extras.
# EXTRAS=fanout picks some; EXTRAS= (empty) installs none (a node without PyPI access).
# Later: $PREFIX/current/bin/pip install 'ClusterShell>=1.9' 'py-spy>=0.3.14'.
#
# Run again over an installed copy, it upgrades without a gap: the new version gets its
# own environment, PREFIX/envs/<version>-<time>, built beside the running one; then each
# program in PREFIX/bin is replaced by rename, so that every start of a hook runs either
# the old version or the new one, whole (slurmd drains a node whose prolog fails). The
# previous environment is kept for the runs still using it; older ones are removed.
# PREFIX/current links to the environment in use (its python and pip).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${PREFIX:-/opt/slurm-hooks}
python=${PYTHON:-/usr/bin/python3}

if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3 python3-venv >/dev/null
fi
extras=${EXTRAS-fanout,stacks}

# `ln -sfn` unlinks, then links: a gap in which the name is missing. A new name renamed
# over the old one is never missing.
relink() {
    ln -sfn "$1" "$2.new.$$"
    mv -fT "$2.new.$$" "$2"
}

install -d -m 0755 "$prefix" "$prefix/envs" "$prefix/bin"
# The environment the programs run now (empty on a first install; an install before
# PREFIX/envs was the environment PREFIX itself).
previous=$(readlink "$prefix/current" 2>/dev/null || true)
stamp=$("$python" -I -c 'import re, sys
print(re.search(r"^__version__ = \"([^\"]+)\"", open(sys.argv[1]).read(), re.M).group(1))' \
        "$here/slurm_hooks/__init__.py")-$(date +%Y%m%dT%H%M%S)-$$
env="$prefix/envs/$stamp"
trap 'rm -rf "$env"' ERR
"$python" -m venv "$env"
"$env/bin/pip" install -q --disable-pip-version-check "$here${extras:+[$extras]}"
# Our own launchers in place of pip's. `-I`: no PYTHON* variables, no user site, not
# the current directory (slurmd runs them as root). `-S`: the environment's packages
# are put on the path here rather than by `site`, which would also run every .pth file
# in them at each start. (`-IS` as one word: a shebang passes a single argument.) They
# import only the program (pip's wrapper imports re) and end without the interpreter's
# teardown (cli.exit_now). Keep in step with setup.cfg [options.entry_points].
sitedirs=$("$env/bin/python" -I -c 'import sysconfig
paths = [sysconfig.get_path(p) for p in ("purelib", "platlib")]
print(repr(sorted(set(paths), key=paths.index)))')
for entry in slurm-hooks:main slurm-hooks-healthcheck:healthcheck_main \
             slurm-hooks-prolog:prolog_main slurm-hooks-epilog:epilog_main; do
    name=${entry%%:*} func=${entry#*:}
    cat > "$prefix/bin/.$name.new" <<EOF
#!$env/bin/python -IS
# $name: slurm-hooks, installed by packaging/install.sh
import sys
sys.path.extend($sitedirs)
from slurm_hooks.cli import exit_now, $func
exit_now($func())
EOF
    chmod 0755 "$prefix/bin/.$name.new"
    mv -f "$prefix/bin/.$name.new" "$prefix/bin/$name"
done
trap - ERR
relink "envs/$stamp" "$prefix/current"
# The previous environment stays for the runs that started in it; the ones before go.
for old in "$prefix"/envs/*; do
    case "$old" in "$env"|"$prefix/$previous"|"$previous") ;; *) rm -rf "$old" ;; esac
done

mandir=${MANDIR:-/usr/local/share/man}
sbindir=${SBINDIR-/usr/local/sbin}
completionsdir=${COMPLETIONSDIR:-/usr/local/share/bash-completion/completions}
docs=$(mktemp -d)
trap 'rm -rf "$docs"' EXIT
# The man pages name this installation's paths, not the packages'.
"$env/bin/python" "$here/packaging/gendocs.py" --out "$docs" --bindir "${SBINDIR:-$prefix/bin}" \
    --datadir "$prefix/share/slurm-hooks" --docdir "$prefix/share/doc/slurm-hooks"
install -d -m 0755 "$mandir/man8" "$mandir/man5" "$completionsdir"
gzip -9n < "$docs/slurm-hooks.8" > "$mandir/man8/slurm-hooks.8.gz"
for name in slurm-hooks-healthcheck slurm-hooks-prolog slurm-hooks-epilog; do
    relink slurm-hooks.8.gz "$mandir/man8/$name.8.gz"
done
gzip -9n < "$docs/slurm-hooks.yaml.5" > "$mandir/man5/slurm-hooks.yaml.5.gz"
chmod 0644 "$mandir/man8/slurm-hooks.8.gz" "$mandir/man5/slurm-hooks.yaml.5.gz"
install -m 0644 "$docs/slurm-hooks.bash-completion" "$completionsdir/slurm-hooks"
install -D -m 0644 "$here/packaging/prometheus/slurm-hooks-rules.yml" "$prefix/share/slurm-hooks/prometheus/slurm-hooks-rules.yml"
install -D -m 0644 "$here/packaging/grafana/slurm-hooks.json" "$prefix/share/slurm-hooks/grafana/slurm-hooks.json"
install -D -m 0644 "$here/README.md" "$prefix/share/doc/slurm-hooks/README.md"
install -D -m 0644 "$here/SECURITY.md" "$prefix/share/doc/slurm-hooks/SECURITY.md"
install -d -m 0755 "$prefix/share/doc/slurm-hooks/docs"
install -m 0644 "$here"/docs/*.md "$prefix/share/doc/slurm-hooks/docs/"
install -D -m 0644 "$here/packaging/slurm.conf.example" "$prefix/share/doc/slurm-hooks/slurm.conf.example"
if [ -n "$sbindir" ]; then
    install -d -m 0755 "$sbindir"
    for name in slurm-hooks slurm-hooks-healthcheck slurm-hooks-prolog slurm-hooks-epilog; do
        relink "$prefix/bin/$name" "$sbindir/$name"
    done
fi
bindir=${BINDIR-/usr/local/bin}
if [ -n "$bindir" ]; then
    install -d -m 0755 "$bindir"
    relink "$prefix/bin/slurm-hooks" "$bindir/slurm-hooks"
fi

install -d -m 0755 /etc/slurm-hooks
conf=/etc/slurm-hooks/slurm-hooks.yaml
if [ -e "$conf" ]; then
    kept="kept (yours, unchanged; the shipped one: $here/conf/slurm-hooks.yaml)"
else
    install -m 0644 "$here/conf/slurm-hooks.yaml" "$conf"
    kept="created"
fi
# Whether this node acts, from the file itself (what a run will read).
acting=$("$env/bin/python" -I -c 'import sys, yaml
try:
    doc = yaml.safe_load(open(sys.argv[1])) or {}
    on = not ((doc.get("actions") or {}).get("report_only", False))
except Exception as e:
    print("unknown: it does not load (%s); slurm-hooks config check says where" % type(e).__name__); sys.exit()
print("ON: it drains, requeues and resumes (actions.report_only: false)" if on else
      "off: report-only, nothing is done in Slurm (actions.report_only: true; README, Turn actions on)")' "$conf")
install -d -m 0700 /var/lib/slurm-hooks
install -d -m 0750 /var/log/slurm-hooks
echo "slurm-hooks $("$prefix/bin/slurm-hooks" --version | cut -d' ' -f2) installed in $prefix (environment $env${previous:+; the previous one, $prefix/$previous, kept for runs still in it})" >&2
echo "configuration $conf: $kept; actions $acting" >&2
where=${sbindir:-$prefix/bin}
if [ -n "$sbindir" ]; then
    echo "programs linked into $sbindir${bindir:+, slurm-hooks also into $bindir for every user}; man pages in $mandir (man slurm-hooks)" >&2
else
    echo "programs in $prefix/bin (not linked: SBINDIR is empty; add it to PATH or link them)" >&2
fi
echo "HealthCheckProgram=$where/slurm-hooks-healthcheck (see $prefix/share/doc/slurm-hooks/slurm.conf.example)" >&2
echo "Prometheus rules and Grafana dashboard for your monitoring servers: $prefix/share/slurm-hooks/" >&2
if [ -n "$extras" ]; then
    echo "with the extras $extras (ClusterShell, py-spy for diagnose)" >&2
else
    echo "without ClusterShell and py-spy (EXTRAS empty); add them with: $prefix/current/bin/pip install 'ClusterShell>=1.9' 'py-spy>=0.3.14'" >&2
fi
