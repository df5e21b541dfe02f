#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 27's precision protocol: the fused call's loss, dX and dW against float64, on the GPU.

    PYTHONPATH=python python3 bench/precision.py [--rows 8192] [--hidden 4096] [--vocab 128256]
        [--stds 2,6] [--temps 1,0.5] [--seed 0]
        [--methods kljit_fused,kljit_fused_precise,kljit_c_e16,kljit_c_promoted,liger]

Inputs (the issue's): X uniform in [-1, 1) and W uniform in [-a, a), a = 3 std / sqrt(H), both
bf16, so that the student logits z = X W^T have a standard deviation of about `std`; the teacher
p = softmax(z + unit Gaussian noise), z the fp32 product of the bf16 inputs, stored in bf16. The
loss: batchmean KL(p || softmax(z / T)), eps 1e-10, each method as bench/compare.py builds it at
--temperature T (kljit_fused: the binding with its default options; kljit_fused_precise: with
precise_accumulation=True, the flag as users set it; kljit_c_e16: the C call planned with
KLJIT_GEMM=logits:jit.e16; kljit_c_promoted: with logits:jit.128.2.6.g.1.r, the accumulator
promoted every 256 of K with fp32 logits; liger: LigerFusedLinearKLDivLoss). Each method runs one
warm-up call and one checked call (compare.py's prepare_method); its loss's relative error and
its dX's and dW's relative Frobenius errors against float64 (kljit.reference.kl_div_fp64 on the
same bf16 inputs) are printed with the bars they answer to:
  loss  at most 2e-6 at T = 1, 5e-6 at T = 0.5 (other T: not judged)
  dX    at most 2.5e-3
  dW    at most a quarter of liger's on the same inputs (judged where liger ran)
Each verdict is "ok" or "over"; the exit status is 0 either way (a measurement, not a test).
--device cpu: a smoke test of this script on a tiny shape (the reference and the table run; the
kljit and Liger methods fail without a GPU and say so).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # loaded by path (the tests): bench/ holds compare
    sys.path.insert(0, HERE)
import compare  # noqa: E402
import study_args  # noqa: E402

LOSS_BARS = {1.0: 2e-6, 0.5: 5e-6}
DX_BAR = 2.5e-3
DEFAULT_METHODS = "kljit_fused,kljit_fused_precise,kljit_c_e16,kljit_c_promoted,liger"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=128256)
    positive = study_args.positive_list
    p.add_argument("--stds", type=positive, default=positive("2,6"),
                   help="student logit standard deviations (default 2,6)")
    p.add_argument("--temps", type=positive, default=positive("1,0.5"),
                   help="temperatures T (default 1,0.5)")
    p.add_argument("--methods", type=compare.parse_methods,
                   default=compare.parse_methods(DEFAULT_METHODS),
                   help=f"bench/compare.py's dense methods (default {DEFAULT_METHODS})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--liger-wheel", type=Path, default=None,
                   help="as bench/compare.py's (default: .deps/wheels/liger_kernel-*.whl)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = p.parse_args(list(argv))
    if min(args.rows, args.hidden, args.vocab) < 1 or args.vocab < 2:
        p.error("--rows, --hidden >= 1 and --vocab >= 2")
    online = [m for m in args.methods if m in compare.ONLINE_METHODS]
    if online:
        p.error(f"{', '.join(online)}: online-teacher methods take no teacher probabilities")
    return args


class ProtocolInputs:
    """One (std, seed)'s inputs, as bench/compare.py's Inputs are used (x, w, the dense teacher)."""

    def __init__(self, torch: Any, n: int, h: int, v: int, std: float, seed: int,
                 dev: str) -> None:
        g = torch.Generator(device=dev).manual_seed(seed)
        bf16 = torch.bfloat16
        a = 3.0 * std / math.sqrt(h)
        self.x = (torch.rand(n, h, generator=g, device=dev) * 2 - 1).to(bf16)
        self.w = ((torch.rand(v, h, generator=g, device=dev) * 2 - 1) * a).to(bf16)
        self.ids = self.vals = None
        self.teacher = torch.empty(n, v, dtype=bf16, device=dev)
        step = max(1, (256 << 20) // (4 * v))
        wf = self.w.float()
        for i in range(0, n, step):
            z = self.x[i:i + step].float() @ wf.T
            z += torch.randn(z.shape, generator=g, device=dev)
            self.teacher[i:i + step] = torch.softmax(z, -1).to(bf16)
        rows = min(n, 1024)
        self.std_measured = float((self.x[:rows].float() @ wf.T).std())

    def teacher_kwargs(self) -> Dict[str, Any]:
        return {}


def verdict(value: Optional[float], bar: Optional[float]) -> str:
    if value is None or bar is None:
        return "-"
    return "ok" if value <= bar else "over"


def run_case(env: Any, cargs: argparse.Namespace, inp: ProtocolInputs, shape: Any,
             methods: Sequence[str]) -> List[Any]:
    """Every method on one (std, T): compare.Result each, with its errors or its failure."""
    ref = compare.reference(env, inp, shape, cargs)
    out = []
    for m in methods:
        res = compare.Result(m, shape)
        fn, why = compare.build_method(env, m, shape, cargs, {})
        if fn is None:
            res.status, res.note = "skipped", why
        else:
            try:
                compare.prepare_method(env, fn, inp, ref, res, cargs)
            except Exception as e:  # noqa: BLE001 - a method's failure is a row, not a crash
                compare.record_failure(res, e)
        out.append(res)
        if env.device == "cuda":
            env.torch.cuda.empty_cache()
    return out


def rows_of(std: float, measured: float, t: float, results: Sequence[Any]) -> List[str]:
    """The table's rows for one (std, T), each error beside its bar's verdict."""
    liger = next((r for r in results if r.method == "liger" and r.dw_err is not None), None)
    dw_bar = liger.dw_err / 4 if liger is not None else None
    loss_bar = LOSS_BARS.get(t)
    out = []
    for r in results:
        if r.status != "ok":
            out.append(f"| {std:g} ({measured:.2f}) | {t:g} | {r.method} | {r.status}: "
                       f"{r.note} | | |")
            continue
        dw_v = verdict(r.dw_err, dw_bar) if r.method != "liger" else "-"
        out.append(f"| {std:g} ({measured:.2f}) | {t:g} | {r.method} | "
                   f"{compare.fmt(r.loss_err, '.2e')} {verdict(r.loss_err, loss_bar)} | "
                   f"{compare.fmt(r.dx_err, '.3e')} {verdict(r.dx_err, DX_BAR)} | "
                   f"{compare.fmt(r.dw_err, '.3e')} {dw_v} |")
    return out


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    cargv = ["--device", args.device, "--warmup", "1", "--repeats", "1"]
    if args.liger_wheel is not None:
        cargv += ["--liger-wheel", str(args.liger_wheel)]
    cargs = compare.parse_args(cargv)
    env = compare.make_env(cargs, args.methods)
    torch = env.torch
    shape = compare.Shape(args.rows, args.hidden, args.vocab, 0)
    print(f"issue 27's precision protocol: {shape.label()}, bf16, teacher softmax(z + unit noise), "
          f"batchmean, seed {args.seed}; " + ", ".join(f"{k} {v}" for k, v in env.info.items()))
    print("bars: loss 2e-6 at T = 1, 5e-6 at T = 0.5; dX 2.5e-3; dW a quarter of liger's\n")
    print("| logit std (measured) | T | method | loss rel. error | dX rel. error | dW rel. error |")
    print("|---|---|---|---|---|---|")
    for std in args.stds:
        inp = ProtocolInputs(torch, args.rows, args.hidden, args.vocab, std, args.seed,
                             args.device)
        for t in args.temps:
            cargs.temperature = t
            for line in rows_of(std, inp.std_measured, t,
                                run_case(env, cargs, inp, shape, args.methods)):
                print(line, flush=True)
        del inp
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
