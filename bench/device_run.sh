#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# One device call: build, then one mode's GPU work; logs under $OUT (and $OUT/logs.tgz).
# Run from the repository root on the GPU machine, Lua from .deps (DEPS=..., default ./.deps or
# ../.deps):
#   bash bench/device_run.sh MODE [args...]
# Modes:
#   suite [regex]     the GPU tests matching regex (default gpu), each case's worst errors
#   loss [args...]    bench_loss with args (BENCH_RUNS="args;args" runs it once per set;
#                     ROW_VARIANTS="two_pass cluster" reruns --no-twophase per row kernel)
#   gemm              issue 26 in one call of at most 9 minutes: the generated GEMMs' GPU tests
#                     (every layout, dtype, output and beta against fp64; the staged epilogue;
#                     K in slices), the GPU suite with every GEMM generated (KLJIT_GEMM=jit:
#                     gpu.generated.*), then the fused call timed with each GEMM's backend
#                     switched per call (bench_loss --gemms) at 8192x4096x128256 and
#                     8192x2048x32000, bf16, dense teacher. The whole mode keeps within
#                     DEADLINE seconds (default 520, build included): each step's timeout is
#                     its own (GEMM_TESTS_S, SUITE_S, BENCH_S) or what is left after the time
#                     reserved for the steps after it, so the logs always come back.
#   micro [args...]   tests/bench_gemm (interleaved, sustained) with args, e.g. --layout tn --beta 1
#   sanitize          compute-sanitizer memcheck and racecheck on small GEMM and fused cases
#   tune              kljit tune of TUNE_NHV (N x H x V, default 8192x4096x128256, bf16, dense;
#                     KLJIT_TUNE_BUDGET_S, default 120), then bench_loss of that shape with and
#                     without the wisdom, same run
#   profile           the fused call per logits-GEMM choice (PROFILES="name|KLJIT_GEMM|bench_loss
#                     args;...", default sparse and dense E16, sparse .stats, the plain generated
#                     logits GEMM; SHAPE, default 8192x4096x128256):
#                     bench_loss's time and GEMM floor (median of 5), then ncu on one logits GEMM
#                     launch of a chunk: duration, DRAM bytes, L2 sectors, tensor pipe activity
#   judge             the user's call as the issues judge it, in about 3 minutes: compare.py at
#                     the five dense shapes (torch.compile, Liger from DEPS/wheels or LIGER_WHEEL,
#                     kljit_fused, alternated, peak memory), the sparse top-100 shape against
#                     torch.compile, then the binding against its C call (40 repeats);
#                     JUDGE_SETS (default "dense sparse binding") picks among those and
#                     "online" (the online-teacher JSD against Liger's fused JSD at 8192 x 4096 x
#                     128256 and 8192 x 2048 x 32000; needs the Liger wheel)
#   tiles             the tiles claimed from a counter (flag d, TILES dynamic) in about 8 minutes:
#                     its GEMM test (gpu_gemm's dynamic case, each launch checked to leave the
#                     counter zero), then bench_loss at 8192x4096x128256 with the logits GEMM's
#                     fp32 and E16 variants static / dynamic / cluster 2 (E16's: dynamic too)
#                     and every GEMM generated static / dynamic (TILES_VARIANTS), alternated
#                     over two rounds, the first three at 8192x2048x32000 too (TILES_GEMM_TEST=0:
#                     without the GEMM test), then ncu's DRAM bytes of one logits GEMM
#                     launch for the first four (the re-reads the counter is for); runs not
#                     started by BENCH_UNTIL_S (400) and NCU_UNTIL_S (480 s into the call) are
#                     left out, so that the logs come back within the device's 600 s
#   variants          bench_loss (median of 5, --no-full --no-twophase) per logits-GEMM choice,
#                     alternated over ROUNDS (2) rounds: VARIANTS ("name|KLJIT_GEMM;...", default
#                     the default plan and the precise flag's promoted tile, E16 + r) at SHAPES
#                     (default the five dense shapes); runs not started by BENCH_UNTIL_S (490 s
#                     into the call) are left out
#   next              the GPU work the last stop left (its closing note), in one call of about
#                     5 minutes: every bar of issues 27 and 28 that needs an H200 and has been
#                     timed on H100s only since the last change (runs 127-132): `judge` (the five
#                     dense shapes, the sparse shape, the online JSD, the binding against its C
#                     call) unless NEXT_JUDGE=0, then the binding's suite (gpu.python.*: tp 2-4
#                     gloo ranks)
#   chunk             every kernel of the fused call under ncu, one line each (bench/ncu_table.py):
#                     time, DRAM bytes read and written, L2 sectors, tensor pipe and DRAM
#                     throughput, for bench_loss at CHUNK_SHAPES (default 4096x2048x32000 and
#                     8192x4096x128256; the validation's small problem first, then the call's
#                     chunks), the first CHUNK_KERNELS (60) launches: a chunk's logits GEMM,
#                     row kernels and dX / dW GEMMs on the same counters, then the launches
#                     by kernel name (ncu_table.py --summary: time's share, L2 sectors a us)
#   mass              flag t's first GPU call (MASS_WARPS: the teacher's part of the records
#                     made by the logits GEMM's idle producer warps), about 8 minutes: the dense
#                     suite with the logits GEMM forced to the cooperative 128 x 256 tile with t
#                     (MASS_SUITE_T, default MASS_CT, logits:jit.256.2.4.g.1.et; gpu.dense.*,
#                     SUITE_S 200), compute-sanitizer memcheck on a_single_row under it and under
#                     E16's tile with t (MASS_T, logits:jit.256.1.4.g.1.pet; MASS_MEMCHECK lists
#                     the variants, default both), then bench_loss alternated over two rounds at
#                     MASS_SHAPES (default 8192x4096x128256 and 4096x2048x32000) for the
#                     default, t and ct, then ncu on one logits GEMM launch of each (time, SM
#                     clock, DRAM bytes, L2 sectors, tensor pipe)
#   precision         dX and dW errors against fp64 with every GEMM cuBLASLt, then every GEMM
#                     generated (KLJIT_GEMM=cublas, jit): compare.py's online forward KL at
#                     logit std 2 and 6, 8192 rows (needs torch; the library built first)
set -u
mode=${1:-suite}
shift || true
OUT=${OUT:-/tmp/kljit-out}
LOGS=$OUT/logs
mkdir -p "$LOGS"
if [ -z "${DEPS:-}" ]; then DEPS=$PWD/.deps; [ -d "$DEPS" ] || DEPS=$PWD/../.deps; fi
lua=() # the system's Lua where no .deps/lua is carried
if [ -d "$DEPS/lua" ]; then
  export LD_LIBRARY_PATH=$DEPS/lua/lib:${LD_LIBRARY_PATH:-}
  lua=(-DLUA_INCLUDE_DIR="$DEPS/lua/include" -DLUA_LIBRARY="$DEPS/lua/lib/liblua5.4.so")
