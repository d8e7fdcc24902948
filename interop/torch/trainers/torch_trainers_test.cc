// The libtorch reference trainers, as users run them (2 local ranks):
//   * each learns: with --log_every=1, the mean loss of the last 10 of 40
//     steps is below a stated fraction of the first step's (ResNet-18 on
//     Fashion-MNIST: half; the Transformer, smaller than its defaults so
//     that the test is quick, on fortunes: 0.7, where predicting the byte
//     frequencies alone gives about 3.3 / 4.86);
//   * each resumes bit-identically after a kill: a run SIGKILLed (launcher
//     and ranks) right after step 9, resumed from its step-8 checkpoint to
//     step 12, ends with exactly the checkpoint of an uninterrupted run to
//     step 12 (every model, buffer and optimizer tensor, bit for bit);
//   * with --fsdp each writes DDP's checkpoints bit for bit (world 2, f32:
//     parameters, buffers and the consolidated optimizer state), samples
//     from the gathered model, and resumes from its own checkpoint and
//     into DDP.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/checkpoint/safetensors.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

const std::string& Tmp() {
  static const std::string* dir = new std::string(std::getenv("TEST_TMPDIR"));
  return *dir;
}

std::vector<std::string> Resnet(std::vector<std::string> extra) {
  std::vector<std::string> argv = {"interop/torch/trainers/resnet18_trainer",
                                   "--nproc=2",
                                   "--dataset=fashion-mnist",
                                   "--batch_size=32",
                                   "--num_workers=1",
                                   "--seed=5"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::vector<std::string> Transformer(std::vector<std::string> extra) {
  std::vector<std::string> argv = {"interop/torch/trainers/char_transformer_trainer",
                                   "--nproc=2",
                                   "--layers=2",
                                   "--dim=64",
                                   "--heads=2",
                                   "--context=64",
                                   "--batch_size=16",
                                   "--num_workers=1",
                                   "--seed=5",
                                   "--lr=0.003",
                                   "--sample_length=40"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Starts `argv` in its own process group (the launcher and its ranks),
// its stdout on a pipe whose read end goes to *read_fd; a 240 s alarm.
absl::StatusOr<Subprocess> SpawnPiped(const std::vector<std::string>& argv, int* read_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  SubprocessOptions options;
  options.argv = argv;
  options.stdout_fd = fds[1];
  options.new_process_group = true;
  options.alarm_seconds = 240;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  close(fds[1]);
  *read_fd = fds[0];
  return child;
}

// Runs to the end; returns its stdout.
std::string RunTrainer(const std::vector<std::string>& argv) {
  int fds[1] = {-1};
  absl::StatusOr<Subprocess> child = SpawnPiped(argv, &fds[0]);
  EXPECT_TRUE(child.ok()) << child.status();
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, n);
  close(fds[0]);
  if (!child.ok()) return out;
  absl::StatusOr<ExitStatus> status = child->Wait(Clock::now() + std::chrono::seconds(240));
  EXPECT_TRUE(status.ok()) << status.status();
  if (status.ok()) EXPECT_TRUE(status->success()) << status->ToString() << "\n" << out;
  return out;
}

// The "step" lines' losses, in order.
std::vector<double> StepLosses(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::vector<double> losses;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    if (j.value("event", "") != "step") continue;
    EXPECT_EQ(j["step"], static_cast<int>(losses.size()) + 1) << line;
    losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

void ExpectLearns(const std::vector<std::string>& argv, const std::string& name, double fraction) {
  const std::string metrics = Tmp() + "/" + name + ".jsonl";
  std::vector<std::string> args = argv;
  args.insert(args.end(), {"--max_steps=40", "--log_every=1", "--metrics=" + metrics});
  const std::string out = RunTrainer(args);
  EXPECT_NE(out.find("final test loss"), std::string::npos) << out;
  const std::vector<double> losses = StepLosses(metrics);
  ASSERT_EQ(losses.size(), 40u) << out;
  double last = 0;
  for (size_t i = 30; i < 40; ++i) last += losses[i] / 10;
  EXPECT_LT(last, fraction * losses[0]) << name << ": first step's loss " << losses[0] << ", last 10 steps' mean "
                                        << last;
}

TEST(TorchTrainersTest, ResNet18Learns) { ExpectLearns(Resnet({"--width=16", "--lr=0.02"}), "resnet18", 0.5); }

// --grad_accum_steps: N micro-batches per optimizer step, only the last
// synchronizing, so the bytes sent per example fall by N exactly once the
// buckets are rebuilt (the third step on: the second carries DDP's one-time
// bucket rebuild, as it does without accumulation); the last line is the step
// time's breakdown. (The arithmetic of the recipe, no_sync and loss / N,
// is ddp_golden_test's "accumulate" case, bit for bit against PyTorch.)
TEST(TorchTrainersTest, ResNet18AccumulationSendsOnceAStep) {
  auto bytes_per_sample = [](const std::string& metrics) {
    std::vector<double> bytes;
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.value("event", "") == "step") bytes.push_back(j["bytes_sent_per_sample"].get<double>());
    }
    return bytes;
  };
  const std::vector<std::string> common = {"--dataset=synthetic",      "--synthetic_train_size=512",
                                           "--synthetic_test_size=32", "--width=8",
                                           "--batch_size=8",           "--log_every=1"};
  std::vector<std::string> every = common, accumulated = common;
  every.insert(every.end(), {"--max_steps=3", "--metrics=" + Tmp() + "/accum1.jsonl"});
  accumulated.insert(accumulated.end(),
                     {"--max_steps=3", "--grad_accum_steps=4", "--metrics=" + Tmp() + "/accum4.jsonl"});
  RunTrainer(Resnet(every));
  const std::string out = RunTrainer(Resnet(accumulated));
  const std::vector<double> one = bytes_per_sample(Tmp() + "/accum1.jsonl");
  const std::vector<double> four = bytes_per_sample(Tmp() + "/accum4.jsonl");
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(four.size(), 3u);
  EXPECT_NEAR(four[2] * 4, one[2], one[2] * 1e-8) << "bytes per sample, N = 4: " << four[2] << ", N = 1: " << one[2];
  const size_t last = out.rfind("resnet18_trainer: step time: ");
  ASSERT_NE(last, std::string::npos) << out;
  EXPECT_NE(out.find("exposed communication", last), std::string::npos) << out;
  EXPECT_EQ(out.find('\n', last), out.size() - 1) << "the breakdown is not the last line: " << out;
}

TEST(TorchTrainersTest, CharTransformerLearnsAndSamples) {
  const std::string out = RunTrainer(Transformer({"--max_steps=1", "--sample_length=60", "--temperature=0"}));
  EXPECT_NE(out.find("sample (temperature 0) after the prompt"), std::string::npos) << out;
  EXPECT_NE(out.find("perplexity"), std::string::npos) << out;
  ExpectLearns(Transformer({}), "char_transformer", 0.7);
}

// Every tensor of the two checkpoints, in order, bit for bit.
void ExpectSameCheckpoint(const std::string& a_path, const std::string& b_path) {
  absl::StatusOr<SafetensorsFile> a = ReadSafetensorsFile(a_path);
  absl::StatusOr<SafetensorsFile> b = ReadSafetensorsFile(b_path);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  ASSERT_GT(a->tensors.size(), 20u);  // Model, buffers and optimizer state.
  for (size_t i = 0; i < a->tensors.size(); ++i) {
    ASSERT_EQ(a->tensors[i].first, b->tensors[i].first);
    const Tensor& x = a->tensors[i].second;
    const Tensor& y = b->tensors[i].second;
    ASSERT_EQ(x.nbytes(), y.nbytes()) << a->tensors[i].first;
    EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << a->tensors[i].first << " differs";
  }
}

// Starts `argv` with its metrics on a pipe, reads them until the "step" line
// of `step`, then SIGKILLs the launcher and its ranks.
void KillAfterStep(std::vector<std::string> argv, int step) {
  int fds[1] = {-1};
  argv.insert(argv.end(), {"--log_every=1", "--metrics=/dev/stdout"});
  absl::StatusOr<Subprocess> child = SpawnPiped(argv, &fds[0]);
  ASSERT_TRUE(child.ok()) << child.status();
  const std::string wanted = absl::StrCat("{\"event\":\"step\",\"step\":", step, ",");
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(200);
  std::string out;
  bool seen = false;
  while (!seen && Clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // Ended before the step: a failure below.
    out.append(buf, n);
    seen = out.find(wanted) != std::string::npos;
  }
  ASSERT_TRUE(child->Kill().ok());
  close(fds[0]);
  absl::StatusOr<ExitStatus> status = child->Wait(Clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(seen) << "no step " << step << " line before the run ended (" << status->ToString() << "):\n" << out;
  EXPECT_FALSE(status->success()) << "the run ended before it was killed:\n" << out;
}

void ExpectResumesAfterKill(const std::vector<std::string>& argv, const std::string& name) {
  std::vector<std::string> whole_argv = argv, killed_argv = argv, resumed_argv = argv;
  const std::string whole = Tmp() + "/" + name + "_whole";
  const std::string parts = Tmp() + "/" + name + "_parts";
  whole_argv.insert(whole_argv.end(), {"--checkpoint_dir=" + whole, "--checkpoint_every=4", "--max_steps=12"});
  RunTrainer(whole_argv);
  // Too many steps to finish before the kill.
  killed_argv.insert(killed_argv.end(), {"--checkpoint_dir=" + parts, "--checkpoint_every=4", "--max_steps=1000"});
  KillAfterStep(killed_argv, 9);
  ASSERT_EQ(ListCheckpoints(parts).front(), parts + "/step-0000000008.safetensors");
  resumed_argv.insert(resumed_argv.end(),
                      {"--checkpoint_dir=" + parts, "--checkpoint_every=4", "--max_steps=12", "--resume"});
  const std::string out = RunTrainer(resumed_argv);
  EXPECT_NE(out.find("resumed from " + parts + "/step-0000000008.safetensors"), std::string::npos) << out;
  ExpectSameCheckpoint(whole + "/step-0000000012.safetensors", parts + "/step-0000000012.safetensors");
}

TEST(TorchTrainersTest, ResNet18ResumesBitIdenticallyAfterAKill) {
  // Full width: a step takes long enough that the kill lands before step 12.
  ExpectResumesAfterKill(Resnet({}), "resnet18");
}

TEST(TorchTrainersTest, CharTransformerResumesBitIdenticallyAfterAKill) {
  const std::vector<std::string> wider = {"--dim=128", "--heads=4", "--sample_length=0"};
  ExpectResumesAfterKill(Transformer(wider), "char_transformer");
}

// DDP and FSDP to step 6 (checkpoints every 3), FSDP stopped at 3 and
// resumed by FSDP and by DDP: four step-6 checkpoints, bit for bit.
// Returns the whole FSDP run's output.
std::string ExpectFsdpIsDdp(const std::vector<std::string>& argv, const std::string& name) {
  auto run = [&](const std::string& dir, std::vector<std::string> extra) {
    std::vector<std::string> args = argv;
    args.insert(args.end(), {"--checkpoint_dir=" + Tmp() + "/" + name + dir, "--checkpoint_every=3"});
    args.insert(args.end(), extra.begin(), extra.end());
    return RunTrainer(args);
  };
  run("_ddp", {"--max_steps=6"});
  const std::string out = run("_fsdp", {"--max_steps=6", "--fsdp"});
  EXPECT_NE(out.find("fully sharded: "), std::string::npos) << out;
  run("_fsdp_parts", {"--max_steps=3", "--fsdp"});
  run("_fsdp_parts", {"--max_steps=6", "--fsdp", "--resume"});
  run("_into_ddp", {"--max_steps=3", "--fsdp"});
  run("_into_ddp", {"--max_steps=6", "--resume"});
  const std::string ddp = Tmp() + "/" + name + "_ddp/step-0000000006.safetensors";
  for (const char* dir : {"_fsdp", "_fsdp_parts", "_into_ddp"}) {
    SCOPED_TRACE(dir);
    ExpectSameCheckpoint(ddp, Tmp() + "/" + name + dir + "/step-0000000006.safetensors");
  }
  return out;
}

TEST(TorchTrainersTest, ResNet18UnderFsdpWritesDdpsCheckpointsAndResumesEitherWay) {
  ExpectFsdpIsDdp(Resnet({"--dataset=synthetic", "--synthetic_train_size=512", "--synthetic_test_size=32", "--width=8",
                          "--batch_size=8", "--optimizer=adam", "--lr=0.001"}),
                  "resnet18_fsdp");
}

TEST(TorchTrainersTest, CharTransformerUnderFsdpWritesDdpsCheckpointsAndSamples) {
  const std::string out =
      ExpectFsdpIsDdp(Transformer({"--sample_length=20", "--temperature=0"}), "char_transformer_fsdp");
  EXPECT_NE(out.find("sample (temperature 0) after the prompt"), std::string::npos) << out;
}

}  // namespace
}  // namespace lockstep
