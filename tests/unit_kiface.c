/* SPDX-License-Identifier: Apache-2.0 */
/* unit_kiface.c — kernel interfaces (src/kiface.c, templates/iface.cu.lua) without a GPU: every
 * kernel a plan can load declares a manifest that agrees with its CUDA signature and marshals
 * each argument from the kargs field of its role; a cached module whose manifest disagrees with
 * the template's is refused, naming the kernel and the argument. */
#include <ctype.h>
#include <limits.h>

#include "harness.h"
#include "jit.h"
#include "kiface.h"
#include "problem.h"

/* ---- the problems: every family and variant a plan can load ----------------------------- */

enum { N_PROBLEMS = 11 };

/* Problem i < 8: dense probs / logprobs / logits and sparse top-K, with and without bias and
 * checked mode, for sm_80 (two-pass) and sm_90 with the cluster variant where it fits; 8 and
 * 9: a vocabulary shard with the reverse KL and CE mixing, and with the JSD and the online
 * teacher with its bias, checked (the sums kernel, the teacher bias role, the check of the
 * online teacher's input and head); 10: the top-K JSD on a shard (its sums kernel). */
static int geometry_of(int i, prob_geometry *g) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 256;
  pb.vocab = i & 4 ? 151936 : 50257;
  const kljit_teacher_form forms[] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                      KLJIT_TEACHER_DENSE_LOGITS, KLJIT_TEACHER_SPARSE_TOPK};
  pb.teacher = forms[i % 4];
  if (pb.teacher == KLJIT_TEACHER_SPARSE_TOPK) pb.topk = 32, pb.teacher_dtype = KLJIT_FP32;
  pb.flags = i & 1 ? KLJIT_FLAG_BIAS | KLJIT_FLAG_CHECK_INPUTS : 0u;
  pb.reduction = i & 2 ? KLJIT_REDUCTION_NONE : KLJIT_REDUCTION_BATCHMEAN;
  if (i >= 8) {
    pb.vocab_total = 2 * pb.vocab, pb.vocab_offset = pb.vocab, pb.shards = 2;
    pb.divergence = i == 8 ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_JSD;
    pb.beta = i == 9 ? 0.25 : 0.0;
    if (i == 8) pb.hard_weight = 0.5;
    if (i == 10) { /* the top-K JSD on a shard, RENORM, with CE: the sparse sums kernel */
      pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 32, pb.teacher_dtype = KLJIT_FP32;
      pb.tail = KLJIT_TAIL_RENORM, pb.hard_weight = 0.5, pb.beta = 0.5;
    }
    if (i == 9) {
      pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 512;
      pb.flags = KLJIT_FLAG_TEACHER_BIAS | KLJIT_FLAG_CHECK_INPUTS; /* its check's roles */
    }
  }
  TH_OK(prob_validate(&pb, "unit_kiface"));
  prob_tuning t = prob_estimate(&pb, 132, 90);
  /* the cluster variant for the dense teachers of the small vocabulary, as KLJIT_ROW_KERNEL=
   * cluster would pick it on sm_90 */
  if (!(i & 4) && i < 8 && pb.teacher != KLJIT_TEACHER_SPARSE_TOPK)
    t.cluster = t.split = 8, t.nv = 8;
  TH_OK(prob_geometry_make(&pb, &t, g));
  return TH_PASS;
}

/* ---- the CUDA signature of a kernel in rendered source -------------------------------- */

/* The parameter list of `name` in `src` (after its `extern "C" __global__` line), split at
 * commas into at most max entries of (type, name) text; returns the count or -1. */
