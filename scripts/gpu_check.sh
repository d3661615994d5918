#!/usr/bin/env bash
# The first GPU run, prepared: every GPU path of kda-viz in one bounded run (scripts/gpu_check.py).
#   bash scripts/gpu_check.sh --out "$OUT"    on a machine with CUDA, from any folder
#   bash scripts/gpu_check.sh --dry-run       anywhere: imports, arguments and the plan, exit 0
# Python: $PYTHON if set, else this checkout's .venv if it has one, else python3 (a GPU image's own).
set -u
cd "$(dirname "$0")/.." || exit 2
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
exec "$py" scripts/gpu_check.py "$@"
