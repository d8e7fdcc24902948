// Sequential: children run in order; backward runs them in reverse
// (torch.nn.Sequential). Unnamed children are named by position, "0", "1",
// ..., so parameters are "0.weight", "2.bias", ... exactly as in PyTorch;
// named children (torch's Sequential(OrderedDict(...))) give "fc1.weight".
//
//   auto model = std::make_unique<Sequential>();
//   model->Add(std::make_unique<Flatten>());
//   model->Add(std::move(fc1));
//   model->Add(std::make_unique<ReLU>());
//
//   auto named = std::make_unique<Sequential>();
//   LOCKSTEP_ASSIGN_OR_RETURN(Linear* fc1, named->Add("fc1", std::move(linear)));
//   LOCKSTEP_RETURN_IF_ERROR(named->Add("bn1", std::move(batch_norm)).status());
#ifndef LOCKSTEP_NN_SEQUENTIAL_H_
#define LOCKSTEP_NN_SEQUENTIAL_H_

#include <memory>
#include <string>
#include <utility>

#include "nn/module.h"

namespace lockstep {

class Sequential : public Module {
 public:
  Sequential() = default;
  absl::string_view type_name() const override { return "Sequential"; }

  // Appends `child` named by its position (as torch's append) and returns
  // it (typed). Cannot fail: named children never take an all-digit name.
  template <typename M>
  M* Add(std::unique_ptr<M> child) {
    M* raw = child.get();
    RegisterModule(std::to_string(children().size()), std::move(child));
    return raw;
  }
  // Appends `child` under `name` and returns it (typed). InvalidArgument,
  // and `child` is destroyed, unless the name is non-empty, has no '.', is
  // not all digits (those are the positional names) and is not taken.
  template <typename M>
  absl::StatusOr<M*> Add(std::string name, std::unique_ptr<M> child) {
    absl::Status valid = CheckChildName(name, child.get());
    if (!valid.ok()) return valid;
    M* raw = child.get();
    RegisterModule(std::move(name), std::move(child));
    return raw;
  }
  size_t size() const { return children().size(); }
  Module& child(size_t i) const { return *children()[i].second; }
  const std::string& child_name(size_t i) const { return children()[i].first; }

  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override;

 private:
  absl::Status CheckChildName(const std::string& name, const Module* child) const;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_SEQUENTIAL_H_
