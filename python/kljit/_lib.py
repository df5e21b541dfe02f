# SPDX-License-Identifier: Apache-2.0
"""ctypes mirror of include/kljit.h: constants, the two structs, the library and its handles.

Nothing here imports torch, so the layout, the library's loading and kljit_plan_check can be
tested on a machine without torch or a GPU (python/tests/test_layout.py, test_library.py).

The structs below must match the header field for field: same order, same C types. That is
checked three ways: at load time ctypes.sizeof must equal the sizes the header implies on an
LP64 platform (_PROBLEM_SIZE, _ARGS_SIZE) and the loaded library must accept our
kljit_problem.struct_size (kljit_plan_check refuses any other size); in the unit tests every
offset, every KLJIT_*_INIT default and every enumerator is compared against what the C compiler
prints for the header (tests/python_layout.c).
"""

from __future__ import annotations

import ctypes
import enum
import os
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

# ---- constants (explicit values, as in the header) ---------------------------------------

#: kljit_status names by value (KljitError asks the library first; see status_name).
STATUS_NAMES: Dict[int, str] = {
    0: "KLJIT_SUCCESS",
    1: "KLJIT_ERR_INVALID_ARGUMENT",
    2: "KLJIT_ERR_MISALIGNED",
    3: "KLJIT_ERR_UNSUPPORTED",
    5: "KLJIT_ERR_NO_DEVICE",
    6: "KLJIT_ERR_CUDA",
    7: "KLJIT_ERR_CUBLAS",
    8: "KLJIT_ERR_COMPILE",
    9: "KLJIT_ERR_TEMPLATE",
    10: "KLJIT_ERR_CACHE",
    11: "KLJIT_ERR_OUT_OF_MEMORY",
    12: "KLJIT_ERR_WORKSPACE_TOO_SMALL",
    13: "KLJIT_ERR_BAD_INPUT_DATA",
    14: "KLJIT_ERR_WISDOM",
    15: "KLJIT_ERR_NO_WISDOM",
    16: "KLJIT_ERR_INTERNAL",
    17: "KLJIT_ERR_NCCL",
}


class Status(enum.IntEnum):
    """kljit_status."""

    SUCCESS = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_MISALIGNED = 2
    ERR_UNSUPPORTED = 3
    ERR_NO_DEVICE = 5
    ERR_CUDA = 6
    ERR_CUBLAS = 7
    ERR_COMPILE = 8
    ERR_TEMPLATE = 9
    ERR_CACHE = 10
    ERR_OUT_OF_MEMORY = 11
    ERR_WORKSPACE_TOO_SMALL = 12
    ERR_BAD_INPUT_DATA = 13
    ERR_WISDOM = 14
    ERR_NO_WISDOM = 15
    ERR_INTERNAL = 16
    ERR_NCCL = 17


class DType(enum.IntEnum):
    """kljit_dtype."""

    FP32 = 1
    FP16 = 2
    BF16 = 3
    INT32 = 4
    INT64 = 5


class TeacherForm(enum.IntEnum):
    """kljit_teacher_form."""

    DENSE_PROBS = 1
    DENSE_LOGPROBS = 2
    DENSE_LOGITS = 3
    SPARSE_TOPK = 4
    DENSE_HIDDEN = 5


class Divergence(enum.IntEnum):
    """kljit_divergence."""

    FORWARD_KL = 1
    REVERSE_KL = 2
    JSD = 3
    TVD = 4
    SKEW_FORWARD_KL = 5
    SKEW_REVERSE_KL = 6


class TopkValues(enum.IntEnum):
    """kljit_topk_values."""

    PROBS = 1
    LOGPROBS = 2


class Tail(enum.IntEnum):
    """kljit_tail."""

    NONE = 1
    RENORM = 2
    BUCKET = 3


class Reduction(enum.IntEnum):
    """kljit_reduction."""

    SUM = 1
    BATCHMEAN = 2
    MEAN = 3
    NONE = 4


class TemperatureMode(enum.IntEnum):
    """kljit_temperature_mode."""

    CONSTANT = 1
    RUNTIME = 2


class GradWeightAccum(enum.IntEnum):
    """kljit_grad_weight_accum."""

    FP32 = 1
    OUTPUT_DTYPE = 2
    AUTO = 3


class PlanRigor(enum.IntEnum):
    """kljit_plan_rigor."""

    ESTIMATE = 1
    MEASURE = 2
    EXHAUSTIVE = 3
    WISDOM_ONLY = 4


