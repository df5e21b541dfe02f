#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A logit softcap's factor on G from E16's stored score (issue 27, step 2), on the CPU.

    python3 bench/e16_softcap_precision.py [--rows 512] [--hidden 256] [--vocab 32000]
                                           [--tile 128] [--stds 2,6,12] [--caps 30,15]
                                           [--temperatures 1,0.5] [--seed 0]

With a softcap c the student's scores are s = c tanh(z / c) / T and the forward KL's gradient
of z is G = (sum(p) q - p) (1 - (s T / c)^2) / T. Under E16 (KLJIT_GEMM=logits:jit.e16) the
logits GEMM's epilogue caps s and stores x = s - m_tile in fp16; the rows take s back as
m_tile + x and the factor 1 - (s T / c)^2 from that s, which errs by up to 2^-11 |x|. This prints,
for each logit scale, cap and T, dX's relative Frobenius error against float64 with q and the
factor from the fp32 s (the rows without E16) and from the s taken back (E16), G rounded to bf16
as the rows write it and dX accumulated in float64. Issue 27's bar for dX is 2.5e-3.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Sequence

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # loaded by path (the tests): bench/ holds study_args
    sys.path.insert(0, HERE)
import study_args  # noqa: E402

FORMS = ("fp32 s", "E16 s")


def parse_args(argv: Sequence[str]) -> Any:
    p = study_args.parser(__doc__.split("\n", 1)[0], rows=512, hidden=256, tile=128,
                          stds="2,6,12")
    p.add_argument("--caps", type=study_args.positive_list, default=[30.0, 15.0])
    p.add_argument("--temperatures", type=study_args.positive_list, default=[1.0, 0.5])
    return study_args.parse(p, argv)


def errors(torch: Any, n: int, h: int, v: int, bn: int, std: float, cap: float, t: float,
           seed: int) -> Dict[str, float]:
    """{form: dX's relative Frobenius error against float64} for one scale, cap and T."""
    f64, f32, f16, bf = torch.float64, torch.float32, torch.float16, torch.bfloat16
    _, w, z, p = study_args.inputs(torch, n, h, v, std, seed)
    w64, p64, p32 = w.to(f64), p.to(f64), p.to(f32)
    s = cap * torch.tanh(z / cap) / t
    g_ref = (torch.softmax(s, -1) * p64.sum(-1, keepdim=True) - p64) * (1 - (s * t / cap) ** 2) / t
    dx_ref = g_ref @ w64
    s32 = s.to(f32)
    lse = torch.logsumexp(s32, -1, keepdim=True)
    tiles = s32.view(n, v // bn, bn)
    m = tiles.amax(-1, keepdim=True)
    taken_back = (m + (tiles - m).to(f16).to(f32)).view(n, v)
    out = {}
    for form, sv in zip(FORMS, (s32, taken_back)):
        g = (torch.exp(sv - lse) * p32.sum(-1, keepdim=True) - p32) * (1 - (sv * t / cap) ** 2) / t
        out[form] = float((g.to(bf).to(f64) @ w64 - dx_ref).norm()) / float(dx_ref.norm())
    return out


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch = study_args.torch_or_none("e16_softcap_precision.py")
    if torch is None:
        return 2
    print(f"dX's relative Frobenius error against float64 with a softcap ({args.rows} x "
          f"{args.hidden} x {args.vocab}, tile {args.tile}, seed {args.seed}; bar 2.5e-3)")
    for std in args.stds:
        for cap in args.caps:
            for t in args.temperatures:
                errs = errors(torch, args.rows, args.hidden, args.vocab, args.tile, std, cap, t,
                              args.seed)
                print(f"std {std:g}, cap {cap:g}, T {t:g}: "
                      + "  ".join(f"{k} {e:.3e}" for k, e in errs.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
