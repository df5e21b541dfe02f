# SPDX-License-Identifier: Apache-2.0
"""The binding's vocabulary-parallel plumbing on CPU: torch.distributed (gloo) ranks against a
fake sharded library, and FSDP2 and DTensor heads. Needs torch, no GPU.

FakeShardPlan stands in for a sharded kljit_plan: it reads the kljit_args and the records the
way the split API does (kljit_shard_stats writes {m, d, sum p} of the rank's columns per row,
kljit_shard_finish merges the gathered records in rank order and writes the rank's part of the
loss, its partial dX and its rows of dW and db), for the forward KL of dense probabilities. So
the ranks check, against the fp64 reference of the whole problem, that the binding gathers the
records of every rank in order, sums the loss and dX over the group (or reduce-scatters dX to a
sequence-parallel rank's rows), keeps dW and db the rank's rows, takes the vocabulary range of
a process group, of the module that owns its shard and of a DTensor weight, passes the global
divisor, and runs two-phase mode from the saved records. The library's own arithmetic on shards
is the GPU tests' business (test_gpu_distributed.py).
"""

from __future__ import annotations

import ctypes
import os
import unittest
from typing import Any, Tuple
from unittest import mock

from _util import labels, require

import _dist_cases


class FakeShardPlan:
    """The split API for the forward KL of dense probabilities, in float64 on CPU tensors."""

    def __init__(self, problem: Any) -> None:
        self.problem = problem

    def workspace_size(self, mode: Any, rows: int) -> int:
        return 4096

    def chunk_rows(self, rows: int) -> int:
        return 256

    def shard_rounds(self) -> int:
        return 1

    @staticmethod
    def _view(ptr: int, shape: Tuple[int, ...], dtype: Any) -> Any:
        import torch

        n = 1
        for s in shape:
            n *= s
        size = torch.empty((), dtype=dtype).element_size()
        buf = (ctypes.c_char * (n * size)).from_address(ptr)
        return torch.frombuffer(buf, dtype=dtype).view(shape)

    def _logits(self, args: Any) -> Tuple[Any, Any, Any, Any]:
        import torch

        pb, n = self.problem, args.rows
        f32 = torch.float32
        x = self._view(args.input, (n, pb.hidden), f32).double()
        w = self._view(args.weight, (pb.vocab, pb.hidden), f32).double()
        s = x @ w.T
        if args.bias:
            s = s + self._view(args.bias, (pb.vocab,), f32).double()
        p = self._view(args.teacher, (n, pb.vocab), f32).double()
        return x, w, s, p

    def shard_stats(self, stream: int, args: Any, stats: Any) -> None:
        import torch

        _, _, s, p = self._logits(args)
        m = s.max(-1).values
        stats.zero_()
        stats[:, 0], stats[:, 1] = m, torch.exp(s - m[:, None]).sum(-1)
        stats[:, 2] = p.sum(-1)

    def shard_finish(self, stream: int, args: Any, gathered: Any, shards: int) -> None:
        import torch

        pb, n = self.problem, args.rows
        assert shards == pb.shards and tuple(gathered.shape) == (shards, n, 8)
        x, w, s, p = self._logits(args)
        rec = gathered.double()
        top = rec[:, :, 0].max(0).values
        lse = top + torch.log((rec[:, :, 1] * torch.exp(rec[:, :, 0] - top)).sum(0))
        mass = rec[:, :, 2].sum(0)
        kept = torch.ones(n, dtype=torch.bool)
        if args.labels:
            kept = self._view(args.labels, (n,), torch.int64) != pb.ignore_index
        red = int(pb.reduction)
        count = float(self._view(args.divisor, (1,), torch.float64)[0]) if args.divisor \
            else float(kept.sum())
        c = 1.0 if red == 1 else 1.0 / count if red == 2 else 1.0 / (count * pb.vocab_total)
        part = (p * (torch.log(p.clamp_min(pb.eps)) - s)).sum(-1) + p.sum(-1) * lse
        g = c * (mass[:, None] * torch.exp(s - lse[:, None]) - p) * kept[:, None]
        self._view(args.loss, (), torch.float32).fill_(c * float(part[kept].sum()))
        scale = args.grad_scale
        if args.grad_input:
            self._view(args.grad_input, (n, pb.hidden), torch.float32).copy_(g @ w * scale)
        if args.grad_weight:
            self._view(args.grad_weight, (pb.vocab, pb.hidden), torch.float32).copy_(
                g.T @ x * scale)
        if args.grad_bias:
            self._view(args.grad_bias, (pb.vocab,), torch.float32).copy_(g.sum(0) * scale)


def fake_setup(rank: int) -> Tuple[str, Any, Any]:
    """A rank's process: CPU tensors against FakeShardPlan."""
    import torch

    from kljit import _lib, _ops

    _ops.REQUIRE_CUDA = False
    _ops.stream = lambda device: 0
    _ops.scale_in_place = lambda ts, g: [t.mul_(g) for t in ts]
    _lib.get_plan = lambda problem, device: FakeShardPlan(problem)
    return "cpu", torch.float32, {"loss": 1e-5, "grad": 1e-4}


