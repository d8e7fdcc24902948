// DDP resume loses nothing: 2 local ranks trained for 2 epochs without a
// break, and the same run stopped after 7 steps (mid-epoch) and resumed,
// end with bit-identical model and optimizer state in their last
// checkpoints; the same with --zero (Adam's state sharded over the ranks,
// consolidated on rank 0 for each checkpoint and re-sharded on resume),
// whose checkpoint also equals the plain optimizer's, and resumed by a
// plain run. And --fsdp: its checkpoints (the whole model and the
// consolidated Adam state) equal DDP's bit for bit at world 2, with and
// without accumulation, and it resumes from its own and into DDP.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace {

void Train(const std::string& dir, const std::vector<std::string>& extra) {
  SubprocessOptions options;
  options.argv = {"trainers/ddp_trainer",
                  "--nproc=2",
                  "--model=mlp",
                  "--dataset=synthetic",
                  "--synthetic_train_size=640",
                  "--synthetic_test_size=64",
                  "--batch_size=32",
                  "--epochs=2",
                  "--seed=3",
                  "--num_workers=1",
                  "--checkpoint_dir=" + dir};
  options.argv.insert(options.argv.end(), extra.begin(), extra.end());
  options.alarm_seconds = 240;
  absl::StatusOr<Subprocess> trainer = Subprocess::Spawn(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<ExitStatus> status = trainer->Wait();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->success()) << status->ToString();
}

// Every tensor of the two checkpoints, in order, bit for bit.
void ExpectSameCheckpoint(const std::string& a_path, const std::string& b_path) {
  absl::StatusOr<SafetensorsFile> whole = ReadSafetensorsFile(a_path);
  absl::StatusOr<SafetensorsFile> parts = ReadSafetensorsFile(b_path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(whole->tensors.size(), parts->tensors.size());
  ASSERT_GT(whole->tensors.size(), 6u);  // Model and optimizer state.
  for (size_t i = 0; i < whole->tensors.size(); ++i) {
    const auto& [name, a] = whole->tensors[i];
    const auto& [other_name, b] = parts->tensors[i];
    ASSERT_EQ(name, other_name);
    ASSERT_EQ(a.nbytes(), b.nbytes()) << name;
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << name << " differs (" << a_path << ")";
  }
}

// 640 examples / 2 ranks / 32 = 10 steps per epoch: the last is step 20.
constexpr char kLast[] = "/step-0000000020.safetensors";

TEST(DdpResumeTest, StoppedAndResumedEqualsUninterrupted) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  Train(tmp + "/whole", {});
  Train(tmp + "/parts", {"--max_steps=7"});
  Train(tmp + "/parts", {"--resume"});
  ExpectSameCheckpoint(tmp + "/whole" + kLast, tmp + "/parts" + kLast);
}

TEST(DdpResumeTest, AZeroCheckpointResumesBitIdentically) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  const std::vector<std::string> adam = {"--optimizer=adam", "--lr=0.001"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), adam.begin(), adam.end());
    return extra;
  };
  Train(tmp + "/plain", with({}));
  Train(tmp + "/zero", with({"--zero"}));
  Train(tmp + "/zero_parts", with({"--zero", "--max_steps=7"}));
  Train(tmp + "/zero_parts", with({"--zero", "--resume"}));
  Train(tmp + "/into_plain", with({"--zero", "--max_steps=7"}));
  Train(tmp + "/into_plain", with({"--resume"}));
  ExpectSameCheckpoint(tmp + "/plain" + kLast, tmp + "/zero" + kLast);
  ExpectSameCheckpoint(tmp + "/zero" + kLast, tmp + "/zero_parts" + kLast);
  ExpectSameCheckpoint(tmp + "/plain" + kLast, tmp + "/into_plain" + kLast);
}

TEST(DdpResumeTest, AnFsdpRunIsDdpsBitForBitAndResumesEitherWay) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  auto with = [&](std::vector<std::string> extra) {
    for (const char* flag : {"--optimizer=adam", "--lr=0.001"}) extra.push_back(flag);
    return extra;
  };
  Train(tmp + "/ddp", with({}));
  Train(tmp + "/fsdp", with({"--fsdp"}));
  ExpectSameCheckpoint(tmp + "/ddp" + kLast, tmp + "/fsdp" + kLast);
  // Units named: two of the MLP's three Linear layers (the root unit holds the third).
  Train(tmp + "/fsdp_units", with({"--fsdp", "--fsdp_units=1,3"}));
  ExpectSameCheckpoint(tmp + "/ddp" + kLast, tmp + "/fsdp_units" + kLast);
  Train(tmp + "/fsdp_parts", with({"--fsdp", "--max_steps=7"}));
  Train(tmp + "/fsdp_parts", with({"--fsdp", "--resume"}));
  ExpectSameCheckpoint(tmp + "/ddp" + kLast, tmp + "/fsdp_parts" + kLast);
  Train(tmp + "/fsdp_into_ddp", with({"--fsdp", "--max_steps=7"}));
  Train(tmp + "/fsdp_into_ddp", with({"--resume"}));
  ExpectSameCheckpoint(tmp + "/ddp" + kLast, tmp + "/fsdp_into_ddp" + kLast);
}

TEST(DdpResumeTest, FsdpAccumulationIsDdpsBitForBit) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  // 10 micro-batches an epoch in groups of 2 or 3 (the last one partial).
  for (const char* n : {"--grad_accum_steps=2", "--grad_accum_steps=3"}) {
    const std::string name = std::string("/accum") + n[sizeof("--grad_accum_steps=") - 1];
    Train(tmp + name + "_ddp", {n});
    Train(tmp + name + "_fsdp", {n, "--fsdp"});
    const std::string last =
        std::string(n).back() == '2' ? "/step-0000000010.safetensors" : "/step-0000000008.safetensors";
    ExpectSameCheckpoint(tmp + name + "_ddp" + last, tmp + name + "_fsdp" + last);
  }
}

}  // namespace
}  // namespace lockstep
