#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_sources.py — static checks of src/ that CTest runs (tests/unit_sources.cmake).

  layers ROOT        every #include "x.h" in ROOT/src goes to a module of the same or a lower
                     layer of the table in ROOT/docs/architecture.md, the modules of one layer
                     include each other without a cycle, and every module is in the table
  entry-points ROOT  every function of include/*.h that returns a kljit_status clears the last
                     error first (its definition in src/ starts with err_clear();)
  planning ROOT      planning is a pure function: no function reachable from recipe_make (by
                     calls between the functions defined in ROOT/src, static ones resolved in
                     their own file first) reads the environment (env_*, getenv), a clock
                     (util_now, clock_gettime, time) or the GPU (drv_*, cublaslt_*, a driver
                     table's ->cu* member); and the geometry of a plan (recipe.c's geometry) is
                     derived in one place: the function has exactly one call site in src/
  layouts ROOT       src/ (nccl.c included) and the binding (python/kljit) write no record's
                     size: no constant of one (PLAN_HDR_FLOATS, PSTRIDE, SAVED_*_FLOATS, ...)
                     and no 8 or 32 multiplying a count of rows, records, splits or shards (the
                     8-float / 32-byte partial and shard record, the 4- or 8-float saved row).
                     The kernel templates declare each record once (templates/iface.cu.lua); C
                     reads it from the manifest (src/kiface.h: kiface_layout), Python asks the
                     library (kljit_problem_layout)
  selftest           every check fails on small trees or lines that break it (the checks can
                     fail), and the layouts check passes the code that replaced the restatements

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


PLANNING_ROOT = "recipe_make"
GEOMETRY = ("recipe.c", "geometry")
FORBIDDEN = re.compile(r"^(env_\w+|getenv|secure_getenv|util_now|clock_gettime|gettimeofday|"
                       r"time|clock|drv_\w+|cublaslt_\w+)$")
FUNC_DEF = re.compile(r"^[A-Za-z_][^;{}()=#]*?\b([A-Za-z_]\w*)\s*\(([^;{}]*?)\)\s*\{",
                      re.M | re.S)
CALL = re.compile(r"(->|\.)?\s*\b([A-Za-z_]\w*)\s*\(")
NOISE = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def functions(root):
    """{(file, name): body} of every function defined in ROOT/src/*.c, comments and string
    literals blanked (a definition starts at column 0 and its body ends at the next line that
    is a lone '}': the house layout)."""
    src = os.path.join(root, "src")
    out = {}
    for f in sorted(os.listdir(src)):
        if not f.endswith(".c"):
            continue
        text = NOISE.sub(lambda m: " " * len(m.group(0)) if m.group(0)[0] in "/" else '""',
                         open(os.path.join(src, f), encoding="utf-8").read())
        for m in FUNC_DEF.finditer(text):
            end = text.find("\n}", m.end())
            out[(f, m.group(1))] = text[m.end():end if end >= 0 else len(text)]
    return out


def calls(body):
    """(member, name) of each call in a body: member is '->' or '.' for a call through a
    struct (a function pointer), else ''."""
    return [(m.group(1) or "", m.group(2)) for m in CALL.finditer(body)]


def check_planning(root):
    fns = functions(root)
    by_name = {}
    for (f, name) in fns:
        by_name.setdefault(name, []).append(f)

    def resolve(f, name):
        if (f, name) in fns:
            return (f, name)
        files = by_name.get(name, [])
        return (files[0], name) if len(files) == 1 else None

    problems = []
    roots = [k for k in fns if k[1] == PLANNING_ROOT]
    if not roots:
        return [f"src/: no function {PLANNING_ROOT} (the recipe) to check"]
    seen, todo = {roots[0]: [roots[0][1]]}, [roots[0]]
    while todo:
        cur = todo.pop()
        path = seen[cur]
        for member, name in calls(fns[cur]):
            if member and name.startswith("cu"):
                problems.append(f"src/{cur[0]}: {cur[1]} calls the driver ({member}{name}), "
                                f"reached from {' -> '.join(path)}")
            if member:
                continue
            if FORBIDDEN.match(name):
                problems.append(f"src/{cur[0]}: {cur[1]} calls {name}, reached from "
                                f"{' -> '.join(path)}: planning reads no environment, clock "
                                "or GPU")
                continue
            nxt = resolve(cur[0], name)
            if nxt and nxt not in seen:
                seen[nxt] = path + [name]
                todo.append(nxt)
    sites = [k for k, body in fns.items()
             for member, name in calls(body)
             if not member and name == GEOMETRY[1] and k[0] == GEOMETRY[0]]
    if (GEOMETRY[0], GEOMETRY[1]) not in fns:
        problems.append(f"src/{GEOMETRY[0]}: no function {GEOMETRY[1]}")
    elif len(sites) != 1:
        problems.append(f"src/{GEOMETRY[0]}: {GEOMETRY[1]} is called from {len(sites)} places "
                        f"({', '.join(f'{k[0]}:{k[1]}' for k in sites) or 'none'}); a plan's "
                        "geometry is derived in one place")
    return problems


# Names of a constant that would hold a record's size.
CONSTANT = re.compile(r"\b(PLAN_HDR_FLOATS|PSTRIDE|SAVED_HDR_FLOATS|SAVED_ROW_FLOATS\w*|"
                      r"REC(ORD)?_FLOATS|ROW_FLOATS)\b")
# A count that multiplies a record's size: rows, records, blocks per row, shards.
COUNT = r"(rows?|row0|nrec|split|shards)"
C_RULES = [
    CONSTANT,
    # rows * 8, (size_t)t->split * 32, row0 * 8 ... (the count, then the literal)
    re.compile(r"\b" + COUNT + r"\b\s*\*\s*(8|32)\b"),
    # 8 * rows, 32 * (size_t)shards ... (the literal, then the count)
    re.compile(r"\b(8|32)\s*\*\s*(\(\w+\)\s*)?(\w+(->|\.))*" + COUNT + r"\b"),
    # n * 32: the tuner's rows times the record's bytes
    re.compile(r"\bn\s*\*\s*32\b"),
    # the saved row's 4-or-8 rule (vector and id widths, also 8 or 4, are not records)
    re.compile(r"(hard_weight|divergence|per_row)[^;]*\?\s*8\s*:\s*4\b"),
]
PY_RULES = [
    CONSTANT,
    re.compile(r"\b(4|8)\s*\*\s*" + COUNT + r"\b"),
    re.compile(r"\b" + COUNT + r"\s*\*\s*(4|8)\b"),
    re.compile(r"\bif extended else\b"),
]


def strip_c_comments(text):
    """Comments blanked out, newlines kept (so line numbers stay)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*",
                  lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def strip_py_comments(text):
    return "\n".join(re.sub(r"#.*$", "", line) for line in text.split("\n"))


def scan(path, text, rules):
    problems = []
    for n, line in enumerate(text.split("\n"), 1):
        for rule in rules:
            m = rule.search(line)
            if m:
                problems.append(f"{path}:{n}: '{m.group(0)}' restates a record's size "
                                "(declare it in the template's record table; read it from the "
                                "manifest, or ask kljit_problem_layout)")
                break
    return problems


def check_record_layouts(root):
    problems = []
    src = os.path.join(root, "src")
    for f in sorted(os.listdir(src)):
        if f.endswith((".c", ".h")):
            text = open(os.path.join(src, f), encoding="utf-8").read()
            problems += scan(f"src/{f}", strip_c_comments(text), C_RULES)
    py = os.path.join(root, "python", "kljit")
    for f in sorted(os.listdir(py)):
        if f.endswith(".py"):
            text = open(os.path.join(py, f), encoding="utf-8").read()
            problems += scan(f"python/kljit/{f}", strip_py_comments(text), PY_RULES)
    return problems


# Lines of the code before the records were declared, one restatement each, and what replaced
# them (which must pass).
BEFORE = {
    "plan.h": "enum { PLAN_HDR_FLOATS = 8 };",
    "plan.c": "const int64_t per_row = pb->hard_weight != 0.0 || div(pb) ? 8 : 4;",
    "exec.c": "*bytes = (size_t)rows * 8 * sizeof(float);",
    "exec2.c": "c->k.recs = c->all ? (const void *)(c->all + row0 * 8) : c->k.part;",
    "nccl.c": "float *all = local + (size_t)args->rows * 8;",
    "problem.c": "return (size_t)ld * z + (size_t)t->split * 32 + zt;",
    "problem2.c": "? align256((size_t)(1 + pb->shards) * (size_t)rows * 32) : 0;",
    "tune_measure.c": "if (prob_sharded(pb)) s += up(n * 32 * (size_t)pb->shards);",
    "tune2.c": "const size_t bytes = (size_t)b->rows * 32;",
    "_lib.py": "SAVED_ROW_FLOATS_EXTENDED = 8",
    "_ops.py": "return HDR + (EIGHT if extended else FOUR) * rows",
}
AFTER = {
    "exec.c": "*bytes = (size_t)rows * (size_t)plan->layout.part * sizeof(float);",
    "nccl.c": "const size_t nrec = (size_t)args->rows * (size_t)plan->layout.part;",
    "problem.c": "return (size_t)ld * z + (size_t)t->split * part_bytes(pb, t) + zt;",
    "labels.c": "if (pb->hard_weight != 0.0) s += up(n * 8); /* int64 labels */",
    "ids.c": "const kljit_status st = replicate(b, b->ids, h, n * (wide ? 8 : 4), n);",
    "vec.c": "const int vec = native_logits(pb) && pb->input_dtype != KLJIT_FP32 ? 8 : 4;",
    "_ops.py": "return _lib.problem_layout(problem).saved_floats(input.shape[0])",
}


