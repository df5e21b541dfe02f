%-- SPDX-License-Identifier: Apache-2.0
%-- sparse_rows.cu.lua: row kernels of the sparse top-K teacher KL loss (offline distillation
%-- from cached top-K ids and probabilities; CompactifAI's "full chunked KL" and two tails more).
%--
%-- Math, per kept row (s = (z + b) / T, lse = lse(s), q = softmax(s); support ids[K], teacher
%-- p_k from the values, M = sum_k p_k; see tests/ref.c, the contract):
%--   NONE    l = sum_k p_k (log max(p_k, eps) - (s_id_k - lse))     dl/ds = M q - p on S
%--   RENORM  p <- p / M (M = 0: l = 0, dl/ds = 0), then NONE with M = 1
%--   BUCKET  NONE + t log(t / (1 - Q_S)), t = 1 - M, Q_S = sum_S q, when t > 0 and a column
%--           lies off S;  dl/ds = c_in q - p on S and c_out q off S, c_in = M + t,
%--           c_out = M - t Q_S / (1 - Q_S)
%-- G = gscale * dl/ds (gscale from hdr, see helpers.cu.lua), written in place over the chunk.
%--
%-- Kernels (stats: SPLIT blocks per row x chunk rows; the others: one block per row):
%--   kl_sparse_stats     pass 1: online (max, sum-exp) of s over the block's segment, the columns
%--                       on S and off S summed apart (BUCKET: a bitmap of S in shared memory;
%--                       else every column counts as off S), so Q_S = d_on / d and
%--                       1 - Q_S = d_off / d need no subtraction and survive the cross-shard
%--                       merge. -> part[r][split] = {m, d_on, d_off}
%--   kl_sparse_merge     split API: a row's SPLIT records -> one record (PART) of out
%--   kl_sparse_fused     merge -> lse; gather the K support logits; loss -> lossp[row]; G: c_out q
%--                       streamed over the row, then the K support columns rewritten with
%--                       c_in q - p (the gathered logits were read before the stream began)
%--   kl_sparse_forward   merge, gather, loss -> lossp; row statistics -> rowstat. The row is not
%--                       read again: forward costs one streaming pass (stats) and K gathers.
%--   kl_sparse_backward  G from the saved statistics {lse, c_out, c_in, pscale}: one pass.
%--   kl_sparse_check     (CHECK) one block per row of the whole call: ids in [0, VTOT), no
%--                       duplicate ids, values finite, probs >= 0, log-probs not +inf or NaN. The
%--                       first bad row (smallest index) and its kind -> flag (atomicMin,
%--                       deterministic).
%-- Unchecked bad input never faults: an id outside [0, VTOT) is skipped (contributes nothing);
%-- duplicate ids give unspecified values (every occurrence enters the loss; G's support column
%-- gets one of them); negative probabilities enter the sums as given.
%--
%-- Parameters (validated below):
%--   V, LD, LDG, THREADS, SPLIT, INPLACE, LOGIT, GRAD, BIAS, BDT, TMODE, T, EPS  as dense_rows
%--   K        1..1024, <= VTOT             IDT     i32|i64: dtype of the ids
%--   VDT      f32|bf16|f16: values dtype   VALUES  probs|logprobs
%--   TAIL     none|renorm|bucket           CHECK   bool: emit kl_sparse_check
%--   VTOT     global vocabulary (default V) OFFSET  first global id of this shard (default 0)
%-- Sharded head (VTOT > V): ids are global. An id in [0, VTOT) counts in M on every shard; only
%-- ids in [OFFSET, OFFSET + V) are local (loss terms, gathered logits, G's support columns, the
%-- BUCKET bitmap); others are skipped. The row statistics come merged from every shard (runtime
%-- nrec, srow, srec of pass 2), so lse, Q_S = d_on / d and 1 - Q_S = d_off / d are global; the
%-- BUCKET ghost term is added on the shard with OFFSET = 0 only.
%-- Optional (absent: the plain problem's kernels), as in dense_rows.cu.lua (include/kljit.h's
%-- math):
%--   SOFTCAP  student logit cap c: s = c tanh((z + b) / c) / T; G times 1 - tanh^2 = 1 - (s T / c)^2
%--   HARD     weight wh of the hard-label CE = lse(z') - z'_y (z' = s T, temperature 1): pass 1
%--            adds the (max, sum-exp) of z' (PART's mh, dh), pass 2 writes wh / t2 (lse(z') -
%--            z'_y) to lossh[row], apart from the divergence's lossp[row] (kl_finish_loss adds
%--            them and reports them as the loss's parts; lse on the shard with OFFSET = 0,
%--            -z'_y on the label's shard; the labels are global ids), and adds wh c
%--            (softmax(z') - [v = y]) to G; T2: t2 = T^2. The saved row statistics (ROWSTAT)
%--            grow from 4 to 8 floats (lse(z') the fifth).
%--   LSMOOTH  HARD only: label smoothing ls in (0, 1]: the CE's target (1 - ls) one-hot + ls
%--            uniform over the VTOT columns. The row's sum of z' over the vocabulary is pass 1's
%--            (PART's slot zs, a ninth float: summed over the blocks and the shards as the
%--            records merge), since pass 2 of forward reads no column off S; the shard with
%--            OFFSET = 0 subtracts ls / VTOT sum z' from the CE, the label's shard (1 - ls)
%--            z'_y; G gets -wh c ls / VTOT on every column, the label column (1 - ls) of its
%--            -wh c. Backward needs nothing saved for it.
%--   ZLOSS    HARD only: z-loss zl > 0: zl lse(z')^2 added to the CE with its lse (the first
%--            shard), softmax(z')'s coefficient in G times 1 + 2 zl lse(z') (lse(z') is saved).
%--   SOFT     weight ws != 1 of the divergence (loss and gradient)
%--   ROWW     bool: row weights w[N] (fp32) multiply the row's loss (divergence and CE) and its
%--            gscale (G of both); with CHECK, kl_sparse_check reports a kept row's negative,
%--            NaN or infinite weight (kind 5). The sums kernel does not read them (A is a
%--            property of the row's distributions).
%--   DIV      reverse|jsd|tvd|skew_forward|skew_reverse (absent: the forward KL), BETA for jsd
%--            in (0, 1), ALPHA for the skew KLs in (0, 1); TAIL bucket or renorm
%--            (kljit.h: the divergence of two distributions over categories C):
%--              bucket  C = S and the tail: P = p, P_tail = max(1 - M, 0); Q = q,
%--                      Q_tail = 1 - Q_S = d_off / d (no tail category when no column is off S)
%--              renorm  C = S: P = p / M, Q = q / Q_S, log Q_k = (s_k - b) - ldno from the
%--                      on-S (max, sum-exp) the stats pass keeps apart (mo, dno; b the largest
%--                      local support score, ldno = mo - b + log dno: no underflow however far
%--                      below the row's max the support lies, and no difference of two lse's)
%--            g_c = log Q - log max(P, eps) (reverse), -(1 - beta) log1p(beta P / ((1 - beta) Q))
%--            (jsd: (1 - beta) log(Q / m) less its constant, as dense_rows), sign(Q - P) / 2
%--            (tvd: D = 1/2 sum_C |P - Q|, 0 where P = Q), -(1 - a) P / m (skew_forward: m = a P
%--            + (1 - a) Q, D = sum_C P log(P / m)), log(Q / m) - a Q / m less its constant
%--            -log(a) - 1 (skew_reverse: m = a Q + (1 - a) P, D = sum_C Q log(Q / m)); E = sum_C
%--            Q g;
%--            G = gscale Q_k (g_k - E) on S and gscale (g_tail - E) q off S (renorm: 0). The row
%--            needs E before its first column: pass 2 gets it from the K gathered entries and
%--            the records, so the passes stay the forward KL's (no extra sweep).
%--            Cancellations kept out (fp32 against the fp64 reference; div_terms):
%--            - g_c - E, not as two nearly equal numbers (g_tail - E off S when Q_tail is near
%--              1, g_k - E of a dominant category): with a reference category r (the largest
%--              Q; on a shard, one every shard knows: the tail, else none, g_r = 0),
%--              A = sum_C Q_c (g_r - g_c) and g_c - E = (g_c - g_r) + A;
%--            - the JSD's terms with D = P - Q: P / m = 1 + (1 - beta) D / m and Q / m =
%--              1 - beta D / m through log1p, the tail's D from Q_S - M (or P_tail - Q_tail
%--              when Q_S >= 1/2) and M summed in fp64: no log of a ratio near 1; so the skew
%--              KLs' P / m = 1 + (1 - a) D / m (forward) and m / Q = 1 + (1 - a) D / Q
%--              (reverse);
%--            - one renormalized category (K = 1): P = Q = 1, loss and G exactly 0.
%--            Saved rows: {lse, g_tail - E, A, g_r} (bucket), {lse, ldno, A, g_r} (renorm).
%--   MERGE    "block": pass 2 merges a row's records with the whole block (thread k takes
%--            records k, k + THREADS, ..., then block_reduce's fixed order) instead of one
%--            thread: the logits GEMM's statistics epilogue (templates/gemm_sm90.cu.lua, STATS
%--            sparse) writes one a column tile (1002 a row at V = 128256 with 128-column tiles),
%--            which one thread would merge in series while the block waits. Absent: one
%--            thread, in record order. Not with SHARDED (its records' S is summed apart).
%--   ETILE    LOGIT f16: z holds what the logits GEMM's E16 epilogue wrote (templates/
%--            gemm_sm90.cu.lua, STATS sparse with E16) instead of the chunk's logits: x = s - m_t
%--            per column tile of ETILE columns, m_t in the tile's record (slot m; the records are
%--            the GEMM's, one a tile: MERGE block, srec 1), or in backward x = s - lse with the
%--            row's saved lse. Pass 2 takes s back as m_t (lse) + x and adds no bias or
%--            temperature (the GEMM made s = (z + b) / T, capped under SOFTCAP); G overwrites x
%--            element by element (LDG = LD, no INPLACE). The loss's cross term sum_k p_k (s_k -
%--            lse) is not taken from x's fp16 but from the records' exact ones: the GEMM summed
%--            p_k (s_k - m_t) and p_k over the support's columns of each tile in fp32 (slots ps,
%--            pw of iface.SPARSE_E16_PART), which pass 2 takes to lse; G's support columns take
%--            q from x (an error of at most 2^-11 |x| in s, below G's bf16 rounding). HARD: the
%--            records' mh, dh are the CE's (max, sum-exp) of z' and slot S the label's z'
%--            (exact, in the tile that holds it, 0 elsewhere: summed), which the loss takes; in
%--            backward the label's score comes from x. The forward KL with tail none or renorm,
%--            no LSMOOTH (its sum of z' has no slot), no shard.
%--   SHARDED  bool, DIV only: a vocabulary shard. A's sum over S needs every shard's support:
%--            kl_sparse_sums (after the first exchange) writes this shard's sum_{S local}
%--            Q_k (g_r - g_k) to PART's slot S (kl_sparse_merge writes NaN there until then),
%--            pass 2 adds the shards' slots S.
%-- Numerics: fp32 in registers; SFU exp/log (common.cu.lua); fixed-order reductions.
%local P = P
%local iface = include("iface.cu.lua")
%local params = include("params.cu.lua")
%local dt, size = params.dt, params.size
%local VTOT = params.module()
%params.rows({ "LOGIT", "GRAD", "VDT", "BDT" })
%local OFFSET = P.OFFSET or 0
%if type(OFFSET) ~= "number" or OFFSET < 0 or OFFSET + P.V > VTOT then
%  reject("OFFSET must be in [0, VTOT - V]")
%end
%if type(P.K) ~= "number" or P.K < 1 or P.K > 1024 or P.K > VTOT then
%  reject("K must be in [1, min(VTOT, 1024)]")
%end
%if P.IDT ~= "i32" and P.IDT ~= "i64" then reject("IDT must be i32 or i64") end
%if P.VALUES ~= "probs" and P.VALUES ~= "logprobs" then reject("VALUES must be probs or logprobs") end
%if P.TAIL ~= "none" and P.TAIL ~= "renorm" and P.TAIL ~= "bucket" then
%  reject("TAIL must be none, renorm or bucket")
%end
%if P.INPLACE ~= (P.LDG == 2 * P.LD) then reject("INPLACE must be set exactly when LDG = 2 LD") end
%if P.SOFTCAP ~= nil and not (P.SOFTCAP > 0 and P.SOFTCAP < math.huge) then
%  reject("SOFTCAP must be > 0")
%end
%if P.HARD ~= nil and not (P.HARD > 0 and P.HARD < math.huge) then reject("HARD must be > 0") end
%if P.SOFT ~= nil and not (P.SOFT >= 0 and P.SOFT < math.huge) then reject("SOFT must be >= 0") end
%local HARD = P.HARD ~= nil
%params.ce_extras(HARD)
%local DIVX = P.DIV ~= nil
%local DIVS = params.DIVS
%if DIVX and not DIVS[P.DIV] then
%  reject("DIV must be reverse, jsd, tvd, skew_forward or skew_reverse")
%end
%if P.DIV == "jsd" and not (P.BETA and P.BETA > 0 and P.BETA < 1) then
%  reject("BETA must be in (0, 1) for DIV = jsd")
%end
%local SKEW = P.DIV == "skew_forward" or P.DIV == "skew_reverse"
%if (SKEW or P.ALPHA ~= nil) and not (SKEW and P.ALPHA and P.ALPHA > 0 and P.ALPHA < 1) then
%  reject("ALPHA must be in (0, 1) and needs DIV = skew_forward or skew_reverse")
%end
%if DIVX and P.TAIL == "none" then
%  reject("DIV needs TAIL bucket or renorm: TAIL none is the forward KL's alone")
%end
%local SHARDED = P.SHARDED or false
%if SHARDED and not DIVX then reject("SHARDED needs DIV (the forward KL's records suffice)") end
%if P.MERGE ~= nil and P.MERGE ~= "block" then reject("MERGE must be block (absent: one thread)") end
%local BMERGE = P.MERGE == "block"
%if BMERGE and SHARDED then reject("MERGE block takes no SHARDED (the shards' S is summed apart)") end
%local ETILE = P.ETILE
%if ETILE ~= nil then
%  if not (ETILE == 64 or ETILE == 128 or ETILE == 192 or ETILE == 256) then
%    reject("ETILE must be the logits GEMM's tile width: 64, 128, 192 or 256")
%  end
%  if P.LOGIT ~= "f16" or size[P.GRAD] ~= 2 or P.INPLACE or P.LDG ~= P.LD or not BMERGE then
%    reject("ETILE is pass 2 over the GEMM's fp16 scores: LOGIT f16, a 16-bit GRAD over them, "
%           .. "no INPLACE, LDG = LD, MERGE block")
%  end
%  if DIVX or P.TAIL == "bucket" or P.LSMOOTH or OFFSET ~= 0 or VTOT ~= P.V then
%    reject("ETILE takes what the GEMM's epilogue covers: the forward KL with TAIL none or "
%           .. "renorm, no LSMOOTH, no shard")
%  end
%end
%-- the renormalized divergences keep the support's own (max, sum-exp) in the stats pass
%local OWNON = DIVX and P.TAIL == "renorm"
%local BITMAP = P.TAIL == "bucket" or OWNON
%-- the divergence's weight
%local WS = f32(P.SOFT or 1.0)
%local VEC = 16 // size[P.LOGIT]
%local SEG = ((P.V + P.SPLIT * VEC - 1) // (P.SPLIT * VEC)) * VEC
%if SEG * (P.SPLIT - 1) >= P.V then reject("SPLIT too large for V") end
%if BITMAP and SEG > 262144 then
%  reject("a support bitmap (BUCKET, or RENORM with DIV) needs a segment <= 262144 columns")
%end
%-- The checks end here, every reject() above (dense_rows.cu.lua says why)
%end_of_checks()
%include("common.cu.lua")
%-- What only the source needs, past the checks' end: a kept validator runs the lines above
%-- end_of_checks() once per check (validator.h; dense_rows.cu.lua says why).
%local LSMOOTH = P.LSMOOTH ~= nil
%-- the CE's softmax coefficient in G: gh, or with the z-loss gz = gh (1 + 2 zl lse(z'))
%local GZ = P.ZLOSS and "ce.gz" or "ce.gh"
%local ROWW = P.ROWW or false
%-- the row weights in pass 2's signature and calls (the sums kernel passes none)
%local RWP = ROWW and " const float* __restrict__ row_weights," or ""
%local RWA = ROWW and " row_weights," or ""
%local RWN = ROWW and " nullptr," or ""
%-- the CE's loss partials apart from the divergence's (HARD), in pass 2's signature and calls
%local LHP = HARD and " float* __restrict__ lossh," or ""
%local LHA = HARD and " lossh," or ""
%local LHN = HARD and " nullptr," or ""
%local RWS = ROWW and " * rw" or ""
%-- the tile records and the backward's lse under ETILE (empty: the other sources unchanged)
%local ETP = ETILE and " const float* __restrict__ erec, float ebase," or ""
%-- The records (templates/iface.cu.lua). part: the pass-1 partial of one (row, block), and a
%-- row's merged record of the split API (kljit_shard_stats; include/kljit_experimental.h):
%-- the max of s (m), its sum-exp on and off the local support (d_on, d_off), the CE's max and
%-- sum-exp of z' (mh, dh; HARD), the support's own max and sum-exp (mo, dno; RENORM with DIV),
%-- this shard's sum of Q g over its support (S; SHARDED, kl_sparse_sums); 8 floats, the
%-- stride the dense rows' records have; with LSMOOTH a ninth, zs: the sum of z' over the
%-- columns (the block's segment, merged: the row's). Declared in iface.cu.lua: the logits
%-- GEMM's statistics epilogue writes it too (STATS sparse, one a column tile; MERGE block).
%-- rowstat: what two-phase forward saves a row for backward: lse, c_out, c_in, pscale (DIV:
%-- lse, g_tail - E (bucket) or ldno (renorm), A, g_r; the header's math), and the CE's lse(z')
%-- with HARD.
%local PART = ETILE and iface.SPARSE_E16_PART or iface.SPARSE_PART
%if LSMOOTH then PART = { name = "part", floats = 9, slots = iface.args(PART.slots, { "zs" }) } end
%-- the saved row's four fields, in rowstat order
%local RF = { "lse", "cout", "cin", "pscale" }
%-- DIV: row_t holds RT, of which a tail saves RF (bucket: no ldno; renorm: cout is 0)
%local RT = RF
%if DIVX then
%  RT = { "lse", "cout", "A", "gr", "ldno" }
%  RF = P.TAIL == "bucket" and { "lse", "cout", "A", "gr" } or { "lse", "ldno", "A", "gr" }
%end
%local ROWSTAT = { name = "rowstat", floats = 4, slots = RF }
%if HARD then
%  ROWSTAT = { name = "rowstat", floats = 8, slots = iface.args(RF, { "lse1" }) }
%end
%local INV_T2 = P.T2 and "invT * invT" or "1.0f"
%local CAPPED = P.SOFTCAP ~= nil
%-- The interface (templates/iface.cu.lua): every kernel and its arguments, in order. The C side
%-- fills the roles from one struct (src/kiface.h); g may alias z (G overwrites the chunk
%-- logits), so neither is __restrict__ in the pass-2 kernels.
%local args = iface.args
%local IDS = { { "ids", "const id_t* __restrict__", role = "teacher_ids" } }
%local VALS = { { "vals", "const val_t* __restrict__", role = "teacher_values" } }
%local CHECK_THREADS = 256
%local sums_in = args(IDS, VALS, {
%  { "bias", "const bias_t* __restrict__" }, { "labels", "const void*" },
%  { "labels_is64", "int" }, { "ignore_index", "i64" }, { "hdr", "const float* __restrict__" } })
%-- the row weights: pass 2 (every mode) and the check read them; A does not depend on them
%local RW = { "row_weights", "const float* __restrict__" }
%local row_in = ROWW and args(sums_in, { RW }) or sums_in
%local check_in = args(IDS, VALS, {
%  { "labels", "const void*" }, { "labels_is64", "int" }, { "ignore_index", "i64" },
%  { "flag", "u64*", role = "check_flag" } })
%if ROWW then table.insert(check_in, #check_in, RW) end -- before the flag
%local K = iface.family(iface.args({
%  { name = "kl_sparse_stats", step = "stats", when = not ETILE, threads = P.THREADS, args = args({
%    { "z", "const logit_t* __restrict__" } }, IDS, {
%    { "bias", "const bias_t* __restrict__" }, { "labels", "const void* __restrict__" },
%    { "labels_is64", "int" }, { "ignore_index", "i64" }, { "hdr", "const float* __restrict__" },
%    { "part", "float* __restrict__" }, { "row0", "i64" } }) } },
%  iface.row_passes("kl_sparse", row_in, nil, { threads = P.THREADS },
%                   HARD and { { "lossh", "float* __restrict__" } } or nil), {
%  { name = "kl_sparse_sums", step = "sums", when = DIVX, threads = P.THREADS, args = args({
%    { "z", "const logit_t*" } }, sums_in, {
%    { "part", "const float*", role = "recs" }, { "nrec", "int" }, { "srow", "i64" },
%    { "srec", "i64" }, { "out", "float*", role = "stats_out" }, { "row0", "i64" } }) },
%  { name = "kl_sparse_check", step = "check", when = P.CHECK, threads = CHECK_THREADS,
%    args = check_in },
%}), { iface.HDR, PART, ROWSTAT })

#define V {{ P.V }}
#define LD {{ P.LD }}
#define LDG {{ P.LDG }}
#define THREADS {{ P.THREADS }}
#define SPLIT {{ P.SPLIT }}
#define VEC {{ VEC }}
#define SEG {{ SEG }}
#define K {{ P.K }}
#define VTOT {{ VTOT }}
#define OFFSET {{ OFFSET }}
#define INPLACE {{ P.INPLACE and 1 or 0 }}
#define BUCKET {{ P.TAIL == "bucket" and 1 or 0 }}
#define BITMAP {{ BITMAP and 1 or 0 }} /* the stats pass marks S's columns of its segment */
#define OWNON {{ OWNON and 1 or 0 }}   /* ... and keeps their own (max, sum-exp) */
#define DIVX {{ DIVX and 1 or 0 }}
#define SHARDED {{ SHARDED and 1 or 0 }}
#define RENORM {{ P.TAIL == "renorm" and 1 or 0 }}
#define LOGPROBS {{ P.VALUES == "logprobs" and 1 or 0 }}
#define HAS_BIAS {{ P.BIAS and 1 or 0 }}
#define LOG_EPS {{ f32(math.log(P.EPS)) }}
#define EPS {{ f32(P.EPS) }}
typedef {{ dt[P.LOGIT] }} logit_t;
typedef {{ dt[P.GRAD] }} grad_t;
typedef {{ dt[P.VDT] }} val_t;
typedef {{ dt[P.BDT] }} bias_t;
typedef {{ P.IDT == "i32" and "int" or "i64" }} id_t;
{{ K.records() }}
%if P.TMODE == "const" then
#define INV_T(hdr) ({{ f32(1.0 / P.T) }})
%else
#define INV_T(hdr) ((hdr)[HDR_INV_T])
%end

/* Loads VEC scores s = (z + b) * invT at column v; FULL: all VEC columns exist, else the missing
 * ones get -inf. */
template <bool FULL>
__device__ __forceinline__ void load_s(const logit_t* zr, const bias_t* __restrict__ bias,{{ ETP }} int v,
                                       float invT, float (&s)[VEC]) {
%if ETILE then
  /* E16 (ETILE): s = m_t + x, m_t the tile's record's (erec) or, in backward (erec NULL), the
   * row's lse (ebase); no bias, cap or 1 / T (the GEMM's epilogue applied them). VEC columns
   * from a multiple of VEC lie in one tile. */
  (void)bias, (void)invT;
  const float mt = erec ? erec[(v / {{ ETILE }}) * PART_FLOATS + PART_M] : ebase;
  if constexpr (FULL) {
    load_n<VEC, true>(zr + v, s);
#pragma unroll
    for (int i = 0; i < VEC; i++) s[i] += mt;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i++) s[i] = v + i < V ? mt + to_f32(zr[v + i]) : KL_NEG_INF;
  }
%else
  if constexpr (FULL) {
    load_n<VEC, true>(zr + v, s);
#if HAS_BIAS
    float b[VEC];
    load_n<VEC, false>(bias + v, b);
#pragma unroll
    for (int i = 0; i < VEC; i++) s[i] += b[i];
#endif
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i++) {
      s[i] = v + i < V ? to_f32(zr[v + i]) : KL_NEG_INF;
#if HAS_BIAS
      if (v + i < V) s[i] += to_f32(bias[v + i]);
#endif
    }
  }
%if CAPPED then
  /* the cap on the loaded columns only: a missing column stays -inf (it must add nothing) */
#pragma unroll
  for (int i = 0; i < VEC; i++)
    if (FULL || v + i < V) s[i] = {{ f32(P.SOFTCAP) }} * tanhf(s[i] * {{ f32(1.0 / P.SOFTCAP) }});
%end
#pragma unroll
  for (int i = 0; i < VEC; i++) s[i] *= invT;
%end
}

/* The score of one column (the gather). */
__device__ __forceinline__ float score_at(const logit_t* zr, const bias_t* __restrict__ bias,{{ ETP }}
                                          i64 v, float invT) {
%if ETILE then
  (void)bias, (void)invT; /* E16: m_t + x, as load_s takes it */
  return (erec ? erec[(v / {{ ETILE }}) * PART_FLOATS + PART_M] : ebase) + to_f32(zr[v]);
%else
  float s = to_f32(zr[v]);
#if HAS_BIAS
  s += to_f32(bias[v]);
#endif
%if CAPPED then
  s = {{ f32(P.SOFTCAP) }} * tanhf(s * {{ f32(1.0 / P.SOFTCAP) }});
%end
  return s * invT;
%end
}
%if CAPPED then

/* dz'/dz = 1 - tanh^2 of a column from its score s (tanh = s T / c). */
__device__ __forceinline__ float cap_slope(float s, float invT) {
  const float th = s * (1.0f / (invT * {{ f32(P.SOFTCAP) }}));
  return 1.0f - th * th;
}
%end

/* Online (max, sum-exp) of VEC scores, on S (bit i of on_s) and off S apart. */
struct acc_t {
  float m, don, doff;
%if HARD then
  float mh, dh; /* (max, sum-exp) of z' = s T: the CE's lse */
%end
%if OWNON then
  float mo, dno; /* (max, sum-exp) of the columns on S, relative to their own max */
%end
%if LSMOOTH then
  float zs; /* sum of z' = s T: the smoothed CE's uniform target */
%end
};
#define ACC_NONE acc_t{KL_NEG_INF, 0.0f, 0.0f{{ HARD and ", KL_NEG_INF, 0.0f" or "" }}{{ OWNON and ", KL_NEG_INF, 0.0f" or "" }}{{ LSMOOTH and ", 0.0f" or "" }}}
__device__ __forceinline__ void acc_add(acc_t& a, const float (&s)[VEC], u32 on_s, float tz) {
%if HARD then
  {
    float mh = a.mh;
#pragma unroll
    for (int i = 0; i < VEC; i++) mh = fmaxf(mh, s[i] * tz);
    if (mh != KL_NEG_INF) {
      float dh = a.dh * fexp(a.mh - mh);
#pragma unroll
      for (int i = 0; i < VEC; i++) dh += fexp(s[i] * tz - mh);
      a.mh = mh, a.dh = dh;
    }
  }
%else
  (void)tz;
%end
%if LSMOOTH then
#pragma unroll
  for (int i = 0; i < VEC; i++)
    if (s[i] != KL_NEG_INF) a.zs += s[i] * tz; /* a missing column (-inf) adds nothing */
%end
  float m = a.m;
#pragma unroll
  for (int i = 0; i < VEC; i++) m = fmaxf(m, s[i]);
  if (m == KL_NEG_INF) return;
  const float r = fexp(a.m - m);
  float don = a.don * r, doff = a.doff * r;
#pragma unroll
  for (int i = 0; i < VEC; i++) {
    const float e = fexp(s[i] - m);
    if ((on_s >> i) & 1u) don += e;
    else doff += e;
  }
  a.m = m, a.don = don, a.doff = doff;
%if OWNON then
  if (on_s) /* rare: S's columns of the vector, merged into their own (max, sum-exp) */
#pragma unroll
    for (int i = 0; i < VEC; i++)
      if ((on_s >> i) & 1u) {
        if (s[i] > a.mo) a.dno = a.dno * fexp(a.mo - s[i]) + 1.0f, a.mo = s[i];
        else a.dno += fexp(s[i] - a.mo);
      }
%end
}

/* Merges two (m, don, doff) records: the merge functor of block_reduce (common.cu.lua). */
struct acc_merge {
  __device__ __forceinline__ acc_t operator()(acc_t a, acc_t b) const {
    acc_t r = a;
    const float m = fmaxf(a.m, b.m);
    if (m != KL_NEG_INF) {
      const float ra = expf(a.m - m), rb = expf(b.m - m);
      r.m = m, r.don = a.don * ra + b.don * rb, r.doff = a.doff * ra + b.doff * rb;
    }
%if HARD then
    const float mh = fmaxf(a.mh, b.mh);
    if (mh != KL_NEG_INF) r.mh = mh, r.dh = a.dh * expf(a.mh - mh) + b.dh * expf(b.mh - mh);
%end
%if OWNON then
    const float mo = fmaxf(a.mo, b.mo);
    if (mo != KL_NEG_INF) r.mo = mo, r.dno = a.dno * expf(a.mo - mo) + b.dno * expf(b.mo - mo);
%end
%if LSMOOTH then
    r.zs = a.zs + b.zs;
%end
    return r;
  }
};
%if BMERGE then

/* A record as an acc_t (MERGE = block: the threads merge records with acc_merge). */
__device__ __forceinline__ acc_t acc_of(const float* __restrict__ rec) {
  acc_t a;
  a.m = rec[PART_M], a.don = rec[PART_D_ON], a.doff = rec[PART_D_OFF];
%  if HARD then
  a.mh = rec[PART_MH], a.dh = rec[PART_DH];
%  end
%  if OWNON then
  a.mo = rec[PART_MO], a.dno = rec[PART_DNO];
%  end
%  if LSMOOTH then
  a.zs = rec[PART_ZS];
%  end
  return a;
}
%end

__device__ __forceinline__ int seg_begin() { return blockIdx.x * SEG; }
__device__ __forceinline__ int seg_end() { return min(V, (int)(blockIdx.x + 1) * SEG); }

/* Membership bits of the block's segment in S (BUCKET): bit j of word j / 32 for column v0 + j.
 * VEC divides 32 and vectors start at v0 + a multiple of VEC, so a vector's bits share a word. */
#define SEG_WORDS ((SEG + 31) / 32)

%if not ETILE then
{{ K.kernel("kl_sparse_stats") }} {
  /* z: (rows, LD) chunk logits; ids: (N, K); part: (rows, SPLIT, PART_FLOATS) */
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  __shared__ acc_t sh_acc[THREADS / 32];
  if (!row_kept(labels, labels_is64, ignore_index, row)) return; /* pass 2 skips the row */
  const int v0 = seg_begin(), v1 = seg_end();
#if BITMAP
  __shared__ u32 bits[SEG_WORDS];
  for (int j = threadIdx.x; j < SEG_WORDS; j += THREADS) bits[j] = 0u;
  __syncthreads();
  for (int k = threadIdx.x; k < K; k += THREADS) {
    const i64 id = (i64)ids[row * K + k] - OFFSET; /* local column */
    if (id >= v0 && id < v1) atomicOr(&bits[(id - v0) / 32], 1u << ((id - v0) % 32));
  }
  __syncthreads();
#endif
  const logit_t* zr = z + (i64)r * LD;
  const float invT = INV_T(hdr);
  const float tz = 1.0f / invT; /* z' = s T */
  acc_t a = ACC_NONE;
  const int vfull = v0 + ((v1 - v0) / VEC) * VEC;
  int v = v0 + threadIdx.x * VEC;
  for (; v < vfull; v += THREADS * VEC) {
    float s[VEC];
    load_s<true>(zr, bias, v, invT, s);
#if BITMAP
    acc_add(a, s, bits[(v - v0) / 32] >> ((v - v0) % 32), tz);
#else
    acc_add(a, s, 0u, tz);
#endif
  }
  if (v < v1) {
    float s[VEC];
    load_s<false>(zr, bias, v, invT, s);
#if BITMAP
    u32 on = 0u;
    for (int i = 0; i < VEC && v + i < v1; i++)
      on |= ((bits[(v + i - v0) / 32] >> ((v + i - v0) % 32)) & 1u) << i;
    acc_add(a, s, on, tz);
#else
    acc_add(a, s, 0u, tz);
#endif
  }
  a = block_reduce<THREADS>(a, sh_acc, ACC_NONE, acc_merge());
  if (threadIdx.x == 0) {
    float* out = part + ((i64)r * SPLIT + blockIdx.x) * PART_FLOATS;
    out[PART_M] = a.m, out[PART_D_ON] = a.don, out[PART_D_OFF] = a.doff;
%if HARD then
    out[PART_MH] = a.mh, out[PART_DH] = a.dh;
%end
%if OWNON then
    out[PART_MO] = a.mo, out[PART_DNO] = a.dno;
%end
%if LSMOOTH then
    out[PART_ZS] = a.zs;
%end
  }
}
%end

/* Row statistics of pass 2 (also what two-phase saves): G = gscale (c_in q - pscale p) on S and
 * gscale c_out q off S. A row whose four values are all 0 (ignored, or RENORM with M = 0) gets
 * G = 0 without reading its logits. */
%if DIVX then
/* DIV: G = gscale Q_k ((g_k - gr) + A) on S, gscale cout q off S (cout = g_tail - E; the
 * header's A, g_r); ldno (renorm): log Q_k = (s_k - b) - ldno. */
struct row_t {
  float lse, cout, A, gr, ldno;
%else
struct row_t {
  float lse, cout, cin, pscale;
%end
%if HARD then
  float lse1; /* lse(z'), the CE's */
%end
};
%if HARD then

/* The CE's per-row state in pass 2: the label's local column (-1: not on this shard), its
 * score s_y (read before G overwrites the row), G's scale wh c. */
struct ce_t {
  int y;
  float sy, gh;
%if P.ZLOSS then
  float gz; /* gh (1 + 2 zl lse(z')): the softmax's coefficient with the z-loss */
%end
%if LSMOOTH then
  float gu; /* gh ls / VTOT: the uniform target's share of every column */
%end
};
%end

%include("rows_common.cu.lua")

/* The gathered support of one row, in shared memory. */
struct support_t {
  int id[K];     /* local column, or < 0 for an id outside [OFFSET, OFFSET + V) */
  float p[K];    /* teacher probability as given (before RENORM); 0 outside [0, VTOT) */
  float lp[K];   /* log max(p, eps) as given */
%if DIVX then
  float s[K];    /* DIV: the column's score (log Q is the tail's: s - lse or (s - b) - ldno) */
%else
  float lq[K];   /* log q at the column */
%end
%if DIVX then
  float q[K];    /* DIV: the category's Q (0 for an entry off this shard) */
  float g[K];    /* DIV: its g */
%end
};

/* Reads the K ids and values of `row` and the student's log q at each id (lse known). */
__device__ __forceinline__ void gather(support_t& sup, const logit_t* zr, const id_t* ids,
                                       const val_t* vals, const bias_t* __restrict__ bias,{{ ETP }}
                                       i64 row, float invT, float lse) {
  for (int k = threadIdx.x; k < K; k += THREADS) {
    const i64 id = (i64)ids[row * K + k];
    const float val = to_f32(vals[row * K + k]);
    const bool valid = id >= 0 && id < VTOT;                /* counts in M */
    const bool in = id >= OFFSET && id < (i64)OFFSET + V; /* local to this shard */
#if LOGPROBS && DIVX
    const float p = fexp(val), lp = val; /* DIV floors log P itself (after RENORM's log M) */
#elif LOGPROBS
    const float p = fexp(val), lp = fmaxf(val, LOG_EPS);
#else
    const float p = val, lp = {{ DIVX and "logf" or "flog" }}(fmaxf(val, EPS));
#endif
    /* local column; -1 an id outside [0, VTOT) (skipped); -2 (DIV) one of another shard */
    sup.id[k] = in ? (int)(id - OFFSET) : {{ DIVX and "valid ? -2 : -1" or "-1" }};
    sup.p[k] = valid ? p : 0.0f;
    sup.lp[k] = lp;
%if DIVX then
    sup.s[k] = in ? score_at(zr, bias,{{ ETILE and " erec, ebase," or "" }} id - OFFSET, invT) : 0.0f;
%else
    sup.lq[k] = in ? score_at(zr, bias,{{ ETILE and " erec, ebase," or "" }} id - OFFSET, invT) - lse : 0.0f;
%end
  }
%if DIVX then
  (void)lse;
%end
  __syncthreads();
}

%if not DIVX then
%-- (ETILE: ps is the row's sum_k p_k (s_k - lse) from the GEMM's records, exact scores, which
%-- stands for the gathered ones in the loss)
/* Loss of the row (its local terms) and its G coefficients from the gathered support and the
 * merged pass-1 record (lse, d_off / d, d_on / d). Every thread gets both. */
__device__ __forceinline__ float support_loss(const support_t& sup, float lse, float off_frac,
                                              float on_frac,{{ ETILE and " float ps," or "" }} float* sh_f, row_t& rs) {
  float m = 0.0f;
  for (int k = threadIdx.x; k < K; k += THREADS) m += sup.p[k];
  const float M = block_sum<THREADS>(m, sh_f);
  rs.lse = lse, rs.cout = M, rs.cin = M, rs.pscale = 1.0f;
#if RENORM
  if (M == 0.0f) { /* no divergence term; lse stays (the CE's G and a cap's slope use it) */
    rs.cout = rs.cin = rs.pscale = 0.0f;
    return 0.0f;
  }
  const float inv_m = 1.0f / M, log_m = flog(M);
  rs.cout = rs.cin = 1.0f, rs.pscale = inv_m;
#endif
  float l = 0.0f;
  for (int k = threadIdx.x; k < K; k += THREADS) {
    float p = sup.p[k], lp = sup.lp[k];
#if RENORM
    p *= inv_m;
#if LOGPROBS
    lp = fmaxf(lp - log_m, LOG_EPS); /* the given log p minus log M, floored at log eps */
#else
    lp = flog(fmaxf(p, EPS));
#endif
#endif
%if ETILE then
    if (sup.id[k] >= 0 && p != 0.0f) l += p * lp; /* - p (s - lse): ps below */
  }
#if RENORM
  l = block_sum<THREADS>(l, sh_f) - ps * inv_m;
#else
  l = block_sum<THREADS>(l, sh_f) - ps;
#endif
%else
    if (sup.id[k] >= 0 && p != 0.0f) l += p * (lp - sup.lq[k]);
  }
  l = block_sum<THREADS>(l, sh_f);
%end
#if BUCKET
  /* Q_S both ways from the bitmap pass: d_on / d (precise when small) and 1 - d_off / d (precise
   * when close to 1); logs of 1 - x through log1p. The ghost term is a difference of two small
   * logs when M and Q_S are small: these keep it to fp32 rounding. */
  const float qs = on_frac;
  const float t = 1.0f - M;
  if (t > 0.0f && off_frac > 0.0f) {
    const float q = qs < 0.5f ? qs : 1.0f - off_frac;
    const float log_off = qs < 0.5f ? log1pf(-qs) : logf(off_frac); /* log(1 - Q_S) */
    const float log_t = log1pf(-M);
#if OFFSET == 0
    l += t * (log_t - log_off); /* one ghost token per row: counted on the first shard */
#endif
    const float ratio = expf(log_t - log_off); /* t / (1 - Q_S) */
    rs.cin = M + t;
    rs.cout = M - ratio * q;
  }
#endif
  return l;
}

/* The forward KL's G at support entry k, before gscale. */
__device__ __forceinline__ float support_ds(const support_t& sup, int k, const row_t& rs) {
  return rs.cin * fexp(sup.lq[k]) - rs.pscale * sup.p[k];
}
%else
enum { MODE_SUMS = 3 }; /* kl_sparse_sums: this shard's part of A (the header's) */
#define BETA {{ f32(P.BETA or 0) }}

struct max_op {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
/* A category's Q and g; the larger Q wins (ties: the larger g, so the merge commutes). */
struct qg_t {
  float q, g;
};
struct qg_max {
  __device__ __forceinline__ qg_t operator()(qg_t a, qg_t b) const {
    return a.q > b.q || (a.q == b.q && a.g >= b.g) ? a : b;
  }
};

/* One category's g (returned) and its loss terms (added to *loss), P and Q the teacher's and
 * student's probabilities, lP = log max(P, eps), lQ = log Q, D = P - Q as precisely as the
 * caller has it (dense_rows' elem_terms, per category). */
__device__ __forceinline__ float cat_terms(float P, float lP, float Q, float lQ, float D,
                                           float& loss) {
%if P.DIV == "reverse" then
  (void)P, (void)D;
  const float g = Q != 0.0f ? lQ - lP : 0.0f; /* Q = 0 (log Q = -inf): the category adds 0 */
  loss += Q * g;
  return g;
%elseif P.DIV == "tvd" then
  /* |P - Q| / 2 and sign(Q - P) / 2 from D (the tail's without two numbers near 1) */
  (void)P, (void)lP, (void)Q, (void)lQ;
  loss += 0.5f * fabsf(D);
  return D < 0.0f ? 0.5f : D > 0.0f ? -0.5f : 0.0f;
%elseif P.DIV == "skew_forward" then
%  local a = P.ALPHA
  /* m = a P + (1 - a) Q. P log(P / m), P / m = 1 + (1 - a) x with x = D / m: log1p near 1, as
   * the JSD's terms (the tail's two terms are first order in D); below eps log P is floored
   * (the contract). g = -(1 - a) P / m needs no constant dropped: it is 0 where Q >> P and
   * lies in [-(1 - a) / a, 0]. */
  (void)lQ;
  const float m = {{ f32(a) }} * P + {{ f32(1.0 - a) }} * Q;
  if (!(m > 0.0f)) return 0.0f; /* P = Q = 0: the category adds nothing */
  if (P != 0.0f) {
    const float xp = {{ f32(1.0 - a) }} * (D / m);
    loss += P * (P < EPS ? lP - logf(m) : fabsf(xp) < 0.5f ? log1pf(xp) : logf(P / m));
  }
  return {{ f32(a - 1.0) }} * (P / m);
%elseif P.DIV == "skew_reverse" then
%  local a = P.ALPHA
%  local k = (1.0 - a) / a
  /* m = a Q + (1 - a) P. Q log(Q / m) = -Q log1p(x), m / Q = 1 + x with x = (1 - a) D / Q:
   * exact where the ratio nears 1 (the student matches) and where P = 0 (log a); far from 1
   * log Q - log m is itself precise (m at the smallest normal where a Q underflows: the term
   * is then Q < 2^-125 times a log). No floor of log P: Q = 0 adds nothing. */
  (void)lP;
  if (Q == 0.0f) return 0.0f;
  const float x = {{ f32(1.0 - a) }} * (D / Q);
  const float m = fmaxf({{ f32(a) }} * Q + {{ f32(1.0 - a) }} * P, 1.17549435e-38f);
  loss += fabsf(x) < 0.5f ? -Q * log1pf(x) : Q * (lQ - logf(m));
  /* g less its constant -log(a) - 1, from r = P / Q as dense_rows' (0 at P = 0, where Q >> P):
   * k r / (1 + k r) - log1p(k r), k = (1 - a) / a. Where k r passes 1e30 (or P / Q overflows)
   * the first term is 1 and log1p(k r) = log k + log P - log Q in fp32. */
  if (P == 0.0f) return 0.0f;
  const float kr = {{ f32(k) }} * (P / Q);
  if (kr < 1e30f) return kr / (1.0f + kr) - log1pf(kr);
  return 1.0f - ({{ f32(math.log(k)) }} + (logf(P) - lQ));
%else
  const float m = BETA * P + (1.0f - BETA) * Q;
  if (m > 0.0f) {
    /* P / m = 1 + (1 - beta) x and Q / m = 1 - beta x, x = D / m: near 1 (|.| < 1/2) the logs
     * go through log1p, which keeps the digits a ratio near 1 has (the tail's: its two terms
     * are first order in D and their sum second order); far from 1 the ratio itself is
     * precise. Below eps log P is floored (the contract). */
    const float x = D / m, xp = (1.0f - BETA) * x, xq = -BETA * x;
    if (P != 0.0f)
      loss += BETA * P * (P < EPS ? lP - logf(m) : fabsf(xp) < 0.5f ? log1pf(xp) : logf(P / m));
    if (Q != 0.0f) loss += (1.0f - BETA) * Q * (fabsf(xq) < 0.5f ? log1pf(xq) : logf(Q / m));
  }
  /* g less its constant -(1 - beta) log(1 - beta), from P / Q (dense_rows says why); the
   * division is K per row here, off the streaming path. Where P / Q is huge (Q tiny) log1p(c
   * P / Q) is softplus(log c + log P - log Q), with no overflow. */
  if (Q == 0.0f || P == 0.0f) return 0.0f;
  const float r = P / Q;
%  local c = P.BETA / (1.0 - P.BETA) -- beta / (1 - beta)
  if (r < 1e30f) return -(1.0f - BETA) * log1pf({{ f32(c) }} * r);
  const float lx = {{ f32(math.log(c)) }} + logf(P) - lQ;
  return -(1.0f - BETA) * (fmaxf(lx, 0.0f) + log1pf(expf(-fabsf(lx))));
%end
}

/* The categories of a DIV row (DIV above): each local support entry's Q and g into sup.q,
 * sup.g; the row's A, g_r and cout into rs (BACKWARD: rs holds them, saved); the return value:
 * this shard's loss terms (the tail's on the first shard), or with MODE_SUMS this shard's sum
 * of Q_k (g_r - g_k) over its support. rs.lse and (RENORM) rs.ldno = log dno are set before;
 * off_frac = d_off / d, on_frac = d_on / d and mo (RENORM) from the merged records; a_shards
 * (SHARDED) the shards' sums. */
template <int MODE>
__device__ float div_terms(support_t& sup, float off_frac, float on_frac, float mo,
                           float a_shards, float* sh_f, row_t& rs) {
  __shared__ double sh_d[THREADS / 32];
  double mp = 0.0;
  float nv = 0.0f;
  for (int k = threadIdx.x; k < K; k += THREADS) mp += (double)sup.p[k], nv += sup.id[k] != -1;
  /* M in fp64: the tail's 1 - M and Q_S - M keep their digits */
  const double md = block_sum_d<THREADS>(mp, sh_d);
  const float M = (float)md;
  const float ncat = block_sum<THREADS>(nv, sh_f); /* the valid ids, every shard's */
#if RENORM
  /* M = 0: no divergence, as the forward KL's RENORM; one category (K = 1): P = Q = 1 and no
   * divergence either, exactly (rounding in log P and log Q would leave a loss) */
  const bool live = M > 0.0f && ncat > 1.0f;
  const float log_m = live ? logf(M) : 0.0f;
  /* b, the largest local support score (the same in every pass: the same gather); log Q_k =
   * (s_k - b) - ldno, ldno = log dno + mo - b (0 + log dno unsharded), no large lse subtracted */
  float b = KL_NEG_INF;
  for (int k = threadIdx.x; k < K; k += THREADS)
    if (sup.id[k] >= 0) b = fmaxf(b, sup.s[k]);
  b = block_reduce<THREADS>(b, sh_f, KL_NEG_INF, max_op());
  if (b == KL_NEG_INF) b = 0.0f; /* nothing local */
  if (MODE != MODE_BACKWARD) rs.ldno += mo - b;
#else
  (void)mo;
#endif
  float loss = 0.0f;
  for (int k = threadIdx.x; k < K; k += THREADS) {
    float Q = 0.0f, g = 0.0f;
#if RENORM
    if (sup.id[k] >= 0 && live) {
      const float lQ = (sup.s[k] - b) - rs.ldno, P = sup.p[k] / M;
#if LOGPROBS
      const float lP = fmaxf(sup.lp[k] - log_m, LOG_EPS); /* the given log p less log M */
#else
      const float lP = logf(fmaxf(P, EPS));
#endif
#else
    if (sup.id[k] >= 0) {
      const float lQ = sup.s[k] - rs.lse, P = sup.p[k];
#if LOGPROBS
      const float lP = fmaxf(sup.lp[k], LOG_EPS);
#else
      const float lP = sup.lp[k]; /* log max(p, eps) already */
#endif
#endif
      Q = expf(lQ);
      g = cat_terms(P, lP, Q, lQ, P - Q, loss);
    }
    sup.q[k] = Q, sup.g[k] = g;
  }
  __syncthreads(); /* sup.q, sup.g visible to the block (write_g reads them at any k) */
  if (MODE == MODE_BACKWARD) return 0.0f;
  float tail_loss = 0.0f, gt = 0.0f, qt = 0.0f;
#if BUCKET
  /* the tail category exists where a column lies off S: the support's distinct valid ids do
   * not cover the vocabulary (not off_frac > 0, which underflows where the student puts all
   * but 1e-38 of its mass on S: the JSD's tail term beta P log(1 / beta) stays) */
  const bool tail = ncat < (float)VTOT;
  if (tail) {
    const float pt = (float)fmax(1.0 - md, 0.0);
    /* log(1 - M): log1p where M is small, else the log of 1 - M (formed in fp64) */
    const float lpt = pt > EPS ? (M < 0.5f ? log1pf(-M) : logf(pt)) : LOG_EPS;
    /* Q_tail = d_off / d exactly; its log from whichever of Q_S, 1 - Q_S is precise */
    qt = off_frac;
    const float lqt = on_frac < 0.5f ? log1pf(-on_frac) : logf(off_frac);
    /* D = P_tail - Q_tail = Q_S - M where Q_S < 1/2: no difference of two numbers near 1 */
    const float dt = pt == 0.0f ? -qt : on_frac < 0.5f ? (float)((double)on_frac - md) : pt - qt;
    gt = cat_terms(pt, lpt, qt, lqt, dt, tail_loss);
  }
#else
  const bool tail = false;
  (void)off_frac, (void)on_frac;
#endif
%if SHARDED then
  /* the reference category: one every shard knows (the tail, else g_r = 0) */
  const float gr = tail ? gt : 0.0f;
%else
  /* the reference category: the largest Q, whose g - E would cancel */
  __shared__ qg_t sh_qg[THREADS / 32];
  qg_t best = {-1.0f, 0.0f};
  for (int k = threadIdx.x; k < K; k += THREADS) best = qg_max()(best, qg_t{sup.q[k], sup.g[k]});
  best = block_reduce<THREADS>(best, sh_qg, qg_t{-1.0f, 0.0f}, qg_max());
  const float gr = tail && qt >= best.q ? gt : best.g;
%end
  float a = 0.0f; /* A = sum_C Q_c (g_r - g_c): this shard's support's terms */
  for (int k = threadIdx.x; k < K; k += THREADS) a += sup.q[k] * (gr - sup.g[k]);
  if (MODE == MODE_SUMS) return block_sum<THREADS>(a, sh_f);
%if SHARDED then
  float A = a_shards;
%else
  (void)a_shards;
  float A = block_sum<THREADS>(a, sh_f);
%end
  if (tail) A += qt * (gr - gt); /* 0 where the tail is the reference */
  rs.A = A, rs.gr = gr;
  rs.cout = tail ? (gt - gr) + A : 0.0f; /* g_tail - E; RENORM: no column off S is a category */
  loss = block_sum<THREADS>(loss, sh_f);
#if OFFSET == 0
  loss += tail_loss; /* one tail category per row: counted on the first shard */
#endif
  return loss;
}

/* The divergence's G at support entry k, before gscale: Q_k (g_k - E). */
__device__ __forceinline__ float support_ds(const support_t& sup, int k, const row_t& rs) {
  return sup.q[k] * ((sup.g[k] - rs.gr) + rs.A);
}
%end

/* G = gscale c_out q over the row, then gscale (c_in q - pscale p) on the support. With INPLACE
 * (16-bit G over fp32 z) the row goes in groups: every thread reads the group, the block
 * synchronizes, then writes it; G's bytes [2a, 2b) are fp32 columns [a/2, b/2), read by then. */
__device__ __forceinline__ void write_g(const support_t& sup, const logit_t* zr, grad_t* gr,
                                        const bias_t* __restrict__ bias,{{ ETP }} float invT,
                                        const row_t& rs, float gscale{{ HARD and ", const ce_t& ce" or "" }}) {
%if P.SOFT then
  gscale *= {{ WS }}; /* the divergence's weight (the CE's gh carries its own) */
%end
%if HARD then
  const float tz = 1.0f / invT; /* z' = s T */
%end
  const float co = gscale * rs.cout;
  for (int base = 0; base < V; base += 4 * THREADS * VEC) { /* block-uniform trip count */
    float s[4][VEC];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int v = base + (u * THREADS + threadIdx.x) * VEC;
      if (v + VEC <= V) load_s<true>(zr, bias,{{ ETILE and " erec, ebase," or "" }} v, invT, s[u]);
      else if (v < V) load_s<false>(zr, bias,{{ ETILE and " erec, ebase," or "" }} v, invT, s[u]);
    }
#if INPLACE
    __syncthreads();
#endif
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int v = base + (u * THREADS + threadIdx.x) * VEC;
      float gv[VEC];
#pragma unroll
      for (int i = 0; i < VEC; i++) {
        gv[i] = co * fexp(s[u][i] - rs.lse);
%if HARD then
        gv[i] += {{ GZ }} * fexp(s[u][i] * tz - rs.lse1);
%  if LSMOOTH then
        gv[i] -= ce.gu;
%  end
%end
%if CAPPED then
        gv[i] *= cap_slope(s[u][i], invT);
%end
      }
      if (v + VEC <= V) store_cols<true>(gr, v, gv);
      else if (v < V) store_cols<false>(gr, v, gv);
    }
  }
  __syncthreads(); /* the stream's stores are visible to the block before the support rewrite */
  for (int k = threadIdx.x; k < K; k += THREADS) {
    const int id = sup.id[k];
%if HARD or CAPPED then
    if (id >= 0) {
      float gk = gscale * support_ds(sup, k, rs);
%  if DIVX then
      const float sk = sup.s[k]; /* the column's score */
%  else
      const float sk = sup.lq[k] + rs.lse; /* the column's score */
%  end
%  if HARD then
      gk += {{ GZ }} * fexp(sk * tz - rs.lse1){{ LSMOOTH and " - ce.gu" or "" }};
%  end
%  if CAPPED then
      gk *= cap_slope(sk, invT);
%  end
      (void)sk;
      gr[id] = from_f32<grad_t>(gk);
    }
%else
    if (id >= 0) gr[id] = from_f32<grad_t>(gscale * support_ds(sup, k, rs));
%end
  }
%if HARD then
  __syncthreads(); /* the support's stores visible before the label column's */
  if (threadIdx.x == 0 && ce.y >= 0) { /* the label column, whole: its divergence term, the CE's */
    int at = -1;
    for (int k = 0; k < K; k++)
      if (sup.id[k] == ce.y) at = k;
    const float q = fexp(ce.sy - rs.lse);
    float gy = at >= 0 ? gscale * support_ds(sup, at, rs) : co * q;
%  if P.ZLOSS or LSMOOTH then
    gy += {{ GZ }} * fexp(ce.sy * tz - rs.lse1) -
          {{ f32(1.0 - (P.LSMOOTH or 0)) }} * ce.gh{{ LSMOOTH and " - ce.gu" or "" }};
%  else
    gy += ce.gh * (fexp(ce.sy * tz - rs.lse1) - 1.0f);
%  end
%  if CAPPED then
    gy *= cap_slope(ce.sy, invT);
%  end
    gr[ce.y] = from_f32<grad_t>(gy);
  }
%end
}

/* One block per row: pass 2 of the fused and forward modes, the backward pass and (DIV) the
 * split API's kl_sparse_sums. */
%local function zero_rs() return "rs." .. table.concat(RT, " = rs.") .. " = 0.0f;" end
template <int MODE>
__device__ __forceinline__ void sparse_row(const logit_t* z, grad_t* g,
                                           const id_t* __restrict__ ids,
                                           const val_t* __restrict__ vals,
                                           const bias_t* __restrict__ bias, const void* labels,
                                           int labels_is64, i64 ignore_index,
                                           const float* __restrict__ hdr,{{ RWP }}
                                           const float* __restrict__ part, int nrec,
                                           i64 srow, i64 srec, float* rowstat,
                                           float* __restrict__ lossp,{{ LHP }}
                                           const float* __restrict__ gout, int gout_per_row,
                                           i64 row0) {
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  __shared__ support_t sup;
  __shared__ float sh_f[THREADS / 32];
%if DIVX then
  __shared__ float sh_rec[7]; /* lse, d_off / d, d_on / d, lse(z'), log dno, the shards' A, mo */
%else
  __shared__ float sh_rec[6]; /* lse, d_off / d, d_on / d, lse(z'), log Q_S, the shards' E */
%end
%if LSMOOTH then
  __shared__ float sh_zs; /* the row's sum of z' (every record's) */
%end
  const logit_t* zr = z + (i64)r * LD;
  grad_t* gr = g + (i64)r * LDG;
  const bool kept = row_kept(labels, labels_is64, ignore_index, row);
%if ETILE then
  /* E16: the row's tile records (their m_t: s = m_t + x), none in backward (x = s - lse) */
  const float* erec = MODE == MODE_BACKWARD ? nullptr : part + (i64)r * srow * PART_FLOATS;
%  if HARD then
  __shared__ float sh_zy; /* the label's z' = s_y T, from the records (slot S) */
%  end
%end
%if ROWW then
  /* the sums kernel has none */
  const float rw = {{ DIVX and "MODE == MODE_SUMS ? 1.0f : " or "" }}row_weights[row];
%end
  const float invT = INV_T(hdr);
  row_t rs;
  float loss = 0.0f;
  if (MODE == MODE_BACKWARD) {
    const float* saved = rowstat + ROWSTAT_FLOATS * row;
%if DIVX then
    {{ zero_rs() }} /* the fields the tail does not save */
%end
%for _, f in ipairs(RF) do
    rs.{{ f }} = saved[ROWSTAT_{{ f:upper() }}];
%end
%if HARD then
    rs.lse1 = saved[ROWSTAT_LSE1];
%end
    if (!kept) {{ zero_rs() }}
%if HARD or DIVX then
    if (kept) /* the CE's gradient (DIV: the categories) need the row whatever its mass */
%else
    if (rs.cout != 0.0f || rs.cin != 0.0f || rs.pscale != 0.0f)
%end
      gather(sup, zr, ids, vals, bias,{{ ETILE and " erec, rs.lse," or "" }} row, invT, rs.lse);
%if DIVX then
    if (kept) div_terms<MODE_BACKWARD>(sup, 0.0f, 0.0f, 0.0f, 0.0f, sh_f, rs); /* sup.q, sup.g */
%end
  } else if (kept) {
%if BMERGE then
    {
      /* the block merges the row's records (MERGE = block): thread k takes records k,
       * k + THREADS, ..., then block_reduce's fixed order; kept is the block's, so every thread
       * reaches the barriers */
      __shared__ acc_t sh_acc[THREADS / 32];
      acc_t a = ACC_NONE;
      for (int k = threadIdx.x; k < nrec; k += THREADS)
        a = acc_merge()(a, acc_of(part + ((i64)r * srow + (i64)k * srec) * PART_FLOATS));
      a = block_reduce<THREADS>(a, sh_acc, ACC_NONE, acc_merge());
      if (threadIdx.x == 0) {
        const float d = a.don + a.doff;
        sh_rec[0] = a.m + logf(d), sh_rec[1] = a.doff / d, sh_rec[2] = a.don / d;
%  if HARD then
        sh_rec[3] = a.mh + logf(a.dh);
%  end
%  if OWNON then
        sh_rec[4] = logf(a.dno), sh_rec[6] = a.mo;
%  end
%  if LSMOOTH then
        sh_zs = a.zs;
%  end
      }
    }
%else
    if (threadIdx.x == 0) {
      /* merge the row's records in order: record k at part + (r srow + k srec) PART_FLOATS, the
       * chunk's SPLIT partials or every shard's record of the row (kljit_shard_finish) */
      float m = KL_NEG_INF, don = 0.0f, doff = 0.0f;
%if HARD then
      float mh = KL_NEG_INF, dh = 0.0f;
%end
%if OWNON then
      float mo = KL_NEG_INF, dno = 0.0f;
%end
%if SHARDED then
      float es = 0.0f;
%end
%if LSMOOTH then
      float zs = 0.0f;
%end
      for (int k = 0; k < nrec; k++) {
        const float* rec = part + ((i64)r * srow + (i64)k * srec) * PART_FLOATS;
%if LSMOOTH then
        zs += rec[PART_ZS];
%end
%if HARD then
        const float mm1 = fmaxf(mh, rec[PART_MH]);
        if (mm1 != KL_NEG_INF)
          dh = dh * expf(mh - mm1) + rec[PART_DH] * expf(rec[PART_MH] - mm1), mh = mm1;
%end
%if OWNON then
        const float mmo = fmaxf(mo, rec[PART_MO]);
        if (mmo != KL_NEG_INF)
          dno = dno * expf(mo - mmo) + rec[PART_DNO] * expf(rec[PART_MO] - mmo), mo = mmo;
%end
%if SHARDED then
        es += rec[PART_S]; /* each shard's sum of Q g over its support (kl_sparse_sums) */
%end
        const float mm = fmaxf(m, rec[PART_M]);
        if (mm == KL_NEG_INF) continue;
        const float ra = expf(m - mm), rb = expf(rec[PART_M] - mm);
        don = don * ra + rec[PART_D_ON] * rb, doff = doff * ra + rec[PART_D_OFF] * rb, m = mm;
      }
      const float d = don + doff;
      sh_rec[0] = m + logf(d), sh_rec[1] = doff / d, sh_rec[2] = don / d;
%if HARD then
      sh_rec[3] = mh + logf(dh);
%end
%if OWNON then
      sh_rec[4] = logf(dno), sh_rec[6] = mo; /* the support's own lse, its two parts apart */
%end
%if SHARDED then
      sh_rec[5] = es;
%end
%if LSMOOTH then
      sh_zs = zs;
%end
    }
%end
    __syncthreads();
    const float lse = sh_rec[0], off_frac = sh_rec[1], on_frac = sh_rec[2];
%if ETILE then
    /* the support's cross term from the GEMM's exact scores: each tile's sum p (s - m_t) and
     * sum p, taken to the row's lse (thread 0's, as the loss takes it: the threads' merged
     * records may differ in the last bit) */
    float ps = 0.0f;
%  if HARD then
    float zy = 0.0f;
%  end
    for (int k = threadIdx.x; k < nrec; k += THREADS) {
      const float* rec = part + ((i64)r * srow + (i64)k * srec) * PART_FLOATS;
      if (rec[PART_PW] != 0.0f) ps += rec[PART_PS] + rec[PART_PW] * (rec[PART_M] - lse);
%  if HARD then
      zy += rec[PART_S]; /* one tile's at most */
%  end
    }
    ps = block_sum<THREADS>(ps, sh_f);
%  if HARD then
    zy = block_sum<THREADS>(zy, sh_f);
    if (threadIdx.x == 0) sh_zy = zy;
%  end
%end
    gather(sup, zr, ids, vals, bias,{{ ETILE and " erec, lse," or "" }} row, invT, lse);
%if DIVX then
    {{ zero_rs() }}
    rs.lse = lse;
    rs.ldno = {{ OWNON and "sh_rec[4]" or "0.0f" }};
    loss = div_terms<MODE>(sup, off_frac, on_frac, {{ OWNON and "sh_rec[6]" or "0.0f" }},
                           {{ SHARDED and "sh_rec[5]" or "0.0f" }}, sh_f, rs);
    if (MODE == MODE_SUMS) { /* this shard's part of E, into its own record's slot S */
      if (threadIdx.x == 0) rowstat[row * PART_FLOATS + PART_S] = loss;
      return;
    }
%else
    loss = support_loss(sup, lse, off_frac, on_frac,{{ ETILE and " ps," or "" }} sh_f, rs);
%end
%if HARD then
    rs.lse1 = sh_rec[3];
%end
  } else {
%if DIVX then
    if (MODE == MODE_SUMS) {
      if (threadIdx.x == 0) rowstat[row * PART_FLOATS + PART_S] = 0.0f;
      return;
    }
%end
    {{ zero_rs() }}
%if HARD then
    rs.lse1 = 0.0f;
%end
  }
%if HARD then
  /* the CE's label, as this shard's column (labels are global ids), and its score, read
   * before G overwrites the row */
  __shared__ ce_t sh_ce;
  if (threadIdx.x == 0) {
    const i64 y = !labels ? -1 : labels_is64 ? ((const i64*)labels)[row]
                                             : (i64)((const int*)labels)[row];
    sh_ce.y = kept && y >= OFFSET && y < (i64)OFFSET + V ? (int)(y - OFFSET) : -1;
%if ETILE then
    /* E16: from the records (exact), or in backward (no records) from x */
    sh_ce.sy = sh_ce.y < 0 ? 0.0f
               : erec    ? sh_zy * invT
                         : score_at(zr, bias, erec, rs.lse, sh_ce.y, invT);
%else
    sh_ce.sy = sh_ce.y >= 0 ? score_at(zr, bias, sh_ce.y, invT) : 0.0f;
%end
  }
  __syncthreads();
  ce_t ce = sh_ce;
  ce.gh = grad_scale(hdr, gout, gout_per_row, row, MODE){{ RWS }} * {{ f32(P.HARD) }} / invT * {{ INV_T2 }};
%if P.ZLOSS then
  ce.gz = ce.gh * (1.0f + {{ f32(2.0 * P.ZLOSS) }} * rs.lse1);
%end
%if LSMOOTH then
  ce.gu = ce.gh * {{ f32(P.LSMOOTH / VTOT) }};
%end
  float hard = 0.0f; /* the CE's part of the row's loss, kept apart (lossh) */
  if (kept && MODE != MODE_BACKWARD) { /* wh / t2 (lse(z') - z'_y): the helpers multiply by c t2 */
%if LSMOOTH then
    float ce_loss = ce.y >= 0 ? -{{ f32(1.0 - P.LSMOOTH) }} * ce.sy / invT : 0.0f;
%else
    float ce_loss = ce.y >= 0 ? -ce.sy / invT : 0.0f;
%end
#if OFFSET == 0
%if P.ZLOSS then
    ce_loss += rs.lse1 * (1.0f + {{ f32(P.ZLOSS) }} * rs.lse1); /* once per row: the first shard */
%else
    ce_loss += rs.lse1; /* once per row: on the first shard */
%end
%if LSMOOTH then
    ce_loss -= {{ f32(P.LSMOOTH / VTOT) }} * sh_zs; /* the merged records' sum: the row's */
%end
#endif
    hard = {{ f32(P.HARD) }} * {{ INV_T2 }} * ce_loss;
  }
%end
%if P.SOFT then
  loss *= {{ WS }};
%end
%if ROWW then
  loss *= rw; /* the row's weight: its loss and (below) its gradient, both terms */
%  if HARD then
  hard *= rw;
%  end
%end
%if HARD then
  if (MODE != MODE_BACKWARD && threadIdx.x == 0) {
    lossp[row] = loss;
    lossh[row] = hard; /* kl_finish_loss adds the two and reports them as the loss's parts */
  }
%else
  if (MODE != MODE_BACKWARD && threadIdx.x == 0) lossp[row] = loss;
%end
  if (MODE == MODE_FORWARD) {
    if (threadIdx.x == 0) {
      float* saved = rowstat + ROWSTAT_FLOATS * row;
%for _, f in ipairs(RF) do
      saved[ROWSTAT_{{ f:upper() }}] = rs.{{ f }};
%end
%if HARD then
      saved[ROWSTAT_LSE1] = rs.lse1;
%end
    }
    return;
  }
%if HARD or DIVX then
  if (!kept) {
%else
  if (rs.cout == 0.0f && rs.cin == 0.0f && rs.pscale == 0.0f) {
%end
    zero_range(gr, 0, V);
    return;
  }
  write_g(sup, zr, gr, bias,{{ ETILE and " erec, rs.lse," or "" }} invT, rs, grad_scale(hdr, gout, gout_per_row, row, MODE){{ RWS }}{{ HARD and ", ce" or "" }});
}

/* g may alias z (G overwrites the chunk logits): no restrict on either. */
{{ K.kernel("kl_sparse_fused") }} {
  sparse_row<MODE_FUSED>(z, g, ids, vals, bias, labels, labels_is64, ignore_index, hdr,{{ RWA }} part,
                         nrec, srow, srec, nullptr, lossp,{{ LHA }} nullptr, 0, row0);
}

{{ K.kernel("kl_sparse_forward") }} {
  sparse_row<MODE_FORWARD>(z, nullptr, ids, vals, bias, labels, labels_is64, ignore_index, hdr,{{ RWA }}
                           part, nrec, srow, srec, rowstat, lossp,{{ LHA }} nullptr, 0, row0);
}

{{ K.kernel("kl_sparse_backward") }} {
  sparse_row<MODE_BACKWARD>(z, g, ids, vals, bias, labels, labels_is64, ignore_index, hdr,{{ RWA }}
                            nullptr, 0, 0, 0, (float*)rowstat, nullptr,{{ LHN }} gout, gout_per_row, row0);
}
%if DIVX then

/* Split API (kljit_shard_sums): one block per chunk row merges the row's records (every
 * shard's, as pass 2 does), sums Q_k (g_r - g_k) over this shard's support entries (A's
 * terms; the header's) and writes it to slot S
 * of the row's record in out (slot S only: part may be the same buffer). An ignored row: 0. */
{{ K.kernel("kl_sparse_sums") }} {
  sparse_row<MODE_SUMS>(z, nullptr, ids, vals, bias, labels, labels_is64, ignore_index, hdr,{{ RWN }}
                        part, nrec, srow, srec, out, nullptr,{{ LHN }} nullptr, 0, row0);
}
%end

/* Split API (kljit_shard_stats): one thread per chunk row merges the row's SPLIT records, in
 * order, into one record (PART) at out + (row0 + r) PART_FLOATS (mh, dh the CE's, mo, dno the
 * support's own (max, sum-exp) with RENORM and DIV, S NaN on a shard with DIV: else 0; an
 * ignored row: zeros; pass 2 never reads it). */
%-- (LSMOOTH: zs, the sum of z' over the row's SPLIT segments, too)
{{ K.kernel("kl_sparse_merge") }} {
  const int r = blockIdx.x * {{ iface.MERGE_THREADS }} + threadIdx.x;
  if (r >= rows) return;
  float rec[PART_FLOATS] = {};
  if (row_kept(labels, labels_is64, ignore_index, row0 + r)) {
    float m = KL_NEG_INF, don = 0.0f, doff = 0.0f;
%if HARD then
    float mh = KL_NEG_INF, dh = 0.0f;
%end
%if OWNON then
    float mo = KL_NEG_INF, dno = 0.0f;
%end
%if LSMOOTH then
    float zs = 0.0f;
%end
    for (int k = 0; k < SPLIT; k++) {
      const float* p = part + ((i64)r * SPLIT + k) * PART_FLOATS;
%if LSMOOTH then
      zs += p[PART_ZS];
%end
%if HARD then
      const float mm1 = fmaxf(mh, p[PART_MH]);
      if (mm1 != KL_NEG_INF)
        dh = dh * expf(mh - mm1) + p[PART_DH] * expf(p[PART_MH] - mm1), mh = mm1;
%end
%if OWNON then
      const float mmo = fmaxf(mo, p[PART_MO]);
      if (mmo != KL_NEG_INF)
        dno = dno * expf(mo - mmo) + p[PART_DNO] * expf(p[PART_MO] - mmo), mo = mmo;
%end
      const float mm = fmaxf(m, p[PART_M]);
      if (mm == KL_NEG_INF) continue;
      const float ra = expf(m - mm), rb = expf(p[PART_M] - mm);
      don = don * ra + p[PART_D_ON] * rb, doff = doff * ra + p[PART_D_OFF] * rb, m = mm;
    }
    rec[PART_M] = m, rec[PART_D_ON] = don, rec[PART_D_OFF] = doff;
%if HARD then
    rec[PART_MH] = mh, rec[PART_DH] = dh; /* the CE's (max, sum-exp) of z' */
%end
%if OWNON then
    rec[PART_MO] = mo, rec[PART_DNO] = dno; /* the support's own (max, sum-exp) */
%end
%if LSMOOTH then
    rec[PART_ZS] = zs; /* the sum of z' over this shard's columns */
%end
%if SHARDED then
    rec[PART_S] = __int_as_float(0x7fc00000); /* NaN until kl_sparse_sums writes this shard's sum */
%end
  }
  float* o = out + (row0 + r) * PART_FLOATS;
  for (int k = 0; k < PART_FLOATS; k++) o[k] = rec[k];
}
%if P.CHECK then

/* Checked mode: kinds of bad input, reported as (row << 8) | kind through atomicMin. */
enum { BAD_ID_RANGE = 1, BAD_ID_DUPLICATE = 2, BAD_VALUE_NONFINITE = 3, BAD_PROB_NEGATIVE = 4,
       BAD_ROW_WEIGHT = 5 /* (ROWW) negative, NaN or infinite: exec_check.c's kind 5 */ };

__device__ __forceinline__ void report(u64* flag, i64 row, int kind) {
  atomicMin(flag, ((u64)row << 8) | (u64)kind);
}

{{ K.kernel("kl_sparse_check") }} {
  /* one block per row of the call (blockIdx.x); ignored rows are not checked */
  const i64 row = blockIdx.x;
  __shared__ i64 sh_id[K];
  if (!row_kept(labels, labels_is64, ignore_index, row)) return;
  int bad = 0;
  for (int k = threadIdx.x; k < K; k += {{ CHECK_THREADS }}) {
    const i64 id = (i64)ids[row * K + k];
    const float val = to_f32(vals[row * K + k]);
    const bool finite = (__float_as_uint(val) & 0x7f800000u) != 0x7f800000u;
    sh_id[k] = id;
    if (!bad && (id < 0 || id >= VTOT)) bad = BAD_ID_RANGE; /* ids are global */
#if LOGPROBS
    if (!bad && !finite && val != KL_NEG_INF) bad = BAD_VALUE_NONFINITE; /* -inf: p = 0 */
#else
    if (!bad && !finite) bad = BAD_VALUE_NONFINITE;
    if (!bad && val < 0.0f) bad = BAD_PROB_NEGATIVE;
#endif
  }
%if ROWW then
  const float w = row_weights[row];
  if (!bad && (!(w >= 0.0f) || (__float_as_uint(w) & 0x7f800000u) == 0x7f800000u))
    bad = BAD_ROW_WEIGHT;
%end
  __syncthreads();
  /* duplicates: every pair once, O(K^2 / CHECK_THREADS) comparisons in shared memory */
  for (int k = threadIdx.x; k < K && !bad; k += {{ CHECK_THREADS }})
    for (int j = k + 1; j < K; j++)
      if (sh_id[j] == sh_id[k]) {
        bad = BAD_ID_DUPLICATE;
        break;
      }
  if (bad) report(flag, row, bad); /* several threads of a row: the smallest kind wins */
}
%end
