#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times fused linear + KL losses side by side, in one process, on one GPU.

    PYTHONPATH=python python3 bench/compare.py [--shapes all] [--methods ...] [--out FILE]

Methods (each computes loss and the gradients of X and W for the same loss: dense teacher
probabilities, T = 1, batchmean, eps 1e-10; or the sparse top-K teacher, tail 'none'):
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
  kljit_c          the same kljit_fused call without the binding's autograd and custom ops:
                   the plan, outputs and workspace the binding would use, one C call per step
                   (what kljit_fused is measured against: the binding's overhead).
  kljit_two_phase  kljit through the binding, mode='two_phase' (forward, then backward).
Opt-in (--methods), for like-for-like dW accumulation: liger_accum_fp32 (Liger with
accum_dtype=torch.float32), kljit_fused_accum_fp32 (kljit with grad_weight_accum='fp32': a
V x H fp32 buffer) and kljit_fused_accum_out (grad_weight_accum='output': dW accumulated in bf16
across chunks, as Liger does by default, whatever the chunk count). For the speed/precision trade of bf16 logits: kljit_fused_native
(native_logits=True: the logits GEMM writes bf16, as Liger's does; dW in fp32) and
kljit_fused_native_accum_out (bf16 logits and bf16 dW accumulation: Liger's default precision
class on both counts).

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
before each, median). A method that runs out of memory is recorded as OOM and the run goes on.

Prints a markdown table (stdout) and progress (stderr); --out FILE also writes FILE (markdown)
and its .csv twin. --dry-run prints what would run and needs neither torch nor a GPU.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import math
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
METHODS = ("eager", "compile", "liger", "kljit_fused", "kljit_c", "kljit_two_phase",
           "liger_accum_fp32", "kljit_fused_accum_fp32", "kljit_fused_accum_out",
           "kljit_fused_native", "kljit_fused_native_accum_out")
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
    """A comma list of METHODS, or 'all'."""
    if text == "all":
        return list(METHODS)
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise argparse.ArgumentTypeError(f"unknown method(s) {bad}: choose from "
                                         f"{', '.join(METHODS)} or 'all'")
    return methods


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
        inputs = (s.n * s.h + s.v * s.h) * 2 + (s.n * s.k * 10 if s.sparse else s.n * s.v * 2)
        logits = s.n * s.v * 4
        gflop = 6 * s.n * s.h * s.v / 1e9
        print(f"  {s.label()}: {', '.join(methods_for(s, args.methods))}; inputs "
              f"{inputs / 2**30:.2f} GiB, full fp32 logits {logits / 2**30:.2f} GiB, "
              f"fwd+bwd GEMMs {gflop:.0f} GFLOP")
    if args.out:
        print(f"  would write {args.out} and {csv_path(args.out)}")
    return 0


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


@dataclass
class Env:
    """Versions and the imported methods, found once."""

    torch: Any
    device: str = "cuda"
    kljit: Any = None
    kljit_note: str = ""
    liger_cls: Any = None
    liger_note: str = ""
    info: Dict[str, str] = field(default_factory=dict)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def import_liger(args: argparse.Namespace) -> "tuple[Any, str]":
    """LigerFusedLinearKLDivLoss and its version, or (None, why not)."""
    def attempt() -> Any:
        from liger_kernel.transformers import LigerFusedLinearKLDivLoss  # noqa: WPS433

        return LigerFusedLinearKLDivLoss

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
    if any(m.startswith("kljit") for m in methods):
        try:
            import kljit

            kljit.load_library()
            env.kljit = kljit
            env.info["kljit"] = f"{kljit.version()} ({kljit.library_path()})"
        except Exception as e:  # noqa: BLE001
            env.kljit_note = f"kljit unavailable: {e}"
            env.info["kljit"] = env.kljit_note
    if any(m.startswith("liger") for m in methods):
        env.liger_cls, note = import_liger(args)
        env.info["liger-kernel"] = note
        if env.liger_cls is None:
            env.liger_note = note
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
                        mode="two_phase" if method == "kljit_two_phase" else "fused",
                        grad_weight_accum=("output" if method.endswith("accum_out") else
                                           "fp32" if method.endswith("accum_fp32") else "auto"),
                        native_logits="_native" in method)
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
        loss_fn = env.liger_cls(reduction="batchmean", temperature=1.0, eps=EPS,
                                accum_dtype=accum)
        return (lambda x, w, inp: loss_fn(x, w, inp.teacher)), ""
    if env.kljit is None:
        return None, env.kljit_note
    kl = env.kljit
    if method == "kljit_c":
        return c_call(config), ""
    return (lambda x, w, inp: kl.fused_linear_kl_div(x, w, inp.teacher, config=config,
                                                     **inp.teacher_kwargs())), ""


