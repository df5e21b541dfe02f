# SPDX-License-Identifier: Apache-2.0
# kljit-bench and its tests; included by bench/CMakeLists.txt once the CUDA language is on.

# The baselines' kernels. The directory's warning options are gcc's (nvcc rejects -Wall), so
# this target gets nvcc's own spelling of them.
add_library(kljit_bench_kernels OBJECT matrix_kernels.cu)
set_property(TARGET kljit_bench_kernels PROPERTY COMPILE_OPTIONS
             -Xcompiler=-Wall,-Wextra $<$<BOOL:${KLJIT_WERROR}>:-Werror=all-warnings>)
target_include_directories(kljit_bench_kernels PRIVATE ${CMAKE_SOURCE_DIR}/include)
set_target_properties(kljit_bench_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                      CUDA_RUNTIME_LIBRARY Shared)

add_executable(kljit-bench matrix_main.c matrix_options.c matrix_record.c matrix_spawn.c
               matrix_child.c matrix_methods.c matrix_gemm.c
               $<TARGET_OBJECTS:kljit_bench_kernels>)
# one timing loop and one input generator with bench_loss (bench_time.c, tools/gpu_fill.c)
target_link_libraries(kljit-bench PRIVATE kljit kljit_benchtime kljit_gpufill CUDA::cudart
                      CUDA::cublas)
set_target_properties(kljit-bench PROPERTIES LINKER_LANGUAGE C CUDA_RUNTIME_LIBRARY Shared)
install(TARGETS kljit-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Tests: the command line and the process isolation need no GPU (unit); gpu.bench.* run tiny
# matrices and skip (77) without a GPU. Each case runs kljit-bench as a child process.
add_executable(kljit_bench_test matrix_test.c matrix_spawn.c)
target_include_directories(kljit_bench_test PRIVATE ${CMAKE_SOURCE_DIR}/tests
                           ${CMAKE_SOURCE_DIR}/include)
target_compile_definitions(kljit_bench_test PRIVATE
                           MX_BENCH_EXE="$<TARGET_FILE:kljit-bench>")
target_link_libraries(kljit_bench_test PRIVATE CUDA::cudart)
add_dependencies(kljit_bench_test kljit-bench)
foreach(case
    help_exits_0_and_lists_every_option
    unknown_option_exits_2_with_a_message
    bad_values_exit_2_naming_the_option
    missing_value_exits_2_with_a_message
    tp_other_than_1_is_reported_unsupported
    dry_run_lists_one_experiment_per_method_length_and_chunk
    dry_run_of_the_default_matrix_lists_28_experiments
    one_needs_options_spanning_exactly_one_experiment
    crashed_children_become_failed_rows_and_the_matrix_goes_on)
  add_test(NAME unit.bench.${case} COMMAND kljit_bench_test ${case})
  set_tests_properties(unit.bench.${case} PROPERTIES LABELS unit TIMEOUT 120)
endforeach()
foreach(case
    tiny_dense_matrix_runs_every_method_and_agrees_with_unfused
    tiny_fp16_matrix_runs_every_method_and_agrees_with_unfused
    tiny_sparse_matrix_runs_the_baselines_and_they_agree)
  add_test(NAME gpu.bench.${case} COMMAND kljit_bench_test ${case})
  # RUN_SERIAL: peak_vram_gib is the drop in the device's free memory (cudaMemGetInfo), which
  # counts every process on the GPU; a test freeing memory beside it (ctest -j) can hide the
  # method's allocations (a peak of 0) or add its own to them.
  set_tests_properties(gpu.bench.${case} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600
                       RUN_SERIAL TRUE
                       ENVIRONMENT "KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache")
endforeach()
