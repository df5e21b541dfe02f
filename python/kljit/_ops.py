# SPDX-License-Identifier: Apache-2.0
"""The loss as torch.library ops, and one torch.autograd.Function per mode over them: the one
path of each mode, eager and compiled.

    kljit::fused(input, weight, bias?, teacher?, teacher_ids?, teacher_values?, labels?,
                 teacher_weight?, teacher_bias?, divisor?, row_weights?, key)
        -> (loss, dx, dw, db, row_loss, parts)                                kljit_fused
    kljit::scale_grads_(grad_output, dx, dw, db, grad_scale) -> ()
        fused mode's backward: dx, dw, db *= grad_output / grad_scale in place (kljit_scale,
        no plan: an exact 1 costs no pass over the gradients)
    kljit::two_phase(<the inputs of fused>) -> (loss, saved, row_loss, parts)  kljit_forward
    kljit::two_phase_grads(grad_output, <the tensors>, saved, key, main_grad?, bias_main_grad?)
        -> (dx, dw, db)                                                       kljit_backward

    Fused.apply(input, weight, bias?, <the other tensors of fused, as one tuple>, key, done?),
    TwoPhase.apply(...) -> (loss, row_loss, parts)

The ops have a kernel and a fake kernel (torch.compile traces them as they are) and no autograd
of their own: Fused and TwoPhase are the autograd of every call, eager or traced, and call the
ops in forward and backward (eager: the forward op's kernel runs first, `launch`, and apply
gets its outputs as `done`). `key` is all that is not a tensor, as one string (call_key; a
constant in a compiled graph, as the float arguments were: each value its own graph): the
LossConfig as JSON, `want` the WANT_* bits, T, grad_scale and `shard`; one argument, not five,
as each argument costs the dispatcher a conversion on every call. `divisor` is a 0-d fp64
tensor on the device, the global divisor of batchmean and mean (num_items_in_batch), or None
for the kept rows; `row_weights` fp32 [N] or None (KLJIT_FLAG_ROW_WEIGHTS); row_loss [N] and
parts ({soft, hard}) the optional outputs, written where `want` has WANT_PARTS (else empty; no
gradient flows through them); `shard` "" for a whole head, else a vocabulary shard through
torch.distributed (kljit._dist: the group's name, the shard's first global id, the vocabulary,
and whether the input rows are the rank's part of a sequence-parallel batch). The online
teacher's input travels in the `teacher` slot, its head as teacher_weight and teacher_bias; no
gradient reaches them. A gradient not wanted comes back as an empty tensor. The weight may be
fp32 with fp16/bf16 input (mixed precision): cast once per call to the input dtype, dW and db
written in fp32.
"""

import json
import math
from functools import lru_cache
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from . import _dist, _lib
from ._checks import (WORKSPACE_ALIGN, CallSpec, LossConfig, check_call, dtype_name,
                      infer_teacher, make_problem)
from ._lib import (EXEC_ACCUMULATE_GRAD_WEIGHT, EXEC_NO_GRAD_INPUT, EXEC_NO_GRAD_WEIGHT, Args,
                   Mode)

#: Tensors must be on a CUDA device (python/tests/test_plumbing.py lifts this to run the
#: plumbing on CPU tensors against a fake library).
REQUIRE_CUDA = True
#: `want` bits: dX wanted; dW (and db) wanted; dW and db go to the parameters' main_grad;
#: the optional outputs row_loss and loss_parts wanted (fused and forward calls).
WANT_DX, WANT_DW, WANT_MAIN_GRAD, WANT_PARTS = 1, 2, 4, 8
#: The ops' tensor inputs, up to row_weights; the key follows them.
N_TENSORS = 11


@lru_cache(maxsize=256)
def _config(key: str) -> LossConfig:
    return LossConfig(**json.loads(key))


class CallKey(NamedTuple):
    """The ops' `key`, read: the LossConfig as JSON, the WANT_* bits, T (nan: the config's),
    grad_scale and the shard."""

    config: str
    want: int
    temperature: float
    grad_scale: float
    shard: str


def _make_key(config: str, want: int, temperature: float, grad_scale: float, shard: str) -> str:
    return f"{config}\n{want}\n{temperature!r}\n{grad_scale!r}\n{shard}"


#: The key made, remembered: the floats' repr costs more than the lookup (dynamo traces
#: _make_key itself).
_remembered_key = lru_cache(maxsize=256)(_make_key)


