#include "nn/testing/error_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"

namespace lockstep {
namespace error_bound {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// One rounding in f32's subnormal range is absolute, not relative.
constexpr double kSubnormalRounding = 0x1p-149;

double Rounding(double magnitude) { return kUnit * magnitude + kSubnormalRounding; }

}  // namespace

double Gamma(int64_t n) { return static_cast<double>(n) * kUnit / (1.0 - static_cast<double>(n) * kUnit); }

Bounded Add(Bounded a, Bounded b) {
  const double v = a.v + b.v, carried = a.e + b.e;
  return {v, carried + Rounding(std::fabs(v) + carried)};
}

Bounded Sub(Bounded a, Bounded b) { return Add(a, {-b.v, b.e}); }

Bounded Mul(Bounded a, Bounded b) {
  const double v = a.v * b.v;
  const double carried = std::fabs(a.v) * b.e + a.e * std::fabs(b.v) + a.e * b.e;
  return {v, carried + Rounding(std::fabs(v) + carried)};
}

Bounded Div(Bounded a, Bounded b) {
  const double v = a.v / b.v;
  if (!(std::fabs(b.v) > b.e)) return {v, kInf};
  // a'/b' - a/b = ((a' - a) b - a (b' - b)) / (b b').
  const double carried = (a.e + std::fabs(v) * b.e) / (std::fabs(b.v) - b.e);
  return {v, carried + Rounding(std::fabs(v) + carried)};
}

Bounded Sqrt(Bounded a) {
  const double v = std::sqrt(std::max(a.v, 0.0));
  double carried = 0.0;
  if (a.e > 0.0) {
    // |sqrt(x') - sqrt(x)| = |x' - x| / (sqrt(x') + sqrt(x)), and never more
    // than sqrt(|x' - x|).
    const double low = std::sqrt(std::max(a.v - a.e, 0.0));
    carried = std::sqrt(a.e);
    if (low + v > 0.0) carried = std::min(carried, a.e / (low + v));
  }
  return {v, carried + Rounding(v + carried)};
}

Bounded Max(Bounded a, Bounded b) { return {std::max(a.v, b.v), std::max(a.e, b.e)}; }

Bounded Dot(const std::vector<Bounded>& a, const std::vector<Bounded>& b, const Bounded* bias) {
  double v = 0.0, magnitude = 0.0, carried = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    v += a[i].v * b[i].v;
    magnitude += (std::fabs(a[i].v) + a[i].e) * (std::fabs(b[i].v) + b[i].e);
    carried += std::fabs(a[i].v) * b[i].e + a[i].e * std::fabs(b[i].v) + a[i].e * b[i].e;
  }
  int64_t n = static_cast<int64_t>(a.size());
  if (bias != nullptr) {
    v += bias->v;
    magnitude += std::fabs(bias->v) + bias->e;
    carried += bias->e;
    ++n;
  }
  return {v, carried + Gamma(n) * magnitude + kSubnormalRounding * static_cast<double>(n)};
}

Bounded Sum(const std::vector<Bounded>& a) {
  const std::vector<Bounded> ones(a.size(), Exact(1.0));
  return Dot(a, ones);
}

Matrix FromTensor(const Tensor& t) {
  const int64_t n = t.numel();
  const int64_t rows = t.shape().empty() ? 1 : (t.shape()[0] == 0 ? 0 : t.shape()[0]);
  Matrix m(rows, rows == 0 ? 0 : n / rows);
  if (t.dtype() == DType::kF32) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) m.x[i] = Exact(p[i]);
  }
  if (t.shape().size() == 1) {
    m.rows = 1;
    m.cols = n;
  }
  return m;
}

Matrix WithValues(const Matrix& m, const Tensor& t) {
  Matrix out = m;
  const float* p = t.data<float>();
  for (size_t i = 0; i < out.x.size() && i < static_cast<size_t>(t.numel()); ++i) out.x[i].v = p[i];
  return out;
}

