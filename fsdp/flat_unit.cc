#include "fsdp/flat_unit.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"
#include "core/reduce_op.h"
#include "core/status.h"

namespace lockstep {
namespace {

bool GatherDType(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

absl::Status Prefixed(const absl::Status& s, const std::string& what) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

}  // namespace

absl::StatusOr<Tensor> ParameterOf(const FlatShardLayout& layout, const Tensor& full, size_t i, const Shape& shape) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat, full.Flat(layout.offsets[i], layout.numels[i]));
  return flat.Reshape(shape);
}

absl::Status CopyIntoShard(const FlatShardLayout& layout, int rank, size_t i, const Tensor& value,
                           const Tensor& shard) {
  const auto [begin, end] = layout.ParameterRange(i, rank);
  if (end <= begin) return absl::OkStatus();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor from, value.Flat(begin, end - begin));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor to, shard.Flat(layout.offsets[i] + begin - rank * layout.shard, end - begin));
  return from.dtype() == to.dtype() ? to.CopyFrom(from) : Cast(from, to);
}

absl::StatusOr<std::unique_ptr<FlatUnit>> FlatUnit::Create(std::string name, const std::vector<int64_t>& numels,
                                                           Communicator& comm, Device device) {
  for (int64_t n : numels) {
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("FlatUnit '", name, "': a negative element count"));
  }
  std::unique_ptr<FlatUnit> unit(new FlatUnit(std::move(name), FlatShardLayout::Make(numels, comm.size()), comm));
  LOCKSTEP_ASSIGN_OR_RETURN(unit->shard_.value, Tensor::Zeros({unit->layout_.shard}, DType::kF32, device));
  return unit;
}

FlatUnit::~FlatUnit() {
  if (gather_ != nullptr) gather_->Wait().IgnoreError();
  if (reduce_ != nullptr) reduce_->Wait().IgnoreError();
}

std::string FlatUnit::label() const { return name_.empty() ? "the root unit" : "unit '" + name_ + "'"; }

absl::Status FlatUnit::SetShardFrom(size_t i, const Tensor& full) {
  if (i >= layout_.numels.size() || !full.defined() || full.numel() != layout_.numels[i]) {
    return absl::InvalidArgumentError(absl::StrCat("FlatUnit::SetShardFrom: ", label(), " parameter ", i, " expected ",
                                                   i < layout_.numels.size() ? layout_.numels[i] : -1,
                                                   " elements, got ",
                                                   full.defined() ? full.DebugString() : "undefined"));
  }
  return CopyIntoShard(layout_, comm_.rank(), i, full, shard_.value);
}

absl::Status FlatUnit::IssueGather(const Tensor& full) {
  if (gather_ != nullptr) return absl::OkStatus();
  if (!full.defined() || full.numel() != layout_.padded || !GatherDType(full.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("FlatUnit::IssueGather: ", label(), " expected a buffer of ",
                                                   layout_.padded, " f32, bf16 or f16 elements, got ",
                                                   full.defined() ? full.DebugString() : "undefined"));
  }
  Tensor input = shard_.value;
  if (full.dtype() != DType::kF32) {
    LOCKSTEP_ASSIGN_OR_RETURN(gather_input_, Tensor::Empty({layout_.shard}, full.dtype(), full.device()));
    LOCKSTEP_RETURN_IF_ERROR(Cast(shard_.value, gather_input_));
    input = gather_input_;
  }
  gather_ = comm_.AllGather(input, full);
  return absl::OkStatus();
}

absl::Status FlatUnit::WaitGather() {
  if (gather_ == nullptr) return absl::OkStatus();
  absl::Status done = std::exchange(gather_, nullptr)->Wait();
  gather_input_ = Tensor();
  return Prefixed(done, absl::StrCat("FSDP all-gather of ", label(), "'s parameters on rank ", comm_.rank()));
}

absl::Status FlatUnit::BeginGrads(DType reduce_dtype) {
  if (!GatherDType(reduce_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("FlatUnit::BeginGrads: ", label(), ": reduce dtype ",
                                                   DTypeName(reduce_dtype), " is not f32, bf16 or f16"));
  }
  LOCKSTEP_RETURN_IF_ERROR(FinishReduce());
  LOCKSTEP_ASSIGN_OR_RETURN(grad_flat_, Tensor::Zeros({layout_.padded}, reduce_dtype, shard_.value.device()));
  return absl::OkStatus();
}

