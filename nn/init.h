// Parameter initialization that reproduces PyTorch 1.13's CPU results bit for
// bit, given the same seed:
//
//   Mt19937 gen(0);                                   // torch.manual_seed(0)
//   LOCKSTEP_RETURN_IF_ERROR(UniformFill(w, -0.1, 0.1, gen));   // w.uniform_(-0.1, 0.1)
//   const double bound = KaimingUniformBound(fan_in, std::sqrt(5.0));
//
// torch's uniform_ on a float tensor draws one 32-bit output per element,
// keeps its low 24 bits as x in [0, 1) and returns fma(x, to - from, from) in
// f32 (the AVX2 build contracts the expression; this file does it with fmaf
// everywhere). Drawing order is the element order, so a module constructed
// with the same generator state as its PyTorch twin gets the same weights.
#ifndef LOCKSTEP_NN_INIT_H_
#define LOCKSTEP_NN_INIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/mt19937.h"
#include "core/tensor.h"

namespace lockstep {

// t.uniform_(from, to) for an f32 tensor on the CPU; other devices get a host
// fill and a copy (the values are the same). from <= to, both finite.
absl::Status UniformFill(const Tensor& t, double from, double to, Mt19937& gen);

// The bound of nn.init.kaiming_uniform_(mode="fan_in",
// nonlinearity="leaky_relu", a): sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in),
// computed in double in PyTorch's order. 0 when fan_in is 0.
double KaimingUniformBound(int64_t fan_in, double a);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_INIT_H_
