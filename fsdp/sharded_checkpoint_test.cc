// Sharded checkpoints: written by 3 ranks (the reference CNN with BatchNorm,
// Adam, two steps), loaded on 2 and on 4 ranks, they give the same whole
// model and the same consolidated Adam state bit for bit as the run that
// wrote them, and the next step equals that of a run loaded from the full
// state. Bad directories are named and change nothing: a missing file,
// files of two saves, a symbolic link or a FIFO named like a shard (never
// opened), another model's shapes, and a directory of another world size.
#include "fsdp/sharded_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "fsdp/fully_shard.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/cross_entropy.h"
#include "nn/testing/same_bits.h"
#include "trainers/trainer_models.h"

namespace lockstep {
namespace {

using testing::ExpectSameBits;

std::string Tmp(const std::string& name) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + name; }

// Rank r's batch of step s.
absl::Status Step(FullyShard& fsdp, Optimizer& opt, int rank, int step) {
  Mt19937 gen(static_cast<uint64_t>(700 + 10 * step + rank));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({4, 1, 28, 28}, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({4}, DType::kI64));
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0);
  for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % 10);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp.Forward(x));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
  LOCKSTEP_RETURN_IF_ERROR(fsdp.Backward(ce.grad_logits));
  LOCKSTEP_RETURN_IF_ERROR(opt.Step());
  return opt.ZeroGrad(/*set_to_none=*/true);
}

struct Rank {
  std::unique_ptr<Module> model;
  std::unique_ptr<FullyShard> fsdp;
  std::unique_ptr<ShardedOptimizer> opt;
};

absl::StatusOr<Rank> MakeRank(Communicator& comm, const char* model = "cnn") {
  Rank r;
  LOCKSTEP_ASSIGN_OR_RETURN(r.model, MakeModel(model, 7, DType::kF32, Device::Cpu()));
  LOCKSTEP_ASSIGN_OR_RETURN(r.fsdp, FullyShard::Create(*r.model, comm));
  LOCKSTEP_ASSIGN_OR_RETURN(
      r.opt, ShardedOptimizer::Create(
                 *r.fsdp, [](std::vector<NamedParameter> shards) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
                   AdamOptions o;
                   o.lr = 0.01;
                   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(shards), o));
                   return std::unique_ptr<Optimizer>(std::move(adam));
                 }));
  return r;
}

// The whole model and (rank 0) the consolidated optimizer state.
struct Whole {
  std::vector<NamedTensor> model, optimizer;
};

absl::Status Capture(Rank& r, Communicator& comm, Whole* out) {
  LOCKSTEP_ASSIGN_OR_RETURN(out->model, r.fsdp->FullStateDict());
  LOCKSTEP_RETURN_IF_ERROR(r.opt->ConsolidateState(0));
  if (comm.rank() == 0) out->optimizer = r.opt->StateTensors();
  return absl::OkStatus();
}

// Three ranks train two steps and save into `dir`; `written` gets the
// state, `buffers` (when not null) each rank's buffers.
void SaveOnThree(const std::string& dir, Whole* written, std::vector<std::vector<NamedTensor>>* buffers = nullptr) {
  testing::ExpectAllOk(testing::RunThreads(3, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(Rank r, MakeRank(comm));
    for (int step = 0; step < 2; ++step) LOCKSTEP_RETURN_IF_ERROR(Step(*r.fsdp, *r.opt, comm.rank(), step));
    LOCKSTEP_RETURN_IF_ERROR(
        SaveShardedCheckpoint(dir, *r.fsdp, r.opt.get(), r.model->NamedBuffers(), {{"step", "2"}}));
    Whole whole;
    LOCKSTEP_RETURN_IF_ERROR(Capture(r, comm, &whole));
    if (comm.rank() == 0) *written = std::move(whole);
    if (buffers != nullptr) {
      for (const NamedTensor& b : r.model->NamedBuffers()) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, b.second.Clone());
        (*buffers)[comm.rank()].emplace_back(b.first, copy);
      }
    }
    return absl::OkStatus();
  }));
}

