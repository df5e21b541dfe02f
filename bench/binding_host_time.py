# SPDX-License-Identifier: Apache-2.0
"""The binding's host time against its C call's, with no GPU and no library.

    python3 bench/binding_host_time.py [--calls 3000] [--warmup 200] [--shape 64x64x256]

Issue 28 judges the binding against its C call on an idle GPU (bench/compare.py's kljit_fused
and kljit_c): there the GPU waits for the host until the first kernel is launched, so what the
binding does in Python before the library's launch is added to the call's time. This measures
that host time alone, on CPU tensors (bf16, dense teacher probabilities, batchmean, config=),
the plan replaced by one whose execute only notes the time (the plumbing tests' way in,
python/tests/test_plumbing.py): for each path, alternately, the median of --calls calls from
the Python call to the launch and to the return.

  binding  kljit.fused_linear_kl_div(x, w, teacher, config=...) with x and w requiring grad
           (autograd Function, checks remembered by layout, outputs and workspace allocated)
  c_call   compare.py's kljit_c: the same Call made once, then per call its arguments, loss,
           gradients and workspace from torch's allocator, and the launch

The difference between the two "to launch" medians is what an idle GPU sees of the binding;
each host runs Python at its own speed (the device's was 3-12x slower than the 2-core build
VM in bench/RESULTS.md), so run it on the machine whose GPU is judged. Needs torch (CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))


class NotingPlan:
    """A kljit_plan stand-in: sizes as small as the binding accepts; execute notes the time."""

    launched = 0

    def __init__(self, problem: Any) -> None:
        self.problem = problem

    def workspace_size(self, mode: Any, rows: int) -> int:
        return 4096

    def saved_size(self, rows: int) -> int:
        return 4096

    def chunk_rows(self, rows: int) -> int:
        return rows

    def execute(self, mode: Any, stream: int, args: Any) -> None:
        NotingPlan.launched = time.perf_counter_ns()


def paths(n: int, h: int, v: int) -> Dict[str, Callable[[], Any]]:
    """The two calls, on CPU tensors, ready to time."""
    import torch

    import kljit
    from kljit import _ops
    from kljit._lib import Mode

    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, h, generator=g, dtype=torch.bfloat16).requires_grad_()
    w = torch.randn(v, h, generator=g, dtype=torch.bfloat16).requires_grad_()
    t = torch.softmax(torch.randn(n, v, generator=g), -1).to(torch.bfloat16)
    config = kljit.LossConfig(reduction="batchmean")
    made: Dict[str, Any] = {}

    def binding() -> Any:
        return kljit.fused_linear_kl_div(x, w, t, config=config)

    def c_call() -> Any:
        if "call" not in made:
            made["call"] = _ops.Call.make(config.key, x.detach(), w.detach(), None, t, None,
                                          None, None, None, None, None, None, float("nan"))
        call = made["call"]
        args = call.args()
        loss = call.loss()
        args.loss = loss.data_ptr()
        call.grads(w, None, _ops.WANT_DX | _ops.WANT_DW, args)
        call.run(Mode.FUSED, args)
        return loss

    return {"binding": binding, "c_call": c_call}


def measure(calls: Dict[str, Callable[[], Any]], repeats: int,
            warmup: int) -> Dict[str, Tuple[float, float]]:
    """Each path's median us to the launch and to the return, timed alternately."""
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    times: Dict[str, List[Tuple[int, int]]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = time.perf_counter_ns()
            fn()
            t1 = time.perf_counter_ns()
            times[name].append((NotingPlan.launched - t0, t1 - t0))
    return {name: (statistics.median(a for a, _ in ts) / 1e3,
                   statistics.median(b for _, b in ts) / 1e3) for name, ts in times.items()}


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--shape", default="64x64x256", help="NxHxV of the CPU tensors")
    a = p.parse_args(argv)
    n, h, v = (int(s) for s in a.shape.split("x"))
    from kljit import _lib, _ops

    patches = [mock.patch.object(_ops, "REQUIRE_CUDA", False),
               mock.patch.object(_ops, "stream", lambda device: 0),
               mock.patch.object(_lib, "get_plan", lambda problem, device: NotingPlan(problem))]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        _lib.clear_plan_cache()
        result = measure(paths(n, h, v), a.calls, a.warmup)
    import torch

    print(f"host time, us (median of {a.calls} alternating calls; torch {torch.__version__}, "
          f"Python {sys.version.split()[0]}, {n}x{h}x{v} bf16 on the CPU)")
    print("| path | to the launch | to the return |")
    print("|---|---|---|")
    for name, (launch, total) in result.items():
        print(f"| {name} | {launch:.2f} | {total:.2f} |")
    b, c = result["binding"][0], result["c_call"][0]
    print(f"binding - C call before the launch: {b - c:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
