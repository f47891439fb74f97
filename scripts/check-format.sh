#!/usr/bin/env bash
# Fails if any C++/CUDA source differs from .clang-format (run `clang-format -i` on it to fix).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format: SKIPPED (no clang-format)"
  exit 0
fi
git ls-files -z '*.cpp' '*.hpp' '*.cu' '*.cuh' | xargs -0 clang-format --dry-run -Werror
echo "format: $(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' | wc -l) files clean"