CASES = [
    {"name": "functional fused"},
    {"name": "functional two_phase", "options": {"mode": "two_phase"}},
    {"name": "functional mean, no bias", "options": {"reduction": "mean"}, "bias": False},
    {"name": "num_items_in_batch (a tensor)", "num_items_in_batch": 100.0},
    {"name": "num_items_in_batch (an int), two_phase", "num_items_in_batch": 77,
     "items_as_int": True, "options": {"mode": "two_phase"}},
    {"name": "sequence parallel", "sequence_parallel": True, "n": 36},
    {"name": "sequence parallel, two_phase", "sequence_parallel": True, "n": 36,
     "options": {"mode": "two_phase"}},
    {"name": "the module owns its shard", "how": "module"},
    {"name": "a DTensor input and weight, two_phase", "how": "dtensor", "dtensor_input": True,
     "options": {"mode": "two_phase"}},
    {"name": "a DTensor weight, Shard(0)", "how": "dtensor"},
]


@labels("torch")
class DistributedPlumbingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.torch = require("torch")
        if not self.torch.distributed.is_available():
            raise unittest.SkipTest("this torch has no torch.distributed")

    def run_ranks(self, ranks: int) -> None:
        _dist_cases.check_ranks(self, ranks, "test_distributed:fake_setup", CASES,
                                f"distributed-tp{ranks}")

    def test_two_ranks_match_the_whole_problem(self) -> None:
        self.run_ranks(2)

    def test_three_ranks_of_an_uneven_vocabulary_match_the_whole_problem(self) -> None:
        self.run_ranks(3)  # V = 101: ranks of 34, 34 and 33 rows


@labels("torch")
class FsdpAndDTensorHeadTest(unittest.TestCase):
    """FSDP2 on one process (gloo, CPU): the head module's weight is a DTensor parameter,
    unsharded by FSDP for forward; the loss runs on the plain tensor and the gradient lands on
    the sharded parameter. A Replicate DTensor weight is its local tensor."""

    def setUp(self) -> None:
        self.torch = require("torch")
        import socket

        import torch.distributed as dist

        from kljit import _lib, _ops

        if dist.is_initialized():
            raise unittest.SkipTest("a process group is already initialized here")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=0, world_size=1)
        self.addCleanup(dist.destroy_process_group)
        from test_plumbing import FakePlan

        for p in (mock.patch.object(_ops, "REQUIRE_CUDA", False),
                  mock.patch.object(_ops, "stream", lambda device: 0),
                  mock.patch.object(_ops, "scale_in_place",
                                          lambda ts, g: [t.mul_(g) for t in ts]),
                  mock.patch.object(_lib, "get_plan", lambda pb, device: FakePlan(pb))):
            p.start()
            self.addCleanup(p.stop)
        _lib.clear_plan_cache()
        self.addCleanup(_lib.clear_plan_cache)

    def test_an_fsdp2_head_gets_its_gradient_on_the_sharded_parameter(self) -> None:
        torch = self.torch
        import kljit
        from kljit.reference import kl_div_fp64
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        torch.manual_seed(0)
        body = torch.nn.Linear(8, 8)
        head = kljit.FusedLinearKLDiv(8, 40, bias=True, mode="fused")

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body, self.head = body, head

            def forward(self, x: Any, teacher: Any) -> Any:
                return self.head(self.body(x), teacher)

        model = Model()
        mesh = init_device_mesh("cpu", (1,))
        fully_shard(head, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self.assertIsInstance(head.weight, DTensor)
        x = torch.randn(6, 8)
        teacher = torch.softmax(torch.randn(6, 40), -1)
        for mode in ("fused", "two_phase"):
            head.config = kljit.LossConfig(mode=mode)
            model.zero_grad()
            loss = model(x, teacher)
            loss.backward()
            self.assertIsInstance(head.weight.grad, DTensor, mode)
            w = head.weight.full_tensor().detach()
            b = head.bias.full_tensor().detach()
            h = torch.nn.functional.linear(x, body.weight.full_tensor(),
                                           body.bias.full_tensor()).detach()
            ref = kl_div_fp64(h, w, teacher, bias=b)
            got = head.weight.grad.full_tensor().double()
            err = float((got - ref["grad_weight"]).norm() / ref["grad_weight"].norm())
            self.assertLess(err, 1e-5, mode)
            self.assertLess(abs(float(loss) - float(ref["loss"])), 1e-5 * float(ref["loss"]))

    def test_a_replicate_dtensor_weight_is_its_local_tensor(self) -> None:
        torch = self.torch
        import kljit
        from kljit.reference import kl_div_fp64
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

        mesh = init_device_mesh("cpu", (1,))
        w = torch.randn(40, 8) * 0.3
        wd = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
        x = torch.randn(6, 8, requires_grad=True)
        teacher = torch.softmax(torch.randn(6, 40), -1)
        loss = kljit.fused_linear_kl_div(x, wd, teacher)
        loss.backward()
        ref = kl_div_fp64(x.detach(), w, teacher)
        self.assertIsInstance(wd.grad, DTensor)
        err = float((wd.grad.to_local().double() - ref["grad_weight"]).norm()
                    / ref["grad_weight"].norm())
        self.assertLess(err, 1e-5)

    def test_a_head_weight_with_no_elements_is_refused_naming_zero3(self) -> None:
        torch = self.torch
        import kljit

        with self.assertRaises(ValueError) as cm:  # a ZeRO-3 parameter outside its gather
            kljit.fused_linear_kl_div(torch.randn(6, 8), torch.empty(0), torch.rand(6, 40))
        self.assertIn("GatheredParameters", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
