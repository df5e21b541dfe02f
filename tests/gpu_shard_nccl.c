/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_shard_nccl.c — kljit_fused_nccl across GPUs: one process per GPU, tp = 2, 4, 8 (issue 7,
 * the multi-GPU run). Each rank plans its shard of V = 1001 (not divisible by tp), runs
 * kljit_fused_nccl on its own GPU with an NCCL communicator, and compares the all-reduced loss
 * and dX and its rows of dW and db with the unsharded kljit_fused on the same GPU: fp32 inputs,
 * relative 1e-5 (loss) and relative Frobenius 1e-5 (gradients); bf16 inputs 5e-3. Then checked
 * mode with a NaN in the last rank's teacher slice: every rank must return
 * KLJIT_ERR_BAD_INPUT_DATA (none may wait in a collective) and leave its loss unwritten.
 *
 * The case forks tp children that exec this program again (`--rank r --tp n --dir D --form f
 * --dtype d`: no CUDA state crosses a fork); rank 0 writes the NCCL unique id to D/id, the
 * others wait for it. NCCL comes from libnccl.so.2 through dlopen, as in the library. Skips
 * (77) without NCCL or with fewer than tp GPUs. Run with NCCL_NVLS_ENABLE=0 (the cmake test
 * sets it).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_util.h"
#include "harness.h"
#include "kljit_experimental.h"

enum { N = 45, H = 64, V = 1001, K = 40 };

typedef struct {
  char internal[128];
} nccl_unique_id;
typedef int (*get_id_fn)(nccl_unique_id *);
typedef int (*init_rank_fn)(void **, int, nccl_unique_id, int);
typedef int (*destroy_fn)(void *);

static const char *self_exe;

/* ---- one rank ----------------------------------------------------------------------------- */

static double rel(double a, double b) {
  return a == b ? 0.0 : fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1e-30);
}

/* form 0: dense probs, batchmean, bias, ignored rows; 1: sparse BUCKET, mean; 2: form 0 checked,
 * with a NaN teacher entry in the last rank's slice (FORM_BAD); 3: form 0 with the JSD (beta
 * 0.5) and CE mixing (0.5 / 0.5), labels on every shard: the second exchange of records; 4:
 * form 3 with the skew reverse KL (alpha 0.3), the CE smoothed (0.1) with the z-loss (1e-3),
 * row weights, and the per-row loss and the loss's parts asked for (all-reduced). */
enum { FORM_BAD = 2, FORM_JSD = 3, FORM_SKEW = 4, BAD_ROW = 17 };
static kljit_problem problem(int form, kljit_dtype dt) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = H, pb.vocab = V, pb.input_dtype = pb.weight_dtype = dt;
  pb.teacher_dtype = KLJIT_FP32, pb.label_dtype = KLJIT_INT64;
  pb.flags = KLJIT_FLAG_BIAS | (form == FORM_BAD ? KLJIT_FLAG_CHECK_INPUTS : 0);
  if (form == 1) {
    pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = K, pb.tail = KLJIT_TAIL_BUCKET;
    pb.topk_id_dtype = KLJIT_INT64, pb.reduction = KLJIT_REDUCTION_MEAN;
  }
  if (form == FORM_JSD) {
    pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
    pb.hard_weight = 0.5, pb.soft_weight = 0.5;
  }
  if (form == FORM_SKEW) {
    pb.divergence = KLJIT_DIVERGENCE_SKEW_REVERSE_KL, pb.skew_alpha = 0.3;
    pb.hard_weight = 0.5, pb.soft_weight = 0.5, pb.label_smoothing = 0.1, pb.z_loss = 1e-3;
    pb.flags |= KLJIT_FLAG_ROW_WEIGHTS;
  }
  return pb;
}

typedef struct run_out {
  double loss, *dx, *dw, *db;
  double row_loss[N], parts[2]; /* FORM_SKEW */
} run_out;