fi
export KLJIT_CACHE_DIR=${KLJIT_CACHE_DIR:-/tmp/kljit-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv \
  > "$LOGS/gpu.txt" 2>&1
git log --oneline -1 > "$LOGS/commit.txt" 2>&1
finish() { tar czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null; echo "== logs: $OUT/logs.tgz"; }
trap finish EXIT

case $mode in
  suite) targets="gpu_dense gpu_sparse gpu_api gpu_gemm gpu_tune gpu_shard" ;;
  loss) targets="bench_loss" ;;
  gemm) targets="gpu_gemm gpu_dense gpu_api gpu_sparse bench_loss" ;;
  micro) targets="bench_gemm" ;;
  sanitize) targets="bench_gemm gpu_dense" ;;
  tune) targets="kljit_cli bench_loss" ;;
  profile) targets="bench_loss" ;;
  precision) targets="kljit" ;;
  judge) targets="kljit" ;;
  tiles) targets="bench_loss gpu_gemm kljit" ;;
  next) targets="kljit python_layout python_ref" ;;
  variants) targets="bench_loss" ;;
  mass) targets="gpu_dense bench_loss" ;;
  chunk) targets="bench_loss" ;;
  *) echo "unknown mode '$mode' (suite, loss, gemm, micro, sanitize, tune, profile, judge, tiles,"\
          "next, chunk, precision, variants, mass)"
     exit 2 ;;
esac
cmake -B build -DCMAKE_BUILD_TYPE=Release "${lua[@]}" > "$LOGS/build.log" 2>&1 &&
  timeout "${BUILD_S:-240}" cmake --build build -j16 --target ${TARGETS:-$targets} \
    >> "$LOGS/build.log" 2>&1 || { tail -40 "$LOGS/build.log"; exit 1; }
echo "== build ok ($SECONDS s)"

