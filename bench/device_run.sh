#!/bin/bash
# One device call: build, run the GPU tests, run the benchmarks; logs under $OUT.
# Usage on the GPU machine (from the repository root, with .deps carried):
#   bash bench/device_run.sh [ctest regex] [bench args...]
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
  cmake --build build -j16 --target ${TARGETS:-gpu_dense bench_dense} >> "$OUT/build.log" 2>&1 ||
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
  ./build/bench/bench_dense "$@" > "$OUT/bench.csv" 2> "$OUT/bench.log"
  echo "== bench rc=$?"
  cat "$OUT/bench.log"
fi
# Row-kernel variants on the bench shapes (ROW_VARIANTS="rowblock cluster").
for variant in ${ROW_VARIANTS:-}; do
  echo "== bench variant $variant"
  KLJIT_ROW_KERNEL=$variant ./build/bench/bench_dense --no-twophase "$@" \
    >> "$OUT/bench-variants.csv" 2> >(tee -a "$OUT/bench-variants.log" >&2)
done
# compute-sanitizer on small GPU cases (SANITIZE=1).
if [ "${SANITIZE:-0}" = 1 ]; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  for tool in memcheck racecheck; do
    for case in a_single_row all_rows_ignored_gives_zero_loss_and_gradients \
                native_logits_and_accumulated_grad_weight; do
      for variant in twopass cluster; do
        KLJIT_ROW_KERNEL=$variant "$cs" --tool $tool --error-exitcode 9 ./build/tests/gpu_dense $case \
          > /tmp/san.log 2>&1
        echo "== $tool $case $variant rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log | head -1)"
        cat /tmp/san.log >> "$OUT/sanitizer.log"
      done
    done
  done
fi
