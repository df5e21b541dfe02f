# SPDX-License-Identifier: Apache-2.0
"""The PyTorch references (python/kljit/reference.py) against the C oracle (tests/ref.c).

The GPU tests and bench/compare.py judge the binding by kl_div_fp64 and kl_div_reference; here
both are checked, on the CPU in float64, against ref_compute (through tests/python_ref.c) on
small problems of every teacher form, tail, value kind, reduction, temperature setting,
divergence, CE mixing (label smoothing, z-loss), softcap, with and without bias, ignored rows
and an upstream gradient. Needs torch (and numpy for the byte
conversion); skips (77) without them.
"""

from __future__ import annotations

import itertools
import struct
import subprocess
import unittest
from typing import Any, Dict, Optional

from _util import labels, out_dir, ref_helper, require

from kljit._checks import LossConfig, check_call

N, H, V, K = 7, 12, 50, 5
# Both sides compute in float64 from the same float64 inputs; what differs is summation
# order, so agreement is expected to ~1e-13 relative; 1e-10 leaves room for cancellation in
# small gradient entries (rel Frobenius) and in losses near zero.
TOL = 1e-10


class Case:
    """One random problem in float64 (CPU) with its options."""

    def __init__(self, torch: Any, seed: int, config: LossConfig, *, bias: bool,
                 labels: bool, grad_output: Optional[float], temperature: float = 0.0,
                 duplicates: bool = False, row_weights: bool = False) -> None:
        g = torch.Generator().manual_seed(seed)
        f64 = torch.float64
        self.torch, self.config = torch, config
        self.x = torch.rand(N, H, generator=g, dtype=f64) * 2 - 1
        self.w = (torch.rand(V, H, generator=g, dtype=f64) * 2 - 1) * 0.5
        self.b = torch.rand(V, generator=g, dtype=f64) - 0.5 if bias else None
        self.labels = None
        if labels:
            self.labels = torch.randint(0, V, (N,), generator=g)
            self.labels[1] = self.labels[4] = config.ignore_index
        self.teacher = self.ids = self.vals = None
        teacher = config.teacher
        if teacher == "sparse_topk":
            self.ids = torch.stack([torch.randperm(V, generator=g)[:K] for _ in range(N)])
            if duplicates:
                self.ids[0, 1] = self.ids[0, 0]
            p = torch.rand(N, K, generator=g, dtype=f64) * (0.9 / K)
            p[2, 3] = 0.0
            if config.tail == "renorm":
                p[3] = 0.0  # a row with no mass
            self.vals = p if config.topk_values == "probs" else torch.log(p)
        else:
            p = torch.rand(N, V, generator=g, dtype=f64) * (2.0 / V)
            p[0, :3] = 0.0  # 0 log 0
            p[0, 3] = 1e-25  # below eps: floored inside the log
            if teacher == "dense_probs":
                self.teacher = p
            elif teacher == "dense_logprobs":
                self.teacher = torch.log(p)
            else:
                self.teacher = torch.randn(N, V, generator=g, dtype=f64) * 3
        self.temperature = temperature or config.temperature
        self.rw = None
        if row_weights:  # in [0, 2), one kept row's weight 0 (it still counts in the divisor)
            self.rw = torch.rand(N, generator=g, dtype=f64) * 2
            self.rw[2] = 0.0
        self.go = None
        if grad_output is not None:
            n = N if config.reduction == "none" else 1
            self.go = torch.full((n,), grad_output, dtype=f64) + torch.arange(n) * 0.1

    def kwargs(self) -> Dict[str, Any]:
        runtime = self.config.temperature_mode == "runtime"
        return dict(bias=self.b, labels=self.labels, teacher_ids=self.ids,
                    teacher_values=self.vals, config=self.config,
                    temperature=self.temperature if runtime else None, row_weights=self.rw)

    def c_reference(self) -> Dict[str, Any]:
        """ref_compute's loss, row losses and gradients, through tests/python_ref.c."""
        torch = self.torch
        spec = check_call(self.config, self.x.float(), self.w.float(),
                          None if self.teacher is None else self.teacher.float(),
                          bias=None if self.b is None else self.b.float(), labels=self.labels,
                          teacher_ids=self.ids,
                          teacher_values=None if self.vals is None else self.vals.float(),
                          temperature=self.kwargs()["temperature"], require_cuda=False)
        blob = bytearray(bytes(spec.problem))
        blob += struct.pack("<qiiiid", N, self.b is not None, self.labels is not None,
                            self.go is not None, self.rw is not None, self.temperature)
        for t in (self.x, self.w, self.b, self.labels, self.teacher, self.ids, self.vals,
                  self.go, self.rw):
            if t is not None:
                dt = torch.int64 if not t.is_floating_point() else torch.float64
                blob += t.to(dt).contiguous().numpy().tobytes()
        d = out_dir(f"ref-{id(self)}")
        (d / "in.bin").write_bytes(bytes(blob))
        r = subprocess.run([str(ref_helper()), str(d / "in.bin"), str(d / "out.bin")],
                           capture_output=True, text=True)
        if r.returncode:
            raise AssertionError(f"python_ref failed: {r.stderr}")
        out = torch.frombuffer(bytearray((d / "out.bin").read_bytes()), dtype=torch.float64)
        res, off = {"loss": out[0]}, 2
        for name, n in (("row_loss", N), ("grad_input", N * H), ("grad_weight", V * H),
                        ("grad_bias", V if self.b is not None else 0)):
            res[name] = out[off:off + n] if n else None
            off += n
        res["loss_soft"], res["loss_hard"] = out[off], out[off + 1]
        return res