/* Runs the problem (whole: off = 0, v = V, comm = NULL; else this rank's shard through NCCL). */
static int run(kljit_context *ctx, int form, kljit_dtype dt, int64_t off, int64_t v, int tp,
               void *comm, run_out *o) {
  host_rng rng = {4242u + (uint64_t)form};
  double *x = malloc(sizeof(double) * N * H), *w = malloc(sizeof(double) * V * H);
  double *b = malloc(sizeof(double) * V), *t = malloc(sizeof(double) * N * V);
  double *ids = malloc(sizeof(double) * N * K), *vals = malloc(sizeof(double) * N * K);
  double *lab = malloc(sizeof(double) * N);
  for (int i = 0; i < N * H; i++) x[i] = host_normal(&rng);
  for (int i = 0; i < V * H; i++) w[i] = 0.3 * host_normal(&rng);
  for (int i = 0; i < V; i++) b[i] = 0.5 * host_normal(&rng);
  for (int r = 0; r < N; r++) {
    lab[r] = r % 7 == 3 ? -100 : form >= FORM_JSD ? (double)((r * 389 + 17) % V) : 0;
    double s = 0;
    for (int c = 0; c < V; c++) s += t[(size_t)r * V + c] = exp(host_normal(&rng));
    for (int c = 0; c < V; c++) t[(size_t)r * V + c] /= s;
    for (int k = 0; k < K; k++) { /* distinct: K strided ids from a random start */
      ids[r * K + k] = (double)((r * 131 + k * 25) % V);
      vals[r * K + k] = 0.6 / K * (0.5 + host_uniform(&rng));
    }
  }
  if (form == FORM_BAD) t[(size_t)BAD_ROW * V + V - 1] = NAN;
  kljit_problem pb = problem(form, dt);
  if (comm) pb.vocab = v, pb.vocab_total = V, pb.vocab_offset = off, pb.shards = tp;
  kljit_plan *plan = NULL;
  TH_OK(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  size_t ws = 0;
  TH_OK(kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, N, &ws));
  double *ts = malloc(sizeof(double) * N * v);
  for (int r = 0; r < N; r++) memcpy(ts + (size_t)r * v, t + (size_t)r * V + off, 8 * v);
  gbuf X, W, B, L, T, I, VA, LOSS, DX, DW, DB, WS, RW, RL, PA;
  memset(&I, 0, sizeof I), memset(&VA, 0, sizeof VA), memset(&T, 0, sizeof T);
  memset(&RW, 0, sizeof RW), memset(&RL, 0, sizeof RL), memset(&PA, 0, sizeof PA);
  int fail = gbuf_alloc(&X, dt, N * H) | gbuf_upload(&X, x, NULL);
  fail |= gbuf_alloc(&W, dt, v * H) | gbuf_upload(&W, w + off * H, NULL);
  fail |= gbuf_alloc(&B, dt, v) | gbuf_upload(&B, b + off, NULL);
  fail |= gbuf_alloc(&L, KLJIT_INT64, N) | gbuf_upload(&L, lab, NULL);
  if (form == 1)
    fail |= gbuf_alloc(&I, KLJIT_INT64, N * K) | gbuf_upload(&I, ids, NULL) |
            gbuf_alloc(&VA, KLJIT_FP32, N * K) | gbuf_upload(&VA, vals, NULL);
  else
    fail |= gbuf_alloc(&T, KLJIT_FP32, N * v) | gbuf_upload(&T, ts, NULL);
  fail |= gbuf_alloc(&LOSS, KLJIT_FP32, 1) | gbuf_alloc(&DX, dt, N * H) |
          gbuf_alloc(&DW, KLJIT_FP32, v * H) | gbuf_alloc(&DB, KLJIT_FP32, v) |
          gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 64);
  if (form == FORM_SKEW) {
    double rw[N];
    for (int r = 0; r < N; r++) rw[r] = r % 5 == 1 ? 0.0 : 0.25 * (1 + r % 7);
    fail |= gbuf_alloc(&RW, KLJIT_FP32, N) | gbuf_upload(&RW, rw, NULL) |
            gbuf_alloc(&RL, KLJIT_FP32, N) | gbuf_poison(&RL) | gbuf_alloc(&PA, KLJIT_FP32, 2) |
            gbuf_poison(&PA);
  }
  TH_CHECK(!fail);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = N, a.input = X.ptr, a.weight = W.ptr, a.bias = B.ptr, a.labels = L.ptr;
  if (form == 1)
    a.teacher_ids = I.ptr, a.teacher_values = VA.ptr;
  else
    a.teacher = T.ptr;
  a.loss = LOSS.ptr, a.grad_input = DX.ptr, a.grad_weight = DW.ptr, a.grad_bias = DB.ptr;
  a.workspace = WS.ptr, a.workspace_size = ws;
  a.row_weights = RW.ptr, a.row_loss = RL.ptr, a.loss_parts = PA.ptr;
  if (form == FORM_BAD) { /* every rank reports the bad slice; the loss keeps its poison */
    const double poison = 12345.0;
    TH_CHECK(gbuf_upload(&LOSS, &poison, NULL) == 0);
    TH_STATUS(kljit_fused_nccl(plan, NULL, &a, comm), KLJIT_ERR_BAD_INPUT_DATA);
    printf("rank of shard [%lld, %lld): %s\n", (long long)off, (long long)(off + v),
           kljit_last_error());
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess && gbuf_download(&LOSS, &o->loss) == 0);
    TH_CHECK(o->loss == poison);
    o->dx = o->dw = o->db = NULL;
  } else {
    TH_OK(comm ? kljit_fused_nccl(plan, NULL, &a, comm) : kljit_fused(plan, NULL, &a));
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  }
  if (form != FORM_BAD) {
    o->dx = malloc(sizeof(double) * N * H), o->dw = malloc(sizeof(double) * v * H);
    o->db = malloc(sizeof(double) * v);
    TH_CHECK(gbuf_download(&LOSS, &o->loss) == 0 && gbuf_download(&DX, o->dx) == 0 &&
             gbuf_download(&DW, o->dw) == 0 && gbuf_download(&DB, o->db) == 0);
    TH_CHECK(form != FORM_SKEW ||
             (gbuf_download(&RL, o->row_loss) == 0 && gbuf_download(&PA, o->parts) == 0));
  }
  gbuf *all[] = {&X, &W, &B, &L, &T, &I, &VA, &LOSS, &DX, &DW, &DB, &WS, &RW, &RL, &PA};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gbuf_free(all[i]);
  kljit_plan_destroy(plan);
  free(x), free(w), free(b), free(t), free(ids), free(vals), free(lab), free(ts);
  return TH_PASS;
}

