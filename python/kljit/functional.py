# SPDX-License-Identifier: Apache-2.0
"""The fused linear + KL loss for PyTorch: autograd, autocast, torch.compile and
torch.distributed over libkljit.

    loss = fused_linear_kl_div(x, w, teacher_probs)                       # dense, fused
    loss = fused_linear_kl_div(x, w, teacher_ids=ids, teacher_values=vals,  # sparse top-K
                               mode="two_phase", tail="renorm")
    loss.backward()

The work is the torch.library ops of kljit._ops, one per execution mode of include/kljit.h,
under one torch.autograd.Function per mode, in eager mode as under torch.compile (which traces a
model through the loss without a graph break); CUDA graphs can capture it (no host
synchronization on the default path):

- mode='fused': kljit_fused computes loss, dX, dW (, db) in forward; backward multiplies them
  in place by the upstream gradient (kljit_scale, which costs nothing when it is exactly 1): a
  fused loss can be backpropagated once. Three GEMMs per chunk, the fastest when the loss is
  the last op. `grad_scale=` (a loss scaler's scale, known at forward time) makes the gradients
  come out already scaled, so fp16 ones are not rounded before the scale arrives.
- mode='two_phase': kljit_forward computes the loss and O(N) statistics; backward runs
  kljit_backward with the upstream gradient (a scalar, or one per row for reduction='none'),
  recomputing each chunk's logits. Four GEMMs per chunk, no N x H or V x H buffers held
  between forward and backward.

Mixed precision: under torch.autocast the input is cast to the autocast dtype, as F.linear
does; an fp32 weight (a master weight) is cast once per call to the input's dtype, and dW and
db come back in fp32, accumulated in fp32 straight into the gradient. Tensors are passed to C
as data_ptr(), on torch.cuda.current_stream(); outputs and the workspace come from torch's
allocator. Plans are cached per (problem, device). No gradient flows to the teacher (nor to
the online teacher's teacher_input and teacher_weight).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Union

import torch

from . import _dist, _ops
from ._checks import LossConfig, config_from_options

__all__ = ["fused_linear_kl_div", "LossComponents"]


class LossComponents(NamedTuple):
    """fused_linear_kl_div(..., return_components=True): the loss (differentiable, as without
    it) and, without gradient, each row's loss (the input's leading shape; t2 and the row
    weight in, the reduction's constant not; 0 for an ignored row) and the loss's two parts,
    soft = soft_weight (T^2) divergence and hard = hard_weight CE, reduced like the loss (they
    add up to it). fp32 tensors on the input's device."""

    loss: torch.Tensor
    row_loss: torch.Tensor
    soft: torch.Tensor
    hard: torch.Tensor


def _flatten(name: str, t: Any, trailing: int) -> Any:
    """[..., D] -> [N, D] (or [...] -> [N] for trailing=0) as a view; other layouts are left
    for the checks to report."""
    if not isinstance(t, torch.Tensor) or t.dim() <= trailing + 1:
        return t
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major, dense); call .contiguous() on "
                         f"it first")
    return t.view(-1, *t.shape[t.dim() - trailing:]) if trailing else t.view(-1)


def _autocast_dtype(input: Any) -> Any:
    """The dtype torch's F.linear would cast `input` to under autocast, or None (autocast off,
    the usual case: then it is the one question asked)."""
    if not isinstance(input, torch.Tensor):
        return None
    device = "cuda" if input.is_cuda else input.device.type  # is_cuda: the cheaper question
    if not torch.is_autocast_enabled(device) or not input.is_floating_point():
        return None
    dtype = torch.get_autocast_dtype(device)
    return dtype if dtype in (torch.float16, torch.bfloat16) else None


def _cast(dtype: Any, *tensors: Any, head: bool = False) -> "tuple[Any, ...]":
    """Floating-point tensors in `dtype`, as autocast casts F.linear's, except that with head an
    fp32 weight (and bias) stays fp32 for the op to cast once and to return fp32 gradients
    for."""
    return tuple(t if not isinstance(t, torch.Tensor) or not t.is_floating_point()
                 or t.dtype == dtype or (head and t.dtype == torch.float32) else t.to(dtype)
                 for t in tensors)


