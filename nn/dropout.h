// Dropout: zeroes each element with probability p during training and
// scales the rest by 1 / (1 - p) (torch.nn.Dropout); the identity in eval
// mode.
//
//   auto drop = std::make_unique<Dropout>(/*p=*/0.2, /*seed=*/1234);
//
// The mask is a counter-based hash of (seed, forward call number, element),
// so it is reproducible for a seed and the same on CPU and CUDA; backward
// recomputes it instead of storing it. It does not reproduce PyTorch's
// masks (which depend on its global generator).
#ifndef LOCKSTEP_NN_DROPOUT_H_
#define LOCKSTEP_NN_DROPOUT_H_

#include <cstdint>
#include <memory>

#include "nn/module.h"

namespace lockstep {

class Dropout : public Module {
 public:
  // 0 <= p <= 1 (checked by Forward).
  Dropout(double p, uint64_t seed) : p_(p), seed_(seed) {}
  absl::string_view type_name() const override { return "Dropout"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

  double p() const { return p_; }
  // Forward calls in training mode so far; the next mask uses this number.
  uint64_t calls() const { return calls_; }
  void set_calls(uint64_t calls) { calls_ = calls; }

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override {
    return std::unique_ptr<Module>(new Dropout(p_, seed_));
  }
  // "calls": the mask counter, so a resumed run draws the same masks.
  std::map<std::string, std::string> OwnExtraState() const override;
  absl::Status LoadOwnExtraState(const std::string& key, const std::string& value, bool apply) override;

 private:
  double p_;
  uint64_t seed_;
  uint64_t calls_ = 0;
  // Backward state: whether a forward is pending, and its mask (call number)
  // or that it was the identity.
  bool pending_ = false;
  bool identity_ = true;
  uint64_t mask_call_ = 0;
  Shape saved_shape_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_DROPOUT_H_
