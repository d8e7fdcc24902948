#!/usr/bin/env python3
"""The scale lab's glue between its measurements and the cost model.

    lab_model.py points   --rows=ROWS.jsonl --op=all_reduce [--gamma=G] > points.jsonl
    lab_model.py gamma    --benchmark_json=BENCH.json > points.jsonl
    lab_model.py fit_cpu  --rows=ROWS.jsonl --model=MODEL --calibration=CALIB.json --cores=2
    lab_model.py fabric   --rows=ROWS.jsonl --calibration=CALIB.json
    lab_model.py setup    --rows=ROWS.jsonl --cores=2 > setup_points.jsonl
    lab_model.py compare  --rows=ROWS.jsonl --model=MODEL --calibration=CALIB.json --cores=2 --hop_us=A0 > cmp.jsonl
    lab_model.py predict  --model=MODEL --calibration=CALIB.json [--p 1024 16384 100000] [--hop_us 5 50]
    lab_model.py plot     --compare=CMP.jsonl --out=validation.png

points: a 2-rank all-reduce below 256 KiB (small_message_bytes) is recursive
doubling, one round in which both ranks send n bytes, receive n and reduce n:
t = alpha + n beta + n gamma; from 256 KiB it is the ring, two steps of n/2
(the first reduced): t = 2 alpha + n beta + n/2 gamma. With gamma known (the
kernels' f32 sum), (n, t - n gamma) and (n/2, (t - n/2 gamma) / 2) are one-way
transfer points for `model fit`: small sizes pin alpha, large ones beta. (A broadcast or a stream would not do:
their iterations overlap, which hides alpha.)

fit_cpu: the CPU term c. Ranks outnumber the machine's cores in the lab; a
round of the algorithm then also waits for the runnable ranks to get a core.
Here every host shares the same cores, so the factor is machine-wide:
max(1, p / cores) - 1 extra per round (collectives/cost_model's term, with
the machine's cores). c is the least-squares slope of (measured - model
without c) against rounds x factor.

fabric: phi, what the links carry together (CostModel::fabric_us_per_byte).
The lab's links are one forwarder thread on the machine's cores, not a
link per host: an all-to-all of H hosts of one rank at D = 0, where every
host sends to every other at once ((H - 1) x bytes cross in all, in one
window up to 4 MiB over 4 hosts), takes t = alpha_remote + phi (H - 1) bytes;
phi is the slope through alpha_remote of t against (H - 1) bytes over the
sizes from 256 KiB (where bandwidth, not alpha, decides). Predictions for a
real cluster leave it out (calibration_real_host.json: a full-bisection
network).

compare: each measured row beside the model: today's algorithm's time with
the lab's links (alpha = the calibrated through-the-forwarder alpha + D + the
run's median forwarder lateness, which the link really added) and
the CPU term; the link term is the model without the CPU term. A point
counts for validation when link >= 5 x CPU (`validate.sh`).

Standard library only; the model is tools/scale_lab:model's binary.
"""
import argparse
import json
import math
import subprocess
import sys


def read_rows(path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip().startswith("{")]


def simulate(model, calibration, p, ranks_per_host, cores, op, sizes, hop_us=None, transport="auto", cpu=None,
             link_gbit=None):
  """The model's rows, keyed by bytes. cpu overrides cpu_us_per_round."""
  calib = calibration
  if cpu is not None:
    with open(calibration) as f:
      j = json.load(f)
    j["cpu_us_per_round"] = cpu
    calib = calibration + ".cpu%g.json" % cpu
    with open(calib, "w") as f:
      json.dump(j, f)
  args = [model, "simulate", "--calibration=" + calib, "--p=%d" % p, "--ranks_per_host=%d" % ranks_per_host,
          "--cores_per_host=%d" % cores, "--op=" + op, "--bytes=" + ",".join(str(s) for s in sizes),
          "--transport=" + transport, "--json"]
  if hop_us is not None:
    args.append("--hop_us=%g" % hop_us)
  if link_gbit is not None:
    args.append("--link_gbit=%g" % link_gbit)
  out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
  return {r["bytes"]: r for r in (json.loads(l) for l in out.splitlines() if l.startswith("{"))}


