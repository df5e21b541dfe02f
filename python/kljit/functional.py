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
allocator. Plans are cached per (problem, device). No gradient flows to the teacher.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from . import _ops
from ._checks import LossConfig, config_from_options

__all__ = ["fused_linear_kl_div"]


def _flatten(name: str, t: Optional[torch.Tensor], trailing: int) -> Optional[torch.Tensor]:
    """[..., D] -> [N, D] (or [...] -> [N] for trailing=0) as a view; other layouts are left
    for the checks to report."""
    if t is None or not isinstance(t, torch.Tensor) or t.dim() <= max(trailing, 1):
        return t
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major, dense); call .contiguous() on "
                         f"it first")
    return t.view(-1, *t.shape[t.dim() - trailing:]) if trailing else t.view(-1)


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


def fused_linear_kl_div(input: torch.Tensor, weight: torch.Tensor,
                        teacher: Optional[torch.Tensor] = None, *,
                        bias: Optional[torch.Tensor] = None,
                        labels: Optional[torch.Tensor] = None,
                        teacher_ids: Optional[torch.Tensor] = None,
                        teacher_values: Optional[torch.Tensor] = None,
                        temperature: Optional[float] = None,
                        grad_scale: Optional[float] = None,
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
    Options (see LossConfig): teacher_form ('dense_probs', 'dense_logprobs', 'dense_logits',
    'sparse_topk'; LossConfig's `teacher`), mode, temperature_mode, teacher_temperature,
    scale_t_squared, reduction, ignore_index, eps, topk_values, tail, native_logits,
    allow_tf32, check_inputs, grad_weight_accum. Or pass a LossConfig.

    Returns the fp32 loss: a scalar, or [...] per row for reduction='none'. Raises TypeError
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
    if config.teacher == "dense_hidden":
        # The C API computes it (KLJIT_TEACHER_DENSE_HIDDEN); the custom ops do not carry the
        # teacher's input and head yet.
        raise ValueError("teacher_form='dense_hidden' (the online teacher) is not available "
                         "through the binding yet: pass the teacher's logits with "
                         "teacher_form='dense_logits'")
    if grad_scale is None:
        grad_scale = 1.0
    elif isinstance(grad_scale, bool) or not isinstance(grad_scale, (int, float)):
        raise TypeError(f"grad_scale must be a number, got {type(grad_scale).__name__}")
    elif not (math.isfinite(grad_scale) and grad_scale > 0):
        raise ValueError(f"grad_scale must be finite and > 0, got {grad_scale!r}")
    input, weight, bias = _autocast(input, weight, bias)
    lead = tuple(input.shape[:-1]) if isinstance(input, torch.Tensor) else ()
    x = _flatten("input", input, 1)
    t = _flatten("teacher", teacher, 1)
    ids = _flatten("teacher_ids", teacher_ids, 1)
    vals = _flatten("teacher_values", teacher_values, 1)
    lab = _flatten("labels", labels, 0)
    key = config.key
    temp = math.nan if temperature is None else float(temperature)
    given = (t, bias, lab, ids, vals)
    if (not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor)
            or any(a is not None and not isinstance(a, torch.Tensor) for a in given)):
        from ._checks import check_call  # the argument's TypeError, before any op sees it

        check_call(config, x, weight, t, bias=bias, labels=lab, teacher_ids=ids,
                   teacher_values=vals, require_cuda=_ops.REQUIRE_CUDA)
    grad = torch.is_grad_enabled()
    want_dx = grad and x.requires_grad
    want_dw = grad and (weight.requires_grad or (bias is not None and bias.requires_grad))
    # torch.compile traces the custom ops; eager calls their bodies through autograd.Functions
    # (the same code without the dispatcher's round trips)
    compiling = torch.compiler.is_compiling()
    if config.mode == "fused":
        args = (x, weight, bias, t, ids, vals, lab, key, temp, float(grad_scale), want_dx,
                want_dw)
        loss = _ops.fused(*args)[0] if compiling else _ops.FusedFunction.apply(*args)
    else:
        args = (x, weight, bias, t, ids, vals, lab, key, temp, float(grad_scale))
        loss = _ops.two_phase(*args)[0] if compiling else _ops.TwoPhaseFunction.apply(*args)
    if config.reduction == "none" and len(lead) != 1:
        loss = loss.view(lead)
    return loss


#: The eager autograd Functions, for callers that want them directly (see kljit._ops for
#: their arguments and for the custom ops kljit::fused and kljit::two_phase).
FusedLinearKLDivFunction = _ops.FusedFunction
TwoPhaseLinearKLDivFunction = _ops.TwoPhaseFunction
