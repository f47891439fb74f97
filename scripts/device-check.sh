#!/usr/bin/env bash
# What a developer runs on a Hopper GPU machine: builds (preset "default", build/), then runs the
# steps named as arguments (default: test sanitize sass select bench). Output goes to $OUT
# (default ./device-out); machine.txt records the machine and how long each step took.
#   test      the GPU tests (ctest -L gpu; $TEST_JOBS processes share the GPU, default 4)
#   sanitize  the GPU test binaries under compute-sanitizer: the ctest labels in
#             $SANITIZE_TOOLS (default "memcheck racecheck"), $SANITIZE_JOBS at once (default
#             16), narrowed by $SANITIZE_TESTS (a ctest -R regex); $MXLINEAR_SANITIZE_FILTER
#             replaces the gtest filter (default: all but the seed-sized stress tests).
#             sanitize.log holds every test's output (each line prefixed with its ctest number)
#   sass      per kernel, the count of each instruction of interest (sass.txt); fails where a
#             kernel uses local memory (LDL/STL: spills or stack arrays) or where a wgmma kernel
#             (decode, prefill) has no HGMMA
#   select    the selection report for the built-in model (select.txt, select.json)
#   bench     `mxlinear bench $BENCH_ARGS`: bench.json, bench.md, bench.txt. SAMPLE_CLOCKS=1
#             also samples the SM clock and power every 50 ms meanwhile (clocks.csv), summarised
#             at the end of bench.txt
#   ab        the same bench on a base: the source tree in $AB_BASE_DIR (e.g. from
#             `git archive BASE | tar -x -C /tmp/base`), built in $AB_BUILD_DIR (default
#             build-ab-base) beside the main build. Both binaries run alternately, $AB_ROUNDS
#             rounds (default 2: this tree, base, base, this tree), so that drift in clocks and
#             temperature falls on both: bench.json and bench-base.json (round 1),
#             bench-2.json and bench-base-2.json (round 2), ..., and ab-summary.md,
#             ab-summary-2.md, ... (scripts/ab_summary.py: this tree / base per M; below 1 this
#             tree is faster). Implies bench
#   python    the Python package: `pip install .` into the environment of $PYTHON (default
#             python3; it must have torch, scikit-build-core and pytest), then its whole pytest
#             suite, GPU tests included: pytest.log
#   pybench   `python -m mxlinear.bench $PYBENCH_ARGS`: pybench.json, pybench.txt. Implies python
#   minilm    examples/minilm/run.py on the model directory $MINILM_DIR (default .devrun/minilm):
#             minilm/. Implies python
# SKIP_BUILD=1 uses build/ as it is. PACK_OUT=1 packs everything under $OUT into $OUT/out.tgz as
# the script ends, a failed build included.
# $BENCH_ARGS is a word list, split on purpose:
# shellcheck disable=SC2086
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
steps=" ${*:-test sanitize sass select bench} "
export PATH="$PATH:/usr/local/cuda/bin"
# On the GPU machine a GPU test that finds no GPU fails instead of skipping.
export MXLINEAR_REQUIRE_GPU=1
status=0
has_step() { [[ "$steps" == *" $1 "* ]]; }

