/* SPDX-License-Identifier: Apache-2.0 */
/* unit_shard.c — the tensor-parallel (vocabulary-sharded) API without a GPU: validation of the
 * shard fields (each message names the field and its value), the NCCL loader's report when the
 * library is absent, and the NULL checks of every new entry point.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kljit_experimental.h"
#include "layout.h"
#include "nccl.h"
#include "plan.h"

static kljit_problem sharded(void) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 64, pb.vocab = 126, pb.vocab_total = 1001, pb.vocab_offset = 875, pb.shards = 8;
  return pb;
}

/* kljit_plan_check(pb) must give `want` with every string of `msgs` in the message. */
static int expect(const kljit_problem *pb, kljit_status want, const char *m1, const char *m2) {
  const kljit_status st = kljit_plan_check(pb);
  const char *e = kljit_last_error();
  const int ok = st == want && (!m1 || strstr(e, m1)) && (!m2 || strstr(e, m2));
  if (!ok)
    fprintf(stderr, "want %s [%s] [%s], got %s: %s\n", kljit_status_string(want), m1 ? m1 : "",
            m2 ? m2 : "", kljit_status_string(st), e);
  return ok;
}

static int shard_fields_are_validated_naming_field_and_value(void) {
  int bad = 0;
  kljit_problem pb = sharded();
  bad += !expect(&pb, KLJIT_SUCCESS, NULL, NULL);
  pb = sharded(), pb.vocab_offset = 0;
  bad += !expect(&pb, KLJIT_SUCCESS, NULL, NULL);
  pb = sharded(), pb.vocab_offset = -1;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "vocab_offset = -1", ">= 0");
  pb = sharded(), pb.vocab_offset = 876;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "vocab_offset + vocab = 876 + 126 = 1002",
                 "vocab_total = 1001");
  /* a sum past INT64_MAX must be refused, not wrap around to a "valid" shard */
  pb = sharded(), pb.vocab_offset = INT64_MAX - 100;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT,
                 "vocab_offset + vocab = 9223372036854775707 + 126", "vocab_total = 1001");
  pb = sharded(), pb.vocab_total = (1 << 24) + 1;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "vocab_total = 16777217", NULL);
  pb = sharded(), pb.vocab_total = 1;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "vocab_total = 1", NULL);
  pb = sharded(), pb.shards = 0;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "shards = 0", "[1, 1024]");
  pb = sharded(), pb.shards = 1025;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "shards = 1025", "[1, 1024]");
  pb = sharded(), pb.shards = 1024;
  bad += !expect(&pb, KLJIT_SUCCESS, NULL, NULL);
  pb = sharded(), pb.vocab_total = 0, pb.vocab_offset = 0;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "shards = 8", "vocab_total");
  pb = sharded(), pb.vocab_total = 0, pb.shards = 1;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "vocab_offset = 875", "vocab_total = 0");
  /* sparse ids are global: K may exceed the shard's vocab, not the whole vocabulary */
  pb = sharded(), pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 200;
  bad += !expect(&pb, KLJIT_SUCCESS, NULL, NULL);
  pb.topk = 1002, pb.vocab_total = 1001;
  bad += !expect(&pb, KLJIT_ERR_INVALID_ARGUMENT, "topk = 1002", NULL);
  /* the default problem is unsharded */
  kljit_problem d = KLJIT_PROBLEM_INIT;
  bad += !(d.vocab_total == 0 && d.vocab_offset == 0 && d.shards == 1);
  d.hidden = 8, d.vocab = 100;
  bad += !expect(&d, KLJIT_SUCCESS, NULL, NULL);
  return bad ? TH_FAIL : TH_PASS;
}

static int nccl_loader_reports_a_missing_library(void) {
  nccl_table t;
  memset(&t, 0xab, sizeof t);
  TH_STATUS(nccl_load_from("libkljit-test-no-such-nccl.so.2", &t), KLJIT_ERR_UNSUPPORTED);
  const char *e = kljit_last_error();
  printf("%s\n", e);
  TH_CHECK(strstr(e, "libkljit-test-no-such-nccl.so.2") && strstr(e, "NCCL is not available"));
  TH_CHECK(t.AllGather == NULL && t.AllReduce == NULL);
  /* the real loader: either NCCL is installed, or the same clear report naming libnccl.so.2 */
  const nccl_table *n = NULL;
  const kljit_status st = nccl_load(&n);
  printf("nccl_load: %s %s\n", kljit_status_string(st), st ? kljit_last_error() : "");
  TH_CHECK(st == KLJIT_SUCCESS ||
           (st == KLJIT_ERR_UNSUPPORTED && strstr(kljit_last_error(), "libnccl.so.2")));
  TH_CHECK(st != KLJIT_SUCCESS || (n && n->AllGather && n->AllReduce && n->CommCount));
  return TH_PASS;
}

