// `model`: the scale lab's front to lockstep's cost model
// (collectives/cost_model/): fit the model's constants from the lab's
// measurements, then predict lockstep at sizes one machine cannot run.
//
//   # α, β of a link from ping-pong points, one JSON object per line:
//   #   {"bytes": 4096, "time_us": 61.2}   (time_us one way: half the round trip)
//   bazel run //tools/scale_lab:model -- fit --points=$PWD/remote.jsonl --link=tcp_remote --out=$PWD/calib.json
//   #   (--in=$PWD/calib.json: update an existing calibration; --out may be the same file;
//   #   --fit_error=relative, the default, or absolute: see cost_model::FitError)
//   #   --link=gamma fits γ instead: points of (bytes reduced, time_us), the slope through the origin is γ.
//   # set-up constants from measured set-up times {"p": 8, "ranks_per_host": 4, "time_us": ...}
//   #   ("connections": "full_mesh" for runs with LOCKSTEP_RUNTIME_CONNECT=0):
//   bazel run //tools/scale_lab:model -- fit_setup --points=$PWD/setup.jsonl --in=... --out=...
//   # predictions, per size: every algorithm, Choose's pick, today's choice, NCCL's model:
//   bazel run //tools/scale_lab:model -- simulate --calibration=$PWD/calib.json --p=1024 --ranks_per_host=8
//   #   [--bytes=4K,1M,64M] [--op=all_reduce] [--cores_per_host=8] [--hop_us=5 --link_gbit=25]
//   #   [--transport=tcp] [--window_bytes=262144] [--json]
//   bazel run //tools/scale_lab:model -- setup --calibration=$PWD/calib.json --p=16384 --ranks_per_host=8
//   #   [--full_mesh]: every pair connected at start-up (LOCKSTEP_RUNTIME_CONNECT=0)
//   # what a lost rank costs, restart from a checkpoint beside fault-tolerant shrinking
//   # (collectives/cost_model/failure_cost.h), and the goodput at a mean time between failures:
//   bazel run //tools/scale_lab:model -- goodput --calibration=$PWD/calib.json --p=1024 --ranks_per_host=8 \
//   #   --mttf_h=8 --step_ms=200 [--detect_s=0 --restart_s=2 --checkpoint_every=100 --checkpoint_write_s=0.5
//   #   --checkpoint_read_s=0.5 --parameter_mib=42.6 --state_mib=85.3 --admit_every=10]
//
// Without --calibration (or --in), the model's placeholders
// (DefaultCostModel) are used and a note says so on stderr. --hop_us and
// --link_gbit replace kTcpRemote's α and β (β = 8 / (1000·Gbit/s) µs per
// byte). NCCL's model gets kTcpRemote's bandwidth (1/β), calibrated or given.
// Exit status: 0, or 2 with a message on bad input.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/cost_model/cost_model_json.h"
#include "collectives/cost_model/failure_cost.h"
#include "collectives/cost_model/fit_link.h"
#include "collectives/cost_model/setup_cost.h"
#include "collectives/cost_model/simulate.h"

ABSL_FLAG(std::string, points, "", "fit, fit_setup: a JSON-lines file of measurements");
ABSL_FLAG(std::string, link, "tcp_remote", "fit: shm, tcp_local, tcp_remote, or gamma");
ABSL_FLAG(std::string, fit_error, "relative",
          "fit: minimize relative errors (each point's as a fraction of its time: sizes spanning decades) or "
          "absolute ones (cost_model::FitError)");
ABSL_FLAG(std::string, in, "", "fit, fit_setup: the calibration to update (default: the model's placeholders)");
ABSL_FLAG(std::string, out, "", "fit, fit_setup: where to write the calibration");
ABSL_FLAG(std::string, notes, "", "fit, fit_setup: a note stored in the calibration (how it was measured)");
ABSL_FLAG(std::string, calibration, "", "simulate, setup: the calibration JSON");
ABSL_FLAG(int64_t, p, 0, "simulate, setup: ranks");
ABSL_FLAG(int64_t, ranks_per_host, 1, "simulate, setup: ranks per host (divides p)");
ABSL_FLAG(int, cores_per_host, 0, "simulate, setup: cores per host (0: as many as ranks)");
ABSL_FLAG(std::string, op, "all_reduce",
          "simulate: all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, barrier");