if [ "${PACK_OUT:-0}" = 1 ]; then
  # shellcheck disable=SC2317  # run by the EXIT trap
  pack_out() {
    local packed
    packed=$(mktemp --suffix=.tgz)
    tar -czf "$packed" -C "$OUT" . && rm -rf "${OUT:?}"/* && mv "$packed" "$OUT/out.tgz"
  }
  trap pack_out EXIT
fi

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  uname -r
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
t0=$(date +%s)
step_ended() { echo "$1 ended at $(($(date +%s) - t0)) s" | tee -a "$OUT/machine.txt"; }

# The base of `ab` builds in the background beside the main build: each is bound by one long
# translation unit, so side by side they cost little more than one.
ab_build="${AB_BUILD_DIR:-$PWD/build-ab-base}"
if has_step ab; then
  [ -f "${AB_BASE_DIR:-}/CMakeLists.txt" ] || {
    echo "ab: AB_BASE_DIR='${AB_BASE_DIR:-}' is not a source tree (no CMakeLists.txt there)"
    exit 1
  }
  (cmake -S "$AB_BASE_DIR" -B "$ab_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DMXLINEAR_BUILD_TESTS=OFF >"$OUT/ab-build.log" 2>&1 &&
     cmake --build "$ab_build" -j "$(nproc)" --target mxlinear_cli >>"$OUT/ab-build.log" 2>&1) &
  ab_build_pid=$!
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if ! { cmake --preset default >"$OUT/build.log" 2>&1 &&
         cmake --build --preset default -j "$(nproc)" >>"$OUT/build.log" 2>&1; }; then
    echo "BUILD FAILED"
    tail -40 "$OUT/build.log"
    exit 1
  fi
  rm -f "$OUT/build.log"  # kept only when the build fails
  step_ended build
fi
cli=build/tools/mxlinear

if has_step test; then
  # Each test's inputs and outputs are its own, so several processes share the GPU.
  ctest --test-dir build -L '^gpu$' -j "${TEST_JOBS:-4}" --output-on-failure \
    >"$OUT/ctest.log" 2>&1 || status=1
  tail -5 "$OUT/ctest.log"
  grep -E "Failed|\*\*\*" "$OUT/ctest.log" | head -20
  step_ended test
fi

if has_step sanitize; then
  tools="${SANITIZE_TOOLS:-memcheck racecheck}"
  ctest --test-dir build -L "^(${tools// /|})\$" -R "${SANITIZE_TESTS:-.}" \
    -j "${SANITIZE_JOBS:-16}" -V >"$OUT/sanitize.log" 2>&1 || status=1
  grep -E "^[0-9]+/[0-9]+ Test|tests passed, " "$OUT/sanitize.log" | grep -vE " Passed " | head -40
  step_ended sanitize
fi

# sass_report: each kernel's instruction counts, and a "SASS FAIL" line per broken expectation.
sass_report() {
  local kernel obj op
  for kernel in generic_gemm gemv_gemm decode_gemm prefill_gemm; do
    obj=$(find build/src -name "$kernel.cu.o" | head -1)
    if [ -z "$obj" ] || ! cuobjdump --dump-sass "$obj" >"/tmp/$kernel.sass" 2>&1; then
      echo "SASS FAIL: $kernel: no object file, or cuobjdump failed on it"
      continue
    fi
    echo "SASS $kernel:"
    local -A count=()
    for op in HMMA QGMMA HGMMA LDL STL F2FP LDSM LDGSTS UTMALDG SYNCS; do
      count[$op]=$(grep -c "$op" "/tmp/$kernel.sass")
      printf '%-8s %s\n' "$op" "${count[$op]}"
    done
    if [ "${count[LDL]}" != 0 ] || [ "${count[STL]}" != 0 ]; then
      echo "SASS FAIL: $kernel uses local memory (LDL ${count[LDL]}, STL ${count[STL]})"
    fi
    if [[ $kernel == decode_gemm || $kernel == prefill_gemm ]] && [ "${count[HGMMA]}" = 0 ]; then
      echo "SASS FAIL: $kernel has no HGMMA (its wgmma did not reach the tensor cores)"
    fi
  done
}

if has_step sass; then
  sass_report | tee "$OUT/sass.txt"
  ! grep -q "SASS FAIL" "$OUT/sass.txt" || status=1
fi

if has_step select; then
  "$cli" select --model builtin:minimax-m3.1-flash-tp4 | tee "$OUT/select.txt" || status=1
  "$cli" select --model builtin:minimax-m3.1-flash-tp4 --json >"$OUT/select.json" || status=1
fi

if has_step python || has_step pybench || has_step minilm; then
  py="${PYTHON:-python3}"
  if "$py" -m pip install -q --no-build-isolation --no-deps --no-index . >"$OUT/pip.log" 2>&1; then
    rm -f "$OUT/pip.log"
    if has_step python; then
      (cd python/tests && "$py" -m pytest -q -rs -p no:cacheprovider) >"$OUT/pytest.log" 2>&1 ||
        status=1
      tail -25 "$OUT/pytest.log"
    fi
    if has_step pybench; then
      "$py" -m mxlinear.bench ${PYBENCH_ARGS:-} --json "$OUT/pybench.json" 2>&1 |
        tee "$OUT/pybench.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
    fi
    if has_step minilm; then
      "$py" examples/minilm/run.py --model "${MINILM_DIR:-.devrun/minilm}" \
        --out "$OUT/minilm" 2>&1 | tee "$OUT/minilm.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
    fi
  else
    echo "PYTHON PACKAGE BUILD FAILED"
    tail -40 "$OUT/pip.log"
    status=1
  fi
  step_ended python
fi

# bench_run BINARY NAME [ARGS...]: one `mxlinear bench $BENCH_ARGS` into NAME.json and NAME.txt.
bench_run() {
  local binary=$1 name=$2
  shift 2
  "$binary" bench ${BENCH_ARGS:-} --json "$OUT/$name.json" "$@" 2>&1 | tee "$OUT/$name.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}

if has_step bench || has_step ab; then
  if has_step ab; then
    wait "$ab_build_pid" || { echo "AB BUILD FAILED"; tail -20 "$OUT/ab-build.log"; exit 1; }
    rm -f "$OUT/ab-build.log"
  fi
  sampler=""
  if [ "${SAMPLE_CLOCKS:-0}" = 1 ]; then
    nvidia-smi --format=csv,noheader,nounits -lms 50 \
      --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active \
      >"$OUT/clocks.csv" 2>&1 &
    sampler=$!
  fi
  if has_step ab; then
    for ((round = 1; round <= ${AB_ROUNDS:-2}; ++round)); do
      suffix="" && [ "$round" -gt 1 ] && suffix="-$round"
      order=(tree base) && [ $((round % 2)) = 0 ] && order=(base tree)
      for which in "${order[@]}"; do
        echo "== round $round: $which"
        if [ "$which" = tree ]; then
          bench_run "$cli" "bench$suffix" --markdown "$OUT/bench$suffix.md"
        else
          bench_run "$ab_build/tools/mxlinear" "bench-base$suffix"
        fi
      done
      if [ -f "$OUT/bench$suffix.json" ] && [ -f "$OUT/bench-base$suffix.json" ]; then
        python3 scripts/ab_summary.py "$OUT/bench$suffix.json" "$OUT/bench-base$suffix.json" |
          tee "$OUT/ab-summary$suffix.md"
      fi
    done
  else
    bench_run "$cli" bench --markdown "$OUT/bench.md"
  fi
  if [ -n "$sampler" ]; then
    kill "$sampler"
    wait "$sampler" 2>/dev/null
    python3 scripts/clock_summary.py "$OUT/clocks.csv" | tee -a "$OUT/bench.txt"
  fi
  step_ended bench
fi
exit $status
