/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_api.c — execute-argument validation on a real plan, and one plan shared by two threads.
 *
 * Every rejection case poisons every output and scratch buffer with 0xFF bytes, makes one
 * bad call, synchronizes, and checks three things: the exact status, a message that starts
 * with the entry point and names the argument (and its value), and that every poisoned byte
 * is still 0xFF — the header's promise "bad input returns an error before any output is
 * written". A control case shows the same arguments, unmodified, are accepted and do write,
 * so a rejection is due to the one field changed.
 *
 * The concurrency case runs one plan from two threads, each with its own non-blocking
 * stream, workspace, outputs and inputs, and compares every loss bit for bit with a serial
 * run of the same inputs: shared mutable state in the plan would mix the two.
 * Skips (77) without a GPU. Uses the public header only.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness.h"
#include "host_dtype.h"
#include "kljit.h"

enum { ROWS = 8, HIDDEN = 64, VOCAB = 1000 };

typedef kljit_status (*exec_fn)(const kljit_plan *, void *, const kljit_args *);
static const exec_fn mode_fn[4] = {NULL, kljit_fused, kljit_forward, kljit_backward};
static const char *const mode_name[4] = {NULL, "kljit_fused", "kljit_forward", "kljit_backward"};
static const kljit_mode all_modes[3] = {KLJIT_MODE_FUSED, KLJIT_MODE_FORWARD,
                                        KLJIT_MODE_BACKWARD};

static kljit_context *the_ctx;

/* A plan with its inputs and outputs allocated, filled and ready for every mode. */
typedef struct fixture {
  kljit_plan *plan;
  kljit_problem pb;
  gbuf x, w, t, bias, go, loss, saved, dx, dw, ws;
  size_t need[4]; /* workspace bytes by mode */
} fixture;

static int ctx_get(void) { return gpu_test_context(&the_ctx); }

static kljit_problem small_problem(void) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = HIDDEN, pb.vocab = VOCAB;
  return pb;
}

static int upload_random(gbuf *b, host_rng *rng, double scale) {
  double *v = malloc(sizeof(double) * b->n);
  if (!v) return 1;
  for (size_t i = 0; i < b->n; i++) v[i] = scale * host_normal(rng);
  const int r = gbuf_upload(b, v, NULL);
  free(v);
  return r;
}

/* Teacher probabilities: softmax of random logits, row by row. */
static int upload_teacher(gbuf *b, host_rng *rng, int64_t rows) {
  double *p = malloc(sizeof(double) * (size_t)(rows * VOCAB));
  if (!p) return 1;
  for (int64_t i = 0; i < rows; i++) {
    double *row = p + i * VOCAB, sum = 0;
    for (int v = 0; v < VOCAB; v++) sum += row[v] = exp(2.0 * host_normal(rng));
    for (int v = 0; v < VOCAB; v++) row[v] /= sum;
  }
  const int r = gbuf_upload(b, p, NULL);
  free(p);
  return r;
}

static void fixture_free(fixture *f) {
  gbuf *bufs[] = {&f->x, &f->w, &f->t, &f->bias, &f->go, &f->loss, &f->saved, &f->dx, &f->dw,
                  &f->ws};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gbuf_free(bufs[i]);
  kljit_plan_destroy(f->plan);
  memset(f, 0, sizeof *f);
}

static int fixture_make(fixture *f, const kljit_problem *pb) {
  memset(f, 0, sizeof *f);
  int rc = ctx_get();
  if (rc != TH_PASS) return rc;
  f->pb = *pb;
  TH_OK(kljit_plan_create(the_ctx, pb, KLJIT_PLAN_ESTIMATE, &f->plan));
  size_t ws = 0, saved = 0;
  for (int m = 0; m < 3; m++) {
    TH_OK(kljit_plan_workspace_size(f->plan, all_modes[m], ROWS, &f->need[all_modes[m]]));
    if (f->need[all_modes[m]] > ws) ws = f->need[all_modes[m]];
  }
  TH_OK(kljit_plan_saved_size(f->plan, ROWS, &saved));
  const kljit_dtype dt = pb->input_dtype;
  /* gbuf_alloc leaves 16 spare bytes, so base + 2 with the full size stays inside. */
  int fail = gbuf_alloc(&f->x, dt, ROWS * HIDDEN) | gbuf_alloc(&f->w, dt, VOCAB * HIDDEN) |
             gbuf_alloc(&f->t, pb->teacher_dtype, ROWS * VOCAB) | gbuf_alloc(&f->bias, dt, VOCAB) |
             gbuf_alloc(&f->go, KLJIT_FP32, ROWS) | gbuf_alloc(&f->loss, KLJIT_FP32, ROWS) |
             gbuf_alloc(&f->saved, KLJIT_FP32, saved / 4) |
             gbuf_alloc(&f->dx, dt, ROWS * HIDDEN) |
             gbuf_alloc(&f->dw, pb->grad_weight_dtype, VOCAB * HIDDEN) |
             gbuf_alloc(&f->ws, KLJIT_INT32, ws / 4 + 1);
  TH_CHECK(!fail);
  host_rng rng = {2024};
  fail |= upload_random(&f->x, &rng, 1.0) | upload_random(&f->w, &rng, 0.3) |
          upload_random(&f->bias, &rng, 0.5) | upload_teacher(&f->t, &rng, ROWS);
  double go[ROWS];
  for (int i = 0; i < ROWS; i++) go[i] = 1.0;
  fail |= gbuf_upload(&f->go, go, NULL);
  TH_CHECK(!fail);
  return TH_PASS;
}

