# SPDX-License-Identifier: Apache-2.0
# GPU tests of the sparse top-K teacher and checked mode (skip with 77 where there is no GPU).
add_executable(gpu_sparse gpu_sparse.c)
target_link_libraries(gpu_sparse PRIVATE kljit kljit_gpucase)
kljit_test_cases(EXE gpu_sparse SOURCE gpu_sparse.c PREFIX gpu.sparse LABELS gpu TIMEOUT 900)
