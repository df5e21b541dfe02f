# SPDX-License-Identifier: Apache-2.0
# The kljit CLI as scripts use it (tools/cli_*.c): help, exit codes, precompile's manifest and
# --jobs, cache ls/verify/clear/stats, info without a GPU. The cases run the built `kljit`.
kljit_test_exe(unit_cli unit_cli.c)
kljit_test_cases(EXE unit_cli SOURCE unit_cli.c PREFIX unit.cli LABELS unit NAMES_VAR cli_cases)
set_tests_properties(${cli_cases} PROPERTIES ENVIRONMENT
  "KLJIT_CLI=$<TARGET_FILE:kljit_cli>;KLJIT_SOURCE_DIR=${PROJECT_SOURCE_DIR};KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli")

# The SHAPE grammar: its round trips (tools/cli_shape.c linked in) and its rules (through the CLI).
kljit_test_exe(unit_cli_shape unit_cli_shape.c ${PROJECT_SOURCE_DIR}/tools/cli_shape.c
               ${PROJECT_SOURCE_DIR}/tools/cli_args.c)
kljit_test_cases(EXE unit_cli_shape SOURCE unit_cli_shape.c PREFIX unit.cli LABELS unit
                 NAMES_VAR cli_shape_cases)
set_tests_properties(${cli_shape_cases} PROPERTIES ENVIRONMENT
  "KLJIT_CLI=$<TARGET_FILE:kljit_cli>;KLJIT_SOURCE_DIR=${PROJECT_SOURCE_DIR};KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli")

# `kljit version` loads no cuBLASLt (dlopen'ed by contexts only): bounded memory in a unit
# test, bounded time (wall clock, so sensitive to a loaded machine) under the perf label.
add_executable(proc_usage proc_usage.c)
add_test(NAME unit.cli.version_runs_in_under_50mb_of_memory
         COMMAND proc_usage --max-rss-mb 50 -- $<TARGET_FILE:kljit_cli> version)
add_test(NAME perf.cli.version_runs_in_under_100ms
         COMMAND proc_usage --max-ms 100 --runs 5 -- $<TARGET_FILE:kljit_cli> version)
set_tests_properties(unit.cli.version_runs_in_under_50mb_of_memory PROPERTIES LABELS unit)
set_tests_properties(perf.cli.version_runs_in_under_100ms PROPERTIES LABELS perf RUN_SERIAL TRUE)
