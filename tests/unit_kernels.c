/* SPDX-License-Identifier: Apache-2.0 */
/* unit_kernels.c — every kernel module a valid problem can need renders, deterministically,
 * and compiles with NVRTC for sm_80 and sm_90. Needs NVRTC, no GPU.
 *
 * The variant space
 * -----------------
 * A problem reaches generated source only through the two specs the planner derives from it
 * (its recipe: dense rows and helpers). Every categorical field that
 * can change a spec is enumerated in full: teacher form (dense probs, logprobs, logits) x
 * input dtype x teacher dtype x temperature (constant T = 1, which compiles to no scaling;
 * constant T != 1; run time) x teacher temperature (T's or its own; logits form only) x bias x
 * native logits (16-bit inputs only: fp32 logits are native already) x reduction x T^2
 * scaling x grad_weight dtype (fp32 or the weight dtype) x grad_weight_accum (16-bit
 * grad_weight only: fp32 accumulates in place either way). Fixed at KLJIT_PROBLEM_INIT:
 * hidden (GEMM shapes only), label dtype and ignore_index (kernel arguments at run time), eps
 * (a constant, like T), TF32 (GEMM only). The sparse top-K form and checked mode have their
 * own, smaller space (add_sparse_and_checked says how it covers theirs).
 *
 * Each problem is planned three ways: for sm_80, for sm_90, and for sm_90 with the one-pass
 * thread-block-cluster variant of the dense rows (opt-in: KLJIT_ROW_KERNEL=cluster, where a
 * row fits a cluster). A module is compiled for every arch that plans it, so the two-pass
 * dense rows are compiled for both archs and the cluster variant for sm_90 alone.
 *
 * V is not a categorical dimension: it reaches the source only as constants (V, LD and what
 * the planner and templates derive from them: segment length, blocks per row, cluster size
 * and threads, whether row starts stay vector-aligned), never as a code path of its own; the
 * one choice V makes, whether a row fits a cluster, is made for every combination by the
 * third target anyway. What a V can change is covered by one ragged V, 50257 = 8 * 6282 + 1
 * (unaligned row starts, a tail in every row), and one aligned V, 128256 = 16 * 8016, each
 * over the full space; plus edge values compiled for one problem each: 2 and 7 (less than one
 * vector per row, one-block clusters), 32000, 151936 and 256000 (common vocabularies: other
 * blocks per row and cluster shapes) and 2^24 (the largest V and offsets; no cluster fits).
 * The test prints the cluster shapes it reached.
 *
 * Problems share modules (the reduction, for one, reaches only the helpers), so modules are
 * deduplicated by the SHA-256 of their rendered source and each distinct source is compiled
 * once per architecture it is planned for. A parameter list already rendered is not rendered
 * again (the renderer is deterministic: rendering_is_deterministic_per_spec checks it), which
 * keeps the enumeration to seconds. Two worker processes (the CI machine has two cores) take
 * compile jobs from a counter in shared memory.
 *
 * Compile effort: with kljit's own options every job took about 0.5 s (most of it NVVM's
 * optimizer, not fixed cost: several modules in one translation unit took as long as the
 * same modules one by one), which put the test at 12 to 50 minutes of a 2-core CI run. So
 * every cubin job but one in FULL_EVERY compiles with NVRTC's --Ofast-compile=max
 * (NVRTC_FAST): still NVRTC's front end, code generation and ptxas to a real cubin for the
 * arch, in less than half the time; a fixed, spread sample (one job in FULL_EVERY, chosen by
 * module and arch) is compiled exactly as kljit compiles it, so the production options stay
 * covered across every kind of module.
 *
 * Even fast, ptxas was two thirds of a job and kept the full suite over CI's budget, while
 * what a variant changes is source: a C++ or template error shows in the front end and code
 * generation, before ptxas. So the exhaustive case takes to a cubin only the jobs the quick
 * case compiles (choose_cover: per arch, every pair of feature values, the problems outside
 * the full space, a 1-in-SAMPLE_EVERY sample) and the full-effort sample above, and every
 * other planned (module, arch) to PTX for the virtual arch compute_<arch> (NVRTC_PTX).
 * Every variant's source still compiles, and every pair of feature values (features_of:
 * template, strings, booleans, the classes of thread, split and cluster counts and of
 * numbers) still reaches ptxas; what goes unseen is a failure only ptxas reports (inline PTX
 * operands, static shared memory over the limit) that needs three feature values together.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "harness.h"
#include "nvrtc_compile.h"
#include "pairwise.h"
#include "problem.h"
#include "recipe.h"

static const int ARCHS[] = {80, 90};
enum {
  N_ARCHS = sizeof ARCHS / sizeof ARCHS[0],
  WORKERS = 2,
  MAP_CAP = 1 << 15,
  FULL_LOGS = 4,
  FULL_EVERY = 16
};
static const char RENDER_SAMPLES[] = "--render-samples"; /* hidden mode: a second process */

/* A way a problem gets planned: the arch, and the context's row kernel (the options'
 * row_kernel, KLJIT_ROW_KERNEL=cluster in the environment). */
static const char ROW_KERNEL_KNOB[] = "options.row_kernel";
typedef struct target {
  int arch; /* index into ARCHS */
  kljit_row_kernel row_kernel;
} target;
enum { T_SM80, T_SM90, T_SM90_CLUSTER, N_TARGETS };
static const target TARGETS[N_TARGETS] = {{0, KLJIT_ROW_KERNEL_TWO_PASS},
                                          {1, KLJIT_ROW_KERNEL_TWO_PASS},
                                          {1, KLJIT_ROW_KERNEL_CLUSTER}};

/* The specs a problem gets when planned for target `t`: its heuristic recipe for the arch (no
 * SM count, as in precompile). The one place that knows how the planner learns its target. */
static kljit_status geometry_for(const kljit_problem *pb, const target *t, prob_geometry *g) {
  kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  o.row_kernel = t->row_kernel;
  recipe r;
  const kljit_status st = recipe_make(pb, NULL, &o, ARCHS[t->arch], 0, &r);
  *g = r.geom;
  return st;
}

/* ---- the problem space ------------------------------------------------------------------ */

enum axis { AX_FORM, AX_IN, AX_TDT, AX_TEMP, AX_TT, AX_BIAS, AX_NATIVE, AX_RED, AX_T2, AX_GW,
            AX_ACCUM, N_AXES };
static const int AXIS_SIZE[N_AXES] = {3, 3, 3, 3, 2, 2, 2, 4, 2, 2, 2};
static const kljit_teacher_form FORMS[] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                           KLJIT_TEACHER_DENSE_LOGITS};
static const kljit_dtype DTYPES[] = {KLJIT_FP32, KLJIT_FP16, KLJIT_BF16};

/* The problem at odometer position `ax`, or 0 where the position names no problem of its own
 * (a teacher temperature without teacher logits, native logits or a 16-bit grad_weight with
 * fp32 inputs, an accumulation mode without a 16-bit grad_weight). */
