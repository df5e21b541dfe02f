%-- SPDX-License-Identifier: Apache-2.0
%-- dense_rows.cu.lua: row kernels of the dense-teacher KL loss (probs, log-probs, logits).
%--
%-- Math, per kept row (s = (z + b) / T, q = softmax(s), p the teacher):
%--   loss_i = sum_v p_v (log max(p_v, eps) - log q_v)                    (0 log 0 = 0)
%--   G_v    = gscale * (sum(p) * q_v - p_v),  gscale = scale * T^2? / T * upstream (hdr)
%-- Teacher forms: probs (p given), logprobs (log p given), logits (p = softmax(zt / Tt)).
%-- The loss families (include/kljit.h's math; each an optional parameter below): the reverse
%-- KL and the JSD(beta) replace the per-element terms (G = gscale q (g - S), S a row total),
%-- the hard-label CE adds wh (lse(z') - z'_y) from the same passes, softcaps bend z and zt
%-- (G times dz'/dz), a padded teacher is a row stride.
%--
%-- Two variants, chosen by CLUSTER (grid: SPLIT blocks per row x rows of the chunk):
%-- CLUSTER = 0, two passes over global memory (any V, any arch):
%--   kl_dense_stats          pass 1: per segment, online (max, sum-exp) of s, sum(p), and for
%--                           teacher logits the teacher's own (max, sum-exp); -> part[r][split]
%--                           (not launched where the logits GEMM's epilogue writes the same
%--                           records, one per column tile: gemm_sm90.cu.lua's STATS)
%--   kl_dense_fused          pass 2: merge the row's partials -> lse; loss partial
%--                           sum p (log p - log q) -> lossp[row][split]; G -> g (in place ok)
%--   kl_dense_forward        pass 2 without G: loss partials and the row statistics -> rowstat
%--   kl_dense_backward       pass 2 from saved row statistics: G only
%--   kl_dense_merge          split API (tensor parallelism): a row's SPLIT partials -> one
%--                           record; pass 2 then merges nrec records at runtime strides
%--                           (the chunk's partials, or every shard's record of the row)
%--   kl_dense_sums           split API, DIV only: from the merged records, this shard's part
%--                           of the row total S (below) -> record slot S (kljit_shard_sums)
%--   With INPLACE (fp32 z, 16-bit G), pass 2 runs one block per row and writes the row's G
%--   over the first half of its own fp32 logits: in groups of columns, every thread reads the
%--   group, the block synchronizes, then writes it; G's bytes [2a, 2b) are fp32 columns
%--   [a/2, b/2), all read by then. The chunk needs no second buffer.
%-- CLUSTER = C > 0 (sm_90 thread-block clusters, V <= C * THREADS * NV * VEC): one pass.
%--   The C blocks of a cluster hold one row in registers (each thread NV vectors), merge their
%--   (max, sum-exp) through distributed shared memory, then compute loss and G from registers.
%--   Every byte of z and p is read once, and because the whole row is on chip before the first
%--   write, G (16-bit) is written in place over the first half of the row's fp32 logits: the
%--   chunk needs no second buffer. kl_dense_fused / _forward / _backward as above; no stats.
%-- The loss is summed in pass 2 from log q = s - lse rather than from sum p log p - sum p s
%-- + sum(p) lse, which would cancel catastrophically when the student is close to the teacher.
%-- Never materialized: anything of size N x V; the caller's buffer holds one chunk (R x LD).
%--
%-- Parameters (validated below):
%--   V        vocabulary size, 2..2^24            LD      row stride of z and g (elements)
%--   THREADS  64..1024, multiple of 32            SPLIT   blocks per row, 1..64
%--   CLUSTER  0 or SPLIT (a power of two <= 16)    NV      vectors per thread (cluster)
%--   LDG      row stride of g in GRAD elements (2 LD when 16-bit G overwrites fp32 z)
%--   INPLACE  bool: two-pass variant writes 16-bit G over fp32 z (one pass-2 block per row)
%--   LOGIT    f32|bf16|f16: dtype of z            GRAD    f32|bf16|f16: dtype of g
%--   TEACHER  probs|logprobs|logits               TDT     f32|bf16|f16: teacher dtype
%--   BIAS     bool; BDT f32|bf16|f16              TMODE   const|runtime; T (const mode)
%--   TT_SAME  bool: teacher temperature = T;  TT  teacher temperature otherwise
%--   EPS      (0, 1e-3): floor of p inside log p
%--   CHECK    bool: also emit kl_dense_check (checked mode: NaN/Inf, negative probabilities;
%--            with TCHUNK, NaN/Inf in the online teacher's input, head and bias: HT, TXDT)
%-- Optional (absent: the plain problem, whose source they leave byte for byte unchanged):
%--   TLD      teacher row stride >= V (a padded teacher: columns [V, TLD) are never read)
%--   TCHUNK   bool: the teacher rows are the chunk's (row r of the chunk, not row0 + r): the
%--            online teacher's logits, which its GEMM writes into the workspace per chunk
%--   TBDT     f32|bf16|f16: the online teacher's bias bt[V] (TCHUNK, TEACHER = logits), added
%--            to its logits as they are loaded: zt = Xt Wt^T + bt, before TSOFTCAP and 1 / TT
%--   HT, TXDT CHECK with TCHUNK only: the online teacher's hidden size Ht and the dtype of its
%--            input Xt [N, Ht] and head Wt [>= V, Ht], which kl_dense_check reads (its rows
%--            [0, V) of Wt and bt: the columns the loss uses)
%--   SOFTCAP  student logit cap c > 0: s = c tanh((z + b) / c) / T, and G gets the factor
%--            dz'/dz = 1 - tanh^2 = 1 - (s T / c)^2 (from s, which the passes hold anyway)
%--   TSOFTCAP teacher logit cap (TEACHER = logits): zt <- c tanh(zt / c) before 1 / TT
%--   HARD     weight wh > 0 of the hard-label CE, CE = lse(z') - z'_y at temperature 1: pass 1
%--            adds the (max, sum-exp) of z' = s T to the record (slots 5, 6; the same pass),
%--            pass 2 adds wh / t2 (lse(z') - z'_y) to the loss partial (the helpers multiply
%--            by c t2) and wh c g (softmax(z') - [v = y]) to G. T2: whether t2 = T^2.
%--            The saved row statistics (ROWSTAT below) grow from 4 to 8 floats a row.
%--   SOFT     weight ws != 1 of the divergence (loss and gradient)
%--   DIV      reverse|jsd|tvd|skew_forward|skew_reverse (absent: the forward KL), BETA for
%--            jsd, in (0, 1), ALPHA for the skew KLs, in (0, 1):
%--              reverse  loss q (log q - log p),  G = gscale q (g - S), g = log q - log p
%--              jsd      m = beta p + (1 - beta) q, loss beta p (log p - log m) + (1 - beta)
%--                       q (log q - log m),  G = gscale q (g - S), g = (1 - beta) log(q / m)
%--                       computed less its constant as -(1 - beta) log1p(beta p / ((1 - beta) q))
%--              tvd      loss 1/2 |p - q|,  G = gscale q (g - S), g = sign(q - p) / 2
%--                       computed less 1/2: 0 where q > p
%--              skew_forward  m = a p + (1 - a) q, loss p (log p - log m), g = -(1 - a) p / m:
%--                       0 where q >> p (a peaked student), as the JSD's g
%--              skew_reverse  m = a q + (1 - a) p, loss q (log q - log m) = -q log1p((1 - a)
%--                       (r - 1)) with r = p / q, g = log(q / m) - a q / m computed less its
%--                       constant -log(a) - 1 as k r / (1 + k r) - log1p(k r), k = (1 - a) / a:
%--                       0 where q >> p (a peaked student), as the JSD's g
%--            S = sum_v q g is a row total G needs before its first column: pass 2 runs one
%--            block per row (P2SPLIT = 1) and, fused, sweeps the row once for S before the
%--            sweep that writes G; forward saves S (row statistic 5) for backward. The cluster
%--            variant sums S from its registers over the cluster's blocks instead.
%--   SHARDED  bool, DIV only: a vocabulary shard. S needs every column of the row, so each
%--            shard sums its own part (kl_dense_sums, after the first exchange of records),
%--            the records carry it in slot S (kl_dense_merge writes NaN there until then: a
%--            skipped round shows as NaN, not as a plausible gradient), and pass 2 adds the
%--            shards' slots 7 for S instead of its own sweep.
%--   LSMOOTH  HARD only: label smoothing ls in (0, 1]: the CE's target (1 - ls) one-hot + ls
%--            uniform over the VTOT columns (VTOT: the global V of a shard; absent: V). Pass 2
%--            adds -(ls / VTOT) z' of its columns to the loss partial and -wh c g ls / VTOT to
%--            every G; the label column gets (1 - ls) of what it had.
%--   ZLOSS    HARD only: z-loss zl > 0, zl lse(z')^2 added to the CE (once per row, with its
%--            lse), and 2 zl lse(z') softmax(z') to its gradient.
%--   ROWW     bool: row weights w[N] (fp32) multiply the row's loss partials and gscale; with
%--            CHECK, kl_dense_check reports a kept row's negative, NaN or infinite weight.
%--   With HARD, pass 2 writes the CE's part of the loss partial apart, to lossh[row][P2SPLIT]
%--   (lossp keeps the divergence's): kl_finish_loss adds them and reports the parts.
%--   VOFF     HARD only: first global id of this vocabulary shard (absent: 0). The labels are
%--            global: the CE's -z'_y is this shard's where y - VOFF is one of its columns, and
%--            its lse(z') (from the records' slots 5, 6: global) is added by the shard whose
%--            VOFF is 0 only, so the shards' losses sum to the row's CE once.
%--   MERGE    "block": pass 2 merges a row's records with the whole block (thread k takes
%--            records k, k + THREADS, ..., then block_reduce's fixed order) instead of one
%--            thread; for many records a row: the logits GEMM's statistics epilogue writes one
%--            per column tile (501 at V = 128256), which one thread merged in series while the
%--            block waited (bench/RESULTS.md run 41). Absent: one thread, in record order.
%--   ETILE    LOGIT f16: z holds what the logits GEMM's E16 epilogue wrote (templates/
%--            gemm_sm90.cu.lua) instead of the chunk's logits: x = s - m_t per column tile of
%--            ETILE columns, m_t in the tile's record (slot m; the records are the GEMM's, one
%--            a tile: MERGE block, srec 1), or in backward x = s - lse with the row's saved lse.
%--            Pass 2 takes s back as m_t (lse) + x and adds no bias or temperature: s = (z + b)
%--            / T is what the GEMM stored, capped there under SOFTCAP (G's factor
%--            1 - (s T / c)^2 then comes from the s taken back, as it does from a loaded s).
%--            G (16-bit, LDG = LD) overwrites x element by element, each thread the columns it
%--            read, one block a row with four vectors in flight a thread. No pass 1
%--            (kl_dense_stats) and no kl_dense_sums (an unsharded head only). The online
%--            teacher's logits (TCHUNK, its bias TBDT) are read as the other passes read them.
%--   PART     "fused" (kl_dense_stats, _fused, _check) or "phased" (kl_dense_forward,
%--            _backward, _merge, _sums); absent: all of them. A plan builds the two parts as two
%--            modules compiled at once, so a cold plan waits for the larger half only.
%-- Launch: as the interface table below declares (its threads, clusters); the records part,
%-- rowstat and hdr are declared beside it (hdr: see helpers.cu.lua, kl_setup).
%-- Numerics: fp32 in registers; exp/log through the SFU (fexp/flog, common.cu.lua) in the row
%-- passes, expf in the (m, d) merges; fixed-order reductions.
%local P = P
%local iface = include("iface.cu.lua")
%local params = include("params.cu.lua")
%local dt, size = params.dt, params.size
%local VTOT = params.module()
%params.rows({ "LOGIT", "GRAD", "TDT", "BDT" })
%if P.TEACHER ~= "probs" and P.TEACHER ~= "logprobs" and P.TEACHER ~= "logits" then
%  reject("TEACHER must be probs, logprobs or logits")
%end
%if not P.TT_SAME and not (P.TT > 0 and P.TT < math.huge) then reject("TT must be > 0") end
%if P.CLUSTER ~= 0 and (P.CLUSTER ~= P.SPLIT or P.CLUSTER > 16 or P.CLUSTER & (P.CLUSTER - 1) ~= 0) then
%  reject("CLUSTER must be 0 or equal SPLIT, a power of two up to 16")
%end
%if P.INPLACE and (P.CLUSTER ~= 0 or P.LDG ~= 2 * P.LD) then
%  reject("INPLACE is the two-pass variant writing 16-bit G over fp32 z (LDG = 2 LD)")
%end
%-- Vector width: one 16-byte load of logits per step; the teacher is read with the same
%-- element count, vectorized only when every row start stays aligned (V % VEC == 0).
%local VEC = 16 // size[P.LOGIT]
%local TLD = P.TLD or P.V
%if type(TLD) ~= "number" or TLD < P.V then reject("TLD must be >= V") end
%if P.SOFTCAP ~= nil and not (P.SOFTCAP > 0 and P.SOFTCAP < math.huge) then
%  reject("SOFTCAP must be > 0")
%end
%if P.TSOFTCAP ~= nil and
%   not (P.TEACHER == "logits" and P.TSOFTCAP > 0 and P.TSOFTCAP < math.huge) then
%  reject("TSOFTCAP must be > 0 and needs TEACHER = logits")
%end
%local TXCHECK = P.TCHUNK == true and P.CHECK == true
%if TXCHECK and not (math.type(P.HT) == "integer" and P.HT >= 1 and dt[P.TXDT]) then
%  reject("CHECK with TCHUNK checks the online teacher: HT must be an integer >= 1 and TXDT "
%         .. "f32, bf16 or f16")
%end
%if not TXCHECK and (P.HT ~= nil or P.TXDT ~= nil) then reject("HT and TXDT need TCHUNK and CHECK") end
%if P.TBDT ~= nil and not (dt[P.TBDT] and P.TCHUNK and P.TEACHER == "logits") then
%  reject("TBDT must be f32, bf16 or f16 and needs TCHUNK with TEACHER = logits")
%end
%if P.HARD ~= nil and not (P.HARD > 0 and P.HARD < math.huge) then reject("HARD must be > 0") end
%if P.SOFT ~= nil and not (P.SOFT >= 0 and P.SOFT < math.huge) then reject("SOFT must be >= 0") end
%local HARD = P.HARD ~= nil
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
%params.ce_extras(HARD)
%local PARTS = iface.DENSE_PARTS
%if P.PART ~= nil and not PARTS[P.PART] then reject("PART must be fused or phased") end
%local ROWW = P.ROWW or false
%if P.MERGE ~= nil and P.MERGE ~= "block" then reject("MERGE must be block (absent: one thread)") end
%local BMERGE = P.MERGE == "block"
%local ETILE = P.ETILE
%if ETILE ~= nil then
%  if not (ETILE == 64 or ETILE == 128 or ETILE == 192 or ETILE == 256) then
%    reject("ETILE must be the logits GEMM's tile width: 64, 128, 192 or 256")
%  end
%  if P.LOGIT ~= "f16" or size[P.GRAD] ~= 2 or P.CLUSTER ~= 0 or P.INPLACE or P.LDG ~= P.LD or
%     not BMERGE then
%    reject("ETILE is pass 2 over the GEMM's fp16 scores: LOGIT f16, a 16-bit GRAD over them, "
%           .. "CLUSTER 0, no INPLACE, LDG = LD, MERGE block")
%  end
%  if P.VOFF or P.SHARDED or
%     (P.TEACHER ~= "probs" and P.TEACHER ~= "logprobs" and P.TEACHER ~= "logits") then
%    reject("ETILE takes what the GEMM's epilogue covers: a dense probs, logprobs or logits "
%           .. "teacher (the online teacher's logits among them), no shard")
%  end
%end
%local SHARDED = P.SHARDED or false
%if SHARDED and not DIVX then reject("SHARDED needs DIV (the forward KL's records suffice)") end
%if SHARDED and P.CLUSTER ~= 0 then reject("SHARDED rows are two-pass (records)") end
%local VOFF = P.VOFF or 0
%if P.VOFF ~= nil and not (HARD and math.type(VOFF) == "integer" and VOFF > 0) then
%  reject("VOFF must be an integer > 0 and needs HARD")
%end
%-- Segment of one block: a multiple of VEC so every vector stays inside one segment.
%local SEG = ((P.V + P.SPLIT * VEC - 1) // (P.SPLIT * VEC)) * VEC
%if SEG * (P.SPLIT - 1) >= P.V then reject("SPLIT too large for V") end
%if P.CLUSTER > 0 and SEG > P.THREADS * P.NV * VEC then
%  reject("a row does not fit in the cluster's registers: V > CLUSTER * THREADS * NV * VEC")
%end
%-- The checks end here: a validation runs the lines above and returns (template_compile cuts
%-- its prologue at end_of_checks()), so every reject() is above it. Below: the prelude's text
%-- and the interface, which a validation does not need.
%end_of_checks()
%include("common.cu.lua")
%-- What only the source needs, past the checks' end: a kept validator runs the lines above
%-- end_of_checks() once per check, tens of thousands of times in a large wisdom import
%-- (validator.h), and the strings and tables below are not needed for a verdict.
%-- the teacher row stride as written in the source: the V of the plain problem, else TLD
%local TSTRIDE = P.TLD and tostring(TLD) or "V"
%local TRI = P.TCHUNK and "(i64)r" or "row"
%-- the teacher bias in signatures and calls: empty strings keep the plain source unchanged
%local TB = P.TBDT ~= nil
%local TBP = TB and " const tbias_t* __restrict__ tbias," or ""
%local TBA = TB and " tbias," or ""
%local TROW = "teacher + " .. TRI .. " * " .. TSTRIDE
%-- elem_terms' extra argument under SOFTCAP: T / c, the factor from s back to tanh
%local KCAP = P.SOFTCAP and ", kcap" or ""
%local TALIGNED = (P.V % VEC == 0) and (TLD % VEC == 0) and (size[P.TDT] * VEC <= 16)
%-- pass 2's gradient scale of the divergence, and the CE's arguments of elem_terms
%local GS = (HARD or P.SOFT) and "gsoft" or "gscale"
%local CEARG = HARD and ", v, ce" or ""
%local TARG = HARD and ", 1.0f / invT" or ""
%-- 1 / t2: the helpers multiply the loss by c t2, which the CE term must not carry
%local INV_T2 = P.T2 and "invT * invT" or "1.0f"
%-- the kernels of the module's part: the others are declared absent (when = false)
%local function in_part(kernels)
%  for _, k in ipairs(kernels) do
%    if P.PART and not PARTS[P.PART][k.step] then k.when = false end
%  end
%  return kernels
%end
%-- load_cols' tile records under ETILE: empty strings keep the other sources unchanged
%local ETP = ETILE and " const float* __restrict__ erec, float ebase," or ""
%local ETA = ETILE and " erec, rs.lse," or ""
%-- The records (templates/iface.cu.lua). part: the pass-1 partial of one (row, block), and a
%-- row's merged record of the split API (kljit_shard_stats; include/kljit_experimental.h):
%-- student max and sum-exp of s (m, d), teacher mass (sp), teacher logits' max and sum-exp (mt,
%-- dt), the CE's of z' (mh, dh; HARD), this shard's part of the row total S (SHARDED).
%-- rowstat: a row's statistics two-phase forward saves for backward (after the plan header in
%-- `saved`): lse(s), sum p, lse(t), kept; with HARD or DIV the CE's lse(z') and S.
%local PART = iface.DENSE_PART
%local ROWSTAT = (HARD or DIVX) and iface.DENSE_ROWSTAT_CE or iface.DENSE_ROWSTAT
%-- the slots pass 1 fills (through dt; through dh with the CE's)
%local NREC = iface.slot(PART, HARD and "dh" or "dt") + 1
%local SARG = DIVX and ", sacc" or ""
%-- elem_terms' arguments after invTT: the gradient scale, then kcap and sacc where they exist
%local EARGS = GS .. KCAP .. SARG
%-- The interface (templates/iface.cu.lua): every kernel and its arguments, in order. The C side
%-- fills the roles from one struct (src/kiface.h); g may alias z (G overwrites the chunk
%-- logits), so neither is __restrict__ in the pass-2 kernels.
%local row_in = {
%  { "teacher", "const teach_t* __restrict__" }, { "bias", "const bias_t* __restrict__" },
%  { "labels", "const void*" }, { "labels_is64", "int" }, { "ignore_index", "i64" },
%  { "hdr", "const float* __restrict__" } }
%local stats_in = {
%  { "z", "const logit_t* __restrict__" }, { "teacher", "const teach_t* __restrict__" },
%  { "bias", "const bias_t* __restrict__" }, { "labels", "const void* __restrict__" },
%  { "labels_is64", "int" }, { "ignore_index", "i64" }, { "hdr", "const float* __restrict__" },
%  { "part", "float* __restrict__" }, { "row0", "i64" } }
%-- kl_dense_sums: the fused pass's inputs, the gathered records, this shard's records out
%local sums_in = iface.args({ { "z", "const logit_t* __restrict__" } }, row_in, {
%  { "part", "const float*", role = "recs" }, { "nrec", "int" }, { "srow", "i64" },
%  { "srec", "i64" }, { "out", "float*", role = "stats_out" }, { "row0", "i64" } })
%if TB then
%  local tb = { "tbias", "const tbias_t* __restrict__", role = "teacher_bias" }
%  table.insert(row_in, 3, tb)
%  table.insert(stats_in, 4, tb)
%  table.insert(sums_in, 4, tb)
%end
%-- pass 2's geometry: THREADS a block; the cluster variant in clusters of CLUSTER blocks, at
%-- most 128 registers per thread (a 256-thread block leaves room for a second one per SM,
%-- whose loads overlap this one's arithmetic); ETILE's at most 64 (1024 threads an SM: its
%-- sweep of 16-bit scores is bandwidth's, and at 112 registers two 256-thread blocks an SM
%-- left the DRAM 57% busy on an H200, 78% at 64 with the sweep's groups halved: 211 us a
%-- 4096-row chunk of V = 32000 against 287, bench/RESULTS.md run 125)
%local P2 = { threads = P.THREADS }
%if P.CLUSTER > 0 then
%  P2 = { threads = P.THREADS, min_blocks = 65536 // (P.THREADS * 128), cluster = P.CLUSTER }
%elseif ETILE then
%  P2 = { threads = P.THREADS, min_blocks = math.max(1, 1024 // P.THREADS) }
%end
%-- the vectors a thread loads before the first use in pass 2's grouped sweep: ETILE's two
%-- (its 64 registers), else four
%local GROUPS = ETILE and 2 or 4
%local CHECK_THREADS = 256
%-- the row weights: pass 2 (every mode) and the check read them; S does not depend on them
%local RW = { "row_weights", "const float* __restrict__" }
%if ROWW then table.insert(row_in, RW) end
%local check_in = {
%  { "teacher", "const teach_t* __restrict__" }, { "labels", "const void*" },
%  { "labels_is64", "int" }, { "ignore_index", "i64" },
%  { "flag", "u64*", role = "check_flag" } }
%if TXCHECK then -- the online teacher: what its logits are computed from (input, head, bias)
%  check_in = iface.args({
%    { "tx", "const tx_t* __restrict__", role = "teacher_input" },
%    { "tw", "const tx_t* __restrict__", role = "teacher_weight" } },
%    TB and { { "tbias", "const tbias_t* __restrict__", role = "teacher_bias" } } or {}, {
%    { "labels", "const void*" }, { "labels_is64", "int" }, { "ignore_index", "i64" },
%    { "rows", "i64" }, { "flag", "u64*", role = "check_flag" } })
%end
%if ROWW then table.insert(check_in, #check_in, RW) end -- before the flag
%local K = iface.family(in_part(iface.args({
%  { name = "kl_dense_stats", step = "stats", when = P.CLUSTER == 0 and not ETILE,
%    threads = P.THREADS, args = stats_in } },
%  iface.row_passes("kl_dense", row_in, P.CLUSTER == 0, P2,
%                   HARD and { { "lossh", "float* __restrict__" } } or nil), {
%  { name = "kl_dense_sums", step = "sums", when = DIVX and P.CLUSTER == 0 and not ETILE,
%    threads = P.THREADS,
%    args = sums_in },
%  { name = "kl_dense_check", step = "check", when = P.CHECK, threads = CHECK_THREADS,
%    args = check_in },
%})), { iface.HDR, PART, ROWSTAT })
%-- the row weights and the CE's loss partials in pass 2's signature, calls and loss
%local RWP = ROWW and " const float* __restrict__ row_weights," or ""
%local RWA = ROWW and " row_weights," or ""
%local LHP = HARD and " float* __restrict__ lossh," or ""

#define V {{ P.V }}
#define LD {{ P.LD }}
#define THREADS {{ P.THREADS }}
#define SPLIT {{ P.SPLIT }}
#define VEC {{ VEC }}
#define SEG {{ SEG }}
#define TALIGNED {{ TALIGNED and "true" or "false" }}
#define LDG {{ P.LDG }}
#define CLUSTER {{ P.CLUSTER }}
#define NV {{ P.NV }}
#define INPLACE {{ P.INPLACE and 1 or 0 }}
#define P2SPLIT {{ (DIVX and P.CLUSTER == 0 or ETILE) and "1" or "(INPLACE ? 1 : SPLIT)" }} /* pass-2 blocks per row */
{{ K.records() }}
typedef {{ dt[P.LOGIT] }} logit_t;
typedef {{ dt[P.GRAD] }} grad_t;
typedef {{ dt[P.TDT] }} teach_t;
typedef {{ dt[P.BDT] }} bias_t;
%if TB then
typedef {{ dt[P.TBDT] }} tbias_t;
%end
#define HAS_BIAS {{ P.BIAS and 1 or 0 }}
#define TEACHER_{{ string.upper(P.TEACHER) }} 1
#define LOG_EPS {{ f32(math.log(P.EPS)) }}
#define EPS {{ f32(P.EPS) }}

%if P.TMODE == "const" then
#define INV_T(hdr) ({{ f32(1.0 / P.T) }})
%else
#define INV_T(hdr) ((hdr)[HDR_INV_T])
%end
%if P.TEACHER == "logits" then
%  if P.TT_SAME then
#define INV_TT(hdr) INV_T(hdr)
%  else
#define INV_TT(hdr) ({{ f32(1.0 / P.TT) }})
%  end
%end

/* The segment [v0, v1) of row-relative columns that block blockIdx.x owns. */
__device__ __forceinline__ int seg_begin() { return blockIdx.x * SEG; }
__device__ __forceinline__ int seg_end() { return min(V, (int)(blockIdx.x + 1) * SEG); }

/* Loads VEC student scores s = (z + b) * invT and VEC teacher values at column v. FULL: all VEC
 * columns exist (v + VEC <= V); else only the first V - v do and the rest get neutral values. */
template <bool FULL>
__device__ __forceinline__ void load_cols(const logit_t* __restrict__ zr,
                                          const teach_t* __restrict__ tr,
                                          const bias_t* __restrict__ bias,{{ TBP }}{{ ETP }} int v, float invT,
                                          float (&s)[VEC], float (&t)[VEC]) {
%if ETILE then
  /* E16 (ETILE): s = m_t + x, m_t the tile's record's (erec) or, in backward (erec NULL), the
   * row's lse (ebase); no bias, student softcap or 1 / T (the GEMM's epilogue applied them);
   * the teacher's values as the other sources take them (its cap below) */
  (void)bias, (void)invT;
  const float mt = erec ? erec[(v / {{ ETILE }}) * PART_FLOATS + PART_M] : ebase;
  if constexpr (FULL) {
    load_n<VEC, true>(zr + v, s);
    load_n<VEC, TALIGNED>(tr + v, t);
#pragma unroll
    for (int i = 0; i < VEC; i++) s[i] += mt;
%  if TB then
    float tb[VEC]; /* the online teacher's bias, as the epilogue added it for the records */
    load_n<VEC, false>(tbias + v, tb);
#pragma unroll
    for (int i = 0; i < VEC; i++) t[i] += tb[i];
%  end
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i++) {
      const bool in = v + i < V;
      s[i] = in ? mt + to_f32(zr[v + i]) : KL_NEG_INF;
#if defined(TEACHER_LOGPROBS) || defined(TEACHER_LOGITS)
      t[i] = in ? to_f32(tr[v + i]) : KL_NEG_INF;
%  if TB then
      if (in) t[i] += to_f32(tbias[v + i]);
%  end
#else
      t[i] = in ? to_f32(tr[v + i]) : 0.0f;
#endif
    }
  }
%  if P.TSOFTCAP then
  /* the teacher's cap as the GEMM's epilogue applied it for the records (a missing column stays
   * -inf) */
#pragma unroll
  for (int i = 0; i < VEC; i++)
    if (FULL || v + i < V) t[i] = {{ f32(P.TSOFTCAP) }} * tanhf(t[i] * {{ f32(1.0 / P.TSOFTCAP) }});
%  end
}
%else
  if constexpr (FULL) {
    load_n<VEC, true>(zr + v, s);
    load_n<VEC, TALIGNED>(tr + v, t);
%if TB then
    float tb[VEC];
    load_n<VEC, false>(tbias + v, tb);
#pragma unroll
    for (int i = 0; i < VEC; i++) t[i] += tb[i];
%end
#if HAS_BIAS
    float b[VEC];
    load_n<VEC, false>(bias + v, b);
#pragma unroll
    for (int i = 0; i < VEC; i++) s[i] += b[i];
#endif
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i++) {
      const bool in = v + i < V;
      s[i] = in ? to_f32(zr[v + i]) : KL_NEG_INF;
#if HAS_BIAS
      if (in) s[i] += to_f32(bias[v + i]);
#endif
#if defined(TEACHER_LOGITS)
      t[i] = in ? to_f32(tr[v + i]) : KL_NEG_INF;
%if TB then
      if (in) t[i] += to_f32(tbias[v + i]);
%end
#elif defined(TEACHER_LOGPROBS)
      t[i] = in ? to_f32(tr[v + i]) : KL_NEG_INF;
#else
      t[i] = in ? to_f32(tr[v + i]) : 0.0f;
#endif
    }
  }
%if P.SOFTCAP or P.TSOFTCAP then
  /* softcaps on the loaded columns only: a missing column stays -inf (it must add nothing) */
#pragma unroll
  for (int i = 0; i < VEC; i++)
    if (FULL || v + i < V) {
%  if P.SOFTCAP then
      s[i] = {{ f32(P.SOFTCAP) }} * tanhf(s[i] * {{ f32(1.0 / P.SOFTCAP) }});
%  end
%  if P.TSOFTCAP then
      t[i] = {{ f32(P.TSOFTCAP) }} * tanhf(t[i] * {{ f32(1.0 / P.TSOFTCAP) }});
%  end
    }
%end
#pragma unroll
  for (int i = 0; i < VEC; i++) s[i] *= invT;
}
%end

/* Per-thread pass-1 accumulators. */
struct acc1_t {
  md_t s;       /* student (max, sum-exp) */
  md_t t;       /* teacher logits (max, sum-exp), TEACHER_LOGITS only */
  float sp;     /* sum p, probs/logprobs only */
%if HARD then
  md_t h;       /* (max, sum-exp) of z' = s T: the CE's lse */
%end
};

__device__ __forceinline__ void acc1_init(acc1_t& a) {
  a.s.m = a.t.m = KL_NEG_INF;
  a.s.d = a.t.d = 0.0f;
  a.sp = 0.0f;
%if HARD then
  a.h.m = KL_NEG_INF;
  a.h.d = 0.0f;
%end
}

__device__ __forceinline__ void acc1_add(acc1_t& a, const float (&s)[VEC], const float (&t)[VEC],
%if HARD then
                                         float invTT, float tz) {
  float mh = a.h.m;
#pragma unroll
  for (int i = 0; i < VEC; i++) mh = fmaxf(mh, s[i] * tz);
  if (mh != KL_NEG_INF) {
    float dh = a.h.d * fexp(a.h.m - mh);
#pragma unroll
    for (int i = 0; i < VEC; i++) dh += fexp(s[i] * tz - mh);
    a.h.m = mh;
    a.h.d = dh;
  }
%else
                                         float invTT) {
%end
  float m = a.s.m;
#pragma unroll
  for (int i = 0; i < VEC; i++) m = fmaxf(m, s[i]);
  if (m != KL_NEG_INF) {
    float d = a.s.d * fexp(a.s.m - m);
#pragma unroll
    for (int i = 0; i < VEC; i++) d += fexp(s[i] - m);
    a.s.m = m;
    a.s.d = d;
  }
#if defined(TEACHER_LOGITS)
  float tt[VEC];
  float mt = a.t.m;
#pragma unroll
  for (int i = 0; i < VEC; i++) {
    tt[i] = t[i] * invTT;
    mt = fmaxf(mt, tt[i]);
  }
  if (mt != KL_NEG_INF) {
    float dd = a.t.d * fexp(a.t.m - mt);
#pragma unroll
    for (int i = 0; i < VEC; i++) dd += fexp(tt[i] - mt);
    a.t.m = mt;
    a.t.d = dd;
  }
#elif defined(TEACHER_LOGPROBS)
#pragma unroll
  for (int i = 0; i < VEC; i++) a.sp += fexp(t[i]);
#else
#pragma unroll
  for (int i = 0; i < VEC; i++) a.sp += t[i];
#endif
}

/* Block-wide merge of the accumulators into one partial record {m, d, sp, mt, dt (, mh, dh)}. */
__device__ __forceinline__ void acc1_block(const acc1_t& a, md_t* sh_md, float* sh_f,
                                           float (&rec)[{{ NREC }}]) {
  const md_t ms = block_md<THREADS>(a.s, sh_md);
#if defined(TEACHER_LOGITS)
  const md_t mt = block_md<THREADS>(a.t, sh_md);
  const float sp = 0.0f; /* sum p = 1 by construction; set in row_finish */
#else
  md_t mt;
  mt.m = 0.0f;
  mt.d = 1.0f;
  const float sp = block_sum<THREADS>(a.sp, sh_f);
#endif
  rec[PART_M] = ms.m, rec[PART_D] = ms.d, rec[PART_SP] = sp, rec[PART_MT] = mt.m;
  rec[PART_DT] = mt.d;
%if HARD then
  const md_t mh = block_md<THREADS>(a.h, sh_md);
  rec[PART_MH] = mh.m, rec[PART_DH] = mh.d;
%end
}

/* Row statistics after the merge: what the loss/gradient pass needs. */
struct row_t {
  float lse;    /* lse(s) */
  float sp;     /* sum p */
  float lset;   /* lse(t), teacher logits only */
  float kept;   /* 1 or 0 */
%if DIVX then
  float S;      /* sum_v q g (see DIV above) */
%end
%if HARD then
  float lse1;   /* lse(z'), the CE's */
%end
%if ETILE and HARD then
  float zy;     /* z'_y, the label's, exact from the GEMM's records (slot S; 0: none) */
%end
};

/* Merges partial records in order k = 0..n-1 (the same order everywhere: deterministic). */
struct row_merge_t {
  md_t s, t;
  float sp;
%if HARD then
  md_t h;
%end
%if SHARDED then
  float S; /* the shards' parts of S (slot S), in record order */
%end
%if ETILE and HARD then
  float zy; /* the tiles' z'_y (slot S): the label's tile's, the others' 0 */
%end
};
__device__ __forceinline__ void row_merge_init(row_merge_t& m) {
  m.s.m = m.t.m = KL_NEG_INF;
  m.s.d = m.t.d = 0.0f;
  m.sp = 0.0f;
%if HARD then
  m.h.m = KL_NEG_INF;
  m.h.d = 0.0f;
%end
%if SHARDED then
  m.S = 0.0f;
%end
%if ETILE and HARD then
  m.zy = 0.0f;
%end
}
__device__ __forceinline__ void row_merge_add(row_merge_t& m, const float* rec) {
  md_t a, b;
  a.m = rec[PART_M], a.d = rec[PART_D], b.m = rec[PART_MT], b.d = rec[PART_DT];
  m.s = md_merge(m.s, a);
  m.t = md_merge(m.t, b);
  m.sp += rec[PART_SP];
%if HARD then
  md_t c;
  c.m = rec[PART_MH], c.d = rec[PART_DH];
  m.h = md_merge(m.h, c);
%end
%if SHARDED then
  m.S += rec[PART_S];
%end
%if ETILE and HARD then
  m.zy += rec[PART_S];
%end
}
%if BMERGE then
/* block_reduce's merge of two threads' row_merge_t (MERGE = block) */
struct row_merge_op {
  __device__ __forceinline__ row_merge_t operator()(row_merge_t a, row_merge_t b) const {
    a.s = md_merge(a.s, b.s);
    a.t = md_merge(a.t, b.t);
    a.sp += b.sp;
%if HARD then
    a.h = md_merge(a.h, b.h);
%end
%if SHARDED then
    a.S += b.S;
%end
%if ETILE and HARD then
    a.zy += b.zy;
%end
    return a;
  }
};
%end
__device__ __forceinline__ row_t row_finish(const row_merge_t& m) {
  row_t rs;
  rs.lse = m.s.m + logf(m.s.d);
%if SHARDED then
  rs.S = m.S; /* the shards' parts (kl_dense_sums) */
%elseif DIVX then
  rs.S = 0.0f; /* pass 2 computes it */
%end
%if HARD then
  rs.lse1 = m.h.m + logf(m.h.d);
%end
%if ETILE and HARD then
  rs.zy = m.zy;
%end
  rs.lset = m.t.m + logf(m.t.d);
#if defined(TEACHER_LOGITS)
  rs.sp = 1.0f;
#else
  rs.sp = m.sp;
#endif
  rs.kept = 1.0f;
  return rs;
}

%include("rows_common.cu.lua")

%if HARD then
/* The CE's per-row state in pass 2: its label column (-1 when outside this block's columns),
 * lse(z'), T (z' = s T), G's scale wh c g, and the block's -z'_y. */
struct ce_t {
  int y;
  float lse1, t, gh, loss;
%if P.ZLOSS then
  float gz;   /* gh (1 + 2 zl lse(z')): the softmax's coefficient with the z-loss */
%end
%if P.LSMOOTH then
  float gu;   /* gh ls / VTOT: the uniform target's share of every column */
  float zsum; /* this thread's sum of z' over its columns */
%end
};

%end
/* The per-element terms: loss += p (log max(p, eps) - log q); g = gscale (sum p q - p). */
template <int MODE>
__device__ __forceinline__ void elem_terms(const float (&s)[VEC], const float (&t)[VEC],
                                           const row_t& rs, float invTT, float gscale,
%if P.SOFTCAP then
                                           float kcap,
%end
%if DIVX then
                                           float& sacc,
%end
%if HARD then
                                           float& loss, float (&gv)[VEC], int v, ce_t& ce) {
%else
                                           float& loss, float (&gv)[VEC]) {
%end
#pragma unroll
  for (int i = 0; i < VEC; i++) {
    const float logq = s[i] - rs.lse;
#if defined(TEACHER_LOGITS)
    const float logp = t[i] * invTT - rs.lset;
    const float p = fexp(logp);
    const float lp = fmaxf(logp, LOG_EPS);
#elif defined(TEACHER_LOGPROBS)
    const float p = fexp(t[i]);
    const float lp = fmaxf(t[i], LOG_EPS);
#else
    const float p = t[i];
    const float lp = flog(fmaxf(p, EPS));
#endif
%if not DIVX then
    if (MODE != MODE_BACKWARD && p != 0.0f) loss += p * (lp - logq); /* as tests/ref.c */
    gv[i] = gscale * (rs.sp * fexp(logq) - p);
%else
    const float q = fexp(logq);
%  if P.DIV == "reverse" then
    const float g = logq - lp;
    if (MODE != MODE_BACKWARD && q != 0.0f) loss += q * g;
%  elseif P.DIV == "tvd" then
    /* sign(q - p) / 2 less 1/2 (0 at a tie, as tests/ref.c): 0 where q > p, so where the
     * student's mass all lies above the teacher's (a peaked student) S = -(q's mass where
     * q < p) is summed directly instead of as 1/2 - a little, which would cancel against g's
     * 1/2 only as far as the row's q sum to 1 in fp32. No log, no floor: p = 0 weighs q / 2. */
    const float d = q - p;
    const float g = d > 0.0f ? 0.0f : d < 0.0f ? -1.0f : -0.5f;
    if (MODE != MODE_BACKWARD) loss += 0.5f * fabsf(d);
%  elseif P.DIV == "skew_forward" then
    /* g = -(1 - a) p / m is 0 where q >> p (a peaked student), as the JSD's g: there g and S
     * nearly agree, and a constant in g would cancel against S only as far as the row's q sum
     * to 1 in fp32 (the JSD's lesson, in its comment). m at the smallest normal where p and q
     * are both below it (flog's ftz would make log m -inf): every term it enters is then
     * multiplied by p or q < 2^-125. __fdividef: m <= 1, far below its 2^126 limit. */
    const float m = fmaxf({{ f32(P.ALPHA) }} * p + {{ f32(1.0 - P.ALPHA) }} * q, 1.17549435e-38f);
    const float g = {{ f32(P.ALPHA - 1.0) }} * __fdividef(p, m);
    if (MODE != MODE_BACKWARD && p != 0.0f) loss += p * (lp - flog(m));
%  elseif P.DIV == "skew_reverse" then
%    local SRATIO = P.TEACHER == "probs" and "__fdividef(p, q)"
%                   or "fexp(" .. (P.TEACHER == "logits" and "logp" or "t[i]") .. " - logq)"
    /* From r = p / q, as the JSD's g (and for the same reason: where q >> p, a peaked
     * student, g and S nearly agree): g less its constant -log(a) - 1 is k r / (1 + k r) -
     * log1p(k r), k = (1 - a) / a, 0 at r = 0; the loss q (log q - log m) = -q log1p((1 - a)
     * (r - 1)), exact where r nears 1 (the student matches) and where r nears 0 (log a). r and
     * k r capped at 1e30 (there the column's q < 1e-30 p: it weighs nothing), which keeps
     * __fdividef below its 2^126 limit. */
    const float r = q != 0.0f ? fminf({{ SRATIO }}, 1e30f) : 0.0f;
    const float kr = fminf({{ f32((1.0 - P.ALPHA) / P.ALPHA) }} * r, 1e30f);
    const float g = __fdividef(kr, 1.0f + kr) - log1pf(kr);
    if (MODE != MODE_BACKWARD && q != 0.0f)
      loss -= q * log1pf({{ f32(1.0 - P.ALPHA) }} * (r - 1.0f));
%  else
#define BETA {{ f32(P.BETA) }}
    const float m = BETA * p + (1.0f - BETA) * q;
    /* m is subnormal where p and q are both below 2^-125 (q, p >= 2^-126 when not 0): flog
     * (lg2.approx.ftz) would make that -inf, g +inf and the row's S and G inf or NaN. At the
     * smallest normal instead, log q - log m stays in [0, -log(1 - beta)] and every term it
     * enters is multiplied by p or q < 2^-125. */
    const float logm = flog(fmaxf(m, 1.17549435e-38f));
    /* g less its constant -(1 - beta) log(1 - beta), which G = q (g - S) cancels only when
     * the row's q sum to 1 exactly (in fp32 they miss by ~1e-6 times that constant), and
     * from p / q rather than as log q - log m: where q >> p (a peaked student, T < 1), g and
     * S nearly agree and log q - log m's absolute error, not g's relative one, was G's error
     * (fp32 dX 2.6e-5 against 1e-5). Accurate log1pf; the ratio, which overflows for q near
     * 2^-126 and beta near 1, capped at 1e30 (there q < 1e-29: the column weighs nothing).
     * Given log p, the ratio is exp(log p - log q): one rounding of their difference, as p
     * and q have one each, and no division, whose fp32 sequence leaves its fast path (a
     * branch, for the warp) where an operand or the quotient nears the ends of the exponent
     * range, as some of every 128 columns of a peaked row do (on the H200 the online JSD at
     * 8192 x 4096 x 128256 took 63.1 ms at logit std 12 and 60.2 ms at std 2, the forward KL
     * 56.8 ms at both: the division is the suspect, not yet measured without it). */
%  local RATIO = P.TEACHER == "probs" and "p / q"
%                or "fexp(" .. (P.TEACHER == "logits" and "logp" or "t[i]") .. " - logq)"
    const float g = q != 0.0f ? -(1.0f - BETA) *
                                    log1pf(fminf({{ f32(P.BETA / (1.0 - P.BETA)) }} * ({{ RATIO }}),
                                                 1e30f))
                              : 0.0f;
    if (MODE != MODE_BACKWARD) {
      if (p != 0.0f) loss += BETA * p * (lp - logm);
      if (q != 0.0f) loss += (1.0f - BETA) * q * (logq - logm);
    }
#undef BETA
%  end
    if (q != 0.0f) sacc += q * g; /* a missing column (q = 0, log q = -inf) adds nothing */
    gv[i] = q != 0.0f ? gscale * q * (g - rs.S) : 0.0f;
%end
%if HARD then
    const float zc = s[i] * ce.t; /* z' */
    gv[i] += {{ P.ZLOSS and "ce.gz" or "ce.gh" }} * fexp(zc - ce.lse1);
%  if P.LSMOOTH then
    gv[i] -= ce.gu;
    /* a column outside the row (its s is -inf: cluster lanes past the segment) adds nothing */
    if (MODE != MODE_BACKWARD && s[i] != KL_NEG_INF) ce.zsum += zc;
    if (v + i == ce.y) {
      gv[i] -= {{ f32(1.0 - P.LSMOOTH) }} * ce.gh;
%    if not ETILE then
      if (MODE != MODE_BACKWARD) ce.loss -= {{ f32(1.0 - P.LSMOOTH) }} * zc;
%    end
    }
%  else
    if (v + i == ce.y) {
      gv[i] -= ce.gh;
%    if not ETILE then
      if (MODE != MODE_BACKWARD) ce.loss -= zc;
%    end
    }
%  end
%end
%if P.SOFTCAP then
    const float th = s[i] * kcap; /* tanh(z / c) */
    gv[i] *= 1.0f - th * th;
%end
  }
}

/* Row statistics from the saved buffer, or zeros for an ignored row. */
__device__ __forceinline__ row_t row_saved(const float* rowstat, i64 row) {
  row_t rs;
  const float* r = rowstat + ROWSTAT_FLOATS * row;
  rs.lse = r[ROWSTAT_LSE];
  rs.sp = r[ROWSTAT_SP];
  rs.lset = r[ROWSTAT_LSET];
  rs.kept = r[ROWSTAT_KEPT];
%if DIVX then
  rs.S = r[ROWSTAT_S];
%end
%if HARD then
  rs.lse1 = r[ROWSTAT_LSE1];
%end
  return rs;
}
__device__ __forceinline__ void row_save(float* rowstat, i64 row, const row_t& rs) {
  float* r = rowstat + ROWSTAT_FLOATS * row;
  r[ROWSTAT_LSE] = rs.lse;
  r[ROWSTAT_SP] = rs.sp;
  r[ROWSTAT_LSET] = rs.lset;
  r[ROWSTAT_KEPT] = rs.kept;
%if HARD then
  r[ROWSTAT_LSE1] = rs.lse1;
%end
}

%-- Pass 2's per-row values after gscale, in both variants (needs invT, gscale, rs, labels,
%-- row, v0 and v1): the softcap's kcap, the divergence's scale gsoft, the CE's state.
%local function row_setup()
%if P.SOFTCAP then
  const float kcap = 1.0f / (invT * {{ f32(P.SOFTCAP) }});
%end
%if HARD or P.SOFT then
  const float gsoft = gscale * {{ f32(P.SOFT or 1.0) }};
%end
%if HARD then
  ce_t ce;
  ce.t = 1.0f / invT;
  ce.lse1 = rs.lse1;
  ce.gh = gscale * {{ f32(P.HARD) }} * ce.t * {{ INV_T2 }};
  ce.loss = 0.0f;
%if P.ZLOSS then
  ce.gz = ce.gh * (1.0f + {{ f32(2.0 * P.ZLOSS) }} * ce.lse1);
%end
%if P.LSMOOTH then
  ce.gu = ce.gh * {{ f32(P.LSMOOTH / VTOT) }};
  ce.zsum = 0.0f;
%end
  {
    const i64 y = !labels ? -1 : labels_is64 ? ((const i64*)labels)[row]
                                             : (i64)((const int*)labels)[row];
%if VOFF ~= 0 then
    const i64 yl = y - {{ VOFF }}; /* the global label as this shard's column */
    ce.y = yl >= v0 && yl < v1 ? (int)yl : -1;
%else
    ce.y = y >= v0 && y < v1 ? (int)y : -1;
%end
  }
%end
%end
%-- The block's loss partials, summed over the block and stored at lossp (and lossh) + idx, in
%-- both variants: the divergence's weight, the CE's wh / t2 (lse(z') and its z-loss once per
%-- row, minus (1 - ls) z'_y where this block holds the label, minus ls / VTOT sum z'), the
%-- row weight; the CE's part goes to lossh apart (every thread calls it: block sums).
%local function loss_terms(idx)
%if HARD or P.SOFT then
    loss *= {{ f32(P.SOFT or 1.0) }};
%end
%if HARD then
%if VOFF == 0 then
%  if P.ZLOSS then
    if (blockIdx.x == 0 && threadIdx.x == 0)
      ce.loss += ce.lse1 * (1.0f + {{ f32(P.ZLOSS) }} * ce.lse1);
%  else
    if (blockIdx.x == 0 && threadIdx.x == 0) ce.loss += ce.lse1;
%  end
%end
%if ETILE then
    /* -z'_y ((1 - ls) of it), once a row, from the records (E16's x is fp16: not z'_y to the
     * loss's digits; the smoothing's sum of z' over V is: its roundings, to nearest, average
     * out) */
    if (blockIdx.x == 0 && threadIdx.x == 0) ce.loss -= {{ P.LSMOOTH and f32(1.0 - P.LSMOOTH) .. " * " or "" }}rs.zy;
%end
%if P.LSMOOTH then
    ce.loss -= {{ f32(P.LSMOOTH / VTOT) }} * ce.zsum;
%end
    float hard = {{ f32(P.HARD) }} * {{ INV_T2 }} * ce.loss;
%end
%if ROWW then
    loss *= rw;
%  if HARD then
    hard *= rw;
%  end
%end
    loss = block_sum<THREADS>(loss, sh_f);
%if HARD then
    hard = block_sum<THREADS>(hard, sh_f);
    if (threadIdx.x == 0) lossh[{{ idx }}] = hard;
%end
    if (threadIdx.x == 0) lossp[{{ idx }}] = loss;
%end
%-- The two-pass rows' sweep for S (DIV): this thread's part of sum_v q g over [v0, v1) into
%-- sacc (needs zr, tr, bias, invT, invTT, rs and row_setup()'s values); elem_terms' BACKWARD
%-- mode adds to sacc only, never to the loss.
%local function s_sweep()
    {
      float unused = 0.0f;
      for (int v = v0 + threadIdx.x * VEC; v < v1; v += THREADS * VEC) {
        float s[VEC], t[VEC], gv[VEC];
        if (v + VEC <= v1)
          load_cols<true>(zr, tr, bias,{{ TBA }}{{ ETA }} v, invT, s, t);
        else
          load_cols<false>(zr, tr, bias,{{ TBA }}{{ ETA }} v, invT, s, t);
        elem_terms<MODE_BACKWARD>(s, t, rs, invTT, {{ EARGS }}, unused, gv{{ CEARG }});
      }
    }
%end
%-- Pass 2's sweep in groups of GROUPS vectors a thread, block-uniform trip count: INPLACE's
%-- (16-bit G over the fp32 row: every thread reads the group, the block synchronizes, then G is
%-- written) and ETILE's (G over the 16-bit scores it was read from, the same columns by the same
%-- thread: no barrier). Needs zr, tr, bias, invT, invTT, rs, gr, v0, v1 and the loss.
%local function grouped_sweep()
  /* block-uniform trip count */
  for (int base = v0; base < v1; base += {{ GROUPS }} * THREADS * VEC) {
    float s[{{ GROUPS }}][VEC], t[{{ GROUPS }}][VEC];
#pragma unroll
    for (int u = 0; u < {{ GROUPS }}; u++) {
      const int v = base + (u * THREADS + threadIdx.x) * VEC;
      if (v + VEC <= v1)
        load_cols<true>(zr, tr, bias,{{ TBA }}{{ ETA }} v, invT, s[u], t[u]);
      else if (v < v1)
        load_cols<false>(zr, tr, bias,{{ TBA }}{{ ETA }} v, invT, s[u], t[u]);
    }
%if not ETILE then
    __syncthreads(); /* the whole group is read: G may now overwrite it (see the header) */
%end
#pragma unroll
    for (int u = 0; u < {{ GROUPS }}; u++) {
      const int v = base + (u * THREADS + threadIdx.x) * VEC;
      float gv[VEC];
      if (v < v1) elem_terms<MODE>(s[u], t[u], rs, invTT, {{ EARGS }}, loss, gv{{ CEARG }});
      if (MODE != MODE_FORWARD && v + VEC <= v1) store_cols<true>(gr, v, gv);
      else if (MODE != MODE_FORWARD && v < v1) store_cols<false>(gr, v, gv);
    }
  }
%end
%if P.CLUSTER == 0 then
%if not ETILE then
/* Pass 1 over columns [v0, v1) of one row: the block's partial record {m, d, sp, mt, dt},
 * returned to every thread. */
__device__ __forceinline__ void stats_range(const logit_t* __restrict__ zr,
                                            const teach_t* __restrict__ tr,
                                            const bias_t* __restrict__ bias,{{ TBP }} int v0, int v1,
                                            float invT, float invTT, md_t* sh_md, float* sh_f,
                                            float (&rec)[{{ NREC }}]) {
  acc1_t a;
  acc1_init(a);
  const int vfull = v0 + ((v1 - v0) / VEC) * VEC;
  int v = v0 + threadIdx.x * VEC;
  for (; v + 3 * THREADS * VEC < vfull; v += 4 * THREADS * VEC) {
    /* four independent 16-byte loads in flight per thread before the first use */
    float s[4][VEC], t[4][VEC];
#pragma unroll
    for (int u = 0; u < 4; u++) load_cols<true>(zr, tr, bias,{{ TBA }} v + u * THREADS * VEC, invT, s[u], t[u]);
#pragma unroll
    for (int u = 0; u < 4; u++) acc1_add(a, s[u], t[u], invTT{{ TARG }});
  }
  for (; v < vfull; v += THREADS * VEC) {
    float s[VEC], t[VEC];
    load_cols<true>(zr, tr, bias,{{ TBA }} v, invT, s, t);
    acc1_add(a, s, t, invTT{{ TARG }});
  }
  if (v < v1) {
    float s[VEC], t[VEC];
    load_cols<false>(zr, tr, bias,{{ TBA }} v, invT, s, t);
    acc1_add(a, s, t, invTT{{ TARG }});
  }
  acc1_block(a, sh_md, sh_f, rec);
}

%end
%if K.has("kl_dense_stats") then
{{ K.kernel("kl_dense_stats") }} {
  /* z: (rows, LD) chunk logits; teacher: (N, V); part: (rows, SPLIT, PART_FLOATS) */
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  float* out = part + ((i64)r * SPLIT + blockIdx.x) * PART_FLOATS;
  __shared__ md_t sh_md[THREADS / 32];
  __shared__ float sh_f[THREADS / 32];
  if (!row_kept(labels, labels_is64, ignore_index, row)) return; /* pass 2 skips the row */
#if defined(TEACHER_LOGITS)
  const float invTT = INV_TT(hdr);
#else
  const float invTT = 1.0f;
#endif
  float rec[{{ NREC }}];
  stats_range(z + (i64)r * LD, {{ TROW }}, bias,{{ TBA }} seg_begin(), seg_end(), INV_T(hdr),
              invTT, sh_md, sh_f, rec);
  if (threadIdx.x == 0)
    for (int k = 0; k < {{ NREC }}; k++) out[k] = rec[k];
}
%end

/* Pass 2 over this block's segment: loss partial and/or G. */
template <int MODE>
__device__ __forceinline__ void pass2(const logit_t* z, grad_t* g,
                                      const teach_t* __restrict__ teacher,
                                      const bias_t* __restrict__ bias,{{ TBP }}{{ RWP }}
                                      const void* labels, int labels_is64, i64 ignore_index,
                                      const float* __restrict__ hdr,
                                      const float* __restrict__ part, int nrec, i64 srow,
                                      i64 srec, float* rowstat, float* __restrict__ lossp,{{ LHP }}
                                      const float* __restrict__ gout, int gout_per_row,
                                      i64 row0) {
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  __shared__ row_t sh_row;
  __shared__ float sh_f[THREADS / 32];
  const int v0 = P2SPLIT == 1 ? 0 : seg_begin(), v1 = P2SPLIT == 1 ? V : seg_end();
  const logit_t* zr = z + (i64)r * LD;
  grad_t* gr = g + (i64)r * LDG;
%if BMERGE then
  /* the block merges the row's records (MERGE = block): thread k takes records k, k + THREADS,
   * ..., then block_reduce's fixed order; every thread takes part (barriers) */
  __shared__ row_merge_t sh_merge[THREADS / 32];
  const bool kept = row_kept(labels, labels_is64, ignore_index, row);
  row_merge_t m;
  row_merge_init(m);
  if (MODE != MODE_BACKWARD) {
    const row_merge_t none = m;
    if (kept)
      for (int k = threadIdx.x; k < nrec; k += THREADS)
        row_merge_add(m, part + ((i64)r * srow + (i64)k * srec) * PART_FLOATS);
    m = block_reduce<THREADS>(m, sh_merge, none, row_merge_op());
  }
%end
  if (threadIdx.x == 0) {
    row_t rs;
    if (!{{ BMERGE and "kept" or "row_kept(labels, labels_is64, ignore_index, row)" }}) {
      rs.lse = rs.sp = rs.lset = rs.kept = 0.0f;
    } else if (MODE == MODE_BACKWARD) {
      rs = row_saved(rowstat, row);
    } else {
%if BMERGE then
      rs = row_finish(m);
%else
      row_merge_t m;
      row_merge_init(m);
      /* record k of chunk row r at part + (r srow + k srec) PART_FLOATS: the chunk's SPLIT partials
       * (nrec = srow = SPLIT, srec = 1), or the shards' global records (kljit_shard_finish) */
      for (int k = 0; k < nrec; k++)
        row_merge_add(m, part + ((i64)r * srow + (i64)k * srec) * PART_FLOATS);
      rs = row_finish(m);
%end
    }
    sh_row = rs;
    if (MODE == MODE_FORWARD && blockIdx.x == 0) row_save(rowstat, row, rs);
  }
  __syncthreads();
  {{ DIVX and "row_t" or "const row_t" }} rs = sh_row;
  if (rs.kept == 0.0f) {
    if (MODE != MODE_FORWARD) zero_range(gr, v0, v1);
    if (MODE != MODE_BACKWARD && threadIdx.x == 0) lossp[row * P2SPLIT + blockIdx.x] = 0.0f;
%if HARD then
    if (MODE != MODE_BACKWARD && threadIdx.x == 0) lossh[row * P2SPLIT + blockIdx.x] = 0.0f;
%end
    return;
  }
  const float invT = INV_T(hdr);
#if defined(TEACHER_LOGITS)
  const float invTT = INV_TT(hdr);
#else
  const float invTT = 1.0f;
#endif
%if ROWW then
  const float rw = row_weights[row];
%end
  const float gscale = grad_scale(hdr, gout, gout_per_row, row, MODE){{ ROWW and " * rw" or "" }};
%row_setup()
  const teach_t* tr = teacher + {{ TRI }} * {{ TSTRIDE }};
%if ETILE then
  /* the row's tile records (srec 1); backward has none: its E is relative to the saved lse */
  const float* erec = MODE == MODE_BACKWARD ? nullptr : part + (i64)r * srow * PART_FLOATS;
%end
  float loss = 0.0f;
%if DIVX then
  float sacc = 0.0f;
%if not SHARDED then
  if (MODE == MODE_FUSED) { /* sweep 1: S over the whole row before sweep 2 writes any G */
%s_sweep()
    rs.S = block_sum<THREADS>(sacc, sh_f); /* every thread, the block synchronized after */
    sacc = 0.0f;
  }
%end
%end
%if ETILE then
%grouped_sweep()
%else
#if INPLACE
%grouped_sweep()
#else
  const int vfull = v0 + ((v1 - v0) / VEC) * VEC;
  for (int v = v0 + threadIdx.x * VEC; v < v1; v += THREADS * VEC) {
    float s[VEC], t[VEC], gv[VEC];
    if (v < vfull)
      load_cols<true>(zr, tr, bias,{{ TBA }} v, invT, s, t);
    else
      load_cols<false>(zr, tr, bias,{{ TBA }} v, invT, s, t);
    elem_terms<MODE>(s, t, rs, invTT, {{ EARGS }}, loss, gv{{ CEARG }});
    if (MODE != MODE_FORWARD) {
      if (v < vfull)
        store_cols<true>(gr, v, gv);
      else
        store_cols<false>(gr, v, gv);
    }
  }
#endif
%end
  if (MODE != MODE_BACKWARD) {
%loss_terms("row * P2SPLIT + blockIdx.x")
%if DIVX then
    if (MODE == MODE_FORWARD) { /* S for backward (one block per row: the whole row's) */
      sacc = block_sum<THREADS>(sacc, sh_f);
      if (threadIdx.x == 0) rowstat[ROWSTAT_FLOATS * row + ROWSTAT_S] = sacc;
    }
%end
  }
}
#define ROW_BODY pass2
%else
/* ---- sm_90 cluster variant: distributed shared memory through PTX (no headers) ---- */
__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::: "memory");
}
__device__ __forceinline__ float ld_cluster(u32 local_addr, u32 rank) {
  u32 remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local_addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

/* One row per cluster; block blockIdx.x (= its rank in the cluster) owns segment blockIdx.x. */
template <int MODE>
__device__ __forceinline__ void cluster_row(const logit_t* z, grad_t* g,
                                            const teach_t* __restrict__ teacher,
                                            const bias_t* __restrict__ bias,{{ TBP }}{{ RWP }}
                                            const void* labels, int labels_is64, i64 ignore_index,
                                            const float* __restrict__ hdr,
                                            const float* __restrict__ part, int nrec,
                                            i64 srow, i64 srec, float* rowstat,
                                            float* __restrict__ lossp,{{ LHP }}
                                            const float* __restrict__ gout, int gout_per_row,
                                            i64 row0) {
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  __shared__ float sh_rec[PART_FLOATS];
%if DIVX then
  __shared__ float sh_part, sh_total; /* S: this block's part, the cluster's sum */
%end
  __shared__ row_t sh_row;
  __shared__ md_t sh_md[THREADS / 32];
  __shared__ float sh_f[THREADS / 32];
  const logit_t* zr = z + (i64)r * LD;
  grad_t* gr = g + (i64)r * LDG;
  /* kept is the same for every block of the cluster: they all skip, or none does */
  if (!row_kept(labels, labels_is64, ignore_index, row)) {
    if (MODE != MODE_FORWARD) zero_range(gr, seg_begin(), seg_end());
    if (MODE != MODE_BACKWARD && threadIdx.x == 0) lossp[row * SPLIT + blockIdx.x] = 0.0f;
%if HARD then
    if (MODE != MODE_BACKWARD && threadIdx.x == 0) lossh[row * SPLIT + blockIdx.x] = 0.0f;
%end
    if (MODE == MODE_FORWARD && blockIdx.x == 0 && threadIdx.x == 0) {
      row_t rs;
      rs.lse = rs.sp = rs.lset = rs.kept = 0.0f;
      row_save(rowstat, row, rs);
    }
    return;
  }
  const float invT = INV_T(hdr);
#if defined(TEACHER_LOGITS)
  const float invTT = INV_TT(hdr);
#else
  const float invTT = 1.0f;
#endif
  const teach_t* tr = teacher + {{ TRI }} * {{ TSTRIDE }};
  const int v0 = seg_begin(), v1 = seg_end();
  /* the whole segment into registers: NV independent vector loads per thread in flight */
  float s[NV][VEC], t[NV][VEC];
#pragma unroll
  for (int j = 0; j < NV; j++) {
    const int v = v0 + (j * THREADS + threadIdx.x) * VEC;
    if (v + VEC <= v1) {
      load_cols<true>(zr, tr, bias,{{ TBA }} v, invT, s[j], t[j]);
    } else if (v < v1) {
      load_cols<false>(zr, tr, bias,{{ TBA }} v, invT, s[j], t[j]);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; i++) {
        s[j][i] = KL_NEG_INF;
#if defined(TEACHER_PROBS)
        t[j][i] = 0.0f;
#else
        t[j][i] = KL_NEG_INF;
#endif
      }
    }
  }
  row_t rs;
  if (MODE == MODE_BACKWARD) {
    rs = row_saved(rowstat, row);
    cluster_sync(); /* every block of the row has its logits in registers: G may overwrite */
  } else {
    acc1_t a;
    acc1_init(a);
#pragma unroll
    for (int j = 0; j < NV; j++) acc1_add(a, s[j], t[j], invTT{{ TARG }});
    float rec[{{ NREC }}];
    acc1_block(a, sh_md, sh_f, rec);
    if (threadIdx.x < {{ NREC }}) sh_rec[threadIdx.x] = rec[threadIdx.x];
    cluster_sync(); /* records visible cluster-wide; all logits of the row are in registers */
    if (threadIdx.x == 0) {
      const u32 base = smem_addr(sh_rec);
      row_merge_t m;
      row_merge_init(m);
      for (int k = 0; k < CLUSTER; k++) {
        float peer[{{ NREC }}];
        for (int q = 0; q < {{ NREC }}; q++) peer[q] = ld_cluster(base + 4 * q, (u32)k);
        row_merge_add(m, peer);
      }
      sh_row = row_finish(m);
      if (MODE == MODE_FORWARD && blockIdx.x == 0) row_save(rowstat, row, sh_row);
    }
    cluster_sync(); /* no block leaves (freeing its records) before every peer has read them */
    rs = sh_row;
  }
%if ROWW then
  const float rw = row_weights[row];
%end
  const float gscale = grad_scale(hdr, gout, gout_per_row, row, MODE){{ ROWW and " * rw" or "" }};
%row_setup()
%if DIVX then
  float sacc = 0.0f;
  if (MODE != MODE_BACKWARD) { /* S from the registers, summed over the cluster, before G */
    float unused = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      const int v = v0 + (j * THREADS + threadIdx.x) * VEC;
      float gv[VEC];
      elem_terms<MODE_BACKWARD>(s[j], t[j], rs, invTT, {{ EARGS }}, unused, gv{{ CEARG }});
      (void)v;
    }
    sacc = block_sum<THREADS>(sacc, sh_f);
    if (threadIdx.x == 0) sh_part = sacc;
    cluster_sync(); /* every block's part visible */
    if (threadIdx.x == 0) { /* in rank order: every block of the row gets the same S */
      const u32 a = smem_addr(&sh_part);
      float S = 0.0f;
      for (int k = 0; k < CLUSTER; k++) S += ld_cluster(a, (u32)k);
      sh_total = S;
    }
    cluster_sync(); /* every part read before a block moves on; sh_total visible */
    rs.S = sh_total;
    sacc = 0.0f;
    if (MODE == MODE_FORWARD && blockIdx.x == 0 && threadIdx.x == 0)
      rowstat[ROWSTAT_FLOATS * row + ROWSTAT_S] = rs.S; /* for backward */
  }
%end
  float loss = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    const int v = v0 + (j * THREADS + threadIdx.x) * VEC;
    float gv[VEC];
    elem_terms<MODE>(s[j], t[j], rs, invTT, {{ EARGS }}, loss, gv{{ CEARG }});
    if (MODE != MODE_FORWARD) {
      if (v + VEC <= v1)
        store_cols<true>(gr, v, gv);
      else if (v < v1)
        store_cols<false>(gr, v, gv);
    }
  }
  if (MODE != MODE_BACKWARD) {
%loss_terms("row * SPLIT + blockIdx.x")
  }
}
#define ROW_BODY cluster_row
%end

/* g may alias z (G overwrites the chunk logits): no restrict on either. */
%if K.has("kl_dense_fused") then
{{ K.kernel("kl_dense_fused") }} {
  ROW_BODY<MODE_FUSED>(z, g, teacher, bias,{{ TBA }}{{ RWA }} labels, labels_is64, ignore_index,
                       hdr, part, nrec, srow, srec, nullptr,
                       lossp,{{ HARD and " lossh," or "" }} nullptr, 0, row0);
}
%end

%if K.has("kl_dense_forward") then
{{ K.kernel("kl_dense_forward") }} {
  ROW_BODY<MODE_FORWARD>(z, nullptr, teacher, bias,{{ TBA }}{{ RWA }} labels, labels_is64,
                         ignore_index, hdr, part, nrec, srow, srec, rowstat,
                         lossp,{{ HARD and " lossh," or "" }} nullptr, 0, row0);
}
%end

%if K.has("kl_dense_backward") then
{{ K.kernel("kl_dense_backward") }} {
  ROW_BODY<MODE_BACKWARD>(z, g, teacher, bias,{{ TBA }}{{ RWA }} labels, labels_is64,
                          ignore_index, hdr, nullptr, 0, 0, 0, (float*)rowstat,
                          nullptr,{{ HARD and " nullptr," or "" }} gout, gout_per_row, row0);
}
%end
%if P.CLUSTER == 0 then

/* Split API (kljit_shard_stats): one thread per chunk row merges the row's SPLIT partial
 * records, in order, into one record (PART) at out + (row0 + r) PART_FLOATS (mh, dh the CE's,
 * else 0; S NaN on a shard with DIV, else 0; an ignored row: zeros, which pass 2 never
 * reads). */
%if K.has("kl_dense_merge") then
{{ K.kernel("kl_dense_merge") }} {
  const int r = blockIdx.x * {{ iface.MERGE_THREADS }} + threadIdx.x;
  if (r >= rows) return;
  float* o = out + (row0 + r) * PART_FLOATS;
  float rec[PART_FLOATS] = {};
  if (row_kept(labels, labels_is64, ignore_index, row0 + r)) {
    row_merge_t m;
    row_merge_init(m);
    for (int k = 0; k < SPLIT; k++) row_merge_add(m, part + ((i64)r * SPLIT + k) * PART_FLOATS);
    rec[PART_M] = m.s.m, rec[PART_D] = m.s.d, rec[PART_SP] = m.sp, rec[PART_MT] = m.t.m;
    rec[PART_DT] = m.t.d;
%if HARD then
    rec[PART_MH] = m.h.m, rec[PART_DH] = m.h.d; /* the CE's (max, sum-exp) of z' */
%end
%if SHARDED then
    rec[PART_S] = __int_as_float(0x7fc00000); /* NaN until kl_dense_sums writes this shard's S */
%end
  }
  for (int k = 0; k < PART_FLOATS; k++) o[k] = rec[k];
}
%end
%end
%if DIVX and P.CLUSTER == 0 then

/* Split API (kljit_shard_sums): one block per chunk row merges the row's records (every
 * shard's, as pass 2 does), sums this shard's part of S = sum_v q g over its columns and
 * writes it to slot S of the row's record in out (this shard's kljit_shard_stats records;
 * slot S only, so part may be the same buffer). An ignored row gets 0. */
%if K.has("kl_dense_sums") then
{{ K.kernel("kl_dense_sums") }} {
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  __shared__ row_t sh_row;
  __shared__ float sh_f[THREADS / 32];
  if (!row_kept(labels, labels_is64, ignore_index, row)) {
    if (threadIdx.x == 0) out[row * PART_FLOATS + PART_S] = 0.0f;
    return;
  }
  if (threadIdx.x == 0) {
    row_merge_t m;
    row_merge_init(m);
    for (int k = 0; k < nrec; k++)
      row_merge_add(m, part + ((i64)r * srow + (i64)k * srec) * PART_FLOATS);
    sh_row = row_finish(m);
  }
  __syncthreads();
  const row_t rs = sh_row;
  const float invT = INV_T(hdr);
#if defined(TEACHER_LOGITS)
  const float invTT = INV_TT(hdr);
#else
  const float invTT = 1.0f;
#endif
  const float gscale = 0.0f; /* G is not written: elem_terms' gradient goes unused */
  const int v0 = 0, v1 = V;
%row_setup()
  const logit_t* zr = z + (i64)r * LD;
  const teach_t* tr = teacher + {{ TRI }} * {{ TSTRIDE }};
  float sacc = 0.0f;
%s_sweep()
  sacc = block_sum<THREADS>(sacc, sh_f);
  if (threadIdx.x == 0) out[row * PART_FLOATS + PART_S] = sacc;
}
%end
%end
%if TXCHECK then

/* Checked mode of the online teacher: its logits are computed per chunk, so what is checked is
 * what they are computed from. Block b checks the input row b (when b < rows and the row is
 * kept; with ROWW its weight too) and the head rows v = b, b + gridDim.x, ... < V with their
 * bias: the grid has max(rows, V) blocks. The first bad item -> flag as (index << 8) | kind via
 * atomicMin: 5 (ROWW) a negative, NaN or infinite weight of row `index`, 6 a NaN or infinite
 * value in teacher_input row `index`, 7 in teacher_weight row `index`, 8 teacher_bias[index]. */
typedef {{ dt[P.TXDT] }} tx_t;
#define HT {{ P.HT }}

__device__ __forceinline__ bool finite_f32(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

/* Whether an Ht-long row holds a NaN or infinity (every thread of the block gets the answer). */
__device__ __forceinline__ bool row_bad(const tx_t* __restrict__ r) {
  int bad = 0;
  for (int j = threadIdx.x; j < HT && !bad; j += {{ CHECK_THREADS }})
    bad = !finite_f32(to_f32(r[j]));
  return __syncthreads_or(bad) != 0;
}

%if K.has("kl_dense_check") then
{{ K.kernel("kl_dense_check") }} {
  const i64 b = blockIdx.x;
  if (b < rows && row_kept(labels, labels_is64, ignore_index, b)) {
%if ROWW then
    const float w = row_weights[b];
    if (!(w >= 0.0f) || !finite_f32(w)) {
      if (threadIdx.x == 0) atomicMin(flag, ((u64)b << 8) | 5u);
      return; /* a smaller index of another kind may still come from another block */
    }
%end
    if (row_bad(tx + b * HT)) {
      if (threadIdx.x == 0) atomicMin(flag, ((u64)b << 8) | 6u);
      return;
    }
  }
  for (i64 v = b; v < V; v += gridDim.x) {
    if (row_bad(tw + v * HT)) {
      if (threadIdx.x == 0) atomicMin(flag, ((u64)v << 8) | 7u);
      return;
    }
%if TB then
    if (threadIdx.x == 0 && !finite_f32(to_f32(tbias[v]))) atomicMin(flag, ((u64)v << 8) | 8u);
%end
  }
}
%end
%elseif P.CHECK then

/* Checked mode: one block per row of the call (blockIdx.x); ignored rows are not checked. The
 * first bad row (smallest index) and its kind -> flag as (row << 8) | kind via atomicMin:
 * 3 a value NaN or infinite (-inf allowed for log-probs and logits: p = 0), 4 a negative
 * probability, 5 (ROWW) a negative, NaN or infinite row weight. */
%if K.has("kl_dense_check") then
{{ K.kernel("kl_dense_check") }} {
  const i64 row = blockIdx.x;
  if (!row_kept(labels, labels_is64, ignore_index, row)) return;
  int bad = 0;
  for (int v = threadIdx.x; v < V && !bad; v += {{ CHECK_THREADS }}) {
    const float t = to_f32(teacher[row * {{ TSTRIDE }} + v]);
    const bool finite = (__float_as_uint(t) & 0x7f800000u) != 0x7f800000u;
#if defined(TEACHER_PROBS)
    if (!finite) bad = 3;
    else if (t < 0.0f) bad = 4;
#else
    if (!finite && t != KL_NEG_INF) bad = 3;
#endif
  }
%if ROWW then
  const float w = row_weights[row]; /* 5: the row's weight negative, NaN or infinite */
  if (!(w >= 0.0f) || (__float_as_uint(w) & 0x7f800000u) == 0x7f800000u) bad = 5;
%end
  if (bad) atomicMin(flag, ((u64)row << 8) | (u64)bad);
}
%end
%end
