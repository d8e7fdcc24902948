// nn/kernels/cuda_math.h with cuBLAS and nn/kernels/nn_cuda_kernels.cu.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/kernels/cuda_math.h"
#include "nn/kernels/nn_cuda_launch.h"

namespace lockstep {
namespace nn_cuda {
namespace {

absl::Status FromCuda(int err, const char* operation, int device) {
  if (err == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(operation, " on cuda:", device, " failed: ", cudaGetErrorString(static_cast<cudaError_t>(err))));
}

absl::Status FromCublas(cublasStatus_t err, const char* operation, int device) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(operation, " on cuda:", device, " failed: cuBLAS status ", static_cast<int>(err)));
}

// Launches then waits, so errors surface at the call that caused them.
absl::Status Finish(int launch_err, const char* operation, int device) {
  if (launch_err != 0) return FromCuda(launch_err, operation, device);
  return FromCuda(static_cast<int>(cudaDeviceSynchronize()), operation, device);
}

absl::Status SetDevice(int device, const char* operation) {
  return FromCuda(static_cast<int>(cudaSetDevice(device)), operation, device);
}

// One cuBLAS handle per device and thread (as PyTorch's handle pool), created
// on first use and destroyed when the thread exits.
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (auto& [device, handle] : handles_) {
      cudaSetDevice(device);
      cublasDestroy(handle);
    }
  }
  absl::StatusOr<cublasHandle_t> Get(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cublasHandle_t handle = nullptr;
    absl::Status s = FromCublas(cublasCreate(&handle), "cublasCreate", device);
    if (!s.ok()) return s;
    handles_.emplace(device, handle);
    return handle;
  }

 private:
  std::map<int, cublasHandle_t> handles_;
};

absl::StatusOr<cublasHandle_t> HandleFor(int device) {
  thread_local ThreadHandles handles;
  return handles.Get(device);
}

// A device buffer per device and thread for the small per-channel and
// per-plane arrays of BatchNorm, grown on demand and freed when the thread
// exits (no cudaMalloc per call).
class ThreadScratch {
 public:
  ~ThreadScratch() {
    for (auto& [device, buffer] : buffers_) {
      cudaSetDevice(device);
      cudaFree(buffer.first);
    }
  }
  absl::StatusOr<char*> Get(int device, size_t bytes) {
    auto& [ptr, size] = buffers_[device];
    if (size >= bytes) return static_cast<char*>(ptr);
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    size = 0;
    absl::Status s = FromCuda(static_cast<int>(cudaMalloc(&ptr, bytes)), "BatchNorm scratch cudaMalloc", device);
    if (!s.ok()) return s;
    size = bytes;
    return static_cast<char*>(ptr);
  }

 private:
  std::map<int, std::pair<void*, size_t>> buffers_;
};

// Host arrays copied into one scratch buffer (8-byte aligned pieces, one
// cudaMemcpy), followed by room for `out_bytes` of results.
struct Staged {
  std::vector<char*> in;  // device copies, in the order given
  char* out = nullptr;
};

struct HostArray {
  const void* data;  // null: passed on as null
  size_t bytes;
};

size_t Align8(size_t n) { return (n + 7) / 8 * 8; }

absl::StatusOr<Staged> Stage(int device, std::initializer_list<HostArray> arrays, size_t out_bytes) {
  thread_local ThreadScratch scratch;
  size_t total = 0;
  for (const HostArray& a : arrays) total += a.data == nullptr ? 0 : Align8(a.bytes);
  absl::StatusOr<char*> base = scratch.Get(device, std::max<size_t>(total + out_bytes, 8));
  if (!base.ok()) return base.status();
  std::vector<char> host(total);
  Staged staged;
  size_t at = 0;
  for (const HostArray& a : arrays) {
    if (a.data == nullptr) {
      staged.in.push_back(nullptr);
      continue;
    }
    std::memcpy(host.data() + at, a.data, a.bytes);
    staged.in.push_back(*base + at);
    at += Align8(a.bytes);
  }
  if (total > 0) {
    absl::Status s = FromCuda(static_cast<int>(cudaMemcpy(*base, host.data(), total, cudaMemcpyHostToDevice)),
                              "BatchNorm cudaMemcpy", device);
    if (!s.ok()) return s;
  }
  staged.out = *base + total;
  return staged;
}

