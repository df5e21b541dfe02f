# SPDX-License-Identifier: Apache-2.0
# The row-kernel variants of issue 29 (the online teacher's checked mode, the top-K teacher's
# divergences): they render, declare what their plans launch, and compile for sm_80 and sm_90.
kljit_test_exe(unit_variants unit_variants.c)
kljit_test_cases(EXE unit_variants SOURCE unit_variants.c PREFIX unit.variants LABELS unit)
