// A run stopped mid-epoch and resumed from its checkpoint ends with exactly
// the parameters (bit for bit) of a run that was never interrupted: model,
// optimizer, GradScaler, dropout counters and the batch position all
// survive, whatever the DataLoader's worker count.
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/mt19937.h"
#include "data/synthetic_dataset.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace {

struct Data {
  std::shared_ptr<const Dataset> train, test;
};

Data MakeData() {
  SyntheticOptions o;
  o.size = 300;  // 10 batches of 32 per epoch, the last one short (12)
  o.example_shape = {1, 8, 8};
  o.seed = 9;
  Data d;
  d.train = *SyntheticDataset::Create(o);
  o.size = 50;
  d.test = *SyntheticDataset::Create(o);
  return d;
}

enum class Opt { kSgd, kAdamW };

// A model, its optimizer and scaler, as a process would build them.
struct Trainee {
  std::unique_ptr<Sequential> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<GradScaler> scaler;

  Trainee(uint64_t init_seed, Opt opt, DType compute) {
    Mt19937 gen(init_seed);
    MlpOptions mlp;
    mlp.sizes = {64, 32, 10};
    mlp.dropout = 0.2;  // Extra state (the mask counter) must survive too.
    mlp.dropout_seed = 77;
    mlp.compute_dtype = compute;
    model = *MakeMlp(mlp, gen);
    if (opt == Opt::kSgd) {
      SgdOptions sgd;
      sgd.lr = 0.05;
      sgd.momentum = 0.9;
      optimizer = *Sgd::Create(model->NamedParameters(), sgd);
    } else {
      AdamOptions adam = AdamWOptions();
      adam.lr = 1e-3;
      optimizer = *Adam::Create(model->NamedParameters(), adam);
    }
    GradScalerOptions scaling;
    scaling.enabled = compute == DType::kF16;
    scaling.init_scale = 0x1p30;  // High enough that the first steps overflow and are skipped.
    scaling.growth_interval = 3;
    scaler = std::make_unique<GradScaler>(*GradScaler::Create(scaling));
  }

  absl::StatusOr<TrainResult> Train(const Data& data, TrainLoopOptions options, LocalStepper& stepper) {
    TrainParts parts;
    parts.stepper = &stepper;
    parts.optimizer = optimizer.get();
    parts.scaler = scaler.get();
    parts.train = data.train;
    parts.test = data.test;
    return RunTraining(options, parts);
  }

  std::vector<uint8_t> Bytes() {
    std::vector<uint8_t> out;
    for (const NamedTensor& t : model->StateDict()) {
      const uint8_t* p = static_cast<const uint8_t*>(t.second.raw_data());
      out.insert(out.end(), p, p + t.second.nbytes());
    }
    return out;
  }
};