Matrix LinearForward(const Matrix& x, const Matrix& w, const Matrix& b) {
  Matrix y(x.rows, w.rows);
  std::vector<Bounded> row(x.cols), col(x.cols);
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t i = 0; i < x.cols; ++i) row[i] = x.at(r, i);
    for (int64_t o = 0; o < w.rows; ++o) {
      for (int64_t i = 0; i < x.cols; ++i) col[i] = w.at(o, i);
      y.at(r, o) = Dot(row, col, &b.x[o]);
    }
  }
  return y;
}

LinearGrads LinearBackward(const Matrix& x, const Matrix& w, const Matrix& dy, bool input_grad) {
  LinearGrads g;
  g.dw = Matrix(w.rows, w.cols);
  g.db = Matrix(1, w.rows);
  std::vector<Bounded> a(dy.rows), b(dy.rows);
  for (int64_t o = 0; o < w.rows; ++o) {
    for (int64_t r = 0; r < dy.rows; ++r) a[r] = dy.at(r, o);
    g.db.x[o] = Sum(a);
    for (int64_t i = 0; i < w.cols; ++i) {
      for (int64_t r = 0; r < dy.rows; ++r) b[r] = x.at(r, i);
      g.dw.at(o, i) = Dot(a, b);
    }
  }
  if (input_grad) {
    g.dx = Matrix(x.rows, x.cols);
    std::vector<Bounded> c(w.rows), d(w.rows);
    for (int64_t r = 0; r < dy.rows; ++r) {
      for (int64_t o = 0; o < w.rows; ++o) c[o] = dy.at(r, o);
      for (int64_t i = 0; i < w.cols; ++i) {
        for (int64_t o = 0; o < w.rows; ++o) d[o] = w.at(o, i);
        g.dx.at(r, i) = Dot(c, d);
      }
    }
  }
  return g;
}

Matrix ReluForward(const Matrix& z) {
  Matrix a = z;
  for (Bounded& b : a.x) {
    // Exact: the image of [v - e, v + e], around max(v, 0).
    const double v = std::max(b.v, 0.0), lo = std::max(b.v - b.e, 0.0), hi = std::max(b.v + b.e, 0.0);
    b = {v, std::max(v - lo, hi - v)};
  }
  return a;
}

Matrix ReluBackward(const Matrix& z, const Matrix& dy) {
  Matrix dz(dy.rows, dy.cols);
  for (size_t i = 0; i < dz.x.size(); ++i) {
    const Bounded& zi = z.x[i];
    const Bounded& g = dy.x[i];
    if (zi.e > 0.0 && std::fabs(zi.v) <= zi.e) {
      dz.x[i] = {zi.v > 0.0 ? g.v : 0.0, std::fabs(g.v) + g.e};  // either branch
    } else {
      dz.x[i] = zi.v > 0.0 ? g : Exact(0.0);
    }
  }
  return dz;
}

CrossEntropyBounds CrossEntropy(const Matrix& z, const std::vector<int64_t>& labels) {
  const int64_t batch = z.rows, classes = z.cols;
  CrossEntropyBounds out;
  out.grad = Matrix(batch, classes);
  std::vector<Bounded> picked;
  const double ulps = kTranscendentalUlps;
  for (int64_t r = 0; r < batch; ++r) {
    double m = -kInf, e_in = 0.0, spread = 0.0;
    for (int64_t j = 0; j < classes; ++j) {
      m = std::max(m, z.at(r, j).v);
      e_in = std::max(e_in, z.at(r, j).e);
    }
    double s = 0.0;
    for (int64_t j = 0; j < classes; ++j) {
      s += std::exp(z.at(r, j).v - m);
      spread = std::max(spread, m - z.at(r, j).v);
    }
    const double lse = std::log(s);
    for (int64_t j = 0; j < classes; ++j) {
      const double t = z.at(r, j).v - m, log_p = t - lse, p = std::exp(log_p);
      // Rounding of log_softmax (absolute), whichever way it is computed
      // (max-shifted exp, the sum of C terms, log, two subtractions), twice
      // over: u (2 ulps (2 + |lse|) + 2C + 8 + 2|t| + 2 spread + 2|log p|).
      const double rounding = kUnit * (2 * ulps * (2.0 + std::fabs(lse)) + 2.0 * classes + 8.0 + 2.0 * std::fabs(t) +
                                       2.0 * spread + 2.0 * std::fabs(log_p));
      // A shift of the logits by at most e_in moves log_softmax by 2 e_in.
      const double e_log_p = 2.0 * e_in + rounding;
      const double e_p = p * (std::expm1(e_log_p) + 2.0 * ulps * kUnit);
      const double onehot = j == labels[r] ? 1.0 : 0.0;
      const double g = (p - onehot) / static_cast<double>(batch);
      // (p - onehot) / B: a subtraction and a scaling by 1/B, each rounded.
      out.grad.at(r, j) = {g, e_p / batch + 3.0 * kUnit * (p + e_p + onehot) / batch + kSubnormalRounding};
      if (j == labels[r]) picked.push_back({-log_p, e_log_p});
    }
  }
  const Bounded total = Sum(picked);
  out.loss = Mul(total, Exact(1.0 / static_cast<double>(batch)));
  out.loss.e += Rounding(std::fabs(out.loss.v));  // 1/B itself rounded when B is no power of 2
  return out;
}