# The worst error per input dtype over the GPU test cases of a ctest log.
errors() {
  grep -E ": (ok|FAIL) " "$1" | awk '{
    for (i = 1; i <= NF; i++) {
      if ($i == "loss") l = $(i+1); if ($i == "rows") r = $(i+1); if ($i == "dX") x = $(i+1);
      if ($i == "dW") w = $(i+1); if ($i == "db") b = $(i+1)
    }
    d = $4; n[d]++; if (l+0 > L[d]) L[d] = l+0; if (r+0 > R[d]) R[d] = r+0; g = x+0;
    if (w+0 > g) g = w+0; if (b+0 > g) g = b+0; if (g > G[d]) G[d] = g
  } END { for (d in n) printf "%s: %d cases, worst loss rel %.1e, row-loss rel %.1e, grad rel-Frobenius %.1e\n", d, n[d], L[d], R[d], G[d] }'
}

# A step's time limit: `want` seconds, or what is left of DEADLINE after `reserve` for later steps.
budget() {
  local want=$1 left=$(( ${DEADLINE:-520} - SECONDS - $2 ))
  [ "$left" -lt "$want" ] && want=$left
  [ "$want" -lt 20 ] && want=20
  echo "$want"
}

# ctest with a regex and a time limit; the summary lines echoed.
run_ctest() { # name regex seconds
  (cd build && timeout "$3" ctest -R "$2" -j${CTEST_J:-8} -V --timeout "$3") > "$LOGS/$1.log" 2>&1
  echo "== $1 rc=$? ($SECONDS s)"
  grep -E "tests passed|tests failed|\*\*\*Failed|Timeout|^[0-9]+: FAIL|check failed" \
    "$LOGS/$1.log" | head -30
  errors "$LOGS/$1.log" | tee "$LOGS/$1-errors.txt"
}

# bench_loss (median of 5, --no-full --no-twophase) of one logits-GEMM choice at one shape,
# within `seconds`; its summary line echoed, its log LOGS/<log>-<shape>-<name>-<round>.log.
bench_variant() { # log shape name KLJIT_GEMM round seconds
  local f="$LOGS/$1-$2-$3-$5.log"
  KLJIT_GEMM=$4 timeout "$6" ./build/bench/bench_loss --shapes "$2" --no-full --no-twophase \
    --repeats 5 > /dev/null 2> "$f"
  echo "$2 r$5 $3 rc=$? $(grep -E ' fused [0-9]' "$f" | cut -c1-110) ($SECONDS s)"
}

# bench_variant over `rounds` rounds, each shape, each of the array `variants` ("name|KLJIT_GEMM")
# in turn; runs not started by `until` seconds into the call are left out.
alternate() { # log rounds until shapes
  local round shape v name gemm
  for round in $(seq "$2"); do
    for shape in $4; do
      for v in "${variants[@]}"; do
        IFS='|' read -r name gemm <<< "$v"
        [ "$SECONDS" -gt "$3" ] && continue
        bench_variant "$1" "$shape" "$name" "$gemm" "$round" 75
      done
    done
  done
}

ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# What ncu reads of one logits GEMM launch: time, DRAM bytes, L2 sectors, tensor pipe, SM clock.
gemm_metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors.sum
gemm_metrics=$gemm_metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
gemm_metrics=$gemm_metrics,sm__cycles_elapsed.avg.per_second

# ncu on bench_loss's 4th logits GEMM launch (the validation's and the warm-up's come first) of
# one KLJIT_GEMM choice at one shape, within `seconds`; its counters echoed, its log LOGS/<log>.log.
ncu_logits_gemm() { # log KLJIT_GEMM seconds shape [bench_loss args...]
  local log=$1 gemm=$2 seconds=$3 shape=$4
  shift 4
  KLJIT_GEMM=$gemm timeout "$seconds" "$ncu" --clock-control none --metrics "$gemm_metrics" \
    --kernel-name kl_gemm --launch-skip 3 --launch-count 1 ./build/bench/bench_loss \
    --shapes "$shape" "$@" --no-full --no-twophase --repeats 1 --warmup 0 > "$LOGS/$log.log" 2>&1
  echo "== ncu $log rc=$? ($SECONDS s)"
  grep -E "dram__|lts__|gpu__time|sm__" "$LOGS/$log.log"
}