TrainLoopOptions BaseOptions(int workers, int64_t grad_accum_steps = 1) {
  TrainLoopOptions o;
  o.grad_accum_steps = grad_accum_steps;
  o.epochs = 3;
  o.batch_size = 32;
  o.num_workers = workers;
  o.seed = 5;
  o.progress = ProgressMode::kNone;
  return o;
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/resume_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

struct Case {
  const char* name;
  Opt opt;
  DType compute;
  int workers;
  int64_t stop_after;
  int64_t checkpoint_every;
  bool drop_newest;  // Resume from the periodic checkpoint before the stop (a crash).
  int64_t grad_accum_steps = 1;
};

class ResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(ResumeTest, StoppedAndResumedEqualsUninterruptedBitForBit) {
  const Case c = GetParam();
  const Data data = MakeData();

  Trainee reference(1, c.opt, c.compute);
  LocalStepper reference_stepper(*reference.model);
  absl::StatusOr<TrainResult> full =
      reference.Train(data, BaseOptions(c.workers, c.grad_accum_steps), reference_stepper);
  ASSERT_TRUE(full.ok()) << full.status();
  // 10 micro-batches an epoch, in groups of N (the last may be shorter).
  const int64_t steps = 3 * ((10 + c.grad_accum_steps - 1) / c.grad_accum_steps);
  ASSERT_EQ(full->steps, steps);
  if (c.compute == DType::kF16) {
    int64_t skipped = 0;
    for (const EpochMetrics& m : full->epochs) skipped += m.skipped_steps;
    EXPECT_GT(skipped, 0) << "the scaler's state should matter in this case";
  }

  const std::string dir = FreshDir(c.name);
  TrainLoopOptions first = BaseOptions(c.workers, c.grad_accum_steps);
  first.checkpoint_dir = dir;
  first.checkpoint_every = c.checkpoint_every;
  first.max_steps = c.stop_after;
  {
    Trainee stopped(1, c.opt, c.compute);
    LocalStepper stepper(*stopped.model);
    absl::StatusOr<TrainResult> r = stopped.Train(data, first, stepper);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->stopped_at_max_steps);
    EXPECT_EQ(r->steps, c.stop_after);
  }
  std::vector<std::string> files = ListCheckpoints(dir);
  ASSERT_FALSE(files.empty());
  EXPECT_LE(files.size(), 2u);  // Older ones are pruned.
  int64_t expected_resume_step = c.stop_after;
  if (c.drop_newest) {
    ASSERT_EQ(files.size(), 2u);
    std::filesystem::remove(files[0]);
    expected_resume_step = c.stop_after / c.checkpoint_every * c.checkpoint_every;
  }

  // A new process: different initial weights, fresh optimizer and scaler;
  // everything must come from the checkpoint.
  Trainee resumed(999, c.opt, c.compute);
  LocalStepper stepper(*resumed.model);
  TrainLoopOptions second = BaseOptions(c.workers, c.grad_accum_steps);
  second.checkpoint_dir = dir;
  second.checkpoint_every = c.checkpoint_every;
  second.resume = true;
  absl::StatusOr<TrainResult> r = resumed.Train(data, second, stepper);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->resumed);
  EXPECT_EQ(r->resumed_from_step, expected_resume_step);
  EXPECT_EQ(r->steps, steps);
  EXPECT_EQ(resumed.Bytes(), reference.Bytes());
  EXPECT_EQ(resumed.model->ExtraState(), reference.model->ExtraState());
  EXPECT_EQ(resumed.scaler->scale(), reference.scaler->scale());
  // The resumed epoch's metrics include the steps before the stop.
  ASSERT_FALSE(r->epochs.empty());
  EXPECT_EQ(r->epochs.back().train.count, full->epochs.back().train.count);
  EXPECT_NEAR(r->epochs.back().train.loss_sum, full->epochs.back().train.loss_sum,
              1e-9 * full->epochs.back().train.loss_sum);  // summed in another order
  EXPECT_EQ(r->epochs.back().test.correct, full->epochs.back().test.correct);
}

INSTANTIATE_TEST_SUITE_P(Cases, ResumeTest,
                         ::testing::Values(
                             // Mid-epoch 1 (batch 3 of 10), SGD with momentum, no workers.
                             Case{"sgd", Opt::kSgd, DType::kF32, 0, 13, 0, false},
                             // Prefetching workers, AdamW; the stop's checkpoint is lost (a crash):
                             // resume from step 12's.
                             Case{"adamw_crash", Opt::kAdamW, DType::kF32, 2, 14, 4, true},
                             // f16 with loss scaling (skipped steps, a changing scale).
                             Case{"fp16", Opt::kSgd, DType::kF16, 1, 17, 5, false},
                             // bf16, stopped exactly at an epoch end.
                             Case{"bf16_epoch_end", Opt::kSgd, DType::kBF16, 0, 20, 0, false},
                             // Accumulation of 3 (steps of 3, 3, 3, 1 micro-batches), f16 loss
                             // scaling once per optimizer step; the stop's checkpoint is lost:
                             // resume from step 4's, mid-epoch 1 (its second group).
                             Case{"accumulate_fp16", Opt::kSgd, DType::kF16, 1, 7, 2, true, 3}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// A checkpoint counts optimizer steps of N micro-batches: a resume with
// another N is refused, naming both.
TEST(ResumeTest, AnotherGradAccumStepsIsRefused) {
  const Data data = MakeData();
  const std::string dir = FreshDir("accumulate_other_n");
  TrainLoopOptions first = BaseOptions(0, 2);
  first.checkpoint_dir = dir;
  first.max_steps = 3;
  {
    Trainee stopped(1, Opt::kSgd, DType::kF32);
    LocalStepper stepper(*stopped.model);
    ASSERT_TRUE(stopped.Train(data, first, stepper).ok());
  }
  Trainee resumed(2, Opt::kSgd, DType::kF32);
  LocalStepper stepper(*resumed.model);
  TrainLoopOptions second = BaseOptions(0, 4);
  second.checkpoint_dir = dir;
  second.resume = true;
  absl::StatusOr<TrainResult> r = resumed.Train(data, second, stepper);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("written with --grad_accum_steps=2; this run has 4"), absl::string_view::npos)
      << r.status();
}

TEST(ResumeTest, WithoutACheckpointItStartsFresh) {
  const Data data = MakeData();
  Trainee reference(1, Opt::kSgd, DType::kF32);
  LocalStepper reference_stepper(*reference.model);
  TrainLoopOptions plain = BaseOptions(0);
  plain.epochs = 1;
  ASSERT_TRUE(reference.Train(data, plain, reference_stepper).ok());

  Trainee fresh(1, Opt::kSgd, DType::kF32);
  LocalStepper stepper(*fresh.model);
  TrainLoopOptions o = plain;
  o.checkpoint_dir = FreshDir("fresh");
  o.resume = true;
  absl::StatusOr<TrainResult> r = fresh.Train(data, o, stepper);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->resumed);
  EXPECT_EQ(fresh.Bytes(), reference.Bytes());
  EXPECT_EQ(ListCheckpoints(o.checkpoint_dir).size(), 1u);  // The epoch end's.
}

