#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Figures from the benchmark matrix CSV: peak VRAM and iteration time against sequence length.

    python3 bench/plot.py matrix.csv [--out-prefix bench/h200] [--title "H200, bf16"]

Reads the matrix kljit-bench writes (columns used: method, sequence_length, chunk_size,
peak_vram_gib, iteration_ms, tflops_per_gpu, ratio_to_floor, status, error; others are
ignored) and writes
<prefix>_vram.{svg,png} and <prefix>_time.{svg,png}: one line per method (per method and
chunk size where a method was run at several; --best-chunk keeps each method's fastest chunk
per sequence length instead). Experiments that failed (status FAILED, OOM, ...) are drawn as
an x at the top of the axis, in their method's colour, at their sequence length: an
out-of-memory point is a result too. Skipped rows are ignored.

The CSV is read with the standard library; matplotlib is imported only to draw, and its
absence is reported as such (exit 2).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

COLUMNS = ("method", "sequence_length", "chunk_size", "peak_vram_gib", "iteration_ms",
           "tflops_per_gpu", "ratio_to_floor", "status", "error")
FAILED = ("FAILED", "FAIL", "OOM", "ERROR", "TIMEOUT", "CRASH", "CRASHED")
SKIPPED = ("SKIPPED", "SKIP", "N/A")


@dataclass
class Point:
    """One experiment of the matrix."""

    method: str
    seq: int
    chunk: str
    vram_gib: Optional[float]
    ms: Optional[float]
    failed: bool
    error: str = ""


@dataclass
class Series:
    """One line of a figure: its label, ok points by sequence length, failed lengths."""

    label: str
    ok: Dict[int, Point] = field(default_factory=dict)
    failed: List[int] = field(default_factory=list)


def _float(text: str) -> Optional[float]:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None  # NaN counts as missing


def read_matrix(path: Path) -> List[Point]:
    """The CSV's experiments; raises ValueError naming a missing column or a bad row."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (has "
                             f"{', '.join(reader.fieldnames or [])})")
        points = []
        for line, row in enumerate(reader, start=2):
            status = (row["status"] or "").strip().upper()
            if status in SKIPPED:
                continue
            try:
                seq = int(float(row["sequence_length"]))
            except ValueError:
                raise ValueError(f"{path}:{line}: sequence_length {row['sequence_length']!r} "
                                 f"is not a number") from None
            failed = status in FAILED or status.startswith("FAIL")
            points.append(Point(row["method"].strip(), seq, (row["chunk_size"] or "").strip(),
                                _float(row["peak_vram_gib"]), _float(row["iteration_ms"]),
                                failed, (row["error"] or "").strip()))
    return points


def group(points: Sequence[Point], best_chunk: bool = False) -> List[Series]:
    """Lines in first-seen order: per method, or per method and chunk size where a method has
    several (unless best_chunk: then the fastest ok chunk per sequence length). A length is
    'failed' for a line only if no ok point of that line exists there."""
    chunks: Dict[str, set] = {}
    for p in points:
        chunks.setdefault(p.method, set()).add(p.chunk)
    lines: "OrderedDict[str, Series]" = OrderedDict()
    for p in points:
        split = len(chunks[p.method]) > 1 and not best_chunk
        label = f"{p.method} (chunk {p.chunk})" if split and p.chunk else p.method
        s = lines.setdefault(label, Series(label))
        if p.failed:
            s.failed.append(p.seq)
        elif p.ms is not None or p.vram_gib is not None:
            old = s.ok.get(p.seq)
            if old is None or (p.ms or float("inf")) < (old.ms or float("inf")):
                s.ok[p.seq] = p
    for s in lines.values():
        s.failed = sorted(set(q for q in s.failed if q not in s.ok))
    return list(lines.values())


def plot(series: Sequence[Series], metric: str, ylabel: str, title: str, out_prefix: Path,
         formats: Sequence[str]) -> Tuple[List[Path], int]:
    """One figure of `metric` ('vram_gib' or 'ms'); returns the files written and the number
    of failure marks drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    xs_all: List[int] = []
    for i, s in enumerate(series):
        color = colors[i % len(colors)]
        pts = sorted((q, getattr(p, metric)) for q, p in s.ok.items()
                     if getattr(p, metric) is not None)
        if pts:
            ax.plot([q for q, _ in pts], [v for _, v in pts], marker="o", ms=4, color=color,
                    label=s.label)
        elif s.failed:
            ax.plot([], [], marker="o", color=color, label=s.label)  # legend entry only
        xs_all += [q for q, _ in pts] + s.failed
    ax.set_xscale("log", base=2)
    if xs_all:
        ax.set_xticks(sorted(set(xs_all)))
        ax.set_xticklabels([str(x) for x in sorted(set(xs_all))], rotation=45)
    values = [getattr(p, metric) for s in series for p in s.ok.values()
              if getattr(p, metric) is not None]
    # Head room above the data for the failure marks.
    ax.set_ylim(0, 1.2 * max(values) if values else 1.0)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    # Failed experiments: an x at the top of the axis (x in data, y in axes coordinates),
    # stacked downwards where several lines failed at the same length.
    marks = 0
    top = blended_transform_factory(ax.transData, ax.transAxes)
    stacked: Dict[int, int] = {}
    for i, s in enumerate(series):
        for q in s.failed:
            level = stacked.get(q, 0)
            stacked[q] = level + 1
            ax.plot([q], [0.96 - 0.045 * level], marker="x", ms=8, mew=2,
                    color=colors[i % len(colors)], transform=top, clip_on=False,
                    linestyle="none")
            marks += 1
    if marks:
        ax.plot([], [], marker="x", color="gray", linestyle="none", label="failed (OOM, error)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    written = []
    for ext in formats:
        kind = "vram" if metric == "vram_gib" else "time"
        path = out_prefix.parent / f"{out_prefix.name}_{kind}.{ext}"
        fig.savefig(path)
        written.append(path)
    plt.close(fig)
    return written, marks


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", type=Path, help="the benchmark matrix CSV")
    p.add_argument("--out-prefix", type=Path, default=None,
                   help="output path prefix (default: the CSV path without its suffix)")
    p.add_argument("--title", default="", help="figure title prefix (e.g. GPU and dtype)")
    p.add_argument("--formats", default="svg,png", help="comma list (default svg,png)")
    p.add_argument("--best-chunk", action="store_true",
                   help="one line per method: its fastest chunk size per sequence length")
    args = p.parse_args(list(argv))
    try:
        points = read_matrix(args.csv)
    except (OSError, ValueError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2
    if not points:
        print(f"plot.py: {args.csv} has no experiments to plot", file=sys.stderr)
        return 2
    try:
        import matplotlib

        del matplotlib  # imported again where it draws
    except ImportError:
        print(f"plot.py: matplotlib is not installed (pip install matplotlib, or apt-get install "
              f"python3-matplotlib); read {len(points)} experiments from {args.csv}, drew "
              f"nothing", file=sys.stderr)
        return 2
    series = group(points, args.best_chunk)
    prefix = args.out_prefix or args.csv.with_suffix("")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    title = (args.title + ": ") if args.title else ""
    files: List[Path] = []
    for metric, ylabel, what in (("vram_gib", "peak VRAM (GiB)", "peak memory"),
                                 ("ms", "iteration time (ms, median)", "time")):
        written, _ = plot(series, metric, ylabel, f"{title}{what} vs sequence length", prefix,
                          formats)
        files += written
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
