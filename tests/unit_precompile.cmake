# SPDX-License-Identifier: Apache-2.0
kljit_test_exe(unit_precompile unit_precompile.c)
kljit_test_cases(EXE unit_precompile SOURCE unit_precompile.c PREFIX unit.precompile LABELS unit)

# The CLI: scripts rely on its exit codes and its first lines.
add_test(NAME unit.cli.demo_without_gpu_says_so_and_compiles COMMAND kljit_cli demo V=1000,H=64)
set_tests_properties(unit.cli.demo_without_gpu_says_so_and_compiles PROPERTIES LABELS unit
  ENVIRONMENT "KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli"
  PASS_REGULAR_EXPRESSION "no GPU here.*sm_90: [0-9] module|fused linear \\+ KL")
add_test(NAME unit.cli.precompile_writes_the_cache_dir COMMAND kljit_cli precompile --arch
         sm_80,sm_90 V=32000,H=64 --cache-dir ${CMAKE_BINARY_DIR}/precompiled)
set_tests_properties(unit.cli.precompile_writes_the_cache_dir PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "sm_80: [0-3] module.*sm_90: [0-8] module") # both device classes
add_test(NAME unit.cli.unknown_command_exits_2 COMMAND kljit_cli frobnicate)
set_tests_properties(unit.cli.unknown_command_exits_2 PROPERTIES LABELS unit WILL_FAIL TRUE)
add_test(NAME unit.cli.bad_arch_fails COMMAND kljit_cli precompile --arch sm_75 V=1000,H=64
         --cache-dir ${CMAKE_BINARY_DIR}/precompiled-bad)
set_tests_properties(unit.cli.bad_arch_fails PROPERTIES LABELS unit WILL_FAIL TRUE)
