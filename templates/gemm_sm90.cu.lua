%-- SPDX-License-Identifier: Apache-2.0
%-- gemm_sm90.cu.lua: one GEMM of the chunk loop on sm_90a, TMA + wgmma, persistent.
%--
%--   C[M, N] (+)= alpha A[M, K] B[N, K]^T        (LAYOUT nt: both operands K-major)
%--   C[M, N] (+)= alpha A[M, K] B[K, N]          (LAYOUT nn: B row-major, MN-major for wgmma)
%--   C[M, N] (+)= alpha A[K, M]^T B[K, N]        (LAYOUT tn: both row-major, both MN-major)
%--
%-- nt is the logits GEMM of the chunk loop (A = the chunk's X rows, B = W, C = Z with row
%-- stride ldc >= N); nn is the shape of dX = G W (A = G, B = W). fp32 accumulation, C in fp32
%-- or the input dtype; tn is dW = G^T X (A = G[rows, V], B = X[rows, H], K = the chunk's rows),
%-- with BETA to accumulate over chunks.
%--
%-- Parameters (validated below):
%--   LAYOUT    nt | nn | tn
%--   IN        bf16 | f16 (A and B)
%--   OUT       f32 | bf16 | f16 (C)
%--   BETA      false: C = alpha AB; true: C = alpha AB + C (read, added in fp32, written)
%--   BN        64 | 128 | 192 | 256: tile columns (the wgmma N)
%--   CONSUMERS 1 | 2 | 3: the tile has 64 CONSUMERS rows (BM); with SCHEDULE coop, one
%--             multiplying warpgroup per 64 rows. 3 (LAYOUT nt, SCHEDULE coop, no GOP): 192-row
%--             tiles, 512 threads, the consumers at 152 registers (the producer's 40 leave them
%--             no more): cuBLASLt's tile for the logits GEMM's chunk shape is 192 x 192
%--             (bench/RESULTS.md run 112); a third of the L2 reads of A and B a FLOP below
%--             128 x 192's, and three warpgroups to issue where two left the schedulers idle
%--   STAGES    2..8: shared-memory ring depth, (BM + BN) x 64 x 2 bytes per stage, <= 227 KB
%--   RASTER    m | n | g: the order of the persistent schedule's tiles. m: the BM-row tiles
%--             of one BN-column panel are consecutive, so concurrently running CTAs share the
%--             panel of B (W, the large operand); n: the reverse; g: groups of 16 row tiles,
%--             column panels in order inside a group (a wave of CTAs then touches 16 row tiles
%--             and about grid/16 panels: both operands' share of a wave stays in L2 when A
%--             alone would not, e.g. 8192 chunk rows = 64 MiB of X).
%--   CLUSTER   1 | 2: CTAs per cluster. With 2, the cluster's CTAs take row tiles 2 g and 2 g + 1
%--             of one column panel; each loads its own A tile and half of the shared B tile,
%--             multicast to both (half the L2 reads of B, the large operand); a stage is freed
%--             when the consumers of both CTAs have released it.
%--   TILES     static (or absent) | dynamic: how the persistent CTAs share the tiles. static:
%--             CTA b takes tiles b, b + grid, b + 2 grid, ...; under uneven tiles (epilogues
%--             that wait on the teacher, the last column panel) the CTAs drift apart in that
%--             order, the tiles in flight spread over more column panels than L2 holds, and
%--             the panels of B are read from DRAM several times (bench/RESULTS.md, run 95).
%--             dynamic: CTA b's first tile is b, each later one the next of a counter in global
%--             memory (`sched`, two words, zero at launch), claimed by the producer one tile
%--             ahead and passed to the consumers through a 4-deep ring in shared memory; the
%--             tiles in flight stay the grid's consecutive ones. The last CTA to finish puts
%--             the counter back to zero, so one pair serves the launches that follow it on the
%--             stream (the caller zeroes it before the first). CLUSTER 2: the cluster's
%--             tiles, claimed by rank 0, which posts each id to both CTAs (its peer's by
%--             st.async, counted on the peer's full barrier as a TMA's bytes are); rank 1's
%--             producer takes the ids as its consumers do, and every reader frees a slot on
%--             rank 0's empty barrier.
%--   SCHEDULE  coop (or absent) | pingpong. coop: the CONSUMERS warpgroups share every tile, one
%--             64-row slice each, and all of them stop multiplying for the epilogue. pingpong: two
%--             warpgroups take alternate tiles of the CTA's schedule, each multiplying all BM rows
%--             of its own tile (CONSUMERS x BN <= 256 accumulators a thread), so that one stores
%--             its tile while the other multiplies the next: the epilogue leaves the tensor
%--             cores' critical path. The ring is shared; the tiles' k-blocks enter it in order,
%--             and a turn barrier passes the ring from one warpgroup to the other once it has
%--             seen every full stage of its tile (a warpgroup waiting a whole tile ahead would
%--             read a stage's parity one phase early).
%--   EPILOGUE  direct (or absent) | staged. direct: each thread stores its fragment's pairs
%--             straight from registers (BETA: a load, an add and a store per pair, each pair's
%--             load waiting on the stores before it). staged: each consumer warp writes its
%--             16 x 64 block of the tile into 4 KB of shared memory of its own (fp32, in TMA's
%--             128-byte swizzle layout, so a TMA store or reduce of the block stays possible),
%--             then reads it back as row segments: 16-byte global loads (BETA: C read once) and
%--             stores, a warp's instruction covering whole 128- or 256-byte runs of a row.
%--   ARRIVE    thread (or absent) | warp: who frees a consumed stage with CLUSTER 1, every
%--             consumer thread (an mbarrier arrival each: 128 per warpgroup and k-block) or one
%--             lane per warp after __syncwarp (4), as the cluster-2 path does already: the
%--             stage's reads are wgmma's, complete for the whole warpgroup at wait_group.
%--   STORE     default (or absent) | streaming: EPILOGUE staged's 16-byte runs of C written (and,
%--             BETA, read) with the .cs cache operator (evict-first in L2: C, written once, does
%--             not push the operands out).
%--   L2        absent | keep_a | keep_b: the TMA loads carry an L2 policy, evict_last for the
%--             operand named (the one every tile re-reads: X of the logits and of the dW GEMM)
%--             and evict_first for the other.
%--   KSLICE    absent (0) | k-blocks per slice: K summed in slices of KSLICE x 64, each slice's
%--             fp32 sum added into C (the first written unless BETA) and the accumulators
%--             restarted: the sum of a few slices rounds less than one fp32 accumulation over a
%--             long K (the dX GEMM over a long vocabulary: exec.c), in one launch. OUT f32.
%--   PROMOTE   absent | k-blocks per run: the wgmma accumulator restarts every PROMOTE k-blocks
%--             and its run's sum is added into a second fp32 accumulator with an ordinary
%--             (round-to-nearest) add. The tensor cores' own fp32 additions are reported to
%--             truncate: over K = 4096 they shrink every logit by ~4e-6 (relative), which moves
%--             the KL by 1e-5 at T 0.5 (bench/accumulation_precision.py; promotion every 256 of
%--             K: ~4e-7). Costs a second accumulator (MS x BN / 2 floats a thread, at most 64:
%--             the cooperative schedule with BN <= 128, or BN 64) and a drain of the wgmma
%--             pipeline every run. Not with KSLICE (which restarts d for its own slices).
%--   STATS     absent | probs | logprobs | logits | sparse: the logits GEMM (nt, OUT f32, no BETA, no
%--             KSLICE) also
%--             writes the dense rows' pass-1 statistics (templates/dense_rows.cu.lua, CLUSTER 0,
%--             any divergence, without softcap, CE or bias) of each (row, column tile) from its
%--             accumulators, so that the pass that re-reads the whole fp32 chunk for them
%--             (kl_dense_stats) is not launched: with s = (alpha acc) / T over the tile's columns
%--             below N, m = max s, d = sum exp(s - m), sp = sum p (logprobs: sum exp(log p), as
%--             pass 1 computes it) from the teacher's rows row0 + r, TLD apart, in dtype TDT; mt,
%--             dt the neutral (0, 1) pass 1 writes for these forms. Teacher logits (capped under
%--             TSOFTCAP): mt, dt their tile's (max, sum-exp) of t' = t / TT, sp 0, as pass 1's
%--             acc1_add makes them (merged online a lane, then by the butterfly's md_merge).
%--             One record (iface.DENSE_PART)
%--             per (row, tile) at part + (row tiles_n + tile) PART_FLOATS, merged by pass 2's
%--             block in a fixed order (dense rows' MERGE block; nrec = srow = tiles_n, srec = 1).
%--             C is still written (pass 2 reads it).
%--             part NULL (two-phase backward, which needs no statistics): nothing is computed.
%--             The tile's teacher rows are prefetched into L2 (evict_last) as its k-blocks start,
%--             so that the epilogue's loads do not wait on DRAM while the tensor cores idle.
%--             sparse: the sparse top-K teacher's records (templates/sparse_rows.cu.lua's pass 1,
%--             iface.SPARSE_PART): no teacher tile is read (no TDT, TLD). For the forward KL with
%--             TAIL none or renorm (no column of the support kept apart) the student's statistics
%--             alone: m, d_on = 0, d_off = d. With TOPK (the bucket tail, the divergences) the
%--             support's ids mark its columns and d_on, d_off are summed apart (OWN: its own
%--             (max, sum-exp) in mo, dno). Without E16 C is written whole, so pass 2 gathers the
%--             support's logits exactly; with E16 (the forward KL, tails none and renorm) the
%--             loss's cross term comes exactly from the support's values read here (VDT, VALUES).
%--   E16       absent | true (STATS): the tile goes out in fp16 at E + row lde + col instead of
%--             C (issue 27, step 2: half the bytes of fp32 C written and read, and no pass 1),
%--             as the tile-relative scores x = s - m <= 0. With part (fused and two-phase
%--             forward calls): m the row's max over the tile, as its record's, whose d is the
%--             sum of exp(x) of the rounded x; pass 2 (the dense rows' ETILE) takes s back as
%--             m + x. x in fp16 errs by at most 2^-11 |x| (nothing where q is large, a relative
%--             error of q where it is small) and has no floor (an exp(s - m) in fp16 reads 0 27
%--             nats down, which wrongs the loss wherever a teacher has mass there: a CPU model,
%--             bench/RESULTS.md). Without part (two-phase backward): m the row's saved lse from
%--             rowstat (its first float, rsf floats a row, row0 + r); no records. C is never
%--             written (the host passes E in every mode).
%--   BDT       (E16) f32 | bf16 | f16: the bias b[N], s = (alpha acc + b) / T (absent: none).
%--             The scores are made once per tile in the fragment (tile_scores), as the rows'
%--             load_cols makes them; without E16 the rows make them from C, so the statistics
%--             take no bias.
%--   SOFTCAP   (E16) the student's logit cap c > 0: s = c tanh((alpha acc + b) / c) / T, as the
%--             rows' load_cols caps z (absent: none). The rows' pass 2 takes G's factor
%--             1 - (s T / c)^2 from the s it takes back (m + x): on the CPU, dX's error from it
%--             is the fp32 s's to three digits (bench/RESULTS.md).
%--   HARD      (E16) true: the hard-label CE's records too, from the same scores: the tile's
%--             (max, sum-exp) of z' = s T (slots mh, dh, pass 1's) and z'_y where the row's label
%--             y (labels[row0 + r], int64 where labels_is64) is one of the tile's columns (slot
%--             S, 0 elsewhere: the rows sum it over the tiles), exact in fp32, which E's x is not.
%--             Label smoothing needs nothing more here: the rows' pass 2 sums z' from E (its
%--             roundings, to nearest, average out over V) and takes (1 - ls) z'_y from slot S.
%--             STATS sparse: the same slots of its record (not with label smoothing: the sparse
%--             rows' pass 2 of forward reads no column off the support, so its sum of z' would
%--             need a ninth slot).
%--   EXPE      (E16, STATS sparse; no HARD, no SOFTCAP) true: E holds E' = exp(x) in fp16 instead
%--             of x (issue 27, step 2: the G operand stage's input, GOP of the dX and dW GEMMs,
%--             G = f E' off the support with f = sp exp(m_tile - lse) a row and tile; the
%--             records' d the sum of the rounded E'). No row kernel reads E' as a score: the
%--             loss comes from the records (the support's cross term, SUPPORT), and the pass that
%--             makes the factors rewrites the support's columns (docs/architecture.md). E' has a
%--             floor (2^-24 of the tile's max) that G does not feel; the CE's and the cap's G
%--             need the score, so neither goes with it.
%--   MASS_WARPS  (STATS probs | logprobs | logits; no TILES dynamic) true: the teacher's part
%--             of each (row, tile)'s record, which pairs with nothing the tensor cores computed
%--             (slots sp, mt, dt: the mass with the neutral (0, 1), or teacher logits' (max,
%--             sum-exp) with sp 0), is made by the producer warpgroup's three idle warps
%--             (within its 40 registers), tile by tile in the CTA's order, instead of by the
%--             consumers in their epilogue: the consumers read no teacher (no prefetch, no L2
%--             round trips while the tensor cores wait on the epilogue) and write only m, d (and
%--             HARD's mh, dh, S) of each record. A warp takes rows w, w + 3, ... of the tile, a
%--             lane 16-byte runs of the row (4 rows in flight), folded lane by lane and then by
%--             a butterfly in a fixed order.
%--   TDT       f32 | bf16 | f16 (STATS): the teacher's dtype; TLD its row stride (elements)
%--   TT        (STATS logits) the teacher's temperature, > 0 (absent: T's, compiled in or, under
%--             TMODE runtime, the header's)
%--   TSOFTCAP  (STATS logits) the teacher's logit cap c > 0: t <- c tanh(t / c) before 1 / TT,
%--             as the rows' load_cols caps it (absent: none)
%--   TCHUNK    (STATS logits) true: the teacher's rows are the chunk's (row r of C is teacher row
%--             r, not row0 + r): the online teacher's fp32 logits, which the teacher GEMM wrote
%--             for this chunk before this GEMM runs (exec.c), TLD the chunk buffer's stride
%--   TBDT      (TCHUNK) f32 | bf16 | f16: the online teacher's bias tbias[N], added to its
%--             logits before the cap and 1 / TT, as the rows' load_cols adds it (absent: none)
%--   TOPK      (STATS sparse) 1..1024: the support's size, its ids (IDT i32 | i64: ids[N, TOPK],
%--             row row0 + r) read in the epilogue, which marks each warp's rows' support columns
%--             of the tile (support_map): without E16 for the bucket tail and the divergences,
%--             whose records keep the sum-exp on the support (d_on) and off it (d_off) apart, as
%--             pass 1's bitmap does; E16 always (tile_support, below)
%--   VDT, VALUES  (STATS sparse with E16) the support's values (f32 | bf16 | f16; probs |
%--             logprobs): the tile's sum p (s - m) and sum p over its support columns, from the
%--             fp32 scores, in the record's slots ps, pw (iface.SPARSE_E16_PART), from which pass
%--             2 takes the loss's cross term exactly (the gathered x would err by 2^-11 |x|)
%--   OWN       (STATS sparse with TOPK, no E16) true: the support's own (max, sum-exp) too
%--             (slots mo, dno), for the renormalized divergences
%--   T         (STATS) the constant temperature, > 0 (its reciprocal compiled in, as pass 1's)
%--   TMODE     (E16) const (absent) | runtime: 1 / T from the plan header (hdr, record hdr's
%--             inv_t, which kl_setup writes from the call's T, or the forward's saved header in
%--             two-phase backward), as the rows read it; T must then be 1 (no T in the source)
%--
%-- Launch: 128 (1 + CONSUMERS) threads (pingpong: 384), __launch_bounds__(..., 1);
%-- grid = CLUSTER x min(tiles of clusters, SMs / CLUSTER) (persistent: cluster c takes cluster
%-- tiles c, c + grid / CLUSTER, ...; __cluster_dims__ when CLUSTER = 2); dynamic shared memory
%-- STAGES (BM + BN) 128 + 1024 bytes, plus 4096 per consumer warp for EPILOGUE staged. Threads,
%-- cluster and shared memory reach the host in the manifest (the interface entry below), which
%-- it launches by. Parameters: the tensor maps of A
%-- (nt, nn: dims {K, M}, box {64, BM}; tn: dims {M, K}, box {64, 64}) and B (nt: dims {K, N},
%-- box {64, BN / CLUSTER}; nn, tn: dims {N, K}, box {64, 64}), 16-bit, 128-byte swizzle, zero
%-- fill out of bounds; C, M, N, K, ldc (elements), alpha.
%--
%-- GOP (issue 27, step 2: G rebuilt where the dX and dW GEMMs load it):
%--   GOP       absent | true (LAYOUT nn or tn: A = G): A's tensor holds E', the logits GEMM's
%--             tile-relative exponentials exp(s - m_tile) in fp16 (whatever IN is), and the
%--             consumers rewrite each stage's A tile in place as
%--                 G[r, v] = f[r, v / FW] E'[r, v] - g[r] P[r, v]      (rounded to IN once)
%--             before they multiply it: r the chunk's row (nn: A's row; tn: A's K row), v the
%--             vocabulary column, f the row's factor per logits tile (gfac + r fld + v / FW:
%--             exp(m_tile - lse) times the gradient's scale, from the merged records), g the
%--             row's scale of the teacher's term (gpr[r]). No row pass writes G, and the chunk
%--             buffer holds 2 bytes an element. The stage is rewritten element for element:
%--             E' and P arrive in the same 128-byte swizzled placement (same box, same element
%--             size), so a 16-byte chunk of E' pairs with P's at the same offset, and a 128-byte
%--             line of the stage is one row of A (nn: one chunk row, 64 columns of V; tn: one
%--             chunk row, 64 columns of V of the slice): the factors follow from the line.
%--             Each warpgroup rewrites its own slices (its 64 rows, or the pingpong tile's
%--             BM), fences the generic writes to the async proxy and meets its 128 threads on a
%--             named barrier before its wgmma read them.
%--   FW        (GOP) the factors' column tile, a multiple of 64 (the logits GEMM's BN): every
%--             k-block of A lies in one.
%--   PDT       (GOP) absent (G = f E': the sparse teacher, whose support's columns pass 2
%--             rewrote in E' as G / f) | bf16 | f16: the dense teacher's probabilities P, a
%--             second TMA tensor of A's shape (map_p, row stride ldp), loaded into the stage
%--             beside A.
%--   GRS       (GOP) absent | true: G formed in registers instead of in the stage. Each
%--             consumer warp reads its 16 rows of E' (and P) for each k16 step with ldmatrix
%--             (nn: A K-major, as stored; tn: A is G^T, MN-major in the stage: ldmatrix.trans),
%--             scales them by its rows' factors into wgmma's A fragment and multiplies from
%--             registers (wgmma's register-A form): nothing is written to the stage, so no
%--             proxy fence or barrier, and shared memory carries what the plain GEMM's does.
%--             A warpgroup waits for its k-block's wgmmas before forming the next fragments
%--             (ptxas serializes them otherwise), so the two cooperative warpgroups overlap each
%--             other's: the cooperative schedule, no KSLICE, no PROMOTE.
%--
%-- Pipeline: warpgroup 0 is the producer (setmaxnreg down to 40 registers): one thread waits
%-- for an empty stage, announces its bytes on the stage's full barrier and issues the two TMA
%-- loads of the next k-block, for every tile of this CTA in order. Warpgroups 1..CONSUMERS
%-- (setmaxnreg up) wait for a full stage, issue 4 wgmma k16 steps on their 64-row slice, keep
%-- one wgmma group in flight, and free the previous stage once its group has retired. The
%-- epilogue (EPILOGUE) stores the fragment, each element checked against M and N; the
%-- producer keeps loading the next tile meanwhile.
%--
%-- Numerics: fp32 accumulation in the tensor cores, K summed in k-block order (no split-K, no
%-- atomics): the same inputs give the same bits on every run. Tails: TMA reads zeros past M, N
%-- and K, so partial tiles multiply zeros; stores are bounds-checked. K must be a multiple of 8
%-- (TMA's 16-byte stride rule), M, N >= 1.
%local function one_of(v, set)
%  for _, x in ipairs(set) do if v == x then return true end end
%  return false
%end
%if not one_of(P.LAYOUT, { "nt", "nn", "tn" }) then reject("LAYOUT must be nt, nn or tn") end
%if not one_of(P.IN, { "bf16", "f16" }) then reject("IN must be bf16 or f16") end
%if not one_of(P.OUT, { "f32", "bf16", "f16" }) then reject("OUT must be f32, bf16 or f16") end
%if not one_of(P.BN, { 64, 128, 192, 256 }) then reject("BN must be 64, 128, 192 or 256") end
%if not one_of(P.CONSUMERS, { 1, 2, 3 }) then reject("CONSUMERS must be 1, 2 or 3") end
%if not one_of(P.RASTER, { "m", "n", "g" }) then reject("RASTER must be m, n or g") end
%if not one_of(P.CLUSTER, { 1, 2 }) then reject("CLUSTER must be 1 or 2") end
%local CL = P.CLUSTER
%if P.TILES ~= nil and not one_of(P.TILES, { "static", "dynamic" }) then
%  reject("TILES must be static or dynamic")
%end
%local DYN = P.TILES == "dynamic"
%if P.LAYOUT ~= "nt" and CL == 2 and P.BN < 128 then
%  reject("LAYOUT " .. P.LAYOUT .. " with CLUSTER 2 needs BN >= 128: two B boxes to share")
%end
%-- NN: B is MN-major (nn, tn); TN: A is too
%local NN, TN = P.LAYOUT ~= "nt", P.LAYOUT == "tn"
%if P.SCHEDULE ~= nil and not one_of(P.SCHEDULE, { "coop", "pingpong" }) then
%  reject("SCHEDULE must be coop or pingpong")
%end
%local PP = P.SCHEDULE == "pingpong"
%if P.CONSUMERS == 3 and (PP or P.LAYOUT ~= "nt" or P.GOP ~= nil or P.BN > 192) then
%  reject("CONSUMERS 3 needs LAYOUT nt, the cooperative schedule and BN <= 192 (152 registers "
%         .. "a consumer thread), without GOP")
%end
%if PP and P.CONSUMERS * P.BN > 256 then
%  reject("SCHEDULE pingpong holds a whole tile per warpgroup: CONSUMERS x BN must be <= 256")
%end
%-- WGS: the multiplying warpgroups; MS: the 64-row slices each multiplies; RELEASERS: the
%-- warpgroups that consume (and free) each stage
%local WGS, MS = PP and 2 or P.CONSUMERS, PP and P.CONSUMERS or 1
%local RELEASERS = PP and 1 or P.CONSUMERS
%local BM, BN, BK = 64 * P.CONSUMERS, P.BN, 64
%-- GOP: G rebuilt in the stage from E' (and, PDT, the teacher's P: GP, its tile in the stage too)
%if P.GOP ~= nil and not (P.GOP == true and NN) then
%  reject("GOP must be true and needs LAYOUT nn or tn (A = G, rebuilt in the stage)")
%end
%local GOP = P.GOP == true
%if GOP and (math.type(P.FW) ~= "integer" or P.FW < 64 or P.FW % 64 ~= 0) then
%  reject("FW must be a multiple of 64 (the factors' column tile: each k-block in one)")
%end
%if GOP and P.PDT ~= nil and not one_of(P.PDT, { "bf16", "f16" }) then
%  reject("PDT must be bf16 or f16 (the teacher's probabilities, a 16-bit TMA tile)")
%end
%if not GOP and (P.FW ~= nil or P.PDT ~= nil) then reject("FW and PDT need GOP") end
%local GP = GOP and P.PDT ~= nil
%-- a stage: A's tile, B's, and (GP) the teacher's tile of A's shape
%local P_BYTES = GP and BM * BK * 2 or 0
%local STAGE_BYTES = (BM + BN) * BK * 2 + P_BYTES
%if type(P.STAGES) ~= "number" or P.STAGES < 2 or P.STAGES > 8 then
%  reject("STAGES must be in [2, 8]")
%end
%if P.STAGES * STAGE_BYTES + 1024 > 227 * 1024 then
%  reject("STAGES x (BM + BN) x 128 bytes (GOP with PDT: and BM x 128) exceeds the 227 KB of "
%         .. "shared memory")
%end
%if P.EPILOGUE ~= nil and not one_of(P.EPILOGUE, { "direct", "staged" }) then
%  reject("EPILOGUE must be direct or staged")
%end
%local STAGED = P.EPILOGUE == "staged"
%local KSLICE = P.KSLICE or 0
%if type(KSLICE) ~= "number" or KSLICE < 0 or KSLICE ~= math.floor(KSLICE) then
%  reject("KSLICE must be a whole number of k-blocks (0: none)")
%end
%if KSLICE > 0 and P.OUT ~= "f32" then
%  reject("KSLICE needs OUT f32: the slices' sums are kept in C")
%end
%if P.ARRIVE ~= nil and not one_of(P.ARRIVE, { "thread", "warp" }) then
%  reject("ARRIVE must be thread or warp")
%end
%local ARRIVE_WARP = P.ARRIVE == "warp"
%local PROMOTE = P.PROMOTE or 0
%if type(PROMOTE) ~= "number" or PROMOTE < 0 or PROMOTE ~= math.floor(PROMOTE) then
%  reject("PROMOTE must be a whole number of k-blocks (0: none)")
%end
%if PROMOTE > 0 and KSLICE > 0 then
%  reject("PROMOTE and KSLICE both restart the accumulators: one or the other")
%end
%if PROMOTE > 0 and MS * P.BN / 2 > 64 then
%  reject("PROMOTE keeps a second accumulator: at most 64 floats a thread each (MS x BN / 2 = "
%         .. math.floor(MS * P.BN / 2) .. "; the cooperative schedule with BN <= 128)")
%end
%-- GRS: G formed in registers, not in the stage (GOP's second form)
%if P.GRS ~= nil and not (P.GRS == true and GOP) then reject("GRS must be true and needs GOP") end
%local GRS = P.GRS == true
%if GRS and (PP or KSLICE > 0 or PROMOTE > 0) then
%  reject("GRS needs the cooperative schedule without KSLICE or PROMOTE (a warpgroup forms a "
%         .. "k-block's fragments while the other's wgmmas run)")
%end
%if P.STORE ~= nil and not one_of(P.STORE, { "default", "streaming" }) then
%  reject("STORE must be default or streaming")
%end
%local STREAM = P.STORE == "streaming"
%local STATS = P.STATS
%-- SPARSE: the student's statistics alone, in the sparse rows' record (no teacher read here);
%-- TEACH: a dense teacher's tile is read (every other form)
%local SPARSE = STATS == "sparse"
%local TEACH = STATS ~= nil and not SPARSE
%if STATS ~= nil then
%  if not one_of(STATS, { "probs", "logprobs", "logits", "sparse" }) then
%    reject("STATS must be probs, logprobs or logits (a dense teacher's form) or sparse")
%  end
%  if P.LAYOUT ~= "nt" or P.OUT ~= "f32" or P.BETA or KSLICE > 0 then
%    reject("STATS is the logits GEMM's epilogue: LAYOUT nt, OUT f32, no BETA and no KSLICE")
%  end
%  if SPARSE and (P.TDT ~= nil or P.TLD ~= nil) then
%    reject("STATS sparse reads no teacher tile: no TDT or TLD")
%  end
%  if TEACH and (math.type(P.TLD) ~= "integer" or P.TLD < 1) then
%    reject("TLD must be an integer >= 1 (the teacher's row stride)")
%  end
%  if TEACH and not one_of(P.TDT, { "f32", "bf16", "f16" }) then
%    reject("TDT must be f32, bf16 or f16")
%  end
%  if type(P.T) ~= "number" or not (P.T > 0 and P.T < math.huge) then
%    reject("T must be > 0 (STATS takes a constant temperature)")
%  end
%end
%if P.TT ~= nil and not (STATS == "logits" and type(P.TT) == "number" and P.TT > 0 and
%                        P.TT < math.huge) then
%  reject("TT must be > 0 and needs STATS logits (the teacher's temperature; absent: T's)")
%end
%local TLOGITS = STATS == "logits"
%if P.MASS_WARPS ~= nil and not (P.MASS_WARPS == true and TEACH and not DYN) then
%  reject("MASS_WARPS must be true and needs STATS probs, logprobs or logits (a dense teacher's "
%         .. "tile) and static tiles (the producer's warps follow the CTA's tiles in order)")
%end
%local MASS_WARPS = P.MASS_WARPS == true
%-- the consumers' epilogue reads the teacher (prefetch_teacher, tile_teacher) unless the
%-- producer's warps sum its mass
%local TREAD = TEACH and not MASS_WARPS
%if P.TCHUNK ~= nil and not (P.TCHUNK == true and TLOGITS) then
%  reject("TCHUNK must be true and needs STATS logits (the online teacher's chunk of logits)")
%end
%if P.TBDT ~= nil and not (P.TCHUNK == true and one_of(P.TBDT, { "f32", "bf16", "f16" })) then
%  reject("TBDT must be f32, bf16 or f16 and needs TCHUNK (the online teacher's bias)")
%end
%-- the online teacher's bias: tile_teacher's parameter and its callers' argument
%local TBP = P.TBDT and " const tbias_t* __restrict__ tbias," or ""
%local TBA = P.TBDT and " tbias," or ""
%-- the dense teacher's tile: tile_stats's parameter and its caller's argument (none: sparse)
%local TEP = TEACH and " const teach_t* __restrict__ teacher," or ""
%local TEA = TEACH and " teacher," or ""
%if P.TSOFTCAP ~= nil and not (TLOGITS and type(P.TSOFTCAP) == "number" and P.TSOFTCAP > 0 and
%                              P.TSOFTCAP < math.huge) then
%  reject("TSOFTCAP must be > 0 and needs STATS logits (the teacher's logit cap)")
%end
%if P.E16 ~= nil and not (P.E16 == true and STATS ~= nil) then
%  reject("E16 must be true and needs STATS (the records E's maxima go with)")
%end
%local E16 = P.E16 == true
%-- the sparse teacher's support read in the epilogue: MARK, its columns marked from its ids (E16,
%-- and the bucket tail or a divergence without it: d_on, d_off apart); SUPPORT, also its values
%-- (E16: the loss's cross term); OWN, the support's own (max, sum-exp) too (the renormalized
%-- divergences, without E16)
%local SUPPORT = SPARSE and E16
%local MARK = SPARSE and (E16 or P.TOPK ~= nil)
%if P.TOPK ~= nil and not SPARSE then reject("TOPK and IDT need STATS sparse") end
%if MARK then
%  if math.type(P.TOPK) ~= "integer" or P.TOPK < 1 or P.TOPK > 1024 then
%    reject("TOPK must be in [1, 1024] (STATS sparse: the support's size)")
%  end
%  if not one_of(P.IDT, { "i32", "i64" }) then reject("IDT must be i32 or i64") end
%elseif P.IDT ~= nil then
%  reject("IDT needs TOPK (STATS sparse: the support's ids)")
%end
%if SUPPORT then
%  if not one_of(P.VDT, { "f32", "bf16", "f16" }) then reject("VDT must be f32, bf16 or f16") end
%  if not one_of(P.VALUES, { "probs", "logprobs" }) then reject("VALUES must be probs or logprobs") end
%elseif P.VDT ~= nil or P.VALUES ~= nil then
%  reject("VDT and VALUES need STATS sparse with E16 (the loss's cross term from the support)")
%end
%if P.OWN ~= nil and not (P.OWN == true and MARK and not E16) then
%  reject("OWN must be true and needs STATS sparse with TOPK, without E16 (the support's own "
%         .. "(max, sum-exp) for the renormalized divergences)")
%end
%local OWN = P.OWN == true
%local SPLIT_ON = MARK and not E16 -- the records' d_on apart (tile_stats)
%-- ... the sparse teacher's support in the dense teacher's place (tile_stats', tile_e16's)
%if SPARSE then
%  TEP = (MARK and " const id_t* __restrict__ ids," or "")
%    .. (SUPPORT and " const val_t* __restrict__ vals," or "")
%  TEA = (MARK and " ids," or "") .. (SUPPORT and " vals," or "")
%end
%if P.BDT ~= nil and not E16 then
%  reject("BDT needs E16 (the scores the tile's E is made of)")
%end
%if P.BDT ~= nil and not one_of(P.BDT, { "f32", "bf16", "f16" }) then
%  reject("BDT must be f32, bf16 or f16")
%end
%if P.SOFTCAP ~= nil and not (E16 and type(P.SOFTCAP) == "number" and P.SOFTCAP > 0 and
%                             P.SOFTCAP < math.huge) then
%  reject("SOFTCAP must be > 0 and needs E16 (the scores the tile's E is made of)")
%end
%if P.HARD ~= nil and not (P.HARD == true and E16) then
%  reject("HARD must be true and needs E16 (the CE's records come with E's)")
%end
%local HARD = P.HARD == true
%if P.TMODE ~= nil and not (E16 and (P.TMODE == "const" or P.TMODE == "runtime")) then
%  reject("TMODE must be const or runtime and needs E16")
%end
%local RUNTIME_T = P.TMODE == "runtime"
%if P.EXPE ~= nil and not (P.EXPE == true and SUPPORT and not HARD and P.SOFTCAP == nil) then
%  reject("EXPE must be true and needs E16 with STATS sparse, without HARD or SOFTCAP (E' for "
%         .. "the G operand stage; the CE's and the cap's G need the score)")
%end
%local EXPE = P.EXPE == true
%if RUNTIME_T and P.T ~= 1 then reject("TMODE runtime takes T = 1 (1 / T comes from hdr)") end
%local LABELS = " labels, labels_is64," -- tile_e16's arguments under HARD
%if STREAM and not STAGED then
%  reject("STORE streaming needs EPILOGUE staged (its 16-byte runs)")
%end
%if P.L2 ~= nil and not one_of(P.L2, { "keep_a", "keep_b" }) then
%  reject("L2 must be keep_a or keep_b")
%end
%-- the TMA loads of A and of B: their helper and the policy operand each passes
%local LOAD = P.L2 and "tma_load_2d_hint" or "tma_load_2d"
%local LOAD_MC = P.L2 and "tma_load_2d_multicast_hint" or "tma_load_2d_multicast"
%local POL_A, POL_B = P.L2 and ", pol_a" or "", P.L2 and ", pol_b" or ""
%-- the staged epilogue's scratch: 4 KB per consumer warp, after the ring (1024-byte aligned:
%-- a stage is a multiple of 8 KB)
%local SCRATCH = STAGED and WGS * 4 * 4096 or 0
%-- the staged epilogue's 16-byte runs: VEC outputs, read and written as VT
%local VEC = P.OUT == "f32" and 4 or 8
%local VT = P.OUT == "f32" and "float4" or "uint4"
%if STAGED and P.STAGES * STAGE_BYTES + SCRATCH + 1024 > 227 * 1024 then
%  reject("STAGES x (BM + BN) x 128 bytes and the staged epilogue's " .. SCRATCH ..
%         " bytes exceed the 227 KB of shared memory")
%end
%-- dynamic shared memory: the ring, the staged epilogue's scratch, and the slack to align the
%-- ring to 1024 bytes
%local SMEM = P.STAGES * STAGE_BYTES + SCRATCH + 1024
%-- STATS sparse reading the support's ids (MARK) without a staged scratch: each consumer warp's
%-- support bitmap is static shared memory (support_map), beside the barriers' 1 KB
%if MARK and not STAGED and SMEM + WGS * 4 * 16 * (BN // 32) * 4 + 1024 > 227 * 1024 then
%  reject("STAGES x (BM + BN) x 128 bytes and the support's bitmaps (STATS sparse) "
%         .. "exceed the 227 KB of shared memory")
%end
%local THREADS = 128 * (1 + WGS)
%-- setmaxnreg: 128 x 40 for the producer and WGS x 128 x CONSUMER_REGS within the SM's 64 K
%local CONSUMER_REGS = WGS == 3 and 152 or WGS == 2 and 232 or 240
%-- The checks end here (a validation returns at end_of_checks(): docs/templates.md)
%end_of_checks()
%include("common.cu.lua")
%include("ptx_sm90.cu.lua")
%-- The kernel's interface, declared once (templates/iface.cu.lua): the declaration below, the
%-- launch geometry and the manifest line are all made from this entry. Its TMA descriptors go
%-- by value (__grid_constant__ kl_tmap: kind tmap, a CUtensorMap in src/kiface.h's kargs); the
%-- host marshals every argument by the manifest (jgemm_launch), as for the row kernels.
%-- STATS adds the teacher, the records out and the chunk's first row, and declares the record.
%local iface = include("iface.cu.lua")
%local gemm_args = {
%  { "map_a", "const __grid_constant__ kl_tmap" },
%  { "map_b", "const __grid_constant__ kl_tmap" },
%  { "C", "out_t* __restrict__", role = "gemm_c" }, { "M", "int", role = "gemm_m" },
%  { "N", "int", role = "gemm_n" }, { "K", "int", role = "gemm_k" }, { "ldc", "i64" },
%  { "alpha", "float" } }
%if TEACH then
%  gemm_args = iface.args(gemm_args, {
%    { "teacher", "const teach_t* __restrict__" }, { "part", "float* __restrict__" },
%    { "row0", "i64" } })
%elseif SPARSE then
%  gemm_args = iface.args(gemm_args, { { "part", "float* __restrict__" }, { "row0", "i64" } })
%end
%if E16 then
%  gemm_args = iface.args(gemm_args, {
%    { "E", "f16_t* __restrict__", role = "gemm_e" }, { "lde", "i64" },
%    { "rowstat", "const float* __restrict__" }, { "rsf", "int" } })
%  if P.BDT then gemm_args = iface.args(gemm_args, { { "bias", "const bias_t* __restrict__" } }) end
%  if HARD then
%    gemm_args = iface.args(gemm_args, {
%      { "labels", "const void* __restrict__" }, { "labels_is64", "int" } })
%  end
%  if RUNTIME_T then gemm_args = iface.args(gemm_args, { { "hdr", "const float* __restrict__" } }) end
%end
%if P.TBDT then
%  gemm_args = iface.args(gemm_args, {
%    { "tbias", "const tbias_t* __restrict__", role = "teacher_bias" } })
%end
%if MARK then
%  gemm_args = iface.args(gemm_args, { { "ids", "const id_t* __restrict__", role = "teacher_ids" } })
%end
%if SUPPORT then
%  gemm_args = iface.args(gemm_args, {
%    { "vals", "const val_t* __restrict__", role = "teacher_values" } })
%end
%-- the record the epilogue writes: the dense rows', or the sparse rows' (E16's with the support's
%-- part of the loss)
%local STATS_REC = SPARSE and (E16 and iface.SPARSE_E16_PART or iface.SPARSE_PART)
%                  or iface.DENSE_PART
%if GOP then
%  gemm_args = iface.args(gemm_args, {
%    { "gfac", "const float* __restrict__" }, { "fld", "i64" } })
%  if GP then
%    gemm_args = iface.args(gemm_args, {
%      { "map_p", "const __grid_constant__ kl_tmap" }, { "gpr", "const float* __restrict__" } })
%  end
%end
%if DYN then
%  gemm_args = iface.args(gemm_args, { { "sched", "unsigned* __restrict__", role = "gemm_sched" } })
%end
%local K = iface.family({
%  { name = "kl_gemm", step = "gemm", threads = THREADS, min_blocks = 1,
%    cluster = CL == 2 and 2 or nil,
%    smem = SMEM, args = gemm_args },
%}, STATS and (RUNTIME_T and { iface.HDR, STATS_REC } or { STATS_REC }) or nil)
#define BM {{ BM }}
#define BN {{ BN }}
#define BK {{ BK }}
#define STAGES {{ P.STAGES }}
#define CONSUMERS {{ P.CONSUMERS }}
#define MS {{ MS }}
%if GOP then
#define FW {{ P.FW }}
%if GRS then
/* GRS: the factors a thread holds for a k-block (nn: its fragments' two rows; tn: the 16 rows
 * of the k-block's K its fragments touch, 4 a k16 step) */
#define GRN {{ TN and 16 or 2 }}
%else
/* GOP: the 16-byte chunks of a stage's A tile each consumer thread rewrites (its warpgroup's
 * slices, one cooperative or MS pingpong: each 64 lines of 128 bytes, 512 chunks, over 128
 * threads) */
#define GN {{ 4 * (PP and MS or 1) }}
%end
%end
typedef {{ P.OUT == "f32" and "float" or P.OUT == "bf16" and "bf16_t" or "f16_t" }} out_t;
%if STATS then
%  if TEACH then
typedef {{ P.TDT == "f32" and "float" or P.TDT == "bf16" and "bf16_t" or "f16_t" }} teach_t;
#define TLD {{ P.TLD }}
/* the teacher's row of C's row r: the call's (row0 + r) or, under TCHUNK, the chunk's (r) */
#define TROW(row0, r) ({{ P.TCHUNK and "(i64)(r)" or "(row0) + (r)" }})
%  end
%  if P.TBDT then
typedef {{ P.TBDT == "f32" and "float" or P.TBDT == "bf16" and "bf16_t" or "f16_t" }} tbias_t;
%  end
#define STATS_INV_T ({{ f32(1.0 / P.T) }})
%  if MARK then
typedef {{ P.IDT == "i32" and "int" or "i64" }} id_t;
#define TOPK {{ P.TOPK }}
%  end
%  if SUPPORT then
typedef {{ P.VDT == "f32" and "float" or P.VDT == "bf16" and "bf16_t" or "f16_t" }} val_t;
%  end
/* teacher logits' 1 / TT: TT's, or (absent) T's as the caller has it (inv_t) */
#define STATS_INV_TT(inv_t) ({{ P.TT and f32(1.0 / P.TT) or "(inv_t)" }})
%  if P.BDT then
typedef {{ P.BDT == "f32" and "float" or P.BDT == "bf16" and "bf16_t" or "f16_t" }} bias_t;
%  end
{{ K.records() }}

%  if SPARSE then
/* STATS sparse reads no teacher: tile_records takes this part empty (tile_stats) */
struct tstat_t { float a[2], b[2]; };
%  else
/* The teacher's part of the records of each of this warp's 16 rows r0 + j over the tile's
 * columns c0 .. c0 + BN below N: its mass sp (probs: sum p; logprobs: sum exp(log p)) or, for
 * teacher logits, the (max, sum-exp) of t' = t / TT (mt, dt, as pass 1's acc1_add makes them;
 * capped first under TSOFTCAP). The teacher's terms do not pair with the student's, so
 * the warp reads row j's columns in 16-byte runs, lane after lane (coalesced; the fragment's
 * layout, 2 columns a lane in 8 rows at once, took 8 times the L1 wavefronts), and a
 * transposing butterfly then merges the lanes' parts: after offset o the lane keeps the rows
 * whose bit o matches its own, so lane l ends with row l >> 1's (the same order on every run).
 * Row r0 + lane / 4 + 8 h's is returned in h = 0, 1 of its record-writing lanes: a (sp, or mt)
 * and b (dt; 0 for the mass). */
struct tstat_t { float a[2], b[2]; };
%  if TLOGITS then
/* A teacher logit t (with the online teacher's bias, TBDT) as pass 1 takes it: capped
 * (TSOFTCAP), then times 1 / TT */
__device__ __forceinline__ float teacher_score(float t, float inv_tt) {
%    if P.TSOFTCAP then
  return {{ f32(P.TSOFTCAP) }} * tanhf(t * {{ f32(1.0 / P.TSOFTCAP) }}) * inv_tt;
%    else
  return t * inv_tt;
%    end
}
/* n teacher logits x (already times 1 / TT; xm their max) into a lane's (m, d) of one row, as
 * acc1_add merges a vector: nothing where all are -inf */
template <int NV>
__device__ __forceinline__ void md_add(float& m, float& d, const float (&x)[NV], float xm) {
  if (xm == KL_NEG_INF) return;
  const float nm = fmaxf(m, xm);
  float s = d * fexp(m - nm); /* m = -inf with d = 0: 0 */
#pragma unroll
  for (int e = 0; e < NV; e++) s += fexp(x[e] - nm);
  m = nm, d = s;
}
template <int N> /* one step of the butterfly: offset 2 N, rows j < 2 N -> j < N */
__device__ __forceinline__ void md_step(float (&m)[16], float (&d)[16], int lane) {
  const bool hi = lane & (2 * N);
#pragma unroll
  for (int j = 0; j < N; j++) {
    md_t keep, got;
    keep.m = hi ? m[j + N] : m[j], keep.d = hi ? d[j + N] : d[j];
    got.m = __shfl_xor_sync(0xffffffffu, hi ? m[j] : m[j + N], 2 * N);
    got.d = __shfl_xor_sync(0xffffffffu, hi ? d[j] : d[j + N], 2 * N);
    const md_t r = md_merge(keep, got);
    m[j] = r.m, d[j] = r.d;
  }
}
%  else
/* One teacher entry's part of the mass: p, or exp(log p) */
__device__ __forceinline__ float mass_term(teach_t v) {
%    if STATS == "logprobs" then
  return fexp(to_f32(v));
%    else
  return to_f32(v);
%    end
}
template <int N> /* one step of the butterfly: offset 2 N, rows j < 2 N -> j < N */
__device__ __forceinline__ void mass_step(float (&a)[16], int lane) {
  const bool hi = lane & (2 * N);
#pragma unroll
  for (int j = 0; j < N; j++) {
    const float give = hi ? a[j] : a[j + N];
    a[j] = (hi ? a[j + N] : a[j]) + __shfl_xor_sync(0xffffffffu, give, 2 * N);
  }
}
%  end
/* One 16-byte run of the teacher's row, as tile_teacher and mass_tile fold it: */
constexpr int TVT = 16 / (int)sizeof(teach_t); /* its entries */
%  if TLOGITS then
/* ... teacher logits (TBDT: plus the run's columns' bias tb) as t' = teacher_score(t) into x;
 * returns their max */
__device__ __forceinline__ float run_scores(const uint4& u,{{ P.TBDT and " const float (&tb)[TVT]," or "" }}
                                           float inv_tt, float (&x)[TVT]) {
  teach_t v[TVT];
  memcpy(v, &u, 16);
  float xm = KL_NEG_INF;
#pragma unroll
  for (int e = 0; e < TVT; e++)
    x[e] = teacher_score(to_f32(v[e]){{ P.TBDT and " + tb[e]" or "" }}, inv_tt), xm = fmaxf(xm, x[e]);
  return xm;
}
/* One entry of a ragged tile (column c of the teacher's row tr), as tile_teacher and mass_tile
 * fold it: t' = teacher_score(t) into the running (m, d) */
__device__ __forceinline__ void entry_fold(float& m, float& d, const teach_t* tr,{{ TBP }} int c,
                                           float inv_tt) {
  const float x[1] = {teacher_score(to_f32(tr[c]){{ P.TBDT and " + to_f32(tbias[c])" or "" }}, inv_tt)};
  md_add<1>(m, d, x, x[0]);
}
%  else
/* ... its part of the mass */
__device__ __forceinline__ float run_mass(const uint4& u) {
  teach_t v[TVT];
  memcpy(v, &u, 16);
  float t = 0.0f;
#pragma unroll
  for (int e = 0; e < TVT; e++) t += mass_term(v[e]);
  return t;
}
%  end
/* inv_tt: teacher logits' 1 / TT (unused for the mass) */
__device__ __forceinline__ tstat_t tile_teacher(const teach_t* __restrict__ teacher,{{ TBP }}
                                                i64 row0, int r0, int c0, int M, int N, int lane,
                                                float inv_tt) {
  constexpr int VT = 16 / (int)sizeof(teach_t), RUNS = BN / VT;
  constexpr bool ALIGNED = TLD % VT == 0; /* and the teacher 16-byte aligned (exec.c checks) */
  float a[16];
%  if TLOGITS then
  float ad[16]; /* a: the lane's max of each row, ad: its sum-exp */
#pragma unroll
  for (int j = 0; j < 16; j++) a[j] = KL_NEG_INF, ad[j] = 0.0f;
%  else
  (void)inv_tt;
#pragma unroll
  for (int j = 0; j < 16; j++) a[j] = 0.0f;
%  end
  if (ALIGNED && c0 + BN <= N) {
    /* a whole tile: BATCH rows' runs in flight at once (16 rows one after another were 16
     * round trips to L2 while the tensor cores idled), rows past M read as row M - 1 and
     * dropped */
    constexpr int BATCH = {{ TLOGITS and 4 or 8 }}; /* logits: 4, their (max, sum-exp) take registers */
#pragma unroll
    for (int j0 = 0; j0 < 16; j0 += BATCH)
#pragma unroll
      for (int k = 0; k < (RUNS + 31) / 32; k++) {
        const int q = lane + 32 * k;
        if (q >= RUNS) continue;
        uint4 u[BATCH];
#pragma unroll
        for (int b = 0; b < BATCH; b++) {
          const int r = min(r0 + j0 + b, M - 1);
          u[b] = *reinterpret_cast<const uint4*>(teacher + TROW(row0, r) * TLD + c0 + q * VT);
        }
%  if P.TBDT then
        float tb[VT]; /* the run's columns' teacher bias, read once for the batch's rows */
#pragma unroll
        for (int e = 0; e < VT; e++) tb[e] = to_f32(tbias[c0 + q * VT + e]);
%  end
#pragma unroll
        for (int b = 0; b < BATCH; b++) {
%  if TLOGITS then
          float x[VT];
          const float xm = run_scores(u[b],{{ P.TBDT and " tb," or "" }} inv_tt, x);
          if (r0 + j0 + b < M) md_add<VT>(a[j0 + b], ad[j0 + b], x, xm);
%  else
          const float t = run_mass(u[b]);
          if (r0 + j0 + b < M) a[j0 + b] += t;
%  end
        }
      }
  } else {
#pragma unroll
    for (int j = 0; j < 16; j++) {
      if (r0 + j >= M) continue;
      const teach_t* tr = teacher + TROW(row0, r0 + j) * TLD;
#pragma unroll
      for (int k = 0; k < (RUNS + 31) / 32; k++) {
        const int q = lane + 32 * k, c = c0 + q * VT;
        if (q >= RUNS || c >= N) continue;
#pragma unroll
        for (int e = 0; e < VT; e++)
%  if TLOGITS then
          if (c + e < N) entry_fold(a[j], ad[j], tr,{{ TBA }} c + e, inv_tt);
%  else
          if (c + e < N) a[j] += mass_term(tr[c + e]);
%  end
      }
    }
  }
  /* the lines prefetch_teacher marked evict_last are read: back to the normal priority, so
   * that the chunk's teacher (read once) does not crowd W's k-blocks out of L2 (E16's L2 hit
   * rate was 73% against the plain GEMM's 82%, its DRAM traffic 1.6x: run 74's ncu) */
  {
    constexpr int LINE = 128 / (int)sizeof(teach_t), LINES = (BN + LINE - 1) / LINE;
#pragma unroll
    for (int i = lane; i < 16 * LINES; i += 32) {
      const int r = r0 + i / LINES, c = c0 + (i % LINES) * LINE;
      if (r < M && c < N)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;"
                     :
                     : "l"((u64)(teacher + TROW(row0, r) * TLD + c) & ~(u64)127)
                     : "memory");
    }
  }
  tstat_t out;
  const int q = lane / 4;
%  if TLOGITS then
  md_step<8>(a, ad, lane);
  md_step<4>(a, ad, lane);
  md_step<2>(a, ad, lane);
  md_step<1>(a, ad, lane);
  {
    md_t mine, got; /* row l >> 1, in lanes 2 (l >> 1) and + 1 */
    mine.m = a[0], mine.d = ad[0];
    got.m = __shfl_xor_sync(0xffffffffu, a[0], 1);
    got.d = __shfl_xor_sync(0xffffffffu, ad[0], 1);
    const md_t r = md_merge(mine, got); /* commutative: both lanes of the pair agree */
    a[0] = r.m, ad[0] = r.d;
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    out.a[h] = __shfl_sync(0xffffffffu, a[0], 2 * q + 16 * h);
    out.b[h] = __shfl_sync(0xffffffffu, ad[0], 2 * q + 16 * h);
  }
%  else
  mass_step<8>(a, lane);
  mass_step<4>(a, lane);
  mass_step<2>(a, lane);
  mass_step<1>(a, lane);
  a[0] += __shfl_xor_sync(0xffffffffu, a[0], 1); /* row l >> 1, in lanes 2 (l >> 1) and + 1 */
#pragma unroll
  for (int h = 0; h < 2; h++) {
    out.a[h] = __shfl_sync(0xffffffffu, a[0], 2 * q + 16 * h);
    out.b[h] = 0.0f;
  }
%  end
  return out;
}
%    if MASS_WARPS then
/* MASS_WARPS: the teacher's slots of the records of the tile at rows r0 .. r0 + BM, columns
 * c0 .. c0 + BN below N, by the producer's warp w of 3 (rows r0 + w, + 3, ...): each lane folds
 * its 16-byte runs of a row, BATCH rows in flight (streaming loads: the teacher is read once),
 * the warp's butterfly (offsets 16 .. 1: the same order on every run, each merge commutative)
 * the row's; lane 0 writes the row's record: the mass sp with the neutral teacher (mt, dt) =
 * (0, 1), or for teacher logits their (mt, dt) = (max, sum-exp) of t' = t / TT (capped,
 * TSOFTCAP; the online teacher's bias first, TBDT) with sp 0, as tile_teacher makes them; and,
 * without HARD, the unnamed slots' 0. The tile's other slots, m and d (HARD: mh, dh, S), are
 * its consumers' (tile_records). */
%      local ACC = TLOGITS and "md_t" or "float"
__device__ __forceinline__ {{ ACC }} mass_zero() { return {{ TLOGITS and "{KL_NEG_INF, 0.0f}" or "0.0f" }}; }
__device__ __forceinline__ void mass_tile(const teach_t* __restrict__ teacher,{{ TBP }}
                                          float* __restrict__ part, i64 row0, int r0, int c0,
                                          int M, int N, int tiles_n, int tn, int w, int lane,
                                          float inv_tt) {
  constexpr int VT = 16 / (int)sizeof(teach_t), RUNS = BN / VT, RPL = (RUNS + 31) / 32;
  /* 16 registers of loads in flight (8 for fp32 teacher logits: their fold takes the rest) */
  constexpr int BATCH = RPL == 1 ? 4 : {{ TLOGITS and 1 or 2 }};
  constexpr bool ALIGNED = TLD % VT == 0; /* and the teacher 16-byte aligned (exec.c checks) */
  (void)inv_tt;
  const int rows = min(BM, M - r0);
  const bool whole = ALIGNED && c0 + BN <= N;
  for (int j0 = w; j0 < rows; j0 += 3 * BATCH) {
    {{ ACC }} a[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; b++) a[b] = mass_zero();
    if (whole) {
      uint4 u[BATCH][RPL];
#pragma unroll
      for (int b = 0; b < BATCH; b++) {
        const int r = min(j0 + 3 * b, rows - 1); /* past the tile's rows: read again, dropped */
        const teach_t* tr = teacher + TROW(row0, r0 + r) * TLD + c0;
#pragma unroll
        for (int k = 0; k < RPL; k++)
          if (lane + 32 * k < RUNS) u[b][k] = __ldcs(reinterpret_cast<const uint4*>(tr + (lane + 32 * k) * VT));
      }
#pragma unroll
      for (int k = 0; k < RPL; k++) {
        const int q = lane + 32 * k;
        if (q >= RUNS) continue;
%      if P.TBDT then
        float tb[VT]; /* the run's columns' teacher bias, read once for the batch's rows */
#pragma unroll
        for (int e = 0; e < VT; e++) tb[e] = to_f32(tbias[c0 + q * VT + e]);
%      end
#pragma unroll
        for (int b = 0; b < BATCH; b++) {
%      if TLOGITS then
          float x[VT];
          const float xm = run_scores(u[b][k],{{ P.TBDT and " tb," or "" }} inv_tt, x);
          md_add<VT>(a[b].m, a[b].d, x, xm);
%      else
          a[b] += run_mass(u[b][k]);
%      end
        }
      }
    } else {
#pragma unroll
      for (int b = 0; b < BATCH; b++) {
        if (j0 + 3 * b >= rows) continue;
        const teach_t* tr = teacher + TROW(row0, r0 + j0 + 3 * b) * TLD;
        for (int c = c0 + lane; c < c0 + BN && c < N; c += 32) {
%      if TLOGITS then
          entry_fold(a[b].m, a[b].d, tr,{{ TBA }} c, inv_tt);
%      else
          a[b] += mass_term(tr[c]);
%      end
        }
      }
    }
#pragma unroll
    for (int b = 0; b < BATCH; b++) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
%      if TLOGITS then
        md_t got;
        got.m = __shfl_xor_sync(0xffffffffu, a[b].m, o);
        got.d = __shfl_xor_sync(0xffffffffu, a[b].d, o);
        a[b] = md_merge(a[b], got);
%      else
        a[b] += __shfl_xor_sync(0xffffffffu, a[b], o);
%      end
      }
      const int r = j0 + 3 * b;
      if (lane == 0 && r < rows) {
        float* rec = part + ((i64)(r0 + r) * tiles_n + tn) * PART_FLOATS;
%      if TLOGITS then
        rec[PART_SP] = 0.0f, rec[PART_MT] = a[b].m, rec[PART_DT] = a[b].d; /* sum p = 1 */
%      else
        rec[PART_SP] = a[b], rec[PART_MT] = 0.0f, rec[PART_DT] = 1.0f;
%      end
%      if not HARD then
        rec[PART_MH] = 0.0f, rec[PART_DH] = 0.0f, rec[PART_S] = 0.0f; /* unnamed: 0, as ever */
%      end
      }
    }
  }
}
%    end
%  end

/* The max of s = scale d over the tile's columns below N of this thread's two fragment rows
 * (element 4 i + e: row + 8 (e / 2), column col + 8 i + e % 2), then over the row's four lanes
 * (lane % 4) by shuffles: every lane of a row gets its max. */
__device__ __forceinline__ void tile_row_max(const float* d, int col, int N, float scale,
                                             float (&m)[2]) {
  m[0] = m[1] = KL_NEG_INF;
#pragma unroll
  for (int i = 0; i < BN / 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      if (col + 8 * i + (e & 1) < N)
        m[e >> 1] = fmaxf(m[e >> 1], d[4 * i + e] * scale);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
  }
}

%if MARK then
/* The support's columns c0 .. c0 + BN below N of this consumer warp's 16 rows r0 + j, marked in
 * the warp's bitmap (16 rows of BN / 32 words) from the rows' TOPK ids (FLIGHT ids in flight a
 * lane: QB of a row's KR runs of 32, BATCH rows at once, so that TOPK <= 128 takes 2 round trips
 * to L2 for the warp's 16 rows under E16's pingpong schedule, 4 elsewhere (32 in flight spill
 * in the cooperative staged E16 and in tile_stats' split sums), where it took 8; E16 at
 * 128 x 128 pays them twice a tile, its tensor cores idle: bench/RESULTS.md, runs 82-84); an id
 * outside the tile marks nothing. The bitmap is the staged epilogue's scratch where there is one
 * (E16 leaves it unused; the plain epilogue stages C through it only after every tile_stats of
 * the tile, and the previous tile's staging reads end at the barrier first here), else static
 * shared memory (no pointer held through the mainloop: the pingpong consumer's registers are
 * full). Returned after a warp barrier; the callers' last reads end with another. */
__device__ __forceinline__ u32* support_map(int r0, int c0, int M, int N,
                                            const id_t* __restrict__ ids, i64 row0, int lane,
                                            unsigned char* scratch) {
  constexpr int W = BN / 32, KR = (TOPK + 31) / 32, FLIGHT = {{ PP and SUPPORT and 32 or 16 }};
  constexpr int QB = KR < FLIGHT ? KR : FLIGHT, BATCH = FLIGHT / QB;
%  if STAGED then
  u32* map = reinterpret_cast<u32*>(scratch);
%  else
  __shared__ u32 maps[4 * {{ WGS }}][16 * W];
  u32* map = maps[threadIdx.x / 32 - 4];
  (void)scratch;
%  end
  __syncwarp(); /* the previous user's reads (store_rows' staging, a tile's tests) are done */
  for (int i = lane; i < 16 * W; i += 32) map[i] = 0u;
  __syncwarp();
#pragma unroll 1
  for (int j0 = 0; j0 < 16; j0 += BATCH)
#pragma unroll 1
    for (int q0 = 0; q0 < KR; q0 += QB) {
      int col[BATCH][QB]; /* the tile's column of id 32 (q0 + q) + lane of row j0 + b, or -1 */
#pragma unroll
      for (int b = 0; b < BATCH; b++)
#pragma unroll
        for (int q = 0; q < QB; q++) {
          const int k = 32 * (q0 + q) + lane;
          const bool in = j0 + b < 16 && r0 + j0 + b < M && k < TOPK;
          const i64 id = in ? (i64)ids[(row0 + r0 + j0 + b) * TOPK + k] : -1;
          col[b][q] = id >= c0 && id < (i64)c0 + BN && id < N ? (int)(id - c0) : -1;
        }
#pragma unroll
      for (int b = 0; b < BATCH; b++)
#pragma unroll
        for (int q = 0; q < QB; q++)
          if (col[b][q] >= 0) atomicOr(&map[(j0 + b) * W + col[b][q] / 32], 1u << (col[b][q] % 32));
    }
  __syncwarp();
  return map;
}

%end
/* The records of this thread's two fragment rows (row, row + 8) in column tile tn: their sums
 * sd over the row's four lanes (lane % 4, shuffles in a fixed order), then lane 0 of the four
 * writes m, d = sd and the teacher's part (tile_teacher): its mass, with pass 1's neutral
 * teacher (max, sum-exp), or the teacher logits' (max, sum-exp) with sp 0, as pass 1 writes
 * them, for the rows below M. */
%-- HARD: tile_records also takes the CE's (max, sum-exp) of z' and the label's z' of each row;
%-- SUPPORT the sparse teacher's support sums (tile_support); SPLIT_ON the sum-exp on the
%-- support apart (don) and OWN the support's own (max, sum-exp) (tile_stats)
%local CEP = (HARD and ", const float (&mh)[2], float (&dh)[2], float (&zy)[2]" or "")
%  .. (SUPPORT and ", float (&ps)[2], float (&pw)[2]" or "")
%  .. (SPLIT_ON and ", float (&don)[2]" or "") .. (OWN and ", float (&mo)[2], float (&dno)[2]" or "")
%local CEA = (HARD and ", mh, dh, zy" or "") .. (SUPPORT and ", ps, pw" or "")
%  .. (SPLIT_ON and ", don" or "") .. (OWN and ", mo, dno" or "")
__device__ __forceinline__ void tile_records(const float (&m)[2], float (&sd)[2], const tstat_t& ts,
                                             int row, int M,
                                             float* __restrict__ part, int tiles_n, int tn,
                                             int lane{{ CEP }}) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    sd[h] += __shfl_xor_sync(0xffffffffu, sd[h], 1);
    sd[h] += __shfl_xor_sync(0xffffffffu, sd[h], 2);
%if HARD then
    dh[h] += __shfl_xor_sync(0xffffffffu, dh[h], 1);
    dh[h] += __shfl_xor_sync(0xffffffffu, dh[h], 2);
    zy[h] += __shfl_xor_sync(0xffffffffu, zy[h], 1); /* one lane's at most: exact */
    zy[h] += __shfl_xor_sync(0xffffffffu, zy[h], 2);
%end
%if SUPPORT then
    ps[h] += __shfl_xor_sync(0xffffffffu, ps[h], 1);
    ps[h] += __shfl_xor_sync(0xffffffffu, ps[h], 2);
    pw[h] += __shfl_xor_sync(0xffffffffu, pw[h], 1);
    pw[h] += __shfl_xor_sync(0xffffffffu, pw[h], 2);
%end
%if SPLIT_ON then
    don[h] += __shfl_xor_sync(0xffffffffu, don[h], 1);
    don[h] += __shfl_xor_sync(0xffffffffu, don[h], 2);
%end
%if OWN then
#pragma unroll
    for (int o = 1; o <= 2; o *= 2) { /* the support's own (max, sum-exp), merged as pass 1's */
      md_t mine, got;
      mine.m = mo[h], mine.d = dno[h];
      got.m = __shfl_xor_sync(0xffffffffu, mo[h], o);
      got.d = __shfl_xor_sync(0xffffffffu, dno[h], o);
      const md_t r = md_merge(mine, got);
      mo[h] = r.m, dno[h] = r.d;
    }
%end
  }
  if (lane % 4) return;
  /* a record is one 32-byte sector: written whole in two 16-byte stores (scalar slot stores
   * from 8 rows at once were 8 sectors an instruction, 4 bytes each: 43% of E16's global
   * sectors excessive on the H200, run 74's ncu), its unnamed slots 0 */
  static_assert(PART_FLOATS == 8, "tile_records writes a record as two float4");
  const bool whole = ((u64)part & 31) == 0;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    if (row + 8 * h >= M) continue;
    float v[PART_FLOATS];