def call_key(config: str, want: int, temperature: float, grad_scale: float, shard: str) -> str:
    """The ops' `key` (no newline in the JSON; repr gives a float back exactly). A zero is not
    remembered: 0.0 == -0.0, whose reprs differ."""
    if temperature and grad_scale:
        return _remembered_key(config, want, temperature, grad_scale, shard)
    return _make_key(config, want, temperature, grad_scale, shard)


def _parse_key(key: str) -> CallKey:
    config, want, temperature, grad_scale, shard = key.split("\n", 4)
    return CallKey(config, int(want), float(temperature), float(grad_scale), shard)


#: The key read, remembered (dynamo traces _parse_key itself: a cache is not traceable).
read_key = lru_cache(maxsize=256)(_parse_key)


def stream(device: torch.device) -> int:
    """The current CUDA stream of `device`, as the integer kljit takes."""
    return torch.cuda.current_stream(device).cuda_stream


def scale_in_place(tensors: Tuple[Tensor, ...], factor: Tensor) -> None:
    """Each tensor *= factor (a 0-d fp32 device tensor) on the current stream, decided on the
    device: kljit_scale (nothing but one tiny launch when the factor is exactly 1)."""
    device = factor.device
    ctx, cur = _lib.get_context(device.index or 0), stream(device)
    for t in tensors:
        ctx.scale(cur, t, factor)


def _empty(like: Tensor) -> Tensor:
    return like.new_empty((0,))


def _layouts(tensors: Tuple[Optional[Tensor], ...]) -> Tuple[Any, ...]:
    """What each tensor's checks depend on (get_device: an int, cheaper than .device); one
    comprehension, not a call a tensor (a short call's host time)."""
    return tuple(None if t is None else (t.shape, t.dtype, t.get_device(), t.is_contiguous(),
                                         t.data_ptr() & 15) for t in tensors)


class Checked:
    """What a call's signature fixes, worked out once for every call with it (Call.make): the
    checked spec, the plan (dW accumulated as KLJIT_ACCUM_AUTO unless asked otherwise), the
    kljit_args with every pointer NULL (copied per call: cheaper than field by field), each
    mode's workspace size, the shard (kljit._dist.Shard or None) and the compute dtype the
    weight and bias are cast to (None when both are in it already)."""

    __slots__ = ("spec", "plan", "template", "hidden", "sizes", "loss_like", "bytes_like", "shard",
                 "cast")

    def __init__(self, spec: CallSpec, shard: Optional["_dist.Shard"], main_grad: bool,
                 cast: Optional[torch.dtype], device: torch.device) -> None:
        pb = spec.problem
        if main_grad:  # fp32 straight into the caller's fp32 main_grad: no buffer
            pb.grad_weight_dtype = _lib.DType.FP32
            pb.grad_weight_accum = _lib.GradWeightAccum.FP32
        if shard is not None:
            pb.vocab_total, pb.vocab_offset, pb.shards = shard.total, shard.start, shard.size
        self.spec, self.shard, self.cast = spec, shard, cast
        self.plan = _lib.get_plan(pb, spec.device_index or 0)
        self.template = bytes(Args.init(rows=spec.rows, temperature=spec.temperature))
        self.hidden = spec.config.teacher == "dense_hidden"
        self.sizes: Dict[Mode, int] = {}
        # templates on the call's device: empty_like / new_empty(n) of them take no dtype keyword
        shape = (spec.rows,) if spec.config.reduction == "none" else ()
        self.loss_like = torch.empty(shape, dtype=torch.float32, device=device)
        self.bytes_like = torch.empty((1,), dtype=torch.uint8, device=device)

    def workspace_size(self, mode: Mode) -> int:
        size = self.sizes.get(mode)
        if size is None:
            size = self.sizes[mode] = self.plan.workspace_size(mode, self.spec.rows)
        return size


#: Call.make's memory: signature -> Checked.
_checked: Dict[Any, Checked] = {}


