# SPDX-License-Identifier: Apache-2.0
# gpu_tune: kljit_tune and KLJIT_PLAN_MEASURE / EXHAUSTIVE / WISDOM_ONLY on a GPU, and the time
# of kljit_plan_create on a warm kernel cache (printed; the median must be <= 5 ms). Skips (77)
# where there is no GPU.
add_executable(gpu_tune gpu_tune.c)
target_link_libraries(gpu_tune PRIVATE kljit kljit_gpusupport)
# fresh_process_plan_create is the child of warm_cache_plan_create_is_under_5ms, not a test
kljit_test_cases(EXE gpu_tune SOURCE gpu_tune.c PREFIX gpu.tune LABELS gpu TIMEOUT 600
                 EXCEPT fresh_process_plan_create)
