/* SPDX-License-Identifier: Apache-2.0 */
/* kljit.h — the public C API of kljit, and its reference documentation.
 *
 * kljit computes fused linear + KL-divergence distillation losses on NVIDIA GPUs, forward and
 * backward, without materializing the tokens x vocab logits. Row kernels are generated from
 * Lua templates for the exact problem, compiled with NVRTC, cached on disk as cubins and
 * launched through the CUDA Driver API; cuBLASLt runs the GEMMs.
 *
 * The math (every backend and test agrees on it)
 * ----------------------------------------------
 *   X[N,H] hidden states, W[V,H] head weight, b[V] optional bias.
 *   z = X W^T + b   (student logits),   s = z / T,   log q = s - lse(s).
 *   Teacher p over the vocabulary, in one of four forms (kljit_teacher_form).
 *   Per-row forward KL:  l_i = sum_v p_v (log max(p_v, eps) - log q_v)      (0 log 0 = 0)
 *   Dense gradient:      dL/dz_v = scale / T * (sum(p) * softmax(s)_v - p_v)
 *   dX = G W,  dW = G^T X,  db = sum_rows G.
 *   Rows whose label equals ignore_index are excluded; all rows excluded gives loss 0 and zero
 *   gradients, never NaN. See kljit_reduction for the scale, KLJIT_FLAG_SCALE_T_SQUARED for T^2.
 *
 * The loss families (kljit_problem.divergence, hard_weight, soft_weight, softcap)
 *   Softcap (Gemma 2), student: z' = c tanh(z / c) with c = softcap > 0 (0: z' = z), applied
 *   after the bias and before the temperature, s = z' / T; dz'/dz = 1 - tanh^2(z / c). The
 *   teacher's logits (DENSE_LOGITS, DENSE_HIDDEN) likewise with teacher_softcap, before
 *   teacher_temperature. With D the divergence below, CE the hard-label cross-entropy and w_i
 *   the row's weight (KLJIT_FLAG_ROW_WEIGHTS; 1 without),
 *     row loss   l_i = w_i (soft_weight * t2 * D_i + hard_weight * CE_i)      (t2 = T^2 or 1)
 *     CE_i       = lse(z') - (1 - ls) z'_y - ls / V sum_v z'_v + zl lse(z')^2
 *                  (temperature 1; y = labels[i] in [0, V) on kept rows; ls = label_smoothing,
 *                  zl = z_loss, both 0 by default: CE_i = lse(z') - z'_y)
 *     dl/dz'_v   = w_i (soft_weight * t2 / T * dD/ds_v + hard_weight * dCE/dz'_v)
 *     dCE/dz'_v  = (1 + 2 zl lse(z')) softmax(z')_v - (1 - ls) [v = y] - ls / V
 *   Label smoothing is torch's CrossEntropyLoss(label_smoothing=ls): the target (1 - ls) one-hot
 *   + ls uniform over the V columns (vocab_total on a shard; a padded teacher's extra columns
 *   are not the student's). The z-loss (PaLM) keeps lse(z') near 0; both belong to the hard
 *   term, so they need hard_weight > 0 and are scaled by it.
 *   Divergences, q = softmax(s), p the teacher, log p floored at log eps as above:
 *     FORWARD_KL  D = KL(p || q) = sum p (log p - log q)            dD/ds = sum(p) q - p
 *     REVERSE_KL  D = KL(q || p) = sum q (log q - log p)            dD/ds = q (log q - log p - D)
 *     JSD(beta)   0 < beta < 1, m = beta p + (1 - beta) q:
 *                 D = beta KL(p || m) + (1 - beta) KL(q || m)       dD/ds = q (g - sum q g),
 *                 g = (1 - beta) log(q / m);  beta = 0 is FORWARD_KL and beta = 1 REVERSE_KL
 *                 (Liger's LigerFusedLinearJSD and TRL's GKD define the end points so; they are
 *                 the limits of D / beta and D / (1 - beta), not of D, which tends to 0).
 *     TVD         D = 1/2 sum |p - q|                               dD/ds = q (g - sum q g),
 *                 g = sign(q - p) / 2, taken as 0 where p = q (a subgradient: D has a kink)
 *     SKEW_FORWARD_KL(a)  0 <= a < 1 (skew_alpha), m = a p + (1 - a) q:
 *                 D = KL(p || m) = sum p (log p - log m)            dD/ds = q (g - sum q g),
 *                 g = -(1 - a) p / m
 *     SKEW_REVERSE_KL(a)  0 <= a < 1, m = a q + (1 - a) p:
 *                 D = KL(q || m) = sum q (log q - log m)            dD/ds = q (g - sum q g),
 *                 g = log(q / m) - a q / m   (the +1 of d(q log q)/dq cancels in q (g - sum q g))
 *                 The skew KLs are DistiLLM's (Ko et al., 2024); a = 0 is FORWARD_KL and
 *                 REVERSE_KL, a -> 1 makes m the divergence's first argument and D -> 0. log p
 *                 (floored) enters the forward KLs' and the JSD's p log p only: TVD and the skew
 *                 reverse KL are finite where p = 0 without the floor.
 *   Every g above is dD/dq with q's simplex constraint left out: q (g - sum q g) is the same for
 *   any constant added to g, and the kernels drop the one that would cancel (kljit's templates).
 *   The sparse (top-K) teacher: support S (the row's ids, distinct), p_k from the values,
 *   M = sum_S p, Q_S = sum_S q. FORWARD_KL is its tail's loss (kljit_tail). The other
 *   divergences weigh log p at every column where q > 0, and p is unknown off the support, so
 *   they compare two distributions over categories C (the dense D above, with sums over C):
 *     TAIL_BUCKET  C = S and one tail category (the "ghost token", as the forward KL's BUCKET):
 *                  P = p on S, P_tail = max(1 - M, 0); Q = q on S, Q_tail = 1 - Q_S. Where the
 *                  support covers the vocabulary there is no tail category (C = S).
 *     TAIL_RENORM  C = S, both renormalized: P = p / M, Q = q / Q_S. A row with M = 0
 *                  contributes nothing. (The forward KL's RENORM, and so JSD with beta = 0,
 *                  keeps q over the whole vocabulary: KL(P || q) = KL(P || Q) - log Q_S.)
 *     TAIL_NONE    M log M is its floor, it is no divergence of two distributions: refused
 *                  (KLJIT_ERR_UNSUPPORTED) for any divergence but the forward KL.
 *   Its row kernels compare the categories with every divergence above (the skew KLs with m_c
 *   = a P_c + (1 - a) Q_c or a Q_c + (1 - a) P_c per category).
 *   With g_c = dD/dQ_c (as above: log Q_c - log P_c for the reverse KL, (1 - beta) log(Q_c /
 *   m_c) for the JSD, sign(Q_c - P_c) / 2 for TVD, -(1 - a) P_c / m_c for the skew forward KL,
 *   log(Q_c / m_c) - a Q_c / m_c for the skew reverse KL) and E = sum_C Q_c g_c, the gradient
 *   wrt a column s_v is
 *     BUCKET  dD/ds_v = q_v (g_c(v) - E),   c(v) = v on S, the tail category off S;
 *     RENORM  dD/ds_v = Q_v (g_v - E) on S, 0 off S.
 *   The row passes are the forward KL's (one streaming pass for the statistics, K gathers and
 *   one pass writing G); on a vocabulary shard E's sum over S takes the second exchange of
 *   records (kljit_experimental.h). Duplicate ids are unspecified for these divergences
 *   (checked mode reports them). The sparse teacher takes the student softcap, CE mixing (its
 *   label smoothing over all V columns, its z-loss) and soft_weight like the dense forms (D
 *   its divergence).
 *   Padded teachers: teacher_vocab Vt >= V columns per teacher row at a stride of teacher_ld
 *   elements; the columns [V, Vt) are excluded (a logits teacher's softmax runs over [0, V)).
 *   Row weights (KLJIT_FLAG_ROW_WEIGHTS, kljit_args.row_weights[N], fp32): w_i >= 0 and finite
 *   (checked mode reports a kept row's negative, NaN or infinite weight; unchecked, a weight is
 *   used as given) multiply row i's loss and gradient. They never change a reduction's divisor:
 *   BATCHMEAN divides by the kept rows (a kept row of weight 0 still counts), MEAN by kept rows
 *   times V, and where a global divisor replaces the kept rows (num_items_in_batch across data
 *   parallel ranks and accumulation steps) the weights leave it as it is. A weighted mean
 *   sum w_i l_i / sum w_i is REDUCTION_SUM divided by sum w_i (or that divisor set to sum w_i).
 *   Optional outputs (kljit_args.row_loss, loss_parts; kljit_fused, kljit_forward, and a shard's
 *   part in kljit_shard_finish): row_loss[i] = l_i above (t2 and w_i in, the reduction's
 *   constant not; 0 for an ignored row), and loss_parts = {soft, hard}, the reduction of the
 *   rows' w_i soft_weight t2 D_i and of their w_i hard_weight CE_i: the two add up to the loss.
 *   Written by the pass that writes the loss, without a second pass over the logits.
 *   What this build's plans compute: every divergence (the reverse KL, the JSD, TVD and the
 *   skew KLs in the two-pass row kernels, which then run one pass-2 block per row and, fused,
 *   read each chunk row once more; on a vocabulary shard they take a second exchange of
 *   records, kljit_experimental.h), softcaps, CE mixing with label smoothing and the z-loss
 *   (labels required when hard_weight > 0; a kept row's label outside [0, V) is not checked and
 *   gives CE = lse(z') less its smoothing; on a shard the labels are global ids), row weights,
 *   padded teachers (unsharded) and the online teacher DENSE_HIDDEN (with its bias; on a
 *   shard, the shard's rows of its head; checked mode checks its input, head and bias). The
 *   sparse teacher takes the forward KL, and every other divergence with TAIL_BUCKET or
 *   TAIL_RENORM, CE mixing with label smoothing and the z-loss, row weights and both optional
 *   outputs, as the dense forms do.
 *
 * Conventions
 * -----------
 *   - Every call returns a kljit_status. The detail (which argument, which value, the failing
 *     CUDA call, the NVRTC log, the template file:line) is in kljit_last_error(), which is
 *     thread-local and valid until the next kljit call on the same thread. Every function
 *     that returns a kljit_status clears it on entry, so it is "" after a success; the
 *     functions that cannot fail (kljit_last_error, kljit_status_string, the version getters,
 *     kljit_plan_describe, kljit_free and the destroys) never touch it, so it survives the
 *     cleanup and the printing of a failure.
 *   - Bad input returns an error before any output is written.
 *   - Tensors are dense, row-major, on the device of the context. The caller owns all memory,
 *     including the workspace; kljit allocates no device memory while executing.
 *   - Every GPU call takes an explicit stream (a CUstream or cudaStream_t; NULL is the legacy
 *     default stream). Plans are immutable and may be used from several threads at once on
 *     different streams, each call with its own workspace.
 *   - kljit_*_destroy(NULL) is a no-op. Signatures never change once released; new behaviour
 *     comes as new functions (_v2) or new fields at the end of the structs, which carry their
 *     size in their first member.
 *
 * Alignment the kernels need (checked; KLJIT_ERR_MISALIGNED otherwise)
 *   workspace: 256 bytes (cuBLASLt's workspace lives in it; cudaMalloc gives 256);
 *   input, weight, teacher, teacher_values, grad_input, grad_weight, teacher_input,
 *   teacher_weight: 16 bytes;
 *   bias, grad_bias, labels, teacher_ids, teacher_bias, loss, saved, grad_output, row_weights,
 *   row_loss, loss_parts: their element size.
 */
