/* SPDX-License-Identifier: Apache-2.0 */
/* cli_demo.c — `kljit demo`: the fused loss on the README's problem, timed, with its memory.
 * Without a GPU it says so, checks the problem and compiles its kernels instead (exit 0: the
 * demo is also the smoke test of a GPU-less install). */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gpu_fill.h"
#include "../src/host_dtype.h"

typedef struct demo_opts {
  kljit_problem pb;
  cli_shape shape; /* the problem: the SHAPE argument, or the old options' */
  int legacy_given; /* the old problem options were given (no SHAPE) */
  long long rows, repeats;
  const char *arch;
  const char *cache_dir;
} demo_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: kljit demo [options] [--] [SHAPE]\n"
          "Computes the fused linear + KL loss, dX and dW on one problem (default N x H x V =\n"
          "4096 x 4096 x 128256, bf16, dense teacher probabilities) and prints the loss, the time\n"
          "and the memory used. Without a GPU it says so and compiles the problem's kernels with\n"
          "NVRTC instead (exit 0). N= in the SHAPE is the token count; reduction=none is for\n"
          "kljit_forward/kljit_backward, not the fused call the demo makes.\n\n"
          "%s\n"
          "options:\n"
          "  --rows N            tokens (default 4096, or the SHAPE's N=)\n"
          "  --repeats R         timed runs after one warm-up (default 10)\n"
          "  --arch LIST         without a GPU: architectures to compile for (default "
          "sm_80,sm_90)\n"
          "  --cache-dir DIR     without a GPU: where to put them (default: the user cache)\n"
          "%s",
          CLI_SHAPE_HELP, CLI_PROBLEM_HELP);
}

/* A sparse teacher's ids and values on the device: K distinct ids per row, values 1/K. */
static int upload_topk(const kljit_problem *pb, long long rows, void **ids, void **vals) {
  const size_t n = (size_t)rows * (size_t)pb->topk;
  const size_t id_size = pb->topk_id_dtype == KLJIT_INT64 ? 8 : 4;
  const size_t v_size = host_dtype_size(pb->teacher_dtype);
  unsigned char *const hi = malloc(n * id_size), *const hv = malloc(n * v_size);
  int rc = !hi || !hv;
  for (size_t i = 0; !rc && i < n; i++) {
    const size_t r = i / (size_t)pb->topk, k = i % (size_t)pb->topk;
    const int64_t id = (int64_t)((r * 7919 + k) % (size_t)pb->vocab); /* distinct within a row */
    if (id_size == 8)
      ((int64_t *)hi)[i] = id;
    else
      ((int32_t *)hi)[i] = (int32_t)id;
    const double p = 1.0 / (double)pb->topk;
    host_store(hv, pb->teacher_dtype, i, pb->topk_values == KLJIT_TOPK_LOGPROBS ? log(p) : p);
  }
  if (!rc)
    rc = cudaMalloc(ids, n * id_size) || cudaMalloc(vals, n * v_size) ||
         cudaMemcpy(*ids, hi, n * id_size, cudaMemcpyHostToDevice) ||
         cudaMemcpy(*vals, hv, n * v_size, cudaMemcpyHostToDevice);
  free(hi), free(hv);
  return rc;
}

/* What names the demo's problem in messages: its SHAPE as written, or what stands for it. */
static const char *problem_label(const demo_opts *o) {
  return o->shape.text[0]  ? o->shape.text
         : o->legacy_given ? "the problem of the options"
                           : CLI_DEFAULT_SHAPE;
}

