#include "trainers/train_loop.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/testing/group.h"
#include "core/cuda/cuda_runtime.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "data/distributed_sampler.h"
#include "data/example_dataset.h"
#include "data/synthetic_dataset.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

std::shared_ptr<const Dataset> Data(int64_t n, uint64_t seed = 3) {
  SyntheticOptions o;
  o.size = n;
  o.example_shape = {1, 4, 4};
  o.seed = seed;
  return *SyntheticDataset::Create(o);
}

std::unique_ptr<Sequential> Model(uint64_t seed = 0) {
  Mt19937 gen(seed);
  MlpOptions mlp;
  mlp.sizes = {16, 12, 10};
  return *MakeMlp(mlp, gen);
}

std::string TempPath(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/train_loop_test_" + name;
  std::filesystem::remove_all(path);
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A stepper that also reports a communication event per backward on the
// trace it was given, as DdpStepper does for each bucket.
class TracingStepper : public LocalStepper {
 public:
  using LocalStepper::LocalStepper;
  void AttachTrace(TraceRecorder* trace) override { trace_ = trace; }
  absl::Status Backward(const Tensor& grad_output) override {
    const auto start = TraceRecorder::Clock::now();
    LOCKSTEP_RETURN_IF_ERROR(LocalStepper::Backward(grad_output));
    if (trace_) {
      trace_->Complete("allreduce bucket 0", "ddp", start, TraceRecorder::Clock::now(), TraceRecorder::kCommThread,
                       {{"bytes", 4096}});
    }
    return absl::OkStatus();
  }

 private:
  TraceRecorder* trace_ = nullptr;
};

struct Trainee {
  std::unique_ptr<Sequential> model = Model();
  std::unique_ptr<Sgd> sgd;
  TracingStepper stepper{*model};
  Trainee() {
    SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    sgd = *Sgd::Create(model->NamedParameters(), o);
  }
  absl::StatusOr<TrainResult> Train(const TrainLoopOptions& options, Communicator* comm = nullptr,
                                    int64_t test_size = 37) {
    TrainParts parts;
    parts.stepper = &stepper;
    parts.optimizer = sgd.get();
    parts.train = Data(100);
    parts.test = Data(test_size, 4);
    parts.comm = comm;
    return RunTraining(options, parts);
  }
};

TrainLoopOptions Quiet() {
  TrainLoopOptions o;
  o.epochs = 2;
  o.batch_size = 16;
  o.progress = ProgressMode::kNone;
  return o;
}

TEST(TrainLoopTest, MetricsAreJsonLinesWithEveryField) {
  TrainLoopOptions o = Quiet();
  o.metrics_path = TempPath("metrics.jsonl");
  o.num_workers = 1;
  Trainee run;
  absl::StatusOr<TrainResult> r = run.Train(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::ifstream in(o.metrics_path);
  std::string line;
  int epochs = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << line;
    ASSERT_EQ(j.value("event", ""), "epoch") << line;
    for (const char* key :
         {"epoch", "step", "loss", "accuracy", "test_loss", "test_accuracy", "test_examples", "samples_per_s",
          "data_wait_s", "forward_s", "backward_s", "optimizer_s", "peak_rss_bytes", "seconds"}) {
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
    }
    EXPECT_EQ(j["epoch"], epochs);
    EXPECT_EQ(j["step"], 7 * (epochs + 1));  // ceil(100 / 16) steps per epoch
    EXPECT_EQ(j["test_examples"], 37);
    EXPECT_GT(j["samples_per_s"].get<double>(), 0);
    EXPECT_GE(j["accuracy"].get<double>(), 0);
    EXPECT_LE(j["accuracy"].get<double>(), 1);
    ASSERT_EQ(j["peak_rss_bytes"].size(), 1u);
    EXPECT_GT(j["peak_rss_bytes"][0].get<int64_t>(), 1 << 20);
    // A CPU run has no CUDA allocator peaks to report.
    EXPECT_FALSE(j.contains("cuda_peak_allocated_bytes")) << line;
    EXPECT_FALSE(j.contains("cuda_peak_reserved_bytes")) << line;
    ++epochs;
  }
  EXPECT_EQ(epochs, 2);
}

TEST(TrainLoopTest, CudaRunReportsTheDevicePeaks) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  TrainLoopOptions o = Quiet();
  o.epochs = 1;
  o.device = Device::Cuda(0);
  o.metrics_path = TempPath("cuda_metrics.jsonl");
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {16, 12, 10};
  mlp.device = o.device;
  std::unique_ptr<Sequential> model = *MakeMlp(mlp, gen);
  LocalStepper stepper(*model);
  SgdOptions sgd_options;
  sgd_options.lr = 0.1;
  std::unique_ptr<Sgd> sgd = *Sgd::Create(model->NamedParameters(), sgd_options);
  TrainParts parts;
  parts.stepper = &stepper;
  parts.optimizer = sgd.get();
  parts.train = Data(100);
  absl::StatusOr<TrainResult> r = RunTraining(o, parts);
  ASSERT_TRUE(r.ok()) << r.status();
  std::ifstream in(o.metrics_path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_EQ(j["cuda_peak_allocated_bytes"].size(), 1u) << line;
  ASSERT_EQ(j["cuda_peak_reserved_bytes"].size(), 1u) << line;
  const int64_t allocated = j["cuda_peak_allocated_bytes"][0].get<int64_t>();
  EXPECT_GT(allocated, 0);  // At least the parameters.
  EXPECT_GE(j["cuda_peak_reserved_bytes"][0].get<int64_t>(), allocated);
  EXPECT_EQ(j["peak_rss_bytes"].size(), 1u);
}

TEST(TrainLoopTest, TraceHasCompleteEventsForEveryPhase) {
  TrainLoopOptions o = Quiet();
  o.trace_dir = TempPath("trace");
  o.max_steps = 9;  // Stops mid-epoch 1: the trace is still written.
  Trainee run;
  absl::StatusOr<TrainResult> r = run.Train(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const nlohmann::json j = nlohmann::json::parse(ReadAll(o.trace_dir + "/trace_rank0.json"), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_TRUE(j.contains("traceEvents"));
  std::map<std::string, int> count;
  for (const nlohmann::json& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_EQ(e["pid"], 0);
    ++count[e["name"].get<std::string>()];
    if (e["name"] == "allreduce bucket 0") {
      EXPECT_EQ(e["tid"], TraceRecorder::kCommThread);
      EXPECT_EQ(e["args"]["bytes"], 4096);
    }
  }
  for (const char* name : {"data wait", "forward", "backward", "optimizer step", "allreduce bucket 0"}) {
    EXPECT_EQ(count[name], 9) << name;
  }
  EXPECT_EQ(count["evaluate"], 1);  // After epoch 0 only.
}

TEST(TrainLoopTest, TwoRanksOverACommunicatorReportEveryTestExampleOnce) {
  const std::string metrics = TempPath("two_ranks.jsonl");
  std::vector<TrainResult> results(2);
  const std::vector<absl::Status> statuses = testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    TrainLoopOptions o = Quiet();
    o.epochs = 1;
    o.rank = comm.rank();
    o.world_size = comm.size();
    o.metrics_path = metrics;  // Only rank 0 writes it.
    Trainee run;
    LOCKSTEP_ASSIGN_OR_RETURN(results[comm.rank()], run.Train(o, &comm, /*test_size=*/37));
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (const TrainResult& r : results) {
    ASSERT_EQ(r.epochs.size(), 1u);
    EXPECT_EQ(r.epochs[0].test.count, 37);    // 19 + 18, no padding
    EXPECT_EQ(r.epochs[0].train.count, 100);  // 50 per rank: 100 divides evenly
    EXPECT_EQ(r.epochs[0].peak_rss_bytes.size(), 2u);
    EXPECT_TRUE(r.epochs[0].cuda_peak_allocated_bytes.empty());
    EXPECT_EQ(r.steps, 4);  // ceil(50 / 16)
  }
  EXPECT_EQ(results[0].epochs[0].test.correct, results[1].epochs[0].test.correct);
  std::ifstream in(metrics);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["test_examples"], 37);
  EXPECT_FALSE(std::getline(in, line));
}

TEST(TrainLoopTest, BadOptionsAreErrors) {
  Trainee run;
  TrainLoopOptions o = Quiet();
  o.world_size = 2;  // but no communicator
  EXPECT_EQ(run.Train(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Quiet();
  o.epochs = 0;
  EXPECT_EQ(run.Train(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Quiet();
  o.metrics_path = "/nonexistent-dir/metrics.jsonl";
  EXPECT_EQ(run.Train(o).status().code(), absl::StatusCode::kFailedPrecondition);
}

// --log_every: a "step" line every N steps with the loss and accuracy of
// those steps, their mean over the epoch's lines weighted by their steps
// being the epoch's loss when N divides the epoch.
TEST(TrainLoopTest, LogEveryWritesStepLines) {
  TrainLoopOptions o = Quiet();
  o.epochs = 1;
  o.batch_size = 20;  // 100 / 20 = 5 full steps: equal weights
  o.log_every = 1;
  o.report_perplexity = true;
  o.metrics_path = TempPath("log_every.jsonl");
  Trainee run;
  TrainParts parts;
  parts.stepper = &run.stepper;
  parts.optimizer = run.sgd.get();
  parts.train_examples = AsExamples(Data(100));
  parts.test_examples = AsExamples(Data(37, 4));
  absl::StatusOr<TrainResult> r = RunTraining(o, parts);
  ASSERT_TRUE(r.ok()) << r.status();
  std::ifstream in(o.metrics_path);
  std::string line;
  std::vector<nlohmann::json> steps;
  nlohmann::json epoch;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    if (j["event"] == "step") steps.push_back(j);
    if (j["event"] == "epoch") epoch = j;
  }
  ASSERT_EQ(steps.size(), 5u);
  double mean = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["step"], static_cast<int>(i) + 1);
    EXPECT_GT(steps[i]["samples_per_s"].get<double>(), 0);
    // Both printed with 9 significant digits (relative error <= 5e-9 each);
    // exp turns the loss's absolute error loss * 5e-9 into a relative one.
    const double loss = steps[i]["loss"].get<double>();
    EXPECT_NEAR(steps[i]["perplexity"].get<double>(), std::exp(loss), std::exp(loss) * (loss + 1) * 5.01e-9);
    mean += steps[i]["loss"].get<double>() / 5;
  }
  EXPECT_NEAR(epoch["loss"].get<double>(), mean, 1e-6);
  EXPECT_EQ(epoch["train_examples"], 100);
  EXPECT_EQ(epoch["test_examples"], 37);
  EXPECT_TRUE(epoch.contains("test_perplexity"));
}

// checkpoint_metadata travels with every checkpoint, and a resume with
// another value is refused, naming the key and both values.
TEST(TrainLoopTest, CheckpointMetadataMustMatchOnResume) {
  TrainLoopOptions o = Quiet();
  o.epochs = 1;
  o.checkpoint_dir = TempPath("ckpt_metadata");
  o.checkpoint_metadata["model.config"] = "{\"width\":16}";
  {
    Trainee run;
    absl::StatusOr<TrainResult> r = run.Train(o);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  o.resume = true;
  o.epochs = 2;
  {
    Trainee run;
    absl::StatusOr<TrainResult> r = run.Train(o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->resumed);
  }
  o.checkpoint_metadata["model.config"] = "{\"width\":32}";
  o.epochs = 3;
  Trainee run;
  absl::StatusOr<TrainResult> r = run.Train(o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("model.config"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("{\"width\":16}"), std::string::npos) << r.status();
  // A key of the loop's own is refused when saving.
  o.resume = false;
  o.checkpoint_dir = TempPath("ckpt_reserved");
  o.checkpoint_metadata = {{"trainer.batch", "3"}};
  Trainee other;
  EXPECT_EQ(other.Train(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
