"""compare_lib's pieces, and its tables on recorded rows against what the
compare scripts' own Python printed for the same rows before it.

    /usr/bin/python3 -m unittest tools/bench/compare_lib_test.py
"""
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_lib as cl  # noqa: E402

# compare_all_to_all.sh's rows, 3 runs: run op n transport tool bytes mean
# p50 p95 busbw load (run 2 lost its 1 MiB vader figure).
ALL_TO_ALL_ROWS = """\
1 all_to_all 2 tcp lockstep 4096 41.20 38.10 60.30 0.0497 0.52
1 all_to_all 2 tcp mpi 4096 52.70 50.90 71.00 0.0389 0.55
1 all_to_all 2 shm lockstep 4096 3.10 2.90 4.20 0.6606 0.55
1 all_to_all 2 shm mpi 4096 2.60 2.50 3.30 0.7877 0.61
1 all_to_all 2 tcp lockstep 1048576 410.50 400.20 480.10 1.2772 0.61
1 all_to_all 2 tcp mpi 1048576 530.80 520.00 600.40 0.9877 0.63
1 all_to_all 2 shm lockstep 1048576 95.30 93.00 110.20 5.5014 0.63
1 all_to_all 2 shm mpi 1048576 101.90 99.50 120.70 5.1452 0.66
2 all_to_all 2 tcp mpi 4096 49.10 48.00 66.20 0.0417 0.70
2 all_to_all 2 tcp lockstep 4096 39.80 37.70 58.90 0.0515 0.70
2 all_to_all 2 shm mpi 4096 2.70 2.60 3.40 0.7585 0.72
2 all_to_all 2 shm lockstep 4096 3.30 3.00 4.50 0.6206 0.72
2 all_to_all 2 tcp mpi 1048576 525.10 515.30 590.10 0.9984 0.75
2 all_to_all 2 tcp lockstep 1048576 420.70 405.60 500.00 1.2462 0.75
2 all_to_all 2 shm lockstep 1048576 97.10 94.20 115.50 5.3994 0.77
3 all_to_all 2 tcp lockstep 4096 40.10 38.00 59.10 0.0511 0.80
3 all_to_all 2 tcp mpi 4096 51.00 49.50 69.90 0.0402 0.80
3 all_to_all 2 shm lockstep 4096 3.00 2.80 4.00 0.6827 0.81
3 all_to_all 2 shm mpi 4096 2.80 2.60 3.60 0.7314 0.81
3 all_to_all 2 tcp lockstep 1048576 415.00 402.20 490.30 1.2635 0.82
3 all_to_all 2 tcp mpi 1048576 528.40 518.10 595.20 0.9922 0.85
3 all_to_all 2 shm lockstep 1048576 96.00 93.40 112.80 5.4616 0.85
3 all_to_all 2 shm mpi 1048576 99.80 97.10 118.00 5.2533 0.86
"""

# compare_all_reduce.sh --ab's rows: key mode pingpong_ns load tool bytes
# mean p50 p95 busbw p99 max stall stalls vcsw ivcsw other_vcsw other_ivcsw
# steal_ms; B, an older revision, reports no percentiles; run 3 lost B's
# 64 MiB figure.
AB_ROWS = """\
1 shared 61.2 0.41 A 4096 1.652 1.503 1.964 2.4794 2.3 40.1 0.012 1 0 3 0 1 0
1 shared 60.8 0.41 B 4096 1.704 nan nan 2.4037 nan nan nan nan nan nan nan nan 0
1 split 180.4 0.45 B 67108864 16020.611 nan nan 4.1889 nan nan nan nan nan nan nan nan 2
1 split 179.9 0.45 A 67108864 15937.204 15700.422 20680.650 4.2108 21000.1 22010.5 0.000 0 1 2 40 12 1
2 split 181.0 0.52 B 4096 1.742 nan nan 2.3518 nan nan nan nan nan nan nan nan 0
2 split 182.2 0.52 A 4096 1.639 1.492 1.984 2.4985 2.5 45.0 0.020 2 0 4 0 1 0
2 shared 62.5 0.55 A 67108864 16195.237 15710.340 29174.061 4.1437 30000.2 31000.9 0.000 0 2 3 42 10 3
2 split 183.1 0.55 B 67108864 16125.838 nan nan 4.1616 nan nan nan nan nan nan nan nan 1
3 shared 60.1 0.60 A 4096 1.604 1.393 1.814 2.5543 2.2 38.0 0.010 1 0 2 0 0 0
3 shared 60.9 0.61 B 4096 1.678 nan nan 2.4416 nan nan nan nan nan nan nan nan 0
3 split 184.0 0.66 A 67108864 14344.545 15063.326 19988.490 4.6784 20500.0 21100.4 0.000 0 1 1 38 9 0
"""
AB_FIELDS = "key mode pp load tool bytes mean p50 p95 bw p99 max stall stalls vcsw ivcsw ovcsw oivcsw steal"


