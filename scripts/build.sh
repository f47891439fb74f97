#!/usr/bin/env bash
# Installs what is missing, configures and builds (preset "default" unless $1 names another).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
preset="${1:-default}"
scripts/setup-deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
