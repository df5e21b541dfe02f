# SPDX-License-Identifier: Apache-2.0
# The GPU suites again under a KLJIT_GEMM of their own: every case of tests/gpu_<area>.c as
# <prefix>.<case>, against the same fp64 reference and bounds (the cases a choice cannot serve
# take what the plan's description says). `ctest -R <prefix>`.
function(kljit_gemm_suite area prefix gemm)
  kljit_test_cases(EXE gpu_${area} SOURCE gpu_${area}.c PREFIX ${prefix} LABELS gpu TIMEOUT 900
                   NAMES_VAR names)
  set_property(TEST ${names} APPEND PROPERTY ENVIRONMENT "KLJIT_GEMM=${gemm}")
endfunction()

# Every GEMM of the chunk loop generated: the logits, dX and dW GEMMs from
# templates/gemm_sm90.cu.lua on sm_90 with 16-bit inputs (cuBLASLt for other GPUs or dtypes).
foreach(area dense sparse api)
  kljit_gemm_suite(${area} gpu.generated.${area} jit)
endforeach()
# The row statistics in the logits GEMM's epilogue where its scope holds (the other cases keep
# the row kernels' pass): the dense suite, the sparse one (the forward KL with tail none or
# renorm) and the top-K teacher's divergences (their records' sum-exp on and off the support
# apart, from its ids; not their shards).
foreach(area dense sparse topk)
  kljit_gemm_suite(${area} gpu.fused_stats.${area} all:jit,logits:jit.stats)
endforeach()
# E16: where its scope holds, every call's rows read the logits GEMM's fp16 tile-relative scores
# instead of fp32 logits (the sparse suite: the forward KL with tail none or renorm).
foreach(area dense sparse)
  kljit_gemm_suite(${area} gpu.fused_e16.${area} logits:jit.e16)
endforeach()
# The logits GEMM's accumulator promoted every 256 of K (flag r, the cooperative 128 x 128
# variant; the loss's precision, bench/accumulation_precision.py).
kljit_gemm_suite(dense gpu.promoted.dense logits:jit.128.2.6.g.1.r)
# Every GEMM claiming its tiles from a counter (flag d: the logits GEMM's pingpong, dX's
# cooperative and dW's staged variants), and E16's logits GEMM doing so.
kljit_gemm_suite(dense gpu.dynamic.dense
                 logits:jit.128.2.6.g.1.pd,dx:jit.256.2.4.g.1.d,dw:jit.256.2.4.g.1.sd)
kljit_gemm_suite(dense gpu.dynamic_e16.dense logits:jit.128.2.6.g.1.ped)
