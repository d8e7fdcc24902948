#include "collectives/cost_model/simulate.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace cost_model {

absl::StatusOr<SimulationRow> Simulate(Op op, int64_t bytes, const Topology& topology, const CostModel& model,
                                       const SimulateOptions& options) {
  SimulationRow row;
  row.bytes = bytes;
  for (Algorithm a : AlgorithmsFor(op)) {
    absl::StatusOr<Cost> cost = Predict(op, a, bytes, topology, model, options.predict);
    if (!cost.ok()) return cost.status();
    row.predictions.emplace_back(a, *cost);
  }
  absl::StatusOr<Choice> chosen = Choose(op, bytes, topology, model, {}, options.predict);
  if (!chosen.ok()) return chosen.status();
  row.chosen = *chosen;
  absl::StatusOr<Algorithm> today = TodaysChoice(op, bytes, topology, options.today);
  if (!today.ok()) return today.status();
  row.today = *today;
  for (const auto& [a, cost] : row.predictions) {
    if (a == row.today) row.today_cost = cost;
  }
  if (op == Op::kAllReduce && options.nccl_link_gbit > 0) {
    NcclLink link;
    link.bus_gbytes_per_s = options.nccl_link_gbit / 8;
    absl::StatusOr<NcclPrediction> ring = NcclPredict(NcclAlgorithm::kRing, bytes, topology, link);
    if (!ring.ok()) return ring.status();
    absl::StatusOr<NcclPrediction> tree = NcclPredict(NcclAlgorithm::kTree, bytes, topology, link);
    if (!tree.ok()) return tree.status();
    row.nccl_ring = *ring;
    row.nccl_tree = *tree;
  }
  return row;
}

absl::StatusOr<std::vector<int64_t>> ParseByteSizes(absl::string_view list) {
  std::vector<int64_t> sizes;
  for (absl::string_view piece : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    absl::string_view s = absl::StripAsciiWhitespace(piece);
    absl::string_view number = s;
    int64_t unit = 1;
    if (!absl::ConsumeSuffix(&number, "iB")) absl::ConsumeSuffix(&number, "B");
    if (!number.empty()) {
      switch (std::toupper(static_cast<unsigned char>(number.back()))) {
        case 'K':
          unit = int64_t{1} << 10;
          break;
        case 'M':
          unit = int64_t{1} << 20;
          break;
        case 'G':
          unit = int64_t{1} << 30;
          break;
        case 'T':
          unit = int64_t{1} << 40;
          break;
        default:
          break;
      }
      if (unit > 1) number.remove_suffix(1);
    }
    int64_t value = 0;
    if (number.empty() || !absl::SimpleAtoi(number, &value) || value < 0 ||
        value > std::numeric_limits<int64_t>::max() / unit) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", s, "' is not a byte size; write e.g. 4096, 4K, 1M, 64MiB, 1G (K = 1024)"));
    }
    sizes.push_back(value * unit);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("no byte sizes given; write e.g. 4K,1M,64M");
  return sizes;
}

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return absl::StrCat(bytes, units[u]);
}

std::string FormatMicros(double us) {
  if (us < 1000) return absl::StrFormat("%.1fus", us);
  if (us < 1e6) return absl::StrFormat("%.2fms", us / 1e3);
  return absl::StrFormat("%.2fs", us / 1e6);
}

namespace {

// Table headers: short enough for one column each (the legend spells them out).
absl::string_view ShortName(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRecursiveDoubling:
      return "rec_dbl";
    case Algorithm::kRabenseifner:
      return "rabens";
    case Algorithm::kBinaryTree:
      return "btree";
    case Algorithm::kDoubleBinaryTree:
      return "dbtree";
    case Algorithm::kHierarchicalRing:
      return "h_ring";
    case Algorithm::kHierarchicalRecursiveDoubling:
      return "h_rec_dbl";
    case Algorithm::kHierarchicalRabenseifner:
      return "h_rabens";
    case Algorithm::kHierarchicalDoubleBinaryTree:
      return "h_dbtree";
    case Algorithm::kRecursiveHalving:
      return "rec_halv";
    case Algorithm::kBruck:
      return "bruck";
    case Algorithm::kBinomialTree:
      return "binomial";
    case Algorithm::kPipelinedChain:
      return "chain";
    case Algorithm::kPipelinedTree:
      return "ptree";
    case Algorithm::kHierarchicalBinomialTree:
      return "h_binomial";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kDissemination:
      return "dissem";
    case Algorithm::kHierarchicalDissemination:
      return "h_dissem";
  }
  return "?";
}

}  // namespace

