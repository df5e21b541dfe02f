#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One line per kernel launch from Nsight Compute's raw CSV, in launch order.

    python3 bench/ncu_table.py ncu.csv [--last N] [--summary]

ncu --csv --page raw --metrics M,... writes a header row (the launch's ID, its process, "Kernel
Name", ..., then each metric), a row of units, then a row per profiled launch. This prints,
for each launch, what bench/device_run.sh's `chunk` mode asks of ncu: the time (us), DRAM read
and written (MB), L2 sectors (millions), the tensor pipe's active share and the DRAM
throughput's share of peak (%), each as `-` where the CSV lacks it; so that a chunk's logits
GEMM, row kernels and dX / dW GEMMs compare on the same counters. Units are read from the
units row (ns/us/ms; byte/Kbyte/Mbyte/Gbyte), never assumed. --summary adds a table by kernel
name (first seen first): launches, total time and its share of the launches listed, DRAM GB
moved and L2 sectors per microsecond (bench/RESULTS.md runs 139-140: the logits GEMM's L2
traffic against cuBLASLt's). Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any, Dict, List, Optional

#: column title -> (metric, the unit it is shown in)
COLUMNS = (("us", "gpu__time_duration.sum", "us"),
           ("DRAM rd MB", "dram__bytes_read.sum", "MB"),
           ("DRAM wr MB", "dram__bytes_write.sum", "MB"),
           ("L2 sectors M", "lts__t_sectors.sum", "M"),
           ("tensor %", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            "%"),
           ("DRAM %", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%"))
_TIME = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}
_BYTES = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "Tbyte": 1e6,
          "KB": 1e-3, "MB": 1.0, "GB": 1e3}
_SECTORS = {"": 1e-6, "sector": 1e-6, "Ksector": 1e-3, "Msector": 1.0, "Gsector": 1e3}


def scaled(value: str, unit: str, shown: str) -> Optional[float]:
    """`value` in `unit` (the CSV's) converted to `shown`; None where it is not a number or the
    unit is not one this knows."""
    try:
        x = float(value.replace(",", ""))
    except ValueError:
        return None
    if shown == "us":
        f = _TIME.get(unit)
    elif shown == "MB":
        f = _BYTES.get(unit)
    elif shown == "M":
        f = _SECTORS.get(unit)
    else:
        f = 1.0 if unit == "%" else None
    return None if f is None else x * f


def rows(lines: List[str]) -> List[Dict[str, Any]]:
    """The launches of ncu's raw CSV (lines not starting with a quote, ncu's own messages,
    are skipped), each {"name": ..., title: value}."""
    table = list(csv.reader(line for line in lines if line.startswith('"')))
    if len(table) < 2 or "Kernel Name" not in table[0]:
        raise ValueError("not ncu --csv --page raw output: no header with 'Kernel Name'")
    head, units = table[0], table[1]
    name_at = head.index("Kernel Name")
    # each column's place in the CSV (None: not asked of ncu), found once
    at = [(title, head.index(metric) if metric in head else None, shown)
          for title, metric, shown in COLUMNS]
    out = []
    for r in table[2:]:
        if len(r) != len(head):
            continue
        row: Dict[str, Any] = {"name": r[name_at]}
        for title, i, shown in at:
            row[title] = None if i is None else scaled(r[i], units[i], shown)
        out.append(row)
    return out


def fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def summary(launches: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The launches by kernel name, in the order each name first appears: launches, total us,
    share of every listed launch's time (%), DRAM read + written (GB) and L2 sectors (millions)
    a microsecond, each None where a launch of that name lacks the metric."""
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for r in launches:
        groups.setdefault(r["name"], []).append(r)
    total = sum(r["us"] or 0.0 for r in launches)

    def add(rs: List[Dict[str, Any]], *titles: str) -> Optional[float]:
        vals = [r[t] for r in rs for t in titles]
        return None if any(v is None for v in vals) else sum(vals)

    out = []
    for name, rs in groups.items():
        us, dram, l2 = add(rs, "us"), add(rs, "DRAM rd MB", "DRAM wr MB"), add(rs, "L2 sectors M")
        out.append({"name": name, "launches": len(rs), "us": us,
                    "share": None if us is None or total <= 0 else 100.0 * us / total,
                    "DRAM GB": None if dram is None else dram / 1e3,
                    "L2 M/us": None if l2 is None or not us else l2 / us})
    return out


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv")
    p.add_argument("--last", type=int, default=0, help="only the last N launches")
    p.add_argument("--summary", action="store_true", help="then the launches by kernel name")
    a = p.parse_args(argv)
    with open(a.csv, encoding="utf-8", errors="replace") as f:
        launches = rows(f.read().splitlines())
    if a.last > 0:
        launches = launches[-a.last:]
    print("| # | kernel | " + " | ".join(t for t, _, _ in COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for i, r in enumerate(launches):
        print(f"| {i} | {r['name'][:48]} | " + " | ".join(fmt(r[t]) for t, _, _ in COLUMNS) + " |")
    if a.summary:
        keys = ("us", "share", "DRAM GB", "L2 M/us")
        print("\n| kernel | launches | us | % of time | DRAM GB | L2 sectors M / us |")
        print("|---|---|---|---|---|---|")
        for g in summary(launches):
            cells = " | ".join(fmt(g[k]) if k != "L2 M/us" or g[k] is None else f"{g[k]:.3f}"
                               for k in keys)
            print(f"| {g['name'][:48]} | {g['launches']} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