class Mode(enum.IntEnum):
    """kljit_mode."""

    FUSED = 1
    FORWARD = 2
    BACKWARD = 3


# Problem flags (KLJIT_FLAG_*) and execution flags (KLJIT_EXEC_*).
FLAG_BIAS = 1 << 0
FLAG_SCALE_T_SQUARED = 1 << 1
FLAG_NATIVE_LOGITS = 1 << 2
FLAG_ALLOW_TF32 = 1 << 3
FLAG_CHECK_INPUTS = 1 << 4
FLAG_TEACHER_BIAS = 1 << 5
FLAG_ROW_WEIGHTS = 1 << 6
FLAG_PRECISE_ACCUMULATION = 1 << 7
EXEC_ACCUMULATE_GRAD_WEIGHT = 1 << 0
EXEC_NO_GRAD_INPUT = 1 << 1
EXEC_NO_GRAD_WEIGHT = 1 << 2

#: Every enumerator of the header by its C name (the layout test compares it with the compiler's
#: values and with the names the header declares).
C_ENUMERATORS: Dict[str, int] = {
    **{name: value for value, name in STATUS_NAMES.items()},
    **{f"KLJIT_{m.name}": int(m) for m in DType},
    **{f"KLJIT_TEACHER_{m.name}": int(m) for m in TeacherForm},
    **{f"KLJIT_DIVERGENCE_{m.name}": int(m) for m in Divergence},
    **{f"KLJIT_TOPK_{m.name}": int(m) for m in TopkValues},
    **{f"KLJIT_TAIL_{m.name}": int(m) for m in Tail},
    **{f"KLJIT_REDUCTION_{m.name}": int(m) for m in Reduction},
    **{f"KLJIT_TEMPERATURE_{m.name}": int(m) for m in TemperatureMode},
    **{f"KLJIT_ACCUM_{m.name}": int(m) for m in GradWeightAccum},
    **{f"KLJIT_PLAN_{m.name}": int(m) for m in PlanRigor},
    **{f"KLJIT_MODE_{m.name}": int(m) for m in Mode},
    "KLJIT_FLAG_BIAS": FLAG_BIAS,
    "KLJIT_FLAG_SCALE_T_SQUARED": FLAG_SCALE_T_SQUARED,
    "KLJIT_FLAG_NATIVE_LOGITS": FLAG_NATIVE_LOGITS,
    "KLJIT_FLAG_ALLOW_TF32": FLAG_ALLOW_TF32,
    "KLJIT_FLAG_CHECK_INPUTS": FLAG_CHECK_INPUTS,
    "KLJIT_FLAG_TEACHER_BIAS": FLAG_TEACHER_BIAS,
    "KLJIT_FLAG_ROW_WEIGHTS": FLAG_ROW_WEIGHTS,
    "KLJIT_FLAG_PRECISE_ACCUMULATION": FLAG_PRECISE_ACCUMULATION,
    "KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT": EXEC_ACCUMULATE_GRAD_WEIGHT,
    "KLJIT_EXEC_NO_GRAD_INPUT": EXEC_NO_GRAD_INPUT,
    "KLJIT_EXEC_NO_GRAD_WEIGHT": EXEC_NO_GRAD_WEIGHT,
}

#: The API version this binding was written against (major, minor): a library of another
#: major version, or of an older minor one, is refused at load time.
API_VERSION: Tuple[int, int] = (0, 1)

# ---- the structs ------------------------------------------------------------------------

# C enums are int-sized on every platform kljit builds for (gcc/clang, LP64 Linux).
_enum = ctypes.c_int


