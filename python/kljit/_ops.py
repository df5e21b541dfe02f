# SPDX-License-Identifier: Apache-2.0
"""The loss as torch.library custom ops, so torch.compile sees one opaque op and no graph break.

Four ops, each with a fake (meta) kernel that gives the output shapes without running:

    kljit::fused(input, weight, bias?, teacher?, ids?, values?, labels?, key, T, grad_scale,
                 want_dx, want_dw, teacher_weight?, teacher_bias?) -> (loss, dx, dw, db)
        kljit_fused: loss and the gradients of the loss itself (times grad_scale).
    kljit::scale_grads_(grad_output, dx, dw, db, key, grad_scale) -> ()
        the fused mode's backward: dx, dw, db *= grad_output / grad_scale, in place, on the
        device (kljit_scale_grads; an exact 1 costs no pass over the gradients).
    kljit::two_phase(input, weight, bias?, teacher?, ids?, values?, labels?, key, T,
                     grad_scale, teacher_weight?, teacher_bias?) -> (loss, saved) kljit_forward
    kljit::two_phase_grads(grad_output, input, ..., saved, key, T, grad_scale, want_dx,
                           want_dw, want_db, teacher_weight?, teacher_bias?) -> (dx, dw, db)
        kljit_backward

`key` is the LossConfig as JSON (a constant in a compiled graph). A gradient that is not wanted
comes back as an empty tensor. The online teacher (teacher='dense_hidden') passes its
teacher_input in the `teacher` slot and its head as teacher_weight (and teacher_bias); no
gradient reaches them.
The weight may be fp32 with fp16/bf16 input (mixed precision): the op casts it once per call to
the input dtype and writes dW and db in fp32, accumulated in fp32 by the library with no V x H
buffer. This module has no `from __future__ import
annotations`: torch.library reads the type hints as objects.
"""

import json
import math
import os
from functools import lru_cache
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from . import _lib
from ._checks import WORKSPACE_ALIGN, CallSpec, LossConfig, check_call
from ._lib import (EXEC_ACCUMULATE_GRAD_WEIGHT, EXEC_NO_GRAD_INPUT, EXEC_NO_GRAD_WEIGHT,
                   SAVED_HDR_FLOATS, SAVED_ROW_FLOATS, SAVED_ROW_FLOATS_EXTENDED, Args, Mode,
                   Plan)

#: Tensors must be on a CUDA device (python/tests/test_plumbing.py lifts this to run the
#: plumbing on CPU tensors against a fake library).
REQUIRE_CUDA = True

#: "auto" dW accumulation: in the weight's own dtype up to this many token chunks (each chunk
#: adds one rounding of dW; Liger rounds once per 1024 tokens), else in an fp32 V x H buffer.
AUTO_MAX_CHUNKS = 8


@lru_cache(maxsize=256)
def _config(key: str) -> LossConfig:
    return LossConfig(**json.loads(key))


