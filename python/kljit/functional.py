# SPDX-License-Identifier: Apache-2.0
"""The fused linear + KL loss for PyTorch: autograd, autocast and torch.compile over libkljit.

    loss = fused_linear_kl_div(x, w, teacher_probs)                       # dense, fused
    loss = fused_linear_kl_div(x, w, teacher_ids=ids, teacher_values=vals,  # sparse top-K
                               mode="two_phase", tail="renorm")
    loss.backward()

The work is registered as torch.library custom ops (kljit._ops), one per execution mode of
include/kljit.h, each with a fake kernel, so torch.compile traces a model through the loss
without a graph break; eager calls run the same bodies through autograd Functions. CUDA graphs
can capture it (no host synchronization on the default path):

- mode='fused': kljit_fused computes loss, dX, dW (, db) in forward; backward multiplies them
  in place by the upstream gradient (kljit_scale_grads, which costs nothing when it is exactly
  1): a fused loss can be backpropagated once. Three GEMMs per chunk, the fastest when the
  loss is the last op. `grad_scale=` (a loss scaler's scale, known at forward time) makes the
  gradients come out already scaled, so fp16 ones are not rounded before the scale arrives.
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
from typing import Any, Optional

import torch

from . import _ops
from ._checks import LossConfig, config_from_options

__all__ = ["fused_linear_kl_div"]

# autograd.Function.apply without its Python half, which only unwraps functorch's dead wrappers
# (nothing to unwrap outside functorch's transforms, where the full apply is used) and costs
# every eager call a few microseconds (issue 15's binding overhead). Eager calls enqueue the
# library call first and make the autograd node after (FusedNode, TwoPhaseNode), so the GPU
# starts working before that bookkeeping: measured on the H200, the host time before the first
# kernel is what a short call pays on top of the C call.
_FUSED_NODE = super(torch.autograd.Function, _ops.FusedNode).apply
_TWO_PHASE_NODE = super(torch.autograd.Function, _ops.TwoPhaseNode).apply


def _flatten(name: str, t: Optional[torch.Tensor], trailing: int) -> Optional[torch.Tensor]:
    """[..., D] -> [N, D] (or [...] -> [N] for trailing=0) as a view; other layouts are left
    for the checks to report."""
    # already [N, D] (or [N]): no view, which for a tensor that requires grad would cost an
    # autograd node in forward and another in backward
    if t is None or not isinstance(t, torch.Tensor) or t.dim() <= trailing + 1:
        return t
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major, dense); call .contiguous() on "
                         f"it first")
    return t.view(-1, *t.shape[t.dim() - trailing:]) if trailing else t.view(-1)


def _tensors_or_none(*given: Any) -> bool:
    for a in given:
        if a is not None and not isinstance(a, torch.Tensor):
            return False
    return True


def _autocast(input: Any, weight: Any, bias: Any) -> "tuple[Any, Any, Any]":
    """What torch's F.linear does under autocast: input, weight and bias in the autocast dtype,
    except that an fp32 weight (and bias) stays fp32 for the op to cast once and to return
    fp32 gradients for."""
    if not (isinstance(input, torch.Tensor) and input.is_floating_point()):
        return input, weight, bias
    device = input.device.type
    if not torch.is_autocast_enabled(device):
        return input, weight, bias
    dtype = torch.get_autocast_dtype(device)
    if dtype not in (torch.float16, torch.bfloat16):
        return input, weight, bias
    if input.dtype != dtype:
        input = input.to(dtype)

    def param(t: Any) -> Any:
        ok = not isinstance(t, torch.Tensor) or t.dtype in (dtype, torch.float32)
        return t if ok or not t.is_floating_point() else t.to(dtype)

    return input, param(weight), param(bias)


def _autocast_teacher(input: Any, teacher_input: Any, teacher_weight: Any,
                      teacher_bias: Any) -> "tuple[Any, Any, Any]":
    """Under autocast the online teacher computes in the autocast dtype, as F.linear would."""
    same = (teacher_input, teacher_weight, teacher_bias)
    if not (isinstance(input, torch.Tensor) and isinstance(teacher_input, torch.Tensor)
            and isinstance(teacher_weight, torch.Tensor)):
        return same
    device = input.device.type
    if not torch.is_autocast_enabled(device):
        return same
    dtype = torch.get_autocast_dtype(device)
    if dtype not in (torch.float16, torch.bfloat16):
        return same

    def cast(t: Any) -> Any:
        ok = not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype == dtype
        return t if ok else t.to(dtype)

    return cast(teacher_input), cast(teacher_weight), cast(teacher_bias)


_Tensor = torch.Tensor
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)


def _fused_dense_fast(input: Any, weight: Any, teacher: Any, temperature: Optional[float],
                      config: LossConfig) -> Optional[torch.Tensor]:
    """The usual eager call, [N, H] input, [V, H] weight, [N, V] teacher, a fused config, no
    autocast, no bias or labels: the loss, or None for the general path (which also gives
    every error). Exactly what the general path does for it, in fewer host steps (each costs a
    short call host time before its first kernel)."""
    if (_any_autocast is None or _any_autocast() or type(input) is not _Tensor
            or type(weight) is not _Tensor or type(teacher) is not _Tensor
            or input.dim() != 2 or teacher.dim() != 2 or config.mode != "fused"
            or config.teacher == "dense_hidden" or torch.compiler.is_compiling()
            or torch._C._are_functorch_transforms_active()):
        return None
    grad = torch.is_grad_enabled()
    want_dx = grad and input.requires_grad
    want_dw = grad and weight.requires_grad
    temp = math.nan if temperature is None else float(temperature)
    (loss, dx, dw, db), plan = _ops.fused_impl(input, weight, None, teacher, None, None, None,
                                               config.key, temp, 1.0, want_dx, want_dw, None)
    if want_dx or want_dw:
        loss = _FUSED_NODE(input, weight, None, (loss, dx, dw, db, plan, 1.0, None))
    return loss


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
                        accumulate_into_main_grad: bool = False,
                        config: Optional[LossConfig] = None, **options: Any) -> torch.Tensor:
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
        teacher_input @ teacher_weight.T are computed chunk by chunk beside the student's and
        never stored; no gradient reaches either (as Liger's LigerFusedLinearJSD). Under
        autocast they are cast to the autocast dtype. `teacher` must then be None.
    teacher_bias [Vt] (optional, teacher_weight's dtype): the online teacher head's bias, added
        to its logits (KLJIT_FLAG_TEACHER_BIAS); no gradient reaches it.
    accumulate_into_main_grad: Megatron's gradient-accumulation fusion. weight.main_grad (an
        fp32 [V, H] tensor the caller owns) receives dW += in fp32, and so does bias.main_grad
        where the bias has one (else db comes back as usual). Two-phase mode accumulates
        straight into main_grad inside kljit_backward (no V x H buffer); fused mode adds its
        forward-computed dW (weight dtype) into main_grad times the upstream gradient in one
        fp32 pass. Autograd then gets, as from Megatron's own layers, a placeholder gradient
        (zeros with weight.zero_out_wgrad) where the weight has `grad_added_to_main_grad`,
        which is set True, else None. Eager only (not under torch.compile).
    Options (see LossConfig): teacher_form ('dense_probs', 'dense_logprobs', 'dense_logits',
    'sparse_topk', 'dense_hidden'; LossConfig's `teacher`), mode, temperature_mode,
    teacher_temperature, scale_t_squared, reduction, ignore_index, eps, topk_values, tail,
    native_logits, allow_tf32, check_inputs, grad_weight_accum, divergence, beta, hard_weight,
    soft_weight, softcap, teacher_softcap. Or pass a LossConfig.

    Returns the fp32 loss: a scalar, or [...] per row for reduction='none'. Raises TypeError
    or ValueError for bad arguments (naming them) and kljit.KljitError when the library
    refuses the call (status name and kljit_last_error()).
    """
    if (config is not None and bias is None and labels is None and teacher_ids is None
            and teacher_values is None and teacher_input is None and teacher_weight is None
            and teacher_bias is None and grad_scale is None and accumulate_into_main_grad is False and not options):
        loss = _fused_dense_fast(input, weight, teacher, temperature, config)
        if loss is not None:
            return loss
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
    if not isinstance(accumulate_into_main_grad, bool):
        raise TypeError(f"accumulate_into_main_grad must be a bool, got "
                        f"{type(accumulate_into_main_grad).__name__}")
    if grad_scale is None:
        grad_scale = 1.0
    elif isinstance(grad_scale, bool) or not isinstance(grad_scale, (int, float)):
        raise TypeError(f"grad_scale must be a number, got {type(grad_scale).__name__}")
    elif not (math.isfinite(grad_scale) and grad_scale > 0):
        raise ValueError(f"grad_scale must be finite and > 0, got {grad_scale!r}")
    params = (weight, bias)  # as the caller holds them: main_grad is their attribute
    input, weight, bias = _autocast(input, weight, bias)
    if teacher_weight is not None:
        teacher, teacher_weight, teacher_bias = _autocast_teacher(input, teacher, teacher_weight,
                                                                  teacher_bias)
    lead = tuple(input.shape[:-1]) if isinstance(input, torch.Tensor) else ()
    x = _flatten("input", input, 1)
    t = _flatten("teacher", teacher, 1)
    ids = _flatten("teacher_ids", teacher_ids, 1)
    vals = _flatten("teacher_values", teacher_values, 1)
    lab = _flatten("labels", labels, 0)
    key = config.key
    temp = math.nan if temperature is None else float(temperature)
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)
            and _tensors_or_none(t, bias, lab, ids, vals, teacher_weight, teacher_bias)):
        from ._checks import check_call  # the argument's TypeError, before any op sees it

        check_call(config, x, weight, t, bias=bias, labels=lab, teacher_ids=ids,
                   teacher_values=vals, require_cuda=_ops.REQUIRE_CUDA,
                   teacher_weight=teacher_weight, teacher_bias=teacher_bias)
    grad = torch.is_grad_enabled()
    want_dx = grad and x.requires_grad
    want_dw = grad and (weight.requires_grad or (bias is not None and bias.requires_grad))
    # torch.compile traces the custom ops; eager calls their bodies through autograd.Functions
    # (the same code without the dispatcher's round trips)
    compiling = torch.compiler.is_compiling()
    mains = None
    if accumulate_into_main_grad and grad and params[0].requires_grad:
        if compiling:
            raise ValueError("accumulate_into_main_grad=True is eager only: it is not "
                             "available under torch.compile")
        _ops.main_grad_of(params[0], "weight")
        mains = params
    gs = float(grad_scale)
    functorch = not compiling and torch._C._are_functorch_transforms_active()
    if config.mode == "fused":
        if compiling:
            loss = _ops.fused(x, weight, bias, t, ids, vals, lab, key, temp, gs, want_dx,
                              want_dw, teacher_weight, teacher_bias)[0]
        elif functorch:
            loss = _ops.FusedFunction.apply(x, weight, bias, t, ids, vals, lab, key, temp, gs,
                                            want_dx, want_dw, teacher_weight, teacher_bias,
                                            mains)
        else:
            (loss, dx, dw, db), plan = _ops.fused_impl(x, weight, bias, t, ids, vals, lab, key,
                                                       temp, gs, want_dx, want_dw,
                                                       teacher_weight, teacher_bias)
            if want_dx or want_dw:
                loss = _FUSED_NODE(x, weight, bias, (loss, dx, dw, db, plan, gs, mains))
    elif compiling:
        loss = _ops.two_phase(x, weight, bias, t, ids, vals, lab, key, temp, gs,
                              teacher_weight, teacher_bias)[0]
    elif functorch:
        loss = _ops.TwoPhaseFunction.apply(x, weight, bias, t, ids, vals, lab, key, temp, gs,
                                           teacher_weight, teacher_bias, mains)
    else:
        loss, saved = _ops.two_phase_impl(x, weight, bias, t, ids, vals, lab, key, temp,
                                          teacher_weight, teacher_bias, mains is not None)
        if want_dx or want_dw:
            loss = _TWO_PHASE_NODE(x, weight, bias, t, ids, vals, lab, teacher_weight,
                                   teacher_bias, (loss, saved, key, temp, gs, mains))
    if config.reduction == "none" and len(lead) != 1:
        loss = loss.view(lead)
    return loss


#: The eager autograd Functions, for callers that want them directly (see kljit._ops for
#: their arguments and for the custom ops kljit::fused and kljit::two_phase).
FusedLinearKLDivFunction = _ops.FusedFunction
TwoPhaseLinearKLDivFunction = _ops.TwoPhaseFunction
