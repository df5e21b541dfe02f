/* SPDX-License-Identifier: Apache-2.0 */
/* spec.c — kernel spec → template parameters → rendered source. */
#include "spec.h"

#include <stdint.h>
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
  out[n++] = ps("IN", names_dtype_tag(k->tdt));
  out[n++] = ps("OUT", names_dtype_tag(k->out));
  out[n++] = pb("BETA", k->gemm_beta);
  out[n++] = pi("BN", k->gemm_bn);
  out[n++] = pi("CONSUMERS", k->gemm_consumers);
  out[n++] = pi("STAGES", k->gemm_stages);
  const char r = k->gemm_raster;
  out[n++] = ps("RASTER", r == 'm' ? "m" : r == 'n' ? "n" : r == 'g' ? "g" : "?");
  out[n++] = pi("CLUSTER", k->gemm_cluster);
  if (k->gemm_schedule == 'p') out[n++] = ps("SCHEDULE", "pingpong");
  if (k->gemm_epilogue == 's') out[n++] = ps("EPILOGUE", "staged");
  if (k->gemm_kslice > 0) out[n++] = pi("KSLICE", k->gemm_kslice);
  if (k->gemm_tweaks & KSPEC_GEMM_ARRIVE_WARP) out[n++] = ps("ARRIVE", "warp");
  if (k->gemm_tweaks & KSPEC_GEMM_STREAM_C) out[n++] = ps("STORE", "streaming");
  if (k->gemm_tweaks & (KSPEC_GEMM_L2_KEEP_A | KSPEC_GEMM_L2_KEEP_B))
    out[n++] = ps("L2", k->gemm_tweaks & KSPEC_GEMM_L2_KEEP_A ? "keep_a" : "keep_b");
  if (k->gemm_tweaks & KSPEC_GEMM_PROMOTE) out[n++] = pi("PROMOTE", 4);
  if (k->gemm_tweaks & KSPEC_GEMM_DYNAMIC) out[n++] = ps("TILES", "dynamic");
  if (k->gemm_tweaks & KSPEC_GEMM_MASS_WARPS) out[n++] = pb("MASS_WARPS", 1);
  if (k->gemm_stats) {
    out[n++] = ps("STATS", k->gemm_stats);
    if (k->gemm_stats_tld) { /* a dense teacher's tile (the sparse teacher's is not read) */
      out[n++] = ps("TDT", names_dtype_tag(k->gemm_stats_tdt));
      out[n++] = pi("TLD", k->gemm_stats_tld);
    }
    out[n++] = pn("T", k->gemm_stats_t);
    if (k->tt > 0.0) out[n++] = pn("TT", k->tt);
    if (k->tsoftcap > 0.0) out[n++] = pn("TSOFTCAP", k->tsoftcap);
    if (k->tchunk) out[n++] = pb("TCHUNK", 1); /* the online teacher's (the rows' fields) */
    if (k->tbdt) out[n++] = ps("TBDT", names_dtype_tag(k->tbdt));
    if (k->gemm_e16) out[n++] = pb("E16", 1);
    /* E16's own (jgemm_spec sets them with E16 only) */
    if (k->gemm_stats_bdt) out[n++] = ps("BDT", names_dtype_tag(k->gemm_stats_bdt));
    if (k->softcap > 0.0) out[n++] = pn("SOFTCAP", k->softcap);
    if (k->gemm_hard) out[n++] = pb("HARD", 1);
    if (k->gemm_e16_exp) out[n++] = pb("EXPE", 1);
    if (k->tmode == KLJIT_TEMPERATURE_RUNTIME) out[n++] = ps("TMODE", "runtime");
    if (k->topk > 0) { /* the sparse teacher's support, read in the epilogue */
      out[n++] = pi("TOPK", k->topk);
      out[n++] = ps("IDT", names_dtype_tag(k->idt));
      if (k->gemm_e16) { /* its values: the loss's cross term */
        out[n++] = ps("VDT", names_dtype_tag(k->gemm_stats_tdt));
        out[n++] = ps("VALUES", k->values);
      }
      if (k->gemm_stats_own) out[n++] = pb("OWN", 1);
    }
  }
  if (k->gemm_gop) {
    out[n++] = pb("GOP", 1);
    out[n++] = pi("FW", k->gemm_gop_fw);
    if (k->gemm_gop_pdt) out[n++] = ps("PDT", names_dtype_tag(k->gemm_gop_pdt));
    if (k->gemm_gop_regs) out[n++] = pb("GRS", 1);
  }
  return n;
}

