#include "nn/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

struct Trainee {
  std::unique_ptr<Sequential> model;
  std::unique_ptr<Adam> optimizer;
};

Trainee MakeRun(uint64_t seed) {
  Mt19937 gen(seed);
  MlpOptions options;
  options.sizes = {6, 8, 3};
  Trainee run;
  run.model = *MakeMlp(options, gen);
  AdamOptions adam = AdamWOptions();
  adam.amsgrad = true;
  run.optimizer = *Adam::Create(run.model->NamedParameters(), adam);
  return run;
}

void TrainStep(Trainee& run, int k) {
  std::vector<float> x(4 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>((i * 7 + k * 3) % 11) - 0.5f;
  Tensor batch = *Tensor::FromVector<float>(x, {4, 6});
  Tensor labels = *Tensor::FromVector<int64_t>({k % 3, 1, 2, 0});
  ASSERT_TRUE(run.optimizer->ZeroGrad().ok());
  absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*run.model->Forward(batch), labels);
  ASSERT_TRUE(ce.ok());
  ASSERT_TRUE(run.model->Backward(ce->grad_logits, false).ok());
  ASSERT_TRUE(run.optimizer->Step().ok());
}

std::vector<std::vector<float>> Weights(Module& m) {
  std::vector<std::vector<float>> out;
  for (const NamedTensor& t : m.StateDict()) out.push_back(*t.second.ToVector<float>());
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(CheckpointTest, ResumeIsExact) {
  const std::string path = TempDir() + "/resume.safetensors";
  Trainee straight = MakeRun(1);
  for (int k = 0; k < 4; ++k) TrainStep(straight, k);

  Trainee first = MakeRun(1);
  for (int k = 0; k < 2; ++k) TrainStep(first, k);
  TrainingProgress progress;
  progress.epoch = 1;
  progress.step = 2;
  progress.seed = 18446744073709551615ull;
  ASSERT_TRUE(SaveCheckpoint(path, *first.model, first.optimizer.get(), progress, {{"scaler.scale", "32768"}}).ok());

  Trainee resumed = MakeRun(99);  // other weights: all must come from the file
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path, *resumed.model, resumed.optimizer.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->progress.epoch, 1);
  EXPECT_EQ(loaded->progress.step, 2);
  EXPECT_EQ(loaded->progress.seed, 18446744073709551615ull);
  EXPECT_EQ(loaded->metadata.at("scaler.scale"), "32768");
  EXPECT_EQ(loaded->metadata.at("optimizer.type"), "AdamW");
  for (int k = 2; k < 4; ++k) TrainStep(resumed, k);
  EXPECT_EQ(Weights(*resumed.model), Weights(*straight.model));
}

TEST(CheckpointTest, NamesArePyTorchsWithoutPrefixAndOptimizerApart) {
  const std::string path = TempDir() + "/names.safetensors";
  Trainee run = MakeRun(2);
  TrainStep(run, 0);
  ASSERT_TRUE(SaveCheckpoint(path, *run.model, run.optimizer.get(), {}).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> names;
  for (const auto& t : file->tensors) names.push_back(t.first);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 4),
            (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"}));
  EXPECT_EQ(names[4], "optimizer/state.0.step");
  EXPECT_EQ(names.size(), 4u + 4u * 4u);  // step, exp_avg, exp_avg_sq, max_exp_avg_sq

  const std::string model_path = TempDir() + "/model.safetensors";
  ASSERT_TRUE(SaveModel(model_path, *run.model).ok());
  Trainee other = MakeRun(3);
  ASSERT_TRUE(LoadModel(model_path, *other.model).ok());
  EXPECT_EQ(Weights(*other.model), Weights(*run.model));
  // A weights-only file is not a training checkpoint.
  absl::StatusOr<LoadedCheckpoint> not_ckpt = LoadCheckpoint(model_path, *other.model, nullptr);
  EXPECT_NE(not_ckpt.status().message().find("not a lockstep training checkpoint"), absl::string_view::npos)
      << not_ckpt.status();
}

TEST(CheckpointTest, CrashMidWriteLeavesThePreviousCheckpoint) {
  const std::string path = TempDir() + "/crash.safetensors";
  Trainee run = MakeRun(4);
  TrainStep(run, 0);
  ASSERT_TRUE(SaveCheckpoint(path, *run.model, run.optimizer.get(), {}).ok());
  const std::string before = ReadAll(path);
  const std::vector<std::vector<float>> saved = Weights(*run.model);
  TrainStep(run, 1);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // Deadline: a hung child dies by SIGALRM and fails the test.
    AtomicWriteOptions crash;
    crash.testing_crash_after_bytes = static_cast<int64_t>(before.size() / 2);
    TrainingProgress progress;
    progress.step = 2;
    SaveCheckpoint(path, *run.model, run.optimizer.get(), progress, {}, crash).IgnoreError();
    std::_Exit(0);  // not reached when the crash happens
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kSimulatedCrashExitCode);
  EXPECT_EQ(ReadAll(path), before);  // byte for byte
  Trainee restored = MakeRun(5);
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path, *restored.model, restored.optimizer.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->progress.step, 0);
  EXPECT_EQ(Weights(*restored.model), saved);
  // The next save works and replaces it.
  ASSERT_TRUE(SaveCheckpoint(path, *run.model, run.optimizer.get(), {}).ok());
  EXPECT_NE(ReadAll(path), before);
}

