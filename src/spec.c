/* spec.c — kernel spec → template parameters → rendered source. */
#include "spec.h"

#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "nvrtc_compile.h"

const char *kspec_template(const kspec *k) {
  return k->family == KSPEC_DENSE_ROWS    ? "dense_rows.cu.lua"
         : k->family == KSPEC_SPARSE_ROWS ? "sparse_rows.cu.lua"
         : k->family == KSPEC_GEMM_SM90   ? "gemm_sm90.cu.lua"
                                          : "helpers.cu.lua";
}

static const char *family_name(const kspec *k) {
  return k->family == KSPEC_DENSE_ROWS    ? "dense_rows"
         : k->family == KSPEC_SPARSE_ROWS ? "sparse_rows"
         : k->family == KSPEC_GEMM_SM90   ? "gemm_sm90"
                                          : "helpers";
}

int kspec_target(const kspec *k, int arch) {
  return k->family == KSPEC_GEMM_SM90 ? arch | NVRTC_ARCH_SPECIFIC : arch;
}

static render_param pi(const char *key, int64_t v) {
  render_param p = {key, RP_INT, v, 0.0, NULL};
  return p;
}
static render_param pn(const char *key, double v) {
  render_param p = {key, RP_NUM, 0, v, NULL};
  return p;
}
static render_param ps(const char *key, const char *v) {
  render_param p = {key, RP_STR, 0, 0.0, v};
  return p;
}
static render_param pb(const char *key, int v) {
  render_param p = {key, RP_BOOL, v != 0, 0.0, NULL};
  return p;
}

static size_t gemm_params(const kspec *k, render_param out[KSPEC_MAX_PARAMS]) {
  size_t n = 0;
  out[n++] = ps("LAYOUT", k->gemm_layout ? k->gemm_layout : "nt");
  out[n++] = ps("IN", k->tdt);
  out[n++] = ps("OUT", k->out);
  out[n++] = pb("BETA", k->gemm_beta);
  out[n++] = pi("BN", k->gemm_bn);
  out[n++] = pi("CONSUMERS", k->gemm_consumers);
  out[n++] = pi("STAGES", k->gemm_stages);
  const char r = k->gemm_raster;
  out[n++] = ps("RASTER", r == 'm' ? "m" : r == 'n' ? "n" : r == 'g' ? "g" : "?");
  out[n++] = pi("CLUSTER", k->gemm_cluster);
  return n;
}

size_t kspec_params(const kspec *k, render_param out[KSPEC_MAX_PARAMS]) {
  if (k->family == KSPEC_GEMM_SM90) return gemm_params(k, out);
  size_t n = 0;
  out[n++] = pi("V", k->v);
  out[n++] = pi("LD", k->ld);
  out[n++] = ps("TMODE", k->tmode);
  /* A run-time temperature must not leak into the source (one module serves every T). */
  out[n++] = pn("T", strcmp(k->tmode, "const") == 0 ? k->t : 1.0);
  if (k->family == KSPEC_DENSE_ROWS) {
    out[n++] = pi("THREADS", k->threads);
    out[n++] = pi("SPLIT", k->split);
    out[n++] = pi("CLUSTER", k->cluster);
    out[n++] = pi("NV", k->nv);
    out[n++] = pi("LDG", k->ldg);
    out[n++] = pb("INPLACE", k->inplace);
    out[n++] = ps("LOGIT", k->logit);
    out[n++] = ps("GRAD", k->grad);
    out[n++] = ps("TEACHER", k->teacher);
    out[n++] = ps("TDT", k->tdt);
    out[n++] = pb("BIAS", k->bias);
    out[n++] = ps("BDT", k->bdt);
    out[n++] = pb("TT_SAME", k->tt_same);
    out[n++] = pn("TT", k->tt_same ? 1.0 : k->tt);
    out[n++] = pn("EPS", k->eps);
    out[n++] = pb("CHECK", k->check);
  } else if (k->family == KSPEC_SPARSE_ROWS) {
    out[n++] = pi("THREADS", k->threads);
    out[n++] = pi("SPLIT", k->split);
    out[n++] = pi("LDG", k->ldg);
    out[n++] = pb("INPLACE", k->inplace);
    out[n++] = ps("LOGIT", k->logit);
    out[n++] = ps("GRAD", k->grad);
    out[n++] = pi("K", k->topk);
    out[n++] = ps("IDT", k->idt);
    out[n++] = ps("VDT", k->tdt);
    out[n++] = ps("VALUES", k->values);
    out[n++] = ps("TAIL", k->tail);
    out[n++] = pb("BIAS", k->bias);
    out[n++] = ps("BDT", k->bdt);
    out[n++] = pn("EPS", k->eps);
    out[n++] = pb("CHECK", k->check);
    out[n++] = pi("VTOT", k->vtot ? k->vtot : k->v);
    out[n++] = pi("OFFSET", k->offset);
  } else {
    out[n++] = ps("GRAD", k->grad);
    out[n++] = pi("LDG", k->ldg);
    out[n++] = ps("OUT", k->out);
    out[n++] = ps("REDUCTION", k->reduction);
    out[n++] = pb("T2", k->t2);
    out[n++] = pi("VTOT", k->vtot ? k->vtot : k->v);
  }
  return n;
}

