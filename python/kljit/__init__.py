# SPDX-License-Identifier: Apache-2.0
"""kljit: fused linear + KL-divergence distillation losses on NVIDIA GPUs, from PyTorch.

A ctypes binding over libkljit.so (no compiled extension). The library is found through
$KLJIT_LIBRARY, next to this package, or in the repository's build directory.

    import kljit
    loss = kljit.fused_linear_kl_div(hidden, lm_head.weight, teacher_probs)        # functional
    head = kljit.FusedLinearKLDiv(4096, 128256, mode="two_phase", device="cuda")   # module
    loss_fn = kljit.FusedLinearKLDivLoss(teacher="sparse_topk", tail="renorm")      # loss only

`import kljit` needs neither torch nor the library: the torch front ends (fused_linear_kl_div,
FusedLinearKLDiv, FusedLinearKLDivLoss, FusedLinearJSD) are imported at first use, and the
library is loaded at the first call that needs it.
"""

from __future__ import annotations

from typing import Any

from ._checks import LossConfig, check_call
from ._lib import (
    KljitError,
    LibraryNotFound,
    Problem,
    Status,
    clear_plan_cache,
    last_error,
    library_path,
    load_library,
    plan_check,
    version,
)

__version__ = "0.1.0"

__all__ = [
    "FusedLinearJSD",
    "FusedLinearKLDiv",
    "FusedLinearKLDivLoss",
    "KljitError",
    "LibraryNotFound",
    "LossComponents",
    "LossConfig",
    "Problem",
    "Status",
    "check_call",
    "clear_plan_cache",
    "fused_linear_kl_div",
    "last_error",
    "library_path",
    "load_library",
    "plan_check",
    "version",
]

_TORCH_NAMES = {
    "fused_linear_kl_div": "functional",
    "LossComponents": "functional",
    "FusedLinearKLDiv": "module",
    "FusedLinearKLDivLoss": "module",
    "FusedLinearJSD": "module",
}


def __getattr__(name: str) -> Any:
    """Imports the torch front ends at first use, so that `import kljit` works without torch."""
    if name in _TORCH_NAMES:
        import importlib

        module = importlib.import_module(f".{_TORCH_NAMES[name]}", __name__)
        value = globals()[name] = getattr(module, name)  # later lookups skip this function
        return value
    raise AttributeError(f"module 'kljit' has no attribute {name!r}")