class Problem(ctypes.Structure):
    """kljit_problem. Construct with Problem.init() (KLJIT_PROBLEM_INIT), not Problem()."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("hidden", ctypes.c_int64),
        ("vocab", ctypes.c_int64),
        ("input_dtype", _enum),
        ("weight_dtype", _enum),
        ("teacher_dtype", _enum),
        ("teacher", _enum),
        ("topk", ctypes.c_int32),
        ("topk_id_dtype", _enum),
        ("topk_values", _enum),
        ("tail", _enum),
        ("temperature_mode", _enum),
        ("temperature", ctypes.c_double),
        ("teacher_temperature", ctypes.c_double),
        ("reduction", _enum),
        ("label_dtype", _enum),
        ("ignore_index", ctypes.c_int64),
        ("eps", ctypes.c_double),
        ("grad_weight_dtype", _enum),
        ("grad_weight_accum", _enum),
        ("flags", ctypes.c_uint32),
        ("vocab_total", ctypes.c_int64),
        ("vocab_offset", ctypes.c_int64),
        ("shards", ctypes.c_int32),
        ("divergence", _enum),
        ("beta", ctypes.c_double),
        ("hard_weight", ctypes.c_double),
        ("soft_weight", ctypes.c_double),
        ("softcap", ctypes.c_double),
        ("teacher_softcap", ctypes.c_double),
        ("teacher_vocab", ctypes.c_int64),
        ("teacher_ld", ctypes.c_int64),
        ("teacher_hidden", ctypes.c_int64),
        ("skew_alpha", ctypes.c_double),
        ("label_smoothing", ctypes.c_double),
        ("z_loss", ctypes.c_double),
    ]

    #: KLJIT_PROBLEM_INIT, field by field.
    INIT = {
        "hidden": 0,
        "vocab": 0,
        "input_dtype": DType.BF16,
        "weight_dtype": DType.BF16,
        "teacher_dtype": DType.BF16,
        "teacher": TeacherForm.DENSE_PROBS,
        "topk": 0,
        "topk_id_dtype": DType.INT64,
        "topk_values": TopkValues.PROBS,
        "tail": Tail.NONE,
        "temperature_mode": TemperatureMode.CONSTANT,
        "temperature": 1.0,
        "teacher_temperature": 0.0,
        "reduction": Reduction.BATCHMEAN,
        "label_dtype": DType.INT64,
        "ignore_index": -100,
        "eps": 1e-20,
        "grad_weight_dtype": DType.FP32,
        "grad_weight_accum": GradWeightAccum.FP32,
        "flags": 0,
        "vocab_total": 0,
        "vocab_offset": 0,
        "shards": 1,
        "divergence": Divergence.FORWARD_KL,
        "beta": 0.0,
        "hard_weight": 0.0,
        "soft_weight": 1.0,
        "softcap": 0.0,
        "teacher_softcap": 0.0,
        "teacher_vocab": 0,
        "teacher_ld": 0,
        "teacher_hidden": 0,
        "skew_alpha": 0.0,
        "label_smoothing": 0.0,
        "z_loss": 0.0,
    }

    @classmethod
    def init(cls, **fields: object) -> "Problem":
        """KLJIT_PROBLEM_INIT with `fields` set on top (unknown names raise TypeError)."""
        pb = cls(struct_size=ctypes.sizeof(cls), **{k: int(v) if isinstance(v, enum.Enum) else v
                                                    for k, v in cls.INIT.items()})
        for name, value in fields.items():
            if name not in cls.INIT:
                raise TypeError(f"kljit_problem has no field {name!r}")
            setattr(pb, name, int(value) if isinstance(value, enum.Enum) else value)
        return pb

    def key(self) -> Tuple[object, ...]:
        """The field values as a tuple: equal problems give equal keys (the plan cache's key)."""
        return tuple(getattr(self, name) for name, _ in self._fields_)

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name, _ in self._fields_[1:])
        return f"Problem({inner})"


