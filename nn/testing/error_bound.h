// Derived tolerances for golden tests: an f64 reference of an f32
// computation that carries, beside each value, a bound on how far any
// correct f32 implementation may be from it.
//
// Two correct f32 implementations of the same network (PyTorch on one CPU,
// lockstep on another) differ only in what IEEE arithmetic leaves open: the
// order in which a GEMM or a reduction sums (OpenBLAS picks a kernel per
// CPU), whether a product and a sum are fused (FMA), and the last ulps of
// exp/log. A `Bounded` is the exact result `v` of the operation on the
// reference inputs (computed in f64) and a radius `e` such that every such
// implementation returns a value within `e` of `v`:
//   * a dot product or sum of n terms (+ a bias), in any order, fused or
//     not: |computed - exact| <= gamma(n + 1) * sum |terms| (Higham,
//     "Accuracy and Stability of Numerical Algorithms", 3.1), plus what the
//     inputs' own radii contribute;
//   * one elementwise operation: one rounding, u * |result| (u = 2^-24),
//     plus the inputs' radii carried through the operation's derivative;
//   * exp and log: 4 ulps each (glibc, Sleef and OpenBLAS-era libm all
//     claim <= 1 ulp; 4 leaves room, and is still far below any real bug);
//   * ReLU's mask, MaxPool's argmax: where the exact input is within the
//     radius of the switch, either branch is possible and the radius covers
//     both.
// A golden test then checks that PyTorch's stored value and ours both lie
// within the radius of the reference: a bound derived from what may differ,
// the same on every CPU, instead of a relative tolerance tuned on one.
//
//   Matrix x = FromTensor(golden["x"]);          // exact inputs, radius 0
//   Matrix z = LinearForward(x, FromTensor(w), FromTensor(b));
//   LOCKSTEP_RETURN_IF_ERROR(ExpectWithin(our_z, z, "fc1 output"));
#ifndef LOCKSTEP_NN_TESTING_ERROR_BOUND_H_
#define LOCKSTEP_NN_TESTING_ERROR_BOUND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace lockstep {
namespace error_bound {

// The unit roundoff of f32 (round to nearest): 2^-24.
constexpr double kUnit = 0x1p-24;
// Ulps allowed for one exp or log.
constexpr double kTranscendentalUlps = 4.0;

// gamma(n) = n u / (1 - n u): the bound on the relative error of n
// accumulated roundings.
double Gamma(int64_t n);

struct Bounded {
  double v = 0.0;  // the exact result on the reference inputs
  double e = 0.0;  // any correct f32 implementation is within e of v
};

inline Bounded Exact(double v) { return {v, 0.0}; }

// One f32 operation each: the inputs' radii carried through, plus one
// rounding of the result.
Bounded Add(Bounded a, Bounded b);
Bounded Sub(Bounded a, Bounded b);
Bounded Mul(Bounded a, Bounded b);
// Infinite radius if the divisor's interval contains 0.
Bounded Div(Bounded a, Bounded b);
Bounded Sqrt(Bounded a);
Bounded Max(Bounded a, Bounded b);  // exact: no rounding

// sum_i a[i] * b[i] (+ bias), in any order, fused or not.
Bounded Dot(const std::vector<Bounded>& a, const std::vector<Bounded>& b, const Bounded* bias = nullptr);
// sum_i a[i], in any order.
Bounded Sum(const std::vector<Bounded>& a);

// A row-major matrix of bounded values.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<Bounded> x;
  Matrix() = default;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c), x(static_cast<size_t>(r * c)) {}
  Bounded& at(int64_t r, int64_t c) { return x[static_cast<size_t>(r * cols + c)]; }
  const Bounded& at(int64_t r, int64_t c) const { return x[static_cast<size_t>(r * cols + c)]; }
};

// An f32 tensor's values, exact (radius 0), as [dim0, numel / dim0] (a 0-d
// or 1-d tensor is one row).
Matrix FromTensor(const Tensor& t);
// The same values with the matrix's radii kept: for feeding a computed
// reference into the next operation.
Matrix WithValues(const Matrix& m, const Tensor& t);

// y = x W^T + b: x [B, in], w [out, in], b [1, out].
Matrix LinearForward(const Matrix& x, const Matrix& w, const Matrix& b);
struct LinearGrads {
  Matrix dx, dw, db;  // [B, in], [out, in], [1, out]; dx empty unless asked
};
LinearGrads LinearBackward(const Matrix& x, const Matrix& w, const Matrix& dy, bool input_grad);

Matrix ReluForward(const Matrix& z);
// dz = dy where z > 0; either branch where z's interval contains 0.
Matrix ReluBackward(const Matrix& z, const Matrix& dy);

