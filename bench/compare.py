#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times fused linear + KL losses side by side, in one process, on one GPU.

    PYTHONPATH=python python3 bench/compare.py [--shapes all] [--methods ...] [--out FILE]

Methods (each computes loss and the gradients of X and W for the same loss: dense teacher
probabilities, T = 1 (or --temperature), batchmean, eps 1e-10; or the sparse top-K teacher, tail
'none'):
  eager            plain PyTorch (kljit.reference.kl_div_reference): F.linear, log_softmax in
                   fp32, autograd. Sparse shapes: the teacher scattered into a dense N x V
                   tensor first ("dense-from-sparse").
  compile          torch.compile of that same function (default mode; compile time is in the
                   warm-up, not in the timings).
  liger            Liger-Kernel's LigerFusedLinearKLDivLoss (dense teacher only). Signature
                   used, from liger-kernel 0.8.5 (liger_kernel/transformers/
                   fused_linear_kl_div.py): LigerFusedLinearKLDivLoss(reduction="batchmean",
                   ignore_index=-100, temperature=1.0, eps=1e-10, accum_dtype=None), called as
                   loss(student_input [BT, H], student_weight [V, H], target [BT, V] probs).
                   Imported from the environment, else from a wheel in .deps/wheels/
                   (or --liger-wheel), unpacked to a temporary directory; skipped with a note
                   when neither works.
  kljit_fused      kljit through the PyTorch binding, mode='fused', default options (dW
                   accumulation 'auto': bf16 across the few chunks of these shapes, no V x H
                   fp32 buffer).
  kljit_c          the same kljit_fused call without the binding's autograd Function and ops:
                   the plan, outputs and workspace the binding would use, one C call per step
                   (what kljit_fused is measured against: the binding's overhead). The two
                   are timed alternately, step by step, after both are warmed up
                   (--alternate; 'none' times every method's runs back to back).
  kljit_two_phase  kljit through the binding, mode='two_phase' (forward, then backward).
Opt-in (--methods), for like-for-like dW accumulation: liger_accum_fp32 (Liger with
accum_dtype=torch.float32), kljit_fused_accum_fp32 (kljit with grad_weight_accum='fp32': a V x H
fp32 buffer) and kljit_fused_accum_out (grad_weight_accum='output': dW accumulated in bf16 across
chunks, as Liger does by default, whatever the chunk count). For the speed/precision trade of bf16
logits: kljit_fused_native (native_logits=True: the logits GEMM writes bf16, as Liger's does; dW in
fp32) and kljit_fused_native_accum_out (bf16 logits and bf16 dW accumulation: Liger's default
precision class on both counts). For issue 27's step 2: kljit_c_e16, kljit_c with the plan made in
a context of its own whose KLJIT_GEMM is logits:jit.e16 (the chunk as the logits GEMM's fp16
scores, docs/architecture.md; it fails, naming the plan's description, where that plan does not
take it), to be alternated with kljit_c and the peers; kljit_c_promoted, the same with
logits:jit.128.2.6.g.1.r (the cooperative 128 x 128 logits GEMM adding its accumulator into a
second fp32 one every 256 of K: the loss's precision, bench/accumulation_precision.py);
kljit_c_stats, the same with logits:jit.stats (the rows' pass-1 records in the logits GEMM's
epilogue, fp32 chunk logits kept: dense teachers and the sparse teacher's forward KL with tail none
or renorm). kljit_fused_precise: kljit_fused with precise_accumulation=True
(KLJIT_FLAG_PRECISE_ACCUMULATION: the plan's own generated logits GEMM, E16 or not, promoted), the
flag's price against kljit_fused.

Online teacher (opt-in, --methods online or by name): the teacher's hidden states Xt [N, H] and
head Wt [V, H] are given instead of its probabilities, and each method computes the teacher
logits chunk by chunk itself (no gradient to the teacher), T = 1, batchmean, no labels:
  liger_jsd        Liger-Kernel's LigerFusedLinearJSD(jsd_beta=--beta, temperature=1.0) called
                   as loss(student_input, student_weight, teacher_input, teacher_weight, None)
                   (liger_kernel/transformers/fused_linear_jsd.py, 0.8.5): bf16 dW accumulated
                   across its chunks (accum_dtype=None), fp32 logits from the GEMMs.
  kljit_jsd        kljit's equivalent through the C API (ctypes, as kljit_c for the dense
                   teacher: the call alone, no autograd): KLJIT_TEACHER_DENSE_HIDDEN,
                   KLJIT_DIVERGENCE_JSD with beta --beta, fused mode, bf16 dW with the
                   binding's 'auto' accumulation (in place up to 8 chunks, else an fp32 V x H
                   buffer), default eps (1e-20).
  liger_fkl_online LigerFusedLinearJSD with jsd_beta=0: Liger's JSD kernel takes beta = 0 as
                   the forward KL(p || q) of teacher p and student q (its branch `beta == 0.0`:
                   loss p (log p - log q); beta = 1 is the reverse KL(q || p)), kljit's
                   convention too (include/kljit.h).
  kljit_fkl_online kljit with KLJIT_DIVERGENCE_FORWARD_KL and the online teacher.
  liger_jsd_hard   Liger's distillation base with hard-label CE mixing: liger_kernel.chunked_loss
                   LigerFusedLinearJSDLoss(weight_hard_loss=--hard-weight, weight_soft_loss=1 -
                   --hard-weight, beta=--beta, ignore_index=-100, temperature=1.0) called as
                   loss(student_input, student_weight, teacher_input, teacher_weight, labels):
                   (w_h CE_sum + w_s JSD_sum) / kept rows (its fused_linear_distillation.py).
  kljit_jsd_hard   kljit's equivalent: hard_weight, soft_weight, the same labels, batchmean.
  kljit_jsd_e16    kljit_jsd planned in a context of its own whose KLJIT_GEMM is logits:jit.e16
                   (issue 27: the epilogue reads the teacher GEMM's logits, the chunk in fp16
                   scores), failing, with the plan's description, where the plan does not take it;
  kljit_jsd_stats  the same with logits:jit.stats (the records only, fp32 chunk logits).
The labels of the *_hard methods: uniform in [0, V), every tenth row -100 (ignored); the other
online methods take no labels (every row kept).
Their inputs are made per --logit-std value s: X, Xt uniform in [-1, 1) (variance 1/3) and W,
Wt uniform in [-a, a) with a = 3 s / sqrt(H) (variance a^2 / 3), so that every logit, a sum of
H products, has variance H (1/3) (a^2 / 3) = s^2; student and teacher are independent draws.
The std measured on the first 1024 rows (bf16 inputs, fp32 logits) is logged and written to
the CSV. Their float64 reference (one per shape and std, shared by the methods): the inputs
cast to float64 on the GPU, chunk_rows rows at a time, the exact divergence (no eps floor;
kljit's 1e-20 changes nothing measurable) and its analytic gradient, dX = G W and dW = G^T X
with G = dD/dz / N.

Per shape: inputs are made once (deterministic seed, random and never zero: X uniform in
[-1, 1), W uniform in [-0.05, 0.05), bf16; teacher probs softmax(2 N(0, 1)) rows in bf16; sparse:
K distinct ids per row and values summing to 0.9) and shared by every method. The reference
is computed once, in float64 on the GPU, chunked over rows (kljit.reference.kl_div_fp64: the
same math as tests/ref.c): every method's loss and gradients are compared with it.
Per method: warm-up runs, then one run whose peak memory is recorded
(torch.cuda.max_memory_allocated above what was allocated before it: the inputs and the
reference are not counted; kljit's workspace is, being a torch tensor; memory cuBLAS or Triton
take outside torch's allocator is not) and whose loss and gradients are checked, then
`repeats` timed runs (CUDA events around forward + backward, L2 flushed by a 256 MiB memset
before each, median; --prefill-us queues that much GPU sleep before each start event, so host
time before the first kernel is hidden as behind a model's forward; the SM clock and board
power, read by NVML every 2 ms while each timed run is in flight, go beside its time as medians:
bench/gpu_clock.py, "—" without nvidia-ml-py). A method that runs out of
memory is recorded as OOM and the run goes on. The online reference also logs the dX floor of
one bf16 G GEMM: G rounded and summed exactly, and that G through torch's own bf16 GEMM.

Prints a markdown table (stdout) and progress (stderr); --out FILE also writes FILE (markdown)
and its .csv twin. --dry-run prints what would run and needs neither torch nor a GPU.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # loaded by path (precision.py, the tests): bench/ holds gpu_clock
    sys.path.insert(0, HERE)
import gpu_clock  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Shape:
    """N x H x V, with K > 0 for the sparse top-K teacher."""

    n: int
    h: int
    v: int
    k: int = 0

    @property
    def sparse(self) -> bool:
        return self.k > 0

    @property
    def name(self) -> str:
        base = f"{self.n}x{self.h}x{self.v}"
        return f"{base}k{self.k}" if self.k else base

    def label(self) -> str:
        base = f"{self.n} x {self.h} x {self.v}"
        return f"{base}, top-{self.k}" if self.k else base


#: Liger's five PR shapes (bf16, dense teacher) and the sparse (CompactifAI) shapes.
DENSE_SHAPES = [Shape(8192, 4096, 128256), Shape(4096, 4096, 128256), Shape(2048, 4096, 128256),
                Shape(8192, 2048, 32000), Shape(4096, 2048, 32000)]
SPARSE_SHAPES = [Shape(65536, 2048, 151936, 100), Shape(8192, 4096, 128256, 100)]
#: The online-teacher methods (teacher hidden states and head, not its probabilities).
ONLINE_METHODS = ("liger_jsd", "kljit_jsd", "liger_fkl_online", "kljit_fkl_online",
                  "liger_jsd_hard", "kljit_jsd_hard", "kljit_jsd_e16", "kljit_jsd_stats")
#: What --methods online means: the online methods but the opt-in epilogues (named to run).
ONLINE_DEFAULT = ONLINE_METHODS[:6]
#: The online C calls planned with a KLJIT_GEMM of their own, as REPLANNED.
ONLINE_REPLANNED = {"kljit_jsd_e16": ("logits:jit.e16", "(E16)"),
                    "kljit_jsd_stats": ("logits:jit.stats", "in the logits GEMM's epilogue")}
METHODS = ("eager", "compile", "liger", "kljit_fused", "kljit_c", "kljit_two_phase",
           "liger_accum_fp32", "kljit_fused_accum_fp32", "kljit_fused_accum_out",
           "kljit_fused_native", "kljit_fused_native_accum_out", "kljit_c_e16",
           "kljit_c_promoted", "kljit_c_stats", "kljit_fused_precise") + ONLINE_METHODS
#: Dense shapes run these unless --methods says otherwise.
DENSE_DEFAULT = ("eager", "compile", "liger", "kljit_fused", "kljit_c", "kljit_two_phase")
#: Sparse shapes run these unless --methods says otherwise (Liger has no sparse teacher).
SPARSE_DEFAULT = ("eager", "kljit_fused", "kljit_two_phase")
EPS = 1e-10  # Liger's default; every method gets the same
FLUSH_BYTES = 256 << 20


def parse_shapes(text: str) -> List[Shape]:
    """'all', 'dense', 'sparse', or a comma list of NxHxV (dense) and NxHxVkK (sparse)."""
    out: List[Shape] = []
    for tok in (t.strip() for t in text.split(",")):
        if tok in ("all", "dense"):
            out += DENSE_SHAPES
        if tok in ("all", "sparse"):
            out += SPARSE_SHAPES
        if tok in ("all", "dense", "sparse"):
            continue
        base, _, k = tok.partition("k")
        parts = base.split("x")
        try:
            nums = [int(p) for p in parts] + ([int(k)] if k else [])
        except ValueError:
            nums = []
        if len(parts) != 3 or not nums or min(nums) < 1:
            raise argparse.ArgumentTypeError(
                f"bad shape {tok!r}: use NxHxV, NxHxVkK, 'dense', 'sparse' or 'all'")
        out.append(Shape(*nums))
    return list(dict.fromkeys(out))


def parse_methods(text: str) -> List[str]:
    """A comma list of METHODS and 'online' (ONLINE_DEFAULT), or 'all'."""
    if text == "all":
        return list(METHODS)
    methods: List[str] = []
    for m in (m.strip() for m in text.split(",") if m.strip()):
        methods += list(ONLINE_DEFAULT) if m == "online" else [m]
    methods = list(dict.fromkeys(methods))
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise argparse.ArgumentTypeError(f"unknown method(s) {bad}: choose from "
                                         f"{', '.join(METHODS)}, 'online' or 'all'")
    return methods


def parse_stds(text: str) -> List[float]:
    """A comma list of logit standard deviations, each > 0."""
    try:
        stds = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        stds = []
    if not stds or not all(0 < s < 1e4 for s in stds):
        raise argparse.ArgumentTypeError(f"bad --logit-std {text!r}: positive numbers, "
                                         f"comma-separated (e.g. 2,6,12)")
    return list(dict.fromkeys(stds))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=parse_shapes, default=parse_shapes("all"),
                   help="'all' (default), 'dense', 'sparse', or NxHxV / NxHxVkK, comma-separated")
    p.add_argument("--methods", type=parse_methods, default=None,
                   help=f"comma list of {', '.join(METHODS)} (default: all that apply)")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per method (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (compiles)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tail", default="none", choices=("none", "renorm"),
                   help="sparse tail (the dense-from-sparse baseline has no 'bucket')")
    p.add_argument("--out", type=Path, default=None,
                   help="also write the table to FILE and CSV rows to FILE's .csv twin")
    p.add_argument("--liger-wheel", type=Path, default=None,
                   help="liger-kernel wheel to use when liger_kernel is not importable "
                        "(default: .deps/wheels/liger_kernel-*.whl; the other wheels of its "
                        "directory are added behind the environment's packages)")
    p.add_argument("--logit-std", type=parse_stds, default=parse_stds("3"),
                   help="online-teacher methods: the std of the student and teacher logits, "
                        "one run per value, comma-separated (default 3; the bars: 2 to 12)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="dense and sparse methods and the reference: T, dividing the student "
                        "logits (kljit's LossConfig.temperature, Liger's temperature; default 1)")
    p.add_argument("--beta", type=float, default=0.5,
                   help="liger_jsd and kljit_jsd: the JSD's beta, in (0, 1) (default 0.5)")
    p.add_argument("--hard-weight", type=float, default=0.5,
                   help="liger_jsd_hard and kljit_jsd_hard: the hard-label CE's weight w_h, the "
                        "JSD's 1 - w_h (default 0.5)")
    p.add_argument("--kljit-dw-accum", default="auto", choices=("auto", "bf16", "fp32"),
                   help="kljit_jsd, kljit_fkl_online: dW accumulation, 'auto' the binding's rule "
                        "(bf16 in place up to 8 chunks, else an fp32 V x H buffer); with "
                        "KLJIT_CHUNK_ROWS set, 'bf16' is the lean-memory setting (Liger's: bf16 "
                        "across every chunk)")
    p.add_argument("--alternate", type=lambda t: [] if t == "none" else t.split(","),
                   default=["kljit_fused", "kljit_c"],
                   help="methods of a shape timed round-robin, step by step, after all "
                        "are warmed up (default kljit_fused,kljit_c: the binding against its C "
                        "call; online methods of one loss too, e.g. liger_jsd,kljit_jsd; "
                        "'none': each method's runs back to back)")
    p.add_argument("--prefill-us", type=float, default=0.0,
                   help="GPU sleep queued before each timed step's start event, in "
                        "microseconds: the host enqueues the step while the GPU is busy (as "
                        "behind a model's forward), hiding host time before the first kernel")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the float64 reference (no error columns)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run; needs neither torch nor a GPU")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: a smoke test of this script on tiny shapes (host timers, no "
                        "memory statistics, kljit and Liger fail); cuda is the benchmark")
    args = p.parse_args(list(argv))
    if args.repeats < 1 or args.warmup < 1:
        p.error("--repeats and --warmup must be >= 1 (the warm-up compiles)")
    if not 0 < args.beta < 1:
        p.error("--beta must be in (0, 1): beta 0 is the *_fkl_online methods")
    if not 0 < args.temperature < math.inf:
        p.error("--temperature must be > 0")
    if not 0 < args.hard_weight <= 1:
        p.error("--hard-weight must be in (0, 1]")
    return args


def methods_for(shape: Shape, asked: Optional[List[str]]) -> List[str]:
    if asked is None:
        return list(SPARSE_DEFAULT if shape.sparse else DENSE_DEFAULT)
    return list(asked)


def dry_run(args: argparse.Namespace) -> int:
    """What would run, with the sizes that decide memory: no torch, no GPU."""
    print(f"compare.py dry run: repeats {args.repeats}, warm-up {args.warmup}, seed {args.seed}, "
          f"tail {args.tail}, reference {'off' if args.no_reference else 'float64'}")
    for s in args.shapes:
        classic, online = split_methods(methods_for(s, args.methods))
        logits = s.n * s.v * 4
        if classic:
            inputs = (s.n * s.h + s.v * s.h) * 2 + (s.n * s.k * 10 if s.sparse else s.n * s.v * 2)
            gflop = 6 * s.n * s.h * s.v / 1e9
            print(f"  {s.label()}: {', '.join(classic)}; inputs "
                  f"{inputs / 2**30:.2f} GiB, full fp32 logits {logits / 2**30:.2f} GiB, "
                  f"fwd+bwd GEMMs {gflop:.0f} GFLOP")
        if online:
            inputs = (s.n * s.h + s.v * s.h) * 4
            gflop = 8 * s.n * s.h * s.v / 1e9
            print(f"  {s.label()}, online teacher, logit std "
                  f"{', '.join(f'{x:g}' for x in args.logit_std)}: {', '.join(online)}; inputs "
                  f"{inputs / 2**30:.2f} GiB, fwd+bwd GEMMs (teacher's included) "
                  f"{gflop:.0f} GFLOP")
    if args.out:
        print(f"  would write {args.out} and {csv_path(args.out)}")
    return 0


def split_methods(methods: Sequence[str]) -> "tuple[List[str], List[str]]":
    """(the dense-probs / sparse methods, the online-teacher methods), each in the given order."""
    return ([m for m in methods if m not in ONLINE_METHODS],
            [m for m in methods if m in ONLINE_METHODS])


def method_beta(method: str, args: argparse.Namespace) -> float:
    """An online method's JSD beta: --beta for the JSD, 0 (Liger's forward KL) otherwise."""
    return args.beta if "_jsd" in method else 0.0


def method_hard(method: str, args: argparse.Namespace) -> float:
    """An online method's hard-label CE weight: --hard-weight for *_hard, else 0."""
    return args.hard_weight if method.endswith("_hard") else 0.0


def method_key(method: str, args: argparse.Namespace) -> "tuple[float, float]":
    """The online reference a method is compared with: (beta, hard weight)."""
    return method_beta(method, args), method_hard(method, args)


def online_base(method: str) -> str:
    """The Liger method an online method's speedup is over (kljit_jsd_e16: liger_jsd)."""
    tail = method.split("_", 1)[1]
    for suffix in ("_e16", "_stats"):
        tail = tail[:-len(suffix)] if tail.endswith(suffix) else tail
    return "liger_" + tail


def csv_path(out: Path) -> Path:
    return out.with_suffix(".csv") if out.suffix else Path(str(out) + ".csv")


# ---- everything below needs torch and a GPU ------------------------------------------------


@dataclass
class Result:
    """One method on one shape."""

    method: str
    shape: Shape
    status: str = "ok"  # ok, OOM, skipped, FAILED
    ms: Optional[float] = None
    peak_mb: Optional[float] = None
    speedup: Optional[float] = None
    loss_err: Optional[float] = None
    dx_err: Optional[float] = None
    dw_err: Optional[float] = None
    first_s: Optional[float] = None
    note: str = ""
    sm_mhz: Optional[float] = None   # median SM clock over the timed runs (gpu_clock)
    power_w: Optional[float] = None  # median board power over the timed runs
    std: Optional[float] = None  # online teacher: the --logit-std value
    std_measured: str = ""       # "student/teacher", on the first rows


@dataclass
class Env:
    """Versions and the imported methods, found once."""

    torch: Any
    device: str = "cuda"
    kljit: Any = None
    kljit_note: str = ""
    liger_cls: Any = None
    liger_note: str = ""
    liger_jsd_cls: Any = None
    liger_jsd_note: str = ""
    liger_hard_cls: Any = None
    liger_hard_note: str = ""
    info: Dict[str, str] = field(default_factory=dict)
    info_cache: Dict[str, float] = field(default_factory=dict)
    clock: Optional[gpu_clock.Sampler] = None  # the SM clock and power beside each time


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def import_liger(args: argparse.Namespace,
                 name: str = "LigerFusedLinearKLDivLoss") -> "tuple[Any, str]":
    """liger_kernel.transformers.<name> (or liger_kernel.<module>.<name> for a dotted name)
    and Liger's version, or (None, why not)."""
    def attempt() -> Any:
        import importlib

        module, _, cls = name.rpartition(".")
        return getattr(importlib.import_module("liger_kernel." + (module or "transformers")), cls)

    try:
        cls = attempt()
    except Exception as first:  # noqa: BLE001 - any import failure means "unavailable"
        wheel = args.liger_wheel
        if wheel is None:
            found = sorted((REPO / ".deps" / "wheels").glob("liger_kernel-*.whl"))
            wheel = found[-1] if found else None
        if wheel is None or not wheel.exists():
            return None, f"liger_kernel not importable ({first}) and no wheel found"
        # A pure-Python wheel is a zip of the package. Liger goes first on the path; the other
        # wheels beside it (e.g. packaging, which Liger imports but does not declare) go last,
        # so that what the environment has wins.
        target = Path(tempfile.mkdtemp(prefix="kljit-liger-"))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target / "liger")
        sys.path.insert(0, str(target / "liger"))
        for other in sorted(wheel.parent.glob("*.whl")):
            if other != wheel:
                with zipfile.ZipFile(other) as z:
                    z.extractall(target / "deps")
        sys.path.append(str(target / "deps"))
        try:
            cls = attempt()
        except Exception as e:  # noqa: BLE001
            return None, f"liger_kernel from {wheel.name} failed to import: {e}"
    try:
        from importlib.metadata import version

        ver = version("liger-kernel")
    except Exception:  # noqa: BLE001 - an unpacked wheel has its dist-info beside it
        ver = getattr(sys.modules.get("liger_kernel"), "__version__", "?")
    return cls, ver


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else "?"
    except Exception:  # noqa: BLE001
        return "?"


def driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return out.splitlines()[0] if out else "?"
    except Exception:  # noqa: BLE001
        return "?"


def make_env(args: argparse.Namespace, methods: Sequence[str]) -> Env:
    import torch

    env = Env(torch=torch, device=args.device)
    env.clock = gpu_clock.open_sampler(torch, args.device)
    env.info["SM clock and power"] = ("sampled by NVML every 2 ms of the timed runs (medians)"
                                      if env.clock.reader else
                                      f"not sampled ({env.clock.why})")
    if any(m.startswith("kljit") for m in methods):
        try:
            import kljit

            kljit.load_library()
            env.kljit = kljit
            env.info["kljit"] = f"{kljit.version()} ({kljit.library_path()})"
        except Exception as e:  # noqa: BLE001
            env.kljit_note = f"kljit unavailable: {e}"
            env.info["kljit"] = env.kljit_note
    classic, online = split_methods([m for m in methods if m.startswith("liger")])
    if classic:
        env.liger_cls, note = import_liger(args)
        env.info["liger-kernel"] = note
        if env.liger_cls is None:
            env.liger_note = note
    if [m for m in online if not m.endswith("_hard")]:
        env.liger_jsd_cls, note = import_liger(args, "LigerFusedLinearJSD")
        env.info["liger-kernel"] = note
        if env.liger_jsd_cls is None:
            env.liger_jsd_note = note
    if [m for m in online if m.endswith("_hard")]:
        env.liger_hard_cls, note = import_liger(args, "chunked_loss.LigerFusedLinearJSDLoss")
        env.info["liger-kernel"] = note
        if env.liger_hard_cls is None:
            env.liger_hard_note = note
    triton = sys.modules.get("triton")
    cuda = args.device == "cuda"
    env.info.update({
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "gpu": torch.cuda.get_device_name() if cuda else "none (cpu smoke test)",
        "driver": driver_version() if cuda else "-",
        "torch": torch.__version__,
        "cuda (torch)": str(torch.version.cuda),
        "triton": getattr(triton, "__version__", "not imported"),
        "python": platform.python_version(),
        "commit": git_commit(),
    })
    return env


class Inputs:
    """One shape's inputs, made once on the GPU, shared by every method."""

    def __init__(self, torch: Any, shape: Shape, seed: int, dev: str = "cuda") -> None:
        g = torch.Generator(device=dev).manual_seed(seed)
        bf16 = torch.bfloat16
        n, h, v, k = shape.n, shape.h, shape.v, shape.k
        self.x = (torch.rand(n, h, generator=g, device=dev) * 2 - 1).to(bf16)
        self.w = ((torch.rand(v, h, generator=g, device=dev) * 2 - 1) * 0.05).to(bf16)
        self.teacher = self.ids = self.vals = None
        if shape.sparse:
            # K distinct ids per row: one random K-subset, shifted by a random offset per row.
            base = torch.randperm(v, generator=g, device=dev)[:k]
            shift = torch.randint(0, v, (n, 1), generator=g, device=dev)
            self.ids = ((base[None, :] + shift) % v).contiguous()
            u = torch.rand(n, k, generator=g, device=dev).sort(dim=-1, descending=True).values
            self.vals = (u / u.sum(-1, keepdim=True) * 0.9).to(bf16)
        else:
            self.teacher = torch.empty(n, v, dtype=bf16, device=dev)
            step = max(1, (256 << 20) // (4 * v))
            for i in range(0, n, step):
                z = torch.randn(min(step, n - i), v, generator=g, device=dev) * 2
                self.teacher[i:i + step] = torch.softmax(z, -1).to(bf16)

    def teacher_kwargs(self) -> Dict[str, Any]:
        if self.teacher is not None:
            return {}
        return {"teacher_ids": self.ids, "teacher_values": self.vals}


class OnlineInputs:
    """One shape's online-teacher inputs at logit std `std` (the module docstring says how),
    made once on the GPU, shared by every online method."""

    def __init__(self, torch: Any, shape: Shape, seed: int, std: float,
                 dev: str = "cuda") -> None:
        g = torch.Generator(device=dev).manual_seed(seed)
        bf16 = torch.bfloat16
        n, h, v = shape.n, shape.h, shape.v
        a = 3.0 * std / math.sqrt(h)

        def uniform(rows: int, cols: int, half: float) -> Any:
            return ((torch.rand(rows, cols, generator=g, device=dev) * 2 - 1) * half).to(bf16)

        self.x, self.w = uniform(n, h, 1.0), uniform(v, h, a)
        self.xt, self.wt = uniform(n, h, 1.0), uniform(v, h, a)
        # the *_hard methods' labels: uniform ids, every tenth row ignored
        self.labels = torch.randint(0, v, (n,), generator=g, device=dev)
        self.labels[::10] = -100
        rows = min(n, 1024)
        self.std_measured = tuple(
            float(torch.mm(x[:rows].float(), w.float().T).std())
            for x, w in ((self.x, self.w), (self.xt, self.wt)))

    def measured(self) -> str:
        return "/".join(f"{x:.2f}" for x in self.std_measured)


def divergence_fp64(torch: Any, lq: Any, lp: Any, beta: float) -> "tuple[Any, Any]":
    """Per-row divergence D(p, q) and dD/dz of a float64 row block, from log q (student) and
    log p (teacher), both log-softmaxes of T = 1 logits. beta = 0: KL(p || q); 1: KL(q || p);
    else the JSD(beta) of include/kljit.h's math section."""
    q, p = torch.exp(lq), torch.exp(lp)
    if beta == 0.0:
        return (p * (lp - lq)).sum(-1), q * p.sum(-1, keepdim=True) - p
    if beta == 1.0:
        g = lq - lp
        rows = (q * g).sum(-1)
        return rows, q * (g - rows[:, None])
    lm = torch.logaddexp(lp + math.log(beta), lq + math.log1p(-beta))
    g = (1.0 - beta) * (lq - lm)
    qg = q * g
    rows = beta * (p * (lp - lm)).sum(-1) + qg.sum(-1)
    return rows, qg - q * qg.sum(-1, keepdim=True)


def online_reference(torch: Any, inp: OnlineInputs,
                     keys: Sequence["tuple[float, float]"]) -> Dict[Any, Any]:
    """Loss, dX and dW in float64 for each (beta, hard weight) key, chunked over rows on the
    inputs' device: the four GEMMs run in float64 (the logits' once for every key). Hard weight
    0: divergence_fp64 averaged over every row; w > 0: (1 - w) D + w CE(labels) averaged over
    the kept rows (labels != -100), as Liger's distillation base and kljit's batchmean."""
    f64 = torch.float64
    n, h = inp.x.shape
    v = inp.w.shape[0]
    chunk = max(64, min(4096, (1 << 30) // (8 * v)))
    divisor = (n, max(1, int((inp.labels != -100).sum())))  # every row; the kept rows
    w, wt = inp.w.to(f64), inp.wt.to(f64)
    out = {b: {"loss": torch.zeros((), dtype=f64, device=w.device),
               "grad_input": torch.empty(n, h, dtype=f64, device=w.device),
               "grad_input_g16": torch.empty(n, h, dtype=f64, device=w.device),
               "grad_input_mm16": torch.empty(n, h, dtype=inp.x.dtype, device=w.device),
               "grad_weight": torch.zeros(v, h, dtype=f64, device=w.device)} for b in keys}
    for i0 in range(0, n, chunk):
        i1 = min(n, i0 + chunk)
        xc = inp.x[i0:i1].to(f64)
        lq = torch.log_softmax(xc @ w.T, dim=-1)
        lp = torch.log_softmax(inp.xt[i0:i1].to(f64) @ wt.T, dim=-1)
        for b in keys:
            beta, hard = b
            rows, grad = divergence_fp64(torch, lq, lp, beta)
            if hard:
                y = inp.labels[i0:i1]
                kept = (y != -100).to(f64)
                yc = y.clamp_min(0)[:, None]
                ce = -lq.gather(1, yc)[:, 0]
                dce = torch.exp(lq)
                dce.scatter_add_(1, yc, -torch.ones_like(yc, dtype=f64))
                rows = ((1.0 - hard) * rows + hard * ce) * kept
                grad = ((1.0 - hard) * grad + hard * dce) * kept[:, None]
                del ce, dce
            rows /= divisor[hard != 0]
            grad /= divisor[hard != 0]
            o = out[b]
            o["loss"] += rows.sum()
            o["grad_input"][i0:i1] = grad @ w
            # the floor of one low-precision GEMM: G rounded to the inputs' dtype, exact sum;
            # and that G through torch's own GEMM in the inputs' dtype (fp32 accumulation)
            g16 = grad.to(inp.x.dtype)
            o["grad_input_g16"][i0:i1] = g16.to(f64) @ w
            o["grad_input_mm16"][i0:i1] = g16 @ inp.w
            del g16
            o["grad_weight"].addmm_(grad.T, xc)
            del rows, grad
        del xc, lq, lp
    return out


def rel_fro(a: Any, ref: Any, rows: int = 8192) -> float:
    """||a - ref|| / ||ref|| in float64, a block of rows at a time (no full fp64 copy of a)."""
    num = den = 0.0
    for i in range(0, a.shape[0], rows):
        d = a[i:i + rows].double() - ref[i:i + rows]
        num += float((d * d).sum())
        den += float((ref[i:i + rows] ** 2).sum())
    return math.sqrt(num) / math.sqrt(den) if den > 0 else math.sqrt(num)


def build_method(env: Env, method: str, shape: Shape, args: argparse.Namespace,
                 compiled: Dict[str, Any]) -> "tuple[Optional[Callable], str]":
    """A function (x, w, inputs) -> loss for the method, or (None, why it is skipped)."""
    torch = env.torch
    from kljit import LossConfig
    from kljit.reference import kl_div_reference

    teacher = "sparse_topk" if shape.sparse else "dense_probs"
    config = LossConfig(teacher=teacher, reduction="batchmean", eps=EPS, tail=args.tail,
                        temperature=args.temperature,
                        mode="two_phase" if method == "kljit_two_phase" else "fused",
                        grad_weight_accum=("output" if method.endswith("accum_out") else
                                           "fp32" if method.endswith("accum_fp32") else "auto"),
                        native_logits="_native" in method,
                        precise_accumulation=method == "kljit_fused_precise")
    impl = "dense" if shape.sparse else "gather"

    def plain(x: Any, w: Any, teacher_t: Any, ids: Any, vals: Any) -> Any:
        return kl_div_reference(x, w, teacher_t, teacher_ids=ids, teacher_values=vals,
                                config=config, sparse_impl=impl)

    if method == "eager":
        return (lambda x, w, inp: plain(x, w, inp.teacher, inp.ids, inp.vals)), ""
    if method == "compile":
        # One compiled function per teacher kind; torch.compile recompiles it for new shapes
        # (in the warm-up) and turns N dynamic after the first change.
        if teacher not in compiled:
            compiled[teacher] = torch.compile(plain)
        fn = compiled[teacher]
        return (lambda x, w, inp: fn(x, w, inp.teacher, inp.ids, inp.vals)), ""
    if method.startswith("liger"):
        if shape.sparse:
            return None, "Liger has no sparse top-K teacher"
        if env.liger_cls is None:
            return None, env.liger_note
        accum = torch.float32 if method == "liger_accum_fp32" else None
        loss_fn = env.liger_cls(reduction="batchmean", temperature=args.temperature, eps=EPS,
                                accum_dtype=accum)
        return (lambda x, w, inp: loss_fn(x, w, inp.teacher)), ""
    if env.kljit is None:
        return None, env.kljit_note
    kl = env.kljit
    if method == "kljit_c":
        return c_call(config), ""
    if method in REPLANNED:
        return c_call(config, REPLANNED[method]), ""
    return (lambda x, w, inp: kl.fused_linear_kl_div(x, w, inp.teacher, config=config,
                                                     **inp.teacher_kwargs())), ""


#: The C calls planned with a KLJIT_GEMM of their own: (its value, what the plan's description
#: says where the plan took it).
REPLANNED = {"kljit_c_e16": ("logits:jit.e16", "(E16)"),
             "kljit_c_promoted": ("logits:jit.128.2.6.g.1.r", "128x128 s6 g pr"),
             "kljit_c_stats": ("logits:jit.stats", "in the logits GEMM's epilogue")}


def replanned(call: Any, gemm: str, marker: str) -> Any:
    """`call` (a kljit._ops.Call) bound to a plan of its problem made in a context of its own
    whose KLJIT_GEMM is `gemm` (the library reads it when a context is made): the same tensors,
    arguments and workspace rules, another recipe, refused unless its description has
    `marker`."""
    from kljit import _ops

    plan = planned_with(call.checked.spec.problem, call.checked.spec.device_index or 0, gemm,
                        marker)
    checked = _ops.Checked.__new__(_ops.Checked)
    for slot in _ops.Checked.__slots__:
        setattr(checked, slot, getattr(call.checked, slot))
    checked.plan, checked.sizes = plan, {}
    return _ops.Call(checked, call.tensors)


def planned_with(problem: Any, device: int, gemm: str, marker: str) -> Any:
    """A plan of `problem` made in a context of its own whose KLJIT_GEMM is `gemm` (the library
    reads it when a context is made), refused unless its description has `marker`."""
    from kljit import _lib

    old = os.environ.get("KLJIT_GEMM")
    os.environ["KLJIT_GEMM"] = gemm
    try:
        plan = _lib.Plan(_lib.Context(device), problem)
    finally:
        if old is None:
            del os.environ["KLJIT_GEMM"]
        else:
            os.environ["KLJIT_GEMM"] = old
    if marker not in plan.describe():  # out of its scope, or not sm_90: say so, not time it
        raise RuntimeError(f"{gemm} is not taken by this plan:\n{plan.describe()}")
    return plan


def c_call(config: Any, replan: Optional["tuple[str, str]"] = None) -> Callable:
    """kljit_fused straight through ctypes: the binding's plan (kljit._ops.Call, made at the
    first call, in the warm-up; with `replan`, a REPLANNED entry, that problem planned in a
    context whose KLJIT_GEMM is its value: replanned), fresh outputs and workspace from torch's
    allocator per step as the binding has, the gradients set as .grad; the loss returned as a
    leaf so that the step's backward() costs nothing."""
    from kljit import _ops
    from kljit._lib import Mode

    made: Dict[str, Any] = {}

    def run(x: Any, w: Any, inp: Any) -> Any:
        kw = inp.teacher_kwargs()
        if "call" not in made:
            made["call"] = _ops.Call.make(config.key, x.detach(), w.detach(), None,
                                          inp.teacher, kw.get("teacher_ids"),
                                          kw.get("teacher_values"), None, None, None, None,
                                          None, math.nan)
            if replan:
                made["call"] = replanned(made["call"], *replan)
        call = made["call"]
        args = call.args()
        loss = call.loss()
        args.loss = loss.data_ptr()
        dx, dw, _ = call.grads(w, None, _ops.WANT_DX | _ops.WANT_DW, args)
        call.run(Mode.FUSED, args)
        x.grad, w.grad = dx, dw
        return loss.requires_grad_()

    return run


def build_online_method(env: Env, method: str, args: argparse.Namespace
                        ) -> "tuple[Optional[Callable], str]":
    """A function (x, w, inputs) -> loss for an online-teacher method, or (None, why not)."""
    beta, hard = method_key(method, args)
    if method == "liger_jsd_hard":
        if env.liger_hard_cls is None:
            return None, env.liger_hard_note
        hard_fn = env.liger_hard_cls(weight_hard_loss=hard, weight_soft_loss=1.0 - hard,
                                     beta=beta, ignore_index=-100, temperature=1.0)
        return (lambda x, w, inp: hard_fn(x, w, inp.xt, inp.wt, inp.labels)), ""
    if method.startswith("liger"):
        if env.liger_jsd_cls is None:
            return None, env.liger_jsd_note
        loss_fn = env.liger_jsd_cls(jsd_beta=beta, temperature=1.0)
        return (lambda x, w, inp: loss_fn(x, w, inp.xt, inp.wt, None)), ""
    if env.kljit is None:
        return None, env.kljit_note
    return online_c_call(env.torch, beta, args.kljit_dw_accum, hard,
                         ONLINE_REPLANNED.get(method)), ""


def online_c_call(torch: Any, beta: float, dw_accum: str = "auto",
                  hard: float = 0.0, replan: Optional["tuple[str, str]"] = None) -> Callable:
    """kljit_fused with KLJIT_TEACHER_DENSE_HIDDEN through ctypes, as c_call does for the dense
    teacher: the plan made at the first call (the warm-up), with the binding's 'auto' bf16 dW
    accumulation (the library's KLJIT_ACCUM_AUTO); fresh outputs and workspace from torch's
    allocator per step; the loss returned as a leaf. beta = 0: the forward KL, else the JSD.
    dw_accum 'bf16' or 'fp32' overrides the rule (--kljit-dw-accum). hard > 0: CE mixing,
    hard_weight = hard and soft_weight = 1 - hard on the inputs' labels (-100 ignored). replan:
    an ONLINE_REPLANNED entry, the problem planned in a context whose KLJIT_GEMM is its value
    (planned_with)."""
    from kljit import _lib, _ops
    from kljit._checks import WORKSPACE_ALIGN

    made: Dict[str, Any] = {}

    def plan_for(x: Any, w: Any, xt: Any) -> Any:
        lib = _lib
        pb = lib.Problem.init(
            hidden=x.shape[1], vocab=w.shape[0], teacher=lib.TeacherForm.DENSE_HIDDEN,
            teacher_hidden=xt.shape[1], grad_weight_dtype=lib.DType.BF16,
            grad_weight_accum=(lib.GradWeightAccum.FP32 if dw_accum == "fp32" else
                               lib.GradWeightAccum.OUTPUT_DTYPE if dw_accum == "bf16" else
                               lib.GradWeightAccum.AUTO),
            divergence=lib.Divergence.JSD if beta else lib.Divergence.FORWARD_KL, beta=beta,
            **({"hard_weight": hard, "soft_weight": 1.0 - hard, "label_dtype": lib.DType.INT64}
               if hard else {}))
        device = x.device.index or 0
        plan = planned_with(pb, device, *replan) if replan else lib.get_plan(pb, device)
        rows = x.shape[0]
        log(f"   kljit plan: chunk_rows {plan.chunk_rows(rows)} for {rows} rows, dW accumulated "
            f"as {dw_accum} ('auto': the library's, bf16 up to 8 chunks), workspace "
            f"{plan.workspace_size(lib.Mode.FUSED, rows) / 2**20:.0f} MiB")
        return plan

    def run(x: Any, w: Any, inp: Any) -> Any:
        if "plan" not in made:
            made["plan"] = plan_for(x, w, inp.xt)
            made["size"] = made["plan"].workspace_size(_lib.Mode.FUSED, x.shape[0])
        plan, size = made["plan"], made["size"]
        loss = torch.empty((), dtype=torch.float32, device=x.device)
        dx, dw = torch.empty_like(x), torch.empty_like(w)
        raw = torch.empty(size + WORKSPACE_ALIGN - 1, dtype=torch.uint8, device=x.device)
        offset = -raw.data_ptr() % WORKSPACE_ALIGN
        args = _lib.Args.init(rows=x.shape[0], input=x.data_ptr(), weight=w.data_ptr(),
                              teacher_input=inp.xt.data_ptr(), teacher_weight=inp.wt.data_ptr(),
                              labels=inp.labels.data_ptr() if hard else None,
                              loss=loss.data_ptr(), grad_input=dx.data_ptr(),
                              grad_weight=dw.data_ptr(), workspace=raw.data_ptr() + offset,
                              workspace_size=size)
        plan.execute(_lib.Mode.FUSED, _ops.stream(x.device), args)
        del raw
        x.grad, w.grad = dx, dw
        return loss.requires_grad_()

    return run


def is_oom(e: BaseException) -> bool:
    text = str(e).lower()
    return "out of memory" in text or type(e).__name__ == "OutOfMemoryError"


def prepare_method(env: Env, fn: Callable, inp: Inputs, ref: Optional[Dict[str, Any]],
                   res: Result, args: argparse.Namespace) -> Callable[[], Any]:
    """Warm-up and one checked run with its peak memory (into `res`); returns the step."""
    torch = env.torch
    cuda = env.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    x = inp.x.clone().requires_grad_()
    w = inp.w.clone().requires_grad_()

    def step() -> Any:
        x.grad = w.grad = None
        loss = fn(x, w, inp)
        loss.backward()
        return loss

    t0 = time.perf_counter()
    step()
    sync()
    res.first_s = time.perf_counter() - t0
    for _ in range(args.warmup - 1):
        step()
    sync()
    x.grad = w.grad = None
    gc.collect()
    if cuda:
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    loss = step()
    sync()
    if cuda:
        res.peak_mb = (torch.cuda.max_memory_allocated() - base) / 2**20
    if ref is not None:
        want = float(ref["loss"])
        res.loss_err = abs(float(loss.detach().double()) - want) / abs(want)
        res.dx_err = rel_fro(x.grad, ref["grad_input"])
        res.dw_err = rel_fro(w.grad, ref["grad_weight"])
    del loss
    return step


def sleep_cycles(env: Env, us: float) -> int:
    """torch.cuda._sleep's argument for `us` microseconds of GPU time (measured once)."""
    torch = env.torch
    if "cycles_per_us" not in env.info_cache:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        env.info_cache["cycles_per_us"] = 10_000_000 / (1e3 * start.elapsed_time(end))
    return int(us * env.info_cache["cycles_per_us"])


def time_steps(env: Env, steps: Sequence[Callable[[], Any]], args: argparse.Namespace,
               flush: Any, results: Optional[Sequence[Result]] = None) -> List[float]:
    """The median ms of each step, timed round-robin `repeats` times, the order reversed every
    other round (0, 1, ..., then ..., 1, 0: the step right after another and the one after the
    host's wait are each step alike; one order alone put the binding 1% apart from its C call,
    bench/RESULTS.md run 61): CUDA events around the step, L2 flushed before each, --prefill-us
    of GPU sleep queued before the start event (the host then enqueues while the GPU is busy,
    as behind a model's forward). With `results` (one a step), each gets the median SM clock
    and power sampled while its step ran (env.clock; none without NVML)."""
    times: List[List[float]] = [[] for _ in steps]
    clock = env.clock if results is not None and env.clock is not None else None
    if clock is not None:
        clock.start(len(steps))
    try:
        timed_rounds(env, steps, args, flush, times, clock)
    finally:
        if clock is not None:
            clock.stop()
    if clock is not None:
        for res, m in zip(results, clock.medians()):
            if m is not None:
                res.sm_mhz, res.power_w = m
    return [statistics.median(t) for t in times]


def timed_rounds(env: Env, steps: Sequence[Callable[[], Any]], args: argparse.Namespace,
                 flush: Any, times: List[List[float]],
                 clock: Optional[gpu_clock.Sampler]) -> None:
    """time_steps' rounds: each step's times appended to `times`, `clock` told which step
    runs (from its start event to its end event's completion)."""
    torch = env.torch
    cuda = env.device == "cuda"
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep = sleep_cycles(env, args.prefill_us) if args.prefill_us > 0 else 0
    for i in range(args.repeats):
        for k in range(len(steps)) if i % 2 == 0 else reversed(range(len(steps))):
            step = steps[k]
            flush.fill_(i & 0x7F)
            if cuda:
                if sleep:
                    torch.cuda._sleep(sleep)
                start.record()
            else:
                t0 = time.perf_counter()
            if clock is not None:
                clock.current = k
            step()
            if cuda:
                end.record()
                end.synchronize()
            if clock is not None:
                clock.current = None
            times[k].append(start.elapsed_time(end) if cuda
                            else 1e3 * (time.perf_counter() - t0))


def run_method(env: Env, fn: Callable, inp: Inputs, ref: Optional[Dict[str, Any]],
               res: Result, args: argparse.Namespace, flush: Any) -> None:
    """Warm-up, one checked run with its peak memory, then the timed runs; fills `res`."""
    step = prepare_method(env, fn, inp, ref, res, args)
    res.ms = time_steps(env, [step], args, flush, [res])[0]


def try_reference(compute: Callable[[], Any], sync: Callable[[], None],
                  empty_cache: Callable[[], None]) -> Any:
    """compute(), timed and logged; None (no error columns) when it fails."""
    t0 = time.perf_counter()
    try:
        ref = compute()
        sync()
    except Exception as e:  # noqa: BLE001 - time the methods anyway, without errors
        log(f"   float64 reference failed ({type(e).__name__}: {e}); no error columns")
        gc.collect()
        empty_cache()
        return None
    losses = [ref["loss"]] if "loss" in ref else [r["loss"] for r in ref.values()]
    log(f"   float64 reference: loss {', '.join(f'{float(x):.6g}' for x in losses)} "
        f"({time.perf_counter() - t0:.1f} s)")
    return ref


def record_failure(res: Result, e: BaseException) -> None:
    """A method that raised: OOM or FAILED with the error, and no numbers."""
    res.status = "OOM" if is_oom(e) else "FAILED"
    res.note = "" if res.status == "OOM" else f"{type(e).__name__}: {e}"[:300]
    res.ms = res.loss_err = res.dx_err = res.dw_err = res.peak_mb = None


def time_method(env: Env, res: Result, fn: Optional[Callable], why: str, inp: Any,
                ref: Optional[Dict[str, Any]], args: argparse.Namespace, flush: Any,
                empty_cache: Callable[[], None]) -> None:
    """Runs one method into `res` (skipped, OOM and failures recorded, never raised)."""
    if fn is None:
        res.status, res.note = "skipped", why
    else:
        try:
            run_method(env, fn, inp, ref, res, args, flush)
        except Exception as e:  # noqa: BLE001 - record it and go on with the matrix
            record_failure(res, e)
        del fn
        gc.collect()
        empty_cache()
    log("   " + table_row(res))


def alternating(group: List[Result], args: argparse.Namespace, online: bool = False
                ) -> List[Result]:
    """The results of `group` that --alternate names, to be timed round-robin; none where fewer
    than two are, or (online) where they are not of one loss (each round checks against one
    float64 reference: liger_jsd with kljit_jsd, not with kljit_fkl_online)."""
    paired = [r for r in group if r.method in args.alternate]
    if len(paired) < 2 or (online and len({method_key(r.method, args) for r in paired}) > 1):
        return []
    return paired


def time_group(env: Env, group: List[Result],
               build: Callable[[str], "tuple[Optional[Callable], str]"],
               ref_of: Callable[[str], Optional[Dict[str, Any]]], inp: Any,
               args: argparse.Namespace, flush: Any, empty_cache: Callable[[], None],
               online: bool = False) -> None:
    """A group of methods on one input: each on its own, those alternating() pairs round-robin
    after them. build(method) -> (fn, why not); ref_of(method): its float64 reference or None
    (a round of pairs checks against its first method's)."""
    paired = alternating(group, args, online)
    for res in group:
        if res not in paired:
            fn, why = build(res.method)
            time_method(env, res, fn, why, inp, ref_of(res.method), args, flush, empty_cache)
    if paired:
        time_alternately(env, paired, [build(r.method) for r in paired], inp,
                         ref_of(paired[0].method), args, flush, empty_cache)


def time_alternately(env: Env, group: List[Result], fns: List["tuple[Optional[Callable], str]"],
                     inp: Any, ref: Optional[Dict[str, Any]], args: argparse.Namespace,
                     flush: Any, empty_cache: Callable[[], None]) -> None:
    """Methods whose times are compared closely (--alternate: the binding and its C call),
    each warmed up and checked, then timed round-robin, step by step, so that the GPU's clock
    and the order of the runs weigh on each alike."""
    ready: List[Result] = []
    steps: List[Callable[[], Any]] = []
    for res, (fn, why) in zip(group, fns):
        if fn is None:
            res.status, res.note = "skipped", why
            continue
        try:
            steps.append(prepare_method(env, fn, inp, ref, res, args))
            ready.append(res)
        except Exception as e:  # noqa: BLE001 - record it and go on with the others
            record_failure(res, e)
    if steps:
        try:
            for res, ms in zip(ready, time_steps(env, steps, args, flush, ready)):
                res.ms = ms
            for res in ready:
                res.note = alternation_note(res, ready)
        except Exception as e:  # noqa: BLE001
            for res in ready:
                res.status, res.note = "FAILED", f"{type(e).__name__}: {e}"[:300]
    del steps, fns
    gc.collect()
    empty_cache()
    for res in group:
        log("   " + table_row(res))


def alternation_note(res: Result, ready: List[Result]) -> str:
    """The status of a method timed alternately: with which, and its time over the first
    one's from the unrounded medians (the table's two decimals are 0.3% of a 3 ms call)."""
    note = "timed alternately with " + ", ".join(r.method for r in ready if r is not res)
    first = ready[0]
    if res is not first and res.ms is not None and first.ms:
        note += f" ({res.ms / first.ms:.4f}x {first.method})"
    return note


def with_speedups(group: List[Result], base_of: Callable[[str], str]) -> List[Result]:
    """Each result's speedup over its base method's time in the same group (when both ran)."""
    ms = {r.method: r.ms for r in group}
    for r in group:
        base = ms.get(base_of(r.method))
        if r.ms is not None and base is not None:
            r.speedup = base / r.ms
    return group


def reference(env: Env, inp: Inputs, shape: Shape, args: argparse.Namespace) -> Dict[str, Any]:
    """Loss and gradients in float64 on the GPU (the gradients stay there for the checks)."""
    from kljit import LossConfig
    from kljit.reference import kl_div_fp64

    teacher = "sparse_topk" if shape.sparse else "dense_probs"
    config = LossConfig(teacher=teacher, reduction="batchmean", eps=EPS, tail=args.tail,
                        temperature=args.temperature)
    chunk = max(64, min(4096, (512 << 20) // (8 * shape.v)))
    ref = kl_div_fp64(inp.x, inp.w, inp.teacher, teacher_ids=inp.ids, teacher_values=inp.vals,
                      config=config, chunk_rows=chunk)
    ref.pop("row_loss")
    return ref


def fmt(value: Optional[float], spec: str, missing: str = "—") -> str:
    return missing if value is None else format(value, spec)


TABLE_HEAD = ("| method | N x H x V | logit std | ms | peak MB | SM MHz | W | x base | "
              "loss rel err | dX rel err | dW rel err | first call s | status |")
TABLE_RULE = "|" + "---|" * 13


def table_row(r: Result) -> str:
    status = r.status + (f": {r.note}" if r.note else "")
    return (f"| {r.method} | {r.shape.label()} | {fmt(r.std, 'g')} | {fmt(r.ms, '.2f')} | "
            f"{fmt(r.peak_mb, '.0f')} | {fmt(r.sm_mhz, '.0f')} | {fmt(r.power_w, '.0f')} | "
            f"{fmt(r.speedup, '.2f')} | {fmt(r.loss_err, '.1e')} | {fmt(r.dx_err, '.1e')} | "
            f"{fmt(r.dw_err, '.1e')} | {fmt(r.first_s, '.1f')} | {status} |")


CSV_FIELDS = ["method", "shape", "n", "h", "v", "k", "logit_std", "logit_std_measured",
              "status", "ms", "peak_mb", "sm_mhz", "power_w", "speedup_vs_base", "loss_rel_err",
              "dx_rel_err", "dw_rel_err", "first_call_s", "note"]


def write_outputs(out: Path, header: List[str], results: List[Result], env: Env) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(header + [TABLE_HEAD, TABLE_RULE]
                             + [table_row(r) for r in results]) + "\n")
    with open(csv_path(out), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(CSV_FIELDS + list(env.info))
        for r in results:
            numbers = [fmt(value, spec, "") for value, spec in (
                (r.ms, ".4f"), (r.peak_mb, ".1f"), (r.sm_mhz, ".0f"), (r.power_w, ".1f"),
                (r.speedup, ".4f"), (r.loss_err, ".4e"),
                (r.dx_err, ".5e"), (r.dw_err, ".4e"), (r.first_s, ".2f"))]
            wr.writerow([r.method, r.shape.name, r.shape.n, r.shape.h, r.shape.v, r.shape.k,
                         fmt(r.std, "g", ""), r.std_measured, r.status] + numbers + [r.note]
                        + list(env.info.values()))


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    try:
        import torch
    except ImportError:
        log("compare.py needs torch (and a CUDA GPU); --dry-run needs neither")
        return 2
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        log("compare.py needs a CUDA GPU visible to torch (--device cpu: a smoke test)")
        return 2
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    empty_cache = torch.cuda.empty_cache if cuda else (lambda: None)
    sys.path.insert(0, str(REPO / "python"))
    all_methods = sorted({m for s in args.shapes for m in methods_for(s, args.methods)})
    env = make_env(args, all_methods)
    header = [f"{k}: {v}" for k, v in env.info.items()]
    chunk_env = os.environ.get("KLJIT_CHUNK_ROWS", "").strip()
    chunk_env = f", KLJIT_CHUNK_ROWS {chunk_env}" if chunk_env else ""
    alternate = " and ".join(args.alternate) + " timed alternately; " if args.alternate else ""
    header = ["compare.py — " + ", ".join(header), "",
              f"{args.warmup} warm-up, median of {args.repeats}, "
              f"{'CUDA events, L2 flushed' if cuda else 'host timer (cpu smoke test)'}"
              f"{f', {args.prefill_us:g} us GPU prefill' if args.prefill_us > 0 else ''}; "
              f"{alternate}"
              f"teacher probs, T = {args.temperature:g}, batchmean, eps {EPS:g}; "
              f"sparse tail {args.tail}; "
              f"online teacher (liger_jsd, kljit_jsd: JSD beta {args.beta:g}; *_fkl_online: "
              f"forward KL; kljit eps 1e-20, dW accumulation {args.kljit_dw_accum}{chunk_env}"
              f") at logit std "
              f"{', '.join(f'{x:g}' for x in args.logit_std)}; x base: speedup over eager, "
              f"or over Liger's method of the same divergence; "
              f"errors against float64 on the same inputs", ""]
    for line in header:
        log(line)
    flush = torch.empty(FLUSH_BYTES if cuda else 1 << 20, dtype=torch.uint8, device=args.device)
    compiled: Dict[str, Any] = {}
    results: List[Result] = []
    for si, shape in enumerate(args.shapes):
        classic, online = split_methods(methods_for(shape, args.methods))
        if classic:
            log(f"== {shape.label()}: making inputs")
            inp = Inputs(torch, shape, args.seed + si, args.device)
            ref = None if args.no_reference else try_reference(
                lambda: reference(env, inp, shape, args), sync, empty_cache)
            group = [Result(m, shape) for m in classic]
            time_group(env, group, lambda m: build_method(env, m, shape, args, compiled),
                       lambda m: ref, inp, args, flush, empty_cache)
            results += with_speedups(group, lambda m: "eager")
            del inp, ref
            gc.collect()
            empty_cache()
        for std in (args.logit_std if online else []):
            log(f"== {shape.label()}, online teacher, logit std {std:g}: making inputs")
            if shape.sparse:
                results += [Result(m, shape, status="skipped", std=std,
                                   note="the online teacher is dense") for m in online]
                continue
            inp = OnlineInputs(torch, shape, args.seed + si, std, args.device)
            log(f"   measured logit std (student/teacher): {inp.measured()}")
            keys = sorted({method_key(m, args) for m in online})
            refs = None if args.no_reference else try_reference(
                lambda: online_reference(torch, inp, keys), sync, empty_cache)
            for b, r in (refs or {}).items():
                dx, low = r["grad_input"], inp.x.dtype
                what = f"beta {b[0]:g}" + (f", CE weight {b[1]:g}" if b[1] else "")
                log(f"   dX floor ({what}): output rounded to {str(low)[6:]} "
                    f"{rel_fro(dx.to(low), dx):.4e}; G and output rounded "
                    f"{rel_fro(r.pop('grad_input_g16').to(low), dx):.4e} (any method with one "
                    f"{str(low)[6:]} G GEMM, exactly summed); that G through torch's "
                    f"{str(low)[6:]} GEMM {rel_fro(r.pop('grad_input_mm16'), dx):.4e}")
            group = [Result(m, shape, std=std, std_measured=inp.measured()) for m in online]
            time_group(env, group, lambda m: build_online_method(env, m, args),
                       lambda m: refs[method_key(m, args)] if refs else None, inp, args, flush,
                       empty_cache, online=True)
            results += with_speedups(group, online_base)
            del inp, refs
            gc.collect()
            empty_cache()
    print("\n".join(header + [TABLE_HEAD, TABLE_RULE] + [table_row(r) for r in results]))
    if args.out:
        write_outputs(args.out, header, results, env)
        log(f"wrote {args.out} and {csv_path(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