#ifndef KLJIT_H
#define KLJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KLJIT_BUILDING) && defined(__GNUC__)
#define KLJIT_API __attribute__((visibility("default")))
#else
#define KLJIT_API
#endif

/* ---- version ---------------------------------------------------------------------------- */

#define KLJIT_VERSION_MAJOR 0
#define KLJIT_VERSION_MINOR 1
#define KLJIT_VERSION_PATCH 0
#define KLJIT_VERSION_NUMBER \
  (KLJIT_VERSION_MAJOR * 10000 + KLJIT_VERSION_MINOR * 100 + KLJIT_VERSION_PATCH)
#define KLJIT_VERSION_STRING "0.1.0"

/* The version of the library actually loaded (compare with the macros you compiled against). */
KLJIT_API unsigned kljit_version_number(void);
KLJIT_API const char *kljit_version(void);

/* ---- status ----------------------------------------------------------------------------- */

/* Explicit values, never reused. */
typedef enum kljit_status {
  KLJIT_SUCCESS = 0,
  KLJIT_ERR_INVALID_ARGUMENT = 1,   /* null pointer, size <= 0, value out of range, bad enum */
  KLJIT_ERR_MISALIGNED = 2,         /* a device pointer lacks the alignment listed above */
  KLJIT_ERR_UNSUPPORTED = 3,        /* valid, but this combination is not supported */
  /* 4 was KLJIT_ERR_NOT_IMPLEMENTED, returned by nothing: retired before 1.0, never reused */
  KLJIT_ERR_NO_DEVICE = 5,          /* no CUDA driver or no GPU */
  KLJIT_ERR_CUDA = 6,               /* a CUDA driver call failed */
  KLJIT_ERR_CUBLAS = 7,             /* a cuBLASLt call failed */
  KLJIT_ERR_COMPILE = 8,            /* NVRTC rejected a generated kernel (log in last_error) */
  KLJIT_ERR_TEMPLATE = 9,           /* a kernel template failed to render (file:line) */
  KLJIT_ERR_CACHE = 10,             /* the kernel cache could not be used (I/O, permissions) */
  KLJIT_ERR_OUT_OF_MEMORY = 11,     /* host memory */
  KLJIT_ERR_WORKSPACE_TOO_SMALL = 12,
  KLJIT_ERR_BAD_INPUT_DATA = 13,    /* checked mode found NaN, an id out of range, ... */
  KLJIT_ERR_WISDOM = 14,            /* wisdom file unreadable, stale or foreign */
  KLJIT_ERR_NO_WISDOM = 15,         /* KLJIT_PLAN_WISDOM_ONLY and no stored choice */
  KLJIT_ERR_INTERNAL = 16,          /* a bug in kljit: please report it */
  KLJIT_ERR_NCCL = 17               /* an NCCL call failed (kljit_fused_nccl; the NCCL error) */
} kljit_status;

/* A static English name for a status ("KLJIT_ERR_MISALIGNED: ..."). Never NULL. */
KLJIT_API const char *kljit_status_string(kljit_status status);

/* Thread-local detail of the last failing call on this thread ("" after a success). */
KLJIT_API const char *kljit_last_error(void);

/* ---- problem description ---------------------------------------------------------------- */

typedef enum kljit_dtype {
  KLJIT_FP32 = 1,
  KLJIT_FP16 = 2,
  KLJIT_BF16 = 3,
  KLJIT_INT32 = 4,
  KLJIT_INT64 = 5
} kljit_dtype;

