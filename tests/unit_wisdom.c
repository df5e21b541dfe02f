/* SPDX-License-Identifier: Apache-2.0 */
/* unit_wisdom.c — wisdom (format, store, merge rules, default files), the rigor rules of
 * kljit_plan_create (through tune_choose, which needs no GPU), the tuner's candidate sets, and
 * precompiling from a wisdom file. No GPU.
 *
 * Every case points KLJIT_SYSTEM_WISDOM and KLJIT_WISDOM at its own temp directory before the
 * first use of wisdom: the store reads its default files once per process, and CTest runs each
 * case in a process of its own.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cublaslt.h"
#include "gemm.h"
#include "gemm_algo.h"
#include "gemm_sm90.h"
#include "harness.h"
#include "jit.h"
#include "kljit.h"
#include "recipe.h"
#include "tune.h"
#include "wisdom.h"

/* The options of a context that no environment steers (what planning without one takes). */
static const kljit_context_options OPT = KLJIT_CONTEXT_OPTIONS_INIT;

static const char H[] = "kljit-wisdom 1 kljit=" KLJIT_VERSION_STRING "\n";
#define GPU_A "gpu=\"NVIDIA H200\" arch=sm_90 sms=132 kljit=" KLJIT_VERSION_STRING " "
#define GPU_B "gpu=\"NVIDIA A100-SXM4-80GB\" arch=sm_80 sms=108 kljit=" KLJIT_VERSION_STRING " "
#define DENSE "V=50257 H=256 in=bf16 teacher=probs tdt=bf16 tmode=const flags=- "
#define SPARSE                                                                             \
  "V=128256 H=4096 in=bf16 teacher=topk tdt=f32 k=64 ids=i32 values=logprobs tail=bucket " \
  "tmode=runtime flags=bias,check "
#define CHOICE(c, r, ms) \
  " -> chunk_rows=" c " threads=256 split=4 cluster=0 nv=1 rigor=" r " rows=8192 ms=" ms

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 20);
  /* calloc'd: whatever fread got is terminated; a short read shows up as a failed match */
  if (buf && fread(buf, 1, (1 << 20) - 1, f) == 0 && ferror(f)) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  return buf;
}

static char *export(void) {
  /* static: GCC's -Wdangling-pointer cannot tell that the library stores a heap pointer here */
  static char *s;
  s = NULL;
  return kljit_wisdom_export_string(&s) == KLJIT_SUCCESS ? s : NULL;
}

static kljit_problem dense_problem(void) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 256, pb.vocab = 50257;
  return pb;
}