/* Arguments a call in `mode` accepts: everything the mode reads or writes, nothing else. */
static kljit_args good_args(const fixture *f, kljit_mode mode) {
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = ROWS, a.input = f->x.ptr, a.weight = f->w.ptr, a.teacher = f->t.ptr;
  a.temperature = 1.5;
  if (mode != KLJIT_MODE_BACKWARD) a.loss = f->loss.ptr;
  if (mode != KLJIT_MODE_FUSED) a.saved = f->saved.ptr;
  if (mode == KLJIT_MODE_BACKWARD) a.grad_output = f->go.ptr;
  if (mode != KLJIT_MODE_FORWARD) a.grad_input = f->dx.ptr, a.grad_weight = f->dw.ptr;
  a.workspace = f->ws.ptr, a.workspace_size = f->need[mode];
  return a;
}

/* Everything a call may write: outputs and scratch. */
enum { N_OUT = 5 };
static const char *const out_name[N_OUT] = {"loss", "saved", "grad_input", "grad_weight",
                                            "workspace"};
static void output_list(fixture *f, gbuf *out[N_OUT]) {
  out[0] = &f->loss, out[1] = &f->saved, out[2] = &f->dx, out[3] = &f->dw, out[4] = &f->ws;
}

static int poison_all(fixture *f) {
  gbuf *out[N_OUT];
  output_list(f, out);
  int fail = 0;
  for (int i = 0; i < N_OUT; i++) fail |= gbuf_poison(out[i]);
  return fail | (cudaDeviceSynchronize() != cudaSuccess);
}

/* How many bytes of `b` are no longer 0xFF (or SIZE_MAX when it cannot be read). */
static size_t bytes_written(const gbuf *b) {
  const size_t size = b->n * host_dtype_size(b->dt);
  unsigned char *h = malloc(size);
  if (!h || gbuf_bytes(b, h)) {
    free(h);
    return SIZE_MAX;
  }
  size_t changed = 0;
  for (size_t i = 0; i < size; i++) changed += h[i] != 0xFF;
  free(h);
  return changed;
}

/* One bad call: the status, a message naming the argument, and no byte written. 1 if all hold. */
static int expect_rejected(fixture *f, kljit_mode mode, const kljit_args *a, kljit_status want,
                           const char *msg1, const char *msg2) {
  if (poison_all(f)) {
    fprintf(stderr, "poisoning failed\n");
    return 0;
  }
  const kljit_status st = mode_fn[mode](f->plan, NULL, a);
  const cudaError_t ce = cudaDeviceSynchronize();
  char e[1024];
  snprintf(e, sizeof e, "%s", kljit_last_error());
  char prefix[64];
  snprintf(prefix, sizeof prefix, "%s: ", mode_name[mode]);
  int ok = st == want && ce == cudaSuccess && strncmp(e, prefix, strlen(prefix)) == 0 &&
           (!msg1 || strstr(e, msg1)) && (!msg2 || strstr(e, msg2));
  if (!ok)
    fprintf(stderr, "%s: got %s \"%s\" (cuda: %s); want %s with \"%s\" and \"%s\"\n",
            mode_name[mode], kljit_status_string(st), e, cudaGetErrorString(ce),
            kljit_status_string(want), msg1 ? msg1 : "", msg2 ? msg2 : "");
  gbuf *out[N_OUT];
  output_list(f, out);
  for (int i = 0; i < N_OUT; i++) {
    const size_t w = bytes_written(out[i]);
    if (w) {
      fprintf(stderr, "%s rejected with \"%s\" but %zu bytes of %s changed\n", mode_name[mode], e,
              w, out_name[i]);
      ok = 0;
    }
  }
  return ok;
}

/* ---- cases ------------------------------------------------------------------------------- */

static int valid_arguments_are_accepted_and_write_the_outputs(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  for (int m = 0; m < 3; m++) {
    const kljit_mode mode = all_modes[m];
    TH_CHECK(poison_all(&f) == 0);
    const kljit_args a = good_args(&f, mode);
    if (mode == KLJIT_MODE_BACKWARD) { /* backward reads what forward saved */
      const kljit_args fa = good_args(&f, KLJIT_MODE_FORWARD);
      TH_OK(kljit_forward(f.plan, NULL, &fa));
    }
    TH_OK(mode_fn[mode](f.plan, NULL, &a));
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    if (mode != KLJIT_MODE_BACKWARD) {
      float loss = NAN;
      TH_CHECK(cudaMemcpy(&loss, f.loss.ptr, sizeof loss, cudaMemcpyDeviceToHost) == cudaSuccess);
      TH_CHECK(isfinite(loss) && loss > 0);
    }
    if (mode != KLJIT_MODE_FORWARD) {
      /* every element written: no NaN (0xFF) byte pattern left */
      double *dx = malloc(sizeof(double) * f.dx.n), *dw = malloc(sizeof(double) * f.dw.n);
      TH_CHECK(dx && dw);
      TH_CHECK(gbuf_download(&f.dx, dx) == 0 && gbuf_download(&f.dw, dw) == 0);
      size_t bad = 0;
      for (size_t i = 0; i < f.dx.n; i++) bad += !isfinite(dx[i]);
      for (size_t i = 0; i < f.dw.n; i++) bad += !isfinite(dw[i]);
      free(dx), free(dw);
      TH_CHECK(bad == 0);
    }
  }
  fixture_free(&f);
  return TH_PASS;
}

