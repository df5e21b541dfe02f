# SPDX-License-Identifier: Apache-2.0
# The multi-GPU run of issue 7: kljit_fused_nccl with one process per GPU, tp = 2, 4, 8 (skip
# with 77 without NCCL or with fewer GPUs). NCCL_NVLS_ENABLE=0 as the device notes require.
add_executable(gpu_shard_nccl gpu_shard_nccl.c)
target_link_libraries(gpu_shard_nccl PRIVATE kljit kljit_gpusupport ${CMAKE_DL_LIBS})
kljit_test_cases(EXE gpu_shard_nccl SOURCE gpu_shard_nccl.c PREFIX gpu.shard_nccl
                 LABELS gpu multigpu TIMEOUT 900 NAMES_VAR nccl_cases)
set_property(TEST ${nccl_cases} APPEND PROPERTY ENVIRONMENT NCCL_NVLS_ENABLE=0)
