// Without cuDNN: no kernels (Conv2d runs im2col + cuBLAS per image on CUDA).
#include "nn/kernels/cudnn_conv_kernels.h"

namespace lockstep {
namespace nn_internal {

std::unique_ptr<ConvKernels> CreateCudnnConvKernels(int) { return nullptr; }

std::string CudnnConvDescription() {
  return "im2col + cuBLAS per image (lockstep was built without cuDNN: it needs cudnn.h and libcudnn.so under "
         "the CUDA toolkit)";
}

}  // namespace nn_internal
}  // namespace lockstep
