# The kljit CLI as scripts use it (tools/cli_*.c): help, exit codes, precompile's manifest and
# --jobs, cache ls/verify/clear/stats, info without a GPU. The cases run the built `kljit`.
kljit_test_exe(unit_cli unit_cli.c)
kljit_test_cases(EXE unit_cli SOURCE unit_cli.c PREFIX unit.cli LABELS unit NAMES_VAR cli_cases)
set_tests_properties(${cli_cases} PROPERTIES ENVIRONMENT
  "KLJIT_CLI=$<TARGET_FILE:kljit_cli>;KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli")
