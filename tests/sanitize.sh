#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/sanitize.sh [BUILD_DIR] — the unit tests under AddressSanitizer (leaks included) and
# UBSan: a Debug build of its own (default build-sanitize), then every `unit` test but the
# exhaustive compiles (slow under ASan), the wall-clock ones (the renderer's 1 s CPU budget is
# hit before its memory and output caps when everything runs several times slower) and the
# memory bound of `kljit version` (ASan's shadow memory). Exits
# non-zero when a test fails or a sanitizer reports anything. It is the regression check of
# leaks in the tests themselves (issue 30: a failed render's buffers); CI does not run it (about
# 15 minutes on 2 cores, the build included).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build-sanitize}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# --as-needed: without it the sanitizer build records the toolkit's libcuda stub as NEEDED,
# and a machine without a driver could not load the library (kljit dlopens the driver).
cmake -B "$build" -DCMAKE_BUILD_TYPE=Debug -DKLJIT_WERROR=ON -DKLJIT_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-Wl,--as-needed" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--as-needed" >/dev/null
cmake --build "$build" -j2
cd "$build"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
ctest -L unit -j2 --output-on-failure --timeout 1800 \
  -E 'every_variant|every_gemm_variant|sandbox_stops|time_limit|sixty_thousand|under_50mb|unit\.(install|pip|python)\.'
