// The usage examples of trainers' public headers, compiled and run on small
// synthetic data. Each example's lines appear below exactly as in its header
// (checked by //tests:header_examples_check); lines in between set up its
// inputs or check its results. Where an example names a directory of its
// own, a line after it points the test at its temporary directory instead.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/bootstrap/tcp_communicator.h"
#include "collectives/communicator.h"
#include "collectives/store/hash_store.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/synthetic_dataset.h"
#include "ddp/comm_hook.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "nn/sequential.h"
#include "nn/sgd.h"
#include "fsdp/sharded_optimizer.h"
#include "nn/adam.h"
#include "trainers/ddp_stepper.h"
#include "trainers/fsdp_stepper.h"
#include "trainers/trace.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace {

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

std::shared_ptr<SyntheticDataset> Data(int64_t size, uint64_t seed) {
  SyntheticOptions options;
  options.size = size;
  options.example_shape = {1, 4, 4};
  options.num_classes = 3;
  options.seed = seed;
  return *SyntheticDataset::Create(options);
}

std::unique_ptr<Sequential> Model() {
  Mt19937 gen(0);
  MlpOptions options;
  options.sizes = {16, 8, 3};
  return *MakeMlp(options, gen);
}

// trainers/train_loop.h: 3 epochs of 4 steps, checkpointed in `dir`.
absl::StatusOr<TrainResult> TrainLoopExample(Module* model, std::shared_ptr<const Dataset> train_set,
                                             std::shared_ptr<const Dataset> test_set, const std::string& dir) {
  SgdOptions sgd;
  sgd.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), sgd));
  LocalStepper stepper(*model);                       // or DdpStepper (ddp_stepper.h)
  TrainParts parts;
  parts.stepper = &stepper;
  parts.optimizer = optimizer.get();
  parts.train = train_set;
  parts.test = test_set;
  TrainLoopOptions options;
  options.batch_size = 16;
  options.progress = ProgressMode::kNone;
  options.epochs = 3;
  options.checkpoint_dir = "/tmp/ckpt";
  options.checkpoint_dir = dir;  // (the test: its own directory)
  options.resume = true;
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, parts));
  return result;
}

TEST(TrainersExamplesTest, TrainLoopTrainsCheckpointsAndResumes) {
  const std::string dir = ::testing::TempDir() + "/ckpt";
  std::shared_ptr<SyntheticDataset> train = Data(64, 1), test = Data(32, 2);
  std::unique_ptr<Sequential> model = Model();
  absl::StatusOr<TrainResult> result = TrainLoopExample(model.get(), train, test, dir);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->resumed);
  EXPECT_EQ(result->steps, 12);
  ASSERT_EQ(result->epochs.size(), 3u);
  EXPECT_EQ(result->epochs[2].test.count, 32);  // every test example once
  EXPECT_EQ(result->epochs[2].train.count, 64);
  EXPECT_LT(result->epochs[2].train.loss(), result->epochs[0].train.loss());
  EXPECT_FALSE(ListCheckpoints(dir).empty());
  EXPECT_NE(Values(model->StateDict()[0].second), Values(Model()->StateDict()[0].second));

  // Run again: the newest checkpoint is the end of the run, nothing is left.
  std::unique_ptr<Sequential> again = Model();
  result = TrainLoopExample(again.get(), train, test, dir);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->resumed);
  EXPECT_EQ(result->resumed_from_step, 12);
  EXPECT_EQ(result->steps, 12);
  EXPECT_EQ(Values(again->StateDict()[0].second), Values(model->StateDict()[0].second));
}

// trainers/ddp_stepper.h: two ranks (threads over loopback TCP) train with
// RunTraining through DDP.
absl::StatusOr<TrainResult> DdpStepperExample(std::shared_ptr<Store> store, int rank, Module* model,
                                              std::shared_ptr<const Dataset> train_set) {
  ProcessGroup group;
  group.store = store;
  LOCKSTEP_ASSIGN_OR_RETURN(group.comm, CreateTcpCommunicator(store, rank, 2, {}));
  DdpOptions ddp_options;
  std::unique_ptr<CommHook> hook = MakeAllReduceHook();
  SgdOptions sgd;
  sgd.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), sgd));
  TrainParts parts;
  parts.optimizer = optimizer.get();
  parts.train = train_set;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> stepper,
                            DdpStepper::Create(*model, *group.comm, ddp_options, std::move(hook)));
  parts.stepper = stepper.get();
  parts.comm = group.comm.get();
  TrainLoopOptions options;
  options.batch_size = 8;
  options.rank = rank;
  options.world_size = 2;
  options.progress = ProgressMode::kNone;
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, parts));
  LOCKSTEP_RETURN_IF_ERROR(group.comm->Barrier()->Wait());
  return result;
}

