/* SPDX-License-Identifier: Apache-2.0 */
/* kiface.h — kernel interfaces: the manifest a template declares, and arguments by role.
 *
 * A family template declares its kernels once (templates/iface.cu.lua): for each kernel its
 * name, its step (what the C side launches it for) and its arguments in order, each a role and
 * a kind. The renderer returns that as a manifest, one line per kernel:
 *     <name> <step> <role>:<kind> <role>:<kind> ...      (kind: ptr | i32 | i64 | f32)
 * which is stored with the cubin (docs/cache-format.md) and checked when a plan loads it.
 *
 * The C side keeps every value a kernel can be given in one struct, kargs, whose fields ARE the
 * roles: a manifest names the fields to pass, in order, and kiface_marshal builds
 * cuLaunchKernel's parameter array from them. Invariants:
 *  - a role's kind is its field's C type (ptr: 8-byte pointer, i32, i64, f32); a manifest that
 *    names an unknown role, or a known one with another kind, is refused at parse time;
 *  - a parsed kernel's params point into the kargs given to kiface_marshal, nothing else.
 * Adding an argument to a kernel: one entry in its template's table, and (for a new role) one
 * line of KIFACE_ROLES below plus the code that sets the field.
 */
#ifndef KLJIT_KIFACE_H
#define KLJIT_KIFACE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef const void *kiface_ptr;
typedef int32_t kiface_i32;
typedef int64_t kiface_i64;
typedef float kiface_f32;

/* Every role a kernel argument may have: (field, kind). The struct and the role table of
 * kiface.c are both made from this list, so they cannot disagree. */
#define KIFACE_ROLES(X)                                                                     \
  X(z, ptr)            /* chunk logits (rows, LD) */                                        \
  X(g, ptr)            /* chunk G (rows, LDG); may alias z */                               \
  X(teacher, ptr)      /* dense teacher (N, V) */                                           \
  X(teacher_ids, ptr)  /* sparse teacher ids (N, K) */                                      \
  X(teacher_values, ptr)                                                                    \
  X(bias, ptr)                                                                              \
  X(teacher_bias, ptr) /* the online teacher's bias (V) */                                 \
  X(labels, ptr)       /* NULL: every row kept */                                           \
  X(labels_is64, i32)                                                                       \
  X(ignore_index, i64)                                                                      \
  X(hdr, ptr)          /* the header kl_setup writes (PLAN_HDR_FLOATS) */                  \
  X(divisor, ptr)      /* kl_setup: the call's global divisor (fp64), or NULL: kept rows */  \
  X(part, ptr)         /* pass-1 partial records (rows, SPLIT, 8) */                        \
  X(recs, ptr)         /* the records pass 2 merges: part, or the shards' records */       \
  X(nrec, i32)         /* records per row */                                                \
  X(srow, i64)         /* record stride between rows (records) */                           \
  X(srec, i64)         /* record stride between a row's records (records) */               \
  X(lossp, ptr)        /* loss partials (rows, p2_split) */                                 \
  X(rowstat, ptr)      /* saved row statistics (N, 4) */                                    \
  X(grad_output, ptr)  /* upstream gradient: a scalar, or one per row */                    \
  X(per_row, i32)      /* grad_output has one value per row */                              \
  X(row0, i64)         /* first row of the chunk */                                         \
  X(chunk_rows, i32)   /* rows of the chunk */                                              \
  X(rows, i64)         /* rows of the call */                                               \
  X(stats_out, ptr)    /* kljit_shard_stats: merged records (N, 8) */                      \
  X(check_flag, ptr)   /* checked mode's verdict word */                                    \
  X(temperature, f32)  /* run-time temperature */                                           \
  X(gmult, f32)        /* the power of two fp16 G is stored times */                        \
  X(p2_split, i32)     /* pass-2 blocks per row */                                          \
  X(loss, ptr)                                                                              \
  X(db, ptr)           /* fp32 db accumulator (V) */                                        \
  X(accumulate, i32)                                                                        \
  X(src, ptr)          /* kl_convert: fp32 source */                                        \
  X(dst, ptr)          /* kl_convert: destination */                                        \
  X(count, i64)        /* elements of a convert or scale */                                 \
  X(scale, f32)        /* kl_convert's factor */                                            \
  X(data, ptr)         /* kl_scale: the tensor scaled in place */                           \
  X(factor, ptr)       /* kl_scale: the device scalar */                                    \
  X(out_dtype, i32)    /* kl_scale: data holds OUT (1) or GRAD (0) elements */

#define KIFACE_FIELD_(role, kind) kiface_##kind role;
typedef struct kargs {
  KIFACE_ROLES(KIFACE_FIELD_)
} kargs;
#undef KIFACE_FIELD_

typedef enum kiface_kind {
  KIFACE_PTR = 1, KIFACE_I32 = 2, KIFACE_I64 = 3, KIFACE_F32 = 4
} kiface_kind;

/* What the C side launches a kernel for; a manifest line names it ("fused"). */
typedef enum kiface_step {
  KSTEP_STATS, KSTEP_FUSED, KSTEP_FORWARD, KSTEP_BACKWARD, KSTEP_CHECK, KSTEP_MERGE, /* rows */
  KSTEP_SUMS,                                                                  /* rows, DIV */
  KSTEP_SETUP, KSTEP_FINISH_LOSS, KSTEP_COLSUM, KSTEP_CONVERT, KSTEP_SCALE,          /* helpers */
  KSTEP_COUNT
} kiface_step;
const char *kiface_step_name(kiface_step s);

enum { KIFACE_MAX_ARGS = 24, KIFACE_MAX_KERNELS = 8 };

typedef struct kiface_kernel {
  char name[48];
  kiface_step step;
  int nargs;
  int role[KIFACE_MAX_ARGS];  /* index into the role table (KIFACE_ROLES order) */
} kiface_kernel;

typedef struct kiface_manifest {
  int n;
  kiface_kernel kernel[KIFACE_MAX_KERNELS];
} kiface_manifest;

/* Parses manifest text (`module` names it in messages). An unknown step or role, a role whose
 * kind differs from its kargs field, a malformed line or too many kernels or arguments:
 * KLJIT_ERR_TEMPLATE with a sentence naming the kernel and the argument. */
kljit_status kiface_parse(const char *text, const char *module, kiface_manifest *out);

/* The kernel of `step`, or NULL when the module has none. */
const kiface_kernel *kiface_find(const kiface_manifest *m, kiface_step step);

/* A cached module's manifest against the one this build's template declares: KLJIT_SUCCESS
 * when equal, else KLJIT_ERR_CACHE naming the first kernel and argument that differ. */
kljit_status kiface_compare(const char *expected, const char *stored, const char *module);

/* The parameter array of cuLaunchKernel for kernel `k` from `a`: params[i] = &a-><role i>.
 * Returns the argument count. */
int kiface_marshal(const kiface_kernel *k, const kargs *a, void *params[KIFACE_MAX_ARGS]);

/* The role table, for tests and messages: name, kind and size of role `i` (0 <= i < count). */
int kiface_role_count(void);
const char *kiface_role_name(int i);
kiface_kind kiface_role_kind(int i);
const char *kiface_kind_name(kiface_kind k);

#endif
