// One row of `model simulate` (tools/scale_lab/model_main.cc) per message
// size: every algorithm's prediction, Choose's pick, what lockstep does
// today, and NCCL's model beside them; formatted as a table or JSON lines.
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(1024, 8);
//   absl::StatusOr<std::vector<int64_t>> sizes = ParseByteSizes("4K,1M,64M");
//   SimulateOptions options;
//   options.nccl_link_gbit = 25;
//   std::vector<SimulationRow> rows;
//   for (int64_t bytes : *sizes) rows.push_back(*Simulate(Op::kAllReduce, bytes, *t, DefaultCostModel(), options));
//   std::string table = FormatTable(Op::kAllReduce, *t, rows);
//   std::string line = FormatJsonLine(Op::kAllReduce, *t, rows[0]);
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_SIMULATE_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_SIMULATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/cost_model/collective.h"
#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/nccl_model.h"
#include "collectives/cost_model/predict.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

struct SimulateOptions {
  // NCCL's model beside lockstep's (all_reduce only): the per-rank network
  // bandwidth in Gbit/s; 0 leaves NCCL out.
  double nccl_link_gbit = 0;
  PredictOptions predict;
  TodaysRules today;  // today.transport should match predict.transport
};

struct SimulationRow {
  int64_t bytes = 0;
  std::vector<std::pair<Algorithm, Cost>> predictions;  // AlgorithmsFor(op), in order
  Choice chosen;
  Algorithm today = Algorithm::kRing;
  Cost today_cost;
  std::optional<NcclPrediction> nccl_ring, nccl_tree;
};

absl::StatusOr<SimulationRow> Simulate(Op op, int64_t bytes, const Topology& topology, const CostModel& model,
                                       const SimulateOptions& options = {});

// "4096", "4K", "4KiB", "1M", "64MB", "1G" (K = 1024), comma separated.
// InvalidArgument naming the piece that is not a size.
absl::StatusOr<std::vector<int64_t>> ParseByteSizes(absl::string_view list);

// 4096 -> "4K", 1048576 -> "1M", 1000 -> "1000".
std::string FormatBytes(int64_t bytes);
// 12.3 -> "12.3us", 4560 -> "4.56ms", 1.2e6 -> "1.20s".
std::string FormatMicros(double us);

// A header naming the op and topology, then one line per row.
std::string FormatTable(Op op, const Topology& topology, const std::vector<SimulationRow>& rows);
// One JSON object: op, topology, bytes, each algorithm's time_us (and
// rounds), chosen, today, and nccl_ring/nccl_tree when computed.
std::string FormatJsonLine(Op op, const Topology& topology, const SimulationRow& row);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_SIMULATE_H_