TEST(CheckpointTest, TruncatedOrCorruptFilesAreRefusedAndChangeNothing) {
  const std::string good = TempDir() + "/good.safetensors";
  const std::string bad = TempDir() + "/bad.safetensors";
  Trainee run = MakeRun(6);
  TrainStep(run, 0);
  ASSERT_TRUE(SaveCheckpoint(good, *run.model, run.optimizer.get(), {}).ok());
  const std::string bytes = ReadAll(good);

  Trainee target = MakeRun(7);
  TrainStep(target, 0);
  const std::vector<std::vector<float>> weights = Weights(*target.model);
  std::vector<std::vector<float>> state;
  for (const NamedTensor& t : target.optimizer->StateTensors()) state.push_back(*t.second.ToVector<float>());

  auto expect_untouched = [&](const std::string& what) {
    EXPECT_EQ(Weights(*target.model), weights) << what;
    std::vector<std::vector<float>> now;
    for (const NamedTensor& t : target.optimizer->StateTensors()) now.push_back(*t.second.ToVector<float>());
    EXPECT_EQ(now, state) << what;
  };
  for (size_t len : {size_t{0}, size_t{7}, size_t{8}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    WriteAll(bad, bytes.substr(0, len));
    absl::StatusOr<LoadedCheckpoint> r = LoadCheckpoint(bad, *target.model, target.optimizer.get());
    EXPECT_FALSE(r.ok()) << "truncated to " << len;
    EXPECT_NE(r.status().message().find(bad), absl::string_view::npos) << r.status();
    expect_untouched("truncated to " + std::to_string(len));
  }
  // Corrupt the header: make a byte count disagree with the shape.
  std::string corrupt = bytes;
  const size_t pos = corrupt.find("\"shape\":[8,6]");
  ASSERT_NE(pos, std::string::npos) << corrupt.substr(8, 200);
  corrupt.replace(pos, 13, "\"shape\":[8,5]");
  WriteAll(bad, corrupt);
  absl::StatusOr<LoadedCheckpoint> r = LoadCheckpoint(bad, *target.model, target.optimizer.get());
  EXPECT_FALSE(r.ok());
  expect_untouched("corrupt header");
  // Another architecture: wider layers are refused by the optimizer state.
  Mt19937 gen(8);
  MlpOptions wide;
  wide.sizes = {6, 9, 3};
  std::unique_ptr<Sequential> other = *MakeMlp(wide, gen);
  AdamOptions amsgrad = AdamWOptions();
  amsgrad.amsgrad = true;
  std::unique_ptr<Adam> other_opt = *Adam::Create(other->NamedParameters(), amsgrad);
  r = LoadCheckpoint(good, *other, other_opt.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'state.0.exp_avg': expected f32[9, 6], got f32[8, 6]"), absl::string_view::npos)
      << r.status();
  EXPECT_EQ(r.status().message().find("missing"), absl::string_view::npos) << r.status();
  // Same shapes, other names (no Flatten): the optimizer accepts, the model
  // refuses, and the optimizer's previous (empty) state is put back.
  MlpOptions renamed;
  renamed.sizes = {6, 8, 3};
  renamed.flatten = false;
  std::unique_ptr<Sequential> renamed_model = *MakeMlp(renamed, gen);
  std::unique_ptr<Adam> renamed_opt = *Adam::Create(renamed_model->NamedParameters(), amsgrad);
  r = LoadCheckpoint(good, *renamed_model, renamed_opt.get());
  EXPECT_NE(r.status().message().find("missing: 0.weight, 0.bias, 2.weight, 2.bias"), absl::string_view::npos)
      << r.status();
  EXPECT_TRUE(renamed_opt->StateTensors().empty());
  // And a wrong optimizer type.
  SgdOptions sgd_options;
  sgd_options.lr = 0.1;
  std::unique_ptr<Sgd> sgd = *Sgd::Create(target.model->NamedParameters(), sgd_options);
  r = LoadCheckpoint(good, *target.model, sgd.get());
  EXPECT_NE(r.status().message().find("written with a AdamW optimizer but resuming with SGD"), absl::string_view::npos)
      << r.status();
  expect_untouched("wrong optimizer");
}

// Only regular files are read: a FIFO is refused at once (opening one for
// reading would wait for a writer), as are directories; symlinks are
// followed unless the caller (a directory scan) says not to.
TEST(CheckpointTest, OnlyRegularFilesAreRead) {
  const std::string dir = TempDir() + "/regular_only";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string good = dir + "/good.safetensors";
  Trainee run = MakeRun(11);
  TrainStep(run, 0);
  TrainingProgress progress;
  progress.step = 7;
  ASSERT_TRUE(SaveCheckpoint(good, *run.model, run.optimizer.get(), progress).ok());

  const std::string fifo = dir + "/fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // In a child with a deadline: a reader that blocks in open() dies by
  // SIGALRM instead of hanging the test.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);
    Trainee target = MakeRun(12);
    const absl::Status load = LoadCheckpoint(fifo, *target.model, target.optimizer.get()).status();
    const absl::Status info = ReadCheckpointInfo(fifo).status();
    const absl::Status model = LoadModel(fifo, *target.model);
    const bool refused = load.code() == absl::StatusCode::kFailedPrecondition &&
                         load.message() == "safetensors " + fifo +
                                               ": a FIFO, not a regular file; pass the path of a .safetensors file" &&
                         info.code() == absl::StatusCode::kFailedPrecondition &&
                         model.code() == absl::StatusCode::kFailedPrecondition;
    std::_Exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the reader died by signal " << WTERMSIG(status) << " (blocked opening the FIFO?)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a FIFO was not refused as not a regular file";

  Trainee target = MakeRun(12);
  absl::StatusOr<LoadedCheckpoint> r = LoadCheckpoint(dir, *target.model, target.optimizer.get());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("a directory, not a regular file"), absl::string_view::npos) << r.status();

  const std::string link = dir + "/link.safetensors";
  std::filesystem::create_symlink(good, link);
  SafetensorsReadOptions no_symlinks;
  no_symlinks.follow_symlinks = false;
  r = LoadCheckpoint(link, *target.model, target.optimizer.get(), no_symlinks);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("symbolic link"), absl::string_view::npos) << r.status();
  EXPECT_FALSE(ReadCheckpointInfo(link, no_symlinks).ok());
  r = LoadCheckpoint(link, *target.model, target.optimizer.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->progress.step, 7);
  EXPECT_EQ(Weights(*target.model), Weights(*run.model));
}

