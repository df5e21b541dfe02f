#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The precision of the loss taken from a 16-bit chunk (issue 27, step 2): unnormalized
exponentials, or the tile-relative score E16 stores, on the CPU.

    python3 bench/loss_from_e16_precision.py [--rows 2048] [--hidden 256] [--vocab 32000]
                                             [--tile 128] [--stds 2,6] [--temps 1,0.5]
                                             [--independent]

If the logits GEMM's epilogue stored E = exp(s - m_tile) in 16 bits instead of the fp32 logits
(s = z / T; m_tile the row's max over the column tile; bench/g_rebuild_precision.py: G rebuilt
from it keeps dX's error), the forward KL's loss per row, sum p log p - sum p s + sum(p) lse,
would have to come from somewhere: either the epilogue sums p s per (row, tile) from its fp32
accumulators (the teacher read in the accumulators' layout, or staged through shared memory), or
the row pass takes s = m_tile + log E from the stored E. This script measures the second against
float64, beside today's fp32 form, at issue 27's bar (loss relative error at most 2e-6 at T = 1,
5e-6 at T = 0.5):

  fp32       today: s, lse and each logit's terms in fp32
  E fp16     s = m_tile + log(E) with E rounded to fp16 (E below fp16's smallest subnormal,
             2^-24, is stored as 2^-24: a zero would make log E = -inf)
  E bf16     the same with E in bf16
  E fp16 2^15  what E16 stored first (templates/gemm_sm90.cu.lua's history): fp16 of 2^15 E,
             the tile's largest term at the top of fp16's range, so that E reaches the
             subnormals only 20 nats below m_tile and the 2^-24 floor 27 below (fp16 E alone: 10
             and 17); pass 2 takes s = m_tile - 15 log 2 + log(stored)
  E u16      an unsigned 16-bit float of 5 exponent and 11 fraction bits over (0, 1] (twice
             fp16's precision, floored at 2^-31, 21.5 nats)
  x fp16     what the E16 epilogue stores: x = s - m_tile itself in fp16, s = m_tile + x (no
             floor; an error of at most 2^-11 |x|, nothing near the tile's max)
Every E form has a floor: a column below it reads as on it, which wrongs the loss by the
teacher's mass there times the distance. --independent draws the teacher apart from the student
(the softmax of logits of std 2, as the GPU suite's cases do), which puts mass on such columns.

lse comes from the fp32 (max, sum-exp) records either way; sum p log p from the teacher alone.
Each logit's terms are fp32; the sums over the vocabulary and the rows are taken in float64, so
that the numbers are the forms' rounding, not the order of a reduction (kljit's fp32 partial sums
add about 1e-7 to each, bench/RESULTS.md).
Inputs as bench/compare.py's precision runs: X uniform in [-1, 1), W uniform in [-a, a) with
a = 3 std / sqrt(H) (logits of standard deviation `std`), both bf16; the teacher the softmax of
the exact s plus unit Gaussian noise (or, --independent, of logits of std 2), in bf16. Rows are
processed in blocks of 512 and the loss summed over them (batchmean: the sum over rows / rows).
Prints one line per (std, T).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, Sequence

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # loaded by path (the tests): bench/ holds study_args
    sys.path.insert(0, HERE)
import study_args  # noqa: E402

FORMS = ("fp32", "E fp16", "E bf16", "E fp16 2^15", "E u16", "x fp16")
BLOCK = 512


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = study_args.parser(__doc__.split("\n", 1)[0], rows=2048, hidden=256, tile=128, stds="2,6")
    p.add_argument("--temps", type=study_args.positive_list,
                   default=study_args.positive_list("1,0.5"), help="temperatures T")
    p.add_argument("--independent", action="store_true",
                   help="a teacher independent of the student (softmax of logits of std 2, as "
                        "the GPU suite's) instead of the student's softmax plus noise")
    return study_args.parse(p, argv)


def block_losses(torch, x, w, t: float, bn: int, g, independent: bool = False) -> Dict[str, float]:
    """{form: the block's summed loss}, and 'exact' in float64, for one block of rows."""
    f64, f32, f16, bf = torch.float64, torch.float32, torch.float16, torch.bfloat16
    n, v = x.shape[0], w.shape[0]
    s = (x.to(f64) @ w.to(f64).T) / t
    noise = torch.randn(n, v, generator=g, dtype=f64)
    p = torch.softmax(2 * noise if independent else s + noise, -1).to(bf)
    p64 = p.to(f64)
    plogp64 = torch.where(p64 > 0, p64 * torch.log(p64), torch.zeros_like(p64))
    out = {"exact": float((plogp64 - p64 * torch.log_softmax(s, -1)).sum())}
    s32, p32 = s.to(f32), p.to(f32)
    tiles = s32.view(n, v // bn, bn)
    m = tiles.amax(-1, keepdim=True)
    d = torch.exp(tiles - m).sum(-1, keepdim=True)  # the records: fp32 (max, sum-exp) per tile
    mr = m.amax(1, keepdim=True)
    lse = (mr + torch.log((d * torch.exp(m - mr)).sum(1, keepdim=True))).view(n, 1)
    plogp = torch.where(p32 > 0, p32 * torch.log(p32), torch.zeros_like(p32)).to(f64).sum(-1)
    sp = p32.to(f64).sum(-1)
    lse64 = lse.view(n).to(f64)
    out["fp32"] = float((plogp - (p32 * s32).to(f64).sum(-1) + sp * lse64).sum())
    e = torch.exp(tiles - m)
    for form, dt in (("E fp16", f16), ("E bf16", bf)):
        stored = e.to(dt).to(f32).clamp_min(2.0 ** -24)
        s_back = (m + torch.log(stored)).view(n, v)
        out[form] = float((plogp - (p32 * s_back).to(f64).sum(-1) + sp * lse64).sum())
    for form, stored in (("E fp16 2^15", shifted_fp16(torch, e)), ("E u16", u16(torch, e))):
        s_back = (m + torch.log(stored)).view(n, v)
        out[form] = float((plogp - (p32 * s_back).to(f64).sum(-1) + sp * lse64).sum())
    # what E16 stores: the tile-relative score itself, s = m_tile + x
    x16 = (tiles - m).to(f16).to(f32)
    out["x fp16"] = float((plogp - (p32 * (m + x16).view(n, v)).to(f64).sum(-1) + sp * lse64).sum())
    return out


def shifted_fp16(torch, e):
    """E as the logits GEMM's E16 epilogue first stored it: fp16 of 2^15 E (the tile's largest
    term at the top of fp16's range), read as at least fp16's smallest subnormal, times 2^-15."""
    return (e * 32768.0).to(torch.float16).to(torch.float32).clamp_min(2.0 ** -24) / 32768.0


def u16(torch, e):
    """E (in (0, 1]) as an unsigned 16-bit float of 5 exponent and 11 fraction bits: the fp32
    bits rounded to nearest at bit 12 less 96 << 11 (exponent field 0 is 2^-31's binade, every
    code normal), a value below 2^-31 read as 2^-31; twice fp16's precision, no sign bit."""
    b = e.contiguous().view(torch.int32).to(torch.int64) + 0x800
    u = ((b >> 12) - (96 << 11)).clamp_min(0)
    return ((u + (96 << 11)) << 12).to(torch.int32).view(torch.float32)


def errors(torch, n: int, h: int, v: int, bn: int, std: float, t: float,
           seed: int, independent: bool = False) -> Dict[str, float]:
    """{form: the batch loss's relative error against float64} for one logit scale and T."""
    sums = study_args.summed_over_blocks(
        torch, n, h, v, std, seed, BLOCK,
        lambda x, w, g: block_losses(torch, x, w, t, bn, g, independent))
    return {k: abs(sums[k] - sums["exact"]) / abs(sums["exact"]) for k in FORMS}


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch = study_args.torch_or_none("loss_from_e16_precision.py")
    if torch is None:
        return 2
    print(study_args.header(args, "the loss's relative error against float64 (bar: 2e-6 at "
                                  "T = 1, 5e-6 at T = 0.5)"))
    for std in args.stds:
        for t in args.temps:
            errs = errors(torch, args.rows, args.hidden, args.vocab, args.tile, std, t, args.seed,
                          args.independent)
            print(f"std {std:5.1f}, T {t:4.2f}: "
                  + " | ".join(f"{k}: {errs[k]:.2e}" for k in FORMS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
