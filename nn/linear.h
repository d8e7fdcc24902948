// Linear: y = x W^T + b, as torch.nn.Linear, with an optional compute dtype
// for mixed precision.
//
//   Mt19937 gen(0);  // torch.manual_seed(0)
//   LinearOptions options;
//   options.in_features = 784;
//   options.out_features = 512;
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> fc, Linear::Create(options, gen));
//
// Parameters "weight" [out, in] and "bias" [out] are f32 master weights,
// initialized as PyTorch does (kaiming_uniform_(a=sqrt(5)) for the weight,
// uniform(+-1/sqrt(in)) for the bias, in that order, from `gen`), so a model
// built from the same seed as its PyTorch twin starts with the same numbers.
// Create without a generator gives zero parameters, for weights that are
// loaded right after (LoadStateDict); it draws nothing, so it leaves the
// random stream of the layers built after it untouched.
//
// With compute_dtype f16 or bf16 (autocast), forward rounds the input, weight
// and bias to that dtype, multiplies with f32 accumulation and returns the
// output in that dtype; backward computes the gradients in that dtype too
// (so an f16 overflow shows as Inf, which GradScaler detects) and accumulates
// them into the f32 `grad`s. The input gradient is returned in the input's
// dtype. Input: [batch, in_features] of any floating dtype on the module's
// device.
#ifndef LOCKSTEP_NN_LINEAR_H_
#define LOCKSTEP_NN_LINEAR_H_

#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/dtype.h"
#include "core/mt19937.h"
#include "nn/module.h"

namespace lockstep {

struct LinearOptions {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
  DType compute_dtype = DType::kF32;
  Device device = Device::Cpu();
};

class Linear : public Module {
 public:
  static absl::StatusOr<std::unique_ptr<Linear>> Create(const LinearOptions& options, Mt19937& gen);
  // Zero weight and bias (see above).
  static absl::StatusOr<std::unique_ptr<Linear>> Create(const LinearOptions& options);

  absl::string_view type_name() const override { return "Linear"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  const LinearOptions& options() const { return options_; }
  // f32, f16 or bf16.
  absl::Status set_compute_dtype(DType dtype);

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override;

 private:
  explicit Linear(const LinearOptions& options) : options_(options) {}
  absl::StatusOr<Tensor> OnesColumn(int64_t rows);

  LinearOptions options_;
  Parameter weight_;
  Parameter bias_;
  // Saved by Forward for Backward: the input and weight in the compute dtype.
  Tensor saved_input_;
  Tensor saved_weight_;
  DType saved_input_dtype_ = DType::kF32;
  Tensor ones_;  // [rows, 1] of the compute dtype: bias broadcast and sum as GEMMs
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_LINEAR_H_