// The header alone tells a complete checkpoint from a truncated one.
TEST(CheckpointTest, ReadCheckpointInfoChecksTheHeaderAgainstTheFileSize) {
  const std::string path = TempDir() + "/info.safetensors";
  Trainee run = MakeRun(13);
  TrainingProgress progress;
  progress.epoch = 2;
  progress.step = 41;
  progress.seed = 5;
  ASSERT_TRUE(SaveCheckpoint(path, *run.model, run.optimizer.get(), progress, {{"trainer.batch", "3"}}).ok());
  absl::StatusOr<LoadedCheckpoint> info = ReadCheckpointInfo(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->progress.epoch, 2);
  EXPECT_EQ(info->progress.step, 41);
  EXPECT_EQ(info->progress.seed, 5u);
  EXPECT_EQ(info->metadata.at("trainer.batch"), "3");

  const std::string bytes = ReadAll(path);
  WriteAll(path, bytes.substr(0, bytes.size() - 1));
  info = ReadCheckpointInfo(path);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss) << info.status();
  EXPECT_NE(info.status().message().find(path), absl::string_view::npos) << info.status();
  const std::string model_only = TempDir() + "/info_model.safetensors";
  ASSERT_TRUE(SaveModel(model_only, *run.model).ok());
  EXPECT_NE(ReadCheckpointInfo(model_only).status().message().find("not a lockstep training checkpoint"),
            absl::string_view::npos);
}

