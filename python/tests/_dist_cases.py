# SPDX-License-Identifier: Apache-2.0
"""The vocabulary-parallel cases of the binding, run by every rank of a torch.distributed group
(gloo), shared by the CPU plumbing test (test_distributed.py: a fake sharded library) and the
GPU test (test_gpu_distributed.py: libkljit on one GPU, every rank on it).

Every rank draws the same whole problem (seeded), takes its rows of the vocabulary (torch.chunk's
split, as a DTensor Shard(0) lays them out), calls the binding, and compares with the fp64
reference of the whole problem: the loss and dX (every rank's), its rows of dW and db. What it
finds goes back to the parent as one line per case; the parent asserts.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))


def rel(a: Any, b: Any) -> float:
    a, b = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
    den = float(b.norm())
    return float((a - b).norm()) / (den if den > 0 else 1.0)


class Problem:
    """One whole problem (the same on every rank) and this rank's part of the vocabulary."""

    def __init__(self, torch: Any, seed: int, n: int, h: int, v: int, dtype: Any, device: str,
                 rank: int, ranks: int, *, teacher: str = "dense_probs", bias: bool = True,
                 k: int = 8, ht: int = 24) -> None:
        g = torch.Generator().manual_seed(seed)
        f = torch.float32
        self.x = (torch.rand(n, h, generator=g, dtype=f) * 2 - 1).to(device, dtype)
        self.w = ((torch.rand(v, h, generator=g, dtype=f) * 2 - 1) * 0.3).to(device, dtype)
        self.b = ((torch.rand(v, generator=g, dtype=f) - 0.5) * 0.2).to(device, dtype) \
            if bias else None
        self.labels = torch.randint(0, v, (n,), generator=g).to(device)
        self.labels[::5] = -100
        zt = torch.randn(n, v, generator=g, dtype=f) * 2
        self.teacher = self.ids = self.vals = self.xt = self.wt = None
        self.form = teacher
        if teacher == "dense_probs":
            self.teacher = torch.softmax(zt, -1).to(device, dtype)
        elif teacher == "dense_logits":
            self.teacher = zt.to(device, dtype)
        elif teacher == "sparse_topk":
            top = torch.softmax(zt, -1).topk(k, dim=-1)
            self.ids, self.vals = top.indices.to(device), top.values.to(device, dtype)
        else:  # the online teacher
            self.xt = (torch.rand(n, ht, generator=g, dtype=f) * 2 - 1).to(device, dtype)
            self.wt = ((torch.rand(v, ht, generator=g, dtype=f) * 2 - 1) * 0.5).to(device, dtype)
        chunk = -(-v // ranks)
        self.start, self.stop = min(rank * chunk, v), min((rank + 1) * chunk, v)
        self.rank, self.ranks, self.n = rank, ranks, n

    def part(self, t: Any, dim: int = 0) -> Any:
        """This rank's rows (dim 0) or columns (dim 1) of the vocabulary."""
        return None if t is None else t.narrow(dim, self.start, self.stop - self.start) \
            .contiguous()

    def teacher_kwargs(self, sharded: bool) -> Dict[str, Any]:
        if self.form == "sparse_topk":
            return {"teacher_ids": self.ids, "teacher_values": self.vals}
        if self.form == "dense_hidden":
            return {"teacher_input": self.xt,
                    "teacher_weight": self.part(self.wt) if sharded else self.wt}
        return {"teacher": self.part(self.teacher, 1) if sharded else self.teacher}


def run_cases(kljit: Any, torch: Any, dist: Any, cases: List[Dict[str, Any]], device: str,
              dtype: Any, tol: Dict[str, float]) -> List[str]:
    """Runs every case on this rank; returns one line per case: 'ok <name> <errors>' or
    'FAIL <name> <errors or the exception>'."""
    from kljit.reference import kl_div_fp64

    rank, ranks = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    out = []
    for case in cases:
        name = case["name"]
        try:
            p = Problem(torch, case.get("seed", 1), case.get("n", 40), case.get("h", 32),
                        case.get("v", 101), dtype, device, rank, ranks,
                        teacher=case.get("teacher", "dense_probs"), bias=case.get("bias", True))
            options = dict(case.get("options", {}))  # the loss's (LossConfig) options
            how = case.get("how", "functional")
            x = p.x.clone().requires_grad_()
            w_part = p.part(p.w).requires_grad_()
            b_part = p.part(p.b).requires_grad_() if p.b is not None else None
            kw = dict(labels=p.labels, **p.teacher_kwargs(True))
            items = case.get("num_items_in_batch")
            if items is not None:
                kw["num_items_in_batch"] = items if case.get("items_as_int") else \
                    torch.tensor(items, device=device)
            seq = case.get("sequence_parallel", False)
            rows = p.n // ranks
            x_in = x[rank * rows:(rank + 1) * rows] if seq else x
            if case.get("poison_rank") == rank:  # checked mode: a NaN in this rank's slice
                kw["teacher"] = kw["teacher"].clone()
                kw["teacher"][3, 1] = float("nan")
            if how == "functional":
                loss = kljit.fused_linear_kl_div(x_in, w_part, bias=b_part, process_group=group,
                                                 vocab_start=p.start, vocab_total=p.w.shape[0],
                                                 sequence_parallel=seq, **kw, **options)
            elif how == "dtensor":
                from torch.distributed.device_mesh import init_device_mesh
                from torch.distributed.tensor import DTensor, Shard

                mesh = init_device_mesh(device.split(":")[0], (ranks,))

                def sharded(t: Any) -> Any:  # the rank's rows as a DTensor: no collective
                    return DTensor.from_local(p.part(t), mesh, [Shard(0)], run_check=False,
                                              shape=t.shape, stride=t.stride()).requires_grad_()

                w_part, b_part = sharded(p.w.detach()), sharded(p.b.detach())
                if case.get("dtensor_input"):  # the hidden states as a Replicate DTensor
                    from torch.distributed.tensor import Replicate

                    x_in = DTensor.from_local(x_in, mesh, [Replicate()], run_check=False)
                loss = kljit.fused_linear_kl_div(x_in, w_part, bias=b_part, **kw, **options)
            else:  # the module that owns its shard
                head = kljit.FusedLinearKLDiv(p.x.shape[1], p.w.shape[0], bias=True,
                                              process_group=group, device=device, dtype=dtype,
                                              **options)
                with torch.no_grad():
                    head.weight.copy_(p.part(p.w))
                    head.bias.copy_(p.part(p.b))
                loss = head(x_in, kw.pop("teacher"), sequence_parallel=seq, **kw)
                w_part, b_part = head.weight, head.bias
            if case.get("expect_error"):
                out.append(f"FAIL tp={ranks} rank={rank} {name}: no error raised")
                continue
            loss.backward()
            ref = kl_div_fp64(p.x, p.w, p.teacher, bias=p.b, labels=p.labels,
                              teacher_ids=p.ids, teacher_values=p.vals, teacher_input=p.xt,
                              teacher_weight=p.wt, **options)
            factor = 1.0
            if items is not None:
                factor = float((p.labels != -100).sum()) / float(items)
            def local(t: Any) -> Any:
                return t.to_local() if hasattr(t, "to_local") else t

            dx_ref = ref["grad_input"] * factor
            if seq:  # the rank's rows have their gradient, the others none
                dx_ref[:rank * rows] = 0
                dx_ref[(rank + 1) * rows:] = 0
            err = {"loss": rel(loss, ref["loss"] * factor), "dX": rel(x.grad, dx_ref),
                   "dW": rel(local(w_part.grad), p.part(ref["grad_weight"]) * factor)}
            if b_part is not None:
                err["db"] = rel(local(b_part.grad), p.part(ref["grad_bias"]) * factor)
            if tol.get("unsharded"):  # the same call on the whole head, unsharded
                whole = kljit.fused_linear_kl_div(
                    p.x, p.w, bias=p.b, labels=p.labels, **p.teacher_kwargs(False),
                    num_items_in_batch=kw.get("num_items_in_batch"), **options)
                err["loss vs unsharded"] = rel(loss, whole)
            bad = [k for k, e in err.items()
                   if not e < tol["loss" if k.startswith("loss") else "grad"]]
            text = " ".join(f"{k} {e:.1e}" for k, e in err.items())
            out.append(f"{'FAIL' if bad else 'ok'} tp={ranks} rank={rank} {name}: {text}")
        except Exception as e:  # noqa: BLE001 - every case reports, none stops the others
            if case.get("expect_error") and case["expect_error"] == getattr(e, "name", None):
                out.append(f"ok tp={ranks} rank={rank} {name}: {e.name} as expected")
                continue
            out.append(f"FAIL tp={ranks} rank={rank} {name}: "
                       + traceback.format_exc().replace("\n", " | "))
    return out


def worker(rank: int, ranks: int, port: int, setup: str, cases: List[Dict[str, Any]],
           out_dir: str) -> None:
    """One rank: joins the gloo group, lets `setup` (a function of the calling test module,
    'module:function') prepare the process (a fake library, or the GPU and a transport), runs
    the cases and writes its lines to out_dir/rank<r>.txt."""
    sys.path.insert(0, HERE)
    import importlib

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    lines: List[str]
    try:
        module, fn = setup.split(":")
        device, dtype, tol = getattr(importlib.import_module(module), fn)(rank)
        import kljit

        lines = run_cases(kljit, torch, dist, cases, device, dtype, tol)
    except Exception:  # noqa: BLE001
        lines = [f"FAIL tp={ranks} rank={rank} setup: "
                 + traceback.format_exc().replace("\n", " | ")]
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def spawn(ranks: int, setup: str, cases: List[Dict[str, Any]], out_dir: str) -> List[str]:
    """Runs `cases` on `ranks` processes; returns every rank's lines."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port on the loopback
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(ranks, port, setup, cases, out_dir), nprocs=ranks, join=True)
    lines = []
    for r in range(ranks):
        with open(os.path.join(out_dir, f"rank{r}.txt")) as f:
            lines += [line for line in f.read().splitlines() if line]
    return lines



def check_ranks(test: Any, ranks: int, setup: str, cases: List[Dict[str, Any]], name: str) -> None:
    """A test's assertion: every rank ran every case and reported 'ok' (each line printed)."""
    from _util import out_dir

    lines = spawn(ranks, setup, cases, str(out_dir(name)))
    for line in lines:
        print(" ", line, file=sys.stderr)
    test.assertEqual([line for line in lines if not line.startswith("ok")], [])
    test.assertEqual(len(lines), ranks * len(cases))
