/* SPDX-License-Identifier: Apache-2.0 */
/* unit_kernel_specs.c — what a kernel spec renders: the same bytes for the same spec, in one
 * process, in a second one and in every build (a few modules' SHA-256 pinned: the cache keys on
 * the source), each optional loss parameter in the source only when set, and a sentence naming
 * the parameter for a spec the templates refuse. Lua only: no NVRTC compile, no GPU
 * (unit_kernels.c compiles the modules). */
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "harness.h"
#include "kernel_problems.h"

static const char RENDER_SAMPLES[] = "--render-samples"; /* hidden mode: a second process */

/* The optional parameters reach a source only when set: the plain problem renders the bytes it
 * always did (its cache entries and wisdom stay valid), and each feature changes the source by
 * what it needs (tanhf for a cap, the stride for a padded teacher). */
static int loss_family_parameters_reach_the_source_only_when_set(void) {
  kljit_problem pb;
  TH_CHECK(make_problem(EDGE_PROBLEMS[0], 50257, &pb)); /* a logits teacher */
  TH_CHECK(pb.teacher == KLJIT_TEACHER_DENSE_LOGITS);
  prob_geometry g;
  for (int t = 0; t < N_TARGETS; t++) {
    TH_OK(geometry_for(&pb, &TARGETS[t], &g));
    strbuf plain = {0}, cap = {0}, tcap = {0}, pad = {0}, ce = {0};
    TH_OK(kspec_render(&g.rows, &plain));
    kspec k = g.rows;
    k.softcap = 30.0;
    TH_OK(kspec_render(&k, &cap));
    k = g.rows, k.tsoftcap = 50.0;
    TH_OK(kspec_render(&k, &tcap));
    k = g.rows, k.tld = 50264;
    TH_OK(kspec_render(&k, &pad));
    k = g.rows, k.hard = 0.5, k.soft1 = -0.5;
    TH_OK(kspec_render(&k, &ce));
    TH_CHECK(strstr(ce.data, "HARD=0.5") && strstr(ce.data, "SOFT=0.5") &&
             strstr(ce.data, "float rec[7]") && strstr(ce.data, "ROWSTAT_FLOATS = 8,") &&
             strstr(ce.data, "r[ROWSTAT_LSE1] = rs.lse1"));
    TH_CHECK(strstr(plain.data, "ROWSTAT_FLOATS = 4,") && !strstr(plain.data, "ROWSTAT_LSE1"));
    TH_CHECK(strstr(plain.data, "float rec[5]") || strstr(plain.data, "float rec[") == NULL);
    /* CE on a shard other than the first: its label column and no lse term of its own */
    strbuf ce2 = {0};
    k = g.rows, k.hard = 0.5, k.offset = 1000, k.sharded = 1;
    TH_OK(kspec_render(&k, &ce2));
    TH_CHECK(strstr(ce2.data, "VOFF=1000") && strstr(ce2.data, "y - 1000") &&
             strstr(ce2.data, "ce.loss += ce.lse1") == NULL && strstr(ce.data, "ce.loss += ce.lse1"));
    TH_CHECK(strstr(ce.data, "VOFF") == NULL && strstr(ce2.data, "SHARDED") == NULL);
    sb_free(&ce2);
    if (g.rows.cluster != 0) { /* DIV in the cluster: S from registers, no sweep, no sums */
      strbuf jsd = {0};
      k = g.rows, k.div = "jsd", k.beta = 0.5;
      TH_OK(kspec_render(&k, &jsd));
      TH_CHECK(strstr(jsd.data, "DIV=jsd") && strstr(jsd.data, "sh_total") &&
               strstr(jsd.data, "sweep 1") == NULL && strstr(jsd.data, "kl_dense_sums") == NULL);
      TH_CHECK(strstr(plain.data, "sh_total") == NULL);
      sb_free(&jsd);
    } else {
      strbuf jsd = {0};
      k = g.rows, k.div = "jsd", k.beta = 0.5;
      TH_OK(kspec_render(&k, &jsd));
      TH_CHECK(strstr(jsd.data, "DIV=jsd") && strstr(jsd.data, "#define P2SPLIT 1") &&
               strstr(jsd.data, "rowstat[ROWSTAT_FLOATS * row + ROWSTAT_S]") &&
               strstr(jsd.data, "ROWSTAT_FLOATS = 8,") && strstr(jsd.data, "sweep 1"));
      TH_CHECK(strstr(plain.data, "sweep 1") == NULL);
      TH_CHECK(strstr(jsd.data, "kl_dense_sums") && strstr(jsd.data, "SHARDED") == NULL);
      TH_CHECK(strstr(plain.data, "kl_dense_sums") == NULL);
      /* a shard's JSD: S from the records' slot S, no sweep of its own */
      strbuf shard = {0};
      k.sharded = 1;
      TH_OK(kspec_render(&k, &shard));
      TH_CHECK(strstr(shard.data, "SHARDED=true") && strstr(shard.data, "m.S += rec[PART_S]") &&
               strstr(shard.data, "sweep 1") == NULL && strstr(shard.data, "kl_dense_sums"));
      sb_free(&jsd), sb_free(&shard);
    }
    TH_CHECK(strstr(plain.data, "tanhf") == NULL && strstr(plain.data, "SOFTCAP") == NULL);
    TH_CHECK(strstr(plain.data, "TLD") == NULL && strstr(plain.data, "teacher + row * V"));
    TH_CHECK(strstr(cap.data, "SOFTCAP=30") && strstr(cap.data, "kcap") &&
             strstr(cap.data, "3.00000000e+01f * tanhf(s[i]"));
    TH_CHECK(strstr(tcap.data, "TSOFTCAP=50") && strstr(tcap.data, "tanhf(t[i]") &&
             strstr(tcap.data, "kcap") == NULL);
    TH_CHECK(strstr(pad.data, "TLD=50264") && strstr(pad.data, "teacher + row * 50264") &&
             strstr(pad.data, "teacher + row * V") == NULL);
    /* TLD = V is the plain problem */
    k = g.rows, k.tld = k.v;
    strbuf same = {0};
    TH_OK(kspec_render(&k, &same));
    TH_CHECK(strcmp(same.data, plain.data) == 0);
    /* the online teacher's bias: an argument and an add on its loaded logits */
    strbuf tb = {0};
    k = g.rows, k.tchunk = 1, k.tbdt = KLJIT_BF16;
    TH_OK(kspec_render(&k, &tb));
    TH_CHECK(strstr(tb.data, "TBDT=bf16") && strstr(tb.data, "t[i] += to_f32(tbias[v + i])") &&
             strstr(tb.data, "const tbias_t* __restrict__ tbias"));
    TH_CHECK(strstr(plain.data, "tbias") == NULL);
    k.tchunk = 0; /* a bias for a teacher array the caller gives is refused */
    TH_CHECK(kspec_render(&k, &tb) != KLJIT_SUCCESS);
    sb_free(&tb);
    sb_free(&plain), sb_free(&cap), sb_free(&tcap), sb_free(&pad), sb_free(&same), sb_free(&ce);
  }
  /* the planner fills the spec from the problem's fields */
  pb.softcap = 20.0, pb.teacher_softcap = 40.0, pb.teacher_vocab = pb.teacher_ld = 50304;
  pb.hard_weight = 0.25, pb.soft_weight = 0.75;
  TH_OK(prob_validate(&pb, "test"));
  TH_OK(geometry_for(&pb, &TARGETS[T_SM80], &g));
  TH_CHECK(g.rows.softcap == 20.0 && g.rows.tsoftcap == 40.0 && g.rows.tld == 50304);
  TH_CHECK(g.rows.hard == 0.25 && g.rows.soft1 == -0.25 && g.rows.div == NULL);
  pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
  TH_OK(prob_validate(&pb, "test"));
  TH_OK(geometry_for(&pb, &TARGETS[T_SM90_CLUSTER], &g));
  TH_CHECK(g.rows.div && strcmp(g.rows.div, "jsd") == 0 && g.rows.beta == 0.5);
  /* the cluster holds the row and sums S over its blocks: pass 2 runs the cluster's blocks */
  TH_CHECK(g.rows.cluster > 0 && g.p2_split == g.rows.cluster);
  pb.beta = 1.0; /* JSD's end point is the reverse KL's kernels */
  TH_OK(geometry_for(&pb, &TARGETS[T_SM80], &g));
  TH_CHECK(g.rows.div && strcmp(g.rows.div, "reverse") == 0 && g.rows.beta == 0.0);
  TH_CHECK(g.helpers.softcap == 0.0 && g.helpers.tld == 0 && g.helpers.hard == 0.0);
  return TH_PASS;
}

