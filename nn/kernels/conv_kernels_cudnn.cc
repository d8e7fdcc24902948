// cuDNN's convolutions (the cuDNN 9 backend-free "legacy" API: descriptors,
// cudnnConvolution*), nn/kernels/cudnn_conv_kernels.h.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_runtime.h"
#include "nn/kernels/cudnn_conv_kernels.h"

namespace lockstep {
namespace nn_internal {
namespace {

cudnnDataType_t DataType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kF16:
      return CUDNN_DATA_HALF;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

std::string ShapeString(const ConvShape& s) {
  return absl::StrCat(DTypeName(s.dtype), " x [", s.n, ", ", s.c, ", ", s.h, ", ", s.w, "], w [", s.o, ", ", s.c, ", ",
                      s.kh, ", ", s.kw, "], stride ", s.sh, "x", s.sw, ", padding ", s.ph, "x", s.pw);
}

absl::Status FromCudnn(cudnnStatus_t st, const char* operation, int device, const ConvShape* shape = nullptr) {
  if (st == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "Conv2d ", operation, " on cuda:", device, shape != nullptr ? absl::StrCat(" (", ShapeString(*shape), ")") : "",
      " failed: cuDNN ", cudnnGetErrorString(st), "; LOCKSTEP_NO_CUDNN=1 runs im2col + cuBLAS instead"));
}

absl::Status FromCuda(cudaError_t err, const char* operation, int device) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("Conv2d ", operation, " on cuda:", device, " failed: ", cudaGetErrorString(err)));
}

#define LOCKSTEP_CUDNN_RETURN_IF_ERROR(expr) \
  do {                                       \
    absl::Status status_ = (expr);           \
    if (!status_.ok()) return status_;       \
  } while (0)

// One cuDNN handle per device and thread (as the cuBLAS handles of
// nn/kernels/cuda_math_cuda.cc), made at first use, destroyed when the thread exits.
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (auto& [device, handle] : handles_) {
      cudaSetDevice(device);
      cudnnDestroy(handle);
    }
  }
  absl::StatusOr<cudnnHandle_t> Get(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cudnnHandle_t handle = nullptr;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(FromCudnn(cudnnCreate(&handle), "cudnnCreate", device));
    handles_.emplace(device, handle);
    return handle;
  }

 private:
  std::map<int, cudnnHandle_t> handles_;
};

absl::StatusOr<cudnnHandle_t> HandleFor(int device) {
  thread_local ThreadHandles handles;
  return handles.Get(device);
}

// RAII for the descriptors.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { cudnnCreateTensorDescriptor(&d); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { cudnnCreateFilterDescriptor(&d); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { cudnnCreateConvolutionDescriptor(&d); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Device memory for cuDNN's workspace, grown on demand.
class Workspace {
 public:
  explicit Workspace(int device) : device_(device) {}
  ~Workspace() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  absl::StatusOr<void*> Get(size_t bytes) {
    if (bytes <= size_) return ptr_;
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(FromCuda(cudaMalloc(&ptr_, bytes), "workspace cudaMalloc", device_));
    size_ = bytes;
    return ptr_;
  }

