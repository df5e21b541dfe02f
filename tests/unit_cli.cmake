# The kljit CLI as scripts use it (tools/cli_*.c): help, exit codes, precompile's manifest and
# --jobs, cache ls/verify/clear/stats, info without a GPU. The cases run the built `kljit`.
kljit_test_exe(unit_cli unit_cli.c)
foreach(case every_command_has_help_that_exits_0
        unknown_commands_and_options_exit_2
        precompile_writes_a_manifest_whose_checksums_match_the_files
        precompile_jobs_2_gives_the_same_entries_as_jobs_1
        precompile_dry_run_writes_nothing
        cache_verify_finds_a_flipped_byte_and_exits_4
        cache_clear_removes_entries_and_leaves_foreign_files
        cache_stats_and_ls_count_the_entries
        info_runs_without_a_gpu_and_says_so
        precompile_v2_from_threads_matches_a_serial_run
        tooling_functions_check_their_arguments_and_permissions
        precompile_that_cannot_store_an_entry_exits_1_naming_it
        precompile_into_a_full_or_read_only_filesystem_exits_1)
  add_test(NAME unit.cli.${case} COMMAND unit_cli ${case})
  set_tests_properties(unit.cli.${case} PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT
    "KLJIT_CLI=$<TARGET_FILE:kljit_cli>;KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli")
endforeach()
