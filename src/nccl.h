/* SPDX-License-Identifier: Apache-2.0 */
/* nccl.h — NCCL loaded at run time (dlopen("libnccl.so.2"), like the CUDA driver), for
 * kljit_fused_nccl. No NCCL header is needed to build: the few types and entry points below are
 * declared from NCCL's public, stable C ABI (nccl.h of NCCL 2.x).
 */
#ifndef KLJIT_NCCL_H
#define KLJIT_NCCL_H

#include <stddef.h>

#include "util.h"

typedef int nccl_result;   /* ncclResult_t: ncclSuccess = 0 */
typedef void *nccl_comm;   /* ncclComm_t (an opaque pointer) */
typedef void *nccl_stream; /* cudaStream_t */

/* ncclDataType_t and ncclRedOp_t values of the NCCL 2.x ABI */
enum { NCCL_INT32 = 2, NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9 };
enum { NCCL_SUM = 0, NCCL_MAX = 2 };

typedef struct nccl_table {
  nccl_result (*AllGather)(const void *send, void *recv, size_t sendcount, int datatype,
                           nccl_comm comm, nccl_stream stream);
  nccl_result (*AllReduce)(const void *send, void *recv, size_t count, int datatype, int op,
                           nccl_comm comm, nccl_stream stream);
  nccl_result (*CommCount)(const nccl_comm comm, int *count);
  const char *(*GetErrorString)(nccl_result result);
} nccl_table;

/* Loads `library` (dlopen) and its entry points into *out. KLJIT_ERR_UNSUPPORTED with a
 * sentence naming the library when it or a symbol is missing. Loads afresh on every call. */
kljit_status nccl_load_from(const char *library, nccl_table *out);

/* The process-wide table from libnccl.so.2, loaded once (thread-safe). */
kljit_status nccl_load(const nccl_table **out);

/* Checked mode of kljit_fused_nccl: the ranks' verdicts (`bad`: this rank's inputs failed),
 * all-reduced (max) through one int32 of device `scratch` before any collective that carries
 * data, so that a rank whose inputs failed does not leave the others waiting in ncclAllGather.
 * *any_bad: some rank's inputs failed. Enters and leaves the plan's context (the context stack
 * is as it was on return, whatever fails) and syncs the stream (checked mode already does). */
kljit_status nccl_agree_on_check(const nccl_table *n, const kljit_plan *plan, void *comm,
                                 void *stream, void *scratch, int bad, int *any_bad);

#endif