ABSL_FLAG(std::string, bytes, "4K,64K,1M,16M,64M", "simulate: message sizes (K = 1024)");
ABSL_FLAG(double, hop_us, -1, "simulate, setup: replaces tcp_remote's alpha_us (>= 0)");
ABSL_FLAG(double, link_gbit, -1, "simulate, setup: replaces tcp_remote's beta: the link's Gbit/s (> 0)");
ABSL_FLAG(double, window_bytes, -1,
          "fit: the fitted link's TCP window (TcpTransportOptions::socket_buffer_bytes; 0: none; default: keep the "
          "calibration's, 256 KiB in the placeholders); simulate, setup: replaces tcp_remote's");
ABSL_FLAG(std::string, transport, "auto",
          "simulate: the flat algorithms' transport: auto (shared memory on one host) or tcp (forced, as "
          "LOCKSTEP_TRANSPORT=tcp)");
ABSL_FLAG(bool, full_mesh, false,
          "setup: the TCP transport's full mesh (LOCKSTEP_RUNTIME_CONNECT=0) instead of connections on demand");
ABSL_FLAG(double, mttf_h, 8, "goodput: the job's mean time between failures, hours");
ABSL_FLAG(double, step_ms, 200, "goodput: one training step, ms");
ABSL_FLAG(double, detect_s, 0, "goodput: from a failure to the survivors' knowing it, s");
ABSL_FLAG(double, restart_s, 2, "goodput: restart path: stopping and starting every process, s");
ABSL_FLAG(double, checkpoint_every, 100, "goodput: restart path: steps between checkpoints");
ABSL_FLAG(double, checkpoint_write_s, 0.5, "goodput: restart path: one checkpoint's write, s");
ABSL_FLAG(double, checkpoint_read_s, 0.5, "goodput: restart path: the checkpoint's read, s");
ABSL_FLAG(double, parameter_mib, 42.6, "goodput: the parameters DDP broadcasts when rebuilt, MiB");
ABSL_FLAG(double, state_mib, 85.3, "goodput: a replacement's state (parameters, optimizer, buffers), MiB");
ABSL_FLAG(double, admit_every, 10, "goodput: fault tolerant: steps between admission checks");
ABSL_FLAG(bool, json, false, "simulate, setup: one JSON object per line instead of a table");