/* Rendered sources for one problem per teacher form: the helpers, and the dense rows planned
 * for every target (two-pass and cluster variants). */
enum { N_SAMPLES = 3 * (N_TARGETS + 1) };
static int render_samples(strbuf out[N_SAMPLES]) {
  for (int i = 0, o = 0; i < 3; i++) {
    kljit_problem pb;
    if (!make_problem(EDGE_PROBLEMS[i], 50257, &pb)) return TH_FAIL;
    prob_geometry g;
    for (int t = 0; t < N_TARGETS; t++) {
      TH_OK(geometry_for(&pb, &TARGETS[t], &g));
      TH_OK(kspec_render(&g.rows, &out[o++]));
    }
    TH_OK(kspec_render(&g.helpers, &out[o++]));
  }
  return TH_PASS;
}

/* The hidden mode: renders the samples in this fresh process, each followed by a NUL. */
static int print_samples(void) {
  strbuf smp[N_SAMPLES] = {{0}};
  const int r = render_samples(smp);
  for (int i = 0; i < N_SAMPLES && r == TH_PASS; i++)
    fwrite(smp[i].data, 1, smp[i].len + 1, stdout);
  for (int i = 0; i < N_SAMPLES; i++) sb_free(&smp[i]);
  return r;
}

/* The samples as a second program run renders them (fresh address space, fresh Lua seeds). */
static int render_in_second_process(strbuf *out) {
  int fd[2];
  if (pipe(fd) != 0) return TH_FAIL;
  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) return TH_FAIL;
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]), close(fd[1]);
    execl("/proc/self/exe", "unit_kernel_specs", RENDER_SAMPLES, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  char buf[65536];
  ssize_t got;
  while ((got = read(fd[0], buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR))
    if (got > 0 && sb_append(out, buf, (size_t)got) != KLJIT_SUCCESS) break;
  close(fd[0]);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
  TH_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  return TH_PASS;
}

static int rendering_is_deterministic_per_spec(void) {
  strbuf a[N_SAMPLES] = {{0}}, b[N_SAMPLES] = {{0}}, child = {0};
  int r = render_samples(a);
  if (r == TH_PASS) r = render_samples(b);
  if (r == TH_PASS) r = render_in_second_process(&child);
  size_t off = 0;
  for (int i = 0; i < N_SAMPLES && r == TH_PASS; i++) {
    if (a[i].len == 0 || a[i].len != b[i].len || memcmp(a[i].data, b[i].data, a[i].len) != 0) {
      fprintf(stderr, "sample %d rendered twice in one process differs\n", i);
      r = TH_FAIL;
    } else if (off + a[i].len + 1 > child.len ||
               memcmp(child.data + off, a[i].data, a[i].len + 1) != 0) {
      fprintf(stderr, "sample %d rendered in a second process differs\n", i);
      r = TH_FAIL;
    }
    off += a[i].len + 1;
  }
  if (r == TH_PASS && off != child.len) {
    fprintf(stderr, "the second process wrote %zu bytes, want %zu\n", child.len, off);
    r = TH_FAIL;
  }
  for (int i = 0; i < N_SAMPLES; i++) sb_free(&a[i]), sb_free(&b[i]);
  sb_free(&child);
  return r;
}

/* A rejected spec comes back as KLJIT_ERR_UNSUPPORTED with a sentence naming the parameter. */
static int expect_rejected(const kspec *k, const char *param) {
  strbuf src = {0};
  const kljit_status st = kspec_render(k, &src);
  sb_free(&src);
  const char *const msg = kljit_last_error();
  printf("%s: %s: %s\n", param, kljit_status_string(st), msg);
  TH_CHECK(st == KLJIT_ERR_UNSUPPORTED);
  TH_CHECK(strstr(msg, param) != NULL);
  /* a sentence: several words, not a Lua traceback */
  TH_CHECK(strlen(msg) >= 20 && strchr(msg, ' ') != NULL);
  TH_CHECK(strstr(msg, "traceback") == NULL && strstr(msg, "attempt to") == NULL);
  return TH_PASS;
}

static kspec pinned_spec(int i); /* the pinned modules (below): their specs written out */

static int invalid_spec_is_rejected_with_a_sentence(void) {
  kljit_problem pb;
  TH_CHECK(make_problem(EDGE_PROBLEMS[0], 50257, &pb));
  prob_geometry g, gc;
  TH_OK(geometry_for(&pb, &TARGETS[T_SM80], &g));
  TH_OK(geometry_for(&pb, &TARGETS[T_SM90_CLUSTER], &gc));
  /* the unmodified specs render, so each rejection below is the changed parameter's doing */
  const kspec *const valid[] = {&g.rows, &gc.rows, &g.helpers};
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
    strbuf src = {0};
    TH_OK(kspec_render(valid[i], &src));
    sb_free(&src);
  }
  kspec k = g.rows;
  k.threads = 100;
  if (expect_rejected(&k, "THREADS") != TH_PASS) return TH_FAIL;
  k = g.rows;
  k.teacher = "entropy";
  if (expect_rejected(&k, "TEACHER") != TH_PASS) return TH_FAIL;
  k = g.helpers;
  k.reduction = "median";
  if (expect_rejected(&k, "REDUCTION") != TH_PASS) return TH_FAIL;
  TH_CHECK(gc.rows.cluster > 0); /* else geometry_for no longer reaches the cluster variant */
  {
    k = gc.rows;
    k.cluster = 3; /* clusters are a power of two */
    if (expect_rejected(&k, "CLUSTER") != TH_PASS) return TH_FAIL;
  }
  /* the sparse rows' block merge and E16 scores (the logits GEMM's epilogue's records): each
   * outside what the epilogue writes is refused, naming it */
  const kspec sparse = pinned_spec(4); /* renorm tail, log-probabilities */
  strbuf src = {0};
  TH_OK(kspec_render(&sparse, &src));
  sb_free(&src);
  kspec e16 = sparse;
  e16.merge_block = 1, e16.etile = 128, e16.logit = KLJIT_FP16, e16.inplace = 0;
  e16.ldg = e16.ld;
  TH_OK(kspec_render(&e16, &src)); /* the forward KL over E16's scores */
  sb_free(&src);
  k = sparse, k.merge_block = 1, k.div = "reverse", k.sharded = 1;
  if (expect_rejected(&k, "MERGE block takes no SHARDED") != TH_PASS) return TH_FAIL;
  k = e16, k.merge_block = 0; /* a tile's records are many: the block merges them */
  if (expect_rejected(&k, "ETILE is pass 2 over the GEMM's fp16 scores") != TH_PASS) return TH_FAIL;
  k = e16, k.div = "jsd", k.beta = 0.5; /* a divergence's support terms: fp32 gathers */
  if (expect_rejected(&k, "ETILE takes what the GEMM's epilogue covers") != TH_PASS)
    return TH_FAIL;
  k = e16, k.hard = 0.5, k.lsmooth = 0.1; /* label smoothing's sum of z': no slot */
  if (expect_rejected(&k, "ETILE takes what the GEMM's epilogue covers") != TH_PASS)
    return TH_FAIL;
  k = e16, k.tail = "bucket";
  if (expect_rejected(&k, "ETILE takes what the GEMM's epilogue covers") != TH_PASS)
    return TH_FAIL;
  return TH_PASS;
}

