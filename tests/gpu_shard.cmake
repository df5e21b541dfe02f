# GPU tests of vocabulary-parallel tensor parallelism on one GPU through the split API
# (kljit_shard_stats / kljit_shard_finish), tp = 2, 3, 4, 8 (skip with 77 where there is no GPU).
add_executable(gpu_shard gpu_shard.c)
target_link_libraries(gpu_shard PRIVATE kljit kljit_gpusupport)
foreach(case dense_probs_batchmean_with_ignored_rows dense_logits_own_teacher_temperature_mean
        sparse_tail_none_batchmean sparse_tail_bucket_mean sparse_tail_renorm_logprobs
        all_rows_ignored_gives_zero measured_shard_plans_match)
  kljit_test(NAME gpu.shard.${case} EXE gpu_shard CASE ${case} LABELS gpu TIMEOUT 900)
endforeach()
