/* SPDX-License-Identifier: Apache-2.0 */
/* kljit_experimental.h — entry points of kljit that are not stable yet.
 *
 * Opt in by including this header (after or instead of kljit.h). What is here may change
 * between minor versions, in signature or in behaviour, and moves to kljit.h once it is
 * stable. The library exports these functions like the others; the rules of kljit.h (status,
 * kljit_last_error, struct_size first) hold here too.
 *
 *   - the tensor-parallel (vocabulary-parallel head) split API and its NCCL driver; the
 *     problem fields it reads (vocab_total, vocab_offset, shards) stay at the end of
 *     kljit_problem, and a struct that ends before them leaves them at their defaults;
 *   - tooling that the kljit CLI uses (`kljit info`, `kljit cache`): versions of what the
 *     library runs with, cache inspection. None of it needs a GPU;
 *   - a benchmark hook: a context flag that runs no GEMMs.
 *   - the layout of the records a problem's kernels leave in the caller's buffers (`saved`,
 *     the split API's per-row records), for bindings that size them without a plan.
 */
#ifndef KLJIT_EXPERIMENTAL_H
#define KLJIT_EXPERIMENTAL_H

#include "kljit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tensor parallelism (vocabulary-parallel head) -------------------------------------- *
 * With the head sharded over the vocabulary across `shards` ranks (Megatron style: rank r holds
 * rows [vocab_offset, vocab_offset + vocab) of W, any split, V need not divide), each rank builds
 * a plan with vocab = its shard size, vocab_total = V, vocab_offset and shards set, and passes
 * its own W rows [vocab, H], bias slice [vocab], and for a dense teacher its own teacher columns
 * as a contiguous [N, vocab] array. Sparse teacher ids stay GLOBAL ([0, vocab_total)); each rank
 * uses the ids that fall in its shard, every id in [0, vocab_total) counts in M on every rank,
 * BUCKET's ghost-token term is counted on the rank with vocab_offset = 0. X, labels, the sparse
 * ids and values are the same on every rank. Sharded plans use the two-pass row kernels (no
 * cluster variant); kljit_fused, kljit_forward and kljit_backward refuse them
 * (KLJIT_ERR_UNSUPPORTED). KLJIT_PLAN_MEASURE and EXHAUSTIVE tune a shard on its own GPU by
 * timing kljit_shard_stats + kljit_shard_finish (the collective between them is not timed);
 * REDUCTION_NONE has no split API and so no sharded plan to tune.
 *
 * Split API (callers with their own collectives), one chunk loop per call:
 *   1. kljit_shard_stats: this rank's per-row statistics, N records of R floats each, R the
 *      layout's record_floats (kljit_problem_layout; 8 in this release, 9 for the sparse
 *      teacher with label smoothing), its slots named in record_slots (dense "m d sp mt dt mh
 *      dh S": student max and sum-exp of s, teacher mass, teacher-logit max and sum-exp, the
 *      hard-label CE's max and sum-exp of z' (hard_weight > 0, else 0), S below (NaN until step
 *      2b; 0 for the forward KL); sparse "m d_on d_off mh dh mo dno S" and with label
 *      smoothing "zs": sum-exp on / off the local support, the CE's, the support's own (max,
 *      sum-exp) (TAIL_RENORM, divergences over categories), S as the dense one's, the sum of
 *      the CE's z' over the rank's columns; the rest 0).
 *   2. The caller all-gathers the records of every rank into `all`, laid out [shards][N][R]
 *      (rank s's records at all + s * N * R; e.g. ncclAllGather, or copies on one GPU).
 *   2b. Only where kljit_plan_shard_rounds says 2 (divergence REVERSE_KL, JSD, TVD or a skew
 *      KL, whose gradient needs the row total S = sum_v q_v g_v over the whole vocabulary):
 *      kljit_shard_sums writes this rank's part of S into slot S of its own records `stats`
 *      (from `all`; it recomputes the chunk logits, one GEMM per chunk more), and the caller
 *      all-gathers the records into `all` again. A finish without this round gets S = NaN: NaN
 *      gradients.
 *   3. kljit_shard_finish: like kljit_fused, with the row statistics merged from the `shards`
 *      global records (in rank order: every rank gets the same numbers). It writes
 *        loss  THIS rank's part of the loss (the caller sums the ranks' losses: all-reduce),
 *        dX    this rank's partial G_r W_r (the caller sums the ranks' dX: all-reduce),
 *        dW, db this rank's rows of dW and db, complete (nothing to reduce),
 *        and, where asked, THIS rank's part of row_loss and loss_parts (the caller sums them).
 * Both calls take the workspace of kljit_plan_workspace_size(KLJIT_MODE_FUSED) and the same
 * args (rows, input, weight, bias, labels, teacher...); shard_stats ignores the outputs. Not for
 * REDUCTION_NONE. Unsharded plans may use them too (shards = 1).
 *
 * Checked mode runs in both calls and may fail on one rank only (a dense teacher slice): a
 * caller with its own collectives must tell the other ranks before its all-gather, as
 * kljit_fused_nccl does (one int32 all-reduce of the verdicts after kljit_shard_stats: then
 * every rank returns KLJIT_ERR_BAD_INPUT_DATA, and none writes its outputs). */

