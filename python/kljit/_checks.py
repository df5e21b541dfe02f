# SPDX-License-Identifier: Apache-2.0
"""Argument checking for the binding, before anything reaches C: options and tensors.

Nothing here imports torch. Tensors are duck-typed: anything with `.dtype` (whose str() is
"torch.bfloat16" or "bfloat16"), `.shape`, `.device` (with `.type` and `.index`),
`.is_contiguous()` and `.data_ptr()` is checked the same way, so the unit tests run on small
fake tensors where torch is missing and on real CPU tensors where it is present
(python/tests/test_checks.py). Errors name the argument: TypeError for a wrong type or dtype,
ValueError for a wrong shape, device, layout or alignment or option value. The C library
validates everything again (and is the authority on what the kernels support); checking here
first turns a status code into an error that points at the caller's tensor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any, Dict, Optional, Sequence, Tuple

from ._lib import (
    FLAG_ALLOW_TF32,
    FLAG_BIAS,
    FLAG_CHECK_INPUTS,
    FLAG_TEACHER_BIAS,
    FLAG_NATIVE_LOGITS,
    FLAG_PRECISE_ACCUMULATION,
    FLAG_ROW_WEIGHTS,
    FLAG_SCALE_T_SQUARED,
    Divergence,
    DType,
    GradWeightAccum,
    Problem,
    Reduction,
    Tail,
    TeacherForm,
    TemperatureMode,
    TopkValues,
)

TEACHER_FORMS = {
    "dense_probs": TeacherForm.DENSE_PROBS,
    "dense_logprobs": TeacherForm.DENSE_LOGPROBS,
    "dense_logits": TeacherForm.DENSE_LOGITS,
    "sparse_topk": TeacherForm.SPARSE_TOPK,
    "dense_hidden": TeacherForm.DENSE_HIDDEN,
}
MODES = ("fused", "two_phase")
REDUCTIONS = {
    "sum": Reduction.SUM,
    "batchmean": Reduction.BATCHMEAN,
    "mean": Reduction.MEAN,
    "none": Reduction.NONE,
}
TAILS = {"none": Tail.NONE, "renorm": Tail.RENORM, "bucket": Tail.BUCKET}
DIVERGENCES = {"forward_kl": Divergence.FORWARD_KL, "reverse_kl": Divergence.REVERSE_KL,
               "jsd": Divergence.JSD, "tvd": Divergence.TVD,
               "skew_forward_kl": Divergence.SKEW_FORWARD_KL,
               "skew_reverse_kl": Divergence.SKEW_REVERSE_KL}
SKEW_DIVERGENCES = ("skew_forward_kl", "skew_reverse_kl")
TOPK_VALUES = {"probs": TopkValues.PROBS, "logprobs": TopkValues.LOGPROBS}
TEMPERATURE_MODES = {"constant": TemperatureMode.CONSTANT, "runtime": TemperatureMode.RUNTIME}
#: 'auto' is the library's KLJIT_ACCUM_AUTO, resolved per call by kljit_fused & co.
GRAD_WEIGHT_ACCUMS = {"auto": GradWeightAccum.AUTO, "fp32": GradWeightAccum.FP32,
                      "output": GradWeightAccum.OUTPUT_DTYPE}

#: torch dtype names -> kljit dtypes and element sizes.
DTYPES = {
    "float32": DType.FP32,
    "float16": DType.FP16,
    "bfloat16": DType.BF16,
    "int32": DType.INT32,
    "int64": DType.INT64,
}
ELEMENT_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8,
                "float64": 8}
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int32", "int64")

# Limits of include/kljit.h (kljit_plan_check is the authority; these give earlier messages).
MAX_ROWS = 2**31 - 1
MAX_TOPK = 1024
TENSOR_ALIGN = 16  # input, weight, teacher, teacher_values, grad_input, grad_weight
WORKSPACE_ALIGN = 256


def _choice(name: str, value: object, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; "
                         f"got {value!r}")
    return value


def _positive_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class LossConfig:
    """Everything about the loss that is not a tensor; validated on construction.

    teacher: 'dense_probs' (teacher[N,V] = p), 'dense_logprobs' (log p), 'dense_logits' (teacher
        logits, p = softmax(zt / teacher_temperature)), 'sparse_topk' (teacher_ids[N,K] and
        teacher_values[N,K], the top-K of p), 'dense_hidden' (the online teacher: teacher_input
        [N,Ht] and teacher_weight [Vt,Ht]), or None: inferred from the tensors given.
    mode: 'fused' (loss and gradients in forward, stashed for backward; the fastest when the
        loss is the last op) or 'two_phase' (forward saves O(N) statistics, backward
        recomputes the logits and takes the upstream gradient; needed for reduction='none').
    temperature: T > 0; student logits are divided by it. With temperature_mode='runtime' it
        is only the default of each call's `temperature` (one plan serves a schedule).
    teacher_temperature: T of the teacher logits ('dense_logits'); None means temperature.
    scale_t_squared: multiply loss and gradients by T^2 (Hinton).
    reduction: 'sum', 'batchmean' (/ rows kept), 'mean' (/ rows kept * V), 'none' (per row;
        two_phase only).
    ignore_index: rows whose label equals it are excluded (labels are optional).
    eps: floor inside log p, in [1e-30, 1e-3).
    topk_values, tail: the sparse form's values ('probs' or 'logprobs') and its treatment of
        the mass outside the top K ('none', 'renorm' or 'bucket'; see include/kljit.h).
    native_logits: logits in the input dtype instead of fp32 (faster, less precise).
    allow_tf32: fp32 inputs may use TF32 tensor cores.
    check_inputs: checked mode (NaN teacher, bad ids reported as KLJIT_ERR_BAD_INPUT_DATA).
    precise_accumulation: the logits GEMM adds its tensor-core accumulator into a second fp32
        one every 256 of H (KLJIT_FLAG_PRECISE_ACCUMULATION): the loss at most 1.1e-6 relative
        where the tensor cores' truncation reached 1.2e-5, at 2-4.5% of the call's time on an
        H100 (sm_90; where cuBLASLt computes the logits it changes nothing). README "Precision".
    grad_weight_accum: 'auto' (the default, the library's KLJIT_ACCUM_AUTO: fp32 straight
        into an fp32 dW; in the weight dtype when a call has at most
        KLJIT_ACCUM_AUTO_MAX_CHUNKS = 8 token chunks, as few roundings as Liger's; else
        'fp32'), 'fp32' (dW accumulated in fp32 across token chunks, in a V*H fp32 buffer when
        dW is not fp32, then converted) or 'output' (in the weight dtype: no
        V*H fp32 buffer, one rounding per chunk).
    divergence, beta: 'forward_kl' (the default), 'reverse_kl' or 'jsd' with beta in [0, 1]
        (beta 0 and 1 are the forward and reverse KL; include/kljit.h has the math), 'tvd'
        (total variation), 'skew_forward_kl' or 'skew_reverse_kl' with skew_alpha in [0, 1)
        (DistiLLM's KL(p || a p + (1 - a) q) and KL(q || a q + (1 - a) p); 0 is the plain KL).
    hard_weight, soft_weight: loss = hard_weight * CE(labels) + soft_weight * divergence.
    label_smoothing, z_loss: the CE's label smoothing in [0, 1] (torch's) and z-loss weight
        (z_loss * lse(z)^2 added to each row's CE); both need hard_weight > 0.
    softcap, teacher_softcap: logit caps c (z -> c tanh(z / c)); 0 is none. The teacher's cap
        applies to teacher logits ('dense_logits').
    A dense teacher may have more columns than the weight has rows (a padded vocabulary,
    teacher [N, Vt] with Vt >= V): its columns past V are excluded. teacher='dense_hidden' is
    the online teacher (the C API's KLJIT_TEACHER_DENSE_HIDDEN): the functional's teacher_input
    and teacher_weight, its logits computed chunk by chunk and never stored.
    The library refuses (KljitError, KLJIT_ERR_UNSUPPORTED) what its kernels do not compute yet.
    """

    teacher: Optional[str] = None
    mode: str = "fused"
    temperature: float = 1.0
    temperature_mode: str = "constant"
    teacher_temperature: Optional[float] = None
    scale_t_squared: bool = False
    reduction: str = "batchmean"
    ignore_index: int = -100
    eps: float = 1e-20
    topk_values: str = "probs"
    tail: str = "none"
    native_logits: bool = False
    allow_tf32: bool = False
    check_inputs: bool = False
    grad_weight_accum: str = "auto"
    divergence: str = "forward_kl"
    beta: float = 0.0
    hard_weight: float = 0.0
    soft_weight: float = 1.0
    softcap: float = 0.0
    teacher_softcap: float = 0.0
    skew_alpha: float = 0.0
    label_smoothing: float = 0.0
    z_loss: float = 0.0
    precise_accumulation: bool = False

    def __post_init__(self) -> None:
        if self.teacher is not None:
            _choice("teacher", self.teacher, tuple(TEACHER_FORMS))
        _choice("mode", self.mode, MODES)
        _positive_finite("temperature", self.temperature)
        _choice("temperature_mode", self.temperature_mode, tuple(TEMPERATURE_MODES))
        if self.teacher_temperature is not None:
            _positive_finite("teacher_temperature", self.teacher_temperature)
        _choice("reduction", self.reduction, tuple(REDUCTIONS))
        if self.reduction == "none" and self.mode == "fused":
            raise ValueError("reduction='none' needs mode='two_phase': the fused mode computes "
                             "the gradients in forward, with no per-row upstream gradient")
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index, int):
            raise TypeError(f"ignore_index must be an int, got {type(self.ignore_index).__name__}")
        if not -2**63 <= self.ignore_index < 2**63:
            raise ValueError(f"ignore_index must fit in int64, got {self.ignore_index}")
        eps = _positive_finite("eps", self.eps)
        if not 1e-30 <= eps < 1e-3:
            raise ValueError(f"eps must be in [1e-30, 1e-3), got {eps!r}")
        _choice("topk_values", self.topk_values, tuple(TOPK_VALUES))
        _choice("tail", self.tail, tuple(TAILS))
        _choice("grad_weight_accum", self.grad_weight_accum, tuple(GRAD_WEIGHT_ACCUMS))
        _choice("divergence", self.divergence, tuple(DIVERGENCES))
        for name in ("beta", "hard_weight", "soft_weight", "softcap", "teacher_softcap",
                     "skew_alpha", "label_smoothing", "z_loss"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if self.beta > 1 or (self.beta and self.divergence != "jsd"):
            raise ValueError(f"beta must be in [0, 1] and needs divergence='jsd', got "
                             f"{self.beta!r} with {self.divergence!r}")
        if self.skew_alpha >= 1 or (self.skew_alpha and self.divergence not in SKEW_DIVERGENCES):
            raise ValueError(f"skew_alpha must be in [0, 1) and needs divergence="
                             f"'skew_forward_kl' or 'skew_reverse_kl', got {self.skew_alpha!r} "
                             f"with {self.divergence!r}")
        if self.label_smoothing > 1:
            raise ValueError(f"label_smoothing must be in [0, 1], got {self.label_smoothing!r}")
        if (self.label_smoothing or self.z_loss) and not self.hard_weight:
            raise ValueError("label_smoothing and z_loss belong to the hard-label CE: they "
                             "need hard_weight > 0")
        if self.hard_weight == 0 and self.soft_weight == 0:
            raise ValueError("hard_weight and soft_weight are both 0: the loss would be 0")
        for name in ("scale_t_squared", "native_logits", "allow_tf32", "check_inputs",
                     "precise_accumulation"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")
        # The config as JSON: how the ops (kljit._ops) take it, a constant string in a
        # compiled graph; a plain attribute, made once, so torch.compile just reads it.
        key = json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, sort_keys=True)
        object.__setattr__(self, "key", key)

    def with_teacher(self, teacher: str) -> "LossConfig":
        """A copy with the teacher form set."""
        return replace(self, teacher=teacher)


def config_from_options(options: Dict[str, Any]) -> LossConfig:
    """A LossConfig from keyword options, where the teacher form is `teacher_form` (the
    functional's `teacher` is the teacher tensor); LossConfig's own name `teacher` is accepted
    too (the modules have no teacher tensor among their options). The same options give the
    same (frozen) config, remembered: validating and keying one costs a call with keyword
    options more host time than the library's launch. Each value's type is part of what is
    remembered (True, 1 and 1.0 are equal keys but not equal options)."""
    key = tuple((name, type(value), value) for name, value in options.items())
    try:
        hash(key)
    except TypeError:  # an unhashable value: no memory, the checks say what is wrong
        return _config_from_options(key)
    return _remembered_config(key)


def _config_from_options(items: Tuple[Tuple[str, type, Any], ...]) -> LossConfig:
    options = {name: value for name, _, value in items}
    if "teacher_form" in options:
        if "teacher" in options:
            raise TypeError("pass teacher_form or teacher, not both")
        options["teacher"] = options.pop("teacher_form")
    try:
        return LossConfig(**options)
    except TypeError as e:
        if "unexpected keyword" in str(e):
            known = ", ".join(["teacher_form"] + [n for n in LossConfig.__dataclass_fields__
                                                  if n != "teacher"])
            raise TypeError(f"{e}; the options are {known}") from None
        raise


#: config_from_options' memory (lru_cache does not remember a call that raised).
_remembered_config = lru_cache(maxsize=64)(_config_from_options)


# ---- tensors ----------------------------------------------------------------------------


def dtype_name(tensor: Any) -> str:
    """'bfloat16' for torch.bfloat16 (and for a fake tensor's 'bfloat16')."""
    name = str(tensor.dtype)
    return name[6:] if name.startswith("torch.") else name


def device_str(tensor: Any) -> str:
    """'cuda:0', 'cpu', ..."""
    dev = tensor.device
    return dev.type if dev.index is None else f"{dev.type}:{dev.index}"


def _shape(tensor: Any) -> Tuple[int, ...]:
    return tuple(int(s) for s in tensor.shape)


def _fmt_shape(shape: Sequence[object]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _is_tensor(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("dtype", "shape", "device", "is_contiguous", "data_ptr"))


@dataclass
class TensorRule:
    """What one argument must be. `shape` names each dimension: an int must match exactly, a
    str is a symbol (N, H, V, K) bound by the first tensor that has it."""

    name: str
    shape: Tuple[object, ...]
    dtypes: Tuple[str, ...]
    align: int
    same_dtype_as: Optional[str] = None


def check_tensor(rule: TensorRule, tensor: Any, dims: Dict[str, int],
                 dtypes: Dict[str, str], device: Optional[str], require_cuda: bool) -> None:
    """Checks one tensor against its rule, binding shape symbols in `dims` and recording its
    dtype in `dtypes`; raises TypeError or ValueError naming the argument."""
    name = rule.name
    if not _is_tensor(tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if require_cuda and tensor.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor, got one on {device_str(tensor)}")
    if device is not None and device_str(tensor) != device:
        raise ValueError(f"{name} is on {device_str(tensor)} but input is on {device}: every "
                         f"tensor must be on the same device")
    dt = dtype_name(tensor)
    if dt not in rule.dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(rule.dtypes)}, got {dt}")
    if rule.same_dtype_as is not None and dt != dtypes[rule.same_dtype_as]:
        raise TypeError(f"{name} has dtype {dt} but {rule.same_dtype_as} has "
                        f"{dtypes[rule.same_dtype_as]}: they must be the same"
                        + (" (or the weight fp32 with fp16/bf16 input)" if name == "weight"
                           else ""))
    dtypes[name] = dt
    shape = _shape(tensor)
    want = [dims.get(s, s) if isinstance(s, str) else s for s in rule.shape]
    if len(shape) != len(rule.shape):
        raise ValueError(f"{name} must be {len(rule.shape)}-D with shape "
                         f"{_fmt_shape(rule.shape)} = {_fmt_shape(want)}, got "
                         f"{_fmt_shape(shape)}")
    for sym, got in zip(rule.shape, shape):
        bound = dims.get(sym, sym) if isinstance(sym, str) else sym
        if isinstance(bound, int) and bound != got:
            raise ValueError(f"{name} must have shape {_fmt_shape(rule.shape)} = "
                             f"{_fmt_shape(want)}, got {_fmt_shape(shape)}")
        if isinstance(sym, str):
            dims[sym] = got
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (row-major, dense); call .contiguous() "
                         f"on it first")
    ptr = int(tensor.data_ptr())
    if any(shape) and ptr % rule.align:
        raise ValueError(f"{name}'s data pointer {ptr:#x} is not {rule.align}-byte aligned (a "
                         f"slice at an odd offset?); call .clone() on it")


@dataclass
class CallSpec:
    """A checked call: the kljit_problem it needs, its rows, and its device."""

    problem: Problem
    config: LossConfig
    rows: int
    hidden: int
    vocab: int
    device: str
    device_index: Optional[int]
    temperature: float
    dtypes: Dict[str, str] = field(default_factory=dict)

    @property
    def sparse(self) -> bool:
        """True for the sparse top-K teacher."""
        return self.config.teacher == "sparse_topk"


def infer_teacher(config: LossConfig, teacher: Any, teacher_ids: Any,
                  teacher_values: Any, teacher_weight: Any = None) -> LossConfig:
    """Sets config.teacher from the tensors given when it is None; else checks they agree.
    The online teacher's teacher_input travels as `teacher` (with teacher_weight)."""
    sparse_given = teacher_ids is not None or teacher_values is not None
    if config.teacher is None and teacher_weight is not None:
        config = config.with_teacher("dense_hidden")
    if config.teacher == "dense_hidden" or teacher_weight is not None:
        if config.teacher != "dense_hidden" or sparse_given:
            raise ValueError("teacher_weight is the online teacher's head: it needs "
                             "teacher='dense_hidden' and no teacher_ids / teacher_values")
        if teacher is None or teacher_weight is None:
            raise ValueError("teacher='dense_hidden' needs teacher_input [N, Ht] and "
                             "teacher_weight [Vt, Ht]")
        return config
    if config.teacher is None:
        if teacher is None and not sparse_given:
            raise ValueError("no teacher given: pass teacher (dense [N, V]) or teacher_ids and "
                             "teacher_values (sparse top-K [N, K])")
        config = config.with_teacher("sparse_topk" if sparse_given else "dense_probs")
    if config.teacher == "sparse_topk":
        if teacher is not None:
            raise ValueError("teacher must be None with teacher='sparse_topk' (give "
                             "teacher_ids and teacher_values)")
        if teacher_ids is None or teacher_values is None:
            raise ValueError("teacher='sparse_topk' needs both teacher_ids [N, K] and "
                             "teacher_values [N, K]")
    else:
        if sparse_given:
            raise ValueError(f"teacher_ids and teacher_values need teacher='sparse_topk', not "
                             f"{config.teacher!r}")
        if teacher is None:
            raise ValueError(f"teacher='{config.teacher}' needs teacher, a dense [N, V] tensor")
    return config


def make_problem(config: LossConfig, hidden: int, vocab: int, input_dtype: str,
                 teacher_dtype: str, *, bias: bool, topk: int = 0, topk_id_dtype: str = "int64",
                 label_dtype: str = "int64", grad_weight_dtype: Optional[str] = None,
                 teacher_vocab: int = 0, teacher_hidden: int = 0,
                 teacher_bias: bool = False, row_weights: bool = False) -> Problem:
    """The kljit_problem of a call, computing in the input dtype. dW and db come out in
    grad_weight_dtype (the stored weight's: what autograd wants; fp32 for an fp32 master
    weight; default the input dtype), accumulated as config.grad_weight_accum says.
    teacher_vocab: the dense teacher's columns (0 or vocab: unpadded). teacher_bias: the
    online teacher's head has a bias (KLJIT_FLAG_TEACHER_BIAS). row_weights: the calls pass
    row weights (KLJIT_FLAG_ROW_WEIGHTS)."""
    teacher_vocab = teacher_vocab or vocab
    if config.teacher is None:
        raise ValueError("config.teacher must be set (see infer_teacher)")
    flags = ((FLAG_BIAS if bias else 0) | (FLAG_SCALE_T_SQUARED if config.scale_t_squared else 0)
             | (FLAG_NATIVE_LOGITS if config.native_logits else 0)
             | (FLAG_ALLOW_TF32 if config.allow_tf32 else 0)
             | (FLAG_CHECK_INPUTS if config.check_inputs else 0)
             | (FLAG_PRECISE_ACCUMULATION if config.precise_accumulation else 0)
             | (FLAG_TEACHER_BIAS if teacher_bias else 0)
             | (FLAG_ROW_WEIGHTS if row_weights else 0))
    runtime = config.temperature_mode == "runtime"
    sparse = config.teacher == "sparse_topk"
    return Problem.init(
        hidden=hidden,
        vocab=vocab,
        input_dtype=DTYPES[input_dtype],
        weight_dtype=DTYPES[input_dtype],
        teacher_dtype=DTYPES[teacher_dtype],
        teacher=TEACHER_FORMS[config.teacher],
        topk=topk if sparse else 0,
        topk_id_dtype=DTYPES[topk_id_dtype],
        topk_values=TOPK_VALUES[config.topk_values],
        tail=TAILS[config.tail],
        temperature_mode=TEMPERATURE_MODES[config.temperature_mode],
        # A runtime-temperature plan does not depend on T: one plan for every T.
        temperature=1.0 if runtime else config.temperature,
        teacher_temperature=config.teacher_temperature or 0.0,
        reduction=REDUCTIONS[config.reduction],
        label_dtype=DTYPES[label_dtype],
        ignore_index=config.ignore_index,
        eps=config.eps,
        grad_weight_dtype=DTYPES[grad_weight_dtype or input_dtype],
        grad_weight_accum=GRAD_WEIGHT_ACCUMS[config.grad_weight_accum],
        flags=flags,
        divergence=DIVERGENCES[config.divergence],
        beta=float(config.beta),
        hard_weight=float(config.hard_weight),
        soft_weight=float(config.soft_weight),
        softcap=float(config.softcap),
        teacher_softcap=float(config.teacher_softcap),
        skew_alpha=float(config.skew_alpha),
        label_smoothing=float(config.label_smoothing),
        z_loss=float(config.z_loss),
        teacher_vocab=teacher_vocab if teacher_vocab != vocab else 0,
        teacher_ld=teacher_vocab if teacher_vocab != vocab and not teacher_hidden else 0,
        teacher_hidden=teacher_hidden,
    )


def check_call(config: LossConfig, input: Any, weight: Any, teacher: Any = None, *,
               bias: Any = None, labels: Any = None, teacher_ids: Any = None,
               teacher_values: Any = None, temperature: Optional[float] = None,
               require_cuda: bool = True, teacher_weight: Any = None,
               teacher_bias: Any = None, divisor: Any = None,
               row_weights: Any = None) -> CallSpec:
    """Checks every argument of one call and returns its CallSpec.

    input [N, H] and weight [V, H] (fp32, fp16 or bf16, one dtype, or an fp32 weight with
    fp16/bf16 input: computed in the input dtype, dW in fp32), bias [V] (weight's dtype),
    labels [N] (int32/int64), and either teacher [N, V] (any float dtype) or teacher_ids
    [N, K] (int32/int64) with teacher_values [N, K] (any float dtype). All on one CUDA device
    (require_cuda=False lets the tests use CPU tensors), contiguous, aligned as
    include/kljit.h asks. `temperature` is the per-call T (temperature_mode='runtime' only).
    The online teacher: teacher (its input) [N, Ht], teacher_weight [Vt, Ht] and optionally
    teacher_bias [Vt], one dtype. divisor: the global divisor of batchmean and mean
    (num_items_in_batch), a float64 tensor of one element on the input's device.
    row_weights [N] (fp32): each row's loss and gradient times its weight.
    """
    config = infer_teacher(config, teacher, teacher_ids, teacher_values, teacher_weight)
    hidden = config.teacher == "dense_hidden"
    dims: Dict[str, int] = {}
    dtypes: Dict[str, str] = {}
    if not _is_tensor(input):
        raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
    device = device_str(input)
    if _is_tensor(weight) and 0 in _shape(weight):
        raise ValueError(f"weight has no elements (shape {_fmt_shape(_shape(weight))}): a ZeRO-3 "
                         f"partitioned parameter outside its gather? Call the loss inside "
                         f"deepspeed.zero.GatheredParameters(weight) or the head module's "
                         f"forward")
    # Mixed precision: an fp32 (master) weight with fp16/bf16 input; else one dtype.
    mixed = (_is_tensor(input) and _is_tensor(weight) and dtype_name(weight) == "float32"
             and dtype_name(input) in ("float16", "bfloat16"))
    rules = [(TensorRule("input", ("N", "H"), FLOAT_DTYPES, TENSOR_ALIGN), input),
             (TensorRule("weight", ("V", "H"), FLOAT_DTYPES, TENSOR_ALIGN,
                         None if mixed else "input"), weight)]
    if bias is not None:
        rules.append((TensorRule("bias", ("V",), FLOAT_DTYPES, 1, "weight"), bias))
    if labels is not None:
        rules.append((TensorRule("labels", ("N",), INT_DTYPES, 1), labels))
    if config.teacher == "sparse_topk":
        rules.append((TensorRule("teacher_ids", ("N", "K"), INT_DTYPES, 1), teacher_ids))
        rules.append((TensorRule("teacher_values", ("N", "K"), FLOAT_DTYPES, TENSOR_ALIGN),
                      teacher_values))
    elif hidden:  # `teacher` is the online teacher's teacher_input
        rules.append((TensorRule("teacher_input", ("N", "Ht"), FLOAT_DTYPES, TENSOR_ALIGN),
                      teacher))
        rules.append((TensorRule("teacher_weight", ("Vt", "Ht"), FLOAT_DTYPES, TENSOR_ALIGN,
                                 "teacher_input"), teacher_weight))
        if teacher_bias is not None:
            rules.append((TensorRule("teacher_bias", ("Vt",), FLOAT_DTYPES, 1, "teacher_input"),
                          teacher_bias))
    elif teacher_bias is not None:
        raise ValueError("teacher_bias is the online teacher's head bias: it needs "
                         "teacher_input and teacher_weight")
    else:
        # Vt: a padded teacher may have more columns than V (checked below)
        rules.append((TensorRule("teacher", ("N", "Vt"), FLOAT_DTYPES, TENSOR_ALIGN), teacher))
    if divisor is not None:
        if config.reduction not in ("batchmean", "mean"):
            raise ValueError(f"num_items_in_batch divides a batchmean or mean loss; this one's "
                             f"reduction is {config.reduction!r}")
        rules.append((TensorRule("num_items_in_batch", (1,), ("float64",), 8), divisor))
    if row_weights is not None:
        rules.append((TensorRule("row_weights", ("N",), ("float32",), 4), row_weights))
    for rule, tensor in rules:
        if rule.align == 1 and _is_tensor(tensor):  # element-size alignment
            rule.align = ELEMENT_SIZE.get(dtype_name(tensor), 1)
        check_tensor(rule, tensor, dims, dtypes, device, require_cuda)
    n, h, v = dims["N"], dims["H"], dims["V"]
    if n < 1:
        raise ValueError("input has no rows (N = 0); kljit needs N >= 1")
    if n > MAX_ROWS:
        raise ValueError(f"input has {n} rows; one call takes at most 2^31 - 1")
    if h < 1:
        raise ValueError("input has H = 0 columns")
    if v < 2:
        raise ValueError(f"weight has V = {v} rows; the vocabulary needs at least 2")
    if config.hard_weight and labels is None:
        raise ValueError(f"hard_weight={config.hard_weight!r} needs labels: the hard-label "
                         f"cross-entropy is computed on them")
    vt = dims.get("Vt", v)
    if vt < v:
        what = "teacher_weight has" if hidden else "teacher has"
        raise ValueError(f"{what} {vt} {'rows' if hidden else 'columns'} but weight has V = {v} "
                         f"rows: a teacher needs at least V (more for a padded vocabulary)")
    topk = 0
    if config.teacher == "sparse_topk":
        topk = dims["K"]
        if not 1 <= topk <= min(v, MAX_TOPK):
            raise ValueError(f"teacher_ids has K = {topk} columns; K must be in [1, min(V, "
                             f"{MAX_TOPK})] = [1, {min(v, MAX_TOPK)}]")
    if config.temperature_mode == "runtime":
        t = (config.temperature if temperature is None
             else _positive_finite("temperature", temperature))
    else:
        if temperature is not None and temperature != config.temperature:
            raise ValueError(f"temperature={temperature!r} per call needs "
                             f"temperature_mode='runtime' (this loss has a constant "
                             f"T = {config.temperature!r})")
        t = config.temperature
    problem = make_problem(
        config, h, v, dtypes["input"],
        dtypes["teacher_values" if config.teacher == "sparse_topk"
               else "teacher_input" if hidden else "teacher"],
        bias=bias is not None, topk=topk, topk_id_dtype=dtypes.get("teacher_ids", "int64"),
        label_dtype=dtypes.get("labels", "int64"), grad_weight_dtype=dtypes["weight"],
        teacher_vocab=vt, teacher_hidden=dims.get("Ht", 0),
        teacher_bias=teacher_bias is not None, row_weights=row_weights is not None)
    return CallSpec(problem=problem, config=config, rows=n, hidden=h, vocab=v, device=device,
                    device_index=input.device.index, temperature=t, dtypes=dtypes)


def check_workspace(tensor: Any, size: int) -> None:
    """The workspace must hold `size` bytes and start 256-byte aligned (cuBLASLt's)."""
    ptr = int(tensor.data_ptr())
    if ptr % WORKSPACE_ALIGN:
        raise ValueError(f"workspace's data pointer {ptr:#x} is not {WORKSPACE_ALIGN}-byte "
                         f"aligned")
    n = 1
    for s in tensor.shape:
        n *= int(s)
    if n * ELEMENT_SIZE.get(dtype_name(tensor), 1) < size:
        raise ValueError(f"workspace holds fewer than the {size} bytes this call needs")