absl::Status CopyOut(int device, void* host, const void* dev, size_t bytes, const char* operation) {
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(static_cast<int>(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost)), operation, device);
}

}  // namespace

absl::Status Gemm(int device, DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, const void* b, float beta, void* c) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm on cuda:", device, ": dimensions ", m, "x", n, "x", k, " exceed cuBLAS's int range"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  absl::Status s = SetDevice(device, "Gemm");
  if (!s.ok()) return s;
  absl::StatusOr<cublasHandle_t> handle = HandleFor(device);
  if (!handle.ok()) return handle.status();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
  // operands and keep the transposition flags.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(trans_a ? m : k);
  const int ldb = static_cast<int>(trans_b ? k : n);
  const int ldc = static_cast<int>(n);
  cublasStatus_t st;
  if (dtype == DType::kF64) {
    const double alpha64 = alpha, beta64 = beta;
    st = cublasDgemm(*handle, op_b, op_a, n, m, k, &alpha64, static_cast<const double*>(b), ldb,
                     static_cast<const double*>(a), lda, &beta64, static_cast<double*>(c), ldc);
  } else {
    cudaDataType_t type = CUDA_R_32F;
    if (dtype == DType::kF16) type = CUDA_R_16F;
    if (dtype == DType::kBF16) type = CUDA_R_16BF;
    if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm on cuda:", device, ": unsupported dtype ", DTypeName(dtype)));
    }
    st = cublasGemmEx(*handle, op_b, op_a, n, m, k, &alpha, b, type, ldb, a, type, lda, &beta, c, type, ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  s = FromCublas(st, "Gemm", device);
  if (!s.ok()) return s;
  return FromCuda(static_cast<int>(cudaDeviceSynchronize()), "Gemm", device);
}

absl::Status Relu(int device, DType dtype, const void* in, void* out, int64_t count) {
  absl::Status s = SetDevice(device, "Relu");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchRelu(static_cast<int>(dtype), in, out, count), "Relu", device);
}

absl::Status ReluBackward(int device, DType dtype, const void* grad_out, const void* out, void* grad_in,
                          int64_t count) {
  absl::Status s = SetDevice(device, "ReluBackward");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchReluBackward(static_cast<int>(dtype), grad_out, out, grad_in, count),
                "ReluBackward", device);
}

absl::Status Dropout(int device, DType dtype, const void* in, void* out, int64_t count, uint64_t seed, uint64_t offset,
                     uint32_t keep_threshold24, float scale) {
  absl::Status s = SetDevice(device, "Dropout");
  if (!s.ok()) return s;
  return Finish(
      nn_cuda_internal::LaunchDropout(static_cast<int>(dtype), in, out, count, seed, offset, keep_threshold24, scale),
      "Dropout", device);
}

absl::Status Sgd(int device, const nn_elementwise::SgdParams& params, const nn_elementwise::SgdFlags& flags, float* p,
                 const float* g, float* buf, int64_t count) {
  absl::Status s = SetDevice(device, "Sgd");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchSgd(params, flags, p, g, buf, count), "Sgd", device);
}

absl::Status Adam(int device, const nn_elementwise::AdamParams& params, const nn_elementwise::AdamFlags& flags,
                  float* p, const float* g, float* m, float* v, float* v_max, int64_t count) {
  absl::Status s = SetDevice(device, "Adam");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchAdam(params, flags, p, g, m, v, v_max, count), "Adam", device);
}

absl::Status Im2Col(int device, const window_elementwise::Geometry& g, const float* image, float* columns) {
  absl::Status s = SetDevice(device, "Im2Col");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchIm2Col(g, image, columns), "Im2Col", device);
}

absl::Status Col2Im(int device, const window_elementwise::Geometry& g, const float* columns, float* image) {
  absl::Status s = SetDevice(device, "Col2Im");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchCol2Im(g, columns, image), "Col2Im", device);
}

absl::Status MaxPool(int device, const window_elementwise::Geometry& g, int64_t images, const float* in, float* out,
                     int32_t* indices) {
  absl::Status s = SetDevice(device, "MaxPool2d");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchMaxPool(g, images, in, out, indices), "MaxPool2d", device);
}

