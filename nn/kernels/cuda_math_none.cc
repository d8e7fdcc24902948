// nn/kernels/cuda_math.h for builds without CUDA: every call is an error.
#include "nn/kernels/cuda_math.h"

namespace lockstep {
namespace nn_cuda {
namespace {

absl::Status NoCuda(const char* operation) {
  return absl::FailedPreconditionError(
      std::string(operation) +
      " on a CUDA tensor: this binary was built without CUDA; rebuild with --config=cuda on a "
      "machine with the CUDA toolkit");
}

}  // namespace

absl::Status Gemm(int, DType, bool, bool, int64_t, int64_t, int64_t, float, const void*, const void*, float, void*) {
  return NoCuda("Gemm");
}
absl::Status Relu(int, DType, const void*, void*, int64_t) { return NoCuda("Relu"); }
absl::Status ReluBackward(int, DType, const void*, const void*, void*, int64_t) { return NoCuda("ReluBackward"); }
absl::Status Dropout(int, DType, const void*, void*, int64_t, uint64_t, uint64_t, uint32_t, float) {
  return NoCuda("Dropout");
}
absl::Status Sgd(int, const nn_elementwise::SgdParams&, const nn_elementwise::SgdFlags&, float*, const float*, float*,
                 int64_t) {
  return NoCuda("Sgd");
}
absl::Status Adam(int, const nn_elementwise::AdamParams&, const nn_elementwise::AdamFlags&, float*, const float*,
                  float*, float*, float*, int64_t) {
  return NoCuda("Adam");
}

absl::Status Im2Col(int, const window_elementwise::Geometry&, const float*, float*) { return NoCuda("Im2Col"); }
absl::Status Col2Im(int, const window_elementwise::Geometry&, const float*, float*) { return NoCuda("Col2Im"); }
absl::Status MaxPool(int, const window_elementwise::Geometry&, int64_t, const float*, float*, int32_t*) {
  return NoCuda("MaxPool2d");
}
absl::Status MaxPoolBackward(int, const window_elementwise::Geometry&, int64_t, const float*, const int32_t*, float*) {
  return NoCuda("MaxPool2d backward");
}

absl::Status BatchNormPlaneSums(int, int64_t, int64_t, int64_t, const float*, const float*, double*) {
  return NoCuda("BatchNorm");
}
absl::Status BatchNormPlaneGradSums(int, int64_t, int64_t, int64_t, const float*, const float*, const float*, double*,
                                    double*) {
  return NoCuda("BatchNorm backward");
}
absl::Status BatchNormTransform(int, int64_t, int64_t, int64_t, const float*, const float*, const float*, float*) {
  return NoCuda("BatchNorm");
}
absl::Status BatchNormInputGrad(int, int64_t, int64_t, int64_t, const float*, const float*, const float*, const float*,
                                const float*, const double*, const double*, float*) {
  return NoCuda("BatchNorm backward");
}

}  // namespace nn_cuda
}  // namespace lockstep
