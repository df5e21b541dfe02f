# SPDX-License-Identifier: Apache-2.0
# python: the PyTorch binding (python/kljit) and the bench scripts, tested through
# python/tests/run.py, one CTest case per Python test method:
#   unit.python.<module>.<case>  no torch or GPU needed: ctypes layout against the compiler,
#                                library loading, kljit_plan_check, argument checks (fake
#                                tensors; real CPU tensors too where torch is installed);
#                                the PyTorch references against tests/ref.c and the plot
#                                script skip (77) without torch / matplotlib;
#   gpu.python.<module>.<case>   the binding against PyTorch on the GPU (77 without torch+CUDA).
# The cases that need torch carry the label `torch` too (_util.labels in the test module): CI
# installs torch (.ci/run) and counts them (`ctest -L torch -LE gpu`).
# The cases are listed by running `run.py --list` at configure time. Without python3 every
# case is one skipped test.
add_executable(python_layout python_layout.c)
target_include_directories(python_layout PRIVATE ${CMAKE_SOURCE_DIR}/include)
add_executable(python_ref python_ref.c)
target_link_libraries(python_ref PRIVATE kljit_testsupport)

find_package(Python3 COMPONENTS Interpreter)
set(kljit_py_dir ${CMAKE_SOURCE_DIR}/python)
set(kljit_py_runner ${kljit_py_dir}/tests/run.py)
file(GLOB kljit_py_tests CONFIGURE_DEPENDS ${kljit_py_dir}/tests/test_*.py)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${kljit_py_tests}
             ${kljit_py_runner})

if(NOT Python3_Interpreter_FOUND)
  add_test(NAME unit.python.python3_is_missing COMMAND sh -c "exit 77")
  set_tests_properties(unit.python.python3_is_missing PROPERTIES LABELS unit
                       SKIP_RETURN_CODE 77)
  return()
endif()

set(kljit_py_env
    "KLJIT_LIBRARY=$<TARGET_FILE:kljit>"
    "KLJIT_TEST_LAYOUT_HELPER=$<TARGET_FILE:python_layout>"
    "KLJIT_TEST_REF_HELPER=$<TARGET_FILE:python_ref>"
    "KLJIT_TEST_OUT=${CMAKE_BINARY_DIR}/python-test-out"
    "KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache"
    "PYTHONPATH=${kljit_py_dir}"
    "PYTHONDONTWRITEBYTECODE=1"
    "MPLBACKEND=Agg")

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=${kljit_py_dir}
          ${Python3_EXECUTABLE} ${kljit_py_runner} --list
  OUTPUT_VARIABLE kljit_py_cases ERROR_VARIABLE kljit_py_err RESULT_VARIABLE kljit_py_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT kljit_py_rc EQUAL 0)
  # Keep the failure visible in ctest rather than failing the whole configure.
  message(WARNING "python/tests/run.py --list failed: ${kljit_py_err}")
  add_test(NAME unit.python.tests_can_be_listed
           COMMAND ${Python3_EXECUTABLE} ${kljit_py_runner} --list)
  set_tests_properties(unit.python.tests_can_be_listed PROPERTIES LABELS unit
                       ENVIRONMENT "${kljit_py_env}")
  return()
endif()

string(REPLACE "\n" ";" kljit_py_cases "${kljit_py_cases}")
foreach(line ${kljit_py_cases})
  # line = test_<module>.<Class>.test_<case> [extra labels]: "torch" marks the tests that need
  # torch (CI installs it: `ctest -L torch` runs them)
  string(REPLACE " " ";" words "${line}")
  list(POP_FRONT words id)
  string(REGEX MATCH "^test_([a-z0-9_]+)\\.[A-Za-z0-9_]+\\.test_([a-z0-9_]+)$" ok "${id}")
  if(NOT ok)
    message(FATAL_ERROR "python test id ${id} is not test_<module>.<Class>.test_<case>")
  endif()
  set(module ${CMAKE_MATCH_1})
  set(case ${CMAKE_MATCH_2})
  if(module MATCHES "^gpu")
    set(label gpu)
    string(REGEX REPLACE "^gpu_?" "" module "${module}")
    set(name gpu.python.${module}.${case})
    set(timeout 900)
    if(module STREQUAL "distributed")
      # tp processes compile their shards' plans at first use: room for a cold kernel cache
      set(timeout 1800)
    endif()
  else()
    set(label unit)
    set(name unit.python.${module}.${case})
    set(timeout 300)
  endif()
  add_test(NAME ${name} COMMAND ${Python3_EXECUTABLE} ${kljit_py_runner} ${id})
  set_tests_properties(${name} PROPERTIES LABELS "${label};${words}" SKIP_RETURN_CODE 77
                       TIMEOUT ${timeout} ENVIRONMENT "${kljit_py_env}")
endforeach()
