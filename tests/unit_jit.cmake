# SPDX-License-Identifier: Apache-2.0
# unit_jit: the compile pipeline of one module (src/jit.c: render, key, cache, NVRTC) with the
# real templates and NVRTC, each case in its own temporary cache directory; no GPU needed.
kljit_test_exe(unit_jit unit_jit.c)
kljit_test_cases(EXE unit_jit SOURCE unit_jit.c PREFIX unit.jit LABELS unit
                 PERF cold_compile_and_warm_lookup_times)