typedef enum kljit_teacher_form {
  KLJIT_TEACHER_DENSE_PROBS = 1,    /* teacher[N,V] = p                                    */
  KLJIT_TEACHER_DENSE_LOGPROBS = 2, /* teacher[N,V] = log p (torch log_target=True)        */
  KLJIT_TEACHER_DENSE_LOGITS = 3,   /* teacher[N,V] = zt, p = softmax(zt / T_teacher)      */
  KLJIT_TEACHER_SPARSE_TOPK = 4,    /* teacher_ids[N,K], teacher_values[N,K]: top-K of p    */
  /* An online teacher head: zt = teacher_input[N,Ht] teacher_weight[Vt,Ht]^T (+ teacher_bias
   * with KLJIT_FLAG_TEACHER_BIAS), then as DENSE_LOGITS (teacher softcap and temperature); no
   * gradient flows to the teacher. One more GEMM per chunk (fp32 logits in the workspace: they
   * never leave the chunk buffer); teacher_dtype is that of teacher_input and teacher_weight. */
  KLJIT_TEACHER_DENSE_HIDDEN = 5
} kljit_teacher_form;

/* The divergence between teacher and student (the math section above). */
typedef enum kljit_divergence {
  KLJIT_DIVERGENCE_FORWARD_KL = 1, /* KL(p || q), the default */
  KLJIT_DIVERGENCE_REVERSE_KL = 2, /* KL(q || p) (MiniLLM) */
  KLJIT_DIVERGENCE_JSD = 3,        /* generalized Jensen-Shannon with `beta` in [0, 1] */
  KLJIT_DIVERGENCE_TVD = 4,        /* total variation distance 1/2 sum |p - q| */
  KLJIT_DIVERGENCE_SKEW_FORWARD_KL = 5, /* KL(p || a p + (1 - a) q), a = skew_alpha (DistiLLM) */
  KLJIT_DIVERGENCE_SKEW_REVERSE_KL = 6  /* KL(q || a q + (1 - a) p), a = skew_alpha */
} kljit_divergence;

/* What teacher_values hold in the sparse form. */
typedef enum kljit_topk_values {
  KLJIT_TOPK_PROBS = 1,
  KLJIT_TOPK_LOGPROBS = 2
} kljit_topk_values;

/* How the sparse form treats the mass 1 - M outside the support S (M = sum_S p). The loss
 * of each is given for the forward KL; the reverse KL and the JSD over the same categories are
 * in the math section at the top (TAIL_NONE takes the forward KL only). */
typedef enum kljit_tail {
  /* l = sum_S p log p - sum_S p s + M lse(s). CompactifAI's loss; may be negative (floor
   * M log M). Gradient wrt s: M softmax(s) - p on S. */
  KLJIT_TAIL_NONE = 1,
  /* p <- p / M on S, then as above with M = 1. A row with M = 0 contributes nothing. */
  KLJIT_TAIL_RENORM = 2,
  /* Adds (1 - M) log((1 - M) / (1 - Q_S)), Q_S = sum_S q: the tail as one "ghost" token. */
  KLJIT_TAIL_BUCKET = 3
} kljit_tail;

typedef enum kljit_reduction {
  KLJIT_REDUCTION_SUM = 1,       /* sum of kept rows                         */
  KLJIT_REDUCTION_BATCHMEAN = 2, /* / rows kept (or / *kljit_args.divisor)   */
  KLJIT_REDUCTION_MEAN = 3,      /* / (rows kept * V), V = vocab_total if set;
                                    with kljit_args.divisor: / (*divisor * V) */
  KLJIT_REDUCTION_NONE = 4       /* per-row vector loss[N]; two-phase only   */
} kljit_reduction;

/* The temperatures (T, the teacher's T, a runtime T) the kernels can represent: T, 1/T, T^2 and
 * 1/T^2 are all normal fp32 numbers in this range. Plans and calls refuse others. */
#define KLJIT_TEMPERATURE_MIN 1e-18
#define KLJIT_TEMPERATURE_MAX 1e18

typedef enum kljit_temperature_mode {
  /* temperature is baked into the kernels (T = 1 compiles to no scaling at all). */
  KLJIT_TEMPERATURE_CONSTANT = 1,
  /* temperature comes with each call (kljit_args.temperature); one plan serves a schedule. */
  KLJIT_TEMPERATURE_RUNTIME = 2
} kljit_temperature_mode;

/* How dW is accumulated across token chunks. */
typedef enum kljit_grad_weight_accum {
  /* In fp32: directly in grad_weight when its dtype is FP32, else in a workspace buffer of
   * V*H floats converted at the end (needs that much more workspace). The default. */
  KLJIT_ACCUM_FP32 = 1,
  /* In grad_weight's own dtype, chunk after chunk: no extra workspace, rounding per chunk. */
  KLJIT_ACCUM_OUTPUT_DTYPE = 2,
  /* Decided per call: an FP32 grad_weight accumulates in place in fp32 (FP32's case, no
   * buffer); a 16-bit one in its own dtype (OUTPUT_DTYPE's case, with its chunk cap: a call's
   * chunk is at most 3/8 of its rows, an eighth with the online teacher) while the call
   * has at most KLJIT_ACCUM_AUTO_MAX_CHUNKS chunks, as few roundings as a loss that rounds once
   * per 1024 tokens, and beyond that in the fp32 V x H workspace buffer with the tuning's chunk
   * (FP32's case). kljit_plan_workspace_size(max_rows) covers the buffer where a call of
   * max_rows rows takes it; kljit_plan_chunk_rows says which chunk a call gets. What the
   * PyTorch binding uses by default (its grad_weight_accum="auto"). */
  KLJIT_ACCUM_AUTO = 3
} kljit_grad_weight_accum;

/* KLJIT_ACCUM_AUTO: the most chunks a call accumulates a 16-bit dW over in its own dtype. */
#define KLJIT_ACCUM_AUTO_MAX_CHUNKS 8

/* Problem flags (bits). */
enum {
  KLJIT_FLAG_BIAS = 1u << 0,            /* the head has a bias b[V]                             */
  KLJIT_FLAG_SCALE_T_SQUARED = 1u << 1, /* multiply loss and gradients by T^2 (Hinton)          */
  /* Logits GEMM writes the input dtype instead of fp32: faster, less workspace, but the
   * logits are rounded before the softmax (what Liger does; see README "Precision"). */
  KLJIT_FLAG_NATIVE_LOGITS = 1u << 2,
  KLJIT_FLAG_ALLOW_TF32 = 1u << 3,      /* fp32 inputs may use TF32 tensor cores                */
  /* Checked mode: NaN/Inf in the teacher (-inf allowed for log-probs and logits: p = 0),
   * negative probabilities, sparse ids outside [0, V) or duplicated within a row are reported
   * as KLJIT_ERR_BAD_INPUT_DATA naming the first bad row, before any output is written. Rows
   * with ignored labels are not checked. The online teacher (DENSE_HIDDEN): NaN/Inf in
   * teacher_input (kept rows), in the rows [0, V) of teacher_weight or in teacher_bias[0, V)
   * (what its logits are computed from), named as "teacher_input row i", "teacher_weight row
   * v" or "teacher_bias element v". Costs one pass over the teacher in kljit_fused and
   * kljit_forward (kljit_backward trusts forward's check) and one wait on the stream: the
   * only kljit call that synchronizes. Unchecked, a sparse id outside [0, V) is skipped (it
   * adds nothing to M, the loss or G), duplicate ids give unspecified values, NaN propagates;
   * nothing faults. */
  KLJIT_FLAG_CHECK_INPUTS = 1u << 4,
  KLJIT_FLAG_TEACHER_BIAS = 1u << 5,    /* DENSE_HIDDEN: the teacher head has a bias bt[Vt]   */
  /* kljit_args.row_weights[N] (fp32) multiply each row's loss and gradient (the math section;
   * every teacher form). Checked mode also reports a kept row's negative, NaN or infinite weight. */
  KLJIT_FLAG_ROW_WEIGHTS = 1u << 6,
  /* The logits GEMM adds its tensor-core accumulator into a second fp32 one every 256 of H (the
   * generated sm_90 logits GEMM, 128 x 128 tiles, cooperative schedule, clusters of 1): the
   * tensor cores' truncating accumulation no longer reaches the loss (README "Precision": on an
   * H100 the reduced loss at most 1.1e-6 relative at logit std 2-6, T 1 and 0.5, where it
   * reached 1.2e-5; dX and dW unchanged), at 2-4.5% of the call's time on an H100. Where the
   * logits GEMM is cuBLASLt's (sm_80, fp32 inputs, KLJIT_GEMM=logits:cublas) the flag changes
   * nothing, and kljit_plan_describe says so; tuning a problem with the flag offers no cuBLASLt
   * logits algorithm where the generated one serves. */
  KLJIT_FLAG_PRECISE_ACCUMULATION = 1u << 7
};

