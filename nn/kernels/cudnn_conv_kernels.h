// The CUDA convolution kernels behind nn/conv2d.h: cuDNN's when lockstep is
// built with it (@local_cuda found cudnn.h and libcudnn.so under the CUDA
// toolkit), none otherwise (Conv2d then runs im2col + cuBLAS per image).
//
//   std::unique_ptr<ConvKernels> k = CreateCudnnConvKernels(/*device=*/0);  // may be null
//   LOCKSTEP_RETURN_IF_ERROR(k->Forward(shape, x, w, b, y));   // device pointers
//
// The ConvKernels contract of nn/kernels/conv_kernels.h, on pointers into
// cuda:`device`: NCHW f32 activations, OIHW weights, the whole batch in one
// cuDNN call, each call finished before it returns (as nn/kernels/
// cuda_math.h). Descriptors and the chosen algorithms are kept per shape.
//
// Numerics: full f32 (CUDNN_FMA_MATH: no TF32, unlike PyTorch's default
// torch.backends.cudnn.allow_tf32=True), and only algorithms that sum
// products in some order (implicit/explicit GEMM, direct; no FFT or
// Winograd, whose transforms add error beyond a reordered sum), deterministic
// ones first. So every result stays within nn/testing/error_bound.h's radius,
// the bound the CPU kernels meet. LOCKSTEP_NO_CUDNN=1 switches cuDNN off (an
// A/B switch). One object per Conv2d: not thread-safe; cuDNN handles are
// kept per device and thread.
#ifndef LOCKSTEP_NN_KERNELS_CUDNN_CONV_KERNELS_H_
#define LOCKSTEP_NN_KERNELS_CUDNN_CONV_KERNELS_H_

#include <memory>
#include <string>

#include "nn/kernels/conv_kernels.h"

namespace lockstep {
namespace nn_internal {

// cuDNN's kernels for cuda:`device`, or null without cuDNN (or with
// LOCKSTEP_NO_CUDNN=1).
std::unique_ptr<ConvKernels> CreateCudnnConvKernels(int device);

// What runs convolutions on CUDA tensors, for the trainers' start-up line:
// "cuDNN 9.19.0 (full f32)", or the fallback and why.
std::string CudnnConvDescription();

}  // namespace nn_internal
}  // namespace lockstep

#endif  // LOCKSTEP_NN_KERNELS_CUDNN_CONV_KERNELS_H_