static int make_problem(const int ax[N_AXES], int64_t vocab, kljit_problem *pb) {
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  *pb = init;
  pb->hidden = 4096;
  pb->vocab = vocab;
  pb->teacher = FORMS[ax[AX_FORM]];
  pb->input_dtype = pb->weight_dtype = DTYPES[ax[AX_IN]];
  pb->teacher_dtype = DTYPES[ax[AX_TDT]];
  pb->temperature_mode = ax[AX_TEMP] == 2 ? KLJIT_TEMPERATURE_RUNTIME : KLJIT_TEMPERATURE_CONSTANT;
  pb->temperature = ax[AX_TEMP] == 1 ? 0.7 : 1.0;
  if (ax[AX_TT] && pb->teacher != KLJIT_TEACHER_DENSE_LOGITS) return 0;
  pb->teacher_temperature = ax[AX_TT] ? 1.3 : 0.0;
  pb->flags = (ax[AX_BIAS] ? KLJIT_FLAG_BIAS : 0u) | (ax[AX_T2] ? KLJIT_FLAG_SCALE_T_SQUARED : 0u);
  if (ax[AX_NATIVE] && pb->input_dtype == KLJIT_FP32) return 0;
  if (ax[AX_NATIVE]) pb->flags |= KLJIT_FLAG_NATIVE_LOGITS;
  pb->reduction = (kljit_reduction)(KLJIT_REDUCTION_SUM + ax[AX_RED]);
  if (ax[AX_GW] && pb->input_dtype == KLJIT_FP32) return 0;
  pb->grad_weight_dtype = ax[AX_GW] ? pb->weight_dtype : KLJIT_FP32;
  if (ax[AX_ACCUM] && !ax[AX_GW]) return 0;
  pb->grad_weight_accum = ax[AX_ACCUM] ? KLJIT_ACCUM_OUTPUT_DTYPE : KLJIT_ACCUM_FP32;
  return 1;
}

/* Advances the odometer; 0 after the last position. */
static int next_position(int ax[N_AXES]) {
  for (int a = 0; a < N_AXES; a++) {
    if (++ax[a] < AXIS_SIZE[a]) return 1;
    ax[a] = 0;
  }
  return 0;
}

/* ---- digest → index map (open addressing; keys are SHA-256 digests, already uniform) ------ */

typedef struct digest_map {
  uint8_t (*key)[32];
  int *val; /* -1: empty slot */
  size_t n;
} digest_map;

static int dm_init(digest_map *m) {
  m->key = calloc(MAP_CAP, 32);
  m->val = malloc(MAP_CAP * sizeof *m->val);
  m->n = 0;
  if (!m->key || !m->val) return 0;
  for (size_t i = 0; i < MAP_CAP; i++) m->val[i] = -1;
  return 1;
}

static void dm_free(digest_map *m) {
  free(m->key);
  free(m->val);
}

/* The value slot of `d`: holds its index, or -1 for a new key (the key is then stored and the
 * caller fills the slot). NULL when the map is half full. */
static int *dm_slot(digest_map *m, const uint8_t d[32]) {
  uint64_t h;
  memcpy(&h, d, sizeof h);
  for (size_t i = h % MAP_CAP;; i = (i + 1) % MAP_CAP) {
    if (m->val[i] < 0) {
      if (2 * (m->n + 1) > MAP_CAP) return NULL;
      memcpy(m->key[i], d, 32);
      m->n++;
      return &m->val[i];
    }
    if (memcmp(m->key[i], d, 32) == 0) return &m->val[i];
  }
}

/* ---- modules ---------------------------------------------------------------------------- */

/* What a module is, for the statistics. */
enum kind { KIND_TWO_PASS, KIND_CLUSTER, KIND_HELPERS, KIND_SPARSE, N_KINDS };
static const char *const KIND_NAME[N_KINDS] = {"dense_rows two-pass", "dense_rows cluster",
                                               "helpers", "sparse_rows"};

enum { MAX_TOKENS = KSPEC_MAX_PARAMS + 1 };

typedef struct module {
  char *source;
  char name[64];
  enum kind kind;
  int split, cluster, threads; /* dense rows: the launch shape the planner chose */
  unsigned archs;              /* bit a: planned for ARCHS[a] */
  uint32_t tok[MAX_TOKENS];    /* features_of its first parameter list */
  int n_tok;
  int edge;                    /* first planned for a problem outside the full two-V space */
} module;

typedef struct space {
  digest_map by_params, by_source;
  module *mods;
  size_t n_mods;
  long problems, specs;
  int edges; /* adding the problems after the full space (V edges, sparse, shards, families) */
} space;

/* What code a spec's template can take, without its sizes, as tokens: the template, then each
 * parameter with its value's class: a string or boolean as it is, an integer as 0, 1 or more
 * (a cluster or not, one block per row or several, an offset or none), a number as 0, 1 or
 * another value (T = 1 compiles to no scaling). Two specs with the same tokens differ in
 * constants only (V, LD, splits, threads, T's value) and take the same #if branches. */
static int features_of(const kspec *k, uint32_t tok[MAX_TOKENS]) {
  render_param p[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, p);
  const uint32_t t = pw_hash(PW_SEED, kspec_template(k));
  int m = 0;
  tok[m++] = t;
  for (size_t i = 0; i < n; i++) {
    char c[2] = {0, 0};
    const char *v = c;
    switch (p[i].kind) {
    case RP_STR: v = p[i].s ? p[i].s : ""; break;
    case RP_BOOL: c[0] = p[i].i ? 't' : 'f'; break;
    case RP_INT: c[0] = p[i].i == 0 ? '0' : p[i].i == 1 ? '1' : p[i].i > 1 ? 'n' : '-'; break;
    case RP_NUM: c[0] = p[i].d == 0.0 ? '0' : p[i].d == 1.0 ? '1' : 'x'; break;
    }
    tok[m++] = pw_hash(pw_hash(t, p[i].key), v);
  }
  return m;
}

static void space_free(space *s) {
  for (size_t i = 0; i < s->n_mods; i++) free(s->mods[i].source);
  free(s->mods);
  dm_free(&s->by_params);
  dm_free(&s->by_source);
}

/* The module of a parameter list not seen before: renders it and finds or adds its source.
 * Returns the module index, or -1 (diagnosed). */
static int module_of(space *s, const kspec *k, const char *params) {
  strbuf src = {0};
  const kljit_status st = kspec_render(k, &src);
  if (st != KLJIT_SUCCESS) {
    fprintf(stderr, "kspec_render(%s) -> %s: %s\n", params, kljit_status_string(st),
            kljit_last_error());
    sb_free(&src);
    return -1;
  }
  s->specs++;
  uint8_t d[32];
  sha256(src.data, src.len, d);
  int *const slot = dm_slot(&s->by_source, d);
  module *const grown = slot && *slot < 0 ? realloc(s->mods, (s->n_mods + 1) * sizeof *grown)
                                          : NULL;
  if (!slot || (*slot < 0 && !grown)) {
    fprintf(stderr, "out of room for module %zu\n", s->n_mods);
    sb_free(&src);
    return -1;
  }
  if (*slot >= 0) { /* another parameter list rendered to the same bytes */
    sb_free(&src);
    return *slot;
  }
  s->mods = grown;
  module *const m = &s->mods[s->n_mods];
  memset(m, 0, sizeof *m);
  m->source = src.data; /* owned by the module now */
  m->kind = k->family == KSPEC_HELPERS       ? KIND_HELPERS
            : k->family == KSPEC_SPARSE_ROWS ? KIND_SPARSE
            : k->cluster                     ? KIND_CLUSTER
                                             : KIND_TWO_PASS;
  m->split = k->split, m->cluster = k->cluster, m->threads = k->threads;
  m->n_tok = features_of(k, m->tok), m->edge = s->edges;
  kspec_name(k, src.data, m->name);
  return *slot = (int)s->n_mods++;
}