class Call:
    """One checked call: its Checked, its tensors in the compute dtype (the ops' N_TENSORS,
    in their order). The online teacher's input is `teacher`, its head teacher_weight and
    teacher_bias. main_grad: dW and db go to fp32 gradients the caller owns (Megatron's
    main_grad), so the plan writes fp32 and accumulates in fp32."""

    def __init__(self, checked: Checked, tensors: Tuple[Optional[Tensor], ...]) -> None:
        self.checked, self.plan = checked, checked.plan
        self.weight, self.bias, self.tensors = tensors[1], tensors[2], tensors
        compute = checked.cast
        if compute is not None:  # mixed precision: one cast of the fp32 master weight (and bias)
            w, b = self.weight, self.bias
            self.weight = w if w.dtype == compute else w.detach().to(compute)
            self.bias = b if b is None or b.dtype == compute else b.detach().to(compute)
            self.tensors = (tensors[0], self.weight, self.bias, *tensors[3:])

    @classmethod
    def make(cls, key: str, input: Tensor, weight: Tensor, bias: Optional[Tensor],
             teacher: Optional[Tensor], ids: Optional[Tensor], values: Optional[Tensor],
             labels: Optional[Tensor], teacher_weight: Optional[Tensor],
             teacher_bias: Optional[Tensor], divisor: Optional[Tensor],
             row_weights: Optional[Tensor], temperature: float, shard: str = "",
             main_grad: bool = False) -> "Call":
        """A Call, its checks and plan remembered by what they depend on (each tensor's shape,
        dtype, device, strides and 16-byte alignment; the config; T; the shard): a repeated
        call skips check_call and the plan lookup, which cost a short call more than the C call
        does."""
        tensors = (input, weight, bias, teacher, ids, values, labels, teacher_weight,
                   teacher_bias, divisor, row_weights)
        runtime_t = None if temperature != temperature else temperature  # nan: the config's
        sig = (key, runtime_t, shard, main_grad, _lib.plan_cache_generation(), _layouts(tensors))
        checked = _checked.get(sig)
        if checked is None:
            spec = check_call(_config(key), input, weight, teacher, bias=bias, labels=labels,
                              teacher_ids=ids, teacher_values=values, temperature=runtime_t,
                              require_cuda=REQUIRE_CUDA, teacher_weight=teacher_weight,
                              teacher_bias=teacher_bias, divisor=divisor,
                              row_weights=row_weights)
            compute = input.dtype
            cast = None if weight.dtype == compute and (bias is None or bias.dtype == compute) \
                else compute
            checked = Checked(spec, _dist.shard_of(shard, spec), main_grad, cast, input.device)
            if len(_checked) >= 256:
                _checked.clear()
            _checked[sig] = checked
        return cls(checked, tensors)

    @property
    def rows(self) -> int:
        return self.checked.spec.rows

    def args(self) -> Args:
        """The call's kljit_args: the remembered template with this call's pointers."""
        x, w, b, t, ids, vals, lab, tw, tb, div, rw = self.tensors
        args = Args.from_buffer_copy(self.checked.template)
        # Checked tensors are never empty (N, H, K >= 1, V >= 2): data_ptr() is theirs.
        args.input, args.weight = x.data_ptr(), w.data_ptr()
        if b is not None:
            args.bias = b.data_ptr()
        if lab is not None:
            args.labels = lab.data_ptr()
        if self.checked.hidden:
            args.teacher_input, args.teacher_weight = t.data_ptr(), tw.data_ptr()
            if tb is not None:
                args.teacher_bias = tb.data_ptr()
        elif t is not None:
            args.teacher = t.data_ptr()
        if ids is not None:
            args.teacher_ids, args.teacher_values = ids.data_ptr(), vals.data_ptr()
        if div is not None:
            args.divisor = div.data_ptr()
        if rw is not None:
            args.row_weights = rw.data_ptr()
        return args

    def workspace(self, mode: Mode, args: Args) -> Tensor:
        """A workspace for `mode` from torch's allocator, pointed to by args; keep the tensor
        alive until the call has been enqueued."""
        size = self.checked.workspace_size(mode)
        # CUDA's caching allocator hands out 512-byte aligned blocks; over-allocating by 255
        # bytes makes the 256 bytes kljit needs independent of that.
        raw = self.checked.bytes_like.new_empty(size + WORKSPACE_ALIGN - 1)
        ptr = raw.data_ptr()
        args.workspace, args.workspace_size = ptr + (-ptr % WORKSPACE_ALIGN), size
        return raw

    def grads(self, weight: Tensor, bias: Optional[Tensor], want: int,
              args: Args) -> Tuple[Optional[Tensor], ...]:
        """dX (input dtype), dW and db (the stored weight's dtype) as `want` says, pointed to by
        args; None for the others (empty_grads: after the launch, which waits for no more)."""
        x = self.tensors[0]  # each checked contiguous: empty_like keeps it, and its keyword
        dx = dw = db = None  # memory_format cost 1.3 us a tensor (bench/RESULTS.md run 135)
        if want & WANT_DX:
            dx = torch.empty_like(x)
            args.grad_input = dx.data_ptr()
        if want & WANT_DW:
            dw = torch.empty_like(weight)
            args.grad_weight = dw.data_ptr()
            if bias is not None:
                db = torch.empty_like(bias)
                args.grad_bias = db.data_ptr()
        args.flags = (0 if want & WANT_DX else EXEC_NO_GRAD_INPUT) | (
            0 if want & WANT_DW else EXEC_NO_GRAD_WEIGHT)
        return dx, dw, db

    def empty_grads(self, weight: Tensor, dx: Optional[Tensor], dw: Optional[Tensor],
                    db: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
        """grads' outputs with an empty tensor for each one not wanted (the ops return
        tensors)."""
        return (_empty(self.tensors[0]) if dx is None else dx,
                _empty(weight) if dw is None else dw, _empty(weight) if db is None else db)

    def parts(self, want: int, args: Args) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """The optional outputs row_loss [N] and loss_parts [2] (fp32) where `want` has
        WANT_PARTS, pointed to by args; None otherwise (empty_parts: after the launch)."""
        if not want & WANT_PARTS:
            return None, None
        x = self.tensors[0]
        row_loss = torch.empty((self.rows,), dtype=torch.float32, device=x.device)
        parts = torch.empty((2,), dtype=torch.float32, device=x.device)
        args.row_loss, args.loss_parts = row_loss.data_ptr(), parts.data_ptr()
        return row_loss, parts

    def empty_parts(self, row_loss: Optional[Tensor],
                    parts: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        return _no_parts(self.tensors[0]) if row_loss is None else (row_loss, parts)

    def loss(self) -> Tensor:
        return torch.empty_like(self.checked.loss_like)

    def run(self, mode: Mode, args: Args) -> None:
        """The call on the current stream (a vocabulary shard's: kljit._dist.run_shard)."""
        ws = self.workspace(mode, args)
        self.plan.execute(mode, stream(self.tensors[0].device), args)
        del ws


def _loss_shape(key: str, input: Tensor) -> Tuple[int, ...]:
    return (input.shape[0],) if _config(key).reduction == "none" else ()


def _no_parts(like: Tensor) -> Tuple[Tensor, Tensor]:
    """The optional outputs where they are not wanted: two empty fp32 tensors."""
    return like.new_empty((0,), dtype=torch.float32), like.new_empty((0,), dtype=torch.float32)


def _fake_parts(input: Tensor, want: int, shard: str) -> Tuple[Tensor, Tensor]:
    """The optional outputs of a traced call: [N] and [2] fp32 (N the batch's rows, gathered
    for a sequence-parallel shard), or empty."""
    if not want & WANT_PARTS:
        return _no_parts(input)
    rows = input.shape[0] * (_dist.parse(shard).size if shard.endswith(":1") else 1)
    return (input.new_empty((rows,), dtype=torch.float32),
            input.new_empty((2,), dtype=torch.float32))


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
    hooks fire; else None. `spare` (a buffer of that shape and dtype no longer needed, or None)
    serves as the placeholder."""
    if not hasattr(param, "grad_added_to_main_grad"):
        return None
    param.grad_added_to_main_grad = True
    out = (spare if spare is not None and spare.numel() and spare.dtype == param.dtype
           else torch.empty(param.shape, dtype=param.dtype, device=param.device))
    if getattr(param, "zero_out_wgrad", False):
        out.zero_()
    return out


def _to_mains(ctx: Any, g: Tensor, dw: Tensor, db: Tensor) -> Tuple[Any, Any]:
    """dW and db times g added into the parameters' main_grad in fp32, one pass each (addcmul_:
    no V x H temporary); db stays a gradient where the bias has no main_grad."""
    weight, bias = ctx.params
    gw = gb = None
    if dw.numel():
        main_grad_of(weight, "weight").addcmul_(dw, g)
        gw = grad_after_main(weight, dw)
    if db.numel():
        if getattr(bias, "main_grad", None) is not None:
            main_grad_of(bias, "bias").addcmul_(db, g)
            gb = grad_after_main(bias, db)
        else:
            gb = db.mul_(g).to(bias.dtype)
    return gw, gb


# ---- the ops ----------------------------------------------------------------------------

#: The ops' library. Defined with Library.define, not custom_op: an op is then the dispatcher's
#: call of its kernel and no more (custom_op wraps every eager call in its own autograd
#: function, defaults filling and alias checks: several times the C call's host time).
_LIBRARY = torch.library.Library("kljit", "DEF")
#: The tensors all ops take, in this order (N_TENSORS of them).
_TENSORS = ("Tensor input, Tensor weight, Tensor? bias, Tensor? teacher, Tensor? teacher_ids, "
            "Tensor? teacher_values, Tensor? labels, Tensor? teacher_weight, "
            "Tensor? teacher_bias, Tensor? divisor, Tensor? row_weights")


def _define(schema: str, kernel: Any, fake: Any) -> Any:
    """The op kljit::<schema>: `kernel` on every device (CPU is the plumbing tests' fake
    library), `fake` for torch.compile; autograd passes through it (the Functions below are the
    autograd: called outside them, its outputs have no gradient, rather than a wrong one).
    Returns its overload, the cheapest thing to call."""
    name = schema.split("(", 1)[0]
    _LIBRARY.define(schema)
    _LIBRARY.impl(name, kernel, "CompositeExplicitAutograd")
    _LIBRARY.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake("kljit::" + name, fake, lib=_LIBRARY)
    return getattr(torch.ops.kljit, name).default


try:  # where torch lacks it, always the dispatcher
    from torch.utils._python_dispatch import is_in_torch_dispatch_mode as _dispatch_mode
except ImportError:  # pragma: no cover
    _dispatch_mode = None


def _direct(inputs: Tuple[Any, ...]) -> bool:
    """Whether an op's kernel may be called directly rather than through the dispatcher (its
    round trip costs more than these checks): eager, plain tensors only (a DTensor or other
    subclass has its own handling of the op), no __torch_function__ mode and no dispatch mode
    (FakeTensorMode, FlopCounterMode, ...: they must see the op)."""
    if _dispatch_mode is None or torch.compiler.is_compiling() or _dispatch_mode():
        return False
    tensors = inputs[:N_TENSORS]
    return _dist.plain(tensors) and not torch.overrides.has_torch_function(tensors)


def launch(mode: str, inputs: Tuple[Any, ...]) -> Optional[Tuple[Tensor, ...]]:
    """An eager call's outputs, its forward op's kernel run before the Function's apply (whose
    bookkeeping then overlaps the GPU's work), or None where the op runs in forward: traced, a
    subclass or a mode (_direct), a shard (its gathers: no-grad), functorch's storage-less
    wrappers (apply names the transform). Runs under grad mode: Call detaches its casts."""
    if read_key(inputs[N_TENSORS]).shard or not _direct(inputs):
        return None
    try:
        inputs[0].data_ptr()
    except RuntimeError:
        return None
    return (_fused if mode == "fused" else _two_phase)(*inputs)


def _grads_out(ctx: Any, dx: Tensor, dw: Any, db: Any) -> Tuple[Optional[Tensor], ...]:
    """backward's answer: the gradients of input, weight and bias, as far as they are needed
    and were computed (empty ones are None), None for the other inputs."""
    need = ctx.needs_input_grad

    def given(t: Any) -> Any:
        return t if isinstance(t, Tensor) and t.numel() else None

    return (given(dx) if need[0] else None, given(dw) if need[1] else None,
            given(db) if ctx.has_bias and need[2] else None) + (None,) * (len(need) - 3)


def _forward_ctx(ctx: Any, inputs: Tuple[Any, ...], *no_grad: Tensor) -> None:
    """What both modes' forward keeps: the key (a CallKey), the parameters as the caller holds
    them (for main_grad). Only the loss is differentiable (backward takes None for the rest)."""
    ctx.key = (_parse_key if torch.compiler.is_compiling() else read_key)(inputs[N_TENSORS])
    ctx.params = (inputs[1], inputs[2]) if ctx.key.want & WANT_MAIN_GRAD else None
    ctx.has_bias = inputs[2] is not None
    ctx.mark_non_differentiable(*no_grad)
    ctx.set_materialize_grads(False)


# ---- fused ------------------------------------------------------------------------------


def _fused(input, weight, bias, teacher, teacher_ids, teacher_values, labels, teacher_weight,
           teacher_bias, divisor, row_weights, key):
    """kljit_fused: loss and the gradients of the loss itself (times grad_scale); row_loss and
    the loss's parts where want has WANT_PARTS."""
    k = read_key(key)
    call = Call.make(k.config, _dist.gather_rows(input, k.shard) if k.shard else input, weight,
                     bias, teacher, teacher_ids, teacher_values, labels, teacher_weight,
                     teacher_bias, divisor, row_weights, k.temperature, k.shard)
    args = call.args()
    loss = call.loss()
    args.loss, args.grad_scale = loss.data_ptr(), k.grad_scale
    dx, dw, db = call.grads(weight, bias, k.want, args)
    row_loss, parts = call.parts(k.want, args)
    if k.shard:
        row_loss, parts = call.empty_parts(row_loss, parts)
        dx = _dist.run_shard(call, args, loss, dx, sums=(row_loss, parts))
    else:
        call.run(Mode.FUSED, args)
    return loss, *call.empty_grads(weight, dx, dw, db), *call.empty_parts(row_loss, parts)