def rel(a: Any, b: Any) -> float:
    """Relative Frobenius distance (absolute where the reference is ~0)."""
    a, b = a.detach().reshape(-1).double(), b.detach().reshape(-1).double()
    den = float(b.norm())
    return float((a - b).norm()) / (den if den > 1e-30 else 1.0)


def configs():
    """(config, options) of every case; options are Case's keyword arguments."""
    dense = itertools.product(("dense_probs", "dense_logprobs", "dense_logits"),
                              ("sum", "batchmean", "mean", "none"))
    for i, (teacher, reduction) in enumerate(dense):
        mode = "two_phase" if reduction == "none" else "fused"
        t_opts = [dict(), dict(temperature=2.0, scale_t_squared=True, teacher_temperature=1.5),
                  dict(temperature=0.5, temperature_mode="runtime")][i % 3]
        yield (LossConfig(teacher=teacher, reduction=reduction, mode=mode, **t_opts),
               dict(bias=i % 2 == 0, labels=i % 4 < 2, grad_output=None if i % 3 else 0.7))
    sparse = itertools.product(("none", "renorm", "bucket"), ("probs", "logprobs"),
                               ("batchmean", "none", "sum"))
    for i, (tail, values, reduction) in enumerate(sparse):
        t_opts = dict(temperature=2.0, scale_t_squared=True) if i % 2 else dict()
        yield (LossConfig(teacher="sparse_topk", tail=tail, topk_values=values,
                          reduction=reduction, mode="two_phase", **t_opts),
               dict(bias=i % 3 == 0, labels=i % 2 == 0, grad_output=None if i % 4 else 1.3))


