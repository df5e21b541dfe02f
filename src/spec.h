/* spec.h — kernel specs: the plain, hashable description of one generated module.
 *
 * A spec names a template family and every parameter the template takes. The plan builds
 * specs; render turns a spec into source (common prelude + family template); the cache keys
 * on that source. Two equal specs always give the same bytes.
 */
#ifndef KLJIT_SPEC_H
#define KLJIT_SPEC_H

#include <stdint.h>

#include "template.h"

typedef enum kspec_family {
  KSPEC_DENSE_ROWS = 1,  /* templates/dense_rows.cu.lua */
  KSPEC_HELPERS = 2,     /* templates/helpers.cu.lua */
  KSPEC_SPARSE_ROWS = 3, /* templates/sparse_rows.cu.lua */
  KSPEC_GEMM_SM90 = 4    /* templates/gemm_sm90.cu.lua (sm_90a only; gemm_sm90.h) */
} kspec_family;

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
  const char *logit;  /* "f32" | "bf16" | "f16" */
  const char *grad;
  const char *tdt;    /* dense rows: teacher dtype */
  const char *bdt;    /* dense rows: bias dtype */
  const char *out;    /* helpers: dW/db output dtype */
  const char *teacher;    /* dense rows: "probs" | "logprobs" | "logits" */
  const char *reduction;  /* helpers */
  const char *tmode;      /* "const" | "runtime" */
  int bias;
  int t2;             /* helpers: T^2 scaling */
  int tt_same;
  double t, tt, eps;
  int check;          /* rows: emit the checked-mode kernel */
  int topk;           /* sparse rows: K */
  const char *idt;    /* sparse rows: "i32" | "i64" */
  const char *values; /* sparse rows: "probs" | "logprobs" */
  const char *tail;   /* sparse rows: "none" | "renorm" | "bucket" */
  int64_t vtot;       /* global V (= v unless sharded): sparse rows' id range, helpers' MEAN */
  int64_t offset;     /* sparse rows: first global id of the shard (0 unsharded) */
  /* GEMM (the parameters of templates/gemm_sm90.cu.lua; in/out dtypes in tdt/out) */
  int gemm_beta, gemm_bn, gemm_consumers, gemm_stages, gemm_cluster;
  const char *gemm_layout; /* "nt" | "nn" */
  char gemm_raster;   /* 'm' | 'n' */
} kspec;

enum { KSPEC_MAX_PARAMS = 24 };

/* The template file of a family, and the spec's parameters for render_template. */
/* NVRTC target of a spec for sm_<arch>: arch, or arch | NVRTC_ARCH_SPECIFIC for the GEMMs. */
int kspec_target(const kspec *k, int arch);
const char *kspec_template(const kspec *k);
size_t kspec_params(const kspec *k, render_param out[KSPEC_MAX_PARAMS]);

/* Renders the full source of a spec: banner + common prelude (+ the PTX helpers for the GEMM
 * family) + family template. */
kljit_status kspec_render(const kspec *k, strbuf *out);

/* Inserts `prelude` into a rendered source after its banner comment lines (the template
 * language has no include yet; the GEMM family splices its PTX helpers the same way). */
kljit_status kspec_splice(strbuf *out, const char *prelude);

/* A short stable name for diagnostics and dump files ("dense_rows-<8 hex of the source>"). */
void kspec_name(const kspec *k, const char *source, char name[64]);

/* Kernel entry points the family's module exports (NULL-terminated). The cluster variant of the
 * dense rows has no kl_dense_stats; the check kernels exist with `check` only. */
const char *const *kspec_kernels(const kspec *k);

/* The slot of kernel `name` within its family: rows families 0 stats, 1 fused, 2 forward,
 * 3 backward, 4 check, 5 merge (the split API's per-row record merge); helpers 0 setup,
 * 1 finish_loss, 2 colsum, 3 convert. -1 if unknown. */
int kspec_kernel_slot(const kspec *k, const char *name);

#endif