TEST(CheckpointTest, DropoutMasksResumeExactly) {
  // A model with dropout: the masks depend on each Dropout's call counter,
  // which the checkpoint carries as module extra state.
  const std::string path = TempDir() + "/dropout.safetensors";
  auto make = [] {
    Mt19937 gen(10);
    MlpOptions options;
    options.sizes = {6, 8, 8, 3};
    options.dropout = 0.5;
    options.dropout_seed = 77;
    return *MakeMlp(options, gen);
  };
  const Tensor x = *Tensor::FromVector<float>(std::vector<float>(24, 0.5f), {4, 6});
  std::unique_ptr<Sequential> straight = make();
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(straight->Forward(x).ok());
  std::vector<float> expected = *straight->Forward(x)->ToVector<float>();

  std::unique_ptr<Sequential> first = make();
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(first->Forward(x).ok());
  ASSERT_TRUE(SaveCheckpoint(path, *first, nullptr, {}).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path);
  EXPECT_EQ(file->metadata.at("module.3.calls"), "3");
  EXPECT_EQ(file->metadata.at("module.6.calls"), "3");
  std::unique_ptr<Sequential> resumed = make();
  ASSERT_TRUE(LoadCheckpoint(path, *resumed, nullptr).ok());
  EXPECT_EQ(*resumed->Forward(x)->ToVector<float>(), expected);
  // Extra state for a module the model lacks is refused, naming it.
  absl::Status s = resumed->LoadExtraState({{"4.calls", "1"}, {"3.calls", "x"}});
  EXPECT_NE(s.message().find("'4.calls'"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("'3.calls': Dropout calls must be an unsigned integer"), absl::string_view::npos) << s;
}

TEST(CheckpointTest, ReservedMetadataKeysAreRefused) {
  Trainee run = MakeRun(9);
  absl::Status s = SaveCheckpoint(TempDir() + "/r.safetensors", *run.model, nullptr, {}, {{"progress.step", "5"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("reserved"), absl::string_view::npos) << s;
}

TEST(CheckpointTest, LoadModelTakesAPyTorchDdpStateDict) {
  // ddp.state_dict() of PyTorch's DDP wrapper (names "module.1.weight", ...,
  // nn/testdata/make_ddp_state_dict.py) of the MLP that torch.manual_seed(0)
  // initializes exactly as Mt19937(0) does here.
  Mt19937 gen(0), other(99);
  MlpOptions options;
  options.sizes = {6, 5, 3};
  std::unique_ptr<Sequential> reference = *MakeMlp(options, gen);
  std::unique_ptr<Sequential> model = *MakeMlp(options, other);
  ASSERT_TRUE(LoadModel("nn/testdata/ddp_state_dict.safetensors", *model).ok());
  const std::vector<NamedTensor> want = reference->StateDict(), got = model->StateDict();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(*got[i].second.ToVector<float>(), *want[i].second.ToVector<float>()) << want[i].first;
  }
}

}  // namespace
}  // namespace lockstep