/* Records that spec `k` is planned for ARCHS[arch]. */
static int add_spec(space *s, const kspec *k, int arch) {
  kspec_key pt;
  if (kspec_key_of(k, &pt) != 0) return TH_FAIL;
  uint8_t d[32];
  sha256(pt.text, pt.len, d);
  int *const slot = dm_slot(&s->by_params, d);
  if (!slot) fprintf(stderr, "more distinct parameter lists than the map holds\n");
  else if (*slot < 0) *slot = module_of(s, k, pt.text);
  if (!slot || *slot < 0) return TH_FAIL;
  s->mods[*slot].archs |= 1u << arch;
  return TH_PASS;
}

static int add_problem(space *s, const kljit_problem *pb) {
  const kljit_status st = prob_validate(pb, "every_variant");
  if (st != KLJIT_SUCCESS) {
    fprintf(stderr, "an enumerated problem is not valid: %s: %s\n", kljit_status_string(st),
            kljit_last_error());
    return TH_FAIL;
  }
  s->problems++;
  for (int t = 0; t < N_TARGETS; t++) {
    prob_geometry g;
    TH_OK(geometry_for(pb, &TARGETS[t], &g));
    const int a = TARGETS[t].arch;
    if (add_spec(s, &g.rows, a) != TH_PASS || add_spec(s, &g.helpers, a) != TH_PASS)
      return TH_FAIL;
  }
  return TH_PASS;
}

/* ---- compiling in worker processes ------------------------------------------------------ */

typedef struct job {
  int mod, arch;
  nvrtc_effort effort; /* NVRTC_PTX: the front end and code generation only, no ptxas */
} job;

typedef struct job_result {
  float ms;
  int status; /* -1: never finished (a worker died on it) */
} job_result;

typedef struct shared_state {
  atomic_int next;
  double t0; /* util_now() at the start, for progress lines */
  job_result r[];
} shared_state;

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the job counter is shared between processes");

/* The banner lines (template and parameters) that open a rendered source, for diagnostics. */
static void print_banner(const char *src) {
  for (int i = 0; i < 8 && strncmp(src, "//", 2) == 0; i++) {
    const char *const nl = strchr(src, '\n');
    const int len = nl ? (int)(nl - src) : (int)strlen(src);
    fprintf(stderr, "    %.*s\n", len, src);
    if (!nl) break;
    src = nl + 1;
  }
}

/* Whether `out` is what NVRTC gives for the job: an ELF cubin, or PTX text for sm_<arch>
 * (NVRTC's banner, then .version and .target) that declares at least one kernel. */
static int is_output_of(const job *jb, const strbuf *out) {
  if (jb->effort != NVRTC_PTX) return out->len >= 4 && memcmp(out->data, "\177ELF", 4) == 0;
  static const char BANNER[] = "//\n// Generated by NVIDIA NVVM Compiler";
  char want[32];
  snprintf(want, sizeof want, "\n.target sm_%d\n", ARCHS[jb->arch]);
  return out->len > 0 && strncmp(out->data, BANNER, sizeof BANNER - 1) == 0 &&
         strstr(out->data, "\n.version ") && strstr(out->data, want) &&
         strstr(out->data, ".entry ");
}

static void worker(const space *s, const job *jobs, int n, shared_state *sh) {
  int logs = 0;
  for (int j; (j = atomic_fetch_add(&sh->next, 1)) < n;) {
    const module *const m = &s->mods[jobs[j].mod];
    const int arch = ARCHS[jobs[j].arch];
    strbuf out = {0};
    const double t0 = util_now();
    kljit_status st = nvrtc_compile_effort(m->source, m->name, arch, jobs[j].effort, &out, NULL);
    sh->r[j].ms = (float)(1e3 * (util_now() - t0));
    if (st == KLJIT_SUCCESS && !is_output_of(&jobs[j], &out))
      st = err_set(KLJIT_ERR_INTERNAL, "nvrtc_compile_effort returned %zu bytes that are not %s",
                   out.len, jobs[j].effort == NVRTC_PTX ? "PTX for the arch" : "an ELF cubin");
    sh->r[j].status = (int)st;
    if (st != KLJIT_SUCCESS) {
      fprintf(stderr, "FAILED %s for sm_%d%s: %s\n", m->name, arch,
              jobs[j].effort == NVRTC_PTX ? " (to PTX)" : "", kljit_status_string(st));
      print_banner(m->source);
      if (logs++ < FULL_LOGS) fprintf(stderr, "%s\n", kljit_last_error());
      else fprintf(stderr, "    (log left out: %d failures printed in full already)\n", FULL_LOGS);
    }
    sb_free(&out);
    const int step = n >= 10 ? n / 10 : 1;
    if ((j + 1) % step == 0) {
      printf("  %d of %d compiled (%.0f s)\n", j + 1, n, util_now() - sh->t0);
      fflush(stdout);
    }
  }
}

/* What compile_all does with a planned (module, arch) that `chosen` leaves out. */
typedef enum unchosen { UNCHOSEN_LEFT_OUT, UNCHOSEN_TO_PTX } unchosen;

/* Where a job's NVRTC run ends, for the statistics. */
enum stage { STAGE_CUBIN, STAGE_PTX, N_STAGES };

/* "<n> to <what>, <s> s of compile, mean <ms> ms" for the jobs counted, or nothing for none. */
static void print_stage(const char *what, int cnt, double ms) {
  if (cnt) printf(" %5d to %s, %7.1f s, mean %4.0f ms", cnt, what, ms / 1e3, ms / cnt);
}

/* Compiles every (module, arch) of `chosen` to a cubin (bit a of chosen[i]: module i for
 * ARCHS[a]; NULL: every planned arch of every module) and, with UNCHOSEN_TO_PTX, every other
 * planned one to PTX, in WORKERS processes; prints progress and the times. */
