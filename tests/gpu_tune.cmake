# gpu_tune: kljit_tune and KLJIT_PLAN_MEASURE / EXHAUSTIVE / WISDOM_ONLY on a GPU, and the time
# of kljit_plan_create on a warm kernel cache (printed; the median must be <= 5 ms). Skips (77)
# where there is no GPU.
add_executable(gpu_tune gpu_tune.c)
target_link_libraries(gpu_tune PRIVATE kljit kljit_gpusupport)
foreach(case
    tune_stores_a_winner_no_slower_than_the_heuristic
    measure_tunes_once_then_wisdom_only_and_measure_reuse_it
    warm_cache_plan_create_is_under_5ms)
  kljit_test(NAME gpu.tune.${case} EXE gpu_tune CASE ${case} LABELS gpu TIMEOUT 600)
endforeach()
