#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/fuzz/build.sh OUT CLANG "CFLAGS" "LIBS" SRC... -- builds the libFuzzer harnesses
# (fuzz_*.c next to this script) against the library's sources, with ASan and UBSan, into OUT.
# CMake calls it (tests/fuzz.cmake) with the include and link flags it found; the library's
# objects are compiled once, two at a time (CI has 2 cores), then each harness is linked.
# CMake reruns it when a source changes.
set -euo pipefail
out=$1 clang=$2 cflags=$3 libs=$4
shift 4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out/obj"
flags="-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
-fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE -DKLJIT_BUILDING $cflags"
for src in "$@"; do # two compiles at a time
  # shellcheck disable=SC2086
  "$clang" $flags -c "$src" -o "$out/obj/$(basename "$src" .c).o" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || exit 1; done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || exit 1; done
objs=("$out"/obj/*.o)
for h in "$here"/fuzz_*.c; do
  name=$(basename "$h" .c)
  # shellcheck disable=SC2086
  "$clang" $flags -fsanitize=fuzzer "$h" "${objs[@]}" $libs -o "$out/$name"
done
echo "fuzzers built in $out"
