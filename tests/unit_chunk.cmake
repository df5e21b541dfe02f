# SPDX-License-Identifier: Apache-2.0
# unit_chunk: a call's chunk (at most 3/8 of its rows, an eighth with the online teacher),
# its dW accumulation (KLJIT_ACCUM_AUTO) and its workspace, without a GPU.
kljit_test_exe(unit_chunk unit_chunk.c)
kljit_test_cases(EXE unit_chunk SOURCE unit_chunk.c PREFIX unit.chunk LABELS unit)
