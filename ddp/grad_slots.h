// GradSlots: the parameters whose gradients a Reducer (ddp/reducer.h)
// averages, whoever owns them: lockstep's nn modules (ParameterSlots,
// below) or libtorch's (interop/torch). The Reducer sees only this: one
// value and one gradient per parameter, by index. Internal to the DDP
// front ends.
#ifndef LOCKSTEP_DDP_GRAD_SLOTS_H_
#define LOCKSTEP_DDP_GRAD_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace lockstep {

class GradSlots {
 public:
  virtual ~GradSlots() = default;

  virtual size_t size() const = 0;
  // Parameter `i`'s value: its bytes, dtype and device lay out the buckets.
  virtual const Tensor& value(size_t i) const = 0;
  // Its gradient as backward left it (undefined when there is none); the
  // bytes are the parameter's own (a view, not a copy).
  virtual absl::StatusOr<Tensor> grad(size_t i) = 0;
  // Makes `g` its gradient (a bucket view, with gradient_as_bucket_view,
  // or a tensor of its own).
  virtual absl::Status set_grad(size_t i, const Tensor& g) = 0;
  // With gradient_as_bucket_view: makes `view` (elements [offset, offset +
  // view.numel()) of the flat `bucket`, with the parameter's shape) its
  // gradient. By default set_grad(i, view); libtorch's slots make it a view
  // of one libtorch tensor per bucket instead, as PyTorch's narrow() views
  // of the bucket are (one storage: is_alias_of holds between them).
  virtual absl::Status set_grad_view(size_t i, const Tensor& bucket, int64_t offset, const Tensor& view) {
    (void)bucket;
    (void)offset;
    return set_grad(i, view);
  }
};

// lockstep's own parameters (nn/module.h's Parameter: value and grad).
template <typename ParameterT>
class ParameterSlotsOf : public GradSlots {
 public:
  explicit ParameterSlotsOf(std::vector<ParameterT*> params) : params_(std::move(params)) {}
  size_t size() const override { return params_.size(); }
  const Tensor& value(size_t i) const override { return params_[i]->value; }
  absl::StatusOr<Tensor> grad(size_t i) override { return params_[i]->grad; }
  absl::Status set_grad(size_t i, const Tensor& g) override {
    params_[i]->grad = g;
    return absl::OkStatus();
  }

 private:
  std::vector<ParameterT*> params_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_GRAD_SLOTS_H_
