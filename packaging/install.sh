#!/usr/bin/env bash
# Install slurm-hooks on this node, as root, into its own virtual environment.
#   bash packaging/install.sh            # installs into /opt/slurm-hooks
#   PREFIX=/opt/x bash packaging/install.sh
# Puts the default configuration at /etc/slurm-hooks/slurm-hooks.yaml (an existing file
# is kept), and creates the state and log directories on local disk.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${PREFIX:-/opt/slurm-hooks}
python=${PYTHON:-/usr/bin/python3}

if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3 python3-venv >/dev/null
fi
[ -x "$prefix/bin/python" ] || "$python" -m venv "$prefix"
"$prefix/bin/pip" install -q --disable-pip-version-check "$here"

install -d -m 0755 /etc/slurm-hooks
[ -e /etc/slurm-hooks/slurm-hooks.yaml ] || install -m 0644 "$here/conf/slurm-hooks.yaml" /etc/slurm-hooks/slurm-hooks.yaml
install -d -m 0700 /var/lib/slurm-hooks
install -d -m 0750 /var/log/slurm-hooks
echo "slurm-hooks $("$prefix/bin/slurm-hooks" --version | cut -d' ' -f2) installed in $prefix" >&2
echo "HealthCheckProgram=$prefix/bin/slurm-hooks-healthcheck (see packaging/slurm.conf.example)" >&2
