# SPDX-License-Identifier: Apache-2.0
"""The binding's vocabulary-parallel path on one GPU with several processes: tp = 2, 3 and 4
ranks of a gloo group, every one on the same GPU (NCCL refuses two ranks on one device), each
holding its rows of the head (torch.chunk's split: V = 3001 gives uneven ranks), against the
fp64 reference of the whole problem and the unsharded call: the loss (every rank's), dX, the
rank's rows of dW and db, both modes; dense probabilities and logits, the sparse teacher and
the online teacher; the forward KL, the reverse KL and the JSD (two exchanges of records), CE
mixing; num_items_in_batch, sequence parallelism, a DTensor weight, the module that owns its
shard, and checked mode (a NaN in one rank's teacher slice fails every rank).

gloo lacks some collectives for CUDA tensors, so each rank's process stages them through host
memory (the test's transport, `stage_through_host`): the library calls torch.distributed's
all_gather_into_tensor, all_reduce and reduce_scatter_tensor as it would with NCCL, and the
test's versions copy the CUDA tensors to the host, run gloo there and copy back.
Tolerances: the loss 1e-5 relative (fp32: fp32 logits, as test_gpu_binding.py), the gradients
1e-4 in fp32 and 1e-2 in bf16 (G rounded to bf16). Skips (77) without torch, CUDA or the
library. One command: ctest -R gpu.python.distributed (or run.py test_gpu_distributed...).
"""

from __future__ import annotations

import unittest
from typing import Any, Tuple

from _util import labels, require

import _dist_cases


def stage_through_host() -> None:
    """The test's transport: torch.distributed's collectives on CUDA tensors, run by gloo on
    host copies (the library's calls are unchanged)."""
    import torch.distributed as dist

    gather, reduce, scatter = (dist.all_gather_into_tensor, dist.all_reduce,
                               dist.reduce_scatter_tensor)

    def all_gather_into_tensor(out: Any, inp: Any, group: Any = None, async_op: bool = False):
        o = out.cpu()
        gather(o, inp.cpu(), group=group)
        out.copy_(o)

    def all_reduce(t: Any, op: Any = dist.ReduceOp.SUM, group: Any = None,
                   async_op: bool = False):
        c = t.cpu()
        reduce(c, op=op, group=group)
        t.copy_(c)

    def reduce_scatter_tensor(out: Any, inp: Any, op: Any = dist.ReduceOp.SUM,
                              group: Any = None, async_op: bool = False):
        o = out.cpu()
        scatter(o, inp.cpu(), op=op, group=group)
        out.copy_(o)

    dist.all_gather_into_tensor = all_gather_into_tensor
    dist.all_reduce = all_reduce
    dist.reduce_scatter_tensor = reduce_scatter_tensor


def gpu_setup(rank: int) -> Tuple[str, Any, Any]:
    """A rank's process: the one GPU, fp32, the transport above."""
    import torch

    torch.cuda.set_device(0)
    stage_through_host()
    return "cuda", torch.float32, {"loss": 1e-5, "grad": 1e-4, "unsharded": True}


def gpu_setup_bf16(rank: int) -> Tuple[str, Any, Any]:
    device, _, tol = gpu_setup(rank)
    import torch

    return device, torch.bfloat16, {**tol, "grad": 1e-2}


V = 3001
CASES = [
    {"name": "dense probs, fused"},
    {"name": "dense probs, two_phase, T=2 with T^2", "options": {
        "mode": "two_phase", "temperature": 2.0, "scale_t_squared": True}},
    {"name": "dense logits, mean", "teacher": "dense_logits", "options": {
        "teacher_form": "dense_logits", "reduction": "mean"}},
    {"name": "JSD (two exchanges), fused", "teacher": "dense_logits", "options": {
        "teacher_form": "dense_logits", "divergence": "jsd", "beta": 0.5}},
    {"name": "JSD (two exchanges), two_phase", "teacher": "dense_logits", "options": {
        "teacher_form": "dense_logits", "divergence": "jsd", "beta": 0.5, "mode": "two_phase"}},
    {"name": "reverse KL", "options": {"divergence": "reverse_kl"}},
    {"name": "CE mixing", "options": {"hard_weight": 0.3, "soft_weight": 0.7}},
    {"name": "sparse top-8, fused", "teacher": "sparse_topk", "bias": False},
    {"name": "sparse top-8, two_phase, bucket", "teacher": "sparse_topk", "options": {
        "mode": "two_phase", "tail": "bucket"}},
    {"name": "online teacher, JSD", "teacher": "dense_hidden", "bias": False, "options": {
        "divergence": "jsd", "beta": 0.5}},
    {"name": "online teacher, forward KL, two_phase", "teacher": "dense_hidden", "bias": False,
     "options": {"mode": "two_phase"}},
    {"name": "num_items_in_batch (a device tensor)", "num_items_in_batch": 1000.0},
    {"name": "num_items_in_batch (an int), two_phase", "num_items_in_batch": 777,
     "items_as_int": True, "options": {"mode": "two_phase"}},
    {"name": "sequence parallel", "sequence_parallel": True, "n": 48},
    {"name": "a DTensor weight", "how": "dtensor"},
    {"name": "the module owns its shard", "how": "module"},
    {"name": "a DTensor input and weight, two_phase", "how": "dtensor", "dtensor_input": True,
     "options": {"mode": "two_phase"}},
    {"name": "checked mode: a NaN on rank 1 fails every rank", "poison_rank": 1,
     "expect_error": "KLJIT_ERR_BAD_INPUT_DATA", "options": {"check_inputs": True}},
]
for _case in CASES:
    _case.setdefault("v", V)
    _case.setdefault("n", 60)
    _case.setdefault("h", 64)


@labels("torch")
class GpuDistributedTest(unittest.TestCase):
    def setUp(self) -> None:
        torch = require("torch")
        if not torch.cuda.is_available():
            raise unittest.SkipTest("no CUDA device visible to torch")
        if not torch.distributed.is_available():
            raise unittest.SkipTest("this torch has no torch.distributed")
        import kljit

        try:
            kljit.load_library()
        except kljit.LibraryNotFound as e:
            raise unittest.SkipTest(f"kljit cannot run here: {e}")

    def run_ranks(self, ranks: int, setup: str = "gpu_setup") -> None:
        _dist_cases.check_ranks(self, ranks, f"test_gpu_distributed:{setup}", CASES,
                                f"gpu-distributed-tp{ranks}-{setup}")

    def test_two_ranks_match_the_whole_problem_in_fp32(self) -> None:
        self.run_ranks(2)

    def test_three_ranks_match_the_whole_problem_in_fp32(self) -> None:
        self.run_ranks(3)

    def test_four_ranks_match_the_whole_problem_in_fp32(self) -> None:
        self.run_ranks(4)

    def test_two_ranks_match_the_whole_problem_in_bf16(self) -> None:
        self.run_ranks(2, "gpu_setup_bf16")


if __name__ == "__main__":
    unittest.main()
