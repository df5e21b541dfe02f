# unit_gemm_sm90: the generated sm_90a GEMM family renders deterministically and every variant
# compiles with NVRTC for sm_90a (templates/gemm_sm90.cu.lua, ptx_sm90.cu.lua); no GPU.
kljit_test_exe(unit_gemm_sm90 unit_gemm_sm90.c)
foreach(case
    every_gemm_variant_compiles_for_sm90a
    bad_gemm_variants_are_refused_with_a_sentence)
  kljit_test(NAME unit.gemm_sm90.${case} EXE unit_gemm_sm90 CASE ${case} LABELS unit TIMEOUT 600)
endforeach()
