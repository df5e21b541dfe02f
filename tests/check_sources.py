#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_sources.py — static checks of src/ that CTest runs (tests/unit_sources.cmake).

  layers ROOT        every #include "x.h" in ROOT/src goes to a module of the same or a lower
                     layer of the table in ROOT/docs/architecture.md, the modules of one layer
                     include each other without a cycle, and every module is in the table
  entry-points ROOT  every function of include/*.h that returns a kljit_status clears the last
                     error first (its definition in src/ starts with err_clear();)
  selftest           both checks fail on small trees that break them (the checks can fail)

A module is a file name without its extension: x.c and x.h are module x.
"""
import os
import re
import sys
import tempfile

LAYER_ROW = re.compile(r"^\|\s*(\d+)\s*\|[^|]*\|([^|]*)\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)\.h"', re.M)


def read_layers(root):
    """{module: layer} from the table between the layer-table markers of the architecture doc."""
    path = os.path.join(root, "docs", "architecture.md")
    text = open(path, encoding="utf-8").read()
    try:
        table = text.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    except IndexError:
        raise SystemExit(f"{path}: no <!-- layers --> ... <!-- /layers --> table")
    layers = {}
    for line in table.splitlines():
        m = LAYER_ROW.match(line)
        if not m:
            continue
        for name in re.findall(r"`([a-z0-9_]+)`", m.group(2)):
            if name in layers:
                raise SystemExit(f"{path}: module {name} is in two layers")
            layers[name] = int(m.group(1))
    if not layers:
        raise SystemExit(f"{path}: the layer table lists no modules")
    return layers


def check_layers(root):
    layers = read_layers(root)
    src = os.path.join(root, "src")
    edges = {}
    problems = []
    for f in sorted(os.listdir(src)):
        if not (f.endswith(".c") or f.endswith(".h")):
            continue
        mod = f.rsplit(".", 1)[0]
        if mod not in layers:
            problems.append(f"src/{f}: module {mod} is not in the layer table of "
                            "docs/architecture.md")
            continue
        text = open(os.path.join(src, f), encoding="utf-8").read()
        for inc in INCLUDE.findall(text):
            if not os.path.exists(os.path.join(src, inc + ".h")):
                continue  # kljit.h, kljit_experimental.h: the public headers, below everything
            if inc == mod:
                continue
            if inc not in layers:
                continue  # reported for its own file
            if layers[inc] > layers[mod]:
                problems.append(f"src/{f}: includes {inc}.h of layer {layers[inc]} from layer "
                                f"{layers[mod]} ({mod}): lower layers include no higher ones")
            edges.setdefault(mod, set()).add(inc)
    # cycles among modules (within a layer: across layers the order forbids them)
    state = {}

    def visit(m, path):
        state[m] = 1
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n] if n in path else [m, n]
                problems.append("include cycle: " + " -> ".join(cycle))
            elif not state.get(n):
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(edges):
        if not state.get(m):
            visit(m, [m])
    return problems


API_DECL = re.compile(r"KLJIT_API\s+kljit_status\s+(kljit_[a-z0-9_]+)\s*\(")


def check_entry_points(root):
    names = set()
    inc = os.path.join(root, "include")
    for f in sorted(os.listdir(inc)):
        if f.endswith(".h"):
            names |= set(API_DECL.findall(open(os.path.join(inc, f), encoding="utf-8").read()))
    src = os.path.join(root, "src")
    texts = {f: open(os.path.join(src, f), encoding="utf-8").read()
             for f in sorted(os.listdir(src)) if f.endswith(".c")}
    problems = []
    for name in sorted(names):
        pat = re.compile(r"^kljit_status\s+" + name + r"\s*\([^;{]*\)\s*\{\s*([^\n]*)", re.M | re.S)
        found = [(f, m) for f, t in texts.items() for m in [pat.search(t)] if m]
        if not found:
            problems.append(f"{name}: declared in include/ but defined nowhere in src/")
        elif not found[0][1].group(1).startswith("err_clear();"):
            problems.append(f"src/{found[0][0]}: {name} does not start with err_clear(); "
                            "(kljit_last_error must be \"\" after a success)")
    if not names:
        problems.append("no KLJIT_API function returning kljit_status found in include/")
    return problems


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def selftest():
    doc = ("<!-- layers -->\n| layer | what | modules |\n|---|---|---|\n"
           "| 0 | base | `util` |\n| 1 | low | `a`, `b` |\n| 2 | high | `top` |\n"
           "<!-- /layers -->\n")
    failures = []
    with tempfile.TemporaryDirectory() as root:
        write(root, "docs/architecture.md", doc)
        write(root, "src/util.h", "")
        write(root, "src/a.h", '#include "util.h"\n')
        write(root, "src/b.h", '#include "a.h"\n')
        write(root, "src/top.c", '#include "b.h"\n')
        if check_layers(root):
            failures.append("a clean tree was refused: " + "; ".join(check_layers(root)))
        write(root, "src/a.c", '#include "top.h"\n')
        write(root, "src/top.h", "")
        if not any("lower layers include no higher ones" in p for p in check_layers(root)):
            failures.append("an upward include was not caught")
        write(root, "src/a.c", '#include "b.h"\n')
        if not any("include cycle" in p for p in check_layers(root)):
            failures.append("the cycle a -> b -> a was not caught")
        os.remove(os.path.join(root, "src/a.c"))
        write(root, "src/stray.c", "")
        if not any("not in the layer table" in p for p in check_layers(root)):
            failures.append("a module missing from the table was not caught")
        write(root, "include/k.h", "KLJIT_API kljit_status kljit_f(int x);\n"
              "KLJIT_API kljit_status kljit_g(void);\n")
        write(root, "src/f.c", "kljit_status kljit_f(int x) {\n  err_clear();\n  return 0;\n}\n"
              "kljit_status kljit_g(void) {\n  return 0;\n}\n")
        got = check_entry_points(root)
        if len(got) != 1 or "kljit_g" not in got[0]:
            failures.append(f"entry-points: want kljit_g alone reported, got {got}")
    return failures


def main(argv):
    if len(argv) == 2 and argv[1] == "selftest":
        problems = selftest()
    elif len(argv) == 3 and argv[1] == "layers":
        problems = check_layers(argv[2])
    elif len(argv) == 3 and argv[1] == "entry-points":
        problems = check_entry_points(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print("ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
