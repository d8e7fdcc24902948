// FlatUnit: one FSDP unit's shard, and the collectives that gather it and
// reduce its gradients: the part of fully sharded data parallel that does
// not know whose modules the parameters belong to, shared by lockstep's nn
// front (fsdp/fully_shard.h) and libtorch's (interop/torch/fsdp), as both
// DDPs share the reducer.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FlatUnit> unit, FlatUnit::Create("layer1", {6, 3}, *comm));
//   LOCKSTEP_RETURN_IF_ERROR(unit->SetShardFrom(0, weight));          // this rank's elements of each parameter
//   LOCKSTEP_RETURN_IF_ERROR(unit->IssueGather(full));                 // full: [padded] in the gathering dtype
//   LOCKSTEP_RETURN_IF_ERROR(unit->WaitGather());                      // full now holds every parameter
//   LOCKSTEP_RETURN_IF_ERROR(unit->BeginGrads());
//   LOCKSTEP_RETURN_IF_ERROR(unit->AddGrad(0, weight_grad));           // times float(1 / world)
//   LOCKSTEP_RETURN_IF_ERROR(unit->IssueReduce());
//   LOCKSTEP_RETURN_IF_ERROR(unit->FinishReduce());                    // unit->shard().grad: the average
//
// The shard is f32 (the master copy the optimizer steps); the layout is
// fsdp/flat_shard.h's. Mixed precision (FSDP2's MixedPrecisionPolicy):
// IssueGather into a bf16 or f16 `full` casts the shard first and gathers
// the low-precision copy (param_dtype); BeginGrads(reduce_dtype) keeps the
// flat gradient, and so the reduce-scatter, in that dtype, and FinishReduce
// widens the result to f32. In f32 the gradient arithmetic is DDP's: each
// element times float(1 / world), then a SUM (ddp/reducer.cc).
//
// One gather and one reduction may be in flight at a time; every rank must
// issue the same units' collectives in the same order. Not thread-safe.
#ifndef LOCKSTEP_FSDP_FLAT_UNIT_H_
#define LOCKSTEP_FSDP_FLAT_UNIT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "fsdp/flat_shard.h"
#include "nn/module.h"

namespace lockstep {

// FSDP2's MixedPrecisionPolicy, for the fronts: the dtype a unit's
// parameters are gathered in (and its forward and backward compute in), and
// the dtype its gradients are reduced in. The shards stay f32.
struct MixedPrecisionPolicy {
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
};

// Parameter `i`'s elements of a whole flat buffer (`layout.padded` of them,
// any dtype), as a view of `shape`.
absl::StatusOr<Tensor> ParameterOf(const FlatShardLayout& layout, const Tensor& full, size_t i, const Shape& shape);

// Copies `rank`'s elements of parameter `i` out of `value` (its whole value:
// any shape with numels[i] elements, any floating dtype) into `shard`
// (layout.shard f32 elements).
absl::Status CopyIntoShard(const FlatShardLayout& layout, int rank, size_t i, const Tensor& value, const Tensor& shard);

class FlatUnit {
 public:
  // A unit named `name` ("" for the root) over parameters with `numels`
  // elements, in that order; the shard starts at zero.
  static absl::StatusOr<std::unique_ptr<FlatUnit>> Create(std::string name, const std::vector<int64_t>& numels,
                                                          Communicator& comm, Device device = Device::Cpu());
  // Waits for collectives in flight (their buffers must outlive them).
  ~FlatUnit();
  FlatUnit(const FlatUnit&) = delete;
  FlatUnit& operator=(const FlatUnit&) = delete;

  const std::string& name() const { return name_; }
  // "the root unit" or "unit 'layer1'", for messages.
  std::string label() const;
  const FlatShardLayout& layout() const { return layout_; }
  // This rank's elements: value f32 [shard]; grad the reduced gradient.
  Parameter& shard() { return shard_; }

  // Copies this rank's elements of parameter `i` out of `full` (its whole
  // value: any shape with numels[i] elements, any floating dtype).
  absl::Status SetShardFrom(size_t i, const Tensor& full);

  // Starts gathering every rank's shard into `full` (padded elements, f32,
  // bf16 or f16; it must stay valid until WaitGather).
  absl::Status IssueGather(const Tensor& full);
  bool gather_pending() const { return gather_ != nullptr; }
  // Waits for the gather in flight (OK when none).
  absl::Status WaitGather();

  // Starts a step's gradient: a zero flat buffer in `reduce_dtype` (f32,
  // bf16 or f16). Parameters without a gradient contribute zeros.
  absl::Status BeginGrads(DType reduce_dtype = DType::kF32);
  // Writes parameter `i`'s gradient, times float(1 / world), into it; a
  // gradient that is GradView(i) itself is scaled in place.
  absl::Status AddGrad(size_t i, const Tensor& grad);
  // Parameter `i`'s place in the flat gradient (after BeginGrads, in its
  // dtype), flat: a front may let backward accumulate into it directly,
  // saving a gradient's copy and its memory.
  absl::StatusOr<Tensor> GradView(size_t i) const;
  // Starts the reduce-scatter (SUM) of the flat gradient.
  absl::Status IssueReduce();
  bool reduce_pending() const { return reduce_ != nullptr; }
  // Waits for it and writes the result into shard().grad (a new tensor
  // when that is undefined, added to it otherwise). OK when none.
  absl::Status FinishReduce();

  // Collective: the whole flat parameter (f32, padded) in a new tensor.
  absl::StatusOr<Tensor> GatherCopy();

 private:
  FlatUnit(std::string name, FlatShardLayout layout, Communicator& comm)
      : name_(std::move(name)), layout_(std::move(layout)), comm_(comm) {}

  std::string name_;
  FlatShardLayout layout_;
  Communicator& comm_;
  Parameter shard_;
  std::shared_ptr<Work> gather_;
  Tensor gather_input_;  // The shard cast to the gathering dtype (mixed precision).
  Tensor grad_flat_;
  Tensor grad_shard_;
  std::shared_ptr<Work> reduce_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_FSDP_FLAT_UNIT_H_
