# SPDX-License-Identifier: Apache-2.0
# unit_kernels: every kernel module a valid problem can need renders deterministically and
# compiles with NVRTC for sm_80 and sm_90 (templates/*.cu.lua through src/spec.c); no GPU.
# The full enumeration compiles about a thousand modules per arch: hence `slow` and the long
# timeout (two worker processes; see the header of unit_kernels.c for the variant space).
kljit_test_exe(unit_kernels unit_kernels.c)
kljit_test(NAME unit.kernels.every_variant_compiles_for_sm80_and_sm90 EXE unit_kernels
           CASE every_variant_compiles_for_sm80_and_sm90 LABELS unit slow TIMEOUT 3000)
kljit_test_cases(EXE unit_kernels SOURCE unit_kernels.c PREFIX unit.kernels LABELS unit
                 EXCEPT every_variant_compiles_for_sm80_and_sm90)