#pragma unroll
    for (int k = 0; k < PART_FLOATS; k++) v[k] = 0.0f;
%if SPARSE then
    (void)ts;
%  if SPLIT_ON then
    /* the sparse rows' record: the support's columns' sum-exp apart (pass 1's bitmap), the
     * rest off it */
    v[PART_M] = m[h], v[PART_D_ON] = don[h], v[PART_D_OFF] = sd[h];
%  else
    /* the sparse rows' record: no column is on the support for the forward KL's tails none and
     * renorm (templates/sparse_rows.cu.lua's pass 1 without a bitmap), so all of d is off it */
    v[PART_M] = m[h], v[PART_D_ON] = 0.0f, v[PART_D_OFF] = sd[h];
%  end
%  if OWN then
    v[PART_MO] = mo[h], v[PART_DNO] = dno[h];
%  end
%  if SUPPORT then
    v[PART_PS] = ps[h], v[PART_PW] = pw[h]; /* the support's part of the loss (tile_support) */
%  end
%elseif TLOGITS then
    v[PART_M] = m[h], v[PART_D] = sd[h], v[PART_SP] = 0.0f; /* sum p = 1: row_finish's */
    v[PART_MT] = ts.a[h], v[PART_DT] = ts.b[h];
%else
    v[PART_M] = m[h], v[PART_D] = sd[h], v[PART_SP] = ts.a[h];
    v[PART_MT] = 0.0f, v[PART_DT] = 1.0f;