static int count_lines(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* ---- format ------------------------------------------------------------------------------ */

static int round_trip_in(const char *dir) {
  th_private_wisdom(dir);
  char text[4096];
  snprintf(text, sizeof text,
           "%s# a comment\n\n" GPU_B DENSE "bucket=8192" CHOICE("2048", "measure", "1.5") "\n"
           GPU_A SPARSE "bucket=65536" CHOICE("4096", "exhaustive", "12.25") " T=2 tt=0 "
           "eps=1e-20 reduction=sum t2=1 gw=bf16 accum=out\n"
           GPU_A DENSE "bucket=1024" CHOICE("1024", "estimate", "0") "\n",
           H);
  TH_OK(kljit_wisdom_import_string(text));
  char *first = export();
  TH_CHECK(first);
  printf("%s", first);
  TH_CHECK(strncmp(first, H, strlen(H)) == 0);
  TH_CHECK(count_lines(first, "gpu=") == 3);
  TH_CHECK(strstr(first, "T=2 tt=0 eps=1e-20 reduction=sum t2=1 gw=bf16 accum=out"));
  TH_CHECK(strstr(first, "T=1 tt=0 eps=1e-20 reduction=batchmean t2=0 gw=f32 accum=fp32"));
  TH_CHECK(strstr(first, "A100") < strstr(first, "H200")); /* sorted by GPU name first */
  char path[PATH_MAX];
  th_path_in(path, dir, "exported");
  TH_OK(kljit_wisdom_export_file(path));
  kljit_wisdom_forget();
  char *empty = export();
  TH_CHECK(empty && count_lines(empty, "gpu=") == 0);
  TH_OK(kljit_wisdom_import_file(path));
  char *second = export();
  TH_CHECK(second && strcmp(first, second) == 0);
  char *on_disk = read_file(path);
  TH_CHECK(on_disk && strcmp(on_disk, first) == 0);
  kljit_free(first), kljit_free(second), kljit_free(empty), free(on_disk);
  kljit_free(NULL);
  return TH_PASS;
}
static int export_import_export_is_identical(void) {
  return th_in_tmpdir("unit-wisdom", round_trip_in);
}

/* Tuned cuBLASLt algorithms (gemm_algo.h) travel with their entry; a plan takes only those of
 * the running cuBLASLt version. */
/* The geometry of pb's plan with tuning t on an H200 (sm_90, 132 SMs), the default options but
 * the dX split `dx_split` (0: the planner's). */
static kljit_status geometry_of(const kljit_problem *pb, const prob_tuning *t, int dx_split,
                                prob_geometry *g) {
  kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  o.dx_split = dx_split;
  recipe r;
  const kljit_status st = recipe_make(pb, t, &o, 90, 132, &r);
  *g = r.geom;
  return st;
}

static int gemm_in(const char *dir) {
  th_private_wisdom(dir);
  const cublaslt_table *ltt;
  TH_OK(cublaslt_get(&ltt)); /* dlopen only: no GPU needed */
  const unsigned long long lt = (unsigned long long)ltt->cublasLtGetVersion();
  char algo[200], foreign[200], text[4096];
  snprintf(algo, sizeof algo, "logits:4096:b0:lt%llu:%016x%016x%096x", lt, 3, 0x17, 0);
  snprintf(foreign, sizeof foreign, "dw:4096:b1:lt%llu:%0128d", lt + 1, 7);
  snprintf(text, sizeof text, "%s" GPU_A DENSE "bucket=8192" CHOICE("4096", "measure", "9.5")
           " gemm=%s gemm=%s gemm=logits:2048:b0:jit:128.2.6.g.2\n", H, algo, foreign);
  TH_OK(kljit_wisdom_import_string(text));
  char *out = export();
  TH_CHECK(out);
  printf("%s", out);
  TH_CHECK(strstr(out, algo) && strstr(out, foreign));
  TH_CHECK(strstr(out, " gemm=logits:2048:b0:jit:128.2.6.g.2"));
  kljit_problem pb = dense_problem();
  wisdom_entry e;
  wisdom_problem_key(&pb, e.problem);
  TH_CHECK(wisdom_lookup("NVIDIA H200", 90, 132, e.problem, 8192, WISDOM_EXACT_BUCKET,
                         KLJIT_PLAN_MEASURE, &e));
  TH_CHECK(e.tune.gemm[0].used && e.tune.gemm[0].kind == GEMM_LOGITS && e.tune.gemm[0].n == 4096);
  TH_CHECK(e.tune.gemm[0].beta_zero && e.tune.gemm[0].algo[1] == 0x17);
  TH_CHECK(e.tune.gemm[1].used && e.tune.gemm[1].kind == GEMM_DW && !e.tune.gemm[1].beta_zero);
  /* what gemm_prepare is given: the running version's algorithm, nothing of a foreign one */
  cublasLtMatmulAlgo_t a;
  int stale = -1;
  TH_CHECK(gemm_algo_find(&e.tune, GEMM_LOGITS, 4096, &a, &stale) == 1 && stale == 0);
  TH_CHECK(a.data[0] == 3 && a.data[1] == 0x17 && a.data[2] == 0);
  TH_CHECK(gemm_algo_find(&e.tune, GEMM_DW, 4096, &a, &stale) == 0 && stale == 1);
  TH_CHECK(gemm_algo_find(&e.tune, GEMM_LOGITS, 2048, &a, &stale) == 0 && stale == 0);
  /* the generated choice: what plans run unless the gemm option is CUBLAS, on sm_90 only */
  prob_geometry g;
  TH_OK(geometry_of(&pb, &e.tune, 0, &g));
  gemm_select def[3], cub[3], jit[3];
  kljit_context_options o;
  TH_OK(kljit_context_options_default(&o));
  o.gemm = KLJIT_GEMM_DEFAULT, o.gemm_choice = NULL;
  TH_OK(gemm_algo_select(&o, def));
  o.gemm = KLJIT_GEMM_CUBLAS;
  TH_OK(gemm_algo_select(&o, cub));
  o.gemm = KLJIT_GEMM_JIT;
  TH_OK(gemm_algo_select(&o, jit));
  jgemm_pick k;
  jgemm_pick_slot(&pb, &g, 90, def, JGEMM_LOGITS, &k);
  TH_CHECK(k.jit && k.from == JGEMM_FROM_TUNING && !k.why);
  const jgemm_variant v = k.v;
  TH_CHECK(v.bn == 128 && v.consumers == 2 && v.stages == 6 && v.raster == 'g' && v.cluster == 2);
  TH_CHECK(v.schedule == 'c' && v.epilogue == 'd' && !strcmp(v.layout, "nt"));
  TH_CHECK(v.in == KLJIT_BF16 && v.out == KLJIT_FP32 && !v.beta);
  /* the pingpong schedule's suffix and the staged epilogue's round-trip and reach the variant */
  prob_gemm_choice pc;
  char pc_text[GEMM_ALGO_TEXT_MAX];
  TH_CHECK(gemm_algo_parse("logits:1024:b0:jit:128.2.6.g.1.p", &pc) == 0 && pc.schedule == 'p');
  gemm_algo_text(&pc, pc_text);
  TH_CHECK(!strcmp(pc_text, "logits:1024:b0:jit:128.2.6.g.1.p"));
  snprintf(pc_text, sizeof pc_text, "dw:1024:b1:lt%llu:jit:128.2.6.g.1.ps", lt);
  TH_CHECK(gemm_algo_parse(pc_text, &pc) == 0 && pc.schedule == 'p' && pc.epilogue == 's');
  TH_CHECK(pc.kind == GEMM_DW && !pc.beta_zero && pc.lt_version == (uint64_t)lt);
  char again[GEMM_ALGO_TEXT_MAX];
  gemm_algo_text(&pc, again);
  TH_CHECK(!strcmp(again, pc_text));
  /* the smaller choices' flags (w, c, a | b), in order, round-trip and reach the variant */
  snprintf(pc_text, sizeof pc_text, "dw:1024:b1:lt%llu:jit:256.2.4.g.1.swcb", lt);
  TH_CHECK(gemm_algo_parse(pc_text, &pc) == 0 && pc.epilogue == 's' && pc.schedule == 'c');
  TH_CHECK(pc.tweaks == (KSPEC_GEMM_ARRIVE_WARP | KSPEC_GEMM_STREAM_C | KSPEC_GEMM_L2_KEEP_B));
  gemm_algo_text(&pc, again);
  TH_CHECK(!strcmp(again, pc_text));
  /* E16 (flag e, last) round-trips on the logits GEMM and reaches the variant; another GEMM's
   * choice with it is refused, in wisdom's text and in the options' */
  snprintf(pc_text, sizeof pc_text, "logits:1024:b0:lt%llu:jit:128.2.6.g.1.pe", lt);
  TH_CHECK(gemm_algo_parse(pc_text, &pc) == 0 && pc.e16 == 1 && pc.schedule == 'p');
  gemm_algo_text(&pc, again);
  TH_CHECK(!strcmp(again, pc_text));
  TH_CHECK(jgemm_slot_variant(&pb, &g, JGEMM_LOGITS, &pc).stats.e16 == 1);
  TH_CHECK(gemm_algo_parse("logits:1024:b0:jit:128.2.6.g.1.ep", &pc) != 0); /* out of order */
  snprintf(pc_text, sizeof pc_text, "dx:1024:b0:lt%llu:jit:128.2.6.g.1.pe", lt);
  TH_CHECK(gemm_algo_parse(pc_text, &pc) != 0);
  TH_CHECK(gemm_algo_parse("dw:1024:b1:jit:256.2.4.g.1.se", &pc) != 0);
  {
    kljit_context_options oe;
    TH_OK(kljit_context_options_default(&oe));
    gemm_select sel[3];
    oe.gemm_choice = "logits:jit.128.2.6.g.1.pe";
    TH_OK(gemm_algo_select(&oe, sel));
    TH_CHECK(sel[GEMM_LOGITS].variant && sel[GEMM_LOGITS].choice.e16 == 1 &&
             !sel[GEMM_LOGITS].e16);
    oe.gemm_choice = "dx:jit.128.2.6.g.1.pe";
    TH_STATUS(gemm_algo_select(&oe, sel), KLJIT_ERR_INVALID_ARGUMENT);
    oe.gemm_choice = "all:jit.256.2.4.g.1.e";
    TH_STATUS(gemm_algo_select(&oe, sel), KLJIT_ERR_INVALID_ARGUMENT);
  }
  /* not sm_90, or the options' cuBLASLt: cuBLASLt, saying why or whence */
  jgemm_pick_slot(&pb, &g, 80, def, JGEMM_LOGITS, &k);
  TH_CHECK(!k.jit && k.why && strstr(k.why, "sm_90"));
  jgemm_pick_slot(&pb, &g, 90, cub, JGEMM_LOGITS, &k);
  TH_CHECK(!k.jit && k.from == JGEMM_FROM_OPTIONS && k.lt_index == -1);
  /* untuned, default: the heuristic table (sm_90: the generated logits GEMM, cuBLASLt for the
   * others); forced: each slot's default variant (logits: pingpong 128 x 128) */
  prob_tuning plain = e.tune;
  memset(plain.gemm, 0, sizeof plain.gemm);
  prob_geometry gp;
  TH_OK(geometry_of(&pb, &plain, 0, &gp));
  for (int s = 0; s < JGEMM_SLOTS; s++) {
    const int logits = s == JGEMM_LOGITS;
    jgemm_pick_slot(&pb, &gp, 90, def, (jgemm_slot)s, &k);
    TH_CHECK(k.jit == logits && k.from == JGEMM_FROM_HEURISTIC);
    if (logits) TH_CHECK(k.v.bn == 128 && k.v.schedule == 'p' && k.v.stages == 6);
    jgemm_pick_slot(&pb, &gp, 90, jit, (jgemm_slot)s, &k);
    TH_CHECK(k.jit && k.from == JGEMM_FROM_OPTIONS && k.v.bn == (logits ? 128 : 256) &&
             k.v.consumers == 2);
    static const char *const layouts[] = {"nt", "nn", "tn", "tn"};
    TH_CHECK(!strcmp(k.v.layout, layouts[s]) && k.v.beta == (s == JGEMM_DW_ACC));
  }
  /* dX in 4 slices of V (as KLJIT_DX_SPLIT=4): one launch, fp32 out, K in slices of dx_slice /
   * 64 k-blocks; one slice: the input dtype, no KSLICE */
  TH_CHECK(gp.dx_split == 1);
  jgemm_pick_slot(&pb, &gp, 90, jit, JGEMM_DX, &k);
  TH_CHECK(k.v.out == KLJIT_BF16 && k.v.kslice == 0);
  TH_OK(geometry_of(&pb, &plain, 4, &gp));
  TH_CHECK(gp.dx_split == 4 && gp.dx_slice % 64 == 0);
  jgemm_pick_slot(&pb, &gp, 90, jit, JGEMM_DX, &k);
  TH_CHECK(k.v.out == KLJIT_FP32 && k.v.kslice == (int)(gp.dx_slice / 64));
  /* dW accumulates into fp32 grad_weight here (gw = fp32): fp32 out, the staged epilogue */
  jgemm_pick_slot(&pb, &gp, 90, jit, JGEMM_DW_ACC, &k);
  TH_CHECK(k.v.out == KLJIT_FP32 && k.v.epilogue == 's');
  /* a generated choice tuned against another cuBLASLt is refused: the heuristic runs */
  prob_tuning old = plain;
  prob_gemm_choice oc;
  snprintf(pc_text, sizeof pc_text, "dx:4096:b0:lt%llu:jit:256.2.4.m.1", lt + 1);
  TH_CHECK(gemm_algo_parse(pc_text, &oc) == 0 && gemm_algo_add(&old, &oc) == 0);
  TH_CHECK(gemm_algo_drop_stale(&old) == 1); /* tune_choose, before planning */
  prob_geometry go;
  TH_OK(geometry_of(&pb, &old, 0, &go));
  jgemm_pick_slot(&pb, &go, 90, def, JGEMM_DX, &k);
  TH_CHECK(!k.jit && k.from == JGEMM_FROM_HEURISTIC);
  /* KLJIT_GEMM reaches the choice only as the options (src/env.c), a typo refused */
  setenv("KLJIT_GEMM", "jit", 1);
  TH_OK(kljit_context_options_default(&o));
  TH_CHECK(o.gemm == KLJIT_GEMM_JIT && !o.gemm_choice);
  setenv("KLJIT_GEMM", "cublas", 1);
  TH_OK(kljit_context_options_default(&o));
  TH_CHECK(o.gemm == KLJIT_GEMM_CUBLAS);
  /* the list form: per GEMM, the rest as gemm says */
  setenv("KLJIT_GEMM", "logits:jit,dx:cublas.3,dw:jit.128.2.6.g.1.ps", 1);
  TH_OK(kljit_context_options_default(&o));
  TH_CHECK(o.gemm == KLJIT_GEMM_DEFAULT && o.gemm_choice && strstr(o.gemm_choice, "dx:cublas.3"));
  gemm_select sel[3];
  TH_OK(gemm_algo_select(&o, sel));
  TH_CHECK(sel[GEMM_LOGITS].backend == GEMM_BACKEND_JIT && !sel[GEMM_LOGITS].variant);
  TH_CHECK(sel[GEMM_DX].backend == GEMM_BACKEND_CUBLAS && sel[GEMM_DX].lt_index == 3);
  TH_CHECK(sel[GEMM_DW].backend == GEMM_BACKEND_JIT && sel[GEMM_DW].variant);
  TH_CHECK(sel[GEMM_DW].choice.bn == 128 && sel[GEMM_DW].choice.epilogue == 's');
  jgemm_pick_slot(&pb, &gp, 90, sel, JGEMM_DX, &k);
  TH_CHECK(!k.jit && k.lt_index == 3 && k.from == JGEMM_FROM_OPTIONS);
  jgemm_pick_slot(&pb, &gp, 90, sel, JGEMM_DW_FIRST, &k);
  TH_CHECK(k.jit && k.v.bn == 128 && k.v.schedule == 'p' && k.v.epilogue == 's' && !k.v.beta);
  o.gemm_choice = "all:cublas,logits:default";
  TH_OK(gemm_algo_select(&o, sel));
  TH_CHECK(sel[GEMM_LOGITS].backend == GEMM_BACKEND_DEFAULT);
  TH_CHECK(sel[GEMM_DX].backend == GEMM_BACKEND_CUBLAS);
  TH_CHECK(sel[GEMM_DW].backend == GEMM_BACKEND_CUBLAS);
  static const char *const bad_lists[] = {"dx", "dx:", "dq:jit", "dx:jit.256.2.4", "dx:cublas.16",
                                          "dx:cublas.-1", "dx:jit,", "logits:jit:dx:jit",
                                          "dx:jit.256.2.4.m.1.sp"};
  for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
    o.gemm_choice = bad_lists[i];
    TH_STATUS(gemm_algo_select(&o, sel), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(strstr(kljit_last_error(), "gemm_choice") != NULL);
  }
  setenv("KLJIT_GEMM", "magic", 1);
  TH_OK(kljit_context_options_default(&o));
  TH_STATUS(gemm_algo_select(&o, sel), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "options->gemm = -1") != NULL);
  kljit_context *ctx = NULL;
  TH_STATUS(kljit_context_create(&ctx, 0, &o), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "options->gemm") != NULL);
  TH_CHECK(strstr(kljit_last_error(), "KLJIT_GEMM=magic") != NULL);
  TH_STATUS(kljit_context_create(&ctx, 0, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "KLJIT_GEMM=magic") != NULL);
  /* planning refuses such options without reading the environment */
  recipe rec;
  TH_STATUS(recipe_make(&pb, &e.tune, &o, 90, 132, &rec), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "options->gemm = -1") != NULL);
  setenv("KLJIT_GEMM", "dx:nonsense", 1);
  TH_OK(kljit_context_options_default(&o));
  TH_STATUS(kljit_context_create(&ctx, 0, &o), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "dx:nonsense") != NULL);
  unsetenv("KLJIT_GEMM");
  TH_OK(kljit_context_options_default(&o));
  TH_CHECK(o.gemm == KLJIT_GEMM_DEFAULT && !o.gemm_choice);
  kljit_free(out);
  /* a malformed algorithm rejects the text whole, as any bad field */
  snprintf(text, sizeof text, "%s" GPU_A DENSE "bucket=8192" CHOICE("4096", "measure", "9.5")
           " gemm=logits:4096:b0:lt%llu:12345\n", H, lt);
  TH_STATUS(kljit_wisdom_import_string(text), KLJIT_ERR_WISDOM);
  TH_CHECK(strstr(kljit_last_error(), "bad value gemm="));
  /* a malformed variant, version or flags */
  const char *const bad[] = {"dx:4096:b0:lt0:jit:256.2.4.m.1", "logits:4096:b0:jit:256.4.4.m.1",
                             "logits:4096:b0:jit:256.2.4.q.1", "logits:4096:b0:jit:256.2.4.m.3",
                             "logits:4096:b0:jit:256.2.4.m", "logits:4096:b0:jit:256.2.4.m.1x",
                             "logits:4096:b0:jit:128.2.6.g.1.q",
                             "logits:4096:b0:jit:128.2.6.g.1.pp",
                             "dw:4096:b1:jit:128.2.6.g.1.sp", "dw:4096:b1:jit:128.2.6.g.1.",
                             "dw:4096:b1:jit:128.2.6.g.1.ab", "dw:4096:b1:jit:128.2.6.g.1.ws",
                             /* parsed, refused by the template: streaming C needs staged */
                             "logits:4096:b0:jit:256.2.4.m.1.c"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, "%s" GPU_A DENSE "bucket=8192" CHOICE("4096", "measure", "9.5")
             " gemm=%s\n", H, bad[i]);
    TH_STATUS(kljit_wisdom_import_string(text), KLJIT_ERR_WISDOM);
  }
  return TH_PASS;
}
static int tuned_gemm_algorithms_round_trip_and_a_foreign_version_is_refused(void) {
  return th_in_tmpdir("unit-wisdom", gemm_in);
}

