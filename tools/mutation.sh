#!/bin/sh
# Mutation testing of the deciding modules (see tools/mutation.py): bash tools/mutation.sh [--changed BASE] [MODULE.py ...]
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-.venv/bin/python}
exec "$PY" tools/mutation.py "$@"
