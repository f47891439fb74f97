#!/usr/bin/env bash
# Runs one GoogleTest binary (or one shard of it) under compute-sanitizer; what the `memcheck` and
# `racecheck` ctest labels run.
#   compute_sanitizer_test.sh SANITIZER TOOL BINARY FILTER
# SANITIZER is the compute-sanitizer found at configure time ("" where none was). FILTER is a
# gtest filter; $MXLINEAR_SANITIZE_FILTER overrides it. Without compute-sanitizer or without an
# sm_90 GPU it prints "SKIPPED: ..." and exits 77, which ctest shows as a skip. Any error the tool
# reports exits 1 (--error-exitcode), as does a failing test.
set -uo pipefail
sanitizer=$1 tool=$2 binary=$3 filter=${MXLINEAR_SANITIZE_FILTER:-$4}

if [ -z "$sanitizer" ] || [ ! -x "$sanitizer" ]; then
  echo "SKIPPED: no compute-sanitizer (it comes with the CUDA toolkit; reconfigure to find it)"
  exit 77
fi
# The GPU tests need a compute capability 9.x device; the same check as mxlinear::gpu_available.
if ! nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | grep -q '^9\.'; then
  echo "SKIPPED: no sm_90 GPU"
  exit 77
fi
exec "$sanitizer" --tool "$tool" --error-exitcode 1 "$binary" --gtest_filter="$filter"
