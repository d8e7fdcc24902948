// Without oneDNN: no kernels (Conv2d runs im2col + BLAS).
#include "nn/kernels/conv_kernels.h"

namespace lockstep {
namespace nn_internal {

std::unique_ptr<ConvKernels> ConvKernels::Create() { return nullptr; }

std::string ConvKernels::Description() {
  return "im2col + BLAS per image (lockstep was built without oneDNN: apt-get install libdnnl-dev, or bash "
         "tools/setup.sh, then rebuild)";
}

}  // namespace nn_internal
}  // namespace lockstep
