// BatchNorm1d and BatchNorm2d: per-channel batch normalization as PyTorch
// 1.13's torch.nn.BatchNorm1d/2d, with the same parameters, buffers, state
// dict names and update rules.
//
//   BatchNormOptions options;
//   options.num_features = 16;
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm2d> bn, BatchNorm2d::Create(options));
//
// BatchNorm1d takes [N, C] or [N, C, L], BatchNorm2d [N, C, H, W]; f32,
// contiguous, on the CPU or a CUDA device. A bf16 or f16 input (autocast's
// convolution output) is normalized as PyTorch's mixed-type batch_norm does
// it: widened exactly to f32, computed as above with the f32 parameters and
// statistics, the output (and the input gradient) rounded once to its dtype. State, in torch's state_dict
// order: parameters "weight" (ones) and "bias" (zeros) [C] when affine;
// buffers "running_mean" (zeros) and "running_var" (ones) f32 [C] and
// "num_batches_tracked" i64 0-d when track_running_stats.
//
// Training mode (or no running statistics) normalizes with the batch's
// statistics over N and the spatial dimensions, the biased variance:
//   y = (x - mean) / sqrt(var + eps) * weight + bias
// and, when tracking, adds 1 to num_batches_tracked and updates
//   running = (1 - f) running + f batch,  f = momentum, or 1 / num_batches_tracked
//   when momentum is nullopt (a cumulative average, torch's momentum=None),
// with the UNBIASED variance (x n / (n - 1)) for running_var, as PyTorch.
// Evaluation mode normalizes with the running statistics and changes nothing.
// Backward follows the statistics the forward used (batch statistics make
// the input gradient depend on the whole batch), fires the hook for bias
// then weight, then computes the input gradient.
//
// Sums run in double, as PyTorch's CPU kernel accumulates them.
//
// Synchronized statistics (SyncBatchNorm; ddp/sync_batch_norm.h converts a
// model): with a BatchNormSync set, training mode normalizes with the
// statistics of the whole group's batch. Each per-channel sum above (the
// values with the count, then the squared deviations from the group's f32
// mean) is summed over the group, in f64, before it is used, so the result
// is that of this module on the concatenation of every rank's batch up to
// the order of f64 additions; a rank's batch may be empty. The running
// statistics use the group's count (unbiased over it). Backward sums
// sum(dy) and sum((x - mean) dy) over the group for the input gradient
// (only when it is asked for, as PyTorch's SyncBatchNorm), while the weight
// and bias gradients stay this rank's own, for DDP to average. Every rank
// must run the same forwards and backwards. Evaluation mode is local.
//
// On CUDA (a module created on or moved to cuda:N, inputs there too) the
// per-plane sums and the elementwise passes run as kernels with the CPU's
// arithmetic and summation order (nn/kernels/batch_norm_elementwise.h):
// the two devices give the same bits. The per-channel statistics and the
// running buffers' update are computed on the host from [N x C] plane sums
// copied back, a few small copies per call.
#ifndef LOCKSTEP_NN_BATCH_NORM_H_
#define LOCKSTEP_NN_BATCH_NORM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "nn/module.h"

namespace lockstep {

// Sums over a group of ranks for synchronized statistics.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // Replaces every element by its sum over the group; every rank calls it
  // in the same order with the same size. The result is the same on every
  // rank.
  virtual absl::Status AllSum(std::vector<double>& values) = 0;
};

struct BatchNormOptions {
  int64_t num_features = 0;  // C
  double eps = 1e-5;
  // The weight of each new batch in the running statistics (0..1); nullopt
  // for the cumulative average.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight and bias
  bool track_running_stats = true;  // running_mean/var buffers, used in eval mode
  Device device = Device::Cpu();
};

// The shared implementation; use BatchNorm1d or BatchNorm2d.
class BatchNorm : public Module {
 public:
  absl::StatusOr<Tensor> Forward(const Tensor& input) override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }
  const BatchNormOptions& options() const { return options_; }

  // Synchronizes the batch statistics through `sync` (null: local ones).
  void SetSync(std::shared_ptr<BatchNormSync> sync);
  bool synchronized() const { return sync_ != nullptr; }

 protected:
  // Accepts inputs of rank min_rank..max_rank.
  BatchNorm(const BatchNormOptions& options, int min_rank, int max_rank)
      : options_(options), min_rank_(min_rank), max_rank_(max_rank) {}
  // Validates the options, creates and registers the state.
  absl::Status Init();

  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& ready) override;

 private:
  absl::Status CheckInput(const Tensor& input) const;
  absl::StatusOr<Tensor> ForwardF32(const Tensor& input);

  BatchNormOptions options_;
  int min_rank_;
  int max_rank_;
  Parameter weight_;
  Parameter bias_;
  Tensor running_mean_;
  Tensor running_var_;
  Tensor num_batches_tracked_;
  // Saved by Forward for Backward: the input and, per channel, the mean and
  // 1 / sqrt(var + eps) it normalized with.
  Tensor saved_input_;  // f32 (a bf16/f16 input's widened copy)
  DType saved_input_dtype_ = DType::kF32;
  std::vector<float> saved_mean_;
  std::vector<float> saved_invstd_;
  bool saved_batch_stats_ = false;
  double saved_count_ = 0;     // Values per channel the statistics came from.
  bool saved_synced_ = false;  // Whether they were the group's.
  std::shared_ptr<BatchNormSync> sync_;
};

class BatchNorm1d final : public BatchNorm {
 public:
  static absl::StatusOr<std::unique_ptr<BatchNorm1d>> Create(const BatchNormOptions& options);
  absl::string_view type_name() const override { return "BatchNorm1d"; }

 protected:
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override;

 private:
  explicit BatchNorm1d(const BatchNormOptions& options) : BatchNorm(options, 2, 3) {}
};

class BatchNorm2d final : public BatchNorm {
 public:
  static absl::StatusOr<std::unique_ptr<BatchNorm2d>> Create(const BatchNormOptions& options);
  absl::string_view type_name() const override { return "BatchNorm2d"; }

 protected:
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override;

 private:
  explicit BatchNorm2d(const BatchNormOptions& options) : BatchNorm(options, 4, 4) {}
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_BATCH_NORM_H_
