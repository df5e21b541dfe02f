"""The fused linear + KL loss as torch.autograd.Functions over libkljit.

    loss = fused_linear_kl_div(x, w, teacher_probs)                       # dense, fused
    loss = fused_linear_kl_div(x, w, teacher_ids=ids, teacher_values=vals,  # sparse top-K
                               mode="two_phase", tail="renorm")
    loss.backward()

Two autograd Functions, one per execution mode of include/kljit.h:

- _FusedFunction (mode='fused'): kljit_fused computes loss, dX, dW (, db) in forward; they are
  stashed and backward only scales them by the upstream gradient (in place: a fused loss can
  be backpropagated once). Three GEMMs per chunk, the fastest when the loss is the last op.
- _TwoPhaseFunction (mode='two_phase'): kljit_forward computes the loss and O(N) statistics;
  backward runs kljit_backward with the upstream gradient (a scalar, or one per row for
  reduction='none'), recomputing each chunk's logits. Four GEMMs per chunk, no N x H or V x H
  buffers held between forward and backward.

Tensors are passed to C as data_ptr(), on torch.cuda.current_stream(); outputs and the
workspace are allocated with torch (so torch's caching allocator and memory statistics see
them). Plans are cached per (problem, device); the first call with a new shape JIT-compiles
the kernels or loads them from kljit's on-disk cache. No gradient flows to the teacher.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from . import _lib
from ._checks import WORKSPACE_ALIGN, CallSpec, LossConfig, check_call, check_workspace
from ._lib import EXEC_NO_GRAD_INPUT, EXEC_NO_GRAD_WEIGHT, Args, Mode, Plan

__all__ = ["fused_linear_kl_div", "FusedLinearKLDivFunction"]


#: Tensors must be on a CUDA device (python/tests/test_plumbing.py lifts this to run the
#: autograd plumbing on CPU tensors against a fake library).
_REQUIRE_CUDA = True


def _ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def _stream(device: torch.device) -> int:
    """The current CUDA stream of `device`, as the integer kljit takes."""
    return torch.cuda.current_stream(device).cuda_stream


class _Call:
    """One checked call: its spec, its plan, and which gradients are wanted."""

    def __init__(self, spec: CallSpec, want_dx: bool, want_dw: bool) -> None:
        self.spec = spec
        self.plan: Plan = _lib.get_plan(spec.problem, spec.device_index or 0)
        self.want_dx = want_dx
        self.want_dw = want_dw
        # the online teacher's head (teacher='dense_hidden'), held for both phases
        self.teacher_weight: Optional[torch.Tensor] = None

    def grad_flags(self, want_dx: bool, want_dw: bool) -> int:
        return (0 if want_dx else EXEC_NO_GRAD_INPUT) | (0 if want_dw else EXEC_NO_GRAD_WEIGHT)

    def workspace(self, mode: Mode, device: torch.device) -> Tuple[torch.Tensor, int]:
        size = self.plan.workspace_size(mode, self.spec.rows)
        # CUDA's caching allocator hands out 512-byte aligned blocks; over-allocating by 255
        # bytes makes the 256 bytes kljit needs independent of that.
        raw = torch.empty(size + WORKSPACE_ALIGN - 1, dtype=torch.uint8, device=device)
        offset = -raw.data_ptr() % WORKSPACE_ALIGN
        ws = raw[offset:offset + size]
        check_workspace(ws, size)
        return ws, size

    def args(self, input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
             teacher: Optional[torch.Tensor], teacher_ids: Optional[torch.Tensor],
             teacher_values: Optional[torch.Tensor], labels: Optional[torch.Tensor]) -> Args:
        # the online teacher: `teacher` carries teacher_input, the call its teacher_weight
        hidden = self.teacher_weight is not None
        return Args.init(rows=self.spec.rows, input=input.data_ptr(), weight=weight.data_ptr(),
                         bias=_ptr(bias), labels=_ptr(labels),
                         teacher=None if hidden else _ptr(teacher),
                         teacher_input=_ptr(teacher) if hidden else None,
                         teacher_weight=_ptr(self.teacher_weight),
                         teacher_ids=_ptr(teacher_ids), teacher_values=_ptr(teacher_values),
                         temperature=self.spec.temperature)

    def loss_tensor(self, device: torch.device) -> torch.Tensor:
        shape = (self.spec.rows,) if self.spec.config.reduction == "none" else ()
        return torch.empty(shape, dtype=torch.float32, device=device)

    def grads(self, input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              want_dx: bool, want_dw: bool, args: Args) -> Tuple[Optional[torch.Tensor], ...]:
        """Allocates dX, dW, db as wanted (dW and db in the weight dtype, as the problem asks)
        and points args at them."""
        dx = torch.empty_like(input, memory_format=torch.contiguous_format) if want_dx else None
        dw = torch.empty_like(weight, memory_format=torch.contiguous_format) if want_dw else None
        db = None
        if want_dw and bias is not None:
            db = torch.empty_like(bias, memory_format=torch.contiguous_format)
        args.grad_input, args.grad_weight, args.grad_bias = _ptr(dx), _ptr(dw), _ptr(db)
        args.flags = self.grad_flags(want_dx, want_dw)
        return dx, dw, db


class _FusedFunction(torch.autograd.Function):
    """mode='fused': gradients computed in forward (kljit_fused), scaled in backward."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor,
                bias: Optional[torch.Tensor], teacher: Optional[torch.Tensor],
                teacher_ids: Optional[torch.Tensor], teacher_values: Optional[torch.Tensor],
                labels: Optional[torch.Tensor], call: _Call) -> torch.Tensor:
        device = input.device
        args = call.args(input, weight, bias, teacher, teacher_ids, teacher_values, labels)
        loss = call.loss_tensor(device)
        args.loss = loss.data_ptr()
        dx, dw, db = call.grads(input, weight, bias, call.want_dx, call.want_dw, args)
        ws, size = call.workspace(Mode.FUSED, device)
        args.workspace, args.workspace_size = ws.data_ptr(), size
        call.plan.execute(Mode.FUSED, _stream(device), args)
        ctx.stash = (dx, dw, db)
        ctx.call = call
        return loss

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        if ctx.stash is None:
            raise RuntimeError("kljit: a mode='fused' loss can be backpropagated once (its "
                               "gradients were computed in forward and are scaled in place); "
                               "use mode='two_phase' to backpropagate it again")
        dx, dw, db = ctx.stash
        ctx.stash = None
        # dL/dinput = grad_output * (the gradients of the loss itself), scaled in place (memory
        # stays flat) by kljit_scale_grads: one vectorized pass over each gradient reading the
        # scalar on the device (no sync). torch's mul_ by the 0-dim fp32 grad_output took
        # 2.3 ms for dX and a 128256 x 4096 bf16 dW on the H200 (bench/RESULTS.md, run 20).
        g = grad_output.detach()
        call: _Call = ctx.call
        if call.plan.can_scale_grads():
            g = g.to(torch.float32).contiguous()
            args = Args.init(rows=call.spec.rows, grad_input=_ptr(dx), grad_weight=_ptr(dw),
                             grad_bias=_ptr(db))
            args.grad_output = g.data_ptr()
            args.flags = call.grad_flags(dx is not None, dw is not None)
            call.plan.scale_grads(_stream(g.device), args)
        else:
            for t in (dx, dw, db):
                if t is not None:
                    t.mul_(g)
        return (dx if ctx.needs_input_grad[0] else None,
                dw if ctx.needs_input_grad[1] else None,
                db if ctx.needs_input_grad[2] else None, None, None, None, None, None)


