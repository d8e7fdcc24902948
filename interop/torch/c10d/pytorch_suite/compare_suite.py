"""Compares PyTorch's distributed suite on gloo and on lockstep, and writes
the comparison (docs/TORCH_SUITE.md).

    python3 compare_suite.py RESULTS_DIR [--write docs/TORCH_SUITE.md] [--note TEXT ...]

RESULTS_DIR holds run_distributed_suite.py's JSON files, named
<run>_<world size>.json, where run is "gloo", "lockstep" (BACKEND=lockstep)
and "asgloo" (BACKEND=gloo LOCKSTEP_AS_GLOO=1: the tests that name gloo,
run on lockstep groups). The contract: every test that passes with gloo
passes with lockstep (as "lockstep" or, where the test names gloo, as
"asgloo"), or is listed in expected_differences.txt with its reason.
Exits 1, naming them, when a test breaks that contract or a listed one
passes after all (a stale entry); 0 otherwise.
"""
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(results, run, world):
    path = os.path.join(results, f"{run}_{world}.json")
    if not os.path.exists(path):
        return None
    return {t["name"]: t for t in json.load(open(path))["tests"]}


def expected_differences():
    """test name -> reason, from expected_differences.txt ("name: reason")."""
    out = {}
    for line in open(os.path.join(HERE, "expected_differences.txt")):
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(":")
            out[name.strip()] = reason.strip()
    return out


def first_line(detail):
    lines = [l for l in detail.strip().splitlines() if l.strip()]
    return (lines[-1] if lines else "").replace("|", "\\|")[:160]


def error_line(detail):
    """The detail's last "...Error: ..." line (the assertion), else its last line."""
    lines = [l.strip() for l in detail.splitlines() if "Error:" in l]
    return lines[-1].replace("|", "\\|")[:160] if lines else first_line(detail)


def main():
    results = sys.argv[1]
    out_path = sys.argv[sys.argv.index("--write") + 1] if "--write" in sys.argv else None
    allowed = expected_differences()
    md = ["# PyTorch's distributed test suite on lockstep", "",
          "PyTorch 1.13's `DistributedTest._DistTestBase` (the tests python3-torch ships in",
          "`torch/testing/_internal/distributed/distributed_test.py`), run by",
          "`interop/torch/c10d/pytorch_suite/run_distributed_suite.py` in the shape of PyTorch's",
          "`test_distributed_spawn.py`, on gloo and on lockstep, on this machine. Written by",
          "`bash interop/torch/c10d/pytorch_suite/run_all.sh` (which runs everything and then",
          "`compare_suite.py`); do not edit by hand.", "",
          "Runs: **gloo** (BACKEND=gloo); **lockstep** (BACKEND=lockstep: the suite's feature",
          "sets for plugins, DDP and subgroups include it); **lockstep as gloo**",
          "(BACKEND=gloo LOCKSTEP_AS_GLOO=1: the suite's gates and branches see \"gloo\", every",
          "group is a lockstep group; this runs the tests that name gloo literally).", ""]
    notes = [sys.argv[i + 1] for i in range(len(sys.argv) - 1) if sys.argv[i] == "--note"]
    if notes:
        md += ["Notes on this run:", ""] + [f"- {n}" for n in notes] + [""]
    broken, stale, used = [], [], set()
    for world in (2, 3):
        gloo, lockstep, asgloo = (load(results, run, world) for run in ("gloo", "lockstep", "asgloo"))
        if gloo is None or lockstep is None:
            continue
        md += [f"## World size {world}", "", "| run | passed | failed | errors | skipped |", "|---|---|---|---|---|"]
        for label, run in (("gloo", gloo), ("lockstep", lockstep), ("lockstep as gloo", asgloo)):
            if run is None:
                continue
            c = collections.Counter(t["status"] for t in run.values())
            md.append(f"| {label} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
        md.append("")
        # The contract, test by test.
        rows = []
        for name in sorted(gloo):
            g = gloo[name]["status"]
            l = lockstep.get(name, {}).get("status", "absent")
            a = asgloo.get(name, {}).get("status", "absent") if asgloo else "not run"
            ok = l == "passed" or (l == "skipped" and a == "passed")
            if g == "passed" and not ok:
                if name in allowed:
                    used.add(name)
                else:
                    broken.append(f"world {world}: {name}: gloo passed, lockstep {l}, as gloo {a}")
            if g != l or (l == "skipped" and a not in ("skipped", "not run")):
                detail = lockstep.get(name, {}).get("detail", "")
                if l == "skipped" and asgloo and a != "skipped":
                    detail = asgloo[name]["detail"] or detail
                why = allowed.get(name) or first_line(detail) or first_line(gloo[name]["detail"])
                rows.append(f"| `{name}` | {g} | {l} | {a} | {why} |")
        md += [f"Tests whose results differ between gloo and lockstep, or that run only as gloo ({len(rows)}):", "",
               "| test | gloo | lockstep | lockstep as gloo | why |", "|---|---|---|---|---|"] + rows + [""]
        # Passes as lockstep, fails only when the suite is made to see gloo.
        as_gloo_only = [n for n in sorted(gloo) if asgloo and lockstep.get(n, {}).get("status") == "passed"
                        and asgloo.get(n, {}).get("status") in ("failed", "error")]
        if as_gloo_only:
            md += ["Passed as lockstep, failed only as gloo (the group still names its own backend):", "",
                   "| test | as gloo | why |", "|---|---|---|"]
            md += [f"| `{n}` | {asgloo[n]['status']} | {error_line(asgloo[n]['detail'])} |" for n in as_gloo_only] + [""]
        # Skips on both, by reason.
        reasons = collections.Counter(gloo[n]["detail"] for n in gloo
                                      if gloo[n]["status"] == "skipped" and lockstep.get(n, {}).get("status") == "skipped"
                                      and (not asgloo or asgloo.get(n, {}).get("status") == "skipped"))
        md += [f"Skipped on every run ({sum(reasons.values())}), by the suite's reason:", "",
               "| tests | reason |", "|---|---|"]
        md += [f"| {n} | {r.replace('|', '/')} |" for r, n in reasons.most_common()] + [""]
    for name, reason in allowed.items():
        if name not in used:
            stale.append(f"{name}: listed ({reason}) but it passes on lockstep, or gloo does not pass it")
    text = "\n".join(md) + "\n"
    if out_path:
        with open(out_path, "w") as f:
            f.write(text)
        print(f"compare_suite: wrote {out_path}")
    else:
        print(text)
    for line in broken:
        print(f"compare_suite: NOT ON LOCKSTEP: {line}")
    for line in stale:
        print(f"compare_suite: STALE ENTRY: {line}")
    sys.exit(1 if broken or stale else 0)


if __name__ == "__main__":
    main()
