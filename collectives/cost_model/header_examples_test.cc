// The usage examples at the top of this package's headers, line for line,
// compiled and run (tests/header_examples/ does this for the packages it
// lists; this package keeps its own).
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/cost_model/all_gather_reduce_scatter_cost.h"
#include "collectives/cost_model/all_reduce_cost.h"
#include "collectives/cost_model/all_to_all_cost.h"
#include "collectives/cost_model/collective.h"
#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/cost_model_json.h"
#include "collectives/cost_model/failure_cost.h"
#include "collectives/cost_model/fit_link.h"
#include "collectives/cost_model/nccl_model.h"
#include "collectives/cost_model/predict.h"
#include "collectives/cost_model/rooted_cost.h"
#include "collectives/cost_model/setup_cost.h"
#include "collectives/cost_model/simulate.h"
#include "collectives/cost_model/step_cost.h"
#include "collectives/cost_model/topology.h"
#include "gtest/gtest.h"

namespace {

TEST(HeaderExamples, FailureCost) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(1024, 8);
  FailureInputs in;
  in.mttf_s = 8 * 3600;  // the job's: one failure every 8 hours
  in.step_s = 0.2;
  absl::StatusOr<FailurePrediction> f = PredictFailureCost(*t, DefaultCostModel(), in);
  // f->restart.lost_s, f->restart.goodput, f->shrink.lost_s, f->shrink.goodput
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_GT(f->restart.lost_s, f->shrink.lost_s);
  EXPECT_GT(f->shrink.goodput, f->restart.goodput);
}

TEST(HeaderExamples, Collective) {
  using namespace lockstep::cost_model;
  for (Algorithm a : AlgorithmsFor(Op::kAllReduce)) {
    std::printf("%s\n", std::string(AlgorithmName(a)).c_str());
  }
  absl::StatusOr<Op> op = ParseOp("all_reduce");
  EXPECT_EQ(*op, Op::kAllReduce);
}

TEST(HeaderExamples, CostModel) {
  using namespace lockstep::cost_model;
  CostModel model = DefaultCostModel();
  model.link(LinkKind::kTcpRemote) = LinkCost{50.0, 1.0 / 1250.0};  // 50 µs, 10 Gbit/s
  absl::Status valid = ValidateCostModel(model);
  EXPECT_TRUE(valid.ok());
}

TEST(HeaderExamples, Topology) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(/*p=*/1024, /*ranks_per_host=*/8, /*cores_per_host=*/8);
  // t->hosts == 128
  EXPECT_EQ(t->hosts, 128);
}

TEST(HeaderExamples, StepCost) {
  using namespace lockstep::cost_model;
  Level level;  // 8 ranks, 4 per host
  level.p = 8;
  level.ranks_per_host = 4;
  level.local = LinkCost{10.0, 0.001};
  level.remote = LinkCost{50.0, 0.01};
  Cost cost;
  AddRounds(level, XorRound(level, /*distance=*/4, /*bytes=*/1000, /*reduce_bytes=*/1000), 1, &cost);
  // cost.time_us == 50 + 0.01 * 1000 * 4 + 0 (4 ranks of a host cross at once)
  EXPECT_DOUBLE_EQ(cost.time_us, 50 + 0.01 * 1000 * 4 + 0);
}

TEST(HeaderExamples, RootedCost) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(64, 8);
  const CostModel model = DefaultCostModel();
  Cost binomial = BinomialTreeCost(FlatLevel(*t, model), Direction::kBroadcast, 1 << 20);
  Cost chain = PipelinedChainCost(FlatLevel(*t, model), Direction::kReduce, 1 << 20, /*chunks=*/0);
  EXPECT_GT(binomial.time_us, 0);
  EXPECT_GT(chain.time_us, 0);
}

TEST(HeaderExamples, AllReduceCost) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(1024, 8);
  const CostModel model = DefaultCostModel();
  const Level flat = FlatLevel(*t, model);
  Cost ring = RingAllReduceCost(flat, 64 << 20);
  Cost tree = DoubleBinaryTreeAllReduceCost(flat, 64 << 20, /*chunks=*/0);
  absl::StatusOr<Cost> hier = HierarchicalAllReduceCost(*t, model, Algorithm::kRecursiveDoubling, 4096);
  EXPECT_GT(ring.time_us + tree.time_us + hier->time_us, 0);
}

