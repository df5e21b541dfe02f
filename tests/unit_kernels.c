/* SPDX-License-Identifier: Apache-2.0 */
/* unit_kernels.c — every kernel module a valid problem can need renders and compiles with NVRTC
 * for sm_80 and sm_90 (what a spec renders: unit_kernel_specs.c). Needs NVRTC, no GPU.
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
 * again (the renderer is deterministic: unit_kernel_specs.c checks it), which
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
#include "kernel_problems.h"
#include "nvrtc_compile.h"
#include "pairwise.h"

enum { WORKERS = 2, MAP_CAP = 1 << 15, FULL_LOGS = 4, FULL_EVERY = 16 };

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

static const th_case cases[] = {
    {"every_variant_compiles_for_sm80_and_sm90", every_variant_compiles_for_sm80_and_sm90},
    {"every_feature_pair_compiles_for_sm80_and_sm90",
     every_feature_pair_compiles_for_sm80_and_sm90},
    {"tvd_skew_kls_row_weights_and_ce_extras_compile_for_sm80_and_sm90",
     tvd_skew_kls_row_weights_and_ce_extras_compile_for_sm80_and_sm90},
    {"sparse_skew_kls_ce_extras_and_parts_compile_for_sm80_and_sm90",
     sparse_skew_kls_ce_extras_and_parts_compile_for_sm80_and_sm90},
};

int main(int argc, char **argv) {
  return th_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
