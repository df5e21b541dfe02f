# SPDX-License-Identifier: Apache-2.0
"""libkljit through ctypes, without torch or a GPU: loading, versions, statuses,
kljit_plan_check's verdicts and their status names, KljitError."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import unittest

from _util import HEADER, REPO

import kljit
from kljit import _lib
from kljit._lib import DType, KljitError, Problem, Status, TeacherForm


def valid_problem(**fields: object) -> Problem:
    return Problem.init(**{"hidden": 64, "vocab": 1000, **fields})


def check_status(problem: Problem) -> KljitError:
    """The KljitError kljit_plan_check raises for `problem` (fails the test if none)."""
    try:
        _lib.plan_check(problem)
    except KljitError as e:
        return e
    raise AssertionError(f"kljit_plan_check accepted {problem!r}")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (the library is loaded once per process)."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO / "python"), PYTHONDONTWRITEBYTECODE="1",
                    **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=120)


class LibraryTest(unittest.TestCase):
    def test_library_loads_and_reports_the_header_version(self) -> None:
        m = re.search(r'#define KLJIT_VERSION_STRING "([^"]+)"', HEADER.read_text())
        self.assertEqual(kljit.version(), m.group(1))
        self.assertTrue(os.path.exists(kljit.library_path()) or
                        kljit.library_path().startswith("libkljit"))

    def test_library_accepts_the_binding_struct_size(self) -> None:
        _lib.plan_check(valid_problem())
        # a binding built against an older header (no shards field) still works; one below
        # the first released struct does not
        pb = valid_problem()
        pb.struct_size = Problem.shards.offset
        _lib.plan_check(pb)
        pb.struct_size = Problem.vocab_total.offset - 8
        e = check_status(pb)
        self.assertEqual(e.name, "KLJIT_ERR_INVALID_ARGUMENT")
        self.assertIn("struct_size", e.detail)

    def test_every_status_string_starts_with_its_name(self) -> None:
        for value, name in _lib.STATUS_NAMES.items():
            self.assertTrue(_lib.status_string(value).startswith(name + ":"), name)
            self.assertEqual(Status(value).name, name[len("KLJIT_"):])

    def test_plan_check_accepts_valid_problems_of_every_dense_form(self) -> None:
        for form in (TeacherForm.DENSE_PROBS, TeacherForm.DENSE_LOGPROBS,
                     TeacherForm.DENSE_LOGITS):
            for dt in (DType.FP32, DType.FP16, DType.BF16):
                _lib.plan_check(valid_problem(teacher=form, input_dtype=dt, weight_dtype=dt,
                                              grad_weight_dtype=dt))
        self.assertEqual(_lib.last_error(), "")

    def test_plan_check_rejects_invalid_fields_with_status_names(self) -> None:
        cases = [
            ({"vocab": 1}, "KLJIT_ERR_INVALID_ARGUMENT", "vocab"),
            ({"hidden": 0}, "KLJIT_ERR_INVALID_ARGUMENT", "hidden"),
            ({"temperature": 0.0}, "KLJIT_ERR_INVALID_ARGUMENT", "temperature"),
            ({"eps": 0.5}, "KLJIT_ERR_INVALID_ARGUMENT", "eps"),
            ({"reduction": 9}, "KLJIT_ERR_INVALID_ARGUMENT", "reduction"),
            ({"label_dtype": DType.FP32}, "KLJIT_ERR_INVALID_ARGUMENT", "label_dtype"),
            ({"flags": 1 << 20}, "KLJIT_ERR_INVALID_ARGUMENT", "flags"),
            ({"weight_dtype": DType.FP32}, "KLJIT_ERR_UNSUPPORTED", "weight_dtype"),
            ({"teacher": TeacherForm.SPARSE_TOPK, "topk": 0}, "KLJIT_ERR_INVALID_ARGUMENT",
             "topk"),
            ({"teacher": TeacherForm.SPARSE_TOPK, "topk": 8, "tail": 7},
             "KLJIT_ERR_INVALID_ARGUMENT", "tail"),
        ]
        for fields, status, word in cases:
            e = check_status(valid_problem(**fields))
            self.assertEqual(e.name, status, fields)
            self.assertIn(word, e.detail, fields)
            self.assertEqual(e.function, "kljit_plan_check")
            self.assertIn(e.name, str(e))
            self.assertEqual(e.detail, _lib.last_error())

    def test_problem_layout_gives_the_saved_and_record_sizes_the_templates_declare(self) -> None:
        plain = _lib.problem_layout(valid_problem())
        ce = _lib.problem_layout(valid_problem(hard_weight=0.5))
        sparse = _lib.problem_layout(valid_problem(teacher=TeacherForm.SPARSE_TOPK, topk=8,
                                                   teacher_dtype=DType.FP32))
        self.assertEqual(plain.record_slots.decode().split()[-1], "S")
        self.assertEqual(sparse.record_slots.decode().split()[:3], ["m", "d_on", "d_off"])
        self.assertGreater(ce.saved_row_floats, plain.saved_row_floats)
        self.assertEqual(ce.saved_floats(3), ce.header_floats + 3 * ce.saved_row_floats)
        self.assertEqual(len(ce.saved_row_slots.split()), len(plain.saved_row_slots.split()) + 2)
        with self.assertRaises(KljitError) as e:
            _lib.problem_layout(valid_problem(vocab=1))
        self.assertEqual(e.exception.status, Status.ERR_INVALID_ARGUMENT)
        self.assertIn("kljit_problem_layout", str(e.exception))

    def test_sparse_problem_is_accepted_or_not_implemented_yet(self) -> None:
        pb = valid_problem(teacher=TeacherForm.SPARSE_TOPK, topk=100, topk_id_dtype=DType.INT32)
        try:
            _lib.plan_check(pb)
        except KljitError as e:
            self.assertEqual(e.name, "KLJIT_ERR_NOT_IMPLEMENTED", str(e))

    def test_context_without_a_gpu_raises_no_device(self) -> None:
        try:
            ctx = _lib.Context(0)
        except KljitError as e:
            self.assertEqual(e.name, "KLJIT_ERR_NO_DEVICE", str(e))
            self.assertEqual(e.status, Status.ERR_NO_DEVICE)
            self.assertTrue(e.detail)
        else:  # a machine with a GPU: the context works
            ctx.close()
        with self.assertRaises(KljitError) as cm:
            _lib.Context(-1)
        self.assertIn(cm.exception.name, ("KLJIT_ERR_INVALID_ARGUMENT", "KLJIT_ERR_NO_DEVICE"))

    def test_kljit_error_is_a_runtime_error_with_an_unknown_status_still_named(self) -> None:
        e = KljitError(99, "kljit_fused", "")
        self.assertIsInstance(e, RuntimeError)
        self.assertEqual(e.name, "KLJIT_ERR_UNKNOWN(99)")
        self.assertEqual(str(e), "kljit_fused: KLJIT_ERR_UNKNOWN(99)")

    def test_a_missing_library_is_reported_with_its_path(self) -> None:
        r = run_python("import kljit\ntry:\n    kljit.load_library()\n"
                       "except kljit.LibraryNotFound as e:\n    print('LNF', e)\n",
                       KLJIT_LIBRARY="/nonexistent/libkljit.so")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("LNF", r.stdout)
        self.assertIn("/nonexistent/libkljit.so", r.stdout)
        self.assertIn("KLJIT_LIBRARY", r.stdout)

    def test_import_kljit_needs_neither_torch_nor_the_library(self) -> None:
        code = ("import sys\nsys.modules['torch'] = None\nimport kljit\n"
                "kljit.LossConfig(reduction='sum')\n"
                "try:\n    kljit.fused_linear_kl_div\nexcept ImportError:\n    print('no torch')\n")
        r = run_python(code, KLJIT_LIBRARY="/nonexistent/libkljit.so")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("no torch", r.stdout)


if __name__ == "__main__":
    unittest.main()
