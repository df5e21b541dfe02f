# SPDX-License-Identifier: Apache-2.0
# unit_plan_warm: the CPU part of a plan on a warm kernel cache (render or memo, key, lookup),
# timed in a fresh process and in the same process; the spec memo (src/spec_memo.c) and its
# canonical key are exact, and it keeps renders and specs found again when full. No GPU.
kljit_test_exe(unit_plan_warm unit_plan_warm.c)
# fresh_process_lookup is the child of the first case, not a test of its own
kljit_test_cases(EXE unit_plan_warm SOURCE unit_plan_warm.c PREFIX unit.plan_warm LABELS unit
                 EXCEPT fresh_process_lookup PERF cpu_part_of_a_warm_plan_is_under_5ms)
