# SPDX-License-Identifier: Apache-2.0
# GPU tests of the top-K teacher's reverse KL and JSD (issue 29) against the fp64 reference
# (skip with 77 where there is no GPU); their shards are in gpu_shard (gpu.shard.sparse_*).
add_executable(gpu_topk gpu_topk.c)
target_link_libraries(gpu_topk PRIVATE kljit kljit_gpucase)
kljit_test_cases(EXE gpu_topk SOURCE gpu_topk.c PREFIX gpu.topk LABELS gpu TIMEOUT 900)
