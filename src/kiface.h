/* SPDX-License-Identifier: Apache-2.0 */
/* kiface.h — kernel interfaces: the manifest a template declares, arguments by role, and the
 * records kernels exchange through memory.
 *
 * A family template declares its kernels once (templates/iface.cu.lua): for each kernel its
 * name, its step (what the C side launches it for), its launch geometry and its arguments in
 * order, each a role and a kind; and beside them the records its kernels write for others (or
 * for the caller) to read, each a name, a size in floats and named slots. The renderer returns
 * that as a manifest, one line each:
 *     <name> <step> threads=<n> [cluster=<n>] [smem=<bytes>] <role>:<kind> ...
 *                                                  (kind: ptr | i32 | i64 | f32 | tmap)
 *     record <name> <floats> <slot> <slot> ...
 * which is stored with the cubin (docs/cache-format.md) and checked when a plan loads it.
 *
 * The C side keeps every value a kernel can be given in one struct, kargs, whose fields ARE the
 * roles: a manifest names the fields to pass, in order, and kiface_marshal builds
 * cuLaunchKernel's parameter array from them; the launch takes its block size, cluster and
 * dynamic shared memory from the kernel's line too, so the C side chooses only the grid.
 * Buffers that hold records are sized by the records' floats as the loaded manifests say
 * (kiface_layout), never by a number written in C. Invariants:
 *  - a role's kind is its field's C type (ptr: 8-byte pointer, i32, i64, f32, tmap: a
 *    CUtensorMap passed by value, 64-byte aligned); a manifest that names an unknown role, or a
 *    known one with another kind, is refused at parse time;
 *  - a parsed kernel's params point into the kargs given to kiface_marshal, nothing else;
 *  - every module of a plan that declares a record declares the same floats and slots for it.
 * Adding an argument to a kernel: one entry in its template's table, and (for a new role) one
 * line of KIFACE_ROLES below plus the code that sets the field.
 * Adding a slot to a record: one name in the template's record table (the kernels use
 * <RECORD>_<SLOT>). Adding a record: one entry in the template's record table; where the C side
 * sizes a buffer by it, one line of KIFACE_RECORDS below and the code that reads the field.
 */
#ifndef KLJIT_KIFACE_H
#define KLJIT_KIFACE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef const void *kiface_ptr;
typedef int32_t kiface_i32;
typedef int64_t kiface_i64;
typedef float kiface_f32;
typedef CUtensorMap kiface_tmap; /* by value: the driver copies its 128 bytes at launch */

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
  X(teacher_input, ptr) /* the online teacher's input (N, Ht): its checked mode */         \
  X(teacher_weight, ptr) /* the online teacher's head (Vt, Ht): its checked mode */        \
  X(labels, ptr)       /* NULL: every row kept */                                           \
  X(labels_is64, i32)                                                                       \
  X(ignore_index, i64)                                                                      \
  X(hdr, ptr)          /* the header kl_setup writes (record hdr) */                       \
  X(divisor, ptr)      /* kl_setup: the call's global divisor (fp64), or NULL: kept rows */  \
  X(part, ptr)         /* pass-1 partial records (rows, SPLIT) of record part */            \
  X(recs, ptr)         /* the records pass 2 merges: part, or the shards' records */       \
  X(nrec, i32)         /* records per row */                                                \
  X(srow, i64)         /* record stride between rows (records) */                           \
  X(srec, i64)         /* record stride between a row's records (records) */               \
  X(lossp, ptr)        /* loss partials (rows, p2_split) */                                 \
  X(rowstat, ptr)      /* saved row statistics (N) of record rowstat */                    \
  X(grad_output, ptr)  /* upstream gradient: a scalar, or one per row */                    \
  X(per_row, i32)      /* grad_output has one value per row */                              \
  X(row0, i64)         /* first row of the chunk */                                         \
  X(chunk_rows, i32)   /* rows of the chunk */                                              \
  X(rows, i64)         /* rows of the call */                                               \
  X(stats_out, ptr)    /* kljit_shard_stats: merged records (N) of record part */          \
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
  X(out_dtype, i32)    /* kl_scale: data holds OUT (1) or GRAD (0) elements */              \
  X(row_weights, ptr)  /* the rows' weights (N), KLJIT_FLAG_ROW_WEIGHTS */                  \
  X(lossh, ptr)        /* the CE's loss partials (rows, p2_split), apart from lossp */      \
  X(row_loss, ptr)     /* kl_finish_loss: the per-row losses out (N), or NULL */            \
  X(loss_parts, ptr)   /* kl_finish_loss: {soft, hard} out, or NULL */                      \
  X(map_a, tmap)       /* kl_gemm: A's TMA descriptor */                                    \
  X(map_b, tmap)       /* kl_gemm: B's TMA descriptor */                                    \
  X(gemm_c, ptr)       /* kl_gemm: C [M, N] */                                              \
  X(gemm_m, i32)                                                                            \
  X(gemm_n, i32)                                                                            \
  X(gemm_k, i32)                                                                            \
  X(ldc, i64)          /* kl_gemm: C's row stride (elements) */                             \
  X(gemm_e, ptr)       /* kl_gemm, E16: the tile's fp16 scores out (instead of C) */         \
  X(lde, i64)          /* kl_gemm, E16: E's row stride (elements) */                        \
  X(rsf, i32)          /* kl_gemm, E16: floats a row of rowstat (two-phase backward's lse) */ \
  X(map_p, tmap)       /* kl_gemm, GOP with PDT: the teacher's probabilities' TMA descriptor */ \
  X(gfac, ptr)         /* kl_gemm, GOP: G's factors per (row, column tile) of V */          \
  X(fld, i64)          /* kl_gemm, GOP: gfac's row stride (floats) */                       \
  X(gpr, ptr)          /* kl_gemm, GOP with PDT: the teacher's term's scale per row */      \
  X(gemm_sched, ptr)   /* kl_gemm, TILES dynamic: the tile counter pair (zero at launch) */  \
  X(alpha, f32)

