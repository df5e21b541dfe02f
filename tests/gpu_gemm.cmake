# SPDX-License-Identifier: Apache-2.0
# gpu_gemm: the generated sm_90a GEMM family against an fp64 CPU GEMM (every layout, dtype,
# output and beta on ragged shapes; every tile shape; the staged epilogue; K in slices). Skips
# (77) without an sm_90 GPU. The fused call with every GEMM generated: gpu_generated.cmake.
kljit_test_exe(gpu_gemm gpu_gemm.c)
# gpu_util calls into the library: kljit_internal again after it (static link order)
target_link_libraries(gpu_gemm PRIVATE kljit_gpusupport kljit_internal)
kljit_test_cases(EXE gpu_gemm SOURCE gpu_gemm.c PREFIX gpu.gemm LABELS gpu TIMEOUT 900)