static int signature_params(const char *src, const char *name, char types[][64],
                            char names[][32], int max) {
  char pat[64];
  snprintf(pat, sizeof pat, "\n%s(", name);
  const char *p = strstr(src, pat);
  if (!p) return -1;
  p += strlen(pat);
  int n = 0;
  while (*p && *p != ')') {
    const char *end = p;
    while (*end && *end != ',' && *end != ')') end++;
    const char *b = p, *e = end;
    while (b < e && isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) e--;
    const char *nm = e;
    while (nm > b && (isalnum((unsigned char)nm[-1]) || nm[-1] == '_')) nm--;
    if (n == max || nm == b) return -1;
    snprintf(names[n], 32, "%.*s", (int)(e - nm), nm);
    const char *te = nm;
    while (te > b && isspace((unsigned char)te[-1])) te--;
    snprintf(types[n], 64, "%.*s", (int)(te - b), b);
    n++;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

/* The manifest kind a CUDA parameter type has. */
static kiface_kind kind_of_type(const char *t) {
  if (strchr(t, '*')) return KIFACE_PTR;
  if (strcmp(t, "int") == 0) return KIFACE_I32;
  if (strcmp(t, "i64") == 0) return KIFACE_I64;
  if (strcmp(t, "float") == 0) return KIFACE_F32;
  return 0;
}

/* kargs with every field set to a value that names its role: role r (KIFACE_ROLES order) holds
 * 1000 + r, as a pointer, an integer or a float. */
static kargs numbered_args(void) {
  kargs k;
  memset(&k, 0, sizeof k);
  int r = 0;
#define NUMBER_(role, kind) k.role = (kiface_##kind)(uintptr_t)(1000 + r++);
  KIFACE_ROLES(NUMBER_)
#undef NUMBER_
  return k;
}

static int value_is(void *param, kiface_kind kind, int want) {
  switch (kind) {
    case KIFACE_PTR: return *(const void *const *)param == (const void *)(uintptr_t)want;
    case KIFACE_I32: return *(const int32_t *)param == want;
    case KIFACE_I64: return *(const int64_t *)param == want;
    case KIFACE_F32: return *(const float *)param == (float)want;
  }
  return 0;
}

/* One module: the manifest parses, every kernel is in the source with exactly the manifest's
 * arguments (count, names where the role is the name, kinds), and marshalling hands each
 * argument its role's field. */
static int check_module(const kspec *spec, int *kernels, int steps[KSTEP_COUNT]) {
  strbuf src = {0}, man = {0};
  TH_OK(kspec_render_iface(spec, &src, &man));
  kiface_manifest m;
  TH_OK(kiface_parse(man.data, kspec_template(spec), &m));
  TH_CHECK(m.n > 0);
  const kargs k = numbered_args();
  for (int i = 0; i < m.n; i++) {
    const kiface_kernel *kn = &m.kernel[i];
    char types[KIFACE_MAX_ARGS][64], names[KIFACE_MAX_ARGS][32];
    const int n = signature_params(src.data, kn->name, types, names, KIFACE_MAX_ARGS);
    if (n != kn->nargs) {
      fprintf(stderr, "%s: the source has %d parameters, the manifest %d\n", kn->name, n,
              kn->nargs);
      return TH_FAIL;
    }
    void *params[KIFACE_MAX_ARGS];
    TH_CHECK(kiface_marshal(kn, &k, params) == n);
    for (int a = 0; a < n; a++) {
      const int role = kn->role[a];
      const kiface_kind kind = kiface_role_kind(role);
      if (kind_of_type(types[a]) != kind || !value_is(params[a], kind, 1000 + role)) {
        fprintf(stderr, "%s argument %d: '%s %s' for role %s (%s) marshals wrongly\n", kn->name,
                a, types[a], names[a], kiface_role_name(role), kiface_kind_name(kind));
        return TH_FAIL;
      }
    }
    steps[kn->step]++;
    (*kernels)++;
  }
  sb_free(&src);
  sb_free(&man);
  return TH_PASS;
}

static int every_kernel_signature_matches_its_manifest_and_marshals_by_role(void) {
  int kernels = 0, cluster = 0, sparse = 0;
  for (int i = 0; i < N_PROBLEMS; i++) {
    prob_geometry g;
    if (geometry_of(i, &g) != TH_PASS) return TH_FAIL;
    int steps[KSTEP_COUNT] = {0};
    if (check_module(&g.rows, &kernels, steps) != TH_PASS) return TH_FAIL;
    if (check_module(&g.helpers, &kernels, steps) != TH_PASS) return TH_FAIL;
    /* what the execute paths launch (plan.c's check_steps): each step once, stats and merge
     * exactly when the rows are two-pass, check exactly in checked mode, sums exactly with
     * the reverse KL or the JSD */
    for (int s = 0; s < KSTEP_COUNT; s++) {
      const int want = s == KSTEP_STATS || s == KSTEP_MERGE ? !g.tune.cluster
                       : s == KSTEP_CHECK                   ? g.rows.check
                       : s == KSTEP_SUMS ? g.rows.div != NULL && !g.tune.cluster
                                                            : 1;
      if (steps[s] != want) {
        fprintf(stderr, "problem %d: %d kernels for step %s, want %d\n", i, steps[s],
                kiface_step_name((kiface_step)s), want);
        return TH_FAIL;
      }
    }
    cluster += g.tune.cluster != 0;
    sparse += g.rows.family == KSPEC_SPARSE_ROWS;
  }
  printf("%d kernels of %d problems (%d cluster, %d sparse) agree with their manifests\n",
         kernels, N_PROBLEMS, cluster, sparse);
  TH_CHECK(cluster > 0 && sparse > 0);
  return TH_PASS;
}

/* The roles the pass-2 kernels read the teacher from, spelled out: the dense kernels take the
 * teacher where the sparse ones take ids then values. */
static int dense_and_sparse_pass_two_take_their_own_teacher_roles(void) {
  for (int i = 0; i < 4; i++) {
    prob_geometry g;
    if (geometry_of(4 + i, &g) != TH_PASS) return TH_FAIL;
    strbuf src = {0}, man = {0};
    TH_OK(kspec_render_iface(&g.rows, &src, &man));
    kiface_manifest m;
    TH_OK(kiface_parse(man.data, "rows", &m));
    const kiface_kernel *f = kiface_find(&m, KSTEP_FUSED);
    TH_CHECK(f && f->nargs > 3);
    const char *third = kiface_role_name(f->role[2]);
    printf("%s: %s\n", f->name, man.data);
    TH_CHECK(strcmp(third, i == 3 ? "teacher_ids" : "teacher") == 0);
    if (i == 3) TH_CHECK(strcmp(kiface_role_name(f->role[3]), "teacher_values") == 0);
    sb_free(&src);
    sb_free(&man);
  }
  return TH_PASS;
}

static int manifest_with_unknown_role_or_wrong_kind_is_refused(void) {
  kiface_manifest m;
  TH_OK(kiface_parse("kl_a fused z:ptr row0:i64\nkl_b setup temperature:f32\n", "t", &m));
  TH_CHECK(m.n == 2 && m.kernel[0].nargs == 2 && m.kernel[1].step == KSTEP_SETUP);
  TH_STATUS(kiface_parse("kl_a fused z:ptr zz:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "kl_a") && strstr(kljit_last_error(), "zz"));
  TH_STATUS(kiface_parse("kl_a fused z:ptr row0:i32\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "argument 1 (row0)"));
  TH_STATUS(kiface_parse("kl_a fuse z:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("kl_a fused z:ptr\nkl_b fused z:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("kl_a fused z\n", "t", &m), KLJIT_ERR_TEMPLATE);
  return TH_PASS;
}

/* A cache entry stored under the very key of a module, holding a manifest in which one
 * argument of one kernel differs, as a stale or foreign build would leave it. */
static int stale_cubin_with_another_manifest_is_refused_in(const char *dir) {
  prob_geometry g;
  if (geometry_of(4, &g) != TH_PASS) return TH_FAIL;
  strbuf src = {0}, man = {0}, key = {0}, meta = {0};
  TH_OK(kspec_render_iface(&g.rows, &src, &man));
  TH_OK(jit_key_text(src.data, 80, &key));
  /* kl_dense_fused's argument 2 (teacher) made an i64 */
  const char *line = strstr(man.data, "kl_dense_fused ");
  TH_CHECK(line);
  TH_OK(sb_printf(&meta, "name=stale\ntemplate=dense_rows.cu.lua\narch=sm_80\n"));
  for (const char *l = man.data; *l;) {
    const char *nl = strchr(l, '\n');
    const int n = (int)(nl - l);
    char buf[1024];
    snprintf(buf, sizeof buf, "%.*s", n, l);
    if (l == line) {
      char *t = strstr(buf, " teacher:ptr");
      TH_CHECK(t);
      memcpy(t, " teacher:i64", 12);
    }
    TH_OK(sb_printf(&meta, "kernel=%s\n", buf));
    l = nl + 1;
  }
  TH_OK(cache_store_in(dir, key.data, meta.data, "\177ELFstale", 9));
  char *rw = (char *)dir;
  const cache_config cfg = {NULL, 0, rw, 0};
  jit_bin b;
  TH_STATUS(jit_build(&g.rows, 80, &cfg, &b), KLJIT_ERR_CACHE);
  const char *msg = kljit_last_error();
  printf("%s\n", msg);
  TH_CHECK(strstr(msg, "kl_dense_fused") && strstr(msg, "argument 2") &&
           strstr(msg, "teacher:i64") && strstr(msg, "teacher:ptr"));
  /* the same entry with the template's own manifest is served */
  sb_free(&meta);
  TH_OK(sb_printf(&meta, "name=fresh\n"));
  for (const char *l = man.data; *l;) {
    const char *nl = strchr(l, '\n');
    TH_OK(sb_printf(&meta, "kernel=%.*s\n", (int)(nl - l), l));
    l = nl + 1;
  }
  TH_OK(cache_store_in(dir, key.data, meta.data, "\177ELFfresh", 9));
  TH_OK(jit_build(&g.rows, 80, &cfg, &b));
  TH_CHECK(b.source == CACHE_HIT && b.cubin.len == 9 && strcmp(b.manifest.data, man.data) == 0);
  jit_bin_free(&b);
  /* and an entry without any manifest (a format-1 writer) is refused too */
  TH_OK(cache_store_in(dir, key.data, "name=old\n", "\177ELFold", 7));
  TH_STATUS(jit_build(&g.rows, 80, &cfg, &b), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), "not in the cached manifest"));
  sb_free(&src);
  sb_free(&man);
  sb_free(&key);
  sb_free(&meta);
  return TH_PASS;
}
static int stale_cubin_with_another_manifest_is_refused(void) {
  return th_in_tmpdir("unit-kiface", stale_cubin_with_another_manifest_is_refused_in);
}

static const th_case cases[] = {
    {"every_kernel_signature_matches_its_manifest_and_marshals_by_role",
     every_kernel_signature_matches_its_manifest_and_marshals_by_role},
    {"dense_and_sparse_pass_two_take_their_own_teacher_roles",
     dense_and_sparse_pass_two_take_their_own_teacher_roles},
    {"manifest_with_unknown_role_or_wrong_kind_is_refused",
     manifest_with_unknown_role_or_wrong_kind_is_refused},
    {"stale_cubin_with_another_manifest_is_refused", stale_cubin_with_another_manifest_is_refused},
};

TH_MAIN(cases)
