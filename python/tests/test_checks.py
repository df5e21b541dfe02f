# SPDX-License-Identifier: Apache-2.0
"""The binding's argument checks (python/kljit/_checks.py), before anything reaches C.

FakeTensorChecks runs everywhere (no torch); TorchCpuChecks repeats the essentials with real
CPU tensors where torch is installed (require_cuda=False, except where the device is the
point). Each problem the checks build is also handed to kljit_plan_check: the Python layer and
the C validation must agree on what a valid call is.
"""

from __future__ import annotations

import unittest
from typing import Any

from _util import FakeTensor, labels, require

from kljit import _lib
from kljit._checks import LossConfig, check_call, check_workspace
from kljit._lib import FLAG_TEACHER_BIAS, DType, KljitError, TeacherForm

N, H, V, K = 6, 32, 100, 8


def dense(**over: Any) -> dict:
    """Valid fake arguments of a dense call, with overrides."""
    args = dict(input=FakeTensor((N, H)), weight=FakeTensor((V, H)),
                teacher=FakeTensor((N, V), "float32"))
    args.update(over)
    return args


def sparse(**over: Any) -> dict:
    args = dict(input=FakeTensor((N, H)), weight=FakeTensor((V, H)),
                teacher_ids=FakeTensor((N, K), "int32"),
                teacher_values=FakeTensor((N, K), "float32"))
    args.update(over)
    return args


def call(config: LossConfig = LossConfig(), **kw: Any):
    kw = dict(kw)
    return check_call(config, kw.pop("input"), kw.pop("weight"), kw.pop("teacher", None), **kw)


def plan_check_agrees(problem: _lib.Problem) -> None:
    """kljit_plan_check accepts the problem (the sparse form may be not implemented yet)."""
    try:
        _lib.plan_check(problem)
    except KljitError as e:
        if not (problem.teacher == TeacherForm.SPARSE_TOPK and
                e.name == "KLJIT_ERR_NOT_IMPLEMENTED"):
            raise


