# SPDX-License-Identifier: Apache-2.0
# unit_wisdom_rules: the wisdom text as a contract (round trip, the templates' rules, scale,
# merging, concurrent writers). No GPU. The import's 1 s bar for 60 000 entries is asserted in
# its perf registration only (run alone, KLJIT_TEST_PERF=1).
kljit_test_exe(unit_wisdom_rules unit_wisdom_rules.c)
kljit_test_cases(EXE unit_wisdom_rules SOURCE unit_wisdom_rules.c PREFIX unit.wisdom LABELS unit
                 PERF import_of_sixty_thousand_entries_scales_as_n_log_n_and_takes_under_a_second)