MlpReference MlpForwardBackward(const Matrix& x, const std::vector<Matrix>& weights, const std::vector<Matrix>& biases,
                                const std::vector<int64_t>& labels) {
  const size_t layers = weights.size();
  std::vector<Matrix> inputs{x}, pre;  // inputs[l] feeds layer l; pre[l] is its output before ReLU
  for (size_t l = 0; l < layers; ++l) {
    pre.push_back(LinearForward(inputs.back(), weights[l], biases[l]));
    if (l + 1 < layers) inputs.push_back(ReluForward(pre.back()));
  }
  MlpReference out;
  out.logits = pre.back();
  CrossEntropyBounds ce = CrossEntropy(out.logits, labels);
  out.loss = ce.loss;
  out.weight_grads.resize(layers);
  out.bias_grads.resize(layers);
  Matrix dy = ce.grad;
  for (size_t l = layers; l-- > 0;) {
    LinearGrads g = LinearBackward(inputs[l], weights[l], dy, /*input_grad=*/l > 0);
    out.weight_grads[l] = std::move(g.dw);
    out.bias_grads[l] = std::move(g.db);
    if (l > 0) dy = ReluBackward(pre[l - 1], g.dx);
  }
  return out;
}

std::vector<int64_t> Labels(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

Matrix ConvForward(const ConvShape& s, const Matrix& x, const Matrix& w, const Matrix& b) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  Matrix y(s.n, s.o * oh * ow);
  std::vector<Bounded> xs, ws;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t o = 0; o < s.o; ++o) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          xs.clear();
          ws.clear();
          for (int64_t c = 0; c < s.c; ++c) {
            for (int64_t ki = 0; ki < s.k; ++ki) {
              for (int64_t kj = 0; kj < s.k; ++kj) {
                const int64_t h = i * s.stride - s.pad + ki, ww = j * s.stride - s.pad + kj;
                // Padding contributes exact zeros, still counted as terms.
                const bool inside = h >= 0 && h < s.h && ww >= 0 && ww < s.w;
                xs.push_back(inside ? x.at(n, (c * s.h + h) * s.w + ww) : Exact(0.0));
                ws.push_back(w.at(o, (c * s.k + ki) * s.k + kj));
              }
            }
          }
          y.at(n, (o * oh + i) * ow + j) = Dot(xs, ws, &b.x[o]);
        }
      }
    }
  }
  return y;
}

