// The usage examples of trainers' public headers, compiled and run on small
// synthetic data. Each example's lines appear below exactly as in its header
// (checked by //tests:header_examples_check); lines in between set up its
// inputs or check its results. Where an example names a directory of its
// own, a line after it points the test at its temporary directory instead.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <functional>
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
#include "collectives/elastic/elastic_group.h"
#include "trainers/ddp_stepper.h"
#include "trainers/fault_injection.h"
#include "trainers/fault_tolerant_loop.h"
#include "trainers/fault_tolerant_rank.h"
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

// trainers/fault_injection.h
absl::StatusOr<FaultInjection> FaultInjectionExample() {
  LOCKSTEP_ASSIGN_OR_RETURN(FaultInjection inject,
                            ParseFaultInjection("backward@8:2,await@14:1"));
  // member 2 SIGKILLs itself in step 8's backward; before step 14 the
  // members wait until one newcomer has registered
  return inject;
}

TEST(TrainersExamplesTest, FaultInjectionParsesItsItems) {
  absl::StatusOr<FaultInjection> inject = FaultInjectionExample();
  ASSERT_TRUE(inject.ok()) << inject.status();
  EXPECT_TRUE(inject->Kills(KillPoint::kBackward, 8, 2));
  EXPECT_FALSE(inject->Kills(KillPoint::kBackward, 8, 3));
  EXPECT_FALSE(inject->Kills(KillPoint::kLastBucket, 8, 2));
  EXPECT_EQ(inject->await_step, 14);
  EXPECT_EQ(inject->await_count, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseFaultInjection("backward@x:1").status()));
}

// trainers/fault_tolerant_loop.h: one member (a group may be any size; the
// kill tests run three), 2 epochs of 8 steps.
absl::StatusOr<FaultTolerantResult> FaultTolerantLoopExample(std::unique_ptr<ElasticGroup>& group,
                                                             std::unique_ptr<Sequential>& model,
                                                             std::shared_ptr<const Dataset> train_set,
                                                             std::string* checksum) {
  SgdOptions sgd;
  sgd.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), sgd));
  FaultTolerantParts parts;
  parts.group = group.get();                 // ElasticGroup::Create or ::Join
  parts.model = model.get();
  parts.optimizer = optimizer.get();
  parts.make_stepper = [&](Communicator& comm, std::unique_ptr<CommHook> hook)
      -> absl::StatusOr<std::unique_ptr<ModelStepper>> {
    DdpOptions ddp;
    ddp.fault_tolerant = true;
    return DdpStepper::Create(*model, comm, ddp, std::move(hook));
  };
  parts.train = AsExamples(train_set);
  FaultTolerantOptions options;
  options.loop.epochs = 2;
  options.loop.batch_size = 8;
  LOCKSTEP_ASSIGN_OR_RETURN(FaultTolerantResult result, RunFaultTolerantTraining(options, parts));
  std::printf("rank %d: parameter checksum %s\n", group->rank(), ParameterChecksum(*model).c_str());
  *checksum = ParameterChecksum(*model);
  return result;
}

TEST(TrainersExamplesTest, FaultTolerantLoopTrainsOneMember) {
  auto store = std::make_shared<HashStore>();
  ElasticGroupOptions options;
  options.communicator.transport.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<ElasticGroup>> group = ElasticGroup::Create(store, 0, 1, options);
  ASSERT_TRUE(group.ok()) << group.status();
  std::unique_ptr<Sequential> model = Model();
  std::string checksum;
  absl::StatusOr<FaultTolerantResult> result = FaultTolerantLoopExample(*group, model, Data(64, 3), &checksum);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 16);  // 64 examples / batch 8, 2 epochs
  EXPECT_EQ(result->epochs_done, 2);
  EXPECT_EQ(result->reformations, 0);
  EXPECT_EQ(checksum.size(), 16u);
}

// trainers/fault_tolerant_rank.h: rank 0 of 1, as a launcher would start it.
std::function<absl::StatusOr<std::unique_ptr<ModelStepper>>(Communicator&, std::unique_ptr<CommHook>)> FtStepper(
    Module* model) {
  return [model](Communicator& comm, std::unique_ptr<CommHook> hook) -> absl::StatusOr<std::unique_ptr<ModelStepper>> {
    DdpOptions ddp;
    ddp.fault_tolerant = true;
    return DdpStepper::Create(*model, comm, ddp, std::move(hook));
  };
}

// What the trainers load (trainers/trainer_datasets.h's TrainerDatasets).
struct Datasets {
  std::shared_ptr<const Dataset> train;
};

absl::Status FaultTolerantRankExample(const TrainerConfig& config, const Datasets& data,
                                      std::unique_ptr<Sequential>& model, std::unique_ptr<Sgd>& optimizer) {
  FaultTolerantTrainer t;
  t.program = "ddp_trainer";
  t.model = model.get();
  t.optimizer = optimizer.get();
  t.make_stepper = FtStepper(model.get());  // DDP with DdpOptions::fault_tolerant over the given communicator
  t.train = AsExamples(data.train);
  return RunFaultTolerantTrainer(config, t);
}

// A port nobody listens on now.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(TrainersExamplesTest, FaultTolerantRankTrainsAsRankZeroOfOne) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"},
           {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}}) {
    setenv(name.c_str(), value.c_str(), 1);
  }
  TrainerConfig config;
  config.epochs = 1;
  config.batch_size = 8;
  Datasets data;
  data.train = Data(32, 3);
  std::unique_ptr<Sequential> model = Model();
  SgdOptions sgd;
  sgd.lr = 0.1;
  absl::StatusOr<std::unique_ptr<Sgd>> optimizer = Sgd::Create(model->NamedParameters(), sgd);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  const std::vector<float> before = Values(model->StateDict()[0].second);
  const absl::Status s = FaultTolerantRankExample(config, data, model, *optimizer);
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    unsetenv(name);
  }
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_NE(Values(model->StateDict()[0].second), before);  // it trained
}

}  // namespace
}  // namespace lockstep
