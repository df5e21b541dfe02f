# SPDX-License-Identifier: Apache-2.0
# Unit tests of the template renderer (src/render.c, template.c, sandbox.c, validator.c): syntax,
# banner, determinism, errors, sandbox limits, the kept validator. No GPU needed.
kljit_test_exe(unit_template unit_template.c)
kljit_test_cases(EXE unit_template SOURCE unit_template.c PREFIX unit.template LABELS unit
                 EXCEPT sandbox_stops_infinite_loop)
# a runaway template must stop quickly: the unit case has a short CTest timeout, the perf case
# also checks that each loop stops within 5 s
kljit_test(NAME unit.template.sandbox_stops_infinite_loop EXE unit_template
           CASE sandbox_stops_infinite_loop LABELS unit TIMEOUT 30)
kljit_test(NAME perf.template.sandbox_stops_infinite_loop EXE unit_template
           CASE sandbox_stops_infinite_loop LABELS perf TIMEOUT 30)
set_property(TEST perf.template.sandbox_stops_infinite_loop APPEND PROPERTY ENVIRONMENT
             KLJIT_TEST_PERF=1)
set_property(TEST perf.template.sandbox_stops_infinite_loop PROPERTY RUN_SERIAL TRUE)
