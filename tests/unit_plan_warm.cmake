# unit_plan_warm: the CPU part of a plan on a warm kernel cache (render or memo, key, lookup),
# timed in a fresh process and in the same process; the spec -> key memo is exact. No GPU.
kljit_test_exe(unit_plan_warm unit_plan_warm.c)
foreach(case
    cpu_part_of_a_warm_plan_is_under_5ms
    memo_gives_the_rendered_key_and_never_hides_a_template_edit)
  kljit_test(NAME unit.plan_warm.${case} EXE unit_plan_warm CASE ${case} LABELS unit)
endforeach()