/* ---- pinned bytes --------------------------------------------------------------------- */

/* The same spec must render the same bytes in every build, not only twice in one (the cache keys
 * on them: a changed byte recompiles every user's kernels). So a few modules, one or two of each
 * family, with the optional parameters on and off, keep the SHA-256 of their source and
 * manifest here. The specs are written out, not planned, so that a planner change moves no pin.
 * A change meant to change the generated code (a template edit, the version in the banner)
 * updates PINNED: `unit_kernel_specs --print-pins` prints the table as this build renders it. */
enum { N_PINNED = 9 };
static kspec pinned_spec(int i) {
  kspec k;
  memset(&k, 0, sizeof k);
  k.family = KSPEC_DENSE_ROWS, k.v = 50257, k.ld = 50264, k.threads = 256, k.split = 4;
  k.nv = 1, k.ldg = 100528, k.inplace = 1, k.logit = KLJIT_FP32, k.grad = KLJIT_BF16;
  k.tdt = KLJIT_BF16, k.bdt = KLJIT_BF16, k.out = KLJIT_FP32, k.teacher = "logits";
  k.reduction = "batchmean", k.tmode = KLJIT_TEMPERATURE_CONSTANT, k.tt_same = 1, k.t = 1.0;
  k.eps = 1e-20, k.vtot = 50257, k.tld = 50257;
  switch (i) {
  case 0: break; /* the plain two-pass rows */
  case 1:        /* every optional loss parameter, a run-time T, a bias, checked mode */
    k.tmode = KLJIT_TEMPERATURE_RUNTIME, k.tt_same = 0, k.tt = 1.3, k.bias = 1, k.check = 1;
    k.grad = KLJIT_FP16, k.tld = 50304, k.softcap = 30.0, k.tsoftcap = 50.0, k.hard = 0.5;
    k.t2 = 1, k.soft1 = -0.5, k.div = "jsd", k.beta = 0.5;
    break;
  case 2: /* the sm_90 cluster variant, a constant T != 1 */
    k.split = 8, k.cluster = 8, k.nv = 8, k.inplace = 0, k.t = 0.7;
    break;
  case 3: /* a vocabulary shard with its CE */
    k.vtot = 151936, k.offset = 75968, k.hard = 0.25, k.div = "reverse", k.sharded = 1;
    break;
  case 4: /* sparse top-K rows */
    k.family = KSPEC_SPARSE_ROWS, k.teacher = "sparse", k.tdt = KLJIT_FP32, k.topk = 64;
    k.idt = KLJIT_INT32, k.values = "logprobs", k.tail = "renorm";
    break;
  case 5: /* the helpers */
    k.family = KSPEC_HELPERS, k.tld = 0;
    break;
  case 6:
    k.family = KSPEC_HELPERS, k.tld = 0, k.out = KLJIT_BF16, k.reduction = "sum", k.t2 = 1;
    break;
  case 7: /* generated GEMMs: the cooperative logits GEMM, a pingpong dX GEMM */
  case 8:
    memset(&k, 0, sizeof k);
    k.family = KSPEC_GEMM_SM90, k.tdt = KLJIT_BF16, k.out = KLJIT_FP32, k.gemm_layout = "nt";
    k.gemm_bn = 256, k.gemm_consumers = 2, k.gemm_stages = 4, k.gemm_raster = 'm';
    k.gemm_cluster = 1;
    if (i == 8)
      k.gemm_layout = "nn", k.out = KLJIT_BF16, k.gemm_beta = 1, k.gemm_bn = 128,
      k.gemm_stages = 5, k.gemm_raster = 'n', k.gemm_cluster = 2, k.gemm_schedule = 'p';
    break;
  }
  return k;
}

