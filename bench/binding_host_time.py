# SPDX-License-Identifier: Apache-2.0
"""The binding's host time against its C call's, to the launch.

    python3 bench/binding_host_time.py [--calls 3000] [--warmup 200] [--shape 64x64x256]
                                       [--device cpu|cuda] [--profile] [--gpu-clock]

Issue 28 judges the binding against its C call on an idle GPU (bench/compare.py's kljit_fused
and kljit_c): there the GPU waits for the host until the first kernel is launched, so what the
binding does in Python before the library's launch is added to the call's time. This times
compare.py's step for each path (gradients cleared, the call, backward; bf16, dense teacher
probabilities, batchmean, config=), alternately, and reports the median of --calls steps from
the step's start to the launch (the plan's execute) and to its return:

  binding  kljit.fused_linear_kl_div(x, w, teacher, config=...) with x and w requiring grad
           (autograd Function, checks remembered by layout, outputs and workspace allocated)
  c_call   compare.py's kljit_c (its c_call): the same Call made once, then per step its
           arguments, loss, gradients and workspace from torch's allocator, the launch, the
           gradients set

--device cpu (default, no GPU, no library): CPU tensors, the plan replaced by one whose execute
only notes the time (the plumbing tests' way in, python/tests/test_plumbing.py). --device cuda:
the real library on CUDA tensors (KLJIT_LIBRARY), the execute timed as it is entered, the
device synchronized between steps (outside the timing) so that nothing waits on the GPU; this
sees what CPU tensors do not (bench/RESULTS.md runs 107-110: 14-16 us on CPU tensors against
about 90 us with CUDA tensors on one H100 host; this form on the H100's own host, run 111, 64 x
64 x 256: 60.5 us against 34.0 to the launch). --profile:
then each path's cProfile, by own time. Each host runs Python at its own speed: run it on the
machine whose GPU is judged. Needs torch.

--gpu-clock (with --device cuda): the same steps as compare.py times them (its 256 MiB flush, a
start event, the step, an end event; --calls steps, alternated) with one event recorded just
before the plan's execute and one just after it returns, so that the GPU's clock splits each
step: start -> pre, host time before the launch the GPU waited for (what the flush did not
hide); pre -> post, the call (longer where kljit_fused's own host time before its first kernel
is no longer hidden); post -> end, the tail (the binding's backward: its kl_scale launches).
bench/RESULTS.md run 135 (there as a script beside the tree).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Tuple
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # compare.py


#: When the launch was reached (perf_counter_ns), by either path.
LAUNCHED = [0]


class NotingPlan:
    """A kljit_plan stand-in: sizes as small as the binding accepts; execute notes the time."""

    def __init__(self, problem: Any) -> None:
        self.problem = problem

    def workspace_size(self, mode: Any, rows: int) -> int:
        return 4096

    def saved_size(self, rows: int) -> int:
        return 4096

    def chunk_rows(self, rows: int) -> int:
        return rows

    def execute(self, mode: Any, stream: int, args: Any) -> None:
        LAUNCHED[0] = time.perf_counter_ns()


def paths(n: int, h: int, v: int, device: str) -> Dict[str, Callable[[], Any]]:
    """compare.py's two steps on `device` (its kljit_fused and kljit_c, its step: gradients
    cleared, the loss, backward), ready to time."""
    import torch

    import compare
    import kljit

    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, h, generator=g).to(device, torch.bfloat16).requires_grad_()
    w = (torch.randn(v, h, generator=g) * 0.05).to(device, torch.bfloat16).requires_grad_()
    inp = SimpleNamespace(teacher=torch.softmax(torch.randn(n, v, generator=g), -1).to(
        device, torch.bfloat16), teacher_kwargs=dict)
    config = kljit.LossConfig(reduction="batchmean")
    fns = {"binding": lambda x, w, inp: kljit.fused_linear_kl_div(x, w, inp.teacher,
                                                                   config=config),
           "c_call": compare.c_call(config)}

    def step(fn: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            x.grad = w.grad = None
            loss = fn(x, w, inp)
            loss.backward()
            return loss

        return run

    return {name: step(fn) for name, fn in fns.items()}


def measure(calls: Dict[str, Callable[[], Any]], repeats: int, warmup: int,
            sync: Callable[[], None]) -> Dict[str, Tuple[float, float]]:
    """Each path's median us to the launch and to the return, timed alternately."""
    for fn in calls.values():
        for _ in range(warmup):
            fn()
            sync()
    times: Dict[str, List[Tuple[int, int]]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = time.perf_counter_ns()
            fn()
            t1 = time.perf_counter_ns()
            sync()
            times[name].append((LAUNCHED[0] - t0, t1 - t0))
    return {name: (statistics.median(a for a, _ in ts) / 1e3,
                   statistics.median(b for _, b in ts) / 1e3) for name, ts in times.items()}


def profile(calls: Dict[str, Callable[[], Any]], repeats: int, sync: Callable[[], None]) -> None:
    """Each path's cProfile over `repeats` steps (the synchronization left out), by own time."""
    import cProfile
    import io
    import pstats

    for name, fn in calls.items():
        prof = cProfile.Profile()
        for _ in range(repeats):
            prof.enable()
            fn()
            prof.disable()
            sync()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
        print(f"== {name}: cProfile of {repeats} steps")
        print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))


