# SPDX-License-Identifier: Apache-2.0
# unit_wisdom_rules: the wisdom text as a contract (round trip, the templates' rules, scale,
# concurrent writers). No GPU.
kljit_test_exe(unit_wisdom_rules unit_wisdom_rules.c)
foreach(case
    wisdom_text_round_trips_as_a_fixed_point
    every_entry_the_parser_accepts_renders
    wisdom_import_scales_as_n_log_n_to_sixty_thousand_entries
    sixteen_concurrent_writers_keep_every_entry
    merging_sets_is_merging_their_entries_one_by_one
    a_thread_that_computed_for_a_second_still_imports_wisdom)
  kljit_test(NAME unit.wisdom.${case} EXE unit_wisdom_rules CASE ${case} LABELS unit)
endforeach()
