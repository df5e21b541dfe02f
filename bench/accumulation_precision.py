#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 27's loss bars against the tensor cores' accumulation, on the CPU: how far the loss
moves when the logits GEMM's fp32 accumulator is rounded toward zero at each k-step, as NVIDIA's
tensor cores are reported to do (Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of
NVIDIA tensor cores", PeerJ CS 2021: products aligned and summed with truncation), against the
same accumulation rounded to nearest.

    python3 bench/accumulation_precision.py [--rows 128] [--hidden 4096] [--vocab 8000]
        [--stds 2,6] [--temps 1,0.5] [--step 16] [--promote 64,256,1024] [--seed 0]

Inputs: issue 27's precision protocol (study_args.inputs: bf16 X and W giving logits of
standard deviation `std`, the teacher softmax(z + unit noise) in bf16). The logits three ways,
each from the exact products of the bf16 inputs (float64), `--step` columns of K at a time
(wgmma's k16): rounded to fp32 to nearest after each step ("RN"), toward zero after each step
("RZ", the model of the hardware; a simplification: the real adder truncates the aligned terms
inside the step too), and RZ within runs of P columns of K whose results are added into a
second fp32 accumulator to nearest ("RZ, promoted every P": what a GEMM keeping two
accumulators would do). Printed: z's relative bias (mean of (z' - z) sign(z) over mean |z|)
and the batchmean KL(p || softmax(z' / T))'s relative error against float64's, each loss in
float64 from its z' so that only the accumulation differs.

What it answers (bench/RESULTS.md): the H200's loss errors in bench/precision.py (8.6e-7 at std
2 and T 1, 1.1e-5 at T 0.5) have RZ's size and pattern, not RN's: a shrink of every logit by a
few 1e-6 moves the loss by that times E_q[s] - E_p[s], which a sharper student (T < 1) makes
large. Promotion every 256 columns of K brings it to a few 1e-7.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import study_args  # noqa: E402


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--hidden", type=int, default=4096, help="K of the logits GEMM")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--stds", type=study_args.positive_list, default=[2.0, 6.0])
    p.add_argument("--temps", type=study_args.positive_list, default=[1.0, 0.5])
    p.add_argument("--step", type=int, default=16, help="columns of K per accumulation step")
    p.add_argument("--promote", default="64,256,1024",
                   help="promotion intervals P (columns of K, multiples of --step); '' none")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        args.promote = [int(t) for t in args.promote.split(",") if t.strip()]
    except ValueError:
        p.error(f"--promote: integers, comma-separated, got {args.promote!r}")
    if min(args.rows, args.hidden, args.step) < 1 or args.vocab < 2:
        p.error("rows, hidden and step >= 1, vocab >= 2")
    if args.hidden % args.step or any(q < args.step or q % args.step for q in args.promote):
        p.error("hidden and every --promote interval must be multiples of --step")
    return args


def to_f32(torch: Any, v: Any, toward_zero: bool) -> Any:
    """float64 v rounded to fp32 (to nearest, or toward zero), back in float64."""
    f = v.to(torch.float32)
    if toward_zero:
        away = f.to(torch.float64).abs() > v.abs()
        f = torch.where(away, torch.nextafter(f, torch.zeros_like(f)), f)
    return f.to(torch.float64)


def logits(torch: Any, x: Any, w: Any, step: int, toward_zero: bool,
           promote: Optional[int] = None) -> Any:
    """x w^T accumulated `step` columns of K at a time, each step's exact partial added to an
    fp32 accumulator rounded as asked; with `promote`, that accumulator restarts every
    `promote` columns and its value is added to a second one to nearest."""
    f64 = torch.float64
    xd, wd = x.to(f64), w.to(f64)
    h = xd.shape[1]
    run = promote or h
    main = torch.zeros(xd.shape[0], wd.shape[0], dtype=f64)
    for k0 in range(0, h, run):
        acc = torch.zeros_like(main)
        for k in range(k0, min(h, k0 + run), step):
            acc = to_f32(torch, acc + xd[:, k:k + step] @ wd[:, k:k + step].T, toward_zero)
        main = acc if promote is None else to_f32(torch, main + acc, False)
    return main


def kl_batchmean(torch: Any, z: Any, p: Any, t: float) -> float:
    """batchmean KL(p || softmax(z / t)) in float64 (p's zeros add nothing)."""
    pd = p.to(torch.float64)
    lq = torch.log_softmax(z / t, -1)
    terms = torch.where(pd > 0, pd * (torch.log(pd.clamp_min(1e-300)) - lq),
                        torch.zeros_like(pd))
    return float(terms.sum() / z.shape[0])


def bias(torch: Any, z1: Any, z: Any) -> float:
    return float(((z1 - z) * z.sign()).mean() / z.abs().mean())


def study(torch: Any, args: argparse.Namespace) -> List[Dict[str, Any]]:
    """One row a (std, T): the bias and the loss's relative error of each accumulation."""
    rows = []
    for std in args.stds:
        x, w, z, p = study_args.inputs(torch, args.rows, args.hidden, args.vocab, std, args.seed)
        ways = {"RN": logits(torch, x, w, args.step, False),
                "RZ": logits(torch, x, w, args.step, True)}
        for q in args.promote:
            ways[f"RZ, promoted every {q}"] = logits(torch, x, w, args.step, True, q)
        for t in args.temps:
            exact = kl_batchmean(torch, z, p, t)
            rows.append({"std": std, "T": t, "loss": exact,
                         "err": {k: abs(kl_batchmean(torch, zz, p, t) - exact) / exact
                                 for k, zz in ways.items()},
                         "bias": {k: bias(torch, zz, z) for k, zz in ways.items()}})
    return rows


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch = study_args.torch_or_none("accumulation_precision.py")
    if torch is None:
        return 2
    rows = study(torch, args)
    names = list(rows[0]["err"]) if rows else []
    print(f"N x H x V = {args.rows} x {args.hidden} x {args.vocab}, K step {args.step}, seed "
          f"{args.seed}; the loss's relative error against float64 (z's relative bias)")
    print("| std | T | KL | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for r in rows:
        cells = [f"{r['err'][k]:.2e} ({r['bias'][k]:.1e})" for k in names]
        print(f"| {r['std']:g} | {r['T']:g} | {r['loss']:.4f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
