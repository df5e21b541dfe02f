/* SPDX-License-Identifier: Apache-2.0 */
/* spec.h — kernel specs: the plain, hashable description of one generated module.
 *
 * A spec names a template family and every parameter the template takes. The plan builds
 * specs; render turns a spec into source (the family template, which includes the common
 * prelude) and a kernel manifest (its interface); the cache keys on that source. Two equal
 * specs always give the same bytes.
 */
#ifndef KLJIT_SPEC_H
#define KLJIT_SPEC_H

#include <stdint.h>

#include "names.h"
#include "render.h"

typedef enum kspec_family {
  KSPEC_DENSE_ROWS = 1,  /* templates/dense_rows.cu.lua */
  KSPEC_HELPERS = 2,     /* templates/helpers.cu.lua */
  KSPEC_SPARSE_ROWS = 3, /* templates/sparse_rows.cu.lua */
  KSPEC_GEMM_SM90 = 4    /* templates/gemm_sm90.cu.lua (sm_90a only; gemm_sm90.h) */
} kspec_family;

/* Flag bits of a generated GEMM's smaller choices (kspec.gemm_tweaks, jgemm_variant.tweaks,
 * prob_gemm_choice.tweaks; the template's ARRIVE, STORE, L2, PROMOTE, TILES and MASS_WARPS
 * parameters). */
enum {
  KSPEC_GEMM_ARRIVE_WARP = 1, /* one mbarrier arrival per consumer warp */
  KSPEC_GEMM_STREAM_C = 2,    /* the staged epilogue's runs of C with the .cs cache operator */
  KSPEC_GEMM_L2_KEEP_A = 4,   /* TMA loads: A evict_last, B evict_first */
  KSPEC_GEMM_L2_KEEP_B = 8,   /* the reverse */
  KSPEC_GEMM_PROMOTE = 16,    /* the accumulator added into a second fp32 one every 4 k-blocks */
  KSPEC_GEMM_DYNAMIC = 32,    /* the tiles claimed from a counter (TILES dynamic) */
  KSPEC_GEMM_MASS_WARPS = 64  /* the teacher's part of the records: the producer's idle warps */
};