/* The size limits kljit_plan_check enforces (tools and bindings quote them in messages). */
#define KLJIT_MAX_HIDDEN 1048576 /* hidden in [1, 2^20] */
#define KLJIT_MAX_VOCAB 16777216 /* vocab and vocab_total in [2, 2^24] */
#define KLJIT_MAX_TOPK 1024      /* topk in [1, min(V, 1024)] */

/* The largest struct_size any kljit struct will ever have (kljit_problem, kljit_args,
 * kljit_context_options). A struct_size from a newer header than the library's is accepted up to
 * it, its unknown bytes read to check they are zero; a larger one is refused
 * (KLJIT_ERR_INVALID_ARGUMENT) without reading past the fields the library knows: it is not the
 * size of a kljit struct but garbage or another struct. */
#define KLJIT_STRUCT_SIZE_MAX 1024

typedef struct kljit_problem {
  size_t struct_size;               /* sizeof(kljit_problem), set by KLJIT_PROBLEM_INIT; any
                                     * size from KLJIT_PROBLEM_MIN_SIZE to KLJIT_STRUCT_SIZE_MAX
                                     * is accepted */
  int64_t hidden;                   /* H, 1 <= H <= 2^20 */
  int64_t vocab;                    /* V, 2 <= V <= 2^24 */
  kljit_dtype input_dtype;          /* X; FP32, FP16 or BF16 */
  kljit_dtype weight_dtype;         /* W and b; must equal input_dtype */
  kljit_dtype teacher_dtype;        /* dense teacher, or sparse values; FP32, FP16, BF16 */
  kljit_teacher_form teacher;
  int32_t topk;                     /* K for the sparse form, 1 <= K <= min(V, 1024) */
  kljit_dtype topk_id_dtype;        /* INT32 or INT64 */
  kljit_topk_values topk_values;
  kljit_tail tail;
  kljit_temperature_mode temperature_mode;
  double temperature;               /* KLJIT_TEMPERATURE_MIN <= T <= KLJIT_TEMPERATURE_MAX */
  double teacher_temperature;       /* DENSE_LOGITS, DENSE_HIDDEN; 0 means "same as
                                     * temperature", else in [KLJIT_TEMPERATURE_MIN,
                                     * KLJIT_TEMPERATURE_MAX] */
  kljit_reduction reduction;
  kljit_dtype label_dtype;          /* INT32 or INT64 */
  int64_t ignore_index;             /* rows with this label are excluded; default -100 */
  double eps;                       /* 1e-30 <= eps < 1e-3: floor inside log p; default 1e-20 */
  kljit_dtype grad_weight_dtype;    /* FP32 or weight_dtype */
  kljit_grad_weight_accum grad_weight_accum;
  uint32_t flags;                   /* KLJIT_FLAG_* */
  /* Vocabulary-parallel tensor parallelism (experimental: kljit_experimental.h). 0: unsharded (the
   * default). Else the global V (2 <= vocab_total <= 2^24), and `vocab` is this shard's size:
   * the shard holds global vocabulary ids [vocab_offset, vocab_offset + vocab) of W, b and the
   * teacher. REDUCTION_MEAN then divides by kept * vocab_total. */
  int64_t vocab_total;
  int64_t vocab_offset;             /* first global id of this shard, >= 0; 0 when unsharded */
  int32_t shards;                   /* tp size, 1..1024; 1 when unsharded (the default) */
  /* The loss families (the math section). Each default keeps the plain forward KL. */
  kljit_divergence divergence;      /* KLJIT_DIVERGENCE_FORWARD_KL by default */
  double beta;                      /* JSD only: in [0, 1]; 0 otherwise */
  double hard_weight;               /* in [0, 1e6]: weight of CE on labels; default 0 */
  double soft_weight;               /* in [0, 1e6]: weight of the divergence; default 1 */
  double softcap;                   /* student logit cap c: 0 (off, default) or in [1e-6, 1e6] */
  double teacher_softcap;           /* the teacher's logits (DENSE_LOGITS, DENSE_HIDDEN): same */
  int64_t teacher_vocab;            /* dense teachers: Vt columns, V <= Vt <= 2^24; 0: Vt = V */
  int64_t teacher_ld;               /* dense teachers: row stride (elements) >= Vt; 0: Vt */
  int64_t teacher_hidden;           /* DENSE_HIDDEN: Ht, 1..2^20; 0 otherwise */
  double skew_alpha;                /* SKEW_FORWARD_KL, SKEW_REVERSE_KL: a in [0, 1); 0
                                     * otherwise */
  /* The hard-label CE's extras (the math section), dense teachers; each needs hard_weight > 0 */
  double label_smoothing;           /* ls in [0, 1]; default 0 */
  double z_loss;                    /* zl in [0, 1e6]: zl lse(z')^2 added to CE; default 0 */
} kljit_problem;

/* The size of the first released kljit_problem, the stable part up to `flags`: every entry
 * point accepts a struct_size from this up (the fields a shorter struct lacks take their
 * KLJIT_PROBLEM_INIT values; a longer one, from a newer kljit.h, must leave what this library
 * does not know at zero). The tensor-parallel fields after `flags` are experimental
 * (kljit_experimental.h); the loss-family fields from `divergence` on were added after them. */
#define KLJIT_PROBLEM_MIN_SIZE offsetof(kljit_problem, vocab_total)

#define KLJIT_PROBLEM_INIT                                                                    \
  {                                                                                           \
    sizeof(kljit_problem), 0, 0, KLJIT_BF16, KLJIT_BF16, KLJIT_BF16,                          \
        KLJIT_TEACHER_DENSE_PROBS, 0, KLJIT_INT64, KLJIT_TOPK_PROBS, KLJIT_TAIL_NONE,         \
        KLJIT_TEMPERATURE_CONSTANT, 1.0, 0.0, KLJIT_REDUCTION_BATCHMEAN, KLJIT_INT64, -100,   \
        1e-20, KLJIT_FP32, KLJIT_ACCUM_FP32, 0u, 0, 0, 1, KLJIT_DIVERGENCE_FORWARD_KL, 0.0,  \
        0.0, 1.0, 0.0, 0.0, 0, 0, 0, 0.0, 0.0, 0.0                                            \
  }

/* ---- context ---------------------------------------------------------------------------- */

typedef struct kljit_context kljit_context;

