// An f64 reference of one BatchNorm step with a derived error radius
// (error_bound.h): the tolerance of the BatchNorm and SyncBatchNorm golden
// tests.
//
//   BatchNormReference ref = BatchNormStep(x, g, weight, bias, running_mean, running_var,
//                                          /*training=*/true, /*factor=*/0.1);
//   LOCKSTEP_RETURN_IF_ERROR(error_bound::ExpectWithin(our_y, ref.y, "y"));
#ifndef LOCKSTEP_NN_TESTING_BATCH_NORM_REFERENCE_H_
#define LOCKSTEP_NN_TESTING_BATCH_NORM_REFERENCE_H_

#include "core/tensor.h"
#include "nn/testing/error_bound.h"

namespace lockstep {

// The reference of one BatchNorm step over x [N, C, *] (f32) with upstream
// gradient g: y, grad_input, grad_weight, grad_bias and, in training, the
// running statistics from the previous ones (as PyTorch's own), `factor`
// being the momentum (or 1 / num_batches_tracked). Where implementations
// may legitimately order the arithmetic differently (y as
// (x - mean) * invstd * w + b or as x * alpha + (b - mean * alpha); the input
// gradient from (x - mean) or from x_hat), the radius covers each. Every
// matrix is one row.
struct BatchNormReference {
  error_bound::Matrix y, grad_input, grad_weight, grad_bias, running_mean, running_var;
};

BatchNormReference BatchNormStep(const Tensor& x, const Tensor& g, const Tensor& weight, const Tensor& bias,
                                 const Tensor& mean_prev, const Tensor& var_prev, bool training, double factor);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_TESTING_BATCH_NORM_REFERENCE_H_
