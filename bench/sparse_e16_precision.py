#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The sparse top-K teacher's loss under E16 (issue 27's coverage), on the CPU.

    python3 bench/sparse_e16_precision.py [--rows 1024] [--hidden 256] [--vocab 32000]
                                          [--tile 128] [--stds 2,6,12] [--temps 1,0.5]
                                          [--topk 100] [--independent]

The sparse teacher's forward KL (tail none) of a row is sum_k p_k log p_k - sum_k p_k (s_k - lse)
over its K support entries. Where the logits GEMM's epilogue writes the tile-relative scores
x = s - m_tile in fp16 (E16) instead of the fp32 logits, the gathered s_k = m_tile + x_k are off
by up to 2^-11 |x_k|, and the cross term with them. This script measures, against float64, at
issue 27's loss bar (2e-6 at T = 1, 5e-6 at T = 0.5):

  fp32       the fp32 logits' gathers (the default, and logits:jit.stats)
  x fp16     gathers of m_tile + x from E16's fp16 x
  records    what E16's epilogue writes instead (templates/gemm_sm90.cu.lua, tile_support): per
             (row, tile) sum p (s - m_tile) over the tile's support columns from the fp32 scores,
             and sum p; pass 2 adds sum p (m_tile - lse)

lse comes from the fp32 (max, sum-exp) records either way; sum p log p from the teacher alone.
Sums over the support and the rows are taken in float64, so that the numbers are the forms'
rounding. Inputs as the other studies (study_args.inputs: X, W in bf16 with logits of standard
deviation `std`); the teacher the top K of softmax(s + unit noise) (or, --independent, of
logits of std 2 drawn apart), its probabilities in bf16 as given (no renormalization). Prints
one line per (std, T).
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

FORMS = ("fp32", "x fp16", "records")
BLOCK = 512


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = study_args.parser(__doc__.split("\n", 1)[0], rows=1024, hidden=256, tile=128,
                          stds="2,6,12")
    p.add_argument("--temps", type=study_args.positive_list,
                   default=study_args.positive_list("1,0.5"), help="temperatures T")
    p.add_argument("--topk", type=int, default=100, help="support entries a row (K)")
    p.add_argument("--independent", action="store_true",
                   help="a teacher drawn apart from the student (softmax of logits of std 2)")
    args = study_args.parse(p, argv)
    if not 1 <= args.topk <= args.vocab:
        p.error("topk must be in [1, vocab]")
    return args


def block_losses(torch, x, w, t: float, bn: int, k: int, g,
                 independent: bool = False) -> Dict[str, float]:
    """{form: the block's summed loss}, and 'exact' in float64, for one block of rows."""
    f64, f32, f16, bf = torch.float64, torch.float32, torch.float16, torch.bfloat16
    n, v = x.shape[0], w.shape[0]
    s = (x.to(f64) @ w.to(f64).T) / t
    noise = torch.randn(n, v, generator=g, dtype=f64)
    pv, ids = torch.softmax(2 * noise if independent else s + noise, -1).topk(k, -1)
    p = pv.to(bf).to(f64)
    plogp = torch.where(p > 0, p * torch.log(p), torch.zeros_like(p)).sum(-1)
    cross64 = (p * (s.gather(1, ids) - torch.logsumexp(s, -1, True))).sum(-1)
    out = {"exact": float((plogp - cross64).sum())}
    s32 = s.to(f32)
    tiles = s32.view(n, v // bn, bn)
    m = tiles.amax(-1, keepdim=True)
    x16 = (tiles - m).to(f16).to(f32)
    # E16's records: the sum-exp of the rounded x (the fp32 form: of s - m), merged in float64
    for form, xt in (("fp32", tiles - m), ("x fp16", x16)):
        lse = torch.logsumexp(m.squeeze(-1).to(f64) + torch.log(torch.exp(xt.to(f64)).sum(-1)), -1)
        sk = (tiles if form == "fp32" else m + x16).view(n, v).gather(1, ids).to(f64)
        out[form] = float((plogp - (p * (sk - lse[:, None])).sum(-1)).sum())
        if form == "x fp16":
            lse16 = lse
    # records: each support entry's p (s - m_tile) from the fp32 score, in fp32, plus p (m_tile -
    # lse) as pass 2 adds it per tile (m_tile - lse in fp32)
    mt = m.squeeze(-1).gather(1, ids // bn)                       # the entry's tile max (fp32)
    ps = (p.to(f32) * (s32.gather(1, ids) - mt)).to(f64)
    cross = ps + p * (mt - lse16.to(f32)[:, None]).to(f64)
    out["records"] = float((plogp - cross.sum(-1)).sum())
    return out


def errors(torch, n: int, h: int, v: int, bn: int, std: float, t: float, k: int, seed: int,
           independent: bool = False) -> Dict[str, float]:
    """{form: the batch loss's relative error against float64} for one logit scale and T."""
    sums = study_args.summed_over_blocks(
        torch, n, h, v, std, seed, BLOCK,
        lambda x, w, g: block_losses(torch, x, w, t, bn, k, g, independent))
    return {f: abs(sums[f] - sums["exact"]) / abs(sums["exact"]) for f in FORMS}


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch = study_args.torch_or_none("sparse_e16_precision.py")
    if torch is None:
        return 2
    print(study_args.header(args, f"top-{args.topk} teacher, the loss's relative error against "
                                  "float64 (bar: 2e-6 at T = 1, 5e-6 at T = 0.5)"))
    for std in args.stds:
        for t in args.temps:
            errs = errors(torch, args.rows, args.hidden, args.vocab, args.tile, std, t,
                          args.topk, args.seed, args.independent)
            print(f"std {std:5.1f}, T {t:4.2f}: "
                  + " | ".join(f"{f}: {errs[f]:.2e}" for f in FORMS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