static int new_entry_points_reject_null_arguments(void) {
  kljit_args a = KLJIT_ARGS_INIT;
  float *stats = (float *)(uintptr_t)256; /* never dereferenced: the NULL checks come first */
  size_t bytes = 7;
  TH_STATUS(kljit_plan_shard_stats_size(NULL, 10, &bytes), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "plan is NULL") && bytes == 7);
  TH_STATUS(kljit_shard_stats(NULL, NULL, &a, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_stats: plan is NULL"));
  TH_STATUS(kljit_shard_finish(NULL, NULL, &a, stats, 2), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_finish: plan is NULL"));
  TH_STATUS(kljit_fused_nccl(NULL, NULL, &a, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_fused_nccl: plan is NULL"));
  TH_STATUS(kljit_shard_sums(NULL, NULL, &a, stats, 2, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_sums: plan is NULL"));
  int rounds = 7;
  TH_STATUS(kljit_plan_shard_rounds(NULL, &rounds), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "plan is NULL") && rounds == 7);
  /* a plan with no context behind it: only the checks before any GPU work may touch it */
  kljit_plan *p = calloc(1, sizeof *p);
  TH_CHECK(p != NULL);
  p->pb = sharded();
  TH_STATUS(kljit_plan_shard_stats_size(p, 10, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "bytes is NULL"));
  TH_STATUS(kljit_plan_shard_stats_size(p, 0, &bytes), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "rows = 0"));
  /* the records' size is the plan's: its modules' declaration */
  TH_OK(layout_of_problem(&p->pb, NULL, &p->layout));
  TH_OK(kljit_plan_shard_stats_size(p, 10, &bytes));
  TH_CHECK(p->layout.part > 0 && bytes == 10 * (size_t)p->layout.part * sizeof(float));
  TH_STATUS(kljit_shard_stats(p, NULL, NULL, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_stats: args is NULL"));
  TH_STATUS(kljit_shard_stats(p, NULL, &a, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_stats: stats is NULL"));
  TH_STATUS(kljit_shard_finish(p, NULL, NULL, stats, 8), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_finish: args is NULL"));
  TH_STATUS(kljit_shard_finish(p, NULL, &a, NULL, 8), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_finish: all is NULL"));
  TH_STATUS(kljit_shard_finish(p, NULL, &a, stats, 3), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "shards = 3") && strstr(kljit_last_error(), "(8)"));
  TH_STATUS(kljit_shard_sums(p, NULL, NULL, stats, 8, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_sums: args is NULL"));
  TH_STATUS(kljit_shard_sums(p, NULL, &a, NULL, 8, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_sums: all is NULL"));
  TH_STATUS(kljit_shard_sums(p, NULL, &a, stats, 8, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_shard_sums: stats is NULL"));
  TH_STATUS(kljit_shard_sums(p, NULL, &a, stats, 3, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "shards = 3") && strstr(kljit_last_error(), "(8)"));
  TH_STATUS(kljit_plan_shard_rounds(p, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "rounds is NULL"));
  TH_OK(kljit_plan_shard_rounds(p, &rounds)); /* the forward KL: one exchange */
  TH_CHECK(rounds == 1);
  p->rec.geom.rows.div = "jsd";
  TH_OK(kljit_plan_shard_rounds(p, &rounds));
  TH_CHECK(rounds == 2);
  TH_STATUS(kljit_fused_nccl(p, NULL, NULL, stats), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_fused_nccl: args is NULL"));
  TH_STATUS(kljit_fused_nccl(p, NULL, &a, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_fused_nccl: nccl_comm is NULL"));
  free(p);
  return TH_PASS;
}

/* The workspace of a sharded fused call holds the NCCL path's records: this rank's and the
 * gathered [shards][N], records of the size the rows module declares; sharded plans never take
 * the cluster row kernels (a stored cluster tuning gives way to the two-pass heuristics). */
static int workspace_holds_the_records_and_no_cluster_variant(void) {
  kljit_problem pb = sharded();
  kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  o.row_kernel = KLJIT_ROW_KERNEL_CLUSTER;
  const prob_tuning t = prob_estimate(&pb, 90, &o);
  TH_CHECK(t.cluster == 0);
  recipe r;
  TH_OK(recipe_make(&pb, &t, &o, 90, 132, &r));
  prob_geometry g = r.geom;
  const int64_t rows = 1000;
  kiface_layout lay;
  TH_OK(layout_of_problem(&pb, &t, &lay));
  TH_CHECK(lay.part > 0);
  const size_t rec = (size_t)lay.part * sizeof(float);
  const prob_workspace w8 = prob_workspace_layout(&pb, &g, &lay, KLJIT_MODE_FUSED, rows);
  TH_CHECK(w8.stats % 256 == 0 && w8.lt >= w8.stats + (size_t)9 * rows * rec);
  /* the helpers divide MEAN by the global V, the sparse rows know their ids' range */
  TH_CHECK(g.rows.vtot == 1001 && g.rows.offset == 875 && g.helpers.vtot == 1001);

  TH_CHECK(prob_workspace_layout(&pb, &g, &lay, KLJIT_MODE_FORWARD, rows).stats ==
           prob_workspace_layout(&pb, &g, &lay, KLJIT_MODE_FORWARD, rows).lt);
  kljit_problem one = pb;
  one.vocab_total = 0, one.vocab_offset = 0, one.shards = 1;
  TH_OK(recipe_make(&one, &t, &o, 90, 132, &r));
  const prob_workspace w1 = prob_workspace_layout(&one, &r.geom, &lay, KLJIT_MODE_FUSED, rows);
  TH_CHECK(w1.stats == w1.lt);
  prob_tuning c = t;
  c.cluster = c.split = 1, c.nv = 4;
  TH_OK(recipe_make(&pb, &c, &o, 90, 132, &r));
  TH_CHECK(r.replaced && r.geom.tune.cluster == 0 && r.geom.rows.cluster == 0);
  TH_CHECK(memcmp(&r.geom.tune, &t, sizeof t) == 0);
  return TH_PASS;
}

/* ---- the context stack across the checked-mode agreement (a fake driver and NCCL) -------- */

static int ctx_depth, memsets, allreduces;
static nccl_result allreduce_result;
static CUresult fake_push(CUcontext c) {
  (void)c;
  ctx_depth++;
  return CUDA_SUCCESS;
}
static CUresult fake_pop(CUcontext *c) {
  if (c) *c = NULL;
  ctx_depth--;
  return CUDA_SUCCESS;
}
static CUresult fake_memset(CUdeviceptr p, unsigned v, size_t n, CUstream s) {
  (void)p, (void)v, (void)n, (void)s;
  memsets++;
  return CUDA_SUCCESS;
}
static CUresult fake_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)src, (void)s;
  memset(dst, 0, n);
  return CUDA_SUCCESS;
}
static CUresult fake_sync(CUstream s) {
  (void)s;
  return CUDA_SUCCESS;
}
static nccl_result fake_allreduce(const void *send, void *recv, size_t count, int datatype,
                                  int op, nccl_comm comm, nccl_stream stream) {
  (void)send, (void)recv, (void)count, (void)datatype, (void)op, (void)comm, (void)stream;
  allreduces++;
  return allreduce_result;
}
static const char *fake_error_string(nccl_result r) { return r ? "fake failure" : "success"; }

/* Every checked kljit_fused_nccl call agrees on the ranks' verdicts inside the plan's context;
 * each one used to leave one more context pushed on the calling thread (nccl.c's ctx_enter had
 * no ctx_leave). The stack must be as deep after each call as before, on success and when the
 * collective fails (then with KLJIT_ERR_NCCL, not a CUDA status). */
static int checked_agreement_leaves_the_context_stack_as_it_found_it(void) {
  drv_table d;
  memset(&d, 0, sizeof d);
  d.cuCtxPushCurrent = fake_push, d.cuCtxPopCurrent = fake_pop;
  d.cuMemsetD32Async = fake_memset, d.cuMemcpyDtoHAsync = fake_dtoh;
  d.cuStreamSynchronize = fake_sync;
  kljit_context ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.drv = &d;
  kljit_plan plan;
  memset(&plan, 0, sizeof plan);
  plan.ctx = &ctx;
  nccl_table n;
  memset(&n, 0, sizeof n);
  n.AllReduce = fake_allreduce, n.GetErrorString = fake_error_string;
  int scratch = 0, any = -1;
  for (int call = 0; call < 3; call++) {
    TH_OK(nccl_agree_on_check(&n, &plan, &n, NULL, &scratch, 0, &any));
    TH_CHECK(any == 0);
    TH_CHECK(ctx_depth == 0);
  }
  TH_CHECK(allreduces == 3 && memsets == 3);
  allreduce_result = 5;
  TH_STATUS(nccl_agree_on_check(&n, &plan, &n, NULL, &scratch, 1, &any), KLJIT_ERR_NCCL);
  TH_CHECK(strstr(kljit_last_error(), "fake failure") != NULL);
  TH_CHECK(ctx_depth == 0);
  return TH_PASS;
}

static const th_case cases[] = {
    {"checked_agreement_leaves_the_context_stack_as_it_found_it",
     checked_agreement_leaves_the_context_stack_as_it_found_it},
    {"workspace_holds_the_records_and_no_cluster_variant",
     workspace_holds_the_records_and_no_cluster_variant},
    {"shard_fields_are_validated_naming_field_and_value",
     shard_fields_are_validated_naming_field_and_value},
    {"nccl_loader_reports_a_missing_library", nccl_loader_reports_a_missing_library},
    {"new_entry_points_reject_null_arguments", new_entry_points_reject_null_arguments},
};
TH_MAIN(cases)
