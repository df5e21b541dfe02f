# SPDX-License-Identifier: Apache-2.0
# unit_sources: static checks of src/ (tests/check_sources.py): the include layers of
# docs/architecture.md (no upward include, no cycle, every module placed), every status-returning
# entry point clearing the last error first, planning as a pure function (nothing reachable from
# recipe_make reads the environment, a clock or the GPU; the geometry derived in one place), no
# record size restated in src/ or the binding, and the checker's own self-test.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  add_test(NAME unit.layers.python3_is_missing COMMAND sh -c "exit 77")
  set_tests_properties(unit.layers.python3_is_missing PROPERTIES LABELS unit SKIP_RETURN_CODE 77)
  return()
endif()
set(kljit_check ${CMAKE_CURRENT_SOURCE_DIR}/check_sources.py)
add_test(NAME unit.layers.src_includes_follow_the_documented_layers_without_cycles
         COMMAND ${Python3_EXECUTABLE} ${kljit_check} layers ${CMAKE_SOURCE_DIR})
add_test(NAME unit.layers.checker_refuses_an_upward_include_a_cycle_and_an_unplaced_module
         COMMAND ${Python3_EXECUTABLE} ${kljit_check} selftest)
add_test(NAME unit.api.every_status_entry_point_clears_the_last_error_first
         COMMAND ${Python3_EXECUTABLE} ${kljit_check} entry-points ${CMAKE_SOURCE_DIR})
add_test(NAME unit.recipe.planning_reads_no_environment_clock_or_gpu_and_has_one_geometry
         COMMAND ${Python3_EXECUTABLE} ${kljit_check} planning ${CMAKE_SOURCE_DIR})
# the records' layouts: declared once in the templates (the kernels' side: unit.kiface)
add_test(NAME unit.layouts.no_record_size_is_restated_in_src_or_the_binding
         COMMAND ${Python3_EXECUTABLE} ${kljit_check} layouts ${CMAKE_SOURCE_DIR})
set_tests_properties(unit.layers.src_includes_follow_the_documented_layers_without_cycles
                     unit.layers.checker_refuses_an_upward_include_a_cycle_and_an_unplaced_module
                     unit.api.every_status_entry_point_clears_the_last_error_first
                     unit.recipe.planning_reads_no_environment_clock_or_gpu_and_has_one_geometry
                     unit.layouts.no_record_size_is_restated_in_src_or_the_binding
                     PROPERTIES LABELS unit)
