# SPDX-License-Identifier: Apache-2.0
# unit_chunk: a call's chunk (at most a quarter of its rows, an eighth with the online teacher)
# and its workspace, without a GPU.
kljit_test_exe(unit_chunk unit_chunk.c)
foreach(case
    a_short_call_chunks_at_a_quarter_of_its_rows
    an_online_teachers_short_call_chunks_at_an_eighth_of_its_rows
    a_short_calls_workspace_stays_under_n_v_bf16_values)
  kljit_test(NAME unit.chunk.${case} EXE unit_chunk CASE ${case} LABELS unit)
endforeach()