case $mode in
  suite)
    run_ctest suite "${1:-gpu}" "${SUITE_S:-900}"
    ;;
  loss)
    IFS=';' read -ra runs <<< "${BENCH_RUNS:-$*}"
    for args in "${runs[@]}"; do
      echo "== bench_loss $args" | tee -a "$LOGS/bench.log"
      # shellcheck disable=SC2086
      ./build/bench/bench_loss $args >> "$LOGS/bench.csv" 2> >(tee -a "$LOGS/bench.log" >&2)
      echo "== bench rc=$?"
    done
    for variant in ${ROW_VARIANTS:-}; do
      echo "== bench variant $variant"
      KLJIT_ROW_KERNEL=$variant ./build/bench/bench_loss --no-twophase "$@" \
        >> "$LOGS/bench-variants.csv" 2> >(tee -a "$LOGS/bench-variants.log" >&2)
    done
    ;;
  gemm)
    # 1. the generated GEMMs against fp64 (every layout, dtype, output, beta; staged; sliced)
    run_ctest gemm-tests "${GEMM_TESTS_REGEX:-gpu\.gemm\.}" "$(budget "${GEMM_TESTS_S:-150}" 280)"
    # 2. the GPU suite with every GEMM generated (the fixture sets KLJIT_GEMM=jit)
    run_ctest generated "${SUITE_REGEX:-gpu\.generated\.}" "$(budget "${SUITE_S:-150}" 150)"
    grep -hE "GEMM (logits|dX|dW)" "$LOGS/generated.log" | sort | uniq -c | head -12
    # 3. the fused call, each GEMM's backend switched per call, round-robin, clock and power
    timeout "$(budget "${BENCH_S:-200}" 5)" ./build/bench/bench_loss --gemms \
      --shapes "${BENCH_SHAPES:-8192x4096x128256,8192x2048x32000}" --repeats "${ROUNDS:-10}" \
      ${BENCH_ARGS:-} > "$LOGS/gemms.csv" 2> "$LOGS/gemms.log"
    echo "== bench_loss --gemms rc=$? ($SECONDS s)"
    grep -E "^==|best cuBLASLt|^ {9}[a-z]|^  (cublas|all:jit)|FAILED|left out|rror" \
      "$LOGS/gemms.log" | head -60
    ;;
  micro)
    timeout "${MICRO_S:-400}" ./build/tests/bench_gemm "$@" > "$LOGS/micro.log" 2>&1
    echo "== bench_gemm rc=$?"
    grep -E "^TIME|^timing|FAILED|passed|GPU|rror" "$LOGS/micro.log" | head -80
    ;;
  sanitize)
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    # every layout, both epilogues, K in slices, pingpong and cluster 2, tiles claimed from a
    # counter (both schedules), ragged shapes
    san_variants=256.2.4.m.1,256.2.4.g.1.s,128.2.6.g.1.p,128.2.6.g.1.ps,256.2.4.g.2
    san_variants=$san_variants,128.2.6.g.1.pd,256.2.4.g.1.sd
    for tool in memcheck racecheck; do
      for layout in nt nn tn; do
        for beta in 0 1; do
          timeout 150 "$cs" --tool $tool --error-exitcode 9 ./build/tests/bench_gemm --no-small \
            --no-time --layout $layout --beta $beta --shapes 129x1031x200,2049x1031x136 \
            --variants "$san_variants" \
            > "$LOGS/san-$tool-$layout-b$beta.log" 2>&1
          echo "== $tool $layout beta $beta rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
            "$LOGS/san-$tool-$layout-b$beta.log" | head -1)"
        done
      done
      # the fused call with every GEMM generated (dX in slices: V > 65536)
      for c in a_single_row native_logits_and_accumulated_grad_weight; do
        KLJIT_GEMM=jit KLJIT_DX_SPLIT=3 timeout 200 "$cs" --tool $tool --error-exitcode 9 \
          ./build/tests/gpu_dense $c > "$LOGS/san-$tool-dense-$c.log" 2>&1
        echo "== $tool gpu_dense $c (KLJIT_GEMM=jit) rc=$? $(grep -E \
          'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/san-$tool-dense-$c.log" | head -1)"
      done
    done
    ;;
  tune)
    nhv=${TUNE_NHV:-8192x4096x128256}
    IFS=x read -r n h v <<< "$nhv"
    shape="V=$v,H=$h,bf16,dense,N=$n"
    KLJIT_LOG=1 KLJIT_WISDOM="$LOGS/tuned.wisdom" KLJIT_TUNE_BUDGET_S=${KLJIT_TUNE_BUDGET_S:-120} \
      timeout "${TUNE_S:-300}" ./build/kljit tune "$shape" > "$LOGS/tune.log" 2>&1
    echo "== tune rc=$?"
    grep -E "won|GEMM|disagrees" "$LOGS/tune.log" | tail -20
    cat "$LOGS/tuned.wisdom"
    for w in none "$LOGS/tuned.wisdom" none "$LOGS/tuned.wisdom"; do
      echo "== bench_loss, wisdom $w"
      KLJIT_WISDOM=$w timeout 120 ./build/bench/bench_loss --shapes "$nhv" \
        --no-twophase --no-full --repeats 10 2>&1 | tail -3
    done
    ;;
  profile)
    default="sparse-e16|logits:jit.e16|--topk 100;sparse-stats|logits:jit.stats|--topk 100"
    default="$default;dense-e16|logits:jit.e16|;dense-jit|logits:jit|"
    IFS=';' read -ra profiles <<< "${PROFILES:-$default}"
    for p in "${profiles[@]}"; do
      IFS='|' read -r name gemm args <<< "$p"
      # shellcheck disable=SC2086
      KLJIT_GEMM=$gemm timeout 120 ./build/bench/bench_loss --shapes "${SHAPE:-8192x4096x128256}" \
        $args --no-full --no-twophase --repeats 5 > /dev/null 2> "$LOGS/profile-$name.log"
      echo "== $name ($gemm $args) rc=$?"
      grep -E " fused [0-9]" "$LOGS/profile-$name.log" | cut -c1-160
      # shellcheck disable=SC2086
      ncu_logits_gemm "ncu-$name" "$gemm" 120 "${SHAPE:-8192x4096x128256}" $args
    done
    ;;
  precision)
    export KLJIT_LIBRARY=${KLJIT_LIBRARY:-$PWD/build/libkljit.so}
    for g in cublas jit; do
      KLJIT_GEMM=$g PYTHONPATH=python timeout "${PRECISION_S:-200}" python3 bench/compare.py \
        --methods kljit_fkl_online --shapes 8192x4096x128256,8192x2048x32000 --logit-std 2,6 \
        --repeats 3 --out "$LOGS/precision-$g.csv" > "$LOGS/precision-$g.log" 2>&1
      echo "== compare.py KLJIT_GEMM=$g rc=$?"
      tail -8 "$LOGS/precision-$g.log"
    done
    ;;
  tiles)
    c=dynamic_tile_variants_match_fp64_on_ragged_shapes
    if [ "${TILES_GEMM_TEST:-1}" = 1 ]; then
      timeout 150 ./build/tests/gpu_gemm $c > "$LOGS/gemm-$c.log" 2>&1
      echo "== gpu_gemm $c rc=$? ($SECONDS s)"
      grep -E "dyn|FAIL|failed|check" "$LOGS/gemm-$c.log" | head -30
    fi
    # name|KLJIT_GEMM; the first three also at the second shape, the first four under ncu
    default="default|;fp32-dyn|logits:jit.128.2.6.g.1.pd;e16-dyn|logits:jit.128.2.6.g.1.ped"
    default="$default;e16-c1|logits:jit.128.2.6.g.1.pe;e16-c2|logits:jit.128.2.6.g.2.pe"
    default="$default;e16-c2-dyn|logits:jit.128.2.6.g.2.ped"
    default="$default;fp32-c2|logits:jit.128.2.6.g.2.p;alljit|all:jit"
    default="$default;alljit-dyn|logits:jit.128.2.6.g.1.pd,dx:jit.256.2.4.g.1.d,dw:jit.256.2.4.g.1.sd"
    IFS=';' read -ra variants <<< "${TILES_VARIANTS:-$default}"
    for round in 1 2; do
      for i in "${!variants[@]}"; do
        IFS='|' read -r name gemm <<< "${variants[$i]}"
        for shape in 8192x4096x128256 8192x2048x32000; do
          [ "$shape" = 8192x2048x32000 ] && [ "$i" -ge 3 ] && continue
          [ "$SECONDS" -gt "${BENCH_UNTIL_S:-400}" ] && continue # ncu's time
          bench_variant tiles "$shape" "$name" "$gemm" "$round" 60
        done
      done
    done
    for i in 0 1 2 3; do
      [ -n "${variants[$i]:-}" ] || break
      [ "$SECONDS" -gt "${NCU_UNTIL_S:-480}" ] && { echo "== ncu: no time left"; break; }
      IFS='|' read -r name gemm <<< "${variants[$i]}"
      ncu_logits_gemm "ncu-$name" "$gemm" 90 8192x4096x128256
    done
    ;;
  chunk)
    metrics=$gemm_metrics,dram__throughput.avg.pct_of_peak_sustained_elapsed
    for shape in ${CHUNK_SHAPES:-4096x2048x32000 8192x4096x128256}; do
      timeout "${CHUNK_S:-240}" "$ncu" --clock-control none --csv --page raw --print-units base \
        --metrics "$metrics" --launch-count "${CHUNK_KERNELS:-60}" ./build/bench/bench_loss \
        --shapes "$shape" --no-full --no-twophase --repeats 1 --warmup 0 \
        > "$LOGS/chunk-$shape.csv" 2> "$LOGS/chunk-$shape.log"
      echo "== chunk $shape rc=$? ($SECONDS s)"
      python3 bench/ncu_table.py "$LOGS/chunk-$shape.csv" --summary | tee "$LOGS/chunk-$shape.md" | tail -48
    done
    ;;
  judge)
    export KLJIT_LIBRARY=${KLJIT_LIBRARY:-$PWD/build/libkljit.so}
    wheel=${LIGER_WHEEL:-$DEPS/wheels/liger_kernel-0.8.5-py3-none-any.whl}
    peers=compile,kljit_fused
    [ -f "$wheel" ] && peers=compile,liger,kljit_fused
    # name|shapes|methods|extra compare.py arguments
    for j in "dense|dense|$peers|--repeats 6" \
             "sparse|8192x4096x128256k100|compile,kljit_fused|--repeats 6" \
             "online|8192x4096x128256,8192x2048x32000|kljit_jsd,liger_jsd|--repeats 6" \
             "binding|dense|kljit_c,kljit_fused|--repeats 40"; do
      IFS='|' read -r name shapes methods extra <<< "$j"
      [[ " ${JUDGE_SETS:-dense sparse binding} " == *" $name "* ]] || continue
      [ "$name" = online ] && [ ! -f "$wheel" ] && continue # Liger's fused JSD is the peer
      # shellcheck disable=SC2086
      PYTHONPATH=python timeout "${JUDGE_S:-240}" python3 bench/compare.py --shapes "$shapes" \
        --methods "$methods" --alternate "$methods" --no-reference --liger-wheel "$wheel" \
        $extra --out "$LOGS/judge-$name.md" > "$LOGS/judge-$name.log" 2>&1
      echo "== judge $name rc=$? ($SECONDS s)"
      grep -E "^\| [a-z_]+ \| [0-9]" "$LOGS/judge-$name.log" | cut -c1-150 | tail -15
    done
    ;;
  variants)
    IFS=';' read -ra variants <<< "${VARIANTS:-default|;e16r|logits:jit.128.2.6.g.1.re}"
    alternate variant "${ROUNDS:-2}" "${BENCH_UNTIL_S:-490}" \
      "${SHAPES:-8192x4096x128256 4096x4096x128256 2048x4096x128256 8192x2048x32000 4096x2048x32000}"
    ;;
  mass)
    t=${MASS_T:-logits:jit.256.1.4.g.1.pet} ct=${MASS_CT:-logits:jit.256.2.4.g.1.et}
    KLJIT_GEMM=${MASS_SUITE_T:-$ct} run_ctest mass-suite '^gpu\.dense\.' "${SUITE_S:-200}"
    san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for g in ${MASS_MEMCHECK-$t $ct}; do
      KLJIT_GEMM=$g timeout 60 "$san" --tool memcheck ./build/tests/gpu_dense a_single_row \
        > "$LOGS/mass-memcheck.log" 2>&1
      echo "== memcheck $g rc=$? $(grep -h 'ERROR SUMMARY' "$LOGS/mass-memcheck.log")"
    done
    variants=("default|" "t|$t" "ct|$ct")
    alternate mass 2 "${BENCH_UNTIL_S:-430}" "${MASS_SHAPES:-8192x4096x128256 4096x2048x32000}"
    for v in "${variants[@]}"; do
      IFS='|' read -r name gemm <<< "$v"
      [ "$SECONDS" -gt "${NCU_UNTIL_S:-500}" ] && continue
      ncu_logits_gemm "mass-ncu-$name" "$gemm" 40 8192x4096x128256
    done
    ;;
  next)
    export KLJIT_LIBRARY=${KLJIT_LIBRARY:-$PWD/build/libkljit.so}
    [ "${NEXT_JUDGE:-1}" = 1 ] &&
      JUDGE_SETS=${JUDGE_SETS:-dense sparse online binding} bash "$0" judge
    run_ctest next-suites '^gpu\.python\.' "${SUITE_S:-150}"
    ;;
esac