def gpu_clock(n: int, h: int, v: int, calls: int, warmup: int) -> int:
    """--gpu-clock: each path's steps as compare.py times them, split by two events around the
    plan's execute (the module docstring); prints the medians, us."""
    import torch

    import compare
    from kljit import _lib

    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]  # start, pre, post, end
    execute = _lib.Plan.execute

    def noted(self: Any, *args: Any) -> None:
        events[1].record()
        execute(self, *args)
        events[2].record()

    flush = torch.empty(compare.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    calls_by_path = paths(n, h, v, "cuda")
    times: Dict[str, List[Tuple[float, ...]]] = {name: [] for name in calls_by_path}
    with mock.patch.object(_lib.Plan, "execute", noted):
        for i in range(warmup + calls):
            names = list(calls_by_path) if i % 2 == 0 else list(reversed(calls_by_path))
            for name in names:
                flush.fill_(i & 0x7F)
                events[0].record()
                calls_by_path[name]()
                events[3].record()
                events[3].synchronize()
                if i >= warmup:
                    times[name].append(tuple(1e3 * a.elapsed_time(b) for a, b in (
                        (events[0], events[3]), (events[0], events[1]), (events[1], events[2]),
                        (events[2], events[3]))))
    print(f"compare.py's steps on the GPU's clock, us (median of {calls} alternating steps; "
          f"{n}x{h}x{v} bf16 on {torch.cuda.get_device_name()}, {compare.FLUSH_BYTES >> 20} MiB "
          f"flush before each)")
    print("| path | step | start -> pre (host time waited for) | pre -> post (the call) | "
          "post -> end (the tail) |")
    print("|---|---|---|---|---|")
    for name, rows in times.items():
        cells = " | ".join(f"{statistics.median(c):.1f}" for c in zip(*rows))
        print(f"| {name} | {cells} |")
    return 0


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--shape", default="64x64x256", help="NxHxV of the tensors")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--profile", action="store_true", help="then each path's cProfile")
    p.add_argument("--gpu-clock", action="store_true",
                   help="split compare.py's timed steps on the GPU's clock (--device cuda)")
    a = p.parse_args(argv)
    n, h, v = (int(s) for s in a.shape.split("x"))
    if a.gpu_clock and a.device != "cuda":
        p.error("--gpu-clock reads CUDA events: it needs --device cuda")
    import torch

    from kljit import _lib, _ops

    cuda = a.device == "cuda"
    if a.gpu_clock:
        return gpu_clock(n, h, v, a.calls, a.warmup)
    if cuda:  # the real plan, its execute timed as it is entered
        execute = _lib.Plan.execute

        def noted(self: Any, *args: Any) -> None:
            LAUNCHED[0] = time.perf_counter_ns()
            execute(self, *args)

        patches = [mock.patch.object(_lib.Plan, "execute", noted)]
        sync = torch.cuda.synchronize
    else:
        patches = [mock.patch.object(_ops, "REQUIRE_CUDA", False),
                   mock.patch.object(_ops, "stream", lambda device: 0),
                   mock.patch.object(_ops, "scale_in_place", lambda tensors, factor: None),
                   mock.patch.object(_lib, "get_plan",
                                     lambda problem, device: NotingPlan(problem))]
        sync = lambda: None  # noqa: E731
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        _lib.clear_plan_cache()
        calls = paths(n, h, v, a.device)
        result = measure(calls, a.calls, a.warmup, sync)
        if a.profile:
            profile(calls, a.calls, sync)
    where = torch.cuda.get_device_name() if cuda else "the CPU, a plan that does nothing"
    print(f"host time, us (median of {a.calls} alternating steps; torch {torch.__version__}, "
          f"Python {sys.version.split()[0]}, {n}x{h}x{v} bf16 on {where})")
    print("| path | to the launch | to the return |")
    print("|---|---|---|")
    for name, (launch, total) in result.items():
        print(f"| {name} | {launch:.2f} | {total:.2f} |")
    b, c = result["binding"][0], result["c_call"][0]
    print(f"binding - C call before the launch: {b - c:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