/* 1 or 2: the exchanges of records a sharded step needs (2: step 2b above). */
KLJIT_API kljit_status kljit_plan_shard_rounds(const kljit_plan *plan, int *rounds);
/* Bytes of one rank's per-row statistics for `rows` rows: rows * record_floats floats. */
KLJIT_API kljit_status kljit_plan_shard_stats_size(const kljit_plan *plan, int64_t rows,
                                                   size_t *bytes);
/* Per chunk: logits GEMM, row statistics, merge -> stats[N][R] (device, 16-byte aligned). */
KLJIT_API kljit_status kljit_shard_stats(const kljit_plan *plan, void *stream,
                                         const kljit_args *args, float *stats);
/* Step 2b: this rank's part of each row's S into slot S of its records `stats` [N][R] (may be
 * the slice of `all` that holds them), from the gathered records `all`. Returns KLJIT_SUCCESS
 * and launches nothing where the plan needs one round (the forward KL). */
KLJIT_API kljit_status kljit_shard_sums(const kljit_plan *plan, void *stream,
                                        const kljit_args *args, const float *all, int shards,
                                        float *stats);
/* Loss part, dX partial, dW and db rows from the gathered records `all` [shards][N][R] (device,
 * 16-byte aligned); `shards` must equal the problem's shards. */
KLJIT_API kljit_status kljit_shard_finish(const kljit_plan *plan, void *stream,
                                          const kljit_args *args, const float *all, int shards);

/* The whole sharded step through NCCL on `stream`: shard_stats, ncclAllGather of the records
 * (in the workspace: kljit_plan_workspace_size covers them when shards > 1), where the plan
 * needs two rounds shard_sums and a second ncclAllGather, shard_finish, then
 * ncclAllReduce (sum) in place of the loss (fp32), dX (input dtype) and, where asked, row_loss
 * and loss_parts (fp32). `nccl_comm` is an
 * ncclComm_t whose size equals the problem's shards, its rank this rank's shard. NCCL is loaded
 * at run time (dlopen("libnccl.so.2")): KLJIT_ERR_UNSUPPORTED when it is missing or the
 * communicator's size differs. kljit sets nothing in NCCL's environment: set
 * NCCL_NVLS_ENABLE=0 yourself where NVLink SHARP multicast is unavailable or unwanted. */
KLJIT_API kljit_status kljit_fused_nccl(const kljit_plan *plan, void *stream,
                                        const kljit_args *args, void *nccl_comm);

/* ---- record layouts --------------------------------------------------------------------- *
 * The kernel templates declare the records their kernels leave in the caller's buffers (one
 * table each, beside their arguments); these are the numbers a binding would otherwise
 * restate. A plan's own queries (kljit_plan_saved_size, kljit_plan_shard_stats_size) agree
 * with them for every plan of the problem. */
typedef struct kljit_layout {
  size_t struct_size;       /* sizeof(kljit_layout); the caller sets it */
  int header_floats;        /* the plan header at the start of two-phase `saved` */
  int saved_row_floats;     /* then this many a row: kljit_plan_saved_size(rows) is
                             * 4 (header_floats + saved_row_floats * rows) bytes */
  int record_floats;        /* R: one row's record of the split API (kljit_shard_stats) */
  char record_slots[128];   /* the record's named slots, in order from 0, one blank apart
                             * ("m d sp mt dt mh dh S"); the rest of its floats are padding */
  char saved_row_slots[128]; /* the same for a saved row ("lse sp lset kept") */
} kljit_layout;
/* The layout of `problem`'s records (kljit_problem checked as by kljit_plan_check). Needs no
 * GPU and compiles nothing: the kernel templates are rendered (a few milliseconds the first
 * time, remembered by the process). `out->struct_size` must be at least the size of this
 * release's struct; fields past it are left alone. */
KLJIT_API kljit_status kljit_problem_layout(const kljit_problem *problem, kljit_layout *out);

/* The rows of each chunk a call of `rows` rows walks with `plan` (its last chunk may be
 * shorter): the plan's chunk_rows, or fewer for a short call as kljit_plan_workspace_size's
 * comment says, so that a binding choosing how dW accumulates knows how many chunks (and
 * roundings) a call takes without restating the rule. */
KLJIT_API kljit_status kljit_plan_chunk_rows(const kljit_plan *plan, int64_t rows,
                                             int64_t *chunk_rows);

/* ---- tooling: versions, cache inspection (the kljit CLI) --------------------------------- *
 * What `kljit info` and `kljit cache` need and other tools may use. None of it needs a GPU.
 * Strings in the structs below live until the callback returns. */