def run(*argv, stdin=None):
    """compare_lib's output for these arguments."""
    out = io.StringIO()
    old_stdin = sys.stdin
    try:
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)
        with contextlib.redirect_stdout(out):
            cl.main(list(argv))
    finally:
        sys.stdin = old_stdin
    return out.getvalue()


class TempFiles(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path


class SampleTest(unittest.TestCase):
    def test_median_range_and_holes(self):
        s = cl.Sample([3.0, 1.0, float("nan"), 2.0, 10.0])
        self.assertEqual(s, 2.5)
        self.assertEqual((s.n, s.lo, s.hi), (4, 1.0, 10.0))
        self.assertEqual(s.range(".1f"), "1.0-10.0")
        self.assertEqual(s.spread(".2f", "x"), "2.50x (1.00-10.00)")
        self.assertEqual(s.join(".0f"), "3, 1, 2, 10")

    def test_empty_is_nan_and_prints_na(self):
        s = cl.Sample([])
        self.assertTrue(math.isnan(s))
        self.assertEqual(s.spread(), "n/a")
        self.assertEqual(cl.render("{v:.1f} us, {v / 2:.2f}x", {"v": s}), "n/a us, n/ax")

    def test_best_never_picks_a_missing_one(self):
        self.assertEqual(cl.best(cl.Sample([]), cl.Sample([5.0]), cl.Sample([7.0])), 5.0)

    def test_size(self):
        self.assertEqual([cl.size(b) for b in (512, 4096, "65536", 268435456)], ["512 B", "4 KiB", "64 KiB", "256 MiB"])

    def test_render_quotes_and_division_by_zero(self):
        self.assertEqual(cl.render("""{", ".join(f'{x:.1f}' for x in xs)}""", {"xs": [1, 2]}), "1.0, 2.0")
        self.assertEqual(cl.render("{1 / x:.2f}", {"x": 0.0}), "n/a")
        self.assertEqual(cl.render("nano {x}", {"x": float("nan")}), "nano n/a")


class RowsTest(TempFiles):
    def test_half_written_lines_are_left_out(self):
        path = self.write("rows", "1 a 2.5\n1 b\n2 a 3.5\n")
        self.assertEqual(cl.read_rows(path, ["run", "tool", "t"]),
                         [{"run": "1", "tool": "a", "t": "2.5"}, {"run": "2", "tool": "a", "t": "3.5"}])

    def test_group_sorts_numbers_as_numbers_or_keeps_order(self):
        rows = [{"b": b, "t": t} for b, t in (("65536", "z"), ("4096", "a"), ("1048576", "z"))]
        self.assertEqual([k for k, _ in cl.group(rows, ["b"])], [("4096",), ("65536",), ("1048576",)])
        self.assertEqual([k for k, _ in cl.group(rows, ["t"], {"t"})], [("z",), ("a",)])

    def test_ratio_pairs_runs_and_takes_the_best_peer(self):
        rows = [{"run": r, "tool": t, "x": x} for r, t, x in (
            ("1", "ours", "10"), ("1", "gloo", "30"), ("1", "mpi", "20"),
            ("2", "ours", "10"), ("2", "gloo", "15"),  # no MPI in run 2
            ("3", "mpi", "40"))]  # no lockstep in run 3: no pair
        scope = cl.Scope(rows, rows, "tool", ["run"])
        self.assertEqual(scope.ratio("x", "mpi", "ours").values, [2.0])
        self.assertEqual(scope.ratio("x", ("gloo", "mpi"), "ours").values, [2.0, 1.5])
        self.assertEqual(scope.v("x", "gloo", "mpi").values, [30.0, 20.0, 15.0, 40.0])

    def test_unify_and_complete_pairs(self):
        rows = [{"key": k, "tool": t, "mode": m} for k, t, m in (
            ("1", "A", "fast"), ("1", "B", "slow"), ("2", "A", "fast"), ("2", "B", "fast"), ("3", "A", "slow"))]
        cl.unify(rows, "mode", ["key"])
        self.assertEqual([r["mode"] for r in rows], ["mixed", "mixed", "fast", "fast", "slow"])
        kept, missing = cl.complete_pairs(rows, "tool", ["key"])
        self.assertEqual(([r["key"] for r in kept], missing), (["1", "1", "2", "2"], 1))


class TableTest(TempFiles):
    def test_all_to_all_as_its_script_prints_it(self):
        # The script's columns, and what its own Python printed for these rows.
        cells = []
        for transport, names in (("tcp", ("TCP lockstep", "TCP OpenMPI", "TCP ratio")),
                                 ("shm", ("shm lockstep", "vader", "shm ratio"))):
            for name, tool in zip(names, ("lockstep", "mpi")):
                cells += ["--col", f"{name}={{v('mean', '{tool}', transport='{transport}'):.1f}} us, "
                                   f"{{v('busbw', '{tool}', transport='{transport}'):.2f}}"]
            cells += ["--col", f"{names[2]}={{ratio('mean', 'mpi', 'lockstep', transport='{transport}')"
                               ".spread('.2f', 'x')}"]
        out = run("table", self.write("rows", ALL_TO_ALL_ROWS),
                  "--fields", "run op n transport tool bytes mean p50 p95 busbw load",
                  "--series", "tool", "--pair", "run", "--by", "op n", "--rows", "bytes",
                  "--title", "\n{op}, {n} ranks (medians of {distinct('run')} runs; time us, busbw GB/s; "
                             "ratio = MPI time / lockstep time)\n",
                  "--col", "size={size(bytes)}", *cells)
        self.assertEqual(out, """
all_to_all, 2 ranks (medians of 3 runs; time us, busbw GB/s; ratio = MPI time / lockstep time)

| size | TCP lockstep | TCP OpenMPI | TCP ratio | shm lockstep | vader | shm ratio |
|---|---|---|---|---|---|---|
| 4 KiB | 40.1 us, 0.05 | 51.0 us, 0.04 | 1.27x (1.23-1.28) | 3.1 us, 0.66 | 2.7 us, 0.76 | 0.84x (0.82-0.93) |
| 1 MiB | 415.0 us, 1.26 | 528.4 us, 0.99 | 1.27x (1.25-1.29) | 96.0 us, 5.46 | 100.8 us, 5.20 | 1.05x (1.04-1.07) |
""")

    def test_all_reduce_ab_as_its_script_prints_it(self):
        # Pairs by run and size; a pair's mode is mixed when its sides saw
        # different ones; B's mean stands in for its missing p50; run 3's
        # 64 MiB pair lacks B and is left out.
        out = run("table", self.write("rows", AB_ROWS), "--fields", AB_FIELDS, "--series", "tool",
                  "--pair", "key bytes", "--fill", "p50=mean", "--unify", "mode", "--complete",
                  "--rows", "bytes mode", "--rollup", "mode=all ({counts('mode')})", "--rollup-first",
                  "--col", "size={size(bytes)}", "--col", "mode={mode}", "--col", "pairs={distinct('key')}",
                  "--col", "A mean={v('mean', 'A'):.1f}", "--col", "A p50={v('p50', 'A'):.1f}",
                  "--col", "B mean={v('mean', 'B'):.1f}", "--col", "B p50={v('p50', 'B'):.1f}",
                  "--col", "B/A mean={ratio('mean', 'B', 'A'):.2f}x", "--col", "B/A p50={ratio('p50', 'B', 'A'):.2f}x")
        self.assertEqual(out, """\
| size | mode | pairs | A mean | A p50 | B mean | B p50 | B/A mean | B/A p50 |
|---|---|---|---|---|---|---|---|---|
| 4 KiB | all (shared 2, split 1) | 3 | 1.6 | 1.5 | 1.7 | 1.7 | 1.05x | 1.17x |
| 4 KiB | shared | 2 | 1.6 | 1.4 | 1.7 | 1.7 | 1.04x | 1.17x |
| 4 KiB | split | 1 | 1.6 | 1.5 | 1.7 | 1.7 | 1.06x | 1.17x |
| 64 MiB | all (mixed 1, split 1) | 2 | 16066.2 | 15705.4 | 16073.2 | 16073.2 | 1.00x | 1.02x |
| 64 MiB | mixed | 1 | 16195.2 | 15710.3 | 16125.8 | 16125.8 | 1.00x | 1.03x |
| 64 MiB | split | 1 | 15937.2 | 15700.4 | 16020.6 | 16020.6 | 1.01x | 1.02x |
(1 pair(s) with a side missing (a run failed): not counted)
""")

    def test_each_row_order_note_footer_and_say(self):
        path = self.write("rows", "1 lockstep 100\n1 torch 80\n2 lockstep 120\n2 torch 60\n")
        out = run("table", path, "--fields", "run tool sps", "--series", "tool", "--rows", "tool",
                  "--order", "tool=torch,lockstep", "--let", "label={'torch': 'PyTorch', 'lockstep': 'ours'}",
                  "--col", "who={label[tool]}", "--col", "samples/s={v('sps').spread('.0f')}",
                  "--col", "ours / this={V('sps', 'lockstep') / v('sps'):.2f}x", "--note", "(2 runs)",
                  "--footer", "done")
        self.assertEqual(out, "| who | samples/s | ours / this | (2 runs)\n|---|---|---|\n"
                              "| PyTorch | 70 (60-80) | 1.57x |\n| ours | 110 (100-120) | 1.00x |\ndone\n")
        out = run("table", path, "--fields", "run tool sps", "--each", "--where", "tool == 'torch'",
                  "--no-header", "--col", "run={run}", "--col", "sps={v('sps'):.1f}")
        self.assertEqual(out, "| 1 | 80.0 |\n| 2 | 60.0 |\n")
        out = run("say", path, "--fields", "run tool sps", "--series", "tool", "--pair", "run",
                  "per-run ratios {ratio('sps', 'lockstep', 'torch').join('.2f', 'x')}")
        self.assertEqual(out, "per-run ratios 1.25x, 2.00x\n")

    def test_rowratio_and_rollup_after(self):
        path = self.write("rows", "1 tcp 2.0 1.0\n2 tcp 3.0 2.0\n1 shm 1.0 1.0\n")
        out = run("table", path, "--fields", "pair transport on off", "--rows", "transport:seen",
                  "--rollup", "transport=both", "--col", "t={transport}",
                  "--col", "ratio={rowratio('on', 'off'):.2f} ({rowratio('on', 'off').range('.2f')})")
        self.assertEqual(out, "| t | ratio |\n|---|---|\n| tcp | 1.75 (1.50-2.00) |\n| shm | 1.00 (1.00-1.00) |\n"
                              "| both | 1.50 (1.00-2.00) |\n")


class ReadersTest(TempFiles):
    def test_json_fields_of_the_last_line(self):
        text = 'noise\n{"time_us": 1.5, "p50_us": 1.2}\n{"time_us": 2.5, "peak": [3, 9, 4]}\n'
        self.assertEqual(run("json", "time_us", "p50_us", "peak", "peak:max", stdin=text), "2.5 nan 3,9,4 9\n")
        self.assertEqual(run("json", "--all", "time_us", stdin=text), "1.5\n2.5\n")
        self.assertEqual(run("json", "--has", "p50", "time_us", stdin=text), "1.5\n")

    def test_json_with_printf_nan_and_inf(self):
        self.assertEqual(run("json", "time_us", "p50_us", "wrong", stdin='{"time_us": nan, "p50_us": -inf, "wrong": 0}'),
                         "nan -inf 0\n")

    def test_json_of_one_document(self):
        doc = json.dumps({"end": {"sum_sent": {"bits_per_second": 8e9}}}, indent=2)
        self.assertEqual(run("json", "end.sum_sent.bits_per_second", "end.nothing", stdin=doc), "8000000000.0 nan\n")

    def test_gbench_csv(self):
        path = self.write("b.csv", "# a comment\nname,iterations,real_time,bytes_per_second\n"
                                   '"BM_Scale/1048576",10,2.5,4.2e9\n"BM_Step/real_time",5,1.25,\n')
        self.assertEqual(run("gbench", path, "real_time"), "BM_Scale/1048576 2.5\nBM_Step/real_time 1.25\n")
        self.assertEqual(run("gbench", path, "bytes_per_second"), "BM_Scale/1048576 4.2e9\n")

    def test_trace_phases(self):
        events = [{"name": "forward", "ph": "X", "dur": 2000}, {"name": "forward", "ph": "X", "dur": 4000},
                  {"name": "backward", "ph": "X", "dur": 1000}, {"name": "forward", "ph": "i"}]
        path = self.write("trace.json", json.dumps({"traceEvents": events}))
        self.assertEqual(run("trace-phases", path, "forward", "backward", "data wait", "--title", "{steps} steps"),
                         "3 steps\n| forward | backward | data wait |\n|---|---|---|\n| 2.000 | 0.333 | 0.000 |\n")


if __name__ == "__main__":
    unittest.main()
