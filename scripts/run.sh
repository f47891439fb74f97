#!/usr/bin/env bash
# The main job: builds, then runs `mxlinear` (arguments pass through; none runs the built-in
# example layer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh default >&2
exec build/tools/mxlinear "$@"