static int compile_all(const space *s, const unsigned *chosen, unchosen rest) {
#define CUBIN(i) (chosen ? chosen[i] : s->mods[i].archs)
#define PTX(i) (rest == UNCHOSEN_TO_PTX ? s->mods[i].archs & ~CUBIN(i) : 0u)
  int n = 0;
  for (size_t i = 0; i < s->n_mods; i++) n += __builtin_popcount(CUBIN(i) | PTX(i));
  job *const jobs = malloc((size_t)n * sizeof *jobs);
  const size_t shsize = sizeof(shared_state) + (size_t)n * sizeof(job_result);
  shared_state *const sh =
      mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!jobs || sh == MAP_FAILED) {
    free(jobs);
    return TH_FAIL;
  }
  n = 0;
  for (size_t i = 0; i < s->n_mods; i++)
    for (int a = 0; a < N_ARCHS; a++) {
      /* the full-effort sample: spread over modules (kinds are enumerated in blocks) and over
       * both archs; to a cubin whether or not the cover chose the job, so that kljit's own
       * options keep reaching ptxas in one job in FULL_EVERY */
      const int full = ((unsigned)i * 7u + (unsigned)a * 3u) % FULL_EVERY == 0;
      if (CUBIN(i) & 1u << a)
        jobs[n++] = (job){(int)i, a, full ? NVRTC_FULL : NVRTC_FAST};
      else if (PTX(i) & 1u << a)
        jobs[n++] = (job){(int)i, a, full ? NVRTC_FULL : NVRTC_PTX};
    }
  atomic_init(&sh->next, 0);
  for (int j = 0; j < n; j++) sh->r[j].status = -1, sh->r[j].ms = 0;

  const double t0 = util_now();
  sh->t0 = t0;
  fflush(NULL);
  pid_t pids[WORKERS];
  int started = 0, bad = 0;
  for (; started < WORKERS; started++) {
    pids[started] = fork();
    if (pids[started] < 0) {
      perror("fork");
      bad = 1;
      break;
    }
    if (pids[started] == 0) {
      worker(s, jobs, n, sh);
      fflush(NULL);
      _exit(0);
    }
  }
  for (int w = 0; w < started; w++) {
    int ws = 0;
    while (waitpid(pids[w], &ws, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      fprintf(stderr, "compile worker %d ended abnormally (wait status 0x%x)\n", w, ws);
      bad = 1;
    }
  }
  const double wall = util_now() - t0;

  int failed = 0, full = 0, ptx = 0;
  double ms[N_ARCHS][N_KINDS + 1][N_STAGES] = {{{0}}}; /* [arch][kind; N_KINDS: all][stage] */
  int cnt[N_ARCHS][N_KINDS + 1][N_STAGES] = {{{0}}};
  for (int j = 0; j < n; j++) {
    const module *const m = &s->mods[jobs[j].mod];
    full += jobs[j].effort == NVRTC_FULL, ptx += jobs[j].effort == NVRTC_PTX;
    if (sh->r[j].status != KLJIT_SUCCESS) {
      failed++;
      if (sh->r[j].status < 0) fprintf(stderr, "never finished: %s for sm_%d\n", m->name,
                                       ARCHS[jobs[j].arch]);
      continue;
    }
    const int a = jobs[j].arch, st = jobs[j].effort == NVRTC_PTX ? STAGE_PTX : STAGE_CUBIN;
    ms[a][N_KINDS][st] += sh->r[j].ms, cnt[a][N_KINDS][st]++;
    ms[a][m->kind][st] += sh->r[j].ms, cnt[a][m->kind][st]++;
  }
  printf(
      "compiled %d jobs (%zu modules x planned archs) in %.1f s wall with %d workers: %d to a "
      "cubin with kljit's options, %d to a cubin with --Ofast-compile=max",
      n, s->n_mods, wall, WORKERS, full, n - full - ptx);
  if (ptx) printf(", %d to PTX only (compute_<arch>, --Ofast-compile=max, no ptxas)", ptx);
  printf("\n");
  for (int a = 0; a < N_ARCHS; a++)
    for (int k = N_KINDS; k >= 0; k--) {
      const int *const c = cnt[a][k];
      if (!c[STAGE_CUBIN] && !c[STAGE_PTX]) continue;
      if (k == N_KINDS)
        printf("  sm_%d:%16s", ARCHS[a], "");
      else
        printf("    %-20s", KIND_NAME[k]);
      print_stage("a cubin", c[STAGE_CUBIN], ms[a][k][STAGE_CUBIN]);
      print_stage("PTX", c[STAGE_PTX], ms[a][k][STAGE_PTX]);
      printf("\n");
    }
  if (failed) fprintf(stderr, "%d of %d compile jobs failed\n", failed, n);
  munmap(sh, shsize);
  free(jobs);
  return bad || failed ? TH_FAIL : TH_PASS;
#undef CUBIN
#undef PTX
}

/* Prints the distinct launch shapes of the dense rows modules (split, or cluster x threads). */
static void print_shapes(const space *s) {
  for (enum kind kind = KIND_TWO_PASS; kind <= KIND_CLUSTER; kind++) {
    int seen[32][2], n = 0;
    printf("  %s shapes:", KIND_NAME[kind]);
    for (size_t i = 0; i < s->n_mods; i++) {
      const module *const m = &s->mods[i];
      const int a = kind == KIND_CLUSTER ? m->cluster : m->split, b = m->threads;
      int j = 0;
      while (j < n && (seen[j][0] != a || seen[j][1] != b)) j++;
      if (m->kind != kind || j < n || n == 32) continue;
      seen[n][0] = a, seen[n][1] = b, n++;
      printf(kind == KIND_CLUSTER ? " cluster %d x %d threads" : " split %d x %d threads", a, b);
    }
    printf("\n");
  }
}

/* ---- cases ------------------------------------------------------------------------------ */

/* Odometer positions of a few rich problems for the V edge cases (checked by make_problem). */
static const int EDGE_PROBLEMS[3][N_AXES] = {
    /* logits, bf16 in, fp32 teacher, T != 1, own teacher T, bias, fp32 logits, mean, T^2 */
    {2, 2, 0, 1, 1, 1, 0, 2, 1, 1, 0},
    /* probs, fp16 in, bf16 teacher, runtime T, native fp16 logits, batchmean, 16-bit dW */
    {0, 1, 2, 2, 0, 0, 1, 1, 0, 1, 1},
    /* logprobs, fp32 in, fp16 teacher, T = 1, bias, none */
    {1, 0, 1, 0, 0, 1, 0, 3, 0, 0, 0},
};

/* Shards of a vocabulary-parallel head (issue 7): the sparse rows' OFFSET and VTOT (global ids,
 * first shard or not: the ghost term's #if), the helpers' VTOT (MEAN), the merge kernels. Each
 * shard geometry with every tail (K above the shard's V where it can be), and the dense forms. */
static int add_shards(space *s) {
  static const struct {
    int64_t v, total, offset;
    int shards, k;
  } SH[] = {{126, 1001, 0, 8, 200},
            {125, 1001, 876, 8, 100},
            {75968, 151936, 75968, 2, 1024},
            {16384, 1 << 24, (1 << 24) - 16384, 1024, 1024}};
  for (size_t i = 0; i < sizeof SH / sizeof SH[0]; i++)
    for (int f = 0; f < 5; f++) {
      kljit_problem pb = KLJIT_PROBLEM_INIT;
      pb.hidden = 4096;
      pb.vocab = SH[i].v, pb.vocab_total = SH[i].total, pb.vocab_offset = SH[i].offset;
      pb.shards = SH[i].shards;
      pb.input_dtype = pb.weight_dtype = DTYPES[i % 3];
      pb.reduction = f % 2 ? KLJIT_REDUCTION_MEAN : KLJIT_REDUCTION_BATCHMEAN;
      if (f < 3) {
        pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = SH[i].k;
        pb.tail = (kljit_tail)(KLJIT_TAIL_NONE + f);
        if (i % 2) pb.flags |= KLJIT_FLAG_CHECK_INPUTS | KLJIT_FLAG_BIAS;
      } else {
        pb.teacher = f == 3 ? KLJIT_TEACHER_DENSE_PROBS : KLJIT_TEACHER_DENSE_LOGITS;
        pb.teacher_temperature = f == 4 ? 2.0 : 0.0;
      }
      const int r = add_problem(s, &pb);
      if (r != TH_PASS) return r;
    }
  /* the loss families on a shard: the sums kernel and SHARDED (the reverse KL with CE mixing,
   * VOFF; the JSD with CE on the first shard, no VOFF; the JSD with the online teacher, its
   * bias and a softcap) */
  for (int i = 0; i < 3; i++) {
    kljit_problem pb = KLJIT_PROBLEM_INIT;
    pb.hidden = 4096;
    pb.vocab = SH[i].v, pb.vocab_total = SH[i].total, pb.vocab_offset = SH[i].offset;
    pb.shards = SH[i].shards;
    pb.input_dtype = pb.weight_dtype = DTYPES[(i + 1) % 3];
    pb.divergence = i == 1 ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_JSD;
    pb.beta = i == 1 ? 0.0 : 0.5;
    if (i < 2) pb.hard_weight = 0.5, pb.soft_weight = 0.5;
    if (i == 2) {
      pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 2048;
      pb.flags |= KLJIT_FLAG_TEACHER_BIAS, pb.softcap = 30.0;
    }
    const int r = add_problem(s, &pb);
    if (r != TH_PASS) return r;
  }
  return TH_PASS;
}

