# SPDX-License-Identifier: Apache-2.0
# unit_kernel_specs: what a kernel spec renders (deterministic, pinned bytes, optional parameters
# only when set, refusals with a sentence); Lua only, seconds.
kljit_test_exe(unit_kernel_specs unit_kernel_specs.c)
kljit_test_cases(EXE unit_kernel_specs SOURCE unit_kernel_specs.c PREFIX unit.kernel_specs
                 LABELS unit)
