%-- SPDX-License-Identifier: Apache-2.0
%-- iface.cu.lua: a kernel family's interface, declared once (included by the family templates):
%-- its kernels with their launch geometry and arguments, and the records they exchange through
%-- memory. Nothing else states them: the C side reads both from the manifest (src/kiface.h).
%--
%-- Kernels: one table, each entry
%--   { name = "kl_dense_fused", step = "fused", when = <bool, default true>,
%--     threads = 256, min_blocks = <optional>, cluster = <optional>, smem = <optional>,
%--     args = { { "z", "const logit_t*" }, { "part", "const float* __restrict__", role = "recs" },
%--              ... } }
%-- with the arguments in order: the CUDA parameter name, its CUDA type, and the role (the field
%-- of the C side's argument struct, src/kiface.h) when it differs from the name. `threads` is
%-- the block size (and __launch_bounds__), `cluster` (when > 0) the blocks of a thread-block
%-- cluster (__cluster_dims__), `smem` the bytes of dynamic shared memory; the C side launches
%-- with what the manifest says and only chooses the grid.
%--
%-- Records: a second table, each entry
%--   { name = "part", floats = 8, slots = { "m", "d", "sp", ... } }
%-- an array of `floats` floats per item (a row, a (row, block)), its slots named in order from
%-- 0 (floats may exceed the slots: the rest is padding, e.g. to keep a public stride). The
%-- kernels index a record only through the names {{ K.records() }} defines (PART_FLOATS,
%-- PART_SLOTS, PART_M, ...); C sizes buffers by `floats` as the manifest carries it
%-- (kiface_layout); the binding asks the library (kljit_problem_layout). HDR below is the
%-- plan header every family reads and helpers.cu.lua writes.
%--
%-- From those two tables this file
%--   - emits each kernel's declaration (`extern "C" __global__ void` with its launch bounds and
%--     cluster dims, then the signature): `{{ K.kernel("kl_dense_fused") }} {`;
%--   - emits the records' slot names as constants: `{{ K.records() }}`;
%--   - hands the renderer the manifest (manifest_add): one line per kernel that exists for
%--     these parameters, "<name> <step> threads=<n> [cluster=<n>] [smem=<bytes>] <role>:<kind>
%--     ...", kind ptr | i32 | i64 | f32 | tmap (a CUtensorMap by value), and one per record,
%--     "record <name> <floats> <slot> ...". The manifest is stored with the cubin; a cached
%--     module whose manifest differs is refused, and the plan marshals and sizes by it.
%--
%-- Adding a slot to a record: append its name to the record's `slots` (within `floats`) and use
%-- <RECORD>_<SLOT> in the kernels. Adding a record: one entry in the family's records table;
%-- if the C side sizes a buffer by it, one line of KIFACE_RECORDS (src/kiface.h) too.
%local M = {}
%-- The scalar CUDA types a kernel may take, and their manifest kinds (every pointer is "ptr",
%-- a TMA descriptor passed by value, kl_tmap, is "tmap").
%local scalar = { ["int"] = "i32", ["i64"] = "i64", ["float"] = "f32" }
%local function kind_of(kernel, arg)
%  if arg[2]:find("*", 1, true) then return "ptr" end
%  if arg[2]:match("kl_tmap$") then return "tmap" end
%  return scalar[arg[2]] or error("kernel " .. kernel .. ": argument " .. arg[1] .. " has type "
%    .. arg[2] .. ", which is neither a pointer nor int, i64, float or kl_tmap", 2)
%end
%local function positive_int(v) return math.type(v) == "integer" and v > 0 end
%-- One parameter list wrapped at 100 columns, continuation lines aligned after the '('.
%local function signature_text(k)
%  local parts, lines, line = {}, {}, k.name .. "("
%  for i, a in ipairs(k.args) do parts[i] = a[2] .. " " .. a[1] end
%  local indent = string.rep(" ", #k.name + 1)
%  for i, p in ipairs(parts) do
%    local piece = p .. (i < #parts and "," or ")")
%    if i > 1 and #line + 1 + #piece > 98 then
%      lines[#lines + 1] = line
%      line = indent .. piece
%    else
%      line = line .. (i > 1 and " " or "") .. piece
%    end
%  end
%  if #parts == 0 then line = line .. ")" end
%  lines[#lines + 1] = line
%  return table.concat(lines, "\n")
%end
%-- The plan header kl_setup writes (helpers.cu.lua) and every row kernel reads: the loss's and
%-- the gradient's scales, the kept rows, 1 / T. In the workspace (fused) or at the start of
%-- the caller's `saved` (two-phase), before the rows' saved statistics.
%M.HDR = { name = "hdr", floats = 8,
%          slots = { "loss_scale", "grad_scale", "kept", "inv_t", "t2" } }
%-- The dense rows' pass-1 partial of one (row, block) and a row's merged record of the split API
%-- (templates/dense_rows.cu.lua says what each slot holds). Declared here because two families
%-- write it: the dense rows' pass 1, and the logits GEMM's statistics epilogue
%-- (templates/gemm_sm90.cu.lua, STATS), whose records pass 2 merges as it merges pass 1's.
%M.DENSE_PART = { name = "part", floats = 8,
%                 slots = { "m", "d", "sp", "mt", "dt", "mh", "dh", "S" } }
%-- The dense rows' saved statistics (rowstat; dense_rows.cu.lua says what each slot holds), with
%-- the CE's or a divergence's row total (_CE), and the steps of each of their two modules
%-- (PART). Here and not in the prologue, which a kept validation sandbox runs once per check:
%-- this file's value is kept (params.cu.lua says why that matters).
%M.DENSE_ROWSTAT = { name = "rowstat", floats = 4, slots = { "lse", "sp", "lset", "kept" } }
%M.DENSE_ROWSTAT_CE = { name = "rowstat", floats = 8,
%                      slots = { "lse", "sp", "lset", "kept", "lse1", "S" } }
%M.DENSE_PARTS = { fused = { stats = true, fused = true, check = true },
%                  phased = { forward = true, backward = true, merge = true, sums = true } }
%-- The sparse rows' pass-1 partial and merged record (templates/sparse_rows.cu.lua says what each
%-- slot holds), declared here for the same reason: the logits GEMM's epilogue writes it too
%-- (STATS sparse: m, d_on, d_off, the support's columns apart where its ids are read, and with
%-- OWN its own mo, dno).
%M.SPARSE_PART = { name = "part", floats = 8,
%                  slots = { "m", "d_on", "d_off", "mh", "dh", "mo", "dno", "S" } }
%-- ... and the record the logits GEMM's E16 epilogue writes for it (STATS sparse with E16), which
%-- the sparse rows read under ETILE: slots 5 and 6 (the support's own max and sum-exp, which
%-- only the renormalized divergences keep, out of E16's scope) hold the support's part of the
%-- loss instead: ps = sum p_k (s_k - m) and pw = sum p_k over the tile's support columns.
%M.SPARSE_E16_PART = { name = "part", floats = 8,
%                      slots = { "m", "d_on", "d_off", "mh", "dh", "ps", "pw", "S" } }
%-- The index of slot `name` of record `rec`.
%function M.slot(rec, name)
%  for i, s in ipairs(rec.slots) do
%    if s == name then return i - 1 end
%  end
%  error("record " .. rec.name .. " has no slot " .. name, 2)
%end
%-- Argument lists joined in order (families build their kernels' lists from shared pieces).
%function M.args(...)
%  local out = {}
%  for _, list in ipairs({ ... }) do
%    for _, a in ipairs(list) do out[#out + 1] = a end
%  end
%  return out
%end
%-- The four pass-2 kernels every row family has (fused, forward, backward, merge), named
%-- <prefix>_<step>, over the family's own per-row inputs `row_in`; `merge_when` as a kernel's
%-- `when` (nil: always); `launch` the pass-2 kernels' geometry ({ threads =, min_blocks =,
%-- cluster = }); `loss_out` (nil: none) the family's loss outputs after lossp in the kernels
%-- that write the loss. Their other arguments are the same in every family; merge runs one
%-- thread per chunk row, MERGE_THREADS a block.
%M.MERGE_THREADS = 256
%function M.row_passes(prefix, row_in, merge_when, launch, loss_out)
%  local Z, G = { { "z", "const logit_t*" } }, { { "g", "grad_t*" } }
%  local ROW0 = { { "row0", "i64" } }
%  local recs = { { "part", "const float* __restrict__", role = "recs" }, { "nrec", "int" },
%    { "srow", "i64" }, { "srec", "i64" } }
%  local LOSS = M.args({ { "lossp", "float* __restrict__" } }, loss_out or {})
%  local function pass(step, args)
%    return { name = prefix .. "_" .. step, step = step, threads = launch.threads,
%             min_blocks = launch.min_blocks, cluster = launch.cluster, args = args }
%  end
%  return {
%    pass("fused", M.args(Z, G, row_in, recs, LOSS, ROW0)),
%    pass("forward", M.args(Z, row_in, recs, { { "rowstat", "float*" } }, LOSS, ROW0)),
%    pass("backward", M.args(Z, G, row_in, { { "rowstat", "const float*" },
%                            { "gout", "const float* __restrict__", role = "grad_output" },
%                            { "gout_per_row", "int", role = "per_row" } }, ROW0)),
%    { name = prefix .. "_merge", step = "merge", when = merge_when,
%      threads = M.MERGE_THREADS, args = {
%      { "part", "const float* __restrict__" }, { "labels", "const void*" },
%      { "labels_is64", "int" }, { "ignore_index", "i64" },
%      { "rows", "int", role = "chunk_rows" }, { "out", "float* __restrict__", role = "stats_out" },
%      { "row0", "i64" } } },
%  }
%end
%local function check_kernel(k)
%  if type(k.name) ~= "string" or type(k.step) ~= "string" or type(k.args) ~= "table" then
%    error("a kernel entry needs name, step and args", 3)
%  end
%  if k.name == "record" then error("a kernel may not be named 'record' (a manifest word)", 3) end
%  if not positive_int(k.threads) then
%    error("kernel " .. k.name .. ": threads must be a positive integer", 3)
%  end
%  for _, f in ipairs({ "min_blocks", "cluster", "smem" }) do
%    if k[f] ~= nil and not (math.type(k[f]) == "integer" and k[f] >= 0) then
%      error("kernel " .. k.name .. ": " .. f .. " must be an integer >= 0", 3)
%    end
%  end
%end
%local function record_line(r, names)
%  if type(r.name) ~= "string" or not r.name:match("^[%a_][%w_]*$") then
%    error("a record needs a name (an identifier)", 3)
%  end
%  if names[r.name] then error("record " .. r.name .. " is declared twice", 3) end
%  names[r.name] = true
%  if not positive_int(r.floats) or type(r.slots) ~= "table" or #r.slots > r.floats then
%    error("record " .. r.name .. ": floats must be a positive integer >= its slots", 3)
%  end
%  local line, seen = { "record", r.name, tostring(r.floats) }, {}
%  for _, s in ipairs(r.slots) do
%    if type(s) ~= "string" or not s:match("^[%a_][%w_]*$") or seen[s] then
%      error("record " .. r.name .. ": slot " .. tostring(s) .. " is not a new identifier", 3)
%    end
%    seen[s] = true
%    line[#line + 1] = s
%  end
%  return table.concat(line, " ")
%end
%function M.family(kernels, records)
%  local by_name, F = {}, {}
%  for _, k in ipairs(kernels) do
%    check_kernel(k)
%    if k.when ~= false then
%      if by_name[k.name] then error("kernel " .. k.name .. " is declared twice", 2) end
%      by_name[k.name] = k
%      local line, seen = { k.name, k.step, "threads=" .. k.threads }, {}
%      if (k.cluster or 0) > 0 then line[#line + 1] = "cluster=" .. k.cluster end
%      if (k.smem or 0) > 0 then line[#line + 1] = "smem=" .. k.smem end
%      for _, a in ipairs(k.args) do
%        local role = a.role or a[1]
%        if seen[role] then error("kernel " .. k.name .. ": role " .. role .. " twice", 2) end
%        seen[role] = true
%        line[#line + 1] = role .. ":" .. kind_of(k.name, a)
%      end
%      manifest_add(table.concat(line, " "))
%    end
%  end
%  local names = {}
%  for _, r in ipairs(records or {}) do manifest_add(record_line(r, names)) end
%  function F.kernel(name)
%    local k = by_name[name]
%    if not k then error("kernel " .. name .. " is not declared for these parameters", 2) end
%    local attrs = (k.cluster or 0) > 0 and ("__cluster_dims__(" .. k.cluster .. ", 1, 1) ") or ""
%    local bounds = k.min_blocks and (k.threads .. ", " .. k.min_blocks) or tostring(k.threads)
%    return 'extern "C" __global__ void ' .. attrs .. "__launch_bounds__(" .. bounds .. ")\n"
%      .. signature_text(k)
%  end
%  -- whether the kernel is declared for these parameters (a `when` false, or a part's other)
%  function F.has(name)
%    return by_name[name] ~= nil
%  end
%  -- one enum a record: <NAME>_FLOATS, <NAME>_SLOTS (the named ones; the rest is padding)
%  -- and <NAME>_<SLOT> (each slot's index)
%  function F.records()
%    local out = {}
%    for _, r in ipairs(records or {}) do
%      local up = string.upper(r.name)
%      local items = { up .. "_FLOATS = " .. r.floats, up .. "_SLOTS = " .. #r.slots }
%      for i, s in ipairs(r.slots) do
%        items[#items + 1] = up .. "_" .. string.upper(s) .. " = " .. (i - 1)
%      end
%      out[#out + 1] = "/* record " .. r.name .. " (the manifest's \"record " .. r.name
%        .. "\" line): " .. r.floats .. " floats an item */"
%      local line = "enum { "
%      for i, it in ipairs(items) do
%        local piece = it .. (i < #items and "," or " };")
%        if #line + 1 + #piece > 98 then
%          out[#out + 1] = line
%          line = "       " .. piece
%        else
%          line = line .. (line:sub(-1) == " " and "" or " ") .. piece
%        end
%      end
%      out[#out + 1] = line
%    end
%    return table.concat(out, "\n")
%  end
%  return F
%end
%return M
