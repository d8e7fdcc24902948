#include "ddp/comm_hook.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "collectives/completable_work.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {
namespace {

class AllReduceHook : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) override {
    // default_hooks.allreduce_hook: tensor.div_(world_size), then SUM.
    if (absl::Status s = Divide(bucket.buffer(), comm.size()); !s.ok()) return CompletableWork::Done(s);
    return comm.AllReduce(bucket.buffer(), ReduceOp::kSum);
  }
};

// default_hooks.fp16_compress_hook / bf16_compress_hook:
//   compressed = buffer.to(dtype).div_(world_size); all-reduce SUM;
//   buffer.copy_(compressed).
class CompressHook : public CommHook {
 public:
  explicit CompressHook(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return dtype_ == DType::kF16 ? "fp16_compress" : "bf16_compress"; }

  std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) override {
    absl::StatusOr<Tensor> compressed = Compressed(bucket);
    if (!compressed.ok()) return CompletableWork::Done(compressed.status());
    absl::Status s = Cast(bucket.buffer(), *compressed);
    if (s.ok()) s = Divide(*compressed, comm.size());
    if (!s.ok()) return CompletableWork::Done(s);
    Tensor buffer = bucket.buffer();
    Tensor half = *compressed;
    return comm.AllReduce(half, ReduceOp::kSum)->Then([buffer, half] { return Cast(half, buffer); });
  }

 private:
  // One compressed buffer per bucket, reused across iterations.
  absl::StatusOr<Tensor> Compressed(const GradBucket& bucket) {
    Tensor& t = buffers_[bucket.index()];
    if (!t.defined() || t.numel() != bucket.buffer().numel() || t.device() != bucket.buffer().device()) {
      LOCKSTEP_ASSIGN_OR_RETURN(t, Tensor::Empty({bucket.buffer().numel()}, dtype_, bucket.buffer().device()));
    }
    return t;
  }

  const DType dtype_;
  std::map<size_t, Tensor> buffers_;
};

}  // namespace

std::unique_ptr<CommHook> MakeAllReduceHook() { return std::make_unique<AllReduceHook>(); }
std::unique_ptr<CommHook> MakeFp16CompressHook() { return std::make_unique<CompressHook>(DType::kF16); }
std::unique_ptr<CommHook> MakeBf16CompressHook() { return std::make_unique<CompressHook>(DType::kBF16); }

absl::StatusOr<std::unique_ptr<CommHook>> MakeCommHook(const std::string& name) {
  if (name.empty() || name == "none") return std::unique_ptr<CommHook>();
  if (name == "allreduce") return MakeAllReduceHook();
  if (name == "fp16_compress") return MakeFp16CompressHook();
  if (name == "bf16_compress") return MakeBf16CompressHook();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown comm hook '", name, "'; expected none, allreduce, fp16_compress or bf16_compress"));
}

}  // namespace lockstep
