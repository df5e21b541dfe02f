# unit_cache: the on-disk kernel cache (src/cache.c, src/sha256.c); needs no GPU.
kljit_test_exe(unit_cache unit_cache.c)
foreach(case
    sha256_matches_fips_vectors
    hit_after_miss
    key_change_is_a_miss
    truncated_entry_is_a_miss
    bit_flipped_entry_is_a_miss
    wrong_key_entry_is_a_miss
    zero_length_entry_is_a_miss
    corrupt_entry_is_replaced_by_store
    random_corruptions_never_crash
    sixteen_processes_race_same_and_different_keys
    group_writable_entry_is_refused
    world_writable_dir_is_refused
    symlinked_entry_is_refused
    foreign_owner_entry_is_refused
    readonly_path_is_searched_first_and_never_written
    disabled_cache_never_touches_disk
    config_reads_environment
    failed_store_leaves_no_temp_file)
  kljit_test(NAME unit.cache.${case} EXE unit_cache CASE ${case} LABELS unit)
endforeach()
