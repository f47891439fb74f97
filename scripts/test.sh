#!/usr/bin/env bash
# The test command: builds everything (CUDA code included) and runs every test. GPU tests skip
# visibly on a machine without a GPU. Extra arguments go to ctest (e.g. -L cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/build.sh default
echo "build took $(( $(date +%s) - start )) s"
ctest --preset default "$@"
