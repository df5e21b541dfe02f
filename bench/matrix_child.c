/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_child.c — `kljit-bench --one`: runs one experiment in this process and writes its
 * record (matrix_record.h) to --result-fd, or stdout.
 *
 * The order of things, and why:
 *   1. shared inputs and outputs (X, W, the teacher, dX, dW, loss) are allocated and filled
 *      by gpu_fill (tools/gpu_fill.h: seeded, identical in every process; bench_loss's
 *      generator too) and the top-K teacher's ids by mxk_fill_topk, plus a 256 MiB buffer to
 *      flush L2;
 *   2. the free device memory is read (cudaMemGetInfo): the baseline;
 *   3. the method's setup allocates everything it needs (buffers, cuBLAS handle, kljit
 *      context, plan and workspace); its steps allocate nothing;
 *   4. warm-up and timed steps, each after an L2 flush; CUDA events around each timed step
 *      (bench_time.h's loop, bench_loss's too);
 *      the loss is read after the first step; free memory is sampled after setup and after
 *      every step: peak_vram_gib = baseline - lowest sample. Because the method frees nothing
 *      until the end, that lowest sample is the high-water mark of everything it allocated,
 *      hidden allocations included (cuBLAS workspaces, kljit's modules);
 *   5. the gradients' norms (compared with dense_unfused by the parent), then teardown;
 *   6. the floor: the method's GEMMs alone at the same shapes (mx_method_floor), timed the same
 *      way in the same process.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_time.h"
#include "gpu_fill.h"
#include "matrix_kernels.h"
#include "matrix_methods.h"
#include "matrix_record.h"

enum { MX_FLUSH_BYTES = 256 << 20 };

/* ---- the error and allocation helpers of matrix_run.h ------------------------------------ */

int mx_fail(mx_run *r, const char *fmt, ...) {
  if (!r->err[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
  }
  return 1;
}

int mx_cuda(mx_run *r, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  return mx_fail(r, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static const char *blas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED (out of memory)";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

int mx_blas(mx_run *r, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  return mx_fail(r, "%s: %s (status %d)", what, blas_name(s), (int)s);
}

int mx_blas_handle(mx_run *r) {
  if (r->blas) return 0;
  return mx_blas(r, cublasCreate(&r->blas), "cublasCreate");
}

int mx_alloc(mx_run *r, void **p, size_t bytes, const char *what) {
  *p = NULL;
  if (r->n_allocs == MX_MAX_ALLOCS) return mx_fail(r, "too many allocations (%s)", what);
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    *p = NULL;
    return mx_fail(r, "cudaMalloc(%s, %.2f GiB): %s: %s", what, bytes / 1073741824.0,
                   cudaGetErrorName(e), cudaGetErrorString(e));
  }
  r->allocs[r->n_allocs++] = *p;
  return 0;
}

void mx_free_from(mx_run *r, int mark) {
  while (r->n_allocs > mark) cudaFree(r->allocs[--r->n_allocs]);
}

/* ---- measurement ------------------------------------------------------------------------- */

typedef int (*mx_step_fn)(mx_run *r, void *arg);

typedef struct mx_timing {
  void *flush;
  size_t free0, min_free; /* min_free: sampled when track_memory */
  int track_memory;
  float *loss_out; /* when not NULL: the loss after the first step */
  /* the step bench_time.h's loop runs */
  mx_run *r;
  mx_step_fn fn;
  void *arg;
} mx_timing;

static int timed_step(void *p) {
  mx_timing *t = p;
  return t->fn(t->r, t->arg);
}

/* After each synchronized step: the step's CUDA errors, the loss of the first, the free memory. */
static int after_step(void *p, int index) {
  mx_timing *t = p;
  mx_run *r = t->r;
  char what[64];
  snprintf(what, sizeof what, "step %d", index + 1);
  if (mx_cuda(r, cudaGetLastError(), what)) return 1;
  if (index == 0 && t->loss_out &&
      mx_cuda(r, cudaMemcpy(t->loss_out, r->loss, 4, cudaMemcpyDeviceToHost), "read loss"))
    return 1;
  if (t->track_memory) {
    size_t fr, total;
    if (mx_cuda(r, cudaMemGetInfo(&fr, &total), "cudaMemGetInfo")) return 1;
    if (fr < t->min_free) t->min_free = fr;
  }
  return 0;
}

/* warm-up + timed steps (bench_time.h's loop); *median_ms over the timed ones. */
static int time_steps(mx_run *r, mx_timing *t, mx_step_fn fn, void *arg, float *median_ms) {
  if (r->o->iterations > BT_MAX_REPEATS)
    return mx_fail(r, "--iterations %d: at most %d", r->o->iterations, BT_MAX_REPEATS);
  t->r = r, t->fn = fn, t->arg = arg;
  const bt_loop l = {r->o->warmup, r->o->iterations, t->flush, MX_FLUSH_BYTES, 0, after_step, t};
  bt_result res;
  if (bt_time(&l, timed_step, t, &res)) return r->err[0] ? 1 : mx_fail(r, "a timed step failed");
  *median_ms = res.median_ms;
  return 0;
}

static int method_step(mx_run *r, void *s) {
  return mx_method_step(r, s);
}
static int floor_step(mx_run *r, void *f) {
  return mx_floor_step(r, f);
}

/* Allocates and fills the shared inputs and outputs. */
static int shared_inputs(mx_run *r) {
  const mx_options *o = r->o;
  const size_t nh = (size_t)r->rows * r->hidden, vh = (size_t)r->vocab * r->hidden;
  if (mx_alloc(r, &r->x, nh * r->es, "X [N, H]") || mx_alloc(r, &r->w, vh * r->es, "W [V, H]") ||
      mx_alloc(r, &r->dx, nh * r->es, "dX [N, H]") ||
      mx_alloc(r, (void **)&r->dw, vh * 4, "dW [V, H] fp32") ||
      mx_alloc(r, (void **)&r->loss, 4, "loss"))
    return 1;
  if (o->teacher == MX_TEACHER_DENSE) {
    if (mx_alloc(r, &r->teacher, (size_t)r->rows * r->vocab * r->es, "dense teacher [N, V]"))
      return 1;
  } else if (mx_alloc(r, (void **)&r->ids, (size_t)r->rows * o->topk * 8, "teacher ids [N, K]") ||
             mx_alloc(r, &r->vals, (size_t)r->rows * o->topk * r->es, "teacher values [N, K]")) {
    return 1;
  }
  /* X in [-1, 1), W in [-0.05, 0.05): logits of order 1; dense teacher rows sum to about 1,
   * sparse ones to about 0.9 (the tail mass 0.1 left out, as cached top-K teachers have). */
  if (gpu_fill(r->x, r->dt, nh, -1.0, 1.0, 1)) return mx_fail(r, "fill X");
  if (gpu_fill(r->w, r->dt, vh, -0.05, 0.05, 2)) return mx_fail(r, "fill W");
  if (r->teacher && gpu_fill(r->teacher, r->dt, (size_t)r->rows * r->vocab, 0.0, 2.0 / r->vocab, 3))
    return mx_fail(r, "fill teacher");
  if (r->teacher) return 0;
  return mx_cuda(r, mxk_fill_topk(r->ids, r->vals, r->dt, r->rows, o->topk, r->vocab, 0.9, 3),
                 "fill top-K teacher");
}

static int norms(mx_run *r, mx_record *rec) {
  double sx, sw;
  if (mx_cuda(r, mxk_sum_squares(r->dx, r->dt, (size_t)r->rows * r->hidden, &sx), "norm dX") ||
      mx_cuda(r, mxk_sum_squares(r->dw, KLJIT_FP32, (size_t)r->vocab * r->hidden, &sw), "norm dW"))
    return 1;
  rec->dx_norm = sqrt(sx), rec->dw_norm = sqrt(sw);
  return 0;
}

static int measure(mx_run *r, mx_record *rec) {
  struct cudaDeviceProp prop;
  int driver = 0, devices = 0;
  if (mx_cuda(r, cudaGetDeviceCount(&devices), "cudaGetDeviceCount")) return 1;
  if (devices < 1) return mx_fail(r, "no CUDA device");
  if (mx_cuda(r, cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  cudaDriverGetVersion(&driver);
  snprintf(rec->gpu, sizeof rec->gpu, "%.127s", prop.name);
  mx_one_line(rec->gpu);
  for (char *c = rec->gpu; *c; c++)
    if (*c == ',') *c = ' ';
  snprintf(rec->driver, sizeof rec->driver, "%d.%d", driver / 1000, driver % 1000 / 10);

  mx_timing t;
  memset(&t, 0, sizeof t);
  if (shared_inputs(r) || mx_alloc(r, &t.flush, MX_FLUSH_BYTES, "L2 flush buffer") ||
      mx_cuda(r, cudaDeviceSynchronize(), "filling the inputs") ||
      mx_cuda(r, cudaMemGetInfo(&t.free0, &(size_t){0}), "cudaMemGetInfo"))
    return 1;
  const int mark = r->n_allocs;
  t.min_free = t.free0;

  mx_state s;
  float loss = NAN, ms = 0, floor_ms = 0;
  int rc = mx_method_setup(r, &s);
  if (!rc) {
    size_t fr;
    rc = mx_cuda(r, cudaMemGetInfo(&fr, &(size_t){0}), "cudaMemGetInfo");
    if (!rc && fr < t.min_free) t.min_free = fr;
  }
  rec->chunk_rows = s.chunk;
  t.track_memory = 1, t.loss_out = &loss;
  if (!rc) rc = time_steps(r, &t, method_step, &s, &ms);
  if (!rc) rc = norms(r, rec);
  mx_floor f;
  mx_method_floor(r, &s, &f);
  mx_method_teardown(r, &s);
  mx_free_from(r, mark);
  if (rc) return 1;
  rec->iteration_ms = ms;
  rec->loss = loss;
  rec->peak_vram_gib = (double)(t.free0 - t.min_free) / 1073741824.0;
  if (!isfinite(loss)) return mx_fail(r, "the loss is not finite (%g)", loss);

  t.track_memory = 0, t.loss_out = NULL;
  rc = mx_floor_setup(r, &f) || time_steps(r, &t, floor_step, &f, &floor_ms);
  mx_free_from(r, mark);
  if (rc) return 1;
  rec->floor_ms = floor_ms;
  return 0;
}

int mx_child_main(const mx_options *o) {
  /* Test hook: a child that dies without a record (tests the parent's FAILED path). */
  const char *crash = getenv("KLJIT_BENCH_DEBUG_ABORT");
  if (crash && *crash == '1') abort();
  mx_run r;
  memset(&r, 0, sizeof r);
  r.o = o;
  mx_experiments(o, &r.e, 1);
  r.rows = o->batch * r.e.seq;
  r.hidden = o->hidden, r.vocab = o->vocab;
  r.ld = (o->vocab + 7) / 8 * 8;
  r.dt = o->dtype;
  r.zdt = o->logits == MX_LOGITS_NATIVE ? o->dtype : KLJIT_FP32;
  r.es = o->dtype == KLJIT_FP32 ? 4 : 2;
  r.zes = r.zdt == KLJIT_FP32 ? 4 : 2;
  r.eps = 1e-20;

  mx_record rec;
  mx_record_init(&rec);
  snprintf(rec.kljit_version, sizeof rec.kljit_version, "%s", kljit_version());
  rec.ok = measure(&r, &rec) == 0;
  if (!rec.ok) snprintf(rec.error, sizeof rec.error, "%.1023s", r.err[0] ? r.err : "unknown error");
  if (r.blas) cublasDestroy(r.blas);
  mx_free_from(&r, 0);

  FILE *out = stdout;
  if (o->result_fd >= 0) {
    out = fdopen(o->result_fd, "w");
    if (!out) {
      perror("kljit-bench: fdopen(--result-fd)");
      return 1;
    }
  }
  mx_record_write(&rec, out);
  if (out != stdout) fclose(out);
  return rec.ok ? 0 : 1;
}
