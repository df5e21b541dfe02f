# gpu_gemm: the generated sm_90a GEMM family against an fp64 CPU GEMM (every dtype x output x
# beta on ragged shapes; every tile shape). Skips (77) without an sm_90 GPU.
kljit_test_exe(gpu_gemm gpu_gemm.c)
# gpu_util before the static library that it calls into
target_link_libraries(gpu_gemm PRIVATE kljit_gpusupport kljit_static)
foreach(case
    every_dtype_output_and_beta_matches_fp64_on_ragged_shapes
    every_tile_shape_matches_fp64)
  kljit_test(NAME gpu.gemm.${case} EXE gpu_gemm CASE ${case} LABELS gpu TIMEOUT 900)
endforeach()