/* The sparse top-K teacher and checked mode. The sparse rows' code paths are chosen by the
 * tail, the value form and the logits/gradient dtypes (input dtype x native logits): those
 * are enumerated in full (30 problems). The rest reach independent #if blocks of the template
 * (id width, values dtype, bias, temperature mode, checked mode) and rotate through them, so
 * every value of each meets every tail. K and V are constants only: three (K, V) pairs rotate,
 * K = 1, K = 100 and K = 1024 (the largest shared-memory support), V up to 2^24 with BUCKET's
 * largest segment bitmap. Checked mode of the dense rows: one problem per teacher form. */
static int add_sparse_and_checked(space *s) {
  static const int64_t KV[3][2] = {{1, 32000}, {100, 151936}, {1024, 1 << 24}};
  int i = 0;
  for (int tail = 0; tail < 3; tail++)
    for (int lp = 0; lp < 2; lp++)
      for (int in = 0; in < 3; in++)
        for (int native = 0; native < 2; native++) {
          if (native && DTYPES[in] == KLJIT_FP32) continue;
          kljit_problem pb = KLJIT_PROBLEM_INIT;
          pb.hidden = 4096;
          pb.teacher = KLJIT_TEACHER_SPARSE_TOPK;
          pb.tail = (kljit_tail)(KLJIT_TAIL_NONE + tail);
          pb.topk_values = lp ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
          pb.input_dtype = pb.weight_dtype = DTYPES[in];
          pb.flags = native ? KLJIT_FLAG_NATIVE_LOGITS : 0u;
          pb.topk = (int32_t)KV[i % 3][0], pb.vocab = KV[i % 3][1];
          pb.topk_id_dtype = i % 2 ? KLJIT_INT32 : KLJIT_INT64;
          pb.teacher_dtype = DTYPES[(i / 2) % 3];
          if (i % 4 == 1) pb.flags |= KLJIT_FLAG_BIAS;
          pb.temperature_mode = i % 3 == 2 ? KLJIT_TEMPERATURE_RUNTIME
                                           : KLJIT_TEMPERATURE_CONSTANT;
          pb.temperature = i % 3 == 1 ? 0.7 : 1.0;
          if (i % 5 < 2) pb.flags |= KLJIT_FLAG_CHECK_INPUTS;
          i++;
          const int r = add_problem(s, &pb);
          if (r != TH_PASS) return r;
        }
  for (int f = 0; f < 3; f++) {
    kljit_problem pb;
    if (!make_problem(EDGE_PROBLEMS[f], 50257, &pb)) return TH_FAIL;
    pb.flags |= KLJIT_FLAG_CHECK_INPUTS;
    const int r = add_problem(s, &pb);
    if (r != TH_PASS) return r;
  }
  return add_shards(s);
}

/* Issue 19's dense-row parameters, each only in the source of a problem that sets it: the
 * student softcap (two-pass, cluster, fp32 and 16-bit logits), the teacher softcap of a logits
 * teacher, padded teacher rows with and without aligned vector loads, CE mixing (with T^2 and
 * without, CE alone), the online teacher with its bias. A representative set
 * (the features are independent #if blocks of one template), not a product. */
static int add_loss_families(space *s) {
  for (int i = 0; i < 4; i++) {
    kljit_problem pb;
    if (!make_problem(EDGE_PROBLEMS[i % 3], i == 3 ? 32000 : 151936, &pb)) return TH_FAIL;
    pb.softcap = i == 2 ? 0.0 : 30.0;
    if (pb.teacher == KLJIT_TEACHER_DENSE_LOGITS) pb.teacher_softcap = 50.0;
    pb.teacher_vocab = pb.teacher_ld = i % 2 ? pb.vocab + 1 : i == 2 ? 152064 : 0;
    if (i == 3) pb.flags |= KLJIT_FLAG_CHECK_INPUTS;
    if (i >= 2) pb.hard_weight = 0.5, pb.soft_weight = i == 3 ? 0.0 : 0.5; /* CE mixing */
    /* the reverse KL and the JSD (the cluster target plans them in clusters where they fit) */
    pb.divergence = i == 0 ? KLJIT_DIVERGENCE_REVERSE_KL : i == 1 ? KLJIT_DIVERGENCE_JSD
                                                                  : KLJIT_DIVERGENCE_FORWARD_KL;
    pb.beta = i == 1 ? 0.5 : 0.0;
    const int r = add_problem(s, &pb);
    if (r != TH_PASS) return r;
  }
  for (int i = 0; i < 2; i++) { /* the sparse teacher with CE mixing and the softcap */
    kljit_problem sp = KLJIT_PROBLEM_INIT;
    sp.hidden = 4096, sp.vocab = i ? 75968 : 151936;
    sp.input_dtype = sp.weight_dtype = i ? KLJIT_FP16 : KLJIT_BF16;
    sp.teacher = KLJIT_TEACHER_SPARSE_TOPK, sp.topk = i ? 100 : 1024, sp.teacher_dtype = KLJIT_FP32;
    sp.tail = i ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET;
    sp.topk_values = i ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
    sp.hard_weight = 0.5, sp.soft_weight = i ? 0.0 : 0.5;
    if (!i) sp.softcap = 30.0, sp.flags |= KLJIT_FLAG_SCALE_T_SQUARED, sp.temperature = 2.0;
    if (i) sp.vocab_total = 151936, sp.vocab_offset = 75968, sp.shards = 2; /* a shard's CE */
    const int r = add_problem(s, &sp);
    if (r != TH_PASS) return r;
  }
  /* issue 29: the top-K teacher's reverse KL and JSD over both tails (RENORM's stats pass
   * keeps the support's own (max, sum-exp)), value forms and logits dtypes, with CE, a cap,
   * checked mode, and on the first and a later shard (their second round's sums kernel) */
  for (int i = 0; i < 6; i++) {
    kljit_problem sp = KLJIT_PROBLEM_INIT;
    sp.hidden = 4096, sp.vocab = i % 3 == 2 ? 151936 : 50257;
    sp.input_dtype = sp.weight_dtype = DTYPES[i % 3];
    sp.teacher = KLJIT_TEACHER_SPARSE_TOPK, sp.topk = i == 5 ? 1024 : 100;
    sp.teacher_dtype = DTYPES[(i + 1) % 3];
    sp.tail = i % 2 ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET;
    sp.topk_values = i / 2 % 2 ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
    sp.divergence = i < 3 ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_JSD;
    sp.beta = i < 3 ? 0.0 : 0.5;
    if (i == 1) sp.flags |= KLJIT_FLAG_NATIVE_LOGITS | KLJIT_FLAG_CHECK_INPUTS;
    if (i == 2 || i == 3) sp.hard_weight = 0.5, sp.softcap = 30.0;
    if (i >= 4) sp.vocab_total = 2 * sp.vocab, sp.shards = 2, sp.vocab_offset = (i - 4) * sp.vocab;
    const int r = add_problem(s, &sp);
    if (r != TH_PASS) return r;
  }
  kljit_problem pb; /* the online teacher (its logits in the chunk buffer) with its bias */
  if (!make_problem(EDGE_PROBLEMS[0], 128256, &pb)) return TH_FAIL;
  pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 4096;
  pb.flags |= KLJIT_FLAG_TEACHER_BIAS;
  int r = add_problem(s, &pb);
  /* its checked mode (issue 29): the check of its input, head and bias, with and without the
   * bias, in the input dtypes of the edge problems */
  for (int i = 0; r == TH_PASS && i < 2; i++) {
    if (!make_problem(EDGE_PROBLEMS[i + 1], 32000, &pb)) return TH_FAIL;
    pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = i ? 2048 : 77;
    pb.teacher_dtype = pb.input_dtype, pb.teacher_temperature = 0.0;
    pb.flags |= KLJIT_FLAG_CHECK_INPUTS | (i ? KLJIT_FLAG_TEACHER_BIAS : 0u);
    r = add_problem(s, &pb);
  }
  return r;
}

