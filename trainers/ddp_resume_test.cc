// DDP resume loses nothing: 2 local ranks trained for 2 epochs without a
// break, and the same run stopped after 7 steps (mid-epoch) and resumed,
// end with bit-identical model and optimizer state in their last
// checkpoints.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "nn/safetensors.h"

namespace lockstep {
namespace {

void Train(const std::string& dir, const std::vector<std::string>& extra) {
  SubprocessOptions options;
  options.argv = {"trainers/ddp_trainer", "--nproc=2", "--model=mlp", "--dataset=synthetic",
                  "--synthetic_train_size=640", "--synthetic_test_size=64", "--batch_size=32", "--epochs=2",
                  "--seed=3", "--num_workers=1", "--checkpoint_dir=" + dir};
  options.argv.insert(options.argv.end(), extra.begin(), extra.end());
  options.alarm_seconds = 240;
  absl::StatusOr<Subprocess> trainer = Subprocess::Spawn(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<ExitStatus> status = trainer->Wait();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->success()) << status->ToString();
}

TEST(DdpResumeTest, StoppedAndResumedEqualsUninterrupted) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  Train(tmp + "/whole", {});
  Train(tmp + "/parts", {"--max_steps=7"});
  Train(tmp + "/parts", {"--resume"});
  // 640 examples / 2 ranks / 32 = 10 steps per epoch: the last is step 20.
  const std::string last = "/step-0000000020.safetensors";
  absl::StatusOr<SafetensorsFile> whole = ReadSafetensorsFile(tmp + "/whole" + last);
  absl::StatusOr<SafetensorsFile> parts = ReadSafetensorsFile(tmp + "/parts" + last);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(whole->tensors.size(), parts->tensors.size());
  ASSERT_GT(whole->tensors.size(), 6u);  // Model and optimizer state.
  for (size_t i = 0; i < whole->tensors.size(); ++i) {
    const auto& [name, a] = whole->tensors[i];
    const auto& [other_name, b] = parts->tensors[i];
    ASSERT_EQ(name, other_name);
    ASSERT_EQ(a.nbytes(), b.nbytes()) << name;
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << name << " differs after the resume";
  }
}

}  // namespace
}  // namespace lockstep