TEST(ResumeTest, ABatchSizeChangeIsRefused) {
  const Data data = MakeData();
  const std::string dir = FreshDir("batch_size");
  {
    Trainee t(1, Opt::kSgd, DType::kF32);
    LocalStepper stepper(*t.model);
    TrainLoopOptions o = BaseOptions(0);
    o.checkpoint_dir = dir;
    o.max_steps = 3;
    ASSERT_TRUE(t.Train(data, o, stepper).ok());
  }
  Trainee t(1, Opt::kSgd, DType::kF32);
  LocalStepper stepper(*t.model);
  TrainLoopOptions o = BaseOptions(0);
  o.checkpoint_dir = dir;
  o.resume = true;
  o.batch_size = 16;
  absl::StatusOr<TrainResult> r = t.Train(data, o, stepper);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("batch size 32"), std::string::npos) << r.status();
}

// Hostile or damaged entries in the checkpoint directory. Each case starts
// from a run stopped at step 13 with checkpoint_every 4: step-12 and step-13.
class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Deadline: opening a FIFO for reading blocks until a writer comes, so a
    // reader that opens before checking hangs here; the alarm fails the test
    // (SIGALRM) well before Bazel's timeout.
    ::alarm(45);
    data_ = MakeData();
    dir_ = FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    TrainLoopOptions o = Options();
    o.max_steps = 13;
    Trainee t(1, Opt::kSgd, DType::kF32);
    LocalStepper stepper(*t.model);
    absl::StatusOr<TrainResult> r = t.Train(data_, o, stepper);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(ListCheckpoints(dir_), (std::vector<std::string>{Path(13), Path(12)}));
  }
  void TearDown() override { ::alarm(0); }

  TrainLoopOptions Options() const {
    TrainLoopOptions o = BaseOptions(0);
    o.checkpoint_dir = dir_;
    o.checkpoint_every = 4;
    return o;
  }
  std::string Path(int64_t step) const {
    char name[64];
    std::snprintf(name, sizeof(name), "/step-%010lld.safetensors", static_cast<long long>(step));
    return dir_ + name;
  }
  // A new process resuming (other initial weights), until `max_steps` (0: the end).
  absl::StatusOr<TrainResult> Resume(int64_t max_steps, Trainee* out = nullptr) {
    Trainee t(999, Opt::kSgd, DType::kF32);
    LocalStepper stepper(*t.model);
    TrainLoopOptions o = Options();
    o.resume = true;
    o.max_steps = max_steps;
    absl::StatusOr<TrainResult> r = t.Train(data_, o, stepper);
    if (out != nullptr) *out = std::move(t);
    return r;
  }
  static std::filesystem::file_type TypeOf(const std::string& path) {
    std::error_code ec;
    return std::filesystem::symlink_status(path, ec).type();  // lstat: links not followed
  }

  Data data_;
  std::string dir_;
};