/* Issue 29's dense-row parameters, each only in the source of a problem that sets it: TVD and
 * the skew KLs (DIV, ALPHA; the two-pass rows with their S sweep and sums kernel, the cluster
 * rows, a shard's SHARDED rows), row weights (ROWW; with checked mode's weight check), the CE's
 * label smoothing (LSMOOTH; on a shard with VTOT) and z-loss (ZLOSS), and the CE's loss
 * partials apart (lossh) which every CE problem now has. The divergences rotate over the three
 * edge problems (teacher forms, dtypes, fp32 logits written in place or native logits); a
 * representative set, not a product, as add_loss_families. */
static int add_issue29_families(space *s) {
  static const struct {
    kljit_divergence div;
    double alpha;
  } D[3] = {{KLJIT_DIVERGENCE_TVD, 0.0},
            {KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.1},
            {KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.25}};
  for (int i = 0; i < 7; i++) {
    kljit_problem pb;
    if (!make_problem(EDGE_PROBLEMS[i % 3], i < 3 ? 151936 : 50257, &pb)) return TH_FAIL;
    const int d = (i + i / 3) % 3;
    pb.divergence = i == 6 ? KLJIT_DIVERGENCE_FORWARD_KL : D[d].div;
    pb.skew_alpha = i == 6 ? 0.0 : D[d].alpha;
    if (i % 2 == 0) pb.flags |= KLJIT_FLAG_ROW_WEIGHTS;
    if (i == 0 || i == 6) pb.flags |= KLJIT_FLAG_CHECK_INPUTS;
    if (i % 2 == 1 || i == 6) {
      pb.hard_weight = 0.5, pb.soft_weight = i == 5 ? 0.0 : 0.5;
      pb.label_smoothing = i == 3 ? 0.0 : 0.1;
      pb.z_loss = i == 1 ? 0.0 : 1e-4;
    }
    if (i == 5) pb.softcap = 30.0;
    const int r = add_problem(s, &pb);
    if (r != TH_PASS) return r;
  }
  /* shards (the second exchange's sums kernel and SHARDED rows): TVD with the CE smoothed over
   * the global vocabulary (VTOT, VOFF), the skew forward KL with row weights, the skew reverse
   * KL of the online teacher with the z-loss on the first shard */
  static const struct {
    int64_t v, total, offset;
    int shards;
  } SH[3] = {{125, 1001, 876, 8}, {75968, 151936, 75968, 2}, {500, 1000, 0, 2}};
  for (int i = 0; i < 3; i++) {
    kljit_problem pb = KLJIT_PROBLEM_INIT;
    pb.hidden = 4096;
    pb.vocab = SH[i].v, pb.vocab_total = SH[i].total, pb.vocab_offset = SH[i].offset;
    pb.shards = SH[i].shards;
    pb.input_dtype = pb.weight_dtype = DTYPES[i];
    pb.divergence = D[i].div, pb.skew_alpha = D[i].alpha;
    if (i != 1) pb.hard_weight = 0.5, pb.soft_weight = 0.5;
    if (i == 0) pb.label_smoothing = 0.2;
    if (i == 2) {
      pb.z_loss = 1e-3;
      pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 2048;
    }
    if (i == 1) pb.flags |= KLJIT_FLAG_ROW_WEIGHTS;
    const int r = add_problem(s, &pb);
    if (r != TH_PASS) return r;
  }
  /* the sparse teacher's row weights: the forward KL (checked: its weight check), the JSD over
   * the tail with CE, a later shard's reverse KL over the renormalized support; its TVD over
   * the tail with CE, a cap and checked mode */
  for (int i = 0; i < 4; i++) {
    kljit_problem sp = KLJIT_PROBLEM_INIT;
    sp.hidden = 4096, sp.vocab = i == 2 ? 75968 : 50257;
    sp.input_dtype = sp.weight_dtype = DTYPES[i % 3];
    sp.teacher = KLJIT_TEACHER_SPARSE_TOPK, sp.topk = 100, sp.teacher_dtype = KLJIT_FP32;
    sp.tail = i == 0 ? KLJIT_TAIL_NONE : i == 2 ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET;
    sp.divergence = i == 0 ? KLJIT_DIVERGENCE_FORWARD_KL
                    : i == 1 ? KLJIT_DIVERGENCE_JSD
                    : i == 2 ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_TVD;
    sp.beta = i == 1 ? 0.5 : 0.0;
    if (i < 3) sp.flags |= KLJIT_FLAG_ROW_WEIGHTS;
    if (i == 0 || i == 3) sp.flags |= KLJIT_FLAG_CHECK_INPUTS;
    if (i == 1 || i == 3) sp.hard_weight = 0.5, sp.soft_weight = 0.5;
    if (i == 3) sp.softcap = 30.0;
    if (i == 2) sp.vocab_total = 151936, sp.vocab_offset = 75968, sp.shards = 2;
    const int r = add_problem(s, &sp);
    if (r != TH_PASS) return r;
  }
  return TH_PASS;
}

/* Issue 29's last items for the top-K teacher: the skew KLs over its categories (ALPHA, both
 * tails, both value forms, logits dtypes, native logits, checked mode, row weights, a cap, CE
 * mixing, and a first and a later shard's SHARDED rows with their sums kernel); the CE's label
 * smoothing (LSMOOTH: pass 1's sum of z', a ninth record float) and z-loss (ZLOSS) over every
 * tail and a divergence, alone and together, with row weights, a cap, CE alone, checked mode,
 * on a first and a later shard; and the CE's loss partials apart (lossh), which every sparse
 * problem with CE now has. */
