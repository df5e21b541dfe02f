# unit_kiface: kernel interfaces (src/kiface.c, templates/iface.cu.lua): manifests against the
# rendered signatures, marshalling by role, stale cached manifests refused. No GPU needed.
kljit_test_exe(unit_kiface unit_kiface.c)
foreach(case
    every_kernel_signature_matches_its_manifest_and_marshals_by_role
    dense_and_sparse_pass_two_take_their_own_teacher_roles
    manifest_with_unknown_role_or_wrong_kind_is_refused
    stale_cubin_with_another_manifest_is_refused)
  kljit_test(NAME unit.kiface.${case} EXE unit_kiface CASE ${case} LABELS unit)
endforeach()
