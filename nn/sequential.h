// Sequential: children run in order; backward runs them in reverse
// (torch.nn.Sequential). Children are named "0", "1", ... so parameters are
// "0.weight", "2.bias", ... exactly as in PyTorch.
//
//   auto model = std::make_unique<Sequential>();
//   model->Add(std::make_unique<Flatten>());
//   model->Add(std::move(fc1));
//   model->Add(std::make_unique<ReLU>());
#ifndef LOCKSTEP_NN_SEQUENTIAL_H_
#define LOCKSTEP_NN_SEQUENTIAL_H_

#include <memory>
#include <utility>

#include "nn/module.h"

namespace lockstep {

class Sequential : public Module {
 public:
  Sequential() = default;
  absl::string_view type_name() const override { return "Sequential"; }

  // Appends `child` and returns it (typed).
  template <typename M>
  M* Add(std::unique_ptr<M> child) {
    M* raw = child.get();
    RegisterModule(std::to_string(children().size()), std::move(child));
    return raw;
  }
  size_t size() const { return children().size(); }
  Module& child(size_t i) const { return *children()[i].second; }

  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const GradReadyHook& hook) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_SEQUENTIAL_H_