static int add_sparse_extras(space *s) {
  for (int i = 0; i < 6; i++) {
    kljit_problem sp = KLJIT_PROBLEM_INIT;
    sp.hidden = 4096, sp.vocab = i % 3 == 2 ? 151936 : 50257;
    sp.input_dtype = sp.weight_dtype = DTYPES[i % 3];
    sp.teacher = KLJIT_TEACHER_SPARSE_TOPK, sp.topk = i == 5 ? 1024 : 100;
    sp.teacher_dtype = DTYPES[(i + 2) % 3];
    sp.tail = i % 2 ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET;
    sp.topk_values = i / 2 % 2 ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
    sp.divergence = i % 3 == 1 ? KLJIT_DIVERGENCE_SKEW_REVERSE_KL
                               : KLJIT_DIVERGENCE_SKEW_FORWARD_KL;
    sp.skew_alpha = i < 3 ? 0.1 : 0.6;
    if (i == 1) sp.flags |= KLJIT_FLAG_NATIVE_LOGITS | KLJIT_FLAG_CHECK_INPUTS;
    if (i == 2) sp.flags |= KLJIT_FLAG_ROW_WEIGHTS, sp.softcap = 30.0;
    if (i == 3) sp.hard_weight = 0.5, sp.soft_weight = 0.5;
    if (i >= 4) sp.vocab_total = 2 * sp.vocab, sp.shards = 2, sp.vocab_offset = (i - 4) * sp.vocab;
    const int r = add_problem(s, &sp);
    if (r != TH_PASS) return r;
  }
  static const kljit_tail tails[3] = {KLJIT_TAIL_NONE, KLJIT_TAIL_BUCKET, KLJIT_TAIL_RENORM};
  for (int i = 0; i < 6; i++) {
    kljit_problem sp = KLJIT_PROBLEM_INIT;
    sp.hidden = 4096, sp.vocab = i == 5 ? 151936 : 50257;
    sp.input_dtype = sp.weight_dtype = DTYPES[i % 3];
    sp.teacher = KLJIT_TEACHER_SPARSE_TOPK, sp.topk = 100, sp.teacher_dtype = KLJIT_FP32;
    sp.tail = tails[i % 3];
    sp.hard_weight = 0.5, sp.soft_weight = i == 2 ? 0.0 : 0.5;
    sp.label_smoothing = i == 1 ? 0.0 : 0.1;
    sp.z_loss = i == 0 ? 0.0 : 1e-4;
    if (i == 1) sp.divergence = KLJIT_DIVERGENCE_JSD, sp.beta = 0.5, sp.softcap = 30.0;
    if (i == 4) sp.flags |= KLJIT_FLAG_ROW_WEIGHTS | KLJIT_FLAG_CHECK_INPUTS;
    if (i == 5) sp.divergence = KLJIT_DIVERGENCE_TVD;
    if (i >= 4) sp.vocab_total = 2 * sp.vocab, sp.shards = 2, sp.vocab_offset = (i - 4) * sp.vocab;
    const int r = add_problem(s, &sp);
    if (r != TH_PASS) return r;
  }
  return TH_PASS;
}

/* The sparse teacher's skew KLs, smoothed CE, z-loss and CE loss partials render and compile
 * for both archs (the modules add_sparse_extras plans), without the every-variant space. */
static int sparse_skew_kls_ce_extras_and_parts_compile_for_sm80_and_sm90(void) {
  space s;
  memset(&s, 0, sizeof s);
  int r = dm_init(&s.by_params) && dm_init(&s.by_source) ? TH_PASS : TH_FAIL;
  if (r == TH_PASS) r = add_sparse_extras(&s);
  if (r == TH_PASS) {
    printf("problems: %ld; distinct modules: %zu\n", s.problems, s.n_mods);
    fflush(stdout);
    r = compile_all(&s, NULL, UNCHOSEN_LEFT_OUT);
  }
  space_free(&s);
  return r;
}

/* The parameters of issue 29 render and compile for both archs (the modules add_issue29_families
 * plans), without the every-variant space: the quick check of these templates. */
static int tvd_skew_kls_row_weights_and_ce_extras_compile_for_sm80_and_sm90(void) {
  space s;
  memset(&s, 0, sizeof s);
  int r = dm_init(&s.by_params) && dm_init(&s.by_source) ? TH_PASS : TH_FAIL;
  if (r == TH_PASS) r = add_issue29_families(&s);
  if (r == TH_PASS) {
    int kinds[N_KINDS] = {0};
    for (size_t i = 0; i < s.n_mods; i++) kinds[s.mods[i].kind]++;
    printf("problems: %ld; distinct modules: %zu: %s %d, %s %d, %s %d\n", s.problems, s.n_mods,
           KIND_NAME[0], kinds[0], KIND_NAME[1], kinds[1], KIND_NAME[2], kinds[2]);
    fflush(stdout);
    if (kinds[KIND_CLUSTER] == 0 || kinds[KIND_TWO_PASS] < 10) {
      fprintf(stderr, "the problems no longer reach both dense row variants\n");
      r = TH_FAIL;
    }
  }
  if (r == TH_PASS) r = compile_all(&s, NULL, UNCHOSEN_LEFT_OUT);
  space_free(&s);
  return r;
}

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

/* Enumerates the whole variant space (the header says what it holds) into s and prints what
 * it reached. */
static int enumerate(space *s) {
  static const int64_t FULL_V[] = {50257, 128256};
  static const int64_t EDGE_V[] = {2, 7, 32000, 151936, 256000, 1 << 24};
  memset(s, 0, sizeof *s);
  int r = dm_init(&s->by_params) && dm_init(&s->by_source) ? TH_PASS : TH_FAIL;
  const double t0 = util_now();
  long per_v[2] = {0, 0};
  for (int vi = 0; vi < 2 && r == TH_PASS; vi++) {
    const long before = s->problems;
    int ax[N_AXES] = {0};
    do {
      kljit_problem pb;
      if (make_problem(ax, FULL_V[vi], &pb)) r = add_problem(s, &pb);
    } while (r == TH_PASS && next_position(ax));
    per_v[vi] = s->problems - before;
  }
  const size_t full_mods = s->n_mods;
  s->edges = 1;
  for (size_t i = 0; i < sizeof EDGE_V / sizeof EDGE_V[0] && r == TH_PASS; i++) {
    kljit_problem pb;
    if (!make_problem(EDGE_PROBLEMS[i % 3], EDGE_V[i], &pb)) r = TH_FAIL;
    else r = add_problem(s, &pb);
  }
  if (r == TH_PASS) r = add_sparse_and_checked(s);
  if (r == TH_PASS) r = add_loss_families(s);
  if (r == TH_PASS) r = add_issue29_families(s);
  if (r == TH_PASS) r = add_sparse_extras(s);
  const double enum_s = util_now() - t0;
  if (r == TH_PASS) {
    int kinds[N_KINDS] = {0};
    for (size_t i = 0; i < s->n_mods; i++) kinds[s->mods[i].kind]++;
    printf("problems: %ld (V=%lld: %ld, V=%lld: %ld, V edge cases: %ld), each planned for "
           "sm_80, sm_90 and sm_90 with %s=cluster\n", s->problems, (long long)FULL_V[0],
           per_v[0], (long long)FULL_V[1], per_v[1], s->problems - per_v[0] - per_v[1],
           ROW_KERNEL_KNOB);
    printf("distinct parameter lists rendered: %ld; distinct modules: %zu (%zu from the full "
           "space, %zu from the V edges): %s %d, %s %d, %s %d; enumerated and rendered in "
           "%.1f s\n", s->specs, s->n_mods, full_mods, s->n_mods - full_mods, KIND_NAME[0],
           kinds[0], KIND_NAME[1], kinds[1], KIND_NAME[2], kinds[2], enum_s);
    printf("  %s modules (sparse space): %d\n", KIND_NAME[KIND_SPARSE], kinds[KIND_SPARSE]);
    print_shapes(s);
    fflush(stdout);
    if (kinds[KIND_CLUSTER] == 0) {
      fprintf(stderr, "no problem was planned with the cluster variant: geometry_for no longer "
                      "reaches it (has the planner's option changed?)\n");
      r = TH_FAIL;
    }
    /* A space that collapsed to a handful of modules means the enumeration lost its axes. */
    if (s->n_mods < 100) {
      fprintf(stderr, "only %zu distinct modules: the enumeration is not reaching the specs\n",
              s->n_mods);
      r = TH_FAIL;
    }
  }
  return r;
}