%end
%if HARD then
    v[PART_MH] = mh[h], v[PART_DH] = dh[h], v[PART_S] = zy[h];
%end
    float* rec = part + ((i64)(row + 8 * h) * tiles_n + tn) * PART_FLOATS;
%if MASS_WARPS then
    /* the teacher's slots (sp, mt, dt) are the producer's warps' (mass_warps): this epilogue's
     * own, m and d side by side (and HARD's) */
    (void)ts;
    static_assert(PART_D == PART_M + 1 && PART_M % 2 == 0, "m, d: one 8-byte store");
    if (whole)
      reinterpret_cast<float2*>(rec)[PART_M / 2] = make_float2(v[PART_M], v[PART_D]);
    else
      rec[PART_M] = v[PART_M], rec[PART_D] = v[PART_D];
%  if HARD then
    rec[PART_MH] = v[PART_MH], rec[PART_DH] = v[PART_DH], rec[PART_S] = v[PART_S];
%  end
    continue;
%end
    if (whole) {
      reinterpret_cast<float4*>(rec)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(rec)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
#pragma unroll
      for (int k = 0; k < PART_FLOATS; k++) rec[k] = v[k];
    }
  }
}

%if not E16 then
/* The pass-1 record of each of this consumer warp's 16 rows (r0 + lane / 4 and 8 more, see
 * wgmma_ss) in column tile tn (columns c0 ..): the thread's BN / 4 columns of each row first,
 * then the row's 4 lanes (lane % 4) merged by shuffles, in the same order on every run. The
 * row's max comes first, so that each exp takes s - m once (pass 1 keeps an online (m, d)).
 * The teacher's part: tile_teacher. */
