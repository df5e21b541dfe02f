# SPDX-License-Identifier: Apache-2.0
"""A vocabulary-parallel head through torch.distributed: the split API's exchanges.

Each rank holds rows [start, start + V_r) of the head (W, b, a dense teacher's columns, the
online teacher's head rows) of a vocabulary of `total` ids over the ranks of a process group;
the input rows, labels and the sparse teacher (global ids) are every rank's. A call runs, on the
current stream, the steps of README.md "Tensor parallelism" with the group's collectives:
kljit_shard_stats, an all-gather of the records, where kljit_plan_shard_rounds says 2
kljit_shard_sums and a second all-gather, kljit_shard_finish, then an all-reduce of the loss and
of dX (a reduce-scatter of dX for a sequence-parallel caller, whose input is its own rows of the
batch, gathered first). The ops (kljit._ops) carry the shard as a string, what a compiled
graph can hold: "<group name>:<start>:<total>:<sequence parallel 0|1>"; the groups are kept here
by name (register). Checked mode agrees across the ranks before the first all-gather (one
all-reduce of the verdicts: a bad slice on one rank fails every rank, none writing its outputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from . import _lib

#: Process groups by name (register): what a shard string refers to.
_groups: Dict[str, Any] = {}


def register(group: Any) -> str:
    """The group's name, remembered so that a shard string can find it again."""
    name = group.group_name
    _groups[name] = group
    return name


@dataclass(frozen=True)
class Shard:
    """One rank's part of a vocabulary-parallel head."""

    group: Any
    rank: int
    size: int
    start: int
    total: int
    sequence_parallel: bool


def shard_string(group: Any, start: int, total: int, sequence_parallel: bool) -> str:
    return f"{register(group)}:{start}:{total}:{int(sequence_parallel)}"


def parse(shard: str) -> Shard:
    name, start, total, seq = shard.rsplit(":", 3)
    group = _groups.get(name)
    if group is None:
        raise ValueError(f"kljit: no process group named {name!r} was given to this process")
    return Shard(group, dist.get_rank(group), dist.get_world_size(group), int(start), int(total),
                 seq == "1")


def shard_of(shard: str, spec: Any) -> Optional[Shard]:
    """The Shard of a checked call (None for a whole head); its range must hold the weight."""
    if not shard:
        return None
    s = parse(shard)
    if spec.config.reduction == "none":
        raise ValueError("reduction='none' has no vocabulary-parallel form (the split API "
                         "reduces the rows)")
    if not (0 <= s.start and s.start + spec.vocab <= s.total):
        raise ValueError(f"rank {s.rank}'s vocabulary rows [{s.start}, {s.start + spec.vocab}) "
                         f"do not lie in the vocabulary [0, {s.total})")
    return s


def saved_floats(shard: str, rows: int, record_floats: int) -> int:
    """Two-phase `saved` of a shard: the gathered records [ranks][N][record_floats] of the whole
    batch (record_floats: the problem's layout, kljit_problem_layout)."""
    s = parse(shard)
    return s.size * rows * (s.size if s.sequence_parallel else 1) * record_floats


def gather_rows(input: torch.Tensor, shard: str) -> torch.Tensor:
    """The batch's rows: a sequence-parallel rank's own rows gathered from every rank (in rank
    order), else `input` itself."""
    if not shard or not shard.endswith(":1"):
        return input
    s = parse(shard)
    out = input.new_empty((input.shape[0] * s.size,) + tuple(input.shape[1:]))
    dist.all_gather_into_tensor(out, input.contiguous(), group=s.group)
    return out


def _checked(plan: Any, fn: Any, s: Shard, device: torch.device) -> None:
    """kljit_shard_stats; in checked mode every rank learns whether any rank's inputs failed
    (one all-reduce of the verdicts, the one synchronization of checked mode)."""
    if not plan.problem.flags & _lib.FLAG_CHECK_INPUTS:
        fn()
        return
    error = None
    try:
        fn()
    except _lib.KljitError as e:
        if e.status != _lib.Status.ERR_BAD_INPUT_DATA:
            raise
        error = e
    verdict = torch.tensor([0 if error is None else 1], dtype=torch.int32, device=device)
    dist.all_reduce(verdict, op=dist.ReduceOp.MAX, group=s.group)
    if error is not None:
        raise error
    if int(verdict.item()):
        raise _lib.KljitError(_lib.Status.ERR_BAD_INPUT_DATA, "kljit_shard_stats",
                              "another rank's inputs failed check_inputs (that rank's error "
                              "names the row and the defect); nothing was written")