/* ---- the quick selection: every pair of features ---------------------------------------- */

enum { SAMPLE_EVERY = 64 };

typedef struct arch_pick {
  const space *s;
  int a;
} arch_pick;
static int planned_for(size_t i, void *user) {
  const arch_pick *const p = user;
  return (p->s->mods[i].archs & 1u << p->a) != 0;
}
static const uint32_t *tokens_of(size_t i, int *n, void *user) {
  const module *const m = &((const arch_pick *)user)->s->mods[i];
  *n = m->n_tok;
  return m->tok;
}

/* What choose_cover chose: (module, arch) jobs by reason, of `all` planned. */
typedef struct cover {
  int pairwise, edges, sampled, all;
} cover;

/* The jobs the quick case compiles and the slow case takes to a cubin: per arch, modules until
 * every pair of feature values (features_of: template, strings, booleans, the classes of
 * integers and numbers) that the enumeration reaches is in a chosen module, every module of
 * the problems outside the full space (V edges, sparse, shards, loss families: few, each there
 * for a reason), and a fixed spread sample of one in SAMPLE_EVERY of the rest. Returns chosen
 * (bit a of [i]: module i for ARCHS[a]; the caller frees it), NULL out of memory. */
static unsigned *choose_cover(const space *s, cover *c) {
  memset(c, 0, sizeof *c);
  unsigned *chosen = calloc(s->n_mods ? s->n_mods : 1, sizeof *chosen);
  unsigned char *const pick = malloc(s->n_mods ? s->n_mods : 1);
  int ok = chosen && pick;
  for (int a = 0; a < N_ARCHS && ok; a++) {
    arch_pick ap = {s, a};
    memset(pick, 0, s->n_mods);
    const int n = pw_choose(s->n_mods, planned_for, tokens_of, &ap, pick);
    ok = n >= 0;
    c->pairwise += n;
    for (size_t i = 0; ok && i < s->n_mods; i++)
      if (pick[i]) chosen[i] |= 1u << a;
    for (size_t i = 0; ok && i < s->n_mods; i++) {
      const module *const m = &s->mods[i];
      if (!(m->archs & 1u << a)) continue;
      c->all++;
      if (chosen[i] & 1u << a) continue;
      if (m->edge)
        c->edges++;
      else if (((uint32_t)i * 2654435761u >> 8) % SAMPLE_EVERY == (unsigned)a)
        c->sampled++;
      else continue;
      chosen[i] |= 1u << a;
    }
  }
  free(pick);
  if (!ok) free(chosen);
  return ok ? chosen : NULL;
}

/* Both cases: the space, choose_cover's jobs to a cubin, and with UNCHOSEN_TO_PTX every other
 * one to PTX but the full-effort sample, which goes to a cubin too (the header says why). */
static int compile_space(unchosen rest) {
  space s;
  cover c;
  int r = enumerate(&s);
  unsigned *const chosen = r == TH_PASS ? choose_cover(&s, &c) : NULL;
  if (r == TH_PASS && !chosen) r = TH_FAIL;
  if (r == TH_PASS) {
    const int cubins = c.pairwise + c.edges + c.sampled;
    if (rest == UNCHOSEN_TO_PTX)
      printf("compiling all %d (module, arch) jobs: to a cubin the %d the quick case compiles "
             "(%d cover every pair of feature values, %d the problems outside the full space, "
             "%d a sample of 1 in %d) and the full-effort sample of 1 in %d, to PTX the rest\n",
             c.all, cubins, c.pairwise, c.edges, c.sampled, SAMPLE_EVERY, FULL_EVERY);
    else
      printf("compiling %d of %d (module, arch) jobs: %d cover every pair of feature values, %d "
             "more from the problems outside the full space, a sample of %d (1 in %d) of the "
             "rest (the slow case compiles all)\n",
             cubins, c.all, c.pairwise, c.edges, c.sampled, SAMPLE_EVERY);
    fflush(stdout);
    r = compile_all(&s, chosen, rest);
  }
  free(chosen);
  space_free(&s);
  return r;
}

/* The full enumeration, every module for every arch that plans it (label slow: minutes). */
static int every_variant_compiles_for_sm80_and_sm90(void) {
  return compile_space(UNCHOSEN_TO_PTX);
}

/* The same space, compiled in a fraction of the time: choose_cover's jobs alone. What it
 * leaves out combines feature values that compiled together elsewhere; the slow case compiles
 * it all (the rest to PTX). */
static int every_feature_pair_compiles_for_sm80_and_sm90(void) {
  return compile_space(UNCHOSEN_LEFT_OUT);
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
    execl("/proc/self/exe", "unit_kernels", RENDER_SAMPLES, (char *)NULL);
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
 * updates PINNED: `unit_kernels --print-pins` prints the table as this build renders it. */
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
    {"every_variant_compiles_for_sm80_and_sm90", every_variant_compiles_for_sm80_and_sm90},
    {"every_feature_pair_compiles_for_sm80_and_sm90",
     every_feature_pair_compiles_for_sm80_and_sm90},
    {"rendering_is_deterministic_per_spec", rendering_is_deterministic_per_spec},
    {"invalid_spec_is_rejected_with_a_sentence", invalid_spec_is_rejected_with_a_sentence},
    {"loss_family_parameters_reach_the_source_only_when_set",
     loss_family_parameters_reach_the_source_only_when_set},
    {"rendered_modules_keep_their_pinned_bytes", rendered_modules_keep_their_pinned_bytes},
    {"tvd_skew_kls_row_weights_and_ce_extras_compile_for_sm80_and_sm90",
     tvd_skew_kls_row_weights_and_ce_extras_compile_for_sm80_and_sm90},
    {"sparse_skew_kls_ce_extras_and_parts_compile_for_sm80_and_sm90",
     sparse_skew_kls_ce_extras_and_parts_compile_for_sm80_and_sm90},
};

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], RENDER_SAMPLES) == 0) return print_samples();
  if (argc == 2 && strcmp(argv[1], PRINT_PINS) == 0) return print_pins();
  return th_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
