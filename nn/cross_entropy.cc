#include "nn/cross_entropy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {
namespace {

absl::StatusOr<std::vector<int64_t>> LabelsOf(const Tensor& labels) {
  if (labels.dtype() == DType::kI64) return labels.ToVector<int64_t>();
  if (labels.dtype() == DType::kI32) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int32_t> v, labels.ToVector<int32_t>());
    return std::vector<int64_t>(v.begin(), v.end());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("CrossEntropy: labels must be i64 or i32 class indices, got ", labels.DebugString()));
}

}  // namespace

absl::StatusOr<CrossEntropyResult> CrossEntropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index,
                                                double grad_scale) {
  if (!logits.defined() || logits.dim() != 2 ||
      !(logits.dtype() == DType::kF32 || logits.dtype() == DType::kF64 || logits.dtype() == DType::kF16 ||
        logits.dtype() == DType::kBF16)) {
    return absl::InvalidArgumentError(absl::StrCat("CrossEntropy: expected floating logits [batch, classes], got ",
                                                   logits.defined() ? logits.DebugString() : "undefined"));
  }
  const int64_t rows = logits.shape()[0];
  const int64_t classes = logits.shape()[1];
  if (!labels.defined() || labels.dim() != 1 || labels.shape()[0] != rows) {
    return absl::InvalidArgumentError(absl::StrCat("CrossEntropy: expected labels of shape [", rows, "] for logits ",
                                                   logits.DebugString(), ", got ",
                                                   labels.defined() ? labels.DebugString() : "undefined"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> y, LabelsOf(labels));
  for (int64_t i = 0; i < rows; ++i) {
    if (y[i] != ignore_index && (y[i] < 0 || y[i] >= classes)) {
      return absl::InvalidArgumentError(absl::StrCat("CrossEntropy: label ", y[i], " at row ", i, " is outside [0, ",
                                                     classes,
                                                     "); check the dataset's labels and the "
                                                     "model's number of outputs"));
    }
  }
  // Host f64 copy of the logits.
  Tensor host = logits;
  if (!logits.device().is_cpu()) {
    LOCKSTEP_ASSIGN_OR_RETURN(host, logits.To(Device::Cpu()));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor wide, Tensor::Empty(logits.shape(), DType::kF64));
  LOCKSTEP_RETURN_IF_ERROR(Cast(host, wide));
  const double* z = wide.data<double>();

  CrossEntropyResult result;
  for (int64_t i = 0; i < rows; ++i) result.counted += y[i] != ignore_index;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor grad, Tensor::Empty(logits.shape(), DType::kF32));
  float* g = grad.data<float>();
  double total = 0.0;
  // With grad_scale 1 this is 1 / counted exactly, as before grad_scale existed.
  const double inv_count = result.counted > 0 ? grad_scale / static_cast<double>(result.counted) : 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    const double* row = z + i * classes;
    float* grow = g + i * classes;
    if (y[i] == ignore_index || classes == 0) {
      std::fill(grow, grow + classes, 0.0f);
      continue;
    }
    double max = -std::numeric_limits<double>::infinity();
    int64_t argmax = 0;
    for (int64_t j = 0; j < classes; ++j) {
      if (row[j] > max || (std::isnan(row[j]) && !std::isnan(max))) {  // NaN wins, as torch.argmax
        max = row[j];
        argmax = j;
      }
    }
    double sum = 0.0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(row[j] - max);
    const double log_sum = std::log(sum);
    total += -(row[y[i]] - max - log_sum);
    result.correct += argmax == y[i];
    for (int64_t j = 0; j < classes; ++j) {
      const double softmax = std::exp(row[j] - max - log_sum);
      grow[j] = static_cast<float>((softmax - (j == y[i] ? 1.0 : 0.0)) * inv_count);
    }
  }
  result.loss =
      result.counted > 0 ? total / static_cast<double>(result.counted) : std::numeric_limits<double>::quiet_NaN();
  if (logits.device().is_cpu()) {
    result.grad_logits = grad;
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(result.grad_logits, grad.To(logits.device()));
  }
  return result;
}

}  // namespace lockstep