static int null_arguments_are_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  int bad = 0;
  for (int m = 0; m < 3; m++) {
    const kljit_mode mode = all_modes[m];
    bad += !expect_rejected(&f, mode, NULL, KLJIT_ERR_INVALID_ARGUMENT, "args is NULL", NULL);
    /* each pointer the mode needs, one at a time */
    const char *names[] = {"input", "weight", "teacher", "loss", "saved", "grad_output",
                           "grad_input", "grad_weight", "workspace"};
    for (int k = 0; k < 9; k++) {
      kljit_args a = good_args(&f, mode);
      const void **slots[] = {&a.input, &a.weight, &a.teacher, (const void **)&a.loss,
                              (const void **)&a.saved, (const void **)&a.grad_output,
                              (const void **)&a.grad_input, (const void **)&a.grad_weight,
                              (const void **)&a.workspace};
      if (!*slots[k]) continue; /* not used by this mode */
      *slots[k] = NULL;
      char msg[64];
      snprintf(msg, sizeof msg, "args->%s is NULL", names[k]);
      bad += !expect_rejected(&f, mode, &a, KLJIT_ERR_INVALID_ARGUMENT, msg, NULL);
    }
  }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

static int wrong_struct_size_and_row_counts_are_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  int bad = 0;
  for (int m = 0; m < 3; m++) {
    const kljit_mode mode = all_modes[m];
    const size_t sizes[] = {0, KLJIT_ARGS_MIN_SIZE - 8};
    for (int k = 0; k < 2; k++) {
      kljit_args a = good_args(&f, mode);
      a.struct_size = sizes[k];
      char msg[64];
      snprintf(msg, sizeof msg, "args->struct_size = %zu", sizes[k]);
      bad += !expect_rejected(&f, mode, &a, KLJIT_ERR_INVALID_ARGUMENT, msg, "KLJIT_ARGS_INIT");
    }
    /* a newer header's larger struct that sets a field this library does not know */
    struct {
      kljit_args a;
      uint64_t newer;
    } big;
    memset(&big, 0, sizeof big);
    big.a = good_args(&f, mode);
    big.a.struct_size = sizeof big;
    big.newer = 1;
    bad += !expect_rejected(&f, mode, &big.a, KLJIT_ERR_UNSUPPORTED, "newer", NULL);
    const int64_t rows[] = {0, -1, (int64_t)1 << 31};
    const char *rmsg[] = {"args->rows = 0", "args->rows = -1", "args->rows = 2147483648"};
    for (int k = 0; k < 3; k++) {
      kljit_args a = good_args(&f, mode);
      a.rows = rows[k];
      bad += !expect_rejected(&f, mode, &a, KLJIT_ERR_INVALID_ARGUMENT, rmsg[k], NULL);
    }
  }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

static int host_pointers_are_rejected_naming_the_argument(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  /* 256-byte aligned, so the only thing wrong is where the memory lives */
  const size_t size = (size_t)ROWS * VOCAB * 4;
  unsigned char *host = aligned_alloc(256, size);
  TH_CHECK(host != NULL);
  memset(host, 0xFF, size);
  int bad = 0;
  kljit_args a = good_args(&f, KLJIT_MODE_FUSED);
  a.input = host;
  bad += !expect_rejected(&f, KLJIT_MODE_FUSED, &a, KLJIT_ERR_INVALID_ARGUMENT, "args->input =",
                          "host pointer");
  a = good_args(&f, KLJIT_MODE_FORWARD);
  a.teacher = host;
  bad += !expect_rejected(&f, KLJIT_MODE_FORWARD, &a, KLJIT_ERR_INVALID_ARGUMENT,
                          "args->teacher =", "host pointer");
  a = good_args(&f, KLJIT_MODE_BACKWARD);
  a.grad_input = host;
  bad += !expect_rejected(&f, KLJIT_MODE_BACKWARD, &a, KLJIT_ERR_INVALID_ARGUMENT,
                          "args->grad_input =", "host pointer");
  size_t changed = 0;
  for (size_t i = 0; i < size; i++) changed += host[i] != 0xFF;
  free(host);
  if (changed) fprintf(stderr, "%zu bytes of the host buffer changed\n", changed);
  fixture_free(&f);
  return bad || changed ? TH_FAIL : TH_PASS;
}