def selftest_record_layouts():
    failures = []
    for name, line in BEFORE.items():
        py = name.endswith(".py")
        if not scan(name, line, PY_RULES if py else C_RULES):
            failures.append(f"not caught: {name}: {line}")
    for name, line in AFTER.items():
        py = name.endswith(".py")
        got = scan(name, line, PY_RULES if py else C_RULES)
        if got:
            failures.append(f"refused: {got[0]}")
    return failures


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
    with tempfile.TemporaryDirectory() as root:
        pure = ("static int geometry(int x) {\n  return x;\n}\n\n"
                "/* env_text(ENV_X) in a comment */\n"
                "static int helper(int x) {\n"
                "  return geometry(x) + (int)sizeof(\"getenv(\");\n}\n\n"
                "int recipe_make(int x) {\n  return helper(x) + names_of(x);\n}\n")
        write(root, "src/recipe.c", pure)
        write(root, "src/names.c", "int names_of(int x) {\n  return x;\n}\n")
        write(root, "src/util.c", "double util_now(void) {\n  return 0;\n}\n"
              "void util_log(void) {\n  env_text(0);\n}\n")
        if check_planning(root):
            failures.append("planning: a pure recipe was refused: " +
                            "; ".join(check_planning(root)))
        breaks = [  # (names_of's body, what the report must say, what was not caught)
            ("return x + (int)util_now();", "calls util_now",
             "a clock read two calls down"),
            ("util_log();\n  return x;", "calls env_text",
             "an environment read through util_log"),
            ("return d->cuInit(x);", "calls the driver", "a driver call")]
        for body, want, what in breaks:
            write(root, "src/names.c", "int names_of(int x) {\n  " + body + "\n}\n")
            got = check_planning(root)
            if not any(want in p and "recipe_make -> names_of" in p for p in got):
                failures.append(f"planning: {what} was not caught: {got}")
        write(root, "src/names.c", "int names_of(int x) {\n  return x;\n}\n")
        write(root, "src/recipe.c", pure + "int other(int x) {\n  return geometry(x);\n}\n")
        if not any("called from 2 places" in p for p in check_planning(root)):
            failures.append("planning: a second call site of the geometry was not caught")
    return failures + selftest_record_layouts()


def main(argv):
    if len(argv) == 2 and argv[1] == "selftest":
        problems = selftest()
    elif len(argv) == 3 and argv[1] == "layers":
        problems = check_layers(argv[2])
    elif len(argv) == 3 and argv[1] == "entry-points":
        problems = check_entry_points(argv[2])
    elif len(argv) == 3 and argv[1] == "planning":
        problems = check_planning(argv[2])
    elif len(argv) == 3 and argv[1] == "layouts":
        problems = check_record_layouts(argv[2])
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
