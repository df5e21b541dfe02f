#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/fuzz/run.sh FUZZER SECONDS [libFuzzer options...] -- runs one harness for a fixed time
# on a copy of its seed corpus (tests/fuzz/corpus/<name>, never modified), then prints the
# executions and coverage. Exit: 0 no crash, hang or oracle violation; 77 the fuzzers were not
# built (no clang with libFuzzer at configure time); else libFuzzer's failure.
set -uo pipefail
exe=$1 secs=$2
shift 2
[ -x "$exe" ] || { echo "fuzzer $exe not built (no clang/libFuzzer): skipped"; exit 77; }
name=$(basename "$exe")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kljit-$name-XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$here/corpus/$name" "$work/corpus"
# -timeout: an input taking 10 s is a hang (the renderer's own budget is 1 s of CPU);
# -rss_limit_mb: the renderer caps Lua at 64 MiB, ASan's shadow needs the rest.
"$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
  -artifact_prefix="$work/" -print_final_stats=1 "$@" "$work/corpus" > "$work/log" 2>&1
rc=$?
# the findings, libFuzzer's last status line (executions, cov: edges, ft: features, corpus
# size) and its final statistics
grep -E "ERROR|SUMMARY|Test unit written|oracle" "$work/log" | head -20
grep -E "^#[0-9]+" "$work/log" | tail -1
grep -E "^stat::" "$work/log"
if [ -n "${FUZZ_KEEP_CORPUS:-}" ]; then
  mkdir -p "$FUZZ_KEEP_CORPUS" && cp -r "$work/corpus/." "$FUZZ_KEEP_CORPUS/"
fi
for a in "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*; do
  [ -e "$a" ] || continue
  mkdir -p "${FUZZ_ARTIFACTS:-.}"
  cp "$a" "${FUZZ_ARTIFACTS:-.}/"
  echo "artifact: ${FUZZ_ARTIFACTS:-.}/$(basename "$a")"
done
exit "$rc"