/* Imports `text` expecting KLJIT_ERR_WISDOM with `want` in the message; the store is unchanged. */
static int rejected(const char *text, const char *want) {
  char *before = export();
  TH_CHECK(before);
  TH_STATUS(kljit_wisdom_import_string(text), KLJIT_ERR_WISDOM);
  printf("  %s\n", kljit_last_error());
  TH_CHECK(strstr(kljit_last_error(), want) != NULL);
  TH_CHECK(strstr(kljit_last_error(), "nothing imported") != NULL);
  char *after = export();
  TH_CHECK(after && strcmp(before, after) == 0);
  kljit_free(before), kljit_free(after);
  return TH_PASS;
}

static int stale_in(const char *dir) {
  th_private_wisdom(dir);
  TH_OK(kljit_wisdom_import_string("kljit-wisdom 1 kljit=" KLJIT_VERSION_STRING "\n" GPU_A DENSE
                                   "bucket=8192" CHOICE("2048", "measure", "1.5") "\n"));
  const char *entry = GPU_A DENSE "bucket=4096" CHOICE("2048", "measure", "1.5") "\n";
  char text[2048];
  snprintf(text, sizeof text, "kljit-wisdom 1 kljit=0.0.9\n%s", entry);
  if (rejected(text, "stale wisdom: written by kljit 0.0.9, this is kljit " KLJIT_VERSION_STRING))
    return TH_FAIL;
  snprintf(text, sizeof text, "kljit-wisdom 2 kljit=%s\n%s", KLJIT_VERSION_STRING, entry);
  if (rejected(text, "wisdom format 2")) return TH_FAIL;
  if (rejected("(fftw-2.0 (fftwf_codelet_n1_2 0 #x1040 ...))\n", "not a kljit wisdom file"))
    return TH_FAIL;
  if (rejected("", "not a kljit wisdom file")) return TH_FAIL;
  /* a foreign file: the message names it */
  char path[PATH_MAX];
  th_path_in(path, dir, "foreign");
  TH_CHECK(write_file(path, "hello\n") == 0);
  TH_STATUS(kljit_wisdom_import_file(path), KLJIT_ERR_WISDOM);
  TH_CHECK(strstr(kljit_last_error(), path) && strstr(kljit_last_error(), ":1: not a kljit"));
  th_path_in(path, dir, "missing");
  TH_STATUS(kljit_wisdom_import_file(path), KLJIT_ERR_WISDOM);
  TH_CHECK(strstr(kljit_last_error(), path) != NULL);
  /* one bad line rejects the good lines around it, naming its line */
  snprintf(text, sizeof text, "%s%s%s", H, entry,
           GPU_A DENSE "bucket=2048" CHOICE("2048", "measure", "fast") "\n");
  if (rejected(text, "<string>:3: bad value ms=fast")) return TH_FAIL;
  return TH_PASS;
}
static int stale_or_foreign_text_is_rejected_whole(void) {
  return th_in_tmpdir("unit-wisdom", stale_in);
}

