#include "collectives/cost_model/simulate.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace cost_model {
namespace {

TEST(Simulate, RowHoldsEveryAlgorithmTheChoiceAndToday) {
  absl::StatusOr<Topology> t = MakeTopology(64, 8);
  SimulateOptions options;
  options.nccl_link_gbit = 25;
  absl::StatusOr<SimulationRow> row = Simulate(Op::kAllReduce, 1 << 20, *t, DefaultCostModel(), options);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->predictions.size(), AlgorithmsFor(Op::kAllReduce).size());
  EXPECT_EQ(row->chosen.algorithm, Choose(Op::kAllReduce, 1 << 20, *t, DefaultCostModel())->algorithm);
  EXPECT_EQ(row->today, Algorithm::kHierarchicalRabenseifner);
  EXPECT_EQ(row->today_cost.time_us,
            Predict(Op::kAllReduce, Algorithm::kHierarchicalRabenseifner, 1 << 20, *t, DefaultCostModel())->time_us);
  ASSERT_TRUE(row->nccl_ring.has_value());
  NcclLink link;
  link.bus_gbytes_per_s = 25.0 / 8;
  EXPECT_EQ(row->nccl_ring->time_us, NcclPredict(NcclAlgorithm::kRing, 1 << 20, *t, link)->time_us);
  // No NCCL for other ops or without a bandwidth.
  EXPECT_FALSE(Simulate(Op::kBroadcast, 1 << 20, *t, DefaultCostModel(), options)->nccl_ring.has_value());
  EXPECT_FALSE(Simulate(Op::kAllReduce, 1 << 20, *t, DefaultCostModel())->nccl_ring.has_value());
}

TEST(ParseByteSizes, SuffixesAndErrors) {
  absl::StatusOr<std::vector<int64_t>> sizes = ParseByteSizes("4096, 4K,4KiB,1M,64MB,1G,0");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(*sizes, (std::vector<int64_t>{4096, 4096, 4096, 1 << 20, 64 << 20, 1 << 30, 0}));
  EXPECT_NE(ParseByteSizes("4K,lots").status().message().find("'lots'"), std::string::npos);
  EXPECT_FALSE(ParseByteSizes("-4").ok());
  EXPECT_FALSE(ParseByteSizes("1e3").ok());
  EXPECT_FALSE(ParseByteSizes("").ok());
  EXPECT_FALSE(ParseByteSizes("99999999999T").ok());
}

TEST(Format, BytesAndMicros) {
  EXPECT_EQ(FormatBytes(4096), "4K");
  EXPECT_EQ(FormatBytes(64 << 20), "64M");
  EXPECT_EQ(FormatBytes(1000), "1000");
  EXPECT_EQ(FormatBytes(0), "0");
  EXPECT_EQ(FormatMicros(12.34), "12.3us");
  EXPECT_EQ(FormatMicros(4560), "4.56ms");
  EXPECT_EQ(FormatMicros(1.2e6), "1.20s");
}

TEST(Format, TableAndJsonLines) {
  absl::StatusOr<Topology> t = MakeTopology(16, 8);
  SimulateOptions options;
  options.nccl_link_gbit = 10;
  std::vector<SimulationRow> rows;
  for (int64_t bytes : {4096, 1 << 20})
    rows.push_back(*Simulate(Op::kAllReduce, bytes, *t, DefaultCostModel(), options));
  const std::string table = FormatTable(Op::kAllReduce, *t, rows);
  EXPECT_NE(table.find("all_reduce, p=16 (2 hosts x 8 ranks"), std::string::npos) << table;
  EXPECT_NE(table.find("nccl_ring"), std::string::npos) << table;
  EXPECT_NE(table.find("\n4K "), std::string::npos) << table;
  EXPECT_NE(table.find("\n1M "), std::string::npos) << table;
  const nlohmann::json j = nlohmann::json::parse(FormatJsonLine(Op::kAllReduce, *t, rows[1]));
  EXPECT_EQ(j["op"], "all_reduce");
  EXPECT_EQ(j["bytes"], 1 << 20);
  EXPECT_EQ(j["today"], "hierarchical_ring");
  EXPECT_DOUBLE_EQ(j["algorithms"]["ring"]["time_us"].get<double>(), rows[1].predictions[0].second.time_us);
  EXPECT_TRUE(j.contains("nccl_tree"));
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