size_t kspec_params(const kspec *k, render_param out[KSPEC_MAX_PARAMS]) {
  if (k->family == KSPEC_GEMM_SM90) return gemm_params(k, out);
  size_t n = 0;
  out[n++] = pi("V", k->v);
  out[n++] = pi("LD", k->ld);
  out[n++] = ps("TMODE", names_tmode(k->tmode));
  /* A run-time temperature must not leak into the source (one module serves every T). */
  out[n++] = pn("T", k->tmode == KLJIT_TEMPERATURE_CONSTANT ? k->t : 1.0);
  if (k->family == KSPEC_DENSE_ROWS) {
    out[n++] = pi("THREADS", k->threads);
    out[n++] = pi("SPLIT", k->split);
    out[n++] = pi("CLUSTER", k->cluster);
    out[n++] = pi("NV", k->nv);
    out[n++] = pi("LDG", k->ldg);
    out[n++] = pb("INPLACE", k->inplace);
    out[n++] = ps("LOGIT", names_dtype_tag(k->logit));
    out[n++] = ps("GRAD", names_dtype_tag(k->grad));
    out[n++] = ps("TEACHER", k->teacher);
    out[n++] = ps("TDT", names_dtype_tag(k->tdt));
    out[n++] = pb("BIAS", k->bias);
    out[n++] = ps("BDT", names_dtype_tag(k->bdt));
    out[n++] = pb("TT_SAME", k->tt_same);
    out[n++] = pn("TT", k->tt_same ? 1.0 : k->tt);
    out[n++] = pn("EPS", k->eps);
    out[n++] = pb("CHECK", k->check);
    if (k->tld && k->tld != k->v) out[n++] = pi("TLD", k->tld);
    if (k->softcap > 0.0) out[n++] = pn("SOFTCAP", k->softcap);
    if (k->tsoftcap > 0.0) out[n++] = pn("TSOFTCAP", k->tsoftcap);
    if (k->hard > 0.0) out[n++] = pn("HARD", k->hard), out[n++] = pb("T2", k->t2);
    if (k->soft1 != 0.0) out[n++] = pn("SOFT", 1.0 + k->soft1);
    if (k->div) out[n++] = ps("DIV", k->div), out[n++] = pn("BETA", k->beta);
    if (k->tchunk) out[n++] = pb("TCHUNK", 1);
    if (k->tbdt) out[n++] = ps("TBDT", names_dtype_tag(k->tbdt));
    if (k->ht) out[n++] = pi("HT", k->ht), out[n++] = ps("TXDT", names_dtype_tag(k->txdt));
    if (k->div && k->sharded) out[n++] = pb("SHARDED", 1);
    if (k->hard > 0.0 && k->offset > 0) out[n++] = pi("VOFF", k->offset);
    if (k->div && k->alpha > 0.0) out[n++] = pn("ALPHA", k->alpha);
    if (k->roww) out[n++] = pb("ROWW", 1);
    if (k->hard > 0.0 && k->lsmooth > 0.0) {
      out[n++] = pn("LSMOOTH", k->lsmooth);
      if (k->vtot && k->vtot != k->v) out[n++] = pi("VTOT", k->vtot); /* its uniform's V */
    }
    if (k->hard > 0.0 && k->zloss > 0.0) out[n++] = pn("ZLOSS", k->zloss);
    if (k->merge_block) out[n++] = ps("MERGE", "block");
    if (k->etile) out[n++] = pi("ETILE", k->etile);
    if (k->part) out[n++] = ps("PART", k->part);
  } else if (k->family == KSPEC_SPARSE_ROWS) {
    out[n++] = pi("THREADS", k->threads);
    out[n++] = pi("SPLIT", k->split);
    out[n++] = pi("LDG", k->ldg);
    out[n++] = pb("INPLACE", k->inplace);
    out[n++] = ps("LOGIT", names_dtype_tag(k->logit));
    out[n++] = ps("GRAD", names_dtype_tag(k->grad));
    out[n++] = pi("K", k->topk);
    out[n++] = ps("IDT", names_dtype_tag(k->idt));
    out[n++] = ps("VDT", names_dtype_tag(k->tdt));
    out[n++] = ps("VALUES", k->values);
    out[n++] = ps("TAIL", k->tail);
    out[n++] = pb("BIAS", k->bias);
    out[n++] = ps("BDT", names_dtype_tag(k->bdt));
    out[n++] = pn("EPS", k->eps);
    out[n++] = pb("CHECK", k->check);
    out[n++] = pi("VTOT", k->vtot ? k->vtot : k->v);
    out[n++] = pi("OFFSET", k->offset);
    if (k->softcap > 0.0) out[n++] = pn("SOFTCAP", k->softcap);
    if (k->hard > 0.0) out[n++] = pn("HARD", k->hard), out[n++] = pb("T2", k->t2);
    if (k->soft1 != 0.0) out[n++] = pn("SOFT", 1.0 + k->soft1);
    if (k->div) out[n++] = ps("DIV", k->div), out[n++] = pn("BETA", k->beta);
    if (k->div && k->sharded) out[n++] = pb("SHARDED", 1);
    if (k->roww) out[n++] = pb("ROWW", 1);
    if (k->div && k->alpha > 0.0) out[n++] = pn("ALPHA", k->alpha);
    if (k->hard > 0.0 && k->lsmooth > 0.0) out[n++] = pn("LSMOOTH", k->lsmooth);
    if (k->hard > 0.0 && k->zloss > 0.0) out[n++] = pn("ZLOSS", k->zloss);
    if (k->merge_block) out[n++] = ps("MERGE", "block");
    if (k->etile) out[n++] = pi("ETILE", k->etile);
  } else {
    out[n++] = ps("GRAD", names_dtype_tag(k->grad));
    out[n++] = pi("LDG", k->ldg);
    out[n++] = ps("OUT", names_dtype_tag(k->out));
    out[n++] = ps("REDUCTION", k->reduction);
    out[n++] = pb("T2", k->t2);
    out[n++] = pi("VTOT", k->vtot ? k->vtot : k->v);
  }
  return n;
}

