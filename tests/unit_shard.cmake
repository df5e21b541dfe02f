# SPDX-License-Identifier: Apache-2.0
# unit_shard: the tensor-parallel API without a GPU (shard fields, NCCL loader, NULL checks).
kljit_test_exe(unit_shard unit_shard.c)
kljit_test_cases(EXE unit_shard SOURCE unit_shard.c PREFIX unit.shard LABELS unit)