static const char *const PINNED[N_PINNED] = {
    "7ce72fc579821b39517ad3427b8526715f89ddb5219ca2d3ce8fcab2aa107427",
    "fd9a6cae0d8c0a672a86477a712631f9285ee01056aedef49e1a24d406f4ac13",
    "296266626722cc73272ceda79262190d8eba39c6f9f497ec8e28f2a84ba560c0",
    "5d0e04ef430afcf5d7931a527462da626504a365160e3e3a4dbb55de207a7e32",
    "20a1033440ea29123412ab9465ca3ccf7d501ab9e0deeeeb59f9cdd65f55b9f3",
    "6059a259ae738578ac8b4d509e5ce6c09c57f8780857151673f4ef74dcf9cf30",
    "0f4c60c4f2484976af530c3ad5a495d1e98d451116ba68d25269a4dd6a376b57",
    "5c4d84d37c1e06f36d2b9f2f05615a5ca02d41461a9dc52d4d1d721e96ba5b25",
    "339d0e4ea8841e82823482ea4907a5024e788d849a731027d16887bf27c133f0",
};

/* The digest of spec i's source and manifest. */
static kljit_status pinned_digest(int i, char hex[65]) {
  const kspec k = pinned_spec(i);
  strbuf src = {0}, manifest = {0};
  kljit_status st = kspec_render_iface(&k, &src, &manifest);
  if (st == KLJIT_SUCCESS) st = sb_append(&src, "\n-- manifest --\n", 16);
  if (st == KLJIT_SUCCESS) st = sb_append(&src, manifest.data ? manifest.data : "", manifest.len);
  if (st == KLJIT_SUCCESS) sha256_hex(src.data, src.len, hex);
  sb_free(&src), sb_free(&manifest);
  return st;
}

