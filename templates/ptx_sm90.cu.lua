%-- SPDX-License-Identifier: Apache-2.0
%-- ptx_sm90.cu.lua: the Hopper (sm_90a) instructions of the generated GEMMs, as small inline-PTX
%-- helpers. Each cites the section of the PTX ISA ("Parallel Thread Execution ISA", version
%-- 8.x) that defines it, by title: section numbers move between versions. The GEMM template
%-- (gemm_sm90.cu.lua) is written in terms of these only.
%--
%-- Parameters: none of its own; reads the including GEMM's BN, IN and LAYOUT where set (below:
%-- only the wgmma form the kernel issues), and TILES and CLUSTER (the remote store and arrival
%-- a cluster's tile ids need). Needs the common prelude (u32, u64) before it;
%-- compiles for sm_90a only (wgmma and setmaxnreg are architecture-specific features).
%--
%-- What a GEMM needs from the hardware, in pipeline order:
%--   tensor maps      the TMA descriptor, 128 opaque bytes the host encodes with
%--                    cuTensorMapEncodeTiled and passes as a __grid_constant__ parameter;
%--   mbarriers        the producer/consumer handshake of each shared-memory stage;
%--   TMA loads        one thread copies a whole tile global -> shared, completing on an mbarrier;
%--   wgmma            a warpgroup multiplies tiles straight from shared memory into registers;
%--   setmaxnreg       the copying warpgroup gives its registers to the multiplying ones.

/* CUtensorMap (cuda.h: 64-byte aligned, 128 bytes), without the header. */
struct __align__(64) kl_tmap { u64 opaque[16]; };

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return (u32)__cvta_generic_to_shared(p);
}

/* ---- mbarrier: PTX ISA, "Parallel Synchronization and Communication Instructions:
 * mbarrier" ---- */

/* PTX ISA "mbarrier.init": `count` arrivals complete a phase. */
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

/* PTX ISA "membar/fence" (fence.mbarrier_init): makes initialized barriers visible to the
 * async proxy (the TMA unit) and to the other threads of the cluster (here: of the CTA). */
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* PTX ISA "mbarrier.expect_tx" and "mbarrier.arrive" (tx-count): one arrival that also
 * announces `bytes` of asynchronous copies which must land before the phase completes. */
__device__ __forceinline__ void mbar_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

/* PTX ISA "mbarrier.arrive": one arrival, release semantics at CTA scope. */
__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/* PTX ISA "mbarrier.test_wait/mbarrier.try_wait" (.parity): spins until the phase of parity
 * `parity` has completed. A fresh barrier counts its (never run) previous phase, parity 1,
 * as complete, so producers wait on empty slots with the flipped parity from the start.
 * The default semantics (acquire, CTA scope) also serve a barrier that the peer CTA of a cluster
 * arrives on: what the waiter does next is a TMA copy, ordered after the wait by the barrier
 * itself. An .acquire.cluster wait compiles to an L1 invalidation (CCTL.IVALL) after every wait
 * (cuobjdump), which the cluster-2 producer paid once per k-block. */
%-- mbar_wait and, where TILES dynamic runs in clusters of 2, mbar_wait_cluster: the same spin
%-- at cluster scope
%local CLUSTER_TILES = P.TILES == "dynamic" and P.CLUSTER == 2 -- ids posted across a cluster
%local WAITS = { { "mbar_wait", "" } }
%if CLUSTER_TILES then WAITS[2] = { "mbar_wait_cluster", ".acquire.cluster" } end
%for i, w in ipairs(WAITS) do
%  if i == 2 then

/* mbar_wait at cluster scope (.acquire.cluster): the tile id that the peer's st.async wrote is
 * a value read by these threads, not a TMA tile, so its wait acquires at the scope of that
 * write. Its L1 invalidation (see mbar_wait) is paid once per tile, not per k-block. */
%  end
__device__ __forceinline__ void {{ w[1] }}(u64* bar, u32 parity) {
  u32 done = 0;
  while (!done) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity{{ w[2] }}.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  }
}
%end

/* PTX ISA "mbarrier.arrive" (on a shared::cluster address) and "mapa": one arrival on the
 * barrier at the same offset in the shared memory of cluster CTA `rank`. Default semantics
 * (release, CTA scope): the arrival frees a stage whose reads (wgmma) have completed, and the
 * peer only overwrites it by TMA once the barrier's phase completes. .release.cluster compiled
 * to MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before each arrival (cuobjdump): two full memory
 * fences per consumer warp per k-block, the cluster-2 variant's 0.52x (run of 2026-12-03). */
