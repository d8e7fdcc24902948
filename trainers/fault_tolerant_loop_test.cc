// RunFaultTolerantTraining in threads over real TCP communicators:
//   * without a failure it is DDP: two members end with the parameters of
//     RunTraining's DDP run over the same data, bit for bit (the elastic
//     sampler deals DistributedSampler's epochs while the world holds);
//   * a newcomer admitted in the middle heals from the members and all
//     three end with one checksum;
//   * a log directory where someone planted a symlink under a member's file
//     name is refused, and the link's target is untouched.
// (Killed members, over processes and both transports:
// trainers/fault_tolerant_kill_test.cc.)
#include "trainers/fault_tolerant_loop.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/elastic/elastic_group.h"
#include "collectives/store/hash_store.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "data/example_dataset.h"
#include "gtest/gtest.h"
#include "trainers/ddp_stepper.h"
#include "trainers/train_loop.h"
#include "trainers/trainer_setup.h"

namespace lockstep {
namespace {

TrainerConfig Config() {
  TrainerConfig c;
  c.model = "mlp:784,16,10";
  c.dataset = "synthetic";
  c.synthetic_train_size = 200;  // 7 batches of 16 a rank, the last partial
  c.synthetic_test_size = 40;
  c.epochs = 2;
  c.batch_size = 16;
  c.num_workers = 0;
  return c;
}

ElasticGroupOptions GroupOptions() {
  ElasticGroupOptions o;
  o.settle = Milliseconds(300);
  o.timeout = Milliseconds(30000);
  o.communicator.communicator.timeout = Milliseconds(30000);
  o.communicator.transport.host = "127.0.0.1";
  o.communicator.transport.timeout = Milliseconds(30000);
  return o;
}

// One member's run: its own model and SGD, DDP rebuilt per group epoch.
absl::StatusOr<std::string> RunMember(std::shared_ptr<Store> store, int member, bool join, const std::string& log_dir,
                                      int64_t await_newcomers_at = -1) {
  const TrainerConfig config = Config();
  LOCKSTEP_ASSIGN_OR_RETURN(TrainerDatasets data, LoadTrainerDatasets(config));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
                            MakeModel(config.model, config.seed, DType::kF32, Device::Cpu()));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> sgd, MakeOptimizer(config, *model));
  std::unique_ptr<ElasticGroup> group;
  if (join) {
    LOCKSTEP_ASSIGN_OR_RETURN(group, ElasticGroup::Join(store, member, GroupOptions()));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(group, ElasticGroup::Create(store, member, 2, GroupOptions()));
  }
  FaultTolerantOptions o;
  o.loop = MakeLoopOptions(config, group->rank(), group->size());
  o.log_dir = log_dir;
  o.admit_every = 1;
  if (await_newcomers_at >= 0) {
    o.inject.await_step = await_newcomers_at;
    o.inject.await_count = 1;
  }
  FaultTolerantParts parts;
  parts.group = group.get();
  parts.model = model.get();
  parts.optimizer = sgd.get();
  Module& m = *model;
  parts.make_stepper = [&m](Communicator& comm,
                            std::unique_ptr<CommHook> hook) -> absl::StatusOr<std::unique_ptr<ModelStepper>> {
    DdpOptions ddp;
    ddp.fault_tolerant = true;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> s, DdpStepper::Create(m, comm, ddp, std::move(hook)));
    return std::unique_ptr<ModelStepper>(std::move(s));
  };
  parts.train = AsExamples(data.train);
  parts.test = AsExamples(data.test);
  parts.joined = join;
  LOCKSTEP_ASSIGN_OR_RETURN(FaultTolerantResult result, RunFaultTolerantTraining(o, parts));
  if (!result.evaluated || result.test.examples != config.synthetic_test_size) {
    return absl::InternalError("the final evaluation did not count every test example once");
  }
  return ParameterChecksum(*model);
}

TEST(FaultTolerantLoopTest, WithoutAFailureItIsDdp) {
  const TrainerConfig config = Config();
  // RunTraining's DDP over two threads.
  std::vector<std::string> ddp(2);
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(TrainerDatasets data, LoadTrainerDatasets(config));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
                              MakeModel(config.model, config.seed, DType::kF32, Device::Cpu()));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> sgd, MakeOptimizer(config, *model));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> stepper, DdpStepper::Create(*model, comm, {}, nullptr));
    TrainLoopOptions o = MakeLoopOptions(config, comm.rank(), comm.size());
    o.progress = ProgressMode::kNone;
    TrainParts parts;
    parts.stepper = stepper.get();
    parts.optimizer = sgd.get();
    parts.train = data.train;
    parts.comm = &comm;
    LOCKSTEP_RETURN_IF_ERROR(RunTraining(o, parts).status());
    ddp[comm.rank()] = ParameterChecksum(*model);
    return absl::OkStatus();
  }));
  ASSERT_EQ(ddp[0], ddp[1]);
  // The fault-tolerant loop, two members, no failure.
  auto store = std::make_shared<HashStore>();
  std::vector<absl::StatusOr<std::string>> ft(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int m = 0; m < 2; ++m) threads.emplace_back([&, m] { ft[m] = RunMember(store, m, false, ""); });
  for (std::thread& t : threads) t.join();
  for (int m = 0; m < 2; ++m) {
    ASSERT_TRUE(ft[m].ok()) << "member " << m << ": " << ft[m].status();
    EXPECT_EQ(*ft[m], ddp[0]) << "member " << m;
  }
}

TEST(FaultTolerantLoopTest, ANewcomerHealsAndEveryMemberEndsAlike) {
  auto store = std::make_shared<HashStore>();
  std::vector<absl::StatusOr<std::string>> sums(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  // The members wait before step 5 until the newcomer has registered.
  for (int m = 0; m < 2; ++m) threads.emplace_back([&, m] { sums[m] = RunMember(store, m, false, "", 5); });
  threads.emplace_back([&] { sums[2] = RunMember(store, 7, true, ""); });
  for (std::thread& t : threads) t.join();
  for (int m = 0; m < 3; ++m) ASSERT_TRUE(sums[m].ok()) << "member " << m << ": " << sums[m].status();
  EXPECT_EQ(*sums[0], *sums[1]);
  EXPECT_EQ(*sums[0], *sums[2]);
}

TEST(FaultTolerantLoopTest, APlantedLinkInTheLogDirectoryIsRefused) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ftlog";
  std::filesystem::create_directories(dir);
  const std::string target = dir + "/precious";
  { std::ofstream(target) << "keep me\n"; }
  ASSERT_EQ(::symlink(target.c_str(), (dir + "/member-0.jsonl").c_str()), 0);
  auto store = std::make_shared<HashStore>();
  std::vector<absl::StatusOr<std::string>> out(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int m = 0; m < 2; ++m) threads.emplace_back([&, m] { out[m] = RunMember(store, m, false, dir); });
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(absl::IsFailedPrecondition(out[0].status())) << out[0].status();
  EXPECT_NE(out[0].status().message().find("member-0.jsonl"), std::string::npos) << out[0].status();
  EXPECT_NE(out[0].status().message().find("--ft_log_dir"), std::string::npos) << out[0].status();
  std::ifstream in(target);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), "keep me\n");
}

}  // namespace
}  // namespace lockstep
