#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""dW's error from its bf16 roundings, by the number of token chunks, on the CPU (issue 27).

    python3 bench/dw_rounding_precision.py [--rows 4096] [--hidden 256] [--vocab 16000]
                                           [--stds 2,6] [--temperatures 1,0.5]
                                           [--chunks 1,2,3,4,8] [--seed 0]

With a 16-bit dW and grad_weight_accum='auto' (the binding's default), a call of at most 8
token chunks accumulates dW in the weight's dtype: each chunk's dW GEMM adds G_c^T X_c (fp32
inside the GEMM) to the bf16 dW and rounds, so a call of k chunks rounds dW k times. One bf16
rounding alone is a relative Frobenius error of about 2.3e-3 (bf16 keeps 8 bits); issue 27's
bar for dW is a quarter of Liger's error on the same inputs (about 1.2e-2 at logit standard
deviation 2: 3.0e-3). This prints, for each logit scale and T, dW's relative Frobenius error
against float64 when it is accumulated over k chunks of equal rows (G rounded to bf16 first,
as the rows write it; each chunk's product exact, as the GEMM's fp32 sum nearly is), so that
the number of chunks a plan takes can be read against the bar.

Inputs as the other studies (study_args.inputs: bf16 X and W, logits of standard deviation
`std`, the teacher the softmax of the logits plus unit noise); forward KL, batchmean:
G = (sum(p) softmax(z / T) - p) / (T N).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # loaded by path (the tests): bench/ holds study_args
    sys.path.insert(0, HERE)
import study_args  # noqa: E402


def chunk_list(text: str) -> List[int]:
    """'1,2,4' -> [1, 2, 4]; positive integers only."""
    try:
        vals = [int(t) for t in text.split(",")]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"bad list {text!r}: positive integers, comma-separated")
    return vals


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=16000)
    p.add_argument("--stds", type=study_args.positive_list, default=[2.0, 6.0],
                   help="logit standard deviations")
    p.add_argument("--temperatures", type=study_args.positive_list, default=[1.0, 0.5])
    p.add_argument("--chunks", type=chunk_list, default=[1, 2, 3, 4, 8],
                   help="token chunks of a call (each at most --rows)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if min(args.rows, args.hidden, args.vocab) < 2 or max(args.chunks) > args.rows:
        p.error("--rows, --hidden and --vocab must be >= 2 and every chunk count <= --rows")
    return args


def errors(torch: Any, n: int, h: int, v: int, std: float, t: float, chunks: Sequence[int],
           seed: int) -> Dict[int, float]:
    """{k: dW's relative Frobenius error} against float64, dW accumulated in bf16 over k chunks
    of (nearly) equal rows."""
    f64, bf = torch.float64, torch.bfloat16
    x, _, z, p = study_args.inputs(torch, n, h, v, std, seed)
    p = p.to(f64)
    g = (torch.softmax(z / t, -1) * p.sum(-1, keepdim=True) - p) / (t * n)
    x = x.to(f64)
    ref = g.T @ x
    gb = g.to(bf).to(f64)  # G as the rows write it
    out = {}
    for k in chunks:
        bounds = [n * c // k for c in range(k + 1)]
        acc = None
        for a, b in zip(bounds, bounds[1:]):
            part = gb[a:b].T @ x[a:b]
            acc = (part if acc is None else acc + part).to(bf).to(f64)
        out[k] = float(torch.linalg.norm(acc - ref) / torch.linalg.norm(ref))
    return out


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch = study_args.torch_or_none("dw_rounding_precision.py")
    if torch is None:
        return 2
    print(f"dW's relative Frobenius error against float64, accumulated in bf16 over k chunks "
          f"({args.rows} x {args.hidden} x {args.vocab}, seed {args.seed}; bar at std 2: 3.0e-3, "
          f"a quarter of Liger's 1.2e-2)")
    for std in args.stds:
        for t in args.temperatures:
            errs = errors(torch, args.rows, args.hidden, args.vocab, std, t, args.chunks,
                          args.seed)
            print(f"std {std:g}, T {t:g}: " + "  ".join(f"k={k} {e:.2e}" for k, e in errs.items()),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
