# SPDX-License-Identifier: Apache-2.0
# Fuzzers (tests/fuzz/): libFuzzer harnesses for the cache entry reader, the wisdom parser and
# formatter (with the round-trip oracle) and the template renderer, built with Debian's clang
# (packages clang and libclang-rt-14-dev) when it is found at configure time, with ASan and
# UBSan. CTest runs each for KLJIT_FUZZ_SECONDS (default 60) on its seed corpus, label `fuzz`;
# without clang/libFuzzer the tests are there and skip (77). tests/fuzz/README: longer runs.
set(KLJIT_FUZZ_SECONDS 60 CACHE STRING "seconds each fuzzer runs in ctest")
set(fuzz_dir ${CMAKE_BINARY_DIR}/fuzz)
set(fuzz_names fuzz_cache_entry fuzz_template fuzz_wisdom)
find_program(KLJIT_CLANG NAMES clang clang-14)
set(fuzz_ok FALSE)
if(KLJIT_CLANG)
  file(WRITE ${CMAKE_BINARY_DIR}/fuzz-probe.c
       "#include <stddef.h>\n#include <stdint.h>\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${KLJIT_CLANG} -fsanitize=fuzzer,address,undefined
                          ${CMAKE_BINARY_DIR}/fuzz-probe.c -o ${CMAKE_BINARY_DIR}/fuzz-probe
                  RESULT_VARIABLE fuzz_probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(fuzz_probe_rc EQUAL 0)
    set(fuzz_ok TRUE)
  endif()
endif()
if(fuzz_ok)
  message(STATUS "Fuzzers: libFuzzer with ${KLJIT_CLANG}")
  set(fuzz_cflags "-I${CMAKE_SOURCE_DIR}/include -I${CMAKE_SOURCE_DIR}/src")
  foreach(d ${LUA_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
    string(APPEND fuzz_cflags " -isystem ${d}")
  endforeach()
  get_target_property(nvrtc_lib CUDA::nvrtc IMPORTED_LOCATION)
  get_target_property(cublaslt_lib CUDA::cublasLt IMPORTED_LOCATION)
  set(fuzz_libs "")
  foreach(l ${LUA_LIBRARIES} ${nvrtc_lib} ${cublaslt_lib})
    get_filename_component(ld ${l} DIRECTORY)
    string(APPEND fuzz_libs " ${l} -Wl,-rpath,${ld}")
  endforeach()
  string(APPEND fuzz_libs " -ldl -lm -lpthread")
  set(fuzz_outputs "")
  foreach(n ${fuzz_names})
    list(APPEND fuzz_outputs ${fuzz_dir}/${n})
  endforeach()
  file(GLOB fuzz_harnesses CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_*.c)
  file(GLOB fuzz_headers CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.h
       ${CMAKE_SOURCE_DIR}/include/*.h)
  add_custom_command(
    OUTPUT ${fuzz_outputs}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/build.sh ${fuzz_dir} ${KLJIT_CLANG}
            "${fuzz_cflags}" "${fuzz_libs}" ${KLJIT_SOURCES} ${KLJIT_EMBED_C}
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/build.sh ${fuzz_harnesses} ${KLJIT_SOURCES}
            ${KLJIT_TEMPLATES} ${fuzz_headers}
    COMMENT "Building the fuzzers (clang, libFuzzer, ASan, UBSan)")
  add_custom_target(kljit_fuzzers ALL DEPENDS ${fuzz_outputs})
  add_dependencies(kljit_fuzzers kljit_obj) # the embedded templates are generated there
else()
  message(STATUS "Fuzzers: no clang with libFuzzer (apt-get install clang libclang-rt-14-dev); "
                 "the fuzz tests will skip")
endif()
foreach(n ${fuzz_names})
  add_test(NAME fuzz.${n}.runs_without_crash_hang_or_oracle_violation
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run.sh ${fuzz_dir}/${n}
                   ${KLJIT_FUZZ_SECONDS})
  set_tests_properties(fuzz.${n}.runs_without_crash_hang_or_oracle_violation PROPERTIES
    LABELS fuzz SKIP_RETURN_CODE 77 TIMEOUT 600
    ENVIRONMENT "FUZZ_ARTIFACTS=${CMAKE_BINARY_DIR}/fuzz-artifacts;ASAN_OPTIONS=detect_leaks=1")
endforeach()