typedef struct kspec {
  kspec_family family;
  int64_t v;          /* V */
  int64_t ld;         /* row stride of the chunk buffers (elements) */
  int threads;        /* dense rows */
  int split;          /* dense rows: blocks per row */
  int cluster;        /* dense rows: 0, or the cluster size (= split) of the sm_90 variant */
  int nv;             /* dense rows, cluster variant: vectors per thread */
  int64_t ldg;        /* row stride of G (elements of its dtype) */
  int inplace;        /* dense rows, two-pass: 16-bit G over fp32 z, one pass-2 block per row */
  kljit_dtype logit;  /* the chunk logits: FP32, BF16 or FP16 */
  kljit_dtype grad;   /* G */
  kljit_dtype tdt;    /* teacher (sparse: values) dtype */
  kljit_dtype bdt;    /* bias dtype */
  kljit_dtype out;    /* helpers: dW/db output dtype */
  const char *teacher;    /* dense rows: "probs" | "logprobs" | "logits" */
  const char *reduction;  /* helpers */
  kljit_temperature_mode tmode;
  int bias;
  int t2;             /* helpers: T^2 scaling */
  int tt_same;
  double t, tt, eps;
  int check;          /* rows: emit the checked-mode kernel */
  const char *part;   /* dense rows: "fused" (the fused mode's kernels: stats, fused, check)
                       * or "phased" (forward, backward, merge, sums), two modules compiled at
                       * once; NULL: all of them in one */
  int topk;           /* sparse rows: K */
  kljit_dtype idt;    /* sparse rows: INT32 or INT64 ids */
  const char *values; /* sparse rows: "probs" | "logprobs" */
  const char *tail;   /* sparse rows: "none" | "renorm" | "bucket" */
  int64_t vtot;       /* global V (= v unless sharded): sparse rows' id range, helpers' MEAN */
  int64_t offset;     /* first global id of the shard (0 unsharded): the sparse rows' OFFSET,
                       * the dense rows' VOFF where they have the CE (HARD) */
  /* dense rows, each a template parameter only when set, so the plain problem's source stays
   * byte for byte what it was (its cache entries and tuning stay valid) */
  int64_t tld;        /* teacher row stride; 0: V */
  double softcap;     /* student logit cap; 0: none */
  double tsoftcap;    /* teacher logit cap (logits teacher); 0: none */
  double hard;        /* weight of the hard-label CE; 0: none */
  double soft1;       /* the divergence's weight minus 1 (0: the plain weight 1) */
  const char *div;    /* "reverse" | "jsd" | "tvd" | "skew_forward" | "skew_reverse", or NULL:
                       * the forward KL */
  double beta;        /* jsd: in (0, 1) */
  int tchunk;         /* the teacher rows are the chunk's (the online teacher's logits) */
  kljit_dtype tbdt;   /* the online teacher's bias dtype; 0: no teacher bias */
  int64_t ht;         /* checked mode of the online teacher: its Ht (0: none) */
  kljit_dtype txdt;   /* ... and the dtype of its input and head */
  int sharded;        /* a vocabulary shard (the SHARDED of DIV; offset gives HARD's VOFF) */
  int merge_block;    /* the rows: pass 2 merges a row's records with the block (MERGE block:
                       * the logits GEMM's statistics epilogue, one record per column tile) */
  double alpha;       /* skew_forward, skew_reverse: in (0, 1) */
  int roww;           /* row weights */
  double lsmooth;     /* the CE's label smoothing (HARD); 0: none */
  double zloss;       /* the CE's z-loss (HARD); 0: none */
  /* GEMM (the parameters of templates/gemm_sm90.cu.lua; in/out dtypes in tdt/out) */
  int gemm_beta, gemm_bn, gemm_consumers, gemm_stages, gemm_cluster;
  const char *gemm_layout; /* "nt" | "nn" | "tn" */
  char gemm_raster;   /* 'm' | 'n' | 'g' */
  char gemm_schedule; /* 0 / 'c': coop (no SCHEDULE parameter: its source as before); 'p' */
  char gemm_epilogue; /* 0 / 'd': direct (no EPILOGUE parameter); 's': staged */
  int gemm_kslice;    /* 0: no KSLICE parameter; else k-blocks per slice */
  int gemm_tweaks;    /* KSPEC_GEMM_* bits; each a parameter only when set */
  /* the logits GEMM's statistics epilogue (STATS, TDT, TLD, T; none of them when NULL) */
  const char *gemm_stats;   /* NULL | "probs" | "logprobs" | "logits": the dense teacher's form;
                             * "sparse": the sparse teacher's (the student's statistics alone) */
  kljit_dtype gemm_stats_tdt; /* the teacher's dtype */
  int64_t gemm_stats_tld;   /* the teacher's row stride (elements) */
  double gemm_stats_t;      /* the constant temperature */
  int gemm_e16;             /* STATS's E16 (fp16 scores instead of C); no parameter when 0 */
  int gemm_stats_own;       /* STATS sparse: OWN (the support's own (max, sum-exp)); 0: none */
  kljit_dtype gemm_stats_bdt; /* E16's BDT (the bias's dtype); 0: none */
  int gemm_hard;            /* E16's HARD (the CE's records; labels in); no parameter when 0 */
  int gemm_e16_exp;         /* E16's EXPE (E' = exp(x) instead of x); no parameter when 0 */
  /* GOP (nn, tn: A = G rebuilt in the stage from E'; no parameter when gemm_gop is 0) */
  int gemm_gop;             /* GOP */
  int gemm_gop_fw;          /* FW: the factors' column tile (a multiple of 64) */
  kljit_dtype gemm_gop_pdt; /* PDT: the dense teacher's probabilities' dtype; 0: none (G = f E') */
  int gemm_gop_regs;        /* GRS: G formed in registers (wgmma's register A), not the stage */
  int etile;                /* dense rows: 0, or ETILE, the column tile of the fp16 scores the
                             * logits GEMM wrote (E16) that the rows read in place of z */
} kspec;

enum { KSPEC_MAX_PARAMS = 48 }; /* dense rows: 20 always, 22 optional */

/* The template file of a family, and the spec's parameters for render_template. */
/* NVRTC target of a spec for sm_<arch>: arch, or arch | NVRTC_ARCH_SPECIFIC for the GEMMs. */
int kspec_target(const kspec *k, int arch);
const char *kspec_template(const kspec *k);
size_t kspec_params(const kspec *k, render_param out[KSPEC_MAX_PARAMS]);

/* Renders the full source of a spec (the family template includes the common prelude and its
 * interface); kspec_render_iface also appends the module's kernel manifest (src/kiface.h). */
kljit_status kspec_render(const kspec *k, strbuf *out);
kljit_status kspec_render_iface(const kspec *k, strbuf *out, strbuf *manifest);

/* A short stable name for diagnostics and dump files ("dense_rows-<8 hex of the source>"). */
void kspec_name(const kspec *k, const char *source, char name[64]);

/* The canonical key of a spec: one line of text naming the template, then each parameter in
 * kspec_params' order (a function of the spec) as ` NAME=<kind><value>`, every value exact and
 * unambiguous (i<decimal>, b0/b1, x<the double's 16 hex bits>, s<length>:<bytes>). Equal keys
 * give the template the same parameters, so the same source, manifest and verdict: what a memo
 * of those may key on (spec_memo.h). Built without printf: a wisdom import makes tens of
 * thousands. */
enum { KSPEC_KEY_MAX = 2048 };
typedef struct kspec_key {
  size_t len;
  char text[KSPEC_KEY_MAX]; /* NUL-terminated */
} kspec_key;

/* 0, or -1 when the key would not fit (the spec is then not memoized). */
int kspec_key_of(const kspec *k, kspec_key *out);

#endif
