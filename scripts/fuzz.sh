#!/usr/bin/env bash
# Builds the libFuzzer targets for the tuned-table and model CSV parsers with clang and runs
# them for $1 seconds in all (default 20), split between them, over tests/fuzz/corpus and
# tests/fuzz/model_corpus. Exits 0 with a visible notice where clang's libFuzzer is not
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
each=$(( seconds / 2 > 0 ? seconds / 2 : 1 ))
out=build/fuzz
mkdir -p "$out/corpus" "$out/model_corpus"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: SKIPPED (no clang++)"
  exit 0
fi
sanitizers="fuzzer,address,undefined"
flags=(-std=c++20 -O1 -g "-fsanitize=$sanitizers" -fno-sanitize-recover=all -Iinclude -Isrc)
# name, then its sources
build() {
  local name=$1
  shift
  if ! clang++ "${flags[@]}" "$@" -lfmt -o "$out/$name" 2>"$out/build-$name.log"; then
    if grep -q "libclang_rt.fuzzer" "$out/build-$name.log"; then
      echo "fuzz: SKIPPED (clang's libFuzzer runtime is not installed)"
      exit 0
    fi
    cat "$out/build-$name.log"
    exit 1
  fi
}
build tuned_table_fuzzer tests/fuzz/tuned_table_fuzzer.cpp src/host/registry/tuned_table.cpp \
  src/host/log.cpp
build model_csv_fuzzer tests/fuzz/model_csv_fuzzer.cpp src/host/models.cpp src/host/log.cpp \
  src/host/validate.cpp src/host/error.cpp src/host/tensor.cpp
# name, corpus, what it parses
run() {
  cp "tests/fuzz/$2"/* "$out/$2/"
  "$out/$1" -max_total_time="$each" -max_len=4096 -print_final_stats=1 "$out/$2" \
    2>"$out/$1.log" || { tail -40 "$out/$1.log"; exit 1; }
  grep -E "^stat::number_of_executed_units|^Done" "$out/$1.log" | sed 's/^/fuzz: /'
  echo "fuzz: $3 parser, ${each} s, no crash"
}
run tuned_table_fuzzer corpus tuned-table
run model_csv_fuzzer model_corpus "model CSV"
