#!/usr/bin/env bash
# The test command: builds everything (CUDA code included) and runs every test, the install of
# the package into a fresh prefix and a project built against it included. GPU tests skip
# visibly on a machine without a GPU; the compute-sanitizer runs of the GPU tests are the
# separate `ctest --preset sanitize-gpu` (docs/INSTALL.md). Extra arguments go to ctest (e.g.
# -L cpu). Then the Python package's tests (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/build.sh default
echo "build took $(( $(date +%s) - start )) s"
ctest --preset default "$@"
scripts/test-python.sh
