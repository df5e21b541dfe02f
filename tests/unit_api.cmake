# SPDX-License-Identifier: Apache-2.0
# unit_api: the public API's contract that needs no GPU (versions, status strings, context
# creation without a device, kljit_plan_check field by field, thread-local last error).
kljit_test_exe(unit_api unit_api.c)
target_compile_definitions(unit_api PRIVATE KLJIT_TEST_PROJECT_VERSION="${PROJECT_VERSION}")
kljit_test_cases(EXE unit_api SOURCE unit_api.c PREFIX unit.api LABELS unit)