def _fused_fake(input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                teacher_weight, teacher_bias, divisor, row_weights, key):
    k = read_key(key)
    dw = torch.empty_like(weight) if k.want & WANT_DW else _empty(weight)
    db = torch.empty_like(bias) if k.want & WANT_DW and bias is not None else _empty(weight)
    return (input.new_empty(_loss_shape(k.config, input), dtype=torch.float32),
            torch.empty_like(input) if k.want & WANT_DX else _empty(input), dw, db,
            *_fake_parts(input, k.want, k.shard))


fused = _define("fused(" + _TENSORS + ", str key) -> (Tensor, Tensor, Tensor, Tensor, Tensor, "
                "Tensor)", _fused, _fused_fake)


def scale_grads(grad_output: Tensor, grads: Tuple[Tensor, ...], grad_scale: float) -> None:
    """Each gradient *= grad_output / grad_scale in place (empty ones and None skipped)."""
    g = grad_output.to(torch.float32)
    if grad_scale != 1.0:
        g = g / grad_scale
    scale_in_place(tuple(t for t in grads if t is not None and t.numel()), g)


def _scale_grads_fake(grad_output, dx, dw, db, grad_scale):
    return None


#: fused mode's backward: dx, dw, db *= grad_output / grad_scale in place.
scale_grads_ = _define("scale_grads_(Tensor grad_output, Tensor(a!) dx, Tensor(b!) dw, "
                       "Tensor(c!) db, float grad_scale) -> ()",
                       lambda g, dx, dw, db, scale: scale_grads(g, (dx, dw, db), scale),
                       _scale_grads_fake)