__device__ __forceinline__ void tile_stats(const float* d, int r0, int c0, int M, int N,
                                           float alpha,{{ TEP }}{{ TBP }}
                                           float* __restrict__ part, i64 row0, int tiles_n,
                                           int tn, int lane{{ SPLIT_ON and ", unsigned char* scratch" or "" }}) {
%-- (MASS_WARPS: the producer's warps write the teacher's slots)
%  if SPARSE or MASS_WARPS then
  (void)row0;
  const tstat_t ts = {};
%  else
  const tstat_t ts =
      tile_teacher(teacher,{{ TBA }} row0, r0, c0, M, N, lane, STATS_INV_TT(STATS_INV_T));
%  end
  const int row = r0 + lane / 4, col = c0 + 2 * (lane % 4);
  /* fragment element 4 i + e: row + 8 (e / 2), column col + 8 i + e % 2 */
  float m[2];
  tile_row_max(d, col, N, alpha * STATS_INV_T, m);
  float sd[2] = {0.0f, 0.0f};
%  if SPLIT_ON then
  /* the support's columns apart (its bitmap, support_map): their sum-exp in don (and, OWN,
   * their own (max, sum-exp) online, as pass 1's acc_add keeps it), the others' in sd (d_off) */
  constexpr int W = BN / 32;
  const u32* map = support_map(r0, c0, M, N, ids, row0, lane, scratch);
  const int q4 = lane % 4;
  float don[2] = {0.0f, 0.0f};
%    if OWN then
  float mo[2] = {KL_NEG_INF, KL_NEG_INF}, dno[2] = {0.0f, 0.0f};
%    end
#pragma unroll
  for (int h = 0; h < 2; h++) {
    u32 w[W];
#pragma unroll
    for (int t = 0; t < W; t++) w[t] = map[(lane / 4 + 8 * h) * W + t];
#pragma unroll
    for (int i = 0; i < BN / 8; i++)
#pragma unroll
      for (int e = 0; e < 2; e++)
        if (col + 8 * i + e < N) {
          const float sc = d[4 * i + 2 * h + e] * alpha * STATS_INV_T, x = fexp(sc - m[h]);
          if ((w[i / 4] >> (8 * (i % 4) + 2 * q4 + e)) & 1u) {
            don[h] += x;
%    if OWN then
            if (sc > mo[h]) dno[h] = dno[h] * fexp(mo[h] - sc) + 1.0f, mo[h] = sc;
            else dno[h] += fexp(sc - mo[h]);
%    end
          } else {
            sd[h] += x;
          }
        }
  }
  __syncwarp(); /* the map's reads are done before the next tile clears it */
%  else
#pragma unroll
  for (int i = 0; i < BN / 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      if (col + 8 * i + (e & 1) < N)
        sd[e >> 1] += fexp(d[4 * i + e] * alpha * STATS_INV_T - m[e >> 1]);
%  end
  tile_records(m, sd, ts, row, M, part, tiles_n, tn, lane{{ CEA }});
}
%end

%if E16 then
/* E16: this thread's fragment (BN / 2 accumulators, tile columns from c0) as the scores
 * s = (alpha acc + b) / T in place, b the column's bias (BDT), capped (SOFTCAP: c tanh(z / c)
 * before the 1 / T) as the rows' load_cols makes them from z; E and the records are made of
 * them. */
__device__ __forceinline__ void tile_scores(float* d, int c0, int N, float alpha, float inv_t,
%  if P.BDT then
                                            const bias_t* __restrict__ bias,
%  end
                                            int lane) {
  const int col = c0 + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < BN / 8; i++)
#pragma unroll
    for (int k = 0; k < 2; k++) {
%  if P.BDT then
      const float b = col + 8 * i + k < N ? to_f32(bias[col + 8 * i + k]) : 0.0f;
%  end
#pragma unroll
      for (int h = 0; h < 2; h++) {
%  if P.SOFTCAP then
        const float z = d[4 * i + 2 * h + k] * alpha{{ P.BDT and " + b" or "" }};
        d[4 * i + 2 * h + k] =
            {{ f32(P.SOFTCAP) }} * tanhf(z * {{ f32(1.0 / P.SOFTCAP) }}) * inv_t;
%  else
        d[4 * i + 2 * h + k] = (d[4 * i + 2 * h + k] * alpha{{ P.BDT and " + b" or "" }}) * inv_t;
%  end
      }
    }
}