class Args(ctypes.Structure):
    """kljit_args. Construct with Args.init() (KLJIT_ARGS_INIT); pointers are integers."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("rows", ctypes.c_int64),
        ("input", ctypes.c_void_p),
        ("weight", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("labels", ctypes.c_void_p),
        ("teacher", ctypes.c_void_p),
        ("teacher_ids", ctypes.c_void_p),
        ("teacher_values", ctypes.c_void_p),
        ("temperature", ctypes.c_double),
        ("loss", ctypes.c_void_p),
        ("grad_input", ctypes.c_void_p),
        ("grad_weight", ctypes.c_void_p),
        ("grad_bias", ctypes.c_void_p),
        ("saved", ctypes.c_void_p),
        ("grad_output", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        ("flags", ctypes.c_uint32),
        ("grad_scale", ctypes.c_double),
        ("teacher_input", ctypes.c_void_p),
        ("teacher_weight", ctypes.c_void_p),
        ("teacher_bias", ctypes.c_void_p),
        ("row_weights", ctypes.c_void_p),
        ("row_loss", ctypes.c_void_p),
        ("loss_parts", ctypes.c_void_p),
        ("divisor", ctypes.c_void_p),
    ]

    #: KLJIT_ARGS_INIT, field by field (None is NULL).
    INIT = {
        "rows": 0,
        "input": None,
        "weight": None,
        "bias": None,
        "labels": None,
        "teacher": None,
        "teacher_ids": None,
        "teacher_values": None,
        "temperature": 1.0,
        "loss": None,
        "grad_input": None,
        "grad_weight": None,
        "grad_bias": None,
        "saved": None,
        "grad_output": None,
        "workspace": None,
        "workspace_size": 0,
        "flags": 0,
        "grad_scale": 1.0,
        "teacher_input": None,
        "teacher_weight": None,
        "teacher_bias": None,
        "row_weights": None,
        "row_loss": None,
        "loss_parts": None,
        "divisor": None,
    }

    @classmethod
    def init(cls, **fields: object) -> "Args":
        """KLJIT_ARGS_INIT with `fields` set on top (unknown names raise TypeError)."""
        args = cls(struct_size=ctypes.sizeof(cls), **cls.INIT)
        for name, value in fields.items():
            if name not in cls.INIT:
                raise TypeError(f"kljit_args has no field {name!r}")
            setattr(args, name, value)
        return args


# What the header implies on LP64 (x86_64, aarch64): 8-byte size_t, int64, double and pointers,
# 4-byte enums, int32 and uint32, natural alignment, padding to 8 at the end.
_PROBLEM_SIZE = 232

_ARGS_SIZE = 216


class Layout(ctypes.Structure):
    """kljit_layout (include/kljit_experimental.h): the records a problem's kernels leave in the
    caller's buffers, as the kernel templates declare them (kljit_problem_layout)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("header_floats", ctypes.c_int),
        ("saved_row_floats", ctypes.c_int),
        ("record_floats", ctypes.c_int),
        ("record_slots", ctypes.c_char * 128),
        ("saved_row_slots", ctypes.c_char * 128),
    ]

    def saved_floats(self, rows: int) -> int:
        """Floats of two-phase `saved` for `rows` rows (kljit_plan_saved_size / 4): the header,
        then a saved row a row."""
        return self.header_floats + self.saved_row_floats * int(rows)


def check_struct_sizes() -> None:
    """Raises ImportError when the ctypes mirrors do not have the sizes the header implies."""
    got = (ctypes.sizeof(Problem), ctypes.sizeof(Args))
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        raise ImportError("kljit's Python binding supports 64-bit platforms only")
    if got != (_PROBLEM_SIZE, _ARGS_SIZE):
        raise ImportError(f"kljit ctypes layout is wrong: sizeof(kljit_problem, kljit_args) = "
                          f"{got}, the header implies {(_PROBLEM_SIZE, _ARGS_SIZE)}")


check_struct_sizes()

# ---- errors -----------------------------------------------------------------------------


class KljitError(RuntimeError):
    """A kljit call returned a status other than KLJIT_SUCCESS.

    Attributes: `status` (int), `name` ("KLJIT_ERR_..."), `function` (the C entry point) and
    `detail` (kljit_last_error() right after the call: which argument, which value, the CUDA
    call or the NVRTC log).
    """

    def __init__(self, status: int, function: str, detail: str) -> None:
        self.status = int(status)
        self.name = status_name(self.status)
        self.function = function
        self.detail = detail
        # The library's messages usually start with the function's name already.
        if detail.startswith(function):
            text = f"{self.name}: {detail}"
        else:
            text = f"{function}: {self.name}: {detail}" if detail else f"{function}: {self.name}"
        super().__init__(text)


class LibraryNotFound(ImportError):
    """libkljit.so could not be found or loaded; the message lists every place tried."""


# ---- loading the library ----------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parent.parent
_LIB_NAMES = ("libkljit.so", "libkljit.so.0")


def candidate_paths() -> Sequence[Path]:
    """Where load_library looks, in order, after $KLJIT_LIBRARY: next to the package, then the
    repository's build directories (build/, then build-*/ by name), for an in-tree checkout."""
    out = [_PACKAGE_DIR / n for n in _LIB_NAMES]
    out += [_PACKAGE_DIR.parent / n for n in _LIB_NAMES]
    builds = [_REPO_ROOT / "build"] + sorted(p for p in _REPO_ROOT.glob("build-*") if p.is_dir())
    out += [b / n for b in builds for n in _LIB_NAMES]
    return out


