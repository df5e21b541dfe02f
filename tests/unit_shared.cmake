# SPDX-License-Identifier: Apache-2.0
# unit_shared: the cluster cache as an operator and a job's user use it (two uids in forked
# children: skipped without root), and the refusals of a directory readers would not accept.
kljit_test_exe(unit_shared unit_shared.c)
kljit_test_cases(EXE unit_shared SOURCE unit_shared.c PREFIX unit.shared LABELS unit
                 NAMES_VAR shared_cases)
set_tests_properties(${shared_cases} PROPERTIES ENVIRONMENT
  "KLJIT_CLI=$<TARGET_FILE:kljit_cli>;KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-shared")
