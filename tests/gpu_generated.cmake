# SPDX-License-Identifier: Apache-2.0
# The GPU suite again with every GEMM of the chunk loop generated: the dense, sparse and API
# cases under KLJIT_GEMM=jit (the logits, dX and dW GEMMs from templates/gemm_sm90.cu.lua on
# sm_90 with 16-bit inputs; the cases of other GPUs or dtypes take cuBLASLt, as a plan's
# description says), against the same fp64 reference and bounds. `ctest -R gpu.generated`.
foreach(area dense sparse api)
  kljit_test_cases(EXE gpu_${area} SOURCE gpu_${area}.c PREFIX gpu.generated.${area} LABELS gpu
                   TIMEOUT 900 NAMES_VAR generated)
  set_property(TEST ${generated} APPEND PROPERTY ENVIRONMENT "KLJIT_GEMM=jit")
endforeach()
# The dense suite again with the row statistics in the logits GEMM's epilogue where its scope
# holds (KLJIT_GEMM=all:jit,logits:jit.stats; the other cases keep the row kernels' pass, as the
# plan's description says). `ctest -R gpu.fused_stats`.
kljit_test_cases(EXE gpu_dense SOURCE gpu_dense.c PREFIX gpu.fused_stats.dense LABELS gpu
                 TIMEOUT 900 NAMES_VAR fused_stats)
set_property(TEST ${fused_stats} APPEND PROPERTY ENVIRONMENT "KLJIT_GEMM=all:jit,logits:jit.stats")
# ... and the sparse suite (the forward KL with tail none or renorm takes it; the rest keep pass
# 1, as the plan's description says). `ctest -R gpu.fused_stats.sparse`.
kljit_test_cases(EXE gpu_sparse SOURCE gpu_sparse.c PREFIX gpu.fused_stats.sparse LABELS gpu
                 TIMEOUT 900 NAMES_VAR fused_stats_sparse)
set_property(TEST ${fused_stats_sparse} APPEND PROPERTY ENVIRONMENT
             "KLJIT_GEMM=all:jit,logits:jit.stats")
# ... and the top-K teacher's divergences (their records' sum-exp on and off the support apart,
# from its ids; not their shards). `ctest -R gpu.fused_stats.topk`.
kljit_test_cases(EXE gpu_topk SOURCE gpu_topk.c PREFIX gpu.fused_stats.topk LABELS gpu
                 TIMEOUT 900 NAMES_VAR fused_stats_topk)
set_property(TEST ${fused_stats_topk} APPEND PROPERTY ENVIRONMENT
             "KLJIT_GEMM=all:jit,logits:jit.stats")
# The dense suite again with E16 (KLJIT_GEMM=logits:jit.e16): where its scope holds, every
# call's rows read the logits GEMM's fp16 tile-relative scores instead of fp32 logits (the other
# cases as the plan's description says). `ctest -R gpu.fused_e16`.
kljit_test_cases(EXE gpu_dense SOURCE gpu_dense.c PREFIX gpu.fused_e16.dense LABELS gpu
                 TIMEOUT 900 NAMES_VAR fused_e16)
set_property(TEST ${fused_e16} APPEND PROPERTY ENVIRONMENT "KLJIT_GEMM=logits:jit.e16")
# ... and the sparse suite (the forward KL with tail none or renorm takes it). `ctest -R
# gpu.fused_e16.sparse`.
kljit_test_cases(EXE gpu_sparse SOURCE gpu_sparse.c PREFIX gpu.fused_e16.sparse LABELS gpu
                 TIMEOUT 900 NAMES_VAR fused_e16_sparse)
set_property(TEST ${fused_e16_sparse} APPEND PROPERTY ENVIRONMENT "KLJIT_GEMM=logits:jit.e16")
# The dense suite again with the logits GEMM's accumulator promoted every 256 of K (flag r, the
# cooperative 128 x 128 variant: KLJIT_GEMM=logits:jit.128.2.6.g.1.r; the loss's precision,
# bench/accumulation_precision.py). `ctest -R gpu.promoted`.
kljit_test_cases(EXE gpu_dense SOURCE gpu_dense.c PREFIX gpu.promoted.dense LABELS gpu
                 TIMEOUT 900 NAMES_VAR promoted)
set_property(TEST ${promoted} APPEND PROPERTY ENVIRONMENT "KLJIT_GEMM=logits:jit.128.2.6.g.1.r")
# The dense suite again with every GEMM claiming its tiles from a counter (flag d: the logits
# GEMM's pingpong, dX's cooperative and dW's staged variants), and with E16's logits GEMM doing
# so. `ctest -R gpu.dynamic`.
kljit_test_cases(EXE gpu_dense SOURCE gpu_dense.c PREFIX gpu.dynamic.dense LABELS gpu
                 TIMEOUT 900 NAMES_VAR dynamic)
set_property(TEST ${dynamic} APPEND PROPERTY ENVIRONMENT
             "KLJIT_GEMM=logits:jit.128.2.6.g.1.pd,dx:jit.256.2.4.g.1.d,dw:jit.256.2.4.g.1.sd")
kljit_test_cases(EXE gpu_dense SOURCE gpu_dense.c PREFIX gpu.dynamic_e16.dense LABELS gpu
                 TIMEOUT 900 NAMES_VAR dynamic_e16)
set_property(TEST ${dynamic_e16} APPEND PROPERTY ENVIRONMENT
             "KLJIT_GEMM=logits:jit.128.2.6.g.1.ped")