class FakeTensorChecks(unittest.TestCase):
    def assert_error(self, kind: type, words: str, **kw: Any) -> None:
        config = kw.pop("config", LossConfig())
        with self.assertRaises(kind) as cm:
            call(config, **kw)
        for word in words.split("|"):
            self.assertIn(word, str(cm.exception))

    def test_valid_dense_call_builds_the_problem_and_c_accepts_it(self) -> None:
        spec = call(LossConfig(temperature=2.0, scale_t_squared=True, reduction="sum"),
                    bias=FakeTensor((V,)), labels=FakeTensor((N,), "int32"), **dense())
        pb = spec.problem
        self.assertEqual((spec.rows, spec.hidden, spec.vocab), (N, H, V))
        self.assertEqual((pb.hidden, pb.vocab), (H, V))
        self.assertEqual(pb.input_dtype, DType.BF16)
        self.assertEqual(pb.grad_weight_dtype, DType.BF16)
        self.assertEqual(pb.teacher_dtype, DType.FP32)
        self.assertEqual(pb.label_dtype, DType.INT32)
        self.assertEqual(pb.teacher, TeacherForm.DENSE_PROBS)
        self.assertEqual(pb.flags, _lib.FLAG_BIAS | _lib.FLAG_SCALE_T_SQUARED)
        self.assertEqual(pb.temperature, 2.0)
        self.assertEqual(pb.reduction, _lib.Reduction.SUM)
        self.assertEqual(spec.device, "cuda:0")
        plan_check_agrees(pb)
        # precise_accumulation is the problem's KLJIT_FLAG_PRECISE_ACCUMULATION, which C takes
        precise = call(LossConfig(precise_accumulation=True), **dense()).problem
        self.assertEqual(precise.flags, _lib.FLAG_PRECISE_ACCUMULATION)
        plan_check_agrees(precise)
        with self.assertRaisesRegex(TypeError, "precise_accumulation must be a bool"):
            LossConfig(precise_accumulation=1)

    def test_every_teacher_form_and_option_gives_a_problem_c_accepts(self) -> None:
        for teacher in ("dense_probs", "dense_logprobs", "dense_logits"):
            for reduction in ("sum", "batchmean", "mean"):
                config = LossConfig(teacher=teacher, reduction=reduction, temperature=0.5,
                                    teacher_temperature=1.5, native_logits=True,
                                    grad_weight_accum="output")
                plan_check_agrees(call(config, **dense()).problem)
        for tail in ("none", "renorm", "bucket"):
            for values in ("probs", "logprobs"):
                config = LossConfig(mode="two_phase", reduction="none", tail=tail,
                                    topk_values=values)
                spec = call(config, **sparse())
                self.assertEqual(spec.problem.topk, K)
                self.assertEqual(spec.problem.topk_id_dtype, DType.INT32)
                self.assertTrue(spec.sparse)
                plan_check_agrees(spec.problem)

    def test_teacher_form_is_inferred_from_the_tensors_given(self) -> None:
        self.assertEqual(call(**dense()).config.teacher, "dense_probs")
        self.assertEqual(call(**sparse()).config.teacher, "sparse_topk")
        self.assert_error(ValueError, "no teacher", input=FakeTensor((N, H)),
                          weight=FakeTensor((V, H)))
        self.assert_error(ValueError, "teacher must be None",
                          config=LossConfig(teacher="sparse_topk"),
                          teacher=FakeTensor((N, V)), **sparse())
        self.assert_error(ValueError, "teacher_ids and teacher_values need",
                          config=LossConfig(teacher="dense_logits"), **sparse())
        self.assert_error(ValueError, "needs both", teacher_values=None, **{
            k: v for k, v in sparse().items() if k != "teacher_values"})

    def test_non_tensors_are_type_errors_naming_the_argument(self) -> None:
        self.assert_error(TypeError, "input|torch.Tensor|list", **dense(input=[[1.0]]))
        self.assert_error(TypeError, "weight", **dense(weight=3))
        self.assert_error(TypeError, "labels", labels="x", **dense())

    def test_wrong_dtypes_are_type_errors_naming_the_argument(self) -> None:
        self.assert_error(TypeError, "input|float32 or float16 or bfloat16|int64",
                          **dense(input=FakeTensor((N, H), "int64")))
        self.assert_error(TypeError, "weight|float16|input|bfloat16|fp32",
                          **dense(weight=FakeTensor((V, H), "float16")))
        self.assert_error(TypeError, "weight|bfloat16|input|float32",
                          **dense(input=FakeTensor((N, H), "float32"),
                                  weight=FakeTensor((V, H), "bfloat16")))
        self.assert_error(TypeError, "bias|float16", bias=FakeTensor((V,), "float16"), **dense())
        self.assert_error(TypeError, "teacher|int32", **dense(teacher=FakeTensor((N, V), "int32")))
        self.assert_error(TypeError, "labels|int32 or int64|float32",
                          labels=FakeTensor((N,), "float32"), **dense())
        self.assert_error(TypeError, "teacher_ids", **sparse(teacher_ids=FakeTensor((N, K))))
        self.assert_error(TypeError, "teacher_values",
                          **sparse(teacher_values=FakeTensor((N, K), "int64")))

    def test_an_fp32_weight_with_half_input_computes_in_the_input_dtype_with_fp32_grads(
            self) -> None:
        for dt, kdt in (("bfloat16", _lib.DType.BF16), ("float16", _lib.DType.FP16)):
            args = dense(input=FakeTensor((N, H), dt), weight=FakeTensor((V, H), "float32"))
            spec = check_call(LossConfig(), **args, bias=FakeTensor((V,), "float32"))
            pb = spec.problem
            self.assertEqual((pb.input_dtype, pb.weight_dtype, pb.grad_weight_dtype),
                             (kdt, kdt, _lib.DType.FP32))

    def test_every_documented_option_is_a_keyword_and_teacher_form_names_the_form(self) -> None:
        from kljit._checks import config_from_options

        values = dict(teacher_form="dense_logits", mode="two_phase", temperature=2.0,
                      temperature_mode="runtime", teacher_temperature=3.0,
                      scale_t_squared=True, reduction="sum", ignore_index=-1, eps=1e-12,
                      topk_values="logprobs", tail="bucket", native_logits=True,
                      allow_tf32=True, check_inputs=True, grad_weight_accum="output",
                      precise_accumulation=True)
        for name, value in values.items():
            config = config_from_options({name: value})
            field = "teacher" if name == "teacher_form" else name
            self.assertEqual(getattr(config, field), value, name)
            self.assertIn(f'"{field}": ', config.key)
        self.assertEqual(config_from_options({"teacher": "sparse_topk"}).teacher, "sparse_topk")
        self.assertEqual(LossConfig().grad_weight_accum, "auto")
        with self.assertRaisesRegex(TypeError, "teacher_form"):
            config_from_options({"teacher_forms": "dense_probs"})
        with self.assertRaises(TypeError):
            config_from_options({"teacher_form": "dense_probs", "teacher": "dense_probs"})

    def test_options_give_their_config_once_and_their_types_still_count(self) -> None:
        from kljit._checks import config_from_options

        first = config_from_options({"temperature": 2.0, "scale_t_squared": True})
        self.assertIs(config_from_options({"temperature": 2.0, "scale_t_squared": True}), first)
        # 1 == True and hashes alike: remembered True must not let 1 through
        with self.assertRaisesRegex(TypeError, "scale_t_squared must be a bool"):
            config_from_options({"temperature": 2.0, "scale_t_squared": 1})
        self.assertEqual(config_from_options({"temperature": 2}).temperature, 2.0)
        # a refused option is refused every time (nothing remembered of it)
        for _ in range(2):
            with self.assertRaisesRegex(ValueError, "temperature"):
                config_from_options({"temperature": -1.0})
        # an unhashable value is the checks' to name, not the memory's
        with self.assertRaisesRegex(TypeError, "temperature must be a number"):
            config_from_options({"temperature": [2.0]})

    def test_wrong_shapes_are_value_errors_naming_the_argument(self) -> None:
        self.assert_error(ValueError, "input|2-D|[N, H]|[6, 32, 1]",
                          **dense(input=FakeTensor((N, H, 1))))
        self.assert_error(ValueError, "weight must have shape [V, H] = [V, 32], got [100, 31]",
                          **dense(weight=FakeTensor((V, H - 1))))
        self.assert_error(ValueError, "teacher has 99 columns|V = 100",
                          **dense(teacher=FakeTensor((N, V - 1), "float32")))
        self.assert_error(ValueError, "teacher|[5, 100]",
                          **dense(teacher=FakeTensor((N - 1, V), "float32")))
        self.assert_error(ValueError, "bias|[V]", bias=FakeTensor((V + 1,)), **dense())
        self.assert_error(ValueError, "labels|[N]", labels=FakeTensor((N, 1), "int64"),
                          **dense())
        self.assert_error(ValueError, "teacher_values|[N, K]",
                          **sparse(teacher_values=FakeTensor((N, K + 1), "float32")))

    def test_sizes_outside_the_library_limits_are_value_errors(self) -> None:
        self.assert_error(ValueError, "no rows",
                          **dense(input=FakeTensor((0, H)), teacher=FakeTensor((0, V), "float32")))
        self.assert_error(ValueError, "V = 1", **dense(weight=FakeTensor((1, H)),
                                                       teacher=FakeTensor((N, 1), "float32")))
        big = 1025
        self.assert_error(ValueError, "K = 1025|[1, 1024]",
                          **sparse(weight=FakeTensor((2000, H)),
                                   teacher_ids=FakeTensor((N, big), "int64"),
                                   teacher_values=FakeTensor((N, big), "float32")))
        small_v = 4
        self.assert_error(ValueError, "K = 8|[1, 4]",
                          **sparse(weight=FakeTensor((small_v, H))))

    def test_devices_must_be_cuda_and_shared(self) -> None:
        self.assert_error(ValueError, "input must be a CUDA tensor|cpu",
                          **dense(input=FakeTensor((N, H), device="cpu")))
        self.assert_error(ValueError, "weight is on cuda:1 but input is on cuda:0",
                          **dense(weight=FakeTensor((V, H), device="cuda:1")))
        self.assert_error(ValueError, "teacher must be a CUDA tensor",
                          **dense(teacher=FakeTensor((N, V), "float32", device="cpu")))

    def test_layout_must_be_contiguous_and_aligned(self) -> None:
        self.assert_error(ValueError, "teacher must be contiguous|.contiguous()",
                          **dense(teacher=FakeTensor((N, V), "float32", contiguous=False)))
        self.assert_error(ValueError, "input's data pointer|16-byte aligned",
                          **dense(input=FakeTensor((N, H), ptr=0x7F0000000008)))
        self.assert_error(ValueError, "teacher_values's data pointer|16-byte",
                          **sparse(teacher_values=FakeTensor((N, K), "float32", ptr=0x1004)))
        self.assert_error(ValueError, "labels's data pointer|8-byte",
                          labels=FakeTensor((N,), "int64", ptr=0x1004), **dense())
        # element alignment is enough for labels, ids and bias
        call(labels=FakeTensor((N,), "int32", ptr=0x1004), bias=FakeTensor((V,), ptr=0x1002),
             **dense())

    def test_options_are_validated_by_name(self) -> None:
        bad = [
            ({"teacher": "probs"}, "teacher"),
            ({"mode": "lazy"}, "mode"),
            ({"reduction": "avg"}, "reduction"),
            ({"reduction": "none"}, "two_phase"),
            ({"temperature": 0.0}, "temperature"),
            ({"temperature": float("inf")}, "temperature"),
            ({"teacher_temperature": -1.0}, "teacher_temperature"),
            ({"eps": 1e-2}, "eps"),
            ({"tail": "ghost"}, "tail"),
            ({"topk_values": "logits"}, "topk_values"),
            ({"temperature_mode": "dynamic"}, "temperature_mode"),
            ({"grad_weight_accum": "fp16"}, "grad_weight_accum"),
        ]
        for options, word in bad:
            with self.assertRaises(ValueError, msg=str(options)) as cm:
                LossConfig(**options)
            self.assertIn(word, str(cm.exception))
        with self.assertRaises(TypeError):
            LossConfig(native_logits=1)
        with self.assertRaises(TypeError):
            LossConfig(temperature="2")
        with self.assertRaises(TypeError):
            LossConfig(ignore_index=1.5)
        LossConfig(mode="two_phase", reduction="none")

    def test_loss_family_options_reach_the_problem(self) -> None:
        spec = call(LossConfig(teacher="dense_logits", softcap=30.0, teacher_softcap=50.0),
                    teacher=FakeTensor((N, V + 28), "float32"), **{
                        k: v for k, v in dense().items() if k != "teacher"})
        pb = spec.problem
        self.assertEqual((pb.softcap, pb.teacher_softcap), (30.0, 50.0))
        self.assertEqual((pb.teacher_vocab, pb.teacher_ld), (V + 28, V + 28))
        self.assertEqual(spec.vocab, V)
        plan_check_agrees(pb)
        unpadded = call(LossConfig(), **dense()).problem
        self.assertEqual((unpadded.teacher_vocab, unpadded.teacher_ld), (0, 0))
        self.assertEqual(unpadded.divergence, _lib.Divergence.FORWARD_KL)
        self.assertEqual((unpadded.soft_weight, unpadded.hard_weight), (1.0, 0.0))
        mixed = call(LossConfig(divergence="jsd", beta=0.5, hard_weight=0.5, soft_weight=0.5),
                     labels=FakeTensor((N,), "int64"), **dense()).problem
        self.assertEqual((mixed.divergence, mixed.beta), (_lib.Divergence.JSD, 0.5))
        self.assertEqual((mixed.hard_weight, mixed.soft_weight), (0.5, 0.5))
        plan_check_agrees(mixed)
        self.assert_error(ValueError, "hard_weight=0.5 needs labels",
                          config=LossConfig(hard_weight=0.5), **dense())
        # undefined on the sparse support: the library says so, it computes nothing else
        sparse_jsd = call(LossConfig(divergence="jsd", beta=0.5), **sparse()).problem
        with self.assertRaises(KljitError) as cm:
            _lib.plan_check(sparse_jsd)
        self.assertEqual(cm.exception.name, "KLJIT_ERR_UNSUPPORTED")
        # issue 29: TVD, the skew KLs and the CE's extras reach the problem, and the library
        # plans them
        tvd = call(LossConfig(divergence="tvd"), **dense()).problem
        self.assertEqual(tvd.divergence, _lib.Divergence.TVD)
        plan_check_agrees(tvd)
        skew = call(LossConfig(divergence="skew_reverse_kl", skew_alpha=0.1, hard_weight=0.5,
                               label_smoothing=0.1, z_loss=1e-4),
                    labels=FakeTensor((N,), "int64"), **dense()).problem
        self.assertEqual((skew.divergence, skew.skew_alpha),
                         (_lib.Divergence.SKEW_REVERSE_KL, 0.1))
        self.assertEqual((skew.label_smoothing, skew.z_loss), (0.1, 1e-4))
        plan_check_agrees(skew)
        bad = [({"divergence": "kl"}, "divergence"), ({"beta": 0.5}, "jsd"),
               ({"divergence": "jsd", "beta": 1.5}, "beta"), ({"softcap": -1.0}, "softcap"),
               ({"hard_weight": float("nan")}, "hard_weight"),
               ({"soft_weight": 0.0}, "both 0"),
               ({"divergence": "skew_forward_kl", "skew_alpha": 1.0}, "skew_alpha"),
               ({"divergence": "jsd", "skew_alpha": 0.5}, "skew_forward_kl"),
               ({"hard_weight": 1.0, "label_smoothing": 1.5}, "label_smoothing"),
               ({"label_smoothing": 0.1}, "hard_weight > 0"),
               ({"hard_weight": 1.0, "z_loss": -1.0}, "z_loss")]
        for options, word in bad:
            with self.assertRaises(ValueError, msg=str(options)) as cm:
                LossConfig(**options)
            self.assertIn(word, str(cm.exception))
        with self.assertRaises(TypeError):
            LossConfig(softcap="30")

    def test_the_online_teacher_takes_its_input_and_head(self) -> None:
        base = {k: v for k, v in dense().items() if k != "teacher"}
        spec = check_call(LossConfig(divergence="jsd", beta=0.5), base["input"], base["weight"],
                          FakeTensor((N, 48)), teacher_weight=FakeTensor((V + 12, 48)))
        pb = spec.problem
        self.assertEqual(spec.config.teacher, "dense_hidden")
        self.assertEqual(pb.teacher, TeacherForm.DENSE_HIDDEN)
        self.assertEqual((pb.teacher_hidden, pb.teacher_vocab, pb.teacher_ld), (48, V + 12, 0))
        plan_check_agrees(pb)
        with self.assertRaises(ValueError) as cm:  # a head shorter than V
            check_call(LossConfig(), base["input"], base["weight"], FakeTensor((N, 48)),
                       teacher_weight=FakeTensor((V - 1, 48)))
        self.assertIn("teacher_weight has 99 rows", str(cm.exception))
        with self.assertRaises(ValueError) as cm:  # hidden sizes that disagree
            check_call(LossConfig(), base["input"], base["weight"], FakeTensor((N, 48)),
                       teacher_weight=FakeTensor((V, 40)))
        self.assertIn("teacher_weight", str(cm.exception))
        with self.assertRaises(ValueError):  # the online teacher without its head
            check_call(LossConfig(teacher="dense_hidden"), base["input"], base["weight"],
                       FakeTensor((N, 48)))
        # its head's bias: [Vt], the flag set; another length or a dense teacher refused
        spec = check_call(LossConfig(), base["input"], base["weight"], FakeTensor((N, 48)),
                          teacher_weight=FakeTensor((V + 12, 48)),
                          teacher_bias=FakeTensor((V + 12,)))
        self.assertTrue(spec.problem.flags & FLAG_TEACHER_BIAS)
        self.assertFalse(pb.flags & FLAG_TEACHER_BIAS)
        plan_check_agrees(spec.problem)
        with self.assertRaises(ValueError) as cm:
            check_call(LossConfig(), base["input"], base["weight"], FakeTensor((N, 48)),
                       teacher_weight=FakeTensor((V + 12, 48)), teacher_bias=FakeTensor((V,)))
        self.assertIn("teacher_bias", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            check_call(LossConfig(), **dense(), teacher_bias=FakeTensor((V,)))
        self.assertIn("teacher_bias is the online teacher's", str(cm.exception))

    def test_temperature_per_call_needs_the_runtime_mode(self) -> None:
        self.assert_error(ValueError, "temperature_mode='runtime'", temperature=2.0, **dense())
        spec = call(LossConfig(temperature_mode="runtime", temperature=3.0), **dense())
        self.assertEqual(spec.temperature, 3.0)
        self.assertEqual(spec.problem.temperature, 1.0)  # one plan for every T
        self.assertEqual(spec.problem.temperature_mode, _lib.TemperatureMode.RUNTIME)
        spec = call(LossConfig(temperature_mode="runtime"), temperature=0.5, **dense())
        self.assertEqual(spec.temperature, 0.5)
        self.assert_error(ValueError, "temperature", temperature=-1.0,
                          config=LossConfig(temperature_mode="runtime"), **dense())
        self.assertEqual(call(LossConfig(temperature=2.0), temperature=2.0,
                              **dense()).temperature, 2.0)

    def test_workspace_must_be_large_enough_and_256_byte_aligned(self) -> None:
        check_workspace(FakeTensor((1024,), "uint8", ptr=0x10000), 1024)
        with self.assertRaises(ValueError):
            check_workspace(FakeTensor((1024,), "uint8", ptr=0x10080), 1024)
        with self.assertRaises(ValueError):
            check_workspace(FakeTensor((1000,), "uint8", ptr=0x10000), 1024)


@labels("torch")
class TorchCpuChecks(unittest.TestCase):
    """The same checks on real tensors (CPU; the CUDA requirement is lifted but for one case)."""

    def setUp(self) -> None:
        self.torch = require("torch")

    def args(self, **over: Any) -> dict:
        t = self.torch
        args = dict(input=t.randn(N, H, dtype=t.bfloat16), weight=t.randn(V, H, dtype=t.bfloat16),
                    teacher=t.rand(N, V))
        args.update(over)
        return args

    def check(self, config: LossConfig = LossConfig(), **kw: Any):
        return call(config, require_cuda=False, **kw)

    def test_real_cpu_tensors_pass_and_give_a_problem_c_accepts(self) -> None:
        t = self.torch
        spec = self.check(labels=t.zeros(N, dtype=t.int64), bias=t.zeros(V, dtype=t.bfloat16),
                          **self.args())
        self.assertEqual(spec.device, "cpu")
        self.assertEqual(spec.problem.teacher_dtype, DType.FP32)
        plan_check_agrees(spec.problem)
        ids = t.stack([t.randperm(V)[:K] for _ in range(N)])
        spec = self.check(input=t.randn(N, H), weight=t.randn(V, H), teacher_ids=ids,
                          teacher_values=t.rand(N, K, dtype=t.float16))
        self.assertEqual(spec.problem.topk_id_dtype, DType.INT64)
        self.assertEqual(spec.problem.teacher_dtype, DType.FP16)
        plan_check_agrees(spec.problem)

    def test_cpu_tensors_are_refused_where_cuda_is_required(self) -> None:
        with self.assertRaises(ValueError) as cm:
            call(LossConfig(), **self.args())
        self.assertIn("input must be a CUDA tensor, got one on cpu", str(cm.exception))

    def test_transposed_and_offset_views_are_refused(self) -> None:
        t = self.torch
        with self.assertRaises(ValueError) as cm:
            self.check(**self.args(teacher=t.rand(V, N).T))
        self.assertIn("teacher must be contiguous", str(cm.exception))
        flat = t.randn(N * H + 1, dtype=t.bfloat16)
        with self.assertRaises(ValueError) as cm:
            self.check(**self.args(input=flat[1:].view(N, H)))
        self.assertIn("input's data pointer", str(cm.exception))

    def test_dtype_and_shape_errors_name_real_torch_dtypes(self) -> None:
        t = self.torch
        with self.assertRaises(TypeError) as cm:
            self.check(**self.args(weight=t.randn(V, H, dtype=t.float16)))
        self.assertIn("weight has dtype float16 but input has bfloat16", str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            self.check(**self.args(input=t.randn(N, H, dtype=t.float64),
                                   weight=t.randn(V, H, dtype=t.float64)))
        self.assertIn("input must have dtype", str(cm.exception))
        # (more than V columns is a padded teacher vocabulary, issue 19: accepted)
        with self.assertRaises(ValueError) as cm:
            self.check(**self.args(teacher=t.rand(N, V - 1)))
        self.assertIn("teacher has 99 columns but weight has V = 100 rows", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