static const char PRINT_PINS[] = "--print-pins"; /* hidden mode: the table as rendered now */
static int print_pins(void) {
  printf("static const char *const PINNED[N_PINNED] = {\n");
  for (int i = 0; i < N_PINNED; i++) {
    char hex[65];
    TH_OK(pinned_digest(i, hex));
    printf("    \"%s\",\n", hex);
  }
  printf("};\n");
  return TH_PASS;
}

static int rendered_modules_keep_their_pinned_bytes(void) {
  int r = TH_PASS;
  for (int i = 0; i < N_PINNED; i++) {
    char hex[65];
    TH_OK(pinned_digest(i, hex));
    if (strcmp(hex, PINNED[i]) != 0) {
      fprintf(stderr, "pinned module %d renders to %s, pinned %s\n", i, hex, PINNED[i]);
      r = TH_FAIL;
    }
  }
  return r;
}

static const th_case cases[] = {
    {"rendering_is_deterministic_per_spec", rendering_is_deterministic_per_spec},
    {"invalid_spec_is_rejected_with_a_sentence", invalid_spec_is_rejected_with_a_sentence},
    {"loss_family_parameters_reach_the_source_only_when_set",
     loss_family_parameters_reach_the_source_only_when_set},
    {"rendered_modules_keep_their_pinned_bytes", rendered_modules_keep_their_pinned_bytes},
};

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], RENDER_SAMPLES) == 0) return print_samples();
  if (argc == 2 && strcmp(argv[1], PRINT_PINS) == 0) return print_pins();
  return th_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
