#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/check.sh [--full] [BUILD_DIR] [-- CTEST_ARGS...] — README.md's test command: ctest in
# BUILD_DIR (default build), two tests at a time, then what did not run and what would run it.
#   (default)  the quick suite: every test but the labels slow (the exhaustive compiles, which
#              the quick suite covers pairwise) and fuzz (the fuzzers, a minute each)
#   --full     every test but the quick suite's pairwise compile cover, whose jobs the
#              exhaustive compile runs whole: what CI runs (.ci/run)
# Needs only bash, awk and CMake's ctest. Exits with ctest's status.
set -uo pipefail

mode=quick
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --full) mode=full; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '3,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) build=$1; shift ;;
  esac
done
cd "$build" || exit 2
junit=$PWD/Testing/check-junit.xml
mkdir -p Testing
rm -f "$junit"
# the quick suite's pairwise cover of the compiles: the jobs the full suite's
# every_variant_compiles_for_sm80_and_sm90 takes to a cubin (the rest it takes to PTX), so the
# full suite leaves it out (two cores' 95 s)
cover=unit.kernels.every_feature_pair_compiles_for_sm80_and_sm90
select=(-E "^${cover//./\\.}\$")
[ "$mode" = quick ] && select=(-LE 'slow|fuzz')
ctest --output-on-failure -j2 "${select[@]}" --output-junit "$junit" "$@"
status=$?

# ---- what did not run, and why -----------------------------------------------------------
[ -f "$junit" ] || { echo "(no test results to summarize)"; exit "$status"; }
names_with_label() { ctest -N -L "^$1\$" | sed -n 's/^ *Test *#[0-9]*: //p'; }
gpu_tests=$(names_with_label gpu)
fuzz_tests=$(names_with_label fuzz)
total=$(ctest -N | sed -n 's/^Total Tests: //p')
# name <TAB> status <TAB> first line of output <TAB> the output on one line, per test that ran
results=$(awk '
  /<testcase / {
    match($0, /name="[^"]*"/); name = substr($0, RSTART + 6, RLENGTH - 7)
    match($0, /status="[^"]*"/); st = substr($0, RSTART + 8, RLENGTH - 9)
    first = ""; text = ""; inside = 0; next
  }
  /<system-out>/ { inside = 1; sub(/.*<system-out>/, "") }
  inside {
    done = /<\/system-out>/; sub(/<\/system-out>.*/, "")
    if ($0 != "" && first == "") first = $0
    if (length(text) < 2000) text = text " " $0
    if (done) inside = 0
    next
  }
  /<\/testcase>/ { gsub(/\t/, " ", first); gsub(/\t/, " ", text)
                   print name "\t" st "\t" first "\t" text }
' "$junit")
ran=$(printf '%s\n' "$results" | grep -c .)
reason() { # the reason a skipped test gives, in words a newcomer can act on
  local name=$1 first=$2 out=$3
  if grep -qxF "$name" <<<"$gpu_tests"; then
    echo "need an NVIDIA GPU (sm_80 or newer) and its driver: run the suite on such a machine"
  elif grep -qxF "$name" <<<"$fuzz_tests"; then
    echo "need clang with libFuzzer (apt-get install clang libclang-rt-14-dev), then cmake -B $build again"
  elif [[ $out == *"torch is not installed"* ]]; then
    echo "need PyTorch (pip install torch): the binding's tests"
  elif [[ $out == *KLJIT_TEST_PIP* ]]; then
    echo "need KLJIT_TEST_PIP=1, python3-venv and PyPI: pip install . into a fresh venv (.ci/run sets it)"
  elif [[ $out == *locale* ]]; then
    echo "need a locale with a decimal comma (apt-get install locales; locale-gen de_DE.UTF-8)"
  elif [[ $out == *matplotlib* ]]; then
    echo "need matplotlib (pip install matplotlib)"
  elif [ -n "$first" ]; then
    echo "$first"
  else
    echo "gave no reason: ctest -R '^$name\$' -V shows its output"
  fi
}
skipped=$(printf '%s\n' "$results" | awk -F'\t' '$2 == "notrun"')
n_skipped=$(printf '%s\n' "$skipped" | grep -c .)
n_failed=$(printf '%s\n' "$results" | awk -F'\t' '$2 == "fail"' | grep -c .)
echo
echo "================ summary ($mode suite) ================"
echo "$total tests; $ran ran: $((ran - n_skipped - n_failed)) passed, $n_failed failed, $n_skipped skipped"
if [ "$n_skipped" -gt 0 ]; then
  printf '%s\n' "$skipped" | while IFS=$'\t' read -r name _ first out; do
    reason "$name" "$first" "$out"
  done |
    sort | uniq -c | sort -rn | sed 's/^ *\([0-9]*\) /  \1 skipped: /'
fi
not_selected=$((total - ran))
if [ "$not_selected" -gt 0 ] && [ "$mode" = quick ] && [ $# -eq 0 ]; then
  echo "  $not_selected not selected (labels slow and fuzz: the exhaustive compiles and the fuzzers):" \
       "bash tests/check.sh --full runs them (about 5 more minutes on two idle cores)"
elif [ "$mode" = full ] && [ "$not_selected" -eq 1 ] && [ $# -eq 0 ]; then
  echo "  1 not selected: $cover, the quick suite's pairwise cover of the" \
       "compiles that every_variant_compiles_for_sm80_and_sm90 ran whole"
elif [ "$not_selected" -gt 0 ]; then
  echo "  $not_selected not selected (by the ctest arguments given$([ "$mode" = quick ] &&
    echo ', and the labels slow and fuzz: tests/check.sh --full'))"
fi
exit "$status"
