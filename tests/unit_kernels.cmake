# SPDX-License-Identifier: Apache-2.0
# unit_kernels: every kernel module a valid problem can need renders and
# compiles with NVRTC for sm_80 and sm_90 (templates/*.cu.lua through src/spec.c); no GPU.
# The full enumeration compiles about 1600 modules per arch: the quick suite's pairwise cover
# of them to a cubin, mostly with NVRTC's fast-compile mode, and the rest to PTX only (the
# header of unit_kernels.c says why and what stays at full effort): about 3 minutes with the
# two worker processes on 2 cores; `slow` and a timeout with room for a loaded machine. The
# quick suite compiles the pairwise cover alone (every_feature_pair_compiles_for_sm80_and_sm90,
# about a tenth of the jobs), which the full suite leaves out (tests/check.sh --full: its jobs
# are the ones this one takes to a cubin).
kljit_test_exe(unit_kernels unit_kernels.c)
kljit_test(NAME unit.kernels.every_variant_compiles_for_sm80_and_sm90 EXE unit_kernels
           CASE every_variant_compiles_for_sm80_and_sm90 LABELS unit slow TIMEOUT 1800)
# The longest test starts first (a fresh build has no timings for CTest to order by), so the
# rest of a full run overlaps it instead of waiting behind it.
set_tests_properties(unit.kernels.every_variant_compiles_for_sm80_and_sm90 PROPERTIES COST 10000)
kljit_test_cases(EXE unit_kernels SOURCE unit_kernels.c PREFIX unit.kernels LABELS unit
                 EXCEPT every_variant_compiles_for_sm80_and_sm90)