TEST(HeaderExamples, AllGatherReduceScatterCost) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(16, 4);
  const Level flat = FlatLevel(*t, DefaultCostModel());
  Cost gather = BruckAllGatherCost(flat, 1 << 20);
  Cost scatter = RecursiveHalvingReduceScatterCost(flat, 1 << 20);
  EXPECT_GT(gather.time_us + scatter.time_us, 0);
}

TEST(HeaderExamples, AllToAllCost) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(64, 8);
  const CostModel model = DefaultCostModel();
  Cost pairwise = PairwiseAllToAllCost(FlatLevel(*t, model), 1 << 20);
  Cost barrier = HierarchicalDisseminationBarrierCost(*t, model);
  EXPECT_GT(pairwise.time_us + barrier.time_us, 0);
}

TEST(HeaderExamples, Predict) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(/*p=*/1024, /*ranks_per_host=*/8);
  const CostModel model = DefaultCostModel();  // or LoadCostModel("calib.json")
  absl::StatusOr<Cost> ring = Predict(Op::kAllReduce, Algorithm::kRing, 64 << 20, *t, model);
  absl::StatusOr<Choice> best = Choose(Op::kAllReduce, 64 << 20, *t, model);
  absl::StatusOr<Algorithm> today = TodaysChoice(Op::kAllReduce, 64 << 20, *t);
  // best->algorithm, best->cost.time_us; ring->time_us
  EXPECT_LE(best->cost.time_us, ring->time_us);
  EXPECT_EQ(*today, Algorithm::kHierarchicalRabenseifner);
}

TEST(HeaderExamples, SetupCost) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(16384, 8);
  absl::StatusOr<SetupPrediction> setup = PredictSetup(*t, DefaultCostModel());
  // setup->time_us, setup->store_requests, setup->warnings
  EXPECT_FALSE(setup->warnings.empty());
}

TEST(HeaderExamples, NcclModel) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(1024, 8);
  NcclLink link;
  link.bus_gbytes_per_s = 25.0 / 8;  // a 25 Gbit/s NIC per rank
  absl::StatusOr<NcclPrediction> ring = NcclPredict(NcclAlgorithm::kRing, 64 << 20, *t, link);
  absl::StatusOr<NcclPrediction> tree = NcclPredict(NcclAlgorithm::kTree, 64 << 20, *t, link);
  // ring->time_us, ring->protocol
  EXPECT_GT(ring->time_us, 0);
  EXPECT_GT(tree->time_us, 0);
}

TEST(HeaderExamples, FitLink) {
  using namespace lockstep::cost_model;
  std::vector<LinkPoint> points = {{0, 10.0}, {1000, 11.0}, {1000000, 1010.0}};
  absl::StatusOr<LinkFit> fit = FitLink(points);
  // fit->cost.alpha_us == 10, fit->cost.beta_us_per_byte == 0.001
  EXPECT_NEAR(fit->cost.alpha_us, 10, 1e-9);
  EXPECT_NEAR(fit->cost.beta_us_per_byte, 0.001, 1e-15);
}

TEST(HeaderExamples, CostModelJson) {
  using namespace lockstep::cost_model;
  const std::string text = CostModelToJson(DefaultCostModel());
  absl::StatusOr<CostModel> back = CostModelFromJson(text);
  absl::StatusOr<LinkPoint> point = ParseLinkPoint(R"({"bytes": 4096, "time_us": 12.5})");
  EXPECT_TRUE(back.ok());
  EXPECT_EQ(point->time_us, 12.5);
}

TEST(HeaderExamples, Simulate) {
  using namespace lockstep::cost_model;
  absl::StatusOr<Topology> t = MakeTopology(1024, 8);
  absl::StatusOr<std::vector<int64_t>> sizes = ParseByteSizes("4K,1M,64M");
  SimulateOptions options;
  options.nccl_link_gbit = 25;
  std::vector<SimulationRow> rows;
  for (int64_t bytes : *sizes) rows.push_back(*Simulate(Op::kAllReduce, bytes, *t, DefaultCostModel(), options));
  std::string table = FormatTable(Op::kAllReduce, *t, rows);
  std::string line = FormatJsonLine(Op::kAllReduce, *t, rows[0]);
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_FALSE(table.empty() || line.empty());
}

}  // namespace