/* A 4 x 4 transpose of u32s within each quad (lane % 4): lane q's w[j] was the pair of
 * fragment column group i0 + j (columns 8 (i0 + j) + 2 q, + 1); after it, lane q's w[j] is lane
 * j's pair of group i0 + q, so lane q holds columns 8 (i0 + q) .. + 7 of its row in order. Two
 * butterfly steps (lane bit 0, then bit 1), each trading the two words whose index bit differs
 * from the lane's. */
__device__ __forceinline__ void quad_transpose(u32 (&w)[4], int lane) {
  const bool odd = lane & 1, hi = lane & 2;
#pragma unroll
  for (int t = 0; t < 2; t++) {
    const u32 x = __shfl_xor_sync(0xffffffffu, odd ? w[2 * t] : w[2 * t + 1], 1);
    if (odd) w[2 * t] = x; else w[2 * t + 1] = x;
  }
#pragma unroll
  for (int t = 0; t < 2; t++) {
    const u32 x = __shfl_xor_sync(0xffffffffu, hi ? w[t] : w[t + 2], 2);
    if (hi) w[t] = x; else w[t + 2] = x;
  }
}

%  if SUPPORT then
/* The sparse teacher's part of the records of this consumer warp's 16 rows r0 + j in the tile
 * (E16), so that pass 2 takes the loss's cross term sum_k p_k (s_k - lse) from the exact fp32
 * scores rather than from x's fp16. Over the warp's support bitmap (support_map), each lane
 * tests its fragment's columns (the accumulators by constant index, as everywhere else). The
 * marked ones (about one in V / TOPK) go in rounds: round r takes each lane's r-th marked element
 * (its score and column, selected by constant index), then for each lane holding one (a ballot,
 * in lane order) the warp finds that column among the row's ids and sums their p (the value, or
 * exp of a log-probability, as the rows' gather takes it; duplicates each count, as there), a
 * lane's ids and values (up to 8 of each) loaded at once (one round trip to L2); the element's
 * lane adds p (s - m) to its ps and p to its pw (m its row's tile max). A lane's sums take its
 * elements in column order, as the search per element before them did. One copy of the search
 * a row half, not one a fragment element: the kernel's code stays small. The quad's lanes are
 * summed in tile_records. */
__device__ __forceinline__ void tile_support(const float* d, int r0, int c0, int M, int N,
                                             const id_t* __restrict__ ids,
                                             const val_t* __restrict__ vals, i64 row0, int lane,
                                             const float (&m)[2], float (&ps)[2], float (&pw)[2],
                                             unsigned char* scratch) {
  constexpr int W = BN / 32, KR = (TOPK + 31) / 32, QL = KR < 8 ? KR : 8;
  u32* map = support_map(r0, c0, M, N, ids, row0, lane, scratch);
  const int q4 = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    u32 w[W];
    int marked = 0; /* this lane's marked elements in the row half */
#pragma unroll
    for (int t = 0; t < W; t++) {
      w[t] = map[(lane / 4 + 8 * h) * W + t];
      marked += __popc(w[t] & (0x03030303u << (2 * q4))); /* columns 8 i + 2 q4 + {0, 1} */
    }
    const int rounds = __reduce_max_sync(0xffffffffu, (unsigned)marked);
#pragma unroll 1
    for (int r = 0; r < rounds; r++) {
      float sc = 0.0f;
      int cc = -1, seen = 0; /* the r-th marked element's score and column in the tile */
#pragma unroll
      for (int i = 0; i < BN / 8; i++)
#pragma unroll
        for (int e = 0; e < 2; e++)
          if ((w[i / 4] >> (8 * (i % 4) + 2 * q4 + e)) & 1u) {
            if (seen == r) sc = d[4 * i + 2 * h + e], cc = 8 * i + 2 * q4 + e;
            seen++;
          }
      u32 hits = __ballot_sync(0xffffffffu, cc >= 0);
      while (hits) {
        const int src = __ffs(hits) - 1;
        hits &= hits - 1;
        /* the marked element of lane src: its row and column; every lane looks at its ids */
        const i64 rs = row0 + r0 + src / 4 + 8 * h;
        const int c = c0 + __shfl_sync(0xffffffffu, cc, src);
        float p = 0.0f;
#pragma unroll 1
        for (int q0 = 0; q0 < KR; q0 += QL) { /* once for TOPK <= 256 */
          i64 id[QL];
          float v[QL];
#pragma unroll
          for (int q = 0; q < QL; q++) { /* every load first: one round trip */
            const int k = 32 * (q0 + q) + lane;
            id[q] = k < TOPK ? (i64)ids[rs * TOPK + k] : -1;
            v[q] = k < TOPK ? to_f32(vals[rs * TOPK + k]) : 0.0f;
          }
#pragma unroll
          for (int q = 0; q < QL; q++)
            if (id[q] == c) {
%    if P.VALUES == "logprobs" then
              p += fexp(v[q]);
%    else
              p += v[q];
%    end
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) p += __shfl_xor_sync(0xffffffffu, p, o);
        /* a -inf score (a masking bias) stays -inf: the loss is +inf, as the gather makes it */
        if (lane == src && p != 0.0f) {
          ps[h] += p * (sc == KL_NEG_INF ? KL_NEG_INF : sc - m[h]);
          pw[h] += p;
        }
      }
    }
  }
  __syncwarp(); /* the map's reads are done before the next tile clears it */
}