kljit_status kspec_splice(strbuf *out, const char *prelude) {
  /* banner lines of the family render stay on top, then the prelude, then the body */
  const char *body = out->data ? out->data : "";
  const char *split_at = body;
  while (strncmp(split_at, "//", 2) == 0) {
    const char *nl = strchr(split_at, '\n');
    if (!nl) break;
    split_at = nl + 1;
  }
  strbuf full = {0};
  kljit_status st = sb_append(&full, body, (size_t)(split_at - body));
  if (st == KLJIT_SUCCESS) st = sb_append(&full, prelude, strlen(prelude));
  if (st == KLJIT_SUCCESS) st = sb_append(&full, split_at, strlen(split_at));
  if (st == KLJIT_SUCCESS) {
    sb_free(out);
    *out = full;
  } else {
    sb_free(&full);
  }
  return st;
}

kljit_status kspec_render(const kspec *k, strbuf *out) {
  render_param params[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, params);
  kljit_status st = render_template(kspec_template(k), params, n, out);
  if (st != KLJIT_SUCCESS) return st;
  /* The preludes carry no parameters; render them after so the banner stays first (each
   * splice goes right under the banner: the PTX helpers first, then common above them). */
  strbuf common = {0};
  if (k->family == KSPEC_GEMM_SM90) {
    st = render_template("ptx_sm90.cu.lua", NULL, 0, &common);
    if (st == KLJIT_SUCCESS) st = kspec_splice(out, common.data);
    sb_free(&common);
    if (st != KLJIT_SUCCESS) return st;
  }
  st = render_template("common.cu.lua", NULL, 0, &common);
  if (st == KLJIT_SUCCESS) st = kspec_splice(out, common.data);
  sb_free(&common);
  return st;
}

void kspec_name(const kspec *k, const char *source, char name[64]) {
  char hex[65];
  sha256_hex(source, strlen(source), hex);
  snprintf(name, 64, "%s-%.12s", family_name(k), hex);
}

/* Every kernel of a family, in slot order (see kspec_kernel_slot). */
static const char *const DENSE[] = {"kl_dense_stats",    "kl_dense_fused",
                                    "kl_dense_forward",  "kl_dense_backward",
                                    "kl_dense_check",    "kl_dense_merge",
                                    NULL};
static const char *const SPARSE[] = {"kl_sparse_stats",    "kl_sparse_fused",
                                     "kl_sparse_forward",  "kl_sparse_backward",
                                     "kl_sparse_check",    "kl_sparse_merge", NULL};
static const char *const HELPERS[] = {"kl_setup", "kl_finish_loss", "kl_colsum", "kl_convert",
                                      "kl_scale", NULL};
static const char *const GEMM[] = {"kl_gemm", NULL};

static const char *const *family_kernels(const kspec *k) {
  return k->family == KSPEC_DENSE_ROWS    ? DENSE
         : k->family == KSPEC_SPARSE_ROWS ? SPARSE
         : k->family == KSPEC_GEMM_SM90   ? GEMM
                                          : HELPERS;
}

const char *const *kspec_kernels(const kspec *k) {
  /* the modules' exported subsets, NULL-terminated */
  static const char *const dense_nocheck[] = {"kl_dense_stats",   "kl_dense_fused",
                                              "kl_dense_forward", "kl_dense_backward",
                                              "kl_dense_merge",   NULL};
  static const char *const sparse_nocheck[] = {"kl_sparse_stats",   "kl_sparse_fused",
                                               "kl_sparse_forward", "kl_sparse_backward",
                                               "kl_sparse_merge",   NULL};
  /* the cluster variant has neither pass 1 nor its merge */
  static const char *const cluster_check[] = {"kl_dense_fused", "kl_dense_forward",
                                              "kl_dense_backward", "kl_dense_check", NULL};
  static const char *const cluster_nocheck[] = {"kl_dense_fused", "kl_dense_forward",
                                                "kl_dense_backward", NULL};
  if (k->family == KSPEC_DENSE_ROWS && k->cluster)
    return k->check ? cluster_check : cluster_nocheck;
  if (k->family == KSPEC_DENSE_ROWS) return k->check ? DENSE : dense_nocheck;
  if (k->family == KSPEC_SPARSE_ROWS) return k->check ? SPARSE : sparse_nocheck;
  if (k->family == KSPEC_GEMM_SM90) return GEMM;
  return HELPERS;
}

int kspec_kernel_slot(const kspec *k, const char *name) {
  const char *const *all = family_kernels(k);
  for (int i = 0; all[i]; i++)
    if (strcmp(all[i], name) == 0) return i;
  return -1;
}