def call_chunk_rows(plan_chunk_rows: int, rows: int, online: bool = False) -> int:
    """The chunk a call of `rows` rows runs with: the plan's, capped at a quarter of the rows (an
    eighth with the online teacher) rounded up to 256 (prob_chunk_rows in src/problem.c, which
    caps only a 16-bit dW accumulated in place, the one case this is asked for;
    KLJIT_CHUNK_ROWS lifts the cap)."""
    if os.environ.get("KLJIT_CHUNK_ROWS", "").strip().isdigit():
        return plan_chunk_rows
    k = 8 if online else 4
    return min(plan_chunk_rows, ((rows + k - 1) // k + 255) // 256 * 256)


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    return None if t is None or t.numel() == 0 else t.data_ptr()


#: The current stream as a raw integer without a torch.cuda.Stream object (what Inductor's
#: generated code calls); torch.cuda.current_stream where this build lacks it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream(device: torch.device) -> int:
    """The current CUDA stream of `device`, as the integer kljit takes."""
    if _raw_stream is not None and device.index is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def _empty(like: Tensor) -> Tensor:
    return like.new_empty((0,))


def _layout(t: Optional[Tensor]) -> Any:
    """What a tensor's checks depend on: shape, dtype, device, strides, 16-byte alignment."""
    return None if t is None else (t.shape, t.dtype, t.device, t.stride(), t.data_ptr() & 15)


class Checked:
    """What a call's signature fixes, worked out once and reused by every call with that
    signature (Call.make): the checked spec, the plan, the kljit_args of the call with every
    pointer NULL (copied per call: building it field by field costs more than the copy), and
    the workspace size of each mode."""

    __slots__ = ("spec", "plan", "template", "hidden", "sizes", "loss_shape")

    def __init__(self, spec: CallSpec, plan: Plan) -> None:
        self.spec, self.plan = spec, plan
        self.template = bytes(Args.init(rows=spec.rows, temperature=spec.temperature))
        self.hidden = spec.config.teacher == "dense_hidden"
        self.sizes: "dict" = {}
        self.loss_shape = (spec.rows,) if spec.config.reduction == "none" else ()

    def workspace_size(self, mode: Mode) -> int:
        size = self.sizes.get(mode)
        if size is None:
            size = self.sizes[mode] = self.plan.workspace_size(mode, self.spec.rows)
        return size


class Call:
    """One checked call: its spec, its plan (with dW accumulation resolved), its tensors in
    the compute dtype. teacher_weight, teacher_bias: the online teacher's head (its input is
    `teacher`).
    main_grad: dW and db go to fp32 gradients the caller owns (Megatron's main_grad), so the
    plan writes fp32 and accumulates in fp32."""

    def __init__(self, key: str, input: Tensor, weight: Tensor, bias: Optional[Tensor],
                 teacher: Optional[Tensor], ids: Optional[Tensor], values: Optional[Tensor],
                 labels: Optional[Tensor], temperature: float,
                 checked: Optional[Checked] = None, *, teacher_weight: Optional[Tensor] = None,
                 teacher_bias: Optional[Tensor] = None, main_grad: bool = False) -> None:
        if checked is None:
            config = _config(key)
            spec = check_call(config, input, weight, teacher, bias=bias, labels=labels,
                              teacher_ids=ids, teacher_values=values,
                              temperature=None if temperature != temperature else temperature,
                              require_cuda=REQUIRE_CUDA, teacher_weight=teacher_weight,
                              teacher_bias=teacher_bias)
            checked = Checked(spec, self._plan(spec, main_grad))
        self.checked = checked
        self.spec: CallSpec = checked.spec
        self.plan: Plan = checked.plan
        # Mixed precision: one cast of the fp32 master weight (and bias) per call.
        compute = input.dtype
        self.weight = weight if weight.dtype == compute else weight.to(compute)
        self.bias = bias if bias is None or bias.dtype == compute else bias.to(compute)
        self.tensors = (input, self.weight, self.bias, teacher, ids, values, labels)
        self.teacher_weight, self.teacher_bias = teacher_weight, teacher_bias

    @classmethod
    def make(cls, key: str, input: Tensor, weight: Tensor, bias: Optional[Tensor],
             teacher: Optional[Tensor], ids: Optional[Tensor], values: Optional[Tensor],
             labels: Optional[Tensor], temperature: float,
             teacher_weight: Optional[Tensor] = None, teacher_bias: Optional[Tensor] = None,
             main_grad: bool = False) -> "Call":
        """A Call, its checks and plan remembered by what they depend on (each tensor's shape,
        dtype, device, strides and 16-byte alignment; the config; T): a repeated call skips
        check_call and the plan lookup, which cost a short call more than the C call does."""
        sig = (key, temperature, main_grad, _lib.plan_cache_generation(), _layout(input),
               _layout(weight), _layout(teacher), _layout(bias), _layout(ids), _layout(values),
               _layout(labels), _layout(teacher_weight), _layout(teacher_bias))
        checked = _checked.get(sig)
        call = cls(key, input, weight, bias, teacher, ids, values, labels, temperature, checked,
                   teacher_weight=teacher_weight, teacher_bias=teacher_bias, main_grad=main_grad)
        if checked is None:
            if len(_checked) >= 256:
                _checked.clear()
            _checked[sig] = call.checked
        return call

    @staticmethod
    def _plan(spec: CallSpec, main_grad: bool = False) -> Plan:
        device = spec.device_index or 0
        pb = spec.problem
        if main_grad:  # fp32 straight into the caller's fp32 main_grad: no buffer
            pb.grad_weight_dtype = _lib.DType.FP32
            pb.grad_weight_accum = _lib.GradWeightAccum.FP32
            return _lib.get_plan(pb, device)
        if spec.config.grad_weight_accum != "auto":
            return _lib.get_plan(pb, device)
        if pb.grad_weight_dtype == _lib.DType.FP32:  # fp32 into dW itself: no buffer
            pb.grad_weight_accum = _lib.GradWeightAccum.FP32
            return _lib.get_plan(pb, device)
        pb.grad_weight_accum = _lib.GradWeightAccum.OUTPUT_DTYPE
        plan = _lib.get_plan(pb, device)
        chunk = call_chunk_rows(plan.chunk_rows(), spec.rows,
                                online=pb.teacher == _lib.TeacherForm.DENSE_HIDDEN)
        if math.ceil(spec.rows / chunk) <= AUTO_MAX_CHUNKS:
            return plan
        pb.grad_weight_accum = _lib.GradWeightAccum.FP32
        return _lib.get_plan(pb, device)

    def args(self) -> Args:
        """The call's kljit_args: the remembered template with this call's pointers."""
        x, w, b, t, ids, vals, lab = self.tensors
        args = Args.from_buffer_copy(self.checked.template)
        # Checked tensors are never empty (N, H, K >= 1, V >= 2): data_ptr() is theirs.
        args.input, args.weight = x.data_ptr(), w.data_ptr()
        if b is not None:
            args.bias = b.data_ptr()
        if lab is not None:
            args.labels = lab.data_ptr()
        if self.checked.hidden:
            args.teacher_input = t.data_ptr()
            args.teacher_weight = self.teacher_weight.data_ptr()
            if self.teacher_bias is not None:
                args.teacher_bias = self.teacher_bias.data_ptr()
        elif t is not None:
            args.teacher = t.data_ptr()
        if ids is not None:
            args.teacher_ids, args.teacher_values = ids.data_ptr(), vals.data_ptr()
        return args

    def workspace(self, mode: Mode, args: Args) -> Tensor:
        """A workspace for `mode` from torch's allocator, pointed to by args; keep the tensor
        alive until the call has been enqueued."""
        size = self.checked.workspace_size(mode)
        # CUDA's caching allocator hands out 512-byte aligned blocks; over-allocating by 255
        # bytes makes the 256 bytes kljit needs independent of that.
        raw = torch.empty(size + WORKSPACE_ALIGN - 1, dtype=torch.uint8,
                          device=self.tensors[0].device)
        ptr = raw.data_ptr()
        args.workspace, args.workspace_size = ptr + (-ptr % WORKSPACE_ALIGN), size
        return raw

    def grads(self, weight: Tensor, bias: Optional[Tensor], want_dx: bool, want_dw: bool,
              want_db: bool, args: Args) -> Tuple[Tensor, Tensor, Tensor]:
        """dX (input dtype), dW and db (the stored weight's dtype) as wanted, pointed to by
        args; empty tensors for the others."""
        x = self.tensors[0]
        want_w = want_dw or (want_db and bias is not None)
        if want_dx:
            dx = torch.empty_like(x, memory_format=torch.contiguous_format)
            args.grad_input = dx.data_ptr()  # N, H >= 1: never empty
        else:
            dx = _empty(x)
        if want_w:
            dw = torch.empty_like(weight, memory_format=torch.contiguous_format)
            args.grad_weight = dw.data_ptr()
        else:
            dw = _empty(weight)
        if want_w and bias is not None:
            db = torch.empty_like(bias, memory_format=torch.contiguous_format)
            args.grad_bias = db.data_ptr()
        else:
            db = _empty(weight)
        args.flags = (0 if want_dx else EXEC_NO_GRAD_INPUT) | (0 if want_w else
                                                               EXEC_NO_GRAD_WEIGHT)
        return dx, dw, db

    def loss(self) -> Tensor:
        return torch.empty(self.checked.loss_shape, dtype=torch.float32,
                           device=self.tensors[0].device)


#: Call.make's memory: signature -> Checked.
_checked: "dict" = {}


def _loss_shape(key: str, input: Tensor) -> Tuple[int, ...]:
    return (input.shape[0],) if _config(key).reduction == "none" else ()


# ---- Megatron's main_grad --------------------------------------------------------------


def main_grad_of(param: Tensor, name: str) -> Tensor:
    """param.main_grad, checked: an fp32 tensor of param's shape on its device, contiguous
    (what Megatron's DDP allocates for gradient-accumulation fusion)."""
    main = getattr(param, "main_grad", None)
    if not isinstance(main, Tensor):
        raise ValueError(f"accumulate_into_main_grad=True needs {name}.main_grad, an fp32 tensor "
                         f"of {name}'s shape (Megatron's gradient-accumulation fusion); {name} "
                         f"has none")
    if (main.dtype != torch.float32 or main.shape != param.shape
            or main.device != param.device or not main.is_contiguous()):
        raise ValueError(f"{name}.main_grad must be a contiguous fp32 tensor of shape "
                         f"{list(param.shape)} on {param.device}, got {main.dtype} "
                         f"{list(main.shape)} on {main.device}"
                         + ("" if main.is_contiguous() else ", not contiguous"))
    return main


def grad_after_main(param: Tensor, spare: Optional[Tensor]) -> Optional[Tensor]:
    """What autograd gets for a parameter whose gradient went into its main_grad, the
    convention of Megatron's fused linear layers: where the parameter has the attribute
    `grad_added_to_main_grad` (Megatron's DDP sets it), it is set True and a placeholder of the
    parameter's shape and dtype comes back (zeros where `zero_out_wgrad` is set), so the DDP's
    hooks fire; else None (nothing for autograd to add). `spare` (a buffer of that shape and
    dtype no longer needed, or None) serves as the placeholder."""
    if not hasattr(param, "grad_added_to_main_grad"):
        return None
    param.grad_added_to_main_grad = True
    out = (spare if spare is not None and spare.numel()
           else torch.empty(param.shape, dtype=param.dtype, device=param.device))
    if getattr(param, "zero_out_wgrad", False):
        out.zero_()
    return out


# ---- fused ------------------------------------------------------------------------------
# Each op's body is a plain function: the custom op (what torch.compile sees) wraps it, and so
# does the eager autograd.Function (FusedFunction, TwoPhaseFunction below), which skips the
# dispatcher's round trips: the binding's host time before the first kernel is what a short
# call pays on top of the C call.


def fused_impl(input: Tensor, weight: Tensor, bias: Optional[Tensor],
               teacher: Optional[Tensor], teacher_ids: Optional[Tensor],
               teacher_values: Optional[Tensor], labels: Optional[Tensor], key: str,
               temperature: float, grad_scale: float, want_dx: bool, want_dw: bool,
               teacher_weight: Optional[Tensor] = None, teacher_bias: Optional[Tensor] = None
               ) -> Tuple[Tuple[Tensor, Tensor, Tensor, Tensor], Plan]:
    """kljit_fused: (loss, dx, dw, db) and the plan that ran."""
    call = Call.make(key, input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                     temperature, teacher_weight, teacher_bias)
    args = call.args()
    loss = call.loss()
    args.loss = loss.data_ptr()
    args.grad_scale = grad_scale
    dx, dw, db = call.grads(weight, bias, want_dx, want_dw, want_dw, args)
    ws = call.workspace(Mode.FUSED, args)
    call.plan.execute(Mode.FUSED, stream(input.device), args)
    del ws
    return (loss, dx, dw, db), call.plan


def upstream(grad_output: Tensor, grad_scale: float) -> Tensor:
    """The fused gradients' factor, grad_output / grad_scale, as a contiguous fp32 tensor on
    the device (exactly 1 when the upstream gradient is the scale given)."""
    g = grad_output.to(torch.float32)
    if grad_scale != 1.0:
        g = g / grad_scale
    return g.contiguous()


#: kljit_args with every field at KLJIT_ARGS_INIT: kljit_scale_grads' template.
_SCALE_ARGS = bytes(Args.init())


def scale_grads_impl(plan: Optional[Plan], grad_output: Tensor, dx: Tensor, dw: Tensor,
                     db: Tensor, rows: int, grad_scale: float) -> None:
    """dx, dw, db *= grad_output / grad_scale in place: kljit_scale_grads when the plan has
    it (an exact 1 costs no pass), else torch."""
    g = upstream(grad_output, grad_scale)
    if plan is not None and plan.can_scale_grads():
        args = Args.from_buffer_copy(_SCALE_ARGS)
        args.rows = rows
        args.grad_input, args.grad_weight, args.grad_bias = _ptr(dx), _ptr(dw), _ptr(db)
        args.grad_output = g.data_ptr()
        args.flags = ((0 if dx.numel() else EXEC_NO_GRAD_INPUT)
                      | (0 if dw.numel() else EXEC_NO_GRAD_WEIGHT))
        if dx.numel() or dw.numel():
            plan.scale_grads(stream(g.device), args)
        return
    for t in (dx, dw, db):
        if t.numel():
            t.mul_(g)


_FUSED_TWICE = ("kljit: a mode='fused' loss can be backpropagated once (its gradients were "
                "computed in forward and are scaled in place); use mode='two_phase' to "
                "backpropagate it again")


def _fused_grads(need: Tuple[bool, ...], has_bias: bool, dx: Optional[Tensor],
                 dw: Optional[Tensor], db: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
    def given(t: Optional[Tensor]) -> bool:
        return t is not None and t.numel() > 0

    return (dx if need[0] and given(dx) else None, dw if need[1] and given(dw) else None,
            db if has_bias and need[2] and given(db) else None) + (None,) * (len(need) - 3)


def _fused_backward_into_main(ctx: Any, grad_loss: Tensor, dx: Tensor, dw: Tensor,
                              db: Tensor) -> Tuple[Optional[Tensor], ...]:
    """Fused mode with accumulate_into_main_grad: dX scaled in place as usual; dW (and db where
    the bias has a main_grad) added to main_grad times the upstream gradient, in fp32 and in
    one pass (addcmul_: no V x H temporary), the forward's dW buffer then serving as
    Megatron's placeholder."""
    weight, bias = ctx.mains
    g = upstream(grad_loss, ctx.grad_scale)
    scale_grads_impl(ctx.plan, grad_loss, dx, _empty(dw), _empty(db), ctx.rows,
                     ctx.grad_scale)
    gw = gb = None
    if dw.numel():
        main_grad_of(weight, "weight").addcmul_(dw, g)
        gw = grad_after_main(weight, dw)
    if db.numel():
        if getattr(bias, "main_grad", None) is not None:
            main_grad_of(bias, "bias").addcmul_(db, g)
            gb = grad_after_main(bias, db)
        else:
            gb = db.mul_(g)
    return _fused_grads(ctx.needs_input_grad, ctx.has_bias, dx, gw, gb)


def _fused_keep(ctx: Any, input: Tensor, bias: Optional[Tensor], grads: Tuple[Tensor, ...],
                plan: Plan, grad_scale: float, mains: Optional[Tuple[Any, Any]]) -> None:
    """What the eager fused backward needs: the gradients (stashed, not saved) and how to
    scale them."""
    ctx.stash = grads
    ctx.plan, ctx.rows, ctx.grad_scale = plan, input.shape[0], grad_scale
    ctx.has_bias = bias is not None
    ctx.mains = mains


class FusedFunction(torch.autograd.Function):
    """Eager mode='fused': the gradients are stashed on ctx (not saved tensors) and dropped
    before backward returns them, so autograd takes them as .grad without a copy.
    mains: (weight, bias) parameters as the caller holds them (before any autocast cast: their
    main_grad attributes are read), for accumulate_into_main_grad; else None."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight: Tensor, bias: Optional[Tensor],
                teacher: Optional[Tensor], teacher_ids: Optional[Tensor],
                teacher_values: Optional[Tensor], labels: Optional[Tensor], key: str,
                temperature: float, grad_scale: float, want_dx: bool, want_dw: bool,
                teacher_weight: Optional[Tensor] = None, teacher_bias: Optional[Tensor] = None,
                mains: Optional[Tuple[Any, Any]] = None) -> Tensor:
        (loss, dx, dw, db), plan = fused_impl(input, weight, bias, teacher, teacher_ids,
                                              teacher_values, labels, key, temperature,
                                              grad_scale, want_dx, want_dw, teacher_weight,
                                              teacher_bias)
        _fused_keep(ctx, input, bias, (dx, dw, db), plan, grad_scale, mains)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor) -> Tuple[Optional[Tensor], ...]:
        if ctx.stash is None:
            raise RuntimeError(_FUSED_TWICE)
        dx, dw, db = ctx.stash
        ctx.stash = None
        if ctx.mains is not None:
            return _fused_backward_into_main(ctx, grad_loss, dx, dw, db)
        scale_grads_impl(ctx.plan, grad_loss, dx, dw, db, ctx.rows, ctx.grad_scale)
        return _fused_grads(ctx.needs_input_grad, ctx.has_bias, dx, dw, db)


class FusedNode(torch.autograd.Function):
    """FusedFunction's node for a call that already ran: the eager binding enqueues
    kljit_fused first (fused_impl) and makes the autograd node after, so the GPU starts
    before autograd's bookkeeping (host time a short call cannot hide). Inputs: only the
    tensors that can get a gradient (input, weight, bias); `done` = (loss, dx, dw, db, plan,
    grad_scale, mains), which autograd does not look into. Backward is FusedFunction's."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight: Tensor, bias: Optional[Tensor],
                done: Tuple[Any, ...]) -> Tensor:
        loss, dx, dw, db, plan, grad_scale, mains = done
        _fused_keep(ctx, input, bias, (dx, dw, db), plan, grad_scale, mains)
        return loss

    backward = FusedFunction.backward


@torch.library.custom_op("kljit::fused", mutates_args=())
def fused(input: Tensor, weight: Tensor, bias: Optional[Tensor], teacher: Optional[Tensor],
          teacher_ids: Optional[Tensor], teacher_values: Optional[Tensor],
          labels: Optional[Tensor], key: str, temperature: float, grad_scale: float,
          want_dx: bool, want_dw: bool, teacher_weight: Optional[Tensor],
          teacher_bias: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    out, plan = fused_impl(input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                           key, temperature, grad_scale, want_dx, want_dw, teacher_weight,
                           teacher_bias)
    _fused_plans[_grads_key(key, *out[1:])] = plan
    return out


@fused.register_fake
def _fused_fake(input, weight, bias, teacher, teacher_ids, teacher_values, labels, key,
                temperature, grad_scale, want_dx, want_dw, teacher_weight, teacher_bias):
    loss = input.new_empty(_loss_shape(key, input), dtype=torch.float32)
    dx = torch.empty_like(input) if want_dx else _empty(input)
    dw = torch.empty_like(weight) if want_dw else _empty(weight)
    db = torch.empty_like(bias) if want_dw and bias is not None else _empty(weight)
    return loss, dx, dw, db


@torch.library.custom_op("kljit::scale_grads_", mutates_args=("dx", "dw", "db"))
def scale_grads_(grad_output: Tensor, dx: Tensor, dw: Tensor, db: Tensor, key: str,
                 rows: int, grad_scale: float) -> None:
    scale_grads_impl(_fused_plans.get(_grads_key(key, dx, dw, db)), grad_output, dx, dw, db,
                     rows, grad_scale)


@scale_grads_.register_fake
def _scale_grads_fake(grad_output, dx, dw, db, key, rows, grad_scale):
    return None


#: The plan kljit::fused last ran for each (key, gradient dtypes and shapes): kljit_scale_grads
#: needs a plan of the dtypes and sizes that wrote the gradients (any such plan will do).
_fused_plans: "dict" = {}


def _grads_key(key: str, dx: Tensor, dw: Tensor, db: Tensor) -> Tuple[Any, ...]:
    return (key, dx.dtype, dx.shape[-1:], dw.dtype, tuple(dw.shape), db.numel() > 0)


def _fused_setup(ctx: Any, inputs: Tuple[Any, ...], output: Tuple[Tensor, ...]) -> None:
    _, dx, dw, db = output
    ctx.save_for_backward(dx, dw, db)
    ctx.key, ctx.rows, ctx.grad_scale = inputs[7], inputs[0].shape[0], inputs[9]
    ctx.has_bias = inputs[2] is not None
    ctx.used = False


def _fused_backward(ctx: Any, grad_loss: Tensor, *_: Any) -> Tuple[Optional[Tensor], ...]:
    if ctx.used:
        raise RuntimeError(_FUSED_TWICE)
    if not torch.compiler.is_compiling():
        ctx.used = True
    dx, dw, db = ctx.saved_tensors
    scale_grads_(grad_loss, dx, dw, db, ctx.key, ctx.rows, ctx.grad_scale)
    return _fused_grads(ctx.needs_input_grad, ctx.has_bias, dx, dw, db)


fused.register_autograd(_fused_backward, setup_context=_fused_setup)


# ---- two-phase --------------------------------------------------------------------------


def _saved_floats(key: str, rows: int) -> int:
    """plan_saved_floats (src/plan.c): 8 floats a row with hard-label CE or a divergence other
    than the forward KL (JSD beta 0, skew forward KL alpha 0), else 4."""
    c = _config(key)
    forward = (c.divergence == "forward_kl" or (c.divergence == "jsd" and c.beta == 0.0)
               or (c.divergence == "skew_forward_kl" and c.skew_alpha == 0.0))
    extended = c.hard_weight != 0.0 or not forward
    return SAVED_HDR_FLOATS + (SAVED_ROW_FLOATS_EXTENDED if extended else SAVED_ROW_FLOATS) * rows


def two_phase_impl(input: Tensor, weight: Tensor, bias: Optional[Tensor],
                   teacher: Optional[Tensor], teacher_ids: Optional[Tensor],
                   teacher_values: Optional[Tensor], labels: Optional[Tensor], key: str,
                   temperature: float, teacher_weight: Optional[Tensor] = None,
                   teacher_bias: Optional[Tensor] = None,
                   main_grad: bool = False) -> Tuple[Tensor, Tensor]:
    """kljit_forward: (loss, saved). main_grad: the plan backward will use (fp32 dW)."""
    call = Call.make(key, input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                     temperature, teacher_weight, teacher_bias, main_grad)
    args = call.args()
    loss = call.loss()
    rows = call.spec.rows
    nbytes = call.plan.saved_size(rows)
    if nbytes != 4 * _saved_floats(key, rows):
        raise _lib.KljitError(_lib.Status.INTERNAL, "kljit_plan_saved_size",
                              f"{nbytes} bytes; the binding's fake kernel assumes "
                              f"{4 * _saved_floats(key, rows)}")
    saved = torch.empty(_saved_floats(key, rows), dtype=torch.float32, device=input.device)
    args.loss, args.saved = loss.data_ptr(), saved.data_ptr()
    ws = call.workspace(Mode.FORWARD, args)
    call.plan.execute(Mode.FORWARD, stream(input.device), args)
    del ws
    return loss, saved


def _upstream_lift(g: Tensor, grad_scale: float, half: bool) -> float:
    """The power of two kljit_backward takes out of the upstream gradient (args.grad_scale) so
    that fp16 G stays finite: grad_scale when the caller gave one, else, for fp16 only, the
    smallest power of two >= max |g| (one read of it on the host)."""
    if grad_scale != 1.0 or not half:
        return grad_scale
    top = float(g.abs().max()) if g.numel() else 0.0
    if not math.isfinite(top) or top <= 1.0:
        return 1.0
    return float(2.0 ** math.ceil(math.log2(top)))


def two_phase_grads_impl(grad_output: Tensor, input: Tensor, weight: Tensor,
                         bias: Optional[Tensor], teacher: Optional[Tensor],
                         teacher_ids: Optional[Tensor], teacher_values: Optional[Tensor],
                         labels: Optional[Tensor], saved: Tensor, key: str, temperature: float,
                         grad_scale: float, want_dx: bool, want_dw: bool, want_db: bool,
                         teacher_weight: Optional[Tensor] = None,
                         teacher_bias: Optional[Tensor] = None,
                         main_grad: Optional[Tensor] = None,
                         bias_main_grad: Optional[Tensor] = None
                         ) -> Tuple[Tensor, Tensor, Tensor]:
    """kljit_backward: (dx, dw, db), empty where not wanted. With main_grad (fp32 [V, H]) dW
    is accumulated into it in fp32 (and db into bias_main_grad, else into fresh fp32 zeros,
    returned as db in fp32) and dw comes back empty."""
    call = Call.make(key, input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                     temperature, teacher_weight, teacher_bias, main_grad is not None)
    # kljit_backward takes dL_outer/dloss as fp32: one value, or one per row for NONE; fp16
    # G takes it divided by `lift`, which the GEMMs multiply back in fp32.
    g = grad_output.detach().to(torch.float32)
    lift = _upstream_lift(g, grad_scale, input.dtype == torch.float16)
    if lift != 1.0:
        g = g / lift
    g = g.contiguous()
    args = call.args()
    args.saved, args.grad_output, args.grad_scale = saved.data_ptr(), g.data_ptr(), lift
    if main_grad is None:
        dx, dw, db = call.grads(weight, bias, want_dx, want_dw, want_db, args)
    else:
        x = call.tensors[0]
        dx = (torch.empty_like(x, memory_format=torch.contiguous_format) if want_dx
              else _empty(x))
        dw = _empty(weight)
        db = _empty(weight)
        if bias is not None:
            db = bias_main_grad if bias_main_grad is not None else torch.zeros(
                bias.shape, dtype=torch.float32, device=bias.device)
        args.grad_input, args.grad_weight, args.grad_bias = _ptr(dx), _ptr(main_grad), _ptr(db)
        args.flags = EXEC_ACCUMULATE_GRAD_WEIGHT | (0 if want_dx else EXEC_NO_GRAD_INPUT)
        if bias_main_grad is not None:
            db = _empty(weight)
    ws = call.workspace(Mode.BACKWARD, args)
    call.plan.execute(Mode.BACKWARD, stream(input.device), args)
    del ws
    return dx, dw, db


def _two_phase_backward_with(grads_fn: Any, ctx: Any,
                             grad_loss: Tensor) -> Tuple[Optional[Tensor], ...]:
    x, w, b, t, ids, vals, lab, tw, tb, saved = ctx.saved_tensors
    need = ctx.needs_input_grad
    rest = (None,) * (len(need) - 3)
    want_dx, want_dw, want_db = need[0], need[1], b is not None and need[2]
    if not (want_dx or want_dw or want_db):
        return (None,) * 3 + rest
    mains = getattr(ctx, "mains", None)
    if mains is not None and want_dw:
        weight, bias = mains
        bias_main = (main_grad_of(bias, "bias") if want_db and
                     getattr(bias, "main_grad", None) is not None else None)
        dx, _, db = grads_fn(grad_loss, x, w, b, t, ids, vals, lab, saved, ctx.key,
                             ctx.temperature, ctx.grad_scale, want_dx, True, want_db, tw, tb,
                             main_grad_of(weight, "weight"), bias_main)
        gb = None
        if want_db:
            gb = grad_after_main(bias, None) if bias_main is not None else db.to(b.dtype)
        return (dx if want_dx else None, grad_after_main(weight, None), gb) + rest
    dx, dw, db = grads_fn(grad_loss, x, w, b, t, ids, vals, lab, saved, ctx.key,
                          ctx.temperature, ctx.grad_scale, want_dx, want_dw, want_db, tw, tb)
    return ((dx if want_dx else None), (dw if want_dw else None), (db if want_db else None)
            ) + rest


def _two_phase_keep(ctx: Any, tensors: Tuple[Optional[Tensor], ...], saved: Tensor, key: str,
                    temperature: float, grad_scale: float, mains: Optional[Tuple[Any, Any]]
                    ) -> None:
    """What the eager two-phase backward needs: the call's tensors and its row statistics."""
    ctx.save_for_backward(*tensors, saved)
    ctx.key, ctx.temperature, ctx.grad_scale = key, temperature, grad_scale
    ctx.mains = mains


class TwoPhaseFunction(torch.autograd.Function):
    """Eager mode='two_phase'. mains as FusedFunction's: backward then accumulates dW (and db)
    straight into weight.main_grad (bias.main_grad) in fp32."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight: Tensor, bias: Optional[Tensor],
                teacher: Optional[Tensor], teacher_ids: Optional[Tensor],
                teacher_values: Optional[Tensor], labels: Optional[Tensor], key: str,
                temperature: float, grad_scale: float, teacher_weight: Optional[Tensor] = None,
                teacher_bias: Optional[Tensor] = None,
                mains: Optional[Tuple[Any, Any]] = None) -> Tensor:
        loss, saved = two_phase_impl(input, weight, bias, teacher, teacher_ids,
                                     teacher_values, labels, key, temperature, teacher_weight,
                                     teacher_bias, mains is not None)
        _two_phase_keep(ctx, (input, weight, bias, teacher, teacher_ids, teacher_values,
                              labels, teacher_weight, teacher_bias), saved, key, temperature,
                        grad_scale, mains)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor) -> Tuple[Optional[Tensor], ...]:
        return _two_phase_backward_with(two_phase_grads_impl, ctx, grad_loss)


class TwoPhaseNode(torch.autograd.Function):
    """TwoPhaseFunction's node for a forward that already ran (as FusedNode): `done` =
    (loss, saved, key, temperature, grad_scale, mains); the teacher tensors are inputs here
    only to be saved for backward's recomputation (they get no gradient)."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight: Tensor, bias: Optional[Tensor],
                teacher: Optional[Tensor], teacher_ids: Optional[Tensor],
                teacher_values: Optional[Tensor], labels: Optional[Tensor],
                teacher_weight: Optional[Tensor], teacher_bias: Optional[Tensor],
                done: Tuple[Any, ...]) -> Tensor:
        loss, saved, key, temperature, grad_scale, mains = done
        _two_phase_keep(ctx, (input, weight, bias, teacher, teacher_ids, teacher_values,
                              labels, teacher_weight, teacher_bias), saved, key, temperature,
                        grad_scale, mains)
        return loss

    backward = TwoPhaseFunction.backward


@torch.library.custom_op("kljit::two_phase", mutates_args=())
def two_phase(input: Tensor, weight: Tensor, bias: Optional[Tensor], teacher: Optional[Tensor],
              teacher_ids: Optional[Tensor], teacher_values: Optional[Tensor],
              labels: Optional[Tensor], key: str, temperature: float, grad_scale: float,
              teacher_weight: Optional[Tensor],
              teacher_bias: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """grad_scale is not used here: it is what backward divides the upstream gradient by."""
    return two_phase_impl(input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                          key, temperature, teacher_weight, teacher_bias)


@two_phase.register_fake
def _two_phase_fake(input, weight, bias, teacher, teacher_ids, teacher_values, labels, key,
                    temperature, grad_scale, teacher_weight, teacher_bias):
    return (input.new_empty(_loss_shape(key, input), dtype=torch.float32),
            input.new_empty((_saved_floats(key, input.shape[0]),), dtype=torch.float32))


@torch.library.custom_op("kljit::two_phase_grads", mutates_args=())
def two_phase_grads(grad_output: Tensor, input: Tensor, weight: Tensor, bias: Optional[Tensor],
                    teacher: Optional[Tensor], teacher_ids: Optional[Tensor],
                    teacher_values: Optional[Tensor], labels: Optional[Tensor], saved: Tensor,
                    key: str, temperature: float, grad_scale: float, want_dx: bool,
                    want_dw: bool, want_db: bool, teacher_weight: Optional[Tensor],
                    teacher_bias: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    return two_phase_grads_impl(grad_output, input, weight, bias, teacher, teacher_ids,
                                teacher_values, labels, saved, key, temperature, grad_scale,
                                want_dx, want_dw, want_db, teacher_weight, teacher_bias)


@two_phase_grads.register_fake
def _two_phase_grads_fake(grad_output, input, weight, bias, teacher, teacher_ids,
                          teacher_values, labels, saved, key, temperature, grad_scale,
                          want_dx, want_dw, want_db, teacher_weight, teacher_bias):
    want_w = want_dw or (want_db and bias is not None)
    return (torch.empty_like(input) if want_dx else _empty(input),
            torch.empty_like(weight) if want_w else _empty(weight),
            torch.empty_like(bias) if want_w and bias is not None else _empty(weight))


def _two_phase_setup(ctx: Any, inputs: Tuple[Any, ...], output: Tuple[Tensor, ...]) -> None:
    x, w, b, t, ids, vals, lab = inputs[:7]
    ctx.save_for_backward(x, w, b, t, ids, vals, lab, inputs[10], inputs[11], output[1])
    ctx.key, ctx.temperature, ctx.grad_scale = inputs[7], inputs[8], inputs[9]


def _two_phase_backward(ctx: Any, grad_loss: Tensor, _saved: Any) -> Tuple[Optional[Tensor], ...]:
    return _two_phase_backward_with(two_phase_grads, ctx, grad_loss)


two_phase.register_autograd(_two_phase_backward, setup_context=_two_phase_setup)
