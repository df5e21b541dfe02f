%-- SPDX-License-Identifier: Apache-2.0
%-- iface.cu.lua: a kernel family's interface, declared once (included by the family templates).
%--
%-- A family lists its kernels in one table; each entry is
%--   { name = "kl_dense_fused", step = "fused", when = <bool, default true>,
%--     args = { { "z", "const logit_t*" }, { "part", "const float* __restrict__", role = "recs" },
%--              ... } }
%-- with the arguments in order: the CUDA parameter name, its CUDA type, and the role (the field
%-- of the C side's argument struct, src/kiface.h) when it differs from the name. From that one
%-- table this file
%--   - emits each kernel's signature: `{{ K.signature("kl_dense_fused") }}`;
%--   - hands the renderer the manifest (manifest_add), one line per kernel that exists for
%--     these parameters: "<name> <step> <role>:<kind> ...", kind ptr | i32 | i64 | f32. The
%--     manifest is stored with the cubin; the plan checks it and marshals by it (src/kiface.c).
%-- Nothing else lists a kernel's arguments. Emits no text itself.
%local M = {}
%-- The scalar CUDA types a kernel may take, and their manifest kinds (every pointer is "ptr").
%local scalar = { ["int"] = "i32", ["i64"] = "i64", ["float"] = "f32" }
%local function kind_of(kernel, arg)
%  if arg[2]:find("*", 1, true) then return "ptr" end
%  return scalar[arg[2]] or error("kernel " .. kernel .. ": argument " .. arg[1] .. " has type "
%    .. arg[2] .. ", which is neither a pointer nor int, i64 or float", 2)
%end
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
%-- `when` (nil: always); `loss_out` (nil: none) the family's loss outputs after lossp in the
%-- kernels that write the loss. Their other arguments are the same in every family.
%function M.row_passes(prefix, row_in, merge_when, loss_out)
%  local Z, G = { { "z", "const logit_t*" } }, { { "g", "grad_t*" } }
%  local ROW0 = { { "row0", "i64" } }
%  local recs = { { "part", "const float* __restrict__", role = "recs" }, { "nrec", "int" },
%    { "srow", "i64" }, { "srec", "i64" } }
%  local LOSS = M.args({ { "lossp", "float* __restrict__" } }, loss_out or {})
%  return {
%    { name = prefix .. "_fused", step = "fused",
%      args = M.args(Z, G, row_in, recs, LOSS, ROW0) },
%    { name = prefix .. "_forward", step = "forward",
%      args = M.args(Z, row_in, recs, { { "rowstat", "float*" } }, LOSS, ROW0) },
%    { name = prefix .. "_backward", step = "backward",
%      args = M.args(Z, G, row_in, { { "rowstat", "const float*" },
%                    { "gout", "const float* __restrict__", role = "grad_output" },
%                    { "gout_per_row", "int", role = "per_row" } }, ROW0) },
%    { name = prefix .. "_merge", step = "merge", when = merge_when, args = {
%      { "part", "const float* __restrict__" }, { "labels", "const void*" },
%      { "labels_is64", "int" }, { "ignore_index", "i64" },
%      { "rows", "int", role = "chunk_rows" }, { "out", "float* __restrict__", role = "stats_out" },
%      { "row0", "i64" } } },
%  }
%end
%function M.family(kernels)
%  local by_name, F = {}, {}
%  for _, k in ipairs(kernels) do
%    if type(k.name) ~= "string" or type(k.step) ~= "string" or type(k.args) ~= "table" then
%      error("a kernel entry needs name, step and args", 2)
%    end
%    if k.when ~= false then
%      if by_name[k.name] then error("kernel " .. k.name .. " is declared twice", 2) end
%      by_name[k.name] = k
%      local line, seen = { k.name, k.step }, {}
%      for _, a in ipairs(k.args) do
%        local role = a.role or a[1]
%        if seen[role] then error("kernel " .. k.name .. ": role " .. role .. " twice", 2) end
%        seen[role] = true
%        line[#line + 1] = role .. ":" .. kind_of(k.name, a)
%      end
%      manifest_add(table.concat(line, " "))
%    end
%  end
%  function F.signature(name)
%    local k = by_name[name]
%    if not k then error("kernel " .. name .. " is not declared for these parameters", 2) end
%    return signature_text(k)
%  end
%  return F
%end
%return M