LinearGrads ConvBackward(const ConvShape& s, const Matrix& x, const Matrix& w, const Matrix& dy, bool input_grad) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  LinearGrads g;
  g.dw = Matrix(s.o, s.c * s.k * s.k);
  g.db = Matrix(1, s.o);
  std::vector<std::vector<Bounded>> dx_a, dx_b;
  if (input_grad) {
    dx_a.resize(static_cast<size_t>(s.n * s.c * s.h * s.w));
    dx_b.resize(dx_a.size());
  }
  for (int64_t o = 0; o < s.o; ++o) {
    std::vector<Bounded> all;
    for (int64_t n = 0; n < s.n; ++n) {
      for (int64_t p = 0; p < oh * ow; ++p) all.push_back(dy.at(n, o * oh * ow + p));
    }
    g.db.x[o] = Sum(all);
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t ki = 0; ki < s.k; ++ki) {
        for (int64_t kj = 0; kj < s.k; ++kj) {
          std::vector<Bounded> a, b;
          for (int64_t n = 0; n < s.n; ++n) {
            for (int64_t i = 0; i < oh; ++i) {
              for (int64_t j = 0; j < ow; ++j) {
                const int64_t h = i * s.stride - s.pad + ki, ww = j * s.stride - s.pad + kj;
                const bool inside = h >= 0 && h < s.h && ww >= 0 && ww < s.w;
                const Bounded& d = dy.at(n, (o * oh + i) * ow + j);
                a.push_back(d);
                b.push_back(inside ? x.at(n, (c * s.h + h) * s.w + ww) : Exact(0.0));
                if (input_grad && inside) {
                  const size_t at = static_cast<size_t>(((n * s.c + c) * s.h + h) * s.w + ww);
                  dx_a[at].push_back(d);
                  dx_b[at].push_back(w.at(o, (c * s.k + ki) * s.k + kj));
                }
              }
            }
          }
          g.dw.at(o, (c * s.k + ki) * s.k + kj) = Dot(a, b);
        }
      }
    }
  }
  if (input_grad) {
    g.dx = Matrix(s.n, s.c * s.h * s.w);
    for (size_t i = 0; i < dx_a.size(); ++i) g.dx.x[i] = Dot(dx_a[i], dx_b[i]);
  }
  return g;
}

namespace {

// The input positions of pooling window (n, c, i, j), in PyTorch's scan order.
std::vector<int64_t> Window(const PoolShape& s, int64_t c, int64_t i, int64_t j) {
  std::vector<int64_t> at;
  for (int64_t ki = 0; ki < s.k; ++ki) {
    for (int64_t kj = 0; kj < s.k; ++kj) {
      const int64_t h = i * s.stride - s.pad + ki, w = j * s.stride - s.pad + kj;
      if (h >= 0 && h < s.h && w >= 0 && w < s.w) at.push_back((c * s.h + h) * s.w + w);
    }
  }
  return at;
}

}  // namespace

Matrix MaxPoolForward(const PoolShape& s, const Matrix& x) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  Matrix y(s.n, s.c * oh * ow);
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          Bounded best{-kInf, 0.0};
          for (int64_t at : Window(s, c, i, j)) best = Max(best, x.at(n, at));
          y.at(n, (c * oh + i) * ow + j) = best;
        }
      }
    }
  }
  return y;
}

Matrix MaxPoolBackward(const PoolShape& s, const Matrix& x, const Matrix& dy) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  std::vector<std::vector<Bounded>> terms(static_cast<size_t>(s.n * s.c * s.h * s.w));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t c = 0; c < s.c; ++c) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const std::vector<int64_t> window = Window(s, c, i, j);
          int64_t best = window[0];
          for (int64_t at : window) {
            if (x.at(n, at).v > x.at(n, best).v) best = at;  // the first maximum
          }
          const Bounded& top = x.at(n, best);
          const Bounded& g = dy.at(n, (c * oh + i) * ow + j);
          std::vector<int64_t> candidates;
          for (int64_t at : window) {
            const Bounded& xa = x.at(n, at);
            if (at == best || xa.v + xa.e >= top.v - top.e) candidates.push_back(at);
          }
          for (int64_t at : candidates) {
            const size_t k = static_cast<size_t>(n * s.c * s.h * s.w + at);
            if (candidates.size() == 1) {
              terms[k].push_back(g);
            } else {  // the gradient may go to any of them
              terms[k].push_back({at == best ? g.v : 0.0, std::fabs(g.v) + g.e});
            }
          }
        }
      }
    }
  }
  Matrix dx(s.n, s.c * s.h * s.w);
  for (size_t k = 0; k < terms.size(); ++k) dx.x[k] = terms[k].empty() ? Exact(0.0) : Sum(terms[k]);
  return dx;
}