def c_call(config: Any) -> Callable:
    """kljit_fused straight through ctypes: the binding's plan (kljit._ops.Call, made at the
    first call, in the warm-up), fresh outputs and workspace from torch's allocator per step as
    the binding has, the gradients set as .grad; the loss returned as a leaf so that the step's
    backward() costs nothing."""
    from kljit import _ops
    from kljit._lib import Mode

    made: Dict[str, Any] = {}

    def run(x: Any, w: Any, inp: Any) -> Any:
        kw = inp.teacher_kwargs()
        if "call" not in made:
            made["call"] = _ops.Call(config.key, x.detach(), w.detach(), None, inp.teacher,
                                     kw.get("teacher_ids"), kw.get("teacher_values"), None,
                                     math.nan)
        call = made["call"]
        args = call.args()
        loss = call.loss()
        args.loss = loss.data_ptr()
        dx, dw, _ = call.grads(w, None, True, True, False, args)
        ws = call.workspace(Mode.FUSED, args)
        call.plan.execute(Mode.FUSED, _ops.stream(x.device), args)
        del ws
        x.grad, w.grad = dx, dw
        return loss.requires_grad_()

    return run


def is_oom(e: BaseException) -> bool:
    text = str(e).lower()
    return "out of memory" in text or type(e).__name__ == "OutOfMemoryError"


def run_method(env: Env, fn: Callable, inp: Inputs, ref: Optional[Dict[str, Any]],
               res: Result, args: argparse.Namespace, flush: Any) -> None:
    """Warm-up, one checked run with its peak memory, then the timed runs; fills `res`."""
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
    times = []
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(args.repeats):
        flush.fill_(i & 0x7F)
        if cuda:
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append(1e3 * (time.perf_counter() - t0))
    res.ms = statistics.median(times)


