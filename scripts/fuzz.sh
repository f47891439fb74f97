#!/usr/bin/env bash
# Builds the libFuzzer target for the tuned-table parser with clang and runs it for $1 seconds
# (default 20) over tests/fuzz/corpus. Exits 0 with a visible notice where clang's libFuzzer
# is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
out=build/fuzz
mkdir -p "$out/corpus"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: SKIPPED (no clang++)"
  exit 0
fi
if ! clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Iinclude -Isrc tests/fuzz/tuned_table_fuzzer.cpp src/host/registry/tuned_table.cpp \
    -lfmt -o "$out/tuned_table_fuzzer" 2>"$out/build.log"; then
  if grep -q "libclang_rt.fuzzer" "$out/build.log"; then
    echo "fuzz: SKIPPED (clang's libFuzzer runtime is not installed)"
    exit 0
  fi
  cat "$out/build.log"
  exit 1
fi
cp tests/fuzz/corpus/* "$out/corpus/"
"$out/tuned_table_fuzzer" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
  "$out/corpus" 2>"$out/fuzz.log" || { tail -40 "$out/fuzz.log"; exit 1; }
grep -E "^stat::number_of_executed_units|^Done" "$out/fuzz.log" | sed 's/^/fuzz: /'
echo "fuzz: tuned-table parser, ${seconds} s, no crash"