static int rank_main(int rank, int tp, const char *dir, int form, kljit_dtype dt) {
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return TH_SKIP;
  get_id_fn get_id = (get_id_fn)dlsym(lib, "ncclGetUniqueId");
  init_rank_fn init = (init_rank_fn)dlsym(lib, "ncclCommInitRank");
  destroy_fn destroy = (destroy_fn)dlsym(lib, "ncclCommDestroy");
  TH_CHECK(get_id && init && destroy);
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < tp) return TH_SKIP;
  TH_CHECK(cudaSetDevice(rank) == cudaSuccess);
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/id", dir);
  nccl_unique_id id;
  if (rank == 0) {
    TH_CHECK(get_id(&id) == 0);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    TH_CHECK(f && fwrite(&id, sizeof id, 1, f) == 1 && fclose(f) == 0 && rename(tmp, path) == 0);
  } else {
    FILE *f = NULL;
    for (int i = 0; i < 6000 && !(f = fopen(path, "rb")); i++) usleep(10000);
    TH_CHECK(f && fread(&id, sizeof id, 1, f) == 1);
    fclose(f);
  }
  void *comm = NULL;
  TH_CHECK(init(&comm, tp, id, rank) == 0);
  kljit_context *ctx = NULL;
  TH_OK(kljit_context_create(&ctx, rank, NULL));
  const int64_t off = (int64_t)rank * V / tp, v = (int64_t)(rank + 1) * V / tp - off;
  run_out whole, mine;
  if (form == FORM_BAD) {
    alarm(300); /* a rank left waiting in a collective fails the case instead of hanging it */
    const int rc = run(ctx, form, dt, off, v, tp, comm, &mine);
    destroy(comm);
    kljit_context_destroy(ctx);
    return rc;
  }
  int rc = run(ctx, form, dt, 0, V, 1, NULL, &whole);
  if (rc == TH_PASS) rc = run(ctx, form, dt, off, v, tp, comm, &mine);
  destroy(comm);
  if (rc != TH_PASS) return rc;
  const double tol = dt == KLJIT_FP32 ? 1e-5 : 5e-3;
  const double el = rel(mine.loss, whole.loss), ex = rel_frobenius(mine.dx, whole.dx, N * H);
  const double ew = rel_frobenius(mine.dw, whole.dw + off * H, (size_t)v * H);
  const double eb = rel_frobenius(mine.db, whole.db + off, (size_t)v);
  double er = 0.0, ep = 0.0, ma;
  if (form == FORM_SKEW) { /* the all-reduced per-row loss and parts */
    max_errors(mine.row_loss, whole.row_loss, N, 1.0, &ma, &er);
    ep = fmax(rel(mine.parts[0], whole.parts[0]), rel(mine.parts[1], whole.parts[1]));
  }
  const int ok = el <= tol && ex <= tol && ew <= tol && eb <= tol && er <= tol && ep <= tol;
  printf("rank %d/%d (ids [%lld, %lld)): loss %.9g vs %.9g rel %.1e; dX %.1e dW %.1e db %.1e "
         "row loss %.1e parts %.1e %s\n", rank, tp, (long long)off, (long long)(off + v), mine.loss,
         whole.loss, el, ex, ew, eb, er, ep, ok ? "ok" : "FAIL");
  kljit_context_destroy(ctx);
  return ok ? TH_PASS : TH_FAIL;
}