TEST(ShardedCheckpointTest, ThreeRanksFilesLoadOnTwoAndFourAsTheWholeState) {
  const std::string dir = Tmp("three");
  Whole written;
  std::vector<std::vector<NamedTensor>> buffers(3);
  SaveOnThree(dir, &written, &buffers);
  // Each rank's BatchNorm statistics are its own (they differ).
  ASSERT_FALSE(buffers[0].empty());
  EXPECT_NE(
      0, std::memcmp(buffers[0][0].second.raw_data(), buffers[1][0].second.raw_data(), buffers[0][0].second.nbytes()));
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(std::filesystem::exists(dir + "/shard-" + std::to_string(r) + "-of-3.safetensors"));
  ASSERT_FALSE(written.optimizer.empty());
  for (int world : {2, 4}) {
    SCOPED_TRACE(world);
    std::vector<Whole> loaded(world);
    std::vector<std::vector<NamedTensor>> loaded_buffers(world);
    std::vector<std::vector<NamedTensor>> stepped_sharded(world), stepped_full(world);
    testing::ExpectAllOk(testing::RunThreads(world, [&](Communicator& comm) -> absl::Status {
      LOCKSTEP_ASSIGN_OR_RETURN(Rank r, MakeRank(comm));
      LOCKSTEP_ASSIGN_OR_RETURN(ShardedCheckpointInfo info,
                                LoadShardedCheckpoint(dir, *r.fsdp, r.opt.get(), r.model->NamedBuffers()));
      EXPECT_EQ(info.world_size, 3);
      EXPECT_EQ(info.metadata, (std::map<std::string, std::string>{{"step", "2"}}));
      LOCKSTEP_RETURN_IF_ERROR(Capture(r, comm, &loaded[comm.rank()]));
      for (const NamedTensor& b : r.model->NamedBuffers()) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, b.second.Clone());
        loaded_buffers[comm.rank()].emplace_back(b.first, copy);
      }
      LOCKSTEP_RETURN_IF_ERROR(Step(*r.fsdp, *r.opt, comm.rank(), 2));
      LOCKSTEP_ASSIGN_OR_RETURN(stepped_sharded[comm.rank()], r.fsdp->FullStateDict());
      // The same step from the whole state (the path full checkpoints take).
      LOCKSTEP_ASSIGN_OR_RETURN(Rank f, MakeRank(comm));
      LOCKSTEP_RETURN_IF_ERROR(f.fsdp->LoadFullStateDict(written.model));
      LOCKSTEP_RETURN_IF_ERROR(f.opt->LoadStateTensors(written.optimizer));
      // Buffers are each rank's own; take the sharded load's, which the full
      // state cannot carry.
      const std::vector<NamedTensor> mine = r.model->NamedBuffers(), theirs = f.model->NamedBuffers();
      LOCKSTEP_ASSIGN_OR_RETURN(Rank again, MakeRank(comm));
      LOCKSTEP_RETURN_IF_ERROR(LoadShardedCheckpoint(dir, *again.fsdp, nullptr, again.model->NamedBuffers()).status());
      for (size_t i = 0; i < theirs.size(); ++i) {
        LOCKSTEP_RETURN_IF_ERROR(theirs[i].second.CopyFrom(again.model->NamedBuffers()[i].second));
      }
      LOCKSTEP_RETURN_IF_ERROR(Step(*f.fsdp, *f.opt, comm.rank(), 2));
      LOCKSTEP_ASSIGN_OR_RETURN(stepped_full[comm.rank()], f.fsdp->FullStateDict());
      return absl::OkStatus();
    }));
    ExpectSameBits(written.model, loaded[0].model, "model");
    ExpectSameBits(written.optimizer, loaded[0].optimizer, "optimizer");
    ExpectSameBits(stepped_full[0], stepped_sharded[0], "the next step");
    // Rank r's buffers are those rank r mod 3 wrote.
    for (int r = 0; r < world; ++r)
      ExpectSameBits(buffers[r % 3], loaded_buffers[r], "buffers of rank " + std::to_string(r));
  }
}

// Each failed load leaves the model as it was.
void ExpectRefused(const std::string& dir, absl::StatusCode code, const std::string& says) {
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(Rank r, MakeRank(comm));
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NamedTensor> before, r.fsdp->FullStateDict());
    absl::StatusOr<ShardedCheckpointInfo> info =
        LoadShardedCheckpoint(dir, *r.fsdp, r.opt.get(), r.model->NamedBuffers());
    EXPECT_EQ(info.status().code(), code) << info.status();
    EXPECT_NE(info.status().message().find(says), std::string::npos) << info.status();
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NamedTensor> after, r.fsdp->FullStateDict());
    ExpectSameBits(before, after, "after a refused load");
    return absl::OkStatus();
  }));
}

TEST(ShardedCheckpointTest, BadDirectoriesAreNamedAndNothingLoads) {
  const std::string a = Tmp("a"), b = Tmp("b");
  Whole unused;
  SaveOnThree(a, &unused);
  SaveOnThree(b, &unused);
  namespace fs = std::filesystem;
  // Files of two saves.
  const std::string mixed = Tmp("mixed");
  fs::copy(a, mixed);
  fs::copy_file(b + "/shard-1-of-3.safetensors", mixed + "/shard-1-of-3.safetensors",
                fs::copy_options::overwrite_existing);
  ExpectRefused(mixed, absl::StatusCode::kDataLoss, "two different saves");
  // A missing file.
  const std::string missing = Tmp("missing");
  fs::copy(a, missing);
  fs::remove(missing + "/shard-2-of-3.safetensors");
  ExpectRefused(missing, absl::StatusCode::kDataLoss, "shard-2-of-3.safetensors is missing");
  // A symbolic link and a FIFO where a shard should be: never opened.
  const std::string link = Tmp("link");
  fs::copy(a, link);
  fs::remove(link + "/shard-1-of-3.safetensors");
  fs::create_symlink(a + "/shard-1-of-3.safetensors", link + "/shard-1-of-3.safetensors");
  ExpectRefused(link, absl::StatusCode::kFailedPrecondition, "not a regular file");
  const std::string fifo = Tmp("fifo");
  fs::copy(a, fifo);
  fs::remove(fifo + "/shard-1-of-3.safetensors");
  ASSERT_EQ(mkfifo((fifo + "/shard-1-of-3.safetensors").c_str(), 0600), 0);
  ExpectRefused(fifo, absl::StatusCode::kFailedPrecondition, "not a regular file");
  // Another model (the MLP): every parameter named.
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(Rank r, MakeRank(comm, "mlp"));
    absl::Status s = LoadShardedCheckpoint(a, *r.fsdp, r.opt.get(), {}).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("is not in the checkpoint"), std::string::npos) << s;
    EXPECT_NE(s.message().find("nothing was loaded"), std::string::npos) << s;
    return absl::OkStatus();
  }));
  // Saving 2 ranks' files where 3 ranks' are: refused on every rank.
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(Rank r, MakeRank(comm));
    absl::Status s = SaveShardedCheckpoint(a, *r.fsdp, r.opt.get(), r.model->NamedBuffers());
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    return absl::OkStatus();
  }));
  EXPECT_FALSE(fs::exists(a + "/shard-0-of-2.safetensors"));
  ExpectRefused(Tmp("nowhere"), absl::StatusCode::kNotFound, "cannot list");
}

}  // namespace
}  // namespace lockstep
