# unit_jit: the compile pipeline of one module (src/jit.c: render, key, cache, NVRTC) with the
# real templates and NVRTC, each case in its own temporary cache directory; no GPU needed.
kljit_test_exe(unit_jit unit_jit.c)
foreach(case
    second_build_is_a_cache_hit
    key_changes_with_arch_options_and_source
    corrupt_entry_is_recompiled_and_rewritten
    readonly_cache_path_serves_and_is_never_written
    disabled_cache_compiles_in_memory
    sixteen_processes_build_same_and_different_specs_into_one_cache
    dump_dir_receives_source_and_log
    nvrtc_error_is_reported_with_log
    cold_compile_and_warm_lookup_times)
  kljit_test(NAME unit.jit.${case} EXE unit_jit CASE ${case} LABELS unit)
endforeach()