/* ---- the case: spawn tp ranks ------------------------------------------------------------ */

static int spawn(int tp, int form, kljit_dtype dt) {
  char dir[] = "/tmp/kljit-nccl-XXXXXX";
  TH_CHECK(mkdtemp(dir) != NULL);
  pid_t pids[8];
  for (int r = 0; r < tp; r++) {
    char rs[16], ts[16], fs[16], ds[16];
    snprintf(rs, sizeof rs, "%d", r), snprintf(ts, sizeof ts, "%d", tp);
    snprintf(fs, sizeof fs, "%d", form), snprintf(ds, sizeof ds, "%d", (int)dt);
    pids[r] = fork();
    if (pids[r] == 0) {
      execl(self_exe, self_exe, "--rank", rs, "--tp", ts, "--dir", dir, "--form", fs, "--dtype", ds,
            (char *)NULL);
      _exit(127);
    }
  }
  int worst = TH_PASS;
  for (int r = 0; r < tp; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : TH_FAIL;
    if (code == TH_SKIP && worst == TH_PASS) worst = TH_SKIP;
    if (code != TH_PASS && code != TH_SKIP) worst = TH_FAIL;
  }
  char path[64];
  snprintf(path, sizeof path, "%s/id", dir);
  unlink(path);
  rmdir(dir);
  return worst;
}

static int tp_cases(int tp) {
  int worst = TH_PASS;
  for (int form = 0; form < 2; form++)
    for (int d = 0; d < 2; d++) {
      const int r = spawn(tp, form, d ? KLJIT_BF16 : KLJIT_FP32);
      if (r == TH_SKIP) return TH_SKIP; /* too few GPUs or no NCCL: the same for every run */
      if (r != TH_PASS) worst = TH_FAIL;
    }
  for (int d = 0; d < 2; d++)
    if (spawn(tp, FORM_JSD, d ? KLJIT_BF16 : KLJIT_FP32) != TH_PASS) worst = TH_FAIL;
  if (spawn(tp, FORM_SKEW, KLJIT_FP32) != TH_PASS) worst = TH_FAIL;
  if (spawn(tp, FORM_BAD, KLJIT_FP32) != TH_PASS) worst = TH_FAIL;
  return worst;
}

static int tp_2(void) {
  return tp_cases(2);
}
static int tp_4(void) {
  return tp_cases(4);
}
static int tp_8(void) {
  return tp_cases(8);
}

static const th_case cases[] = {{"tp_2", tp_2}, {"tp_4", tp_4}, {"tp_8", tp_8}};

int main(int argc, char **argv) {
  self_exe = "/proc/self/exe";
  static char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) exe[n] = 0, self_exe = exe;
  if (argc == 11 && strcmp(argv[1], "--rank") == 0)
    return rank_main(atoi(argv[2]), atoi(argv[4]), argv[6], atoi(argv[8]),
                     (kljit_dtype)atoi(argv[10]));
  return th_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