_FUSED_TWICE = ("kljit: a mode='fused' loss can be backpropagated once (its gradients were "
                "computed in forward and are scaled in place); use mode='two_phase' to "
                "backpropagate it again")


class Fused(torch.autograd.Function):
    """mode='fused' with autograd, eager and compiled: forward runs kljit::fused (the loss and
    its gradients times grad_scale); backward scales those in place by the upstream gradient
    (kljit::scale_grads_), so a fused loss can be backpropagated once. apply takes input,
    weight, bias, the ops' other tensors as one tuple (no gradient reaches them; autograd's
    bookkeeping of each argument is host time), the key and `done` (launch's outputs, or None);
    it returns (loss, row_loss, parts)."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight: Tensor, bias: Optional[Tensor], others: Tuple,
                key: str, done: Optional[Tuple] = None) -> Tuple[Tensor, Tensor, Tensor]:
        inputs = (input, weight, bias, *others, key)
        loss, dx, dw, db, row_loss, parts = done or (_fused if _direct(inputs) else fused)(*inputs)
        _forward_ctx(ctx, inputs, row_loss, parts)
        ctx.save_for_backward(dx, dw, db)
        ctx.used = False
        return loss, row_loss, parts

    @staticmethod
    def backward(ctx: Any, grad_loss: Optional[Tensor], *_: Any) -> Tuple[Optional[Tensor], ...]:
        if grad_loss is None:  # only the optional outputs were used: nothing flows back
            return (None,) * len(ctx.needs_input_grad)
        if ctx.used:
            raise RuntimeError(_FUSED_TWICE)
        if not torch.compiler.is_compiling():
            ctx.used = True
        dx, dw, db = ctx.saved_tensors
        scale = ctx.key.grad_scale
        if ctx.params is None:
            scale_grads_(grad_loss, dx, dw, db, scale)
            return _grads_out(ctx, dx, dw, db)
        # main_grad: dX scaled in place; dW (and db) added into main_grad times the upstream
        g = grad_loss.to(torch.float32) / scale
        scale_grads_(grad_loss, dx, _empty(dw), _empty(db), scale)
        return _grads_out(ctx, dx, *_to_mains(ctx, g, dw, db))


# ---- two-phase --------------------------------------------------------------------------


def _saved_floats(layout: _lib.Layout, rows: int, shard: str) -> int:
    """The floats of `saved` by the library's layout of the problem (kljit_problem_layout: the
    templates declare it): a shard's gathered records (kljit._dist), else the header and a saved
    row a row (checked against kljit_plan_saved_size per call)."""
    if shard:
        return _dist.saved_floats(shard, rows, layout.record_floats)
    return layout.saved_floats(rows)


def _fake_saved_floats(key: str, input: Tensor, weight: Tensor, teacher: Optional[Tensor],
                       teacher_ids: Optional[Tensor], teacher_values: Optional[Tensor],
                       teacher_weight: Optional[Tensor], shard: str) -> int:
    """_saved_floats for a traced call, from the layout of its problem as far as fake tensors
    tell it."""
    config = infer_teacher(_config(key), teacher, teacher_ids, teacher_values, teacher_weight)
    sparse, hidden = config.teacher == "sparse_topk", config.teacher == "dense_hidden"
    teacher_data = teacher_values if sparse else teacher
    problem = make_problem(
        config, int(input.shape[-1]), int(weight.shape[0]), dtype_name(input),
        dtype_name(teacher_data), bias=False,
        topk=int(teacher_ids.shape[-1]) if sparse else 0,
        teacher_vocab=(0 if sparse else int(teacher_weight.shape[0]) if hidden
                       else int(teacher.shape[-1])),
        teacher_hidden=int(teacher.shape[-1]) if hidden else 0)
    return _saved_floats(_lib.problem_layout(problem), int(input.shape[0]), shard)


def _two_phase(input, weight, bias, teacher, teacher_ids, teacher_values, labels,
               teacher_weight, teacher_bias, divisor, row_weights, key):
    """kljit_forward: (loss, saved, row_loss, parts). The key's grad_scale and want are
    backward's (with WANT_MAIN_GRAD the plan backward will use: fp32 dW); WANT_PARTS asks for
    row_loss and the loss's parts."""
    k = read_key(key)
    shard = k.shard
    call = Call.make(k.config, _dist.gather_rows(input, shard), weight, bias, teacher,
                     teacher_ids, teacher_values, labels, teacher_weight, teacher_bias, divisor,
                     row_weights, k.temperature, shard, bool(k.want & WANT_MAIN_GRAD) and not shard)
    args = call.args()
    loss = call.loss()
    row_loss, parts = call.parts(k.want, args)
    if shard:
        row_loss, parts = call.empty_parts(row_loss, parts)
    floats = _saved_floats(_lib.problem_layout(call.plan.problem), input.shape[0], shard)
    saved = torch.empty(floats, dtype=torch.float32, device=input.device)
    args.loss, args.saved = loss.data_ptr(), saved.data_ptr()
    if shard:  # the exchange, and a finish without gradients: the loss (kljit._dist)
        call.grads(weight, bias, 0, args)
        _dist.run_shard(call, args, loss, None, saved, sums=(row_loss, parts))
        return loss, saved, row_loss, parts
    nbytes = call.plan.saved_size(call.rows)
    if nbytes != 4 * floats:  # what the fake kernel gives `saved` must be the plan's size
        raise _lib.KljitError(_lib.Status.INTERNAL, "kljit_plan_saved_size",
                              f"{nbytes} bytes; kljit_problem_layout says {4 * floats}")
    call.run(Mode.FORWARD, args)
    return (loss, saved, *call.empty_parts(row_loss, parts))


