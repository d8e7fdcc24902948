// Kill tests of a fault-tolerant run: real processes under
// `lockstep-run --fault_tolerant --nproc_per_node=3`, ddp_trainer
// --fault_tolerant, over TCP and over shared memory. A seed chooses where a
// rank dies (trainers/fault_injection.h): mid-backward, right after posting
// the last bucket's all-reduce, or during the re-formation's agreement (a
// second death while the group re-forms after a first). Then:
//   * the run finishes, the launcher names the lost worker, the re-formed
//     group and the replacement's return;
//   * every committed step is in the members' logs, and every member that
//     logged a step logged the same parameters (bit for bit) and batches;
//   * the committed trajectory equals a reference recomputed here, in
//     threads over the same transport, from the logged batches: one DDP per
//     group epoch, as the run builds them;
//   * a replacement's parameters equal the survivors' from its first step,
//     and every rank ends with one checksum.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/communicator_factory.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "data/example_dataset.h"
#include "ddp/comm_hook.h"
#include "ddp/ddp_options.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/blas_kernels.h"
#include "nn/last_dim_cross_entropy.h"
#include "trainers/ddp_stepper.h"
#include "trainers/fault_tolerant_loop.h"
#include "trainers/trainer_setup.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

std::string Tmp(const std::string& name) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + name; }

// The run's configuration, shared by the trainer's flags and the reference.
TrainerConfig Config() {
  TrainerConfig c;
  c.model = "mlp:784,32,10";
  c.dataset = "synthetic";
  c.synthetic_train_size = 960;
  c.synthetic_test_size = 200;
  c.epochs = 2;
  c.batch_size = 16;
  c.lr = 0.1;
  c.momentum = 0.9;
  c.optimizer = "sgd";
  c.seed = 0;
  return c;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Kill {
  std::string spec;   // LOCKSTEP_FT_KILL
  std::string point;  // what the seed chose
  int victims = 1;    // workers killed
  bool hook = false;  // the run reduces through allreduce_hook
};

// The seed's choice: a point, a step in [3, 9], and the victims.
Kill Choose(int seed) {
  Kill k;
  const int step = 3 + (seed * 5) % 7;
  switch (seed % 3) {
    case 0:
      k.point = "backward";
      k.spec = absl::StrCat("backward@", step, ":2");
      break;
    case 1:
      k.point = "last_bucket";
      k.spec = absl::StrCat("last_bucket@", step, ":1");
      k.hook = true;
      break;
    default:
      k.point = "agreement";
      k.spec = absl::StrCat("backward@", step, ":2,agreement@", step, ":1");
      k.victims = 2;
      break;
  }
  // The replacements are in before step 20, so they train and are checked.
  absl::StrAppend(&k.spec, ",await@20:", k.victims);
  return k;
}

struct Step {
  int64_t step = 0, epoch = 0, group_epoch = 0, world = 0;
  std::string checksum;
  std::vector<std::vector<int64_t>> batches;
  std::set<int> members;  // who logged it
};

// The reference: for each group epoch, `world` threads over `transport`
// build a fresh model and SGD, load the state before the epoch's first
// step, wrap it in DDP and take the epoch's steps on the logged batches;
// after each step rank 0's checksum must be the logged one.
void ExpectReference(const std::string& transport, const Kill& kill, const std::map<int64_t, Step>& steps) {
  TrainerConfig config = Config();
  absl::StatusOr<TrainerDatasets> data = LoadTrainerDatasets(config);
  ASSERT_TRUE(data.ok()) << data.status();
  std::shared_ptr<const ExampleDataset> train = AsExamples(data->train);
  std::vector<NamedTensor> model_state, optimizer_state;  // empty: the initial ones
  auto it = steps.begin();
  while (it != steps.end()) {
    const int64_t group_epoch = it->second.group_epoch;
    const int world = static_cast<int>(it->second.world);
    std::vector<const Step*> segment;
    for (; it != steps.end() && it->second.group_epoch == group_epoch; ++it) segment.push_back(&it->second);
    std::vector<std::string> sums(segment.size());
    std::vector<NamedTensor> next_model, next_optimizer;
    auto rank_fn = [&](Communicator& comm) -> absl::Status {
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
                                MakeModel(config.model, config.seed, DType::kF32, Device::Cpu()));
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> sgd, MakeOptimizer(config, *model));
      if (!model_state.empty()) {
        LOCKSTEP_RETURN_IF_ERROR(model->LoadStateDict(model_state));
        LOCKSTEP_RETURN_IF_ERROR(sgd->LoadStateTensors(optimizer_state));
      }
      DdpOptions ddp;
      ddp.fault_tolerant = true;
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> stepper,
                                DdpStepper::Create(*model, comm, ddp, kill.hook ? MakeAllReduceHook() : nullptr));
      for (size_t i = 0; i < segment.size(); ++i) {
        LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> fields,
                                  StackExamples(*train, segment[i]->batches[comm.rank()], false));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, stepper->Forward(fields[0]));
        LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, TargetsCrossEntropy(logits, fields[1]));
        LOCKSTEP_RETURN_IF_ERROR(stepper->Backward(ce.grad_logits));
        LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
        LOCKSTEP_RETURN_IF_ERROR(sgd->ZeroGrad());
        if (comm.rank() == 0) sums[i] = ParameterChecksum(*model);
      }
      if (comm.rank() == 0) {
        next_model = model->StateDict();
        next_optimizer = sgd->StateTensors();
        for (auto& [name, t] : next_model) {
          LOCKSTEP_ASSIGN_OR_RETURN(t, t.Clone());
        }
        for (auto& [name, t] : next_optimizer) {
          LOCKSTEP_ASSIGN_OR_RETURN(t, t.Clone());
        }
      }
      return absl::OkStatus();
    };
    // The communicators as the trainer makes them (CreateCommunicator, the
    // transport forced as LOCKSTEP_TRANSPORT forces it).
    CommunicatorFactoryOptions factory;
    factory.transport = transport;
    factory.tcp.host = "127.0.0.1";
    testing::ExpectAllOk(testing::RunThreadsWith(
        world, rank_fn,
        [&factory](std::shared_ptr<Store> store, int rank, int size) {
          return CreateCommunicator(std::move(store), rank, size, factory);
        },
        Milliseconds(60000)));
    for (size_t i = 0; i < segment.size(); ++i) {
      EXPECT_EQ(sums[i], segment[i]->checksum)
          << "step " << segment[i]->step << " (group epoch " << group_epoch << ", world " << world
          << "): the run's parameters differ from the reference recomputed from its committed batches";
    }
    model_state = std::move(next_model);
    optimizer_state = std::move(next_optimizer);
  }
}

class FaultTolerantKillTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FaultTolerantKillTest, TheGroupGoesOnAndTheTrajectoryIsTheReferences) {
  const auto& [transport, seed] = GetParam();
  const Kill kill = Choose(seed);
  const std::string dir = Tmp(absl::StrCat("ft_", transport, "_", seed));
  fs::remove_all(dir);
  ASSERT_TRUE(fs::create_directories(dir));
  const std::string out = dir + "/out.txt";
  const TrainerConfig c = Config();
  SubprocessOptions options;
  options.argv = {fs::absolute("tools/launch/lockstep-run").string(),
                  "--standalone",
                  "--fault_tolerant",
                  "--max_restarts=1",
                  "--nproc_per_node=3",
                  "--monitor_interval=0.05",
                  fs::absolute("trainers/ddp_trainer").string(),
                  "--fault_tolerant",
                  "--ft_settle=30",  // the launcher says who died: a hang here would be the bug
                  absl::StrCat("--model=", c.model),
                  "--dataset=synthetic",
                  absl::StrCat("--synthetic_train_size=", c.synthetic_train_size),
                  absl::StrCat("--synthetic_test_size=", c.synthetic_test_size),
                  absl::StrCat("--epochs=", c.epochs),
                  absl::StrCat("--batch_size=", c.batch_size),
                  "--ft_log_dir=" + dir};
  // The reference below runs in this process: the trainer must use its
  // BLAS kernels (it would otherwise pick faster ones, nn/blas_kernels.h).
  options.env = {{"LOCKSTEP_FT_KILL", kill.spec},
                 {"LOCKSTEP_TRANSPORT", transport},
                 {"LOCKSTEP_RDZV_TOKEN", "kill-test"},
                 {"OPENBLAS_CORETYPE", BlasCoreName()}};
  FILE* f = std::fopen(out.c_str(), "w");
  ASSERT_NE(f, nullptr);
  options.stdout_fd = fileno(f);
  options.stderr_fd = fileno(f);
  options.alarm_seconds = 120;
  absl::StatusOr<Subprocess> run = Subprocess::Spawn(options);
  std::fclose(f);
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<ExitStatus> status = run->Wait();
  const std::string text = Read(out);
  SCOPED_TRACE(absl::StrCat("kill ", kill.spec, " over ", transport, "; output:\n", text));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->success()) << status->ToString();

  // The launcher's lines: each victim lost, the group re-formed, each back.
  const std::regex lost(
      R"(\[lockstep-run\] worker (\d) lost \(killed by signal 9[^;]*; group re-formed with (\d) ranks in [0-9.]+ s)");
  const std::regex back(R"(\[lockstep-run\] worker (\d) rejoined after [0-9.]+ s)");
  const auto count = [&](const std::regex& re) {
    return std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
  };
  EXPECT_EQ(count(lost), kill.victims);
  EXPECT_EQ(count(back), kill.victims);
  // Every rank's last checksum, one value.
  const std::regex sum(R"(\[(\d)\]:rank (\d): parameter checksum ([0-9a-f]{16}))");
  std::set<std::string> finals;
  for (auto m = std::sregex_iterator(text.begin(), text.end(), sum); m != std::sregex_iterator(); ++m) {
    finals.insert((*m)[3]);
  }
  EXPECT_EQ(count(sum), 3);
  EXPECT_EQ(finals.size(), 1u);

  // The members' logs: one record per committed step.
  std::map<int64_t, Step> steps;
  std::set<int> replacements;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("member-", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      Step s;
      s.step = j["step"];
      s.group_epoch = j["group_epoch"];
      s.epoch = j["epoch"];
      s.world = j["world"];
      s.checksum = j["checksum"];
      s.batches = j["batches"].get<std::vector<std::vector<int64_t>>>();
      const int member = j["member"];
      if (member >= 3) replacements.insert(member);
      auto [at, fresh] = steps.emplace(s.step, s);
      if (!fresh) {
        EXPECT_EQ(at->second.checksum, s.checksum) << "members " << *at->second.members.begin() << " and " << member
                                                   << " disagree on the parameters after step " << s.step;
        EXPECT_EQ(at->second.batches, s.batches) << "step " << s.step;
        EXPECT_EQ(at->second.group_epoch, s.group_epoch) << "step " << s.step;
      }
      at->second.members.insert(member);
    }
  }
  ASSERT_FALSE(steps.empty());
  // No committed step lost: 1..last, each with every rank's batch.
  EXPECT_EQ(steps.begin()->first, 1);
  EXPECT_EQ(steps.rbegin()->first, static_cast<int64_t>(steps.size()));
  for (const auto& [n, s] : steps) EXPECT_EQ(s.batches.size(), static_cast<size_t>(s.world)) << "step " << n;
  // The replacements trained (and so matched the survivors from their first step).
  EXPECT_EQ(replacements.size(), static_cast<size_t>(kill.victims));
  // Each epoch reads every example (re-dealing loses none), and repeats
  // fewer than a world's worth of padding per group it ran in.
  std::map<int64_t, std::vector<int64_t>> reads;
  std::map<int64_t, std::set<int64_t>> groups;
  for (const auto& [n, s] : steps) {
    for (const auto& b : s.batches) reads[s.epoch].insert(reads[s.epoch].end(), b.begin(), b.end());
    groups[s.epoch].insert(s.group_epoch);
  }
  EXPECT_EQ(reads.size(), static_cast<size_t>(c.epochs));
  for (const auto& [epoch, r] : reads) {
    EXPECT_EQ(std::set<int64_t>(r.begin(), r.end()).size(), static_cast<size_t>(c.synthetic_train_size))
        << "epoch " << epoch;
    EXPECT_LT(r.size(), static_cast<size_t>(c.synthetic_train_size) + 3 * groups[epoch].size()) << "epoch " << epoch;
  }
  ExpectReference(transport, kill, steps);
}

// Three seeds cover the three points; each over both transports.
INSTANTIATE_TEST_SUITE_P(Seeds, FaultTolerantKillTest,
                         ::testing::Combine(::testing::Values("tcp", "shm"), ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_seed", std::get<1>(info.param));
                         });

}  // namespace
}  // namespace lockstep