 private:
  int device_;
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// The algorithms whose result is a sum of the products in some order (see
// the header): the rest (FFT, Winograd) are left out.
bool SumsOnly(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool SumsOnly(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool SumsOnly(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// From cuDNN's heuristic ranking (cudnnGet*Algorithm_v7, what PyTorch uses
// without cudnn.benchmark): the first sums-only, deterministic algorithm in
// the dtype's math (full f32 for f32 data), else the first sums-only one.
template <typename Perf>
absl::StatusOr<Perf> Pick(const std::vector<Perf>& ranked, int returned, const char* what, int device,
                          const ConvShape& s) {
  const Perf* fallback = nullptr;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = ranked[static_cast<size_t>(i)];
    // f32: the descriptor asks for CUDNN_FMA_MATH; an entry that says it
    // needs tensor-op math (TF32 for f32 data) is left out all the same.
    // bf16/f16 operands multiply exactly into the f32 accumulators on tensor
    // cores, as PyTorch's autocast convolutions.
    const bool tensor_ops = p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (p.status != CUDNN_STATUS_SUCCESS || (tensor_ops && s.dtype == DType::kF32) || !SumsOnly(p.algo)) continue;
    if (p.determinism == CUDNN_DETERMINISTIC) return p;
    if (fallback == nullptr) fallback = &p;
  }
  if (fallback != nullptr) return *fallback;
  return absl::UnimplementedError(absl::StrCat("Conv2d on cuda:", device, " (", ShapeString(s), "): cuDNN offers no ",
                                               what, " algorithm", s.dtype == DType::kF32 ? " in full f32" : "",
                                               " without FFT or Winograd; "
                                               "LOCKSTEP_NO_CUDNN=1 runs im2col + cuBLAS instead"));
}

// Descriptors and algorithms of one shape.
struct Plan {
  ConvShape shape;
  TensorDesc x, y, bias;
  TensorDesc y32, bias32;  // f32 twins: the bias gradient of bf16/f16 data
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
};

absl::Status MakePlan(cudnnHandle_t handle, int device, Plan& p) {
  const ConvShape& s = p.shape;
  for (int64_t v : {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.oh, s.ow}) {
    if (v > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("Conv2d on cuda:", device, " (", ShapeString(s), "): a dimension exceeds cuDNN's int range"));
    }
  }
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  // Data in the shape's dtype, accumulation (the convolution's compute
  // type) in f32 always.
  const cudnnDataType_t data = DataType(s.dtype);
  const auto set4d = [&](cudnnTensorDescriptor_t d, cudnnDataType_t type, int64_t n, int64_t c, int64_t h, int64_t w,
                         const char* what) {
    return FromCudnn(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, i(n), i(c), i(h), i(w)), what, device, &s);
  };
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(set4d(p.x.d, data, s.n, s.c, s.h, s.w, "input descriptor"));
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(set4d(p.y.d, data, s.n, s.o, s.oh, s.ow, "output descriptor"));
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(set4d(p.bias.d, data, 1, s.o, 1, 1, "bias descriptor"));
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(set4d(p.y32.d, CUDNN_DATA_FLOAT, s.n, s.o, s.oh, s.ow, "output descriptor"));
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(set4d(p.bias32.d, CUDNN_DATA_FLOAT, 1, s.o, 1, 1, "bias descriptor"));
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(
      FromCudnn(cudnnSetFilter4dDescriptor(p.w.d, data, CUDNN_TENSOR_NCHW, i(s.o), i(s.c), i(s.kh), i(s.kw)),
                "weight descriptor", device, &s));
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(
      FromCudnn(cudnnSetConvolution2dDescriptor(p.conv.d, i(s.ph), i(s.pw), i(s.sh), i(s.sw), 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "convolution descriptor", device, &s));
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(
      FromCudnn(cudnnSetConvolutionMathType(p.conv.d, s.dtype == DType::kF32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
                "math type", device, &s));
  int n = 0, c = 0, h = 0, w = 0;
  LOCKSTEP_CUDNN_RETURN_IF_ERROR(FromCudnn(
      cudnnGetConvolution2dForwardOutputDim(p.conv.d, p.x.d, p.w.d, &n, &c, &h, &w), "output size", device, &s));
  if (n != s.n || c != s.o || h != s.oh || w != s.ow) {
    return absl::InternalError(absl::StrCat("Conv2d on cuda:", device, " (", ShapeString(s), "): cuDNN's output [", n,
                                            ", ", c, ", ", h, ", ", w, "] differs from Conv2d's [", s.n, ", ", s.o,
                                            ", ", s.oh, ", ", s.ow, "]"));
  }
  int returned = 0;
  {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(
        FromCudnn(cudnnGetConvolutionForwardAlgorithm_v7(handle, p.x.d, p.w.d, p.conv.d, p.y.d,
                                                         static_cast<int>(ranked.size()), &returned, ranked.data()),
                  "forward algorithm", device, &s));
    absl::StatusOr<cudnnConvolutionFwdAlgoPerf_t> pick = Pick(ranked, returned, "forward", device, s);
    if (!pick.ok()) return pick.status();
    p.fwd = pick->algo;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(
        FromCudnn(cudnnGetConvolutionForwardWorkspaceSize(handle, p.x.d, p.w.d, p.conv.d, p.y.d, p.fwd, &p.fwd_bytes),
                  "forward workspace", device, &s));
  }
  {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(
        FromCudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      handle, p.w.d, p.y.d, p.conv.d, p.x.d, static_cast<int>(ranked.size()), &returned, ranked.data()),
                  "backward-data algorithm", device, &s));
    absl::StatusOr<cudnnConvolutionBwdDataAlgoPerf_t> pick = Pick(ranked, returned, "backward-data", device, s);
    if (!pick.ok()) return pick.status();
    p.bwd_data = pick->algo;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(FromCudnn(cudnnGetConvolutionBackwardDataWorkspaceSize(
                                                 handle, p.w.d, p.y.d, p.conv.d, p.x.d, p.bwd_data, &p.bwd_data_bytes),
                                             "backward-data workspace", device, &s));
  }
  {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(
        FromCudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                      handle, p.x.d, p.y.d, p.conv.d, p.w.d, static_cast<int>(ranked.size()), &returned, ranked.data()),
                  "backward-filter algorithm", device, &s));
    absl::StatusOr<cudnnConvolutionBwdFilterAlgoPerf_t> pick = Pick(ranked, returned, "backward-filter", device, s);
    if (!pick.ok()) return pick.status();
    p.bwd_filter = pick->algo;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(
        FromCudnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, p.x.d, p.y.d, p.conv.d, p.w.d, p.bwd_filter,
                                                                 &p.bwd_filter_bytes),
                  "backward-filter workspace", device, &s));
  }
  return absl::OkStatus();
}

