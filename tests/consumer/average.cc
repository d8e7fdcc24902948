// Averages two "gradients" the way a data-parallel step would, using only
// @lockstep//core targets, and prints the result.
#include <cstdio>
#include <vector>

#include "core/kernels.h"
#include "core/tensor.h"

int main() {
  using lockstep::DType;
  using lockstep::Tensor;
  absl::StatusOr<Tensor> a = Tensor::FromVector<float>(std::vector<float>{1, 2, 3, 4});
  absl::StatusOr<Tensor> b = Tensor::FromVector<float>(std::vector<float>{3, 4, 5, 6});
  absl::StatusOr<Tensor> half = Tensor::Empty({4}, DType::kF16);
  if (!a.ok() || !b.ok() || !half.ok()) return 1;
  const Tensor inputs[] = {*a, *b};
  absl::Status s = lockstep::Reduce(lockstep::ReduceOp::kAvg, inputs, *a);
  if (s.ok()) s = lockstep::Cast(*a, *half);
  if (s.ok()) s = lockstep::Cast(*half, *b);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const std::vector<float> result = *b->ToVector<float>();
  for (float v : result) std::printf("%g ", v);
  std::printf("\n");
  // Bad input is an error value, not a crash.
  const absl::Status bad = lockstep::Cast(*a, *Tensor::Empty({3}, DType::kF16));
  std::printf("%s\n", bad.ok() ? "unexpectedly ok" : "error reported");
  return 0;
}
