# SPDX-License-Identifier: Apache-2.0
"""bench/plot.py, bench/compare.py and the step-2 precision studies where no GPU is needed.

plot.py: the fixture CSV (data/bench_matrix.csv) is read and grouped with the standard library
alone (runs in CI); the figures are drawn only where matplotlib is importable (else 77), and
its absence is reported by the script. compare.py: argument parsing and --dry-run, which need
neither torch nor a GPU. g_rebuild_precision.py, sparse_g_rebuild_precision.py,
loss_from_e16_precision.py, e16_divergences_precision.py, e16_softcap_precision.py,
dw_rounding_precision.py, sparse_e16_precision.py, precision.py's smoke run (and compare.py's
timing loop), binding_host_time.py: torch on the CPU. ncu_table.py: a small ncu CSV, standard
library only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import time
import unittest
from pathlib import Path

from _util import REPO, labels, out_dir, require

FIXTURE = Path(__file__).resolve().parent / "data" / "bench_matrix.csv"


def load_script(name: str):
    """bench/<name>.py as a module (the bench directory is not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *args: str, block: str = "") -> subprocess.CompletedProcess:
    """bench/<name>.py in a fresh interpreter; `block` names a module to make unimportable."""
    pre = f"import sys; sys.modules[{block!r}] = None; " if block else "import sys; "
    code = (pre + f"sys.argv = [{str(REPO / 'bench' / (name + '.py'))!r}] + {list(args)!r}; "
            "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)


class PlotTest(unittest.TestCase):
    def test_plot_reads_the_matrix_and_groups_one_line_per_method(self) -> None:
        plot = load_script("plot")
        points = plot.read_matrix(FIXTURE)
        self.assertEqual(len(points), 15)  # the skipped row is dropped
        series = {s.label: s for s in plot.group(points)}
        self.assertEqual(list(series), ["dense_unfused", "chunked_forward",
                                        "kljit_fused (chunk 1024)", "kljit_fused (chunk 4096)",
                                        "kljit_two_phase"])
        self.assertEqual(series["dense_unfused"].failed, [16384])
        self.assertEqual(sorted(series["dense_unfused"].ok), [1024, 4096])
        self.assertIn('"quote"', points[-1].error)
        self.assertEqual(series["kljit_two_phase"].failed, [16384])
        best = {s.label: s for s in plot.group(points, best_chunk=True)}
        self.assertEqual(best["kljit_fused"].ok[16384].chunk, "4096")  # 97.5 ms < 99.0 ms
        self.assertEqual(best["kljit_fused"].ok[16384].vram_gib, 5.0)

    def test_plot_rejects_a_csv_without_the_matrix_columns(self) -> None:
        plot = load_script("plot")
        bad = out_dir("plot-bad") / "bad.csv"
        bad.write_text("method,sequence_length\nx,1\n")
        with self.assertRaises(ValueError) as cm:
            plot.read_matrix(bad)
        self.assertIn("peak_vram_gib", str(cm.exception))
        self.assertEqual(run_script("plot", str(bad)).returncode, 2)

    def test_plot_without_matplotlib_says_so(self) -> None:
        r = run_script("plot", str(FIXTURE), "--out-prefix", str(out_dir("plot-nompl") / "x"),
                       block="matplotlib")
        self.assertEqual(r.returncode, 2)
        self.assertIn("matplotlib is not installed", r.stderr)
        self.assertIn("15 experiments", r.stderr)

    def test_plot_writes_svg_and_png_with_failed_points_marked(self) -> None:
        require("matplotlib")
        plot = load_script("plot")
        d = out_dir("plot-figures")
        series = plot.group(plot.read_matrix(FIXTURE))
        files, marks = plot.plot(series, "ms", "ms", "fixture", d / "fixture", ["svg", "png"])
        self.assertEqual(marks, 2)  # dense_unfused and kljit_two_phase failed at 16384
        self.assertEqual([f.name for f in files], ["fixture_time.svg", "fixture_time.png"])
        r = run_script("plot", str(FIXTURE), "--out-prefix", str(d / "cli"))
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("cli_vram.svg", "cli_vram.png", "cli_time.svg", "cli_time.png"):
            self.assertGreater((d / name).stat().st_size, 1000, name)
        self.assertEqual((d / "cli_time.png").read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
        svg = (d / "cli_vram.svg").read_text()
        self.assertIn("<svg", svg)


class CompareTest(unittest.TestCase):
    def test_compare_parses_shapes_and_methods(self) -> None:
        compare = load_script("compare")
        shapes = compare.parse_shapes("dense")
        self.assertEqual([s.name for s in shapes],
                         ["8192x4096x128256", "4096x4096x128256", "2048x4096x128256",
                          "8192x2048x32000", "4096x2048x32000"])
        self.assertEqual([s.name for s in compare.parse_shapes("sparse")],
                         ["65536x2048x151936k100", "8192x4096x128256k100"])
        self.assertEqual(len(compare.parse_shapes("all")), 7)
        s = compare.parse_shapes("16x32x64k4,16x32x64k4")
        self.assertEqual((len(s), s[0].sparse, s[0].k), (1, True, 4))
        for bad in ("12x3", "0x1x2", "axbxc", "1x2x3kq"):
            with self.assertRaises(Exception, msg=bad):
                compare.parse_shapes(bad)
        self.assertEqual(compare.parse_methods("all"), list(compare.METHODS))
        self.assertEqual(compare.methods_for(compare.DENSE_SHAPES[0], None),
                         ["eager", "compile", "liger", "kljit_fused", "kljit_c",
                          "kljit_two_phase"])
        with self.assertRaises(Exception):
            compare.parse_methods("eager,nope")
        self.assertEqual(compare.methods_for(compare.SPARSE_SHAPES[0], None),
                         ["eager", "kljit_fused", "kljit_two_phase"])
        self.assertEqual(compare.csv_path(Path("a/b.md")), Path("a/b.csv"))

    @labels("torch")
    def test_compare_builds_the_replanned_c_calls(self) -> None:
        """kljit_c_e16 (issue 27's E16 beside kljit_c): a dense or sparse shape gets a C call
        (made at its first step, not here; the plan refuses it where E16 is out of scope)."""
        torch = require("torch")
        compare = load_script("compare")
        env = compare.Env(torch=torch, device="cpu", kljit=object())
        args = compare.parse_args(["--device", "cpu"])
        fn, why = compare.build_method(env, "kljit_c_e16", compare.DENSE_SHAPES[3], args, {})
        self.assertTrue(callable(fn) and why == "")
        fn, why = compare.build_method(env, "kljit_c_e16", compare.SPARSE_SHAPES[0], args, {})
        self.assertTrue(callable(fn) and why == "")  # the sparse teacher's forward KL takes it
        self.assertIn("kljit_c_e16", compare.METHODS)
        self.assertNotIn("kljit_c_e16", compare.DENSE_DEFAULT)
        # the promoted accumulator: the same C call with its own KLJIT_GEMM, any teacher
        for shape in (compare.DENSE_SHAPES[3], compare.SPARSE_SHAPES[0]):
            fn, why = compare.build_method(env, "kljit_c_promoted", shape, args, {})
            self.assertTrue(callable(fn) and why == "")
        self.assertEqual(compare.REPLANNED["kljit_c_promoted"][0], "logits:jit.128.2.6.g.1.r")
        self.assertNotIn("kljit_c_promoted", compare.DENSE_DEFAULT)
        # the statistics epilogue alone: dense and sparse shapes (the sparse teacher's forward KL)
        for shape in (compare.DENSE_SHAPES[3], compare.SPARSE_SHAPES[1]):
            fn, why = compare.build_method(env, "kljit_c_stats", shape, args, {})
            self.assertTrue(callable(fn) and why == "")
        self.assertEqual(compare.REPLANNED["kljit_c_stats"][0], "logits:jit.stats")
        self.assertNotIn("kljit_c_stats", compare.DENSE_DEFAULT + compare.SPARSE_DEFAULT)
        # the online JSD through the opt-in epilogues: a C call each, sped up over Liger's JSD
        for m, gemm in (("kljit_jsd_e16", "logits:jit.e16"),
                        ("kljit_jsd_stats", "logits:jit.stats")):
            fn, why = compare.build_online_method(env, m, args)
            self.assertTrue(callable(fn) and why == "")
            self.assertEqual(compare.ONLINE_REPLANNED[m][0], gemm)
            self.assertEqual(compare.online_base(m), "liger_jsd")
            self.assertNotIn(m, compare.ONLINE_DEFAULT)
        self.assertEqual(compare.online_base("kljit_jsd_hard"), "liger_jsd_hard")
        self.assertEqual(compare.online_base("kljit_fkl_online"), "liger_fkl_online")

    @labels("torch")
    def test_precision_runs_the_protocol_and_judges_each_error_by_its_bar(self) -> None:
        """bench/precision.py on the CPU (a 48 x 32 x 300 shape, eager as the method, a fake
        liger): the inputs have the logit scale asked; every (std, T) gets a row per method, its
        errors against float64 beside the bars' verdicts (a dW bar a quarter of liger's); online
        methods and bad lists are refused."""
        torch = require("torch")
        precision = load_script("precision")
        inp = precision.ProtocolInputs(torch, 256, 64, 500, 6.0, 0, "cpu")
        self.assertAlmostEqual(inp.std_measured, 6.0, delta=0.6)
        self.assertTrue(torch.allclose(inp.teacher.float().sum(-1), torch.ones(256), atol=0.02))
        compare = precision.compare
        shape = compare.Shape(4, 4, 4, 0)
        ok = compare.Result("kljit_fused", shape, loss_err=1e-6, dx_err=2e-3, dw_err=3e-3)
        liger = compare.Result("liger", shape, loss_err=1e-5, dx_err=1e-2, dw_err=1e-2)
        bad = compare.Result("kljit_c_e16", shape, status="FAILED", note="boom")
        rows = precision.rows_of(2.0, 2.01, 1.0, [ok, liger, bad])
        self.assertIn("1.00e-06 ok | 2.000e-03 ok | 3.000e-03 over |", rows[0])
        self.assertIn("| liger | 1.00e-05 over |", rows[1])
        self.assertIn("FAILED: boom", rows[2])
        self.assertIn("- |", precision.rows_of(2.0, 2.01, 0.7, [ok])[0])  # T 0.7: not judged
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = precision.main(["--device", "cpu", "--rows", "48", "--hidden", "32",
                                 "--vocab", "300", "--stds", "2", "--temps", "1,0.5",
                                 "--methods", "eager"])
        lines = [line for line in buf.getvalue().splitlines() if line.startswith("| 2 ")]
        self.assertEqual(rc, 0)
        self.assertEqual(len(lines), 2)
        self.assertTrue(all("| eager |" in line and "e-0" in line for line in lines))
        for bad_args in (["--methods", "kljit_jsd"], ["--stds", "0"], ["--temps", "a"]):
            with self.assertRaises(SystemExit):
                precision.parse_args(bad_args)

    def test_compare_states_the_alternated_ratio_from_unrounded_times(self) -> None:
        compare = load_script("compare")
        shape = compare.DENSE_SHAPES[0]
        c, b = compare.Result("kljit_c", shape, ms=2.9449), compare.Result("kljit_fused", shape,
                                                                         ms=3.0051)
        self.assertEqual(compare.alternation_note(c, [c, b]),
                         "timed alternately with kljit_fused")
        # 3.0051 / 2.9449 = 1.02044: above 1.02, where the table's 3.01 / 2.94 reads 1.0238
        self.assertEqual(compare.alternation_note(b, [c, b]),
                         "timed alternately with kljit_c (1.0204x kljit_c)")
        b.ms = None  # a failed timing states no ratio
        self.assertEqual(compare.alternation_note(b, [c, b]), "timed alternately with kljit_c")

    @labels("torch")
    def test_g_rebuild_precision_tells_the_forms_apart(self) -> None:
        """At logit std 6 (tiny shape, fixed seed): a 16-bit E with an fp32 factor or in fp16
        keeps dX within 1.15x of today's G and under the 2.5e-3 bar; a bf16 factor does not
        (about twice the error): the finding issue 27's step 2 is to build on."""
        torch = require("torch")
        study = load_script("g_rebuild_precision")
        errs = study.errors(torch, 64, 64, 4096, 256, 6.0, 0)
        self.assertEqual(tuple(errs), study.FORMS)
        today = errs["today"][1]
        self.assertLess(today, 2.5e-3)
        self.assertLess(errs["bf16, fp32"][1], 1.15 * today)
        self.assertLess(errs["fp16"][1], 1.15 * today)
        self.assertGreater(errs["bf16, bf16"][1], 1.6 * today)
        with self.assertRaises(SystemExit):
            study.parse_args(["--vocab", "1000", "--tile", "256"])

    @labels("torch")
    def test_sparse_g_rebuild_precision_needs_the_range_fix_and_loses_nothing_to_it(self) -> None:
        """The sparse teacher's G rebuilt from E' (256 rows, V 4096, K 100, fixed seed): with the
        teacher drawn apart at logit std 12 some tiles' G_k / f leaves fp16's range, so the plan
        without the range fix gives a non-finite dX, and with it dX stays within 1.05x of
        today's error and under the bar; with a teacher drawn from the student at std 2 no factor
        is raised and both plans match today's within 1.05x."""
        import math
        torch = require("torch")
        study = load_script("sparse_g_rebuild_precision")
        apart = study.errors(torch, 256, 64, 4096, 128, 12.0, 100, 0, independent=True)
        self.assertGreater(apart["raised"], 0)
        self.assertFalse(math.isfinite(apart["E' plain dX"]))
        self.assertLess(apart["E' fix dX"], 1.05 * apart["today dX"])
        self.assertLess(apart["E' fix dX"], 2.5e-3)
        near = study.errors(torch, 256, 64, 4096, 128, 2.0, 100, 0)
        self.assertEqual(near["raised"], 0)
        for form in ("E' fix", "E' plain"):
            self.assertLess(near[form + " dX"], 1.05 * near["today dX"])
        with self.assertRaises(SystemExit):
            study.parse_args(["--topk", "0"])

    @labels("torch")
    def test_loss_from_e16_precision_separates_the_storage_from_the_fp32_form(self) -> None:
        """At logit std 6, T = 1 (256 rows, fixed seed): today's fp32 form is within 1e-6 of
        float64; s taken back from an fp16 E adds its rounding (more than 2x the fp32 form's
        error) but stays under 1e-5 at this size, as do the scaled and unsigned E forms, and the
        stored score (E16's x fp16) under 2e-5; a bf16 E is further off. With a teacher apart
        from the student every E form misses by more than 1e-3, the stored score not."""
        torch = require("torch")
        study = load_script("loss_from_e16_precision")
        errs = study.errors(torch, 256, 64, 4096, 128, 6.0, 1.0, 0)
        self.assertEqual(tuple(errs), study.FORMS)
        self.assertLess(errs["fp32"], 1e-6)
        self.assertGreater(errs["E fp16"], 2 * errs["fp32"])
        self.assertLess(errs["E fp16"], 1e-5)
        self.assertGreater(errs["E bf16"], errs["E fp16"])
        self.assertLess(errs["E fp16 2^15"], 1e-5)
        self.assertLess(errs["E u16"], 1e-5)
        self.assertGreater(errs["E bf16"], errs["E fp16 2^15"])
        self.assertLess(errs["x fp16"], 2e-5)
        # a teacher apart from the student has mass below every E form's floor: they miss the
        # loss by far (E16's first form, fp16 of 2^15 E: 7e-3 here), the stored score does not
        apart = study.errors(torch, 256, 64, 4096, 128, 6.0, 1.0, 0, True)
        self.assertGreater(apart["E fp16 2^15"], 1e-3)
        self.assertLess(apart["x fp16"], 1e-5)
        self.assertLess(apart["fp32"], 1e-6)
        with self.assertRaises(SystemExit):
            study.parse_args(["--vocab", "1000", "--tile", "128"])

    @labels("torch")
    def test_sparse_e16_precision_takes_the_cross_term_from_the_records(self) -> None:
        """The sparse teacher under E16 (256 rows, fixed seed, logit std 6, T = 0.5): the fp32
        gathers under 1e-6, the epilogue's records (the cross term from exact scores) under 1e-5
        and below the fp16 x's gathers; with a teacher drawn apart from the student, under a
        quarter of theirs (the reason E16's epilogue reads the support)."""
        torch = require("torch")
        study = load_script("sparse_e16_precision")
        errs = study.errors(torch, 256, 64, 4096, 128, 6.0, 0.5, 50, 0)
        self.assertEqual(tuple(errs), study.FORMS)
        self.assertLess(errs["fp32"], 1e-6)
        self.assertLess(errs["records"], 1e-5)
        self.assertLess(errs["records"], errs["x fp16"])
        apart = study.errors(torch, 256, 64, 4096, 128, 6.0, 0.5, 50, 0, True)
        self.assertLess(apart["records"], apart["x fp16"] / 4)
        with self.assertRaises(SystemExit):
            study.parse_args(["--topk", "0"])

    @labels("torch")
    def test_e16_divergences_precision_keeps_every_divergences_dx(self) -> None:
        """64 rows, fixed seed, logit std 2 and 12: every divergence's dX from an fp16 E is
        finite, within 1.1x of today's fp32 form and under the 2.5e-3 bar; at std 2 a bf16 E is
        worse than the fp16 one for each (the forms are told apart)."""
        torch = require("torch")
        study = load_script("e16_divergences_precision")
        for std in (2.0, 12.0):
            errs = study.errors(torch, 64, 64, 4096, 128, std, 0)
            self.assertEqual(tuple(errs), tuple(name for name, _ in study.DIVERGENCES))
            for name, e in errs.items():
                with self.subTest(std=std, divergence=name):
                    self.assertEqual(tuple(e), study.FORMS)
                    self.assertLess(e["E fp16"], 1.1 * e["fp32"])
                    self.assertLess(max(e.values()), 2.5e-3)
                    if std == 2.0:
                        self.assertGreater(e["E bf16"], e["E fp16"])
        with self.assertRaises(SystemExit):
            study.parse_args(["--vocab", "1000", "--tile", "128"])

    @labels("torch")
    def test_e16_softcap_precision_keeps_dx(self) -> None:
        """128 rows, fixed seed, logit std 12 and a cap of 15 (most scores near the cap, where
        the factor is small and most sensitive): dX from the s E16 takes back is within 1.05x
        of the fp32 s's error and under the 2.5e-3 bar; bad sizes are refused."""
        torch = require("torch")
        study = load_script("e16_softcap_precision")
        for t in (1.0, 0.5):
            errs = study.errors(torch, 128, 64, 4096, 128, 12.0, 15.0, t, 0)
            self.assertEqual(tuple(errs), study.FORMS)
            self.assertLess(errs["fp32 s"], 2.5e-3)
            self.assertLess(errs["E16 s"], 1.05 * errs["fp32 s"])
        with self.assertRaises(SystemExit):
            with contextlib.redirect_stderr(io.StringIO()):
                study.parse_args(["--vocab", "1000", "--tile", "128"])

    @labels("torch")
    def test_accumulation_precision_separates_truncation_from_rounding(self) -> None:
        """The tensor-core model (an fp32 accumulator rounded toward zero each k-step) shrinks
        the logits (negative bias) and moves the loss at T 0.5 far more than rounding to
        nearest does; promotion into a second accumulator takes most of it back; the rounding
        helper truncates exactly; bad intervals are refused."""
        torch = require("torch")
        study = load_script("accumulation_precision")
        v = torch.tensor([1.0 + 2.0 ** -30, -(1.0 + 2.0 ** -30), 1.0 - 2.0 ** -26],
                         dtype=torch.float64)
        self.assertEqual(study.to_f32(torch, v, True).tolist(),
                         [1.0, -1.0, 1.0 - 2.0 ** -24])
        self.assertEqual(study.to_f32(torch, v, False).tolist(), [1.0, -1.0, 1.0])
        args = study.parse_args(["--rows", "32", "--hidden", "1024", "--vocab", "1000",
                                 "--stds", "2", "--temps", "0.5", "--promote", "64"])
        (row,) = study.study(torch, args)
        err, bias = row["err"], row["bias"]
        self.assertLess(bias["RZ"], -3e-7)
        self.assertLess(abs(bias["RN"]), 0.1 * abs(bias["RZ"]))
        self.assertGreater(err["RZ"], 10 * err["RN"])
        self.assertLess(err["RZ, promoted every 64"], 0.2 * err["RZ"])
        for bad in (["--promote", "24"], ["--promote", "x"], ["--hidden", "100"]):
            with self.assertRaises(SystemExit):
                with contextlib.redirect_stderr(io.StringIO()):
                    study.parse_args(bad)

    @labels("torch")
    def test_dw_rounding_precision_grows_with_the_chunks(self) -> None:
        """512 rows, fixed seed, logit std 2: one bf16 rounding of dW is about bf16's own
        relative error (1.5e-3 to 3.5e-3 in Frobenius norm), and each further chunk's rounding
        adds to it (8 chunks above 1.25x one); bad chunk lists are refused."""
        torch = require("torch")
        study = load_script("dw_rounding_precision")
        errs = study.errors(torch, 512, 64, 2048, 2.0, 1.0, (1, 2, 4, 8), 0)
        self.assertEqual(tuple(errs), (1, 2, 4, 8))
        self.assertTrue(1.5e-3 < errs[1] < 3.5e-3, errs)
        self.assertLess(errs[1], errs[2])
        self.assertLess(errs[2], errs[8])
        self.assertGreater(errs[8], 1.25 * errs[1])
        for bad in (["--chunks", "0,2"], ["--chunks", "x"], ["--rows", "4", "--chunks", "8"]):
            with self.assertRaises(SystemExit):
                with contextlib.redirect_stderr(io.StringIO()):
                    study.parse_args(bad)

    def test_ncu_table_reads_each_launch_in_its_units(self) -> None:
        """ncu_table.py: ncu's own messages skipped, one row per launch in order, each metric
        converted by the CSV's units row (ns and us, byte and Mbyte, sectors), `-` for a
        metric the CSV lacks; a file without ncu's header is refused."""
        table = load_script("ncu_table")
        head = ('"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum",'
                '"dram__bytes_write.sum","lts__t_sectors.sum"')
        lines = ["==PROF== Connected to process 7", head, '"","","nsecond","byte","Mbyte","sector"',
                 '"0","kl_gemm","528,600","1,234,500,000","0.5","80,250,000"',
                 '"1","kl_dense_fused","177,900","262,000,000","131","12,000,000"',
                 "==PROF== Disconnected"]
        got = table.rows(lines)
        self.assertEqual([r["name"] for r in got], ["kl_gemm", "kl_dense_fused"])
        self.assertAlmostEqual(got[0]["us"], 528.6)
        self.assertAlmostEqual(got[0]["DRAM rd MB"], 1234.5)
        self.assertAlmostEqual(got[1]["DRAM wr MB"], 131.0)
        self.assertAlmostEqual(got[0]["L2 sectors M"], 80.25)
        self.assertIsNone(got[0]["tensor %"])
        self.assertEqual(table.scaled("3", "usecond", "us"), 3.0)
        self.assertAlmostEqual(table.scaled("2", "msecond", "us"), 2000.0)
        self.assertIsNone(table.scaled("n/a", "nsecond", "us"))
        self.assertIsNone(table.scaled("1", "furlong", "MB"))
        with self.assertRaises(ValueError):
            table.rows(['"a","b"', '"1","2"'])
        # --summary: by kernel name in first-seen order, totals and the time's shares
        launches = got + [dict(got[0], us=471.4)]
        groups = table.summary(launches)
        self.assertEqual([(g["name"], g["launches"]) for g in groups],
                         [("kl_gemm", 2), ("kl_dense_fused", 1)])
        self.assertAlmostEqual(groups[0]["us"], 1000.0)
        self.assertAlmostEqual(groups[0]["share"] + groups[1]["share"], 100.0)
        self.assertAlmostEqual(groups[1]["DRAM GB"], 0.393)
        self.assertAlmostEqual(groups[0]["L2 M/us"], 160.5 / 1000.0)
        self.assertIsNone(table.summary([dict(got[0], us=None)])[0]["L2 M/us"])

    @labels("torch")
    def test_binding_host_time_times_both_paths_to_the_launch(self) -> None:
        """binding_host_time.py: both paths reach the (noting) plan's execute, each median to the
        launch is positive and within its median to the return, and the binding, which does the
        C call's work and more, takes longer to the launch."""
        require("torch")
        out = run_script("binding_host_time", "--calls", "60", "--warmup", "5")
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = {}
        for line in out.stdout.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 3 and cells[0] in ("binding", "c_call"):
                rows[cells[0]] = (float(cells[1]), float(cells[2]))
        self.assertEqual(set(rows), {"binding", "c_call"}, out.stdout)
        for launch, total in rows.values():
            self.assertTrue(0 < launch <= total, rows)
        self.assertGreater(rows["binding"][0], rows["c_call"][0])
        self.assertIn("binding - C call before the launch", out.stdout)

    def test_binding_host_time_refuses_the_gpu_clock_without_cuda(self) -> None:
        """--gpu-clock reads CUDA events: on the CPU it is refused by name, before any timing."""
        require("torch")
        out = run_script("binding_host_time", "--gpu-clock", "--calls", "2")
        self.assertEqual(out.returncode, 2, out.stdout)
        self.assertIn("--gpu-clock reads CUDA events: it needs --device cuda", out.stderr)
        self.assertNotIn("| binding |", out.stdout)

    @labels("torch")
    def test_compare_reverses_the_alternation_every_other_round(self) -> None:
        torch = require("torch")
        compare = load_script("compare")
        seen = []
        steps = [lambda k=k: seen.append(k) for k in range(3)]
        env = compare.Env(torch=torch, device="cpu")
        args = compare.parse_args(["--repeats", "4", "--device", "cpu"])
        times = compare.time_steps(env, steps, args, torch.zeros(4))
        self.assertEqual(seen, [0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0])
        self.assertEqual(len(times), 3)

    @labels("torch")
    def test_compare_files_the_clock_and_power_under_the_step_that_ran(self) -> None:
        """gpu_clock's readings (here a fake reader that reports the running step) land in the
        Result of the step running when they were read, as medians; the table and the CSV
        carry them; without a reader nothing is sampled and the columns say so."""
        torch = require("torch")
        compare = load_script("compare")
        state = {"k": 0}

        def step(k: int) -> None:
            state["k"] = k
            time.sleep(0.03)

        compare_clock = compare.gpu_clock
        clock = compare_clock.Sampler(lambda: (1000.0 + state["k"], 100.0 + 10 * state["k"]))
        env = compare.Env(torch=torch, device="cpu", clock=clock)
        args = compare.parse_args(["--repeats", "3", "--device", "cpu"])
        shape = compare.Shape(4, 4, 4, 0)
        results = [compare.Result(f"m{k}", shape) for k in range(3)]
        steps = [lambda k=k: step(k) for k in range(3)]
        times = compare.time_steps(env, steps, args, torch.zeros(4), results)
        self.assertEqual(len(times), 3)
        self.assertTrue(all(t >= 25.0 for t in times), times)
        self.assertEqual([(r.sm_mhz, r.power_w) for r in results],
                         [(1000.0, 100.0), (1001.0, 110.0), (1002.0, 120.0)])
        self.assertIsNone(clock._thread)  # stopped
        row = compare.table_row(results[2])
        self.assertIn("| 1002 | 120 |", row)
        self.assertEqual(row.count("|"), compare.TABLE_HEAD.count("|"))
        self.assertEqual(compare.TABLE_RULE.count("---"), compare.TABLE_HEAD.count("|") - 1)
        # no reader: nothing sampled, the columns empty, the timings as before
        quiet = compare_clock.Sampler(None, "no NVML here")
        env = compare.Env(torch=torch, device="cpu", clock=quiet)
        results = [compare.Result("m", shape)]
        compare.time_steps(env, [lambda: None], args, torch.zeros(4), results)
        self.assertEqual((results[0].sm_mhz, results[0].power_w), (None, None))
        self.assertIn("| — | — |", compare.table_row(results[0]))
        self.assertIsNone(compare_clock.open_sampler(torch, "cpu").reader)

    def test_compare_parses_the_online_teacher_options(self) -> None:
        compare = load_script("compare")
        self.assertEqual(compare.parse_methods("online,kljit_jsd"), list(compare.ONLINE_DEFAULT))
        self.assertEqual(compare.parse_methods("kljit_jsd_e16,online")[0], "kljit_jsd_e16")
        self.assertEqual(compare.split_methods(["kljit_jsd_stats", "kljit_c"]),
                         (["kljit_c"], ["kljit_jsd_stats"]))
        # --alternate: online methods alternate where they share a loss (one reference a round)
        shape = compare.DENSE_SHAPES[3]
        group = [compare.Result(m, shape) for m in ("liger_jsd", "kljit_jsd", "kljit_fkl_online")]
        args = compare.parse_args(["--device", "cpu", "--alternate", "liger_jsd,kljit_jsd"])
        self.assertEqual([r.method for r in compare.alternating(group, args, online=True)],
                         ["liger_jsd", "kljit_jsd"])
        args = compare.parse_args(["--device", "cpu", "--alternate", "kljit_jsd,kljit_fkl_online"])
        self.assertEqual(compare.alternating(group, args, online=True), [])
        self.assertEqual(len(compare.alternating(group, args)), 2)  # the dense group's rule
        args = compare.parse_args(["--device", "cpu", "--alternate", "kljit_jsd"])
        self.assertEqual(compare.alternating(group, args, online=True), [])
        self.assertEqual(compare.split_methods(["liger_jsd", "eager", "kljit_fkl_online"]),
                         (["eager"], ["liger_jsd", "kljit_fkl_online"]))
        self.assertEqual(compare.parse_stds("2,6,12,6"), [2.0, 6.0, 12.0])
        for bad in ("", "0", "-1", "a,2"):
            with self.assertRaises(Exception, msg=bad):
                compare.parse_stds(bad)
        args = compare.parse_args(["--beta", "0.25"])
        self.assertEqual((compare.method_beta("kljit_jsd", args),
                          compare.method_beta("liger_fkl_online", args)), (0.25, 0.0))
        self.assertEqual(args.logit_std, [3.0])
        args = compare.parse_args(["--beta", "0.25", "--hard-weight", "0.3"])
        self.assertEqual([compare.method_key(m, args) for m in
                          ("liger_jsd_hard", "kljit_jsd_hard", "kljit_jsd", "liger_fkl_online")],
                         [(0.25, 0.3), (0.25, 0.3), (0.25, 0.0), (0.0, 0.0)])
        for bad in ("0", "1.5", "-0.1"):
            with self.assertRaises(SystemExit, msg=bad):
                compare.parse_args(["--hard-weight", bad])

    @labels("torch")
    def test_compare_online_reference_is_autograd_in_float64(self) -> None:
        """The online reference (JSD alone over every row; (1 - w) JSD + w CE over the kept
        rows) against torch autograd of the same loss written directly, on a tiny CPU shape."""
        torch = require("torch")
        compare = load_script("compare")
        inp = compare.OnlineInputs(torch, compare.Shape(37, 16, 101), 7, 3.0, "cpu")
        f64 = torch.float64
        x = inp.x.to(f64).requires_grad_()
        w = inp.w.to(f64).requires_grad_()
        lq = torch.log_softmax(x @ w.T, -1)
        lp = torch.log_softmax(inp.xt.to(f64) @ inp.wt.to(f64).T, -1)
        lm = torch.logsumexp(torch.stack([lq + torch.log(torch.tensor(0.5, dtype=f64)),
                                          lp + torch.log(torch.tensor(0.5, dtype=f64))]), 0)
        jsd = 0.5 * (lp.exp() * (lp - lm)).sum(-1) + 0.5 * (lq.exp() * (lq - lm)).sum(-1)
        kept = inp.labels != -100
        ce = -lq.gather(1, inp.labels.clamp_min(0)[:, None])[:, 0]
        losses = {(0.5, 0.0): jsd.mean(), (0.5, 0.3): ((0.7 * jsd + 0.3 * ce)[kept]).mean()}
        refs = compare.online_reference(torch, inp, sorted(losses))
        self.assertEqual(int(kept.sum()), 33)  # every tenth row of 37 ignored
        for key, loss in losses.items():
            dx, dw = torch.autograd.grad(loss, (x, w), retain_graph=True)
            r = refs[key]
            self.assertAlmostEqual(float(r["loss"]), float(loss), delta=1e-12 * float(loss))
            self.assertLess(float((r["grad_input"] - dx).abs().max()), 1e-12)
            self.assertLess(float((r["grad_weight"] - dw).abs().max()), 1e-12)

    def test_compare_dry_run_needs_neither_torch_nor_a_gpu(self) -> None:
        out = out_dir("compare-dry") / "cmp.md"
        r = run_script("compare", "--dry-run", "--out", str(out), block="torch")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("8192 x 4096 x 128256: eager, compile, liger, kljit_fused", r.stdout)
        self.assertIn("65536 x 2048 x 151936, top-100: eager, kljit_fused, kljit_two_phase",
                      r.stdout)
        self.assertFalse(out.exists())
        r = run_script("compare", "--dry-run", "--shapes", "8192x2048x32000", "--methods",
                       "online", "--logit-std", "2,12", block="torch")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("8192 x 2048 x 32000, online teacher, logit std 2, 12: liger_jsd, "
                      "kljit_jsd, liger_fkl_online, kljit_fkl_online", r.stdout)
        r = run_script("compare", "--shapes", "12x3")
        self.assertEqual(r.returncode, 2)
        self.assertIn("bad shape", r.stderr)
        r = run_script("compare", block="torch")
        self.assertEqual(r.returncode, 2)
        self.assertIn("needs torch", r.stderr)


if __name__ == "__main__":
    unittest.main()