__device__ __forceinline__ void mbar_arrive_cluster(u64* bar, u32 rank) {
  asm volatile("{\n\t.reg .b32 remote;\n\t"
               "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}"
               ::"r"(smem_addr(bar)), "r"(rank) : "memory");
}

%if CLUSTER_TILES then
/* PTX ISA "mbarrier.arrive" (.expect_tx, on a shared::cluster address): one arrival on the
 * barrier at the same offset in cluster CTA `rank`'s shared memory that also announces `bytes`
 * of asynchronous writes there (st_async_cluster's), as a TMA multicast's producer does. */
__device__ __forceinline__ void mbar_arrive_expect_tx_cluster(u64* bar, u32 rank, u32 bytes) {
  asm volatile("{\n\t.reg .b32 remote;\n\t"
               "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
               "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [remote], %2;\n\t}"
               ::"r"(smem_addr(bar)), "r"(rank), "r"(bytes) : "memory");
}

/* PTX ISA "st.async": a 32-bit store into cluster CTA `rank`'s shared memory at the offset of
 * `p`, whose completion counts its 4 bytes on the barrier at the offset of `bar` there: a
 * waiter on that barrier sees the value once the phase completes, as it sees a TMA's tile. */
__device__ __forceinline__ void st_async_cluster(const void* p, u32 v, u64* bar, u32 rank) {
  asm volatile("{\n\t.reg .b32 rp, rb;\n\t"
               "mapa.shared::cluster.u32 rp, %0, %2;\n\t"
               "mapa.shared::cluster.u32 rb, %1, %2;\n\t"
               "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [rp], %3, [rb];\n\t}"
               ::"r"(smem_addr(p)), "r"(smem_addr(bar)), "r"(rank), "r"(v) : "memory");
}

%end
/* ---- clusters: PTX ISA "Special Registers: %cluster_ctarank" and "barrier.cluster" ---- */

__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

/* Every thread of every CTA of the cluster: barriers initialized before any remote arrival or
 * multicast, and no CTA leaving while a peer may still write into its shared memory. */
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* ---- TMA: PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk.tensor"
 * ---- */

/* A 2-D tile at element coordinates (c0 innermost, c1) of the tensor map into shared memory at
 * dst; completion is counted in bytes on `bar` (complete_tx). Coordinates past the tensor's
 * bounds read as zeros, which is what makes every tail of a GEMM safe to load. */
__device__ __forceinline__ void tma_load_2d(void* dst, const kl_tmap* map, u64* bar, int c0,
                                            int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4}], [%2];"
               ::"r"(smem_addr(dst)), "l"((u64)map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
               : "memory");
}

/* The same with .multicast::cluster: the tile lands at dst in every CTA of `mask` (bit r =
 * cluster rank r), each completing bytes on its own barrier at bar's offset. */
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const kl_tmap* map, u64* bar,
                                                      int c0, int c1, unsigned short mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;"
               ::"r"(smem_addr(dst)), "l"((u64)map), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
               "h"(mask) : "memory");
}

/* The same two loads with an L2 cache policy (.L2::cache_hint, the policy's 64-bit operand
 * last: PTX ISA "cp.async.bulk.tensor"), e.g. evict_last for the operand every tile re-reads
 * and evict_first for the one read once a wave (a gemm's L2 parameter). */
__device__ __forceinline__ void tma_load_2d_hint(void* dst, const kl_tmap* map, u64* bar, int c0,
                                                 int c1, u64 policy) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               ".L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5;"
               ::"r"(smem_addr(dst)), "l"((u64)map), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
               "l"(policy) : "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast_hint(void* dst, const kl_tmap* map, u64* bar,
                                                           int c0, int c1, unsigned short mask,
                                                           u64 policy) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               ".multicast::cluster.L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5, %6;"
               ::"r"(smem_addr(dst)), "l"((u64)map), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
               "h"(mask), "l"(policy) : "memory");
}

/* PTX ISA "createpolicy" (createpolicy.fractional, fraction 1.0): an L2 cache policy for the
 * loads that carry it, every line evict_last (kept ahead of others) or evict_first. */
__device__ __forceinline__ u64 l2_evict_last() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ u64 l2_evict_first() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

