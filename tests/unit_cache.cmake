# SPDX-License-Identifier: Apache-2.0
# unit_cache: the on-disk kernel cache (src/cache.c, src/sha256.c); needs no GPU.
kljit_test_exe(unit_cache unit_cache.c)
kljit_test_cases(EXE unit_cache SOURCE unit_cache.c PREFIX unit.cache LABELS unit)