class CudnnConvKernels final : public ConvKernels {
 public:
  explicit CudnnConvKernels(int device) : device_(device), workspace_(device), scratch_(device) {}

  bool Supports(DType dtype) const override {
    return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
  }

  absl::Status Forward(const ConvShape& s, const void* x, const void* w, const void* b, void* y) override {
    absl::StatusOr<Call> call = Begin(s, "forward");
    if (!call.ok()) return call.status();
    absl::StatusOr<void*> ws = workspace_.Get(call->plan->fwd_bytes);
    if (!ws.ok()) return ws.status();
    const float one = 1.0f, zero = 0.0f;
    Plan& p = *call->plan;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(FromCudnn(cudnnConvolutionForward(call->handle, &one, p.x.d, x, p.w.d, w, p.conv.d,
                                                                     p.fwd, *ws, p.fwd_bytes, &zero, p.y.d, y),
                                             "forward", device_, &s));
    if (b != nullptr) {
      LOCKSTEP_CUDNN_RETURN_IF_ERROR(
          FromCudnn(cudnnAddTensor(call->handle, &one, p.bias.d, b, &one, p.y.d, y), "bias", device_, &s));
    }
    return Finish("forward");
  }

  absl::Status BackwardData(const ConvShape& s, const void* dy, const void* w, void* dx) override {
    absl::StatusOr<Call> call = Begin(s, "backward (input)");
    if (!call.ok()) return call.status();
    Plan& p = *call->plan;
    absl::StatusOr<void*> ws = workspace_.Get(p.bwd_data_bytes);
    if (!ws.ok()) return ws.status();
    const float one = 1.0f, zero = 0.0f;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(
        FromCudnn(cudnnConvolutionBackwardData(call->handle, &one, p.w.d, w, p.y.d, dy, p.conv.d, p.bwd_data, *ws,
                                               p.bwd_data_bytes, &zero, p.x.d, dx),
                  "backward (input)", device_, &s));
    return Finish("backward (input)");
  }

