/* SPDX-License-Identifier: Apache-2.0 */
/* unit_variants.c — the row-kernel variants of issue 29 render, declare the kernels their plans
 * launch, and compile with NVRTC for sm_80 and sm_90 through kljit_precompile (kljit's own
 * options) into a fresh directory: the online teacher's checked mode, and the top-K teacher's
 * reverse KL and JSD (both tails; unsharded and on a shard, whose second exchange round has a
 * kernel of its own). A handful of modules each, so seconds; the every-variant enumeration
 * (unit.kernels.every_variant_compiles_for_sm80_and_sm90) compiles them among all the others.
 * Needs NVRTC, no GPU. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "problem.h"
#include "recipe.h"

typedef struct counts {
  int compiled, reports;
} counts;

static void count(const kljit_module_report *m, void *user) {
  counts *c = user;
  c->reports++, c->compiled += m->compiled;
  printf("  sm_%d %s %s (%.0f ms)\n", m->arch, m->name, m->compiled ? "compiled" : "cached",
         m->compile_ms);
}

/* The rows module's manifest of `pb` as a context of the default options plans it for sm_90
 * (prob_estimate, then the recipe). */
static int rows_manifest(const kljit_problem *pb, strbuf *src, strbuf *manifest) {
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  const prob_tuning t = prob_estimate(pb, 90, &o);
  recipe r;
  TH_OK(recipe_make(pb, &t, &o, 90, 132, &r));
  TH_OK(kspec_render_iface(&r.geom.rows, src, manifest));
  return TH_PASS;
}

/* kljit_plan_check, then every module of the plans for sm_80 and sm_90 compiled into dir. */
static int compiles_in(const kljit_problem *pb, const char *dir) {
  TH_OK(kljit_plan_check(pb));
  for (int arch = 80; arch <= 90; arch += 10) {
    counts c = {0, 0};
    TH_OK(kljit_precompile(pb, arch, dir, 0, count, &c));
    TH_CHECK(c.reports >= 2 && c.compiled >= 1);
  }
  return TH_PASS;
}

static int online_in(const char *dir) {
  for (int k = 0; k < 3; k++) {
    kljit_problem pb = KLJIT_PROBLEM_INIT;
    pb.vocab = k == 2 ? 32001 : 1000, pb.hidden = 64;
    pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = k ? 77 : 2048;
    pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = k == 1 ? KLJIT_FP32 : KLJIT_BF16;
    pb.flags = KLJIT_FLAG_CHECK_INPUTS | (k != 1 ? KLJIT_FLAG_TEACHER_BIAS : 0u);
    if (k == 2) pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5, pb.teacher_vocab = 32064;
    if (k == 2) pb.flags |= KLJIT_FLAG_ROW_WEIGHTS; /* the same check reads the weights */
    strbuf src = {0}, man = {0};
    if (rows_manifest(&pb, &src, &man) != TH_PASS) return TH_FAIL;
    printf("%s", man.data);
    /* the check takes the input, the head (and the bias) by their roles, and the call's rows */
    const char *const check = strstr(man.data, "kl_dense_check check");
    TH_CHECK(check && strstr(check, "teacher_input:ptr teacher_weight:ptr"));
    TH_CHECK(strstr(check, "rows:i64") && strstr(check, "check_flag:ptr"));
    TH_CHECK(!strstr(check, " teacher:ptr") || strstr(check, "\n") < strstr(check, " teacher:"));
    TH_CHECK((strstr(check, "teacher_bias:ptr") != NULL) == (k != 1));
    TH_CHECK((strstr(check, "row_weights:ptr") != NULL) == (k == 2));
    char ht[32];
    snprintf(ht, sizeof ht, "#define HT %lld", (long long)pb.teacher_hidden);
    TH_CHECK(strstr(src.data, ht));
    sb_free(&src), sb_free(&man);
    if (compiles_in(&pb, dir) != TH_PASS) return TH_FAIL;
  }
  /* unchecked, the online teacher's source has no check and no HT */
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 1000, pb.hidden = 64, pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN;
  pb.teacher_hidden = 77;
  strbuf src = {0}, man = {0};
  if (rows_manifest(&pb, &src, &man) != TH_PASS) return TH_FAIL;
  TH_CHECK(!strstr(man.data, "kl_dense_check") && !strstr(src.data, "HT="));
  sb_free(&src), sb_free(&man);
  return TH_PASS;
}
static int online_teacher_checked_mode_renders_and_compiles(void) {
  return th_in_tmpdir("unit-variants", online_in);
}