def reference(env: Env, inp: Inputs, shape: Shape, args: argparse.Namespace) -> Dict[str, Any]:
    """Loss and gradients in float64 on the GPU (the gradients stay there for the checks)."""
    from kljit import LossConfig
    from kljit.reference import kl_div_fp64

    teacher = "sparse_topk" if shape.sparse else "dense_probs"
    config = LossConfig(teacher=teacher, reduction="batchmean", eps=EPS, tail=args.tail)
    chunk = max(64, min(4096, (512 << 20) // (8 * shape.v)))
    ref = kl_div_fp64(inp.x, inp.w, inp.teacher, teacher_ids=inp.ids, teacher_values=inp.vals,
                      config=config, chunk_rows=chunk)
    ref.pop("row_loss")
    return ref


def fmt(value: Optional[float], spec: str, missing: str = "—") -> str:
    return missing if value is None else format(value, spec)


TABLE_HEAD = ("| method | N x H x V | ms | peak MB | x eager | loss rel err | dX rel err | "
              "dW rel err | first call s | status |")


def table_row(r: Result) -> str:
    status = r.status + (f": {r.note}" if r.note else "")
    return (f"| {r.method} | {r.shape.label()} | {fmt(r.ms, '.2f')} | {fmt(r.peak_mb, '.0f')} | "
            f"{fmt(r.speedup, '.2f')} | {fmt(r.loss_err, '.1e')} | {fmt(r.dx_err, '.1e')} | "
            f"{fmt(r.dw_err, '.1e')} | {fmt(r.first_s, '.1f')} | {status} |")


CSV_FIELDS = ["method", "shape", "n", "h", "v", "k", "status", "ms", "peak_mb",
              "speedup_vs_eager", "loss_rel_err", "dx_rel_err", "dw_rel_err", "first_call_s",
              "note"]


def write_outputs(out: Path, header: List[str], results: List[Result], env: Env) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(header + [TABLE_HEAD, "|" + "---|" * 10]
                             + [table_row(r) for r in results]) + "\n")
    with open(csv_path(out), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(CSV_FIELDS + list(env.info))
        for r in results:
            wr.writerow([r.method, r.shape.name, r.shape.n, r.shape.h, r.shape.v, r.shape.k,
                         r.status] + [fmt(value, spec, "") for value, spec in (
                             (r.ms, ".4f"), (r.peak_mb, ".1f"), (r.speedup, ".4f"),
                             (r.loss_err, ".3e"), (r.dx_err, ".3e"), (r.dw_err, ".3e"),
                             (r.first_s, ".2f"))] + [r.note]
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
    header = ["compare.py — " + ", ".join(header), "",
              f"{args.warmup} warm-up, median of {args.repeats}, "
              f"{'CUDA events, L2 flushed' if cuda else 'host timer (cpu smoke test)'}; "
              f"teacher probs, T = 1, batchmean, eps {EPS:g}; sparse tail {args.tail}; "
              f"errors against float64 on the same inputs", ""]
    for line in header:
        log(line)
    flush = torch.empty(FLUSH_BYTES if cuda else 1 << 20, dtype=torch.uint8, device=args.device)
    compiled: Dict[str, Any] = {}
    results: List[Result] = []
    for si, shape in enumerate(args.shapes):
        log(f"== {shape.label()}: making inputs")
        inp = Inputs(torch, shape, args.seed + si, args.device)
        ref = None
        if not args.no_reference:
            t0 = time.perf_counter()
            try:
                ref = reference(env, inp, shape, args)
                sync()
                log(f"   float64 reference: loss {float(ref['loss']):.6g} "
                    f"({time.perf_counter() - t0:.1f} s)")
            except Exception as e:  # noqa: BLE001 - time the methods anyway, without errors
                log(f"   float64 reference failed ({type(e).__name__}: {e}); no error columns")
                ref = None
                gc.collect()
                empty_cache()
        eager_ms = None
        for method in methods_for(shape, args.methods):
            res = Result(method, shape)
            fn, why = build_method(env, method, shape, args, compiled)
            if fn is None:
                res.status, res.note = "skipped", why
            else:
                try:
                    run_method(env, fn, inp, ref, res, args, flush)
                except Exception as e:  # noqa: BLE001 - record it and go on with the matrix
                    res.status = "OOM" if is_oom(e) else "FAILED"
                    res.note = "" if res.status == "OOM" else f"{type(e).__name__}: {e}"[:300]
                    res.ms = res.loss_err = res.dx_err = res.dw_err = None
                    res.peak_mb = None
                del fn
                gc.collect()
                empty_cache()
            if method == "eager" and res.ms is not None:
                eager_ms = res.ms
            if res.ms is not None and eager_ms is not None:
                res.speedup = eager_ms / res.ms
            results.append(res)
            log("   " + table_row(res))
        del inp, ref
        gc.collect()
        empty_cache()
    print("\n".join(header + [TABLE_HEAD, "|" + "---|" * 10] + [table_row(r) for r in results]))
    if args.out:
        write_outputs(args.out, header, results, env)
        log(f"wrote {args.out} and {csv_path(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