def _declare(lib: ctypes.CDLL) -> None:
    """Argument and return types of every entry point the binding calls."""
    st, vp, pb, ar = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Problem), ctypes.POINTER(Args)
    sigs = {
        "kljit_version_number": (ctypes.c_uint, []),
        "kljit_version": (ctypes.c_char_p, []),
        "kljit_status_string": (ctypes.c_char_p, [st]),
        "kljit_last_error": (ctypes.c_char_p, []),
        "kljit_context_create": (st, [ctypes.POINTER(vp), ctypes.c_int, vp]),
        "kljit_context_destroy": (None, [vp]),
        "kljit_plan_check": (st, [pb]),
        "kljit_plan_create": (st, [vp, pb, ctypes.c_int, ctypes.POINTER(vp)]),
        "kljit_plan_destroy": (None, [vp]),
        "kljit_plan_workspace_size": (st, [vp, ctypes.c_int, ctypes.c_int64,
                                           ctypes.POINTER(ctypes.c_size_t)]),
        "kljit_plan_saved_size": (st, [vp, ctypes.c_int64, ctypes.POINTER(ctypes.c_size_t)]),
        "kljit_plan_describe": (ctypes.c_char_p, [vp]),
        "kljit_fused": (st, [vp, vp, ar]),
        "kljit_forward": (st, [vp, vp, ar]),
        "kljit_backward": (st, [vp, vp, ar]),
        "kljit_precompile": (st, [pb, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32, vp,
                                  vp]),
        "kljit_problem_layout": (st, [pb, ctypes.POINTER(Layout)]),
        "kljit_plan_chunk_rows": (st, [vp, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]),
        "kljit_scale": (st, [vp, vp, vp, ctypes.c_int, ctypes.c_int64, vp]),
        "kljit_plan_shard_rounds": (st, [vp, ctypes.POINTER(ctypes.c_int)]),
        "kljit_shard_stats": (st, [vp, vp, ar, vp]),
        "kljit_shard_sums": (st, [vp, vp, ar, vp, ctypes.c_int, vp]),
        "kljit_shard_finish": (st, [vp, vp, ar, vp, ctypes.c_int]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def _check_library(lib: ctypes.CDLL, path: str) -> None:
    """The loaded library's version and its idea of sizeof(kljit_problem) must match ours."""
    number = lib.kljit_version_number()
    major, minor = number // 10000, number // 100 % 100
    if major != API_VERSION[0] or minor < API_VERSION[1]:
        raise LibraryNotFound(f"{path} is kljit {lib.kljit_version().decode()}; this binding "
                              f"needs {API_VERSION[0]}.{API_VERSION[1]} or a later 0.x")
    # kljit_plan_check validates struct_size first; a valid problem passes only if the
    # library's kljit_problem has our size.
    pb = Problem.init(hidden=8, vocab=16)
    status = lib.kljit_plan_check(ctypes.byref(pb))
    detail = lib.kljit_last_error().decode(errors="replace")
    if status != Status.SUCCESS and "struct_size" in detail:
        raise LibraryNotFound(f"{path}: the library disagrees with the binding's kljit_problem "
                              f"layout: {detail}")


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def load_library() -> ctypes.CDLL:
    """Loads libkljit once per process: $KLJIT_LIBRARY if set (it must work), else the first
    of candidate_paths() that exists, else the system's search path. Raises LibraryNotFound."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        env = os.environ.get("KLJIT_LIBRARY")
        tried = []
        if env:
            candidates = [env]
        else:
            candidates = [str(p) for p in candidate_paths() if p.exists()] + list(_LIB_NAMES)
        for path in candidates:
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path}: {e}")
                continue
            _declare(lib)
            _check_library(lib, path)
            _lib, _lib_path = lib, path
            return lib
        where = "; ".join(tried) if tried else "nothing found"
        raise LibraryNotFound(
            "could not load libkljit (" + where + "). Build it (cmake -B build && cmake --build "
            "build) or set KLJIT_LIBRARY to the path of libkljit.so. Searched: $KLJIT_LIBRARY, "
            + ", ".join(str(p) for p in candidate_paths()) + ", the system library path.")


def library_path() -> str:
    """The path the library was loaded from (loads it if needed)."""
    load_library()
    assert _lib_path is not None
    return _lib_path


def version() -> str:
    """kljit_version() of the loaded library."""
    return load_library().kljit_version().decode()


def last_error() -> str:
    """kljit_last_error() on this thread."""
    return load_library().kljit_last_error().decode(errors="replace")


def status_string(status: int) -> str:
    """kljit_status_string(status)."""
    return load_library().kljit_status_string(int(status)).decode()


def status_name(status: int) -> str:
    """'KLJIT_ERR_MISALIGNED' for 2: from the loaded library's kljit_status_string (so a status
    newer than this binding is still named), else from STATUS_NAMES."""
    if _lib is not None:
        name = _lib.kljit_status_string(int(status)).decode().split(":")[0]
        if name.startswith("KLJIT_") and not name.startswith("KLJIT_ERR_?"):
            return name
    return STATUS_NAMES.get(int(status), f"KLJIT_ERR_UNKNOWN({int(status)})")


def check(status: int, function: str) -> None:
    """Raises KljitError for a status other than KLJIT_SUCCESS, with kljit_last_error()."""
    if status != Status.SUCCESS:
        raise KljitError(status, function, last_error())


def plan_check(problem: Problem) -> None:
    """kljit_plan_check: raises KljitError when the problem is invalid or unsupported."""
    lib = load_library()
    check(lib.kljit_plan_check(ctypes.byref(problem)), "kljit_plan_check")


_layouts: "dict" = {}


def problem_layout(problem: Problem) -> Layout:
    """kljit_problem_layout: the sizes of `problem`'s records (the saved rows, the split API's
    records), without a plan or a GPU; remembered per problem (the library renders the
    templates to answer)."""
    key = bytes(problem)
    layout = _layouts.get(key)
    if layout is None:
        layout = Layout(struct_size=ctypes.sizeof(Layout))
        check(load_library().kljit_problem_layout(ctypes.byref(problem), ctypes.byref(layout)),
              "kljit_problem_layout")
        if len(_layouts) >= 256:
            _layouts.clear()
        _layouts[key] = layout
    return layout


# ---- contexts and plans -----------------------------------------------------------------


_SCALE_DTYPES = {"torch.float32": DType.FP32, "torch.float16": DType.FP16,
                 "torch.bfloat16": DType.BF16}


class Context:
    """A kljit_context bound to one CUDA device's primary context (the one PyTorch uses)."""

    def __init__(self, device: int) -> None:
        lib = load_library()
        handle = ctypes.c_void_p()
        check(lib.kljit_context_create(ctypes.byref(handle), int(device), None),
              "kljit_context_create")
        self.device = int(device)
        self._handle = handle

    @property
    def handle(self) -> ctypes.c_void_p:
        """The kljit_context pointer."""
        return self._handle

    def scale(self, stream: int, tensor: Any, factor: Any) -> None:
        """kljit_scale: tensor (fp32, fp16 or bf16, contiguous, on this device) *= the fp32
        scalar `factor` (a device tensor), in place on `stream`, with no host synchronization."""
        dtype = _SCALE_DTYPES[str(tensor.dtype)]
        status = load_library().kljit_scale(self._handle, stream or None, tensor.data_ptr(),
                                            dtype, tensor.numel(), factor.data_ptr())
        if status:
            check(status, "kljit_scale")

    def close(self) -> None:
        """kljit_context_destroy. Plans made from it must be closed first."""
        if self._handle and not sys.is_finalizing():
            load_library().kljit_context_destroy(self._handle)
        self._handle = ctypes.c_void_p()