absl::Status FlatUnit::AddGrad(size_t i, const Tensor& grad) {
  if (!grad_flat_.defined() || i >= layout_.numels.size() || !grad.defined() || grad.numel() != layout_.numels[i]) {
    return absl::FailedPreconditionError(
        absl::StrCat("FlatUnit::AddGrad: ", label(), " parameter ", i, ": ",
                     !grad_flat_.defined() ? "no BeginGrads before it" : "the gradient does not fit the parameter: ",
                     grad.defined() ? grad.DebugString() : "undefined"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor dst, grad_flat_.Flat(layout_.offsets[i], layout_.numels[i]));
  const int world = comm_.size();
  if (grad.raw_data() == dst.raw_data() && grad.dtype() == dst.dtype()) {
    // Accumulated in place (GradView): scale there, x * float(1 / world).
    return world > 1 ? Scale(dst, 1.0 / world) : absl::OkStatus();
  }
  if (world > 1 && dst.dtype() == DType::kF32 && grad.dtype() == DType::kF32 && !dst.device().is_cuda() &&
      !grad.device().is_cuda()) {
    // DDP's rounding (ddp/reducer.cc): x * float(1 / world), in one pass.
    const float factor = static_cast<float>(1.0 / world);
    const float* __restrict src = grad.data<float>();
    float* __restrict out = dst.data<float>();
    for (int64_t k = 0, n = layout_.numels[i]; k < n; ++k) out[k] = src[k] * factor;
    return absl::OkStatus();
  }
  LOCKSTEP_RETURN_IF_ERROR(grad.dtype() == dst.dtype() ? dst.CopyFrom(grad) : Cast(grad, dst));
  return world > 1 ? Scale(dst, 1.0 / world) : absl::OkStatus();
}

absl::StatusOr<Tensor> FlatUnit::GradView(size_t i) const {
  if (!grad_flat_.defined() || i >= layout_.numels.size()) {
    return absl::FailedPreconditionError(absl::StrCat("FlatUnit::GradView: ", label(), " parameter ", i, ": ",
                                                      grad_flat_.defined() ? "no such parameter" : "no BeginGrads"));
  }
  return grad_flat_.Flat(layout_.offsets[i], layout_.numels[i]);
}

absl::Status FlatUnit::IssueReduce() {
  if (!grad_flat_.defined()) {
    return absl::FailedPreconditionError(absl::StrCat("FlatUnit::IssueReduce: ", label(), ": no BeginGrads"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(grad_shard_, Tensor::Empty({layout_.shard}, grad_flat_.dtype(), grad_flat_.device()));
  reduce_ = comm_.ReduceScatter(grad_flat_, grad_shard_, ReduceOp::kSum);
  return absl::OkStatus();
}

absl::Status FlatUnit::FinishReduce() {
  if (reduce_ == nullptr) return absl::OkStatus();
  absl::Status done = std::exchange(reduce_, nullptr)->Wait();
  grad_flat_ = Tensor();
  Tensor reduced = std::exchange(grad_shard_, Tensor());
  LOCKSTEP_RETURN_IF_ERROR(
      Prefixed(done, absl::StrCat("FSDP reduce-scatter of ", label(), "'s gradients on rank ", comm_.rank())));
  if (reduced.dtype() != DType::kF32) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor wide, Tensor::Empty({layout_.shard}, DType::kF32, reduced.device()));
    LOCKSTEP_RETURN_IF_ERROR(Cast(reduced, wide));
    reduced = wide;
  }
  if (!shard_.grad.defined()) {
    shard_.grad = reduced;
    return absl::OkStatus();
  }
  return ReduceInto(ReduceOp::kSum, reduced, shard_.grad);
}

absl::StatusOr<Tensor> FlatUnit::GatherCopy() {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({layout_.padded}, DType::kF32, shard_.value.device()));
  LOCKSTEP_RETURN_IF_ERROR(
      Prefixed(comm_.AllGather(shard_.value, full)->Wait(),
               absl::StrCat("FSDP all-gather of ", label(), "'s parameters on rank ", comm_.rank())));
  return full;
}

}  // namespace lockstep