/* Row kernels a context's plans may use. */
typedef enum kljit_row_kernel {
  KLJIT_ROW_KERNEL_TWO_PASS = 1, /* two passes over the chunk, any arch (the default) */
  /* sm_90 thread-block clusters, one pass, where a row fits the cluster's registers (dense
   * teachers, unsharded); measured slower on the H200 (bench/RESULTS.md): opt-in */
  KLJIT_ROW_KERNEL_CLUSTER = 2
} kljit_row_kernel;

/* Where a context's plans take the GEMMs of their chunk loop from (logits, dX, dW; the online
 * teacher's GEMM is always cuBLASLt's). */
typedef enum kljit_gemm {
  /* the plan's tuning (wisdom: cuBLASLt algorithms or generated variants, per GEMM), else the
   * heuristic's backend of each GEMM for the GPU's architecture (sm_90: the generated logits
   * GEMM, cuBLASLt for dX and dW; cuBLASLt elsewhere) */
  KLJIT_GEMM_DEFAULT = 0,
  /* the generated sm_90a family (templates/gemm_sm90.cu.lua) for all three on sm_90 with 16-bit
   * inputs and H a multiple of 8 (the tuning's variants where it has them; cuBLASLt elsewhere) */
  KLJIT_GEMM_JIT = 1,
  KLJIT_GEMM_CUBLAS = 2   /* cuBLASLt for every GEMM, whatever the tuning says */
} kljit_gemm;

/* Context flags (bits). (Bit 1 is a benchmark hook of kljit_experimental.h.) */
enum {
  KLJIT_CONTEXT_CACHE_DISABLE = 1u << 0    /* no kernel cache: compile in every process */
};

/* What a context's plans and executes are steered by. kljit_context_options_default fills it
 * from the environment, which is where each member's default comes from (the README's table):
 *
 *   member          environment             default
 *   cache_dir       KLJIT_CACHE_DIR         $XDG_CACHE_HOME/kljit, else ~/.cache/kljit
 *   cache_path      KLJIT_CACHE_PATH        none (read-only caches, ':'-separated, searched first)
 *   flags           KLJIT_CACHE_DISABLE=1   0
 *   row_kernel      KLJIT_ROW_KERNEL        KLJIT_ROW_KERNEL_TWO_PASS ("cluster": CLUSTER)
 *   chunk_rows      KLJIT_CHUNK_ROWS        0: the planner's (or wisdom's) choice
 *   tune_rows       KLJIT_TUNE_ROWS         8192 tokens for KLJIT_PLAN_MEASURE / EXHAUSTIVE
 *   tune_budget_s   KLJIT_TUNE_BUDGET_S     30 seconds of tuning per plan
 *   gemm            KLJIT_GEMM              KLJIT_GEMM_DEFAULT ("jit": JIT, "cublas": CUBLAS)
 *   gemm_choice     KLJIT_GEMM (a list)     NULL (KLJIT_GEMM=dx:jit,dw:cublas.2: see below)
 *   dx_split        KLJIT_DX_SPLIT          0: the planner's choice (16-bit inputs with V >=
 *                                           65536: ceil(V / 32768) slices; else 1)
 * A struct from before dx_split (struct_size up to gemm) is accepted; dx_split is then 0, and
 * gemm_choice NULL in one from before gemm_choice.
 * KLJIT_CONTEXT_OPTIONS_INIT is the default column without the environment: what the entry
 * points without a context (kljit_plan_check, kljit_precompile, kljit_precompile_wisdom) plan
 * with, and what a caller passes for a context that no environment variable steers.
 * A variable set to a value it does not take ("clustr", "4k", a flag other than 0 or 1) is never
 * read as the default: kljit_context_create(..., NULL) refuses it (KLJIT_ERR_INVALID_ARGUMENT,
 * naming the variable and the values it takes) before anything else (kljit_precompile, which
 * reads only the cache's and the log's variables, refuses theirs), and
 * kljit_context_options_default gives the member a value kljit_context_create refuses with the
 * same sentence. `kljit info` and kljit_env_check (kljit_experimental.h) list every KLJIT_*
 * variable with its verdict.
 *
 * The context copies what it is given: the strings need not outlive kljit_context_create. */
typedef struct kljit_context_options {
  size_t struct_size;            /* sizeof(kljit_context_options) */
  uint32_t flags;                /* KLJIT_CONTEXT_* */
  kljit_row_kernel row_kernel;
  int64_t chunk_rows;            /* 0, or the chunk size every plan uses */
  int64_t tune_rows;             /* >= 1 */
  double tune_budget_s;          /* > 0 */
  const char *cache_dir;         /* NULL: the default directory */
  const char *cache_path;        /* NULL: none */
  kljit_gemm gemm;               /* the logits GEMM's source */
  /* dX as this many cuBLASLt GEMMs over slices of V, summed in an fp32 workspace buffer of
   * chunk_rows x H floats, then converted: 1 is one GEMM into dX, 2..64 slices, 0 the
   * planner's choice. One fp32-accumulated GEMM over a long V rounds more than a few
   * slices' fp32 sum (bench/RESULTS.md: issue 19's dX error at V = 128256). A chunk whose
   * single dX GEMM has 128 x 256 tiles for fewer than half the SMs takes that GEMM under the
   * planner's choice (cuBLASLt splits its K itself; slices would idle the SMs it fills); a
   * number set here is obeyed for every chunk. */
  int32_t dx_split;
  /* Per-GEMM backends, overriding `gemm` for the GEMMs they name: comma-separated items
   *   <logits|dx|dw|all>:<backend>, backend one of
   *     default            the tuning's choice, else the heuristic's
   *     cublas             cuBLASLt (the tuning's algorithm, else its heuristic's first)
   *     cublas.<k>         the k-th algorithm (0-15) of cuBLASLt's heuristic list for the chunk
   *     jit                the generated kernel (the tuning's variant, else the default one)
   *     jit.<BN>.<CONSUMERS>.<STAGES>.<m|n|g>.<CLUSTER>[.<flags>]   that generated variant
   *                        (flags in this order: p pingpong schedule, s staged epilogue, w one
   *                        stage arrival per warp, c streaming C, a|b an L2 policy keeping A or
   *                        B, r the accumulator promoted into a second fp32 one every 256
   *                        of K, e E16: the logits GEMM only, as ".e16" below; docs/wisdom.md)
   * e.g. "logits:jit,dx:cublas,dw:jit.128.2.6.g.1.ps". The logits item's jit backends may end
   * in ".stats" ("logits:jit.stats"): the generated logits GEMM also writes the dense rows'
   * pass-1 statistics of each row and column tile from its accumulators, and the pass that
   * re-reads the chunk's fp32 logits for them is not launched (dense probabilities or
   * log-probabilities, the forward KL without softcap, CE mixing or bias, a constant
   * temperature, fp32 chunk logits, the two-pass rows, unsharded; elsewhere the rows' pass runs
   * and the plan's description says why; the workspace then holds one record per chunk row and
   * column tile; the split API refuses such a plan). ".e16" ("logits:jit.e16", experimental,
   * not yet run on a GPU) takes ".stats" (and a bias besides) and, where it is taken, writes
   * the tile as its fp16 tile-relative scores x = s - m_tile (backward: s - lse of the saved
   * statistics) instead of the fp32 logits, which the rows read and G overwrites: 2 bytes an
   * element of the chunk, so the chunk holds twice the rows. ".stats" or ".e16" on another GEMM
   * or backend is refused. KLJIT_GEMM set to such a list fills it
   * (gemm then DEFAULT). A generated backend where it does not apply (not sm_90, 32-bit inputs,
   * H not a multiple of 8) runs cuBLASLt, and the plan's description says so. NULL: none. */
  const char *gemm_choice;
} kljit_context_options;

