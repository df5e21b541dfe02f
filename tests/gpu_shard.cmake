# SPDX-License-Identifier: Apache-2.0
# GPU tests of vocabulary-parallel tensor parallelism on one GPU through the split API
# (kljit_shard_stats / kljit_shard_finish), tp = 2, 3, 4, 8 (skip with 77 where there is no GPU).
add_executable(gpu_shard gpu_shard.c)
target_link_libraries(gpu_shard PRIVATE kljit kljit_gpusupport)
kljit_test_cases(EXE gpu_shard SOURCE gpu_shard.c PREFIX gpu.shard LABELS gpu TIMEOUT 900)
