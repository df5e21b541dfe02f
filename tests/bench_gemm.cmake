# SPDX-License-Identifier: Apache-2.0
# bench_gemm: the generated sm_90a GEMMs against cuBLASLt, checked then timed interleaved and
# sustained (a developer's diagnosis tool on internal headers, not a test: nothing registered).
# What users run is timed by bench/bench_loss --gemms: the whole fused call.
kljit_test_exe(bench_gemm bench_gemm.c)
target_link_libraries(bench_gemm PRIVATE kljit_benchtime CUDA::cudart CUDA::cublasLt m)