#define KLJIT_CONTEXT_OPTIONS_INIT                                                             \
  { sizeof(kljit_context_options), 0u, KLJIT_ROW_KERNEL_TWO_PASS, 0, 8192, 30.0, NULL, NULL,   \
    KLJIT_GEMM_DEFAULT, 0, NULL }

/* The options the environment sets now: KLJIT_CONTEXT_OPTIONS_INIT, then each variable above
 * that is set. */
KLJIT_API kljit_status kljit_context_options_default(kljit_context_options *options);

/* Binds the primary context of CUDA device `device`. Returns KLJIT_ERR_NO_DEVICE where there is
 * no driver or no such GPU. `options` NULL: kljit_context_options_default(), read once, here;
 * the context never reads the environment again. Options are checked first, those the
 * environment gave too (KLJIT_ERR_INVALID_ARGUMENT naming the variable, e.g. KLJIT_GEMM=magic). */
KLJIT_API kljit_status kljit_context_create(kljit_context **ctx, int device,
                                            const kljit_context_options *options);
KLJIT_API void kljit_context_destroy(kljit_context *ctx);

/* ---- plans ------------------------------------------------------------------------------ */

typedef struct kljit_plan kljit_plan;

/* Planning rigor (FFTW style). */
typedef enum kljit_plan_rigor {
  KLJIT_PLAN_ESTIMATE = 1,    /* heuristics or stored wisdom; touches no user buffer */
  KLJIT_PLAN_MEASURE = 2,     /* time candidates on the GPU                          */
  KLJIT_PLAN_EXHAUSTIVE = 3,
  KLJIT_PLAN_WISDOM_ONLY = 4  /* stored wisdom or KLJIT_ERR_NO_WISDOM, never tunes   */
} kljit_plan_rigor;

/* Is this problem valid and supported by this build? Needs no GPU and compiles nothing: the
 * fields are checked, and the kernel templates' own checks are asked about the modules of its
 * heuristic plans on sm_80 and sm_90 with a context of KLJIT_CONTEXT_OPTIONS_INIT (whatever the
 * environment says). KLJIT_SUCCESS, or the status and a sentence (last_error) saying why not. */
KLJIT_API kljit_status kljit_plan_check(const kljit_problem *problem);

/* Validates, chooses the geometry, renders, compiles (or loads from the cache) and loads the
 * kernels. The plan keeps no pointer to `problem`. */
KLJIT_API kljit_status kljit_plan_create(kljit_context *ctx, const kljit_problem *problem,
                                         kljit_plan_rigor rigor, kljit_plan **plan);
KLJIT_API void kljit_plan_destroy(kljit_plan *plan);

/* Workspace bytes a call with up to `max_rows` rows needs (mode: the KLJIT_MODE_* below). A
 * call walks its rows in chunks of the plan's chunk_rows (kljit_plan_describe). Where dW is
 * 16-bit and accumulated in place (grad_weight_dtype = weight_dtype with
 * KLJIT_ACCUM_OUTPUT_DTYPE), a chunk is also at most 3/8 of the call's rows (an eighth
 * with the online teacher, whose chunk holds its logits too) rounded up to 256, so a short
 * call's chunk logits stay small; an fp32 dW or dW accumulator keeps the plan's chunk, and
 * KLJIT_CHUNK_ROWS (options.chunk_rows) sets it exactly. */
typedef enum kljit_mode {
  KLJIT_MODE_FUSED = 1,     /* kljit_fused                   */
  KLJIT_MODE_FORWARD = 2,   /* kljit_forward (two-phase)     */
  KLJIT_MODE_BACKWARD = 3   /* kljit_backward (two-phase)    */
} kljit_mode;
KLJIT_API kljit_status kljit_plan_workspace_size(const kljit_plan *plan, kljit_mode mode,
                                                 int64_t max_rows, size_t *bytes);

/* The chunk a call of `rows` rows walks its tokens in (the tuning's chunk_rows, capped as
 * kljit_plan_workspace_size says) into *chunk_rows. */
KLJIT_API kljit_status kljit_plan_chunk_rows(const kljit_plan *plan, int64_t rows,
                                             int64_t *chunk_rows);

/* Bytes of the per-row statistics kljit_forward saves for kljit_backward (O(rows)). */
KLJIT_API kljit_status kljit_plan_saved_size(const kljit_plan *plan, int64_t rows,
                                             size_t *bytes);

/* A human-readable, multi-line description: geometry, kernels, and for each kernel whether it
 * was compiled or came from the cache and how long that took. The string lives as long as the
 * plan. */
KLJIT_API const char *kljit_plan_describe(const kljit_plan *plan);

/* ---- execution -------------------------------------------------------------------------- */

/* Execution flags (bits). */
enum {
  KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT = 1u << 0, /* dW += ... instead of dW = ... (and db) */
  KLJIT_EXEC_NO_GRAD_INPUT = 1u << 1,          /* dX not wanted (grad_input may be NULL)  */
  KLJIT_EXEC_NO_GRAD_WEIGHT = 1u << 2          /* dW, db not wanted                       */
};

typedef struct kljit_args {
  size_t struct_size;          /* sizeof(kljit_args), set by KLJIT_ARGS_INIT (MIN_SIZE up) */
  int64_t rows;                /* N >= 1 */
  const void *input;           /* X  [N,H]  input_dtype                                   */
  const void *weight;          /* W  [V,H]  weight_dtype                                  */
  const void *bias;            /* b  [V]    weight_dtype; with KLJIT_FLAG_BIAS, else NULL */
  const void *labels;          /* [N] label_dtype, or NULL: every row is kept             */
  const void *teacher;         /* dense forms: [N,V] teacher_dtype                        */
  const void *teacher_ids;     /* sparse form: [N,K] topk_id_dtype                        */
  const void *teacher_values;  /* sparse form: [N,K] teacher_dtype                        */
  double temperature;          /* KLJIT_TEMPERATURE_RUNTIME only, in [KLJIT_TEMPERATURE_MIN,
                                  KLJIT_TEMPERATURE_MAX]; backward reuses forward's       */
  float *loss;                 /* out: fp32 scalar, or [N] for KLJIT_REDUCTION_NONE       */
  void *grad_input;            /* out: dX [N,H] input_dtype                               */
  void *grad_weight;           /* out: dW [V,H] grad_weight_dtype                         */
  void *grad_bias;             /* out: db [V] grad_weight_dtype (with KLJIT_FLAG_BIAS)    */
  float *saved;                /* two-phase: kljit_plan_saved_size bytes, out of forward  */
  const float *grad_output;    /* backward: dL_outer/dloss, fp32 scalar or [N] for NONE   */
  void *workspace;             /* kljit_plan_workspace_size bytes                         */
  size_t workspace_size;
  uint32_t flags;              /* KLJIT_EXEC_*                                            */
  /* kljit_fused, kljit_backward (and the split API): dX, dW and db come out multiplied by it
   * (the loss is not), applied in the GEMMs' fp32 alpha, never to the stored G. Fused: a loss
   * scaler's scale known at forward time, so fp16 gradients are computed already scaled
   * instead of rounded and then scaled. Backward: with grad_output divided by it, an fp16 G
   * stays in range for any finite upstream gradient (fp16 G is lifted for |grad_output| <= 1).
   * A normal fp32 value, in [FLT_MIN, FLT_MAX] (it becomes an fp32 alpha); 0 means 1. Appended
   * after `flags`: a caller whose struct_size ends at
   * `flags` (older headers) gets 1. */
  double grad_scale;
  /* The online teacher (KLJIT_TEACHER_DENSE_HIDDEN; `teacher` is then NULL): its hidden states
   * and head, both teacher_dtype; no gradient flows to them. Absent from a shorter struct. */
  const void *teacher_input;   /* Xt [N,Ht]                                               */
  const void *teacher_weight;  /* Wt [Vt,Ht] (rows [V, Vt) are never read)                */
  const void *teacher_bias;    /* bt [Vt] teacher_dtype, with KLJIT_FLAG_TEACHER_BIAS, else
                                  NULL ([V, Vt) never read); absent from a shorter struct */
  /* Row weights and the optional outputs (the math section); absent from a shorter struct. */
  const float *row_weights;    /* [N] fp32 with KLJIT_FLAG_ROW_WEIGHTS, else NULL; backward
                                  takes the same weights as its forward                   */
  float *row_loss;             /* out, or NULL: [N] fp32 per-row loss l_i (fused, forward) */
  float *loss_parts;           /* out, or NULL: [2] fp32 {soft, hard} parts of the loss    */
  /* A global divisor for REDUCTION_BATCHMEAN and MEAN, in device memory (fp64, read by the
   * kernels: no host synchronization), or NULL for this call's kept rows. Data, context or
   * sequence parallel ranks and gradient accumulation steps that each see part of a batch pass
   * the batch's kept tokens (HF Trainer's num_items_in_batch, torchtitan's global valid
   * tokens): every part then carries its share of one mean, and summing the parts' losses and
   * gradients gives the whole batch's. BATCHMEAN divides the kept rows' sum by *divisor, MEAN
   * by *divisor x vocab_total; a *divisor <= 0 or NaN gives loss 0 and zero gradients (as when
   * every row is ignored). kljit_fused, kljit_forward and the split API read it (kljit_backward
   * keeps forward's scale, as it keeps its temperature); refused (KLJIT_ERR_INVALID_ARGUMENT)
   * with REDUCTION_SUM or NONE. fp16 G is stored times a power of two chosen for this call's
   * rows: a divisor far above them (2^8 x) moves small entries of G toward fp16's subnormals.
   * 8-byte aligned. Absent from a shorter struct (NULL). */
  const double *divisor;
} kljit_args;