#define KIFACE_FIELD_(role, kind) kiface_##kind role;
typedef struct kargs {
  KIFACE_ROLES(KIFACE_FIELD_)
} kargs;
#undef KIFACE_FIELD_

typedef enum kiface_kind {
  KIFACE_PTR = 1, KIFACE_I32 = 2, KIFACE_I64 = 3, KIFACE_F32 = 4, KIFACE_TMAP = 5
} kiface_kind;

/* What the C side launches a kernel for; a manifest line names it ("fused"). */
typedef enum kiface_step {
  KSTEP_STATS, KSTEP_FUSED, KSTEP_FORWARD, KSTEP_BACKWARD, KSTEP_CHECK, KSTEP_MERGE, /* rows */
  KSTEP_SUMS,                                                                  /* rows, DIV */
  KSTEP_SETUP, KSTEP_FINISH_LOSS, KSTEP_COLSUM, KSTEP_CONVERT, KSTEP_SCALE,          /* helpers */
  KSTEP_GEMM,                                                       /* the generated GEMMs */
  KSTEP_COUNT
} kiface_step;
const char *kiface_step_name(kiface_step s);

enum {
  KIFACE_MAX_ARGS = 24, KIFACE_MAX_KERNELS = 8, KIFACE_MAX_RECORDS = 8, KIFACE_MAX_SLOTS = 16
};

typedef struct kiface_kernel {
  char name[48];
  kiface_step step;
  unsigned threads;           /* block size (threads=) */
  unsigned cluster;           /* blocks of a cluster (cluster=), 0: no cluster dims */
  unsigned smem;              /* dynamic shared memory in bytes (smem=), 0: none */
  int nargs;
  int role[KIFACE_MAX_ARGS];  /* index into the role table (KIFACE_ROLES order) */
} kiface_kernel;

typedef struct kiface_record {
  char name[24];
  int floats;                 /* an item's size; >= nslots */
  int nslots;
  char slot[KIFACE_MAX_SLOTS][16]; /* slot i's name */
} kiface_record;

typedef struct kiface_manifest {
  int n;
  kiface_kernel kernel[KIFACE_MAX_KERNELS];
  int nrec;
  kiface_record record[KIFACE_MAX_RECORDS];
} kiface_manifest;

/* Parses manifest text (`module` names it in messages). An unknown step or role, a role whose
 * kind differs from its kargs field, a kernel without threads=, a malformed line or record, or
 * too many kernels, arguments, records or slots: KLJIT_ERR_TEMPLATE with a sentence naming the
 * kernel and the argument, or the record. */
kljit_status kiface_parse(const char *text, const char *module, kiface_manifest *out);

/* The kernel of `step`, or NULL when the module has none. */
const kiface_kernel *kiface_find(const kiface_manifest *m, kiface_step step);

/* The record `name`, or NULL when the module declares none. */
const kiface_record *kiface_record_find(const kiface_manifest *m, const char *name);

/* A cached module's manifest against the one this build's template declares: KLJIT_SUCCESS
 * when equal, else KLJIT_ERR_CACHE naming the first kernel and argument (or launch attribute),
 * or the record and slot, that differ. */
kljit_status kiface_compare(const char *expected, const char *stored, const char *module);

/* The parameter array of cuLaunchKernel for kernel `k` from `a`: params[i] = &a-><role i>.
 * Returns the argument count. */
int kiface_marshal(const kiface_kernel *k, const kargs *a, void *params[KIFACE_MAX_ARGS]);

/* The records the C side sizes buffers by: (field, what it is). kiface_layout's fields are
 * made from this list; each holds the record's floats as the plan's manifests declare it. */
#define KIFACE_RECORDS(X)                                                                   \
  X(hdr)     /* the plan header kl_setup writes: the workspace (fused), else saved's start */ \
  X(part)    /* a pass-1 partial of a (row, block); a row's record of the split API */      \
  X(rowstat) /* a row's saved statistics (two-phase), after the header in saved */

#define KIFACE_LAYOUT_FIELD_(rec) int rec;
typedef struct kiface_layout {
  KIFACE_RECORDS(KIFACE_LAYOUT_FIELD_)
} kiface_layout;
#undef KIFACE_LAYOUT_FIELD_

/* The layout of the records that the `n` manifests (the modules of one plan) declare: every
 * record of KIFACE_RECORDS must be declared by one of them at least, and with the same floats
 * and slots by every one that declares it; else KLJIT_ERR_TEMPLATE naming the record (and the
 * modules, from `names`). */
kljit_status kiface_layout_of(const kiface_manifest *const *m, const char *const *names, int n,
                              kiface_layout *out);

/* Floats of a two-phase `saved` buffer for `rows` rows: the header, then a rowstat a row. */
int64_t kiface_saved_floats(const kiface_layout *l, int64_t rows);

/* The role table, for tests and messages: name and kind of role `i`. */
const char *kiface_role_name(int i);
kiface_kind kiface_role_kind(int i);
const char *kiface_kind_name(kiface_kind k);

#endif
