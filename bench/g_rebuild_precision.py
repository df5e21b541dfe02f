#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The precision of G rebuilt from a 16-bit unnormalized exponential (issue 27, step 2), on the CPU.

    python3 bench/g_rebuild_precision.py [--rows 512] [--hidden 512] [--vocab 32000]
                                         [--tile 256] [--stds 2,6,12]

Issue 27's step 2 would have the dX and dW GEMMs build G = sum(p) q - p (the forward KL's
gradient of the logits) where they load their operand, instead of reading a G that a row pass
wrote. Rebuilding q from the fp32 logits there costs an exp per logit for every tile of the
other dimension (H / BN of them: 16 at H = 4096), more than the row passes it removes. The
cheap form: the logits GEMM's epilogue stores E = exp(s - m_tile) in 16 bits (in (0, 1]) and,
once the row's lse is known, c = exp(m_tile - lse) sum(p) per (row, column tile), so that the
operand is one multiply-add of E, c and -p. This script measures what that does to G and dX
against float64, beside today's G = bf16(sum(p) q - p) from fp32 logits:

  today       G = bf16(fp32(sum(p) q) - p), q from fp32 logits and the fp32 lse
  bf16, fp32  E in bf16, c in fp32, an fp32 multiply-add, one rounding to bf16
  bf16, bf16  E and c in bf16 (a bf16x2 multiply-add)
  fp16        E, c and p in fp16 (an fp16x2 multiply-add), the result rounded to bf16

Inputs as bench/compare.py's precision runs: X uniform in [-1, 1), W uniform in [-a, a) with
a = 3 std / sqrt(H) (logits of standard deviation `std`), both bf16; the teacher the softmax of
the exact logits plus unit Gaussian noise, in bf16. dX is accumulated in float64 (G @ W), so
the numbers are G's rounding alone. Prints one line per std: each form's relative Frobenius
error of G and of dX; issue 27's bar for dX is 2.5e-3.
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

FORMS = ("today", "bf16, fp32", "bf16, bf16", "fp16")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    return study_args.parse(study_args.parser(__doc__.split("\n", 1)[0], rows=512, hidden=512,
                                              tile=256, stds="2,6,12"), argv)


def errors(torch, n: int, h: int, v: int, bn: int, std: float, seed: int) -> Dict[str, tuple]:
    """{form: (G's error, dX's error)} against float64 for one logit scale."""
    f64, f32, f16, bf = torch.float64, torch.float32, torch.float16, torch.bfloat16
    _, w, z, p = study_args.inputs(torch, n, h, v, std, seed)
    sp = p.to(f64).sum(-1, keepdim=True)
    g_ref = torch.softmax(z, -1) * sp - p.to(f64)
    dx_ref = g_ref @ w.to(f64)
    z32, p32 = z.to(f32), p.to(f32)
    lse = torch.logsumexp(z32, -1, keepdim=True)
    sp32 = p32.sum(-1, keepdim=True)
    tiles = z32.view(n, v // bn, bn)
    m = tiles.amax(-1, keepdim=True)
    c = torch.exp(m - lse.unsqueeze(-1)) * sp32.unsqueeze(-1)
    pt = p32.view(n, v // bn, bn)
    e = torch.exp(tiles - m)
    gs = {
        "today": (torch.exp(z32 - lse) * sp32 - p32).to(bf),
        "bf16, fp32": (e.to(bf).to(f32) * c - pt).to(bf).view(n, v),
        "bf16, bf16": (e.to(bf).to(f32) * c.to(bf).to(f32) - pt).to(bf).view(n, v),
        "fp16": (e.to(f16).to(f32) * c.to(f16).to(f32) - pt.to(f16).to(f32)).to(f16)
        .to(f32).to(bf).view(n, v),
    }

    def rel(t, ref) -> float:
        return float((t - ref).norm()) / float(ref.norm())

    return {k: (rel(gv.to(f64), g_ref), rel(gv.to(f64) @ w.to(f64), dx_ref))
            for k, gv in gs.items()}


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch = study_args.torch_or_none("g_rebuild_precision.py")
    if torch is None:
        return 2
    print(study_args.header(args, "relative Frobenius error against float64 of G / dX (bar for "
                                  "dX: 2.5e-3)"))
    for std in args.stds:
        errs = errors(torch, args.rows, args.hidden, args.vocab, args.tile, std, args.seed)
        print(f"std {std:5.1f}: " + " | ".join(
            f"{k}: {errs[k][0]:.2e} / {errs[k][1]:.2e}" for k in FORMS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
