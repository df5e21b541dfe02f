/* SPDX-License-Identifier: Apache-2.0 */
/* unit_kiface.c — kernel interfaces (src/kiface.c, templates/iface.cu.lua) without a GPU: every
 * kernel a plan can load declares a manifest that agrees with its CUDA signature and launch
 * bounds and marshals each argument from the kargs field of its role; the records a plan's
 * modules declare agree and size its buffers; a cached module whose manifest disagrees with
 * the template's is refused, naming the kernel and the argument, or the record. */
#include <ctype.h>
#include <limits.h>
#include <sys/stat.h>

#include "gemm_sm90.h"
#include "harness.h"
#include "jit.h"
#include "kiface.h"
#include "kljit_experimental.h"
#include "layout.h"
#include "problem.h"
#include "recipe.h"

/* ---- the problems: every family and variant a plan can load ----------------------------- */

enum { N_PROBLEMS = 11 };

/* Problem i < 8: dense probs / logprobs / logits and sparse top-K, with and without bias and
 * checked mode, for sm_80 (two-pass) and sm_90 with the cluster variant where it fits; 8 and
 * 9: a vocabulary shard with the reverse KL and CE mixing, and with the JSD and the online
 * teacher with its bias, checked (the sums kernel, the teacher bias role, the check of the
 * online teacher's input and head); 10: the top-K JSD on a shard (its sums kernel). */
static int problem_of(int i, kljit_problem *out) {
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
  *out = pb;
  return TH_PASS;
}

static int geometry_of(int i, prob_geometry *g) {
  kljit_problem pb;
  if (problem_of(i, &pb) != TH_PASS) return TH_FAIL;
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  prob_tuning t = prob_estimate(&pb, 90, &o);
  /* the cluster variant for the dense teachers of the small vocabulary, as KLJIT_ROW_KERNEL=
   * cluster would pick it on sm_90 */
  if (!(i & 4) && i < 8 && pb.teacher != KLJIT_TEACHER_SPARSE_TOPK)
    t.cluster = t.split = 8, t.nv = 8;
  recipe r;
  TH_OK(recipe_make(&pb, &t, &o, 90, 132, &r));
  *g = r.geom;
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
  const size_t n = strlen(t);
  if (n >= 7 && strcmp(t + n - 7, "kl_tmap") == 0) return KIFACE_TMAP;
  if (strcmp(t, "int") == 0) return KIFACE_I32;
  if (strcmp(t, "i64") == 0) return KIFACE_I64;
  if (strcmp(t, "float") == 0) return KIFACE_F32;
  return 0;
}

/* kargs with every field set to a value that names its role: role r (KIFACE_ROLES order) holds
 * 1000 + r, as a pointer, an integer, a float, or a tensor map's first word. */
static void number_ptr(kiface_ptr *f, int v) { *f = (const void *)(uintptr_t)v; }
static void number_i32(kiface_i32 *f, int v) { *f = v; }
static void number_i64(kiface_i64 *f, int v) { *f = v; }
static void number_f32(kiface_f32 *f, int v) { *f = (float)v; }
static void number_tmap(kiface_tmap *f, int v) { f->opaque[0] = (cuuint64_t)v; }
static kargs numbered_args(void) {
  kargs k;
  memset(&k, 0, sizeof k);
  int r = 0;
#define NUMBER_(role, kind) number_##kind(&k.role, 1000 + r++);
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
    case KIFACE_TMAP: /* by value: the driver copies the map it points at, 64-byte aligned */
      return ((const CUtensorMap *)param)->opaque[0] == (cuuint64_t)want &&
             (uintptr_t)param % 64 == 0;
  }
  return 0;
}

/* The launch bounds written before kernel `k`'s name in `src` are its manifest's: its
 * threads, and its cluster dims exactly when it declares a cluster. */
