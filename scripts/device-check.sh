#!/usr/bin/env bash
# One call on the H200: build, GPU tests, compute-sanitizer (memcheck, racecheck), SASS summary,
# the selection report and benchmarks. Everything lands in $OUT (default ./device-out). Steps:
#   test sanitize sass select bench      (default: all)
#   stress      every decode and gemv config and the 4-stage prefill configs, run directly 4 times on
#               seed-sized layers with several token tiles (mxlinear check --kernel K --repeat),
#               then racecheck on the first failing one (the decode kernel's missing proxy
#               fence only showed there; docs/PERF.md)
#   timeline    per-CTA phase stamps of decode, gemv and prefill configs ($TIMELINE_TARGETS) from a
#               -DMXLINEAR_TIMELINE=ON build in build-timeline (mxlinear timeline)
#   micro       the micro-benchmarks named in $MICRO (CMake targets under bench/micro, default
#               mxlinear_share_exchange), built here and run one after another; micro-NAME.txt
#               each (a failing check inside one fails the step)
#   profile     Nsight Compute (speed of light, warp states, source-level stall counters, launch
#               stats) on one launch per target; one ncu-NAME.txt each. $PROFILE_TARGETS, space
#               separated, each either
#                 bench:NAME:SWEEP_KERNEL:M:REGEX  inside a bench sweep of the qkv layer (REGEX:
#                                                  of the mangled kernel name; large M)
#                 check:NAME:KERNEL:CONFIG:M:N:K   one exact config through `mxlinear check`
#               default: the 128 x 256 prefill (128-K and overlapped 64-K stages) and the
#               overlapped 128 x 192 one at M = 8192,
#               the tuned decode config and the gemv ring at M = 1 on the qkv shape
#   ab          the same bench ($BENCH_ARGS) and timelines ($TIMELINE_TARGETS, when set) on a
#               base: this tree with the diff $AB_PATCH (a file in the tree, e.g. from
#               `git diff BASE > ab.patch`) reversed, built in /tmp/ab-base; bench-base.json,
#               bench-base.txt, timeline-base.txt and ab-summary.md (scripts/ab_summary.py:
#               change / base per M, with `bench` in the same call). Same machine, same call: the
#               only fair comparison (machines differ by up to ~10%)
#   variant     the same bench ($BENCH_ARGS) and timelines ($TIMELINE_TARGETS, when set) on this
#               tree built with $VARIANT_FLAGS added to the CUDA flags (a measurement-only
#               switch, e.g. -DMXLINEAR_PREFETCH_ALL; several sets separated by ';'), in build-variant and
#               build-variant-timeline: bench-variant.json, bench-variant.txt,
#               variant-summary.md (the variant / this tree, per M: below 1, the variant is
#               faster; before session 27 the other way round) and timeline-variant.txt
#               (VARIANT_BENCH=0: timelines only). Next to `bench` in the
#               same call, like `ab`. The timeline and variant builds run beside the main one
# Each step but sass and select appends "STEP ended at N s" (since the call began) to machine.txt.
# PACK_OUT=1 packs everything the call wrote into $OUT/out.tgz as it ends (a build failure
# included): the device returns at most 8 files, which a call with several steps outgrows.
# Extra bench arguments go in $BENCH_ARGS (SAMPLE_CLOCKS=1 also samples the clocks meanwhile);
# $SANITIZE_TESTS (names of GPU test binaries) narrows the sanitizer step and $SANITIZE_FILTER (a
# gtest filter, default: all but the seed-sized stress tests) the tests it runs; $SANITIZE_TOOLS
# (default "memcheck racecheck") the tools. To spend less device time on one kernel: $BUILD_TARGETS
# (CMake targets, default: every GPU test binary and the CLI) and $TEST_REGEX (ctest -R);
# SKIP_BUILD=1 runs on build-device as it is.
# Throughout, "A && B || C" means C on either failure, and $BENCH_ARGS / $BUILD_TARGETS are word
# lists split on purpose:
# shellcheck disable=SC2015,SC2086
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
steps="${*:-test sanitize sass select bench}"
export PATH="$PATH:/usr/local/cuda/bin"
status=0
if [ "${PACK_OUT:-0}" = 1 ]; then
  # shellcheck disable=SC2317  # run by the EXIT trap
  pack_out() {
    tar -czf /tmp/device-out.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/device-out.tgz "$OUT/out.tgz"
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
# How long each step took, for planning device time: "STEP ended at N s" in machine.txt.
step_ended() { echo "$1 ended at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/machine.txt"; }
# The CLI builds that the timeline and variant steps need start now, in the background beside
# the main build: each is bound by one long translation unit (prefill_gemm.cu), so side by side
# they cost little more than one. side_build DIR FLAGS... starts one; wait_side_build DIR waits.
declare -A side_builds=()
variant_sets=()
side_build() {
  local dir=$1
  shift
  (cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXLINEAR_BUILD_TESTS=OFF "$@" \
     >"/tmp/side-$dir.log" 2>&1 &&
     cmake --build "$dir" -j "$(nproc)" --target mxlinear_cli >>"/tmp/side-$dir.log" 2>&1) &
  side_builds[$dir]=$!
}
declare -A side_status=()
wait_side_build() {
  if [ -z "${side_status[$1]:-}" ]; then
    wait "${side_builds[$1]}"
    side_status[$1]=$?
    [ "${side_status[$1]}" = 0 ] || { echo "BUILD FAILED: $1"; tail -20 "/tmp/side-$1.log"; }
  fi
  return "${side_status[$1]}"
}
if [[ " $steps " == *" timeline "* ]]; then side_build build-timeline -DMXLINEAR_TIMELINE=ON; fi
if [[ " $steps " == *" variant "* ]]; then
  [ -n "${VARIANT_FLAGS:-}" ] || { echo "VARIANT: set VARIANT_FLAGS (e.g. -DMXLINEAR_PREFETCH_ALL)"; exit 1; }
  IFS=';' read -r -a variant_sets <<<"$VARIANT_FLAGS"
  for ((v = 0; v < ${#variant_sets[@]}; ++v)); do
    suffix="" && [ "${#variant_sets[@]}" -gt 1 ] && suffix="-$((v + 1))"
    [ "${VARIANT_BENCH:-1}" = 1 ] && side_build "build-variant$suffix" "-DCMAKE_CUDA_FLAGS=${variant_sets[v]}"
    [ -n "${TIMELINE_TARGETS:-}" ] && side_build "build-variant-timeline$suffix" \
      "-DCMAKE_CUDA_FLAGS=${variant_sets[v]}" -DMXLINEAR_TIMELINE=ON
  done
fi

# SKIP_BUILD=1: use build-device as it is (two invocations side by side, after one that built).
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 &&
    cmake --build build-device -j "$(nproc)" --target ${BUILD_TARGETS:-quantize_gpu_test \
      generic_gemm_gpu_test gemv_gemm_gpu_test decode_gemm_gpu_test prefill_gemm_gpu_test \
      linear_gpu_test mxlinear_cli} >>"$OUT/build.log" 2>&1 ||
    { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
  rm -f "$OUT/build.log"  # kept only when the build fails: the device returns at most 8 files
fi
gpu_tests=(build-device/tests/gpu/quantize_gpu_test build-device/tests/gpu/generic_gemm_gpu_test
           build-device/tests/gpu/gemv_gemm_gpu_test build-device/tests/gpu/decode_gemm_gpu_test
           build-device/tests/gpu/prefill_gemm_gpu_test
           build-device/tests/gpu/linear_gpu_test)

if [[ " $steps " == *" test "* ]]; then
  # Several test processes share the GPU (each test's inputs and outputs are its own), which
  # cuts the step from ~200 s to about a third; $TEST_JOBS overrides.
  ctest --test-dir build-device -L gpu -R "${TEST_REGEX:-.}" -j "${TEST_JOBS:-4}" --output-on-failure \
    >"$OUT/ctest.log" 2>&1 || status=1
  tail -5 "$OUT/ctest.log"
  grep -E "Failed|\*\*\*" "$OUT/ctest.log" | head -20
  step_ended test
fi

if [[ " $steps " == *" sanitize "* ]]; then
  # Every (tool, test binary) pair as its own processes, all at once: racecheck's host-side
  # analysis is the slow part and the device has 16 cores. The largest binaries run as several
  # gtest shards ($SANITIZE_SHARDS: "binary:count ..."). The whole prefill binary's racecheck does
  # not fit one call even alone ($SANITIZE_TOOLS=racecheck): racecheck's throughput on the H200
  # stays near 1-1.6 tests a second however many shards run (7 in session 26, 15 in session 27),
  # and its 798 tests took three calls. Each process appends
  # its log to $OUT/sanitize.log the moment it ends, so a call cut short still returns what
  # finished; $SANITIZE_TIMEOUT (seconds, default 500) ends one that would not (its log may then
  # lack a last newline, which is added so that the next header starts a line).
  shards_of() {
    for entry in ${SANITIZE_SHARDS:-prefill_gemm_gpu_test:6 decode_gemm_gpu_test:4 linear_gpu_test:2}; do
      [ "${entry%%:*}" = "$1" ] && { echo "${entry##*:}"; return; }
    done
    echo 1
  }
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    for t in "${gpu_tests[@]}"; do
      name=$(basename "$t")
      if [[ -n "${SANITIZE_TESTS:-}" && " $SANITIZE_TESTS " != *" $name "* ]]; then
        continue
      fi
      shards=$(shards_of "$name")
      for ((shard = 0; shard < shards; ++shard)); do
        pair="$tool.$name"
        [ "$shards" -gt 1 ] && pair="$pair.shard$((shard + 1))-of-$shards"
        # The seed-sized stress tests take minutes under the sanitizers; the small shapes cover
        # the same code paths.
        (log=$(mktemp)
         GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard \
           GTEST_FILTER="${SANITIZE_FILTER:--*SeedSized*}" timeout "${SANITIZE_TIMEOUT:-500}" \
           compute-sanitizer --tool "$tool" --error-exitcode 9 "$t" --gtest_brief=1 >"$log" 2>&1
         rc=$?
         summary="$pair: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
         [ "$rc" -eq 124 ] && summary="$summary TIMED OUT"
         echo "$summary"
         { flock 9; { echo "== $summary"; cat "$log"; [ -z "$(tail -c 1 "$log")" ] || echo; } >>"$OUT/sanitize.log"; } 9>>"$OUT/.sanitize.lock"
         rm -f "$log"
         exit "$rc") &
      done
    done
  done
  for job in $(jobs -p); do wait "$job" || status=1; done
  rm -f "$OUT/.sanitize.lock"
  step_ended sanitize
fi

if [[ " $steps " == *" sass "* ]]; then
  for kernel in generic_gemm gemv_gemm decode_gemm prefill_gemm; do
    obj=$(find build-device -name "$kernel.cu.o" | head -1)
    cuobjdump --dump-sass "$obj" >"/tmp/$kernel.sass" 2>&1
    echo "SASS $kernel:"
    for op in HMMA QGMMA HGMMA LDL STL F2FP LDSM LDGSTS UTMALDG SYNCS; do
      printf '%-8s %s\n' "$op" "$(grep -c "$op" "/tmp/$kernel.sass")"
    done
  done | tee -a "$OUT/machine.txt"  # the device returns at most 8 files
fi

if [[ " $steps " == *" select "* ]]; then
  build-device/tools/mxlinear select --model builtin:minimax-m3.1-flash-tp4 | tee "$OUT/select.txt"
  build-device/tools/mxlinear select --model builtin:minimax-m3.1-flash-tp4 --json >"$OUT/select.json"
fi

if [[ " $steps " == *" stress "* ]]; then
  log="$OUT/stress.log"
  first_failure=""
  runs=()
  for config in t8_st4_split{1,2,4,8} t32_st4_split{1,2,4,8} t128_st4_split{1,2,4,8} \
    t8x2_st8_split{1,2,4,8} t32x2_st4_split{1,2,4,8} t8_st6_split{1,2,4,8}; do
    runs+=("decode $config")
  done
  for instance in w128_t128_st4 w128_t128_st4_overlap w64_t32_st4_overlap w64_t64_st4_overlap \
    w128_t256_st2 w128_t64_st4_overlap w128_t192_st3 w128_t192_st3_overlap w128_t256_st4_k64 \
    w128_t256_st4_k64_overlap; do
    for split in "" _split2 _split4 _split8; do runs+=("prefill $instance$split"); done
  done
  for config in t8_w4 t8_w8 t16_w8 t8_w4_r8 t8_w8_r4 t8_w8_r6 t8_w4_r3 t8_w4_r4 t8_w8_s2 \
    t8_w8_r4_s2 t8_w4_r3_s4 t8_w4_r4_s4 t8_w4_r3_n48 t8_w4_r4_n48; do
    runs+=("gemv $config")
  done
  for run in "${runs[@]}"; do
    read -r kernel config <<<"$run"
    # $STRESS_KERNELS (e.g. "gemv decode") narrows the step to those kernels' configs.
    if [[ -n "${STRESS_KERNELS:-}" && " $STRESS_KERNELS " != *" $kernel "* ]]; then continue; fi
    shapes=("32 6144 3072" "128 6144 3072")
    [ "$kernel" = gemv ] && shapes=("1 6144 3072" "2 2560 6144" "13 6144 768")
    for shape in "${shapes[@]}"; do
      read -r m n k <<<"$shape"
      args=(--kernel "$kernel" --config "$config" --m "$m" --n "$n" --k "$k")
      if build-device/tools/mxlinear check "${args[@]}" --out-dtype fp32 \
          --repeat 4 --seed 7 >>"$log" 2>&1; then
        verdict=PASS
      else
        verdict=FAIL
        status=1
        [ -z "$first_failure" ] && first_failure="${args[*]}"
      fi
      echo "stress $kernel/$config M=$m N=$n K=$k: $verdict" | tee -a "$OUT/machine.txt"
    done
  done
  if [ -n "$first_failure" ]; then
    echo "== racecheck on: $first_failure" >>"$log"
    timeout 240 compute-sanitizer --tool racecheck build-device/tools/mxlinear check \
      $first_failure --out-dtype fp32 --repeat 1 --seed 7 >>"$log" 2>&1
    grep -E "RACECHECK SUMMARY|Race reported" "$log" | head -5
  fi
  step_ended stress
fi

if [[ " $steps " == *" profile "* ]]; then
  targets="${PROFILE_TARGETS:-bench:prefill256:prefill:8192:Li2ELb0ELi2ELi256E \
bench:prefill192o:prefill:8192:Li3ELb1ELi2ELi192E bench:prefill256k64o:prefill:8192:Li4ELb1ELi2ELi256ELi64E \
check:decode:decode:t8_st4_split8:1:2560:6144 check:gemv_ring:gemv:t8_w8_r4:1:2560:6144}"
  # --clock-control none: the card's clocks are left as found (the device library's METHOD.md);
  # ncu's default locks them to base for the run (sessions 4 and 5 profiled at 1.34-1.41 GHz).
  # The stall reasons per issued instruction, which the sections' text leaves out.
  sections=(--clock-control none --section SpeedOfLight --section WarpStateStats
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy
            --section SourceCounters --section LaunchStats
            --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio')
  for target in $targets; do
    IFS=: read -r how name a b c d e <<<"$target"
    if [ "$how" = bench ]; then  # a: sweep kernel, b: M, c: regex
      ncu --kernel-name-base mangled "${sections[@]}" -k "regex:$c" --launch-skip 1 -c 1 \
        build-device/tools/mxlinear bench --model bench/models/qkv-only.csv --m "$b" \
        --all-configs --sweep-kernels "$a" --replays 3 >"$OUT/ncu-$name.txt" 2>&1 || status=1
    else  # a: kernel, b: config, c d e: M N K
      ncu "${sections[@]}" -k "regex:${a}_gemm" -c 1 \
        build-device/tools/mxlinear check --kernel "$a" --config "$b" --m "$c" --n "$d" --k "$e" \
        --seed 7 >"$OUT/ncu-$name.txt" 2>&1 || status=1
    fi
    echo "== ncu $name"
    grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy" \
      "$OUT/ncu-$name.txt" | head -8
  done
  step_ended profile
fi

if [[ " $steps " == *" timeline "* ]]; then
  # Per-CTA phase stamps (entry, past the wait on the previous kernel, prologue, main loop,
  # reduction, store) from a separate -DMXLINEAR_TIMELINE=ON build: where a decode, gemv or
  # prefill call's microseconds go. $TIMELINE_TARGETS, space separated, each KERNEL:CONFIG:M:N:K;
  # $TIMELINE_ARGS go to every call (e.g. "--slowest 16": the CTAs that ended last, with their SM).
  wait_side_build build-timeline || status=1
  for target in ${TIMELINE_TARGETS:-decode:t8_st4_split8:1:2560:6144 gemv:t8_w8_r4:1:2560:6144 \
decode:t8_st4_split4:1:6144:6144 decode:t8x2_st8_split1:1:6144:768 \
prefill:w128_t128_st4_overlap_split2:128:6144:6144 prefill:w128_t256_st4_k64_overlap:8192:6144:6144}; do
    IFS=: read -r kernel config m n k <<<"$target"
    build-timeline/tools/mxlinear timeline --kernel "$kernel" --config "$config" --m "$m" \
      --n "$n" --k "$k" ${TIMELINE_ARGS:-} 2>&1 | tee -a "$OUT/timeline.txt" || status=1
  done
  step_ended timeline
fi

if [[ " $steps " == *" micro "* ]]; then
  for dir in "${!side_builds[@]}"; do wait_side_build "$dir"; done  # nothing compiles beside them
  for name in ${MICRO:-mxlinear_share_exchange}; do
    cmake --build build-device -j "$(nproc)" --target "$name" >"/tmp/micro-$name.log" 2>&1 ||
      { echo "BUILD FAILED: $name"; tail -20 "/tmp/micro-$name.log"; status=1; continue; }
    echo "== micro $name"
    timeout 120 "build-device/bench/$name" 2>&1 | tee "$OUT/micro-$name.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
  step_ended micro
fi

if [[ " $steps " == *" bench "* ]]; then
  # No compiler beside the timed runs.
  for dir in "${!side_builds[@]}"; do wait_side_build "$dir"; done
  # SAMPLE_CLOCKS=1: nvidia-smi samples the SM clock, power and clock-event reasons every 50 ms
  # while the bench runs (clocks.csv), summarised at the end of bench.txt.
  sampler=""
  if [ "${SAMPLE_CLOCKS:-0}" = 1 ]; then
    nvidia-smi --format=csv,noheader,nounits -lms 50 \
      --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active \
      >"$OUT/clocks.csv" 2>&1 &
    sampler=$!
  fi
  build-device/tools/mxlinear bench ${BENCH_ARGS:-} --json "$OUT/bench.json" \
    --markdown "$OUT/bench.md" 2>&1 | tee "$OUT/bench.txt"
  if [ -n "$sampler" ]; then
    kill "$sampler"
    wait "$sampler" 2>/dev/null
    python3 scripts/clock_summary.py "$OUT/clocks.csv" | tee -a "$OUT/bench.txt"
  fi
  step_ended bench
fi

if [[ " $steps " == *" ab "* ]]; then
  # The device machine gets only the files git does not ignore.
  [ -f "${AB_PATCH:-}" ] || {
    echo "AB: AB_PATCH='${AB_PATCH:-}' is not a file here; set it to a diff file in the tree that git does not ignore"
    exit 1
  }
  base=/tmp/ab-base
  rm -rf "$base" && mkdir -p "$base"
  tar --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C "$base"
  if ! (cd "$base" && git apply -R "$PWD/$AB_PATCH"); then
    echo "AB: $AB_PATCH does not reverse onto this tree"
    exit 1
  fi
  for flavour in plain timeline; do
    [ "$flavour" = timeline ] && [ -z "${TIMELINE_TARGETS:-}" ] && continue
    flags=(-DMXLINEAR_BUILD_TESTS=OFF)
    [ "$flavour" = timeline ] && flags+=(-DMXLINEAR_TIMELINE=ON)
    cmake -S "$base" -B "$base/build-$flavour" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" \
      >"$OUT/ab-build.log" 2>&1 &&
      cmake --build "$base/build-$flavour" -j "$(nproc)" --target mxlinear_cli \
        >>"$OUT/ab-build.log" 2>&1 || { echo "AB BUILD FAILED"; tail -20 "$OUT/ab-build.log"; exit 1; }
  done
  rm -f "$OUT/ab-build.log"
  for target in ${TIMELINE_TARGETS:-}; do
    IFS=: read -r kernel config m n k <<<"$target"
    "$base/build-timeline/tools/mxlinear" timeline --kernel "$kernel" --config "$config" --m "$m" \
      --n "$n" --k "$k" 2>&1 | tee -a "$OUT/timeline-base.txt" || status=1
  done
  "$base/build-plain/tools/mxlinear" bench ${BENCH_ARGS:-} --json "$OUT/bench-base.json" 2>&1 |
    tee "$OUT/bench-base.txt"
  # The change against its base, per M (needs the bench step's bench.json from this call).
  [ -f "$OUT/bench.json" ] && python3 scripts/ab_summary.py "$OUT/bench.json" "$OUT/bench-base.json" |
    tee "$OUT/ab-summary.md"
  step_ended ab
fi
if [[ " $steps " == *" variant "* ]]; then
  # Several variants: flag sets separated by ';', measured one after another (outputs suffixed
  # -1, -2, ...; a single set keeps the unsuffixed names). VARIANT_BENCH=0: timelines only.
  for ((v = 0; v < ${#variant_sets[@]}; ++v)); do
    suffix="" && [ "${#variant_sets[@]}" -gt 1 ] && suffix="-$((v + 1))"
    echo "== variant$suffix: ${variant_sets[v]}" | tee -a "$OUT/timeline-variant$suffix.txt"
    if [ -n "${TIMELINE_TARGETS:-}" ]; then
      wait_side_build "build-variant-timeline$suffix" || exit 1
      for target in ${TIMELINE_TARGETS:-}; do
        IFS=: read -r kernel config m n k <<<"$target"
        build-variant-timeline$suffix/tools/mxlinear timeline --kernel "$kernel" --config "$config" \
          --m "$m" --n "$n" --k "$k" ${TIMELINE_ARGS:-} 2>&1 |
          tee -a "$OUT/timeline-variant$suffix.txt" || status=1
      done
    fi
    if [ "${VARIANT_BENCH:-1}" = 1 ]; then
      wait_side_build "build-variant$suffix" || exit 1
      build-variant$suffix/tools/mxlinear bench ${BENCH_ARGS:-} --json "$OUT/bench-variant$suffix.json" 2>&1 |
        tee "$OUT/bench-variant$suffix.txt"
      # The variant is the change and this tree its base, as in `ab`.
      [ -f "$OUT/bench.json" ] && python3 scripts/ab_summary.py "$OUT/bench-variant$suffix.json" \
        "$OUT/bench.json" | tee "$OUT/variant$suffix-summary.md"
    fi
  done
  step_ended variant
fi
exit $status
