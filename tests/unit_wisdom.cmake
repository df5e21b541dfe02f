# SPDX-License-Identifier: Apache-2.0
# unit_wisdom: the wisdom format, store and merge rules, the rigor rules of kljit_plan_create
# (through tune_choose), the tuner's candidate sets, and precompiling from a wisdom file. No GPU.
kljit_test_exe(unit_wisdom unit_wisdom.c)
kljit_test_cases(EXE unit_wisdom SOURCE unit_wisdom.c PREFIX unit.wisdom LABELS unit)

# The CLI: `kljit precompile --wisdom` and `kljit tune` as scripts use them.
set(wisdom_cli_file ${CMAKE_BINARY_DIR}/test-wisdom-cli)
file(WRITE ${wisdom_cli_file} "kljit-wisdom 1 kljit=${PROJECT_VERSION}\ngpu=\"NVIDIA H200\" \
arch=sm_90 sms=132 kljit=${PROJECT_VERSION} V=32000 H=64 in=bf16 teacher=probs tdt=bf16 \
tmode=const flags=- bucket=8192 -> chunk_rows=1024 threads=128 split=4 cluster=0 nv=1 \
rigor=measure rows=8192 ms=1\n")
add_test(NAME unit.wisdom.cli_precompile_wisdom_compiles_the_plans_of_the_file
         COMMAND kljit_cli precompile --wisdom ${wisdom_cli_file} --arch sm_80,sm_90
         --cache-dir ${CMAKE_BINARY_DIR}/precompiled-wisdom --no-manifest)
set_tests_properties(unit.wisdom.cli_precompile_wisdom_compiles_the_plans_of_the_file PROPERTIES
  LABELS unit ENVIRONMENT "KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli"
  PASS_REGULAR_EXPRESSION "sm_80: [0-3] module.*sm_90: ([0-9]|1[0-2]) module") # both classes
add_test(NAME unit.wisdom.cli_tune_says_no_gpu_or_tunes
         COMMAND kljit_cli tune V=2048,H=64,bf16,dense,N=512 --budget 5
         --wisdom ${CMAKE_BINARY_DIR}/test-tune-wisdom)
set_tests_properties(unit.wisdom.cli_tune_says_no_gpu_or_tunes PROPERTIES LABELS unit
  ENVIRONMENT "KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli;KLJIT_WISDOM=none"
  PASS_REGULAR_EXPRESSION "no GPU here|heuristic [0-9.]+ ms, best [0-9.]+ ms")
add_test(NAME unit.wisdom.cli_tune_bad_shape_is_a_usage_error
         COMMAND kljit_cli tune V=1000,H=64,bf16,fancy)
set_tests_properties(unit.wisdom.cli_tune_bad_shape_is_a_usage_error PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "shape 'V=1000,H=64,bf16,fancy': unknown word 'fancy'")