def _two_phase_fake(input, weight, bias, teacher, teacher_ids, teacher_values, labels,
                    teacher_weight, teacher_bias, divisor, row_weights, key):
    k = read_key(key)
    saved = _fake_saved_floats(k.config, input, weight, teacher, teacher_ids, teacher_values,
                               teacher_weight, k.shard)
    return (input.new_empty(_loss_shape(k.config, input), dtype=torch.float32),
            input.new_empty((saved,), dtype=torch.float32), *_fake_parts(input, k.want, k.shard))


two_phase = _define("two_phase(" + _TENSORS + ", str key) -> (Tensor, Tensor, Tensor, Tensor)",
                    _two_phase, _two_phase_fake)


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


def _two_phase_grads(grad_output, input, weight, bias, teacher, teacher_ids, teacher_values,
                     labels, teacher_weight, teacher_bias, divisor, row_weights, saved, key,
                     main_grad, bias_main_grad):
    """kljit_backward: (dx, dw, db), empty where not wanted. With main_grad (fp32 [V, H]) dW
    is accumulated into it in fp32 (and db into bias_main_grad, else into fresh fp32 zeros,
    returned as db) and dw comes back empty. A shard runs kljit_shard_finish again from the
    saved records and scales by the upstream gradient afterwards. row_weights: forward's."""
    k = read_key(key)
    shard, grad_scale, want = k.shard, k.grad_scale, k.want
    call = Call.make(k.config, _dist.gather_rows(input, shard), weight, bias, teacher,
                     teacher_ids, teacher_values, labels, teacher_weight, teacher_bias, divisor,
                     row_weights, k.temperature, shard, main_grad is not None)
    args = call.args()
    if shard:
        dx, dw, db = call.grads(weight, bias, want, args)
        args.grad_scale = grad_scale
        dx = _dist.run_shard(call, args, call.loss(), dx, saved, finish_only=True)
        scale_grads(grad_output, (dx, dw, db), grad_scale)
        return call.empty_grads(weight, dx, dw, db)
    # kljit_backward takes dL_outer/dloss as fp32: one value, or one per row for NONE; fp16
    # G takes it divided by `lift`, which the GEMMs multiply back in fp32.
    g = grad_output.detach().to(torch.float32)
    lift = _upstream_lift(g, grad_scale, input.dtype == torch.float16)
    g = (g / lift if lift != 1.0 else g).contiguous()
    args.saved, args.grad_output, args.grad_scale = saved.data_ptr(), g.data_ptr(), lift
    dx, dw, db = call.grads(weight, bias, want & ~(WANT_DW if main_grad is not None else 0), args)
    if main_grad is not None and want & WANT_DW:
        if bias is not None and bias_main_grad is None:
            db = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        into = bias_main_grad if bias_main_grad is not None else db
        args.grad_weight = main_grad.data_ptr()
        args.grad_bias = into.data_ptr() if into is not None and into.numel() else None
        args.flags = EXEC_ACCUMULATE_GRAD_WEIGHT | (args.flags & EXEC_NO_GRAD_INPUT)
    call.run(Mode.BACKWARD, args)
    return call.empty_grads(weight, dx, dw, db)