/* The size of the first released kljit_args (the fields up to `flags`): entry points accept a
 * struct_size from this up, a longer struct leaving the fields this library does not know at
 * zero. */
#define KLJIT_ARGS_MIN_SIZE (offsetof(kljit_args, flags) + sizeof(uint32_t))

#define KLJIT_ARGS_INIT \
  { sizeof(kljit_args), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1.0, NULL, NULL, NULL, \
    NULL, NULL, NULL, NULL, 0, 0u, 1.0, NULL, NULL, NULL, NULL, NULL, NULL, NULL }

/* Fused mode (gradient in forward): loss, dX, dW (, db) in one call. Not for REDUCTION_NONE. */
KLJIT_API kljit_status kljit_fused(const kljit_plan *plan, void *stream, const kljit_args *args);

/* Two-phase mode: forward writes loss and `saved`; backward reads `saved` and grad_output and
 * writes dX, dW (, db), recomputing each chunk's logits. */
KLJIT_API kljit_status kljit_forward(const kljit_plan *plan, void *stream,
                                     const kljit_args *args);
KLJIT_API kljit_status kljit_backward(const kljit_plan *plan, void *stream,
                                      const kljit_args *args);

/* The upstream gradient of a fused call, applied afterwards without a host synchronization:
 * multiplies in place, on `stream`, the gradients kljit_fused wrote — args->grad_input
 * (rows x hidden, input dtype), args->grad_weight (vocab x hidden) and, with KLJIT_FLAG_BIAS,
 * args->grad_bias (vocab), both in grad_weight_dtype — by the fp32 scalar at
 * args->grad_output (device memory). For autograd, whose upstream gradient arrives after the
 * fused call has run: one read and write of each gradient, each product rounded once.
 * KLJIT_EXEC_NO_GRAD_INPUT / NO_GRAD_WEIGHT skip those; KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT is
 * refused (dW would hold earlier gradients, which must not be scaled again), and so is
 * REDUCTION_NONE (no fused mode). The other fields of args are not read. A scalar of exactly
 * 1 (autograd's usual upstream gradient) leaves the gradients as they are at the cost of one
 * tiny launch: the kernels read it and stop, decided on the device. */
KLJIT_API kljit_status kljit_scale_grads(const kljit_plan *plan, void *stream,
                                         const kljit_args *args);

/* kljit_scale_grads without a plan: multiplies in place, on `stream`, `count` elements of
 * `dtype` (FP32, FP16 or BF16) at `data` (device memory of ctx's GPU) by the fp32 scalar at
 * `factor` (device memory), each product rounded once; a factor of exactly 1 leaves them as
 * they are at the cost of one tiny launch (decided on the device, so the caller never
 * synchronizes). For a framework whose backward holds a fused call's gradients but not the
 * plan that wrote them (torch.compile's graphs). The kernel is built at first use per dtype
 * and context (from the kernel cache like a plan's). count 0 launches nothing. */
KLJIT_API kljit_status kljit_scale(kljit_context *ctx, void *stream, void *data,
                                   kljit_dtype dtype, int64_t count, const float *factor);

/* ---- ahead-of-time compilation (needs no GPU) ------------------------------------------ */

/* kljit_precompile flags (bits). */
enum {
  /* Render every module and look it up in cache_dir, but compile and write nothing: the
   * reports say which modules a real run would compile. */
  KLJIT_PRECOMPILE_DRY_RUN = 1u << 0,
  /* A cache other users read (a cluster cache): the directory is created 0755 (or an existing
   * one of the caller's widened to r-x for all), entries are written 0644, and entries the
   * caller stored earlier without it are made world-readable. Readers trust the entries of
   * root, of themselves and of the owners their KLJIT_CACHE_TRUSTED_OWNERS names. */
  KLJIT_PRECOMPILE_SHARED = 1u << 1
};

/* One kernel module of a precompile, reported as soon as it is done. */
typedef struct kljit_module_report {
  size_t struct_size;  /* sizeof(kljit_module_report) */
  int arch;            /* 90 for sm_90 */
  int index, count;    /* module `index` (0-based) of the `count` the problem needs on arch */
  int compiled;        /* 1: compiled now (dry run: would be); 0: already in cache_dir */
  double compile_ms;   /* NVRTC time, 0 when not compiled */
  char name[64];       /* the module's name, e.g. "kl_dense_rows_..." (from its template) */
  char file[80];       /* its cache entry's file name in cache_dir: <sha256 hex>.kjc */
} kljit_module_report;
typedef void (*kljit_module_callback)(const kljit_module_report *module, void *user);

/* Renders and NVRTC-compiles, for sm_<arch> (80, 90, ...), every kernel module that
 * kljit_plan_create(KLJIT_PLAN_ESTIMATE) uses for `problem` on such a GPU without wisdom, with a
 * context of KLJIT_CONTEXT_OPTIONS_INIT (the environment's KLJIT_ROW_KERNEL and KLJIT_GEMM steer
 * contexts, not this: a wisdom file's choices are precompiled by kljit_precompile_wisdom), and
 * stores them in a kernel cache: `cache_dir` when not NULL (created 0700 if missing), else the
 * default writable cache. Plans elsewhere use them when `cache_dir` is in their KLJIT_CACHE_PATH.
 * `flags`: KLJIT_PRECOMPILE_*; `done` (may be NULL) gets a report per module as soon as it is done
 * (its `compiled` says whether it was compiled now or already cached). Different problems or archs
 * may be precompiled from several threads at once. Storing is the point: a module that could not be
 * stored (full or read-only filesystem, an entry path that is not a file) makes it return
 * KLJIT_ERR_CACHE, after trying the others, with each such module's path and reason in
 * kljit_last_error(). An existing cache_dir that readers would refuse (owned by someone else,
 * writable by group or others) or that cannot be read is KLJIT_ERR_CACHE before anything is
 * rendered or compiled. */