TEST(TrainersExamplesTest, DdpStepperTrainsTwoRanksAlike) {
  auto store = std::make_shared<HashStore>();
  std::shared_ptr<SyntheticDataset> train = Data(64, 3);
  std::vector<std::unique_ptr<Sequential>> models;
  models.push_back(Model());
  models.push_back(Model());
  std::vector<absl::StatusOr<TrainResult>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] { results[rank] = DdpStepperExample(store, rank, models[rank].get(), train); });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << rank << ": " << results[rank].status();
    EXPECT_EQ(results[rank]->steps, 4) << rank;  // 64 examples / 2 ranks / batch 8
  }
  const std::vector<NamedTensor> a = models[0]->StateDict(), b = models[1]->StateDict();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(Values(a[i].second), Values(b[i].second)) << a[i].first;
  EXPECT_NE(Values(a[0].second), Values(Model()->StateDict()[0].second));  // it did train
}

// trainers/fsdp_stepper.h: the same two ranks, fully sharded, with Adam
// over the shards.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(std::vector<NamedParameter> params) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(params), AdamOptions()));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

absl::StatusOr<TrainResult> FsdpStepperExample(std::shared_ptr<Store> store, int rank, Module* model,
                                               std::shared_ptr<const Dataset> train_set, std::vector<NamedTensor>* out) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateTcpCommunicator(store, rank, 2, {}));
  TrainParts parts;
  parts.train = train_set;
  parts.comm = comm.get();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FsdpStepper> stepper, FsdpStepper::Create(*model, *comm));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> optimizer, ShardedOptimizer::Create(
      stepper->fsdp(), [](std::vector<NamedParameter> shards) { return MakeAdam(std::move(shards)); }));
  parts.stepper = stepper.get();
  parts.optimizer = optimizer.get();
  TrainLoopOptions options;
  options.batch_size = 8;
  options.rank = rank;
  options.world_size = 2;
  options.progress = ProgressMode::kNone;
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, parts));
  LOCKSTEP_ASSIGN_OR_RETURN(*out, stepper->fsdp().FullStateDict());
  LOCKSTEP_RETURN_IF_ERROR(comm->Barrier()->Wait());
  return result;
}

TEST(TrainersExamplesTest, FsdpStepperTrainsOneModelOverTwoRanks) {
  auto store = std::make_shared<HashStore>();
  std::shared_ptr<SyntheticDataset> train = Data(64, 3);
  std::vector<std::unique_ptr<Sequential>> models;
  models.push_back(Model());
  models.push_back(Model());
  std::vector<std::vector<NamedTensor>> states(2);
  std::vector<absl::StatusOr<TrainResult>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back(
        [&, rank] { results[rank] = FsdpStepperExample(store, rank, models[rank].get(), train, &states[rank]); });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << rank << ": " << results[rank].status();
    EXPECT_EQ(results[rank]->steps, 4) << rank;
  }
  ASSERT_EQ(states[0].size(), Model()->StateDict().size());
  for (size_t i = 0; i < states[0].size(); ++i) {
    EXPECT_EQ(Values(states[0][i].second), Values(states[1][i].second)) << states[0][i].first;
  }
  EXPECT_NE(Values(states[0][0].second), Values(Model()->StateDict()[0].second));  // it did train
}

// trainers/trace.h. The example writes /tmp/trace, so it is compiled, not
// run; TraceInDir runs the same calls with a file in the test's directory.
absl::Status TraceExample(Sequential& model, const Tensor& images) {
  TraceRecorder trace(/*rank=*/0);
  auto start = TraceRecorder::Clock::now();
  LOCKSTEP_RETURN_IF_ERROR(model.Forward(images).status());  // ... forward ...
  trace.Complete("forward", "step", start, TraceRecorder::Clock::now());
  LOCKSTEP_RETURN_IF_ERROR(trace.WriteFile("/tmp/trace/trace_rank0.json"));
  return absl::OkStatus();
}

absl::StatusOr<size_t> TraceInDir(Sequential& model, const Tensor& images, const std::string& path) {
  TraceRecorder trace(/*rank=*/0);
  auto start = TraceRecorder::Clock::now();
  LOCKSTEP_RETURN_IF_ERROR(model.Forward(images).status());
  trace.Complete("forward", "step", start, TraceRecorder::Clock::now());
  LOCKSTEP_RETURN_IF_ERROR(trace.WriteFile(path));
  return trace.size();
}

TEST(TrainersExamplesTest, TraceRecordsAndWritesEvents) {
  (void)&TraceExample;
  std::unique_ptr<Sequential> model = Model();
  const Tensor images = *Tensor::Zeros({2, 1, 4, 4}, DType::kF32);
  const std::string path = ::testing::TempDir() + "/trace_rank0.json";
  absl::StatusOr<size_t> events = TraceInDir(*model, images, path);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(*events, 1u);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"forward\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"step\""), std::string::npos) << json;
}

}  // namespace
}  // namespace lockstep
