# The multi-GPU run of issue 7: kljit_fused_nccl with one process per GPU, tp = 2, 4, 8 (skip
# with 77 without NCCL or with fewer GPUs). NCCL_NVLS_ENABLE=0 as the device notes require.
add_executable(gpu_shard_nccl gpu_shard_nccl.c)
target_link_libraries(gpu_shard_nccl PRIVATE kljit kljit_gpusupport ${CMAKE_DL_LIBS})
foreach(case tp_2 tp_4 tp_8)
  kljit_test(NAME gpu.shard_nccl.${case} EXE gpu_shard_nccl CASE ${case} LABELS gpu multigpu
             TIMEOUT 900)
  set_property(TEST gpu.shard_nccl.${case} APPEND PROPERTY ENVIRONMENT NCCL_NVLS_ENABLE=0)
endforeach()