def _two_phase_grads_fake(grad_output, input, weight, bias, teacher, teacher_ids,
                          teacher_values, labels, teacher_weight, teacher_bias, divisor,
                          row_weights, saved, key, main_grad, bias_main_grad):
    want = read_key(key).want
    want_w = want & WANT_DW and main_grad is None
    return (torch.empty_like(input) if want & WANT_DX else _empty(input),
            torch.empty_like(weight) if want_w else _empty(weight),
            torch.empty_like(bias) if want_w and bias is not None else _empty(weight))


two_phase_grads = _define(
    "two_phase_grads(Tensor grad_output, " + _TENSORS + ", Tensor saved, str key, "
    "Tensor(a!)? main_grad, Tensor(b!)? bias_main_grad) -> (Tensor, Tensor, Tensor)",
    _two_phase_grads, _two_phase_grads_fake)


class TwoPhase(torch.autograd.Function):
    """mode='two_phase' with autograd, eager and compiled: forward runs kljit::two_phase (the
    loss and O(N) statistics), backward kljit::two_phase_grads with the upstream gradient
    (straight into main_grad where asked). apply takes what Fused.apply takes and returns
    (loss, row_loss, parts)."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight: Tensor, bias: Optional[Tensor], others: Tuple,
                key: str, done: Optional[Tuple] = None) -> Tuple[Tensor, Tensor, Tensor]:
        inputs = (input, weight, bias, *others, key)
        loss, saved, row_loss, parts = done or (
            _two_phase if _direct(inputs) else two_phase)(*inputs)
        _forward_ctx(ctx, inputs, row_loss, parts)
        ctx.save_for_backward(*inputs[:N_TENSORS], saved)
        return loss, row_loss, parts

    @staticmethod
    def backward(ctx: Any, grad_loss: Optional[Tensor], *_: Any) -> Tuple[Optional[Tensor], ...]:
        tensors = ctx.saved_tensors
        need, k = ctx.needs_input_grad, ctx.key
        want = (WANT_DX if need[0] else 0) | (WANT_DW if need[1] or (ctx.has_bias and need[2])
                                              else 0)
        if not want or grad_loss is None:
            return (None,) * len(need)
        args = (grad_loss, *tensors, call_key(k.config, want, k.temperature, k.grad_scale,
                                              k.shard))
        if ctx.params is None or not want & WANT_DW:
            return _grads_out(ctx, *two_phase_grads(*args, None, None))
        weight, bias = ctx.params
        if k.shard:  # the shard's dW and db come back; main_grad takes them times 1
            dx, dw, db = two_phase_grads(*args, None, None)
            return _grads_out(ctx, dx, *_to_mains(ctx, torch.ones((), device=dx.device), dw,
                                                  db))
        bias_main = (main_grad_of(bias, "bias") if ctx.has_bias
                     and getattr(bias, "main_grad", None) is not None else None)
        dx, _, db = two_phase_grads(*args, main_grad_of(weight, "weight"), bias_main)
        gb = None
        if ctx.has_bias:
            gb = grad_after_main(bias, None) if bias_main is not None else db.to(bias.dtype)
        return _grads_out(ctx, dx, grad_after_main(weight, None), gb)
