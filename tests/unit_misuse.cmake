# SPDX-License-Identifier: Apache-2.0
# unit_misuse: the library against values no correct caller passes (struct sizes, fp32 ranges,
# unusable wisdom, cuBLASLt words from a file, a flooding template, racing wisdom writers). No GPU.
kljit_test_exe(unit_misuse unit_misuse.c)
kljit_test_cases(EXE unit_misuse SOURCE unit_misuse.c PREFIX unit.misuse LABELS unit)
