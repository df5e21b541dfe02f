#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# One device call for the generated GEMMs (issue 16): build, bench_gemm (checks, then the
# generated kernel against cuBLASLt's heuristic and best-of-8 choices), the tuner's cuBLASLt
# candidates on the fused 8192 x 4096 x 128256 problem, and optionally bench_loss with and
# without that wisdom. Run from the repository root with .deps beside it (DEPS=...):
#   bash bench/gemm_device_run.sh        (GEMM_ARGS, TUNE=0|1, LOSS=0|1 select the parts)
set -u
OUT=${OUT:-/tmp/kljit-out}
mkdir -p "$OUT"
DEPS=${DEPS:-$PWD/../.deps}
export LD_LIBRARY_PATH=$DEPS/lua/lib:${LD_LIBRARY_PATH:-}
export KLJIT_CACHE_DIR=/tmp/kljit-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
cmake -B build -DCMAKE_BUILD_TYPE=Release -DLUA_INCLUDE_DIR=$DEPS/lua/include \
  -DLUA_LIBRARY=$DEPS/lua/lib/liblua5.4.so > "$OUT/build.log" 2>&1 &&
  cmake --build build -j16 \
    --target ${TARGETS:-bench_gemm kljit_cli bench_loss gpu_dense gpu_api gpu_gemm} \
    >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "== build ok"
if [ "${GTEST:-1}" = 1 ]; then
  for c in ${GTEST_CASES:-every_dtype_output_and_beta_matches_fp64_on_ragged_shapes}; do
    timeout ${GTEST_TIMEOUT:-90} ./build/tests/gpu_gemm $c > "$OUT/gpu_gemm_$c.log" 2>&1
    echo "== gpu.gemm.$c rc=$?"
    grep -E "bad [1-9]|clobbered [1-9]|NOT|check failed|error" "$OUT/gpu_gemm_$c.log" | head -8
  done
fi
# shellcheck disable=SC2086
timeout "${GEMM_TIMEOUT:-240}" ./build/bench/bench_gemm ${GEMM_ARGS:-} > "$OUT/gemm.log" 2>&1
echo "== bench_gemm rc=$?"
grep -E "^TIME|FAILED|passed|GPU|error|rror" "$OUT/gemm.log" | head -60
shape="V=128256,H=4096,bf16,dense,N=8192"
if [ "${TUNE:-1}" = 1 ]; then
  KLJIT_LOG=1 KLJIT_WISDOM="$OUT/tuned.wisdom" KLJIT_TUNE_BUDGET_S=${TUNE_BUDGET:-3} \
    timeout ${TUNE_TIMEOUT:-90} ./build/kljit tune "$shape" > "$OUT/tune.log" 2>&1
  echo "== tune rc=$?"
  grep -E "GEMM \(|won" "$OUT/tune.log" | grep -v "candidate [0-9]:" | head -20
fi
if [ "${LOSS:-0}" = 1 ]; then
  # heuristic cuBLASLt, the tuned wisdom, the generated logits GEMM forced: same process order
  for run in "none cublas" "$OUT/tuned.wisdom cublas" "none jit"; do
    set -- $run
    echo "== bench_loss, wisdom $1, KLJIT_GEMM=$2"
    KLJIT_WISDOM=$1 KLJIT_GEMM=$2 timeout 120 ./build/bench/bench_loss --shapes 8192x4096x128256 \
      --no-twophase --no-full --repeats 5 2>&1 | tail -4
  done
fi
if [ "${SUITE:-0}" = 1 ]; then # the GPU tests with the generated logits GEMM forced
  (cd build && KLJIT_GEMM=jit timeout "${SUITE_TIMEOUT:-150}" ctest -j8 --output-on-failure \
    -R "${SUITE_REGEX:-gpu.dense|gpu.api|gpu.gemm}") > "$OUT/suite.log" 2>&1
  echo "== suite (KLJIT_GEMM=jit) rc=$?"
  grep -E "tests passed|tests failed|Failed|GEMMs:" "$OUT/suite.log" | head -20
fi
if [ "${SANITIZE:-0}" = 1 ]; then # memcheck and racecheck on a small ragged case
  for tool in memcheck racecheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 ./build/bench/bench_gemm \
      --no-small --no-time --shapes 129x1031x200,2049x1031x136 \
      --variants 256.2.4.m,256.2.4.g.2,128.2.6.g.1.p,128.2.6.g.2.p \
      > "$OUT/san_$tool.log" 2>&1
    echo "== compute-sanitizer $tool rc=$?"
    grep -E "ERROR SUMMARY|check " "$OUT/san_$tool.log" | head -4
  done
fi