  absl::Status BackwardWeights(const ConvShape& s, const void* x, const void* dy, void* dw, void* db) override {
    absl::StatusOr<Call> call = Begin(s, "backward (weights)");
    if (!call.ok()) return call.status();
    Plan& p = *call->plan;
    absl::StatusOr<void*> ws = workspace_.Get(p.bwd_filter_bytes);
    if (!ws.ok()) return ws.status();
    const float one = 1.0f, zero = 0.0f;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(
        FromCudnn(cudnnConvolutionBackwardFilter(call->handle, &one, p.x.d, x, p.y.d, dy, p.conv.d, p.bwd_filter, *ws,
                                                 p.bwd_filter_bytes, &zero, p.w.d, dw),
                  "backward (weights)", device_, &s));
    if (db != nullptr && s.dtype == DType::kF32) {
      LOCKSTEP_CUDNN_RETURN_IF_ERROR(
          FromCudnn(cudnnConvolutionBackwardBias(call->handle, &one, p.y.d, dy, &zero, p.bias.d, db), "backward (bias)",
                    device_, &s));
    } else if (db != nullptr) {
      // cuDNN 9 has no bf16 bias gradient (CUDNN_STATUS_NOT_SUPPORTED on an
      // H200): dy widened to f32 (exactly), summed in f32 and the sums
      // rounded once, as a bf16 reduction with f32 accumulation. Its own
      // scratch: the filter algorithm may still be using the workspace.
      const int64_t count = s.n * s.o * s.oh * s.ow;
      absl::StatusOr<void*> scratch = scratch_.Get(static_cast<size_t>(count + s.o) * sizeof(float));
      if (!scratch.ok()) return scratch.status();
      float* dy32 = static_cast<float*>(*scratch);
      float* db32 = dy32 + count;
      LOCKSTEP_CUDNN_RETURN_IF_ERROR(cuda::Cast(s.dtype, dy, DType::kF32, dy32, count, device_, nullptr));
      LOCKSTEP_CUDNN_RETURN_IF_ERROR(
          FromCudnn(cudnnConvolutionBackwardBias(call->handle, &one, p.y32.d, dy32, &zero, p.bias32.d, db32),
                    "backward (bias)", device_, &s));
      // The same (default) stream as cuDNN's handle: ordered after the sum.
      LOCKSTEP_CUDNN_RETURN_IF_ERROR(cuda::Cast(DType::kF32, db32, s.dtype, db, s.o, device_, nullptr));
    }
    return Finish("backward (weights)");
  }

 private:
  struct Call {
    cudnnHandle_t handle;
    Plan* plan;
  };

  // The device made current, this thread's handle and the shape's plan.
  absl::StatusOr<Call> Begin(const ConvShape& s, const char* operation) {
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), operation, device_));
    absl::StatusOr<cudnnHandle_t> handle = HandleFor(device_);
    if (!handle.ok()) return handle.status();
    // Most recently used first; a few shapes (the epoch's last batch, eval
    // batches) are kept, as the oneDNN kernels keep theirs.
    for (size_t i = 0; i < plans_.size(); ++i) {
      if (plans_[i]->shape == s) {
        if (i != 0) std::swap(plans_[0], plans_[i]);
        return Call{*handle, plans_[0].get()};
      }
    }
    auto plan = std::make_unique<Plan>();
    plan->shape = s;
    LOCKSTEP_CUDNN_RETURN_IF_ERROR(MakePlan(*handle, device_, *plan));
    if (plans_.size() == kPlans) plans_.pop_back();
    plans_.insert(plans_.begin(), std::move(plan));
    return Call{*handle, plans_[0].get()};
  }

  // Waits for the call, so errors surface where they happened.
  absl::Status Finish(const char* operation) { return FromCuda(cudaStreamSynchronize(nullptr), operation, device_); }

  static constexpr size_t kPlans = 4;
  int device_;
  Workspace workspace_;
  Workspace scratch_;  // the bias gradient's f32 copies (bf16/f16 data)
  std::vector<std::unique_ptr<Plan>> plans_;
};

bool Disabled() {
  const char* v = std::getenv("LOCKSTEP_NO_CUDNN");
  return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

}  // namespace

std::unique_ptr<ConvKernels> CreateCudnnConvKernels(int device) {
  if (Disabled()) return nullptr;
  return std::make_unique<CudnnConvKernels>(device);
}

std::string CudnnConvDescription() {
  if (Disabled()) return "im2col + cuBLAS per image (LOCKSTEP_NO_CUDNN=1)";
  const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch in cuDNN 9
  return absl::StrCat("cuDNN ", v / 10000, ".", (v / 100) % 100, ".", v % 100, " (full f32)");
}

}  // namespace nn_internal
}  // namespace lockstep