static int bounds_match(const char *src, const kiface_kernel *k) {
  char name[64], want[160];
  snprintf(name, sizeof name, "\n%s(", k->name);
  const char *at = strstr(src, name);
  if (!at) return 0;
  const char *line = at; /* the '\n' that ends the line before the name's */
  while (line > src && line[-1] != '\n') line--;
  char cl[48] = "";
  if (k->cluster) snprintf(cl, sizeof cl, "__cluster_dims__(%u, 1, 1) ", k->cluster);
  snprintf(want, sizeof want, "extern \"C\" __global__ void %s__launch_bounds__(%u", cl,
           k->threads);
  return strncmp(line, want, strlen(want)) == 0 &&
         (line[strlen(want)] == ')' || line[strlen(want)] == ',');
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
    if (!bounds_match(src.data, kn)) {
      fprintf(stderr, "%s: its launch bounds are not threads=%u cluster=%u\n", kn->name,
              kn->threads, kn->cluster);
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
                       : s == KSTEP_GEMM ? 0 /* its own modules, below */
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
  /* the generated GEMM: tensor maps by value, in clusters of 2 or none */
  for (int i = 0; i < 2; i++) {
    jgemm_variant v = jgemm_default(KLJIT_BF16, KLJIT_FP32, 0);
    if (i) v.cluster = 2, v.schedule = 'p', v.bn = 128, v.stages = 6;
    const kspec k = jgemm_spec(&v);
    int steps[KSTEP_COUNT] = {0};
    if (check_module(&k, &kernels, steps) != TH_PASS) return TH_FAIL;
    TH_CHECK(steps[KSTEP_GEMM] == 1);
  }
  printf("%d kernels of %d problems (%d cluster, %d sparse) and 2 GEMMs agree with their "
         "manifests\n", kernels, N_PROBLEMS, cluster, sparse);
  TH_CHECK(cluster > 0 && sparse > 0);
  return TH_PASS;
}

/* The records of every plan's modules: both declare the header alike (kiface_layout_of checks
 * it), the rows their pass-1 record and saved statistics; the public query gives the same sizes
 * for the problem (the cluster variant's modules included) and names the slots; the saved
 * statistics are 8 floats a row exactly with the CE or a divergence other than the forward KL,
 * else 4 (the rule plan.c and the binding restated before the templates declared it). */
static int every_plans_records_are_declared_once_and_agree_with_the_query(void) {
  for (int i = 0; i < N_PROBLEMS; i++) {
    kljit_problem pb;
    prob_geometry g;
    if (problem_of(i, &pb) != TH_PASS || geometry_of(i, &g) != TH_PASS) return TH_FAIL;
    const kspec *specs[] = {&g.rows, &g.helpers};
    kiface_layout l;
    TH_OK(jit_layout(specs, 2, &l));
    TH_CHECK(l.hdr > 0 && l.part > 0 && l.rowstat > 0);
    TH_CHECK(kiface_saved_floats(&l, 10) == l.hdr + 10 * l.rowstat);
    const int extended = pb.hard_weight != 0.0 || prob_divergence_rows(&pb) != NULL;
    TH_CHECK(l.rowstat == (extended ? 8 : 4));
    kljit_layout q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    TH_OK(kljit_problem_layout(&pb, &q));
    TH_CHECK(q.header_floats == l.hdr && q.record_floats == l.part &&
             q.saved_row_floats == l.rowstat);
    const int sparse = pb.teacher == KLJIT_TEACHER_SPARSE_TOPK;
    TH_CHECK(strcmp(q.record_slots, sparse ? "m d_on d_off mh dh mo dno S" : "m d sp mt dt mh dh S") == 0);
    TH_CHECK(strncmp(q.saved_row_slots, "lse ", 4) == 0);
    if (i == 0 || i == 8)
      printf("problem %d: header %d, record %d {%s}, saved row %d {%s}\n", i, q.header_floats,
             q.record_floats, q.record_slots, q.saved_row_floats, q.saved_row_slots);
  }
  /* the top-K teacher's smoothed CE: pass 1 sums z' into a ninth slot, zs */
  for (int i = 0; i < N_PROBLEMS; i++) {
    kljit_problem pb;
    if (problem_of(i, &pb) != TH_PASS) return TH_FAIL;
    if (pb.teacher != KLJIT_TEACHER_SPARSE_TOPK) continue;
    pb.hard_weight = 0.5, pb.label_smoothing = 0.1;
    kljit_layout q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    TH_OK(kljit_problem_layout(&pb, &q));
    TH_CHECK(q.record_floats == 9 && strcmp(q.record_slots, "m d_on d_off mh dh mo dno S zs") == 0);
    TH_CHECK(q.saved_row_floats == 8); /* backward needs no sum of z' */
    break;
  }
  /* bad arguments: a clear status and message, nothing written */
  kljit_problem pb;
  if (problem_of(0, &pb) != TH_PASS) return TH_FAIL;
  kljit_layout q;
  memset(&q, 0x5a, sizeof q);
  q.struct_size = sizeof q - 1;
  TH_STATUS(kljit_problem_layout(&pb, &q), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "struct_size") && q.header_floats == 0x5a5a5a5a);
  TH_STATUS(kljit_problem_layout(&pb, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  q.struct_size = sizeof q;
  pb.vocab = 1;
  TH_CHECK(kljit_problem_layout(&pb, &q) != KLJIT_SUCCESS && q.header_floats == 0x5a5a5a5a);
  TH_CHECK(strstr(kljit_last_error(), "kljit_problem_layout") != NULL);
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
  TH_OK(kiface_parse("kl_a fused threads=256 z:ptr row0:i64\nkl_b setup threads=1024 "
                     "temperature:f32\nrecord part 8 m d\n", "t", &m));
  TH_CHECK(m.n == 2 && m.kernel[0].nargs == 2 && m.kernel[1].step == KSTEP_SETUP);
  TH_CHECK(m.kernel[0].threads == 256 && m.kernel[0].cluster == 0 && m.kernel[1].smem == 0);
  TH_CHECK(m.nrec == 1 && kiface_record_find(&m, "part")->floats == 8 &&
           kiface_record_find(&m, "part")->nslots == 2 && !kiface_record_find(&m, "hdr"));
  TH_OK(kiface_parse("kl_g gemm threads=384 cluster=2 smem=197632 map_a:tmap alpha:f32\n", "t",
                     &m));
  TH_CHECK(m.kernel[0].cluster == 2 && m.kernel[0].smem == 197632 && m.kernel[0].nargs == 2);
  TH_STATUS(kiface_parse("kl_a fused threads=256 z:ptr zz:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "kl_a") && strstr(kljit_last_error(), "zz"));
  TH_STATUS(kiface_parse("kl_a fused threads=256 z:ptr row0:i32\n", "t", &m),
            KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "argument 1 (row0)"));
  TH_STATUS(kiface_parse("kl_a fused threads=256 map_a:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("kl_a fuse threads=256 z:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("kl_a fused threads=256 z:ptr\nkl_b fused threads=256 z:ptr\n", "t",
                         &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("kl_a fused threads=256 z\n", "t", &m), KLJIT_ERR_TEMPLATE);
  /* launch attributes: threads is required; known keys only; counts in range */
  TH_STATUS(kiface_parse("kl_a fused z:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "kl_a declares no block size"));
  TH_STATUS(kiface_parse("kl_a fused threads=256 blocks=2 z:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "blocks=2"));
  TH_STATUS(kiface_parse("kl_a fused threads=2048 z:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("kl_a fused threads=-1 z:ptr\n", "t", &m), KLJIT_ERR_TEMPLATE);
  /* records: a count of floats, no more slots than floats, no slot twice, no record twice */
  TH_STATUS(kiface_parse("record part x m\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "record part"));
  TH_STATUS(kiface_parse("record part 1 m d\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("record part 4 m m\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_STATUS(kiface_parse("record part 4 m\nrecord part 4 m\n", "t", &m), KLJIT_ERR_TEMPLATE);
  TH_CHECK(strstr(kljit_last_error(), "declared twice"));
  TH_STATUS(kiface_parse("record\n", "t", &m), KLJIT_ERR_TEMPLATE);
  return TH_PASS;
}

/* Two modules of one plan that declare a record differently, or a plan none of whose modules
 * declares a record the library sizes buffers by, are refused naming the record. */
static int records_the_modules_disagree_on_or_lack_are_refused(void) {
  kiface_manifest a, b;
  const char *names[] = {"rows", "helpers"};
  const kiface_manifest *both[] = {&a, &b};
  kiface_layout l;
  TH_OK(kiface_parse("record hdr 8 x y\nrecord part 8 m\nrecord rowstat 4 lse\n", "rows", &a));
  TH_OK(kiface_parse("record hdr 8 x y\n", "helpers", &b));
  TH_OK(kiface_layout_of(both, names, 2, &l));
  TH_CHECK(l.hdr == 8 && l.part == 8 && l.rowstat == 4);
  TH_OK(kiface_parse("record hdr 8 x z\n", "helpers", &b));
  TH_STATUS(kiface_layout_of(both, names, 2, &l), KLJIT_ERR_TEMPLATE);
  printf("%s\n", kljit_last_error());
  TH_CHECK(strstr(kljit_last_error(), "record hdr") && strstr(kljit_last_error(), "helpers"));
  TH_OK(kiface_parse("record hdr 8 x y\nrecord part 8 m\n", "rows", &a));
  TH_OK(kiface_parse("record hdr 8 x y\n", "helpers", &b));
  TH_STATUS(kiface_layout_of(both, names, 2, &l), KLJIT_ERR_TEMPLATE);
  printf("%s\n", kljit_last_error());
  TH_CHECK(strstr(kljit_last_error(), "declares record rowstat"));
  return TH_PASS;
}

/* An entry's metadata holding `man` as jit.c stores it (kernel= and record= lines), after
 * `head`; `from`/`to` (may be NULL) replaced once in the manifest's text first. */
static int meta_of(const char *head, const char *man, const char *from, const char *to,
                   strbuf *meta) {
  meta->len = 0;
  TH_OK(sb_printf(meta, "%s", head));
  char text[16384];
  TH_CHECK(strlen(man) < sizeof text - 64);
  snprintf(text, sizeof text, "%s", man);
  if (from) {
    char *at = strstr(text, from);
    TH_CHECK(at && strlen(from) == strlen(to));
    memcpy(at, to, strlen(to));
  }
  for (const char *l = text; *l;) {
    const char *nl = strchr(l, '\n');
    const int n = (int)(nl - l);
    if (strncmp(l, "record ", 7) == 0)
      TH_OK(sb_printf(meta, "record=%.*s\n", n - 7, l + 7));
    else
      TH_OK(sb_printf(meta, "kernel=%.*s\n", n, l));
    l = nl + 1;
  }
  return TH_PASS;
}

/* A cache entry stored under the very key of a module, holding a manifest in which one
 * argument of one kernel, its block size, or a record's size differs, as a stale or foreign
 * build would leave it: refused naming the kernel and argument, or the record. */
static int stale_cubin_with_another_manifest_is_refused_in(const char *dir) {
  prob_geometry g;
  if (geometry_of(4, &g) != TH_PASS) return TH_FAIL;
  strbuf src = {0}, man = {0}, key = {0}, meta = {0};
  TH_OK(kspec_render_iface(&g.rows, &src, &man));
  TH_OK(jit_key_text(src.data, 80, &key));
  char *rw = (char *)dir;
  const cache_config cfg = {NULL, 0, rw, 0, 0};
  jit_bin b;
  static const struct {
    const char *from, *to, *want[4];
  } stale[] = {
      /* kl_dense_stats' argument 1 (teacher) made an i64 */
      {" teacher:ptr", " teacher:i64", {"kl_dense_stats", "argument 1", "teacher:i64",
                                         "teacher:ptr"}},
      {"fused threads=2", "fused threads=9", {"kl_dense_fused", "launch", "threads=9", NULL}},
      {"record part 8 ", "record part 9 ", {"record part", "9 floats", "8 in this build", NULL}},
      {"record rowstat 4 lse sp", "record rowstat 4 lse xx",
       {"record rowstat, slot 1", "'xx'", "'sp'", NULL}},
  };
  for (size_t i = 0; i < sizeof stale / sizeof stale[0]; i++) {
    if (meta_of("name=stale\ntemplate=dense_rows.cu.lua\narch=sm_80\n", man.data,
                stale[i].from, stale[i].to, &meta) != TH_PASS)
      return TH_FAIL;
    TH_OK(cache_store_in(dir, key.data, meta.data, "\177ELFstale", 9));
    TH_STATUS(jit_build(&g.rows, 80, &cfg, &b), KLJIT_ERR_CACHE);
    const char *msg = kljit_last_error();
    printf("%s\n", msg);
    for (int w = 0; w < 4 && stale[i].want[w]; w++) TH_CHECK(strstr(msg, stale[i].want[w]));
  }
  /* the same entry with the template's own manifest is served */
  if (meta_of("name=fresh\n", man.data, NULL, NULL, &meta) != TH_PASS) return TH_FAIL;
  TH_OK(cache_store_in(dir, key.data, meta.data, "\177ELFfresh", 9));
  TH_OK(jit_build(&g.rows, 80, &cfg, &b));
  TH_CHECK(b.source == CACHE_HIT && b.cubin.len == 9 && strcmp(b.manifest.data, man.data) == 0);
  jit_bin_free(&b);
  /* an entry without any manifest (a format-1 writer), or without its records (a format-2
   * writer's kernel= lines alone), is refused too */
  TH_OK(cache_store_in(dir, key.data, "name=old\n", "\177ELFold", 7));
  TH_STATUS(jit_build(&g.rows, 80, &cfg, &b), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), "not in the cached manifest"));
  sb_free(&meta);
  if (meta_of("name=old\n", man.data, NULL, NULL, &meta) != TH_PASS) return TH_FAIL;
  char *rec = strstr(meta.data, "record=");
  TH_CHECK(rec);
  *rec = '\0';
  TH_OK(cache_store_in(dir, key.data, meta.data, "\177ELFold", 7));
  TH_STATUS(jit_build(&g.rows, 80, &cfg, &b), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), "record hdr is not in the cached manifest"));
  sb_free(&src);
  sb_free(&man);
  sb_free(&key);
  sb_free(&meta);
  return TH_PASS;
}
static int stale_cubin_with_another_manifest_is_refused(void) {
  return th_in_tmpdir("unit-kiface", stale_cubin_with_another_manifest_is_refused_in);
}

/* The bar of the records' declaration: the stride of the pass-1 record changed in its one
 * declaration alone (iface.cu.lua's DENSE_PART, which the dense rows and the logits GEMM's
 * statistics epilogue share; a copy of the templates read through KLJIT_TEMPLATE_DIR) reaches
 * the kernels (PART_FLOATS), the manifest and what C sizes buffers by (jit_layout), with
 * nothing else edited; and a cached cubin of the unchanged template whose manifest says the other stride is
 * refused at load, naming the record. */
static int record_stride_changed_in_the_template_in(const char *dir) {
  char tdir[PATH_MAX], path[PATH_MAX], cdir[PATH_MAX];
  th_path_in(tdir, dir, "templates");
  th_path_in(cdir, dir, "cache");
  TH_CHECK(mkdir(tdir, 0700) == 0 && mkdir(cdir, 0700) == 0);
  static const char from[] = "M.DENSE_PART = { name = \"part\", floats = 8,";
  static const char to[] = "M.DENSE_PART = { name = \"part\", floats = 16,";
  int edited = 0;
  for (const template_file *t = template_files; t->name; t++) {
    th_path_in(path, tdir, t->name);
    FILE *f = fopen(path, "w");
    TH_CHECK(f);
    const char *at = strcmp(t->name, "iface.cu.lua") ? NULL : strstr(t->text, from);
    if (at) {
      fwrite(t->text, 1, (size_t)(at - t->text), f);
      fputs(to, f);
      fputs(at + strlen(from), f);
      edited++;
    } else {
      fwrite(t->text, 1, t->len, f);
    }
    TH_CHECK(fclose(f) == 0);
  }
  TH_CHECK(edited == 1);
  prob_geometry g;
  if (geometry_of(4, &g) != TH_PASS) return TH_FAIL;
  const kspec *specs[] = {&g.rows, &g.helpers};
  strbuf src = {0}, man = {0}, src16 = {0}, man16 = {0}, key = {0}, meta = {0};
  TH_OK(kspec_render_iface(&g.rows, &src, &man));
  kiface_layout l8, l16;
  TH_OK(jit_layout(specs, 2, &l8));
  setenv("KLJIT_TEMPLATE_DIR", tdir, 1);
  const kljit_status r16 = kspec_render_iface(&g.rows, &src16, &man16);
  const kljit_status j16 = jit_layout(specs, 2, &l16);
  unsetenv("KLJIT_TEMPLATE_DIR");
  TH_OK(r16);
  TH_OK(j16);
  printf("stride 8: %d floats; edited template: %d floats\n", l8.part, l16.part);
  TH_CHECK(l8.part == 8 && l16.part == 16 && l16.hdr == l8.hdr && l16.rowstat == l8.rowstat);
  TH_CHECK(strstr(src.data, "PART_FLOATS = 8,") && strstr(src16.data, "PART_FLOATS = 16,"));
  TH_CHECK(strstr(man16.data, "record part 16 m d sp mt dt mh dh S\n"));
  /* the edited build's manifest stored under the unchanged template's key */
  TH_OK(jit_key_text(src.data, 80, &key));
  if (meta_of("name=stale\n", man16.data, NULL, NULL, &meta) != TH_PASS) return TH_FAIL;
  TH_OK(cache_store_in(cdir, key.data, meta.data, "\177ELFstale", 9));
  const cache_config cfg = {NULL, 0, cdir, 0, 0};
  jit_bin b;
  TH_STATUS(jit_build(&g.rows, 80, &cfg, &b), KLJIT_ERR_CACHE);
  printf("%s\n", kljit_last_error());
  TH_CHECK(strstr(kljit_last_error(), "record part is 16 floats in the cached manifest, 8 in "
                                      "this build's template"));
  sb_free(&src), sb_free(&man), sb_free(&src16), sb_free(&man16), sb_free(&key), sb_free(&meta);
  return TH_PASS;
}
static int a_record_stride_changed_in_the_template_alone_reaches_c_and_refuses_stale_cubins(
    void) {
  return th_in_tmpdir("unit-kiface-stride", record_stride_changed_in_the_template_in);
}

static const th_case cases[] = {
    {"every_kernel_signature_matches_its_manifest_and_marshals_by_role",
     every_kernel_signature_matches_its_manifest_and_marshals_by_role},
    {"every_plans_records_are_declared_once_and_agree_with_the_query",
     every_plans_records_are_declared_once_and_agree_with_the_query},
    {"dense_and_sparse_pass_two_take_their_own_teacher_roles",
     dense_and_sparse_pass_two_take_their_own_teacher_roles},
    {"manifest_with_unknown_role_or_wrong_kind_is_refused",
     manifest_with_unknown_role_or_wrong_kind_is_refused},
    {"records_the_modules_disagree_on_or_lack_are_refused",
     records_the_modules_disagree_on_or_lack_are_refused},
    {"stale_cubin_with_another_manifest_is_refused", stale_cubin_with_another_manifest_is_refused},
    {"a_record_stride_changed_in_the_template_alone_reaches_c_and_refuses_stale_cubins",
     a_record_stride_changed_in_the_template_alone_reaches_c_and_refuses_stale_cubins},
};

TH_MAIN(cases)