// A FIFO with the highest step: the resume does not block on it and takes
// the newest real checkpoint, and retention neither counts nor removes it.
TEST_F(CheckpointDirTest, FifoNamedLikeTheNewestCheckpointIsIgnored) {
  const std::string fifo = dir_ + "/step-9999999999.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_EQ(ListCheckpoints(dir_), (std::vector<std::string>{Path(13), Path(12)}));

  Trainee reference(1, Opt::kSgd, DType::kF32);
  LocalStepper reference_stepper(*reference.model);
  ASSERT_TRUE(reference.Train(data_, BaseOptions(0), reference_stepper).ok());

  Trainee resumed(0, Opt::kSgd, DType::kF32);
  absl::StatusOr<TrainResult> r = Resume(0, &resumed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->resumed);
  EXPECT_EQ(r->resumed_from_step, 13);
  EXPECT_EQ(r->steps, 30);
  EXPECT_EQ(resumed.Bytes(), reference.Bytes());
  // The two newest real checkpoints are kept (the FIFO did not take a place).
  EXPECT_EQ(ListCheckpoints(dir_), (std::vector<std::string>{Path(30), Path(28)}));
  EXPECT_EQ(TypeOf(fifo), std::filesystem::file_type::fifo);
}

TEST_F(CheckpointDirTest, DirectoriesAndSymlinksNamedLikeCheckpointsAreIgnored) {
  const std::string directory = dir_ + "/step-0000000500.safetensors";
  const std::string link = dir_ + "/step-0000000600.safetensors";  // -> the older good checkpoint
  const std::string dangling = dir_ + "/step-0000000700.safetensors";
  ASSERT_TRUE(std::filesystem::create_directory(directory));
  std::filesystem::create_symlink(Path(12), link);
  std::filesystem::create_symlink(dir_ + "/nowhere", dangling);
  EXPECT_EQ(ListCheckpoints(dir_), (std::vector<std::string>{Path(13), Path(12)}));

  // Resumed from step-13 itself, not through the link (step 12).
  absl::StatusOr<TrainResult> r = Resume(14);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->resumed_from_step, 13);
  // Retention kept the two newest regular files and removed step-12 (a file
  // of ours beyond them), nothing else.
  EXPECT_EQ(ListCheckpoints(dir_), (std::vector<std::string>{Path(14), Path(13)}));
  EXPECT_EQ(TypeOf(directory), std::filesystem::file_type::directory);
  EXPECT_EQ(TypeOf(link), std::filesystem::file_type::symlink);
  EXPECT_EQ(std::filesystem::read_symlink(link), Path(12));
  EXPECT_EQ(TypeOf(dangling), std::filesystem::file_type::symlink);
}

// A complete checkpoint copied to a higher step's name: its metadata gives
// it away, so it neither wins the resume nor takes a place in retention.
TEST_F(CheckpointDirTest, CheckpointUnderAnotherStepsNameIsNotTrusted) {
  const std::string copy = dir_ + "/step-0000000099.safetensors";
  std::filesystem::copy_file(Path(12), copy);
  absl::StatusOr<TrainResult> r = Resume(14);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->resumed_from_step, 13);
  EXPECT_EQ(ListCheckpoints(dir_), (std::vector<std::string>{copy, Path(14), Path(13)}));
}

// The newest checkpoint truncated (a damaged file): the resume falls back to
// the one before, and retention keeps that good one rather than count the
// damaged one among the two kept. The damaged file is left alone.
TEST_F(CheckpointDirTest, TruncatedNewestCheckpointFallsBackAndDoesNotEvictAGoodOne) {
  std::filesystem::resize_file(Path(13), std::filesystem::file_size(Path(13)) / 2);

  absl::StatusOr<TrainResult> r = Resume(14);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->resumed_from_step, 12);
  EXPECT_EQ(ListCheckpoints(dir_), (std::vector<std::string>{Path(14), Path(13), Path(12)}));

  // step-12 still loads: without step-14 a resume takes it again.
  ASSERT_EQ(::unlink(Path(14).c_str()), 0);
  r = Resume(14);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->resumed_from_step, 12);

  // When nothing loads, the resume is an error naming every file (never a
  // silent fresh start over a directory of damaged checkpoints).
  for (int64_t step : {12, 13, 14}) std::filesystem::resize_file(Path(step), 100);
  r = Resume(0);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  for (int64_t step : {12, 13, 14}) {
    EXPECT_NE(r.status().message().find(Path(step) + ": "), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace lockstep
