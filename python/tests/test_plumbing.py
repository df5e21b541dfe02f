# SPDX-License-Identifier: Apache-2.0
"""The autograd plumbing of python/kljit/functional.py on CPU tensors, against a fake library.

FakePlan stands in for a kljit_plan: it reads the kljit_args it is given the way the C library
would (raw pointers, the problem's dtypes and shapes, the exec flags, the saved buffer, the
upstream gradient), computes with kl_div_fp64, and writes loss and gradients through the
pointers. So this checks, without a GPU, that the binding passes the right tensors in the
right fields, allocates outputs of the right dtype and size, scales fused gradients, feeds
backward its upstream gradient, asks only for the gradients needed, and reshapes per-row
losses. The real library's arithmetic is the GPU tests' business. Needs torch (CPU).
"""

from __future__ import annotations

import ctypes
import math
import unittest
from pathlib import Path
from typing import Any, Dict, List
from unittest import mock

from _util import labels, require

from kljit import _checks, _lib
from kljit._lib import EXEC_ACCUMULATE_GRAD_WEIGHT, EXEC_NO_GRAD_INPUT, EXEC_NO_GRAD_WEIGHT, Mode

TORCH_DTYPES = {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16", "INT32": "int32",
                "INT64": "int64"}


def recording_mode() -> Any:
    """A TorchDispatchMode that records the name of every op dispatched under it (.names)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: List[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    return Ops()


def reverse(table: Dict[str, Any], value: int) -> str:
    return next(k for k, v in table.items() if int(v) == int(value))


class FakePlan:
    """Reads and writes memory through kljit_args pointers like libkljit would."""

    def __init__(self, problem: _lib.Problem) -> None:
        self.problem = problem
        self.calls: List[Dict[str, Any]] = []

    def workspace_size(self, mode: Mode, rows: int) -> int:
        return 4096 + 16 * rows

    def saved_size(self, rows: int) -> int:
        return 4 * _lib.problem_layout(self.problem).saved_floats(rows)

    def chunk_rows(self, rows: int) -> int:
        return 4  # the tests' 6 rows are 2 chunks

    def _tensor(self, ptr: int, shape: tuple, dtype_name: str) -> Any:
        import torch

        dtype = getattr(torch, dtype_name)
        n = 1
        for s in shape:
            n *= s
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        buf = (ctypes.c_char * nbytes).from_address(ptr)
        return torch.frombuffer(buf, dtype=dtype).view(shape)

    def _config(self) -> _checks.LossConfig:
        pb = self.problem
        return _checks.LossConfig(
            teacher=reverse(_checks.TEACHER_FORMS, pb.teacher),
            mode="two_phase", temperature=pb.temperature if pb.temperature_mode == 1 else 1.0,
            temperature_mode=reverse(_checks.TEMPERATURE_MODES, pb.temperature_mode),
            teacher_temperature=pb.teacher_temperature or None,
            scale_t_squared=bool(pb.flags & _lib.FLAG_SCALE_T_SQUARED),
            reduction=reverse(_checks.REDUCTIONS, pb.reduction), ignore_index=pb.ignore_index,
            eps=pb.eps, topk_values=reverse(_checks.TOPK_VALUES, pb.topk_values),
            tail=reverse(_checks.TAILS, pb.tail),
            divergence=reverse(_checks.DIVERGENCES, pb.divergence), beta=pb.beta,
            hard_weight=pb.hard_weight, soft_weight=pb.soft_weight, softcap=pb.softcap,
            teacher_softcap=pb.teacher_softcap, skew_alpha=pb.skew_alpha,
            label_smoothing=pb.label_smoothing, z_loss=pb.z_loss)

    def execute(self, mode: Mode, stream: int, args: _lib.Args) -> None:
        import torch

        from kljit.reference import kl_div_fp64

        pb, n = self.problem, args.rows
        h, v, k = pb.hidden, pb.vocab, pb.topk
        assert args.struct_size == ctypes.sizeof(_lib.Args)
        assert args.workspace and args.workspace_size >= self.workspace_size(mode, n)

        def dt(field: str) -> str:
            return TORCH_DTYPES[_lib.DType(getattr(pb, field)).name]

        x = self._tensor(args.input, (n, h), dt("input_dtype"))
        w = self._tensor(args.weight, (v, h), dt("weight_dtype"))
        b = self._tensor(args.bias, (v,), dt("weight_dtype")) if args.bias else None
        assert bool(args.bias) == bool(pb.flags & _lib.FLAG_BIAS)
        labels = self._tensor(args.labels, (n,), dt("label_dtype")) if args.labels else None
        sparse = pb.teacher == _lib.TeacherForm.SPARSE_TOPK
        hidden = pb.teacher == _lib.TeacherForm.DENSE_HIDDEN
        xt = wt = bt = teacher = None
        assert bool(args.teacher_bias) == bool(pb.flags & _lib.FLAG_TEACHER_BIAS)
        if hidden:  # the online teacher: its input and head, not a dense teacher
            assert not args.teacher
            ht, vt = pb.teacher_hidden, pb.teacher_vocab or v
            xt = self._tensor(args.teacher_input, (n, ht), dt("teacher_dtype"))
            wt = self._tensor(args.teacher_weight, (vt, ht), dt("teacher_dtype"))
            if args.teacher_bias:
                bt = self._tensor(args.teacher_bias, (vt,), dt("teacher_dtype"))
        elif not sparse:
            teacher = self._tensor(args.teacher, (n, v), dt("teacher_dtype"))
        ids = self._tensor(args.teacher_ids, (n, k), dt("topk_id_dtype")) if sparse else None
        vals = self._tensor(args.teacher_values, (n, k), dt("teacher_dtype")) if sparse else None
        assert bool(args.row_weights) == bool(pb.flags & _lib.FLAG_ROW_WEIGHTS)
        rw = self._tensor(args.row_weights, (n,), "float32").clone() if args.row_weights \
            else None
        none = pb.reduction == _lib.Reduction.NONE
        go = None
        if mode == Mode.BACKWARD:
            go = self._tensor(args.grad_output, (n,) if none else (), "float32").clone()
            assert args.saved
        runtime = pb.temperature_mode == _lib.TemperatureMode.RUNTIME
        ref = kl_div_fp64(x, w, teacher, bias=b, labels=labels, teacher_ids=ids,
                          teacher_values=vals, grad_output=go, config=self._config(),
                          temperature=args.temperature if runtime else None,
                          teacher_input=xt, teacher_weight=wt, teacher_bias=bt, row_weights=rw)
        self.calls.append({"mode": Mode(mode), "flags": args.flags, "go": go,
                           "temperature": args.temperature, "row_weights": rw,
                           "outputs": (bool(args.row_loss), bool(args.loss_parts))})
        if mode != Mode.BACKWARD:
            out = self._tensor(args.loss, (n,) if none else (), "float32")
            out.copy_(ref["row_loss"] if none else ref["loss"])
            if args.row_loss:  # the optional outputs (kljit_fused and kljit_forward only)
                self._tensor(args.row_loss, (n,), "float32").copy_(ref["row_loss"])
            if args.loss_parts:
                self._tensor(args.loss_parts, (2,), "float32").copy_(
                    torch.stack([ref["loss_soft"], ref["loss_hard"]]))
        else:
            assert not args.row_loss and not args.loss_parts
        if mode == Mode.FORWARD:
            self._tensor(args.saved, (self.saved_size(n) // 4,), "float32").zero_()
            return
        s = args.grad_scale  # kljit_fused and kljit_backward multiply the gradients by it
        self.calls[-1]["grad_scale"] = s
        if not args.flags & EXEC_NO_GRAD_INPUT:
            self._tensor(args.grad_input, (n, h), dt("input_dtype")).copy_(ref["grad_input"] * s)
        if not args.flags & EXEC_NO_GRAD_WEIGHT:
            gw = dt("grad_weight_dtype")
            dw = self._tensor(args.grad_weight, (v, h), gw)
            db = self._tensor(args.grad_bias, (v,), gw) if args.bias else None
            if args.flags & EXEC_ACCUMULATE_GRAD_WEIGHT:  # dW += ..., db += ...
                dw.copy_(dw.double() + ref["grad_weight"] * s)
                if db is not None:
                    db.copy_(db.double() + ref["grad_bias"] * s)
            else:
                dw.copy_(ref["grad_weight"] * s)
                if db is not None:
                    db.copy_(ref["grad_bias"] * s)


@labels("torch")
class PlumbingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.torch = require("torch")
        import kljit

        self.kljit = kljit
        self.plans: List[FakePlan] = []

        def get_plan(problem: _lib.Problem, device: int) -> FakePlan:
            plan = FakePlan(problem)
            self.plans.append(plan)
            return plan

        from kljit import _ops

        self.patches = [mock.patch.object(_ops, "REQUIRE_CUDA", False),
                        mock.patch.object(_ops, "stream", lambda device: 0),
                        mock.patch.object(_ops, "scale_in_place",
                                          lambda ts, g: [t.mul_(g) for t in ts]),
                        mock.patch.object(_lib, "get_plan", get_plan)]
        for p in self.patches:
            p.start()
            self.addCleanup(p.stop)
        # the binding remembers checked calls with their plans: forget the real or fake ones
        _lib.clear_plan_cache()
        self.addCleanup(_lib.clear_plan_cache)

    def inputs(self, teacher: str = "dense_probs", n: int = 6, dtype: Any = None) -> Dict:
        t = self.torch
        g = t.Generator().manual_seed(3)
        dtype = dtype or t.float32
        h, v, k = 8, 40, 5
        out = {"x": (t.rand(n, h, generator=g) - 0.5).to(dtype).requires_grad_(),
               "w": (t.rand(v, h, generator=g) - 0.5).to(dtype).requires_grad_(),
               "b": (t.rand(v, generator=g) - 0.5).to(dtype).requires_grad_()}
        if teacher == "sparse_topk":
            out["teacher_ids"] = t.stack([t.randperm(v, generator=g)[:k] for _ in range(n)])
            out["teacher_values"] = t.rand(n, k, generator=g) * 0.1
        else:
            out["teacher"] = t.softmax(t.randn(n, v, generator=g), -1)
        return out

    def reference(self, inp: Dict, go: Any = None, **options: Any) -> Dict:
        from kljit.reference import kl_div_fp64

        return kl_div_fp64(inp["x"].detach(), inp["w"].detach(), inp.get("teacher"),
                           bias=inp["b"].detach(), teacher_ids=inp.get("teacher_ids"),
                           teacher_values=inp.get("teacher_values"), grad_output=go, **options)

    def loss(self, inp: Dict, **options: Any) -> Any:
        return self.kljit.fused_linear_kl_div(
            inp["x"], inp["w"], inp.get("teacher"), bias=inp["b"],
            teacher_ids=inp.get("teacher_ids"), teacher_values=inp.get("teacher_values"),
            **options)

    def assert_close(self, got: Any, want: Any, what: str, tol: float = 1e-6) -> None:
        got, want = got.detach().double(), want.detach().double()
        err = float((got - want).norm() / max(float(want.norm()), 1e-30))
        self.assertLess(err, tol, what)

    def test_both_modes_pass_tensors_and_return_gradients_scaled_by_grad_output(self) -> None:
        t = self.torch
        for mode in ("fused", "two_phase"):
            for teacher in ("dense_probs", "sparse_topk"):
                inp = self.inputs(teacher)
                loss = self.loss(inp, mode=mode, temperature=2.0, scale_t_squared=True)
                self.assertEqual(loss.dtype, t.float32)
                self.assertEqual(loss.shape, ())
                go = t.tensor(0.3)
                loss.backward(go)
                ref = self.reference(inp, go, temperature=2.0, scale_t_squared=True)
                what = f"{mode} {teacher}"
                self.assert_close(loss, ref["loss"], what + " loss")
                self.assert_close(inp["x"].grad, ref["grad_input"], what + " dX")
                self.assert_close(inp["w"].grad, ref["grad_weight"], what + " dW")
                self.assert_close(inp["b"].grad, ref["grad_bias"], what + " db")
        modes = [c["mode"] for p in self.plans for c in p.calls]
        self.assertEqual(modes, [Mode.FUSED, Mode.FUSED, Mode.FORWARD, Mode.BACKWARD,
                                 Mode.FORWARD, Mode.BACKWARD])

    def test_bf16_gradients_come_back_in_the_parameter_dtype(self) -> None:
        t = self.torch
        for mode in ("fused", "two_phase"):
            inp = self.inputs(dtype=t.bfloat16)
            self.loss(inp, mode=mode).backward()
            for name in ("x", "w", "b"):
                self.assertEqual(inp[name].grad.dtype, t.bfloat16, name)
            self.assertEqual(self.plans[-1].problem.grad_weight_dtype, _lib.DType.BF16)

    def test_reduction_none_returns_rows_in_the_input_shape_and_takes_row_gradients(self) -> None:
        t = self.torch
        inp = self.inputs(n=6)
        x3 = inp["x"].detach().view(2, 3, 8).clone().requires_grad_()
        teacher3 = inp["teacher"].view(2, 3, 40)
        loss = self.kljit.fused_linear_kl_div(x3, inp["w"], teacher3, bias=inp["b"],
                                              mode="two_phase", reduction="none")
        self.assertEqual(tuple(loss.shape), (2, 3))
        go = t.arange(6, dtype=t.float32).view(2, 3) / 6
        loss.backward(go)
        ref = self.reference(inp, go.reshape(-1), mode="two_phase", reduction="none")
        self.assert_close(loss.reshape(-1), ref["row_loss"], "row losses")
        self.assert_close(x3.grad.reshape(6, 8), ref["grad_input"], "dX")
        self.assertEqual(self.plans[-1].calls[-1]["go"].shape, (6,))

    def test_only_wanted_gradients_are_asked_of_the_library(self) -> None:
        t = self.torch
        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            inp["w"].requires_grad_(False)
            inp["b"].requires_grad_(False)
            self.loss(inp, mode=mode).backward()
            self.assertEqual(self.plans[-1].calls[-1]["flags"], EXEC_NO_GRAD_WEIGHT)
            self.assertIsNone(inp["w"].grad)
            inp = self.inputs()
            with t.no_grad():
                loss = self.loss(inp, mode=mode)
            self.assertFalse(loss.requires_grad)
            if mode == "fused":
                self.assertEqual(self.plans[-1].calls[-1]["flags"],
                                 EXEC_NO_GRAD_INPUT | EXEC_NO_GRAD_WEIGHT)

    def test_runtime_temperature_reaches_the_library_per_call(self) -> None:
        inp = self.inputs()
        for temp in (0.5, 3.0):
            loss = self.loss(inp, temperature_mode="runtime", temperature=temp, mode="two_phase")
            loss.backward()
            self.assertEqual([c["temperature"] for c in self.plans[-1].calls], [temp, temp])
            self.assertEqual(self.plans[-1].problem.temperature, 1.0)

    def test_a_fused_loss_backpropagated_twice_raises(self) -> None:
        inp = self.inputs()
        loss = self.loss(inp)
        loss.backward(retain_graph=True)
        with self.assertRaises(RuntimeError):
            loss.backward()

    def test_modules_validate_options_once_and_call_the_functional(self) -> None:
        t = self.torch
        with self.assertRaises(ValueError):
            self.kljit.FusedLinearKLDivLoss(reduction="none")  # fused mode
        head = self.kljit.FusedLinearKLDiv(8, 40, bias=True, mode="two_phase")
        self.assertEqual(tuple(head.weight.shape), (40, 8))
        x = t.randn(2, 3, 8, requires_grad=True)
        teacher = t.softmax(t.randn(2, 3, 40), -1)
        head(x, teacher).backward()
        self.assertEqual(tuple(x.grad.shape), (2, 3, 8))
        self.assertIsNotNone(head.weight.grad)
        self.assertIsNotNone(head.bias.grad)
        self.assertIn("mode=two_phase", repr(head))

    def test_teacher_form_is_a_keyword_beside_the_teacher_tensor(self) -> None:
        t = self.torch
        inp = self.inputs()
        zt = t.randn(6, 40)
        loss = self.kljit.fused_linear_kl_div(inp["x"], inp["w"], zt, bias=inp["b"],
                                              teacher_form="dense_logits", temperature=2.0)
        self.assertEqual(self.plans[-1].problem.teacher, _lib.TeacherForm.DENSE_LOGITS)
        ref = self.reference({**inp, "teacher": zt},
                             config=_checks.LossConfig(teacher="dense_logits", temperature=2.0))
        self.assert_close(loss, ref["loss"], "loss")
        with self.assertRaises(TypeError):
            self.kljit.fused_linear_kl_div(inp["x"], inp["w"], zt, teacher_form="dense_logits",
                                           teacher_forms="x")
        self.assertEqual(self.kljit.FusedLinearKLDivLoss(teacher_form="sparse_topk")
                         .config.teacher, "sparse_topk")

    def test_an_fp32_master_weight_with_bf16_input_computes_in_bf16_and_returns_fp32_grads(
            self) -> None:
        t = self.torch
        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            x16 = inp["x"].detach().to(t.bfloat16).requires_grad_()
            self.kljit.fused_linear_kl_div(x16, inp["w"], inp["teacher"], bias=inp["b"],
                                           mode=mode).backward()
            pb = self.plans[-1].problem
            self.assertEqual((pb.input_dtype, pb.weight_dtype, pb.grad_weight_dtype),
                             (_lib.DType.BF16, _lib.DType.BF16, _lib.DType.FP32), mode)
            # the library's AUTO: an fp32 dW accumulates in place in fp32 (unit.chunk)
            self.assertEqual(pb.grad_weight_accum, _lib.GradWeightAccum.AUTO, mode)
            self.assertEqual((x16.grad.dtype, inp["w"].grad.dtype, inp["b"].grad.dtype),
                             (t.bfloat16, t.float32, t.float32), mode)

    def test_autocast_casts_the_input_and_keeps_the_fp32_weight(self) -> None:
        t = self.torch
        inp = self.inputs()
        with t.autocast("cpu", dtype=t.bfloat16):
            loss = self.loss(inp)
        loss.backward()
        pb = self.plans[-1].problem
        self.assertEqual((pb.input_dtype, pb.grad_weight_dtype), (_lib.DType.BF16, _lib.DType.FP32))
        self.assertEqual((inp["x"].grad.dtype, inp["w"].grad.dtype), (t.float32, t.float32))

    def test_grad_scale_reaches_the_library_and_backward_divides_it_out(self) -> None:
        t = self.torch
        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            loss = self.loss(inp, mode=mode, grad_scale=1024.0)
            loss.backward(t.tensor(2048.0))
            self.assertEqual(self.plans[-1].calls[-1]["grad_scale"], 1024.0, mode)
            ref = self.reference(inp, t.tensor(2048.0))
            self.assert_close(inp["x"].grad, ref["grad_input"], mode + " dX")
            self.assert_close(inp["w"].grad, ref["grad_weight"], mode + " dW")
        with self.assertRaises(ValueError):
            self.loss(self.inputs(), grad_scale=float("inf"))

    def test_fp16_two_phase_takes_a_large_upstream_gradient_out_of_g(self) -> None:
        t = self.torch
        inp = self.inputs(dtype=t.float16)
        self.loss(inp, mode="two_phase").backward(t.tensor(3000.0))
        call = self.plans[-1].calls[-1]
        self.assertEqual(call["grad_scale"], 4096.0)  # the power of two >= 3000
        self.assertAlmostEqual(float(call["go"]), 3000.0 / 4096.0, places=6)

    def test_the_online_teacher_reaches_the_library_as_its_input_and_head(self) -> None:
        t = self.torch
        g = t.Generator().manual_seed(5)
        xt = t.rand(6, 12, generator=g) - 0.5
        wt = t.rand(40, 12, generator=g) - 0.5
        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            teacher_in = xt.clone().requires_grad_()
            loss = self.kljit.fused_linear_kl_div(
                inp["x"], inp["w"], bias=inp["b"], teacher_input=teacher_in, teacher_weight=wt,
                mode=mode, divergence="jsd", beta=0.5, temperature=2.0)
            loss.backward()
            pb = self.plans[-1].problem
            self.assertEqual((pb.teacher, pb.teacher_hidden, pb.divergence),
                             (_lib.TeacherForm.DENSE_HIDDEN, 12, _lib.Divergence.JSD), mode)
            ref = self.reference({**inp, "teacher": None}, teacher_input=xt, teacher_weight=wt,
                                 divergence="jsd", beta=0.5, temperature=2.0)
            self.assert_close(loss, ref["loss"], mode + " loss")
            self.assert_close(inp["x"].grad, ref["grad_input"], mode + " dX")
            self.assert_close(inp["w"].grad, ref["grad_weight"], mode + " dW")
            self.assertIsNone(teacher_in.grad, "no gradient reaches the teacher")
            # the teacher head's bias reaches the library (its flag and pointer)
            bt = t.rand(40, generator=g) * 4 - 2
            inp = self.inputs()
            loss = self.kljit.fused_linear_kl_div(
                inp["x"], inp["w"], teacher_input=xt, teacher_weight=wt, teacher_bias=bt,
                mode=mode, divergence="jsd", beta=0.5)
            loss.backward()
            self.assertTrue(self.plans[-1].problem.flags & _lib.FLAG_TEACHER_BIAS, mode)
            ref = self.reference({**inp, "b": t.zeros(40), "teacher": None}, teacher_input=xt,
                                 teacher_weight=wt, teacher_bias=bt, divergence="jsd", beta=0.5)
            self.assert_close(loss, ref["loss"], mode + " loss with a teacher bias")
            self.assert_close(inp["w"].grad, ref["grad_weight"], mode + " dW with a teacher bias")
        jsd = self.kljit.FusedLinearJSD(jsd_beta=0.25, temperature=1.5)
        inp = self.inputs()
        labels = t.tensor([1, -100, 3, 4, -100, 6])
        loss = jsd(inp["x"], inp["w"], xt, wt, labels)
        ref = self.reference({**inp, "b": t.zeros(40, requires_grad=True), "teacher": None},
                             teacher_input=xt, teacher_weight=wt, labels=labels,
                             divergence="jsd", beta=0.25, temperature=1.5)
        self.assert_close(loss, ref["loss"], "FusedLinearJSD loss")
        with self.assertRaises(ValueError):
            self.kljit.fused_linear_kl_div(inp["x"], inp["w"], inp["teacher"], teacher_input=xt,
                                           teacher_weight=wt)

    def test_each_mode_has_one_autograd_path_its_function_over_its_ops(self) -> None:
        # eager calls launch the forward op's kernel once, directly (no dispatcher's round
        # trip: _ops._direct), before the mode's Function records the node (_ops.launch: under
        # the caller's grad mode); backward's op runs inside the Function (grad off); the ops
        # have no autograd of their own: called outside it, no gradient
        from kljit import _ops

        t = self.torch
        for mode, ops, node in (("fused", ("_fused", "scale_grads_"), "FusedBackward"),
                                ("two_phase", ("_two_phase", "two_phase_grads"),
                                 "TwoPhaseBackward")):
            seen = []

            def spy(real: Any, name: str) -> Any:
                def call(*args: Any) -> Any:
                    seen.append((name, t.is_grad_enabled()))
                    return real(*args)

                return call

            inp = self.inputs()
            with mock.patch.object(_ops, ops[0], spy(getattr(_ops, ops[0]), ops[0])), \
                    mock.patch.object(_ops, ops[1], spy(getattr(_ops, ops[1]), ops[1])):
                loss = self.loss(inp, mode=mode)
                self.assertEqual(loss.grad_fn.name(), node)
                loss.backward()
            self.assertIsNotNone(inp["x"].grad, mode)
            self.assertEqual(seen, [(ops[0], True), (ops[1], False)], mode)
            key = _ops.call_key(self.kljit.LossConfig().key, _ops.WANT_DX | _ops.WANT_DW,
                                math.nan, 1.0, "")
            out = getattr(t.ops.kljit, mode)(inp["x"], inp["w"], inp["b"], inp["teacher"],
                                               None, None, None, None, None, None, None, key)
            self.assertEqual([o.requires_grad for o in out], [False] * len(out), mode)

    def test_functorch_transforms_get_torchs_message_before_any_launch(self) -> None:
        # the eager launch (_ops.launch) leaves functorch's storage-less wrappers to apply,
        # which names what the Function lacks for them; no plan runs a step
        t = self.torch
        inp = self.inputs()
        x, w = inp["x"].detach(), inp["w"].detach()

        def f(x: Any) -> Any:
            return self.kljit.fused_linear_kl_div(x, w, inp["teacher"])

        for transform in (lambda: t.func.grad(f)(x), lambda: t.vmap(f)(x[None].expand(2, -1, -1))):
            with self.assertRaisesRegex(RuntimeError, "setup_context"):
                transform()
        self.assertEqual([p.calls for p in self.plans if p.calls], [])

    def test_compile_traces_one_op_forward_and_one_backward(self) -> None:
        # the ops' fake kernels trace them as they are; the Function adds no op of its own
        import torch._dynamo
        from torch._dynamo.testing import AotEagerAndRecordGraphs

        t = self.torch
        for mode, ops in (("fused", ("kljit.fused.default", "kljit.scale_grads_.default")),
                          ("two_phase", ("kljit.two_phase.default",
                                         "kljit.two_phase_grads.default"))):
            config = _checks.LossConfig(mode=mode)

            def loss_of(x: Any, w: Any, teacher: Any) -> Any:
                return self.kljit.fused_linear_kl_div(x, w, teacher, config=config)

            torch._dynamo.reset()
            graphs = AotEagerAndRecordGraphs()
            inp = self.inputs()
            t.compile(loss_of, fullgraph=True, backend=graphs)(
                inp["x"], inp["w"], inp["teacher"]).backward()
            self.assertIsNotNone(inp["w"].grad, mode)

            def kljit_ops(graph: Any) -> List[str]:
                # a mutating op is traced functionalized: its op is the wrapper's first argument
                return [str(n.args[0] if "auto_functionalized" in str(n.target) else n.target)
                        for n in graph.graph.nodes if n.op == "call_function"
                        and "kljit" in str(n.args[0] if n.args else "") + str(n.target)]

            self.assertEqual([kljit_ops(g) for g in graphs.fw_graphs], [[ops[0]]], mode)
            self.assertEqual([kljit_ops(g) for g in graphs.bw_graphs], [[ops[1]]], mode)

    def test_the_ops_take_their_scalars_as_one_key_that_reads_back_exactly(self) -> None:
        # the dispatcher converts each argument on every call: all that is not a tensor
        # travels as one string
        import math

        from kljit import _ops

        t = self.torch
        for name, count in (("fused", 12), ("two_phase", 12), ("two_phase_grads", 16)):
            self.assertEqual(len(getattr(t.ops.kljit, name).default._schema.arguments), count,
                             name)
        key = _ops.read_key(_ops.call_key('{"a": 1}', 11, 0.1 + 0.2, 2.0 ** -70, "g:0:80:1"))
        self.assertEqual(key, ('{"a": 1}', 11, 0.1 + 0.2, 2.0 ** -70, "g:0:80:1"))
        self.assertTrue(math.isnan(_ops.read_key(_ops.call_key("{}", 0, math.nan, 1.0,
                                                                "")).temperature))

    def test_a_remembered_key_is_served_only_to_its_own_arguments(self) -> None:
        from kljit import _ops

        base = ('{"a": 1}', 3, 2.0, 1.0, "")
        others = [('{"a": 2}', 3, 2.0, 1.0, ""), ('{"a": 1}', 1, 2.0, 1.0, ""),
                  ('{"a": 1}', 3, 0.5, 1.0, ""), ('{"a": 1}', 3, math.nan, 1.0, ""),
                  ('{"a": 1}', 3, 2.0, 1024.0, ""), ('{"a": 1}', 3, 2.0, 1.0, "g:0:80:0"),
                  ('{"a": 1}', 3, 0.0, 1.0, ""), ('{"a": 1}', 3, -0.0, 1.0, ""),
                  ('{"a": 1}', 3, 2.0, -0.0, ""), ('{"a": 1}', 3, 2.0, 0.0, "")]
        for _ in range(2):  # the second round from memory
            for given in [base] + others:
                key = _ops.call_key(*given)
                self.assertEqual(key, "\n".join(map(str, given[:2])) + "\n"
                                 + "\n".join(map(repr, given[2:4])) + "\n" + given[4])
                self.assertEqual(repr(_ops.read_key(key)[2:4]), repr(given[2:4]))

    def test_the_forward_op_is_dispatched_where_a_mode_or_a_subclass_must_see_it(self) -> None:
        # eager with plain tensors (and Parameters): the op's kernel directly; under a Python
        # dispatch mode (FakeTensorMode, FlopCounterMode, ...), under torch.compile or with a
        # tensor subclass among the inputs: through the dispatcher, which the mode sees
        from kljit import _ops

        t = self.torch

        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            ops = recording_mode()
            with ops:
                loss = self.loss(inp, mode=mode)
            self.assertIn(f"kljit.{mode}.default", ops.names, mode)
            loss.backward()
            self.assertIsNotNone(inp["x"].grad, mode)
        inp = self.inputs()

        class Sub(t.Tensor):
            pass

        plain = (inp["x"], t.nn.Parameter(inp["w"]), None) + (None,) * 8 + ("key",)
        self.assertTrue(_ops._direct(plain))
        self.assertFalse(_ops._direct((inp["x"].as_subclass(Sub),) + plain[1:]))
        with mock.patch.object(t.compiler, "is_compiling", lambda: True):
            self.assertFalse(_ops._direct(plain))
        with recording_mode():
            self.assertFalse(_ops._direct(plain))

        class Watch(t.overrides.TorchFunctionMode):
            pass

        with Watch():
            self.assertFalse(_ops._direct(plain))
        self.assertTrue(_ops._direct(plain))

    def test_the_binding_names_no_private_torch_c_function(self) -> None:
        # issue 28: the binding keeps to torch's public API (and torch.utils._python_dispatch's
        # mode probe, with the dispatcher where it is missing): no torch._C name anywhere
        import kljit

        for path in Path(kljit.__file__).parent.glob("*.py"):
            self.assertNotIn("torch._C", path.read_text(encoding="utf-8"), path.name)

    def test_compare_s_c_call_and_its_replanned_form_run_the_binding_s_call(self) -> None:
        # bench/compare.py's kljit_c and kljit_c_* methods build their call from kljit._ops.Call:
        # a change of Call's constructors must keep them working (they run only on a GPU)
        from test_bench_scripts import load_script

        from kljit import LossConfig

        compare = load_script("compare")
        inp = self.inputs()
        config = LossConfig(teacher="dense_probs", reduction="batchmean", mode="fused")

        class Inputs:
            teacher = inp["teacher"]

            def teacher_kwargs(self) -> Dict:
                return {}

        want = self.reference({**inp, "b": self.torch.zeros(40)}, config=config)
        for replan in (None, ("logits:jit.e16", "(E16)")):
            x, w = inp["x"].detach().clone(), inp["w"].detach().clone()
            with mock.patch.object(_lib, "Context", lambda index: None), \
                    mock.patch.object(_lib, "Plan", lambda ctx, pb: mock.Mock(
                        wraps=FakePlan(pb), describe=lambda: "logits GEMM (E16)")):
                loss = compare.c_call(config, replan)(x, w, Inputs())
            self.assert_close(loss, want["loss"], f"loss {replan}")
            self.assert_close(x.grad, want["grad_input"], f"dx {replan}")
            self.assert_close(w.grad, want["grad_weight"], f"dw {replan}")

    def test_backward_makes_no_zero_gradients_for_the_outputs_besides_the_loss(self) -> None:
        # fused mode returns dX, dW and db from its op, two-phase its statistics: autograd
        # must not fill a zero "gradient" of each (a V x H fill per step on the GPU), and the
        # gradient the library wrote must become the parameter's .grad without a copy
        from kljit import _ops

        written = {}
        real = _ops.Call.grads

        def grads(call: Any, weight: Any, bias: Any, want: int, args: Any) -> Any:
            out = real(call, weight, bias, want, args)
            written["dw"] = out[1].data_ptr()
            return out

        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            with mock.patch.object(_ops.Call, "grads", grads):
                loss = self.loss(inp, mode=mode)
                ops = recording_mode()
                with ops:
                    loss.backward()
            fills = [n for n in ops.names if "zeros" in n or "fill" in n or "copy" in n]
            self.assertEqual(fills, [], mode)
            self.assertEqual(inp["w"].grad.data_ptr(), written["dw"], mode)

    def test_the_online_teacher_compiles_through_the_custom_ops(self) -> None:
        t = self.torch
        import torch._dynamo

        g = t.Generator().manual_seed(6)
        xt, wt = t.rand(6, 12, generator=g) - 0.5, t.rand(40, 12, generator=g) - 0.5
        for mode in ("fused", "two_phase"):
            config = _checks.LossConfig(mode=mode, divergence="jsd", beta=0.5)

            def loss_of(x: Any, w: Any) -> Any:
                return self.kljit.fused_linear_kl_div(x, w, teacher_input=xt, teacher_weight=wt,
                                                      config=config)

            torch._dynamo.reset()
            compiled = t.compile(loss_of, fullgraph=True, backend="aot_eager")
            got, want = self.inputs(), self.inputs()
            loss = compiled(got["x"], got["w"])
            loss.backward()
            loss_of(want["x"], want["w"]).backward()
            self.assert_close(loss, loss_of(want["x"], want["w"]), mode + " loss")
            self.assert_close(got["x"].grad, want["x"].grad, mode + " dX")
            self.assert_close(got["w"].grad, want["w"].grad, mode + " dW")

    def test_accumulate_into_main_grad_adds_dw_and_db_in_fp32_megatron_style(self) -> None:
        t = self.torch
        go = t.tensor(0.3)
        for mode in ("fused", "two_phase"):
            for megatron in (False, True):
                inp = self.inputs(dtype=t.bfloat16)
                w, b = inp["w"], inp["b"]
                w.main_grad = t.full(w.shape, 0.25)
                b.main_grad = t.full(b.shape, -0.5)
                if megatron:
                    w.grad_added_to_main_grad = False
                    w.zero_out_wgrad = True
                self.loss(inp, mode=mode, accumulate_into_main_grad=True).backward(go)
                ref = self.reference(inp, go)
                what = f"{mode} megatron={megatron}"
                self.assertEqual(w.main_grad.dtype, t.float32)
                self.assert_close(w.main_grad - 0.25, ref["grad_weight"], what + " dW", 1e-2)
                self.assert_close(b.main_grad + 0.5, ref["grad_bias"], what + " db", 1e-2)
                self.assert_close(inp["x"].grad, ref["grad_input"], what + " dX", 1e-2)
                if megatron:
                    self.assertTrue(w.grad_added_to_main_grad, what)
                    self.assertEqual(float(w.grad.abs().sum()), 0.0, what + " zero_out_wgrad")
                else:
                    self.assertIsNone(w.grad, what + ": main_grad holds it")
                if mode == "two_phase":
                    call = self.plans[-1].calls[-1]
                    self.assertTrue(call["flags"] & EXEC_ACCUMULATE_GRAD_WEIGHT, what)
                    self.assertEqual(self.plans[-1].problem.grad_weight_dtype, _lib.DType.FP32)
        inp = self.inputs()
        with self.assertRaises(ValueError):  # no main_grad on the weight
            self.loss(inp, accumulate_into_main_grad=True)

    def test_row_weights_reach_the_library_in_both_modes_and_weigh_the_rows(self) -> None:
        t = self.torch
        rw = t.tensor([0.5, 2.0, 0.0, 1.0, 1.5, 0.25], dtype=t.float64)  # cast to fp32
        labels = t.tensor([1, -100, 3, 4, 5, 6])
        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            go = t.tensor(0.7)
            self.loss(inp, mode=mode, labels=labels, row_weights=rw, hard_weight=0.4,
                      temperature=2.0).backward(go)
            plan = self.plans[-1]
            self.assertTrue(plan.problem.flags & _lib.FLAG_ROW_WEIGHTS, mode)
            for call in plan.calls:  # forward's weights, and backward's the same
                self.assertEqual(call["row_weights"].tolist(), rw.float().tolist(), mode)
            ref = self.reference(inp, go, labels=labels, row_weights=rw, hard_weight=0.4,
                                 temperature=2.0)
            plain = self.reference(inp, go, labels=labels, hard_weight=0.4, temperature=2.0)
            self.assertGreater(float((ref["grad_input"] - plain["grad_input"]).norm()), 1e-3)
            self.assert_close(inp["x"].grad, ref["grad_input"], mode + " dX")
            self.assert_close(inp["w"].grad, ref["grad_weight"], mode + " dW")
            self.assert_close(inp["b"].grad, ref["grad_bias"], mode + " db")
            # without them the flag is off (another plan) and nothing is passed
            self.loss(self.inputs(), mode=mode).backward()
            self.assertFalse(self.plans[-1].problem.flags & _lib.FLAG_ROW_WEIGHTS, mode)
        # the input's leading shape, through the head module
        head = self.kljit.FusedLinearKLDiv(8, 40, bias=True, mode="two_phase")
        x = t.randn(2, 3, 8, requires_grad=True)
        teacher = t.softmax(t.randn(2, 3, 40), -1)
        head(x, teacher, row_weights=rw.view(2, 3)).backward()
        self.assertEqual(self.plans[-1].calls[0]["row_weights"].tolist(), rw.float().tolist())
        inp = self.inputs()
        with self.assertRaises(ValueError):
            self.loss(inp, row_weights=t.ones(5))
        with self.assertRaises(TypeError):
            self.loss(inp, row_weights=t.ones(6, dtype=t.int64))

    def test_return_components_gives_row_loss_and_parts_without_gradient(self) -> None:
        t = self.torch
        labels = t.tensor([1, -100, 3, 4, 5, 6])
        rw = t.tensor([0.5, 2.0, 0.0, 1.0, 1.5, 0.25])
        options = dict(hard_weight=0.3, soft_weight=0.7, temperature=2.0, scale_t_squared=True)
        for mode in ("fused", "two_phase"):
            inp = self.inputs()
            out = self.loss(inp, mode=mode, labels=labels, row_weights=rw,
                            return_components=True, **options)
            self.assertIsInstance(out, self.kljit.LossComponents)
            self.assertEqual(self.plans[-1].calls[0]["outputs"], (True, True), mode)
            self.assertTrue(out.loss.requires_grad, mode)
            for name in ("row_loss", "soft", "hard"):
                self.assertFalse(getattr(out, name).requires_grad, f"{mode} {name}")
            ref = self.reference(inp, labels=labels, row_weights=rw, **options)
            self.assert_close(out.loss, ref["loss"], mode + " loss")
            self.assert_close(out.row_loss, ref["row_loss"], mode + " row_loss")
            self.assert_close(out.soft, ref["loss_soft"], mode + " soft")
            self.assert_close(out.hard, ref["loss_hard"], mode + " hard")
            self.assertGreater(float(out.hard), 0.0)
            self.assertEqual(float(out.row_loss[1]), 0.0)  # an ignored row
            self.assert_close(out.soft + out.hard, out.loss, mode + " soft + hard")
            out.loss.backward()
            self.assert_close(inp["x"].grad, ref["grad_input"], mode + " dX")
            # not asked for: no pointers, the loss alone
            loss = self.loss(self.inputs(), mode=mode)
            self.assertIsInstance(loss, t.Tensor)
            self.assertEqual(self.plans[-1].calls[-1]["outputs"], (False, False), mode)
        # reduction='none' and a leading shape: row_loss in the input's shape
        inp = self.inputs()
        x3 = inp["x"].detach().view(2, 3, 8).clone().requires_grad_()
        out = self.kljit.FusedLinearKLDivLoss(mode="two_phase", reduction="none")(
            x3, inp["w"], inp["teacher"].view(2, 3, 40), return_components=True)
        self.assertEqual((tuple(out.loss.shape), tuple(out.row_loss.shape)), ((2, 3), (2, 3)))
        self.assert_close(out.row_loss, out.loss, "row_loss is the loss of reduction='none'")
        self.assertEqual(float(out.hard), 0.0)

    def test_row_weights_and_components_compile_through_the_custom_ops(self) -> None:
        t = self.torch
        import torch._dynamo

        rw = t.tensor([0.5, 2.0, 0.0, 1.0, 1.5, 0.25])
        for mode in ("fused", "two_phase"):
            config = _checks.LossConfig(mode=mode)

            def loss_of(x: Any, w: Any, teacher: Any) -> Any:
                out = self.kljit.fused_linear_kl_div(x, w, teacher, row_weights=rw,
                                                     return_components=True, config=config)
                return out.loss, out.row_loss, out.soft

            torch._dynamo.reset()
            compiled = t.compile(loss_of, fullgraph=True, backend="aot_eager")
            got, want = self.inputs(), self.inputs()
            loss, rows, soft = compiled(got["x"], got["w"], got["teacher"])
            loss.backward()
            w_loss, w_rows, w_soft = loss_of(want["x"], want["w"], want["teacher"])
            w_loss.backward()
            self.assert_close(loss, w_loss, mode + " loss")
            self.assert_close(rows, w_rows, mode + " row_loss")
            self.assert_close(soft, w_soft, mode + " soft")
            self.assert_close(got["x"].grad, want["x"].grad, mode + " dX")

    def test_a_repeated_call_reuses_its_checks_plan_and_workspace_size(self) -> None:
        from kljit import _ops

        inp = self.inputs()
        sizes: List[int] = []
        real = FakePlan.workspace_size

        def counted(plan: FakePlan, mode: Mode, rows: int) -> int:
            sizes.append(rows)
            return real(plan, mode, rows)

        with mock.patch.object(_ops, "check_call", wraps=_ops.check_call) as checks, \
                mock.patch.object(FakePlan, "workspace_size", counted):
            for _ in range(3):
                inp["x"].grad = None
                self.loss(inp).backward()
        self.assertEqual(checks.call_count, 1)
        self.assertEqual(len(self.plans), 1)
        self.assertEqual(len(self.plans[0].calls), 3)
        # once by the binding, then once per call by FakePlan.execute's own check
        self.assertEqual(len(sizes), 1 + 3)

    def test_a_remembered_call_is_not_served_to_another_layout_nor_to_bad_input(self) -> None:
        from kljit import _ops

        t = self.torch
        inp = self.inputs()
        with mock.patch.object(_ops, "check_call", wraps=_ops.check_call) as checks:
            self.loss(inp).backward()
            self.loss(inp).backward()
            self.assertEqual(checks.call_count, 1)
            # the teacher 4 bytes off its 16-byte alignment (a view one element in)
            buf = t.zeros(inp["teacher"].numel() + 1)
            off = buf[1:].view(inp["teacher"].shape)
            off.copy_(inp["teacher"])
            bad = dict(inp, teacher=off)
            with self.assertRaisesRegex(ValueError, "aligned"):
                self.loss(bad)
            with self.assertRaisesRegex(ValueError, "contiguous"):
                self.loss(dict(inp, teacher=inp["teacher"].t().contiguous().t()))
            # another dtype, another row count: each checked once, and each its own plan
            self.loss(dict(inp, teacher=inp["teacher"].half())).backward()
            fewer = {k: (v[:4].detach().requires_grad_(v.requires_grad) if k != "w" and k != "b"
                         else v) for k, v in inp.items()}
            self.loss(fewer).backward()
            self.assertEqual(checks.call_count, 5)
            # and the first layout is still remembered
            self.loss(inp).backward()
            self.assertEqual(checks.call_count, 5)
        self.assertEqual([c["mode"] for p in self.plans for c in p.calls], [Mode.FUSED] * 5)
        self.assertEqual(len({id(p) for p in self.plans}), 3)

    def test_a_remembered_call_casts_the_weight_as_its_own_dtypes_ask(self) -> None:
        from kljit import _ops

        t = self.torch
        inp = self.inputs()
        x16, teacher = inp["x"].detach().to(t.bfloat16), inp["teacher"]
        w32, b32 = inp["w"].detach(), inp["b"].detach()
        w16, b16 = w32.to(t.bfloat16), b32.to(t.bfloat16)
        key = self.kljit.LossConfig(teacher="dense_probs").key
        with mock.patch.object(_ops, "check_call", wraps=_ops.check_call) as checks:
            for _ in range(2):  # the second round is served from memory
                for w, b in ((w32, b32), (w16, b16), (w32, None), (w16, None)):
                    call = _ops.Call.make(key, x16, w, b, teacher, None, None, None, None, None,
                                          None, None, math.nan)
                    self.assertEqual(call.weight.dtype, t.bfloat16)
                    self.assertTrue(t.equal(call.weight, w16))
                    self.assertIs(call.weight is w, w.dtype == t.bfloat16)
                    self.assertIs(call.tensors[1], call.weight)
                    self.assertIs(call.tensors[2], call.bias)
                    if b is None:
                        self.assertIsNone(call.bias)
                    else:
                        self.assertTrue(t.equal(call.bias, b16))
                        self.assertIs(call.bias is b, b.dtype == t.bfloat16)
            self.assertEqual(checks.call_count, 4)

    def test_gradients_not_wanted_come_back_empty_from_the_ops(self) -> None:
        from kljit import _ops

        t = self.torch
        inp = self.inputs()
        config = self.kljit.LossConfig(teacher="dense_probs")
        key = _ops.call_key(config.key, _ops.WANT_DX, math.nan, 1.0, "")
        with t.no_grad():
            out = _ops.fused(inp["x"], inp["w"], inp["b"], inp["teacher"], None, None, None,
                             None, None, None, None, key)
        self.assertEqual(out[1].shape, inp["x"].shape)
        for got in out[2:]:
            self.assertEqual(got.numel(), 0)
        self.assertEqual(self.plans[-1].calls[-1]["flags"], EXEC_NO_GRAD_WEIGHT)
        self.assertEqual([g.dtype for g in out[4:]], [t.float32, t.float32])


if __name__ == "__main__":
    unittest.main()
