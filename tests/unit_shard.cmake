# unit_shard: the tensor-parallel API without a GPU (shard fields, NCCL loader, NULL checks).
kljit_test_exe(unit_shard unit_shard.c)
foreach(case
    shard_fields_are_validated_naming_field_and_value
    nccl_loader_reports_a_missing_library
    new_entry_points_reject_null_arguments
    workspace_holds_the_records_and_no_cluster_variant
    checked_agreement_leaves_the_context_stack_as_it_found_it)
  kljit_test(NAME unit.shard.${case} EXE unit_shard CASE ${case} LABELS unit)
endforeach()
