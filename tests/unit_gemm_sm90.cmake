# SPDX-License-Identifier: Apache-2.0
# unit_gemm_sm90: the generated sm_90a GEMM family renders deterministically and every variant
# compiles with NVRTC for sm_90a (templates/gemm_sm90.cu.lua, ptx_sm90.cu.lua); no GPU.
kljit_test_exe(unit_gemm_sm90 unit_gemm_sm90.c)
kljit_test_cases(EXE unit_gemm_sm90 SOURCE unit_gemm_sm90.c PREFIX unit.gemm_sm90 LABELS unit
                 TIMEOUT 600)
