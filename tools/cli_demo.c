/* cli_demo.c — `kljit demo`: the fused loss on the README's problem, timed, with its memory.
 * Without a GPU it says so, checks the problem and compiles its kernels instead (exit 0: the
 * demo is also the smoke test of a GPU-less install). */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpu_fill.h"

typedef struct demo_opts {
  kljit_problem pb;
  long long rows, repeats;
  const char *arch;
  const char *cache_dir;
} demo_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: kljit demo [options]\n"
          "Computes the fused linear + KL loss, dX and dW on one problem (default N x H x V =\n"
          "4096 x 4096 x 128256, bf16) and prints the loss, the time and the memory used. Without\n"
          "a GPU it says so and compiles the problem's kernels with NVRTC instead (exit 0).\n\n"
          "options:\n"
          "  --rows N            tokens (default 4096)\n"
          "  --repeats R         timed runs after one warm-up (default 10)\n"
          "  --arch LIST         without a GPU: architectures to compile for (default "
          "sm_80,sm_90)\n"
          "  --cache-dir DIR     without a GPU: where to put them (default: the user cache)\n"
          "%s",
          CLI_PROBLEM_HELP);
}

static int demo_gpu(const demo_opts *o, kljit_context *ctx) {
  const kljit_problem pb = o->pb;
  const kljit_dtype dtype = pb.input_dtype;
  kljit_plan *plan;
  kljit_status st = kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan);
  if (st != KLJIT_SUCCESS) return cli_fail("plan", st);
  fputs(kljit_plan_describe(plan), stdout);
  size_t ws = 0, es = dtype == KLJIT_FP32 ? 4 : 2;
  kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, o->rows, &ws);
  const size_t nx = (size_t)o->rows * pb.hidden, nw = (size_t)pb.vocab * pb.hidden;
  const size_t nt = (size_t)o->rows * pb.vocab;
  void *x, *w, *t, *dx, *dw, *wsp, *bias = NULL, *dbias = NULL;
  float *loss;
  size_t free0, free1, total;
  cudaMemGetInfo(&free0, &total);
  const int has_bias = (pb.flags & KLJIT_FLAG_BIAS) != 0;
  const size_t nl = pb.reduction == KLJIT_REDUCTION_NONE ? (size_t)o->rows : 1;
  if (cudaMalloc(&x, nx * es) || cudaMalloc(&w, nw * es) || cudaMalloc(&t, nt * es) ||
      cudaMalloc(&dx, nx * es) || cudaMalloc(&dw, nw * 4) || cudaMalloc((void **)&loss, nl * 4) ||
      cudaMalloc(&wsp, ws) ||
      (has_bias && (cudaMalloc(&bias, pb.vocab * es) || cudaMalloc(&dbias, pb.vocab * 4)))) {
    fprintf(stderr, "kljit: demo: cudaMalloc failed (%s)\n",
            cudaGetErrorString(cudaGetLastError()));
    return CLI_FAIL;
  }
  /* bf16 patterns; for fp32/fp16 inputs they are just random bits of the right magnitude */
  const double pv = 2.0 / (double)pb.vocab;
  if (gpu_fill_bf16(x, nx * es / 2, -1, 1, 1) || gpu_fill_bf16(w, nw * es / 2, -0.05, 0.05, 2) ||
      gpu_fill_bf16(t, nt * es / 2, dtype == KLJIT_BF16 ? 0 : -1, dtype == KLJIT_BF16 ? pv : 1,
                    3) ||
      (has_bias && gpu_fill_bf16(bias, pb.vocab * es / 2, -0.1, 0.1, 4)))
    return CLI_FAIL;
  cudaMemGetInfo(&free1, &total);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = o->rows, a.input = x, a.weight = w, a.teacher = t, a.loss = loss, a.bias = bias;
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
  if (st != KLJIT_SUCCESS) return cli_fail("fused", st);
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
      nt * 4.0 / 1073741824.0);
  cudaFree(x), cudaFree(w), cudaFree(t), cudaFree(dx), cudaFree(dw), cudaFree(loss);
  cudaFree(wsp), cudaFree(bias), cudaFree(dbias);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  kljit_plan_destroy(plan);
  return CLI_OK;
}

static void count_compiled(const kljit_module_report *m, void *user) {
  if (m->compiled) ++*(int *)user;
}

/* No GPU: check the problem, then compile its kernels as `kljit precompile` would. */
static int demo_no_gpu(cli_parser *p, const demo_opts *o) {
  printf(
      "no GPU here (%s)\nso no loss is computed; compiling the problem's kernels with NVRTC "
      "instead:\n",
      kljit_last_error());
  const kljit_status chk = kljit_plan_check(&o->pb);
  if (chk != KLJIT_SUCCESS) return cli_fail("plan_check", chk);
  printf("problem N=%lld H=%lld V=%lld is valid and supported\n", o->rows, (long long)o->pb.hidden,
         (long long)o->pb.vocab);
  int archs[16];
  const int n = cli_parse_archs(p, o->arch, archs, 16);
  if (!n) return p->status;
  for (int i = 0; i < n; i++) {
    int compiled = 0;
    const kljit_status st =
        kljit_precompile(&o->pb, archs[i], o->cache_dir, 0, count_compiled, &compiled);
    if (st != KLJIT_SUCCESS) return cli_fail("precompile", st);
    printf("sm_%d: %d module(s) compiled now -> %s\n", archs[i], compiled,
           o->cache_dir ? o->cache_dir : "the user kernel cache");
  }
  return CLI_OK;
}

int cli_demo(int argc, char **argv) {
  demo_opts o = {.rows = 4096, .repeats = 10, .arch = "sm_80,sm_90"};
  cli_problem_defaults(&o.pb);
  cli_parser p;
  cli_parser_init(&p, argc, argv);
  while (cli_next(&p)) {
    if (cli_int(&p, "--rows", 1, INT32_MAX, &o.rows)) continue;
    if (cli_int(&p, "--repeats", 1, 1000000, &o.repeats)) continue;
    if (cli_string(&p, "--arch", &o.arch)) continue;
    if (cli_string(&p, "--cache-dir", &o.cache_dir)) continue;
    if (cli_problem_option(&p, &o.pb)) continue;
    cli_unknown(&p);
  }
  if (cli_stopped(&p, usage)) return p.status;

  kljit_context *ctx = NULL;
  const kljit_status st = kljit_context_create(&ctx, 0, NULL);
  if (st == KLJIT_ERR_NO_DEVICE) return demo_no_gpu(&p, &o);
  if (st != KLJIT_SUCCESS) return cli_fail("context", st);
  const int rc = demo_gpu(&o, ctx);
  kljit_context_destroy(ctx);
  return rc;
}