%  end
/* E16: this consumer warp's 16 rows of the tile as fp16 x = s - m at E + row lde + col, from
 * the scores d (tile_scores). With part (fused, forward): m the row's max over the tile, and
 * the rows' records (m, the teacher's mass as tile_stats takes them, d the sum of exp(x) of the
 * x as rounded, so that the q pass 2 takes from them sum to 1 over the row as closely as fp32
 * does). Without (backward): m the row's saved lse (rowstat + (row0 + row) rsf; an ignored row's
 * is 0 and its x is never read), no records. One loop stores x for both, so that one function's
 * registers serve. */
__device__ __forceinline__ void tile_e16(const float* d, int r0, int c0, int M, int N,
                                        {{ TEP }}{{ TBP }}
                                         float* __restrict__ part, i64 row0, int tiles_n, int tn,
                                         int lane, f16_t* __restrict__ E, i64 lde,
%if HARD then
                                         const void* __restrict__ labels, int labels_is64,
%end
                                         const float* __restrict__ rowstat, int rsf, float inv_t{{ SUPPORT and ", unsigned char* scratch" or "" }}) {
  const int row = r0 + lane / 4, col = c0 + 2 * (lane % 4);
  /* fragment element 4 i + e: row + 8 (e / 2), column col + 8 i + e % 2 */
  float m[2];
  tstat_t ts = {};
%if SUPPORT then
  if (part) {
    tile_row_max(d, col, N, 1.0f, m);
  } else {
%elseif MASS_WARPS then
  if (part) { /* the teacher's slots: the producer's warps' (mass_warps) */
    tile_row_max(d, col, N, 1.0f, m);
  } else {
%else
  if (part) {
    ts = tile_teacher(teacher,{{ TBA }} row0, r0, c0, M, N, lane, STATS_INV_TT(inv_t));
    tile_row_max(d, col, N, 1.0f, m);
  } else {
%end
#pragma unroll
    for (int h = 0; h < 2; h++)
      m[h] = row + 8 * h < M ? rowstat[(row0 + row + 8 * h) * rsf] : 0.0f;
  }
  const bool pairs = (lde & 1) == 0 && ((u64)E & 3) == 0;
  float sd[2] = {0.0f, 0.0f};
%if HARD then
  /* the CE's records (part only): z' = s T as the rows' pass 1 makes it, its tile max mh (the
   * scores' max times T), the sum of exp(z' - mh) from the fp32 s, and z'_y where the row's
   * label is one of this thread's columns */
  const float tz = 1.0f / inv_t;
  float dh[2] = {0.0f, 0.0f}, zy[2] = {0.0f, 0.0f};
  int y[2] = {-1, -1};
  if (part) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const i64 r = row0 + row + 8 * h;
      if (labels && row + 8 * h < M) {
        const i64 l = labels_is64 ? ((const i64*)labels)[r] : (i64)((const int*)labels)[r];
        y[h] = l >= c0 && l < c0 + BN && l < N ? (int)l : -1;
      }
    }
  }
%end
  /* 16-byte runs where E and its stride allow: a quad's pairs of four column groups
   * transposed (quad_transpose), each lane then holds 8 columns of its row; else the pairs */
  const bool runs = (lde & 7) == 0 && ((u64)E & 15) == 0;
#pragma unroll
  for (int i0 = 0; i0 < BN / 8; i0 += 4)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = row + 8 * h;
      u32 w[4];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int i = i0 + j, c = col + 8 * i;
        f16_t e[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
          /* x = s - m <= 0, kept finite in fp16 (65504 nats: nothing a softmax can tell apart);
           * a NaN score stays NaN (no fmaxf), a tile whose scores are all -inf (a masking bias)
           * reads as the floor, not as -inf - -inf */
          const float sc = d[4 * i + 2 * h + k];
          float x = sc - m[h];
          if (m[h] == KL_NEG_INF && sc == KL_NEG_INF) x = -65504.0f;
%if EXPE then
          e[k] = from_f32<f16_t>(fexp(x < -65504.0f ? -65504.0f : x)); /* E' = exp(x) */
          if (part && c + k < N) sd[h] += to_f32(e[k]); /* d: the sum of E' as rounded */
%else
          e[k] = from_f32<f16_t>(x < -65504.0f ? -65504.0f : x);
          if (part && c + k < N) sd[h] += fexp(to_f32(e[k])); /* d: the records' only */
%end
%if HARD then
          /* a tile whose scores are all -inf (a masking bias) adds nothing, as in pass 1 */
          if (part && c + k < N && m[h] != KL_NEG_INF) {
            const float z = sc * tz;
            dh[h] += fexp(z - m[h] * tz); /* mh = m T: the product is monotonic */
            if (c + k == y[h]) zy[h] = z;
          }
%end
        }
        w[j] = (u32)e[0].x | ((u32)e[1].x << 16);
        if (runs || r >= M || c >= N) continue;
        f16_t* p = E + (i64)r * lde + c;
        if (pairs && c + 1 < N) {
          *reinterpret_cast<u32*>(p) = w[j];
        } else {
          p[0] = e[0];
          if (c + 1 < N) p[1] = e[1];
        }
      }
      if (!runs) continue;
      /* the pairs stored 16 bytes a row an instruction, half sectors: 2x E's sectors (run 74) */
      quad_transpose(w, lane);
      const int c = c0 + 8 * (i0 + lane % 4);
      if (r >= M || c >= N) continue;
      f16_t* p = E + (i64)r * lde + c;
      if (c + 8 <= N) {
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
#pragma unroll
        for (int k = 0; k < 8; k++)
          if (c + k < N) p[k].x = (u16)(w[k >> 1] >> (16 * (k & 1)));
      }
    }
%if HARD then
  const float mh[2] = {m[0] * tz, m[1] * tz};
%end
%if SUPPORT then
  /* the support's sums (part only), after E's stores: fewer registers live through them */
  float ps[2] = {0.0f, 0.0f}, pw[2] = {0.0f, 0.0f};
  if (part) tile_support(d, r0, c0, M, N, ids, vals, row0, lane, m, ps, pw, scratch);
%end
  if (part) tile_records(m, sd, ts, row, M, part, tiles_n, tn, lane{{ CEA }});
}

%end
%  if TEACH then
/* The teacher's part of a tile's epilogue (rows r0 .. r0 + ROWS, columns c0 .. c0 + BN) into
 * L2, evict_last, by the warpgroup's 128 threads (t) as its k-blocks start: by the epilogue
 * its loads hit L2 rather than wait on DRAM with the tensor cores idle. A hint only: a line
 * evicted meanwhile is read again. */
template <int ROWS>
__device__ __forceinline__ void prefetch_teacher(const teach_t* __restrict__ teacher, i64 row0,
                                                 int r0, int c0, int M, int N, int t) {
  constexpr int LINE = 128 / (int)sizeof(teach_t), LINES = (BN + LINE - 1) / LINE;
#pragma unroll
  for (int i = t; i < ROWS * LINES; i += 128) {
    const int r = r0 + i / LINES, c = c0 + (i % LINES) * LINE;
    if (r < M && c < N)
      asm volatile("prefetch.global.L2::evict_last [%0];"
                   :
                   : "l"(teacher + TROW(row0, r) * TLD + c)
                   : "memory");
  }
}
%  end
%end

/* One tile's accumulators to C: rows r0 + {0, 8} of this thread's fragment, columns
 * c0 + 8 i + {0, 1} (see wgmma_ss), alpha applied, `acc` adding the old value (BETA, or a
 * slice after the first). */
__device__ __forceinline__ void store_pair(out_t* __restrict__ C, i64 ldc, int row, int col,
                                           int M, int N, float alpha, float v0, float v1,
                                           int acc) {
  if (row >= M || col >= N) return;
  out_t* p = C + (i64)row * ldc + col;
  v0 *= alpha, v1 *= alpha;
  if (acc) {
    v0 += to_f32(p[0]);
    if (col + 1 < N) v1 += to_f32(p[1]);
  }
%if P.OUT == "f32" then
  if (col + 1 < N && (ldc & 1) == 0) {
    float2 v;
    v.x = v0, v.y = v1;
    *reinterpret_cast<float2*>(p) = v;
  } else {
    p[0] = v0;
    if (col + 1 < N) p[1] = v1;
  }
%else
  if (col + 1 < N && (ldc & 1) == 0) {
    *reinterpret_cast<u32*>(p) = pack2_{{ P.OUT }}(v0, v1);
  } else {
    p[0] = from_f32<out_t>(v0);
    if (col + 1 < N) p[1] = from_f32<out_t>(v1);
  }
%end
}
%if STAGED then

/* The staged epilogue's scratch: byte offset of fp32 (row, col) in a warp's 16 x 64 block, two
 * 16 x 32 halves of 2 KB in the layout TMA's 128-byte swizzle gives a box of 32 floats x 16
 * rows (16-byte chunk index XOR row % 8). Writes of the fragment's pairs meet 2-way bank
 * conflicts at most; reads of 16-byte chunks along a row none. */
__device__ __forceinline__ u32 stage_off(int row, int col) {
  return (u32)((col >> 5) * 2048 + row * 128 + ((((col >> 2) & 7) ^ (row & 7)) << 4) +
               ((col & 3) << 2));
}

/* The staged epilogue's runs: {{ VEC }} consecutive outputs of one row, 16 bytes of C. A run is
 * whole when `vec` (C 16-byte aligned, ldc a multiple of {{ VEC }}) holds and it lies inside N:
 * one 16-byte load (run_load, all of a block's issued before any store: a store may alias
 * nothing the loads read, so they need not wait) and one 16-byte store; else element by
 * element up to N. */
__device__ __forceinline__ bool run_whole(int row, int col, int M, int N, int vec) {
  return row < M && vec && col + {{ VEC - 1 }} < N;
}

__device__ __forceinline__ {{ VT }} run_load(const out_t* __restrict__ C, i64 ldc, int row,
                                            int col) {
%  if STREAM and P.OUT == "f32" then
  const uint4 u = ld_cs_v4(C + (i64)row * ldc + col);
  return make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z),
                     __uint_as_float(u.w));
%  elseif STREAM then
  return ld_cs_v4(C + (i64)row * ldc + col);
%  else
  return *reinterpret_cast<const {{ VT }}*>(C + (i64)row * ldc + col);
%  end
}

/* The run at (row, col): v (scratch values) times alpha, plus old (C's, when `acc` and the run
 * is whole) or C's elements read now (a partial run). */
__device__ __forceinline__ void run_store(out_t* __restrict__ C, i64 ldc, int row, int col,
                                          int M, int N, float alpha, float* v, int acc,
                                          bool whole, {{ VT }} old) {
  if (row >= M) return;
  out_t* p = C + (i64)row * ldc + col;
#pragma unroll
  for (int e = 0; e < {{ VEC }}; e++) v[e] *= alpha;
  if (whole) {
%  if P.OUT == "f32" then
    if (acc) v[0] += old.x, v[1] += old.y, v[2] += old.z, v[3] += old.w;
%    if STREAM then
    st_cs_v4(p, make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                           __float_as_uint(v[3])));
%    else
    float4 o;
    o.x = v[0], o.y = v[1], o.z = v[2], o.w = v[3];
    *reinterpret_cast<float4*>(p) = o;
%    end
%  else
    if (acc) {
      const u32 w[4] = {old.x, old.y, old.z, old.w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        out_t lo, hi;
        lo.x = (u16)(w[e] & 0xffffu), hi.x = (u16)(w[e] >> 16);
        v[2 * e] += to_f32(lo), v[2 * e + 1] += to_f32(hi);
      }
    }
    uint4 o;
    o.x = pack2_{{ P.OUT }}(v[0], v[1]), o.y = pack2_{{ P.OUT }}(v[2], v[3]);
    o.z = pack2_{{ P.OUT }}(v[4], v[5]), o.w = pack2_{{ P.OUT }}(v[6], v[7]);
%    if STREAM then
    st_cs_v4(p, o);
%    else
    *reinterpret_cast<uint4*>(p) = o;
%    end
%  end
    return;
  }
#pragma unroll
  for (int e = 0; e < {{ VEC }}; e++)
    if (col + e < N) p[e] = from_f32<out_t>(acc ? v[e] + to_f32(p[e]) : v[e]);
}
%end

/* One consumer warp's 16 rows of a tile to C: rows r0 .. r0 + 15 from row r0 of the tile's
 * slice, columns c0 .. c0 + BN - 1, from the fragment d (BN / 2 floats, wgmma_ss's layout). */
__device__ __forceinline__ void store_rows(out_t* __restrict__ C, i64 ldc, int r0, int c0, int M,
                                           int N, float alpha, const float* d, int acc,
                                           unsigned char* scratch, int vec, int lane) {
%if STAGED then
%  -- lanes per row (16-byte runs of VEC outputs), rows per instruction, instructions
%  local LPR = 64 // VEC
%  local RPI = 32 // LPR
%  local ITS = 16 // RPI
  /* this lane's row and column in each instruction's rows */
  const int lr = lane / {{ LPR }}, lc = {{ VEC }} * (lane % {{ LPR }});
#pragma unroll
  for (int j = 0; j < BN / 64; j++) {
    /* C's runs of this 64-column block first: their latency overlaps the staging below */
    {{ VT }} old[{{ ITS }}];
    bool whole[{{ ITS }}];
#pragma unroll
    for (int it = 0; it < {{ ITS }}; it++) {
      const int row = r0 + {{ RPI }} * it + lr, col = c0 + 64 * j + lc;
      whole[it] = run_whole(row, col, M, N, vec);
      old[it] = acc && whole[it] ? run_load(C, ldc, row, col) : {{ VT }}{};
    }
    __syncwarp(); /* the previous block's reads of the scratch are done */
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int col = 8 * i + 2 * (lane & 3), row = lane >> 2;
      const float* f = d + 4 * (8 * j + i);
      *reinterpret_cast<float2*>(scratch + stage_off(row, col)) = make_float2(f[0], f[1]);
      *reinterpret_cast<float2*>(scratch + stage_off(row + 8, col)) = make_float2(f[2], f[3]);
    }
    __syncwarp();
    /* {{ LPR }} lanes a row: {{ RPI }} rows an instruction, {{ ITS }} instructions */
#pragma unroll
    for (int it = 0; it < {{ ITS }}; it++) {
      const int row = {{ RPI }} * it + lr;
%  if P.OUT == "f32" then
      const float4 q = *reinterpret_cast<const float4*>(scratch + stage_off(row, lc));
      float v[4] = {q.x, q.y, q.z, q.w};
%  else
      const float4 a = *reinterpret_cast<const float4*>(scratch + stage_off(row, lc));
      const float4 b = *reinterpret_cast<const float4*>(scratch + stage_off(row, lc + 4));
      float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
%  end
      run_store(C, ldc, r0 + row, c0 + 64 * j + lc, M, N, alpha, v, acc, whole[it], old[it]);
    }
  }
%else
  (void)scratch, (void)vec;
  const int row = r0 + lane / 4, col = c0 + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < BN / 8; i++) {
    store_pair(C, ldc, row, col + 8 * i, M, N, alpha, d[4 * i], d[4 * i + 1], acc);
    store_pair(C, ldc, row + 8, col + 8 * i, M, N, alpha, d[4 * i + 2], d[4 * i + 3], acc);
  }
%end
}

