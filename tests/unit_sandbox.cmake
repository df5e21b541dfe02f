# SPDX-License-Identifier: Apache-2.0
# unit_sandbox: hostile templates and files against the renderer's limits (src/sandbox.c) and
# the wisdom reader. Each attack must fail within 2 s with a clear error. No GPU.
kljit_test_exe(unit_sandbox unit_sandbox.c)
foreach(case
    finalizers_cannot_be_installed
    message_handlers_run_under_the_limits
    costly_library_calls_are_refused
    many_heavy_calls_hit_the_time_limit
    template_and_wisdom_files_must_be_small_regular_files
    every_reject_precedes_the_prologue_s_end)
  kljit_test(NAME unit.sandbox.${case} EXE unit_sandbox CASE ${case} LABELS unit TIMEOUT 60)
endforeach()