static int misaligned_pointers_are_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  int bad = 0;
  for (int m = 0; m < 3; m++) {
    const kljit_mode mode = all_modes[m];
    const char *names[] = {"input", "weight", "teacher", "loss", "saved", "grad_output",
                           "grad_input", "grad_weight", "workspace"};
    for (int k = 0; k < 9; k++) {
      /* +2 breaks every alignment listed in the header; +8 breaks the 16-byte ones */
      for (int off = 2; off <= 8; off += 6) {
        kljit_args a = good_args(&f, mode);
        const void **slots[] = {&a.input, &a.weight, &a.teacher, (const void **)&a.loss,
                                (const void **)&a.saved, (const void **)&a.grad_output,
                                (const void **)&a.grad_input, (const void **)&a.grad_weight,
                                (const void **)&a.workspace};
        const int needs16 = k == 0 || k == 1 || k == 2 || k >= 6;
        if (!*slots[k] || (off == 8 && !needs16)) continue;
        *slots[k] = (const char *)*slots[k] + off;
        char msg[64];
        snprintf(msg, sizeof msg, "args->%s = ", names[k]);
        bad += !expect_rejected(&f, mode, &a, KLJIT_ERR_MISALIGNED, msg, "aligned");
      }
    }
  }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

static int a_workspace_one_byte_short_is_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  int bad = 0;
  for (int m = 0; m < 3; m++) {
    const kljit_mode mode = all_modes[m];
    const size_t sizes[] = {f.need[mode] - 1, 0};
    for (int k = 0; k < 2; k++) {
      kljit_args a = good_args(&f, mode);
      a.workspace_size = sizes[k];
      char got[64], need[64];
      snprintf(got, sizeof got, "args->workspace_size = %zu", sizes[k]);
      snprintf(need, sizeof need, "needs %zu bytes", f.need[mode]);
      bad += !expect_rejected(&f, mode, &a, KLJIT_ERR_WORKSPACE_TOO_SMALL, got, need);
    }
  }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

static int bias_without_the_bias_flag_is_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  int bad = 0;
  for (int m = 0; m < 3; m++) {
    kljit_args a = good_args(&f, all_modes[m]);
    a.bias = f.bias.ptr;
    bad += !expect_rejected(&f, all_modes[m], &a, KLJIT_ERR_INVALID_ARGUMENT, "args->bias",
                            "KLJIT_FLAG_BIAS");
  }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

/* The hard-label CE needs labels: a call without them is refused, in every mode, before any
 * output is written (the kernels would otherwise compute a CE against no label). */
static int hard_weight_without_labels_is_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  pb.hard_weight = 0.5;
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  int bad = 0;
  for (int m = 0; m < 3; m++) {
    kljit_args a = good_args(&f, all_modes[m]);
    a.labels = NULL;
    bad += !expect_rejected(&f, all_modes[m], &a, KLJIT_ERR_INVALID_ARGUMENT, "labels is NULL",
                            "hard_weight = 0.5");
  }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