std::string FormatTable(Op op, const Topology& topology, const std::vector<SimulationRow>& rows) {
  std::string out = absl::StrCat(OpName(op), ", ", topology.Describe(), "; predicted time per algorithm\n");
  if (rows.empty()) return out;
  const bool nccl = rows[0].nccl_ring.has_value();
  std::string header = absl::StrFormat("%-7s", "bytes");
  for (const auto& [a, cost] : rows[0].predictions) absl::StrAppendFormat(&header, " %10s", ShortName(a));
  absl::StrAppendFormat(&header, " | %-10s %-10s %8s", "chosen", "today", "today/ch");
  if (nccl) absl::StrAppendFormat(&header, " | %-16s %-16s", "nccl_ring", "nccl_tree");
  absl::StrAppend(&out, header, "\n");
  for (const SimulationRow& row : rows) {
    std::string line = absl::StrFormat("%-7s", FormatBytes(row.bytes));
    for (const auto& [a, cost] : row.predictions) absl::StrAppendFormat(&line, " %10s", FormatMicros(cost.time_us));
    const double ratio = row.chosen.cost.time_us > 0 ? row.today_cost.time_us / row.chosen.cost.time_us : 1.0;
    absl::StrAppendFormat(&line, " | %-10s %-10s %7.2fx", ShortName(row.chosen.algorithm), ShortName(row.today), ratio);
    if (row.nccl_ring && row.nccl_tree) {
      absl::StrAppendFormat(&line, " | %9s %-6s %9s %-6s", FormatMicros(row.nccl_ring->time_us),
                            NcclProtocolName(row.nccl_ring->protocol), FormatMicros(row.nccl_tree->time_us),
                            NcclProtocolName(row.nccl_tree->protocol));
    }
    absl::StrAppend(&out, line, "\n");
  }
  std::string legend = "legend:";
  for (const auto& [a, cost] : rows[0].predictions) {
    if (ShortName(a) != AlgorithmName(a)) absl::StrAppend(&legend, " ", ShortName(a), "=", AlgorithmName(a));
  }
  if (legend != "legend:") absl::StrAppend(&out, legend, "\n");
  if (nccl) {
    absl::StrAppend(&out,
                    "nccl_*: NCCL 2.30.7's tuning model (collectives/cost_model/nccl_model.h) at the same "
                    "link bandwidth, its own latencies, best protocol\n");
  }
  return out;
}

std::string FormatJsonLine(Op op, const Topology& topology, const SimulationRow& row) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["op"] = std::string(OpName(op));
  j["p"] = topology.p;
  j["hosts"] = topology.hosts;
  j["ranks_per_host"] = topology.ranks_per_host;
  j["cores_per_host"] = topology.cores_per_host;
  j["bytes"] = row.bytes;
  nlohmann::ordered_json algorithms = nlohmann::ordered_json::object();
  for (const auto& [a, cost] : row.predictions) {
    algorithms[std::string(AlgorithmName(a))] = {{"time_us", cost.time_us}, {"rounds", cost.rounds}};
  }
  j["algorithms"] = std::move(algorithms);
  j["chosen"] = std::string(AlgorithmName(row.chosen.algorithm));
  j["chosen_us"] = row.chosen.cost.time_us;
  j["today"] = std::string(AlgorithmName(row.today));
  j["today_us"] = row.today_cost.time_us;
  if (row.nccl_ring && row.nccl_tree) {
    j["nccl_ring"] = {{"time_us", row.nccl_ring->time_us},
                      {"protocol", std::string(NcclProtocolName(row.nccl_ring->protocol))}};
    j["nccl_tree"] = {{"time_us", row.nccl_tree->time_us},
                      {"protocol", std::string(NcclProtocolName(row.nccl_tree->protocol))}};
  }
  return j.dump();
}

}  // namespace cost_model
}  // namespace lockstep
