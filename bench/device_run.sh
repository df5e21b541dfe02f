#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# One device call: build, run the GPU tests, run the benchmarks; logs under $OUT.
# Usage on the GPU machine (from the repository root, with .deps carried):
#   bash bench/device_run.sh [ctest regex] [bench args...]
# BENCH_RUNS="args;args;..." runs bench_loss once per argument set instead (logs appended).
set -u
OUT=${OUT:-/tmp/kljit-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.deps/lua/lib:${LD_LIBRARY_PATH:-}
export KLJIT_CACHE_DIR=/tmp/kljit-cache
regex=${1:-gpu}
shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
cmake -B build -DCMAKE_BUILD_TYPE=Release -DLUA_INCLUDE_DIR=$PWD/.deps/lua/include \
  -DLUA_LIBRARY=$PWD/.deps/lua/lib/liblua5.4.so > "$OUT/build.log" 2>&1 &&
  cmake --build build -j16 --target ${TARGETS:-gpu_dense gpu_sparse bench_loss} >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
echo "== build ok"
(cd build && ctest -R "$regex" -j4 -V --timeout 900) > "$OUT/ctest.log" 2>&1
grep -E "tests passed|tests failed|\*\*\*Failed|^[0-9]+: FAIL" "$OUT/ctest.log" | head -40
# worst error per input dtype over every GPU test case, with the tolerances the tests used
grep -E ": (ok|FAIL) " "$OUT/ctest.log" | awk '{
  for (i = 1; i <= NF; i++) {
    if ($i == "loss") l = $(i+1); if ($i == "rows") r = $(i+1); if ($i == "dX") x = $(i+1);
    if ($i == "dW") w = $(i+1); if ($i == "db") b = $(i+1)
  }
  d = $4; n[d]++; if (l+0 > L[d]) L[d] = l+0; if (r+0 > R[d]) R[d] = r+0; g = x+0;
  if (w+0 > g) g = w+0; if (b+0 > g) g = b+0; if (g > G[d]) G[d] = g
} END { for (d in n) printf "%s: %d cases, worst loss rel %.1e, row-loss rel %.1e, grad rel-Frobenius %.1e\n", d, n[d], L[d], R[d], G[d] }' | tee "$OUT/errors.txt"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  IFS=';' read -ra runs <<< "${BENCH_RUNS:-$*}"
  for args in "${runs[@]}"; do
    echo "== bench_loss $args" | tee -a "$OUT/bench.log"
    # shellcheck disable=SC2086
    ./build/bench/bench_loss $args >> "$OUT/bench.csv" 2> >(tee -a "$OUT/bench.log" >&2)
    echo "== bench rc=$?"
  done
fi
# Row-kernel variants on the bench shapes (ROW_VARIANTS="two_pass cluster").
for variant in ${ROW_VARIANTS:-}; do
  echo "== bench variant $variant"
  KLJIT_ROW_KERNEL=$variant ./build/bench/bench_loss --no-twophase "$@" \
    >> "$OUT/bench-variants.csv" 2> >(tee -a "$OUT/bench-variants.log" >&2)
done
# compute-sanitizer on small GPU cases (SANITIZE=1).
if [ "${SANITIZE:-0}" = 1 ]; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  for tool in memcheck racecheck; do
    for case in ${SANITIZE_CASES:-gpu_dense:a_single_row gpu_dense:native_logits_and_accumulated_grad_weight gpu_sparse:zero_mass_and_ignored_rows gpu_sparse:smallest_and_largest_k gpu_sparse:unchecked_out_of_range_id_does_not_fault}; do
      exe=${case%%:*} name=${case#*:}
      "$cs" --tool $tool --error-exitcode 9 ./build/tests/$exe $name > /tmp/san.log 2>&1
      echo "== $tool $exe $name rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log | head -1)"
      tail -5 /tmp/san.log >> "$OUT/sanitizer.log"
    done
  done
fi
