#!/usr/bin/env bash
# The Python package on the GPU: Gymnasium (carried as wheels in .whl: README's device notes),
# then scripts/gpu-python-check.py against this build's libdqn.so. $1 = the build dir.
set -u
BUILD=${1:-build-gpu}
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
python3 -c 'import gymnasium' 2>/dev/null || { echo "python: no gymnasium (carry .whl)"; exit 1; }
DQN_LIB=$PWD/$BUILD/libdqn.so PYTHONPATH=$PWD/python:${PYTHONPATH:-} PYTHONUNBUFFERED=1 \
    python3 scripts/gpu-python-check.py "$PWD/$BUILD/dqn"
