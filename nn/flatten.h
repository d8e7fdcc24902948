// Flatten: [N, d1, d2, ...] -> [N, d1 * d2 * ...] (torch.nn.Flatten() with
// its defaults start_dim=1, end_dim=-1). A view, no copy; backward restores
// the input's shape.
#ifndef LOCKSTEP_NN_FLATTEN_H_
#define LOCKSTEP_NN_FLATTEN_H_

#include <memory>

#include "nn/module.h"

namespace lockstep {

class Flatten : public Module {
 public:
  Flatten() = default;
  absl::string_view type_name() const override { return "Flatten"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override {
    return std::unique_ptr<Module>(new Flatten());
  }

 private:
  Shape saved_shape_;
  bool pending_ = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_FLATTEN_H_