namespace {

Bounded F32(double v) { return Exact(static_cast<float>(v)); }

}  // namespace

Matrix SgdStep(const SgdConfig& c, const Matrix& param, const Matrix& grad, Matrix& buf) {
  Matrix out = param;
  const bool first = buf.x.empty();
  if (c.momentum != 0.0 && first) buf = Matrix(param.rows, param.cols);
  for (size_t i = 0; i < param.x.size(); ++i) {
    Bounded d = grad.x[i];
    if (c.weight_decay != 0.0) d = Add(d, Mul(param.x[i], F32(c.weight_decay)));
    if (c.momentum != 0.0) {
      if (first) {
        buf.x[i] = d;
      } else {
        buf.x[i] = Add(Mul(buf.x[i], F32(c.momentum)), Mul(d, F32(1.0 - c.dampening)));
      }
      d = c.nesterov ? Add(d, Mul(buf.x[i], F32(c.momentum))) : buf.x[i];
    }
    out.x[i] = Add(param.x[i], Mul(d, F32(-c.lr)));
  }
  return out;
}

namespace {

// a's interval intersected with [-cap, cap].
Bounded Clip(Bounded a, double cap) {
  if (!(a.e <= cap)) return {std::max(-cap, std::min(cap, std::isnan(a.v) ? 0.0 : a.v)), 2.0 * cap};
  return a;
}

}  // namespace

Matrix AdamStep(const AdamConfig& c, int64_t step, const Matrix& param, const Matrix& grad, AdamState& state) {
  Matrix out = param;
  if (state.exp_avg.x.empty()) {
    state.exp_avg = Matrix(param.rows, param.cols);
    state.exp_avg_sq = Matrix(param.rows, param.cols);
    if (c.amsgrad) state.max_exp_avg_sq = Matrix(param.rows, param.cols);
  }
  // Python floats (f64), each handed to the kernels as an f32 scalar.
  const double bias_correction1 = 1.0 - std::pow(c.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(c.beta2, static_cast<double>(step));
  const double step_size = c.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  // Where the gradient is zero up to rounding the step's direction is open;
  // it can never exceed Adam's own bound on |m_hat| / sqrt(v_hat) (Cauchy-
  // Schwarz over the gradients so far; max_exp_avg_sq >= exp_avg_sq only
  // lowers it): (1 - b1) sqrt(1 - b2^t) / ((1 - b1^t) sqrt(1 - b2))
  // * sqrt(sum_{j<t} (b1^2 / b2)^j).
  double geometric = 0.0;
  for (int64_t j = 0; j < step; ++j) geometric += std::pow(c.beta1 * c.beta1 / c.beta2, static_cast<double>(j));
  const double cap = (1.0 - c.beta1) * bias_correction2_sqrt / (bias_correction1 * std::sqrt(1.0 - c.beta2)) *
                     std::sqrt(geometric) * (1.0 + 4.0 * kUnit);
  for (size_t i = 0; i < param.x.size(); ++i) {
    Bounded p = param.x[i], g = grad.x[i];
    if (c.decoupled) {
      p = Mul(p, F32(1.0 - c.lr * c.weight_decay));
    } else if (c.weight_decay != 0.0) {
      g = Add(g, Mul(p, F32(c.weight_decay)));
    }
    Bounded& m = state.exp_avg.x[i];
    Bounded& v = state.exp_avg_sq.x[i];
    m = Add(Mul(m, F32(c.beta1)), Mul(g, F32(1.0 - c.beta1)));
    v = Add(Mul(v, F32(c.beta2)), Mul(Mul(g, g), F32(1.0 - c.beta2)));
    Bounded second = v;
    if (c.amsgrad) {
      state.max_exp_avg_sq.x[i] = Max(state.max_exp_avg_sq.x[i], v);
      second = state.max_exp_avg_sq.x[i];
    }
    const Bounded denom = Add(Div(Sqrt(second), F32(bias_correction2_sqrt)), F32(c.eps));
    out.x[i] = Add(p, Mul(Clip(Div(m, denom), cap), F32(-step_size)));
  }
  return out;
}

absl::Status ExpectWithin(const Tensor& got, const Matrix& want, const std::string& what) {
  if (!got.defined())
    return absl::InternalError(absl::StrCat(what, ": no tensor (expected ", want.x.size(), " values)"));
  if (got.dtype() != DType::kF32 || got.numel() != static_cast<int64_t>(want.x.size())) {
    return absl::InternalError(absl::StrCat(what, ": expected ", want.x.size(), " f32 values, got ", got.numel(), " ",
                                            DTypeName(got.dtype())));
  }
  const float* g = got.data<float>();
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < want.x.size(); ++i) {
    if (ExpectWithin(g[i], want.x[i], "").ok()) continue;
    if (++bad <= 3) {
      absl::StrAppend(&first, " [", i, "] is ", g[i], ", the f64 reference ", want.x[i].v, " +- ", want.x[i].e,
                      " (off by ", std::fabs(g[i] - want.x[i].v) / want.x[i].e, " radii);");
    }
  }
  if (bad == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", bad, " of ", want.x.size(),
                                          " values are outside the derived bound:", first,
                                          " a real difference in the computation, not rounding"));
}