kljit_status kspec_render(const kspec *k, strbuf *out) {
  return kspec_render_iface(k, out, NULL);
}

kljit_status kspec_render_iface(const kspec *k, strbuf *out, strbuf *manifest) {
  render_param params[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, params);
  return render_template_iface(kspec_template(k), params, n, out, manifest);
}

void kspec_name(const kspec *k, const char *source, char name[64]) {
  char hex[65];
  sha256_hex(source, strlen(source), hex);
  snprintf(name, 64, "%s-%.12s", family_name(k), hex);
}

/* ---- the canonical key -------------------------------------------------------------------- */

static void key_put(kspec_key *o, const char *s, size_t n) {
  if (o->len + n < KSPEC_KEY_MAX) memcpy(o->text + o->len, s, n);
  o->len += n; /* past the buffer: kspec_key_of fails */
}

static void key_uint(kspec_key *o, uint64_t v) {
  char d[20]; /* 2^64 has 20 digits */
  size_t n = 0;
  do {
    d[sizeof d - ++n] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  key_put(o, d + sizeof d - n, n);
}

int kspec_key_of(const kspec *k, kspec_key *out) {
  render_param p[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, p);
  const char *t = kspec_template(k);
  out->len = 0;
  key_put(out, t, strlen(t));
  for (size_t i = 0; i < n; i++) {
    key_put(out, " ", 1);
    key_put(out, p[i].key, strlen(p[i].key));
    switch (p[i].kind) {
      case RP_INT:
        key_put(out, p[i].i < 0 ? "=i-" : "=i", p[i].i < 0 ? 3 : 2);
        key_uint(out, p[i].i < 0 ? -(uint64_t)p[i].i : (uint64_t)p[i].i);
        break;
      case RP_BOOL:
        key_put(out, p[i].i ? "=b1" : "=b0", 3);
        break;
      case RP_NUM: { /* the bits: every double, -0.0 and NaNs included, its own key */
        uint64_t bits;
        memcpy(&bits, &p[i].d, sizeof bits);
        char hex[18] = "=x";
        for (int h = 0; h < 16; h++) hex[2 + h] = "0123456789abcdef"[bits >> (60 - 4 * h) & 15];
        key_put(out, hex, sizeof hex);
        break;
      }
      case RP_STR: { /* length-prefixed: no value can run into the next parameter */
        if (!p[i].s) { /* which the renderer refuses: not the empty string's key */
          key_put(out, "=z", 2);
          break;
        }
        const char *v = p[i].s;
        const size_t len = strlen(v);
        key_put(out, "=s", 2);
        key_uint(out, len);
        key_put(out, ":", 1);
        key_put(out, v, len);
        break;
      }
    }
  }
  if (out->len >= KSPEC_KEY_MAX) return -1;
  out->text[out->len] = '\0';
  return 0;
}
