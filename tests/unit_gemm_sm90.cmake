# SPDX-License-Identifier: Apache-2.0
# unit_gemm_sm90: the generated sm_90a GEMM family renders deterministically and every variant
# compiles with NVRTC for sm_90a (templates/gemm_sm90.cu.lua, ptx_sm90.cu.lua); no GPU.
# Every variant is the slow case (about a minute on two idle cores, four on a loaded one); the
# quick suite compiles a pairwise cover of them (every_gemm_feature_pair_...).
kljit_test_exe(unit_gemm_sm90 unit_gemm_sm90.c)
kljit_test(NAME unit.gemm_sm90.every_gemm_variant_compiles_for_sm90a EXE unit_gemm_sm90
           CASE every_gemm_variant_compiles_for_sm90a LABELS unit slow TIMEOUT 1200)
kljit_test_cases(EXE unit_gemm_sm90 SOURCE unit_gemm_sm90.c PREFIX unit.gemm_sm90 LABELS unit
                 TIMEOUT 600 EXCEPT every_gemm_variant_compiles_for_sm90a)
