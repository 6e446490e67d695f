#!/usr/bin/env bash
# Creates .venv with the pinned test references (PyPI) unless it is already complete.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -x .venv/bin/python ] && .venv/bin/python -c 'import numpy, gymnasium, jax, tensorboard, pytest, Box2D, pygame' 2>/dev/null; then
  exit 0
fi
echo "setting up .venv with tests/requirements.txt (first run only)"
$PY -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