static int reduction_none_in_fused_mode_is_unsupported(void) {
  fixture f;
  kljit_problem pb = small_problem();
  pb.reduction = KLJIT_REDUCTION_NONE;
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  kljit_args a = good_args(&f, KLJIT_MODE_FUSED);
  const int ok = expect_rejected(&f, KLJIT_MODE_FUSED, &a, KLJIT_ERR_UNSUPPORTED, "reduction NONE",
                                 "kljit_forward");
  /* the same plan does serve the two-phase mode, a loss per row */
  a = good_args(&f, KLJIT_MODE_FORWARD);
  TH_OK(kljit_forward(f.plan, NULL, &a));
  float loss[ROWS];
  TH_CHECK(cudaMemcpy(loss, f.loss.ptr, sizeof loss, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < ROWS; i++) TH_CHECK(isfinite(loss[i]));
  fixture_free(&f);
  return ok ? TH_PASS : TH_FAIL;
}

static int runtime_temperature_zero_nan_or_infinite_is_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  const double ts[] = {0.0, -1.0, NAN, INFINITY};
  const char *msgs[] = {"args->temperature = 0", "args->temperature = -1",
                        "args->temperature = nan", "args->temperature = inf"};
  int bad = 0;
  for (int m = 0; m < 2; m++) { /* backward takes T from what forward saved */
    for (int k = 0; k < 4; k++) {
      kljit_args a = good_args(&f, all_modes[m]);
      a.temperature = ts[k];
      bad += !expect_rejected(&f, all_modes[m], &a, KLJIT_ERR_INVALID_ARGUMENT, msgs[k], NULL);
    }
    kljit_args a = good_args(&f, all_modes[m]);
    a.temperature = 0.25;
    TH_OK(mode_fn[all_modes[m]](f.plan, NULL, &a));
  }
  TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

static int unknown_exec_flags_are_rejected_before_any_write(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  const uint32_t flags[] = {1u << 3, 1u << 31 | KLJIT_EXEC_NO_GRAD_INPUT};
  const char *msgs[] = {"unknown bits 0x8", "unknown bits 0x80000000"};
  int bad = 0;
  for (int m = 0; m < 3; m++)
    for (int k = 0; k < 2; k++) {
      kljit_args a = good_args(&f, all_modes[m]);
      a.flags = flags[k];
      bad += !expect_rejected(&f, all_modes[m], &a, KLJIT_ERR_INVALID_ARGUMENT, "args->flags",
                              msgs[k]);
    }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

/* ---- one plan, two threads, two streams ------------------------------------------------ */

enum { MT_ROWS = 300, MT_ITERS = 25 };

typedef struct worker {
  const kljit_plan *plan;
  gbuf x, t, loss, dx, dw, ws;
  const void *w;
  size_t ws_size;
  uint32_t serial_loss; /* bits of the serial run's loss */
  unsigned char *serial_dx;
  pthread_barrier_t *start;
  int mismatches, failures;
} worker;

static kljit_args worker_args(const worker *k) {
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = MT_ROWS, a.input = k->x.ptr, a.weight = k->w, a.teacher = k->t.ptr;
  a.loss = k->loss.ptr, a.grad_input = k->dx.ptr, a.grad_weight = k->dw.ptr;
  a.workspace = k->ws.ptr, a.workspace_size = k->ws_size;
  return a;
}

static void *worker_run(void *arg) {
  worker *k = arg;
  cudaStream_t s = NULL;
  const int ready = cudaSetDevice(0) == cudaSuccess &&
                    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
  const kljit_args a = worker_args(k);
  const size_t dx_bytes = k->dx.n * host_dtype_size(k->dx.dt);
  unsigned char *dx = ready ? malloc(dx_bytes) : NULL;
  pthread_barrier_wait(k->start); /* both threads start their loops together */
  for (int it = 0; it < MT_ITERS && dx; it++) {
    uint32_t loss = 0;
    /* poisoned each time: a loss not written by this very call cannot match */
    cudaMemsetAsync(k->loss.ptr, 0xFF, sizeof loss, s);
    const kljit_status st = kljit_fused(k->plan, s, &a);
    if (st != KLJIT_SUCCESS) {
      fprintf(stderr, "thread: %s: %s\n", kljit_status_string(st), kljit_last_error());
      k->failures++;
      break;
    }
    cudaMemcpyAsync(&loss, k->loss.ptr, sizeof loss, cudaMemcpyDeviceToHost, s);
    cudaMemcpyAsync(dx, k->dx.ptr, dx_bytes, cudaMemcpyDeviceToHost, s);
    if (cudaStreamSynchronize(s) != cudaSuccess) {
      k->failures++;
      break;
    }
    k->mismatches += loss != k->serial_loss || memcmp(dx, k->serial_dx, dx_bytes) != 0;
  }
  if (!dx) k->failures++;
  free(dx);
  if (s) cudaStreamDestroy(s);
  return NULL;
}

static int one_plan_on_two_threads_and_streams_matches_a_serial_run(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  size_t ws = 0;
  TH_OK(kljit_plan_workspace_size(f.plan, KLJIT_MODE_FUSED, MT_ROWS, &ws));
  pthread_barrier_t start;
  TH_CHECK(pthread_barrier_init(&start, NULL, 2) == 0);
  worker k[2];
  memset(k, 0, sizeof k);
  host_rng rng = {77};
  for (int i = 0; i < 2; i++) { /* different inputs per thread, so a mix-up shows */
    k[i].plan = f.plan, k[i].w = f.w.ptr, k[i].ws_size = ws, k[i].start = &start;
    int fail = gbuf_alloc(&k[i].x, pb.input_dtype, MT_ROWS * HIDDEN) |
               gbuf_alloc(&k[i].t, pb.teacher_dtype, MT_ROWS * VOCAB) |
               gbuf_alloc(&k[i].loss, KLJIT_FP32, 1) |
               gbuf_alloc(&k[i].dx, pb.input_dtype, MT_ROWS * HIDDEN) |
               gbuf_alloc(&k[i].dw, pb.grad_weight_dtype, VOCAB * HIDDEN) |
               gbuf_alloc(&k[i].ws, KLJIT_INT32, ws / 4 + 1);
    TH_CHECK(!fail);
    TH_CHECK(upload_random(&k[i].x, &rng, 1.0 + i) == 0);
    TH_CHECK(upload_teacher(&k[i].t, &rng, MT_ROWS) == 0);
    /* the serial reference: same plan, legacy stream, one call at a time */
    const kljit_args a = worker_args(&k[i]);
    TH_OK(kljit_fused(f.plan, NULL, &a));
    TH_CHECK(cudaMemcpy(&k[i].serial_loss, k[i].loss.ptr, 4, cudaMemcpyDeviceToHost) ==
             cudaSuccess);
    k[i].serial_dx = malloc(k[i].dx.n * host_dtype_size(k[i].dx.dt));
    TH_CHECK(k[i].serial_dx && gbuf_bytes(&k[i].dx, k[i].serial_dx) == 0);
    float lf;
    memcpy(&lf, &k[i].serial_loss, 4);
    TH_CHECK(isfinite(lf) && lf > 0);
  }
  TH_CHECK(k[0].serial_loss != k[1].serial_loss);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) TH_CHECK(pthread_create(&th[i], NULL, worker_run, &k[i]) == 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  int bad = 0;
  for (int i = 0; i < 2; i++) {
    printf("thread %d: %d of %d calls differ from the serial run, %d failures\n", i,
           k[i].mismatches, MT_ITERS, k[i].failures);
    bad += k[i].mismatches + k[i].failures;
    gbuf *bufs[] = {&k[i].x, &k[i].t, &k[i].loss, &k[i].dx, &k[i].dw, &k[i].ws};
    for (int j = 0; j < 6; j++) gbuf_free(bufs[j]);
    free(k[i].serial_dx);
  }
  fixture_free(&f);
  return bad ? TH_FAIL : TH_PASS;
}

/* kljit_scale_grads after kljit_fused: every element of dX, dW and db becomes exactly the
 * fp32 product with the upstream scalar rounded to its dtype (the host computes the same);
 * NO_GRAD_WEIGHT leaves dW and db alone; bad arguments change nothing. */
static int expect_scaled(const gbuf *b, const double *before, float s, int scaled) {
  double *now = malloc(sizeof(double) * b->n), one = 0;
  unsigned char tmp[8];
  TH_CHECK(now && gbuf_download(b, now) == 0);
  size_t bad = 0;
  for (size_t i = 0; i < b->n; i++) {
    double want = before[i];
    if (scaled) { /* fp32 product, rounded once to the buffer's dtype */
      host_store(tmp, b->dt, 0, (double)((float)before[i] * s));
      want = host_load(tmp, b->dt, 0);
    }
    bad += memcmp(&now[i], &want, sizeof want) != 0;
    one += fabs(now[i]);
  }
  free(now);
  if (bad) fprintf(stderr, "%zu of %zu elements differ from the expected product\n", bad, b->n);
  TH_CHECK(bad == 0 && one > 0);
  return TH_PASS;
}

static int scale_grads_multiplies_each_gradient_once_in_place(void) {
  fixture f;
  kljit_problem pb = small_problem();
  pb.input_dtype = pb.weight_dtype = KLJIT_BF16, pb.flags = KLJIT_FLAG_BIAS;
  pb.grad_weight_dtype = KLJIT_BF16;
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  gbuf db;
  TH_CHECK(gbuf_alloc(&db, pb.grad_weight_dtype, VOCAB) == 0);
  kljit_args a = good_args(&f, KLJIT_MODE_FUSED);
  a.bias = f.bias.ptr, a.grad_bias = db.ptr;
  TH_OK(kljit_fused(f.plan, NULL, &a));
  double *x0 = malloc(sizeof(double) * f.dx.n), *w0 = malloc(sizeof(double) * f.dw.n);
  double b0[VOCAB];
  TH_CHECK(x0 && w0 && gbuf_download(&f.dx, x0) == 0 && gbuf_download(&f.dw, w0) == 0 &&
           gbuf_download(&db, b0) == 0);
  const float s = -0.37f;
  double go[ROWS] = {s};
  TH_CHECK(gbuf_upload(&f.go, go, NULL) == 0);
  kljit_args g = KLJIT_ARGS_INIT;
  g.rows = ROWS, g.grad_input = f.dx.ptr, g.grad_weight = f.dw.ptr, g.grad_bias = db.ptr;
  g.grad_output = f.go.ptr;
  /* refused, nothing changes: accumulated dW, a host scalar, unknown flags */
  kljit_args bad = g;
  bad.flags = KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT;
  TH_STATUS(kljit_scale_grads(f.plan, NULL, &bad), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_scale_grads: KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT"));
  bad = g, bad.grad_output = &s;
  TH_STATUS(kljit_scale_grads(f.plan, NULL, &bad), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "grad_output"));
  bad = g, bad.flags = 1u << 30;
  TH_STATUS(kljit_scale_grads(f.plan, NULL, &bad), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  if ((rc = expect_scaled(&f.dx, x0, s, 0)) || (rc = expect_scaled(&f.dw, w0, s, 0)) ||
      (rc = expect_scaled(&db, b0, s, 0)))
    return rc;
  /* dX only, then everything */
  kljit_args only_dx = g;
  only_dx.flags = KLJIT_EXEC_NO_GRAD_WEIGHT;
  TH_OK(kljit_scale_grads(f.plan, NULL, &only_dx));
  TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  if ((rc = expect_scaled(&f.dx, x0, s, 1)) || (rc = expect_scaled(&f.dw, w0, s, 0)) ||
      (rc = expect_scaled(&db, b0, s, 0)))
    return rc;
  TH_CHECK(gbuf_download(&f.dx, x0) == 0);
  TH_OK(kljit_scale_grads(f.plan, NULL, &g));
  TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  if ((rc = expect_scaled(&f.dx, x0, s, 1)) || (rc = expect_scaled(&f.dw, w0, s, 1)) ||
      (rc = expect_scaled(&db, b0, s, 1)))
    return rc;
  free(x0), free(w0);
  gbuf_free(&db);
  fixture_free(&f);
  return TH_PASS;
}

/* kljit_scale, no plan: each dtype's elements become the fp32 product rounded once (the host
 * computes the same), a factor of 1 changes no bit, bad arguments are refused. */
static int scale_without_a_plan_multiplies_any_float_dtype_in_place(void) {
  int rc = ctx_get();
  if (rc != TH_PASS) return rc;
  const kljit_dtype dts[] = {KLJIT_FP32, KLJIT_FP16, KLJIT_BF16};
  host_rng rng = {77};
  gbuf f;
  TH_CHECK(gbuf_alloc(&f, KLJIT_FP32, 1) == 0);
  for (int i = 0; i < 3; i++) {
    gbuf b;
    const size_t n = 5003; /* not a multiple of a vector: the tail is scaled too */
    TH_CHECK(gbuf_alloc(&b, dts[i], n) == 0 && upload_random(&b, &rng, 2.0) == 0);
    double *before = malloc(sizeof(double) * n);
    TH_CHECK(before && gbuf_download(&b, before) == 0);
    for (int k = 0; k < 2; k++) {
      const double s = k ? -0.37 : 1.0;
      TH_CHECK(gbuf_upload(&f, &s, NULL) == 0);
      TH_OK(kljit_scale(the_ctx, NULL, b.ptr, dts[i], (int64_t)n, (const float *)f.ptr));
      TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
      if ((rc = expect_scaled(&b, before, (float)s, k))) return rc;
    }
    free(before);
    gbuf_free(&b);
  }
  TH_STATUS(kljit_scale(the_ctx, NULL, f.ptr, KLJIT_INT32, 1, (const float *)f.ptr),
            KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_scale: dtype") != NULL);
  TH_STATUS(kljit_scale(NULL, NULL, f.ptr, KLJIT_FP32, 1, (const float *)f.ptr),
            KLJIT_ERR_INVALID_ARGUMENT);
  TH_OK(kljit_scale(the_ctx, NULL, NULL, KLJIT_FP32, 0, NULL)); /* nothing to do */
  gbuf_free(&f);
  return TH_PASS;
}

/* A context's options, not the environment, steer its plans: a chunk size given in the options
 * is the plan's (KLJIT_CHUNK_ROWS set to something else meanwhile changes nothing). */
static int context_options_steer_the_plans_not_the_environment(void) {
  if (!gpu_available()) return TH_SKIP;
  kljit_context_options o;
  TH_OK(kljit_context_options_default(&o));
  o.chunk_rows = 256;
  kljit_context *ctx;
  TH_OK(kljit_context_create(&ctx, 0, &o));
  setenv("KLJIT_CHUNK_ROWS", "512", 1);
  kljit_problem pb = small_problem();
  kljit_plan *plan;
  const kljit_status st = kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan);
  unsetenv("KLJIT_CHUNK_ROWS");
  TH_OK(st);
  const char *d = kljit_plan_describe(plan);
  printf("%s", d);
  const int ok = strstr(d, "chunk_rows=256 ") != NULL;
  kljit_plan_destroy(plan);
  kljit_context_destroy(ctx);
  TH_CHECK(ok);
  return TH_PASS;
}

/* grad_scale multiplies kljit_fused's and kljit_backward's gradients (a power of two: exactly,
 * as it goes into the GEMMs' alpha), not the loss; a struct ending at `flags` runs with 1; a
 * bad scale is refused. */
static int grad_scale_multiplies_the_gradients_and_older_structs_get_one(void) {
  fixture f;
  kljit_problem pb = small_problem();
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  double *x1 = malloc(sizeof(double) * f.dx.n), *w1 = malloc(sizeof(double) * f.dw.n);
  double l1[ROWS], l8[ROWS];
  TH_CHECK(x1 && w1 && f.loss.n <= ROWS);
  for (int m = 0; m < 2; m++) {
    const kljit_mode mode = m ? KLJIT_MODE_BACKWARD : KLJIT_MODE_FUSED;
    kljit_args a = good_args(&f, mode);
    if (mode == KLJIT_MODE_BACKWARD) {
      kljit_args fw = good_args(&f, KLJIT_MODE_FORWARD);
      TH_OK(kljit_forward(f.plan, NULL, &fw));
    }
    TH_OK((m ? kljit_backward : kljit_fused)(f.plan, NULL, &a));
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    TH_CHECK(gbuf_download(&f.dx, x1) == 0 && gbuf_download(&f.dw, w1) == 0);
    TH_CHECK(gbuf_download(&f.loss, l1) == 0);
    a.grad_scale = 8.0;
    TH_OK((m ? kljit_backward : kljit_fused)(f.plan, NULL, &a));
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    TH_CHECK(gbuf_download(&f.loss, l8) == 0 && l8[0] == l1[0]);
    if ((rc = expect_scaled(&f.dx, x1, 8.0f, 1)) || (rc = expect_scaled(&f.dw, w1, 8.0f, 1)))
      return rc;
    a.struct_size = offsetof(kljit_args, grad_scale); /* an older caller: grad_scale unread */
    TH_OK((m ? kljit_backward : kljit_fused)(f.plan, NULL, &a));
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    if ((rc = expect_scaled(&f.dx, x1, 1.0f, 0)) || (rc = expect_scaled(&f.dw, w1, 1.0f, 0)))
      return rc;
    const double bad[] = {-1.0, INFINITY, NAN};
    for (int k = 0; k < 3; k++) {
      a = good_args(&f, mode);
      a.grad_scale = bad[k];
      TH_STATUS((m ? kljit_backward : kljit_fused)(f.plan, NULL, &a),
                KLJIT_ERR_INVALID_ARGUMENT);
      TH_CHECK(strstr(kljit_last_error(), "args->grad_scale") != NULL);
    }
  }
  free(x1), free(w1);
  fixture_free(&f);
  return TH_PASS;
}

/* Row weights and the optional outputs (issue 29): KLJIT_FLAG_ROW_WEIGHTS and args->row_weights
 * go together, in every mode (backward reads the weights too); a misaligned row_weights,
 * row_loss or loss_parts is refused before any write; a struct that ends before them (an
 * older caller) reads none of them, whatever lies beyond its size. */
static int row_weights_and_the_optional_outputs_are_validated_before_any_write(void) {
  fixture f, g;
  kljit_problem pb = small_problem();
  pb.flags = KLJIT_FLAG_ROW_WEIGHTS;
  int rc = fixture_make(&f, &pb);
  if (rc != TH_PASS) return rc;
  pb.flags = 0;
  if ((rc = fixture_make(&g, &pb)) != TH_PASS) return rc;
  gbuf rw, rl, parts;
  double ones[ROWS];
  for (int i = 0; i < ROWS; i++) ones[i] = 1.0;
  TH_CHECK(!(gbuf_alloc(&rw, KLJIT_FP32, ROWS) | gbuf_upload(&rw, ones, NULL) |
             gbuf_alloc(&rl, KLJIT_FP32, ROWS) | gbuf_alloc(&parts, KLJIT_FP32, 2)));
  int bad = 0;
  for (int m = 0; m < 3; m++) {
    const kljit_mode mode = all_modes[m];
    kljit_args a = good_args(&f, mode);
    bad += !expect_rejected(&f, mode, &a, KLJIT_ERR_INVALID_ARGUMENT, "args->row_weights is NULL",
                            NULL);
    a.row_weights = (const float *)((const char *)rw.ptr + 2);
    bad += !expect_rejected(&f, mode, &a, KLJIT_ERR_MISALIGNED, "args->row_weights", "4-byte");
    a = good_args(&g, mode);
    a.row_weights = rw.ptr;
    bad += !expect_rejected(&g, mode, &a, KLJIT_ERR_INVALID_ARGUMENT, "args->row_weights",
                            "KLJIT_FLAG_ROW_WEIGHTS");
    if (mode == KLJIT_MODE_BACKWARD) continue; /* backward writes no loss: it reads neither */
    a = good_args(&g, mode);
    a.row_loss = (float *)((char *)rl.ptr + 2);
    bad += !expect_rejected(&g, mode, &a, KLJIT_ERR_MISALIGNED, "args->row_loss", NULL);
    a = good_args(&g, mode);
    a.loss_parts = (float *)((char *)parts.ptr + 1);
    bad += !expect_rejected(&g, mode, &a, KLJIT_ERR_MISALIGNED, "args->loss_parts", NULL);
    /* an older struct: the fields past teacher_bias hold garbage it cannot know of */
    a = good_args(&g, mode);
    a.row_weights = (const float *)(uintptr_t)1, a.row_loss = (float *)(uintptr_t)3;
    a.struct_size = offsetof(kljit_args, row_weights);
    if (mode == KLJIT_MODE_FORWARD) { /* forward needs nothing beyond; fused likewise */
      TH_OK(kljit_forward(g.plan, NULL, &a));
    } else {
      TH_OK(kljit_fused(g.plan, NULL, &a));
    }
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  }
  gbuf_free(&rw), gbuf_free(&rl), gbuf_free(&parts);
  fixture_free(&f), fixture_free(&g);
  return bad ? TH_FAIL : TH_PASS;
}

static const th_case cases[] = {
    {"context_options_steer_the_plans_not_the_environment",
     context_options_steer_the_plans_not_the_environment},
    {"valid_arguments_are_accepted_and_write_the_outputs",
     valid_arguments_are_accepted_and_write_the_outputs},
    {"null_arguments_are_rejected_before_any_write", null_arguments_are_rejected_before_any_write},
    {"wrong_struct_size_and_row_counts_are_rejected_before_any_write",
     wrong_struct_size_and_row_counts_are_rejected_before_any_write},
    {"host_pointers_are_rejected_naming_the_argument",
     host_pointers_are_rejected_naming_the_argument},
    {"misaligned_pointers_are_rejected_before_any_write",
     misaligned_pointers_are_rejected_before_any_write},
    {"a_workspace_one_byte_short_is_rejected_before_any_write",
     a_workspace_one_byte_short_is_rejected_before_any_write},
    {"bias_without_the_bias_flag_is_rejected_before_any_write",
     bias_without_the_bias_flag_is_rejected_before_any_write},
    {"hard_weight_without_labels_is_rejected_before_any_write",
     hard_weight_without_labels_is_rejected_before_any_write},
    {"reduction_none_in_fused_mode_is_unsupported", reduction_none_in_fused_mode_is_unsupported},
    {"runtime_temperature_zero_nan_or_infinite_is_rejected_before_any_write",
     runtime_temperature_zero_nan_or_infinite_is_rejected_before_any_write},
    {"unknown_exec_flags_are_rejected_before_any_write",
     unknown_exec_flags_are_rejected_before_any_write},
    {"one_plan_on_two_threads_and_streams_matches_a_serial_run",
     one_plan_on_two_threads_and_streams_matches_a_serial_run},
    {"scale_grads_multiplies_each_gradient_once_in_place",
     scale_grads_multiplies_each_gradient_once_in_place},
    {"grad_scale_multiplies_the_gradients_and_older_structs_get_one",
     grad_scale_multiplies_the_gradients_and_older_structs_get_one},
    {"row_weights_and_the_optional_outputs_are_validated_before_any_write",
     row_weights_and_the_optional_outputs_are_validated_before_any_write},
    {"scale_without_a_plan_multiplies_any_float_dtype_in_place",
     scale_without_a_plan_multiplies_any_float_dtype_in_place},
};
TH_MAIN(cases)