KLJIT_API kljit_status kljit_precompile(const kljit_problem *problem, int arch,
                                        const char *cache_dir, uint32_t flags,
                                        kljit_module_callback done, void *user);


/* ---- wisdom ----------------------------------------------------------------------------- */

/* Wisdom is what tuning learned: for a GPU model (name, arch, SM count), this kljit version, a
 * problem (V, H, dtypes, teacher form, temperature mode, the flags that change kernels) and a
 * token bucket (the power of two >= the token count), the chosen configuration, the rigor that
 * chose it and its time. Text format, file locations and merge rules: docs/wisdom.md.
 *
 * The process keeps one store (thread-safe). On the first use of wisdom in a process it reads
 * the system file (KLJIT_SYSTEM_WISDOM, default /etc/kljit/wisdom), then the user file
 * (KLJIT_WISDOM, default $XDG_STATE_HOME/kljit/wisdom, i.e. ~/.local/state/kljit/wisdom, or
 * $KLJIT_CACHE_DIR/wisdom when that is set; kljit 0.1.0's <kernel cache>/wisdom is still read
 * after it); a missing, stale or foreign default file is skipped (logged under KLJIT_LOG=1).
 * Same entry twice: the higher rigor wins, then the lower time. kljit_plan_create uses it by rigor:
 *   ESTIMATE      the stored entry of the nearest token bucket, else heuristics;
 *   WISDOM_ONLY   the same entry, else KLJIT_ERR_NO_WISDOM (the message names the key);
 *   MEASURE       an entry of the tuning bucket with rigor >= MEASURE, else tunes on the GPU;
 *   EXHAUSTIVE    an EXHAUSTIVE entry of the tuning bucket, else tunes a larger candidate set.
 * The tuning bucket is that of KLJIT_TUNE_ROWS tokens (default 8192), the token count a plan
 * tunes at. Tuning (kljit_tune, or a plan that tunes) uses its own buffers, never the caller's,
 * spends at most KLJIT_TUNE_BUDGET_S seconds (default 30) per problem, and merges the winner
 * into the store and into the user file (KLJIT_WISDOM=none: the store only). */

/* Merges a wisdom file / text into the store. A file that is not kljit wisdom, of another
 * format or kljit version (stale), or with any bad line is rejected whole: KLJIT_ERR_WISDOM
 * with "<path>:<line>: why", and the store is unchanged. */
KLJIT_API kljit_status kljit_wisdom_import_file(const char *path);
KLJIT_API kljit_status kljit_wisdom_import_string(const char *text);

/* Writes the whole store (atomically replacing `path`) / returns it as a NUL-terminated string
 * that the caller releases with kljit_free. Entries are sorted: the same store always gives the
 * same bytes. */
KLJIT_API kljit_status kljit_wisdom_export_file(const char *path);
KLJIT_API kljit_status kljit_wisdom_export_string(char **text);

/* Merges the whole store into the wisdom file `path`, under the file's lock: its entries are
 * read, the store's merged in by the merge rules, and the result replaces it atomically, so
 * entries other processes merged meanwhile are kept (kljit_wisdom_export_file replaces the file
 * with the store alone). A missing file is created; one that is not this version's wisdom is
 * refused (KLJIT_ERR_WISDOM) and left as it is. What `kljit tune --wisdom F` does at the end, so
 * that tuners sharing F lose none of each other's entries.
 * Both writers refuse a path that holds anything but a regular file (a FIFO, a device, a
 * symbolic link, a directory: KLJIT_ERR_WISDOM, nothing written). The lock is an fcntl lock on
 * "<path>.lock", a file created beside it and left there on purpose: removing it would race with
 * a writer that has just opened it. */
KLJIT_API kljit_status kljit_wisdom_merge_file(const char *path);

/* Releases memory kljit returned (kljit_wisdom_export_string). NULL is a no-op. */
KLJIT_API void kljit_free(void *ptr);

/* Empties the store; the default files are not read again in this process. */
KLJIT_API void kljit_wisdom_forget(void);

typedef enum kljit_wisdom_file {
  KLJIT_WISDOM_SYSTEM = 1, /* read first, never written */
  KLJIT_WISDOM_USER = 2    /* read second; tuning results are merged into it */
} kljit_wisdom_file;

/* The path this process uses for a default wisdom file, into buf (cap bytes, NUL-terminated);
 * "" when there is none (KLJIT_WISDOM=none, no HOME). KLJIT_ERR_INVALID_ARGUMENT if it does not
 * fit. */
KLJIT_API kljit_status kljit_wisdom_path(kljit_wisdom_file which, char *buf, size_t cap);

/* Progress of kljit_tune, passed to its callback. */
typedef enum kljit_tune_event {
  KLJIT_TUNE_CANDIDATE = 1,   /* about to time `candidate` */
  KLJIT_TUNE_TIMED = 2,       /* `candidate` took candidate_ms (< 0: unusable, skipped) */
  KLJIT_TUNE_FINISHED = 3     /* `best` won (kljit_tune then stores it in wisdom) */
} kljit_tune_event;

typedef struct kljit_tune_progress {
  size_t struct_size;       /* sizeof(kljit_tune_progress) */
  kljit_tune_event event;
  int index;                /* 1-based number of the candidate */
  int count;                /* candidates planned (later stages depend on earlier winners) */
  const char *candidate;    /* "threads=256 split=8 chunk_rows=4096" */
  double candidate_ms;      /* median of one call, KLJIT_TUNE_TIMED only */
  const char *best;         /* the best so far ("" before the first) */
  double best_ms;
  double heuristic_ms;      /* the KLJIT_PLAN_ESTIMATE choice (always timed first); 0 before */
  int64_t rows;             /* tokens per timed call (fewer than asked if memory is short) */
  double elapsed_s;
  double budget_s;
} kljit_tune_progress;

typedef void (*kljit_tune_callback)(const kljit_tune_progress *progress, void *user);

/* Tunes `problem` on ctx's GPU for `rows` tokens (0: KLJIT_TUNE_ROWS), with rigor
 * KLJIT_PLAN_MEASURE or KLJIT_PLAN_EXHAUSTIVE: times the candidate configurations (the
 * heuristic choice first; warm-up, median of repeats, L2 flushed between repeats, random
 * inputs in kljit's own device buffers) within the time budget, and merges the winner into
 * the store and the user wisdom file. Always tunes, whatever wisdom holds. `callback` (may be
 * NULL) is called on the calling thread. */
KLJIT_API kljit_status kljit_tune(kljit_context *ctx, const kljit_problem *problem, int64_t rows,
                                  kljit_plan_rigor rigor, kljit_tune_callback callback,
                                  void *user);

/* kljit_precompile for the plans of a wisdom file: every kernel module they need on
 * sm_<arch>, compiled with no GPU. For each entry, the problem it was tuned for (its key and
 * extra fields, docs/wisdom.md) with the heuristic tuning (what a GPU without matching wisdom
 * plans) and, when the entry was tuned on an sm_<arch> GPU, with its own tuning. Each module is
 * reported once (index/count over the file's distinct modules). KLJIT_ERR_WISDOM if the file is
 * not usable wisdom. */
KLJIT_API kljit_status kljit_precompile_wisdom(const char *wisdom_file, int arch,
                                               const char *cache_dir, uint32_t flags,
                                               kljit_module_callback done, void *user);
/* ---- end of wisdom ---------------------------------------------------------------------- */

#ifdef __cplusplus
}
#endif
#endif /* KLJIT_H */