/* The persistent schedule's tile t as (row tile, column tile), RASTER's index fastest. */
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int* tm, int* tn) {
%if P.RASTER == "m" then
  *tm = t % tiles_m, *tn = t / tiles_m;
%elseif P.RASTER == "n" then
  *tn = t % tiles_n, *tm = t / tiles_n;
%else
  /* group = 16 row tiles (fewer in the last group) x every column tile; row fastest inside */
  const int group = t / (16 * tiles_n), first = 16 * group;
  const int rows = tiles_m - first < 16 ? tiles_m - first : 16;
  const int in_group = t - first * tiles_n;
  *tm = first + in_group % rows, *tn = in_group / rows;
%end
}

%if DYN then
/* TILES dynamic: the CTA's tile ids pass from its producer to its consumers through a ring of
 * TID_DEPTH slots, slot j % TID_DEPTH holding the CTA's j-th tile (tiles or more: none left),
 * each with a full barrier (the producer's one arrival, release: the id written before it) and an
 * empty one (one arrival per warp that reads the slot). CLUSTER 2: rank 0's producer posts to
 * both CTAs, the peer's slot by st.async counted on the peer's full barrier, and every reader of
 * either CTA frees the slot on rank 0's empty barrier. */
#define TID_DEPTH 4
__device__ __forceinline__ void post_tile(int* ids, u64* full, u64* empty, int j, int t) {
  const int s = j % TID_DEPTH;
  mbar_wait(&empty[s], ((u32)(j / TID_DEPTH) & 1) ^ 1);
  ids[s] = t;
  mbar_arrive(&full[s]);
%if CL == 2 then
  mbar_arrive_expect_tx_cluster(&full[s], 1, 4);
  st_async_cluster(&ids[s], (u32)t, &full[s], 1);
%end
}

/* A reader's arrival on the slot's empty barrier: this CTA's (CLUSTER 2: rank 0's). */
__device__ __forceinline__ void free_tile(u64* empty) {
%if CL == 2 then
  mbar_arrive_cluster(empty, 0);
%else
  mbar_arrive(empty);
%end
}

/* The j-th id, read by a warp (lane 0 frees the slot) or by one thread (lane -1: the cluster's
 * rank-1 producer, alone in its warp). */
__device__ __forceinline__ int take_tile(const int* ids, u64* full, u64* empty, int j, int lane) {
  const int s = j % TID_DEPTH;
%if CL == 2 then
  mbar_wait_cluster(&full[s], (u32)(j / TID_DEPTH) & 1);
%else
  mbar_wait(&full[s], (u32)(j / TID_DEPTH) & 1);
%end
  const int t = ids[s];
  if (lane < 0) {
    free_tile(&empty[s]);
    return t;
  }
  __syncwarp();
  if (lane == 0) free_tile(&empty[s]);
  return t;
}

/* The producer's last act (CLUSTER 2: rank 0's): every claim of this CTA made, it counts itself
 * done; the last one done puts the counter pair back to zero for the next launch (none claims
 * after its count, and each count follows its claims: the fence before the count releases them,
 * the one after the last count acquires every other CTA's, so the reset follows every claim).
 * Safe between whole kernels on one stream only: a launch overlapping this one (programmatic
 * dependent launch, two calls sharing a workspace) would race the reset. */
__device__ __forceinline__ void tiles_done(unsigned* sched) {
  __threadfence();
  if (atomicAdd(sched + 1, 1u) == gridDim.x / {{ CL }} - 1) {
    __threadfence();
    atomicExch(sched, 0u), atomicExch(sched + 1, 0u);
  }
}

%end
/* A consumed stage back to its producers: every consumer thread (CLUSTER 1; ARRIVE warp: each
 * warp once), or each warp once on the barrier of both CTAs of the cluster (CLUSTER 2: both
 * producers write into this stage). */
__device__ __forceinline__ void release_stage(u64* bar, int lane) {
%if CL == 1 and ARRIVE_WARP then
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
%elseif CL == 1 then
  (void)lane;
  mbar_arrive(bar);
%else
  __syncwarp();
  if (lane == 0) mbar_arrive_cluster(bar, 0), mbar_arrive_cluster(bar, 1);
%end
}
%if GOP then

%local GWP = GP and ", u32 q, float glo, float ghi" or ""
/* GOP: one 32-bit word of E' (two fp16, lo in the low half) as G (IN): G = f E' - g P in fp32,
 * one fma with the teacher's word q, rounded once; the halves' factors (and scales) apart, as
 * the register form's tn fragments hold two K rows a word (the host's model in gpu_gemm.c
 * forms G with these operations). */
__device__ __forceinline__ u32 g_word(u32 e, float flo, float fhi{{ GWP }}) {
  float lo = flo * to_f32(f16_t{(u16)(e & 0xffffu)});
  float hi = fhi * to_f32(f16_t{(u16)(e >> 16)});
%if GP then
%  local pt = P.PDT == "bf16" and "bf16_t" or "f16_t"
  lo = fmaf(-glo, to_f32({{ pt }}{(u16)(q & 0xffffu)}), lo);
  hi = fmaf(-ghi, to_f32({{ pt }}{(u16)(q >> 16)}), hi);
%end
  return {{ P.IN == "bf16" and "pack2_bf16" or "pack2_f16" }}(lo, hi);
}
%if GRS then

%local GRP = GP and ", float (&g)[GRN], const float* __restrict__ gpr" or ""
/* GRS: the factors of this thread's fragments for k-block kb, 0 past A (as TMA's zeros). nn:
 * A's rows first + 16 w + t / 4 + {0, 8} (w the warp in its warpgroup, t the lane), factor tile
 * kb BK / FW; tn: the k-block's rows kb BK + 16 k + 2 (t % 4) + {0, 1, 8, 9} of k16 step k (A's
 * K: the chunk's rows), the factor tile of the warpgroup's 64 columns of V from `first`. */
__device__ __forceinline__ void g_rfactors(float (&f)[GRN]{{ GRP }},
                                           const float* __restrict__ gfac, i64 fld, int first,
                                           int kb, int M, int K, int tid) {
  const int lane = tid % 32;
%if TN then
#pragma unroll
  for (int k = 0; k < BK / 16; k++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int r = kb * BK + 16 * k + 2 * (lane % 4) + (j & 1) + 8 * (j >> 1);
      const bool in = first < M && r < K;
      f[4 * k + j] = in ? gfac[(i64)r * fld + first / FW] : 0.0f;
%if GP then
      g[4 * k + j] = in ? gpr[r] : 0.0f;
%end
    }
%else
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = first + 16 * (tid / 32) + lane / 4 + 8 * h;
    const bool in = r < M;
    f[h] = in ? gfac[(i64)r * fld + kb * BK / FW] : 0.0f;
%if GP then
    g[h] = in ? gpr[r] : 0.0f;
%end
  }
%end
}

/* GRS: this thread's A fragments of a stage's 4 k16 steps, E' (fp16) -> G (IN) in registers:
 * G = f E' - g P (g_word). a0 (p0): the warpgroup's slice
 * of the stage's A tile (the teacher's). A 128-byte swizzled line keeps its 16-byte chunk c at
 * (c ^ line % 8) 16. nn: A K-major as stored, line = A's row 16 w + lane % 16, chunk 2 k +
 * lane / 16; tn: the stage holds G^T's rows (lines = the k-block's rows), so ldmatrix.trans
 * of line 16 k + lane % 8 + 8 (lane / 16), chunk 2 w + (lane / 8) % 2. Either way register j
 * holds row t / 4 + 8 (j % 2) of the warp's 16, columns 2 (t % 4) + 8 (j / 2) + {0, 1}: nn one
 * factor a register, tn one a half (its two K rows). */
%local GRQ = GP and " u32 p0, const float (&g)[GRN]," or ""
__device__ __forceinline__ void g_frags(u32 (&a)[BK / 16][4], u32 a0, const float (&f)[GRN],{{ GRQ }}
                                        int tid) {
  const int w = tid / 32, lane = tid % 32;
#pragma unroll
  for (int k = 0; k < BK / 16; k++) {
%if TN then
    const int line = 16 * k + lane % 8 + 8 * (lane / 16), chunk = 2 * w + (lane / 8) % 2;
%else
    const int line = 16 * w + lane % 16, chunk = 2 * k + lane / 16;
%end
    const u32 off = (u32)(line * 128 + ((chunk ^ (line % 8)) * 16));
    u32 e[4];
    {{ TN and "ldsm_x4_t" or "ldsm_x4" }}(e, a0 + off);
%if GP then
    u32 q[4];
    {{ TN and "ldsm_x4_t" or "ldsm_x4" }}(q, p0 + off);
%end
#pragma unroll
    for (int j = 0; j < 4; j++) {
%if TN then
      const int lo_i = 4 * k + 2 * (j / 2), hi_i = lo_i + 1;
%else
      const int lo_i = j % 2, hi_i = j % 2;
%end
      a[k][j] = g_word(e[j], f[lo_i], f[hi_i]{{ GP and ", q[j], g[lo_i], g[hi_i]" or "" }});
    }
  }
  /* every fragment defined here, not sunk past the wgmma fence to its use: ptxas serializes the
   * wgmmas (C7513) when a non-wgmma instruction defines a wgmma's input inside its pipeline
   * stage */
#pragma unroll
  for (int k = 0; k < BK / 16; k++)
#pragma unroll
    for (int j = 0; j < 4; j++) asm volatile("" : "+r"(a[k][j])::"memory");
}
%else

/* PTX ISA "bar.sync" with a thread count: the `count` threads (whole warps) that name barrier
 * `id` (1..15; 0 is __syncthreads') wait for each other; their shared-memory writes before it are
 * visible to each other after it. */
template <int COUNT> __device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(COUNT) : "memory");
}

%local GPP = GP and ", float (&g)[GN], const float* __restrict__ gpr" or ""
/* GOP: the factors of this thread's lines of a stage's A tile for k-block kb, 0 for lines past A
 * (TMA filled them with zeros). The thread rewrites chunks tid + 128 n (n < GN), on line
 * l = tid / 8 + 16 n of its warpgroup's slices, which start at row or column `first` of A
 * (tm BM, and c 64 more for a cooperative warpgroup). nn: line l is the chunk's row first + l,
 * its 64 columns of V from kb BK, all in factor tile kb BK / FW; tn: line l is the chunk's row
 * kb BK + l % 64, its columns those of slice l / 64, from first + 64 (l / 64). */
__device__ __forceinline__ void g_factors(float (&f)[GN]{{ GPP }},
                                          const float* __restrict__ gfac, i64 fld, int first,
                                          int kb, int M, int K, int tid) {
#pragma unroll
  for (int n = 0; n < GN; n++) {
    const int l = tid / 8 + 16 * n;
%if TN then
    const int r = kb * BK + l % 64, v0 = first + 64 * (l / 64);
    const bool in = r < K && v0 < M;
%else
    const int r = first + l, v0 = kb * BK;
    const bool in = r < M;
%end
    f[n] = in ? gfac[(i64)r * fld + v0 / FW] : 0.0f;
%if GP then
    g[n] = in ? gpr[r] : 0.0f;
%end
  }
}

/* GOP: this thread's chunks of a stage's A tile rewritten in place, E' (fp16) -> G (IN):
 * G = f E' - g P (g_word; P: the teacher's chunk at the same offset of its tile).
 * A warp's 32 chunks are 512 contiguous bytes: no bank conflict. */
%local GSP = GP and " const unsigned char* p, const float (&g)[GN]," or ""
__device__ __forceinline__ void g_stage(unsigned char* a, const float (&f)[GN],{{ GSP }}
                                        int tid) {
#pragma unroll
  for (int n = 0; n < GN; n++) {
    uint4* at = reinterpret_cast<uint4*>(a + (tid + 128 * n) * 16);
    const uint4 e = *at;
    const u32 ew[4] = {e.x, e.y, e.z, e.w};
%if GP then
    const uint4 q = *reinterpret_cast<const uint4*>(p + (tid + 128 * n) * 16);
    const u32 qw[4] = {q.x, q.y, q.z, q.w};
%end
    u32 o[4];
#pragma unroll
    for (int w = 0; w < 4; w++) {
      o[w] = g_word(ew[w], f[n], f[n]{{ GP and ", qw[w], g[n], g[n]" or "" }});
    }
    *at = make_uint4(o[0], o[1], o[2], o[3]);
  }
}
%end
%end

{{ K.kernel("kl_gemm") }} {
  __shared__ __align__(8) u64 full[STAGES], empty[STAGES];
%if PP then
  __shared__ __align__(8) u64 turn[2]; /* turn[c]: warpgroup c may wait on the ring */
%end
%if DYN then
  __shared__ __align__(8) u64 tid_full[TID_DEPTH], tid_empty[TID_DEPTH];
  __shared__ int tile_ids[TID_DEPTH];
%end
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  /* the swizzled tiles need 1024-byte alignment; the host adds 1024 bytes of slack */
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* tiles_a = smem;                         /* STAGES x BM x BK */
  unsigned char* tiles_b = smem + STAGES * BM * BK * 2;  /* STAGES x BN x BK */
%if GP then
  unsigned char* tiles_p = tiles_b + STAGES * BN * BK * 2; /* STAGES x BM x BK: the teacher's */
%end

  const int wg = threadIdx.x / 128;
  const int rank = {{ CL == 2 and "(int)cluster_rank()" or "0" }};
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&full[s], 1);
%local releases = CL == 2 and 2 * RELEASERS * 4 or ARRIVE_WARP and RELEASERS * 4 or RELEASERS * 128
      mbar_init(&empty[s], {{ releases }});
    }
%if PP then
    mbar_init(&turn[0], 128), mbar_init(&turn[1], 128);
%end
%if DYN then
%-- coop: every consumer warp reads each id; pingpong: the 4 warps of the tile's warpgroup;
%-- CLUSTER 2: both CTAs' readers and rank 1's producer, on rank 0's barrier
%local readers = (PP and 4 or 4 * WGS) * CL + (CL == 2 and 1 or 0)
    for (int s = 0; s < TID_DEPTH; s++)
      mbar_init(&tid_full[s], 1), mbar_init(&tid_empty[s], {{ readers }});
%end
    mbar_init_fence();
  }
%if CL == 1 then
  __syncthreads();
%else
  cluster_sync();
%end

  /* cluster tiles: CLUSTER consecutive row tiles of one column panel */
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int groups_m = (tiles_m + {{ CL }} - 1) / {{ CL }}, tiles = groups_m * tiles_n;
%if DYN then
  const int first = blockIdx.x / {{ CL }}; /* the rest: the counter's */
%else
  const int first = blockIdx.x / {{ CL }}, step = gridDim.x / {{ CL }};
