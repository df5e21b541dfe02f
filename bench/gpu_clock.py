# SPDX-License-Identifier: Apache-2.0
"""The GPU's SM clock and board power while compare.py's timed steps run (NVML, through
nvidia-ml-py's pynvml): a thread reads both every ~2 ms and files each reading under the step
running then, so that a method's time is printed beside the clock it ran at (a GPU capped by
power runs one method at 1.4 GHz and the next at 1.6: bench/RESULTS.md runs 38-40).

Without pynvml, a GPU NVML knows or a device at all, nothing is sampled and the columns read
"—"; the timings do not depend on it."""

from __future__ import annotations

import statistics
import threading
from typing import Any, Callable, List, Optional, Tuple

Reading = Tuple[float, float]  # (SM clock in MHz, board power in W)

PERIOD_S = 0.002


class Sampler:
    """Readings from `reader` every PERIOD_S while a step is named (`current`), kept per step.
    Use: start(steps), set current = k around step k's run (time_steps does), stop(),
    medians()."""

    def __init__(self, reader: Optional[Callable[[], Reading]], why: str = "") -> None:
        self.reader = reader
        self.why = why  # why nothing is sampled (reader None)
        self.current: Optional[int] = None
        self.samples: List[List[Reading]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, steps: int) -> None:
        self.samples = [[] for _ in range(steps)]
        self.current = None
        if self.reader is None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu_clock", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.current = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            k = self.current
            if k is None:
                continue
            try:
                reading = self.reader()
            except Exception:  # noqa: BLE001 - a failed read is a missing sample, not an error
                continue
            if self.current == k:  # still the same step: its reading
                self.samples[k].append(reading)

    def medians(self) -> List[Optional[Reading]]:
        """Each step's median clock and power, None where it has no reading."""
        out: List[Optional[Reading]] = []
        for s in self.samples:
            if not s:
                out.append(None)
            else:
                out.append((statistics.median(r[0] for r in s),
                            statistics.median(r[1] for r in s)))
        return out


def nvml_reader(torch: Any, device: int) -> Tuple[Optional[Callable[[], Reading]], str]:
    """(reader, "") for CUDA device `device` as torch numbers it (found in NVML by its UUID,
    so CUDA_VISIBLE_DEVICES does not matter), or (None, why)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None, "pynvml (nvidia-ml-py) is not installed"
    try:
        pynvml.nvmlInit()
        handle = None
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        if uuid is not None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID("GPU-" + str(uuid))
            except pynvml.NVMLError:
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device)
    except Exception as e:  # noqa: BLE001 - no NVML: no columns, say why
        return None, f"NVML: {e}"

    def read() -> Reading:
        return (float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)

    try:
        read()
    except Exception as e:  # noqa: BLE001
        return None, f"NVML: {e}"
    return read, ""


def open_sampler(torch: Any, device_kind: str) -> Sampler:
    """A sampler of the current CUDA device, or one that samples nothing (and says why)."""
    if device_kind != "cuda":
        return Sampler(None, "not a CUDA run")
    reader, why = nvml_reader(torch, torch.cuda.current_device())
    return Sampler(reader, why)