/* The top-K teacher's reverse KL and JSD: both tails, both value forms, 16-bit and fp32
 * logits, CE mixing and a softcap, K = 1 and K = 1024, a shard that is not the first (no tail
 * term of its own) and the first one: each plans the sums kernel of the second round, a RENORM
 * stats pass keeps the support's own (max, sum-exp), and everything compiles. */
static int topk_in(const char *dir) {
  for (int k = 0; k < 6; k++) {
    kljit_problem pb = KLJIT_PROBLEM_INIT;
    pb.vocab = k == 5 ? 151936 : 32000, pb.hidden = 64;
    pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = k == 4 ? 1 : k == 5 ? 1024 : 100;
    pb.teacher_dtype = k == 2 ? KLJIT_BF16 : KLJIT_FP32;
    pb.tail = k % 2 ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET;
    pb.topk_values = k % 3 == 1 ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
    pb.divergence = k % 3 == 0 ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_JSD;
    pb.beta = pb.divergence == KLJIT_DIVERGENCE_JSD ? 0.5 : 0.0;
    pb.input_dtype = pb.weight_dtype = k == 1 ? KLJIT_FP32 : k == 2 ? KLJIT_FP16 : KLJIT_BF16;
    if (k == 2) pb.flags |= KLJIT_FLAG_NATIVE_LOGITS | KLJIT_FLAG_CHECK_INPUTS;
    if (k == 1 || k == 4) pb.hard_weight = 0.5, pb.softcap = 30.0, pb.topk_id_dtype = KLJIT_INT32;
    if (k == 3 || k == 4) { /* a shard: the second (no tail term) or the first (k = 4) */
      pb.vocab_total = 2 * pb.vocab, pb.shards = 2, pb.vocab_offset = k == 3 ? pb.vocab : 0;
    }
    strbuf src = {0}, man = {0};
    if (rows_manifest(&pb, &src, &man) != TH_PASS) return TH_FAIL;
    TH_CHECK(strstr(man.data, "kl_sparse_sums sums") && strstr(man.data, "kl_sparse_fused fused"));
    TH_CHECK(strstr(src.data, pb.divergence == KLJIT_DIVERGENCE_JSD ? "DIV=jsd" : "DIV=reverse"));
    TH_CHECK((strstr(src.data, "SHARDED=true") != NULL) == (pb.shards == 2));
    TH_CHECK((strstr(src.data, "#define OWNON 1") != NULL) == (pb.tail == KLJIT_TAIL_RENORM));
    TH_CHECK(strstr(src.data, "#define BITMAP 1")); /* both tails mark the support */
    sb_free(&src), sb_free(&man);
    if (compiles_in(&pb, dir) != TH_PASS) return TH_FAIL;
  }
  /* the forward KL's source has none of it */
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 32000, pb.hidden = 64, pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 100;
  pb.tail = KLJIT_TAIL_RENORM;
  strbuf src = {0}, man = {0};
  if (rows_manifest(&pb, &src, &man) != TH_PASS) return TH_FAIL;
  TH_CHECK(!strstr(man.data, "kl_sparse_sums") && !strstr(src.data, "DIV="));
  TH_CHECK(strstr(src.data, "#define BITMAP 0") && strstr(src.data, "#define OWNON 0"));
  sb_free(&src), sb_free(&man);
  /* TAIL_NONE takes the forward KL only */
  pb.tail = KLJIT_TAIL_NONE, pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
  TH_STATUS(kljit_plan_check(&pb), KLJIT_ERR_UNSUPPORTED);
  TH_CHECK(strstr(kljit_last_error(), "KLJIT_TAIL_BUCKET"));
  return TH_PASS;
}
static int topk_reverse_kl_and_jsd_render_and_compile(void) {
  return th_in_tmpdir("unit-variants", topk_in);
}

static const th_case cases[] = {
    {"topk_reverse_kl_and_jsd_render_and_compile", topk_reverse_kl_and_jsd_render_and_compile},
    {"online_teacher_checked_mode_renders_and_compiles",
     online_teacher_checked_mode_renders_and_compiles},
};
TH_MAIN(cases)