namespace lockstep {
namespace cost_model {
namespace {

constexpr char kUsage[] =
    "model fit|fit_setup|simulate|setup|goodput [flags]; see tools/scale_lab/model_main.cc or --helpfull";

absl::StatusOr<CostModel> ModelFrom(const std::string& path, const char* flag) {
  if (path.empty()) {
    std::cerr << "model: no --" << flag << "; using the model's placeholders (DefaultCostModel), not a calibration\n";
    return DefaultCostModel();
  }
  return LoadCostModel(path);
}

template <typename Point, typename Parse>
absl::StatusOr<std::vector<Point>> ReadPoints(const std::string& path, Parse parse) {
  if (path.empty()) return absl::InvalidArgumentError("--points is required");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --points=", path));
  std::vector<Point> points;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::StatusOr<Point> point = parse(line);
    if (!point.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", point.status().message()));
    points.push_back(*point);
  }
  return points;
}

absl::Status Fit() {
  absl::StatusOr<std::vector<LinkPoint>> points = ReadPoints<LinkPoint>(absl::GetFlag(FLAGS_points), ParseLinkPoint);
  if (!points.ok()) return points.status();
  absl::StatusOr<CostModel> model = ModelFrom(absl::GetFlag(FLAGS_in), "in");
  if (!model.ok()) return model.status();
  const std::string link = absl::GetFlag(FLAGS_link);
  if (link == "gamma") {
    // A reduction has no start-up term worth a line's intercept, and cache
    // sizes bend the line (a free intercept goes negative): γ is the slope
    // through the origin.
    double xy = 0, xx = 0;
    for (const LinkPoint& point : *points) {
      xy += static_cast<double>(point.bytes) * point.time_us;
      xx += static_cast<double>(point.bytes) * static_cast<double>(point.bytes);
    }
    if (xx <= 0 || xy <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("fit --link=gamma: ", points->size(),
                                                     " points with no positive size and time; give (bytes reduced, "
                                                     "time_us) points such as {\"bytes\": 65536, \"time_us\": 1.7}"));
    }
    model->gamma_us_per_byte = xy / xx;
    std::printf("gamma_us_per_byte %.6g (slope through the origin, %lld points)\n", model->gamma_us_per_byte,
                static_cast<long long>(points->size()));
  } else {
    const std::string error = absl::GetFlag(FLAGS_fit_error);
    if (error != "relative" && error != "absolute") {
      return absl::InvalidArgumentError(absl::StrCat("fit: --fit_error=", error, " is not relative or absolute"));
    }
    absl::StatusOr<LinkFit> fit = FitLink(*points, error == "relative" ? FitError::kRelative : FitError::kAbsolute);
    if (!fit.ok()) return fit.status();
    absl::StatusOr<LinkKind> kind = ParseLinkKind(link);
    if (!kind.ok()) return kind.status();
    model->link(*kind).alpha_us = fit->cost.alpha_us;  // the window is not fitted: keep it
    model->link(*kind).beta_us_per_byte = fit->cost.beta_us_per_byte;
    if (absl::GetFlag(FLAGS_window_bytes) >= 0) model->link(*kind).window_bytes = absl::GetFlag(FLAGS_window_bytes);
    std::printf("%s alpha_us %.3f beta_us_per_byte %.6g (%.2f GB/s), rms %.3f us, %lld points\n", link.c_str(),
                fit->cost.alpha_us, fit->cost.beta_us_per_byte,
                fit->cost.beta_us_per_byte > 0 ? 1e-3 / fit->cost.beta_us_per_byte : 0.0, fit->rms_residual_us,
                static_cast<long long>(fit->points));
  }
  if (absl::GetFlag(FLAGS_out).empty()) return absl::InvalidArgumentError("--out is required");
  return SaveCostModel(*model, absl::GetFlag(FLAGS_out), absl::GetFlag(FLAGS_notes));
}

absl::Status FitSetupCommand() {
  absl::StatusOr<std::vector<SetupPoint>> points = ReadPoints<SetupPoint>(absl::GetFlag(FLAGS_points), ParseSetupPoint);
  if (!points.ok()) return points.status();
  absl::StatusOr<CostModel> model = ModelFrom(absl::GetFlag(FLAGS_in), "in");
  if (!model.ok()) return model.status();
  // The store's constants come from --in (measured with tools/bench:store_load).
  absl::StatusOr<SetupFit> fit = FitSetup(*points, model->setup.store_us_per_request, model->setup.store_us_per_value);
  if (!fit.ok()) return fit.status();
  model->setup = fit->cost;
  std::printf(
      "setup constant_us %.1f handshake_us %.3f (store_us_per_request %.4f, store_us_per_value %.4f held), "
      "rms %.1f us%s%s\n",
      fit->cost.constant_us, fit->cost.handshake_us, fit->cost.store_us_per_request, fit->cost.store_us_per_value,
      fit->rms_residual_us, fit->zeroed.empty() ? "" : "; held at 0 (the data wanted them negative): ",
      absl::StrJoin(fit->zeroed, ", ").c_str());
  if (absl::GetFlag(FLAGS_out).empty()) return absl::InvalidArgumentError("--out is required");
  return SaveCostModel(*model, absl::GetFlag(FLAGS_out), absl::GetFlag(FLAGS_notes));
}

// The calibration with --hop_us / --link_gbit applied, and the topology.
absl::Status Inputs(CostModel* model, Topology* topology) {
  absl::StatusOr<CostModel> loaded = ModelFrom(absl::GetFlag(FLAGS_calibration), "calibration");
  if (!loaded.ok()) return loaded.status();
  *model = *loaded;
  if (absl::GetFlag(FLAGS_hop_us) >= 0) model->link(LinkKind::kTcpRemote).alpha_us = absl::GetFlag(FLAGS_hop_us);
  if (absl::GetFlag(FLAGS_window_bytes) >= 0) {
    model->link(LinkKind::kTcpRemote).window_bytes = absl::GetFlag(FLAGS_window_bytes);
  }
  if (absl::GetFlag(FLAGS_link_gbit) > 0) {
    model->link(LinkKind::kTcpRemote).beta_us_per_byte = 8.0 / (1000.0 * absl::GetFlag(FLAGS_link_gbit));
  }
  absl::StatusOr<Topology> t =
      MakeTopology(absl::GetFlag(FLAGS_p), absl::GetFlag(FLAGS_ranks_per_host), absl::GetFlag(FLAGS_cores_per_host));
  if (!t.ok()) return t.status();
  *topology = *t;
  return ValidateCostModel(*model);
}

absl::Status SimulateCommand() {
  CostModel model;
  Topology topology;
  absl::Status s = Inputs(&model, &topology);
  if (!s.ok()) return s;
  absl::StatusOr<Op> op = ParseOp(absl::GetFlag(FLAGS_op));
  if (!op.ok()) return op.status();
  absl::StatusOr<std::vector<int64_t>> sizes = ParseByteSizes(absl::GetFlag(FLAGS_bytes));
  if (!sizes.ok()) return sizes.status();
  SimulateOptions options;
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "auto" && transport != "tcp") {
    return absl::InvalidArgumentError(absl::StrCat("--transport is '", transport, "'; expected auto or tcp"));
  }
  options.predict.transport = transport == "tcp" ? FlatTransport::kTcp : FlatTransport::kAuto;
  options.today.transport = options.predict.transport;
  // NCCL's model gets the same link bandwidth as ours: kTcpRemote's 1/β.
  const double beta = model.link(LinkKind::kTcpRemote).beta_us_per_byte;
  options.nccl_link_gbit = beta > 0 ? 8.0 / (1000.0 * beta) : 0;
  std::vector<SimulationRow> rows;
  for (int64_t bytes : *sizes) {
    absl::StatusOr<SimulationRow> row = Simulate(*op, bytes, topology, model, options);
    if (!row.ok()) return row.status();
    if (absl::GetFlag(FLAGS_json)) std::printf("%s\n", FormatJsonLine(*op, topology, *row).c_str());
    rows.push_back(*row);
  }
  if (!absl::GetFlag(FLAGS_json)) std::printf("%s", FormatTable(*op, topology, rows).c_str());
  return absl::OkStatus();
}

absl::Status SetupCommand() {
  CostModel model;
  Topology topology;
  absl::Status s = Inputs(&model, &topology);
  if (!s.ok()) return s;
  const Connections connections = absl::GetFlag(FLAGS_full_mesh) ? Connections::kFullMesh : Connections::kOnDemand;
  absl::StatusOr<SetupPrediction> setup = PredictSetup(topology, model, connections);
  if (!setup.ok()) return setup.status();
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"p\": %lld, \"ranks_per_host\": %lld, \"time_us\": %.17g, \"store_requests\": %.17g, "
        "\"store_us\": %.17g, \"handshake_us\": %.17g, \"sockets_per_rank\": %lld, \"warnings\": %zu}\n",
        static_cast<long long>(topology.p), static_cast<long long>(topology.ranks_per_host), setup->time_us,
        setup->store_requests, setup->store_us, setup->handshake_us, static_cast<long long>(setup->sockets_per_rank),
        setup->warnings.size());
  } else {
    std::printf("set-up, %s: %s (store %s for %.0f requests, handshakes %s for %.0f peers per rank)\n",
                topology.Describe().c_str(), FormatMicros(setup->time_us).c_str(),
                FormatMicros(setup->store_us).c_str(), setup->store_requests, FormatMicros(setup->handshake_us).c_str(),
                setup->peers_per_rank);
  }
  for (const std::string& warning : setup->warnings) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  return absl::OkStatus();
}