class Plan:
    """A kljit_plan: made once per (problem, device), executed many times. Immutable, so one
    plan serves every thread and stream (each call brings its own workspace)."""

    def __init__(self, context: Context, problem: Problem,
                 rigor: PlanRigor = PlanRigor.ESTIMATE) -> None:
        lib = load_library()
        handle = ctypes.c_void_p()
        check(lib.kljit_plan_create(context.handle, ctypes.byref(problem), int(rigor),
                                    ctypes.byref(handle)), "kljit_plan_create")
        self.context = context  # keeps the context alive as long as the plan
        self.problem = Problem.init(**{n: getattr(problem, n) for n in Problem.INIT})
        self._handle = handle
        # the entry points, looked up once: execute is on every call's path
        self._entry = {Mode.FUSED: (lib.kljit_fused, "kljit_fused"),
                       Mode.FORWARD: (lib.kljit_forward, "kljit_forward"),
                       Mode.BACKWARD: (lib.kljit_backward, "kljit_backward")}


    def __del__(self) -> None:
        # At interpreter exit the library may be half torn down: leak rather than crash.
        if getattr(self, "_handle", None) and not sys.is_finalizing():
            load_library().kljit_plan_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def workspace_size(self, mode: Mode, max_rows: int) -> int:
        """kljit_plan_workspace_size: bytes a call in `mode` with up to max_rows rows needs."""
        out = ctypes.c_size_t()
        check(load_library().kljit_plan_workspace_size(self._handle, int(mode), int(max_rows),
                                                       ctypes.byref(out)),
              "kljit_plan_workspace_size")
        return out.value

    def saved_size(self, rows: int) -> int:
        """kljit_plan_saved_size: bytes of the statistics kljit_forward saves for backward."""
        out = ctypes.c_size_t()
        check(load_library().kljit_plan_saved_size(self._handle, int(rows), ctypes.byref(out)),
              "kljit_plan_saved_size")
        return out.value

    def chunk_rows(self, rows: int) -> int:
        """kljit_plan_chunk_rows: tokens per chunk of a call of `rows` rows (the plan's chunk,
        or fewer for a short call)."""
        out = ctypes.c_int64()
        check(load_library().kljit_plan_chunk_rows(self._handle, int(rows), ctypes.byref(out)),
              "kljit_plan_chunk_rows")
        return out.value

    def describe(self) -> str:
        """kljit_plan_describe: geometry, kernels, compiled or cached."""
        return load_library().kljit_plan_describe(self._handle).decode(errors="replace")

    def execute(self, mode: Mode, stream: int, args: Args) -> None:
        """kljit_fused, kljit_forward or kljit_backward on `stream` (a cudaStream_t as int)."""
        fn, name = self._entry[mode]
        status = fn(self._handle, stream or None, ctypes.byref(args))
        if status:
            check(status, name)

    def shard_rounds(self) -> int:
        """kljit_plan_shard_rounds: 1, or 2 where the row totals take a second exchange."""
        out = ctypes.c_int()
        check(load_library().kljit_plan_shard_rounds(self._handle, ctypes.byref(out)),
              "kljit_plan_shard_rounds")
        return out.value

    def shard_stats(self, stream: int, args: Args, stats: Any) -> None:
        """kljit_shard_stats into `stats` (a device tensor of N x 8 floats)."""
        check(load_library().kljit_shard_stats(self._handle, stream or None, ctypes.byref(args),
                                               stats.data_ptr()), "kljit_shard_stats")

    def shard_sums(self, stream: int, args: Args, gathered: Any, shards: int,
                   stats: Any) -> None:
        """kljit_shard_sums: this rank's part of S into slot 7 of `stats`."""
        check(load_library().kljit_shard_sums(self._handle, stream or None, ctypes.byref(args),
                                              gathered.data_ptr(), int(shards),
                                              stats.data_ptr()), "kljit_shard_sums")

    def shard_finish(self, stream: int, args: Args, gathered: Any, shards: int) -> None:
        """kljit_shard_finish from the gathered records [shards][N][8]."""
        check(load_library().kljit_shard_finish(self._handle, stream or None,
                                                ctypes.byref(args), gathered.data_ptr(),
                                                int(shards)), "kljit_shard_finish")