absl::Status MaxPoolBackward(int device, const window_elementwise::Geometry& g, int64_t images, const float* grad_out,
                             const int32_t* indices, float* grad_in) {
  absl::Status s = SetDevice(device, "MaxPool2d backward");
  if (!s.ok()) return s;
  return Finish(nn_cuda_internal::LaunchMaxPoolBackward(g, images, grad_out, indices, grad_in), "MaxPool2d backward",
                device);
}

absl::Status BatchNormPlaneSums(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* mean,
                                double* out) {
  const char* op = "BatchNorm forward sums";
  LOCKSTEP_RETURN_IF_ERROR(SetDevice(device, op));
  const int64_t planes = n * c;
  const size_t out_bytes = static_cast<size_t>(planes) * sizeof(double);
  absl::StatusOr<Staged> st = Stage(device, {{mean, static_cast<size_t>(c) * sizeof(float)}}, out_bytes);
  if (!st.ok()) return st.status();
  double* dev_out = reinterpret_cast<double*>(st->out);
  LOCKSTEP_RETURN_IF_ERROR(Finish(
      nn_cuda_internal::LaunchBatchNormPlaneSums(planes, c, s, x, reinterpret_cast<const float*>(st->in[0]), dev_out),
      op, device));
  return CopyOut(device, out, dev_out, out_bytes, op);
}

absl::Status BatchNormPlaneGradSums(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* dy,
                                    const float* mean, double* sum, double* dot) {
  const char* op = "BatchNorm backward sums";
  LOCKSTEP_RETURN_IF_ERROR(SetDevice(device, op));
  const int64_t planes = n * c;
  const size_t out_bytes = static_cast<size_t>(planes) * sizeof(double);
  absl::StatusOr<Staged> st = Stage(device, {{mean, static_cast<size_t>(c) * sizeof(float)}}, 2 * out_bytes);
  if (!st.ok()) return st.status();
  double* dev_sum = reinterpret_cast<double*>(st->out);
  double* dev_dot = dev_sum + planes;
  LOCKSTEP_RETURN_IF_ERROR(Finish(nn_cuda_internal::LaunchBatchNormPlaneGradSums(
                                      planes, c, s, x, dy, reinterpret_cast<const float*>(st->in[0]), dev_sum, dev_dot),
                                  op, device));
  LOCKSTEP_RETURN_IF_ERROR(CopyOut(device, sum, dev_sum, out_bytes, op));
  return CopyOut(device, dot, dev_dot, out_bytes, op);
}

absl::Status BatchNormTransform(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* alpha,
                                const float* beta, float* y) {
  const char* op = "BatchNorm forward";
  LOCKSTEP_RETURN_IF_ERROR(SetDevice(device, op));
  const size_t bytes = static_cast<size_t>(c) * sizeof(float);
  absl::StatusOr<Staged> st = Stage(device, {{alpha, bytes}, {beta, bytes}}, 0);
  if (!st.ok()) return st.status();
  return Finish(
      nn_cuda_internal::LaunchBatchNormTransform(n * c * s, c, s, x, reinterpret_cast<const float*>(st->in[0]),
                                                 reinterpret_cast<const float*>(st->in[1]), y),
      op, device);
}

absl::Status BatchNormInputGrad(int device, int64_t n, int64_t c, int64_t s, const float* x, const float* dy,
                                const float* mean, const float* invstd, const float* w, const double* k,
                                const double* grad_mean, float* dx) {
  const char* op = "BatchNorm backward";
  LOCKSTEP_RETURN_IF_ERROR(SetDevice(device, op));
  const size_t f = static_cast<size_t>(c) * sizeof(float), d = static_cast<size_t>(c) * sizeof(double);
  absl::StatusOr<Staged> st = Stage(device, {{mean, f}, {invstd, f}, {w, f}, {k, d}, {grad_mean, d}}, 0);
  if (!st.ok()) return st.status();
  return Finish(nn_cuda_internal::LaunchBatchNormInputGrad(
                    n * c * s, c, s, x, dy, reinterpret_cast<const float*>(st->in[0]),
                    reinterpret_cast<const float*>(st->in[1]), reinterpret_cast<const float*>(st->in[2]),
                    reinterpret_cast<const double*>(st->in[3]), reinterpret_cast<const double*>(st->in[4]), dx),
                op, device);
}

}  // namespace nn_cuda
}  // namespace lockstep