@labels("torch")
class ReferenceTest(unittest.TestCase):
    def setUp(self) -> None:
        self.torch = require("torch")
        require("numpy")
        from kljit import reference

        self.ref = reference

    def compare(self, case: Case, got: Dict[str, Any], want: Dict[str, Any], what: str) -> None:
        for name in ("loss", "row_loss", "grad_input", "grad_weight", "grad_bias", "loss_soft",
                     "loss_hard"):
            if want.get(name) is None or got.get(name) is None:
                continue
            err = rel(got[name], want[name])
            self.assertLess(err, TOL, f"{what}: {name} rel {err:.2e} ({case.config})")

    def test_fp64_reference_matches_the_c_reference(self) -> None:
        for seed, (config, opts) in enumerate(configs()):
            case = Case(self.torch, seed, config, **opts)
            got = self.ref.kl_div_fp64(case.x, case.w, case.teacher, grad_output=case.go,
                                       chunk_rows=3, **case.kwargs())
            self.compare(case, got, case.c_reference(), "kl_div_fp64")

    def test_fp64_reference_counts_duplicate_ids_like_the_c_reference(self) -> None:
        for tail in ("none", "renorm", "bucket"):
            config = LossConfig(teacher="sparse_topk", tail=tail, reduction="sum")
            case = Case(self.torch, 99, config, bias=False, labels=False, grad_output=None,
                        duplicates=True)
            got = self.ref.kl_div_fp64(case.x, case.w, None, **case.kwargs())
            self.compare(case, got, case.c_reference(), f"duplicates, tail {tail}")

    def test_autograd_reference_matches_the_c_reference(self) -> None:
        torch = self.torch
        for seed, (config, opts) in enumerate(configs()):
            case = Case(self.torch, seed, config, **opts)
            x = case.x.clone().requires_grad_()
            w = case.w.clone().requires_grad_()
            kw = case.kwargs()
            if case.b is not None:
                kw["bias"] = case.b.clone().requires_grad_()
            loss = self.ref.kl_div_reference(x, w, case.teacher, compute_dtype=torch.float64,
                                             **kw)
            go = case.go if case.go is not None else torch.ones(loss.shape, dtype=torch.float64)
            loss.backward(go.reshape(loss.shape))
            got = {"loss": loss.sum() if config.reduction == "none" else loss,
                   "row_loss": loss if config.reduction == "none" else None,
                   "grad_input": x.grad, "grad_weight": w.grad,
                   "grad_bias": None if case.b is None else kw["bias"].grad}
            self.compare(case, got, case.c_reference(), "kl_div_reference")

    def test_both_references_take_the_reverse_kl_and_the_jsd_like_the_c_reference(
            self) -> None:
        """And TVD and the skew KLs (issue 29)."""
        torch = self.torch
        cases = (("reverse_kl", 0.0, "dense_logits"), ("jsd", 0.5, "dense_logits"),
                 ("jsd", 0.5, "dense_probs"), ("jsd", 0.2, "dense_logprobs"),
                 ("jsd", 1.0, "dense_logits"), ("jsd", 0.0, "dense_probs"),
                 ("tvd", 0.0, "dense_logits"), ("tvd", 0.0, "dense_probs"),
                 ("skew_forward_kl", 0.1, "dense_logits"),
                 ("skew_forward_kl", 0.6, "dense_probs"),
                 ("skew_reverse_kl", 0.1, "dense_logprobs"),
                 ("skew_reverse_kl", 0.0, "dense_logits"))
        for seed, (divergence, param, teacher) in enumerate(cases):
            skew = divergence.startswith("skew_")
            beta = 0.0 if skew else param
            config = LossConfig(teacher=teacher, divergence=divergence, beta=beta,
                                skew_alpha=param if skew else 0.0, temperature=2.0,
                                reduction="batchmean")
            case = Case(torch, 40 + seed, config, bias=seed % 2 == 0, labels=True,
                        grad_output=0.7)
            want = case.c_reference()
            got = self.ref.kl_div_fp64(case.x, case.w, case.teacher, grad_output=case.go,
                                       chunk_rows=3, **case.kwargs())
            self.compare(case, got, want, f"kl_div_fp64 {divergence} {beta} {teacher}")
            x = case.x.clone().requires_grad_()
            loss = self.ref.kl_div_reference(x, case.w, case.teacher,
                                             compute_dtype=torch.float64, **case.kwargs())
            loss.backward(case.go.reshape(()))
            self.compare(case, {"loss": loss, "grad_input": x.grad}, want,
                         f"kl_div_reference {divergence} {beta} {teacher}")

    def test_fp64_reference_takes_the_top_k_reverse_kl_and_jsd_like_the_c_reference(
            self) -> None:
        """Issue 29: K + 1 categories (bucket) and the renormalized support (renorm)."""
        cases = itertools.product(("bucket", "renorm"), ("probs", "logprobs"),
                                  (("reverse_kl", 0.0), ("jsd", 0.4), ("jsd", 0.9)))
        for seed, (tail, values, (divergence, beta)) in enumerate(cases):
            reduction = ("batchmean", "none", "sum")[seed % 3]
            config = LossConfig(teacher="sparse_topk", tail=tail, topk_values=values,
                                divergence=divergence, beta=beta, reduction=reduction,
                                mode="two_phase", temperature=1.5 if seed % 2 else 1.0)
            case = Case(self.torch, 60 + seed, config, bias=seed % 2 == 0, labels=True,
                        grad_output=None if seed % 4 else 0.7)
            got = self.ref.kl_div_fp64(case.x, case.w, None, grad_output=case.go,
                                       chunk_rows=3, **case.kwargs())
            self.compare(case, got, case.c_reference(),
                         f"kl_div_fp64 top-K {tail} {values} {divergence} {beta}")

    def check_both(self, case: Case, what: str) -> Dict[str, Any]:
        """kl_div_fp64 (everything) and kl_div_reference (loss and gradients) against the C
        reference on one case; returns the C reference's result."""
        torch = self.torch
        want = case.c_reference()
        got = self.ref.kl_div_fp64(case.x, case.w, case.teacher, grad_output=case.go,
                                   chunk_rows=3, **case.kwargs())
        self.compare(case, got, want, f"kl_div_fp64 {what}")
        if case.config.teacher == "sparse_topk" and case.config.divergence != "forward_kl":
            return want  # kl_div_reference has the top-K forward KL only
        x = case.x.clone().requires_grad_()
        w = case.w.clone().requires_grad_()
        kw = case.kwargs()
        if case.b is not None:
            kw["bias"] = case.b.clone().requires_grad_()
        loss = self.ref.kl_div_reference(x, w, case.teacher, compute_dtype=torch.float64, **kw)
        go = case.go if case.go is not None else torch.ones(loss.shape, dtype=torch.float64)
        loss.backward(go.reshape(loss.shape))
        none = case.config.reduction == "none"
        self.compare(case, {"loss": loss.sum() if none else loss,
                            "row_loss": loss if none else None, "grad_input": x.grad,
                            "grad_weight": w.grad,
                            "grad_bias": None if case.b is None else kw["bias"].grad},
                     want, f"kl_div_reference {what}")
        return want

    def test_both_references_mix_the_ce_like_the_c_reference(self) -> None:
        """loss = hard_weight CE (label smoothing, z-loss) + soft_weight (T^2) divergence, on
        softcapped logits: the T and T^2 only on the divergence, the CE's rows the kept ones."""
        cases = [
            dict(teacher="dense_logits", hard_weight=0.3, soft_weight=0.7),
            dict(teacher="dense_logits", hard_weight=0.4, soft_weight=0.6, temperature=2.0,
                 scale_t_squared=True, teacher_temperature=1.5, reduction="mean"),
            dict(teacher="dense_probs", hard_weight=1.0, soft_weight=0.5, label_smoothing=0.1,
                 z_loss=0.01, reduction="sum"),
            dict(teacher="dense_logprobs", hard_weight=0.5, label_smoothing=0.2, z_loss=1e-3,
                 temperature=0.5, temperature_mode="runtime", reduction="none",
                 mode="two_phase"),
            dict(teacher="dense_logits", hard_weight=1.0, soft_weight=0.0, z_loss=0.05),
            dict(teacher="dense_logits", softcap=1.0, teacher_softcap=2.0, temperature=2.0),
            dict(teacher="dense_logits", hard_weight=0.5, softcap=1.0, teacher_softcap=2.0,
                 label_smoothing=0.1, z_loss=0.01, temperature=1.5, scale_t_squared=True),
            dict(teacher="dense_probs", hard_weight=0.2, softcap=0.8, reduction="none",
                 mode="two_phase"),
            dict(teacher="sparse_topk", tail="bucket", hard_weight=0.3, softcap=1.0,
                 temperature=2.0, scale_t_squared=True),
            dict(teacher="sparse_topk", tail="renorm", topk_values="logprobs",
                 divergence="reverse_kl", hard_weight=0.6, label_smoothing=0.1, softcap=1.2,
                 reduction="sum"),
            dict(teacher="sparse_topk", tail="none", hard_weight=0.6, z_loss=0.02,
                 reduction="none", mode="two_phase"),
        ]
        for seed, options in enumerate(cases):
            config = LossConfig(**options)
            case = Case(self.torch, 80 + seed, config, bias=seed % 2 == 0, labels=True,
                        grad_output=None if seed % 3 else 0.7)
            want = self.check_both(case, str(options))
            # the options change the C reference's loss: a reference leaving one out fails
            plain = dict(options, hard_weight=0.0, soft_weight=1.0, label_smoothing=0.0,
                         z_loss=0.0, softcap=0.0, teacher_softcap=0.0)
            base = Case(self.torch, 80 + seed, LossConfig(**plain), bias=seed % 2 == 0,
                        labels=True, grad_output=None if seed % 3 else 0.7).c_reference()
            self.assertGreater(rel(want["loss"], base["loss"]), 1e-3, options)
            if config.hard_weight:
                self.assertNotEqual(float(want["loss_hard"]), 0.0, options)

    def test_both_references_take_every_divergence_with_the_ce_and_the_softcaps(self) -> None:
        cases = (("forward_kl", {}), ("reverse_kl", {}), ("jsd", {"beta": 0.3}),
                 ("jsd", {"beta": 1.0}), ("tvd", {}), ("skew_forward_kl", {"skew_alpha": 0.2}),
                 ("skew_reverse_kl", {"skew_alpha": 0.3}), ("skew_reverse_kl", {}))
        for seed, (divergence, param) in enumerate(cases):
            teacher = ("dense_logits", "dense_probs", "dense_logprobs")[seed % 3]
            config = LossConfig(teacher=teacher, divergence=divergence, hard_weight=0.4,
                                soft_weight=0.9, label_smoothing=0.05, z_loss=0.01,
                                softcap=1.5, teacher_softcap=2.5 if seed % 3 == 0 else 0.0,
                                temperature=1.7, scale_t_squared=seed % 2 == 0, **param)
            case = Case(self.torch, 100 + seed, config, bias=seed % 2 == 1, labels=True,
                        grad_output=0.6)
            self.check_both(case, f"{divergence} {param} {teacher}")

    def test_the_references_take_the_top_k_tvd_and_skew_kls_and_refuse_them_without_a_tail(
            self) -> None:
        for divergence, alpha, tail, values in (
                ("skew_forward_kl", 0.0, "none", "probs"),
                ("skew_reverse_kl", 0.0, "bucket", "probs"),
                ("skew_reverse_kl", 0.0, "renorm", "probs"), ("tvd", 0.0, "bucket", "probs"),
                ("tvd", 0.0, "renorm", "probs"),
                ("skew_forward_kl", 0.3, "bucket", "logprobs"),
                ("skew_forward_kl", 0.7, "renorm", "probs"),
                ("skew_reverse_kl", 0.2, "bucket", "probs"),
                ("skew_reverse_kl", 0.6, "renorm", "logprobs")):
            config = LossConfig(teacher="sparse_topk", divergence=divergence, skew_alpha=alpha,
                                tail=tail, topk_values=values, reduction="sum",
                                temperature=1.5)
            case = Case(self.torch, 120, config, bias=alpha > 0.5, labels=True,
                        grad_output=None)
            got = self.ref.kl_div_fp64(case.x, case.w, None, chunk_rows=3, **case.kwargs())
            self.compare(case, got, case.c_reference(), f"top-K {divergence} {alpha} {tail}")
        for options in (dict(divergence="tvd", tail="none"),
                        dict(divergence="skew_reverse_kl", skew_alpha=0.2, tail="none"),
                        dict(divergence="skew_forward_kl", skew_alpha=0.2, tail="none"),
                        dict(divergence="reverse_kl", tail="none")):
            config = LossConfig(teacher="sparse_topk", **options)
            case = Case(self.torch, 121, config, bias=False, labels=False, grad_output=None)
            with self.assertRaises(ValueError, msg=str(options)):
                self.ref.kl_div_fp64(case.x, case.w, None, **case.kwargs())

    def test_the_references_take_the_binding_s_keywords_teacher_form_included(self) -> None:
        """The distributed GPU cases call kl_div_fp64(..., teacher_form=..., **options) as
        they call the binding."""
        torch = self.torch
        options = dict(divergence="jsd", beta=0.5, hard_weight=0.3, soft_weight=0.7,
                       softcap=1.5, temperature=2.0, reduction="mean")
        config = LossConfig(teacher="dense_logits", **options)
        case = Case(torch, 130, config, bias=True, labels=True, grad_output=None)
        want = case.c_reference()
        kw = dict(bias=case.b, labels=case.labels, teacher_form="dense_logits", **options)
        got = self.ref.kl_div_fp64(case.x, case.w, case.teacher, chunk_rows=3, **kw)
        self.compare(case, got, want, "kl_div_fp64 with teacher_form")
        loss = self.ref.kl_div_reference(case.x, case.w, case.teacher,
                                         compute_dtype=torch.float64, **kw)
        self.assertLess(rel(loss, want["loss"]), TOL, "kl_div_reference with teacher_form")
        with self.assertRaises(TypeError):
            self.ref.kl_div_fp64(case.x, case.w, case.teacher, config=config,
                                 teacher_form="dense_logits")
        with self.assertRaises(TypeError):
            self.ref.kl_div_fp64(case.x, case.w, case.teacher, teacher_form="dense_logits",
                                 not_an_option=1)

    def test_both_references_weigh_rows_like_the_c_reference(self) -> None:
        """Row weights multiply each row's loss and gradient, never the divisor."""
        cases = [dict(teacher="dense_probs"),
                 dict(teacher="dense_logits", hard_weight=0.3, soft_weight=0.7,
                      label_smoothing=0.1, z_loss=0.01, softcap=1.5, temperature=2.0,
                      scale_t_squared=True, reduction="mean"),
                 dict(teacher="dense_logprobs", divergence="jsd", beta=0.4, reduction="none",
                      mode="two_phase"),
                 dict(teacher="dense_logits", divergence="tvd", hard_weight=0.5,
                      reduction="sum"),
                 dict(teacher="sparse_topk", tail="bucket", reduction="batchmean")]
        for seed, options in enumerate(cases):
            case = Case(self.torch, 140 + seed, LossConfig(**options), bias=seed % 2 == 0,
                        labels=True, grad_output=None if seed % 2 else 0.8, row_weights=True)
            want = self.check_both(case, f"row weights {options}")
            self.assertEqual(float(want["row_loss"][2]), 0.0)  # a kept row of weight 0
            unweighted = Case(self.torch, 140 + seed, LossConfig(**options), bias=seed % 2 == 0,
                              labels=True, grad_output=None if seed % 2 else 0.8)
            self.assertGreater(rel(want["loss"], unweighted.c_reference()["loss"]), 1e-3)
            # in the input's leading shape too
            got = self.ref.kl_div_fp64(case.x, case.w, case.teacher,
                                       **dict(case.kwargs(), row_weights=case.rw.view(1, N)))
            self.assertLess(rel(got["loss"], want["loss"]), TOL)

    def test_the_online_teacher_is_the_logits_teacher_of_its_head(self) -> None:
        torch = self.torch
        g = torch.Generator().manual_seed(8)
        f64 = torch.float64
        xt = torch.rand(N, 9, generator=g, dtype=f64) - 0.5
        wt = torch.rand(V + 6, 9, generator=g, dtype=f64) - 0.5  # a padded head: rows >= V out
        for divergence, beta in (("forward_kl", 0.0), ("jsd", 0.5)):
            logits = LossConfig(teacher="dense_logits", divergence=divergence, beta=beta)
            case = Case(torch, 9, logits, bias=True, labels=True, grad_output=None)
            want = self.ref.kl_div_fp64(case.x, case.w, xt @ wt[:V].T, bias=case.b,
                                        labels=case.labels, config=logits)
            got = self.ref.kl_div_fp64(case.x, case.w, bias=case.b, labels=case.labels,
                                       teacher_input=xt, teacher_weight=wt, chunk_rows=3,
                                       divergence=divergence, beta=beta)
            self.compare(case, got, want, f"online teacher {divergence}")
            loss = self.ref.kl_div_reference(case.x, case.w, bias=case.b, labels=case.labels,
                                             teacher_input=xt, teacher_weight=wt,
                                             compute_dtype=f64, divergence=divergence,
                                             beta=beta)
            self.assertLess(rel(loss, want["loss"]), TOL, divergence)

    def test_dense_from_sparse_equals_the_gathered_sparse_loss(self) -> None:
        torch = self.torch
        for tail in ("none", "renorm"):
            config = LossConfig(teacher="sparse_topk", tail=tail, reduction="batchmean")
            case = Case(torch, 5, config, bias=True, labels=True, grad_output=None)
            losses = [self.ref.kl_div_reference(case.x, case.w, None, sparse_impl=impl,
                                                compute_dtype=torch.float64, **case.kwargs())
                      for impl in ("gather", "dense")]
            self.assertLess(rel(losses[1], losses[0]), TOL, tail)


if __name__ == "__main__":
    unittest.main()
