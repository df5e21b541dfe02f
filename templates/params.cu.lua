%-- SPDX-License-Identifier: Apache-2.0
%-- params.cu.lua: the parameter checks and dtype tables the kernel families share (included by
%-- dense_rows, sparse_rows and helpers). Emits no text; returns
%--   dt      dtype tag -> CUDA type of a stored element ("bf16" -> "bf16_t")
%--   size    dtype tag -> bytes of one element
%--   module  checks of every module: V in [2, 2^24], LD >= V and a multiple of 8, TMODE, T,
%--           VTOT (default V) in [V, 2^24]; returns VTOT
%--   rows    checks of the row families: THREADS, SPLIT, EPS, LDG = LD or 2 LD, and every key
%--           of `dtypes` a float dtype tag
%--   ce_extras  checks of the hard-label CE's extras: LSMOOTH in (0, 1] and ZLOSS > 0, each
%--           only with the CE (`hard`: HARD given)
%--   DIVS    the divergences DIV names (absent: the forward KL), a set
%--   REDUCTIONS  REDUCTION's words -> the helpers' REDUCTION code
%-- The sets are built here, once per include, and not in the families' prologues: a kept
%-- validation sandbox keeps this file's value from check to check (validator.c), and a table
%-- built in a prologue is built, and collected, once per check: built there, these tables and
%-- iface.cu.lua's DENSE_ROWSTAT and DENSE_PARTS were a tenth of the instructions of a 6000-entry
%-- wisdom import (unit_wisdom_rules' text: 701 M, then 627 M). No template writes into them.
%-- Each check reject()s with the sentence naming the parameter and its allowed values.
%local M = {}
%M.dt = { f32 = "float", bf16 = "bf16_t", f16 = "f16_t" }
%M.size = { f32 = 4, bf16 = 2, f16 = 2 }
%function M.module()
%  if type(P.V) ~= "number" or P.V < 2 or P.V > 16777216 then reject("V must be in [2, 2^24]") end
%  if P.LD < P.V or P.LD % 8 ~= 0 then reject("LD must be >= V and a multiple of 8") end
%  if P.TMODE ~= "const" and P.TMODE ~= "runtime" then reject("TMODE must be const or runtime") end
%  if P.TMODE == "const" and not (P.T > 0 and P.T < math.huge) then reject("T must be > 0") end
%  local vtot = P.VTOT or P.V
%  if type(vtot) ~= "number" or vtot < P.V or vtot > 16777216 then
%    reject("VTOT must be in [V, 2^24]")
%  end
%  return vtot
%end
%function M.rows(dtypes)
%  if P.THREADS < 64 or P.THREADS > 1024 or P.THREADS % 32 ~= 0 then
%    reject("THREADS must be a multiple of 32 in [64, 1024]")
%  end
%  if P.SPLIT < 1 or P.SPLIT > 64 then reject("SPLIT must be in [1, 64]") end
%  for _, k in ipairs(dtypes) do
%    if not M.dt[P[k]] then reject(k .. " must be f32, bf16 or f16") end
%  end
%  if not (P.EPS > 0 and P.EPS < 1e-3) then reject("EPS must be in (0, 1e-3)") end
%  if P.LDG ~= P.LD and P.LDG ~= 2 * P.LD then reject("LDG must be LD or 2 LD") end
%end
%function M.ce_extras(hard)
%  if P.LSMOOTH ~= nil and not (hard and P.LSMOOTH > 0 and P.LSMOOTH <= 1) then
%    reject("LSMOOTH must be in (0, 1] and needs HARD")
%  end
%  if P.ZLOSS ~= nil and not (hard and P.ZLOSS > 0 and P.ZLOSS < math.huge) then
%    reject("ZLOSS must be > 0 and needs HARD")
%  end
%end
%M.DIVS = { reverse = true, jsd = true, tvd = true, skew_forward = true, skew_reverse = true }
%M.REDUCTIONS = { sum = 1, batchmean = 2, mean = 3, none = 4 }
%return M
