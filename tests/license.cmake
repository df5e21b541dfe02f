# SPDX-License-Identifier: Apache-2.0
# license: tools/spdx.sh (the SPDX line every source file opens with) on a scratch tree.
add_test(NAME unit.license.spdx_check_finds_files_without_the_line_and_fix_adds_it
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/spdx_selftest.sh
                 ${PROJECT_SOURCE_DIR}/tools/spdx.sh)
set_tests_properties(unit.license.spdx_check_finds_files_without_the_line_and_fix_adds_it
                     PROPERTIES LABELS unit)