%end
  const int kblocks = (K + BK - 1) / BK;
  int stage = 0;
  u32 phase = 0;
  if (wg == 0) {
%-- (MASS_WARPS' loop too: ptxas keeps it within the 40, no spills; a comment here would change
%-- every GEMM module's pinned bytes)
    regs_release<40>();
    if (threadIdx.x == 0) {
      tma_prefetch_map(&map_a);
      tma_prefetch_map(&map_b);
%if GP then
      tma_prefetch_map(&map_p);
%end
%if P.L2 then
      const u64 pol_a = {{ P.L2 == "keep_a" and "l2_evict_last()" or "l2_evict_first()" }};
      const u64 pol_b = {{ P.L2 == "keep_b" and "l2_evict_last()" or "l2_evict_first()" }};
%end
%if DYN and CL == 2 then
      /* the first tile is the cluster's own; rank 0 claims each next one as this one's loads
       * start and posts it to both CTAs; rank 1 takes it */
      int j = 0;
      for (int t = first;; j++) {
        int next = 0;
        if (rank == 0) {
          post_tile(tile_ids, tid_full, tid_empty, j, t);
          if (t < tiles) next = (int)(gridDim.x / 2) + (int)atomicAdd(sched, 1u);
        } else {
          t = take_tile(tile_ids, tid_full, tid_empty, j, -1);
        }
        if (t >= tiles) break;
%elseif DYN then
      /* the first tile is the CTA's own; each next one is claimed as this one's loads start */
      int j = 0;
      for (int t = first;; j++) {
        post_tile(tile_ids, tid_full, tid_empty, j, t);
        if (t >= tiles) break;
        const int next = (int)gridDim.x + (int)atomicAdd(sched, 1u);
%else
      for (int t = first; t < tiles; t += step) {
%end
        int gm, tn;
        tile_of(t, groups_m, tiles_n, &gm, &tn);
        const int tm = {{ CL }} * gm + rank;
        for (int kb = 0; kb < kblocks; kb++) {
          mbar_wait(&empty[stage], phase ^ 1);
          mbar_arrive_expect_tx(&full[stage], {{ STAGE_BYTES }});
%-- A's tile and (GP) the teacher's, loaded by one code: the same boxes at the same offsets, which
%-- the stage's rewrite (g_stage) pairs element by element
%local A_LOADS = { { "tiles_a", "map_a",
%                    TN and "A[K, M]: one box of 64 rows of M x 64 K-rows per 64-row slice (MN-major)" } }
%if GP then A_LOADS[2] = { "tiles_p", "map_p", "the teacher's tile, boxed and placed as A's" } end
%for _, op in ipairs(A_LOADS) do
%  if op[3] then
          /* {{ op[3] }} */
%  end
%  if TN then
#pragma unroll
          for (int j = 0; j < BM / 64; j++)
            {{ LOAD }}({{ op[1] }} + stage * BM * BK * 2 + j * 64 * BK * 2, &{{ op[2] }}, &full[stage],
                        tm * BM + 64 * j, kb * BK{{ POL_A }});
%  else
          {{ LOAD }}({{ op[1] }} + stage * BM * BK * 2, &{{ op[2] }}, &full[stage], kb * BK,
                     tm * BM{{ POL_A }});
%  end
%end
%if NN and CL == 1 then
          /* B[K, N]: one box of 64 columns x 64 K-rows per 64 columns (MN-major for wgmma) */
#pragma unroll
          for (int j = 0; j < BN / 64; j++)
            {{ LOAD }}(tiles_b + stage * BN * BK * 2 + j * 64 * BK * 2, &map_b, &full[stage],
                        tn * BN + 64 * j, kb * BK{{ POL_B }});
%elseif NN then
          /* the same boxes, box j loaded by cluster CTA j % 2 into both */
#pragma unroll
          for (int j = 0; j < BN / 64; j++)
            if (j % 2 == rank)
              {{ LOAD_MC }}(tiles_b + stage * BN * BK * 2 + j * 64 * BK * 2, &map_b,
                                    &full[stage], tn * BN + 64 * j, kb * BK, 0x3{{ POL_B }});
%elseif CL == 1 then
          {{ LOAD }}(tiles_b + stage * BN * BK * 2, &map_b, &full[stage], kb * BK,
                     tn * BN{{ POL_B }});
%else
          /* this CTA's half of the B tile, into both CTAs (rows beyond M read as zeros: the
           * odd last row tile's partner multiplies them and stores nothing) */
          {{ LOAD_MC }}(tiles_b + stage * BN * BK * 2 + rank * (BN / 2) * BK * 2, &map_b,
                                &full[stage], kb * BK, tn * BN + rank * (BN / 2), 0x3{{ POL_B }});
%end
          if (++stage == STAGES) stage = 0, phase ^= 1;
        }
%if DYN then
        t = next;
%end
      }
%if DYN then
      if (rank == 0) {
%  if PP then
        /* the other warpgroup's next tile is the one after: none either */
        post_tile(tile_ids, tid_full, tid_empty, j + 1, tiles);
%  end
        tiles_done(sched);
      }
%end
    }
%if MASS_WARPS then
    else if (part && threadIdx.x >= 32) { /* warps 1-3: the teacher's slots of the CTA's tiles */
      for (int t = first; t < tiles; t += step) {
        int gm, tn;
        tile_of(t, groups_m, tiles_n, &gm, &tn);
        mass_tile(teacher,{{ TBA }} part, row0, ({{ CL }} * gm + rank) * BM, tn * BN, M, N, tiles_n,
                  tn, threadIdx.x / 32 - 1, threadIdx.x % 32,
                  STATS_INV_TT({{ RUNTIME_T and "hdr[HDR_INV_T]" or "STATS_INV_T" }}));
      }
    }
%end
  } else {
    regs_claim<{{ CONSUMER_REGS }}>();
    const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
%if STAGED then
    /* this warp's 4 KB of the epilogue's scratch, after the ring */
%-- the ring's bytes (GP: the teacher's tiles too), as the plain source has always spelled them
%local RING = GP and tostring(P.STAGES * STAGE_BYTES) or "STAGES * (BM + BN) * BK * 2"
    unsigned char* scratch = smem + {{ RING }} + (threadIdx.x / 32 - 4) * 4096;
    /* 16-byte runs of C: C 16-byte aligned and every row too */
    const int vec = (ldc & {{ P.OUT == "f32" and 3 or 7 }}) == 0 && ((u64)C & 15) == 0;
%else
    unsigned char* scratch = nullptr;
    const int vec = 0;
%end
    float d[MS][BN / 2];
%if PP then
    /* the CTA's tiles c, c + 2, ...; tile j's k-blocks sit at ring positions j kblocks on */
%if DYN then
    for (int j = c, turns = 0;; j += 2, turns++) {
      const int t = take_tile(tile_ids, tid_full, tid_empty, j, lane);
      if (t >= tiles) break;
%else
    for (int j = c, turns = 0; first + j * step < tiles; j += 2, turns++) {
      const int t = first + j * step;
%end
      /* warpgroup 0 starts; after that each waits for the other's previous tile */
      if (c == 1 || turns > 0) mbar_wait(&turn[c], (u32)(c == 1 ? turns : turns - 1) & 1);
      const i64 pos = (i64)j * kblocks;
      stage = (int)(pos % STAGES), phase = (u32)(pos / STAGES) & 1;
%elseif DYN then
    for (int j = 0;; j++) {
      const int t = take_tile(tile_ids, tid_full, tid_empty, j, lane);
      if (t >= tiles) break;
%else
    for (int t = first; t < tiles; t += step) {
%end
      int gm, tn;
      tile_of(t, groups_m, tiles_n, &gm, &tn);
      const int tm = {{ CL }} * gm + rank;
      int prev = -1;
%if PROMOTE > 0 then
      float run_sum[MS][BN / 2]; /* the runs' sums so far (PROMOTE) */
#pragma unroll
      for (int ms = 0; ms < MS; ms++)
#pragma unroll
        for (int i = 0; i < BN / 2; i++) run_sum[ms][i] = 0.0f;
%end
%if TREAD then
      if (part)
%local pf_rows, pf_r0 = PP and "BM" or "64", PP and "tm * BM" or "tm * BM + c * 64"
        prefetch_teacher<{{ pf_rows }}>(teacher, row0, {{ pf_r0 }}, tn * BN, M, N,
                                        threadIdx.x % 128);
%end
%local slice = PP and "" or " + c * 64 * BK * 2" -- coop: this warpgroup's 64-row slice
%local first = PP and "tm * BM" or "tm * BM + c * 64" -- GOP: this warpgroup's first row of A
%if GRS then
      /* GRS: G formed in registers, k-block by k-block. Each k-block's wgmmas are waited for
       * before the next k-block's fragments are formed: ptxas serializes every wgmma of the
       * kernel (C7513) when a wgmma's input registers are defined while another wgmma group is
       * in flight, even in registers of their own. The two consumer warpgroups overlap instead:
       * one forms its fragments while the other's wgmmas run. The factors of k-block kb + 1 are
       * loaded once kb's wgmmas are issued. */
      float gf[GRN]{{ GP and ", gg[GRN]" or "" }};
      g_rfactors(gf,{{ GP and " gg, gpr," or "" }} gfac, fld, {{ first }}, 0, M, K,
                 threadIdx.x % 128);
      for (int kb = 0; kb < kblocks; kb++) {
        u32 ga[BK / 16][4];
        mbar_wait(&full[stage], phase);
        g_frags(ga, smem_addr(tiles_a + stage * BM * BK * 2{{ slice }}), gf,{{ GP and " smem_addr(tiles_p + stage * BM * BK * 2" .. slice .. "), gg," or "" }}
                threadIdx.x % 128);
        const u32 b0 = smem_addr(tiles_b + stage * BN * BK * 2);
        wgmma_fence(); /* the fragments just written, before the wgmmas that read them */
#pragma unroll
        for (int k = 0; k < BK / 16; k++)
          wgmma_rs<BN, {{ P.IN == "bf16" and 0 or 1 }}, 1>(
              d[0], ga[k], wgmma_desc_mn128(b0 + 2048 * k, 64 * BK * 2), kb > 0 || k > 0);
        wgmma_commit();
        if (kb + 1 < kblocks)
          g_rfactors(gf,{{ GP and " gg, gpr," or "" }} gfac, fld, {{ first }}, kb + 1, M, K,
                     threadIdx.x % 128);
        wgmma_wait<0>();
        release_stage(&empty[stage], lane); /* read by both this k-block's ldmatrix and wgmma */
        if (++stage == STAGES) stage = 0, phase ^= 1;
      }
%else
%if GOP then
      /* G's factors, one k-block ahead: those of k-block kb + 1 are loaded once k-block kb's
       * wgmmas are issued. Not before its rewrite: the proxy fence after the rewrite compiles to
       * MEMBAR.ALL.CTA, which waits for every load in flight, so a load issued before it would
       * be waited for at once (as an L2 round trip each k-block) */
      float gf[GN]{{ GP and ", gg[GN]" or "" }};
      g_factors(gf,{{ GP and " gg, gpr," or "" }} gfac, fld, {{ first }}, 0, M, K,
                threadIdx.x % 128);
%end
      for (int kb = 0; kb < kblocks; kb++) {
        mbar_wait(&full[stage], phase);
%if GOP then
        /* the stage's E' (and P) rewritten as G; the generic writes made visible to wgmma's
         * async proxy, and the warpgroup's 128 threads met, before any wgmma reads them */
        g_stage(tiles_a + stage * BM * BK * 2{{ slice }}, gf,
%if GP then
                tiles_p + stage * BM * BK * 2{{ slice }}, gg,
%end
                threadIdx.x % 128);
        fence_proxy_async();
        named_sync<128>(1 + c);
%end
        const u32 a0 = smem_addr(tiles_a + stage * BM * BK * 2{{ slice }});
        const u32 b0 = smem_addr(tiles_b + stage * BN * BK * 2);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BK / 16; k++)
#pragma unroll
          for (int ms = 0; ms < MS; ms++)
%local AB = P.IN == "bf16" and 0 or 1
%local desc_a = TN and "wgmma_desc_mn128(a0 + ms * 64 * BK * 2 + 2048 * k, 64 * BK * 2)"
%  or "wgmma_desc_k128(a0 + ms * 64 * BK * 2 + 32 * k)"
%local desc_b = NN and "wgmma_desc_mn128(b0 + 2048 * k, 64 * BK * 2)"
%  or "wgmma_desc_k128(b0 + 32 * k)"
%-- the first k16 step of the tile (of each slice: KSLICE) overwrites the accumulators
%local RESTART = KSLICE > 0 and KSLICE or PROMOTE
%local add = RESTART > 0 and "kb % " .. RESTART .. " > 0 || k > 0" or "kb > 0 || k > 0"
            wgmma_ss<BN, {{ AB }}, {{ TN and 1 or 0 }}, {{ NN and 1 or 0 }}>(d[ms], {{ desc_a }},
                                                   {{ desc_b }}, {{ add }});
        wgmma_commit();
%if GOP then
        if (kb + 1 < kblocks)
          g_factors(gf,{{ GP and " gg, gpr," or "" }} gfac, fld, {{ first }}, kb + 1, M, K,
                    threadIdx.x % 128);
%end
%if RESTART > 0 then
        if ((kb + 1) % {{ RESTART }} == 0 && kb + 1 < kblocks) {
          /* a run of K ends before the tile's last: every stage it read freed, its sum kept
           * (below), and the next k-block restarts d */
          wgmma_wait<0>();
          if (prev >= 0) release_stage(&empty[prev], lane);
          release_stage(&empty[stage], lane);
          prev = -1;
%  if KSLICE > 0 then
          /* a slice: its sum into C (the first slice writes it, unless BETA) */
#pragma unroll
          for (int ms = 0; ms < MS; ms++)
            store_rows(C, ldc, tm * BM + ({{ PP and "ms" or "c" }}) * 64 + warp * 16, tn * BN, M,
                       N, alpha, d[ms], {{ P.BETA and "1" or "kb + 1 > " .. KSLICE }}, scratch,
                       vec, lane);
%  else
          /* PROMOTE: its sum into the promoted accumulator, an ordinary (nearest) fp32 add */
#pragma unroll
          for (int ms = 0; ms < MS; ms++)
#pragma unroll
            for (int i = 0; i < BN / 2; i++) run_sum[ms][i] += d[ms][i];
%  end
          if (++stage == STAGES) stage = 0, phase ^= 1;
          continue;
        }
%end
        /* the group of the previous k-block has retired: its stage can be refilled */
        wgmma_wait<1>();
        if (prev >= 0) release_stage(&empty[prev], lane);
        prev = stage;
        if (++stage == STAGES) stage = 0, phase ^= 1;
      }
%end
%if PP then
      mbar_arrive(&turn[1 - c]); /* every full stage of this tile seen: the ring to the other */
%end
      wgmma_wait<0>();
      if (prev >= 0) release_stage(&empty[prev], lane);
%if PROMOTE > 0 then
      /* the last run's sum joins the promoted ones; the epilogue reads d as before */
#pragma unroll
      for (int ms = 0; ms < MS; ms++)
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[ms][i] += run_sum[ms][i];
%end
%-- acc: BETA, or (KSLICE) a slice before the last one wrote C already
%local acc = P.BETA and "1" or KSLICE > 0 and "kblocks > " .. KSLICE or "0"
%if E16 then
      /* E (and the records, with part) instead of C; 1 / T compiled in or the header's */
      const float inv_t = {{ RUNTIME_T and "hdr[HDR_INV_T]" or "STATS_INV_T" }};
#pragma unroll
      for (int ms = 0; ms < MS; ms++) {
        tile_scores(d[ms], tn * BN, N, alpha, inv_t,{{ P.BDT and " bias," or "" }} lane);
        tile_e16(d[ms], tm * BM + ({{ PP and "ms" or "c" }}) * 64 + warp * 16, tn * BN, M, N,
                {{ TEA }}{{ TBA }} part, row0, tiles_n, tn, lane, E, lde,{{ HARD and LABELS or "" }}
                 rowstat, rsf, inv_t{{ SUPPORT and ", scratch" or "" }});
      }
%else
%if STATS then
      if (part)
#pragma unroll
        for (int ms = 0; ms < MS; ms++)
          tile_stats(d[ms], tm * BM + ({{ PP and "ms" or "c" }}) * 64 + warp * 16, tn * BN, M, N,
                     alpha,{{ TEA }}{{ TBA }} part, row0, tiles_n, tn, lane{{ SPLIT_ON and ", scratch" or "" }});
%end
#pragma unroll
      for (int ms = 0; ms < MS; ms++)
        store_rows(C, ldc, tm * BM + ({{ PP and "ms" or "c" }}) * 64 + warp * 16, tn * BN, M, N,
                   alpha, d[ms], {{ acc }}, scratch, vec, lane);
%end
    }
  }
%if CL == 2 then
  cluster_sync(); /* the peer may still multicast into, or arrive on, this CTA's memory */
%end
}