def cmd_points(a):
  for r in read_rows(a.rows):
    if r.get("op") != a.op or r.get("p") != 2:
      continue
    n = r["bytes"]
    if n < a.small_message_bytes:
      # Recursive doubling: one exchange of n, n reduced.
      print(json.dumps({"bytes": n, "time_us": round(r["time_us"] - n * a.gamma, 3)}))
    else:
      # The ring at 2 ranks: a reduce-scatter step (n/2 sent, n/2 reduced),
      # then an all-gather step (n/2): two transfers of n/2.
      print(json.dumps({"bytes": n // 2, "time_us": round((r["time_us"] - n / 2 * a.gamma) / 2, 3)}))


def cmd_gamma(a):
  """Google Benchmark's JSON of BM_ReduceSum/f32/N: N f32 elements summed into N."""
  with open(a.benchmark_json) as f:
    bench = json.load(f)
  for b in bench["benchmarks"]:
    name = b["name"]
    if not name.startswith("BM_ReduceSum/f32/") or b.get("run_type") == "aggregate":
      continue
    n = int(name.rsplit("/", 1)[1])
    if 4 * n > a.max_bytes:  # beyond the sizes a lab round reduces: out of cache, another slope
      continue
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
    print(json.dumps({"bytes": 4 * n, "time_us": round(b["real_time"] * scale, 4)}))


def machine_factor(p, cores):
  return max(1.0, p / cores) - 1.0


def cmd_fit_cpu(a):
  num = den = 0.0
  used = []
  for r in read_rows(a.rows):
    p, rph = r["p"], r.get("ranks_per_host", r["p"])
    transport = "tcp" if "tcp" in str(r.get("transport", "")) and r.get("hosts", 1) == 1 else "auto"
    m = simulate(a.model, a.calibration, p, rph, rph, r["op"], [r["bytes"]], transport=transport, cpu=0)[r["bytes"]]
    rounds = m["algorithms"][m["today"]]["rounds"]
    x = rounds * machine_factor(p, a.cores)
    if x <= 0:
      continue
    num += x * (r["time_us"] - m["today_us"])
    den += x * x
    used.append((p, r["bytes"], r["time_us"], m["today_us"], x))
  if den == 0:
    sys.exit("fit_cpu: no row has more ranks than cores; nothing to fit")
  c = max(0.0, num / den)
  with open(a.calibration) as f:
    j = json.load(f)
  j["cpu_us_per_round"] = c
  with open(a.calibration, "w") as f:
    json.dump(j, f, indent=2, sort_keys=True)
  for p, b, t, m, x in used:
    print("p=%d bytes=%d measured %.1f us, model without c %.1f us, rounds x factor %.1f" % (p, b, t, m, x))
  print("cpu_us_per_round %.3f (machine-wide factor max(1, p/%d) - 1)" % (c, a.cores))


def cmd_fabric(a):
  with open(a.calibration) as f:
    j = json.load(f)
  alpha = j["links"]["tcp_remote"]["alpha_us"]
  num = den = 0.0
  used = []
  for r in read_rows(a.rows):
    if r.get("op") != "all_to_all" or r.get("ranks_per_host") != 1 or r.get("hosts", 1) < 2 or r["bytes"] < a.min_bytes:
      continue
    x = (r["hosts"] - 1) * r["bytes"]
    num += x * (r["time_us"] - alpha)
    den += x * x
    used.append((r["hosts"], r["bytes"], r["time_us"], x))
  if den == 0:
    sys.exit("fabric: no all_to_all row of several one-rank hosts from %d bytes; nothing to fit" % a.min_bytes)
  phi = max(0.0, num / den)
  j["fabric_us_per_byte"] = phi
  with open(a.calibration, "w") as f:
    json.dump(j, f, indent=2, sort_keys=True)
  for h, b, t, x in used:
    print("hosts=%d bytes=%d measured %.1f us, %d bytes on the network, alpha + phi x: %.1f us" %
          (h, b, t, x, alpha + phi * x))
  print("fabric_us_per_byte %.6g (%.2f GB/s together; one link alone: %.2f GB/s)" %
        (phi, 1e-3 / phi if phi > 0 else float("inf"), 1e-3 / j["links"]["tcp_remote"]["beta_us_per_byte"]))


def cmd_setup(a):
  for r in read_rows(a.rows):
    if r.get("setup_s", 0) <= 0 or r.get("impl") != "lockstep":
      continue
    print(json.dumps({"p": r["p"], "ranks_per_host": r.get("ranks_per_host", r["p"]), "cores_per_host": a.cores,
                      "time_us": round(r["setup_s"] * 1e6, 1),
                      # Rows from before connections on demand built the full mesh.
                      "connections": r.get("connections", "full_mesh")}))


def cmd_compare(a):
  with open(a.calibration) as f:
    c = json.load(f)["cpu_us_per_round"]
  groups = {}
  for r in read_rows(a.rows):
    if r.get("impl") != "lockstep":
      continue
    key = (r["p"], r["hosts"], r["ranks_per_host"], r["delay_us"], r["op"], r.get("lateness_p50_us", 0.0))
    groups.setdefault(key, []).append(r)
  for (p, hosts, rph, delay, op, late), rows in sorted(groups.items()):
    sizes = sorted({r["bytes"] for r in rows})
    # The link's one-way time: the calibrated forwarder path, D, and how late
    # the forwarder let packets go in this run (its median lateness).
    hop = a.hop_us + delay + late
    model = simulate(a.model, a.calibration, p, rph, rph, op, sizes, hop_us=hop, cpu=0)
    for r in rows:
      m = model[r["bytes"]]
      rounds = m["algorithms"][m["today"]]["rounds"]
      cpu = c * rounds * machine_factor(p, a.cores)
      link = m["today_us"]
      predicted = link + cpu
      print(json.dumps({"op": op, "bytes": r["bytes"], "p": p, "hosts": hosts, "ranks_per_host": rph,
                        "delay_us": delay, "algorithm": m["today"], "rounds": rounds, "measured_us": r["time_us"],
                        "predicted_us": round(predicted, 1), "link_us": round(link, 1), "cpu_us": round(cpu, 1),
                        "link_dominates": link >= 5 * cpu, "ratio": round(r["time_us"] / predicted, 3),
                        "valid_links": r.get("valid", True), "load": r.get("load"), "lateness_p50_us": late},
                       sort_keys=True))


def cmd_plot(a):
  """validation.png: measured against predicted, log-log, with the +-30 % band (gnuplot)."""
  rows = read_rows(a.compare)
  data = a.out + ".dat"
  with open(data, "w") as f:
    for dominates in (True, False):
      f.write("# link_dominates=%s\n" % dominates)
      for r in rows:
        if r["link_dominates"] == dominates:
          f.write("%g %g\n" % (r["predicted_us"], r["measured_us"]))
      f.write("\n\n")
  lo = min([r["predicted_us"] for r in rows] + [r["measured_us"] for r in rows]) / 1.5
  hi = max([r["predicted_us"] for r in rows] + [r["measured_us"] for r in rows]) * 1.5
  script = f"""
set terminal pngcairo size 900,700 font ",11" noenhanced
set output "{a.out}"
set logscale xy
set xrange [{lo}:{hi}]
set yrange [{lo}:{hi}]
set xlabel "predicted (us)"
set ylabel "measured (us)"
set title "Scale lab: lockstep measured vs the calibrated model ({len(rows)} points)"
set key top left
set grid
plot x title "measured = predicted" lc rgb "black", \\
     1.3*x title "+30 %" dt 2 lc rgb "gray", 0.7*x title "-30 %" dt 2 lc rgb "gray", \\
     "{data}" index 0 using 1:2 with points pt 7 ps 1.2 lc rgb "#1f77b4" title "link term >= 5 x CPU term", \\
     "{data}" index 1 using 1:2 with points pt 6 ps 1.2 lc rgb "#d62728" title "CPU term too large (not validated)"
"""
  subprocess.run(["gnuplot"], input=script, text=True, check=True)


def fmt_us(us):
  if us >= 86400e6:
    return "%.1f days" % (us / 86400e6)
  if us >= 3600e6:
    return "%.1f h" % (us / 3600e6)
  if us >= 1e6:
    return "%.2f s" % (us / 1e6)
  if us >= 1e3:
    return "%.2f ms" % (us / 1e3)
  return "%.1f us" % us


def setup_seconds(model, calibration, p, rph, cores, hop, full_mesh=False):
  out = subprocess.run([model, "setup", "--calibration=" + calibration, "--p=%d" % p, "--ranks_per_host=%d" % rph,
                        "--cores_per_host=%d" % cores, "--hop_us=%g" % hop] + (["--full_mesh"] if full_mesh else []),
                       check=True, capture_output=True, text=True).stdout
  for line in out.splitlines():
    if line.startswith("set-up"):
      value = line.split(": ", 1)[1].split(" ", 1)[0]
      return float(value[:-1]) if value.endswith("s") else float("nan")
  return float("nan")


def cmd_predict(a):
  """Markdown tables: all-reduce and DDP's buckets at large p, start-up.

  A hop is the network's one-way latency; a message across hosts also pays
  the software on both ends (lockstep and the kernel's TCP), which the
  calibration's tcp_local alpha measures: alpha_remote = tcp_local alpha + hop.
  """
  with open(a.calibration) as f:
    software = json.load(f)["links"]["tcp_local"]["alpha_us"]
  sizes = [4096, 1 << 20, 64 << 20]
  # ResNet-18's 43 MiB of f32 gradients in DDP's buckets: the first 1 MiB,
  # then 25 MiB caps (PyTorch's rule): 1 + 25 + 17 MiB.
  buckets = [1 << 20, 25 << 20, 17 << 20]
  print("| ranks | hop | op | bytes | lockstep today | the model's best | plain ring | NCCL ring | NCCL tree |")
  print("|---|---|---|---|---|---|---|---|---|")
  for p in a.p:
    for hop in a.hop_us:
      m = simulate(a.model, a.calibration, p, a.ranks_per_host, a.cores, "all_reduce", sorted(set(sizes + buckets)),
                   hop_us=software + hop, link_gbit=a.link_gbit)
      for b in sizes:
        r = m[b]
        print(f"| {p:,} | {hop:g} us | all_reduce | {b // 1024 if b < 1 << 20 else b >> 20} "
              f"{'KiB' if b < 1 << 20 else 'MiB'} | {fmt_us(r['today_us'])} ({r['today']}) "
              f"| {fmt_us(r['chosen_us'])} ({r['chosen']}) | {fmt_us(r['algorithms']['ring']['time_us'])} "
              f"| {fmt_us(r['nccl_ring']['time_us'])} | {fmt_us(r['nccl_tree']['time_us'])} |")
      today = sum(m[b]["today_us"] for b in buckets)
      best = sum(m[b]["chosen_us"] for b in buckets)
      ring = sum(m[b]["algorithms"]["ring"]["time_us"] for b in buckets)
      nring = sum(m[b]["nccl_ring"]["time_us"] for b in buckets)
      ntree = sum(m[b]["nccl_tree"]["time_us"] for b in buckets)
      print(f"| {p:,} | {hop:g} us | DDP ResNet-18 (43 MiB: 1 + 25 + 17 MiB buckets) | 43 MiB | {fmt_us(today)} "
            f"| {fmt_us(best)} | {fmt_us(ring)} | {fmt_us(nring)} | {fmt_us(ntree)} |")
      for mesh, name in ((False, "connections on demand"), (True, "full mesh")):
        seconds = setup_seconds(a.model, a.calibration, p, a.ranks_per_host, a.cores, software + hop, mesh)
        print(f"| {p:,} | {hop:g} us | start-up ({name}, one store) | | {fmt_us(1e6 * seconds)} | | | | |")


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="cmd", required=True)
  s = sub.add_parser("points")
  s.add_argument("--rows", required=True)
  s.add_argument("--op", default="all_reduce")
  s.add_argument("--gamma", type=float, default=0.0)
  s.add_argument("--small_message_bytes", type=int, default=256 * 1024)
  s = sub.add_parser("gamma")
  s.add_argument("--benchmark_json", required=True)
  s.add_argument("--max_bytes", type=int, default=1 << 20)
  for name in ("fit_cpu", "compare"):
    s = sub.add_parser(name)
    s.add_argument("--rows", required=True)
    s.add_argument("--model", required=True)
    s.add_argument("--calibration", required=True)
    s.add_argument("--cores", type=int, default=2)
    if name == "compare":
      s.add_argument("--hop_us", type=float, required=True)
  s = sub.add_parser("fabric")
  s.add_argument("--rows", required=True)
  s.add_argument("--calibration", required=True)
  s.add_argument("--min_bytes", type=int, default=256 * 1024)
  s = sub.add_parser("setup")
  s.add_argument("--rows", required=True)
  s.add_argument("--cores", type=int, default=2)
  s = sub.add_parser("predict")
  s.add_argument("--model", required=True)
  s.add_argument("--calibration", required=True)
  s.add_argument("--p", type=int, nargs="+", default=[1024, 16384, 100000])
  s.add_argument("--hop_us", type=float, nargs="+", default=[5, 50])
  s.add_argument("--ranks_per_host", type=int, default=8)
  s.add_argument("--cores", type=int, default=8)
  s.add_argument("--link_gbit", type=float, default=25)
  s = sub.add_parser("plot")
  s.add_argument("--compare", required=True)
  s.add_argument("--out", required=True)
  a = parser.parse_args()
  {"points": cmd_points, "gamma": cmd_gamma, "fit_cpu": cmd_fit_cpu, "fabric": cmd_fabric, "setup": cmd_setup, "compare": cmd_compare,
   "predict": cmd_predict, "plot": cmd_plot}[a.cmd](a)


if __name__ == "__main__":
  main()
