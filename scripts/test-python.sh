#!/usr/bin/env bash
# The Python package's tests: a virtual environment under build/ with torch 2.11 (PyPI's CUDA
# build, which imports and builds without a GPU), `pip install .` of the package (the extension
# module builds the library again with the Python options, in build/python), then pytest. GPU
# tests skip visibly on a machine without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
venv="${MXLINEAR_PYTHON_VENV:-$PWD/build/python-venv}"
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check \
  "torch==2.11.0" "scikit-build-core>=0.10" ninja pytest safetensors numpy
"$venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check --no-build-isolation .
echo "python package: environment and build took $(( $(date +%s) - start )) s"
cd python/tests
status=0
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test-python: pytest collected no tests" >&2
fi
exit "$status"
