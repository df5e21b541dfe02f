# SPDX-License-Identifier: Apache-2.0
"""The command line shared by issue 27's CPU precision studies (g_rebuild_precision.py,
sparse_g_rebuild_precision.py, loss_from_e16_precision.py, e16_divergences_precision.py): the
problem's size, the logits GEMM's column tile, the logit scales and the seed."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence


def positive_list(text: str) -> List[float]:
    """'2,6,12' -> [2.0, 6.0, 12.0]; positive finite numbers only."""
    vals = [float(t) for t in text.split(",")]
    if not vals or not all(0 < x < math.inf for x in vals):
        raise argparse.ArgumentTypeError(f"bad list {text!r}: positive numbers, comma-separated")
    return vals


def parser(description: str, rows: int, hidden: int, tile: int,
           stds: str) -> argparse.ArgumentParser:
    """--rows, --hidden, --vocab (32000), --tile, --stds and --seed with these defaults; a study
    adds its own options before parse()."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--rows", type=int, default=rows)
    p.add_argument("--hidden", type=int, default=hidden)
    p.add_argument("--vocab", type=int, default=32000, help="a multiple of --tile")
    p.add_argument("--tile", type=int, default=tile, help="the logits GEMM's column tile (BN)")
    p.add_argument("--stds", type=positive_list, default=positive_list(stds),
                   help="logit standard deviations")
    p.add_argument("--seed", type=int, default=0)
    return p


def rows_of(torch: Any, n: int, h: int, g: Any) -> Any:
    """n rows of x uniform in [-1, 1), bf16, drawn from g."""
    return (torch.rand(n, h, generator=g, dtype=torch.float64) * 2 - 1).to(torch.bfloat16)


def head_of(torch: Any, v: int, h: int, std: float, g: Any) -> Any:
    """w [v, h] uniform in [-a, a) with a = 3 std / sqrt(h) (with rows_of's x, logits of standard
    deviation `std`), bf16, drawn from g."""
    a = 3 * std / math.sqrt(h)
    return ((torch.rand(v, h, generator=g, dtype=torch.float64) * 2 - 1) * a).to(torch.bfloat16)


def inputs(torch: Any, n: int, h: int, v: int, std: float, seed: int) -> Any:
    """(x, w, z, p), compare.py's precision inputs: x uniform in [-1, 1) and w uniform in
    [-a, a) with a = 3 std / sqrt(h) (logits of standard deviation `std`), both bf16; z = x w^T
    exactly (float64); the teacher p = softmax(z + unit Gaussian noise) in bf16."""
    f64, bf = torch.float64, torch.bfloat16
    g = torch.Generator().manual_seed(seed)
    x = rows_of(torch, n, h, g)
    w = head_of(torch, v, h, std, g)
    z = x.to(f64) @ w.to(f64).T
    p = torch.softmax(z + torch.randn(n, v, generator=g, dtype=f64), -1).to(bf)
    return x, w, z, p


def summed_over_blocks(torch: Any, n: int, h: int, v: int, std: float, seed: int, block: int,
                       losses: Callable[[Any, Any, Any], Dict[str, float]]) -> Dict[str, float]:
    """{name: the sum over row blocks of losses(x, w, g)[name]}: w uniform in [-a, a) with
    a = 3 std / sqrt(h) (logits of standard deviation `std`) drawn first, then each block's
    `block` rows of x uniform in [-1, 1), both bf16, from one generator seeded with `seed`, which
    `losses` draws from too (the studies whose rows do not fit one float64 logits matrix)."""
    g = torch.Generator().manual_seed(seed)
    w = head_of(torch, v, h, std, g)
    sums: Dict[str, float] = {}
    for r0 in range(0, n, block):
        for k, val in losses(rows_of(torch, min(block, n - r0), h, g), w, g).items():
            sums[k] = sums.get(k, 0.0) + val
    return sums


def torch_or_none(script: str) -> Optional[Any]:
    """torch, or None after saying that `script` needs it (the study then exits 2)."""
    try:
        import torch
    except ImportError:
        print(f"{script} needs torch (pip install torch)", file=sys.stderr)
        return None
    return torch


def header(args: argparse.Namespace, what: str) -> str:
    """The study's first line: the problem's size, the column tile and what is printed."""
    return (f"N x H x V = {args.rows} x {args.hidden} x {args.vocab}, column tile {args.tile}; "
            f"{what}")


def parse(p: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """p's arguments, the sizes checked (exits 2 naming them, as argparse does)."""
    args = p.parse_args(argv)
    if min(args.rows, args.hidden, args.tile) < 1 or args.vocab < 2 or args.vocab % args.tile:
        p.error("rows, hidden and tile >= 1, vocab >= 2 and a multiple of tile")
    return args