static int bad_lines_in(const char *dir) {
  th_private_wisdom(dir);
  static const struct {
    const char *line, *why;
  } bad[] = {
      {GPU_A DENSE "bucket=8192 -> chunk_rows=2048 threads=256 split=4 cluster=0 nv=1 "
                   "rigor=measure rows=8192",
       "field ms is missing"},
      {GPU_A DENSE "bucket=8192" CHOICE("2048", "measure", "1") " color=red",
       "unknown field color"},
      {GPU_A DENSE "bucket=8192 bucket=4096" CHOICE("2048", "measure", "1"), "given twice"},
      {GPU_A DENSE "bucket=8192" CHOICE("2048", "fast", "1"), "bad value rigor=fast"},
      {GPU_A DENSE "bucket=1000" CHOICE("2048", "measure", "1"), "bad value bucket=1000"},
      {GPU_A DENSE "bucket=8192 chunk_rows=1" CHOICE("2048", "measure", "1"), "belongs after"},
      {GPU_A "V=50257 H=256 in=bf16 teacher=probs tdt=bf16 tmode=const bucket=8192" CHOICE(
           "2048", "measure", "1"),
       "field flags is missing"},
      {GPU_A
       "V=50257 H=256 in=bf16 teacher=probs tdt=bf16 k=8 tmode=const flags=- bucket=8192" CHOICE(
           "2048", "measure", "1"),
       "only for teacher=topk"},
      {GPU_A "V=1 H=256 in=bf16 teacher=probs tdt=bf16 tmode=const flags=- bucket=8192" CHOICE(
           "2048", "measure", "1"),
       "bad value V=1"},
      {GPU_A DENSE "bucket=8192 -> chunk_rows=2048 threads=256 split=4 cluster=2 nv=1 "
                   "rigor=measure rows=8192 ms=1",
       "unusable choice"},
      {GPU_A "V=50257 H=256 in=bf16 teacher=probs tdt=bf16 tmode=const flags=bias,bias "
             "bucket=8192" CHOICE("2048", "measure", "1"),
       "bad value flags=bias,bias"},
      {"gpu=\"NVIDIA H200 arch=sm_90" CHOICE("2048", "measure", "1"), "no closing quote"},
      {GPU_A DENSE "bucket=8192", "no '->'"},
      {"gpu=\"NVIDIA H200\" arch=sm_90 sms=132 kljit=9.9.9 " DENSE
       "bucket=8192" CHOICE("2048", "measure", "1"),
       "entry of kljit 9.9.9"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s\n", H, bad[i].line);
    if (rejected(text, bad[i].why)) {
      fprintf(stderr, "case %zu: %s\n", i, bad[i].line);
      return TH_FAIL;
    }
  }
  return TH_PASS;
}
static int malformed_entries_are_rejected_naming_the_field(void) {
  return th_in_tmpdir("unit-wisdom", bad_lines_in);
}

/* ---- merging ----------------------------------------------------------------------------- */

/* The stored entry of the dense problem on GPU_A for `bucket`. */
static int lookup_ms(int64_t bucket, double *ms, int *rigor) {
  wisdom_entry e;
  const kljit_problem pb = dense_problem();
  char key[WISDOM_PROBLEM_MAX];
  wisdom_problem_key(&pb, key);
  if (!wisdom_lookup("NVIDIA H200", 90, 132, key, bucket, WISDOM_EXACT_BUCKET, KLJIT_PLAN_ESTIMATE,
                     &e))
    return -1;
  *ms = e.ms, *rigor = (int)e.rigor;
  return 0;
}

static int import_one(const char *bucket, const char *rigor, const char *ms) {
  char text[2048];
  snprintf(text, sizeof text,
           "%s" GPU_A DENSE
           "bucket=%s -> chunk_rows=2048 threads=256 "
           "split=4 cluster=0 nv=1 rigor=%s rows=8192 ms=%s\n",
           H, bucket, rigor, ms);
  return kljit_wisdom_import_string(text) == KLJIT_SUCCESS ? 0 : -1;
}

static int merge_in(const char *dir) {
  th_private_wisdom(dir);
  double ms;
  int rigor;
  TH_CHECK(import_one("8192", "measure", "10") == 0);
  TH_CHECK(lookup_ms(8192, &ms, &rigor) == 0 && ms == 10 && rigor == KLJIT_PLAN_MEASURE);
  TH_CHECK(import_one("8192", "measure", "12") == 0); /* slower, same rigor: ignored */
  TH_CHECK(lookup_ms(8192, &ms, &rigor) == 0 && ms == 10);
  TH_CHECK(import_one("8192", "measure", "9") == 0); /* faster: replaces */
  TH_CHECK(lookup_ms(8192, &ms, &rigor) == 0 && ms == 9);
  TH_CHECK(import_one("8192", "exhaustive", "11") == 0); /* higher rigor wins, even if slower */
  TH_CHECK(lookup_ms(8192, &ms, &rigor) == 0 && ms == 11 && rigor == KLJIT_PLAN_EXHAUSTIVE);
  TH_CHECK(import_one("8192", "measure", "1") == 0); /* lower rigor never replaces */
  TH_CHECK(lookup_ms(8192, &ms, &rigor) == 0 && ms == 11);
  TH_CHECK(import_one("1024", "measure", "1") == 0); /* another bucket: another entry */
  TH_CHECK(lookup_ms(1024, &ms, &rigor) == 0 && ms == 1);
  TH_CHECK(lookup_ms(8192, &ms, &rigor) == 0 && ms == 11);
  char *all = export();
  TH_CHECK(all && count_lines(all, "gpu=") == 2);
  kljit_free(all);
  return TH_PASS;
}
static int merge_keeps_higher_rigor_then_lower_time(void) {
  return th_in_tmpdir("unit-wisdom", merge_in);
}

/* ---- default files ----------------------------------------------------------------------- */

static int defaults_in(const char *dir) {
  th_private_wisdom(dir);
  char sys[PATH_MAX], user[PATH_MAX], buf[PATH_MAX];
  th_path_in(sys, dir, "system-wisdom");
  th_path_in(user, dir, "user-wisdom");
  TH_OK(kljit_wisdom_path(KLJIT_WISDOM_SYSTEM, buf, sizeof buf));
  TH_CHECK(strcmp(buf, sys) == 0);
  TH_OK(kljit_wisdom_path(KLJIT_WISDOM_USER, buf, sizeof buf));
  TH_CHECK(strcmp(buf, user) == 0);
  TH_STATUS(kljit_wisdom_path(KLJIT_WISDOM_USER, buf, 3), KLJIT_ERR_INVALID_ARGUMENT);
  char text[2048];
  /* the same key in both: equal rigor and time, so the system file (read first) keeps it */
  snprintf(text, sizeof text,
           "%s" GPU_A DENSE
           "bucket=8192 -> chunk_rows=1024 threads=512 "
           "split=2 cluster=0 nv=1 rigor=measure rows=8192 ms=5\n",
           H);
  TH_CHECK(write_file(sys, text) == 0);
  snprintf(text, sizeof text,
           "%s" GPU_A DENSE
           "bucket=8192 -> chunk_rows=4096 threads=256 "
           "split=4 cluster=0 nv=1 rigor=measure rows=8192 ms=5\n" GPU_B DENSE
           "bucket=8192" CHOICE("2048", "measure", "3") "\n",
           H);
  TH_CHECK(write_file(user, text) == 0);
  const kljit_problem pb = dense_problem();
  prob_tuning t;
  tune_source src;
  wisdom_entry used;
  TH_OK(tune_choose(&pb, KLJIT_PLAN_ESTIMATE, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && t.threads == 512 && t.chunk_rows == 1024);
  TH_OK(
      tune_choose(&pb, KLJIT_PLAN_WISDOM_ONLY, "NVIDIA A100-SXM4-80GB", 80, 108, &OPT, &t, &src,
                  &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && t.chunk_rows == 2048);
  return TH_PASS;
}
static int system_file_then_user_file_are_read_on_first_use(void) {
  return th_in_tmpdir("unit-wisdom", defaults_in);
}

static int bad_defaults_in(const char *dir) {
  th_private_wisdom(dir);
  char sys[PATH_MAX];
  th_path_in(sys, dir, "system-wisdom");
  TH_CHECK(write_file(sys, "kljit-wisdom 1 kljit=0.0.1\n") == 0); /* stale: skipped */
  const kljit_problem pb = dense_problem();
  prob_tuning t;
  tune_source src;
  wisdom_entry used;
  TH_OK(tune_choose(&pb, KLJIT_PLAN_ESTIMATE, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_HEURISTIC);
  TH_CHECK(strcmp(kljit_last_error(), "") == 0); /* a skipped default is not an error */
  return TH_PASS;
}
static int a_stale_default_file_is_skipped_not_fatal(void) {
  return th_in_tmpdir("unit-wisdom", bad_defaults_in);
}

static wisdom_entry tuned_entry(int64_t bucket, double ms) {
  wisdom_entry e;
  memset(&e, 0, sizeof e);
  snprintf(e.gpu, sizeof e.gpu, "NVIDIA \"H200\"");
  e.arch = 90, e.sms = 132, e.bucket = bucket, e.rows = bucket, e.ms = ms;
  const kljit_problem pb = dense_problem();
  wisdom_problem_key(&pb, e.problem);
  wisdom_problem_extra(&pb, e.extra);
  e.tune = prob_estimate(&pb, 90, &OPT);
  e.rigor = KLJIT_PLAN_MEASURE;
  return e;
}

static int user_file_in(const char *dir) {
  th_private_wisdom(dir);
  char user[PATH_MAX], sub[PATH_MAX];
  th_path_in(sub, dir, "a/b/wisdom"); /* parents are created */
  setenv("KLJIT_WISDOM", sub, 1);
  wisdom_entry e = tuned_entry(8192, 7);
  TH_OK(wisdom_add(&e));
  e = tuned_entry(1024, 1);
  TH_OK(wisdom_add(&e));
  char *text = read_file(sub);
  TH_CHECK(text);
  printf("%s", text);
  TH_CHECK(strncmp(text, H, strlen(H)) == 0 && count_lines(text, "gpu=") == 2);
  TH_CHECK(strstr(text, "gpu=\"NVIDIA _H200_\"")); /* no quote inside the quotes */
  wisdom_set s;
  TH_OK(wisdom_read_file(sub, &s, NULL));
  TH_CHECK(s.n == 2);
  wisdom_set_free(&s);
  free(text);
  /* a file that is not wisdom is never overwritten */
  th_path_in(user, dir, "not-wisdom");
  TH_CHECK(write_file(user, "precious\n") == 0);
  setenv("KLJIT_WISDOM", user, 1);
  TH_OK(wisdom_add(&e));
  text = read_file(user);
  TH_CHECK(text && strcmp(text, "precious\n") == 0);
  free(text);
  /* a stale one is replaced */
  TH_CHECK(write_file(user, "kljit-wisdom 1 kljit=0.0.1\n") == 0);
  TH_OK(wisdom_add(&e));
  TH_OK(wisdom_read_file(user, &s, NULL));
  TH_CHECK(s.n == 1);
  wisdom_set_free(&s);
  /* KLJIT_WISDOM=none: the store only */
  setenv("KLJIT_WISDOM", "none", 1);
  char buf[16];
  TH_OK(kljit_wisdom_path(KLJIT_WISDOM_USER, buf, sizeof buf));
  TH_CHECK(buf[0] == '\0');
  TH_OK(wisdom_add(&e));
  return TH_PASS;
}
static int tuned_entries_are_merged_into_the_user_file(void) {
  return th_in_tmpdir("unit-wisdom", user_file_in);
}

/* ---- rigor rules (what kljit_plan_create does, without its GPU) -------------------------- */

static int no_wisdom_in(const char *dir) {
  th_private_wisdom(dir);
  const kljit_problem pb = dense_problem();
  prob_tuning t;
  tune_source src;
  wisdom_entry used;
  TH_STATUS(tune_choose(&pb, KLJIT_PLAN_WISDOM_ONLY, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used),
            KLJIT_ERR_NO_WISDOM);
  printf("%s\n", kljit_last_error());
  TH_CHECK(strstr(kljit_last_error(), "gpu=\"NVIDIA H200\" arch=sm_90 sms=132"));
  TH_CHECK(strstr(kljit_last_error(), DENSE) != NULL);
  /* wisdom for another GPU, or the same model with another SM count, does not count */
  char text[2048];
  snprintf(text, sizeof text,
           "%s" GPU_B DENSE "bucket=8192" CHOICE(
               "2048", "measure", "1") "\ngpu=\"NVIDIA H200\" arch=sm_90 sms=66 kljit=%s " DENSE
                                       "bucket=8192" CHOICE("2048", "measure", "1") "\n",
           H, KLJIT_VERSION_STRING);
  TH_OK(kljit_wisdom_import_string(text));
  TH_STATUS(tune_choose(&pb, KLJIT_PLAN_WISDOM_ONLY, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used),
            KLJIT_ERR_NO_WISDOM);
  TH_OK(tune_choose(&pb, KLJIT_PLAN_ESTIMATE, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used));
  const prob_tuning h = prob_estimate(&pb, 90, &OPT);
  TH_CHECK(src == TUNE_FROM_HEURISTIC && t.threads == h.threads && t.split == h.split &&
           t.chunk_rows == h.chunk_rows);
  TH_OK(tune_choose(&pb, KLJIT_PLAN_MEASURE, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used));
  TH_CHECK(src == TUNE_NEEDED);
  return TH_PASS;
}
static int wisdom_only_without_wisdom_is_no_wisdom_naming_the_key(void) {
  return th_in_tmpdir("unit-wisdom", no_wisdom_in);
}

/* The options a context would take from the environment now (KLJIT_TUNE_ROWS,
 * KLJIT_CHUNK_ROWS below). */
static const kljit_context_options *env_options(void) {
  static kljit_context_options o;
  return kljit_context_options_default(&o) == KLJIT_SUCCESS ? &o : &OPT;
}

/* tune_choose on an H200 under those options. */
static kljit_status choose_h200(const kljit_problem *pb, kljit_plan_rigor rigor, prob_tuning *t,
                                tune_source *src, wisdom_entry *used) {
  return tune_choose(pb, rigor, "NVIDIA H200", 90, 132, env_options(), t, src, used);
}

static int estimate_in(const char *dir) {
  th_private_wisdom(dir);
  unsetenv("KLJIT_TUNE_ROWS"); /* tuning bucket 8192 */
  const kljit_problem pb = dense_problem();
  prob_tuning t;
  tune_source src;
  wisdom_entry used;
  char text[4096];
  /* buckets 1024 and 65536 are both three octaves from 8192: the larger serves */
  snprintf(text, sizeof text,
           "%s" GPU_A DENSE
           "bucket=1024 -> chunk_rows=1024 threads=512 "
           "split=2 cluster=0 nv=1 rigor=exhaustive rows=1024 ms=1\n" GPU_A DENSE
           "bucket=65536 -> chunk_rows=8192 threads=512 split=8 cluster=0 nv=1 rigor=measure "
           "rows=65536 ms=50\n",
           H);
  TH_OK(kljit_wisdom_import_string(text));
  TH_OK(choose_h200(&pb, KLJIT_PLAN_ESTIMATE, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && used.bucket == 65536 && t.split == 8);
  TH_OK(choose_h200(&pb, KLJIT_PLAN_WISDOM_ONLY, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && used.bucket == 65536);
  /* MEASURE wants its own bucket (8192): neither serves */
  TH_OK(choose_h200(&pb, KLJIT_PLAN_MEASURE, &t, &src, &used));
  TH_CHECK(src == TUNE_NEEDED);
  /* KLJIT_TUNE_ROWS=1000 -> bucket 1024: the exhaustive entry serves MEASURE and EXHAUSTIVE */
  setenv("KLJIT_TUNE_ROWS", "1000", 1);
  TH_OK(choose_h200(&pb, KLJIT_PLAN_MEASURE, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && used.bucket == 1024 && t.threads == 512 && t.split == 2);
  TH_OK(choose_h200(&pb, KLJIT_PLAN_EXHAUSTIVE, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM);
  TH_OK(choose_h200(&pb, KLJIT_PLAN_ESTIMATE, &t, &src, &used));
  TH_CHECK(used.bucket == 1024);
  /* ... but a MEASURE entry does not serve EXHAUSTIVE */
  setenv("KLJIT_TUNE_ROWS", "65536", 1);
  TH_OK(choose_h200(&pb, KLJIT_PLAN_MEASURE, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && used.bucket == 65536);
  TH_OK(choose_h200(&pb, KLJIT_PLAN_EXHAUSTIVE, &t, &src, &used));
  TH_CHECK(src == TUNE_NEEDED);
  /* KLJIT_CHUNK_ROWS still overrides the chunk size of a stored choice */
  setenv("KLJIT_CHUNK_ROWS", "300", 1);
  TH_OK(choose_h200(&pb, KLJIT_PLAN_ESTIMATE, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && t.chunk_rows == 300 && t.split == 8);
  unsetenv("KLJIT_CHUNK_ROWS");
  unsetenv("KLJIT_TUNE_ROWS");
  return TH_PASS;
}
static int estimate_and_measure_use_stored_wisdom_by_rigor_and_bucket(void) {
  return th_in_tmpdir("unit-wisdom", estimate_in);
}

/* ---- candidates -------------------------------------------------------------------------- */

static int candidates_are_usable_and_start_with_the_heuristic(void) {
  kljit_problem pbs[3];
  pbs[0] = dense_problem();
  pbs[1] = dense_problem(), pbs[1].vocab = 128256, pbs[1].hidden = 4096;
  pbs[2] = pbs[1], pbs[2].teacher = KLJIT_TEACHER_SPARSE_TOPK, pbs[2].topk = 64;
  pbs[2].teacher_dtype = KLJIT_FP32;
  prob_tuning c[TUNE_MAX_CANDIDATES];
  for (int p = 0; p < 3; p++)
    for (int arch = 80; arch <= 90; arch += 10) {
      const prob_tuning h = prob_estimate(&pbs[p], arch, &OPT);
      int total[4] = {0, 0, 0, 0};
      for (int rigor = KLJIT_PLAN_MEASURE; rigor <= KLJIT_PLAN_EXHAUSTIVE; rigor++) {
        int n = tune_candidates(&pbs[p], &OPT, arch, (kljit_plan_rigor)rigor, TUNE_SHAPES, &h,
                                8192, c, TUNE_MAX_CANDIDATES);
        TH_CHECK(n >= 1 && c[0].threads == h.threads && c[0].split == h.split &&
                 c[0].chunk_rows == h.chunk_rows && c[0].cluster == h.cluster);
        total[rigor] += n;
        for (int s = TUNE_SHAPES; s <= TUNE_CLUSTER; s++) {
          n = tune_candidates(&pbs[p], &OPT, arch, (kljit_plan_rigor)rigor, (tune_stage)s, &h,
                              8192, c, TUNE_MAX_CANDIDATES);
          if (s != TUNE_SHAPES) total[rigor] += n;
          for (int i = 0; i < n; i++) {
            recipe r; /* built as given, and the templates accept it */
            TH_OK(recipe_make(&pbs[p], &c[i], &OPT, arch, 132, &r));
            TH_CHECK(!r.replaced && memcmp(&r.geom.tune, &c[i], sizeof c[i]) == 0);
            TH_OK(recipe_check(&r));
            TH_CHECK(c[i].chunk_rows <= 8192 || c[i].chunk_rows == h.chunk_rows);
            if (s == TUNE_CLUSTER) TH_CHECK(arch >= 90 && c[i].cluster > 0 && p < 2);
            if (s != TUNE_CLUSTER) TH_CHECK(c[i].cluster == 0 || (s == TUNE_SHAPES && i == 0));
            for (int j = 0; j < i; j++) TH_CHECK(memcmp(&c[i], &c[j], sizeof c[i]) != 0);
          }
        }
      }
      printf("V=%lld %s sm_%d: %d candidates (measure), %d (exhaustive)\n", (long long)pbs[p].vocab,
             p == 2 ? "topk" : "dense", arch, total[2], total[3]);
      TH_CHECK(total[KLJIT_PLAN_MEASURE] <= 16);
      TH_CHECK(total[KLJIT_PLAN_EXHAUSTIVE] > total[KLJIT_PLAN_MEASURE]);
    }
  return TH_PASS;
}

/* ---- precompile from wisdom -------------------------------------------------------------- */

static int count_kjc(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += strlen(e->d_name) == 68 && strcmp(e->d_name + 64, ".kjc") == 0;
  closedir(d);
  return n;
}

typedef struct module_count {
  int reports, compiled, count;
} module_count;

static void count(const kljit_module_report *m, void *user) {
  module_count *c = user;
  c->reports++, c->compiled += m->compiled, c->count = m->count;
}

static void count_gemms(const kljit_module_report *m, void *user) {
  *(int *)user += strncmp(m->name, "gemm_sm90-", 10) == 0;
}

/* A plan's modules through the environment's cache, as kljit_plan_create would build them. */
/* dram: the GPU's DRAM bytes per SM cycle (recipe_device; 0: unknown) */
static int plan_hits(const kljit_problem *pb, const char *gpu, int arch, int sms, double dram,
                     cache_result want) {
  prob_tuning t;
  tune_source src;
  wisdom_entry used;
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  TH_OK(tune_choose(pb, KLJIT_PLAN_ESTIMATE, gpu, arch, sms, &o, &t, &src, &used));
  recipe r;
  const recipe_device dev = {arch, sms, dram};
  TH_OK(recipe_make_on(pb, &t, &o, &dev, &r));
  cache_config cfg;
  TH_OK(cache_config_from_env(&cfg));
  const kspec *specs[RECIPE_MAX_MODULES];
  const int n = recipe_modules(&r, specs);
  TH_CHECK(n == (arch == 90 ? 4 : 3)); /* the rows' two parts, the helpers; sm_90's GEMM */
  for (int k = 0; k < n; k++) {
    jit_bin bin;
    TH_OK(jit_build(specs[k], arch, &cfg, &bin));
    TH_CHECK(bin.source == want && bin.compile_ms == 0.0);
    jit_bin_free(&bin);
  }
  cache_config_free(&cfg);
  printf("  %s sm_%d: tuning from %s, modules from the read-only cache\n", gpu, arch,
         src == TUNE_FROM_WISDOM ? "wisdom" : "heuristics");
  return TH_PASS;
}

static int precompile_in(const char *dir) {
  th_private_wisdom(dir);
  char ro[PATH_MAX], rw[PATH_MAX], file[PATH_MAX];
  th_path_in(ro, dir, "cluster-cache");
  th_path_in(rw, dir, "user-cache");
  th_path_in(file, dir, "shipped-wisdom");
  /* tuned choices that differ from the heuristics, for an sm_80 and an sm_90 GPU, of a problem
   * with non-default extra fields (T=2, T^2 scaling, sum) */
  char text[4096];
  snprintf(text, sizeof text,
           "%s" GPU_B
           "V=32000 H=64 in=bf16 teacher=probs tdt=bf16 tmode=const flags=- "
           "bucket=8192 -> chunk_rows=1024 threads=512 split=2 cluster=0 nv=1 rigor=measure "
           "rows=8192 ms=1 T=2 tt=0 eps=1e-20 reduction=sum t2=1 gw=f32 accum=fp32\n" GPU_A
           "V=32000 H=64 in=bf16 teacher=probs tdt=bf16 tmode=const flags=- "
           "bucket=8192 -> chunk_rows=1024 threads=128 split=4 cluster=0 nv=1 rigor=measure "
           "rows=8192 ms=1 T=2 tt=0 eps=1e-20 reduction=sum t2=1 gw=f32 accum=fp32\n",
           H);
  TH_CHECK(write_file(file, text) == 0);
  const int archs[] = {80, 90};
  for (int i = 0; i < 2; i++) {
    module_count c = {0, 0, 0};
    const int before = count_kjc(ro), want = archs[i] == 90 ? 12 : 5;
    TH_OK(kljit_precompile_wisdom(file, archs[i], ro, KLJIT_PRECOMPILE_DRY_RUN, count, &c));
    TH_CHECK(c.reports == want && c.compiled == want && c.count == want &&
             count_kjc(ro) == before);
    memset(&c, 0, sizeof c);
    TH_OK(kljit_precompile_wisdom(file, archs[i], ro, 0, count, &c));
    printf("sm_%d: %d of %d modules compiled\n", archs[i], c.compiled, c.reports);
    /* heuristic plan (the rows' two parts + helpers; sm_90: + the logits GEMM) + the tuned
     * rows' two parts of the entry of this arch (its helpers and GEMM modules are the heuristic
     * plan's); sm_90: the same six again for a GPU of the other device class (E16's rows, helpers
     * and logits GEMM: recipe_device_classes) */
    TH_CHECK(c.reports == want && c.compiled == want && c.count == want);
    memset(&c, 0, sizeof c);
    TH_OK(kljit_precompile_wisdom(file, archs[i], ro, 0, NULL, NULL));
    TH_OK(kljit_precompile_wisdom(file, archs[i], ro, 0, count, &c));
    TH_CHECK(c.reports == want && c.compiled == 0);
  }
  TH_CHECK(count_kjc(ro) == 17);
  TH_CHECK(chmod(ro, 0755) == 0);
  setenv("KLJIT_CACHE_PATH", ro, 1);
  setenv("KLJIT_CACHE_DIR", rw, 1);
  TH_OK(kljit_wisdom_import_file(file));
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 32000, pb.hidden = 64, pb.temperature = 2.0, pb.reduction = KLJIT_REDUCTION_SUM;
  pb.flags = KLJIT_FLAG_SCALE_T_SQUARED;
  if (plan_hits(&pb, "NVIDIA A100-SXM4-80GB", 80, 108, 0.0, CACHE_HIT_READONLY) ||
      plan_hits(&pb, "NVIDIA H200", 90, 132, 18.8, CACHE_HIT_READONLY))
    return TH_FAIL;
  /* GPUs without wisdom take the heuristic plan, precompiled too */
  if (plan_hits(&pb, "NVIDIA A100-PCIE-40GB", 80, 108, 0.0, CACHE_HIT_READONLY) ||
      plan_hits(&pb, "NVIDIA H100 80GB HBM3", 90, 132, 12.8, CACHE_HIT_READONLY))
    return TH_FAIL;
  TH_CHECK(count_kjc(rw) <= 0); /* nothing compiled for sm_80/sm_90, nothing written */
  TH_STATUS(kljit_precompile_wisdom(file, 75, ro, 0, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_precompile_wisdom(file, 90, ro, 8, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_precompile_wisdom(NULL, 90, ro, 0, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  th_path_in(file, dir, "no-such-wisdom");
  TH_STATUS(kljit_precompile_wisdom(file, 90, ro, 0, NULL, NULL), KLJIT_ERR_WISDOM);
  /* a generated logits GEMM the tuner chose on an sm_90 GPU is precompiled with its entry
   * (whatever KLJIT_GEMM says: the entry's recipe under the default options takes it), beside
   * the heuristic plans' default ones (plain, and E16 for the other device class) */
  th_path_in(file, dir, "generated-wisdom");
  snprintf(text, sizeof text, "%s" GPU_A DENSE "bucket=8192" CHOICE("4096", "measure", "9.5")
           " gemm=logits:4096:b0:jit:128.2.6.g.2\n", H);
  TH_CHECK(write_file(file, text) == 0);
  setenv("KLJIT_GEMM", "cublas", 1);
  int gemms = 0;
  TH_OK(kljit_precompile_wisdom(file, 90, ro, KLJIT_PRECOMPILE_DRY_RUN, count_gemms, &gemms));
  TH_CHECK(gemms == 3); /* and the E16 one of the heuristic plan of the other device class */
  gemms = 0;
  TH_OK(kljit_precompile_wisdom(file, 80, ro, KLJIT_PRECOMPILE_DRY_RUN, count_gemms, &gemms));
  TH_CHECK(gemms == 0);
  /* a logits choice with E16 (flag e) precompiles the plan that reads E: its GEMM (E16), the
   * rows' two parts (ETILE) and the helpers (G at E's stride) beside the heuristic plan's four
   * modules, compiled for sm_90a (this choice is E16's own tile, RECIPE_E16_TILE: the heuristic
   * plan of the other device class has the same four) */
  th_path_in(file, dir, "e16-wisdom");
  snprintf(text, sizeof text, "%s" GPU_A DENSE "bucket=8192" CHOICE("4096", "measure", "9.5")
           " gemm=logits:4096:b0:jit:" RECIPE_E16_TILE "e\n", H);
  TH_CHECK(write_file(file, text) == 0);
  gemms = 0;
  TH_OK(kljit_precompile_wisdom(file, 90, ro, KLJIT_PRECOMPILE_DRY_RUN, count_gemms, &gemms));
  TH_CHECK(gemms == 2);
  module_count e = {0, 0, 0};
  TH_OK(kljit_precompile_wisdom(file, 90, ro, 0, count, &e));
  printf("E16 entry: %d of %d modules compiled\n", e.compiled, e.reports);
  TH_CHECK(e.reports == 8 && e.compiled >= 4);
  unsetenv("KLJIT_GEMM");
  unsetenv("KLJIT_CACHE_PATH");
  unsetenv("KLJIT_CACHE_DIR");
  return TH_PASS;
}
static int precompile_from_wisdom_then_plans_compile_nothing(void) {
  return th_in_tmpdir("unit-wisdom", precompile_in);
}

static int bad_arguments_are_rejected(void) {
  TH_STATUS(kljit_wisdom_import_file(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_wisdom_import_file(""), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_wisdom_import_string(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_wisdom_export_file(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_wisdom_export_string(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_wisdom_path((kljit_wisdom_file)7, NULL, 0), KLJIT_ERR_INVALID_ARGUMENT);
  const kljit_problem pb = dense_problem();
  TH_STATUS(kljit_tune(NULL, &pb, 0, KLJIT_PLAN_MEASURE, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(wisdom_bucket(1) == 1 && wisdom_bucket(8192) == 8192 && wisdom_bucket(8193) == 16384);
  TH_CHECK(wisdom_bucket(5000) == 8192);
  return TH_PASS;
}

/* The online teacher (issue 29) and the loss family in wisdom: teacher=hidden with its Ht
 * (ht=) and bias (flags=tbias), a divergence other than the forward KL (div=) are the entry's
 * identity; beta, the weights, the softcaps and a padded teacher are extra fields. They round
 * trip, give the problem back, serve plans (ESTIMATE takes them, MEASURE without them tunes),
 * and the rules name the field. */
static int family_in(const char *dir) {
  th_private_wisdom(dir);
  kljit_problem on = KLJIT_PROBLEM_INIT;
  on.vocab = 32000, on.hidden = 64, on.teacher = KLJIT_TEACHER_DENSE_HIDDEN;
  on.teacher_hidden = 2048, on.teacher_vocab = 32064, on.flags = KLJIT_FLAG_TEACHER_BIAS;
  on.divergence = KLJIT_DIVERGENCE_JSD, on.beta = 0.25, on.hard_weight = 0.5;
  on.soft_weight = 0.5, on.softcap = 30, on.teacher_softcap = 50;
  char key[WISDOM_PROBLEM_MAX], extra[WISDOM_EXTRA_MAX];
  wisdom_problem_key(&on, key);
  wisdom_problem_extra(&on, extra);
  printf("key: %s\nextra: %s\n", key, extra);
  TH_CHECK(strcmp(key, "V=32000 H=64 in=bf16 teacher=hidden tdt=bf16 ht=2048 div=jsd "
                       "tmode=const flags=tbias") == 0);
  TH_CHECK(strcmp(extra, "T=1 tt=0 eps=1e-20 reduction=batchmean t2=0 gw=f32 accum=fp32 "
                         "beta=0.25 hw=0.5 sw=0.5 cap=30 tcap=50 tv=32064") == 0);
  /* the plain problem's key and extra are what they were before these fields */
  const kljit_problem plain = dense_problem();
  wisdom_problem_key(&plain, key);
  TH_CHECK(strcmp(key, "V=50257 H=256 in=bf16 teacher=probs tdt=bf16 tmode=const flags=-") == 0);
  /* JSD with beta = 0 is the forward KL: the same entry as it */
  kljit_problem jsd0 = plain;
  jsd0.divergence = KLJIT_DIVERGENCE_JSD;
  char key0[WISDOM_PROBLEM_MAX];
  wisdom_problem_key(&jsd0, key0);
  TH_CHECK(strcmp(key, key0) == 0);
  /* an entry tuned for it: export -> import -> export is a fixed point */
  wisdom_entry e;
  memset(&e, 0, sizeof e);
  snprintf(e.gpu, sizeof e.gpu, "NVIDIA H200");
  e.arch = 90, e.sms = 132, e.bucket = 8192, e.rows = 8192, e.ms = 7.5;
  e.rigor = KLJIT_PLAN_MEASURE;
  wisdom_problem_key(&on, e.problem);
  wisdom_problem_extra(&on, e.extra);
  e.tune = prob_estimate(&on, 90, &OPT);
  e.tune.chunk_rows = 1024;
  TH_OK(wisdom_add(&e));
  /* the same problem with the reverse KL is another entry, the plain one a third */
  kljit_problem rev = on;
  rev.divergence = KLJIT_DIVERGENCE_REVERSE_KL, rev.beta = 0;
  wisdom_entry r = e;
  wisdom_problem_key(&rev, r.problem);
  wisdom_problem_extra(&rev, r.extra);
  r.ms = 9;
  TH_OK(wisdom_add(&r));
  char *first = export();
  TH_CHECK(first && count_lines(first, "gpu=") == 2);
  TH_CHECK(strstr(first, " div=reverse ") && strstr(first, " div=jsd "));
  kljit_wisdom_forget();
  TH_OK(kljit_wisdom_import_string(first));
  char *second = export();
  TH_CHECK(second && strcmp(first, second) == 0);
  /* the problem back from the entry, field by field */
  kljit_problem back;
  TH_OK(wisdom_entry_problem(&e, &back));
  TH_CHECK(back.teacher == KLJIT_TEACHER_DENSE_HIDDEN && back.teacher_hidden == 2048);
  TH_CHECK(back.teacher_vocab == 32064 && (back.flags & KLJIT_FLAG_TEACHER_BIAS));
  TH_CHECK(back.divergence == KLJIT_DIVERGENCE_JSD && back.beta == 0.25);
  TH_CHECK(back.hard_weight == 0.5 && back.soft_weight == 0.5 && back.softcap == 30);
  TH_CHECK(back.teacher_softcap == 50);
  /* plans: ESTIMATE takes the entry; MEASURE takes it at its bucket; a problem with another
   * Ht has none (MEASURE then tunes: it is no longer refused) */
  prob_tuning t;
  tune_source src;
  wisdom_entry used;
  TH_OK(tune_choose(&on, KLJIT_PLAN_ESTIMATE, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM && t.chunk_rows == 1024 && used.ms == 7.5);
  TH_OK(tune_choose(&on, KLJIT_PLAN_MEASURE, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used));
  TH_CHECK(src == TUNE_FROM_WISDOM);
  kljit_problem other = on;
  other.teacher_hidden = 4096;
  TH_OK(tune_choose(&other, KLJIT_PLAN_MEASURE, "NVIDIA H200", 90, 132, &OPT, &t, &src, &used));
  TH_CHECK(src == TUNE_NEEDED);
  TH_STATUS(tune_choose(&other, KLJIT_PLAN_WISDOM_ONLY, "NVIDIA H200", 90, 132, &OPT, &t, &src,
                        &used), KLJIT_ERR_NO_WISDOM);
  TH_CHECK(strstr(kljit_last_error(), "ht=4096"));
  kljit_free(first), kljit_free(second);
  /* issue 29's dense families: TVD and the skew KLs in the key, their alpha, the CE's label
   * smoothing and z-loss in the extra text, row weights a flag; the problem comes back whole */
  kljit_problem fam = plain;
  fam.divergence = KLJIT_DIVERGENCE_SKEW_REVERSE_KL, fam.skew_alpha = 0.3;
  fam.hard_weight = 0.5, fam.label_smoothing = 0.1, fam.z_loss = 1e-4;
  fam.flags |= KLJIT_FLAG_ROW_WEIGHTS;
  wisdom_problem_key(&fam, key);
  wisdom_problem_extra(&fam, extra);
  printf("key: %s\nextra: %s\n", key, extra);
  TH_CHECK(strcmp(key, "V=50257 H=256 in=bf16 teacher=probs tdt=bf16 div=skew-reverse "
                       "tmode=const flags=roww") == 0);
  TH_CHECK(strcmp(extra, "T=1 tt=0 eps=1e-20 reduction=batchmean t2=0 gw=f32 accum=fp32 "
                         "hw=0.5 alpha=0.3 ls=0.1 zl=0.0001") == 0);
  wisdom_entry fe = e;
  snprintf(fe.problem, sizeof fe.problem, "%s", key);
  snprintf(fe.extra, sizeof fe.extra, "%s", extra);
  TH_OK(wisdom_entry_problem(&fe, &back));
  TH_CHECK(back.divergence == KLJIT_DIVERGENCE_SKEW_REVERSE_KL && back.skew_alpha == 0.3);
  TH_CHECK(back.label_smoothing == 0.1 && back.z_loss == 1e-4 && back.hard_weight == 0.5);
  TH_CHECK(back.flags == KLJIT_FLAG_ROW_WEIGHTS);
  kljit_problem tvd = plain;
  tvd.divergence = KLJIT_DIVERGENCE_TVD;
  wisdom_problem_key(&tvd, key);
  TH_CHECK(strstr(key, " div=tvd ") != NULL);
  /* the promoted accumulation is a flag of the key (its plan runs another logits GEMM) */
  fam.flags |= KLJIT_FLAG_PRECISE_ACCUMULATION;
  wisdom_problem_key(&fam, key);
  TH_CHECK(strstr(key, " flags=roww,precise") != NULL);
  snprintf(fe.problem, sizeof fe.problem, "%s", key);
  TH_OK(wisdom_entry_problem(&fe, &back));
  TH_CHECK(back.flags == (KLJIT_FLAG_ROW_WEIGHTS | KLJIT_FLAG_PRECISE_ACCUMULATION));
  /* the rules of the new fields, each naming it */
  static const struct {
    const char *line, *says;
  } bad[] = {
      {"V=1000 H=64 in=bf16 teacher=hidden tdt=bf16 tmode=const flags=-", "field ht is missing"},
      {"V=1000 H=64 in=bf16 teacher=probs tdt=bf16 ht=64 tmode=const flags=-",
       "field ht is only for teacher=hidden"},
      {"V=1000 H=64 in=bf16 teacher=probs tdt=bf16 div=kl tmode=const flags=-", "div=kl"},
      {"V=1000 H=64 in=bf16 teacher=probs tdt=bf16 tmode=const flags=tbias",
       "KLJIT_FLAG_TEACHER_BIAS"},
      {"V=1000 H=64 in=bf16 teacher=probs tdt=bf16 div=jsd tmode=const flags=-",
       "names the forward KL (beta = 0)"},
      {"V=1000 H=64 in=bf16 teacher=probs tdt=bf16 div=skew-forward tmode=const flags=-",
       "names the forward KL"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "%s" GPU_A "%s bucket=8192" CHOICE("1024", "measure", "1") "\n",
             H, bad[i].line);
    TH_STATUS(kljit_wisdom_import_string(text), KLJIT_ERR_WISDOM);
    printf("  %s\n", kljit_last_error());
    TH_CHECK(strstr(kljit_last_error(), bad[i].says));
  }
  return TH_PASS;
}
static int the_online_teacher_and_the_loss_family_round_trip_and_serve_plans(void) {
  return th_in_tmpdir("unit-wisdom", family_in);
}

/* One E16 try (a tune_jit_try text) in case k of the test below. */
static int e16_try_case(const char *try_text, int k) {
  kljit_problem pb = dense_problem();
  kljit_context_options o = OPT;
  int arch = 90;
  if (k == 1) arch = 80;
  if (k == 2) pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_FP32;
  if (k == 3) o.gemm_choice = "logits:cublas";
  if (k >= 4) pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 64;
  if (k == 5) pb.tail = KLJIT_TAIL_BUCKET;
  TH_OK(prob_validate(&pb, "e16 try"));
  prob_tuning t = prob_estimate(&pb, arch, &o);
  prob_gemm_choice c;
  memset(&c, 0, sizeof c);
  c.used = 1, c.kind = GEMM_LOGITS, c.n = t.chunk_rows, c.beta_zero = 1;
  TH_CHECK(gemm_algo_jit_parse(try_text, &c) == 0 && c.e16 == 1 && c.jit);
  TH_CHECK(gemm_algo_add(&t, &c) == 0);
  const int takes = tune_takes_e16(&pb, &o, arch, &t);
  printf("  %s case %d: %s\n", try_text, k, takes ? "takes E16" : "does not");
  TH_CHECK(takes == (k == 0 || k == 4));
  recipe r;
  TH_OK(recipe_make(&pb, &t, &o, arch, 132, &r));
  TH_CHECK(r.geom.e16 == takes && (r.geom.logit == KLJIT_FP16) == takes);
  TH_CHECK(!takes || r.gemm[JGEMM_LOGITS].variant.cluster == c.cluster);
  return TH_PASS;
}

/* The tuner's E16 tries (tune_jit_try's logits variants with flag e: the default pingpong, in
 * clusters of 1 and 2) are timed only where the plan takes them (tune_takes_e16): a dense bf16
 * problem on sm_90 does, and so does the sparse teacher's forward KL, and its plan then holds fp16
 * scores with the try's cluster; on sm_80 (no generated GEMM), with fp32 inputs, under
 * KLJIT_GEMM=logits:cublas, or with the sparse teacher's bucket tail, the plan would be the
 * candidate without E16, which the tuner times already. Every try of every GEMM parses. */
static int the_e16_try_is_timed_only_where_the_plan_takes_it(void) {
  int e16_tries = 0;
  for (int kind = 0; kind < 3; kind++)
    for (int i = 0; tune_jit_try(kind, i); i++) {
      prob_gemm_choice c;
      memset(&c, 0, sizeof c);
      TH_CHECK(gemm_algo_jit_parse(tune_jit_try(kind, i), &c) == 0 && c.jit);
      TH_CHECK(!c.e16 || kind == 0);
      e16_tries += c.e16;
      for (int k = 0; c.e16 && k < 6; k++)
        TH_CHECK(e16_try_case(tune_jit_try(kind, i), k) == TH_PASS);
    }
  TH_CHECK(e16_tries == 2 && !tune_jit_try(0, 99) && !tune_jit_try(3, 0) && !tune_jit_try(-1, 0));
  return TH_PASS;
}

static const th_case cases[] = {
    {"the_online_teacher_and_the_loss_family_round_trip_and_serve_plans",
     the_online_teacher_and_the_loss_family_round_trip_and_serve_plans},
    {"export_import_export_is_identical", export_import_export_is_identical},
    {"tuned_gemm_algorithms_round_trip_and_a_foreign_version_is_refused",
     tuned_gemm_algorithms_round_trip_and_a_foreign_version_is_refused},
    {"stale_or_foreign_text_is_rejected_whole", stale_or_foreign_text_is_rejected_whole},
    {"malformed_entries_are_rejected_naming_the_field",
     malformed_entries_are_rejected_naming_the_field},
    {"merge_keeps_higher_rigor_then_lower_time", merge_keeps_higher_rigor_then_lower_time},
    {"system_file_then_user_file_are_read_on_first_use",
     system_file_then_user_file_are_read_on_first_use},
    {"a_stale_default_file_is_skipped_not_fatal", a_stale_default_file_is_skipped_not_fatal},
    {"tuned_entries_are_merged_into_the_user_file", tuned_entries_are_merged_into_the_user_file},
    {"wisdom_only_without_wisdom_is_no_wisdom_naming_the_key",
     wisdom_only_without_wisdom_is_no_wisdom_naming_the_key},
    {"estimate_and_measure_use_stored_wisdom_by_rigor_and_bucket",
     estimate_and_measure_use_stored_wisdom_by_rigor_and_bucket},
    {"candidates_are_usable_and_start_with_the_heuristic",
     candidates_are_usable_and_start_with_the_heuristic},
    {"precompile_from_wisdom_then_plans_compile_nothing",
     precompile_from_wisdom_then_plans_compile_nothing},
    {"bad_arguments_are_rejected", bad_arguments_are_rejected},
    {"the_e16_try_is_timed_only_where_the_plan_takes_it",
     the_e16_try_is_timed_only_where_the_plan_takes_it},
};
TH_MAIN(cases)
