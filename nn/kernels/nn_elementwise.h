// Per-element arithmetic of the nn layers and optimizers, shared by the CPU
// and CUDA kernels so both give bit-identical results (both are compiled
// without floating-point contraction).
//
// Terms: `p` a parameter, `g` its gradient, `buf` SGD's momentum buffer, `m`
// and `v` Adam's first and second moments. The update rules follow PyTorch
// 1.13's single-tensor implementations (torch/optim/sgd.py, adam.py,
// adamw.py) operation by operation, in f32.
#ifndef LOCKSTEP_NN_KERNELS_NN_ELEMENTWISE_H_
#define LOCKSTEP_NN_KERNELS_NN_ELEMENTWISE_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace lockstep {
namespace nn_elementwise {

// Dropout's keep decision for element `index` of call `offset` of a layer
// seeded with `seed`: a counter-based hash (splitmix64), so any element can be
// decided independently on any device and thread.
LOCKSTEP_HOST_DEVICE inline bool DropoutKeep(uint64_t seed, uint64_t offset, uint64_t index,
                                             uint32_t keep_threshold24) {
  uint64_t x = seed + 0x9E3779B97F4A7C15ull * (offset + 1) + index * 0xD1B54A32D192ED03ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x >> 40) < keep_threshold24;
}

// Scalars are passed by value: a reference would let the compiler assume the
// float arrays alias them and keep reloading (no SIMD). Boolean choices are a
// Flags type: the runtime structs below on CUDA (uniform branches are free
// there), compile-time constants (StaticFlags) in the CPU loops so that every
// branch disappears and the loops vectorize. One body serves both.
struct SgdParams {
  float lr;
  float momentum;
  float one_minus_dampening;
  float weight_decay;
};

struct SgdFlags {
  bool decay;     // weight_decay != 0
  bool momentum;  // momentum != 0
  bool nesterov;
  bool maximize;    // ascend: use -g
  bool first_step;  // the momentum buffer is created from this step's gradient
};

template <typename Flags>
LOCKSTEP_HOST_DEVICE inline void SgdUpdate(SgdParams s, Flags f, float& p, float g, float& buf) {
  float d = f.maximize ? -g : g;
  if (f.decay) d = d + s.weight_decay * p;
  if (f.momentum) {
    buf = f.first_step ? d : buf * s.momentum + s.one_minus_dampening * d;
    d = f.nesterov ? d + s.momentum * buf : buf;
  }
  p = p + (-s.lr) * d;
}

struct AdamParams {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float weight_decay;  // Adam: added to the gradient (L2)
  float decay_factor;  // AdamW: 1 - lr * weight_decay, applied to p first
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
};

struct AdamFlags {
  bool decoupled;  // AdamW: p *= decay_factor
  bool decay;      // Adam with weight_decay != 0: g += weight_decay * p
  bool amsgrad;
  bool maximize;  // ascend: use -g
};

template <typename Flags>
LOCKSTEP_HOST_DEVICE inline void AdamUpdate(AdamParams a, Flags f, float& p, float g, float& m, float& v,
                                            float& v_max) {
  if (f.maximize) g = -g;
  if (f.decoupled) {
    p = p * a.decay_factor;
  } else if (f.decay) {
    g = g + a.weight_decay * p;
  }
  m = m * a.beta1 + a.one_minus_beta1 * g;
  v = v * a.beta2 + a.one_minus_beta2 * g * g;
  float second = v;
  if (f.amsgrad) {
    v_max = v_max > v || v_max != v_max ? v_max : v;  // torch.maximum propagates NaN
    second = v_max;
  }
  const float denom = sqrtf(second) / a.bias_correction2_sqrt + a.eps;
  p = p + a.neg_step_size * (m / denom);
}

// Compile-time flags with the member names of SgdFlags / AdamFlags.
template <bool kDecay, bool kMomentum, bool kNesterov, bool kMaximize, bool kFirst>
struct StaticSgdFlags {
  static constexpr bool decay = kDecay, momentum = kMomentum, nesterov = kNesterov, maximize = kMaximize,
                        first_step = kFirst;
};

template <bool kDecoupled, bool kDecay, bool kAmsgrad, bool kMaximize>
struct StaticAdamFlags {
  static constexpr bool decoupled = kDecoupled, decay = kDecay, amsgrad = kAmsgrad, maximize = kMaximize;
};

// Calls fn(std::integral_constant<bool, b0>{}, ...) for runtime bools, so a
// loop can be instantiated once per combination.
template <bool... kBits, typename Fn>
void WithBools(Fn&& fn) {
  fn(std::integral_constant<bool, kBits>{}...);
}
template <bool... kBits, typename Fn, typename... Rest>
void WithBools(Fn&& fn, bool b, Rest... rest) {
  if (b) {
    WithBools<kBits..., true>(fn, rest...);
  } else {
    WithBools<kBits..., false>(fn, rest...);
  }
}

}  // namespace nn_elementwise
}  // namespace lockstep

#endif  // LOCKSTEP_NN_KERNELS_NN_ELEMENTWISE_H_
