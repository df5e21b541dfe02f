# SPDX-License-Identifier: Apache-2.0
# unit_recipe: what a plan builds (tuning, geometry, module specs, GEMMs, chunks, workspace) for
# a few problems, archs and options, pinned; no GPU.
kljit_test_exe(unit_recipe unit_recipe.c)
kljit_test_cases(EXE unit_recipe SOURCE unit_recipe.c PREFIX unit.recipe LABELS unit)