static int demo_gpu(const demo_opts *o, kljit_context *ctx) {
  const kljit_problem pb = o->pb;
  const kljit_dtype dtype = pb.input_dtype;
  kljit_plan *plan;
  kljit_status st = kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan);
  if (st != KLJIT_SUCCESS) return cli_fail(problem_label(o), st);
  fputs(kljit_plan_describe(plan), stdout);
  size_t ws = 0, es = dtype == KLJIT_FP32 ? 4 : 2;
  kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, o->rows, &ws);
  const size_t nx = (size_t)o->rows * pb.hidden, nw = (size_t)pb.vocab * pb.hidden;
  const int sparse = pb.teacher == KLJIT_TEACHER_SPARSE_TOPK;
  const int online = pb.teacher == KLJIT_TEACHER_DENSE_HIDDEN;
  const size_t nt = sparse || online ? 0 : (size_t)o->rows * pb.vocab;
  /* the online teacher: its input [N, Ht], head [Vt, Ht] and bias [Vt] */
  const size_t vt = (size_t)(pb.teacher_vocab ? pb.teacher_vocab : pb.vocab);
  const size_t nxt = online ? (size_t)o->rows * pb.teacher_hidden : 0;
  const size_t nwt = online ? vt * pb.teacher_hidden : 0;
  const int has_tbias = (pb.flags & KLJIT_FLAG_TEACHER_BIAS) != 0;
  const size_t ets = pb.teacher_dtype == KLJIT_FP32 ? 4 : 2; /* the online teacher's dtype */
  void *x, *w, *t = NULL, *dx, *dw, *wsp, *bias = NULL, *dbias = NULL, *ids = NULL, *vals = NULL;
  void *xt = NULL, *wt = NULL, *tbias = NULL;
  float *loss;
  size_t free0, free1, total;
  cudaMemGetInfo(&free0, &total);
  const int has_bias = (pb.flags & KLJIT_FLAG_BIAS) != 0;
  const size_t nl = pb.reduction == KLJIT_REDUCTION_NONE ? (size_t)o->rows : 1;
  if (cudaMalloc(&x, nx * es) || cudaMalloc(&w, nw * es) || (!sparse && cudaMalloc(&t, nt * es)) ||
      (sparse && upload_topk(&pb, o->rows, &ids, &vals)) ||
      cudaMalloc(&dx, nx * es) || cudaMalloc(&dw, nw * 4) || cudaMalloc((void **)&loss, nl * 4) ||
      cudaMalloc(&wsp, ws) ||
      (has_bias && (cudaMalloc(&bias, pb.vocab * es) || cudaMalloc(&dbias, pb.vocab * 4))) ||
      (online && (cudaMalloc(&xt, nxt * ets) || cudaMalloc(&wt, nwt * ets))) ||
      (has_tbias && cudaMalloc(&tbias, vt * ets))) {
    fprintf(stderr, "kljit: demo: cudaMalloc failed (%s)\n",
            cudaGetErrorString(cudaGetLastError()));
    return CLI_FAIL;
  }
  /* bf16 patterns; for fp32/fp16 inputs they are just random bits of the right magnitude */
  const double pv = 2.0 / (double)pb.vocab;
  if (gpu_fill_bf16(x, nx * es / 2, -1, 1, 1) || gpu_fill_bf16(w, nw * es / 2, -0.05, 0.05, 2) ||
      (!sparse && gpu_fill_bf16(t, nt * es / 2, dtype == KLJIT_BF16 ? 0 : -1,
                                dtype == KLJIT_BF16 ? pv : 1, 3)) ||
      (has_bias && gpu_fill_bf16(bias, pb.vocab * es / 2, -0.1, 0.1, 4)) ||
      (online && (gpu_fill_bf16(xt, nxt * ets / 2, -1, 1, 5) ||
                  gpu_fill_bf16(wt, nwt * ets / 2, -0.05, 0.05, 6))) ||
      (has_tbias && gpu_fill_bf16(tbias, vt * ets / 2, -0.1, 0.1, 7)))
    return CLI_FAIL;
  cudaMemGetInfo(&free1, &total);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = o->rows, a.input = x, a.weight = w, a.teacher = t, a.loss = loss, a.bias = bias;
  a.teacher_ids = ids, a.teacher_values = vals;
  a.teacher_input = xt, a.teacher_weight = wt, a.teacher_bias = tbias;
  a.grad_input = dx, a.grad_weight = dw, a.grad_bias = dbias, a.workspace = wsp;
  a.workspace_size = ws, a.temperature = pb.temperature;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  st = kljit_fused(plan, NULL, &a); /* warm-up */
  float best = 1e30f, sum = 0;
  for (int i = 0; i < o->repeats && st == KLJIT_SUCCESS; i++) {
    cudaEventRecord(e0, 0);
    st = kljit_fused(plan, NULL, &a);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    best = ms < best ? ms : best;
    sum += ms;
  }
  if (st != KLJIT_SUCCESS) return cli_fail(problem_label(o), st);
  float host_loss = 0;
  cudaMemcpy(&host_loss, loss, 4, cudaMemcpyDeviceToHost);
  const double flops = 6.0 * o->rows * pb.hidden * pb.vocab;
  printf("fused linear + KL, N=%lld H=%lld V=%lld: loss %.6f\n", o->rows, (long long)pb.hidden,
         (long long)pb.vocab, host_loss);
  printf("time: best %.3f ms, mean %.3f ms over %lld runs (%.0f TFLOP/s of GEMM work)\n", best,
         sum / o->repeats, o->repeats, flops / (best * 1e-3) / 1e12);
  printf(
      "memory: inputs+outputs %.2f GiB, workspace %.2f GiB; never a %lld x %lld logits "
      "tensor (%.2f GiB in fp32)\n",
      (double)(free0 - free1) / 1073741824.0, ws / 1073741824.0, o->rows, (long long)pb.vocab,
      (double)o->rows * (double)pb.vocab * 4.0 / 1073741824.0);
  cudaFree(x), cudaFree(w), cudaFree(t), cudaFree(dx), cudaFree(dw), cudaFree(loss);
  cudaFree(ids), cudaFree(vals);
  cudaFree(wsp), cudaFree(bias), cudaFree(dbias), cudaFree(xt), cudaFree(wt), cudaFree(tbias);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  kljit_plan_destroy(plan);
  return CLI_OK;
}

static void count_module(const kljit_module_report *m, void *user) {
  int *const n = user; /* [compiled, cached] */
  n[m->compiled ? 0 : 1]++;
}

