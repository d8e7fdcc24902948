#include "nn/testing/batch_norm_reference.h"

#include <algorithm>
#include <vector>

namespace lockstep {
namespace {

namespace eb = error_bound;

// The larger radius of two formulations of the same exact value.
eb::Bounded Union(eb::Bounded a, eb::Bounded b) { return {a.v, std::max(a.e, b.e)}; }

}  // namespace

BatchNormReference BatchNormStep(const Tensor& x_t, const Tensor& g_t, const Tensor& w_t, const Tensor& b_t,
                                 const Tensor& mean_prev, const Tensor& var_prev, bool training, double factor) {
  const int64_t batch = x_t.shape()[0], channels = x_t.shape()[1], inner = x_t.numel() / (batch * channels);
  const int64_t n = batch * inner;
  const float* xv = x_t.data<float>();
  const float* gv = g_t.data<float>();
  BatchNormReference r;
  r.y = eb::Matrix(1, x_t.numel());
  r.grad_input = eb::Matrix(1, x_t.numel());
  r.grad_weight = eb::Matrix(1, channels);
  r.grad_bias = eb::Matrix(1, channels);
  r.running_mean = eb::Matrix(1, channels);
  r.running_var = eb::Matrix(1, channels);
  const double eps = static_cast<float>(1e-5);
  for (int64_t c = 0; c < channels; ++c) {
    std::vector<int64_t> at;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < inner; ++i) at.push_back((b * channels + c) * inner + i);
    }
    std::vector<eb::Bounded> xs, gs;
    for (int64_t k : at) xs.push_back(eb::Exact(xv[k])), gs.push_back(eb::Exact(gv[k]));
    const eb::Bounded w = eb::Exact(w_t.data<float>()[c]), bias = eb::Exact(b_t.data<float>()[c]);
    const eb::Bounded inv_n = eb::Exact(1.0 / static_cast<double>(n));
    eb::Bounded mean, invstd;
    std::vector<eb::Bounded> d;
    if (training) {
      mean = eb::Mul(eb::Sum(xs), inv_n);
      std::vector<eb::Bounded> sq;
      for (const eb::Bounded& xi : xs) d.push_back(eb::Sub(xi, mean)), sq.push_back(eb::Mul(d.back(), d.back()));
      const eb::Bounded var_sum = eb::Sum(sq);
      invstd = eb::Div(eb::Exact(1.0), eb::Sqrt(eb::Add(eb::Mul(var_sum, inv_n), eb::Exact(eps))));
      const eb::Bounded one_minus = eb::Exact(static_cast<float>(1.0 - factor)),
                        f = eb::Exact(static_cast<float>(factor));
      r.running_mean.x[c] = eb::Add(eb::Mul(eb::Exact(mean_prev.data<float>()[c]), one_minus), eb::Mul(mean, f));
      const eb::Bounded unbiased = eb::Mul(var_sum, eb::Exact(1.0 / static_cast<double>(n - 1)));
      r.running_var.x[c] = eb::Add(eb::Mul(eb::Exact(var_prev.data<float>()[c]), one_minus), eb::Mul(unbiased, f));
    } else {
      mean = eb::Exact(mean_prev.data<float>()[c]);
      for (const eb::Bounded& xi : xs) d.push_back(eb::Sub(xi, mean));
      invstd = eb::Div(eb::Exact(1.0), eb::Sqrt(eb::Add(eb::Exact(var_prev.data<float>()[c]), eb::Exact(eps))));
    }
    const eb::Bounded alpha = eb::Mul(invstd, w), beta = eb::Sub(bias, eb::Mul(mean, alpha));
    std::vector<eb::Bounded> xhat;
    for (size_t i = 0; i < at.size(); ++i) {
      xhat.push_back(eb::Mul(d[i], invstd));
      r.y.x[at[i]] = Union(eb::Add(eb::Mul(xhat[i], w), bias), eb::Add(eb::Mul(xs[i], alpha), beta));
    }
    const eb::Bounded sum_g = eb::Sum(gs), dot = eb::Dot(d, gs), dot_hat = eb::Dot(xhat, gs);
    r.grad_bias.x[c] = sum_g;
    r.grad_weight.x[c] = Union(eb::Mul(dot, invstd), dot_hat);
    const eb::Bounded k = eb::Mul(eb::Mul(dot, eb::Mul(invstd, invstd)), inv_n);
    const eb::Bounded mean_g = eb::Mul(sum_g, inv_n), mean_dot_hat = eb::Mul(dot_hat, inv_n);
    for (size_t i = 0; i < at.size(); ++i) {
      if (!training) {
        r.grad_input.x[at[i]] = Union(eb::Mul(gs[i], alpha), eb::Mul(eb::Mul(gs[i], invstd), w));
        continue;
      }
      // (g - mean(g) - (x - mean) * k) * invstd * w, or
      // (g - mean(g) - x_hat * mean(g * x_hat)) * invstd * w.
      const eb::Bounded a = eb::Mul(eb::Sub(eb::Sub(gs[i], mean_g), eb::Mul(d[i], k)), alpha);
      const eb::Bounded b = eb::Mul(eb::Sub(eb::Sub(gs[i], mean_g), eb::Mul(xhat[i], mean_dot_hat)), alpha);
      r.grad_input.x[at[i]] = Union(a, b);
    }
  }
  return r;
}

}  // namespace lockstep
