# SPDX-License-Identifier: Apache-2.0
# GPU tests of the dense teacher (skip with 77 where there is no GPU).
# The case runner (gpu_case.c) is shared with gpu_sparse.
add_library(kljit_gpucase STATIC gpu_case.c)
target_link_libraries(kljit_gpucase PUBLIC kljit kljit_gpusupport)
add_executable(gpu_dense gpu_dense.c)
target_link_libraries(gpu_dense PRIVATE kljit kljit_gpucase)
kljit_test_cases(EXE gpu_dense SOURCE gpu_dense.c PREFIX gpu.dense LABELS gpu TIMEOUT 900)