/* No GPU: compile the problem's kernels as `kljit precompile` would, into --cache-dir, else the
 * user cache, else (KLJIT_CACHE_DISABLE=1, no HOME) a temporary directory removed afterwards:
 * the demo is the smoke test of an install, and a cache is not needed to compile. */
static int demo_no_gpu(cli_parser *p, const demo_opts *o) {
  printf(
      "no GPU here (%s)\nso no loss is computed; compiling the problem's kernels with NVRTC "
      "instead:\n",
      cli_last_error());
  printf("problem N=%lld H=%lld V=%lld is valid and supported by kljit_fused\n", o->rows,
         (long long)o->pb.hidden, (long long)o->pb.vocab);
  int archs[16];
  const int n = cli_parse_archs(p, o->arch, archs, 16);
  if (!n) return p->status;
  char dir[4096];
  int temporary = 0;
  const kljit_status found = cli_cache_dir(o->cache_dir, dir);
  if (found != KLJIT_SUCCESS) return cli_fail("demo", found);
  if (!dir[0]) {
    const char *const tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/kljit-demo.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
      fprintf(stderr, "kljit demo: cannot create a temporary directory %s: %s\n", dir,
              strerror(errno));
      return CLI_FAIL;
    }
    temporary = 1;
    printf("no kernel cache (KLJIT_CACHE_DISABLE=1, or no KLJIT_CACHE_DIR, XDG_CACHE_HOME or "
           "HOME): compiling into %s, removed afterwards\n", dir);
  }
  int rc = CLI_OK;
  for (int i = 0; i < n && rc == CLI_OK; i++) {
    int counts[2] = {0, 0};
    const kljit_status st = kljit_precompile(&o->pb, archs[i], dir, 0, count_module, counts);
    if (st != KLJIT_SUCCESS) {
      char what[CLI_SHAPE_TEXT + 32];
      snprintf(what, sizeof what, "%s on sm_%d", problem_label(o), archs[i]);
      rc = cli_refused(p, what, st);
      break;
    }
    printf("sm_%d: %d module(s) compiled now, %d already cached -> %s\n", archs[i], counts[0],
           counts[1], dir);
  }
  if (temporary) {
    kljit_cache_clear(dir, NULL, NULL);
    rmdir(dir);
  }
  return rc;
}

int cli_demo(int argc, char **argv) {
  demo_opts o = {.rows = 4096, .repeats = 10, .arch = "sm_80,sm_90"};
  long long rows = 0;
  cli_parser p;
  cli_parser_init(&p, argc, argv);
  static cli_words legacy, loss;
  memset(&legacy, 0, sizeof legacy), memset(&loss, 0, sizeof loss);
  const char *text = NULL;
  while (cli_next(&p)) {
    const char *t;
    if (cli_int(&p, "--rows", 1, INT32_MAX, &rows)) continue;
    if (cli_int(&p, "--repeats", 1, 1000000, &o.repeats)) continue;
    if (cli_string(&p, "--arch", &o.arch)) continue;
    if (cli_string(&p, "--cache-dir", &o.cache_dir)) continue;
    if (cli_loss_option(&p, &loss)) continue;
    if (cli_problem_option(&p, &legacy)) continue;
    if (cli_positional(&p, &t)) {
      if (text)
        cli_usage_error(&p, "one SHAPE at most ('%s' is a second)", t);
      else
        text = t;
      continue;
    }
    cli_unknown(&p);
  }
  if (cli_stopped(&p, usage)) return p.status;
  if (text && legacy.n)
    return cli_usage_error(&p, "give the problem as a SHAPE or as old options, not both");
  o.legacy_given = legacy.n > 0;
  if (!text) cli_problem_words(&legacy);
  cli_words_append(&legacy, &loss);
  if (!cli_shape_parse(&p, text ? text : "", &legacy, NULL, &o.shape)) return p.status;
  o.pb = o.shape.pb;
  if (o.shape.rows) o.rows = o.shape.rows;
  if (rows) o.rows = rows;
  if (o.pb.reduction == KLJIT_REDUCTION_NONE)
    return cli_usage_error(&p, "reduction=none: the demo runs kljit_fused, which needs a scalar "
                               "loss (sum, batchmean or mean); none is for kljit_forward and "
                               "kljit_backward");
  if (o.pb.shards > 1 || o.pb.vocab_total)
    return cli_usage_error(&p, "vtot=/shards=: the demo runs kljit_fused on one GPU, which a "
                               "shard of a vocabulary-parallel head cannot (kljit_shard_*)");
  cli_problem_print(stdout, &o.pb, o.rows);

  kljit_context *ctx = NULL;
  const kljit_status st = kljit_context_create(&ctx, 0, NULL);
  if (st == KLJIT_ERR_NO_DEVICE) return demo_no_gpu(&p, &o);
  if (st != KLJIT_SUCCESS) return cli_fail("context", st);
  const int rc = demo_gpu(&o, ctx);
  kljit_context_destroy(ctx);
  return rc;
}
