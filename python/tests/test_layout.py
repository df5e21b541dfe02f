# SPDX-License-Identifier: Apache-2.0
"""The ctypes mirrors of python/kljit/_lib.py against include/kljit.h.

Two independent checks: what the C compiler makes of the header (tests/python_layout.c prints
sizes, offsets, KLJIT_*_INIT values and enumerators), and a plain text parse of the header
(field names in order, every enumerator's name), which needs no compiler and catches a field
the helper itself forgot.
"""

from __future__ import annotations

import ctypes
import re
import unittest

from _util import HEADER, layout

import kljit
from kljit import _lib


def header_text() -> str:
    """The header without comments."""
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def header_struct_fields(name: str) -> list:
    """Field names of `typedef struct name { ... } name;`, in order."""
    m = re.search(r"typedef\s+struct\s+" + name + r"\s*\{(.*?)\}\s*" + name + r"\s*;",
                  header_text(), re.S)
    assert m, f"struct {name} not found in {HEADER}"
    fields = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if decl:
            fields.append(re.search(r"(\w+)\s*$", decl).group(1))
    return fields


#: The enums the binding mirrors: those of kljit_problem's and kljit_args' fields and of the
#: calls it makes. The header's other enums (wisdom, tuning, tooling) are not its business.
MIRRORED_ENUMS = ("kljit_status", "kljit_dtype", "kljit_teacher_form", "kljit_divergence",
                  "kljit_topk_values",
                  "kljit_tail", "kljit_reduction", "kljit_temperature_mode",
                  "kljit_grad_weight_accum", "kljit_plan_rigor", "kljit_mode")
MIRRORED_FLAG_PREFIXES = ("KLJIT_FLAG_", "KLJIT_EXEC_")


def header_enumerators() -> set:
    """Every KLJIT_ name declared with `= value` in a mirrored enum: the typedef'd ones by
    name, the anonymous flag enums by prefix."""
    names = set()
    text = header_text()
    for tag, body, typedef in re.findall(r"enum\s*(\w*)\s*\{(.*?)\}\s*(\w*)", text, re.S):
        found = re.findall(r"\b(KLJIT_\w+)\s*=", body)
        if tag in MIRRORED_ENUMS or typedef in MIRRORED_ENUMS:
            names.update(found)
        else:
            names.update(n for n in found if n.startswith(MIRRORED_FLAG_PREFIXES))
    return names


def ctypes_fields(struct: type) -> list:
    return [[name, getattr(struct, name).offset, getattr(struct, name).size]
            for name, _ in struct._fields_]


class LayoutTest(unittest.TestCase):
    def test_problem_offsets_and_sizes_match_the_compiler(self) -> None:
        c = layout()["kljit_problem"]
        self.assertEqual(ctypes.sizeof(_lib.Problem), c["size"])
        self.assertEqual(ctypes_fields(_lib.Problem), c["fields"])

    def test_args_offsets_and_sizes_match_the_compiler(self) -> None:
        c = layout()["kljit_args"]
        self.assertEqual(ctypes.sizeof(_lib.Args), c["size"])
        self.assertEqual(ctypes_fields(_lib.Args), c["fields"])

    def test_layout_struct_offsets_and_sizes_match_the_compiler(self) -> None:
        c = layout()["kljit_layout"]
        self.assertEqual(ctypes.sizeof(_lib.Layout), c["size"])
        self.assertEqual(ctypes_fields(_lib.Layout), c["fields"])

    def test_load_time_size_constants_match_the_compiler(self) -> None:
        info = layout()
        self.assertEqual(info["pointer_size"], 8)
        self.assertEqual(_lib._PROBLEM_SIZE, info["kljit_problem"]["size"])
        self.assertEqual(_lib._ARGS_SIZE, info["kljit_args"]["size"])

    def test_problem_init_matches_kljit_problem_init(self) -> None:
        pb = _lib.Problem.init()
        for name, value in layout()["kljit_problem"]["init"].items():
            self.assertEqual(getattr(pb, name), value, name)

    def test_args_init_matches_kljit_args_init(self) -> None:
        args = _lib.Args.init()
        types = dict(_lib.Args._fields_)
        for name, value in layout()["kljit_args"]["init"].items():
            got = getattr(args, name)
            if types[name] is ctypes.c_void_p:  # the helper prints 1 for a non-NULL pointer
                got = int(got is not None)
            self.assertEqual(got, value, name)

    def test_every_enumerator_matches_the_compiler(self) -> None:
        self.assertEqual(_lib.C_ENUMERATORS, layout()["enums"])

    def test_binding_version_matches_the_header(self) -> None:
        major, minor, _ = (int(p) for p in layout()["version"].split("."))
        self.assertEqual(_lib.API_VERSION, (major, minor))
        self.assertEqual(kljit.__version__, layout()["version"])

    def test_struct_field_order_matches_the_header_text(self) -> None:
        for struct, name in ((_lib.Problem, "kljit_problem"), (_lib.Args, "kljit_args")):
            self.assertEqual([f for f, _ in struct._fields_], header_struct_fields(name), name)

    def test_header_declares_no_enumerator_the_binding_lacks(self) -> None:
        declared = header_enumerators()
        self.assertGreater(len(declared), 40)
        self.assertEqual(sorted(declared - set(_lib.C_ENUMERATORS)), [])
        self.assertEqual(sorted(set(_lib.C_ENUMERATORS) - declared), [])

    def test_layout_helper_lists_every_header_field_and_enumerator(self) -> None:
        info = layout()
        for name in ("kljit_problem", "kljit_args"):
            self.assertEqual([f[0] for f in info[name]["fields"]], header_struct_fields(name))
        self.assertEqual(set(info["enums"]), header_enumerators())


if __name__ == "__main__":
    unittest.main()