absl::Status ExpectWithin(double got, const Bounded& want, const std::string& what) {
  // The f64 reference rounds too (2^-29 of the f32 radius it carries).
  const double radius = want.e * (1.0 + 0x1p-20) + 0x1p-60 * std::fabs(want.v);
  if (std::fabs(got - want.v) <= radius) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " is ", got, ", the f64 reference ", want.v, " +- ", want.e));
}

double FormatStep(DType dtype, double x) {
  const int bits = dtype == DType::kF16 ? 11 : dtype == DType::kBF16 ? 8 : 24;
  const int min_exponent = dtype == DType::kF16 ? -14 : -126;
  const int exponent = std::max(x > 0 ? std::ilogb(x) : min_exponent, min_exponent);
  return std::ldexp(1.0, exponent - bits + 1);
}

Matrix RoundedTo(DType dtype, const Matrix& m, int roundings, const Matrix* magnitude) {
  Matrix out = m;
  for (size_t i = 0; i < out.x.size(); ++i) {
    Bounded& b = out.x[i];
    double extra = 0.5 * FormatStep(dtype, std::fabs(b.v) + b.e);
    if (roundings > 1) {
      const Bounded& mag = magnitude != nullptr ? magnitude->x[i] : b;
      extra += (roundings - 1) * 0.5 * FormatStep(dtype, std::fabs(mag.v) + mag.e);
    }
    b.e += extra;
  }
  return out;
}

Tensor WidenedToF32(const Tensor& t) {
  if (!t.defined() || t.dtype() == DType::kF32) return t;
  absl::StatusOr<Tensor> out = Tensor::Empty(t.shape(), DType::kF32, Device::Cpu());
  if (!out.ok()) return Tensor();
  absl::StatusOr<Tensor> host = t.To(Device::Cpu());
  if (!host.ok() || !Cast(*host, *out).ok()) return Tensor();
  return *out;
}

Tensor RoundedValues(const Tensor& t, DType dtype) {
  absl::StatusOr<Tensor> narrow = Tensor::Empty(t.shape(), dtype, Device::Cpu());
  if (!narrow.ok() || !Cast(t, *narrow).ok()) return Tensor();
  return WidenedToF32(*narrow);
}

Matrix Abs(const Matrix& m) {
  Matrix out = m;
  for (Bounded& b : out.x) b.v = std::fabs(b.v);
  return out;
}

double MaxRelativeRadius(const Matrix& m) {
  double worst = 0.0;
  for (const Bounded& b : m.x) {
    if (b.v != 0.0) worst = std::max(worst, b.e / std::fabs(b.v));
  }
  return worst;
}

}  // namespace error_bound
}  // namespace lockstep