def _divisor(num_items: Any, device: Any) -> Optional[torch.Tensor]:
    """num_items_in_batch as the library takes it: a float64 tensor of one element on the
    input's device, made without a host synchronization (an int is filled in on the device)."""
    if num_items is None:
        return None
    if isinstance(num_items, torch.Tensor):
        if num_items.numel() != 1:
            raise ValueError(f"num_items_in_batch must hold one number, got a tensor of shape "
                             f"{list(num_items.shape)}")
        return num_items.detach().to(device=device, dtype=torch.float64).reshape(1)
    if isinstance(num_items, bool) or not isinstance(num_items, (int, float)):
        raise TypeError(f"num_items_in_batch must be an int, a float or a tensor, got "
                        f"{type(num_items).__name__}")
    return torch.full((1,), float(num_items), dtype=torch.float64, device=device)


def fused_linear_kl_div(input: torch.Tensor, weight: torch.Tensor,
                        teacher: Optional[torch.Tensor] = None, *,
                        bias: Optional[torch.Tensor] = None,
                        labels: Optional[torch.Tensor] = None,
                        teacher_ids: Optional[torch.Tensor] = None,
                        teacher_values: Optional[torch.Tensor] = None,
                        temperature: Optional[float] = None,
                        grad_scale: Optional[float] = None,
                        teacher_input: Optional[torch.Tensor] = None,
                        teacher_weight: Optional[torch.Tensor] = None,
                        teacher_bias: Optional[torch.Tensor] = None,
                        num_items_in_batch: Any = None,
                        process_group: Any = None,
                        vocab_start: Optional[int] = None,
                        vocab_total: Optional[int] = None,
                        sequence_parallel: bool = False,
                        accumulate_into_main_grad: bool = False,
                        row_weights: Optional[torch.Tensor] = None,
                        return_components: bool = False,
                        config: Optional[LossConfig] = None,
                        **options: Any) -> Union[torch.Tensor, LossComponents]:
    """KL(teacher || softmax((input @ weight.T + bias) / T)), fused with the head's GEMMs.

    input [..., H] (fp32, fp16 or bf16) and weight [V, H]: the input's dtype, or fp32 with
    fp16/bf16 input (mixed precision: dW and db come back in fp32). bias [V] optional, the
    weight's dtype. Under torch.autocast the input is cast to the autocast dtype first.
    teacher [..., V] (dense forms: probs, log-probs or logits, any float dtype) or
    teacher_ids [..., K] (int32/int64) with teacher_values [..., K] (sparse top-K form).
    labels [...] (int32/int64) optional: rows whose label is ignore_index are excluded.
    temperature: T. With keyword options it is the loss's T; with a LossConfig (as the modules
        pass) it is this call's T and needs temperature_mode='runtime' unless it equals the
        config's.
    grad_scale: the upstream gradient backward will most likely get (a GradScaler's
        get_scale()), finite and > 0. Fused mode computes the gradients times it (the fp16 G
        keeps its range); backward then scales by upstream / grad_scale, free when they are
        equal. Two-phase mode divides the upstream gradient by it for the kernels and
        multiplies it back in the GEMMs, with no host read of the upstream gradient.
    teacher_input [..., Ht] and teacher_weight [Vt, Ht] (Vt >= V; one dtype, fp32, fp16 or
        bf16): the online teacher (teacher_form='dense_hidden', implied by them): its logits
        teacher_input @ teacher_weight.T (+ teacher_bias [Vt]) are computed chunk by chunk
        beside the student's and never stored; no gradient reaches them (as Liger's
        LigerFusedLinearJSD). Under autocast they are cast to the autocast dtype. `teacher`
        must then be None.
    num_items_in_batch: the divisor of batchmean and mean (mean: times V) in place of this
        call's kept rows: an int, or a tensor of one number on any device (read on the GPU:
        no host synchronization). HF Trainer's convention: the kept tokens of the whole batch,
        over every data- and context-parallel rank and gradient-accumulation step; each call
        then returns its share, the shares sum to the batch's mean (README "Distributed").
    process_group: the head is sharded over the vocabulary across this group's ranks (rank r
        holds rows [vocab_start, vocab_start + V) of the head, its bias and, for a dense
        teacher, those columns of the teacher; input, labels and a sparse teacher's global ids
        are every rank's; the online teacher's head rows as the weight's). Each rank returns
        the whole loss and dX (the group's collectives on the current stream); dW and db are
        its rows. vocab_start and vocab_total default to rank x V and ranks x V (an even
        split). sequence_parallel=True: input is the rank's own rows of the batch (in rank
        order; labels and teacher stay the whole batch's), gathered first, and dX comes back
        reduce-scattered to them. A weight that is a DTensor sharded over the vocabulary
        (Shard(0) on a 1-D mesh) selects this path, its group and range by itself; a
        Replicate DTensor is used as its local tensor; a DTensor input is made whole.
    accumulate_into_main_grad: Megatron's gradient-accumulation fusion. weight.main_grad (an
        fp32 [V, H] tensor the caller owns) receives dW += in fp32, and so does bias.main_grad
        where the bias has one (else db comes back as usual). Two-phase mode accumulates
        straight into main_grad inside kljit_backward (no V x H buffer); fused mode adds its
        forward-computed dW into main_grad times the upstream gradient in one fp32 pass.
        Autograd then gets, as from Megatron's own layers, a placeholder gradient (zeros with
        weight.zero_out_wgrad) where the weight has `grad_added_to_main_grad`, which is set
        True, else None. Eager only (not under torch.compile).
    row_weights [...] (the input's leading shape, or [N]; a float tensor, used in fp32; no
        gradient reaches it): w_i >= 0 and finite multiply row i's loss and gradient, never the
        divisor of batchmean or mean (a kept row of weight 0 still counts). Every teacher
        form. With a process_group: the whole batch's, as the labels.
    return_components: return LossComponents(loss, row_loss, soft, hard) instead of the loss:
        the per-row losses and the soft / hard parts come from the same library call (no
        extra pass; every teacher form). With a process_group they are summed over the group
        like the loss (a sequence-parallel rank gets the whole batch's row_loss, [N_total]).
    Options (see LossConfig): teacher_form ('dense_probs', 'dense_logprobs', 'dense_logits',
    'sparse_topk', 'dense_hidden'; LossConfig's `teacher`), mode, temperature_mode,
    teacher_temperature, scale_t_squared, reduction, ignore_index, eps, topk_values, tail,
    native_logits, allow_tf32, check_inputs, grad_weight_accum, divergence, beta, hard_weight,
    soft_weight, softcap, teacher_softcap, precise_accumulation. Or pass a LossConfig.

    Returns the fp32 loss: a scalar, or [...] per row for reduction='none' (or LossComponents
    with return_components=True). Raises TypeError
    or ValueError for bad arguments (naming them) and kljit.KljitError when the library
    refuses the call (status name and kljit_last_error()).
    """
    if config is None:
        # Without a config, temperature is the loss's T (constant or, with
        # temperature_mode='runtime', this call's).
        if temperature is not None:
            options["temperature"] = temperature
        config = config_from_options(options)
    elif options:
        raise TypeError("pass either config or keyword options, not both")
    if teacher_input is not None or teacher_weight is not None:
        if teacher is not None:
            raise ValueError("pass either teacher (a dense or sparse teacher) or teacher_input "
                             "and teacher_weight (the online teacher), not both")
        if teacher_input is None or teacher_weight is None:
            raise ValueError("the online teacher needs both teacher_input [..., Ht] and "
                             "teacher_weight [Vt, Ht]")
        teacher = teacher_input  # the checks infer teacher_form='dense_hidden' from the head
    elif config.teacher == "dense_hidden":
        raise ValueError("teacher_form='dense_hidden' (the online teacher) needs teacher_input "
                         "and teacher_weight")
    if grad_scale is None:
        grad_scale = 1.0
    elif isinstance(grad_scale, bool) or not isinstance(grad_scale, (int, float)):
        raise TypeError(f"grad_scale must be a number, got {type(grad_scale).__name__}")
    elif not (math.isfinite(grad_scale) and grad_scale > 0):
        raise ValueError(f"grad_scale must be finite and > 0, got {grad_scale!r}")
    params = (weight, bias)  # as the caller holds them: main_grad is their attribute
    # The usual call: plain tensors (or None) only, so no DTensor to resolve and no argument
    # whose type needs checking; told apart once, by type alone.
    plain = _dist.plain((input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                         teacher_weight, teacher_bias, row_weights))
    mesh_group, start, total = None, 0, 0
    if not plain:
        weight, bias, teacher, teacher_weight, teacher_bias, input, mesh_group, start, total = \
            _dist.local_head(weight, bias, teacher, teacher_weight, teacher_bias, input)
    dtype = _autocast_dtype(input)
    if dtype is not None:
        input, (weight, bias) = input.to(dtype), _cast(dtype, weight, bias, head=True)
        if teacher_weight is not None:  # the online teacher computes in the autocast dtype too
            teacher, teacher_weight, teacher_bias = _cast(dtype, teacher, teacher_weight,
                                                          teacher_bias)
    x = _flatten("input", input, 1)
    if isinstance(row_weights, torch.Tensor):  # fp32 [N], a leaf of no gradient
        row_weights = _flatten("row_weights", row_weights.detach(), 0)
        if row_weights.is_floating_point() and row_weights.dtype != torch.float32:
            row_weights = row_weights.to(torch.float32)
    if not isinstance(return_components, bool):
        raise TypeError(f"return_components must be a bool, got "
                        f"{type(return_components).__name__}")
    if not (plain and x is not None and weight is not None) and not (
            isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor) and all(
                t is None or isinstance(t, torch.Tensor) for t in (
                    teacher, teacher_ids, teacher_values, labels, bias, teacher_weight,
                    teacher_bias, row_weights))):
        from ._checks import check_call  # the argument's TypeError, before any op sees it
        check_call(config, x, weight, teacher, bias=bias, labels=labels,
                   teacher_ids=teacher_ids, teacher_values=teacher_values,
                   require_cuda=_ops.REQUIRE_CUDA, teacher_weight=teacher_weight,
                   teacher_bias=teacher_bias, row_weights=row_weights)
    shard = _shard(process_group or mesh_group, weight, vocab_start if mesh_group is None
                   else start, vocab_total if mesh_group is None else total, sequence_parallel)
    grad = torch.is_grad_enabled()
    want = (_ops.WANT_DX if grad and x.requires_grad else 0) | (
        _ops.WANT_DW if grad and (weight.requires_grad or (
            bias is not None and bias.requires_grad)) else 0)
    if accumulate_into_main_grad and want & _ops.WANT_DW and params[0].requires_grad:
        if torch.compiler.is_compiling():
            raise ValueError("accumulate_into_main_grad=True is eager only: it is not "
                             "available under torch.compile")
        if weight is not params[0]:
            raise ValueError("accumulate_into_main_grad=True needs the weight parameter itself "
                             "(its main_grad), not a DTensor or a cast of it")
        _ops.main_grad_of(params[0], "weight")
        want |= _ops.WANT_MAIN_GRAD
    elif not isinstance(accumulate_into_main_grad, bool):
        raise TypeError(f"accumulate_into_main_grad must be a bool, got "
                        f"{type(accumulate_into_main_grad).__name__}")
    if return_components:
        want |= _ops.WANT_PARTS
    op = _ops.Fused if config.mode == "fused" else _ops.TwoPhase
    if teacher_ids is not None or teacher_values is not None:  # the sparse form only
        teacher_ids = _flatten("teacher_ids", teacher_ids, 1)
        teacher_values = _flatten("teacher_values", teacher_values, 1)
    others = (_flatten("teacher", teacher, 1), teacher_ids, teacher_values,
              None if labels is None else _flatten("labels", labels, 0), teacher_weight,
              teacher_bias, None if num_items_in_batch is None
              else _divisor(num_items_in_batch, x.device), row_weights)
    key = _ops.call_key(config.key, want, math.nan if temperature is None
                        else float(temperature), float(grad_scale), shard)
    out = op.apply(x, weight, bias, others, key, _ops.launch(config.mode, (x, weight, bias,
                                                                           *others, key)))
    loss = out[0]
    if config.reduction == "none" and input.dim() != 2:  # per row: the input's leading shape
        loss = loss.view(input.shape[:-1])
    if not return_components:
        return loss
    lead = input.shape[:-1]
    row_loss, parts = out[-2].detach(), out[-1].detach()  # both ops end with them
    if len(lead) != 1 and row_loss.numel() == math.prod(lead):  # else a gathered batch's
        row_loss = row_loss.view(lead)
    return LossComponents(loss, row_loss, parts[0], parts[1])


def _shard(group: Any, weight: Any, start: Optional[int], total: Optional[int],
           sequence_parallel: bool) -> str:
    """The shard string of a vocabulary-parallel call (kljit._dist), "" for a whole head."""
    if group is None:
        if sequence_parallel or start is not None or total is not None:
            raise ValueError("vocab_start, vocab_total and sequence_parallel need a "
                             "process_group (or a DTensor weight sharded over the vocabulary)")
        return ""
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    import torch.distributed as dist

    rows, ranks = int(weight.shape[0]), dist.get_world_size(group)
    start = dist.get_rank(group) * rows if start is None else int(start)
    total = ranks * rows if total is None else int(total)
    return _dist.shard_string(group, start, total, bool(sequence_parallel))
