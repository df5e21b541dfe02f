# SPDX-License-Identifier: Apache-2.0
# unit_files: what kljit publishes and reads against FIFOs, devices, links, endless or vanishing
# files and concurrent writers (the library, and the built CLI for its manifest and --file).
kljit_test_exe(unit_files unit_files.c)
kljit_test_cases(EXE unit_files SOURCE unit_files.c PREFIX unit.files LABELS unit
                 NAMES_VAR files_cases)
set_tests_properties(${files_cases} PROPERTIES ENVIRONMENT
  "KLJIT_CLI=$<TARGET_FILE:kljit_cli>;KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-files")
