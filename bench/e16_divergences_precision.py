#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Which divergences' gradient survives a 16-bit unnormalized exponential (issue 27, step 2), on
the CPU.

    python3 bench/e16_divergences_precision.py [--rows 256] [--hidden 256] [--vocab 32000]
                                               [--tile 128] [--stds 2,6,12]

bench/g_rebuild_precision.py measured the forward KL's G = sum(p) q - p rebuilt from
E = exp(s - m_tile) stored in 16 bits by the logits GEMM's epilogue. The other divergences need
log q as well (the reverse KL's g = log q - log p, the JSD's and the skew KLs' log q - log m): from
the stored E, log q = m_tile + log E - lse. This script measures, for each divergence of
kljit.reference (its row losses and dl/dq), the error of dX = G W against float64 when the row
pass takes q and log q from E instead of the fp32 logits:

  fp32     today: q and log q from the fp32 logits and the fp32 lse
  E fp16   q = E exp(m_tile - lse), log q = m_tile + log E - lse, E in fp16 (E below fp16's
           smallest subnormal stored as 2^-24)
  E bf16   the same with E in bf16

G = q (g - sum(q g)) (sum(p) q - p for the forward KL) in fp32, rounded to bf16 as the row pass
writes it; dX accumulated in float64, so the numbers are G's rounding alone. Inputs as
bench/g_rebuild_precision.py's (the teacher the softmax of the logits plus unit noise). Prints one
line per (logit std, divergence); issue 27's bar for dX is 2.5e-3. log p is floored at kljit's
default eps, 1e-20, in every form and the reference (at std 12 bf16 teacher entries underflow to 0
where q does not, and the reverse KL would be infinite).
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

FORMS = ("fp32", "E fp16", "E bf16")
#: (name, LossConfig options): kljit's divergences with a gradient through log q
DIVERGENCES = (("forward_kl", {}), ("reverse_kl", {"divergence": "reverse_kl"}),
               ("jsd 0.5", {"divergence": "jsd", "beta": 0.5}),
               ("skew_fkl 0.1", {"divergence": "skew_forward_kl", "skew_alpha": 0.1}),
               ("skew_rkl 0.1", {"divergence": "skew_reverse_kl", "skew_alpha": 0.1}))
EPS = 1e-20


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    return study_args.parse(study_args.parser(__doc__.split("\n", 1)[0], rows=256, hidden=256,
                                              tile=128, stds="2,6,12"), argv)


def reference_module():
    """kljit.reference, from the repository's python/ when kljit is not installed."""
    try:
        from kljit import reference
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
        from kljit import reference
    return reference


def grad_s(ref, config, p, lp, logq, q):
    """dl/ds of the row losses: the softmax's Jacobian applied to dl/dq (forward KL: sum(p) q
    - p)."""
    _, g = ref._divergence(config, p, lp, logq, q)
    if g is None:
        return p.sum(-1, keepdim=True) * q - p
    return q * (g - (q * g).sum(-1, keepdim=True))


def errors(torch, n: int, h: int, v: int, bn: int, std: float,
           seed: int) -> Dict[str, Dict[str, float]]:
    """{divergence: {form: dX's relative error against float64}} for one logit scale."""
    ref = reference_module()
    from kljit import LossConfig
    f64, f32, f16, bf = torch.float64, torch.float32, torch.float16, torch.bfloat16
    _, w, s, p = study_args.inputs(torch, n, h, v, std, seed)
    p64, p32 = p.to(f64), p.to(f32)
    # log p floored at kljit's default eps (1e-20): a teacher entry that underflowed bf16 where q
    # does not would make the reverse KL infinite
    lp64, lp32 = torch.log(p64.clamp_min(EPS)), torch.log(p32.clamp_min(EPS))
    logq64 = torch.log_softmax(s, -1)
    s32 = s.to(f32)
    lse = torch.logsumexp(s32, -1, keepdim=True)
    tiles = s32.view(n, v // bn, bn)
    m = tiles.amax(-1, keepdim=True)
    e = torch.exp(tiles - m)
    forms = {"fp32": (s32 - lse, torch.exp(s32 - lse))}
    for form, dt in (("E fp16", f16), ("E bf16", bf)):
        stored = e.to(dt).to(f32).clamp_min(2.0 ** -24)
        shift = m - lse.unsqueeze(-1)
        forms[form] = ((torch.log(stored) + shift).view(n, v),
                       (stored * torch.exp(shift)).view(n, v))
    w64 = w.to(f64)
    out: Dict[str, Dict[str, float]] = {}
    for name, options in DIVERGENCES:
        config = LossConfig(**options)
        g_ref = grad_s(ref, config, p64, lp64, logq64, torch.exp(logq64))
        dx_ref = g_ref @ w64
        out[name] = {}
        for form, (logq, q) in forms.items():
            # q below fp32's smallest normal taken as it: the skew KLs' m = a q + ... would
            # round a subnormal q's share to 0 and divide by it
            q = q.clamp_min(torch.finfo(f32).tiny)
            g_form = grad_s(ref, config, p32, lp32, logq, q).to(bf).to(f64)
            out[name][form] = float((g_form @ w64 - dx_ref).norm()) / float(dx_ref.norm())
    return out


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    torch = study_args.torch_or_none("e16_divergences_precision.py")
    if torch is None:
        return 2
    print(study_args.header(args, "dX's relative error against float64 (bar: 2.5e-3)"))
    for std in args.stds:
        errs = errors(torch, args.rows, args.hidden, args.vocab, args.tile, std, args.seed)
        for name, _ in DIVERGENCES:
            print(f"std {std:5.1f} {name:13s}: " + " | ".join(
                f"{k}: {errs[name][k]:.2e}" for k in FORMS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