absl::Status GoodputCommand() {
  CostModel model;
  Topology topology;
  absl::Status s = Inputs(&model, &topology);
  if (!s.ok()) return s;
  FailureInputs in;
  in.mttf_s = absl::GetFlag(FLAGS_mttf_h) * 3600;
  in.step_s = absl::GetFlag(FLAGS_step_ms) / 1000;
  in.detect_s = absl::GetFlag(FLAGS_detect_s);
  in.restart_s = absl::GetFlag(FLAGS_restart_s);
  in.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every);
  in.checkpoint_write_s = absl::GetFlag(FLAGS_checkpoint_write_s);
  in.checkpoint_read_s = absl::GetFlag(FLAGS_checkpoint_read_s);
  in.parameter_bytes = absl::GetFlag(FLAGS_parameter_mib) * 1048576;
  in.state_bytes = absl::GetFlag(FLAGS_state_mib) * 1048576;
  in.admit_every_steps = absl::GetFlag(FLAGS_admit_every);
  absl::StatusOr<FailurePrediction> f = PredictFailureCost(topology, model, in);
  if (!f.ok()) return f.status();
  if (absl::GetFlag(FLAGS_json)) {
    std::printf(
        "{\"p\": %lld, \"ranks_per_host\": %lld, \"mttf_s\": %.17g, \"setup_s\": %.17g, \"agreement_s\": %.17g, "
        "\"restart_lost_s\": %.17g, \"restart_overhead\": %.17g, \"restart_goodput\": %.17g, "
        "\"shrink_lost_s\": %.17g, \"shrink_overhead\": %.17g, \"shrink_goodput\": %.17g}\n",
        static_cast<long long>(topology.p), static_cast<long long>(topology.ranks_per_host), in.mttf_s, f->setup_s,
        f->agreement_s, f->restart.lost_s, f->restart.overhead, f->restart.goodput, f->shrink.lost_s,
        f->shrink.overhead, f->shrink.goodput);
  } else {
    std::printf(
        "%s, a failure every %.2f h, step %.0f ms: set-up %.3f s, agreement %.3f s; restart: %.2f s lost a failure, "
        "overhead %.2f %%, goodput %.4f %%; shrink: %.2f s lost a failure, overhead %.3f %%, goodput %.4f %%\n",
        topology.Describe().c_str(), in.mttf_s / 3600, in.step_s * 1000, f->setup_s, f->agreement_s, f->restart.lost_s,
        100 * f->restart.overhead, 100 * f->restart.goodput, f->shrink.lost_s, 100 * f->shrink.overhead,
        100 * f->shrink.goodput);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep

int main(int argc, char** argv) {
  using namespace lockstep::cost_model;
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::cerr << "usage: " << kUsage << "\n";
    return 2;
  }
  const std::string command = args[1];
  absl::Status status;
  if (command == "fit") {
    status = Fit();
  } else if (command == "fit_setup") {
    status = FitSetupCommand();
  } else if (command == "simulate") {
    status = SimulateCommand();
  } else if (command == "setup") {
    status = SetupCommand();
  } else if (command == "goodput") {
    status = GoodputCommand();
  } else {
    status = absl::InvalidArgumentError(absl::StrCat("unknown command '", command, "'; ", kUsage));
  }
  if (!status.ok()) {
    std::cerr << "model " << command << ": " << status.message() << "\n";
    return 2;
  }
  return 0;
}