/* ---- streaming global accesses: PTX ISA "Data Movement and Conversion Instructions: ld, st"
 * (cache operators, .cs: "cache streaming, likely to be accessed once": allocated with
 * evict-first priority, so a written tile of C does not push the operands out of L2) ---- */

__device__ __forceinline__ uint4 ld_cs_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ void st_cs_v4(void* p, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
               ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

/* PTX ISA "prefetch, prefetchu" (prefetch.tensormap): the descriptor into the cache before
 * first use. */
__device__ __forceinline__ void tma_prefetch_map(const kl_tmap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"((u64)map) : "memory");
}

/* ---- setmaxnreg: PTX ISA, "Miscellaneous Instructions: setmaxnreg" ---- */

template <u32 N> __device__ __forceinline__ void regs_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <u32 N> __device__ __forceinline__ void regs_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

/* ---- wgmma: PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
 * Instructions" ---- */

/* The shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format" of the wgmma
 * section) of a K-major tile written by TMA with the 128-byte swizzle: rows of 64 16-bit
 * elements (128 bytes), groups of 8 rows 1024 bytes apart (stride byte offset), the leading
 * byte offset unused for swizzled K-major layouts (1 by convention), swizzle mode 1 (128B) in
 * bits 62-63. The tile must start on a 1024-byte boundary; stepping K by 16 elements inside
 * the swizzle atom adds 32 bytes to the start address, as the hardware applies the swizzle to
 * the final address. */
__device__ __forceinline__ u64 wgmma_desc_k128(u32 saddr) {
  return (u64)((saddr & 0x3FFFF) >> 4) | (u64)1 << 16 | (u64)(1024 >> 4) << 32 | (u64)1 << 62;
}

/* The same descriptor for an MN-major tile (the B operand of C = A B with B[K, N] row-major):
 * TMA boxes of 64 MN-elements (128 bytes, swizzled) x 64 K-rows, one box per 64 columns,
 * `chunk` bytes apart. In the canonical MN-major 128B layout ((T, 8, m), (8, k)) : ((1, T, LBO),
 * (8 T, SBO)) of that section, the leading byte offset is the stride between 64-element MN
 * chunks (the next box) and the stride byte offset the stride between groups of 8 K-rows
 * (1024 bytes); stepping K by 16 rows adds 2048 bytes to the start address. */
__device__ __forceinline__ u64 wgmma_desc_mn128(u32 saddr, u32 chunk) {
  return (u64)((saddr & 0x3FFFF) >> 4) | (u64)((chunk >> 4) & 0x3FFF) << 16 |
         (u64)(1024 >> 4) << 32 | (u64)1 << 62;
}

/* PTX ISA "wgmma.fence": orders register accesses of the accumulators before wgmma. */
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
/* PTX ISA "wgmma.commit_group": closes the group of wgmma issued so far. */
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
/* PTX ISA "wgmma.wait_group": waits until at most N groups are pending. */
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* PTX ISA "membar/fence" (fence.proxy.async): generic-proxy writes to shared memory become
 * visible to the async proxy (TMA, wgmma) of the same thread. */
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* PTX ISA "cvt" (cvt.rn.bf16x2.f32, cvt.rn.f16x2.f32): two floats -> one 32-bit word of two 16-bit
 * values, lo in the low half. */
__device__ __forceinline__ u32 pack2_bf16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ u32 pack2_f16(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* PTX ISA "wgmma.mma_async" (m64nNk16), fp32 accumulators, A and B from shared memory, each
 * K-major (TA, TB = 0) or MN-major (1: the instruction's imm-trans-a, imm-trans-b; 16-bit
 * types only). d holds the warpgroup's 64 x N fragment (N/2 floats per thread, the
 * layout of PTX ISA "Register Fragments" of wgmma: thread t of warp w holds rows 16 w + t/4 and
 * 16 w + t/4 + 8, columns 8 i + 2 (t % 4) + {0, 1}). scale_d = 0 overwrites d, 1 adds. */
%-- the accumulators' nd "+f" operands of a wgmma asm statement, 8 a line
%local function acc_operands(nd)
%  local outs, lines = {}, {}
%  for i = 0, nd - 1 do outs[#outs + 1] = '"+f"(d[' .. i .. '])' end
%  for i = 1, #outs, 8 do
%    local sep, last = i == 1 and ": " or "  ", i + 7 < #outs and "," or ""
%    lines[#lines + 1] = "               " .. sep
%      .. table.concat(outs, ", ", i, math.min(i + 7, #outs)) .. last
%  end
%  return table.concat(lines, "\n")
%end
%local function wgmma(n, ab, ty, ta, tb)
%  local regs = {}
%  for i = 0, n // 2 - 1 do regs[#regs + 1] = "%" .. i end
%  local nd = n // 2
template <>
__device__ __forceinline__ void wgmma_ss<{{ n }}, {{ ab }}, {{ ta }}, {{ tb }}>(float* d, u64 da,
                                                                             u64 db, int scale_d) {
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %{{ nd + 2 }}, 0;\n\t"
               "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ ty }}.{{ ty }} "
%  -- the rendered source has long lines here: one operand list per instruction
               "{{ "{" }}{{ table.concat(regs, ", ") }}}, %{{ nd }}, %{{ nd + 1 }}, p, 1, 1, {{ ta }}, {{ tb }};"
               "\n\t}"
{{ acc_operands(nd) }}
               : "l"(da), "l"(db), "r"(scale_d));
}
%end
template <int N, int AB, int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float* d, u64 da, u64 db, int scale_d);
%-- (TA, TB) of each layout; the including GEMM's BN, IN and LAYOUT, when set, select the one
%-- form it issues (NVRTC then parses one 100-operand asm statement, not 24)
%local layouts = { nt = { 0, 0 }, nn = { 0, 1 }, tn = { 1, 1 } }
%local sizes = P.BN and { P.BN } or { 64, 128, 192, 256 }
%for _, n in ipairs(sizes) do
%  for _, l in ipairs({ "nt", "nn", "tn" }) do
%    if not P.LAYOUT or P.LAYOUT == l then
%      if P.IN ~= "f16" then wgmma(n, 0, "bf16", layouts[l][1], layouts[l][2]) end
%      if P.IN ~= "bf16" then wgmma(n, 1, "f16", layouts[l][1], layouts[l][2]) end
%    end
%  end
%end
%-- GRS (gemm_sm90.cu.lua, GOP in registers): A from registers, and ldmatrix to fill them
%if P.GRS then

/* PTX ISA "wgmma.mma_async" with A from registers (m64nNk16): a the warp's 16 x 16 fragment of
 * A, four 32-bit registers of two 16-bit elements as "Register Fragments" lays them out (thread
 * t of warp w: a[0] row 16 w + t/4, columns 2 (t % 4) + {0, 1}; a[1] that row + 8; a[2], a[3]
 * those rows at columns + 8: mma.m16n8k16's A), B from shared memory (TB as wgmma_ss's). The
 * registers are read asynchronously: they must not change before the group's wgmma_wait. */
%  local function wgmma_r(n, ab, ty, tb)
%    local regs = {}
%    for i = 0, n // 2 - 1 do regs[#regs + 1] = "%" .. i end
%    local nd = n // 2
template <>
__device__ __forceinline__ void wgmma_rs<{{ n }}, {{ ab }}, {{ tb }}>(float* d, const u32 (&a)[4],
                                                              u64 db, int scale_d) {
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %{{ nd + 5 }}, 0;\n\t"
               "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ ty }}.{{ ty }} "
%    local a_ops = string.format("{%%%d, %%%d, %%%d, %%%d}", nd, nd + 1, nd + 2, nd + 3)
               "{{ "{" }}{{ table.concat(regs, ", ") }}}, {{ a_ops }}, %{{ nd + 4 }}, p, 1, 1, {{ tb }};"
               "\n\t}"
{{ acc_operands(nd) }}
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
%  end
template <int N, int AB, int TB>
__device__ __forceinline__ void wgmma_rs(float* d, const u32 (&a)[4], u64 db, int scale_d);
%  wgmma_r(P.BN, P.IN == "f16" and 1 or 0, P.IN, 1)

/* PTX ISA "ldmatrix" (.m8n8.x4.b16, and .trans): four 8 x 8 matrices of 16-bit elements from
 * shared memory, lanes 8 j .. 8 j + 7 giving the addresses of matrix j's 8 rows (16 bytes each);
 * thread t receives, in r[j], matrix j's row t / 4, elements 2 (t % 4) + {0, 1} (.trans: its
 * column t / 4, rows 2 (t % 4) + {0, 1}). */
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], u32 saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr) : "memory");
}
%end