/* Versions of what this library was built with and runs on. */
typedef struct kljit_versions {
  size_t struct_size;      /* sizeof(kljit_versions); the caller sets it */
  unsigned library;        /* kljit_version_number() */
  int cuda_toolkit;        /* CUDA_VERSION the library was compiled against, e.g. 13000 */
  int nvrtc_major, nvrtc_minor; /* nvrtcVersion() of the NVRTC it runs with */
  int driver;              /* cuDriverGetVersion() of libcuda.so.1, e.g. 13000; 0: no driver */
  char lua[32];            /* LUA_RELEASE, e.g. "Lua 5.4.6" */
} kljit_versions;
KLJIT_API kljit_status kljit_get_versions(kljit_versions *out);

/* One file of a cache directory that is named like an entry (<64 hex>.kjc; other files are
 * never listed). `status` is KLJIT_SUCCESS for an entry a lookup would load, else
 * KLJIT_ERR_CACHE with the reason in `problem`: damaged content (checked as in
 * docs/cache-format.md: magic, version, lengths, checksum, name = hash of the key), not a
 * regular file, or refused by the permission rules. */
typedef struct kljit_cache_entry_info {
  size_t struct_size;     /* sizeof(kljit_cache_entry_info) */
  const char *dir;        /* the directory listed */
  const char *file;       /* the file name in it */
  uint64_t size;          /* bytes on disk */
  int64_t mtime;          /* last modification, seconds since the Epoch */
  kljit_status status;
  const char *problem;    /* "" when status is KLJIT_SUCCESS */
  int arch;               /* from the entry's metadata (arch=sm_90 -> 90); 0 if unknown */
  const char *name;       /* module name from the metadata (name=), "" if unknown */
  const char *family;     /* template (kernel family) from the metadata (template=), or "" */
  const char *meta;       /* the whole metadata text ("name=value\n" lines), or "" */
  char sha256[65];        /* SHA-256 of the whole file, hex ("" when it could not be read) */
} kljit_cache_entry_info;
/* Return 0 to go on, anything else to stop (kljit_cache_list then returns KLJIT_SUCCESS). */
typedef int (*kljit_cache_visitor)(const kljit_cache_entry_info *entry, void *user);

/* Visits the entry-named files of `dir` in file-name order, reading and validating each.
 * KLJIT_ERR_CACHE when the directory cannot be opened or fails the permission rules. */
KLJIT_API kljit_status kljit_cache_list(const char *dir, kljit_cache_visitor visit, void *user);

/* Deletes from `dir` every file named like an entry (valid or not; a symbolic link is removed,
 * not followed) and every temp file a crashed writer left (.<64 hex>.kjc.*.tmp), nothing else,
 * calling `removed` (may be NULL) for each after it is gone (arch/name as read before). */
KLJIT_API kljit_status kljit_cache_clear(const char *dir, kljit_cache_visitor removed,
                                         void *user);

/* The kernel cache directories this process would use, from the environment (README's table):
 * the read-only KLJIT_CACHE_PATH directories in search order, then the writable one. `visit`
 * gets each path with `writable` 0 or 1; none when KLJIT_CACHE_DISABLE=1. */
typedef void (*kljit_cache_dir_visitor)(const char *dir, int writable, void *user);
KLJIT_API kljit_status kljit_cache_dirs(kljit_cache_dir_visitor visit, void *user);

/* Whether lookups would use the cache directory `dir` as this user: KLJIT_SUCCESS, or
 * KLJIT_ERR_CACHE with the reason in kljit_last_error(): it does not exist or this user cannot
 * read it or open its entries, or it is refused (owned by someone other than root, this user
 * or an owner KLJIT_CACHE_TRUSTED_OWNERS names; writable by group or others). A plan skips a
 * read-only directory it cannot read (a KLJIT_LOG=1 line) and fails on one it refuses; `kljit
 * info` and `kljit cache verify` report both. */
KLJIT_API kljit_status kljit_cache_dir_check(const char *dir);

/* Every KLJIT_* variable of the environment: `visit` gets its name, its value and, when kljit
 * does not take the value (or does not read the name), a sentence saying why (NULL: fine).
 * KLJIT_ERR_INVALID_ARGUMENT naming the first bad value, else KLJIT_SUCCESS (a name kljit does
 * not read is reported to the visitor only: tools and tests have their own). */
typedef void (*kljit_env_visitor)(const char *name, const char *value, const char *problem,
                                  void *user);
KLJIT_API kljit_status kljit_env_check(kljit_env_visitor visit, void *user);
/* ---- end of tooling --------------------------------------------------------------------- */

/* ---- benchmark hook --------------------------------------------------------------------- *
 * A kljit_context_options flag (KLJIT_DEBUG_SKIP_GEMMS=1 in the environment): every execute of
 * the context's plans runs no GEMM of its chunk loop (logits, the online teacher's, dX, dW),
 * nor what only turns a GEMM's output into a result (the split dX's fp32 sum), so the row
 * kernels can be timed alone (bench/bench_loss.c, its "rows" column). The results are WRONG:
 * never set it outside a benchmark. */
enum { KLJIT_CONTEXT_DEBUG_SKIP_GEMMS = 1u << 1 };

#ifdef __cplusplus
}
#endif
#endif /* KLJIT_EXPERIMENTAL_H */
