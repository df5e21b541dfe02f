# SPDX-License-Identifier: Apache-2.0
# unit_ref: the double-precision CPU reference (tests/ref.c) and host_dtype conversions.
kljit_test_exe(unit_ref unit_ref.c)
kljit_test_cases(EXE unit_ref SOURCE unit_ref.c PREFIX unit.ref LABELS unit)