class _TwoPhaseFunction(torch.autograd.Function):
    """mode='two_phase': kljit_forward saves statistics, kljit_backward recomputes logits."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor,
                bias: Optional[torch.Tensor], teacher: Optional[torch.Tensor],
                teacher_ids: Optional[torch.Tensor], teacher_values: Optional[torch.Tensor],
                labels: Optional[torch.Tensor], call: _Call) -> torch.Tensor:
        device = input.device
        args = call.args(input, weight, bias, teacher, teacher_ids, teacher_values, labels)
        loss = call.loss_tensor(device)
        saved = torch.empty(call.plan.saved_size(call.spec.rows) // 4, dtype=torch.float32,
                            device=device)
        args.loss, args.saved = loss.data_ptr(), saved.data_ptr()
        ws, size = call.workspace(Mode.FORWARD, device)
        args.workspace, args.workspace_size = ws.data_ptr(), size
        call.plan.execute(Mode.FORWARD, _stream(device), args)
        ctx.save_for_backward(input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                              saved)
        ctx.call = call
        return loss

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        input, weight, bias, teacher, teacher_ids, teacher_values, labels, saved = (
            ctx.saved_tensors)
        call: _Call = ctx.call
        device = input.device
        want_dx = ctx.needs_input_grad[0]
        want_dw = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        if not (want_dx or want_dw):
            return (None,) * 8
        # kljit_backward takes dL_outer/dloss as fp32: one value, or one per row for NONE.
        g = grad_output.detach().to(torch.float32).contiguous()
        args = call.args(input, weight, bias, teacher, teacher_ids, teacher_values, labels)
        args.saved, args.grad_output = saved.data_ptr(), g.data_ptr()
        dx, dw, db = call.grads(input, weight, bias, want_dx, want_dw, args)
        ws, size = call.workspace(Mode.BACKWARD, device)
        args.workspace, args.workspace_size = ws.data_ptr(), size
        call.plan.execute(Mode.BACKWARD, _stream(device), args)
        return (dx, dw if ctx.needs_input_grad[1] else None,
                db if ctx.needs_input_grad[2] else None, None, None, None, None, None)


def _flatten(name: str, t: Optional[torch.Tensor], trailing: int) -> Optional[torch.Tensor]:
    """[..., D] -> [N, D] (or [...] -> [N] for trailing=0) as a view; other layouts are left
    for the checks to report."""
    if t is None or not isinstance(t, torch.Tensor) or t.dim() <= max(trailing, 1):
        return t
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major, dense); call .contiguous() on "
                         f"it first")
    return t.view(-1, *t.shape[t.dim() - trailing:]) if trailing else t.view(-1)


def fused_linear_kl_div(input: torch.Tensor, weight: torch.Tensor,
                        teacher: Optional[torch.Tensor] = None, *,
                        bias: Optional[torch.Tensor] = None,
                        labels: Optional[torch.Tensor] = None,
                        teacher_ids: Optional[torch.Tensor] = None,
                        teacher_values: Optional[torch.Tensor] = None,
                        temperature: Optional[float] = None,
                        config: Optional[LossConfig] = None,
                        teacher_input: Optional[torch.Tensor] = None,
                        teacher_weight: Optional[torch.Tensor] = None,
                        **options: Any) -> torch.Tensor:
    """KL(teacher || softmax((input @ weight.T + bias) / T)), fused with the head's GEMMs.

    input [..., H] and weight [V, H]: one float dtype (fp32, fp16, bf16). bias [V] optional.
    teacher [..., V] (dense forms: probs, log-probs or logits, any float dtype) or
    teacher_ids [..., K] (int32/int64) with teacher_values [..., K] (sparse top-K form).
    teacher_input [..., Ht] with teacher_weight [Vt, Ht] (the online teacher: its logits are
    computed chunk by chunk, never materialized; no gradient flows to it).
    labels [...] (int32/int64) optional: rows whose label is ignore_index are excluded.
    temperature: T. With keyword options it is the loss's T; with a LossConfig (as the modules
        pass) it is this call's T and needs temperature_mode='runtime' unless it equals the
        config's.
    Options (see LossConfig): teacher, mode, temperature, temperature_mode,
    teacher_temperature, scale_t_squared, reduction, ignore_index, eps, topk_values, tail,
    native_logits, allow_tf32, check_inputs, grad_weight_accum. Or pass a LossConfig.

    Returns the fp32 loss: a scalar, or [...] per row for reduction='none'. Raises TypeError
    or ValueError for bad arguments (naming them) and kljit.KljitError when the library
    refuses the call (status name and kljit_last_error()).
    """
    if config is None:
        # Without a config, temperature is the loss's T (constant or, with
        # temperature_mode='runtime', this call's).
        if temperature is not None:
            options["temperature"] = temperature
        config = LossConfig(**options)
    elif options:
        raise TypeError("pass either config or keyword options, not both")
    lead = tuple(input.shape[:-1]) if isinstance(input, torch.Tensor) else ()
    x = _flatten("input", input, 1)
    if teacher_input is not None and teacher is not None:
        raise ValueError("pass teacher or teacher_input (the online teacher), not both")
    t = _flatten("teacher_input" if teacher_input is not None else "teacher",
                 teacher_input if teacher_input is not None else teacher, 1)
    ids = _flatten("teacher_ids", teacher_ids, 1)
    vals = _flatten("teacher_values", teacher_values, 1)
    lab = _flatten("labels", labels, 0)
    spec = check_call(config, x, weight, t, bias=bias, labels=lab, teacher_ids=ids,
                      teacher_values=vals, temperature=temperature,
                      require_cuda=_REQUIRE_CUDA, teacher_weight=teacher_weight)
    grad = torch.is_grad_enabled()
    want_dx = grad and x.requires_grad
    want_dw = grad and (weight.requires_grad or (bias is not None and bias.requires_grad))
    call = _Call(spec, want_dx, want_dw)
    if spec.config.teacher == "dense_hidden":
        call.teacher_weight = teacher_weight
    fn = _FusedFunction if spec.config.mode == "fused" else _TwoPhaseFunction
    loss = fn.apply(x, weight, bias, t, ids, vals, lab, call)
    if spec.config.reduction == "none" and len(lead) != 1:
        loss = loss.view(lead)
    return loss


#: The autograd Functions, for callers that want them directly (apply takes the checked _Call).
FusedLinearKLDivFunction = _FusedFunction
TwoPhaseLinearKLDivFunction = _TwoPhaseFunction