_contexts: Dict[int, Context] = {}
_plans: Dict[Tuple[int, Tuple[object, ...]], Plan] = {}
_cache_lock = threading.Lock()


def get_context(device: int) -> Context:
    """The process's kljit context for CUDA device `device` (made at first use, kept)."""
    with _cache_lock:
        ctx = _contexts.get(device)
        if ctx is None:
            ctx = _contexts[device] = Context(device)
        return ctx


def get_plan(problem: Problem, device: int) -> Plan:
    """The cached plan for (problem, device); the first call JIT-compiles or loads the kernels
    from the on-disk cache. Failures raise KljitError and are not cached."""
    key = (int(device), problem.key())
    with _cache_lock:
        plan = _plans.get(key)
    if plan is not None:
        return plan
    context = get_context(device)
    plan = Plan(context, problem)
    with _cache_lock:
        return _plans.setdefault(key, plan)


_generation = 0


def plan_cache_generation() -> int:
    """How many times clear_plan_cache ran: what other caches of plans key on."""
    return _generation


def clear_plan_cache() -> None:
    """Drops the cached plans (a plan still referenced, e.g. by a pending backward, lives on
    until that reference goes). Contexts are kept for the life of the process."""
    global _generation
    with _cache_lock:
        _plans.clear()
        _generation += 1