// CrossEntropyLoss(reduction='mean') of logits z [B, C] for labels y.
struct CrossEntropyBounds {
  Bounded loss;
  Matrix grad;  // d loss / d z
};
CrossEntropyBounds CrossEntropy(const Matrix& z, const std::vector<int64_t>& labels);

// A stack of Linear layers with ReLU between them (none after the last) and
// its CrossEntropyLoss(reduction='mean'): the reference forward and backward
// of the MLPs the golden tests use. weights[l] is [out, in], biases[l] [1, out].
struct MlpReference {
  Matrix logits;
  Bounded loss;
  std::vector<Matrix> weight_grads, bias_grads;
};
MlpReference MlpForwardBackward(const Matrix& x, const std::vector<Matrix>& weights, const std::vector<Matrix>& biases,
                                const std::vector<int64_t>& labels);

// An i64 tensor's values (labels).
std::vector<int64_t> Labels(const Tensor& t);

// Conv2d (NCHW, square stride and padding, no dilation, no groups) on x
// [N, C*H*W] with w [O, C*K*K], b [1, O]; returns [N, O*Ho*Wo].
struct ConvShape {
  int64_t n, c, h, w, o, k, stride, pad;
  int64_t out_h() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - k) / stride + 1; }
};
Matrix ConvForward(const ConvShape& s, const Matrix& x, const Matrix& w, const Matrix& b);
// dw [O, C*K*K], db [1, O], dx [N, C*H*W] (empty unless asked).
LinearGrads ConvBackward(const ConvShape& s, const Matrix& x, const Matrix& w, const Matrix& dy, bool input_grad);
// MaxPool2d (square kernel, stride, padding with -inf) on [N, C*H*W].
struct PoolShape {
  int64_t n, c, h, w, k, stride, pad;
  int64_t out_h() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - k) / stride + 1; }
};
Matrix MaxPoolForward(const PoolShape& s, const Matrix& x);
Matrix MaxPoolBackward(const PoolShape& s, const Matrix& x, const Matrix& dy);

// PyTorch 1.13's SGD (_single_tensor_sgd) on one parameter, elementwise.
// `buf` is the momentum buffer (empty on the first step; filled here).
struct SgdConfig {
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};
Matrix SgdStep(const SgdConfig& c, const Matrix& param, const Matrix& grad, Matrix& buf);

// PyTorch 1.13's Adam and AdamW (_single_tensor_adam), elementwise, at step
// `step` (1-based). The state matrices are updated; max_exp_avg_sq only
// with amsgrad.
struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool amsgrad = false, decoupled = false;  // decoupled: AdamW
};
struct AdamState {
  Matrix exp_avg, exp_avg_sq, max_exp_avg_sq;
};
Matrix AdamStep(const AdamConfig& c, int64_t step, const Matrix& param, const Matrix& grad, AdamState& state);

// Autocast's results: `m` (an f32 computation's reference on operands
// already rounded to `dtype`, bf16 or f16) with the result rounded to
// `dtype` once more: round to nearest moves it by at most half of
// `dtype`'s step at |v| + e (FormatStep). `roundings` > 1 counts earlier
// roundings of an intermediate too (cuDNN's convolution output before its
// bias add), each by at most half a step at `magnitude`'s bound on every
// intermediate (v + e of the same computation on |operands|).
Matrix RoundedTo(DType dtype, const Matrix& m, int roundings = 1, const Matrix* magnitude = nullptr);
// The spacing of `dtype`'s values at magnitude x >= 0 (bf16: 8 significant
// bits, normal from 2^-126; f16: 11, from 2^-14; f32: 24, from 2^-126).
double FormatStep(DType dtype, double x);
// The tensor (f32, bf16 or f16) as an f32 one, exactly: for ExpectWithin.
Tensor WidenedToF32(const Tensor& t);
// An f32 CPU tensor `t`'s values rounded to `dtype`, as an f32 tensor: the
// exact operands autocast's copies hold, for the reference.
Tensor RoundedValues(const Tensor& t, DType dtype);
// `m` with |v| in place of v and the same radii: an operand of the
// `magnitude` computation above.
Matrix Abs(const Matrix& m);

// OK if every element of `got` (f32, same element count) is within the
// radius of `want`; else an error naming `what`, the first offending
// elements, their values, the reference and the radius, and how many.
absl::Status ExpectWithin(const Tensor& got, const Matrix& want, const std::string& what);
absl::Status ExpectWithin(double got, const Bounded& want, const std::string& what);

// The largest radius relative to the value, over elements with |v| > 0
// (for reporting how tight a check was).
double MaxRelativeRadius(const Matrix& m);

}  // namespace error_bound
}  // namespace lockstep

#endif  // LOCKSTEP_NN_TESTING_ERROR_BOUND_H_
