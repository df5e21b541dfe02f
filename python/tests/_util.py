# SPDX-License-Identifier: Apache-2.0
"""Shared helpers of python/tests: paths, optional imports, the C helpers, fake tensors."""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "include" / "kljit.h"


def optional_import(name: str) -> Optional[Any]:
    """The module, or None where it is not installed (or fails to import)."""
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install counts as missing
        return None


def require(name: str) -> Any:
    """The module, or skip the test (CTest then reports 77). Where $KLJIT_TEST_REQUIRE names
    it (a comma-separated list: CI sets "torch" after installing it) a missing module fails the
    test instead: a broken install must not pass as a row of skips."""
    module = optional_import(name)
    if module is None:
        if name in os.environ.get("KLJIT_TEST_REQUIRE", "").split(","):
            raise AssertionError(f"{name} is not installed (or fails to import), and "
                                 f"KLJIT_TEST_REQUIRE={os.environ['KLJIT_TEST_REQUIRE']} says "
                                 f"it must be")
        raise unittest.SkipTest(f"{name} is not installed")
    return module


def labels(*names: str) -> Any:
    """Decorator: extra CTest labels of a test method or class (run.py --list prints them,
    tests/python.cmake adds them): "torch" for every test that needs torch, so `ctest -L torch`
    runs and counts them."""

    def mark(obj: Any) -> Any:
        obj.ctest_labels = tuple(getattr(obj, "ctest_labels", ())) + names
        return obj

    return mark


def out_dir(name: str) -> Path:
    """A fresh directory for a test's files: under $KLJIT_TEST_OUT (CTest) or a temp dir."""
    base = os.environ.get("KLJIT_TEST_OUT")
    root = Path(base) if base else Path(tempfile.gettempdir()) / "kljit-python-tests"
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _helper(env: str, source: str, libs: Sequence[str] = ()) -> Path:
    """A C helper: $env (set by CTest), else built here with cc from tests/<source>."""
    given = os.environ.get(env)
    if given:
        return Path(given)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise unittest.SkipTest(f"{env} is not set and there is no C compiler to build it")
    exe = out_dir("helpers-" + source.replace(".", "_")) / source.replace(".c", "")
    cmd = [cc, "-std=c11", "-O1", "-I", str(REPO / "include"), "-I", str(REPO / "tests"),
           "-I", str(REPO / "src"), str(REPO / "tests" / source), *libs, "-o", str(exe), "-lm"]
    subprocess.run(cmd, check=True)
    return exe


@functools.lru_cache(maxsize=None)
def layout() -> Dict[str, Any]:
    """What the C compiler says about the header (tests/python_layout.c), as JSON."""
    exe = _helper("KLJIT_TEST_LAYOUT_HELPER", "python_layout.c")
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def ref_helper() -> Path:
    """tests/python_ref.c (the fp64 C reference on a problem file)."""
    return _helper("KLJIT_TEST_REF_HELPER", "python_ref.c",
                   [str(REPO / "tests" / "ref.c"), str(REPO / "src" / "host_dtype.c")])


class FakeDevice:
    """What the checks read of torch.device."""

    def __init__(self, type: str = "cuda", index: Optional[int] = 0) -> None:
        self.type = type
        self.index = index if type == "cuda" else None


class FakeTensor:
    """Duck-typed stand-in for a torch.Tensor: dtype name, shape, device, layout, pointer."""

    def __init__(self, shape: Sequence[int], dtype: str = "bfloat16", device: str = "cuda:0",
                 contiguous: bool = True, ptr: int = 0x7F0000000000) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        kind, _, index = device.partition(":")
        self.device = FakeDevice(kind, int(index) if index else None)
        self._contiguous = contiguous
        self._ptr = ptr
        self.requires_grad = False

    def is_contiguous(self) -> bool:
        return self._contiguous

    def data_ptr(self) -> int:
        return self._ptr