def run_shard(call: Any, args: Any, loss: torch.Tensor, dx: Optional[torch.Tensor],
              saved: Optional[torch.Tensor] = None, finish_only: bool = False,
              sums: Tuple[torch.Tensor, ...] = ()) -> Optional[torch.Tensor]:
    """The sharded call with the group's collectives; returns dX summed over the ranks (the
    rank's own rows of it for a sequence-parallel caller). saved: where the gathered records go
    (two-phase forward) or come from (finish_only: two-phase backward, which reduces no loss).
    sums: outputs every rank wrote its part of, summed over the group like the loss (the
    optional row_loss and loss_parts; empty ones skipped)."""
    from ._ops import stream

    s, plan, n = call.checked.shard, call.plan, call.rows
    x = call.tensors[0]
    cur = stream(x.device)
    ws = call.workspace(_lib.Mode.FUSED, args)
    args.loss = loss.data_ptr()  # two-phase backward's finish writes it too (unused)
    rec = _lib.problem_layout(plan.problem).record_floats  # a record's floats, as declared
    records = (saved.view(s.size, n, rec) if saved is not None
               else torch.empty((s.size, n, rec), dtype=torch.float32, device=x.device))
    if not finish_only:
        mine = torch.empty((n, rec), dtype=torch.float32, device=x.device)
        _checked(plan, lambda: plan.shard_stats(cur, args, mine), s, x.device)
        dist.all_gather_into_tensor(records.view(-1, rec), mine, group=s.group)
        if plan.shard_rounds() == 2:  # the divergences with a row total: its second round
            plan.shard_sums(cur, args, records, s.size, mine)
            dist.all_gather_into_tensor(records.view(-1, rec), mine, group=s.group)
    plan.shard_finish(cur, args, records, s.size)
    del ws
    if not finish_only:
        dist.all_reduce(loss, group=s.group)
        for t in sums:
            if t.numel():
                dist.all_reduce(t, group=s.group)
    if dx is None or not dx.numel():
        return dx
    if not s.sequence_parallel:
        dist.all_reduce(dx, group=s.group)
        return dx
    mine_dx = dx.new_empty((n // s.size,) + tuple(dx.shape[1:]))
    dist.reduce_scatter_tensor(mine_dx, dx, group=s.group)
    return mine_dx


# ---- DTensor heads --------------------------------------------------------------------------


#: Plain tensor types: what no DTensor check needs to look at (the usual call's fast test).
_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter, type(None)))


def plain(given: Tuple[Any, ...]) -> bool:
    """Whether each of `given` is a torch.Tensor, an nn.Parameter or None (no subclass, no
    DTensor): one set test, on every call."""
    return _PLAIN.issuperset(map(type, given))


_types: list = []


def _dtensor_types() -> Optional[Tuple[Any, Any, Any]]:
    if not _types:
        try:
            from torch.distributed.tensor import DTensor, Replicate, Shard as DShard
            _types.append((DTensor, Replicate, DShard))
        except ImportError:  # a torch without DTensor: nothing is one
            _types.append(None)
    return _types[0]


def local_head(weight: Any, bias: Any, teacher: Any, teacher_weight: Any, teacher_bias: Any,
               input: Any) -> Tuple[Any, ...]:
    """DTensors resolved to local tensors (differentiably: their gradients come back as
    DTensors of the same placements): a head weight sharded over the vocabulary, Shard(0) on a
    1-D mesh, gives (its mesh's group, its first global row, the global V); a Replicate one is
    its local tensor. The bias, a dense teacher sharded on its last dimension and the online
    teacher's head follow the weight; a DTensor input is made whole (full_tensor). Returns
    (weight, bias, teacher, teacher_weight, teacher_bias, input, group or None, start,
    total)."""
    given = (weight, bias, teacher, teacher_weight, teacher_bias, input)
    types = None if plain(given) else _dtensor_types()
    if types is None or not any(isinstance(t, types[0]) for t in given):
        return weight, bias, teacher, teacher_weight, teacher_bias, input, None, 0, 0
    DTensor, Replicate, DShard = types
    group, start, total = None, 0, 0
    if isinstance(weight, DTensor):
        placements, mesh = tuple(weight.placements), weight.device_mesh
        if all(isinstance(p, Replicate) for p in placements):
            pass
        elif mesh.ndim == 1 and placements == (DShard(0),):
            group, total = mesh.get_group(), int(weight.shape[0])
            chunk = -(-total // mesh.size())  # torch.chunk's split, as Shard(0) lays it out
            start = min(mesh.get_local_rank() * chunk, total)
        else:
            raise ValueError(f"kljit: a DTensor head weight must be Replicate, or Shard(0) on a "
                             f"1-D mesh (the vocabulary over its ranks), got {placements} on a "
                             f"{mesh.ndim}-D mesh")

    def local(t: Any) -> Any:
        return t.to_local() if isinstance(t, DTensor) else t

    if isinstance(input, DTensor):
        input = input.full_tensor()
    return (local(weight), local(bias), local(teacher), local(teacher_weight),
            local(teacher_bias), input, group, start, total)
